"""``proas lm``: tools around the ``lm`` policy's Hugging Face models (docs/training.md).

A front end, on the floor above the trainer: ``export`` reads a run, ``tokenizer`` a config."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from proas.ranges import integer, seed


def register(sub) -> None:
    lm = sub.add_parser(
        "lm",
        help="lm policy tools: export a run's model, train an env tokenizer, make a from-scratch model",
        description="Tools around the lm policy's Hugging Face models.",
    )
    lsub = lm.add_subparsers(dest="lm_command", metavar="COMMAND")
    lsub.required = True
    e = lsub.add_parser("export", help="write the lm of a run (an SFT run's best checkpoint) as a Hugging Face "
                                       "model directory",
                        description="Write the lm policy of a run directory (best checkpoint, else latest), a "
                                    "checkpoint directory or a state.pt as a Hugging Face model directory: "
                                    "weights, config, tokenizer with its chat template. A checkpoint is one "
                                    "already (docs/lm.md): its files are copied, once verified; LoRA adapters "
                                    "are merged into the base. Load it with policy.lm.model_path=OUT or "
                                    "policy.lm.init_from=OUT.")
    e.add_argument("target", metavar="RUN_DIR|CHECKPOINT", help="the run (its best checkpoint) or checkpoint to export")
    e.add_argument("out", metavar="DIR", help="the directory to write (must be new or empty)")
    e.set_defaults(func=_export)

    t = lsub.add_parser("tokenizer", help="train a byte-level BPE tokenizer on an env's own training text",
                        description="Train a byte-level BPE tokenizer (with the chat template) on the text the lm "
                                    "policy sees while the oracle walks the env's training tasks: prompts and the "
                                    "responses of the candidate actions. Saved as a Hugging Face tokenizer.")
    t.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides of `proas train` "
                   "(env.options..., env.fixed_train_set.path=..., policy.lm.history_length=...)")
    t.add_argument("--env", default=None, metavar="ENV", help="the env (shorthand for env.name=...)")
    t.add_argument("--vocab", type=integer("[300, 2**20]"), default=4096, help="vocabulary size (default 4096)")
    t.add_argument("--max-tasks", type=integer("[1, INT32]"),
                   default=None, help="use at most N training tasks, evenly spaced")
    t.add_argument("--span", choices=("line", "word"), default="line", help="merges may span words within a line "
                   "(default: short prompts) or stay within words")
    t.add_argument("--out", required=True, metavar="DIR", help="the directory to write (new or empty)")
    t.set_defaults(func=_tokenizer)

    m = lsub.add_parser("new-model", help="write a randomly initialised model directory with a given tokenizer",
                        description="Write a from-scratch causal LM (Qwen2 architecture, random weights, the "
                                    "tokenizer's vocabulary) with the tokenizer, for policy.lm.model_path=OUT.")
    m.add_argument("--tokenizer", required=True, metavar="DIR", help="a tokenizer directory (proas lm tokenizer)")
    m.add_argument("--size", default="small", metavar="SIZE", help="tiny | small | base | large (default small)")
    m.add_argument("--layers", type=integer("[1, 1024]"), default=None, help="override the number of layers")
    m.add_argument("--hidden-size", type=integer("[1, 2**16]"), default=None, help="override the hidden size")
    m.add_argument("--heads", type=integer("[1, 1024]"), default=None, help="override the attention heads")
    m.add_argument("--max-positions", type=integer("[1, 2**20]"), default=8192, help="longest sequence (default 8192)")
    m.add_argument("--seed", type=seed(), default=0, help="seed of the initial weights")
    m.add_argument("--out", required=True, metavar="DIR", help="the directory to write (new or empty)")
    m.set_defaults(func=_new_model)


def _export(args) -> int:
    from proas.train.warm_start import export_hf

    out = export_hf(args.target, args.out)
    print(f"exported: {out}  (policy.lm.init_from={out})")
    return 0


def env_corpus(cfg, max_tasks: int | None = None) -> Iterator[str]:
    """The text of ``cfg``'s env on its training tasks (those an RL or SFT run of ``cfg`` sees):
    for each oracle step, the prompt the ``lm`` policy gets and the response of each candidate
    action; plus the marker of a cut observation. Only training tasks, never validation ones."""
    from proas.baselines.common import env_name
    from proas.baselines.sft import oracle_examples, sft_task_ids
    from proas.envs import make_factory
    from proas.errors import ProasError
    from proas.policies.lm import build_prompt, score_response

    env = make_factory(cfg.env.name, cfg.env.options, config=True)()
    label = env_name(cfg, env)
    ids = sft_task_ids(cfg, env, max_tasks)
    examples, _ = oracle_examples(env, ids, env_label=label, max_steps=int(cfg.env.max_steps or env.max_steps))
    if not examples:
        raise ProasError(f"env {label!r}: the oracle solved none of {len(ids)} training tasks; no text to learn from")
    yield "[... 100 tokens cut ...]"
    for ctx, action in examples:
        yield build_prompt(ctx, cfg.policy.lm.history_length)
        for a in dict.fromkeys(list(ctx.admissible or []) + list(ctx.invalid_candidates) + [action]):
            yield score_response(a)


def env_tokenizer(cfg, vocab_size: int, out: str | Path, max_tasks: int | None = None, span: str = "line"):
    """``proas lm tokenizer``: a BPE trained on ``env_corpus(cfg, max_tasks)``, saved to ``out``."""
    from proas.policies.lm_tools import build_env_tokenizer

    # ``env_corpus`` is a generator: ``build_env_tokenizer`` checks ``out`` and the vocabulary
    # size before it draws the first text, so a bad argument fails before the oracle walk
    meta = {"env": cfg.env.name, "env_options": dict(cfg.env.options), "max_tasks": max_tasks,
            "history_length": cfg.policy.lm.history_length}
    return build_env_tokenizer(env_corpus(cfg, max_tasks), vocab_size, out, span=span, meta=meta)


def _tokenizer(args) -> int:
    from proas.train.config import build_config

    cfg = build_config(([f"env.name={args.env}"] if args.env else []) + list(args.overrides))
    tok = env_tokenizer(cfg, args.vocab, args.out, max_tasks=args.max_tasks, span=args.span)
    print(f"tokenizer: {len(tok)} tokens, {args.out}  (proas lm new-model --tokenizer {args.out} --out DIR)")
    return 0


def _new_model(args) -> int:
    from proas.policies.lm_tools import new_model_dir

    model = new_model_dir(args.tokenizer, args.out, args.size, seed=args.seed, max_positions=args.max_positions,
                          num_hidden_layers=args.layers, hidden_size=args.hidden_size,
                          num_attention_heads=args.heads)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {n / 1e6:.2f}M parameters, {args.out}  (policy.lm.model_path={args.out})")
    return 0
