"""`proas credit` and `proas credit-demo` end to end, including bad input."""

import json
import subprocess
import sys

import pytest

from credit_helpers import path_traj
from proas.cli import main
from proas.credit import ReferenceGraph


def write_jsonl(path, trajs):
    path.write_text("".join(json.dumps(t.to_json()) + "\n" for t in trajs))


@pytest.fixture
def files(tmp_path):
    oracle = [path_traj("o", "o1", 1, ["A", "B", "C", "G"])]
    batch = [
        path_traj("g", "win", 1, ["A", "B", "X", "B", "C", "G"], errors={1}),
        path_traj("g", "lose", 0, ["A", "Y", "Y", "B"]),
    ]
    write_jsonl(tmp_path / "oracle.jsonl", oracle)
    write_jsonl(tmp_path / "in.jsonl", batch)
    return tmp_path


def read_rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_credit_writes_one_row_per_step_in_input_order(files, capsys):
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "out.jsonl"),
               "--build-from", str(files / "oracle.jsonl"), "--save-graph", str(files / "g.json")])
    assert rc == 0
    rows = read_rows(files / "out.jsonl")
    assert [(r["trajectory"], r["t"]) for r in rows] == [("win", t) for t in range(5)] + [("lose", t) for t in range(3)]
    win = rows[:5]
    # the error step is unreasonable; X -> B is no ARG edge (the loop through X was cut)
    assert [r["rea"] for r in win] == [1, 0, 0, 1, 1]
    assert [r["pa"] for r in win] == [1, 0, 0, 1, 1]
    assert [r["fd"] for r in win] == [2, 2, 1, 0, 0]
    # GRPO over step rows [1]*5 + [0]*3 (verl-agent's statistics): (1 - 5/8) / std
    std = (5 * (3 / 8) ** 2 + 3 * (5 / 8) ** 2) ** 0.5 / 7 ** 0.5
    assert win[0]["base_advantage"] == pytest.approx((3 / 8) / (std + 1e-6), rel=1e-6)
    assert win[1]["advantage"] == 0.0 and win[2]["advantage"] == 0.0
    lose = rows[5:]
    assert sum(r["advantage"] for r in lose) == pytest.approx(3 * lose[0]["base_advantage"], rel=1e-5)
    # the saved graph includes the input's successful trajectory (evolved)
    g = ReferenceGraph.load(files / "g.json")
    assert "X" not in g  # the loop through X was cut
    assert g.num_nodes == 4


def test_rea_and_group_stats_flags(files):
    out = files / "out.jsonl"
    args = ["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(out),
            "--build-from", str(files / "oracle.jsonl")]
    assert main(args + ["--rea", "node", "--group-stats", "trajectories"]) == 0
    win = read_rows(out)[:5]
    assert [r["rea"] for r in win] == [1, 0, 1, 1, 1]  # X -> B reaches a node: reasonable
    assert win[0]["base_advantage"] == pytest.approx(0.7071, abs=1e-3)  # GRPO over [1, 0]
    assert main(args + ["--rea", "state_action"]) == 0
    assert [r["rea"] for r in read_rows(out)[:5]] == [1, 0, 0, 1, 1]
    with pytest.raises(SystemExit):
        main(args + ["--rea", "edge"])


def test_group_stats_refused_for_an_estimator_without_groups(files, capsys):
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "out.jsonl"),
               "--estimator", "rloo", "--group-stats", "steps"])
    assert rc == 2
    assert "--group-stats does not apply to estimator 'rloo'" in capsys.readouterr().err


def test_static_graph_ignores_the_input(files):
    g = ReferenceGraph.from_trajectories([path_traj("o", "o1", 1, ["A", "B"])])
    g.save(files / "g.json")
    main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "out.jsonl"),
          "--graph", str(files / "g.json"), "--static", "--save-graph", str(files / "g2.json")])
    rows = read_rows(files / "out.jsonl")
    assert [r["rea"] for r in rows[:5]] == [1, 0, 0, 0, 0]  # only A -> B is known to the static graph
    assert ReferenceGraph.load(files / "g2.json").num_nodes == 2


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "in.jsonl:2: invalid JSON"),
        ('{"group": "g", "trajectory": "t", "steps": []}', "in.jsonl:2: missing field 'reward'"),
        (
            '{"group": "g", "trajectory": "t", "reward": "1", "steps": []}',
            "in.jsonl:2: field 'reward' must be a number",
        ),
        (
            '{"group": "g", "trajectory": "t", "reward": 1, '
            '"steps": [{"state": "a", "action": "x", "next_state": "b"}]}',
            "in.jsonl:2, step 0: missing field 'error'",
        ),
        ('{"group": 3, "trajectory": "t", "reward": 1, "steps": []}', "in.jsonl:2: field 'group' must be a string"),
    ],
)
def test_malformed_input_names_the_line_and_writes_nothing(files, capsys, line, message):
    good = (files / "in.jsonl").read_text().splitlines()[0]
    (files / "in.jsonl").write_text(good + "\n" + line + "\n")
    (files / "out.jsonl").write_text("previous output\n")
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "out.jsonl"),
               "--build-from", str(files / "oracle.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and err.count("\n") == 1
    assert (files / "out.jsonl").read_text() == "previous output\n"


def test_missing_and_corrupt_graph_files_are_clear_errors(files, capsys):
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "o.jsonl"),
               "--graph", str(files / "missing.json")])
    assert rc == 2 and "graph file not found" in capsys.readouterr().err
    (files / "bad.json").write_text("garbage")
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "o.jsonl"),
               "--graph", str(files / "bad.json")])
    assert rc == 2 and "corrupt graph file" in capsys.readouterr().err
    assert not (files / "o.jsonl").exists()


def test_bad_estimator_option_is_clear_error(files, capsys):
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "o.jsonl"),
               "--estimator", "gigpo", "--estimator-option", "gama=0.9"])
    assert rc == 2 and "gama" in capsys.readouterr().err


def test_gigpo_options_and_export(files):
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "o.jsonl"),
               "--build-from", str(files / "oracle.jsonl"), "--estimator", "gigpo",
               "--estimator-option", "mode=mean_std_norm", "--estimator-option", "gamma=0.9",
               "--export-graph", str(files / "g.dot")])
    assert rc == 0 and (files / "g.dot").read_text().startswith("digraph")


def test_demo_runs_as_a_command():
    out = subprocess.run([sys.executable, "-m", "proas", "credit-demo"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "rollout-0 (success" in out.stdout and "rollout-2 (failure" in out.stdout
    assert "ProAS A" in out.stdout


@pytest.mark.parametrize("name", ["g.json.gz", "g.json"])
def test_no_mutated_graph_file_escapes_as_a_traceback(files, capsys, name):
    import random

    ReferenceGraph.from_trajectories([path_traj("o", "o1", 1, ["A", "B", "C", "G"])]).save(files / name)
    raw = (files / name).read_bytes()
    rng = random.Random(15)
    outcomes = set()
    for _ in range(150):
        data = bytearray(raw)
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        (files / name).write_bytes(bytes(data))
        rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "o.jsonl"),
                   "--graph", str(files / name)])
        err = capsys.readouterr().err
        assert rc in (0, 2)
        if rc == 2:
            assert err.startswith("proas: error: ") and err.count("\n") == 1, err
        outcomes.add(rc)
    assert 2 in outcomes


def test_duplicate_trajectory_ids_are_refused_with_both_lines(files, capsys):
    lines = (files / "in.jsonl").read_text().splitlines()
    (files / "in.jsonl").write_text("\n".join([lines[0], lines[1], "", lines[0]]) + "\n")
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "o.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "in.jsonl:4:" in err and "'win'" in err and "repeats line 1" in err
    assert not (files / "o.jsonl").exists()
    # the same trajectory id in another group is a different trajectory
    other = json.loads(lines[0])
    other["group"] = "h"
    (files / "in.jsonl").write_text("\n".join([lines[0], lines[1], json.dumps(other)]) + "\n")
    assert main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "o.jsonl")]) == 0


@pytest.mark.parametrize(
    "outputs, message",
    [
        (["--out", "d"], "--out {d}: is a directory"),
        (["--out", "out.jsonl", "--save-graph", "d"], "--save-graph {d}: is a directory"),
        (["--out", "in.jsonl/x.jsonl"], "is not a directory"),
        (["--out", "out.jsonl", "--save-graph", "in.jsonl/g.json"], "is not a directory"),
        (["--out", "out.jsonl", "--export-graph", "d/g.txt"], "unknown export format 'txt'"),
        (["--out", "out.jsonl", "--save-graph", "out.jsonl"], "--out and --save-graph name the same file"),
    ],
)
def test_bad_output_paths_fail_before_any_write(files, capsys, outputs, message):
    (files / "d").mkdir()
    (files / "out.jsonl").write_text("previous output\n")
    args = [str(files / a) if not a.startswith("--") else a for a in outputs]
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--build-from", str(files / "oracle.jsonl"), *args])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert message.format(d=files / "d") in err
    assert (files / "out.jsonl").read_text() == "previous output\n"
    assert sorted(p.name for p in files.iterdir()) == ["d", "in.jsonl", "oracle.jsonl", "out.jsonl"]
    assert list((files / "d").iterdir()) == []


@pytest.mark.parametrize(("flag", "target", "source"), [
    ("--out", "in.jsonl", "--trajectories"), ("--out", "oracle.jsonl", "--build-from"),
    ("--save-graph", "in.jsonl", "--trajectories"), ("--export-graph", "g.json", "--graph"),
    ("--out", "g.json", "--graph")])
def test_an_output_that_names_an_input_is_refused_and_the_input_kept(files, capsys, flag, target, source):
    """*Found:* ``--out`` naming ``--trajectories`` replaced the trajectory log with the credit rows."""
    ReferenceGraph.from_trajectories([path_traj("o", "o1", 1, ["A", "B"])]).save(files / "g.json")
    graph = ["--graph", str(files / "g.json")] if source == "--graph" else ["--build-from", str(files / "oracle.jsonl")]
    before = {p.name: p.read_bytes() for p in files.iterdir()}
    outputs = {"--out": str(files / "out.jsonl"), flag: str(files / target)}
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), *graph, *(x for kv in outputs.items() for x in kv)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert f"{flag} names the input of {source}" in err
    assert {p.name: p.read_bytes() for p in files.iterdir()} == before


def test_save_graph_may_replace_the_graph_it_loaded(files):
    g = files / "g.json"
    ReferenceGraph.from_trajectories([path_traj("o", "o1", 1, ["A", "B"])]).save(g)
    assert main(["credit", "--trajectories", str(files / "in.jsonl"), "--graph", str(g), "--save-graph", str(g),
                 "--out", str(files / "out.jsonl")]) == 0
    assert ReferenceGraph.load(g).num_nodes > 2  # the input's success was merged into it


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs /proc")
def test_a_graph_that_cannot_be_written_leaves_the_other_outputs_untouched(files, capsys):
    (files / "out.jsonl").write_text("previous output\n")
    # /proc takes no new files, though (as root) it may pass the permission check
    rc = main(["credit", "--trajectories", str(files / "in.jsonl"), "--out", str(files / "out.jsonl"),
               "--export-graph", str(files / "g.dot"), "--save-graph", "/proc/proas-graph.json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "/proc/proas-graph.json" in err
    assert (files / "out.jsonl").read_text() == "previous output\n"
    assert not (files / "g.dot").exists()
    assert not [p for p in files.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("argv", [
    ["credit", "--trajectories", "{fifo}.jsonl", "--out", "{d}/out.jsonl"],
    ["credit", "--trajectories", "{d}/in.jsonl", "--build-from", "{fifo}.jsonl", "--out", "{d}/out.jsonl"],
    ["credit", "--trajectories", "{d}/in.jsonl", "--graph", "{fifo}.json.gz", "--out", "{d}/out.jsonl"],
    ["verl", "build-graph", "--env", "household", "--variant", "distill", "--from", "{fifo}.jsonl",
     "--out", "{d}/g.json.gz"],
    ["verl", "build-graph", "--env", "household", "--variant", "distill", "--from", "{fifo}.json.gz",
     "--out", "{d}/g.json.gz"],
], ids=["trajectories", "build-from", "graph", "distill-jsonl", "distill-graph"])
def test_an_input_that_is_a_fifo_is_refused_in_one_line_without_blocking(files, capsys, argv):
    """*Found:* a FIFO named as an input (a trajectory log, a graph) blocked ``proas credit`` and
    ``proas verl build-graph`` for ever in ``open``."""
    import os
    import signal

    fifo = files / "pipe"
    for suffix in (".jsonl", ".json.gz"):
        os.mkfifo(f"{fifo}{suffix}")
    old = signal.signal(signal.SIGALRM, lambda *_: pytest.fail("blocked on the FIFO"))
    signal.alarm(10)
    try:
        rc = main([a.format(fifo=fifo, d=files) for a in argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"{fifo}." in err, err
    assert "is a FIFO; a file read as data must be a regular file" in err, err
    assert not (files / "out.jsonl").exists() and not (files / "g.json.gz").exists()


def test_credit_counts_its_output_in_words_that_agree_with_the_numbers(tmp_path, capsys):
    write_jsonl(tmp_path / "one.jsonl", [path_traj("g", "only", 1, ["A", "B"])])
    assert main(["credit", "--trajectories", str(tmp_path / "one.jsonl"), "--out", str(tmp_path / "o.jsonl")]) == 0
    assert "wrote 1 step of 1 trajectory to " in capsys.readouterr().out
    write_jsonl(tmp_path / "two.jsonl", [path_traj("g", "a", 1, ["A", "B", "C"]), path_traj("g", "b", 0, ["A", "C"])])
    assert main(["credit", "--trajectories", str(tmp_path / "two.jsonl"), "--out", str(tmp_path / "o2.jsonl")]) == 0
    assert "wrote 3 steps of 2 trajectories to " in capsys.readouterr().out
