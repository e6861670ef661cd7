"""`proas serve` under load with slow uploaders mixed in, on 127.0.0.1 only.

    python benchmarks/serve_load.py                  # 200 and 1,000 clients, 300 slow uploaders
    python benchmarks/serve_load.py --quick          # 20 and 60 clients, 30 slow uploaders: what CI runs

Starts `proas serve` in a child process (the untrained household scorer, or ``--run``) with its
default limits (``--read-timeout`` 10 s, ``--max-queue`` 256; ``--read-timeout`` here changes the
server's). For each count of clients, twice: once alone (the control) and once with the slow
uploaders, which connect first, send their headers and then one byte of their body a second,
never finishing it; once they are all mid-upload the normal clients fire at once, each a whole
chat-completion request (the first turn of a household validation task, greedy) on a connection
of its own.

Printed per round: the normal requests answered (200), refused busy (503), and anything else
(another status, a reset, no answer within the read timeout); the latency percentiles of the
answered ones from the common start (p50/p90/p99/max) and of the refusals; what became of the
slow uploaders (408 once the read timeout passed, or closed). Then the goals, each ``met`` or
``NOT met``:

- every normal request is answered or refused with 503 within the read timeout;
- none is locked out by the slow ones: with them, at least as many are answered as the queue
  holds (``min(clients, max_queue + 1)``): a slow upload takes no place in it (the control's
  count is printed beside it);
- p99 of the answered under 1 s at 200 clients (the full run; the quick run reports its p99).

Exits 1 when one of the first two goals is not met (the third is a speed figure of the machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ANSWERED, BUSY = "200", "503"


@dataclass
class Round:
    clients: int
    slow: int
    outcomes: list[tuple[str, float]] = field(default_factory=list)  # (status or what, seconds from start)
    slow_outcomes: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def count(self, what: str) -> int:
        return sum(o == what for o, _ in self.outcomes)

    def latencies(self, what: str) -> np.ndarray:
        return np.array([t for o, t in self.outcomes if o == what])


async def _normal(host: str, port: int, body: bytes, start: float, timeout: float) -> tuple[str, float]:
    """One whole request; ``(HTTP status, or reset / timeout / error, seconds from start)``."""
    writer = None

    async def exchange() -> str:
        nonlocal writer
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (host.encode(), port, len(body), body))
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = head.split(b" ", 2)[1].decode()
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        payload = await reader.readexactly(int(m.group(1))) if m else await reader.read()
        if status == ANSWERED:
            json.loads(payload)["choices"][0]["message"]["content"]  # a whole chat completion
        return status

    try:
        outcome = await asyncio.wait_for(exchange(), timeout)
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, asyncio.IncompleteReadError):
        outcome = "reset"
    except asyncio.TimeoutError:
        outcome = "no answer"
    except (OSError, ValueError, KeyError) as exc:
        outcome = type(exc).__name__
    finally:
        if writer is not None:
            writer.close()
    return outcome, time.perf_counter() - start


async def _slow(host: str, port: int, ready: asyncio.Event, started: list, need: int, give_up: float) -> str:
    """A client that sends its headers and then one byte of its body a second: ``408`` when the
    server answers so, ``closed`` when it closes the connection, ``still open`` at ``give_up``."""
    writer = None
    try:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100000\r\n\r\n{" % (host.encode(), port))
        await writer.drain()
        started.append(1)
        if len(started) >= need:
            ready.set()
        answer = asyncio.ensure_future(reader.read(64))
        deadline = time.perf_counter() + give_up
        while time.perf_counter() < deadline:
            done, _ = await asyncio.wait({answer}, timeout=1.0)
            if done:
                data = answer.result()
                return data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else "closed"
            writer.write(b" ")
            await writer.drain()
        answer.cancel()
        return "still open"
    except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
        return "closed"
    except OSError as exc:
        return type(exc).__name__
    finally:
        if writer is not None:
            writer.close()


async def _round(host: str, port: int, body: bytes, clients: int, slow: int, read_timeout: float) -> Round:
    res = Round(clients, slow)
    ready, started = asyncio.Event(), []
    slow_tasks = [asyncio.ensure_future(_slow(host, port, ready, started, slow, read_timeout + 10))
                  for _ in range(slow)]
    if slow:
        try:
            await asyncio.wait_for(ready.wait(), 30)
        except asyncio.TimeoutError:
            raise SystemExit(f"only {len(started)} of {slow} slow uploaders could start") from None
        await asyncio.sleep(1.0)  # each has sent a byte of its body or two
    start = time.perf_counter()
    res.outcomes = list(await asyncio.gather(*(_normal(host, port, body, start, read_timeout)
                                               for _ in range(clients))))
    res.wall_s = time.perf_counter() - start
    res.slow_outcomes = list(await asyncio.gather(*slow_tasks))
    return res


def _pcts(lat: np.ndarray) -> str:
    if not lat.size:
        return "none"
    p = {q: 1000 * float(np.percentile(lat, q)) for q in (50, 90, 99)}
    return f"p50 {p[50]:.0f} ms, p90 {p[90]:.0f} ms, p99 {p[99]:.0f} ms, max {1000 * lat.max():.0f} ms"


def _report(r: Round) -> None:
    others = {o for o, _ in r.outcomes} - {ANSWERED, BUSY}
    other = {o: r.count(o) for o in sorted(others)}
    label = f"{r.clients} clients" + (f" + {r.slow} slow uploaders" if r.slow else " alone")
    print(f"{label}: answered {r.count(ANSWERED)}, 503 {r.count(BUSY)}, other {sum(other.values())}"
          + (f" {other}" if other else "") + f"; all done in {r.wall_s:.2f} s")
    print(f"  answered: {_pcts(r.latencies(ANSWERED))}")
    if r.count(BUSY):
        print(f"  503:      {_pcts(r.latencies(BUSY))}")
    if r.slow:
        kinds = {k: r.slow_outcomes.count(k) for k in sorted(set(r.slow_outcomes))}
        print(f"  slow uploaders: {kinds}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[200, 1000], help="normal clients of each round")
    ap.add_argument("--slow", type=int, default=300, help="slow uploaders mixed in")
    ap.add_argument("--read-timeout", type=float, default=10.0, help="the server's --read-timeout (seconds)")
    ap.add_argument("--max-queue", type=int, default=256, help="the server's --max-queue")
    ap.add_argument("--run", default=None, help="the run directory to serve (default: the untrained household scorer)")
    ap.add_argument("--quick", action="store_true", help="20 and 60 clients, 30 slow uploaders, a 4 s read timeout "
                    "and a queue of 24: a smoke run for CI")
    args = ap.parse_args(argv)
    if args.quick:
        args.clients, args.slow, args.read_timeout, args.max_queue = [20, 60], 30, 4.0, 24
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * (max(args.clients) + args.slow) + 256  # both ends of every connection, the server's too
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    if min(need, hard) < need:
        raise SystemExit(f"needs {need} open files, the limit is {hard}")

    import torch

    torch.set_num_threads(1)
    from proas.baselines.direct import direct_eval
    from proas.baselines.react_format import format_observation, system_prompt
    from proas.envs.household import make_household_env, task_ids
    from proas.policies.base import task_text
    from proas.train.config import build_config
    from serve_react import _start_server

    env = make_household_env()
    obs, info = env.reset(task_ids("valid")[0])
    body = json.dumps({"model": "proas", "temperature": 0.0, "messages": [
        {"role": "system", "content": system_prompt("household")},
        {"role": "user", "content": format_observation(obs, info["admissible"], task_text(obs, info))}]}).encode()

    rounds: list[tuple[Round, Round]] = []
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.run) if args.run else Path(tmp) / "direct"
        if not args.run:
            direct_eval(build_config(["env=household"]), tasks=1, save=run)
        proc, url = _start_server(run, ["--read-timeout", f"{args.read_timeout:g}", "--max-queue",
                                        str(args.max_queue)])
        host, port = re.match(r"http://([^:/]+):(\d+)/", url).groups()
        try:
            print(f"proas serve at {url}: read timeout {args.read_timeout:g} s, queue {args.max_queue}; "
                  f"{args.slow} slow uploaders (one body byte a second)")
            for n in args.clients:
                control = asyncio.run(_round(host, int(port), body, n, 0, args.read_timeout))
                _report(control)
                loaded = asyncio.run(_round(host, int(port), body, n, args.slow, args.read_timeout))
                _report(loaded)
                rounds.append((control, loaded))
        finally:
            proc.terminate()
            proc.wait(timeout=30)

    ok = True
    for control, loaded in rounds:
        n = loaded.clients
        definite = all(o in (ANSWERED, BUSY) and t <= args.read_timeout for o, t in loaded.outcomes)
        capacity = min(n, args.max_queue + 1)
        kept = loaded.count(ANSWERED) >= capacity
        ok &= definite and kept
        print(f"{n} clients + {loaded.slow} slow: every request answered or 503 within {args.read_timeout:g} s: "
              f"{'met' if definite else 'NOT met'}; none locked out (answered {loaded.count(ANSWERED)}, "
              f"queue capacity {capacity}, control {control.count(ANSWERED)}): {'met' if kept else 'NOT met'}")
        lat = loaded.latencies(ANSWERED)
        if n == 200 and lat.size:
            p99 = float(np.percentile(lat, 99))
            print(f"200 clients + {loaded.slow} slow: p99 {1000 * p99:.0f} ms < 1 s: {'met' if p99 < 1 else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
