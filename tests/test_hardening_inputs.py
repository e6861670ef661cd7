"""Hostile inputs get one line and exit 2, with nothing written (issue #27, items 10 and 11).

Task-set manifests of wrong types or deep nesting, schedules that repeat a task within a step,
config overrides with YAML tags, anchors, aliases, interpolations or control characters,
trajectories whose reward is null, huge or deeply nested, a full disk or a read-only run
directory, and terminal text in the lines commands print.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proas import cli, tasksets
from proas.errors import ProasError

TRAIN = [f"t{i:03d}" for i in range(40)]
VAL = ["v0", "v1", "v2", "v3"]


def _one_line_refusal(capsys, argv) -> str:
    """Run ``proas ARGV``; it must exit 2 with exactly one line on stderr; return that line."""
    rc = cli.main(argv)
    out = capsys.readouterr()
    assert rc == 2, out
    assert out.err.count("\n") == 1 and out.err.startswith("proas: error: "), out.err
    return out.err


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ task sets


def _make(root: Path, **kw) -> Path:
    args = dict(env="toy", train_ids=TRAIN, seed=0, steps=6, per_step=8, root=root, val_ids=VAL, source="test")
    args.update(kw)
    return tasksets.make_schedule(**args)


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A data root with the toy schedule, made once (writes fsync); examples work on copies."""
    root = tmp_path_factory.mktemp("taskset")
    _make(root)
    return root


def _copy(template: Path, tmp: str) -> Path:
    shutil.copytree(template, tmp, dirs_exist_ok=True)
    return Path(tmp) / "fixed_train_set" / "seed0" / "toy"


def _rewrite_schedule(sched: Path, steps: list[list[str]]) -> None:
    """Write ``steps`` as the schedule and record its new hash, so only the content is wrong."""
    text = "".join(json.dumps({"step": k, "tasks": b}) + "\n" for k, b in enumerate(steps))
    (sched / "schedule.jsonl").write_text(text)
    man = json.loads((sched / "manifest.json").read_text())
    man["files"]["schedule.jsonl"] = hashlib.sha256(text.encode()).hexdigest()
    (sched / "manifest.json").write_text(json.dumps(man))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_schedule_that_repeats_a_task_within_a_step_is_refused(template, data):
    with tempfile.TemporaryDirectory() as tmp:
        sched = _copy(template, tmp)
        steps = tasksets.load_schedule(sched).steps
        k = data.draw(st.integers(0, len(steps) - 1))
        i, j = data.draw(st.lists(st.integers(0, 7), min_size=2, max_size=2, unique=True))
        steps[k][j] = steps[k][i]
        _rewrite_schedule(sched, steps)
        with pytest.raises(ProasError, match=f"step {k} holds task {steps[k][i]!r} more than once") as info:
            tasksets.load_schedule(sched)
        assert "\n" not in str(info.value)


def test_schedule_verify_fails_on_a_repeated_task_in_one_line(tmp_path, capsys):
    sched = _make(tmp_path)
    steps = tasksets.load_schedule(sched).steps
    steps[3][5] = steps[3][0]
    _rewrite_schedule(sched, steps)
    err = _one_line_refusal(capsys, ["schedule", "verify", str(sched)])
    assert "step 3 holds task" in err


def test_a_pool_smaller_than_a_step_may_repeat_a_task_within_a_step(tmp_path):
    sched = tasksets.load_schedule(_make(tmp_path, train_ids=TRAIN[:3], per_step=8))
    assert all(len(b) == 8 and len(set(b)) == 3 for b in sched.steps)


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)
_FIELD_TYPES = {**tasksets._MANIFEST_FIELDS}


def _type_ok(value, kind) -> bool:
    if kind is int:
        return type(value) is int and value >= 0
    return isinstance(value, kind)


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(sorted(_FIELD_TYPES) + ["val_set.path", "val_set.sha256", "val_set.size",
                                                     "files.name", "files.digest"]),
       value=_JSON)
def test_a_manifest_field_of_any_value_loads_or_is_refused_in_one_line(template, field, value):
    with tempfile.TemporaryDirectory() as tmp:
        sched = _copy(template, tmp)
        man = json.loads((sched / "manifest.json").read_text())
        if field == "files.name":
            man["files"] = {str(value): man["files"]["schedule.jsonl"], **man["files"]}
        elif field == "files.digest":
            man["files"]["schedule.jsonl"] = value
        elif field.startswith("val_set."):
            man["val_set"][field.split(".")[1]] = value
        else:
            man[field] = value
        (sched / "manifest.json").write_text(json.dumps(man))
        try:
            tasksets.load_schedule(sched)
        except ProasError as exc:
            error = str(exc)
            assert "\n" not in error
        else:
            error = None
        kind = _FIELD_TYPES.get(field) or tasksets._VAL_RECORD_FIELDS.get(field.partition(".")[2])
        if kind is not None and not _type_ok(value, kind):
            assert error is not None and repr(field.rpartition(".")[2]) in error


def test_schedule_verify_refuses_a_manifest_field_of_the_wrong_type_in_one_line(tmp_path, capsys):
    sched = _make(tmp_path)
    man = json.loads((sched / "manifest.json").read_text())
    man["seed"] = "zero"
    (sched / "manifest.json").write_text(json.dumps(man))
    before = _files(tmp_path)
    assert "field 'seed' must be an integer >= 0, got str" in _one_line_refusal(capsys, ["schedule", "verify",
                                                                                         str(sched)])
    assert _files(tmp_path) == before


@pytest.mark.parametrize("where", ["manifest", "val manifest", "schedule", "val set"])
@pytest.mark.parametrize("bad", ["deep", "digits"])
def test_deep_nesting_and_huge_numbers_in_task_set_files_are_one_line(tmp_path, capsys, where, bad):
    sched = _make(tmp_path)
    blob = "[" * 100_000 + "]" * 100_000 if bad == "deep" else "9" * 5000
    target = {"manifest": sched / "manifest.json", "val manifest": tmp_path / "fixed_val_set" / "toy.manifest.json",
              "schedule": sched / "schedule.jsonl", "val set": tmp_path / "fixed_val_set" / "toy.jsonl"}[where]
    if where.endswith("manifest"):
        man = json.loads(target.read_text())
        target.write_text(json.dumps(man)[:-1] + f', "note": {blob}}}')
    else:
        target.write_text(target.read_text() + f'{{"step": {blob}}}\n')
        owner = target.parent / ("manifest.json" if where == "schedule" else "toy.manifest.json")
        man = json.loads(owner.read_text())
        man["files"][target.name] = hashlib.sha256(target.read_bytes()).hexdigest()
        owner.write_text(json.dumps(man))
    before = _files(tmp_path)
    _one_line_refusal(capsys, ["schedule", "verify", str(sched)])
    assert _files(tmp_path) == before


# ------------------------------------------------------------------ terminal text in printed lines

#: text an attacker can put in an id, a path or a log: escape sequences, C1 controls, bidi
#: overrides and isolates, carriage returns, line and paragraph separators
_HOSTILE = st.lists(st.sampled_from(list("ab.-_ ") + ["\x1b", "\x1b[2J", "\x1b]0;t\x07", "\x9b", "\r", "\n",
                                                       "\x00", "\x7f", "\u202e", "\u2066", "\u2028", "\u200f",
                                                       "\t", "\ud800", "\udfff"]),
                    min_size=1, max_size=6).map("".join)
#: a file name can hold all of that but NUL and lone surrogates (no file system encodes them)
_HOSTILE_NAME = _HOSTILE.map(lambda s: "".join(c for c in s if c != "\x00" and not "\ud800" <= c <= "\udfff"))
_HOSTILE_NAME = _HOSTILE_NAME.filter(bool)


def _clean_line(text: str) -> bool:
    from proas.termtext import _unsafe

    return text.endswith("\n") and text.count("\n") == 1 and not any(_unsafe(ch) for ch in text[:-1])


@settings(max_examples=12, deadline=None)
@given(task=_HOSTILE, trajectory=_HOSTILE, name=_HOSTILE_NAME)
def test_inspect_prints_its_wrote_line_without_terminal_control(task, trajectory, name):
    from types import SimpleNamespace

    import numpy as np

    from proas.credit import ReferenceGraph
    from proas.rollout_log import write_rollouts
    from proas.types import Step, Trajectory

    step = Step(state=f"s{task}", action=f"go{trajectory}", next_state="b", error=False)
    traj = Trajectory(group=task, trajectory=trajectory, reward=1.0, steps=[step], extra={"task_id": task})
    credit = SimpleNamespace(offsets=np.array([0, 1]), rea=np.array([1]), pa=np.array([1]), fd=np.array([0]),
                             base_advantage=np.array([0.5]), advantage=np.array([0.5]),
                             uniform=np.array([True]), traj_advantage=np.array([0.5]))
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        write_rollouts(run, 1, [traj], credit)
        graph = Path(tmp) / f"g{name}.json"
        ReferenceGraph.from_trajectories([traj]).save(graph)
        page = Path(tmp) / f"{name}.html"
        import contextlib
        import io

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(["inspect", str(run), "--html", str(page), "--graph", str(graph)])
        assert rc == 0, err.getvalue()
        assert page.is_file()
        line = out.getvalue()
        assert line.startswith("wrote ") and _clean_line(line), repr(line)


@settings(max_examples=20, deadline=None)
@given(name=_HOSTILE_NAME)
def test_an_error_line_never_carries_terminal_control(name):
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = cli.main(["schedule", "verify", f"/nonexistent/{name}"])
    assert rc == 2 and _clean_line(err.getvalue()), repr(err.getvalue())


# ------------------------------------------------------------------ config overrides

#: what makes a value more than a plain value, each in a form YAML or OmegaConf would act on
_CONSTRUCTS = st.sampled_from([
    "!!python/name:os.system", "!!python/object/apply:os.system [ls]", "!!int 3", "!!str x", "!x y", "! y",
    "!<tag:yaml.org,2002:str> y", "&a y", "*a", "${oc.env:HOME}", "${train.out_dir}", "'${x}'", '"${x}"',
    '"\\x24{x}"', "\\${x}", "pre${x}post",
])
#: where in the value the construct sits: alone, in a list, as a mapping's value or key
_SPOTS = st.sampled_from(["{c}", "[1, {c}]", "[{c}]", "{{k: {c}}}", "{{k: [{c}]}}", "{{{c}: 1}}"])
_KEYS = st.sampled_from(["train.run_name", "seed", "env.options", "train.final_val_temperatures",
                         "policy.lm.model_path", "algo.graph.path", "env.options.n_train"])


@settings(max_examples=150, deadline=None)
@given(key=_KEYS, spot=_SPOTS, construct=_CONSTRUCTS)
def test_an_override_with_a_yaml_tag_anchor_alias_or_interpolation_is_refused(key, spot, construct):
    from proas.train.overrides import check_override

    with pytest.raises(ProasError, match="overrides take plain values") as info:
        check_override(key, spot.format(c=construct))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["!!python/name:os.system", "{k: &a 1, j: *a}", "[1, *x]", "${oc.env:HOME}",
                                   '"\\x24{train.out_dir}"', "{k: !x v}"])
def test_build_config_refuses_each_kind_of_construct(value):
    from proas.train.config import build_config

    with pytest.raises(ProasError, match="overrides take plain values"):
        build_config([f"env.options.k={value}"])


@pytest.mark.parametrize("value", ["=", "[=]", "{k: =}"])
def test_an_override_whose_value_resolves_to_a_tag_no_safe_constructor_builds_is_refused(value):
    # hypothesis found it: "=" carries no tag, but YAML 1.1 resolves it to tag:yaml.org,2002:value
    from proas.train.config import build_config

    with pytest.raises(ProasError, match="its value is not a YAML value") as info:
        build_config([f"env.options.k={value}"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("value", ["--- y", "---", "--- !!str y", "%TAG ! x"])
def test_an_override_with_a_yaml_document_marker_or_directive_is_refused(value):
    from proas.train.config import build_config

    with pytest.raises(ProasError, match="overrides take plain values"):
        build_config([f"train.run_name={value}"])


_CONTROLS = st.sampled_from(["\x00", "\x07", "\t", "\n", "\r", "\x1b", "\x1b[31m", "\x7f", "\x85", "\x9b",
                             "\u2028", "\u2029", "\u202e", "\u2066", "\u200f", '"\\e"', '"\\x07"', '"\\N"'])


@settings(max_examples=150, deadline=None)
@given(key=_KEYS, before=st.text("ab1 ", max_size=3), control=_CONTROLS, after=st.text("ab1 ", max_size=3),
       in_key=st.booleans())
def test_an_override_with_a_control_character_is_refused(key, before, control, after, in_key):
    from proas.train.overrides import check_override

    if control.startswith('"'):  # a YAML escape: only a whole double-quoted value decodes it
        value = control
    elif in_key:
        key, value = f"{before}{key}{control}{after}", "x"
    else:
        value = f"{before}{control}{after}"
    with pytest.raises(ProasError) as info:
        check_override(key, value)
    message = str(info.value)
    assert "\n" not in message and "\x1b" not in message
    assert "control, separator, bidirectional or undecodable character" in message


@pytest.mark.parametrize("item", ["train.run_name=a\x1bb", "seed\t=1", "env.options.k=\u202ex", "env.name=a\nb",
                                  'train.run_name="a\\eb"'])
def test_build_config_refuses_a_control_character(item):
    from proas.train.config import build_config

    with pytest.raises(ProasError, match="control, separator, bidirectional or undecodable character"):
        build_config([item])


@pytest.mark.parametrize("key", ["[", "[["])
def test_an_override_key_omegaconf_cannot_split_is_one_line(key):
    # hypothesis found `[=` below: omegaconf's dotlist parser raised a bare IndexError
    from proas.train.config import build_config

    with pytest.raises(ProasError, match="a key is not a dotted config path") as err:
        build_config([f"{key}=1"])
    assert "\n" not in str(err.value)


@settings(max_examples=50, deadline=None)
@given(key=_KEYS | st.text(max_size=8),
       value=st.text(max_size=14) | st.text(st.sampled_from(list("!&*${}[]:,'\"\\ #%-|>?@`a1.")), max_size=14))
def test_any_override_gives_a_plain_config_or_one_line(key, value):
    from proas.train.config import build_config

    try:
        cfg = build_config([f"{key}={value}"])
    except ProasError as exc:
        assert "\n" not in str(exc)
        return
    from proas.train.config import config_to_yaml

    text = config_to_yaml(cfg)
    assert "${" not in text and "!!" not in text


def test_train_refuses_an_interpolating_override_in_one_line_and_writes_nothing(tmp_path, capsys):
    run = tmp_path / "run"
    err = _one_line_refusal(capsys, ["train", "train.run_name=${oc.env:HOME}", "--run-dir", str(run)])
    assert "interpolations" in err
    err = _one_line_refusal(capsys, ["train", "train.out_dir=a\x1b[2Jb", "--run-dir", str(run)])
    assert "\\x1b" in err and "\x1b" not in err
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ trajectories


def _traj(reward, group="g", name="0", step_reward=None):
    step = {"state": "a", "action": "go", "next_state": "b", "error": False}
    if step_reward is not None:
        step["reward"] = step_reward
    return {"group": group, "trajectory": name, "reward": reward, "steps": [step]}


_NESTED = st.integers(1, 3000).map(lambda d: "[" * d + "1" + "]" * d)
#: what a reward field may hold in a hostile log, as JSON text
_REWARD_TEXT = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-(10**30), 10**30).map(str),
    st.integers(13, 5000).map(lambda n: "9" * n),
    st.sampled_from(["null", "true", "false", '"1"', "NaN", "Infinity", "-Infinity", "1e400", "-1e308", "[]",
                     "{}", "1e12", "-1e12", "1.0000001e12"]),
    _NESTED,
)


@settings(max_examples=200, deadline=None)
@given(reward=_REWARD_TEXT, where=st.sampled_from(["trajectory", "step"]))
def test_a_trajectory_reward_of_any_json_is_read_as_a_bounded_number_or_refused(reward, where):
    from proas.credit import read_trajectories
    from proas.types import MAX_ABS_NUMBER

    step_reward = f', "reward": {reward}' if where == "step" else ""
    line = (f'{{"group": "g", "trajectory": "0", "reward": {reward if where == "trajectory" else "0.0"}, '
            f'"steps": [{{"state": "a", "action": "go", "next_state": "b", "error": false{step_reward}}}]}}')
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_text(line + "\n")
        try:
            (traj,) = read_trajectories(path)
        except ProasError as exc:
            assert "\n" not in str(exc) and str(path) in str(exc)
            return
    value = traj.reward if where == "trajectory" else traj.steps[0].reward
    if where == "step" and reward == "null":  # a step's reward is optional: null is "not recorded"
        assert value is None
        return
    assert isinstance(value, float) and abs(value) <= MAX_ABS_NUMBER


@settings(max_examples=60, deadline=None)
@given(rewards=st.lists(st.floats(-1e12, 1e12), min_size=2, max_size=6),
       step_rewards=st.lists(st.floats(-1e12, 1e12), min_size=6, max_size=6))
def test_every_accepted_reward_gives_finite_credit(rewards, step_rewards):
    import numpy as np

    from proas.credit import ESTIMATORS, ReferenceGraph, compute_credit
    from proas.types import Trajectory

    trajs = [Trajectory.from_json({"group": "g", "trajectory": str(i), "reward": r, "steps": [
        {"state": "a", "action": "go", "next_state": f"b{i % 2}", "error": False, "reward": step_rewards[i],
         "value": step_rewards[-1 - i]}]}) for i, r in enumerate(rewards)]
    for name in ESTIMATORS:
        # `external` (an engine's own advantage, e.g. verl's) takes it per step as an input
        opts = {"advantage": np.asarray(step_rewards[:len(rewards)], dtype=float)} if name == "external" else None
        res = compute_credit(trajs, ReferenceGraph(), estimator=name, estimator_options=opts)
        assert np.isfinite(res.advantage).all(), name


def test_proas_credit_refuses_null_huge_and_deep_rewards_in_one_line_and_writes_nothing(tmp_path, capsys):
    for n, reward in enumerate(["null", "1e300", "9" * 400, "[" * 50_000 + "]" * 50_000]):
        path = tmp_path / f"in{n}.jsonl"
        path.write_text(json.dumps(_traj(1.0)).replace('"reward": 1.0', f'"reward": {reward}') + "\n")
        out = tmp_path / f"out{n}.jsonl"
        _one_line_refusal(capsys, ["credit", "--trajectories", str(path), "--out", str(out),
                                   "--export-graph", str(tmp_path / f"g{n}.dot")])
        assert not out.exists() and not (tmp_path / f"g{n}.dot").exists()


@pytest.mark.parametrize("field, text", [("reward", "9" * 400), ("traj_advantage", "1e300"), ("reward", "null"),
                                         ("traj_advantage", "[" * 50_000 + "]" * 50_000)],
                         ids=["huge integer", "huge float", "null", "deep nesting"])
def test_a_rollout_log_with_a_null_huge_or_deep_number_is_one_line(tmp_path, field, text):
    import gzip

    from proas.rollout_log import read_rollouts, rollout_path

    record = {**_traj(1.0), "traj_advantage": 0.0}
    record["steps"][0].update(rea=1, pa=1, fd=0.0, base_advantage=0.0, advantage=0.0, uniform=True)
    line = json.dumps(record).replace(f'"{field}": {json.dumps(record[field])}', f'"{field}": {text}')
    path = rollout_path(tmp_path, 1)
    path.parent.mkdir(parents=True)
    path.write_bytes(gzip.compress(line.encode() + b"\n"))
    with pytest.raises(ProasError) as info:
        read_rollouts(tmp_path)
    assert "\n" not in str(info.value)
