"""The work of Python's regex engine on a text, counted: a model of its backtracking matcher.

``re`` gives no count of the steps it takes, and a time depends on the machine. This module
runs a compiled pattern's parse tree (``re._parser``) as a plain backtracking matcher that counts
every character test, every position tried and every way a repeat is retried. It does the work
that ``re``'s engine does before that engine's shortcuts (a literal prefix searched for, a
repeat's next character checked before it backs off): so its count is an upper bound of the
engine's work, and a pattern whose count grows linearly with the text is linear in ``re`` too.
Its answers are checked against ``re``'s (``WorkModel.findall`` equals ``Pattern.findall``), so
the count is that of the real pattern.

Constructs outside the model (a back-reference, a conditional, ...) raise ``NotModelled``: a
pattern that uses one must be added here before its work can be counted. ``budget`` stops a
count that grows past it (``TooMuchWork``): a quadratic pattern fails in a moment instead of
running for minutes.
"""

from __future__ import annotations

import re
import sys
from re import _constants as C  # noqa: N812 - the engine's own names
from re import _parser as sre_parse
from typing import Any, Callable, Optional

__all__ = ["NotModelled", "TooMuchWork", "WorkModel"]

Cont = Callable[[int], Optional[int]]


class NotModelled(Exception):
    """The pattern uses a construct the model does not run."""


class TooMuchWork(Exception):
    """The count passed its budget."""


_CHAR_OPS = {C.LITERAL, C.NOT_LITERAL, C.ANY, C.IN}
_REPEATS = {C.MAX_REPEAT, C.MIN_REPEAT, C.POSSESSIVE_REPEAT}
_ASCII_SPACE = " \t\n\r\f\v"


def _same(a: str, b: str, ignore_case: bool) -> bool:
    return a == b or (ignore_case and (a.lower() == b.lower() or a.upper() == b.upper()))


def _category(code, ascii_only: bool) -> Callable[[str], bool]:
    if ascii_only:
        space, digit = (lambda c: c in _ASCII_SPACE), (lambda c: "0" <= c <= "9")
        word = lambda c: c.isascii() and (c.isalnum() or c == "_")  # noqa: E731
    else:
        space, digit, word = str.isspace, str.isdecimal, (lambda c: c.isalnum() or c == "_")
    table = {
        C.CATEGORY_SPACE: space, C.CATEGORY_NOT_SPACE: lambda c: not space(c),
        C.CATEGORY_DIGIT: digit, C.CATEGORY_NOT_DIGIT: lambda c: not digit(c),
        C.CATEGORY_WORD: word, C.CATEGORY_NOT_WORD: lambda c: not word(c),
        C.CATEGORY_LINEBREAK: lambda c: c == "\n", C.CATEGORY_NOT_LINEBREAK: lambda c: c != "\n",
    }
    if code not in table:
        raise NotModelled(f"category {code}")
    return table[code]


class WorkModel:
    """``pattern`` run by a counting backtracking matcher; ``steps`` is the work so far."""

    def __init__(self, pattern: re.Pattern, budget: int | None = None):
        if not isinstance(pattern.pattern, str):
            raise NotModelled("bytes patterns")
        self.pattern = pattern
        self.budget = budget
        self.steps = 0
        self.text = ""
        self.caps: dict[int, tuple[int, int]] = {}
        tree = sre_parse.parse(pattern.pattern, pattern.flags)
        self.groups = pattern.groups
        self._root = self._seq(list(tree), tree.state.flags)

    # ------------------------------------------------------------------ counting

    def _tick(self, n: int = 1) -> None:
        self.steps += n
        if self.budget is not None and self.steps > self.budget:
            raise TooMuchWork(f"{self.pattern.pattern!r}: more than {self.budget} steps")

    # ------------------------------------------------------------------ compiling the tree

    def _pred(self, op, av, flags: int) -> Callable[[str], bool]:
        """The test of one character (LITERAL, NOT_LITERAL, ANY, IN)."""
        ic, ascii_only = bool(flags & re.IGNORECASE), bool(flags & re.ASCII)
        if op == C.LITERAL:
            ch = chr(av)
            return lambda c: _same(c, ch, ic)
        if op == C.NOT_LITERAL:
            ch = chr(av)
            return lambda c: not _same(c, ch, ic)
        if op == C.ANY:
            return (lambda c: True) if flags & re.DOTALL else (lambda c: c != "\n")
        if op == C.IN:
            negate = bool(av) and av[0][0] == C.NEGATE
            tests = []
            for iop, iav in av[1:] if negate else av:
                if iop == C.LITERAL:
                    tests.append(lambda c, ch=chr(iav): _same(c, ch, ic))
                elif iop == C.RANGE:
                    lo, hi = chr(iav[0]), chr(iav[1])
                    tests.append(lambda c, lo=lo, hi=hi: any(lo <= x <= hi for x in ({c, c.lower(), c.upper()}
                                                                                   if ic else (c,))))
                elif iop == C.CATEGORY:
                    tests.append(_category(iav, ascii_only))
                else:
                    raise NotModelled(f"set item {iop}")
            if negate:
                return lambda c: not any(t(c) for t in tests)
            return lambda c: any(t(c) for t in tests)
        raise NotModelled(str(op))

    def _seq(self, items: list, flags: int) -> Callable[[int, Cont], Optional[int]]:
        fns = [self._item(op, av, flags) for op, av in items]

        def run(i: int, k: Cont, idx: int = 0) -> Optional[int]:
            if idx == len(fns):
                return k(i)
            return fns[idx](i, lambda j: run(j, k, idx + 1))

        return run

    def _item(self, op, av, flags: int) -> Callable[[int, Cont], Optional[int]]:
        if op in _CHAR_OPS:
            pred = self._pred(op, av, flags)

            def char(i: int, k: Cont) -> Optional[int]:
                self._tick()
                return k(i + 1) if i < len(self.text) and pred(self.text[i]) else None

            return char
        if op == C.AT:
            return self._at(av, flags)
        if op == C.SUBPATTERN:
            group, add, delete, sub = av
            inner = self._seq(list(sub), (flags | add) & ~delete)
            if group is None:
                return inner

            def captured(i: int, k: Cont) -> Optional[int]:
                def close(j: int) -> Optional[int]:
                    old = self.caps.get(group)
                    self.caps[group] = (i, j)
                    r = k(j)
                    if r is None:
                        if old is None:
                            self.caps.pop(group, None)
                        else:
                            self.caps[group] = old
                    return r

                return inner(i, close)

            return captured
        if op in _REPEATS:
            return self._repeat(op, av, flags)
        if op == C.BRANCH:
            alts = [self._seq(list(alt), flags) for alt in av[1]]

            def branch(i: int, k: Cont) -> Optional[int]:
                for alt in alts:
                    self._tick()
                    r = alt(i, k)
                    if r is not None:
                        return r
                return None

            return branch
        if op in (C.ASSERT, C.ASSERT_NOT):
            direction, sub = av
            inner = self._seq(list(sub), flags)
            positive = op == C.ASSERT
            width = sub.getwidth()
            if direction < 0 and width[0] != width[1]:
                raise NotModelled("a look-behind of varying width")

            def look(i: int, k: Cont) -> Optional[int]:
                self._tick()
                saved = dict(self.caps)
                if direction > 0:
                    found = inner(i, lambda j: j) is not None
                else:
                    start = i - width[0]
                    found = start >= 0 and inner(start, lambda j: j if j == i else None) is not None
                if not positive or not found:
                    self.caps = saved
                return k(i) if found == positive else None

            return look
        if op == C.ATOMIC_GROUP:
            inner = self._seq(list(av), flags)

            def atomic(i: int, k: Cont) -> Optional[int]:
                j = inner(i, lambda j: j)
                return None if j is None else k(j)

            return atomic
        raise NotModelled(f"{op} in {self.pattern.pattern!r}")

    def _at(self, code, flags: int) -> Callable[[int, Cont], Optional[int]]:
        multiline = bool(flags & re.MULTILINE)

        def holds(i: int) -> bool:
            t, n = self.text, len(self.text)
            if code == C.AT_BEGINNING:
                return i == 0 or (multiline and t[i - 1] == "\n")
            if code == C.AT_BEGINNING_STRING:
                return i == 0
            if code == C.AT_END:
                return i == n or (t[i] == "\n" and (multiline or i == n - 1))
            if code == C.AT_END_STRING:
                return i == n
            if code in (C.AT_BOUNDARY, C.AT_NON_BOUNDARY):
                word = _category(C.CATEGORY_WORD, bool(flags & re.ASCII))
                edge = (i > 0 and word(t[i - 1])) != (i < n and word(t[i]))
                return edge == (code == C.AT_BOUNDARY)
            raise NotModelled(str(code))

        def at(i: int, k: Cont) -> Optional[int]:
            self._tick()
            return k(i) if holds(i) else None

        return at

    def _repeat(self, op, av, flags: int) -> Callable[[int, Cont], Optional[int]]:
        lo, hi, sub = av
        hi = sys.maxsize if hi == C.MAXREPEAT else hi
        if len(sub) == 1 and sub[0][0] in _CHAR_OPS:  # one character a time, as re's REPEAT_ONE
            pred = self._pred(sub[0][0], sub[0][1], flags)

            def one(i: int, k: Cont) -> Optional[int]:
                t, n = self.text, len(self.text)
                if op == C.MIN_REPEAT:
                    c = 0
                    while c < lo:
                        self._tick()
                        if i + c >= n or not pred(t[i + c]):
                            return None
                        c += 1
                    while True:
                        self._tick()
                        r = k(i + c)
                        if r is not None:
                            return r
                        self._tick()
                        if c >= hi or i + c >= n or not pred(t[i + c]):
                            return None
                        c += 1
                count = 0
                while count < hi and i + count < n:
                    self._tick()
                    if not pred(t[i + count]):
                        break
                    count += 1
                if count < lo:
                    return None
                for c in range(count, lo - 1, -1) if op == C.MAX_REPEAT else (count,):
                    self._tick()
                    r = k(i + c)
                    if r is not None:
                        return r
                return None

            return one
        inner = self._seq(list(sub), flags)
        if op == C.POSSESSIVE_REPEAT:
            raise NotModelled("a possessive repeat of more than one character")

        def rep(i: int, k: Cont, count: int = 0) -> Optional[int]:
            self._tick()
            if op == C.MIN_REPEAT and count >= lo:
                r = k(i)
                if r is not None:
                    return r
            if count < hi:
                r = inner(i, lambda j: rep(j, k, count + 1) if j != i else None)
                if r is not None:
                    return r
            if op == C.MAX_REPEAT and count >= lo:
                return k(i)
            return None

        return rep

    # ------------------------------------------------------------------ the Pattern methods

    def _attempt(self, i: int) -> Optional[int]:
        self.caps = {}
        return self._root(i, lambda j: j)

    def _groups(self, start: int, end: int) -> Any:
        if self.groups == 0:
            return self.text[start:end]
        vals = [self.text[a:b] if (a, b) != (-1, -1) else "" for a, b in
                (self.caps.get(g, (-1, -1)) for g in range(1, self.groups + 1))]
        return vals[0] if self.groups == 1 else tuple(vals)

    def match(self, text: str, pos: int = 0) -> Optional[tuple[int, int]]:
        """``(start, end)`` of ``pattern.match(text, pos)``, or None."""
        self.text = text
        end = self._attempt(pos)
        return None if end is None else (pos, end)

    def search(self, text: str, pos: int = 0) -> Optional[tuple[int, int]]:
        """``(start, end)`` of ``pattern.search(text, pos)``, or None."""
        self.text = text
        for i in range(pos, len(text) + 1):
            self._tick()
            end = self._attempt(i)
            if end is not None:
                return i, end
        return None

    def spans(self, text: str, pos: int = 0) -> list[tuple[int, int, Any]]:
        """``(start, end, findall's item)`` of every match ``finditer`` gives."""
        self.text = text
        out, i = [], pos
        while i <= len(text):
            self._tick()
            end = self._attempt(i)
            if end is None:
                i += 1
                continue
            out.append((i, end, self._groups(i, end)))
            i = end if end > i else i + 1
        return out

    def findall(self, text: str, pos: int = 0) -> list:
        return [item for _, _, item in self.spans(text, pos)]


def work(pattern: re.Pattern, method: str, text: str, budget: int | None = None) -> int:
    """The steps of ``pattern.<method>(text)`` (findall, finditer, search or match)."""
    model = WorkModel(pattern, budget)
    {"findall": model.spans, "finditer": model.spans, "search": model.search, "match": model.match}[method](text)
    return model.steps
