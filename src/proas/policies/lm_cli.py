"""``proas lm``: tools around the ``lm`` policy's Hugging Face models (docs/training.md)."""

from __future__ import annotations


def register(sub) -> None:
    lm = sub.add_parser("lm", help="lm policy tools: export a run's model as a Hugging Face directory, ...",
                        description="Tools around the lm policy's Hugging Face models.")
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


def _export(args) -> int:
    from proas.policies.warm_start import export_hf

    out = export_hf(args.target, args.out)
    print(f"exported: {out}  (policy.lm.init_from={out})")
    return 0
