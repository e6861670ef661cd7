"""``proas.termtext``: env and log text is made safe before it reaches a terminal."""

from proas.termtext import printable, safe_text


def test_controls_and_bidi_become_visible_escapes():
    assert printable("a\x1b[2Jb\x00c\x7fd\x9be\u202ef\u2067g\rh\u2028i") == (
        r"a\x1b[2Jb\x00c\x7fd\x9be\u202ef\u2067g\x0dh\u2028i")


def test_newlines_and_tabs_are_kept_only_for_multi_line_views():
    assert printable("a\nb\tc") == "a\nb\tc"
    assert printable("a\nb\tc", newlines=False) == r"a\x0ab\x09c"


def test_ordinary_text_is_unchanged():
    text = "You arrive at sofa 1. Ça va — 日本語 ✓ ●"
    assert printable(text) is text or printable(text) == text
    assert printable(None) == ""


def test_safe_text_is_never_markup():
    t = safe_text("[bold]x[/] \x1b")
    assert t.plain == r"[bold]x[/] \x1b" and not t.spans
