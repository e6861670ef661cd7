"""Policies behind one interface (``base.Policy``): the fast CPU ``scorer`` and the Hugging Face ``lm``.

``scorer`` is imported here; ``lm`` (which imports transformers) only when asked for.
"""

from proas.policies.base import Context, Decision, Policy, TokenStats, task_text
from proas.policies.scorer import ScorerPolicy

__all__ = ["Context", "Decision", "Policy", "ScorerPolicy", "TokenStats", "task_text"]
