"""proas's household env behind verl-agent's env-manager contract, through a rollout loop shaped
like verl-agent's, into step rows that the ProAS hook reshapes.

Runs in the main suite; the verl venv has no ``alfworld`` (the household generator's data), so
there it is skipped: nothing here needs verl.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("alfworld")

from proas.envs.household import WIN_REWARD, make_household_env, task_ids
from proas.errors import ProasError
from proas.integrations.verl import (
    ERROR_COLUMN,
    ProASCredit,
    ProasEnvManager,
    StepColumns,
    project_action,
    rows_to_trajectories,
    step_columns,
)

MAX_STEPS = 8


def tagged(action: str) -> str:
    return f"<think>the plan says so</think><action>{action}</action>"


def rollout(manager: ProasEnvManager, tasks: list[str], policy) -> dict[str, np.ndarray]:
    """verl-agent's vanilla multi-turn loop in miniature: step every env, keep the rows of the
    envs that were active, copy the ProAS columns from the infos, add the episode totals."""
    obs, _ = manager.reset(tasks)
    n = len(obs["text"])
    uid = [f"uid-{i // manager.group_n}" for i in range(n)]
    traj_uid = [f"traj-{i}" for i in range(n)]
    done = np.zeros(n, dtype=bool)
    episode = np.zeros(n)
    rows: list[dict] = []
    for t in range(MAX_STEPS):
        active = ~done
        anchors = obs["anchor"]
        texts = [policy(i, t, obs["text"][i]) for i in range(n)]
        obs, rewards, dones, infos = manager.step(texts)
        proas_cols = step_columns(infos, StepColumns())
        for i in np.flatnonzero(active):
            row = {"uid": uid[i], "traj_uid": traj_uid[i], "anchor_obs": anchors[i],
                   "rewards": float(rewards[i]), "is_action_valid": infos[i]["is_action_valid"]}
            row.update({k: v[i] for k, v in proas_cols.items()})
            rows.append(row)
        episode[active] += rewards[active]
        done |= dones
        if done.all():
            break
    for row in rows:
        row["episode_rewards"] = episode[int(row["traj_uid"].split("-")[1])]
    out = {}
    for key in rows[0]:
        arr = np.empty(len(rows), dtype=object)
        arr[:] = [r[key] for r in rows]
        out[key] = arr
    return out


@pytest.fixture(scope="module")
def setting():
    tasks = task_ids("train")[:2]
    env = make_household_env(max_steps=MAX_STEPS)
    oracles = {t: env.oracle(t) for t in tasks}
    return tasks, oracles


def make_policy(tasks, oracles, group_n):
    """Per group: env 0 follows the oracle; env 1 first sends garbage, then the oracle; env 2
    answers without tags (the env accepts the command; verl-agent's format check does not);
    env 3 looks around until the step limit."""

    def policy(i, t, prompt):
        plan = oracles[tasks[i // group_n]]
        role = i % group_n
        if role == 0:
            return tagged(plan[t]) if t < len(plan) else tagged("look")
        if role == 1:
            return "%%% garbage %%%" if t == 0 else tagged(plan[t - 1]) if t - 1 < len(plan) else tagged("look")
        if role == 2:
            return plan[t] if t < len(plan) else "look"
        return tagged("look")

    return policy


def test_projection_follows_verl_agents_format_rule():
    assert project_action("<think>x</think> <action> go to sofa 1 </action>") == ("go to sofa 1", True)
    assert project_action("<action>look</action>") == ("look", False)
    assert project_action("<action>look</action>", require_think=False) == ("look", True)
    assert project_action("go to sofa 1") == ("go to sofa 1", False)
    assert project_action(None) == ("", False)


def test_rows_from_the_manager_become_the_trajectories_that_were_played(setting):
    tasks, oracles = setting
    manager = ProasEnvManager(lambda: make_household_env(max_steps=MAX_STEPS), group_n=4)
    rows = rollout(manager, tasks, make_policy(tasks, oracles, 4))
    layout = rows_to_trajectories(rows, StepColumns(error=ERROR_COLUMN))
    trajs = {t.trajectory: t for t in layout.trajectories}
    assert len(trajs) == 8
    for g, task in enumerate(tasks):
        plan = oracles[task]
        winner = trajs[f"traj-{4 * g}"]
        assert [s.action for s in winner.steps] == plan
        assert winner.reward == WIN_REWARD and winner.success
        assert not any(s.error for s in winner.steps)
        assert all(a.next_state == b.state for a, b in zip(winner.steps, winner.steps[1:]))
        assert winner.steps[-1].reward == WIN_REWARD
        late = trajs[f"traj-{4 * g + 1}"]
        assert late.steps[0].error and late.steps[0].state == late.steps[0].next_state
        assert late.success and len(late) == len(plan) + 1
        untagged = trajs[f"traj-{4 * g + 2}"]
        assert untagged.success and all(s.error for s in untagged.steps)  # format-invalid steps
        idle = trajs[f"traj-{4 * g + 3}"]
        assert not idle.success and len(idle) == MAX_STEPS
    # the anchor is the observation the action was taken in
    first_rows = [r for r in range(len(rows["traj_uid"])) if rows["step_index"][r] == 0]
    assert all("Your task is to:" in rows["anchor_obs"][r] for r in first_rows)


def test_the_hook_masks_the_errors_of_winners_and_spreads_the_idlers_penalty(setting):
    tasks, oracles = setting
    manager = ProasEnvManager(lambda: make_household_env(max_steps=MAX_STEPS), group_n=4)
    rows = rollout(manager, tasks, make_policy(tasks, oracles, 4))
    n = len(rows["uid"])
    data = type("Rows", (), {})()
    data.non_tensor_batch = rows
    data.batch = {"response_mask": torch.ones(n, 3, dtype=torch.int64)}
    credit = ProASCredit(estimator="grpo", columns=StepColumns(error=ERROR_COLUMN))
    credit.reshape(data)
    adv = data.batch["advantages"][:, 0].numpy()
    layout, res = credit.last_layout, credit.last_result
    # verl-agent's invalid-action penalty (on by default) is B_{i,t}, negative exactly on the
    # format-invalid steps and untouched by the shaping; the checks below are on the rest
    step_valid = np.ones(layout.n_steps, dtype=bool)
    step_valid[layout.row_to_step] = rows["is_action_valid"].astype(bool)
    assert (~step_valid).any()
    np.testing.assert_array_equal(res.step_advantage < 0, ~step_valid)
    for i, traj in enumerate(layout.trajectories):
        a = res.traj_advantage[layout.offsets[i]]
        span = slice(layout.offsets[i], layout.offsets[i + 1])
        own = res.advantage[span] - res.step_advantage[span]
        if traj.success:
            assert a > 0
            # MUI: error steps (garbage, untagged answers) get nothing, clean steps keep A_i
            np.testing.assert_allclose(own, [0.0 if s.error else a for s in traj.steps], rtol=1e-6)
        else:
            # APR: every look is non-advancing, D = T..1 over mean (T+1)/2 -> early steps pay more
            d = np.arange(len(traj), 0, -1)
            np.testing.assert_allclose(own, d / (d.mean() + 1e-6) * a, rtol=1e-6)
    np.testing.assert_allclose(adv, res.advantage[layout.row_to_step], rtol=1e-6)


def test_finished_envs_are_left_alone_and_bad_calls_are_clear_errors(setting):
    tasks, oracles = setting
    manager = ProasEnvManager(lambda: make_household_env(max_steps=MAX_STEPS), group_n=1)
    manager.reset(kwargs=[{"task_id": tasks[0]}])
    for action in oracles[tasks[0]]:
        _, _, dones, _ = manager.step([tagged(action)])
    assert dones.tolist() == [True] and manager.success().tolist() == [True]
    _, rewards, dones, infos = manager.step([tagged("look")])
    assert rewards.tolist() == [0.0] and dones.tolist() == [True]
    assert step_columns(infos)["step_index"].tolist() == [None]
    with pytest.raises(ProasError, match="expected 1 actions"):
        manager.step([])
    with pytest.raises(ProasError, match="need a 'task_id'"):
        manager.reset(kwargs=[{"task": tasks[0]}])
    with pytest.raises(ProasError, match="needs task_ids"):
        manager.reset()


def test_reset_without_arguments_draws_tasks_as_verl_agent_calls_it(setting):
    tasks, _ = setting
    pool = task_ids("train")[:10]
    manager = ProasEnvManager(make_household_env, group_n=3, tasks=pool, env_num=2, seed=5)
    obs, infos = manager.reset()
    played = [info["task_id"] for info in infos]
    assert len(played) == 6 and played[0] == played[1] == played[2] != played[3] == played[4] == played[5]
    assert set(played) <= set(pool)
    again = ProasEnvManager(make_household_env, group_n=3, tasks=pool, env_num=2, seed=5)
    assert [i["task_id"] for i in again.reset()[1]] == played  # seeded
    assert len(obs["text"]) == 6 and obs["image"] is None and obs["anchor"][0] == infos[0]["anchor"]
    assert manager.success_evaluator(total_infos=[])["success_rate"].tolist() == [0.0] * 6

    schedule = iter([[tasks[0]], [tasks[1]]])
    fixed = ProasEnvManager(make_household_env, group_n=2, tasks=lambda: next(schedule))
    assert [i["task_id"] for i in fixed.reset()[1]] == [tasks[0]] * 2
    assert [i["task_id"] for i in fixed.reset()[1]] == [tasks[1]] * 2
    with pytest.raises(ProasError, match="env_num must be in 1..10"):
        ProasEnvManager(make_household_env, tasks=pool, env_num=11)
