"""Load and cost of `proas serve`, on 127.0.0.1 only.

    python benchmarks/serve_react.py [--clients 200] [--tasks 16] [--run RUN_DIR] [--url URL]
    python benchmarks/serve_react.py --quick      # 20 clients, 2 tasks: what CI runs

(``serve_load.py`` loads the server with slow uploaders mixed in.)

1. Load: starts `proas serve` in a child process (the untrained household scorer, or ``--run``),
   or uses the server already running at ``--url`` (a loopback address), and fires ``--clients``
   chat-completion requests at once, one connection each (the first turn of a household
   validation task, greedy). Prints how many were answered (HTTP 200), reset (the connection
   was reset or closed without an answer), or errors (another status, a timeout, a refusal), the
   latency percentiles of the answered ones (p50/p90/p99, from the common start), and for
   reference the time the policy alone takes for the same number of requests, one after another
   in-process: the server answers one request at a time, so that is the floor of the last answer.
2. Cost of the HTTP path (``--tasks`` > 0): `proas react` against the server versus the same
   policy played in-process on the same household validation tasks (greedy, so both play the
   same episodes): requests per second over HTTP, env steps per second in-process, their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import torch

RESETS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, asyncio.IncompleteReadError)


async def _one(host: str, port: int, body: bytes, start: float, timeout: float) -> tuple[str, float]:
    """``(outcome, seconds from start)``: outcome is ``answered``, ``reset`` or ``error:<what>``."""
    streams = []

    async def exchange() -> str:
        reader, writer = await asyncio.open_connection(host, port)
        streams.append(writer)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (host.encode(), port, len(body), body))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        payload = await reader.readexactly(int(m.group(1))) if m else await reader.read()
        if status != 200:
            return f"error:HTTP {status}"
        json.loads(payload)["choices"][0]["message"]["content"]  # a whole chat completion
        return "answered"

    try:
        outcome = await asyncio.wait_for(exchange(), timeout)
    except RESETS:
        outcome = "reset"
    except asyncio.TimeoutError:
        outcome = "error:timeout"
    except (OSError, ValueError, KeyError) as exc:
        outcome = f"error:{type(exc).__name__}"
    finally:
        for w in streams:
            w.close()
    return outcome, time.perf_counter() - start


async def _burst(url: str, body: bytes, clients: int, timeout: float):
    parts = urlsplit(url)
    host, port = parts.hostname, parts.port
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit(f"--url {url}: the load test runs against a loopback address only")
    start = time.perf_counter()
    return await asyncio.gather(*(_one(host, port, body, start, timeout) for _ in range(clients)))


def load_test(url: str, body: bytes, clients: int, timeout: float = 60.0) -> dict:
    t0 = time.perf_counter()
    results = asyncio.run(_burst(url, body, clients, timeout))
    wall = time.perf_counter() - t0
    outcomes = [o for o, _ in results]
    lat = np.array([t for o, t in results if o == "answered"])
    errors = {o[6:]: outcomes.count(o) for o in sorted(set(outcomes)) if o.startswith("error:")}
    out = {"clients": clients, "answered": outcomes.count("answered"), "reset": outcomes.count("reset"),
           "error": sum(errors.values()), "errors": errors, "wall_s": wall}
    if lat.size:
        out.update({f"p{q}_ms": float(np.percentile(lat, q) * 1000) for q in (50, 90, 99)})
    return out


def _start_server(run: Path, extra: list[str] | None = None) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in [str(Path(__file__).resolve().parents[1] / "src"), os.environ.get("PYTHONPATH", "")] if p)}
    proc = subprocess.Popen([sys.executable, "-m", "proas", "serve", str(run), "--port", "0", *(extra or [])],
                            stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    m = re.search(r"at (http://\S+/v1)", line)
    if not m:
        proc.kill()
        raise SystemExit(f"proas serve did not start: {line!r}")
    return proc, m.group(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=200, help="concurrent requests of the load test (default 200)")
    ap.add_argument("--tasks", type=int, default=16, help="household tasks of the react-vs-in-process part (0: skip)")
    ap.add_argument("--run", default=None, help="the run directory to serve (default: the untrained household scorer)")
    ap.add_argument("--url", default=None, help="fire at this running server (http://127.0.0.1:PORT/v1) instead")
    ap.add_argument("--quick", action="store_true", help="20 clients, 2 tasks: a smoke run for CI")
    args = ap.parse_args()
    if args.quick:
        args.clients, args.tasks = 20, 2
    if not 1 <= args.clients <= 1000:
        raise SystemExit("--clients must be in 1..1000")
    torch.set_num_threads(1)
    from proas.baselines.common import load_policy, val_result
    from proas.baselines.direct import direct_eval
    from proas.baselines.react import ChatClient, run_react
    from proas.baselines.react_format import format_observation, system_prompt
    from proas.envs.household import make_household_env, task_ids
    from proas.policies.base import Context, task_text
    from proas.train.config import build_config

    env = make_household_env()
    ids = task_ids("valid")
    obs, info = env.reset(ids[0])
    task = task_text(obs, info)
    body = json.dumps({"model": "proas", "temperature": 0.0, "messages": [
        {"role": "system", "content": system_prompt("household")},
        {"role": "user", "content": format_observation(obs, info["admissible"], task)}]}).encode()

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.run) if args.run else Path(tmp) / "direct"
        if not args.run and not args.url:
            direct_eval(build_config(["env=household"]), tasks=1, save=run)
        proc, url = (None, args.url) if args.url else _start_server(run)
        try:
            res = load_test(url, body, args.clients)
            trajs = None
            if args.tasks > 0:
                model = "proas"
                client = ChatClient(url, model, retries=0)
                t0 = time.perf_counter()
                trajs = run_react(client, env, ids[: args.tasks], env_name="household", max_steps=50, temperature=0.0)
                http_s = time.perf_counter() - t0
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=30)

        print(f"load: {res['clients']} concurrent requests at {url}: answered {res['answered']}, "
              f"reset {res['reset']}, error {res['error']}" + (f" {res['errors']}" if res["errors"] else ""))
        if "p50_ms" in res:
            print(f"latency of the answered (ms): p50 {res['p50_ms']:.0f}, p90 {res['p90_ms']:.0f}, "
                  f"p99 {res['p99_ms']:.0f}; all done in {res['wall_s']:.2f} s")
        if args.url and not args.run:
            return
        policy = load_policy(run)[0]
        ctx = Context("household", task, obs, [], info["admissible"], [], 0)
        t0 = time.perf_counter()
        for _ in range(args.clients):
            policy.act([ctx], np.random.default_rng(0), temperature=0.0)
        alone = time.perf_counter() - t0
        print(f"reference: the policy alone, {args.clients} requests one after another in-process: {alone:.2f} s "
              f"({1000 * alone / args.clients:.1f} ms each)")
        if trajs is None:
            return
        t0 = time.perf_counter()
        steps = 0
        for tid in ids[: args.tasks]:
            obs, info = env.reset(tid)
            task, hist = task_text(obs, info), []
            for t in range(50):
                ctx = Context("household", task, obs, list(hist), info["admissible"], [], t)
                a = policy.act([ctx], np.random.default_rng(0), temperature=0.0)[0].action
                hist.append((obs, a))
                obs, _, terminated, truncated, info = env.step(a)
                done = terminated or truncated
                steps += 1
                if done:
                    break
        local_s = time.perf_counter() - t0
    res = val_result(trajs)
    print(f"react: tasks {args.tasks}, SR {100 * res.sr:.1f}%, {client.calls} requests")
    print(f"react over HTTP:  {client.calls / http_s:8.1f} requests/s ({http_s:.2f} s)")
    print(f"in-process:       {steps / local_s:8.1f} steps/s    ({local_s:.2f} s, {steps} steps)")
    print(f"HTTP / in-process time ratio: {http_s / local_s:.2f}")


if __name__ == "__main__":
    main()
