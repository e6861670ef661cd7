"""The rollout diagnostics the trainer records: the groups' learning signal and the score-mode
lm's length bias (proas.train.diagnostics)."""

import pytest

from proas.train.diagnostics import group_metrics, length_bias
from proas.types import Step, Trajectory


def traj(group, reward, won=None, decisions=()):
    steps = [Step("s", "a", "s2", extra={"policy": d}) for d in decisions] or [Step("s", "a", "s2")]
    return Trajectory(group, f"{group}-{reward}-{len(decisions)}", reward, steps, won=won)


def test_group_metrics_count_all_fail_flat_groups_and_successes():
    trajs = [traj("a", 0.0), traj("a", 0.0),            # all fail: flat, no success
             traj("b", 1.0), traj("b", 0.0),            # mixed: one success
             traj("c", 1.0), traj("c", 1.0),            # all succeed: flat, two successes
             traj("d", 0.3, won=False), traj("d", 0.6, won=False)]  # dense rewards, no win: not flat
    m = group_metrics(trajs)
    assert m == {"train/groups_no_success": pytest.approx(2 / 4), "train/groups_flat": pytest.approx(2 / 4),
                 "train/successes_per_group": pytest.approx(3 / 4)}
    assert group_metrics([]) == {}


def test_length_bias_compares_the_shortest_choice_with_a_uniform_choice():
    short, mid, long = [1], [1, 2], [1, 2, 3]
    trajs = [traj("a", 0.0, decisions=[{"cands": [long, short, mid], "choice": 1},    # shortest, 1 of 3
                                       {"cands": [short, short, long], "choice": 2},  # not, 2 of 3 shortest
                                       {"cands": [mid, mid], "choice": 0}]),         # equal lengths: skipped
             traj("b", 0.0, decisions=[{"cands": [mid, short], "choice": 1}])]        # shortest, 1 of 2
    m = length_bias(trajs)
    assert m["rollout/chose_shortest"] == pytest.approx(2 / 3)
    assert m["rollout/shortest_by_chance"] == pytest.approx((1 / 3 + 2 / 3 + 1 / 2) / 3)
    assert length_bias([traj("a", 1.0), traj("b", 0.0, decisions=[{"tokens": [1]}])]) == {}


def test_the_trainer_records_both_for_a_score_mode_lm(tmp_path):
    from proas.train.config import build_config
    from proas.train.loop import Trainer

    cfg = build_config(["env.name=toy_env:make_env", "env.options.n_places=3", "env.options.max_steps=4",
                        "env.options.n_train=8", "env.options.n_valid=2", "env.tasks_per_step=2",
                        "env.group_size=2", "train.progress=false", "train.steps=1", "policy=lm",
                        "policy.lm.model_config=tiny", "policy.lm.mode=score", "policy.lm.device=cpu"])
    rec = Trainer(cfg, tmp_path).train_step()
    assert rec["train/successes_per_group"] == pytest.approx(2 * rec["train/sr"])  # 2 episodes a group
    assert (rec["train/sr"] == 0) <= (rec["train/groups_no_success"] == 1)
    assert 0 <= rec["train/groups_flat"] <= 1
    # the toy's candidates ("go to desk", "take key from desk") differ in length
    assert 0 < rec["rollout/shortest_by_chance"] < 1 and 0 <= rec["rollout/chose_shortest"] <= 1
