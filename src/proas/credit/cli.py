"""`proas credit` and `proas credit-demo` (being written)."""


def register(sub) -> None:
    return None
