"""The ESR, FD and stats probes: hand-worked outcomes with a scripted policy on the toy env, FD
values against the credit layer's reference annotation, the CLI's tables and plots."""

import csv
import json
import re

import numpy as np
import pytest
import torch

from proas.cli import main as proas_main
from proas.credit import ReferenceGraph, annotate_loop
from proas.errors import ProasError
from proas.policies.base import Decision, Policy
from proas.probes.esr import esr_probe, inject_unreasonable, summarise_esr
from proas.probes.fd import choose_points, fd_bins, fd_probe, oracle_graph
from proas.probes.snapshot import Snapshot, restore
from proas.probes.stats import run_stats
from proas.types import Step, Trajectory
from toy_env import make_env

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=12", "env.options.n_train=32",
       "env.options.n_valid=16", "train.progress=false"]


class Fragile(Policy):
    """Solves every toy task, unless its context holds a rejected action ("Nothing happens."),
    after which it only wanders (never drops the item): clean context -> ESR 1, polluted -> 0."""

    kind = "scripted"

    def __init__(self):
        self.module = torch.nn.Linear(1, 1)
        self.seen = []

    def _one(self, ctx):
        self.seen.append(ctx)
        gos = [a for a in ctx.admissible if a.startswith("go to ")]
        polluted = ctx.observation == "Nothing happens." or any(o == "Nothing happens." for o, _ in ctx.history)
        if polluted:
            return gos[0]
        dst = re.search(r"on the (\w+)\.", ctx.task).group(1)
        for a in ctx.admissible:
            if a.startswith("take "):
                return a
        if any(a.startswith("drop ") for a in ctx.admissible):
            return next((a for a in ctx.admissible if a.startswith("drop ")), None) if f"go to {dst}" not in gos \
                else f"go to {dst}"
        visited = {a for _, a in ctx.history}
        return next(a for a in gos if a != f"go to {dst}" and a not in visited)

    def act(self, contexts, rng, temperature=1.0):
        return [Decision(action=(a := self._one(c)), response=a, malformed=False, logp=0.0) for c in contexts]

    def evaluate(self, batch, module=None):  # pragma: no cover - never trained
        raise NotImplementedError


def _make():
    return make_env(n_places=4, max_steps=12)


def test_injected_actions_are_rejected_and_keep_the_state():
    env = _make()
    snap = inject_unreasonable(env, Snapshot("valid-001"), 3, np.random.default_rng(0))
    assert len(snap.actions) == 3 and all(a.startswith("take ") for a in snap.actions)
    r = restore(env, snap)
    assert r.errors == [True, True, True] and r.info["abstract_state"] == "fetch|search|other"
    # holding the item at the source, the toy env has nothing to reject: a clear error
    held = Snapshot("valid-001", tuple(env.oracle("valid-001")[:2]))
    with pytest.raises(ProasError, match="no rejected action"):
        inject_unreasonable(env, held, 1, np.random.default_rng(0))


def test_esr_probe_hand_worked_with_a_fragile_policy():
    pol = Fragile()
    rows = esr_probe(pol, _make, ["valid-000", "valid-001", "valid-002"], env_name="toy", max_steps=12, n=5,
                     ks=(0, 2, 4), cut=0.0, seed=0)
    assert [(r["task_id"], r["k"]) for r in rows] == [(t, k) for t in ("valid-000", "valid-001", "valid-002")
                                                      for k in (0, 2, 4)]
    for r in rows:
        assert r["esr_clean"] == 1.0 and r["same_state"] and r["budget"] == 12 - r["k"]
        assert r["esr_injected"] == (1.0 if r["k"] == 0 else 0.0)
        assert r["steps_injected"] == (r["steps_clean"] if r["k"] == 0 else r["budget"])
    assert summarise_esr(rows)[1] == {"k": 2, "tasks": 3, "esr_clean": 1.0, "esr_injected": 0.0, "drop": 1.0,
                                      "se_clean": 0.0, "se_injected": 0.0}
    # the continuations saw the injected segment in their history: K errors, then the policy's steps
    polluted = [c for c in pol.seen if len(c.history) == 4 and all(a.startswith("take ") for _, a in c.history)]
    assert polluted


def test_choose_points_and_bins_hand_worked():
    fd = [5, 5, 4, 3, 3, 3, 2, 1, 1, 0]
    assert choose_points(fd, 10) == [0, 2, 3, 6, 7, 9]  # first step of every distinct FD value
    assert choose_points(fd, 3) == [0, 3, 9]  # FD 5, 3 (middle of 5..0), 0
    assert choose_points(fd, 1) == [0]
    rows = [{"fd": f, "esr": e} for f, e in [(1, 0.0), (9, 0.5), (4, 0.1), (12, 0.7)]]
    assert fd_bins(rows, bins=2) == [
        {"fd_low": 1, "fd_high": 4, "fd_mean": 2.5, "points": 2, "esr": 0.05},
        {"fd_low": 9, "fd_high": 12, "fd_mean": 10.5, "points": 2, "esr": 0.6}]


class Recorder(Policy):
    """Uniform over the scorer's candidate list (kind ``scorer``: the sampler hides the forbidden
    action from it); records every context it is shown."""

    kind = "scorer"

    def __init__(self):
        self.module = torch.nn.Linear(1, 1)
        self.seen = []

    def act(self, contexts, rng, temperature=1.0):
        out = []
        for c in contexts:
            self.seen.append(c)
            cands = list(c.admissible) + list(c.invalid_candidates)
            a = cands[int(rng.integers(len(cands)))]
            out.append(Decision(action=a, response=a, malformed=False, logp=0.0, data={}))
        return out

    def evaluate(self, batch, module=None):  # pragma: no cover
        raise NotImplementedError


def test_fd_probe_points_match_the_credit_annotation_and_forbid_the_action():
    env = _make()
    graph = oracle_graph(env, env.task_ids("train"), 12)
    pol = Recorder()
    failed = []
    rows, counts = fd_probe(pol, _make, ["valid-000", "valid-001", "valid-002", "valid-003"], graph, env_name="toy",
                            max_steps=12, n=6, rollouts=3, points=3, seed=1, keep_failed=failed)
    assert counts["episodes"] == 12 and counts["failed"] == len(failed) >= 1 and counts["points"] == len(rows) > 0
    assert all(not t.success for t in failed)
    by_id = {t.trajectory: t for t in failed}
    for r in rows:
        traj = by_id[r["trajectory"]]
        ann = annotate_loop([traj], graph)
        assert r["fd"] == ann.fd[r["t"]] and r["pa"] == ann.pa[r["t"]]
        assert r["action"] == traj.steps[r["t"]].action and r["length"] == len(traj)
        assert r["forbid_failed"] == 0 and 0.0 <= r["esr"] <= 1.0
        # the n continuations started from the exact prefix, without the forbidden action on offer
        prefix = [s.action for s in traj.steps[: r["t"]]]
        starts = [c for c in pol.seen if [a for _, a in c.history] == prefix and c.task == traj.steps[0].extra[
            "context"].task]
        hidden = [c for c in starts if r["action"] not in list(c.admissible) + list(c.invalid_candidates)]
        assert len(hidden) >= 6
    # points per trajectory: at most 3, with distinct FD values, the largest FD first
    for tid in by_id:
        fds = [r["fd"] for r in rows if r["trajectory"] == tid]
        if fds:
            assert len(fds) <= 3 and fds == sorted(set(fds), reverse=True)
            assert fds[0] == annotate_loop([by_id[tid]], graph).fd[0]
    # the annotation itself, hand-worked: an error step and a revisit are NA
    steps = [Step("s0", "a", "s1"), Step("s1", "b", "s1", error=True), Step("s1", "c", "s0"), Step("s0", "d", "x")]
    g = ReferenceGraph.from_trajectories([Trajectory("g", "t", 1.0, [Step("s0", "a", "s1"), Step("s1", "e", "s2")])])
    assert list(annotate_loop([Trajectory("g", "u", 0.0, steps)], g).fd) == [3, 3, 2, 1]
    assert choose_points([3, 3, 2, 1], 4) == [0, 2, 3]


def test_fd_probe_refuses_an_empty_graph_before_any_rollout(tmp_path, capsys):
    """*Found:* against an empty graph (no edges: built from no success) every step is
    unreasonable, so FD is only the steps left and the table meaningless; it printed numbers.
    *Decision:* refused, in one line, before the policy plays."""
    pol = Recorder()
    no_success = ReferenceGraph.from_trajectories([Trajectory("g", "t", 0.0, [Step("a", "x", "b")])])
    for graph in (ReferenceGraph(), no_success):
        with pytest.raises(ProasError, match="reference graph is empty") as info:
            fd_probe(pol, _make, ["valid-000"], graph, env_name="toy", max_steps=12, n=2, rollouts=2, points=2)
        assert "\n" not in str(info.value)
    assert pol.seen == []  # refused before any episode
    assert proas_main(["direct", *TOY, "--save", str(tmp_path / "d"), "--json"]) == 0
    ReferenceGraph().save(tmp_path / "empty.json")
    capsys.readouterr()
    assert proas_main(["probe", "fd", str(tmp_path / "d"), "--out", str(tmp_path / "fd"), "--tasks", "1", "--n", "2",
                       "--graph", str(tmp_path / "empty.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proas: error: fd probe: the reference graph is empty") and err.count("\n") == 1, err
    assert not (tmp_path / "fd").exists()


def test_probe_cli_writes_tables_and_plots(tmp_path, capsys):
    assert proas_main(["direct", *TOY, "--save", str(tmp_path / "d"), "--json"]) == 0
    capsys.readouterr()
    assert proas_main(["probe", "esr", str(tmp_path / "d"), "--out", str(tmp_path / "esr"), "--tasks", "2", "--n", "4",
                       "--k", "1", "--k", "2", "--cut", "0"]) == 0
    rows = list(csv.DictReader((tmp_path / "esr" / "esr.csv").read_text().splitlines()))
    assert [(r["task_id"], r["k"]) for r in rows] == [("valid-000", "1"), ("valid-000", "2"), ("valid-015", "1"),
                                                      ("valid-015", "2")]  # spread over the set
    assert (tmp_path / "esr" / "esr.md").read_text().startswith("| task_id |")
    assert (tmp_path / "esr" / "esr.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((tmp_path / "esr" / "esr.json").read_text())["summary"]
    assert [s["k"] for s in summary] == [1, 2]
    assert proas_main(["probe", "fd", str(tmp_path / "d"), "--out", str(tmp_path / "fd"), "--tasks", "3", "--n", "4",
                       "--points", "2"]) == 0
    fd_rows = list(csv.DictReader((tmp_path / "fd" / "fd.csv").read_text().splitlines()))
    assert fd_rows and all(0 <= float(r["esr"]) <= 1 for r in fd_rows)
    assert (tmp_path / "fd" / "fd.png").read_bytes()[:4] == b"\x89PNG"
    # bad input: one line, exit 2
    assert proas_main(["probe", "esr", str(tmp_path / "nope"), "--out", str(tmp_path / "x")]) == 2
    with pytest.raises(SystemExit) as stop:  # refused as the command line is parsed
        proas_main(["probe", "esr", str(tmp_path / "d"), "--out", str(tmp_path / "x"), "--n", "0"])
    assert stop.value.code == 2
    assert "error" in capsys.readouterr().err


def test_a_failed_probe_leaves_no_out_and_a_bad_out_fails_first(tmp_path, capsys, monkeypatch):
    """*Found:* ``probe esr`` and ``fd`` made ``--out`` before the work, so a probe that failed
    (a missing ``--graph``, no point to probe) left an empty folder; a ``--out`` that is a file
    was found only after the whole computation (``probe stats``) or as "File exists"."""
    import proas.baselines.common as common

    assert proas_main(["direct", *TOY, "--save", str(tmp_path / "d"), "--json"]) == 0
    capsys.readouterr()
    assert proas_main(["probe", "fd", str(tmp_path / "d"), "--out", str(tmp_path / "fd"), "--tasks", "1", "--n", "2",
                       "--graph", str(tmp_path / "missing.json")]) == 2
    assert "graph file not found" in capsys.readouterr().err and not (tmp_path / "fd").exists()
    assert proas_main(["probe", "esr", str(tmp_path / "d"), "--out", str(tmp_path / "esr"), "--tasks", "1", "--n", "2",
                       "--cut", "0.99"]) == 2  # the toy env's walkthroughs are won, or refuse no action, by then
    err = capsys.readouterr().err
    assert err.startswith("proas: error: ") and err.count("\n") == 1 and not (tmp_path / "esr").exists(), err
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    monkeypatch.setattr(common, "load_policy", lambda *a: pytest.fail("loaded the policy before checking --out"))
    for command in (["probe", "esr", str(tmp_path / "d")], ["probe", "fd", str(tmp_path / "d")],
                    ["probe", "stats", str(tmp_path / "d")]):
        for out in (blocker, blocker / "sub"):
            assert proas_main([*command, "--out", str(out)]) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"proas: error: --out {out}: ") and err.count("\n") == 1, err
    assert blocker.read_text() == "x"


def test_stats_from_training_metrics_and_from_checkpoints(tmp_path, capsys):
    from proas.train.config import build_config
    from proas.train.loop import train

    # no rollout log: the stats come from the per-step training metrics
    train(build_config(TOY + ["train.steps=3", "env.tasks_per_step=4", "env.group_size=4", "train.val_every=3",
                              "env.fixed_val_set.size=4", "train.rollout_log_every=0"]), run_dir=tmp_path / "rl")
    metrics = [json.loads(x) for x in (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()]
    rows = run_stats(tmp_path / "rl")
    assert [r["step"] for r in rows] == [1, 2, 3] and {r["source"] for r in rows} == {"metrics"}
    assert [r["na_in_failure"] for r in rows] == [m.get("train/na_in_failure") for m in metrics[1:]]
    # a run directory without training metrics (SFT, Direct): fresh rollouts of its checkpoint
    assert proas_main(["direct", *TOY, "--save", str(tmp_path / "d"), "--json"]) == 0
    rows = run_stats(tmp_path / "d", tasks=4, group=2)
    assert len(rows) == 1 and rows[0]["source"] == "rollouts" and rows[0]["checkpoint"] == "best"
    assert rows[0]["na_in_failure"] is not None and 0.0 < rows[0]["na_in_failure"] <= 1.0
    assert proas_main(["probe", "stats", str(tmp_path / "rl"), str(tmp_path / "d"), "--out", str(tmp_path / "st"),
                       "--tasks", "4", "--group", "2"]) == 0
    table = list(csv.DictReader((tmp_path / "st" / "stats.csv").read_text().splitlines()))
    assert [r["run"] for r in table] == ["rl", "rl", "rl", "d"]
    assert (tmp_path / "st" / "stats.png").read_bytes()[:4] == b"\x89PNG"
    assert proas_main(["probe", "stats", str(tmp_path / "missing"), "--out", str(tmp_path / "st2")]) == 2


def test_stats_refuse_a_checkpoints_empty_graph_before_any_rollout(tmp_path, capsys, monkeypatch):
    """*Found:* a checkpoint whose saved graph has no edges (a run that had seen no success by
    then) had its fresh rollouts annotated against it: every step unreasonable and non-advancing,
    so both shares were drawn at 100%, a number that measures nothing. *Decision:* refused, in
    one line, before the policy plays (as ``probe fd``)."""
    import proas.train.rollout as rollout_mod
    from proas.train import checkpoint as ckpt

    assert proas_main(["direct", *TOY, "--save", str(tmp_path / "d"), "--json"]) == 0
    capsys.readouterr()
    ReferenceGraph().save(tmp_path / "d" / "best" / ckpt.GRAPH_FILE)
    monkeypatch.setattr(rollout_mod, "rollout", lambda *a, **k: pytest.fail("played before refusing the graph"))
    with pytest.raises(ProasError, match="reference graph of .* is empty") as info:
        run_stats(tmp_path / "d", tasks=4, group=2)
    assert "\n" not in str(info.value)
    assert proas_main(["probe", "stats", str(tmp_path / "d"), "--out", str(tmp_path / "st"),
                       "--tasks", "4", "--group", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("proas: error: stats probe: the reference graph of ") and err.count("\n") == 1, err
    assert not (tmp_path / "st").exists()


@pytest.mark.parametrize("value", ["NaN", "Infinity", '"0.5"', "true", "7", "-0.25"])
def test_stats_refuse_a_share_in_the_metrics_that_is_not_a_share(tmp_path, capsys, value):
    """The trainer writes a share as null or a number in [0, 1]. *Found:* a NaN or a string was
    drawn as a gap, 7 as a point off the scale, and the command exited 0."""
    run = tmp_path / "run"
    run.mkdir()
    good = '{"step": 1, "train/unreasonable_in_success": null, "train/na_in_failure": 0.5, "train/sr": 0.25}\n'
    (run / "metrics.jsonl").write_text(good)
    assert [r["na_in_failure"] for r in run_stats(run)] == [0.5]
    (run / "metrics.jsonl").write_text(good + f'{{"step": 2, "train/na_in_failure": {value}, "train/sr": 0.5}}\n')
    assert proas_main(["probe", "stats", str(run), "--out", str(tmp_path / "st")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"proas: error: {run / 'metrics.jsonl'}: step 2: train/na_in_failure is ") and \
        err.count("\n") == 1, err
    assert not (tmp_path / "st").exists()


def test_stats_prefer_the_rollout_log_hand_worked(tmp_path):
    from proas.credit import compute_credit
    from proas.rollout_log import write_rollouts

    graph = ReferenceGraph.from_trajectories(
        [Trajectory("o", "o", 1.0, [Step("s0", "a", "s1"), Step("s1", "b", "s2")])]
    )
    won = Trajectory("g", "w", 1.0, [Step("s0", "a", "s1"), Step("s1", "x", "s1", error=True), Step("s1", "b", "s2")],
                     won=True)
    lost = Trajectory("g", "l", 0.0, [Step("s0", "a", "s1"), Step("s1", "c", "s0"), Step("s0", "d", "zz")], won=False)
    lost2 = Trajectory("g", "m", 0.0, [Step("s0", "a", "s1"), Step("s1", "b", "s2")], won=False)
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "train/na_in_failure": 0.5}\n')
    for step, batch in ((1, [won, lost]), (3, [lost2, lost])):
        res = compute_credit(batch, graph.copy(), estimator="grpo", shaping="proas", evolve=False)
        write_rollouts(tmp_path, step, batch, res)
    rows = run_stats(tmp_path)
    # step 1: the win has 1 unreasonable step of 3; the loss has PA = [1, 0, 0] (a revisit, an
    # unknown state): 2 NA of 3.  Step 3: no win; NA = 0 of 2 and 2 of 3 -> 2 of 5
    assert [(r["step"], r["source"]) for r in rows] == [(1, "rollout_log"), (3, "rollout_log")]
    assert rows[0]["unreasonable_in_success"] == pytest.approx(1 / 3)
    assert rows[0]["na_in_failure"] == pytest.approx(2 / 3) and rows[0]["train_sr"] == 0.5
    assert rows[1]["unreasonable_in_success"] is None and rows[1]["na_in_failure"] == pytest.approx(2 / 5)


class Sampler(Policy):
    """Not a candidate scorer: the sampler must re-sample it to forbid an action."""

    kind = "other"

    def __init__(self, stubborn=None):
        self.module = torch.nn.Linear(1, 1)
        self.stubborn = stubborn
        self.first = []

    def act(self, contexts, rng, temperature=1.0):
        out = []
        for c in contexts:
            a = self.stubborn or c.admissible[int(rng.integers(len(c.admissible)))]
            if c.step == 1:
                self.first.append(a)
            out.append(Decision(action=a, response=a, malformed=False, logp=0.0))
        return out

    def evaluate(self, batch, module=None):  # pragma: no cover
        raise NotImplementedError


def test_forbidding_by_resampling_for_policies_without_candidates():
    from proas.probes.sampler import continue_episodes
    from proas.probes.snapshot import restore_many

    envs = [_make() for _ in range(20)]
    snap = Snapshot("valid-002", ("go to shelf",))
    pol = Sampler()
    res = continue_episodes(pol, restore_many(envs, snap), np.random.default_rng(0), env_name="toy", budget=1,
                            forbid="go to desk")
    assert res.forbid_failed == 0 and "go to desk" in pol.first  # proposed, re-sampled, never executed
    assert all(e.at != "desk" for e in envs) and len({e.at for e in envs}) > 1
    stubborn = Sampler(stubborn="go to desk")
    res = continue_episodes(stubborn, restore_many(envs[:5], snap), np.random.default_rng(0), env_name="toy",
                            budget=2, forbid="go to desk")
    assert res.forbid_failed == 5 and res.steps == [2] * 5
