"""Cost of the HTTP path: `proas react` against `proas serve` versus the same policy played
in-process, on the same household validation tasks (greedy, so both play the same episodes).

    python benchmarks/serve_react.py [--tasks 16]

Prints requests per second over HTTP, env steps per second in-process, and their ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=16)
    args = ap.parse_args()
    torch.set_num_threads(1)
    from proas.baselines.common import val_result
    from proas.baselines.direct import direct_eval
    from proas.baselines.react import ChatClient, run_react
    from proas.baselines.serve import PolicyServer, make_server
    from proas.envs.household import make_household_env, task_ids
    from proas.policies.base import Context, task_text
    from proas.train.config import build_config

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "direct"
        direct_eval(build_config(["env=household"]), tasks=1, save=run)
        server = PolicyServer(run)
        httpd = make_server(server, "127.0.0.1", 0)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        env = make_household_env()
        ids = task_ids("valid")[: args.tasks]
        client = ChatClient(f"http://127.0.0.1:{httpd.server_address[1]}/v1", server.model, retries=0)
        t0 = time.perf_counter()
        trajs = run_react(client, env, ids, env_name="household", max_steps=50, temperature=0.0)
        http_s = time.perf_counter() - t0
        httpd.shutdown()

        t0 = time.perf_counter()
        steps = 0
        for tid in ids:
            obs, info = env.reset(tid)
            task, hist = task_text(obs, info), []
            for t in range(50):
                ctx = Context("household", task, obs, list(hist), info["admissible"], [], t)
                a = server.policy.act([ctx], np.random.default_rng(0), temperature=0.0)[0].action
                hist.append((obs, a))
                obs, _, done, info = env.step(a)
                steps += 1
                if done:
                    break
        local_s = time.perf_counter() - t0
    res = val_result(trajs)
    print(f"tasks {len(ids)}, SR {100 * res.sr:.1f}%, {client.calls} requests")
    print(f"react over HTTP:  {client.calls / http_s:8.1f} requests/s ({http_s:.2f} s)")
    print(f"in-process:       {steps / local_s:8.1f} steps/s    ({local_s:.2f} s, {steps} steps)")
    print(f"HTTP / in-process time ratio: {http_s / local_s:.2f}")


if __name__ == "__main__":
    main()
