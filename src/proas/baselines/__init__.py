"""Baselines the paper compares ProAS with: Direct prompting, SFT on oracle trajectories, and a
ReAct agent over any OpenAI-compatible chat endpoint (plus ``proas serve``, which exposes a proas
policy as such an endpoint). See docs/baselines.md.

- ``direct``: the untrained policy on the validation set (``proas direct``);
- ``sft``: supervised fine-tuning on replayed oracle trajectories (``proas sft``);
- ``react_format``: the ReAct chat format shared by the client and the server;
- ``react``: the ReAct agent over HTTP (``proas react``);
- ``serve``: the OpenAI-compatible endpoint over a checkpoint (``proas serve``).
"""
