"""Parsing request text does work linear in the text (issue #27, item 1), counted, not timed.

``proas serve`` parses request bodies of up to a MiB, and one pattern that backtracks
quadratically (the earlier ``^\\s*Action`` over a run of newlines: 10 s on 64 KiB) holds the
server. A time would depend on the machine; these tests count the work instead, so a quadratic
parser fails them on any machine, loaded or idle, and a linear one passes:

- the regex engine's: every compiled pattern of ``proas.baselines.react_format`` and
  ``proas.baselines.serve`` is run by ``regex_work.WorkModel``, a counting model of ``re``'s
  backtracking matcher whose answers are checked against ``re``'s, and its steps are an upper
  bound of the engine's (no other pattern may be applied there: the AST test below);
- the string methods': the text is a ``str`` whose every method call is charged the length of
  the strings it touches;
- the Python code's: every line executed in those two modules.

The texts are the shapes that make backtracking quadratic (runs of newlines and other blanks;
repeated heads and tags the parsers look for, and their prefixes; long lines) and random
mixtures of their pieces (hypothesis), each at ``k`` and ``4k`` repetitions: linear work grows
4 times, quadratic 16 times, and ``MAX_RATIO`` lies between. The figures against the clock (any
body up to the 1 MiB limit in under 50 ms) are ``benchmarks/react_parse.py``'s.
"""

import ast
import json
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proas.baselines import react_format, serve
from proas.baselines.react_format import format_observation, parse_conversation, parse_reply
from proas.baselines.serve import PolicyServer, _HTTPError, parse_request
from regex_work import TooMuchWork, WorkModel

MAX_RATIO = 6  # the work on 4k repetitions over that on k: 4 when linear, 16 when quadratic
SLACK = 400  # steps: what a call costs whatever its text (a few lines, a few tests)
SIZE = 120  # characters of the smaller text of a pair
PER_CHARACTER = 200  # steps a character of the smaller text, at most (a linear pattern here takes 1-30)

# what the parsers look for, and its prefixes: the pieces of pathological texts
HEADS = ["Action:", "action :", "ACTION\t:", "Thought:", "thought :", "<action>", "</action>", "<ACTION>",
         "<think>", "</think>", "Task: ", "Observation:\n", "\n\nAdmissible actions:\n", "- "]
BLANKS = ["\n", " ", "\t", "\r", "\r\n", " \n", "\n ", "\u2028", "\x1c", "\x0b", "\x85", "\u3000"]
PIECES = BLANKS + HEADS + [h[:k] for h in HEADS for k in range(1, len(h))] + ["x", "go to desk 1", ":", "-"]


def _families() -> dict[str, tuple[str, str, str]]:
    """``(head, unit, tail)``: the text of ``k`` repetitions is ``head + unit * k + tail``."""
    fam = {f"run of {b!r}": ("", b, "") for b in BLANKS}
    for h in HEADS:
        fam[f"repeated {h!r}"] = ("", h, "")
        fam[f"prefixes of {h!r}"] = ("", "".join(h[:k] for k in range(1, len(h) + 1)), "")
        fam[f"{h!r} + newline, repeated"] = ("", h + "\n", "")
        fam[f"{h!r} + blank line, repeated"] = ("", h + " \n\n", "")
        fam[f"{h!r} then newlines"] = (h, "\n", "")
        fam[f"{h!r} then spaces then x"] = (h, " ", "x")
        fam[f"{h!r} then a long line"] = (h, "x", "")
    fam["indented action lines"] = ("", "    Action: go to desk 1   \n", "")
    fam["action lines with long trailing blanks"] = ("", "Action: a" + " " * 40 + "\n", "")
    fam["thought then action heads"] = ("", "Thought: t\nAction:\n", "")
    fam["open tags, no close"] = ("", "<action>x", "</actio")
    fam["blank lines of spaces"] = ("", " " * 40 + "\n", "")
    return fam


FAMILIES = _families()


def _pair(head: str, unit: str, tail: str) -> tuple[str, str]:
    k = max(2, SIZE // max(1, len(unit)))
    return head + unit * k + tail, head + unit * (4 * k) + tail


def _patterns() -> dict[str, re.Pattern]:
    found = {f"{mod.__name__}.{name}": value for mod in (react_format, serve)
             for name, value in vars(mod).items() if isinstance(value, re.Pattern)}
    assert {"proas.baselines.react_format._ACTION_LINE", "proas.baselines.react_format._THOUGHT_HEAD",
            "proas.baselines.serve._THINK_OPEN"} <= set(found)
    return found


PATTERNS = _patterns()  # before a test swaps them for counting ones


def _scans(pattern: re.Pattern, text: str, budget: int | None = None) -> int:
    """The steps of ``findall`` (``finditer``'s scan), ``search`` and ``match`` on ``text``."""
    model = WorkModel(pattern, budget)
    model.spans(text)
    model.search(text)
    model.match(text)
    return model.steps


def _linear(work, small: str, big: str) -> tuple[bool, str]:
    """Whether ``work(big, budget)`` stays within ``MAX_RATIO`` times ``work(small)`` (and the
    work on ``small`` within ``PER_CHARACTER`` steps a character: an exponential pattern stops
    there)."""
    try:
        w1 = work(small, PER_CHARACTER * len(small) + SLACK)
    except TooMuchWork:
        return False, f"more than {PER_CHARACTER} steps a character on {len(small)} characters"
    limit = MAX_RATIO * w1 + SLACK
    try:
        w4 = work(big, limit)
    except TooMuchWork:
        return False, f"{w1} steps on {len(small)} characters, more than {limit} on {len(big)}"
    return w4 <= limit, f"{w1} steps on {len(small)} characters, {w4} on {len(big)}"


def _slow_patterns(small: str, big: str, patterns: dict[str, re.Pattern]) -> dict[str, str]:
    slow = {}
    for name, pattern in patterns.items():
        ok, detail = _linear(lambda text, budget, p=pattern: _scans(p, text, budget), small, big)
        if not ok:
            slow[name] = detail
    return slow


def test_no_pattern_is_applied_except_the_module_level_ones():
    """``re.search(r"...", text)`` and the like would escape the counting below: only compiled
    module-level patterns may be applied to text in the parsing modules."""
    calls = {"search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split", "compile"}
    for mod in (react_format, serve):
        tree = ast.parse(Path(mod.__file__).read_text())
        top = {id(node.value) for node in tree.body if isinstance(node, ast.Assign)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in calls
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
                    and not (node.func.attr == "compile" and id(node) in top)):
                pytest.fail(f"{mod.__name__} line {node.lineno}: re.{node.func.attr}(...) outside a module-level "
                            "pattern")


@pytest.mark.parametrize("name", ["run of '\\n'", "'Action:' + newline, repeated", "thought then action heads",
                                  "open tags, no close", "repeated '- '", "indented action lines"])
def test_the_model_answers_as_re_does(name):
    """The counted matcher finds what ``re`` finds, so its count is the real pattern's work."""
    head, unit, tail = FAMILIES[name]
    text = head + "Thought: a\n  action : go \n<ACTION>x</action>\n- y\n" + unit * 20 + tail + "\nAction: z"
    for pname, pattern in PATTERNS.items():
        model = WorkModel(pattern)
        assert model.findall(text) == pattern.findall(text), pname
        for pos in (0, 1, len(text) // 2):
            found = pattern.search(text, pos)
            assert WorkModel(pattern).search(text, pos) == (found.span() if found else None), (pname, pos)


# the patterns of the parser before it was made linear (570b3bb^): the counting must catch them
_QUADRATIC = {
    "action line": re.compile(r"^\s*Action\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE),
    "thought": re.compile(r"^\s*Thought\s*:\s*(.*?)(?=^\s*Action\s*:|\Z)", re.IGNORECASE | re.MULTILINE | re.DOTALL),
    "action tag": re.compile(r"<action>(.*?)</action>", re.IGNORECASE | re.DOTALL),
    "blank run": re.compile(r"\s*\n\s*x"),
    "nested repeat": re.compile(r"(?:\s+)+:"),
}


@pytest.mark.parametrize("name", sorted(_QUADRATIC))
def test_the_counting_catches_a_quadratic_pattern(name):
    """Each of these is quadratic on some pathological text, and the counting says so at once."""
    caught = {fam for fam, (h, u, t) in FAMILIES.items()
              if _slow_patterns(*_pair(h, u, t), {name: _QUADRATIC[name]})}
    assert caught, f"{name}: linear on every text?"


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_pattern_does_linear_work_on_pathological_text(name):
    slow = _slow_patterns(*_pair(*FAMILIES[name]), PATTERNS)
    assert not slow, f"{name}: {slow}"


# --------------------------------------------------------------------------- whole parsers

_WORK = [0]


class _Counted(str):
    """A ``str`` whose every method call adds the length of the strings it touches to ``_WORK``."""


def _wrap(value):
    if type(value) is str:
        return _Counted(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_wrap(v) for v in value)
    return value


def _charged(name):
    method = getattr(str, name)

    def call(self, *args, **kwargs):
        _WORK[0] += 1 + len(self) + sum(len(a) for a in args if isinstance(a, str))
        out = method(self, *args, **kwargs)
        return out if name in ("__str__", "__repr__", "__format__", "__hash__") else _wrap(out)

    return call


_SKIP = {"__new__", "__init__", "__getattribute__", "__setattr__", "__delattr__", "__class__", "__len__",
         "__init_subclass__", "__subclasshook__", "__dir__", "__sizeof__", "__reduce__", "__reduce_ex__",
         "__getnewargs__", "__getstate__", "__class_getitem__"}
for _name in dir(str):
    if _name not in _SKIP and callable(getattr(str, _name)):
        setattr(_Counted, _name, _charged(_name))


def _radd(self, other):
    _WORK[0] += 1 + len(self) + len(other)
    return _Counted(str.__add__(other, self))


_Counted.__radd__ = _radd  # ``"literal" + counted``: Python asks the subclass first


class _CountingPattern:
    """A module-level pattern whose every application adds the model's count to ``_WORK``."""

    def __init__(self, pattern: re.Pattern):
        self.pattern = pattern

    def _model(self, method: str, text: str, pos: int = 0) -> None:
        text = str.__str__(text)  # a plain str: the model's own reading is not the parser's work
        model = WorkModel(self.pattern)
        {"search": model.search, "match": model.match, "findall": model.spans, "finditer": model.spans}[method](
            text, pos)
        _WORK[0] += model.steps

    def search(self, text, pos=0):
        self._model("search", text, pos)
        return self.pattern.search(text, pos)

    def match(self, text, pos=0):
        self._model("match", text, pos)
        return self.pattern.match(text, pos)

    def findall(self, text, pos=0):
        self._model("findall", text, pos)
        return _wrap(self.pattern.findall(text, pos))

    def finditer(self, text, pos=0):
        self._model("finditer", text, pos)
        return self.pattern.finditer(text, pos)

    def __getattr__(self, name):
        raise AttributeError(f"{name}: a pattern method the counting does not model; add it to _CountingPattern")


@pytest.fixture
def counted(monkeypatch):
    """``work(fn, *args)``: the regex, string and line work of ``fn(*args)``."""
    for mod in (react_format, serve):
        for name, value in list(vars(mod).items()):
            if isinstance(value, re.Pattern):
                monkeypatch.setattr(mod, name, _CountingPattern(value))
    files = {react_format.__file__, serve.__file__}

    def work(fn, *args):
        def local(frame, event, arg):
            if event == "line":
                _WORK[0] += 1
            return local

        def tracer(frame, event, arg):
            return local if frame.f_code.co_filename in files else None

        _WORK[0] = 0
        old = sys.gettrace()
        sys.settrace(tracer)
        try:
            fn(*args)
        except (_HTTPError, react_format.ProasError):
            pass
        finally:
            sys.settrace(old)
        return _WORK[0]

    return work


def _check_linear(work, fn, small, big, what):
    w1, w4 = work(fn, small), work(fn, big)
    assert w4 <= MAX_RATIO * w1 + SLACK, f"{what}: work {w1} on the smaller text, {w4} on the one 4 times as long"


def _conversation(text: str) -> list[dict]:
    """An observation, a reply and the next observation with its admissible actions, each of ``text``."""
    return [{"role": "system", "content": text}, {"role": "user", "content": "Task: t\nObservation:\n" + text},
            {"role": "assistant", "content": text},
            {"role": "user", "content": "Observation:\n" + text + "\n\nAdmissible actions:\n" + text}]


class _TextOnly(PolicyServer):
    """``PolicyServer.prepare`` without a checkpoint: request text to a policy's context."""

    def __init__(self):
        self.env_name = "toy"


def _body(text: str) -> bytes:
    return json.dumps({"model": "m", "messages": _conversation(text)}, ensure_ascii=False).encode()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_the_parsers_do_linear_work_on_pathological_text(counted, name):
    small, big = (_Counted(t) for t in _pair(*FAMILIES[name]))
    _check_linear(counted, parse_reply, small, big, f"parse_reply on {name}")
    _check_linear(counted, lambda t: parse_reply(t, "household"), small, big, f"parse_reply household on {name}")
    _check_linear(counted, lambda t: parse_conversation(_conversation(t)), small, big, f"parse_conversation on {name}")
    _check_linear(counted, lambda t: parse_request(_TextOnly(), _body(t)), str(small), str(big),
                  f"parse_request on {name}")


def test_many_turns_parse_in_linear_work(counted):
    """A body of many small turns: the work grows with their number, linearly."""
    obs = format_observation("You are at the door.", ["go to desk", "go to bed"], task="put the key on the bed")

    def conv(k):
        turns = [{"role": "assistant", "content": "Thought: t\nAction: go to desk"},
                 {"role": "user", "content": "Observation:\n\n\nAdmissible actions:\n- a\n- "}] * k
        return [{"role": "user", "content": obs}] + turns

    _check_linear(counted, lambda k: parse_conversation(conv(k)), 30, 120, "parse_conversation of many turns")
    _check_linear(counted, lambda k: parse_request(_TextOnly(), json.dumps({"messages": conv(k)}).encode()), 30, 120,
                  "parse_request of many turns")


def test_a_quadratic_parser_fails_the_counting(counted, monkeypatch):
    """The same counting of ``parse_reply`` with the earlier action-line pattern fails."""
    monkeypatch.setattr(react_format, "_ACTION_LINE", _CountingPattern(_QUADRATIC["action line"]))
    small, big = (_Counted(t) for t in _pair(*FAMILIES["run of '\\n'"]))
    with pytest.raises(AssertionError, match="parse_reply"):
        _check_linear(counted, parse_reply, small, big, "parse_reply")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=12))
def test_mixtures_of_pathological_pieces_take_linear_work(counted, pieces):
    small, big = _pair("", "".join(pieces), "")
    slow = _slow_patterns(small, big, PATTERNS)
    assert not slow, f"{pieces!r} repeated: {slow}"
    _check_linear(counted, lambda t: parse_conversation(_conversation(t)), _Counted(small), _Counted(big),
                  f"parse_conversation on {pieces!r} repeated")


def test_parse_reply_keeps_its_meaning():
    """The linear parser reads replies as before (the examples of the old tests, and the edges)."""
    assert parse_reply("Thought: go\nAction: Go To Desk", "household") == ("go", "go to desk", False)
    assert parse_reply("  thought :  a\n b \n\n  ACTION :  x  \nThought: c\nAction: y") == ("a\n b", "y", False)
    assert parse_reply("Thought: t\nAction:\n\n   go to bed  \n") == ("t", "go to bed", False)  # value below
    assert parse_reply("Action:\nAction: x") == ("", "Action: x", False)  # a value line is not a head
    assert parse_reply("Thought: a Action: b") == ("a Action: b", "Thought: a Action: b", True)
    assert parse_reply("Action: go\nAction:   ") == ("", "go", False)  # a trailing empty head is no action
    assert parse_reply("x <ACTION> take key </action> <action>y</action>") == ("", "take key", False)
    assert parse_reply("<action> </action>\nlast line\r\n") == ("", "last line", True)
    assert parse_reply("a\u2028b") == ("", "b", True)
    assert parse_reply("\n \n") == ("", "", True)
    counted = _Counted("Thought: go\nAction: Go To Desk")  # the counting str parses as a str
    assert parse_reply(counted, "household") == ("go", "go to desk", False)
