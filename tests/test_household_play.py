"""`proas play household`: a scripted session wins with the hints alone."""

from __future__ import annotations

import io

import pytest

from proas import cli
from proas.envs import cli as play_cli
from proas.envs.household import make_household_env


def test_following_hints_wins_the_game():
    env = make_household_env("fast")
    out = io.StringIO()
    lines = []

    def read():
        # ask for a hint, then type exactly what it said
        text = out.getvalue()
        if text.rstrip().splitlines()[-1].startswith("hint: "):
            cmd = text.rstrip().splitlines()[-1][len("hint: "):]
            lines.append(cmd)
            return cmd
        return "hint"

    assert play_cli.play(env, "train-pick2-0003", read, out) == 0
    assert lines == env.oracle("train-pick2-0003")
    assert "WON after 9 steps, reward 10.0" in out.getvalue() or f"WON after {len(lines)} steps" in out.getvalue()


def test_numbers_pick_admissible_commands_and_errors_are_shown(monkeypatch, capsys):
    script = iter(["1", "fly away", "quit"])
    monkeypatch.setattr("builtins.input", lambda prompt="": next(script))
    assert cli.main(["play", "household", "--task", "train-heat-0003"]) == 0
    out = capsys.readouterr().out
    assert "Your task is to: heat some potato and put it in fridge." in out
    assert "[1] go to cabinet 1" in out and "> go to cabinet 1\nYou arrive at cabinet 1." in out
    assert "Nothing happens.\n(rejected: malformed)" in out


def test_unknown_env_and_bad_task_are_one_line_errors(capsys):
    # the env is a choice of the command line now: argparse's one line, exit 2
    with pytest.raises(SystemExit) as exc:
        cli.main(["play", "spaceship", "--task", "x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'spaceship'" in err and "Traceback" not in err
    assert cli.main(["play", "household", "--task", "train-pick-99999"]) == 2
    assert "index out of range" in capsys.readouterr().err


class _Terminal:
    """Standard input as an interactive terminal (which shows what is typed)."""

    def isatty(self) -> bool:
        return True


def test_admissible_commands_are_listed_whole_within_the_width(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setattr("builtins.input", lambda prompt="": "quit")
    assert cli.main(["play", "household", "--task", "train-heat-0003"]) == 0
    out = capsys.readouterr().out
    listing = out[out.index("admissible:"):].splitlines()[1:]
    assert listing and all(len(x) <= 80 for x in listing)
    adm = make_household_env("fast").reset("train-heat-0003")[1]["admissible"]
    assert len(adm) > 6  # more than one line's worth
    for i, c in enumerate(adm, 1):
        assert sum(f"[{i}] {c}" in x for x in listing) == 1  # each command whole, on one line


def test_a_typed_command_is_not_echoed_again_on_a_terminal(monkeypatch, capsys):
    prompts = []
    script = iter(["go to cabinet 1", "2", "quit"])

    def typed(prompt=""):
        prompts.append(prompt)
        return next(script)

    monkeypatch.setattr("sys.stdin", _Terminal())
    monkeypatch.setattr("builtins.input", typed)
    assert cli.main(["play", "household", "--task", "train-heat-0003"]) == 0
    out = capsys.readouterr().out
    assert prompts == ["> "] * 3
    assert "> go to cabinet 1" not in out and "\nYou arrive at cabinet 1." in out
    assert out.count("→ go to cabinet 2") == 1  # a number: the command it picked, once
    assert "> go to cabinet 2" not in out


def test_piped_input_is_echoed_once_without_a_prompt(monkeypatch, capsys):
    prompts = []
    script = iter(["go to cabinet 1", "quit"])

    def piped(prompt=""):
        prompts.append(prompt)
        return next(script)

    monkeypatch.setattr("builtins.input", piped)
    assert cli.main(["play", "household", "--task", "train-heat-0003"]) == 0
    out = capsys.readouterr().out
    assert prompts == ["", ""] and out.count("> go to cabinet 1") == 1


def test_env_text_with_control_characters_is_escaped():
    class Evil:
        def reset(self, task):
            return "room\x1b[2J\u202e", {"admissible": ["go\x1b]0;x\x07 north"]}

        def step(self, action):
            return "ok\x00", 0.0, True, False, {"won": False, "steps": 1}

    out = io.StringIO()
    play_cli.play(Evil(), "t", lambda: "1", out)
    text = out.getvalue()
    assert not [ch for ch in text if (ord(ch) < 32 and ch != "\n") or ch == "\u202e"]
    assert r"room\x1b[2J\u202e" in text and r"[1] go\x1b]0;x\x07 north" in text and r"ok\x00" in text
