"""The lm policy's checkpoints are Hugging Face directories (save_pretrained of the model, or of
the LoRA adapters, plus the tokenizer) with the optimiser state beside them; runs resume from
them exactly; ``proas lm export`` copies them; older checkpoints still load (docs/lm.md)."""

import json

import pytest
import torch
from safetensors.torch import load_file

from proas.cli import main as proas_main
from proas.errors import ProasError
from proas.train import checkpoint as ckpt
from proas.train.config import build_config
from proas.train.loop import train

torch.set_num_threads(1)

#: a generate-mode tiny lm on the toy env (tests/toy_env.py): 4 steps, a checkpoint every 2,
#: a warmup and a cosine schedule, a KL reference, validation on 2 tasks; on the CPU (bit for bit)
ARGS = ["env.name=toy_env:make_env", "env.options.n_places=2", "env.options.max_steps=4", "env.options.n_train=8",
        "env.options.n_valid=4", "env.fixed_val_set.size=2", "env.tasks_per_step=2", "env.group_size=2",
        "train.progress=false", "train.steps=4", "train.save_every=2", "train.val_every=2", "seed=4",
        "train.rollout_log_every=0", "policy=lm", "policy.lm.device=cpu", "policy.lm.model_config=tiny",
        "policy.lm.max_new_tokens=5", "policy.lm.lr=1e-3", "policy.lm.warmup_ratio=0.34",
        "policy.lm.lr_schedule=cosine", "algo.kl_coef=0.01"]


def metrics(run_dir):
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def state_tensors(directory):
    return torch.load(directory / ckpt.STATE_FILE, map_location="cpu", weights_only=True)


def assert_equal_tensors(a, b, where=""):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            assert_equal_tensors(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_equal_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.fixture(scope="module", params=[0, 4], ids=["full", "lora"])
def runs(request, tmp_path_factory):
    """The same run twice: uninterrupted, and stopped after step 3 (its last checkpoint at step
    2, as a kill leaves it) then resumed to step 4."""
    root = tmp_path_factory.mktemp(f"lm_ckpt_{request.param}")
    args = ARGS + [f"policy.lm.lora_rank={request.param}"]
    train(build_config(args), run_dir=root / "full")
    train(build_config(args), run_dir=root / "part", stop_after=3)
    assert (root / "part" / "checkpoints" / "step_000002").is_dir()
    assert not (root / "part" / "checkpoints" / "step_000003").exists()
    train(None, resume=root / "part")
    return request.param, root / "full", root / "part"


def test_a_resumed_run_is_bit_identical_to_an_uninterrupted_one(runs):
    lora, full, part = runs
    assert [r["step"] for r in metrics(part)] == [0, 1, 2, 3, 4]
    assert metrics(part) == metrics(full)
    rates = [r["optim/lr"] for r in metrics(full)[1:]]
    assert rates[0] == 0.0 and rates[1] == pytest.approx(1e-3)  # the warmup, then the schedule
    weights = "adapter_model.safetensors" if lora else "model.safetensors"
    for step in (2, 4):
        a = full / "checkpoints" / f"step_{step:06d}"
        b = part / "checkpoints" / f"step_{step:06d}"
        assert_equal_tensors(load_file(a / weights), load_file(b / weights), f"weights at step {step}")
        sa, sb = state_tensors(a), state_tensors(b)
        assert_equal_tensors(sa["optimizer"], sb["optimizer"], f"optimiser at step {step}")
        ja, jb = (json.loads((d / ckpt.STATE_JSON).read_text())["state"] for d in (a, b))
        assert ja["lr_scheduler"] == jb["lr_scheduler"] and ja["lr_scheduler"]["last_epoch"] == step
        assert ja["rng_numpy"] == jb["rng_numpy"]
    # the optimiser state is AdamW's, over the weights the checkpoint's model holds
    opt = state_tensors(full / "checkpoints" / "step_000004")["optimizer"]
    # (LoRA: the adapters alone, all decayed; else biases and norms apart, without decay)
    assert {g["weight_decay"] for g in opt["param_groups"]} == ({0.01} if lora else {0.01, 0.0})


def test_a_checkpoint_is_a_hugging_face_directory_with_the_optimiser_beside_it(runs):
    from proas.lm.model import is_hf_model_dir, load_tokenizer
    from proas.train.warm_start import load_policy

    lora, full, _ = runs
    d = full / "checkpoints" / "step_000004"
    state = state_tensors(d)
    assert "policy" not in state and "optimizer" in state  # the weights are not in state.pt
    plain = json.loads((d / ckpt.STATE_JSON).read_text())["state"]
    assert plain["policy_files"] == "huggingface"
    policy, *_ = load_policy(d)
    tok = load_tokenizer(str(d))
    text = "<think>x</think><action>go to desk 1</action>"
    assert tok(text)["input_ids"] == policy.tokenizer(text)["input_ids"] and tok.chat_template
    sums = json.loads((d / ckpt.CHECKSUMS_FILE).read_text())["sha256"]
    if lora:
        assert (d / "adapter_config.json").is_file() and not (d / "model.safetensors").exists()
        assert "adapter_model.safetensors" in sums
        saved = load_file(d / "adapter_model.safetensors")
        live = {k: v for k, v in policy.module.state_dict().items() if "lora_" in k}
        assert len(saved) == len(live) > 0
    else:
        from transformers import AutoModelForCausalLM

        assert "model.safetensors" in sums and "config.json" in sums
        model = AutoModelForCausalLM.from_pretrained(d, local_files_only=True)  # loadable by anything
        for (n, a), b in zip(model.state_dict().items(), policy.module.state_dict().values()):
            assert torch.equal(a, b), n
        assert not is_hf_model_dir(d)  # init_from reads it as a (verified) checkpoint
        # the weights are checksummed like the state: a changed byte is caught
        raw = bytearray((d / "model.safetensors").read_bytes())
        raw[-1] ^= 1
        (d / "model.safetensors").write_bytes(bytes(raw))
        assert ckpt.verify_checkpoint(d) == "model.safetensors does not match its sha256"
        raw[-1] ^= 1
        (d / "model.safetensors").write_bytes(bytes(raw))
        assert ckpt.verify_checkpoint(d) is None


def test_export_copies_a_checkpoint_and_merges_lora(runs, tmp_path):
    from proas.train.warm_start import load_policy

    lora, full, _ = runs
    assert proas_main(["lm", "export", str(full), str(tmp_path / "hf")]) == 0
    best = full / "best"
    out = tmp_path / "hf"
    assert not (out / "state.pt").exists() and not (out / "checksums.json").exists()
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    if not lora:  # a copy, byte for byte
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            assert (out / name).read_bytes() == (best / name).read_bytes(), name
    # either way an RL run can start from it, with the checkpoint's weights (LoRA merged)
    from proas.train.warm_start import build_policy

    args = [a for a in ARGS if not a.startswith("policy.lm.model_config")]
    started = build_policy(build_config(args + [f"policy.lm.init_from={out}"]), 0)
    src, *_ = load_policy(best)
    model = src.module.merge_and_unload() if lora else src.module
    for (n, a), b in zip(model.state_dict().items(), started.module.state_dict().values()):
        assert torch.allclose(a, b, atol=1e-6), n


def test_older_lm_checkpoints_load_but_are_not_resumed(runs, tmp_path):
    """A checkpoint from before Hugging Face checkpoints (every weight in state.pt) still loads
    for eval, export and init_from; resuming one is refused in one line."""
    import shutil

    from proas.cli.lm import export_hf
    from proas.train.warm_start import load_policy

    lora, full, _ = runs
    if lora:
        pytest.skip("one layout is enough")
    run = tmp_path / "old"
    shutil.copytree(full, run)
    for d in sorted((run / "checkpoints").glob("step_*")):
        state = ckpt.load_state(d)
        policy, *_ = load_policy(d)
        state.pop("policy_files")
        state.pop("lr_scheduler")
        state.pop("format_version")
        state["policy"] = policy.state_dict()
        shutil.rmtree(d)
        ckpt.save_checkpoint(d, state, None)  # the layout before: weights in state.pt, no model files
    old = run / "checkpoints" / "step_000004"
    assert not (old / "config.json").exists()
    loaded, *_ = load_policy(old)
    for a, b in zip(loaded.module.state_dict().values(), policy.module.state_dict().values()):
        assert torch.equal(a, b)
    export_hf(old, tmp_path / "hf")
    assert (tmp_path / "hf" / "model.safetensors").is_file()
    with pytest.raises(ProasError) as err:
        train(None, resume=run)
    assert "cannot be resumed" in str(err.value) and "policy.lm.init_from" in str(err.value)
    assert "\n" not in str(err.value)
