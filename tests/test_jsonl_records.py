"""A trajectory file is JSONL: one record a line, lines ending at "\\n" only (issue #27).

``str.splitlines`` also ends a line at the other Unicode line boundaries (U+2028, U+2029,
\\x85, \\x0b, \\x0c, \\x1c-\\x1e, \\r). JSON allows U+2028, U+2029 and \\x85 raw inside a string, and
other frameworks write them so (``json.dumps(..., ensure_ascii=False)``): a record holding one
was cut in two. Every such character, anywhere in any string of a record, must read back as
written, and line numbers in errors count "\\n" only.
"""

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proas.credit import read_trajectories
from proas.errors import ProasError
from proas.types import Step, Trajectory

# every character at which str.splitlines ends a line, but "\n" (the record separator)
BOUNDARIES = sorted({c for c in map(chr, range(0x110000)) if len(("a" + c + "b").splitlines()) == 2} - {"\n"})


def test_the_boundaries_are_the_whole_class():
    assert set(BOUNDARIES) >= {"\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"}


_TEXT = st.lists(st.one_of(st.sampled_from(BOUNDARIES), st.text(max_size=4)), min_size=1, max_size=6).map("".join)


@settings(max_examples=150, deadline=None)
@given(group=_TEXT, state=_TEXT, action=_TEXT, next_state=_TEXT, anchor=_TEXT, ascii=st.booleans(),
       crlf=st.booleans())
def test_a_line_boundary_inside_any_string_reads_back_as_written(group, state, action, next_state, anchor, ascii,
                                                                 crlf):
    trajs = [Trajectory(group=group, trajectory=str(i), reward=float(i),
                        steps=[Step(state=state, action=action, next_state=next_state, anchor=anchor),
                               Step(state=next_state, action=action + "\u2028", next_state=state)])
             for i in range(2)]
    end = "\r\n" if crlf else "\n"  # a file written on Windows: "\r" before each "\n" is JSON whitespace
    text = "".join(json.dumps(t.to_json(), ensure_ascii=ascii) + end for t in trajs)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_text(text, encoding="utf-8", newline="")
        got = read_trajectories(path)
    assert [t.to_json() for t in got] == [t.to_json() for t in trajs]


@pytest.mark.parametrize("boundary", BOUNDARIES, ids=lambda c: f"U+{ord(c):04X}")
def test_errors_count_lines_by_newlines_only(tmp_path, boundary):
    good = json.dumps(Trajectory(group="g" + boundary, trajectory="0", reward=1.0,
                                 steps=[Step(state="a", action="go", next_state="b")]).to_json(), ensure_ascii=False)
    path = tmp_path / "in.jsonl"
    path.write_text(good + "\n" + good.replace('"trajectory": "0"', '"trajectory": "1"') + "\n{bad\n",
                    encoding="utf-8", newline="")
    with pytest.raises(ProasError, match=r"in\.jsonl:3: invalid JSON"):
        read_trajectories(path)
