"""Bridges from proas's credit layer to other trainers (``proas.integrations.verl``).

Each bridge imports its trainer lazily, so ``import proas`` never needs them installed.
"""
