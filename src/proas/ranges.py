"""The ranges of proas's numeric inputs: one rule for every config value and command-line option.

A number a user gives, a ``proas train`` config key or a command-line option, is checked where it
is read against the range its use needs: finite; within float32 where it meets a float32 tensor
(a rate, a coefficient, a clip bound); a size small enough to allocate; a count >= 1; a
probability or a fraction in [0, 1]; a temperature >= 0; a seed in numpy's [0, 2**32 - 1]. A
value outside is one line that names the option, the value and the range.

``Range`` is such a range, written as an interval: ``"[0, 1)"``, ``"[1, 2**16]"``,
``"[F32_TINY, F32]"`` (names below). The trainer's config declares one next to each numeric field
(``proas.train.config``, the field's metadata); each command declares one with each numeric
option (``Number``, an argparse ``type``). Tests walk both tables, so a number without a range
is caught (docs/training.md, "Numeric ranges").
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass

from proas.errors import ProasError

__all__ = ["FLOAT32_MAX", "FLOAT32_TINY", "INT32_MAX", "SECONDS", "SEED_MAX", "Number", "Range", "integer", "number",
           "seed"]

#: float32's largest finite value: a float that meets a float32 tensor must not pass it (a rate
#: of 1e300 is finite as a Python float and inf on the weights)
FLOAT32_MAX = 3.4028234663852886e38
#: float32's smallest positive normal value: a positive float32 quantity (a rate, a positive
#: temperature) below it is zero, or a denormal, on the tensor
FLOAT32_TINY = 1.1754943508222875e-38
#: a count that sizes nothing (a number of steps, an "at most N") stays a C int
INT32_MAX = 2**31 - 1
#: numpy's seed range (``np.random.seed``, ``RandomState``): [0, 2**32 - 1]
SEED_MAX = 2**32 - 1

#: a duration in seconds: positive and at most about 115 days (``time.sleep`` and socket timeouts
#: refuse far larger ones with a traceback)
SECONDS = "(0, 1e7]"

#: the names an interval's ends may use
NAMES = {"F32": FLOAT32_MAX, "F32_TINY": FLOAT32_TINY, "INT32": INT32_MAX, "SEED": SEED_MAX}

_INTERVAL = re.compile(r"\s*([\[(])\s*([^,]+?)\s*,\s*([^,]+?)\s*([\])])\s*")


def _end(token: str) -> int | float:
    if token in NAMES:
        return NAMES[token]
    power = re.fullmatch(r"(\d+)\*\*(\d+)(?:-(\d+))?", token.replace(" ", ""))
    if power:
        base, exp, minus = power.groups()
        return int(base) ** int(exp) - int(minus or 0)
    try:
        return int(token)
    except ValueError:
        return float(token)  # a malformed end is a programming error: ValueError at import


def _show(x: int | float) -> str:
    return str(x) if isinstance(x, int) else f"{x:.6g}"


@dataclass(frozen=True)
class Range:
    """A closed or open interval of allowed values; a value is in it only if it is finite."""

    low: int | float
    high: int | float
    low_open: bool = False
    high_open: bool = False

    @classmethod
    def parse(cls, text: str) -> Range:
        """``"[0, 1)"``; each end a number, ``2**k`` (``2**k-1``) or one of ``NAMES``."""
        m = _INTERVAL.fullmatch(text)
        if not m:
            raise ValueError(f"not an interval: {text!r}")
        lo, hi = _end(m.group(2)), _end(m.group(3))
        if not lo <= hi:
            raise ValueError(f"empty interval: {text!r}")
        return cls(lo, hi, m.group(1) == "(", m.group(4) == ")")

    def __contains__(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def __str__(self) -> str:
        return (f"{'(' if self.low_open else '['}{_show(self.low)}, {_show(self.high)}"
                f"{')' if self.high_open else ']'}")

    def problem(self, name: str, value: object) -> str | None:
        """None when ``value`` is in range, else the one line that says so."""
        if value in self:
            return None
        return f"{name}={value!r} is outside {self}"

    def check(self, name: str, value: object) -> None:
        """Raise ``ProasError`` (one line naming ``name``, the value and the range) when
        ``value`` is outside."""
        problem = self.problem(name, value)
        if problem:
            raise ProasError(problem)


class Number:
    """An argparse ``type`` for a numeric option: parses an ``int`` or a ``float`` and checks it
    against its ``Range`` where the command line is parsed; argparse then exits 2 with one line,
    ``argument --opt: <value> is outside <range>``."""

    def __init__(self, kind: type, interval: str):
        if kind not in (int, float):
            raise TypeError(f"a number is an int or a float, not {kind!r}")
        self.kind = kind
        self.range = Range.parse(interval)
        self.__name__ = kind.__name__  # argparse names the type in some of its messages

    def __call__(self, text: str) -> int | float:
        try:
            value = self.kind(text)
        except (TypeError, ValueError):
            what = "an integer" if self.kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{_shown(text)} is not {what} (allowed: {self.range})") from None
        if value not in self.range:
            raise argparse.ArgumentTypeError(f"{_shown(text)} is outside {self.range}")
        return value

    def __repr__(self) -> str:
        return f"Number({self.kind.__name__}, {str(self.range)!r})"


def _shown(text: str) -> str:
    """The text as given, quoted and escaped when it is not a plain short token."""
    if len(text) <= 40 and re.fullmatch(r"[-+0-9A-Za-z_.]*", text or "-"):
        return text
    return repr(text[:40] + ("..." if len(text) > 40 else ""))


def number(interval: str) -> Number:
    """A float option in ``interval``."""
    return Number(float, interval)


def integer(interval: str) -> Number:
    """An integer option in ``interval``."""
    return Number(int, interval)


def seed() -> Number:
    """A seed option: an integer in numpy's seed range."""
    return Number(int, "[0, SEED]")
