"""The trainer's config: defaults, dotted overrides, shorthands, clear errors, YAML round trip."""

import re

import pytest

from proas.errors import ProasError
from proas.train.config import Config, build_config, config_from_yaml, config_to_yaml


def test_defaults_are_the_main_job():
    cfg = build_config([])
    assert (cfg.env.name, cfg.policy.kind, cfg.algo.estimator, cfg.algo.shaping, cfg.seed) == (
        "household", "scorer", "grpo", "proas", 0)
    assert cfg.train.steps == 150 and cfg.env.group_size == 8 and cfg.env.tasks_per_step == 16
    assert cfg.env.invalid_action_penalty == 0.1 and cfg.train.val_every == 10
    assert cfg.env.fixed_val_set.size == 128


def test_dotted_overrides_and_shorthands_from_the_issue():
    cfg = build_config(["env=household", "algo.estimator=gigpo", "algo.shaping=proas", "seed=1",
                        "env.fixed_train_set.path=/some/dir"])
    assert cfg.algo.estimator == "gigpo" and cfg.seed == 1
    assert cfg.env.fixed_train_set.path == "/some/dir"
    assert build_config(["policy=lm", "policy.lm.model_config=tiny"]).policy.kind == "lm"


def test_dapo_defaults_to_clip_higher_and_dynamic_sampling():
    a = build_config(["algo.estimator=dapo"]).algo
    assert a.resolved_clip_high() == 0.28 and a.resolved_dynamic_sampling()
    g = build_config([]).algo
    assert g.resolved_clip_high() == 0.2 and not g.resolved_dynamic_sampling()
    assert build_config(["algo.estimator=dapo", "algo.clip_high=0.3"]).algo.resolved_clip_high() == 0.3


def test_the_lm_is_anchored_to_its_start_by_kl_unless_told_otherwise():
    # verl-agent's LLM scripts: low-variance KL 0.01 to the reference; the scorer has none
    assert build_config(["policy=lm", "policy.lm.model_config=tiny"]).algo.resolved_kl_coef("lm") == 0.01
    assert build_config([]).algo.resolved_kl_coef("scorer") == 0.0
    assert build_config(["algo.kl_coef=0"]).algo.resolved_kl_coef("lm") == 0.0
    assert build_config(["algo.kl_coef=0.05"]).algo.resolved_kl_coef("scorer") == 0.05
    with pytest.raises(ProasError, match="algo.kl_coef"):
        build_config(["algo.kl_coef=-0.1"])


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("algo.nope=1", "algo.nope"),
        ("seed=abc", "seed"),
        ("algo.estimator=ppo2", "algo.estimator='ppo2' is not one of"),
        ("algo.shaping=magic", "algo.shaping"),
        ("train.steps=0", "train.steps=0 is outside [1, "),
        ("env.invalid_action_penalty=-1", "env.invalid_action_penalty"),
        ("algo.graph.prune=1.5", "algo.graph.prune"),
        ("algo.graph.source=load", "algo.graph.path"),
        ("policy=lm", "policy.lm.model_path"),
        ("no_equals_sign", "key=value"),
    ],
)
def test_bad_overrides_are_one_line_errors(override, fragment):
    with pytest.raises(ProasError) as info:
        build_config([override])
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_yaml_round_trip_is_exact():
    cfg = build_config(["algo.estimator=gigpo", "seed=3", "env.options.backend=fast"])
    assert config_from_yaml(config_to_yaml(cfg)) == cfg


def test_corrupt_yaml_is_a_clear_error():
    with pytest.raises(ProasError, match="config.yaml"):
        config_from_yaml("seed: [1, 2\n")
    with pytest.raises(ProasError, match="algo"):
        config_from_yaml("algo:\n  bogus: 1\n")


def test_config_is_a_plain_dataclass():
    assert isinstance(build_config([]), Config)


def test_show_config_prints_the_resolved_yaml(capsys):
    from proas.cli import main

    assert main(["train", "--show-config", "seed=2", "algo.estimator=dapo"]) == 0
    text = capsys.readouterr().out
    assert config_from_yaml(text) == build_config(["seed=2", "algo.estimator=dapo"])
    # the keys left unset say what they mean for this estimator, env and policy
    assert "#   algo.clip_high: 0.28\n" in text and "#   algo.kl_coef: 0.0\n" in text
    assert "#   algo.gigpo_mode: mean_std_norm\n" in text and "#   algo.dynamic_sampling: True\n" in text
    assert main(["train", "--show-config", "policy=lm", "policy.lm.model_config=tiny", "algo.clip_high=0.3"]) == 0
    text = capsys.readouterr().out
    assert "#   algo.kl_coef: 0.01\n" in text and "  clip_high: 0.3\n" in text and "#   algo.clip_high" not in text
    assert main(["train", "--show-config", "algo.estimator=nope"]) == 2
    assert "algo.estimator" in capsys.readouterr().err


def test_a_run_recorded_from_another_checkout_is_the_same_setting_and_is_relocated(tmp_path):
    from proas.tasksets import default_root
    from proas.train.config import relocate_shipped_paths, same_setting, shipped_relative

    here = build_config([f"env.fixed_train_set.path={default_root() / 'fixed_train_set' / 'seed1' / 'shop'}"])
    moved = build_config(["env.fixed_train_set.path=/elsewhere/code/src/proas/data/fixed_train_set/seed1/shop",
                          "train.steps=40"])
    assert shipped_relative(moved.env.fixed_train_set.path) == "fixed_train_set/seed1/shop"
    assert same_setting(here, moved)
    other_seed = build_config(["env.fixed_train_set.path=/elsewhere/code/src/proas/data/fixed_train_set/seed2/shop"])
    assert not same_setting(here, other_seed)
    assert not same_setting(here, build_config(["env.fixed_train_set.path=/elsewhere/my_schedule"]))
    assert not same_setting(here, build_config(list(
        [f"env.fixed_train_set.path={here.env.fixed_train_set.path}", "algo.shaping=none"])))

    relocated = relocate_shipped_paths(moved)
    assert relocated.env.fixed_train_set.path == here.env.fixed_train_set.path
    assert moved.env.fixed_train_set.path.startswith("/elsewhere")  # the input is not changed
    # a path that exists where it was recorded, or that is not shipped data, is left alone
    own = tmp_path / "proas" / "data" / "fixed_train_set" / "seed1" / "shop"
    own.mkdir(parents=True)
    assert relocate_shipped_paths(build_config([f"env.fixed_train_set.path={own}"])).env.fixed_train_set.path == str(
        own
    )
    assert (
        relocate_shipped_paths(build_config(["env.fixed_train_set.path=/elsewhere/x"])).env.fixed_train_set.path
        == "/elsewhere/x"
    )


def test_every_config_key_named_in_the_docs_exists():
    """Backticked dotted keys (``env.x.y``, ``algo.z=1``) in docs/*.md whose first part is a
    top-level config section must be keys of the schema. docs/verl.md is left out: it names
    verl-agent's own config (``env.rollout.n``), whose sections share our names; tokens ending
    in a file extension (``train.log``) are file names, not keys."""
    import dataclasses
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[1] / "docs"
    sections = {f.name for f in dataclasses.fields(Config)}
    token = re.compile(r"`([a-z_]+(?:\.[A-Za-z0-9_]+)+)(?:=[^`]*)?`")
    file_ext = {"log", "json", "jsonl", "yaml", "yml", "md", "py", "png", "gz", "txt", "csv", "pt"}

    def exists(key: str) -> bool:
        node = Config()
        for part in key.split("."):
            if isinstance(node, dict):  # env.options: free-form keyword arguments
                return True
            if not dataclasses.is_dataclass(node) or part not in {f.name for f in dataclasses.fields(node)}:
                return False
            node = getattr(node, part)
        return True

    checked, missing = 0, []
    for path in sorted(docs.glob("*.md")):
        if path.name == "verl.md":
            continue
        for m in token.finditer(path.read_text(encoding="utf-8")):
            key = m.group(1)
            if key.split(".")[0] not in sections or key.rsplit(".", 1)[-1] in file_ext:
                continue
            checked += 1
            if not exists(key):
                missing.append(f"{path.name}: {key}")
    assert checked > 30  # the scan finds the documented keys at all
    assert not missing, missing


def _numeric_keys():
    import dataclasses

    from proas.train.config import Config

    out = []

    def walk(obj, prefix):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if dataclasses.is_dataclass(v):
                walk(v, prefix + f.name + ".")
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append((prefix + f.name, type(v)))
    walk(Config(), "")
    return out


@pytest.mark.parametrize("key,kind", _numeric_keys())
def test_every_number_of_the_config_is_refused_when_not_finite_or_a_negative_count(key, kind):
    """The class, not examples: every numeric field, walked from the config itself, refuses NaN
    and infinities (floats) or a negative value (counts), in one line naming the key."""
    bad = ["nan", "inf", "-inf"] if kind is float else ["-1", "-5"]
    for value in bad:
        with pytest.raises(ProasError, match=re.escape(key)):
            build_config([f"{key}={value}"])


def test_seeds_must_fit_every_rng_the_run_seeds():
    assert build_config(["seed=4294967295"]).seed == 2**32 - 1
    for value in ("4294967296", str(2**64), "-1"):
        with pytest.raises(ProasError, match="seed"):
            build_config([f"seed={value}"])
    with pytest.raises(ProasError, match="final_val_temperatures"):
        build_config(["train.final_val_temperatures=[1.0,nan]"])
