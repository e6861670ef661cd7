"""What recipes/verl_agent/device/ ships for the one-GPU run (docs/verl.md section 10): the
stand-in ``flash_attn.bert_padding`` against hand-worked answers, and the placeholder parquet
files, the resume check and the checkpoint comparison. (The sdpa and resume-check patches are
checked against verl-agent's own files in tests/test_verl_agent.py.)"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

DEVICE = Path(__file__).resolve().parents[1] / "recipes" / "verl_agent" / "device"
ROOT = DEVICE.parents[2]


def load_padding():
    spec = importlib.util.spec_from_file_location("standin_bert_padding", DEVICE / "flash_attn" / "bert_padding.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bp = load_padding()


def test_unpad_input_by_hand():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    hidden = torch.arange(6.0).reshape(2, 3, 1)  # rows [0, 1, 2], [3, 4, 5]
    flat, indices, cu, max_len, used = bp.unpad_input(hidden, mask)
    assert flat.flatten().tolist() == [0.0, 1.0, 3.0]
    assert indices.tolist() == [0, 1, 3]
    assert cu.tolist() == [0, 2, 3] and cu.dtype == torch.int32
    assert max_len == 2 and used.tolist() == [2, 1]


def test_pad_input_inverts_unpad_and_passes_gradients():
    gen = torch.Generator().manual_seed(0)
    mask = (torch.rand(4, 7, generator=gen) > 0.4).long()
    hidden = torch.randn(4, 7, 3, generator=gen, requires_grad=True)
    flat, indices, *_ = bp.unpad_input(hidden, mask)
    back = bp.pad_input(flat, indices, 4, 7)
    assert torch.equal(back, hidden * mask[..., None])
    back.sum().backward()
    assert torch.equal(hidden.grad, mask[..., None].expand(4, 7, 3).float())
    x = torch.arange(10.0).reshape(5, 2)
    assert bp.index_first_axis(x, torch.tensor([4, 0])).tolist() == [[8.0, 9.0], [0.0, 1.0]]


def test_prepare_data_writes_verl_agents_text_rows(tmp_path):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    cmd = [sys.executable, str(DEVICE / "prepare_data.py"), str(tmp_path), "--train", "4", "--val", "8"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    train, test = pd.read_parquet(tmp_path / "train.parquet"), pd.read_parquet(tmp_path / "test.parquet")
    assert len(train) == 4 and len(test) == 8
    assert list(train.columns) == ["data_source", "prompt", "ability", "extra_info"]
    assert train["data_source"].tolist() == ["text"] * 4
    assert [dict(m) for m in train["prompt"][0]] == [{"role": "user", "content": ""}]
    assert dict(test["extra_info"][7]) == {"split": "test", "index": 7}


def test_the_cpu_preflight_reads_run_sh_overrides_with_its_variables_filled_in():
    spec = importlib.util.spec_from_file_location("cpu_check", DEVICE / "cpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    over = mod.run_sh_overrides(work="/w", env="alfworld/AlfredTWEnv")
    keys = [o.split("=", 1)[0] for o in over]
    assert len(keys) == len(set(keys)) > 30 and not any("$" in o for o in over)
    for want in ("proas.enable=True", "proas.graph=/w/arg.json.gz", "env.env_name=alfworld/AlfredTWEnv",
                 "actor_rollout_ref.rollout.name=hf", "trainer.total_training_steps=10",
                 "trainer.resume_mode=disable", "trainer.default_local_dir=/w/run", "trainer.logger=['console']",
                 "actor_rollout_ref.model.path=/w/model"):
        assert want in over, want


def test_the_cpu_preflight_reads_the_learn_phases_arms_after_run_sh_overrides():
    """run.sh's learn phase: its own settings and the arm's come after run's (Hydra: the last wins)."""
    spec = importlib.util.spec_from_file_location("cpu_check", DEVICE / "cpu_check.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    base = mod.run_sh_overrides(work="/w", env="alfworld/AlfredTWEnv")
    for arm, shaping in (("grpo", "none"), ("grpo_proas", "proas")):
        over = mod.learn_overrides(work="/w", arm=arm, lr="1e-4")
        assert over[: len(base)] == base and not any("$" in o for o in over)
        last = dict(o.split("=", 1) for o in over)  # what Hydra ends with
        assert last["proas.shaping"] == shaping and last["proas.enable"] == "True"
        assert last["actor_rollout_ref.actor.optim.lr"] == "1e-4"
        assert last["data.train_batch_size"] == "8" and last["env.rollout.n"] == "4"
        assert last["env.max_steps"] == "20"
        assert last["data.val_batch_size"] == "64" and last["data.val_files"] == "/w/data_learn/test.parquet"
        assert last["trainer.val_before_train"] == "True" and last["trainer.test_freq"] == "5"
        assert last["trainer.save_freq"] == "5" and last["+ray_init.address"] == "local"


def load_device_module(name: str):
    sys.path.insert(0, str(DEVICE))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(DEVICE))


def test_the_resume_check_passes_equal_weights_and_stops_on_any_difference(capsys):
    check = load_device_module("proas_resume_check")
    gen = torch.Generator().manual_seed(0)
    saved = {"w": torch.randn(3, 4, generator=gen), "b": torch.randn(4, generator=gen), "step": 5}
    model = {k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in saved.items()}
    check.check_loaded(model, saved, 0)
    assert "2 tensors loaded, 0 differ" in capsys.readouterr().out
    model["w"][1, 2] = torch.nextafter(model["w"][1, 2], torch.tensor(10.0))  # one ulp
    with pytest.raises(RuntimeError, match="1 tensors differ"):
        check.check_loaded(model, saved, 0)
    assert check.compare({"w": saved["w"].double()}, {"w": saved["w"]}) == ["w"]  # dtype counts
    assert check.compare({}, {"w": saved["w"]}) == ["w"]


def test_compare_ckpt_counts_identical_tensors_and_the_largest_difference(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    w = torch.zeros(2, 2)
    torch.save({"w": w, "v": torch.ones(3)}, a / "model_world_size_1_rank_0.pt")
    moved = w + torch.tensor([[0.0, 0.25], [0.0, 0.0]])
    torch.save({"w": moved, "v": torch.ones(3)}, b / "model_world_size_1_rank_0.pt")
    cmd = [sys.executable, str(DEVICE / "compare_ckpt.py"), str(a), str(b)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 tensors, 1 bit-identical, max |diff| 0.25 (w)" in proc.stdout
    proc = subprocess.run([sys.executable, str(DEVICE / "compare_ckpt.py"), str(a), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "no model_world_size_*_rank_*.pt" in proc.stderr


def test_steps_csv_keeps_each_runs_console_metrics_in_order(tmp_path):
    a = tmp_path / "full.log"
    a.write_text("\x1b[36m(TaskRunner pid=1)\x1b[0m step:1 - actor/grad_norm:0.062 - timing_s/step:12.5 - x:1\n"
                 "noise: global_step_1 saved\n"
                 "\x1b[36m(TaskRunner pid=1)\x1b[0m step:2 - actor/grad_norm:0.000 - episode/success_rate:0.250\n")
    b = tmp_path / "resumed.log"
    b.write_text("step:0 - val/success_rate:0.375 - val/pick_and_place_simple_success_rate:0.5\n"
                 "step:2 - actor/grad_norm:0.001\n")
    out = subprocess.run([sys.executable, str(DEVICE / "steps_csv.py"), f"full={a}", f"resumed={b}"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    head = out[0].split(",")
    rows = [dict(zip(head, line.split(","))) for line in out[1:]]
    assert [(r["run"], r["step"]) for r in rows] == [("full", "1"), ("full", "2"), ("resumed", "0"), ("resumed", "2")]
    assert [r["actor/grad_norm"] for r in rows] == ["0.062", "0.000", "", "0.001"]
    assert [r["val/success_rate"] for r in rows] == ["", "", "0.375", ""]
    assert rows[0]["timing_s/step"] == "12.5" and rows[0]["episode/success_rate"] == ""
    assert rows[1]["episode/success_rate"] == "0.250"
    empty = tmp_path / "empty.log"
    empty.write_text("no metrics here\n")
    bad = subprocess.run([sys.executable, str(DEVICE / "steps_csv.py"), f"x={empty}"], capture_output=True, text=True)
    assert bad.returncode == 1 and "no 'step:N - key:value' lines" in bad.stderr


_FLAGS = ("import torch, flash_attn; b = torch.backends.cuda; "
          "print(b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.math_sdp_enabled(), b.cudnn_sdp_enabled())")


def _import_standin(kernel: str | None) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k != "PROAS_SDPA_KERNEL"}
    src = str(Path(__file__).resolve().parents[1] / "src")
    env["PYTHONPATH"] = os.pathsep.join([str(DEVICE), src, env.get("PYTHONPATH", "")])
    if kernel is not None:
        env["PROAS_SDPA_KERNEL"] = kernel
    return subprocess.run([sys.executable, "-c", _FLAGS], env=env, capture_output=True, text=True)


def test_the_standin_holds_sdpa_to_the_kernel_run_sh_names_in_each_process_that_imports_it():
    """The cause of the recipe's NaN gradients under sdpa: cuDNN's kernel, which PyTorch picks on
    an H100/H200, gives a NaN gradient for a left-padded batch of 64 more than a multiple of 128
    tokens (results/verl_agent/attn_check.txt). The worker that imports flash_attn must run
    with that kernel off and efficient on (flash and math stay on for calls without a mask on
    grouped KV heads, which efficient cannot take); unset, PyTorch's defaults stay."""
    held = _import_standin("efficient")
    assert held.returncode == 0, held.stderr
    assert held.stdout.split() == ["True", "True", "True", "False"]
    default = _import_standin(None)
    assert default.returncode == 0
    assert "True" in default.stdout.split()[3:]  # cuDNN's switch is on unless held off
    bad = _import_standin("flash")
    assert bad.returncode != 0 and "sdpa kernel 'flash' is not one of" in bad.stderr


def test_run_sh_runs_sdpa_on_the_efficient_kernel_and_checks_the_length_that_broke():
    text = (DEVICE / "run.sh").read_text()
    assert "PROAS_ATTN_IMPLEMENTATION=${PROAS_ATTN_IMPLEMENTATION:-sdpa}" in text
    assert "PROAS_SDPA_KERNEL=${PROAS_SDPA_KERNEL-efficient}" in text
    assert "--lengths 640 704" in text and '--require "$PROAS_ATTN_IMPLEMENTATION"' in text


def test_a_left_padded_batch_of_the_length_that_broke_has_finite_gradients_on_the_cpu(tmp_path):
    """attn_check's case (704 tokens, one row two-thirds left padding, so its padding queries see
    no key) is well defined: on the CPU sdpa and eager give a finite loss and gradient that agree,
    so a NaN on the GPU is the kernel's, not the batch's."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(64)} | {"[UNK]": 64}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[UNK]")
    fast.save_pretrained(tmp_path)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=65, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024)
    Qwen2ForCausalLM(cfg).save_pretrained(tmp_path)
    check = load_device_module("attn_check")
    loss_s, norm_s = check.grad_norm(str(tmp_path), "sdpa", "cpu", length=704)
    loss_e, norm_e = check.grad_norm(str(tmp_path), "eager", "cpu", length=704)
    assert all(map(torch.isfinite, map(torch.tensor, (loss_s, norm_s, loss_e, norm_e))))
    assert abs(loss_s - loss_e) < 0.05 and abs(norm_s - norm_e) < 0.05 * norm_e


def test_attn_check_never_runs_a_model_directory_s_own_code(tmp_path, monkeypatch):
    """A model directory whose config.json maps its classes to its own Python file (auto_map):
    transformers, not told, asks on stdin whether to run it; answered yes here, the check must
    still refuse rather than import the file."""
    import json

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(16)} | {"[UNK]": 16}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[UNK]").save_pretrained(tmp_path)
    Qwen2ForCausalLM(Qwen2Config(vocab_size=17, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1)).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(model_type="evilmodel", auto_map={"AutoConfig": "evil.EvilConfig",
                                                 "AutoModelForCausalLM": "evil.EvilModel"})
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    marker = tmp_path / "RAN"
    (tmp_path / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import Qwen2Config, Qwen2ForCausalLM\n"
        "class EvilConfig(Qwen2Config):\n    model_type = 'evilmodel'\n"
        "class EvilModel(Qwen2ForCausalLM):\n    config_class = EvilConfig\n")
    monkeypatch.setattr("builtins.input", lambda *a, **k: "y")
    check = load_device_module("attn_check")
    with pytest.raises(ValueError, match="custom code"):
        check.grad_norm(str(tmp_path), "eager", "cpu")
    assert not marker.exists()


def test_plot_steps_keeps_a_resumed_steps_last_value_and_writes_a_png(tmp_path):
    # the plot is drawn here, with the main environment's matplotlib; the verl venv that also
    # runs this file has none, and the main suite runs this test
    pytest.importorskip("matplotlib")
    plot = load_device_module("plot_steps")
    rows = [{"run": "grpo", "step": "0", "val/success_rate": "0.25"},
            {"run": "grpo", "step": "5", "val/success_rate": "0.30", "episode/success_rate": "0.5"},
            {"run": "grpo", "step": "1", "val/success_rate": "", "episode/success_rate": "0.125"},
            {"run": "grpo", "step": "5", "val/success_rate": "0.40", "episode/success_rate": ""},  # resumed at 5
            {"run": "proas", "step": "0", "val/success_rate": "0.2"}]
    assert plot.series(rows, "val/success_rate") == {"grpo": [(0, 0.25), (5, 0.40)], "proas": [(0, 0.2)]}
    assert plot.series(rows, "episode/success_rate") == {"grpo": [(1, 0.125), (5, 0.5)]}
    csv_path = tmp_path / "steps.csv"
    lines = [",".join([r["run"], r["step"], r["val/success_rate"], r.get("episode/success_rate", "")]) for r in rows]
    csv_path.write_text("run,step,val/success_rate,episode/success_rate\n" + "\n".join(lines) + "\n")
    png = tmp_path / "learn.png"
    proc = subprocess.run([sys.executable, str(DEVICE / "plot_steps.py"), str(csv_path), "--out", str(png)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "3 lines" in proc.stdout and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = tmp_path / "bad.csv"
    bad.write_text("run,step,val/success_rate\ngrpo,zero,0.5\n")
    proc = subprocess.run([sys.executable, str(DEVICE / "plot_steps.py"), str(bad), "--out", str(png)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "not a number" in proc.stderr


def test_run_sh_watch_and_pack_read_the_arms_that_learn_left_without_setting_anything_up(tmp_path):
    """PHASES="watch pack": no installs; each arm's state from its pid and exit-status files, its
    last step and validation success from its log; pack copies the logs and writes the CSV."""
    learn = tmp_path / "work" / "learn"
    learn.mkdir(parents=True)
    dead = subprocess.run(["bash", "-c", "echo $$"], capture_output=True, text=True).stdout.strip()
    (learn / "grpo-lr1e-4.log").write_text("step:0 - val/success_rate:0.250\nstep:1 - episode/success_rate:0.125\n"
                                           "step:5 - val/success_rate:0.375 - episode/success_rate:0.5\n")
    (learn / "grpo-lr1e-4.pid").write_text(dead)
    (learn / "grpo-lr1e-4.rc").write_text("0\n")
    (learn / "grpo_proas-lr1e-4.log").write_text("step:0 - val/success_rate:0.200\n")
    (learn / "grpo_proas-lr1e-4.pid").write_text(dead)  # no exit status: the trainer was killed
    out = tmp_path / "out"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "VERL_AGENT_DIR": str(tmp_path),
           "WORK": str(tmp_path / "work"),
           "OUT": str(out), "PHASES": "watch pack", "ARMS": "grpo grpo_proas", "LRS": "1e-4", "WATCH": "60",
           "WHEELS": str(tmp_path / "no-wheels")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # python3 for steps_csv.py
    proc = subprocess.run(["bash", str(DEVICE / "run.sh")], cwd=DEVICE.parents[2], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "grpo-lr1e-4: ended, exit 0; step:5 val/success_rate:0.375 episode/success_rate:0.5" in proc.stdout
    assert "grpo_proas-lr1e-4: gone (no exit status: killed?); step:0 val/success_rate:0.200" in proc.stdout
    assert "pip" not in proc.stdout + proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["grpo-lr1e-4.log", "grpo_proas-lr1e-4.log", "learn_steps.csv"]
    lines = (out / "learn_steps.csv").read_text().splitlines()
    assert [line.split(",")[:3] for line in lines[1:]] == [
        ["grpo-lr1e-4", "0", "0.250"], ["grpo-lr1e-4", "1", ""], ["grpo-lr1e-4", "5", "0.375"],
        ["grpo_proas-lr1e-4", "0", "0.200"]]


def test_unstage_unpacks_the_two_halves_in_order_and_refuses_a_wrong_half(tmp_path):
    import hashlib
    import io
    import tarfile

    src = tmp_path / "src"
    (src / "model").mkdir(parents=True)
    (src / "model" / "config.json").write_text('{"a": 1}')
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        tar.add(src / "model", arcname="./model")
    data = buf.getvalue()
    half = len(data) // 2
    (tmp_path / "sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    cmd = [sys.executable, str(DEVICE / "unstage.py"), str(tmp_path / "dest"), "--sha256", str(tmp_path / "sha256")]
    proc = subprocess.run(cmd, input=data, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "dest" / "model" / "config.json").read_text() == '{"a": 1}'
    swapped = subprocess.run(cmd, input=data[half:] + data[:half], capture_output=True, text=False, timeout=60)
    assert swapped.returncode == 2 and b"out of order" in swapped.stderr
    # a missing sha256 file, or a DEST that is a file: one line each, exit 2 (were tracebacks)
    missing = subprocess.run(cmd[:-1] + [str(tmp_path / "none")], input=data, capture_output=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.startswith(b"unstage: cannot read ")
    assert b"Traceback" not in missing.stderr
    (tmp_path / "file").write_text("x")
    on_file = subprocess.run([cmd[0], cmd[1], str(tmp_path / "file"), *cmd[3:]], input=data, capture_output=True,
                             timeout=60)
    assert on_file.returncode == 2 and on_file.stderr.startswith(b"unstage: cannot unpack")


@pytest.mark.parametrize("env, message", [
    ({"ARMS": "grpo bogus"}, "unknown arm bogus in ARMS"),
    ({"LRS": "1e-4 fast"}, "LRS holds fast, not a positive number"),
    ({"LRS": "0"}, "LRS holds 0, not a positive number"),
    ({"PHASES": "learn wach"}, "unknown phase wach"),
    ({"WATCH": "0"}, "WATCH=0 is not a positive whole number"),
    ({"LEARN_STEPS": "4x"}, "LEARN_STEPS=4x is not a positive whole number"),
])
def test_run_sh_refuses_a_bad_arm_rate_phase_or_count_before_it_installs_or_starts_anything(tmp_path, env, message):
    """A bad entry anywhere in ARMS (not only the first) stops run.sh in one line, exit 2, before
    pip runs or any arm's trainer starts; the arms listed before it are not started."""
    work = tmp_path / "w"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # a python3 that records being called: nothing may run before the checks
    (bin_dir / "python3").write_text(f"#!/bin/sh\necho called >> {tmp_path}/python3_called\nexit 1\n")
    (bin_dir / "python3").chmod(0o755)
    base = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "VERL_AGENT_DIR": str(tmp_path),
            "WORK": str(work), "PHASES": "learn"}
    out = subprocess.run(["bash", str(DEVICE / "run.sh")], cwd=ROOT, env={**base, **env},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (work / "learn").exists() and not (tmp_path / "python3_called").exists()
