"""The trainer: config, batched group rollout, losses, the RL loop, checkpoints, validation, eval.

Entry points: ``proas train`` / ``proas eval`` (``proas.train.cli``), ``proas.train.loop.train``
for a whole run, ``proas.train.loop.Trainer`` for step-by-step control. See docs/training.md.
"""
