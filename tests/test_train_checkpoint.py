"""Checkpoint files: atomic pointer, clear errors on corrupt or foreign files, metric truncation."""

import json

import pytest
import torch

from proas.errors import ProasError
from proas.train import checkpoint as ckpt


def test_save_resumable_moves_the_pointer_and_keeps_the_newest_and_the_previous(tmp_path):
    for step in (2, 4, 6):
        ckpt.save_resumable(tmp_path, step, {"step": step, "w": torch.ones(2) * step})
    assert json.loads((tmp_path / "checkpoints" / "latest.json").read_text()) == {"step": 6, "dir": "step_000006"}
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_000004", "step_000006"]
    state = ckpt.load_state(ckpt.latest_checkpoint(tmp_path))
    assert state["step"] == 6 and torch.equal(state["w"], torch.full((2,), 6.0))


def test_a_leftover_half_written_checkpoint_is_replaced(tmp_path):
    ckpt.save_resumable(tmp_path, 2, {"step": 2})
    junk = tmp_path / "checkpoints" / "step_000004"
    junk.mkdir()
    (junk / "state.pt").write_bytes(b"half")
    ckpt.save_resumable(tmp_path, 4, {"step": 4})
    assert ckpt.load_state(ckpt.latest_checkpoint(tmp_path))["step"] == 4


def test_corrupt_files_are_clear_errors(tmp_path):
    ckpt.save_resumable(tmp_path, 2, {"step": 2})
    state = tmp_path / "checkpoints" / "step_000002" / "state.pt"
    state.write_bytes(b"not a torch file")
    with pytest.raises(ProasError, match="corrupt checkpoint"):
        ckpt.load_state(state.parent)
    torch.save({"something": "else"}, state)
    with pytest.raises(ProasError, match="not a proas checkpoint"):
        ckpt.load_state(state.parent)
    (tmp_path / "checkpoints" / "latest.json").write_text("{oops")
    with pytest.raises(ProasError, match="corrupt checkpoint pointer"):
        ckpt.latest_checkpoint(tmp_path)


def test_find_checkpoint_prefers_best_then_latest(tmp_path):
    with pytest.raises(ProasError, match="no such"):
        ckpt.find_checkpoint(tmp_path / "missing")
    with pytest.raises(ProasError, match="not a run directory"):
        ckpt.find_checkpoint(tmp_path)
    ckpt.save_resumable(tmp_path, 2, {"step": 2})
    assert ckpt.find_checkpoint(tmp_path).name == "step_000002"
    ckpt.save_checkpoint(tmp_path / "best", {"step": 1})
    assert ckpt.find_checkpoint(tmp_path) == tmp_path / "best"
    assert ckpt.find_checkpoint(tmp_path / "best" / "state.pt") == tmp_path / "best"


def test_truncate_metrics_drops_later_steps_and_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step":0}\n{"step":1}\n{"step":2}\n{"step":3,"a":')
    rows = ckpt.truncate_metrics(path, 1)
    assert rows == [{"step": 0}, {"step": 1}]
    assert path.read_text() == '{"step":0}\n{"step":1}\n'
    path.write_text('{"step":0}\ngarbage\n{"step":1}\n')
    with pytest.raises(ProasError, match="line 2"):
        ckpt.read_metrics(path)


# ---------------------------------------------------------------- checksums and fallback


def _two_checkpoints(tmp_path):
    from proas.credit import ReferenceGraph

    graph = ReferenceGraph()
    graph.add_path(["a", "b"], ["go"])
    for step in (2, 4):
        ckpt.save_resumable(tmp_path, step, {"step": step, "w": torch.ones(3) * step}, graph)
    return tmp_path / "checkpoints"


def _flip_byte(path, where=0.5):
    data = bytearray(path.read_bytes())
    data[int(len(data) * where)] ^= 0x01
    path.write_bytes(bytes(data))


def _latest(run_dir):
    warnings = []
    found = ckpt.latest_checkpoint(run_dir, warn=warnings.append)
    return found, warnings


@pytest.mark.parametrize("damage", ["flip state.pt", "flip graph.json", "delete graph.json", "delete state.pt",
                                    "delete checksums.json", "flip checksums.json"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_with_a_warning(tmp_path, damage):
    root = _two_checkpoints(tmp_path)
    assert ckpt.verify_checkpoint(root / "step_000004") is None
    action, name = damage.split()
    target = root / "step_000004" / name
    _flip_byte(target) if action == "flip" else target.unlink()
    found, warnings = _latest(tmp_path)
    assert found == root / "step_000002"
    assert len(warnings) == 1 and "step_000004" in warnings[0] and "resuming from step_000002" in warnings[0]
    assert ckpt.load_state(found)["step"] == 2


def test_a_deleted_pointer_resumes_from_the_newest_verified_checkpoint(tmp_path):
    root = _two_checkpoints(tmp_path)
    (root / "latest.json").unlink()
    found, warnings = _latest(tmp_path)
    assert found == root / "step_000004" and "latest.json is missing" in warnings[0]


@pytest.mark.parametrize("pointer", ["../../elsewhere", "/tmp", "step_000004/../../x", "..", 4, ""])
def test_the_pointer_never_leads_out_of_the_run(tmp_path, pointer):
    root = _two_checkpoints(tmp_path / "run")
    ckpt.save_checkpoint(tmp_path / "elsewhere", {"step": 99})  # a valid checkpoint, but not the run's
    (root / "latest.json").write_text(json.dumps({"step": 99, "dir": pointer}))
    found, warnings = _latest(tmp_path / "run")
    assert found == root / "step_000004"
    assert "is not a checkpoint of this run" in warnings[0]


def test_nothing_verifies_is_one_clear_error(tmp_path):
    root = _two_checkpoints(tmp_path)
    _flip_byte(root / "step_000004" / "state.pt")
    (root / "step_000002" / "graph.json").unlink()
    with pytest.raises(ProasError) as info:
        ckpt.latest_checkpoint(tmp_path)
    msg = str(info.value)
    assert "no checkpoint verifies" in msg and "\n" not in msg
    assert "step_000004: state.pt does not match its sha256" in msg and "step_000002: graph.json is missing" in msg


def test_a_half_written_newer_checkpoint_is_never_used(tmp_path):
    root = _two_checkpoints(tmp_path)
    (root / "latest.json").unlink()
    half = root / "step_000006"
    half.mkdir()
    (half / "state.pt").write_bytes((root / "step_000004" / "state.pt").read_bytes())  # no checksums yet
    found, warnings = _latest(tmp_path)
    assert found == root / "step_000004" and "step_000006: no checksums.json" in warnings[0]


def test_a_checkpoint_from_before_checksums_is_accepted(tmp_path):
    old = tmp_path / "checkpoints" / "step_000002"
    old.mkdir(parents=True)
    torch.save({"step": 2, "format_version": 1}, old / "state.pt")
    (tmp_path / "checkpoints" / "latest.json").write_text(json.dumps({"step": 2, "dir": "step_000002"}))
    found, warnings = _latest(tmp_path)
    assert found == old and warnings == [] and ckpt.load_state(found)["step"] == 2


def test_eval_finds_only_checkpoints_that_verify(tmp_path, capsys):
    root = _two_checkpoints(tmp_path)
    ckpt.save_checkpoint(tmp_path / "best", {"step": 3})
    _flip_byte(tmp_path / "best" / "state.pt")
    with pytest.raises(ProasError, match="best: checkpoint fails verification .state.pt does not match"):
        ckpt.find_checkpoint(tmp_path / "best" / "state.pt")
    assert ckpt.find_checkpoint(tmp_path) == root / "step_000004"
    assert "best: state.pt does not match its sha256; using the latest" in capsys.readouterr().err
