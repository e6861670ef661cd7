"""``proas inspect``: step classification, selection, terminal views, the HTML page's content."""

from __future__ import annotations

import io
import re
from types import SimpleNamespace

import pytest
from rich.console import Console

from inspect_helpers import make_run
from proas.cli import main
from proas.credit import ReferenceGraph
from proas.errors import ProasError
from proas.inspect.html import arg_elements, path_states
from proas.inspect.view import abbreviate, group_table, overview_table, select, short_state, step_note, trajectory_table
from proas.rollout_log import LoggedStep, read_rollouts

TYPE = "pick_and_place_simple"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    trajs, credit, graph = make_run(run_dir)
    return SimpleNamespace(dir=run_dir, trajs=trajs, credit=credit, graph=graph, log=read_rollouts(run_dir))


def _step(a_i: float, base: float, adv: float) -> LoggedStep:
    return LoggedStep(t=0, state="s", action="a", next_state="s2", error=False, observation=None, rea=1, pa=1, fd=0.0,
                      base_advantage=base, advantage=adv, uniform=True, traj_advantage=a_i)


@pytest.mark.parametrize(
    "a_i, base, adv, kind, weight",
    [
        (0.5, 0.5, 0.0, "masked", 0.0),  # MUI: Rea = 0 on a won trajectory
        (0.5, 0.5, 0.5, "kept", 1.0),
        (-1.0, -0.8, -1.3, "up", 1.5),  # B = 0.2 stays; Ã = -1.5 = 1.5 · A_i
        (-1.0, -1.0, -0.25, "down", 0.25),
        (-1.0, -1.0, 0.0, "zeroed", 0.0),  # mask_pm on a reasonable step of a failed trajectory
        (0.0, 0.3, 0.3, "kept", None),  # GAE: no trajectory part, nothing to shape
    ],
)
def test_step_kind_and_weight(a_i, base, adv, kind, weight):
    s = _step(a_i, base, adv)
    assert s.kind == kind
    assert (s.weight is None) if weight is None else s.weight == pytest.approx(weight)


def test_default_selection_among_equals_is_the_first_group_and_its_first_reshaped_trajectory(run):
    group, traj = select(run.log)  # both groups: 2 of 4 won, as many steps reshaped
    assert [t.trajectory for t in group] == ["g0/oracle", "g0/noisy", "g0/random0", "g0/random1"]
    assert traj.trajectory == "g0/noisy"  # the oracle's credit is unchanged by shaping


def _hand_log(tmp_path, groups, texts=None, task_type="t"):
    """A logged step from ``groups``: ``{group: [(won, [advantage per step]), ...]}``; the base
    advantage and A_i are the step's advantage (nothing reshaped)."""
    import numpy as np

    from proas.rollout_log import write_rollouts
    from proas.types import Step, Trajectory

    trajs, adv = [], []
    for g, members in groups.items():
        for k, (won, advs) in enumerate(members):
            text = (texts or {}).get((g, k), {})
            steps = [Step(state="t|a", action=text.get("action", f"act {j}"), next_state=text.get("state", "t|b"),
                          error=False, extra={"observation": text.get("observation", "obs")}) for j in range(len(advs))]
            trajs.append(Trajectory(group=g, trajectory=text.get("id", f"{g}/{k}"), reward=1.0 if won else 0.0,
                                    steps=steps, task_type=task_type, won=won))
            adv.extend(advs)
    n = len(adv)
    offsets = np.cumsum([0] + [len(t.steps) for t in trajs])
    a = np.array(adv, dtype=float)
    a_i = np.concatenate([np.full(len(t.steps), a[lo]) for t, lo in zip(trajs, offsets[:-1])])
    credit = SimpleNamespace(offsets=offsets, rea=np.ones(n, int), pa=np.ones(n, int), fd=np.zeros(n),
                             base_advantage=a, advantage=a, uniform=np.ones(n, bool), traj_advantage=a_i)
    write_rollouts(tmp_path, 3, trajs, credit)
    return read_rollouts(tmp_path)


def test_default_group_has_both_wins_and_failures_not_the_first(tmp_path):
    log = _hand_log(tmp_path, {
        "all-failed": [(False, [0.0, 0.0])] * 4,  # nothing to learn: every advantage zero
        "all-won": [(True, [0.0])] * 4,
        "mixed": [(True, [1.0]), (False, [-1.0, -1.0]), (False, [-1.0])],
    })
    group, traj = select(log)
    assert group[0].group == "mixed" and traj.trajectory == "mixed/0"
    assert select(log, task="all-failed")[0][0].group == "all-failed"  # an explicit choice is kept


def test_without_a_mixed_group_the_default_is_the_one_with_credit(tmp_path):
    log = _hand_log(tmp_path, {"zero": [(False, [0.0])] * 2, "some": [(False, [0.0, 0.3]), (False, [-0.3])]})
    assert select(log)[0][0].group == "some"


def test_select_by_task_id_group_id_and_index(run):
    assert select(run.log, task="train-pick-0001")[0][0].group == "g1"
    assert select(run.log, task="g1", trajectory="2")[1].trajectory == "g1/random0"
    assert select(run.log, trajectory="g1/oracle")[1].group == "g1"


def test_unknown_task_or_trajectory_lists_what_exists(run):
    with pytest.raises(ProasError, match=r"no task 'nope'; tasks: g0, g1"):
        select(run.log, task="nope")
    with pytest.raises(ProasError, match=r"no trajectory 'g0/x' in task 'g0'; its trajectories: g0/oracle, g0/noisy"):
        select(run.log, task="g0", trajectory="g0/x")


def _text(renderable) -> str:
    console = Console(width=250, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_group_view_strips_align_steps(run):
    group, traj = select(run.log)
    text = _text(group_table(group, traj))
    # oracle: 5 advancing steps; noisy: go, 2 garbage (unreasonable), then the 4 remaining oracle steps
    assert re.search(r"g0/oracle .*│ ●●●●● ", text)
    assert re.search(r"▶ │ g0/noisy .*│ ●✗✗●●●● ", text)


def test_trajectory_view_shows_credit_and_notes(run):
    _, traj = select(run.log, trajectory="g0/noisy")
    lines = _text(trajectory_table(traj)).splitlines()
    row1 = next(x for x in lines if "xyzzy frobnicate" in x)
    assert "(error)" in row1 and "MUI masked" in row1
    # Rea 0, PA 0, FD 2 (this step and the next garbage one), uniformly credited (GRPO), base +0.866, shaped 0
    assert re.search(r"│\s+0 │\s+0 │\s+2 │ ✓ │ \+0\.866 │ \+0\.000 │", row1)
    _, failed = select(run.log, trajectory="g0/random0")
    text = _text(trajectory_table(failed))
    first = failed.steps[0]
    assert f"APR ↑ ×{first.weight:.2f}" in text and first.weight > 1
    assert "APR ↓" in text


def _header_and_rows(text: str) -> tuple[str, list[str]]:
    lines = text.splitlines()
    k = next(i for i, x in enumerate(lines) if "Rea" in x)
    return lines[k], lines[k + 1:]


@pytest.mark.parametrize("name", ["g0/noisy", "g0/random0"])
def test_step_table_is_readable_at_80_columns(run, name):
    _, traj = select(run.log, trajectory=name)
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(trajectory_table(traj))
    text = console.export_text()
    assert max(len(x) for x in text.splitlines()) <= 80
    header, rows = _header_and_rows(text)
    assert header.split() == ["t", "action", "→", "next", "state", "Rea", "PA", "FD", "U", "base", "shaped", "note"]
    body = "\n".join(rows)
    for s in traj.steps:
        # the step's own line: t, the whole action, then every figure and the note, in order
        note = re.escape(step_note(s)) if step_note(s) else ""
        row = (rf"^\s*{s.t} {re.escape(s.action)}(  \(error\))?\s+{s.rea}\s+{s.pa}\s+{s.fd:g}\s+✓\s+"
               rf"{re.escape(f'{s.base_advantage:+.3f}')}\s+{re.escape(f'{s.advantage:+.3f}')}\s*{note}\s*$")
        assert re.search(row, body, re.M), (row, body)
        assert "→ " + short_state(s.next_state, traj.task_type) in body


def test_step_table_shows_observations_when_wide_or_asked(run):
    _, traj = select(run.log, trajectory="g0/noisy")
    first_obs = abbreviate(traj.steps[1].observation, 48)
    assert first_obs in _text(trajectory_table(traj))  # 250 columns: the wide layout
    narrow = Console(width=80, record=True, file=io.StringIO())
    narrow.print(trajectory_table(traj))
    assert first_obs not in narrow.export_text()
    assert "observation" in _text(trajectory_table(traj, observations=True))


def test_inspect_cli_at_80_columns_shows_every_step_column(run, capsys):
    assert main(["inspect", str(run.dir), "--width", "80"]) == 0
    out = capsys.readouterr().out
    assert max(len(x) for x in out.splitlines()) <= 80
    assert _header_and_rows(out)[0].split()[-7:] == ["Rea", "PA", "FD", "U", "base", "shaped", "note"]
    header = next(x for x in out.splitlines() if "success" in x)
    assert header.split() == ["task", "type", "G", "success", "steps", "masked", "APR", "↑", "APR", "↓"]
    # one line a group, its type whole; masked and APR counts under the default (transition) rule
    for gid, up, down in (("g0", 11, 13), ("g1", 12, 12)):
        assert re.search(rf"^ ?{gid} +pick_and_place_simple +4 +2/4 +\d+\.\d +2 +{up} +{down} *$", out, re.M)


def test_overview_fits_the_longest_household_type_at_80_columns(tmp_path):
    log = _hand_log(
        tmp_path, {"s40b0g10": [(True, [1.0]), (False, [-1.0])]}, task_type="pick_clean_then_place_in_recep"
    )
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(overview_table(log))
    assert re.search(r"^ ?s40b0g10 +pick_clean_then_place_in_recep +2 +1/2 ", console.export_text(), re.M)


EVIL = {"action": "go\x1b[2J\x1b]0;pwned\x07 to\x00 x\x7f\u202eevil", "observation": "look\x1b[31m red\r\u2066",
        "state": "t|\x9bq", "id": "g/\x1b[5m"}


def test_control_characters_and_bidi_overrides_are_escaped_in_every_view(tmp_path, capsys):
    _hand_log(tmp_path, {"g": [(True, [1.0]), (False, [-1.0])]}, texts={("g", 0): EVIL})
    assert main(["inspect", str(tmp_path), "--task", "g", "--trajectory", "0", "--observations", "--width", "250"]) == 0
    out = capsys.readouterr().out
    bad = [ch for ch in out if (ord(ch) < 32 and ch != "\n") or 0x7f <= ord(ch) <= 0x9f or ch in "\u202e\u2066"]
    assert not bad, bad
    assert r"go\x1b[2J\x1b]0;pwned\x07 to\x00 x\x7f\u202eevil" in out
    assert r"look\x1b[31m red \u2066" in out  # the one-line cell turned the CR into a space
    assert r"\x9bq" in out and r"g/\x1b[5m" in out


def test_markup_like_text_is_shown_literally(tmp_path, capsys):
    _hand_log(tmp_path, {"g": [(True, [1.0]), (False, [-1.0])]},
              texts={("g", 0): {"action": "put [bold]mug[/bold] in [/] box", "id": "[red]id"}})
    assert main(["inspect", str(tmp_path), "--task", "g", "--trajectory", "0", "--width", "120"]) == 0
    out = capsys.readouterr().out
    assert "put [bold]mug[/bold] in [/] box" in out and "[red]id" in out


def test_styles_mark_masked_and_up_weighted_steps(run):
    from proas.inspect.view import step_style

    _, noisy = select(run.log, trajectory="g0/noisy")
    assert "strike" in step_style(noisy.steps[1]) and step_style(noisy.steps[0]) == "green"
    _, failed = select(run.log, trajectory="g0/random0")
    assert step_style(failed.steps[0]) == "bold red"
    assert step_style(failed.steps[-1]) == "dim red"


def test_short_state_drops_only_the_own_type_prefix():
    assert short_state(f"{TYPE}|at=start|hold=none", TYPE) == "at=start|hold=none"
    assert short_state("other|at=start", TYPE) == "other|at=start"


def test_cli_terminal(run, capsys):
    assert main(["inspect", str(run.dir), "--task", "g1", "--trajectory", "g1/noisy", "--width", "220"]) == 0
    out = capsys.readouterr().out
    assert "RL step 2: 8 trajectories, 2 tasks" in out
    assert "trajectory g1/noisy: won" in out and "MUI masked" in out


def test_cli_bad_step_is_exit_2_with_one_line(run, capsys):
    assert main(["inspect", str(run.dir), "--step", "9"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("proas: error:") and "logged steps: 1, 2" in err and "\n" not in err


def test_arg_elements_for_the_task_type(run):
    group, _ = select(run.log)
    el = arg_elements(run.graph, TYPE, group)
    type_nodes = [n for n in run.graph.nodes() if n.startswith(TYPE + "|")]
    visited = {s for t in group for s in path_states(t)}
    off = visited - set(run.graph.nodes())
    assert el["type_nodes"] == len(type_nodes) and not el["capped"]
    assert sorted(n["id"] for n in el["nodes"]) == sorted(set(type_nodes) | off)
    by_id = {n["id"]: n for n in el["nodes"]}
    for goal in run.graph.goals():
        assert by_id[goal]["goal"] and by_id[goal]["distance"] == 0
    assert all(not by_id[s]["arg"] for s in off)
    # the oracle's path is in the graph: every transition is an ARG edge
    oracle = group[0]
    path = el["paths"]["g0/oracle"]
    assert path["nodes"] == list(dict.fromkeys(path_states(oracle)))
    edges = {e["id"]: e for e in el["edges"]}
    assert len(path["edges"]) == len(oracle) and all(edges[e]["arg"] for e in path["edges"])
    # support is the node size: the most supported node is the largest
    top = max(type_nodes, key=run.graph.support)
    assert by_id[top]["size"] == max(n["size"] for n in el["nodes"])


def test_a_large_graph_keeps_the_paths_and_goals_then_the_most_supported(run):
    big = ReferenceGraph()
    # 40 detours of support 1 from the start to a goal, plus one walked 3 times
    group, _ = select(run.log)
    big.merge(run.graph)
    start = group[0].steps[0].state
    goal = group[0].steps[-1].next_state
    for k in range(40):
        big.add_path([start, f"{TYPE}|side={k}", goal], ["detour", "finish"])
    for _ in range(3):
        big.add_path([start, f"{TYPE}|popular", goal], ["detour", "finish"])
    must = {s for t in group for s in path_states(t) if s in big} | set(big.goals())
    el = arg_elements(big, TYPE, group, max_nodes=len(must) + 1)
    shown = {n["id"] for n in el["nodes"] if n["arg"]}
    assert el["capped"] and el["type_nodes"] == len(run.graph.nodes()) + 41
    assert shown == must | {f"{TYPE}|popular"}
    assert all(e["source"] in shown | {n["id"] for n in el["nodes"]} for e in el["edges"])


def test_cli_html_is_self_contained(run, tmp_path, capsys):
    out = tmp_path / "page.html"
    assert main(["inspect", str(run.dir), "--html", str(out)]) == 0
    page = out.read_text()
    assert "checkpoints/step_000002/graph.json" in capsys.readouterr().out
    assert not re.search(r"<script[^>]+src=|<link[^>]+href=|@import", page)
    assert "The Cytoscape Consortium" in page  # the vendored library and its licence header are inline
    assert page.count('class="traj-detail"') == 4 and page.count('class="traj-row"') == 4


def test_cli_html_for_a_step_without_its_checkpoint_uses_the_latest(run, tmp_path, capsys):
    out = tmp_path / "page1.html"
    assert main(["inspect", str(run.dir), "--step", "1", "--html", str(out)]) == 0
    assert "checkpoints/step_000002/graph.json" in capsys.readouterr().out


def test_cli_html_without_a_graph_is_a_clear_error(run, tmp_path, capsys):
    import shutil

    bare = tmp_path / "bare"
    shutil.copytree(run.dir / "rollouts", bare / "rollouts")
    assert main(["inspect", str(bare), "--html", str(tmp_path / "x.html")]) == 2
    assert "pass --graph PATH" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
    (tmp_path / "g.json").write_text("{broken")
    assert main(["inspect", str(bare), "--html", str(tmp_path / "x.html"), "--graph", str(tmp_path / "g.json")]) == 2
    assert not (tmp_path / "x.html").exists()


def test_ids_and_texts_cannot_break_out_of_the_page(tmp_path):
    import numpy as np

    from proas.inspect.html import render_html
    from proas.rollout_log import write_rollouts
    from proas.types import Step, Trajectory

    evil = "</script><script>alert(1)</script><b>"
    step = Step(state=f"t|{evil}", action=evil, next_state="t|b", error=False, extra={"observation": evil})
    traj = Trajectory(group=evil, trajectory=evil, reward=1.0, steps=[step], task_type="t")
    credit = SimpleNamespace(offsets=np.array([0, 1]), rea=np.array([1]), pa=np.array([1]), fd=np.array([0]),
                             base_advantage=np.array([0.0]), advantage=np.array([0.0]), uniform=np.array([True]),
                             traj_advantage=np.array([0.0]))
    write_rollouts(tmp_path, 0, [traj], credit)
    log = read_rollouts(tmp_path)
    graph = ReferenceGraph()
    graph.add_path([f"t|{evil}", "t|b"], [evil])
    page = render_html(log, log.trajectories, log.trajectories[0], graph, evil)
    assert page.lower().count("</script>") == 3  # the library, the data and the page's own script
    assert "<b>" not in page and "alert(1)</script>" not in page
