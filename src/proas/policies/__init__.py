"""Policies behind one interface (``base.Policy``): the fast CPU ``scorer`` here, and the Hugging
Face ``lm`` in its own package, ``proas.lm`` (which imports transformers), on the floor above.
"""

from proas.policies.base import Context, Decision, Policy, TokenStats, task_text
from proas.policies.scorer import ScorerPolicy

__all__ = ["Context", "Decision", "Policy", "ScorerPolicy", "TokenStats", "task_text"]
