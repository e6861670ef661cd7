"""Why a group-RL run does or does not learn: what a step's rollout gives the estimator to work
with, recorded beside the training SR in ``metrics.jsonl``.

- ``group_metrics``: the learning signal a batch of groups carries. A group whose outcome
  rewards are all equal gets a zero advantage from GRPO's and DAPO's group normalisation (DAPO's
  dynamic sampling drops it); with a success-only reward, an all-fail group is such a group.
- ``length_bias``: whether a score-mode lm policy favours short candidates. With
  ``score_norm=sum`` a candidate's score is the sum of its token log-probs, so every extra token
  lowers it; a policy that picks the shortest candidate far more often than a uniform choice
  would is acting on length, not on content.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from proas.types import Trajectory

__all__ = ["group_metrics", "length_bias"]


def group_metrics(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Per step, over the groups of ``trajs`` (by ``Trajectory.group``):

    - ``train/groups_no_success``: the share of groups none of whose episodes succeeded;
    - ``train/groups_flat``: the share of groups whose outcome rewards are all equal (GRPO's
      advantage is zero for every member);
    - ``train/successes_per_group``: the mean number of successful episodes a group holds.

    Empty when there are no trajectories."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[t.group].append(t)
    if not groups:
        return {}
    n = len(groups)
    wins = [sum(t.success for t in g) for g in groups.values()]
    flat = sum(max(t.reward for t in g) - min(t.reward for t in g) <= 1e-12 for g in groups.values())
    return {"train/groups_no_success": sum(w == 0 for w in wins) / n,
            "train/groups_flat": flat / n,
            "train/successes_per_group": sum(wins) / n}


def length_bias(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """For the score-mode lm's decisions (``Step.extra["policy"]`` holding ``cands``, the
    candidates' response tokens, and ``choice``) that had candidates of different lengths:

    - ``rollout/chose_shortest``: the share that chose a shortest candidate;
    - ``rollout/shortest_by_chance``: the share a uniform choice would give (the mean over those
      decisions of #shortest / #candidates).

    Empty when no step holds such a decision (another policy, or generate mode)."""
    chose = chance = 0.0
    n = 0
    for t in trajs:
        for s in t.steps:
            data = s.extra.get("policy") if s.extra else None
            if not isinstance(data, dict) or "cands" not in data or "choice" not in data:
                continue
            lengths = [len(c) for c in data["cands"]]
            if len(set(lengths)) < 2:
                continue
            shortest = min(lengths)
            chose += lengths[int(data["choice"])] == shortest
            chance += lengths.count(shortest) / len(lengths)
            n += 1
    if not n:
        return {}
    return {"rollout/chose_shortest": chose / n, "rollout/shortest_by_chance": chance / n}
