"""Files read and written as data (issue #46): lm checkpoints, model directories and ``proas lm
export``; finite weights; the lm's device; env factories; operating-system errors.

Each kind a careless or hostile user met ends in one line and exit status 2, or the correct
result, and never in a traceback, a hang, a silent wrong result, a half-written file or a file
outside the output: ``lm export`` copies exactly the files ``checksums.json`` covers, each hashed
again, into a directory written whole or not at all; verification and loading open regular files
only (a ``/dev/zero`` link or a FIFO never hangs); a truncated or pickled model, a model without
its tokenizer, an optimiser state of the wrong shape, a device that is not there and an env
factory that is not one are refused; the trainer stops before a checkpoint holds non-finite
weights; every ``OSError`` of a user's path is one line. Tiny lm models built here, on the CPU.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import types
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from proas import cli
from proas.train import checkpoint as ckpt
from proas.train.config import build_config
from proas.train.loop import train

torch.set_num_threads(1)

TESTS = Path(__file__).resolve().parent
SRC = TESTS.parent / "src"

#: a generate-mode tiny lm on the toy env (tests/toy_env.py), 2 steps, a checkpoint and a
#: validation at step 2 (so a best/ and a step_000002/), on the CPU
LM = ["env.name=toy_env:make_env", "env.options.n_places=2", "env.options.max_steps=4", "env.options.n_train=8",
      "env.options.n_valid=4", "env.fixed_val_set.size=2", "env.tasks_per_step=2", "env.group_size=2",
      "train.progress=false", "train.steps=2", "train.save_every=2", "train.val_every=2", "seed=4",
      "train.rollout_log_every=0", "policy=lm", "policy.lm.device=cpu", "policy.lm.model_config=tiny",
      "policy.lm.max_new_tokens=5"]
#: the same run from a model directory instead of the named architecture
LM_DIR = [a for a in LM if not a.startswith("policy.lm.model_config")]
#: a scorer run on the toy env: one optimiser step per RL step (one minibatch, one epoch)
SCORER = ["env.name=toy_env:make_env", "env.options.n_train=8", "env.options.n_valid=4", "env.fixed_val_set.size=2",
          "env.tasks_per_step=2", "env.group_size=2", "train.steps=2", "train.val_every=1", "train.save_every=1",
          "algo.minibatch_size=100000", "algo.ppo_epochs=1", "seed=3", "train.progress=false",
          "train.rollout_log_every=0"]


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("lm_run") / "run"
    train(build_config(LM), run_dir=run)
    assert (run / "best" / "model.safetensors").is_file()
    assert (run / "checkpoints" / "step_000002" / "model.safetensors").is_file()
    return run


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A Hugging Face model directory: the tiny architecture, random weights, the local tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from proas.lm.model import MODEL_CONFIGS, local_tokenizer

    out = tmp_path_factory.mktemp("hf") / "model"
    tok = local_tokenizer(1024)
    torch.manual_seed(0)
    cfg = Qwen2Config(**MODEL_CONFIGS["tiny"], pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    Qwen2ForCausalLM(cfg).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def copy_run(run: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(run, dst, symlinks=True)
    return dst


def rehash(directory: Path, name: str) -> None:
    """Record ``name``'s current sha256 in the checkpoint's checksums.json (a damaged file whose
    checksums match: verification passes, loading must still refuse it)."""
    sums = json.loads((directory / ckpt.CHECKSUMS_FILE).read_text())
    sums["sha256"][name] = hashlib.sha256((directory / name).read_bytes()).hexdigest()
    (directory / ckpt.CHECKSUMS_FILE).write_text(json.dumps(sums))


def truncate(path: Path, size: int = 1000) -> None:
    data = path.read_bytes()[:size]
    path.unlink()
    path.write_bytes(data)


def one_line(capsys, *needles: str) -> str:
    """The one ``proas: error:`` line of a failed command (warnings and libraries' progress bars
    aside), holding each of ``needles``; no traceback."""
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("proas: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], err
    return lines[0]


@contextmanager
def no_hang(seconds: int = 20):
    """Fail (instead of hanging the suite) when the block takes longer than ``seconds``."""
    def alarm(signum, frame):
        raise TimeoutError(f"hung for {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------ lm export


def test_lm_export_copies_exactly_the_verified_files(lm_run, tmp_path, capsys):
    run = copy_run(lm_run, tmp_path)
    best = run / "best"
    covered = set(json.loads((best / ckpt.CHECKSUMS_FILE).read_text())["sha256"])
    (best / "evil.py").write_text("import os; os.system('echo owned')\n")
    torch.save({"x": torch.zeros(1)}, best / "pytorch_model.bin")  # a pickle beside the safetensors
    out = tmp_path / "hf"
    assert cli.main(["lm", "export", str(run), str(out)]) == 0
    exported = {p.name for p in out.iterdir()}
    assert exported == covered - {"state.pt", "state.json", "graph.json", "meta.json"}
    for name in exported:
        assert (out / name).read_bytes() == (best / name).read_bytes(), name
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]  # no staging left behind

    # a link among the files (to /etc/passwd): best/ fails verification, and is not exported
    os.symlink("/etc/passwd", best / "passwd.txt")
    problem = ckpt.verify_checkpoint(best)
    assert problem is not None and "passwd.txt" in problem and "symbolic link" in problem
    out2 = tmp_path / "hf2"
    assert cli.main(["lm", "export", str(best), str(out2)]) == 2
    one_line(capsys, "passwd.txt")
    assert not out2.exists()

    # a name in checksums.json that leads out of the checkpoint (and so out of the export)
    (best / "passwd.txt").unlink()
    shutil.copy(best / "config.json", tmp_path / "escaped.json")
    sums = json.loads((best / ckpt.CHECKSUMS_FILE).read_text())
    sums["sha256"]["../escaped.json"] = hashlib.sha256((tmp_path / "escaped.json").read_bytes()).hexdigest()
    (best / ckpt.CHECKSUMS_FILE).write_text(json.dumps(sums))
    assert cli.main(["lm", "export", str(best), str(tmp_path / "deep" / "hf")]) == 2
    one_line(capsys, "../escaped.json")
    assert not (tmp_path / "deep").exists()


@pytest.mark.parametrize("linked", ["best", "checkpoints", "checkpoints/step_000002"])
def test_lm_export_refuses_a_checkpoint_directory_reached_through_a_link(lm_run, tmp_path, capsys, linked):
    """*Found:* a run directory whose ``best/`` (or ``checkpoints/``, or a ``step_N/``) is a link
    made ``proas lm export`` copy a checkpoint from wherever the link led. The run directory
    itself named through a link (scripts/run_lm_study.sh does so) is the user's choice: exported."""
    run = copy_run(lm_run, tmp_path)
    if linked != "best":
        shutil.rmtree(run / "best")  # the export then takes the latest checkpoint
    (tmp_path / "elsewhere").mkdir()
    shutil.move(run / linked, tmp_path / "elsewhere" / "ckpt")
    (run / linked).symlink_to(tmp_path / "elsewhere" / "ckpt", target_is_directory=True)
    out = tmp_path / "hf"
    assert cli.main(["lm", "export", str(run), str(out)]) == 2
    one_line(capsys, f"{run / linked}: is a symbolic link")
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".hf.")]

    alias = tmp_path / "alias"
    alias.symlink_to(shutil.copytree(lm_run, tmp_path / "clean"), target_is_directory=True)
    assert cli.main(["lm", "export", str(alias), str(out)]) == 0
    assert (out / "config.json").read_bytes() == (lm_run / "best" / "config.json").read_bytes()


def test_lm_export_refuses_a_file_changed_after_verification(lm_run, tmp_path, capsys, monkeypatch):
    """Each file is hashed again as it is copied: one that changed between verification and copy
    (another writer) is not exported, and neither is anything else."""
    from proas.train import warm_start

    run = copy_run(lm_run, tmp_path)
    real = ckpt.find_checkpoint

    def verified_then_changed(target):
        directory = real(target)  # verifies
        raw = bytearray((directory / "model.safetensors").read_bytes())
        raw[-1] ^= 1
        (directory / "model.safetensors").write_bytes(bytes(raw))
        return directory

    monkeypatch.setattr(warm_start.ckpt, "find_checkpoint", verified_then_changed)
    out = tmp_path / "hf"
    assert cli.main(["lm", "export", str(run), str(out)]) == 2
    one_line(capsys, "model.safetensors", "changed since it was verified")
    assert not out.exists()


@pytest.mark.parametrize("out_is", ["new", "an empty folder"])
def test_lm_export_onto_a_full_disk_leaves_nothing_half_written(lm_run, tmp_path, out_is):
    """The disk fills while model.safetensors is copied (a file size limit, ``RLIMIT_FSIZE``, in
    the exporting process): one line, and no truncated weights in the output."""
    run = copy_run(lm_run, tmp_path)
    size = (run / "best" / "model.safetensors").stat().st_size
    limit = 200_000
    assert size > limit > max(p.stat().st_size for p in (run / "best").iterdir() if p.name != "model.safetensors")

    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(TESTS), str(SRC),
                                                                    os.environ.get("PYTHONPATH")) if p)}
    out = tmp_path / "hf"
    if out_is == "an empty folder":
        out.mkdir()
    proc = subprocess.run([sys.executable, "-m", "proas", "lm", "export", str(run), str(out)], env=env,
                          capture_output=True, text=True, timeout=300, preexec_fn=small_disk)
    assert proc.returncode == 2, proc.stderr
    lines = [x for x in proc.stderr.splitlines() if not x.startswith("proas: warning:")]
    assert len(lines) == 1 and lines[0].startswith("proas: error: File too large"), proc.stderr
    # not a truncated model.safetensors, not half the files, no staging directory
    if out_is == "new":
        assert not out.exists()
    else:
        assert list(out.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == (["run"] if out_is == "new" else ["hf", "run"])


@pytest.mark.parametrize("where", ["a file", "below a file"])
def test_lm_export_checks_its_output_before_anything(lm_run, tmp_path, capsys, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = blocker if where == "a file" else blocker / "hf"
    assert cli.main(["lm", "export", str(lm_run), str(out)]) == 2
    one_line(capsys, str(out))
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


# ------------------------------------------------------------------ regular files only


@pytest.mark.parametrize("damage", ["weights linked to /dev/zero", "tokenizer.json a FIFO",
                                    "weights linked to a copy"])
def test_checkpoint_verification_accepts_regular_files_only_and_never_hangs(lm_run, tmp_path, capsys, damage):
    run = copy_run(lm_run, tmp_path)
    for d in (run / "best", *sorted(run.glob("checkpoints/step_*"))):
        if damage == "weights linked to /dev/zero":
            (d / "model.safetensors").unlink()
            os.symlink("/dev/zero", d / "model.safetensors")
        elif damage == "tokenizer.json a FIFO":
            (d / "tokenizer.json").unlink()
            os.mkfifo(d / "tokenizer.json")
        else:  # a link to a file with the right bytes: still not the checkpoint's own file
            shutil.copy(d / "model.safetensors", tmp_path / f"{d.name}.safetensors")
            (d / "model.safetensors").unlink()
            os.symlink(tmp_path / f"{d.name}.safetensors", d / "model.safetensors")
        with no_hang():
            problem = ckpt.verify_checkpoint(d)
        name = "tokenizer.json" if "tokenizer" in damage else "model.safetensors"
        assert problem is not None and problem.startswith(name), problem
    with no_hang(60):
        assert cli.main(["eval", str(run), "--tasks", "1"]) == 2
    one_line(capsys, "no checkpoint verifies")


@pytest.mark.parametrize(("command", "damage"), [
    ("train", "tokenizer.json a FIFO"), ("train", "a huge tokenizer config"), ("train", "no tokenizer files"),
    ("lm new-model", "no tokenizer files")])
def test_a_tokenizer_directory_is_read_as_data(model_dir, tmp_path, capsys, command, damage):
    """``policy.lm.tokenizer_path`` and ``lm new-model --tokenizer``: a FIFO or an oversized file
    is refused without being read, and a directory without a tokenizer is an error, never a
    one-token tokenizer that maps every text to nothing."""
    d = tmp_path / "tok"
    shutil.copytree(model_dir, d)
    if damage == "tokenizer.json a FIFO":
        (d / "tokenizer.json").unlink()
        os.mkfifo(d / "tokenizer.json")
    elif damage == "a huge tokenizer config":
        with open(d / "tokenizer_config.json", "r+b") as fh:  # sparse: nothing is stored
            fh.truncate(1 << 30)
    else:
        for p in d.iterdir():
            if p.name.startswith(("tokenizer", "special_tokens", "chat_template")):
                p.unlink()
    out = tmp_path / "out"
    argv = {"train": ["train", *LM, f"policy.lm.tokenizer_path={d}", "--run-dir", str(out)],
            "lm new-model": ["lm", "new-model", "--tokenizer", str(d), "--size", "tiny", "--out", str(out)]}[command]
    with no_hang(60):
        assert cli.main(argv) == 2
    one_line(capsys, str(d))
    assert not out.exists()


@pytest.mark.parametrize("template", ["{% for m in messages %}", "{{ raise_exception('no') }}"])
@pytest.mark.parametrize("command", ["train", "lm new-model"])
def test_a_chat_template_that_cannot_render_is_one_line_before_anything_is_written(model_dir, tmp_path, capsys,
                                                                                    command, template):
    """A broken ``chat_template.jinja`` is refused where the tokenizer loads. *Found:* ``lm
    new-model`` wrote a model with it, and a run of it ended at its first prompt in a traceback."""
    d = tmp_path / "tok"
    shutil.copytree(model_dir, d)
    (d / "chat_template.jinja").write_text(template)
    out = tmp_path / "out"
    argv = {"train": ["train", *LM_DIR, f"policy.lm.model_path={d}", "--run-dir", str(out)],
            "lm new-model": ["lm", "new-model", "--tokenizer", str(d), "--size", "tiny", "--out", str(out)]}[command]
    assert cli.main(argv) == 2
    one_line(capsys, str(d), "chat template cannot render a prompt")
    assert not out.exists()


@pytest.mark.parametrize("name", ["config.yaml", "metrics.jsonl"])
def test_a_run_file_replaced_by_a_fifo_is_one_line_on_resume(lm_run, tmp_path, capsys, name):
    run = copy_run(lm_run, tmp_path)
    (run / name).unlink()
    os.mkfifo(run / name)
    with no_hang():
        assert cli.main(["train", "--resume", str(run)]) == 2
    one_line(capsys, name, "FIFO")


# ------------------------------------------------------------------ damaged models: one line


@pytest.fixture()
def truncated_model_dir(model_dir, tmp_path):
    d = tmp_path / "truncated"
    shutil.copytree(model_dir, d)
    truncate(d / "model.safetensors")
    return d


def test_a_truncated_model_path_is_one_line(truncated_model_dir, tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(["train", *LM_DIR, f"policy.lm.model_path={truncated_model_dir}", "--run-dir", str(run)]) == 2
    one_line(capsys, "policy.lm.model_path=", "cannot load a local model")
    assert not run.exists()


def test_a_pickle_only_model_directory_is_refused_in_one_line(model_dir, tmp_path, capsys):
    from safetensors.torch import load_file

    d = tmp_path / "pickled"
    shutil.copytree(model_dir, d)
    torch.save(load_file(d / "model.safetensors"), d / "pytorch_model.bin")
    (d / "model.safetensors").unlink()
    run = tmp_path / "run"
    assert cli.main(["train", *LM_DIR, f"policy.lm.model_path={d}", "--run-dir", str(run)]) == 2
    one_line(capsys, "pytorch_model.bin", "pickle")
    assert not run.exists()


def test_a_model_directory_without_its_tokenizer_is_an_error(model_dir, tmp_path, capsys):
    d = tmp_path / "no_tokenizer"
    shutil.copytree(model_dir, d)
    for p in d.iterdir():
        if p.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            p.unlink()
    run = tmp_path / "run"
    assert cli.main(["train", *LM_DIR, f"policy.lm.model_path={d}", "--run-dir", str(run)]) == 2
    one_line(capsys, "no tokenizer files")
    assert not run.exists()


@pytest.mark.parametrize("command", ["eval", "serve", "resume"])
def test_a_truncated_checkpoint_whose_checksums_match_is_one_line(lm_run, tmp_path, capsys, command):
    run = copy_run(lm_run, tmp_path)
    for d in (run / "best", *sorted(run.glob("checkpoints/step_*"))):
        truncate(d / "model.safetensors")
        rehash(d, "model.safetensors")
        assert ckpt.verify_checkpoint(d) is None
    argv = {"eval": ["eval", str(run), "--tasks", "1"], "serve": ["serve", str(run), "--port", "0"],
            "resume": ["train", "--resume", str(run), "train.steps=3"]}[command]
    before = (run / "metrics.jsonl").read_bytes()
    assert cli.main(argv) == 2
    one_line(capsys, "model.safetensors", "not a readable safetensors file")
    assert (run / "metrics.jsonl").read_bytes() == before


def test_an_optimiser_state_of_the_wrong_shape_is_refused_on_resume(lm_run, tmp_path, capsys):
    run = copy_run(lm_run, tmp_path)
    d = run / "checkpoints" / "step_000002"
    tensors = torch.load(d / ckpt.STATE_FILE, weights_only=True)
    moments = next(iter(tensors["optimizer"]["state"].values()))
    moments["exp_avg"] = torch.zeros(3, 3)
    torch.save(tensors, d / ckpt.STATE_FILE)
    rehash(d, ckpt.STATE_FILE)
    before = (run / "metrics.jsonl").read_bytes()
    assert cli.main(["train", "--resume", str(run), "train.steps=3"]) == 2
    one_line(capsys, "exp_avg has shape (3, 3)")
    assert (run / "metrics.jsonl").read_bytes() == before
    assert not (run / "checkpoints" / "step_000003").exists()


# ------------------------------------------------------------------ weights stay finite


@pytest.mark.parametrize("kind", ["scorer", "lm"])
def test_the_run_stops_before_a_checkpoint_holds_non_finite_weights(tmp_path, capsys, monkeypatch, kind):
    """An optimiser step that overflows (as AdamW with ``weight_decay=1e300`` does) on the only
    update of step 1: the run stops in one line, and no checkpoint holds inf/NaN weights."""
    from proas.lm.policy import LMPolicy
    from proas.policies.scorer import ScorerPolicy

    cls = ScorerPolicy if kind == "scorer" else LMPolicy
    real = cls.make_optimizer

    def overflowing(self, lr):
        opt = real(self, lr)
        step = opt.step

        def step_then_overflow(self, *a, **k):
            out = step(*a, **k)
            with torch.no_grad():
                self.param_groups[0]["params"][0].mul_(float("inf"))
            return out

        opt.step = types.MethodType(step_then_overflow, opt)  # a bound method, as an lr scheduler wants
        return opt

    monkeypatch.setattr(cls, "make_optimizer", overflowing)
    run = tmp_path / "run"
    args = SCORER if kind == "scorer" else LM + ["train.save_every=1", "train.val_every=1",
                                                  "algo.minibatch_size=100000", "algo.ppo_epochs=1"]
    assert cli.main(["train", *args, "--run-dir", str(run)]) == 2
    one_line(capsys, "step 1: the weights are not finite")
    for d in [*run.glob("checkpoints/step_*"), run / "best"]:
        if not d.exists():
            continue
        if kind == "scorer":
            weights = ckpt.load_state(d)["policy"].values()
        else:
            from safetensors.torch import load_file

            weights = load_file(d / "model.safetensors").values()
        assert all(bool(torch.isfinite(w).all()) for w in weights), d
    assert not (run / "checkpoints" / "step_000001").exists()


def test_the_finite_check_tells_huge_from_infinite():
    from proas.train.loop import weights_finite

    w = [torch.full((4,), 3e38), torch.ones(3, dtype=torch.bfloat16), torch.full((2,), 6e4, dtype=torch.float16)]
    assert weights_finite(w)  # the squares overflow; the weights do not
    w[1][0] = float("nan")
    assert not weights_finite(w)
    w[1][0] = 1.0
    w[0][2] = float("-inf")
    assert not weights_finite(w)


# ------------------------------------------------------------------ the lm's device


@pytest.mark.parametrize("device", ["foo", "cuda", "cuda:7", "mps"])
def test_a_device_that_is_not_there_is_one_line(tmp_path, capsys, monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without a GPU, wherever this runs
    run = tmp_path / "run"
    args = [a for a in LM if not a.startswith("policy.lm.device")] + [f"policy.lm.device={device}"]
    assert cli.main(["train", *args, "--run-dir", str(run)]) == 2
    one_line(capsys, f"policy.lm.device={device!r}")
    assert not run.exists()


# ------------------------------------------------------------------ env factories


@pytest.mark.parametrize("factory", ["os:getcwd", ":nothing"])
@pytest.mark.parametrize("command", ["lm tokenizer", "schedule make"])
def test_an_env_name_that_is_not_an_env_factory_is_one_line(tmp_path, capsys, factory, command):
    out = tmp_path / "out"
    argv = {"lm tokenizer": ["lm", "tokenizer", "--env", factory, "--out", str(out)],
            "schedule make": ["schedule", "make", "--env", factory, "--seed", "0", "--out", str(out)]}[command]
    assert cli.main(argv) == 2
    one_line(capsys, factory)
    assert not out.exists()


# ------------------------------------------------------------------ OS errors: one line


@pytest.mark.parametrize("where", ["a file", "below a file"])
@pytest.mark.parametrize("command", ["lm tokenizer", "lm new-model", "schedule make", "experiment run"])
def test_an_output_path_that_is_or_sits_below_a_file_is_one_line(model_dir, tmp_path, capsys, command, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    out = str(blocker if where == "a file" else blocker / "sub")
    argv = {"lm tokenizer": ["lm", "tokenizer", "--env", "toy_env:make_env", "--vocab", "400", "--out", out],
            "lm new-model": ["lm", "new-model", "--tokenizer", str(model_dir), "--size", "tiny", "--out", out],
            "schedule make": ["schedule", "make", "--env", "household", "--seed", "0", "--steps", "2", "--out", out],
            "experiment run": ["experiment", "run", "main", "--steps", "1", "--jobs", "1", "--seeds", "0",
                               "--out", out]}[command]
    assert cli.main(argv) == 2
    one_line(capsys)
    assert blocker.read_text() == "x" and sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]


@pytest.mark.parametrize("code", [errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP, errno.ENAMETOOLONG])
def test_every_os_error_is_one_line(monkeypatch, capsys, code):
    from proas.cli import lm as lm_cli

    def fail(args):
        raise OSError(code, os.strerror(code), "/some/path")

    monkeypatch.setattr(lm_cli, "_export", fail)
    assert cli.main(["lm", "export", "a", "b"]) == 2
    line = one_line(capsys, os.strerror(code), "/some/path")
    assert "intact" not in line  # the note of a storage that refused a write is for those errors alone


def test_a_closed_pipe_on_stdout_ends_quietly():
    """The reader is gone before proas writes (``| true``): status 141, as a shell's, no traceback."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(SRC), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run(f"{sys.executable} -m proas tasks household --split train | true; echo ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr and "Error" not in proc.stderr, proc.stderr
    assert proc.stdout.strip() == "141"
