"""The ``lm`` policy: a Hugging Face causal LM prompted in verl-agent's style.

Each step the model gets one user message (rendered with the tokenizer's chat template): the
task, the last ``history_length`` observation/action pairs, the current observation, the
admissible actions where the env has them, and the instruction to think inside
``<think>...</think>`` and answer inside ``<action>...</action>``. The answer is projected to an
action as verl-agent does: the text between the first ``<action>`` and ``</action>``; a response
without both tag pairs is *malformed*, and the trainer records the step as an error (the env
still receives the text, as in verl-agent, and usually rejects it).

Models come from a local directory (``model_path``; nothing is downloaded) or, for tests and
timing, from a named architecture with random weights (``model_config``: ``tiny``,
``qwen2.5-1.5b``, ``qwen2.5-7b``) and a small byte-level BPE tokenizer built on the spot.
Log-probs are per response token at temperature 1. LoRA via peft is optional. Training is mixed
precision by default, as verl's and TRL's: fp32 weights, forward passes in bf16 under
``torch.autocast`` on a GPU (``resolve_precision``), AdamW with weight decay and a warmup and
schedule (``make_optimizer``, ``make_scheduler``). Checkpoints are Hugging Face directories
(``save_pretrained``, ``load_pretrained``); docs/lm.md gives the decisions.
Generation runs through Hugging Face ``generate`` (``decode="hf"``) or a static-cache decoder
with CUDA graphs (``decode="static"``, ``proas.lm.decode``) that gives the same outputs.

``mode="score"`` (GLAM, Carta et al. 2023) does not generate: it chooses among the env's
candidate actions (admissible plus invalid candidates, as the ``scorer`` policy does). Each
candidate's response is the one SFT teaches, ``<think>LM_THOUGHT</think><action>A</action>``
plus the end-of-turn token; its score is the summed log-probability of the response tokens after
the prompt (``score_norm="mean"``: their mean), and the policy is ``softmax(score / temperature)``
over the candidates. The leading
tokens shared by every candidate's response have the same log-probability for all of them and
cancel in the softmax, so they join the prompt: the prompt is encoded once per decision and the
candidates' distinct tokens are scored after it (``score_impl``: on its KV cache, expanded over
the candidates, or packed after it in one sequence with a mask that keeps the candidates apart).
For the losses a step is a one-"token" response, the chosen candidate, as
for the ``scorer``.

The ``lm``'s one home: the policy, its decoding, its from-scratch tools and its options, one module
per part. This face imports nothing, so that ``options`` loads without torch (the trainer's config
checks its values before anything heavy loads); import each name from its module:

- ``policy``: ``LMPolicy``, its construction (``from_config``) and the switch between modes;
- ``prompt``: the prompt, the answer format and the prompt's token budget (``PromptMixin``);
- ``generation``: generate mode, decoding and the rollout weights (``GenerationMixin``);
- ``decode``: the static-cache decoder of ``decode="static"`` (``StaticDecoder``);
- ``scoring``: score mode, the candidates' scores and softmax (``ScoringMixin``);
- ``optim``: precision, optimiser, schedule, reference policy and the losses' token log-probs
  (``OptimisationMixin``);
- ``checkpoints``: Hugging Face checkpoint directories (``CheckpointMixin``);
- ``model``: architectures, tokenizers, precision, and transformers' version differences;
- ``tools``: from-scratch models: a tokenizer trained on an env's text, a random-weight model
  directory that carries it;
- ``options``: the values of the enumerated ``policy.lm`` options, torch-free.

The package stands on the policies' floor, below the trainer that trains it and the baselines
that teach it. Its commands, ``proas lm export | tokenizer | new-model``, and the Hugging Face
export of a run (``export_hf``) read runs and configs, the trainer's and the baselines' work, so
they stand on the top floor, in ``proas.cli.lm`` (docs/lm.md).
"""
