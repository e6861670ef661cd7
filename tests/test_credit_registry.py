"""The registries of estimators and shapings: the names, each entry's typed options, and that
everything else (the CLI, the trainer's config, the verl hook) reads from them."""

import inspect

import numpy as np
import pytest

from credit_helpers import path_traj
from proas.credit import (
    ESTIMATORS,
    SHAPINGS,
    BaseAdvantage,
    CreditBatch,
    ReferenceGraph,
    annotate,
    compute_credit,
    register_estimator,
    register_shaping,
    shape,
)
from proas.credit.registry import SHAPING_OPTIONS, check_options, estimators_taking
from proas.types import Step, Trajectory


def trajectories():
    """Two groups of three: wins reach the goal, failures wander, with an error step."""
    return [
        path_traj("a", "1", 1.0, ["s0", "s1", "s2", "g"]),
        path_traj("a", "2", 0.0, ["s0", "s3", "s0", "s1"], errors={1}),
        path_traj("a", "3", 0.0, ["s0", "s1", "s1"]),
        path_traj("b", "1", 1.0, ["s0", "s4", "g"]),
        path_traj("b", "2", 0.0, ["s0", "s4", "s5", "s5"]),
        path_traj("b", "3", 1.0, ["s0", "s1", "s2", "g"]),
    ]


# ---------------------------------------------------------------------- the names, pinned by hand
def test_the_estimators_are_these():
    # a silently dropped or renamed entry fails here, not in a run
    assert tuple(ESTIMATORS) == ("grpo", "dapo", "gigpo", "rloo", "reinforce_pp", "migpo", "gae", "external")
    # the names a config or the command line may choose: all but the one whose input is an array
    from proas.credit.registry import estimator_names

    assert estimator_names() == ("grpo", "dapo", "gigpo", "rloo", "reinforce_pp", "migpo", "gae")


def test_the_shapings_are_these():
    assert tuple(SHAPINGS) == (
        "none", "proas", "no_mui", "no_apr", "mask_pm", "suffix", "random", "progress_reward",
    )


def test_the_options_and_defaults_are_these():
    def table(name):
        return {o.name: (o.type.__name__, o.default, o.choices) for o in ESTIMATORS[name].options.values()}

    assert table("grpo") == {
        "norm_by_std": ("bool", True, None),
        "epsilon": ("float", 1e-6, None),
        "group_stats": ("str", "steps", ("steps", "trajectories")),
        "step_penalty": ("ndarray", None, None),
    }
    assert table("gigpo") == {
        "gamma": ("float", 0.95, None),
        "step_weight": ("float", 1.0, None),
        "mode": ("str", "mean_norm", ("mean_norm", "mean_std_norm")),
        "epsilon": ("float", 1e-6, None),
        "group_stats": ("str", "steps", ("steps", "trajectories")),
        "step_penalty": ("ndarray", None, None),
    }
    assert table("rloo") == {}
    assert table("reinforce_pp") == {"epsilon": ("float", 1e-8, None),
                                     "whiten_over": ("str", "steps", ("steps", "trajectories"))}
    assert table("gae") == {"gamma": ("float", 1.0, None), "lam": ("float", 1.0, None),
                            "whiten": ("bool", True, None), "epsilon": ("float", 1e-8, None),
                            "bootstrap_truncated": ("bool", False, None), "values": ("ndarray", None, None),
                            "final_values": ("ndarray", None, None)}
    assert table("external") == {"advantage": ("ndarray", inspect.Parameter.empty, None)}
    assert ESTIMATORS["migpo"].options["milestones"].required
    assert {k: o.default for k, o in SHAPING_OPTIONS.items()} == {"epsilon": 1e-6, "progress_coef": 1.0}


def test_the_flags_are_these():
    assert [n for n, s in ESTIMATORS.items() if s.needs_values] == ["gae"]
    assert [n for n, s in ESTIMATORS.items() if s.outcome_only] == ["grpo", "dapo", "rloo", "reinforce_pp", "external"]
    assert [n for n, s in ESTIMATORS.items() if s.external] == ["external"]
    assert estimators_taking("group_stats") == ("grpo", "dapo", "gigpo", "migpo")
    assert estimators_taking("step_penalty") == ("grpo", "dapo", "gigpo", "migpo")
    assert [n for n, s in SHAPINGS.items() if s.reward_bonus] == ["progress_reward"]
    assert [n for n, s in SHAPINGS.items() if s.random] == ["random"]
    assert [n for n, s in SHAPINGS.items() if "epsilon" in s.options] == ["proas", "no_mui", "suffix", "random"]


# ---------------------------------------------------------------------- every entry
@pytest.mark.parametrize("name", ESTIMATORS)
def test_an_entry_has_exactly_its_functions_keyword_options(name):
    spec = ESTIMATORS[name]
    params = list(inspect.signature(spec.fn).parameters.values())[1:]
    assert list(spec.options) == [p.name for p in params]
    assert all(spec.options[p.name].default == p.default for p in params)


def _valued(trajs):
    return [Trajectory(t.group, t.trajectory, t.reward,
                       [Step(s.state, s.action, s.next_state, s.error, value=0.1 * k) for k, s in enumerate(t.steps)])
            for t in trajs]


@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_estimator_runs_on_its_defaults(name):
    trajs = trajectories()
    if ESTIMATORS[name].needs_values:
        trajs = _valued(trajs)
    graph = ReferenceGraph.from_trajectories([t for t in trajs if t.success])
    n_steps = sum(len(t) for t in trajs)
    opts = {"advantage": np.linspace(-1.0, 1.0, n_steps)} if ESTIMATORS[name].external else {}
    res = compute_credit(trajs, graph, estimator=name, shaping="none", estimator_options=opts)
    assert res.advantage.shape == (n_steps,)
    assert np.isfinite(res.advantage).all()
    if opts:  # the external advantage comes back as it went in, split into A_i and B_{i,t}
        np.testing.assert_allclose(res.base_advantage, opts["advantage"])
        with pytest.raises(ValueError, match="needs option"):
            compute_credit(trajs, graph, estimator=name, shaping="none")


@pytest.mark.parametrize("name", SHAPINGS)
def test_every_shaping_takes_every_shaping_option_and_adds_b_back(name):
    trajs = trajectories()
    batch = CreditBatch.from_trajectories(trajs)
    graph = ReferenceGraph.from_trajectories([t for t in trajs if t.success])
    base = BaseAdvantage(traj=np.zeros(batch.n_traj), step=np.arange(batch.n_steps, dtype=float),
                         uniform=np.ones(batch.n_steps, dtype=bool))
    # A_i = 0: every shaping leaves the step part alone
    assert shape(name, base, annotate(batch, graph), batch).tolist() == base.step.tolist()
    check_options("grpo", {}, name, {"epsilon": 0.1, "progress_coef": 2.0})


# ---------------------------------------------------------------------- checking options
@pytest.mark.parametrize("estimator, options, message", [
    ("grpo", {"gamma": 0.9}, r"unknown option\(s\) gamma for estimator 'grpo'; it takes: norm_by_std"),
    ("rloo", {"epsilon": 0.1}, r"unknown option\(s\) epsilon for estimator 'rloo'; it takes: none"),
    ("gigpo", {"mode": "mean"}, "unknown mode 'mean' for estimator 'gigpo'; choose one of: mean_norm, mean_std_norm"),
    ("grpo", {"group_stats": "rows"}, "choose one of: steps, trajectories"),
    ("gigpo", {"gamma": "0.9"}, "estimator 'gigpo' option gamma must be a float, got '0.9'"),
    ("grpo", {"norm_by_std": 1}, "option norm_by_std must be a bool, got 1"),
    ("gigpo", {"gamma": True}, "option gamma must be a float, got True"),
])
def test_a_bad_option_is_a_one_line_error_before_any_work(estimator, options, message):
    with pytest.raises(ValueError, match=message) as info:
        compute_credit(trajectories(), ReferenceGraph(), estimator=estimator, estimator_options=options)
    assert "\n" not in str(info.value)


def test_a_bad_shaping_option_names_it():
    with pytest.raises(ValueError, match=r"unknown option\(s\) eps for shaping 'proas'; it takes: epsilon"):
        compute_credit(trajectories(), ReferenceGraph(), shaping_options={"eps": 0.1})
    with pytest.raises(ValueError, match="shaping 'none' option progress_coef must be a float"):
        compute_credit(trajectories(), ReferenceGraph(), shaping="none", shaping_options={"progress_coef": "x"})


def test_an_int_is_a_float_and_gives_the_same_numbers():
    trajs = trajectories()
    graph = ReferenceGraph.from_trajectories([t for t in trajs if t.success])
    as_int = compute_credit(trajs, graph, estimator="gigpo", estimator_options={"step_weight": 2})
    as_float = compute_credit(trajs, graph, estimator="gigpo", estimator_options={"step_weight": 2.0})
    assert as_int.advantage.tolist() == as_float.advantage.tolist()


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown estimator 'ppo2'; choose one of: dapo, gae, gigpo"):
        check_options("ppo2", {}, "proas", {})
    with pytest.raises(ValueError, match="unknown shaping 'sideways'; choose one of: none, proas, no_mui"):
        check_options("grpo", {}, "sideways", {})


# ---------------------------------------------------------------------- registering
def test_registering_a_taken_name_or_an_unknown_shaping_option_is_an_error():
    with pytest.raises(ValueError, match="estimator 'grpo' is already registered"):
        register_estimator("grpo")(lambda batch: None)
    with pytest.raises(ValueError, match="shaping 'proas' is already registered"):
        register_shaping("proas")(lambda a, base, ann, batch: a)
    with pytest.raises(TypeError, match="option scale must be a keyword with a type annotation"):
        register_estimator("untyped")(lambda batch, *, scale=1.0: None)
    assert "untyped" not in ESTIMATORS
    with pytest.raises(TypeError, match="must be one of SHAPING_OPTIONS"):
        register_shaping("halve")(lambda a, base, ann, batch, *, factor=0.5: a * factor)
    assert "halve" not in SHAPINGS


def test_a_registered_estimator_is_used_by_name_with_its_typed_options():
    def sign(batch: CreditBatch, *, scale: float = 1.0) -> BaseAdvantage:
        return BaseAdvantage(traj=scale * np.sign(batch.reward - 0.5), step=np.zeros(batch.n_steps),
                             uniform=np.ones(batch.n_steps, dtype=bool))

    try:
        register_estimator("sign", outcome_only=True)(sign)
        assert ESTIMATORS["sign"].options["scale"].default == 1.0
        res = compute_credit(trajectories(), ReferenceGraph(), estimator="sign", shaping="none",
                             estimator_options={"scale": 2})
        assert set(res.advantage.tolist()) <= {-2.0, 2.0}
        with pytest.raises(ValueError, match="option scale must be a float"):
            compute_credit(trajectories(), ReferenceGraph(), estimator="sign", estimator_options={"scale": "x"})
    finally:
        ESTIMATORS.pop("sign", None)


# ---------------------------------------------------------------------- the readers
def test_the_cli_choices_are_the_registry():
    from proas.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.choices and "credit" in a.choices).choices["credit"]
    choices = {a.dest: a.choices for a in sub._actions if a.choices}
    # every registered estimator a name can choose, and each alias of one (ppo is gae), nothing else
    from proas.credit.registry import ESTIMATOR_ALIASES, estimator_names

    names = estimator_names()
    assert choices["estimator"] == sorted({*names, *(a for a, n in ESTIMATOR_ALIASES.items() if n in names)})
    assert "ppo" in choices["estimator"] and "gae" in choices["estimator"]
    assert choices["shaping"] == list(SHAPINGS)


def test_the_trainer_config_reads_the_registry():
    from proas.credit.registry import estimator_names
    from proas.train.config import ESTIMATORS as TRAINER_ESTIMATORS
    from proas.train.config import SHAPINGS as TRAINER_SHAPINGS

    assert TRAINER_SHAPINGS == tuple(SHAPINGS)
    # every credit estimator a name can choose, each by its one name (GAE is gae, ppo its alias)
    assert TRAINER_ESTIMATORS == ("grpo", "dapo", "gigpo", "rloo", "reinforce_pp", "migpo", "gae")
    assert TRAINER_ESTIMATORS == estimator_names()


def test_the_verl_hook_reads_the_registry():
    from proas.integrations.verl import HOOK_ESTIMATORS, VERL_BASE_ESTIMATORS

    assert HOOK_ESTIMATORS == ("grpo", "dapo", "gigpo", "rloo", "reinforce_pp", "migpo")
    assert VERL_BASE_ESTIMATORS == ("grpo", "dapo", "rloo", "reinforce_pp")
