"""N continuations of a policy from restored snapshots, all episodes advancing together.

The loop mirrors ``proas.train.rollout``: at every turn the live episodes' contexts go to the
policy in one ``act`` call. The first action of each continuation may be *forbidden* (the FD
probe): a policy that scores a candidate list (``scorer``, ``lm`` in score mode) simply does not see the forbidden
action among its candidates; any other policy is re-sampled until it proposes something else
(at most ``resample_tries`` times; an episode where the forbidden action survives is counted).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from proas.policies.base import Policy
from proas.probes.snapshot import Restored

__all__ = ["Continuations", "continue_episodes"]


@dataclass
class Continuations:
    won: list[bool]
    steps: list[int]
    #: episodes whose first action was still the forbidden one
    forbid_failed: int = 0

    @property
    def esr(self) -> float:
        return sum(self.won) / len(self.won) if self.won else 0.0


def continue_episodes(policy: Policy, starts: Sequence[Restored], rng: np.random.Generator, *, env_name: str,
                      budget: int, temperature: float = 1.0, forbid: str | None = None,
                      resample_tries: int = 16) -> Continuations:
    """Continue each restored episode for at most ``budget`` actions; who won, and how long."""
    live = list(range(len(starts)))
    won = [bool(s.info.get("won")) for s in starts]
    steps = [0] * len(starts)
    done = [w for w in won]
    obs = [s.obs for s in starts]
    infos = [s.info for s in starts]
    hist = [list(s.history) for s in starts]
    forbid_failed = 0
    # the scorer and the lm in score mode choose from the candidate list: drop the forbidden one
    picks_candidates = policy.kind == "scorer" or getattr(policy, "mode", None) == "score"
    for turn in range(budget):
        live = [i for i in live if not done[i]]
        if not live:
            break
        ctxs = [replace(starts[i].context(env_name), observation=obs[i], history=list(hist[i]),
                        admissible=infos[i].get("admissible"),
                        invalid_candidates=list(infos[i].get("invalid_candidates") or []),
                        step=starts[i].step + turn) for i in live]
        if turn == 0 and forbid is not None and picks_candidates:
            ctxs = [_without(c, forbid) for c in ctxs]
        decisions = policy.act(ctxs, rng, temperature=temperature)
        if turn == 0 and forbid is not None and not picks_candidates:
            for k in range(len(ctxs)):
                tries = 0
                while decisions[k].action == forbid and tries < resample_tries:
                    decisions[k] = policy.act([ctxs[k]], rng, temperature=max(temperature, 1.0))[0]
                    tries += 1
        for i, ctx, dec in zip(live, ctxs, decisions):
            if turn == 0 and forbid is not None and dec.action == forbid:
                forbid_failed += 1
            o, _, terminated, truncated, info = starts[i].env.step(dec.action)
            d = terminated or truncated
            hist[i].append((obs[i], dec.action))
            obs[i], infos[i] = o, info
            steps[i] += 1
            if info.get("won"):
                won[i] = True
            if d or info.get("won"):
                done[i] = True
    return Continuations(won=won, steps=steps, forbid_failed=forbid_failed)


def _without(ctx, action: str):
    adm = [a for a in ctx.admissible] if ctx.admissible is not None else None
    inv = [a for a in ctx.invalid_candidates if a != action]
    if adm is not None:
        rest = [a for a in adm if a != action]
        if rest or inv:  # never leave the scorer without a candidate
            adm = rest
    return replace(ctx, admissible=adm, invalid_candidates=inv)
