"""Config overrides hold plain values only.

A ``key=value`` override's value is read as YAML (so ``seed=3`` is a number, ``[0, 0.4]`` a list
and ``{n_train: 24}`` a mapping), but YAML and OmegaConf can do far more with a value than give
it: a tag (``!!python/name:os.system``, ``!!int``) picks a constructor, an anchor (``&x``) and an
alias (``*x``) repeat a node, ``${...}`` is an OmegaConf interpolation (``${oc.env:HOME}`` reads
the environment, ``${train.out_dir}`` another key), and ``%`` directives and ``---`` markers
start documents. None of that belongs on a command line that records a run's setting, so each
is refused with one line naming the key; so is a control character (an escape, a newline, a
tab, NUL), a line or paragraph separator, a bidirectional override or a lone surrogate (an
argument's undecodable byte) in a key or a value, including one written as a YAML escape inside
double quotes (``"\\e"``).
"""

from __future__ import annotations

import yaml

from proas.errors import ProasError
from proas.termtext import is_unsafe, printable

__all__ = ["check_override"]

_NOT_TEXT = "a control, separator, bidirectional or undecodable character"


def _refuse(key: str, value: str, why: str) -> ProasError:
    shown = printable(f"{key}={value}", newlines=False)
    return ProasError(f"config: override {shown}: {why}; overrides take plain values")


def _control(text: str) -> str | None:
    """The first control, separator or bidi character of ``text``, escaped, or None."""
    ch = next((c for c in text if is_unsafe(c)), None)
    return None if ch is None else printable(ch, newlines=False)


def check_override(key: str, value: str) -> None:
    """Refuse, as a one-line ``ProasError``, an override ``key=value`` whose value is more than a
    plain YAML value (see the module docstring), or whose key or value holds a control character."""
    for part, text in (("key", key), ("value", value)):
        bad = _control(text)
        if bad is not None:
            raise _refuse(key, value, f"its {part} holds {bad}, {_NOT_TEXT}")
    if "${" in key:
        raise _refuse(key, value, "its key holds an interpolation (${...})")
    try:
        events = list(yaml.parse(value, Loader=yaml.SafeLoader))
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise _refuse(key, value, f"its value is not a YAML value ({problem})") from None
    for event in events:
        if isinstance(event, yaml.AliasEvent):
            raise _refuse(key, value, f"YAML aliases (*{event.anchor}) are not accepted")
        if getattr(event, "anchor", None) is not None:
            raise _refuse(key, value, f"YAML anchors (&{event.anchor}) are not accepted")
        if getattr(event, "tag", None) is not None:
            raise _refuse(key, value, f"YAML tags ({event.tag}) are not accepted")
        if isinstance(event, yaml.DocumentStartEvent) and (event.explicit or event.version or event.tags):
            raise _refuse(key, value, "YAML directives and document markers (%, ---) are not accepted")
        if isinstance(event, yaml.ScalarEvent):
            if "${" in event.value:
                raise _refuse(key, value, "interpolations (${...}) are not accepted")
            bad = _control(event.value)
            if bad is not None:  # written as an escape inside double quotes
                raise _refuse(key, value, f"its value holds {bad}, {_NOT_TEXT}")
    # a scalar with no tag of its own can still resolve to one that no safe constructor builds
    # (YAML 1.1's value key "=" becomes tag:yaml.org,2002:value), which OmegaConf's loader would
    # raise as a traceback
    try:
        yaml.safe_load(value)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise _refuse(key, value, f"its value is not a YAML value ({problem})") from None
