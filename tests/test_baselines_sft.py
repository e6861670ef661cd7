"""Direct and SFT baselines: Direct = step 0 of an RL run, SFT learns from the oracle and keeps its
best checkpoint where ``proas eval`` finds it."""

import json

import pytest
import torch

from proas.baselines.direct import direct_eval
from proas.baselines.sft import (
    LM_THOUGHT,
    SFTOptions,
    oracle_examples,
    teacher_data,
    train_sft,
)
from proas.cli import main as proas_main
from proas.errors import ProasError
from proas.lm.policy import LMPolicy
from proas.lm.prompt import project_action
from proas.train.config import build_config
from proas.train.evaluate import evaluate_checkpoint
from proas.train.loop import train
from proas.train.warm_start import build_policy

torch.set_num_threads(1)

TOY = ["env.name=toy_env:make_env", "env.options.n_places=4", "env.options.max_steps=8", "env.options.n_train=32",
       "env.options.n_valid=16", "train.progress=false"]


def test_direct_equals_step_zero_of_an_rl_run(tmp_path):
    c = build_config(TOY + ["policy.val_temperature=1.0", "train.steps=1", "env.tasks_per_step=2",
                            "env.group_size=2"])
    train(c, run_dir=tmp_path / "rl")
    step0 = json.loads((tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()[0])
    res, info = direct_eval(c)
    assert info["n"] == 16
    got = res.metrics()
    assert {k: got[k] for k in ("val/sr", "val/ts", "val/steps")} == {
        k: step0[k] for k in ("val/sr", "val/ts", "val/steps")}
    # at temperature 1 the untrained policy wanders: episodes are not all of the maximal length
    assert 0 < got["val/steps"] <= 8


def test_direct_save_is_a_run_dir_that_eval_reads(tmp_path, capsys):
    assert proas_main(["direct", *TOY, "policy.val_temperature=1.0", "--seed", "3", "--save",
                       str(tmp_path / "d"), "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    assert proas_main(["eval", str(tmp_path / "d"), "--seed", "3", "--json"]) == 0
    ev = json.loads(capsys.readouterr().out)
    assert ev["step"] == 0 and ev["checkpoint"].endswith("best")
    assert {k: ev[k] for k in ("sr", "ts", "steps")} == {k: direct[k] for k in ("sr", "ts", "steps")}
    # a second save into the same run directory is refused, the first one is intact
    assert proas_main(["direct", *TOY, "--save", str(tmp_path / "d")]) == 2
    assert (tmp_path / "d" / "best" / "state.pt").exists()


def test_oracle_examples_rebuild_the_rollout_contexts():
    from toy_env import make_env

    env = make_env(n_places=4, max_steps=8)
    ex, failed = oracle_examples(env, ["train-000", "train-001"], env_label="toy", max_steps=8)
    assert failed == 0 and len(ex) == 8  # the toy oracle has 4 steps
    ctx, action = ex[2]
    assert action == env.oracle("train-000")[2] and ctx.step == 2
    assert [a for _, a in ctx.history] == env.oracle("train-000")[:2]
    assert ctx.task.startswith("put the ")
    assert action in ctx.admissible
    # an oracle cut short by the step limit does not win: its steps are left out
    ex, failed = oracle_examples(env, ["train-000"], env_label="toy", max_steps=3)
    assert ex == [] and failed == 1


def test_sft_raises_validation_sr_above_the_untrained_policy(tmp_path):
    c = build_config(TOY)
    summary = train_sft(c, tmp_path / "sft", SFTOptions(epochs=20, max_tasks=8, lr=0.05, batch_size=8, val_every=5))
    rows = [json.loads(x) for x in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and rows[0]["sft/examples"] == 32
    nll = [r["sft/nll"] for r in rows[1:]]
    assert nll[-1] < 0.7 * nll[0]
    assert summary["first_val_sr"] == rows[0]["val/sr"]
    assert summary["best_val_sr"] >= summary["first_val_sr"] + 0.25
    # the run records SFT's own knobs and what each epoch and validation took
    assert summary["options"] == {"epochs": 20, "lr": 0.05, "batch_size": 8, "val_every": 5, "max_tasks": 8,
                                  "sequence_loss": 0.0}
    assert all(r["time/train_s"] > 0 for r in rows[1:])
    assert [r["step"] for r in rows if "time/val_s" in r] == [0, 5, 10, 15, 20]
    # the best checkpoint is where proas eval looks, and reproduces its recorded figure
    epoch = summary["best_val_epoch"]
    res, info = evaluate_checkpoint(tmp_path / "sft", seed=c.seed * 7919 + epoch)
    assert info["step"] == epoch and res.sr == summary["best_val_sr"]


def test_sft_on_household_beats_untrained(tmp_path):
    c = build_config(["env=household", "env.fixed_val_set.size=24", "train.progress=false"])
    s = train_sft(c, tmp_path / "h", SFTOptions(epochs=4, max_tasks=150, lr=0.01, batch_size=32, val_every=2))
    assert s["oracle_failed"] == 0 and s["examples"] > 150
    assert s["best_val_sr"] > s["first_val_sr"]


def test_sft_refuses_bad_input(tmp_path):
    c = build_config(TOY)
    with pytest.raises(ProasError, match="--epochs"):
        train_sft(c, tmp_path / "a", SFTOptions(epochs=0))
    train_sft(c, tmp_path / "b", SFTOptions(epochs=1, max_tasks=2))
    with pytest.raises(ProasError, match="already"):
        train_sft(c, tmp_path / "b", SFTOptions(epochs=1, max_tasks=2))
    with pytest.raises(SystemExit) as stop:  # refused as the command line is parsed
        proas_main(["sft", *TOY, "--run-dir", str(tmp_path / "c"), "--epochs", "-1"])
    assert stop.value.code == 2 and not (tmp_path / "c").exists()


def test_teacher_data_of_the_scorer_and_the_lm():
    from toy_env import make_env

    env = make_env(n_places=4, max_steps=8)
    (ctx, action), *_ = oracle_examples(env, ["train-003"], env_label="toy", max_steps=8)[0]
    scorer = build_policy(build_config(TOY), 0)
    d = teacher_data(scorer, ctx, action)
    cands, _ = scorer.featurize(ctx)
    assert cands[d["choice"]] == action
    assert teacher_data(scorer, ctx, "fly to the moon") is None
    # lm: the taught response decodes to the oracle action through the policy's own projection
    lm = build_policy(build_config(TOY + ["policy=lm", "policy.lm.model_config=tiny"]), 0)
    d = teacher_data(lm, ctx, action)
    assert d["prompt"] == lm.encode_prompt(ctx) and d["response"][-1] in lm.stop_ids
    text = lm.tokenizer.decode(d["response"], skip_special_tokens=True)
    assert LM_THOUGHT in text and project_action(text, "toy") == (action, False)


def test_sft_trains_the_lm_policy(tmp_path):
    c = build_config(TOY + ["policy=lm", "policy.lm.model_config=tiny", "policy.lm.max_new_tokens=8",
                            "env.fixed_val_set.size=2"])
    summary = train_sft(c, tmp_path / "lm", SFTOptions(epochs=3, max_tasks=4, lr=3e-3, batch_size=8, val_every=3))
    # the rate as given (the schedule's peak: a warmup starts the optimiser at 0)
    assert summary["options"]["lr"] == 3e-3
    rows = [json.loads(x) for x in (tmp_path / "lm" / "metrics.jsonl").read_text().splitlines()]
    nll = [r["sft/nll"] for r in rows[1:]]
    assert nll[-1] < nll[0]
    assert (tmp_path / "lm" / "best" / "state.pt").exists()


def test_sft_task_subset_is_evenly_spaced_over_the_split():
    from proas.baselines.sft import sft_task_ids
    from toy_env import make_env

    env = make_env(n_train=10)
    c = build_config(TOY)
    assert sft_task_ids(c, env, 4) == ["train-000", "train-003", "train-006", "train-009"]
    assert sft_task_ids(c, env, None) == env.task_ids("train")
    assert sft_task_ids(c, env, 50) == env.task_ids("train")


def test_sft_divergence_is_a_clear_error(tmp_path):
    c = build_config(TOY)
    with pytest.raises(ProasError, match="diverged"):
        train_sft(c, tmp_path / "x", SFTOptions(epochs=3, max_tasks=8, lr=1e30, batch_size=8))
    assert (tmp_path / "x" / "best" / "state.pt").exists()  # the untrained checkpoint survives


# ---- SFT -> RL warm starts (policy.lm.init_from, policy.scorer.init_from, proas lm export)

def _best_policy_state(run_dir):
    """The weights of a run's best checkpoint: for the lm its Hugging Face directory (docs/lm.md),
    for the scorer ``policy`` in state.pt."""
    from safetensors.torch import load_file

    if (run_dir / "best" / "config.json").is_file():
        return load_file(run_dir / "best" / "model.safetensors")
    return torch.load(run_dir / "best" / "state.pt", weights_only=True)["policy"]


def _assert_same_weights(state, module):
    got = module.state_dict()
    assert set(got) == set(state)
    for k, v in state.items():
        assert torch.equal(got[k], v), k


# no validation: the SFT run's best checkpoint is its last epoch (with a random model's 0% success
# every epoch, the untrained epoch 0 would stay the best)
LM_TOY = TOY + ["policy=lm", "policy.lm.max_new_tokens=6", "env.fixed_val_set.enabled=false"]


def test_an_rl_run_starts_from_the_sft_checkpoint_of_the_lm_and_its_export(tmp_path):
    from proas.train.loop import Trainer

    train_sft(build_config(LM_TOY + ["policy.lm.model_config=tiny"]), tmp_path / "sft",
              SFTOptions(epochs=1, max_tasks=2, lr=3e-3, batch_size=8))
    sft_state = _best_policy_state(tmp_path / "sft")
    fresh = build_policy(build_config(LM_TOY + ["policy.lm.model_config=tiny"]), 0)
    assert any(not torch.equal(v, fresh.module.state_dict()[k]) for k, v in sft_state.items())  # SFT moved
    rl = build_config(LM_TOY + ["policy.lm.init_from=" + str(tmp_path / "sft"), "algo.kl_coef=0.01",
                                "train.val_before_train=false"])
    t = Trainer(rl, tmp_path / "rl")
    _assert_same_weights(sft_state, t.policy.module)
    _assert_same_weights(sft_state, t.ref)  # the KL reference is the initial (SFT) model
    # the same model as a Hugging Face directory, and an RL run from that directory
    assert proas_main(["lm", "export", str(tmp_path / "sft"), str(tmp_path / "hf")]) == 0
    assert (tmp_path / "hf" / "config.json").exists()
    t2 = Trainer(build_config(LM_TOY + ["policy.lm.init_from=" + str(tmp_path / "hf")]), tmp_path / "rl2")
    _assert_same_weights(sft_state, t2.policy.module)
    text = "<think>x</think><action>go to desk 1</action>"
    assert t2.policy.tokenizer(text)["input_ids"] == t.policy.tokenizer(text)["input_ids"]
    assert t2.policy.tokenizer.chat_template == t.policy.tokenizer.chat_template
    # a second export into the same directory is refused
    assert proas_main(["lm", "export", str(tmp_path / "sft"), str(tmp_path / "hf")]) == 2


def test_a_lora_sft_run_is_merged_when_an_rl_run_starts_from_it(tmp_path):
    import numpy as np

    train_sft(build_config(LM_TOY + ["policy.lm.model_config=tiny", "policy.lm.lora_rank=4"]), tmp_path / "sft",
              SFTOptions(epochs=1, max_tasks=2, lr=3e-2, batch_size=8))
    from proas.baselines.common import load_policy

    src, *_ = load_policy(tmp_path / "sft")
    rl = build_policy(build_config(LM_TOY + ["policy.lm.init_from=" + str(tmp_path / "sft")]), 0)
    assert not rl.lora and not any("lora" in k for k in rl.module.state_dict())
    from toy_env import make_env

    (ctx, _), *_ = oracle_examples(make_env(n_places=4, max_steps=8), ["train-000"], env_label="toy", max_steps=8)[0]
    d = src.act([ctx], np.random.default_rng(0), temperature=1.0)[0]
    batch = src.prepare([d.data])
    with torch.no_grad():
        a, b = src.evaluate(batch).logp, rl.evaluate(rl.prepare([d.data])).logp
        with src.module.disable_adapter():
            base = src.evaluate(batch).logp
    assert torch.allclose(a, b, atol=1e-5)  # the merged model is the LoRA model
    assert not torch.allclose(a, base, atol=1e-3)  # and the adapters had learned something


def test_an_rl_run_starts_from_the_sft_checkpoint_of_the_scorer(tmp_path):
    from proas.train.loop import Trainer

    train_sft(build_config(TOY + ["env.fixed_val_set.enabled=false"]), tmp_path / "sft",
              SFTOptions(epochs=2, max_tasks=4, batch_size=8))
    sft_state = _best_policy_state(tmp_path / "sft")
    fresh = build_policy(build_config(TOY), 0)
    assert any(not torch.equal(v, fresh.module.state_dict()[k]) for k, v in sft_state.items())  # SFT moved
    t = Trainer(build_config(TOY + ["policy.scorer.init_from=" + str(tmp_path / "sft"), "algo.kl_coef=0.01"]),
                tmp_path / "rl")
    _assert_same_weights(sft_state, t.policy.module)
    _assert_same_weights(sft_state, t.ref)
    with pytest.raises(ProasError, match="dim=16; this run has hash_bits=14, dim=8"):
        build_policy(build_config(TOY + ["policy.scorer.init_from=" + str(tmp_path / "sft"),
                                         "policy.scorer.dim=8"]), 0)
    with pytest.raises(ProasError, match="holds a 'scorer' policy, not 'lm'"):
        build_policy(build_config(TOY + ["policy=lm", "policy.lm.init_from=" + str(tmp_path / "sft")]), 0)
    with pytest.raises(ProasError, match="init_from replaces"):
        build_config(TOY + ["policy=lm", "policy.lm.model_config=tiny", "policy.lm.init_from=x"])
    with pytest.raises(ProasError, match="policy.scorer.init_from"):
        build_policy(build_config(TOY + ["policy.scorer.init_from=" + str(tmp_path / "none")]), 0)


def test_the_lm_policy_alone_leaves_reading_a_warm_start_run_to_the_trainer(tmp_path):
    lm = build_config(LM_TOY + ["policy.lm.init_from=" + str(tmp_path / "sft")]).policy.lm
    with pytest.raises(ProasError, match="names a proas run or checkpoint: build the policy with"):
        LMPolicy.from_config(lm)  # no load_run: the policies floor cannot read a run


def test_sft_of_a_score_mode_lm_learns_the_candidate_choice(tmp_path):
    from toy_env import make_env

    lm = build_policy(build_config(TOY + ["policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=score"]), 0)
    env = make_env(n_places=4, max_steps=8)
    (ctx, action), *_ = oracle_examples(env, ["train-003"], env_label="toy", max_steps=8)[0]
    d = teacher_data(lm, ctx, action)
    cands, _, _ = lm.score_item(ctx)
    assert cands[d["choice"]] == action and teacher_data(lm, ctx, "fly to the moon") is None


def test_sequence_nll_is_the_causal_lm_loss_over_prompt_and_oracle_response():
    """``sequence_nll`` equals Hugging Face's own causal-LM loss on each demonstration (prompt
    followed by the chosen candidate's tokens), token-weighted over a batch of unequal lengths."""
    from proas.baselines.sft import sequence_nll
    from toy_env import make_env

    lm = build_policy(build_config(TOY + ["policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=score"]), 0)
    env = make_env(n_places=4, max_steps=8)
    examples, _ = oracle_examples(env, ["train-003", "train-007"], env_label="toy", max_steps=8)
    data = [teacher_data(lm, c, a) for c, a in examples[:5]]
    seqs = [d["prompt"] + d["cands"][d["choice"]] for d in data]
    assert len({len(s) for s in seqs}) > 1  # padding is exercised
    total = n = 0.0
    with torch.no_grad():
        for s in seqs:
            ids = torch.tensor([s])
            with lm.compute():
                out = lm.module(input_ids=ids, labels=ids)
            total += float(out.loss) * (len(s) - 1)
            n += len(s) - 1
        got = float(sequence_nll(lm, data))
    assert got == pytest.approx(total / n, rel=1e-4)
    # a response the oracle did not choose is a different target
    other = [dict(d, choice=(d["choice"] + 1) % len(d["cands"])) for d in data]
    with torch.no_grad():
        assert float(sequence_nll(lm, other)) != pytest.approx(got, rel=1e-6)
    # generate mode: the prompt and the taught response
    gen = build_policy(build_config(TOY + ["policy=lm", "policy.lm.model_config=tiny"]), 0)
    gdata = [teacher_data(gen, c, a) for c, a in examples[:2]]
    seq = gdata[0]["prompt"] + gdata[0]["response"]
    with torch.no_grad():
        with gen.compute():
            want = float(gen.module(input_ids=torch.tensor([seq]), labels=torch.tensor([seq])).loss)
        assert float(sequence_nll(gen, gdata[:1])) == pytest.approx(want, rel=1e-4)


def test_sft_sequence_loss_is_recorded_and_changes_the_update(tmp_path, monkeypatch):
    monkeypatch.setenv("PROAS_COMMIT", "abc1234")  # a device copy has no .git: the commit comes from here
    c = build_config(TOY + ["policy=lm", "policy.lm.model_config=tiny", "policy.lm.mode=score",
                            "env.fixed_val_set.enabled=false"])
    runs = {}
    for w in (0.0, 1.0):
        train_sft(c, tmp_path / str(w), SFTOptions(epochs=2, max_tasks=4, lr=3e-3, batch_size=8, sequence_loss=w))
        runs[w] = [json.loads(x) for x in (tmp_path / str(w) / "metrics.jsonl").read_text().splitlines()]
    assert "sft/sequence_nll" not in runs[0.0][1]
    seq = [r["sft/sequence_nll"] for r in runs[1.0][1:]]
    assert all(x > 0 for x in seq) and seq[1] < seq[0]  # the whole-sequence loss falls
    # the same seed and data: only the added loss makes the choice loss differ
    assert runs[1.0][1]["sft/nll"] != pytest.approx(runs[0.0][1]["sft/nll"], rel=1e-9)
    summary = json.loads((tmp_path / "1.0" / "summary.json").read_text())
    assert summary["options"]["sequence_loss"] == 1.0
    assert summary["commit"] == "abc1234"


def test_sft_sequence_loss_is_refused_where_it_cannot_apply(tmp_path):
    with pytest.raises(ProasError, match="needs policy=lm"):
        train_sft(build_config(TOY), tmp_path / "s", SFTOptions(epochs=1, sequence_loss=0.5))
    c = build_config(TOY + ["policy=lm", "policy.lm.model_config=tiny"])
    with pytest.raises(ProasError, match="finite number >= 0"):
        train_sft(c, tmp_path / "l", SFTOptions(epochs=1, sequence_loss=-1.0))
    assert not (tmp_path / "s").exists() and not (tmp_path / "l").exists()
