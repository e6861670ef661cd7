"""Loading a checkpoint runs no code from it (issue #27, item 4).

A ``state.pt`` whose pickle would run code (its ``__reduce__`` writes a marker file) is put in
every checkpoint of a real run, in each of the ways an attacker who can write the run directory
could: with ``checksums.json`` rewritten to match, with it deleted, and passed off as a format-1
checkpoint (``checksums.json`` and ``state.json`` deleted). ``proas eval``, ``proas serve``,
``proas train --resume`` and a warm start (``init_from``) must each refuse it with one error
line and a non-zero exit, and the marker must never appear. A control shows that each payload
does write its marker when unpickled the old way (``weights_only=False``).
"""

import hashlib
import json
import math
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from proas.baselines import serve
from proas.cli import main as proas_main
from proas.errors import ProasError
from proas.train import checkpoint as ckpt

TESTS = Path(__file__).resolve().parent
STATE_JSON = "state.json"  # format 3's non-tensor state (spelled out: these tests also run against format 2)
RUN = ["env.name=toy_env:make_env", "env.options.n_train=24", "env.options.n_valid=8", "env.tasks_per_step=4",
       "env.group_size=4", "train.val_every=1", "train.save_every=1", "algo.minibatch_size=16", "seed=3",
       "train.progress=false", "train.rollout_log_every=0"]


class Payload:
    """Unpickled, it runs code: ``exec`` (or ``os.system``) writes ``marker``."""

    def __init__(self, marker: Path, how: str = "exec"):
        self.marker, self.how = str(marker), how

    def __reduce__(self):
        if self.how == "system":
            return os.system, (f"echo ran > '{self.marker}'",)
        return exec, (f"open({self.marker!r}, 'w').write('ran')",)


def _write_payload(path: Path, kind: str, marker: Path, legit: dict | None = None) -> None:
    if kind == "object":  # the whole file one object
        torch.save(Payload(marker), path)
    elif kind == "nested":  # a well-formed state with one more entry
        torch.save({**(legit or {}), "format_version": 2, "hook": Payload(marker, "system")}, path)
    elif kind == "protocol 4":
        torch.save({"policy": {"w": torch.ones(2)}, "x": [Payload(marker)]}, path, pickle_protocol=4)
    elif kind == "plain pickle":  # not a torch zip: torch's legacy path
        path.write_bytes(pickle.dumps({"format_version": 1, "x": Payload(marker)}, protocol=2))
    else:
        raise ValueError(kind)


PAYLOADS = ["object", "nested", "protocol 4", "plain pickle"]
TAMPERING = ["checksums rewritten", "checksums deleted", "passed off as format 1"]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A 2-step toy run: checkpoints/step_000001, step_000002 and best/."""
    run = tmp_path_factory.mktemp("ckpt") / "run"
    assert proas_main(["train", *RUN, "train.steps=2", "--run-dir", str(run)]) == 0
    assert (run / "best" / ckpt.STATE_FILE).exists() and len(list((run / "checkpoints").glob("step_*"))) == 2
    return run


@pytest.fixture(autouse=True)
def _toy_env_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))


def _checkpoint_dirs(run: Path) -> list[Path]:
    return [run / "best", *sorted((run / "checkpoints").glob("step_*"))]


def _tamper(run: Path, kind: str, how: str, marker: Path) -> None:
    for d in _checkpoint_dirs(run):
        legit = ckpt.load_state(d)
        _write_payload(d / ckpt.STATE_FILE, kind, marker, legit)
        sums_path = d / ckpt.CHECKSUMS_FILE
        if how == "checksums rewritten":
            sums = json.loads(sums_path.read_text())
            sums["sha256"][ckpt.STATE_FILE] = hashlib.sha256((d / ckpt.STATE_FILE).read_bytes()).hexdigest()
            sums_path.write_text(json.dumps(sums))
        else:
            sums_path.unlink()
            if how == "passed off as format 1":
                (d / STATE_JSON).unlink(missing_ok=True)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("proas: error: ")]
    assert len(errors) == 1 and all(line.startswith(("proas: error: ", "proas: warning: ")) for line in err), err
    return errors[0]


@pytest.mark.parametrize("kind", PAYLOADS)
def test_each_payload_does_run_code_when_unpickled_the_old_way(tmp_path, kind):
    """The control: the files below are live payloads, so the refusals are not vacuous."""
    marker = tmp_path / "marker"
    _write_payload(tmp_path / "state.pt", kind, marker, {"step": 1})
    try:
        torch.load(tmp_path / "state.pt", map_location="cpu", weights_only=False)
    except Exception:  # noqa: BLE001 - what the object becomes does not matter, only that it ran
        pass
    assert marker.exists()


@pytest.mark.parametrize("how", TAMPERING)
@pytest.mark.parametrize("kind", PAYLOADS)
def test_a_checkpoint_that_would_run_code_is_refused_everywhere(trained_run, tmp_path, capsys, monkeypatch, kind,
                                                               how):
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    marker = tmp_path / "marker"
    _tamper(run, kind, how, marker)

    def never(*a, **k):
        raise AssertionError("proas serve loaded the checkpoint and went on to listen")

    monkeypatch.setattr(serve, "make_server", never)
    commands = {
        "eval": ["eval", str(run)],
        "eval of the file": ["eval", str(run / "best" / ckpt.STATE_FILE)],
        "serve": ["serve", str(run), "--port", "0"],
        "resume": ["train", "--resume", str(run), "train.steps=3"],
        "warm start": ["train", *RUN, "train.steps=1", f"policy.scorer.init_from={run}", "--run-dir",
                       str(tmp_path / "warm")],
    }
    for name, argv in commands.items():
        rc = proas_main(argv)
        assert not marker.exists(), f"{name}: the checkpoint's code ran"
        assert rc == 2, name
        line = _one_error_line(capsys)
        assert ("refused" in line or "corrupt" in line or "no checksums.json" in line), (name, line)
    with pytest.raises(ProasError) as info:
        serve.PolicyServer(run)
    assert "\n" not in str(info.value) and not marker.exists()


def test_the_refusal_names_what_would_have_been_built(tmp_path):
    d = tmp_path / "ckpt"
    ckpt.save_checkpoint(d, {"step": 1, "policy": {"w": torch.ones(2)}})
    _write_payload(d / ckpt.STATE_FILE, "object", tmp_path / "marker")
    with pytest.raises(ProasError) as info:
        ckpt.load_state(d)
    msg = str(info.value)
    assert "refused" in msg and "would build exec," in msg and "nothing in it was run" in msg and "\n" not in msg
    assert not (tmp_path / "marker").exists()


def test_the_untampered_run_loads_everywhere(trained_run, tmp_path, capsys):
    """The commands above fail on the payload, not on something else."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    assert proas_main(["eval", str(run), "--tasks", "2", "--json"]) == 0
    assert serve.PolicyServer(run).step == ckpt.load_state(run / "best")["step"]
    assert proas_main(["train", "--resume", str(run), "train.steps=3"]) == 0
    assert proas_main(["train", *RUN, "train.steps=1", f"policy.scorer.init_from={run}", "--run-dir",
                       str(tmp_path / "warm")]) == 0


# --- the format: tensors in state.pt, the rest in state.json ----------------------------------------

def test_state_pt_holds_tensors_only_and_state_json_the_rest(trained_run):
    d = trained_run / "checkpoints" / "step_000002"
    tensors = torch.load(d / ckpt.STATE_FILE, weights_only=True)
    meta = json.loads((d / STATE_JSON).read_text())
    assert meta["format_version"] == 3 and sorted(tensors) == meta["tensor_entries"]
    assert {"policy", "rng_torch"} <= set(tensors) and "optimizer" in set(tensors) | set(meta["state"])
    assert {"step", "config", "rng_numpy", "rng_python", "best_sr"} <= set(meta["state"])
    state = ckpt.load_state(d)
    assert isinstance(state["rng_python"], tuple) and isinstance(state["rng_python"][1], tuple)
    import random

    random.setstate(state["rng_python"])  # accepted as Python's own state


def test_plain_values_round_trip_exactly(tmp_path):
    values = {"tuple": (1, (2.5, None), [3, (4,)]), "big": 2**127 + 1, "neg_zero": -0.0, "inf": -math.inf,
              "nan": math.nan, "text": "é\n\x00", "tricky": {"__tuple__": [1]}, "tricky2": {"__dict__": {"a": 1}},
              "empty": {}, "none": None, "flag": True}
    ckpt.save_checkpoint(tmp_path / "c", {"w": torch.arange(3), **values})
    back = ckpt.load_state(tmp_path / "c")
    for k, v in values.items():
        if k == "nan":
            assert math.isnan(back[k])
        else:
            assert back[k] == v and type(back[k]) is type(v), k
    assert math.copysign(1, back["neg_zero"]) == -1 and torch.equal(back["w"], torch.arange(3))


@pytest.mark.parametrize("state", [
    {"policy": {"w": torch.ones(1), "how": object()}},  # beside a tensor: would not load weights-only
    {"policy": {"w": torch.ones(1)}, "when": object()},  # not JSON
    {"policy": {"w": torch.ones(1)}, "keys": {1: "a"}},  # JSON keys are strings
])
def test_saving_what_could_not_be_loaded_safely_is_refused(tmp_path, state):
    with pytest.raises(TypeError, match="checkpoint entry"):
        ckpt.save_checkpoint(tmp_path / "c", state)


def _as_format_2(d: Path) -> None:
    """Rewrite checkpoint ``d`` as proas wrote it before format 3: one state.pt with everything."""
    state = ckpt.load_state(d)
    torch.save(dict(state, format_version=2), d / ckpt.STATE_FILE)
    (d / STATE_JSON).unlink()
    sums = {name: hashlib.sha256((d / name).read_bytes()).hexdigest()
            for name in os.listdir(d) if name != ckpt.CHECKSUMS_FILE}
    (d / ckpt.CHECKSUMS_FILE).write_text(json.dumps({"format_version": 2, "sha256": sums}))


def test_a_run_of_the_previous_format_resumes_exactly_like_this_one(trained_run, tmp_path):
    """Older checkpoints (everything in state.pt: RNG states, step, config) still load, weights
    only, and resume to the same metrics."""
    new, old = tmp_path / "new", tmp_path / "old"
    shutil.copytree(trained_run, new)
    shutil.copytree(trained_run, old)
    for d in _checkpoint_dirs(old):
        _as_format_2(d)
    a, b = ckpt.load_state(new / "checkpoints" / "step_000002"), ckpt.load_state(old / "checkpoints" / "step_000002")
    assert a.keys() == b.keys() and a["rng_numpy"] == b["rng_numpy"] and a["rng_python"] == b["rng_python"]
    assert torch.equal(a["rng_torch"], b["rng_torch"]) and a["format_version"] == 3 and b["format_version"] == 2
    for run in (new, old):
        assert proas_main(["train", "--resume", str(run), "train.steps=4"]) == 0

    def metrics(run):
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    assert [r["step"] for r in metrics(new)] == [0, 1, 2, 3, 4] and metrics(new) == metrics(old)


# ---- a Hugging Face model or tokenizer directory that ships its own code (``auto_map``)

_CUSTOM_CODE = """import pathlib
pathlib.Path({marker!r}).write_text("ran")
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
class EvilConfig(Qwen2Config):
    model_type = "evilmodel"
class EvilModel(Qwen2ForCausalLM):
    config_class = EvilConfig
class EvilTok(PreTrainedTokenizerFast):
    pass
"""


@pytest.fixture(scope="module")
def custom_code_dirs(tmp_path_factory):
    """(a model directory whose config.json maps its classes to its own evil.py, a tokenizer
    directory whose tokenizer_config.json does, the file evil.py writes when it runs)."""
    from proas.lm.tools import build_env_tokenizer, new_model_dir

    root = tmp_path_factory.mktemp("custom_code")
    marker = root / "RAN"
    build_env_tokenizer(["go to desk 1", "open drawer 2", "take mug 1 from desk 1"] * 20, 300, root / "tok")
    new_model_dir(root / "tok", root / "model", "tiny", num_hidden_layers=1)
    shutil.copytree(root / "model", root / "evil_model")
    cfg = json.loads((root / "evil_model" / "config.json").read_text())
    cfg.update(model_type="evilmodel", auto_map={"AutoConfig": "evil.EvilConfig",
                                                 "AutoModelForCausalLM": "evil.EvilModel"})
    (root / "evil_model" / "config.json").write_text(json.dumps(cfg))
    shutil.copytree(root / "tok", root / "evil_tok")
    tcfg = json.loads((root / "evil_tok" / "tokenizer_config.json").read_text())
    tcfg.update(tokenizer_class="EvilTok", auto_map={"AutoTokenizer": [None, "evil.EvilTok"]})
    (root / "evil_tok" / "tokenizer_config.json").write_text(json.dumps(tcfg))
    for d in ("evil_model", "evil_tok"):
        (root / d / "evil.py").write_text(_CUSTOM_CODE.format(marker=str(marker)))
    return root / "evil_model", root / "evil_tok", marker


@pytest.fixture
def says_yes(monkeypatch):
    # transformers asks at a prompt whether to run a directory's code when it is not told;
    # here every such question is answered yes, so only a refusal keeps the code from running
    monkeypatch.setattr("builtins.input", lambda *a, **k: "y")


def test_a_tokenizer_directory_s_own_code_is_never_run(custom_code_dirs, says_yes):
    from proas.lm.model import load_tokenizer

    _, tok_dir, marker = custom_code_dirs
    with pytest.raises(ProasError, match="cannot load its tokenizer"):
        load_tokenizer(tok_dir, "policy.lm.tokenizer_path")
    assert not marker.exists()


def test_a_model_directory_s_own_code_is_never_run(custom_code_dirs, says_yes, tmp_path, capsys):
    from proas.lm.policy import LMPolicy
    from proas.train.config import build_config

    model_dir, _, marker = custom_code_dirs
    cfg = build_config(["policy=lm", f"policy.lm.model_path={model_dir}", "policy.lm.device=cpu"])
    with pytest.raises(ProasError, match="cannot load a local model"):
        LMPolicy.from_config(cfg.policy.lm)
    assert not marker.exists()
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": p, "response": "<think>x</think><action>go to desk 1</action>",
                                        "task_id": p}) + "\n" for p in ("go to desk 1", "open drawer 2")))
    rc = proas_main(["lm", "sft-rows", "--data", str(rows), "--init-from", str(model_dir), "--out",
                     str(tmp_path / "out"), "--val-fraction", "0", "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cannot load a local model" in err[0]
    assert not marker.exists() and not (tmp_path / "out").exists()
