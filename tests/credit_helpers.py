"""Small builders and hypothesis strategies shared by the credit tests."""

from __future__ import annotations

from hypothesis import strategies as st

from proas.types import Step, Trajectory


def path_traj(group, tid, reward, states, errors=(), actions=None, anchors=None, step_rewards=None):
    """A trajectory visiting ``states`` in order (len(states) - 1 steps)."""
    steps = []
    for t, (s, n) in enumerate(zip(states, states[1:])):
        steps.append(
            Step(
                state=s,
                action=actions[t] if actions else f"{s}->{n}",
                next_state=n,
                error=t in errors,
                anchor=anchors[t] if anchors else None,
                reward=step_rewards[t] if step_rewards else None,
            )
        )
    return Trajectory(group=group, trajectory=tid, reward=float(reward), steps=steps)


STATE = st.sampled_from([f"s{k}" for k in range(8)])


@st.composite
def trajectories(draw, max_traj=6, max_len=8, groups=("g0", "g1", "g2")):
    n = draw(st.integers(1, max_traj))
    out = []
    for i in range(n):
        length = draw(st.integers(0, max_len))
        states = draw(st.lists(STATE, min_size=length + 1, max_size=length + 1))
        errors = {t for t in range(length) if draw(st.booleans()) and draw(st.booleans())}
        reward = draw(st.sampled_from([0.0, 1.0, 10.0, -1.0, 0.5]))
        out.append(path_traj(draw(st.sampled_from(groups)), f"t{i}", reward, states, errors))
    return out
