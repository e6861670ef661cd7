"""``proas lm``: tools around the ``lm`` policy's Hugging Face models (docs/training.md).

A front end, on the floor above the trainer: ``export`` reads a run, ``tokenizer`` a config."""

from __future__ import annotations


def register(sub) -> None:
    lm = sub.add_parser(
        "lm",
        help="lm policy tools: export a run's model, train an env tokenizer, make a from-scratch model",
        description="Tools around the lm policy's Hugging Face models.",
    )
    lsub = lm.add_subparsers(dest="lm_command", metavar="SUBCOMMAND")
    lsub.required = True
    e = lsub.add_parser("export", help="write the lm of a run (an SFT run's best checkpoint) as a Hugging Face "
                                       "model directory",
                        description="Write the lm policy of a run directory (best checkpoint, else latest), a "
                                    "checkpoint directory or a state.pt as a Hugging Face model directory: "
                                    "weights (LoRA merged), config, tokenizer with its chat template. Load it "
                                    "with policy.lm.model_path=OUT or policy.lm.init_from=OUT.")
    e.add_argument("target", metavar="RUN_DIR|CHECKPOINT")
    e.add_argument("out", metavar="OUT_DIR", help="the directory to write (must be new or empty)")
    e.set_defaults(func=_export)

    t = lsub.add_parser("tokenizer", help="train a byte-level BPE tokenizer on an env's own training text",
                        description="Train a byte-level BPE tokenizer (with the chat template) on the text the lm "
                                    "policy sees while the oracle walks the env's training tasks: prompts and the "
                                    "responses of the candidate actions. Saved as a Hugging Face tokenizer.")
    t.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides of `proas train` "
                   "(env.options..., env.fixed_train_set.path=..., policy.lm.history_length=...)")
    t.add_argument("--env", default=None, help="the env (shorthand for env.name=...)")
    t.add_argument("--vocab", type=int, default=4096, help="vocabulary size (default 4096)")
    t.add_argument("--max-tasks", type=int, default=None, help="use at most N training tasks, evenly spaced")
    t.add_argument("--span", choices=("line", "word"), default="line", help="merges may span words within a line "
                   "(default: short prompts) or stay within words")
    t.add_argument("--out", required=True, metavar="DIR", help="the directory to write (new or empty)")
    t.set_defaults(func=_tokenizer)

    m = lsub.add_parser("new-model", help="write a randomly initialised model directory with a given tokenizer",
                        description="Write a from-scratch causal LM (Qwen2 architecture, random weights, the "
                                    "tokenizer's vocabulary) with the tokenizer, for policy.lm.model_path=OUT.")
    m.add_argument("--tokenizer", required=True, metavar="DIR", help="a tokenizer directory (proas lm tokenizer)")
    m.add_argument("--size", default="small", help="tiny | small | base | large (default small)")
    m.add_argument("--layers", type=int, default=None, help="override the number of layers")
    m.add_argument("--hidden-size", type=int, default=None, help="override the hidden size")
    m.add_argument("--heads", type=int, default=None, help="override the attention heads")
    m.add_argument("--max-positions", type=int, default=8192, help="longest sequence (default 8192)")
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--out", required=True, metavar="DIR", help="the directory to write (new or empty)")
    m.set_defaults(func=_new_model)


def _export(args) -> int:
    from proas.train.warm_start import export_hf

    out = export_hf(args.target, args.out)
    print(f"exported: {out}  (policy.lm.init_from={out})")
    return 0


def _tokenizer(args) -> int:
    from proas.policies.lm_tools import build_env_tokenizer
    from proas.train.config import build_config

    cfg = build_config(([f"env.name={args.env}"] if args.env else []) + list(args.overrides))
    tok = build_env_tokenizer(cfg, args.vocab, args.out, max_tasks=args.max_tasks, span=args.span)
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
