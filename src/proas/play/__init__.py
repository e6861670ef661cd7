"""``proas play`` and ``proas tasks``: play one task of an env in the terminal, list a split's
task ids (``proas.play.cli``). A front end: envs are built by name through ``proas.envs.make``."""
