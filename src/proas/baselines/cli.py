"""``proas direct``, ``proas sft``, ``proas serve`` and ``proas react`` (docs/baselines.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from proas.fileio import refuse_non_directory
from proas.ranges import SECONDS, integer, number, seed

_OVERRIDES_HELP = "config overrides of `proas train` (env=..., policy=..., env.fixed_val_set.size=...)"


def register(sub) -> None:
    d = sub.add_parser("direct", help="baseline: evaluate the untrained policy on the validation set",
                       description="Direct baseline: the untrained policy of a `proas train` config on its "
                                   "validation set (the figures of step 0 of an RL run).")
    d.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDES_HELP)
    d.add_argument("--tasks", type=integer("[1, INT32]"),
                   default=None, help="number of validation tasks (default: the config's)")
    d.add_argument("--temperature", type=number("[0, F32]"), default=None, help="sampling temperature (default: "
                   "policy.val_temperature)")
    d.add_argument("--seed", type=seed(), default=None, help="validation sampling seed (default: as RL step 0)")
    d.add_argument("--save", metavar="RUN_DIR", help="also save the untrained policy as a run directory "
                   "(for proas eval / serve / probe)")
    d.add_argument("--json", action="store_true", help="print the figures as JSON")
    d.set_defaults(func=_direct)

    s = sub.add_parser("sft", help="baseline: supervised fine-tuning on oracle trajectories",
                       description="SFT baseline: maximise the likelihood of the oracle's actions on the "
                                   "training tasks, validate like RL runs, keep the best checkpoint.")
    s.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDES_HELP)
    s.add_argument("--run-dir", required=True, metavar="DIR", help="the run directory to create")
    s.add_argument("--epochs", type=integer("[1, INT32]"),
                   default=10, help="passes over the oracle trajectories (default 10)")
    s.add_argument("--lr", type=number("[F32_TINY, F32]"), default=None, metavar="RATE",
                   help="learning rate (default: Adam 0.01 for the scorer, policy.lm.lr for the lm)")
    s.add_argument("--batch-size", type=integer("[1, 2**20]"), default=64, help="oracle steps per gradient step")
    s.add_argument("--val-every", type=integer("[1, INT32]"), default=1, help="validate every N epochs")
    s.add_argument("--max-tasks", type=integer("[1, INT32]"), default=None, help="use at most N training tasks")
    s.add_argument("--sequence-loss", type=number("[0, F32]"), default=0.0, metavar="WEIGHT",
                   help="lm only: add WEIGHT x the next-token loss over each whole demonstration (prompt "
                        "and response), as TRL trains when not completion-only (default 0: off)")
    s.set_defaults(func=_sft)

    v = sub.add_parser("serve", help="serve a checkpoint as an OpenAI-compatible chat endpoint (loopback)",
                       description="Serve a proas policy at http://HOST:PORT/v1/chat/completions in the "
                                   "ReAct format of `proas react`. Loopback addresses only.")
    v.add_argument("target", metavar="RUN_DIR|CHECKPOINT", help="the run (its best checkpoint) or checkpoint to serve")
    v.add_argument("--host", default="127.0.0.1", metavar="HOST", help="loopback address to bind (default 127.0.0.1)")
    v.add_argument("--port", type=integer("[0, 65535]"), default=8000, help="port (0 = any free port; default 8000)")
    v.add_argument("--seed", type=seed(), default=0, help="seed of the sampling generator")
    v.add_argument("--model-name", default=None, metavar="NAME",
                   help="the model id to report (default: from the checkpoint)")
    v.add_argument("--max-body", type=integer("[1, INT32]"), default=1 << 20, metavar="BYTES",
                   help="largest request body; a larger one is answered 413 (default 1 MiB)")
    v.add_argument("--read-timeout", type=number(SECONDS), default=10.0, metavar="SECONDS",
                   help="seconds to receive a request body, else 408 (default 10)")
    v.add_argument("--max-queue", type=integer("[0, 2**20]"), default=256, metavar="N",
                   help="requests that may wait for the policy; more are answered 503 (default 256)")
    v.add_argument("--keep-alive", type=number(SECONDS), default=5.0, metavar="SECONDS",
                   help="seconds an idle keep-alive connection stays open (default 5)")
    v.set_defaults(func=_serve)

    r = sub.add_parser("react", help="baseline: a ReAct agent over an OpenAI-compatible chat endpoint",
                       description="Run a ReAct agent (thought + action per turn) against a chat endpoint on "
                                   "the validation set of an env.")
    r.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help=_OVERRIDES_HELP)
    r.add_argument("--base-url", required=True, metavar="URL", help="e.g. http://127.0.0.1:8000/v1")
    r.add_argument("--model", required=True, metavar="NAME", help="model name sent with each request")
    r.add_argument("--tasks", type=integer("[1, INT32]"),
                   default=None, help="number of validation tasks (default: the config's)")
    r.add_argument("--temperature", type=number("[0, F32]"),
                   default=0.0, help="sampling temperature sent with each request "
                   "(default 0.0)")
    r.add_argument("--seed", type=seed(), default=None, help="send a per-request seed derived from this")
    r.add_argument("--retries", type=integer("[0, 16]"),
                   default=4, help="retries per request on connection errors, 429, 5xx")
    r.add_argument("--backoff", type=number("[0, 60]"), default=0.5, metavar="SECONDS",
                   help="first retry delay in seconds (doubles)")
    r.add_argument("--timeout", type=number(SECONDS), default=60.0, metavar="SECONDS", help="seconds per request")
    r.add_argument("--api-key-env", default=None, metavar="VAR", help="send the key in this env variable")
    r.add_argument("--out", default=None, metavar="FILE.jsonl", help="write the trajectories (with replies)")
    r.add_argument("--json", action="store_true", help="print the figures as JSON")
    r.set_defaults(func=_react)


def _print(res, title: str, as_json: bool, extra: dict | None = None) -> None:
    from proas.baselines.common import print_val_table

    if as_json:
        print(json.dumps({**(extra or {}), **res.metrics("")}))
    else:
        print_val_table(res, title)


def _direct(args) -> int:
    # each command checks its config before it imports the trainer (and torch): a typo is
    # reported at once, not after seconds of imports
    from proas.train.config import build_config

    cfg = build_config(args.overrides)
    from proas.baselines.direct import direct_eval

    res, info = direct_eval(cfg, tasks=args.tasks, temperature=args.temperature, seed=args.seed,
                            save=Path(args.save) if args.save else None)
    _print(res, f"Direct ({info['policy']}, untrained): {info['env']} validation, {info['n']} tasks", args.json)
    if args.save and not args.json:
        print(f"untrained policy saved: {args.save}  (proas eval {args.save})")
    return 0


def _sft(args) -> int:
    from rich.console import Console

    from proas.train.config import build_config

    cfg = build_config(args.overrides)
    refuse_non_directory(args.run_dir, "--run-dir")
    from proas.baselines.sft import SFTOptions, train_sft

    console = Console()
    summary = train_sft(cfg, Path(args.run_dir), SFTOptions(epochs=args.epochs, lr=args.lr,
                        batch_size=args.batch_size, val_every=args.val_every, max_tasks=args.max_tasks,
                        sequence_loss=args.sequence_loss),
                        log=console.print)
    best = summary["best_val_sr"]
    console.print(f"[bold green]done[/]: best validation SR {'n/a' if best is None else f'{100 * best:.1f}%'} "
                  f"(epoch {summary['best_val_epoch']}), untrained {100 * (summary['first_val_sr'] or 0):.1f}%\n"
                  f"best checkpoint: {args.run_dir}/best  (proas eval {args.run_dir}; RL from it: "
                  f"proas train ... policy.{cfg.policy.kind}.init_from={args.run_dir})")
    return 0


def _serve(args) -> int:
    from proas.baselines.serve import PolicyServer, ServeLimits, check_loopback, make_server

    check_loopback(args.host)  # before loading anything
    limits = ServeLimits(max_body=args.max_body, read_timeout=args.read_timeout, max_queue=args.max_queue,
                         keep_alive=args.keep_alive)
    server = PolicyServer(args.target, seed=args.seed, model_name=args.model_name)
    httpd = make_server(server, args.host, args.port, limits)
    host, port = httpd.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    print(f"serving {server.model} (step {server.step}) at http://{shown}:{port}/v1  (Ctrl-C stops)", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0


def _react(args) -> int:
    from proas.train.config import build_config

    cfg = build_config(args.overrides)
    from proas.baselines.common import env_name, val_result, validation_ids
    from proas.baselines.react import ChatClient, api_key_from_env, run_react
    from proas.envs import make_factory
    from proas.fileio import atomic_write_jsonl

    env = make_factory(cfg.env.name, cfg.env.options, config=True)()
    ids = validation_ids(cfg, env)
    if args.tasks is not None:
        ids = ids[: args.tasks]
    client = ChatClient(args.base_url, args.model, timeout=args.timeout, retries=args.retries,
                        backoff=args.backoff, api_key=api_key_from_env(args.api_key_env))
    trajs = run_react(client, env, ids, env_name=env_name(cfg, env), max_steps=int(cfg.env.max_steps or env.max_steps),
                      temperature=args.temperature, seed=args.seed, success_reward=cfg.env.success_reward)
    if args.out:
        rows = []
        for t in trajs:
            row = t.to_json()
            row["task_id"] = t.extra["task_id"]
            for s, js in zip(t.steps, row["steps"]):
                js["reply"] = s.extra["reply"]
            rows.append(row)
        atomic_write_jsonl(args.out, rows)
    res = val_result(trajs)
    _print(res, f"ReAct ({args.model} at {args.base_url}): {cfg.env.name} validation, {len(ids)} tasks",
           args.json, {"model": args.model, "requests": client.calls, "retries": client.retried})
    if not args.json:
        print(f"requests: {client.calls} ({client.retried} retried)", file=sys.stderr)
    return 0
