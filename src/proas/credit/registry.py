"""The registries of base estimators and shapings: the one place their names and options live.

Each entry carries its typed options, read off the function's signature when it is registered
(``@register_estimator`` in ``estimators.py``, ``@register_shaping`` in ``shaping.py``), so an
option's type, default and allowed values are written once, in the function that uses them:

- the annotation gives the type (``bool``, ``int``, ``float``, ``str``) or, for ``Literal[...]``,
  the allowed strings; an ``np.ndarray`` option is a *per-batch array* (``step_penalty``,
  ``milestones``), computed for each batch by the caller rather than set in a config;
- a number's annotation may carry its allowed range (``in_range(float, "(0, 1]")``, a
  ``proas.ranges.Range``); a number outside, or any non-finite number, is refused;
- the default is the parameter's default (an option without one must be given).

Everything that names estimators, shapings or their options reads from here: ``compute_credit``
checks the options, ``proas credit`` takes its ``--estimator`` / ``--shaping`` choices, the
trainer's config validates ``algo.estimator`` / ``algo.shaping`` and passes each estimator only
the options it takes, and the verl hook checks its options at start-up. docs/credit.md,
"Registering an estimator or a shaping", shows how to add one.
"""

from __future__ import annotations

import inspect
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np

from proas.ranges import Range
from proas.types import MAX_ABS_NUMBER

__all__ = [
    "ESTIMATORS",
    "ESTIMATOR_ALIASES",
    "SHAPINGS",
    "SHAPING_OPTIONS",
    "EstimatorSpec",
    "Option",
    "ShapingSpec",
    "check_options",
    "estimator_choices",
    "estimator_name",
    "estimator_names",
    "estimator_spec",
    "estimators_taking",
    "in_range",
    "register_estimator",
    "register_shaping",
    "shaping_spec",
]

_REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Option:
    """One keyword option of an estimator or a shaping.

    ``type`` is ``bool``, ``int``, ``float``, ``str`` or ``np.ndarray`` (a per-batch array);
    ``choices`` are the allowed values of a ``Literal`` option; ``range`` those of a number
    (``in_range``); ``default`` is ``inspect.Parameter.empty`` when the option must be given.
    """

    name: str
    type: type
    default: Any = _REQUIRED
    choices: tuple[str, ...] | None = None
    range: Range | None = None

    @property
    def per_batch(self) -> bool:
        """An array computed for each batch (e.g. ``step_penalty``), not a setting."""
        return self.type is np.ndarray

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED

    def check(self, value: Any, owner: str) -> None:
        """Raise ``ValueError`` (one line, naming ``owner`` and the option) if ``value`` does not fit."""
        if self.per_batch:
            return  # shapes are checked by the function, which knows the batch
        if self.choices is not None:
            if not isinstance(value, str) or value not in self.choices:
                raise ValueError(f"unknown {self.name} {value!r} for {owner}; choose one of: {', '.join(self.choices)}")
            return
        is_bool = isinstance(value, (bool, np.bool_))
        if self.type is bool:
            ok = is_bool
        elif self.type is str:
            ok = isinstance(value, str)
        else:  # a bool is not a number here; an int is a float (JSON writes 1.0 as 1)
            numbers = (int, np.integer) if self.type is int else (int, float, np.integer, np.floating)
            ok = isinstance(value, numbers) and not is_bool
        if not ok:
            raise ValueError(f"{owner} option {self.name} must be a {self.type.__name__}, got {value!r}")
        if self.type in (int, float):
            try:
                number = self.type(value)
            except OverflowError:  # an integer too large for a float
                raise ValueError(f"{owner} option {self.name} must be a finite number, got {value!r}") from None
            if self.range is not None and number not in self.range:
                raise ValueError(f"{owner} option {self.range.problem(self.name, number)}")
            if not math.isfinite(number):
                raise ValueError(f"{owner} option {self.name}={number!r} must be a finite number")


def in_range(kind: type, interval: str) -> Any:
    """The annotation of a numeric option with its allowed range: ``Annotated[kind, Range]``
    (``gamma: Discount = 0.95`` with ``Discount = in_range(float, "(0, 1]")``)."""
    return Annotated[kind, Range.parse(interval)]


def _options_of(fn: Callable, skip: int) -> tuple[Option, ...]:
    """The keyword options of ``fn`` after its first ``skip`` positional parameters."""
    hints = typing.get_type_hints(fn, include_extras=True)
    out = []
    for param in list(inspect.signature(fn).parameters.values())[skip:]:
        hint = hints.get(param.name)
        if hint is None or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{fn.__name__}: option {param.name} must be a keyword with a type annotation")
        choices, rng = None, None
        if typing.get_origin(hint) is Annotated:
            hint, *extras = typing.get_args(hint)
            rng = next((x for x in extras if isinstance(x, Range)), None)
        if typing.get_origin(hint) is Literal:
            choices, kind = tuple(typing.get_args(hint)), str
        elif hint in (bool, int, float, str):
            kind = hint
        elif np.ndarray in (hint, *typing.get_args(hint)):
            kind = np.ndarray
        else:
            raise TypeError(f"{fn.__name__}: option {param.name} has an unsupported type {hint!r}")
        out.append(Option(param.name, kind, param.default, choices, rng))
    return tuple(out)


def _check(owner: str, options: Mapping[str, Option], given: Mapping[str, Any]) -> None:
    unknown = sorted(set(given) - set(options))
    if unknown:
        takes = ", ".join(options) or "none"
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for {owner}; it takes: {takes}")
    for key, value in given.items():
        options[key].check(value, owner)


# ---------------------------------------------------------------------- estimators
@dataclass(frozen=True)
class EstimatorSpec:
    """A registered base estimator.

    Attributes:
        name: the registry name.
        fn: ``fn(batch, **options) -> BaseAdvantage``.
        options: its keyword options, in signature order.
        needs_values: reads ``V(s_t)`` (``Step.value``): only a trainer with a critic can run it.
        outcome_only: ``A_i`` is all there is besides a per-row penalty (no anchor-state or
            segment term), so an advantage computed elsewhere per row can be split back into
            ``A_i`` and a residual (the verl hook's ``base="verl"``).
        external: its input is an advantage computed elsewhere (``external``: the verl hook's
            ``base="verl"``), not the batch's rewards; a config or the command line cannot name
            it (``estimator_names``).
    """

    name: str
    fn: Callable[..., Any]
    options: Mapping[str, Option]
    needs_values: bool = False
    outcome_only: bool = False
    external: bool = False

    def takes(self, option: str) -> bool:
        return option in self.options

    def check(self, options: Mapping[str, Any]) -> None:
        """``ValueError`` on an unknown option or a value of the wrong type or outside its choices."""
        _check(f"estimator {self.name!r}", self.options, options)


#: every base estimator, by name, in registration order
ESTIMATORS: dict[str, EstimatorSpec] = {}

#: other names of registered estimators, alias -> the one (canonical) name. ``ppo``: GAE over a
#: critic's values is what PPO trains on, and the trainer and the experiments named it ``ppo``
#: before it had one name; ``algo.estimator``, ``proas credit``, ``compute_credit`` and
#: ``credit_arrays`` take either, and a run's ``config.yaml`` records ``gae`` (docs/credit.md,
#: "Estimator names")
ESTIMATOR_ALIASES: dict[str, str] = {"ppo": "gae"}


def estimator_name(name: str) -> str:
    """The registry name of ``name``, an estimator's name or one of its aliases
    (``ESTIMATOR_ALIASES``); any other string is returned as it is."""
    return ESTIMATOR_ALIASES.get(name, name)


def estimator_names() -> tuple[str, ...]:
    """The canonical names a config or the command line may choose: every registered estimator
    but the ``external`` ones, in registration order."""
    return tuple(name for name, spec in ESTIMATORS.items() if not spec.external)


def register_estimator(name: str, *, needs_values: bool = False, outcome_only: bool = False,
                       external: bool = False) -> Callable:
    """Register ``fn(batch, *, option=default, ...) -> BaseAdvantage`` under ``name``.

    The options are read off the signature (see the module docstring). Registering a taken name
    is an error.
    """

    def deco(fn: Callable) -> Callable:
        if name in ESTIMATORS and ESTIMATORS[name].fn is not fn:
            raise ValueError(f"estimator {name!r} is already registered")
        options = {o.name: o for o in _options_of(fn, skip=1)}
        ESTIMATORS[name] = EstimatorSpec(name, fn, options, needs_values=needs_values, outcome_only=outcome_only,
                                         external=external)
        return fn

    return deco


def estimator_spec(name: str) -> EstimatorSpec:
    """The entry of ``name``; ``ValueError`` listing the valid names if there is none."""
    try:
        return ESTIMATORS[estimator_name(name)]
    except KeyError:
        raise ValueError(f"unknown estimator {name!r}; choose one of: {', '.join(estimator_choices())}") from None


def estimator_choices() -> list[str]:
    """Every name a config or the command line may give an estimator by: ``estimator_names``
    and their aliases, sorted."""
    names = estimator_names()
    return sorted({*names, *(a for a, n in ESTIMATOR_ALIASES.items() if n in names)})


def estimators_taking(option: str) -> tuple[str, ...]:
    """The names of the estimators with option ``option``, in registration order."""
    return tuple(name for name, spec in ESTIMATORS.items() if spec.takes(option))


# ---------------------------------------------------------------------- shapings
@dataclass(frozen=True)
class ShapingSpec:
    """A registered shaping.

    Attributes:
        name: the registry name.
        fn: ``fn(a, base, ann, batch, *, options...) -> Ã`` of shape ``(S,)``, where ``a`` is ``A_i``
            broadcast to steps; ``shape`` adds ``B_{i,t}`` back.
        options: the options it reads (a subset of ``SHAPING_OPTIONS``).
        reward_bonus: changes the outcome rewards before the base estimator rather than the
            advantages after it (``progress_reward``): it needs the estimator's input, so it
            cannot reshape an advantage computed elsewhere.
        random: draws random labels, from the ``rng`` keyword that ``shape`` passes.
    """

    name: str
    fn: Callable[..., np.ndarray]
    options: Mapping[str, Option]
    reward_bonus: bool = False
    random: bool = False

    def check(self, options: Mapping[str, Any]) -> None:
        """``ValueError`` on an option no shaping takes or a value of the wrong type.

        Every shaping accepts every ``SHAPING_OPTIONS`` key (those it does not read are unused),
        so that one ``shaping_options`` serves a sweep over the ablations.
        """
        _check(f"shaping {self.name!r}", SHAPING_OPTIONS, options)


#: every shaping, by name, in registration order: ``none``, then ``proas`` and its ablations
SHAPINGS: dict[str, ShapingSpec] = {}

#: the shaping options, shared by all shapings: APR's ε and the progress-reward bonus weight
SHAPING_OPTIONS: dict[str, Option] = {
    "epsilon": Option("epsilon", float, 1e-6, range=Range.parse(f"(0, {MAX_ABS_NUMBER}]")),
    "progress_coef": Option("progress_coef", float, 1.0, range=Range.parse(f"[0, {MAX_ABS_NUMBER}]")),
}


def register_shaping(name: str, *, reward_bonus: bool = False) -> Callable:
    """Register ``fn(a, base, ann, batch, **options) -> Ã`` under ``name``.

    Its keyword options must be ``SHAPING_OPTIONS`` keys with the same defaults, or ``rng`` (a
    ``np.random.Generator``, given by ``shape``). Registering a taken name is an error.
    """

    def deco(fn: Callable) -> Callable:
        if name in SHAPINGS and SHAPINGS[name].fn is not fn:
            raise ValueError(f"shaping {name!r} is already registered")
        params = list(inspect.signature(fn).parameters.values())[4:]
        options = {}
        for p in params:
            if p.name == "rng":
                continue  # not an option: ``shape`` passes the seeded generator
            shared = SHAPING_OPTIONS.get(p.name)
            if shared is None or p.default != shared.default:
                raise TypeError(f"shaping {name!r}: option {p.name} must be one of SHAPING_OPTIONS, with its default")
            options[p.name] = shared
        random = any(p.name == "rng" for p in params)
        SHAPINGS[name] = ShapingSpec(name, fn, options, reward_bonus=reward_bonus, random=random)
        return fn

    return deco


def shaping_spec(name: str) -> ShapingSpec:
    """The entry of ``name``; ``ValueError`` listing the valid names if there is none."""
    try:
        return SHAPINGS[name]
    except KeyError:
        raise ValueError(f"unknown shaping {name!r}; choose one of: {', '.join(SHAPINGS)}") from None


def check_options(
    estimator: str, estimator_options: Mapping[str, Any] | None, shaping: str, shaping_options: Mapping[str, Any] | None
) -> tuple[EstimatorSpec, ShapingSpec]:
    """Check both names and both option sets (``ValueError``, one line); return the two entries."""
    sh = shaping_spec(shaping)
    est = estimator_spec(estimator)
    sh.check(shaping_options or {})
    est.check(estimator_options or {})
    return est, sh

