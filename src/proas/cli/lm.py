"""``proas lm``: the commands around the ``lm`` policy's Hugging Face models (docs/lm.md):
export a run's model (``export_hf``), train a tokenizer on an env's text (``env_corpus``), write
a from-scratch model, fine-tune a model directory on (prompt, response) rows (``proas.lm.sft_rows``).

The lm itself (policy, decoding, tools, options) is the package ``proas.lm``, on the policies'
floor below the trainer. These commands stand on the top floor because their work is the
trainer's and the baselines': ``export`` reads a run's checkpoint and config, ``tokenizer``
builds a training config and walks the oracle over its tasks as SFT does."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from proas.errors import ProasError
from proas.ranges import integer, number, seed


def register(sub) -> None:
    lm = sub.add_parser(
        "lm",
        help="lm policy tools: export a run's model, train an env tokenizer, make a from-scratch model, "
             "fine-tune one on (prompt, response) rows",
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

    s = lsub.add_parser("sft-rows", help="fine-tune a model directory on (prompt, response) rows "
                                         "(proas verl sft-data), loss on the responses only",
                        description="Supervised fine-tuning of a Hugging Face model directory on (prompt, "
                                    "response) rows (.jsonl or .parquet, as proas verl sft-data writes them): each "
                                    "prompt as the user message of the tokenizer's chat template, as verl-agent's "
                                    "rollout shows it, the loss on the response and end-of-turn tokens only. Whole "
                                    "tasks are held out for a validation loss after every epoch; the best epoch is "
                                    "saved, with a greedy generation check on held-out rows (docs/verl.md).")
    s.add_argument("--data", required=True, metavar="FILE", help="the rows (sft.jsonl or sft.parquet)")
    s.add_argument("--init-from", required=True, metavar="DIR", help="the model directory to start from "
                   "(proas lm new-model, proas lm export)")
    s.add_argument("--out", required=True, metavar="DIR", help="the directory to write (new or empty)")
    s.add_argument("--epochs", type=integer("[1, 10000]"), default=3, help="passes over the rows (default 3)")
    s.add_argument("--lr", type=number("(0, 1]"), default=1e-3, metavar="RATE", help="AdamW's peak rate (default 1e-3)")
    s.add_argument("--batch-size", type=integer("[1, 65536]"), default=32, help="rows a step (default 32)")
    s.add_argument("--val-fraction", type=number("[0, 1)"), default=0.05, metavar="FRACTION",
                   help="share of the tasks held out for the validation loss (default 0.05)")
    s.add_argument("--max-rows", type=integer("[1, INT32]"), default=None, help="use only the first N rows")
    s.add_argument("--max-prompt-length", type=integer("[1, 2**20]"), default=2048,
                   help="the RL run's data.max_prompt_length: longer prompts are cut on the left (default 2048)")
    s.add_argument("--max-response-length", type=integer("[1, 2**20]"), default=64,
                   help="the RL run's data.max_response_length: a longer response is an error (default 64)")
    s.add_argument("--check-rows", type=integer("[0, INT32]"), default=64,
                   help="held-out rows the generation check answers greedily (default 64; 0: none)")
    s.add_argument("--seed", type=seed(), default=0, help="seeds the held-out tasks and the row order (default 0)")
    s.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"), help="default: a GPU if there is one")
    s.set_defaults(func=_sft_rows)


def _export(args) -> int:
    out = export_hf(args.target, args.out)
    print(f"exported: {out}  (policy.lm.init_from={out})")
    return 0


def export_hf(target: str | Path, out: str | Path) -> Path:
    """Write the lm policy of run/checkpoint ``target`` to ``out`` as a Hugging Face model
    directory (model weights and config, tokenizer with its chat template).

    A checkpoint of a whole model is already one (docs/lm.md): the files its ``checksums.json``
    covers (proas's own state aside) are copied, each hashed again as it is copied and refused
    unless it matches; nothing else in the directory (a file planted beside them, a link) is.
    A LoRA checkpoint holds only the adapters, and one from before Hugging Face checkpoints holds
    ``state.pt``: those are loaded, LoRA merged, and saved. Either way ``out`` (new or empty,
    checked before anything is read) is written whole or not at all (``atomic_dir``)."""
    from proas.fileio import atomic_dir, check_output_dir
    from proas.policies.base import HF_FILES, POLICY_FILES
    from proas.train import checkpoint as ckpt
    from proas.train.config import config_from_yaml
    from proas.train.warm_start import lm_from_run

    # the files of a checkpoint directory that are proas's own, not the Hugging Face model's
    proas_files = {ckpt.STATE_FILE, ckpt.STATE_JSON, ckpt.GRAPH_FILE, ckpt.CHECKSUMS_FILE, "meta.json"}
    check_output_dir(out)
    directory = ckpt.find_checkpoint(target)  # verified
    _refuse_linked_dirs(target, directory)
    plain = ckpt.load_plain_state(directory)
    cfg = config_from_yaml(str(plain.get("config", "")), where=f"{directory / ckpt.STATE_FILE} (config)")
    if cfg.policy.kind != "lm":
        raise ProasError(f"{target}: {directory} holds a {cfg.policy.kind!r} policy, not 'lm'")
    if plain.get(POLICY_FILES) == HF_FILES and (directory / "config.json").is_file():
        # plain names only (``checksummed_files``): a copy never lands outside ``out``
        sums = {name: digest for name, digest in ckpt.checksummed_files(directory).items()
                if name not in proas_files}
        if "config.json" not in sums:
            raise ProasError(f"{directory}: its {ckpt.CHECKSUMS_FILE} does not cover config.json; not a checkpoint "
                             "of a whole model")
        with atomic_dir(out) as tmp:
            for name, digest in sorted(sums.items()):
                _copy_verified(directory / name, tmp / name, digest)
        return Path(out)
    model, tokenizer = lm_from_run(directory)
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    return Path(out)


def _refuse_linked_dirs(target: str | Path, directory: Path) -> None:
    """A one-line ``ProasError`` when the checkpoint ``find_checkpoint`` chose inside run
    ``target`` is reached through a symbolic link (``best/``, ``checkpoints/``, ``step_N/``): a
    crafted run directory must not make the export copy a directory from elsewhere. ``target``
    itself may be a link; it is the user's choice."""
    base = Path(target)
    if base.is_file():  # a state.pt named: its checkpoint is its folder
        base = base.parent
    current = base
    for part in directory.relative_to(base).parts:
        current = current / part
        if current.is_symlink():
            raise ProasError(f"{current}: is a symbolic link; proas lm export copies a checkpoint inside the run "
                             "directory only, never through a link (name the checkpoint itself to export it)")


def _copy_verified(src: Path, dst: Path, digest: str) -> None:
    """Copy regular file ``src`` (not through a link) to the new file ``dst``, hashing what is
    read; a copy whose sha256 is not ``digest`` (the file changed since it was verified) is a
    ``ProasError``."""
    import hashlib

    from proas.fileio import open_regular

    h = hashlib.sha256()
    with open_regular(src) as fin, open(dst, "xb") as fout:
        for chunk in iter(lambda: fin.read(1 << 20), b""):
            h.update(chunk)
            fout.write(chunk)
    if h.hexdigest() != digest:
        raise ProasError(f"{src}: changed since it was verified (its sha256 no longer matches); nothing was exported")


def env_corpus(cfg, max_tasks: int | None = None) -> Iterator[str]:
    """The text of ``cfg``'s env on its training tasks (those an RL or SFT run of ``cfg`` sees):
    for each oracle step, the prompt the ``lm`` policy gets and the response of each candidate
    action; plus the marker of a cut observation. Only training tasks, never validation ones."""
    from proas.baselines.common import env_name
    from proas.baselines.sft import oracle_examples, sft_task_ids
    from proas.envs import make_factory
    from proas.lm.prompt import build_prompt, score_response

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
    from proas.lm.tools import build_env_tokenizer

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


def _sft_rows(args) -> int:
    from proas.lm.sft_rows import RowsSFTOptions, train_on_rows

    opts = RowsSFTOptions(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, val_fraction=args.val_fraction,
                          max_rows=args.max_rows, max_prompt_length=args.max_prompt_length,
                          max_response_length=args.max_response_length, check_rows=args.check_rows, seed=args.seed,
                          device=args.device)
    train_on_rows(args.data, args.init_from, args.out, opts, log=lambda line: print(line, flush=True))
    return 0


def _new_model(args) -> int:
    from proas.lm.tools import new_model_dir

    model = new_model_dir(args.tokenizer, args.out, args.size, seed=args.seed, max_positions=args.max_positions,
                          num_hidden_layers=args.layers, hidden_size=args.hidden_size,
                          num_attention_heads=args.heads)
    n = sum(p.numel() for p in model.parameters())
    print(f"model: {n / 1e6:.2f}M parameters, {args.out}  (policy.lm.model_path={args.out})")
    return 0
