"""proas: progress-aware advantage shaping (ProAS) for multi-turn agentic reinforcement learning."""

from proas.types import Step, Trajectory

__version__ = "0.1.0"
__all__ = ["Step", "Trajectory", "__version__"]
