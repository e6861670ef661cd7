"""The credit layer: reference graph, step annotations, base estimators and ProAS shaping.

Pure functions over arrays plus the graph; imports nothing from envs, policies or the trainer.
"""
