"""Panel (b): do unreasonable actions hurt? ESR from one state, with and without an injected
segment of K unreasonable actions.

For each task, the *clean* snapshot is the state after the first ``cut`` fraction of the oracle's
walkthrough (a clean context: every step reasonable). The *injected* snapshot continues it with K
actions the env rejects, drawn from the env's ``invalid_candidates`` of the moment (each checked
to be an error: the env state stays the same, only the context is polluted). From each snapshot N
continuations of the policy are sampled; ESR is the share that wins. Both arms get the same number
of remaining actions, ``max_steps - len(prefix) - K``, so the injected segment does not cost the
injected arm any budget the clean arm has.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from proas.envs.base import Env
from proas.errors import ProasError
from proas.policies.base import Policy
from proas.probes.sampler import continue_episodes
from proas.probes.snapshot import Snapshot, restore, restore_many, state_key

__all__ = ["esr_probe", "inject_unreasonable", "summarise_esr"]


def inject_unreasonable(env: Env, snap: Snapshot, k: int, rng: np.random.Generator) -> Snapshot:
    """``snap`` followed by ``k`` actions the env rejects (from its ``invalid_candidates``)."""
    out = snap
    for j in range(k):
        r = restore(env, out)
        cands = [a for a in (r.info.get("invalid_candidates") or [])]
        rng.shuffle(cands)
        for a in cands:
            _, _, terminated, truncated, info = env.step(a)
            if info.get("error") and not (terminated or truncated):
                out = out.then(a)
                break
            restore(env, out)
        else:
            raise ProasError(f"{snap.task_id}: the env offers no rejected action to inject at step "
                             f"{len(out.actions)} (injected {j} of {k})")
    return out


def esr_probe(policy: Policy, make_env: Callable[[], Env], task_ids: Sequence[str], *, env_name: str,
              max_steps: int, n: int = 50, ks: Sequence[int] = (4,), cut: float = 0.5, temperature: float = 1.0,
              seed: int = 0, progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """One row per (task, K): ESR of the clean and of the injected snapshot, N samples each."""
    if n < 1 or not ks or min(ks) < 0 or not 0.0 <= cut < 1.0:
        raise ProasError("esr probe: need n >= 1, K >= 0 and 0 <= cut < 1")
    rng = np.random.default_rng(seed)
    envs = [make_env() for _ in range(n)]
    rows = []
    for tid in task_ids:
        oracle = envs[0].oracle(tid)
        clean = Snapshot(tid, tuple(oracle[: round(cut * len(oracle))]))
        base = restore(envs[0], clean)
        if base.info.get("won"):
            continue
        for k in ks:
            budget = max_steps - len(clean.actions) - k
            if budget < 1:
                raise ProasError(f"{tid}: K={k} leaves no step of the {max_steps}-step budget")
            injected = inject_unreasonable(envs[0], clean, k, rng)
            inj = restore(envs[0], injected)
            row: dict[str, Any] = {
                "task_id": tid, "task_type": base.info.get("task_type"), "prefix": len(clean.actions), "k": k,
                "n": n, "budget": budget,
                "same_state": state_key("", base.info)[1:] == state_key("", inj.info)[1:],
                "injected": " | ".join(injected.actions[len(clean.actions):]),
            }
            for arm, snap in (("clean", clean), ("injected", injected)):
                res = continue_episodes(policy, restore_many(envs, snap), rng, env_name=env_name, budget=budget,
                                        temperature=temperature)
                row[f"esr_{arm}"] = res.esr
                row[f"steps_{arm}"] = float(np.mean(res.steps))
            rows.append(row)
            if progress:
                progress(f"{tid} K={k}: ESR clean {100 * row['esr_clean']:.0f}%, injected "
                         f"{100 * row['esr_injected']:.0f}%")
    return rows


def summarise_esr(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ESR per K over tasks, with the standard error of the mean."""

    def se(x: np.ndarray) -> float:
        return float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else 0.0

    out = []
    for k in sorted({r["k"] for r in rows}):
        sel = [r for r in rows if r["k"] == k]
        c = np.array([r["esr_clean"] for r in sel])
        i = np.array([r["esr_injected"] for r in sel])
        out.append({"k": k, "tasks": len(sel), "esr_clean": float(c.mean()), "esr_injected": float(i.mean()),
                    "drop": float(c.mean() - i.mean()), "se_clean": se(c), "se_injected": se(i)})
    return out
