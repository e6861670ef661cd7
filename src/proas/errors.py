"""Errors that the command line turns into one clear line and a non-zero exit."""


class ProasError(Exception):
    """A user-facing error: bad input, a missing or corrupt file, a malformed config."""
