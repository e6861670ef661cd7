"""Text from environments and logs made safe to show in a terminal.

Observations and actions come from environments, models and log files: any of them may hold
an escape sequence (which a terminal executes: colours, cursor moves, a cleared screen, a
changed window title), NUL or DEL, a carriage return that overwrites what was printed, or a
bidirectional override (U+202E) that makes the text read differently from what it is, or a
lone surrogate (from JSON's ``\\ud800``), which cannot be encoded for the terminal at all. Every
terminal view passes such text through ``printable`` first: each of those characters becomes a
visible ASCII escape (``\\x1b``, ``\\u202e``), so the reader sees that it was there. Rich does
not do this itself (it drops only a few C0 codes and passes ESC through).
"""

from __future__ import annotations

import unicodedata

__all__ = ["is_unsafe", "printable", "safe_text"]

# the explicit bidirectional formatting characters: embeddings, overrides, isolates and marks
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _unsafe(ch: str) -> bool:
    if ch in _BIDI:
        return True
    # Cc: C0, DEL, C1; Zl/Zp: line and paragraph separators, which some terminals treat as breaks;
    # Cs: a lone surrogate (JSON can carry one), which no terminal encoding can write
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp", "Cs")


def is_unsafe(ch: str) -> bool:
    """Whether ``printable`` escapes the character ``ch`` (a control character, a line or
    paragraph separator, a bidirectional formatting character); newlines and tabs included."""
    return _unsafe(ch)


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, *, newlines: bool = True) -> str:
    """``text`` with every control character and bidi override replaced by a visible escape.

    Newlines (and tabs) are kept when ``newlines`` is true, for multi-line views such as
    ``proas play``; one-line cells pass ``newlines=False``.
    """
    s = "" if text is None else str(text)
    keep = "\n\t" if newlines else ""
    if not any(_unsafe(ch) and ch not in keep for ch in s):
        return s
    return "".join(_escape(ch) if _unsafe(ch) and ch not in keep else ch for ch in s)


def safe_text(text: object, style: str = "", *, newlines: bool = True):
    """A rich ``Text`` of ``printable(text)``: shown literally, never parsed as rich markup."""
    from rich.text import Text

    return Text(printable(text, newlines=newlines), style=style)
