"""Checkpoint files: atomic pointer, clear errors on corrupt or foreign files, metric truncation."""

import json

import pytest
import torch

from proas.errors import ProasError
from proas.train import checkpoint as ckpt


def test_save_resumable_moves_the_pointer_and_keeps_only_the_newest(tmp_path):
    for step in (2, 4, 6):
        ckpt.save_resumable(tmp_path, step, {"step": step, "w": torch.ones(2) * step})
    assert json.loads((tmp_path / "checkpoints" / "latest.json").read_text()) == {"step": 6, "dir": "step_000006"}
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*")) == ["step_000006"]
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
