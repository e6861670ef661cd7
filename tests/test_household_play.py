"""`proas play household`: a scripted session wins with the hints alone."""

from __future__ import annotations

import io

from proas import cli, play_cli
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
    assert cli.main(["play", "spaceship", "--task", "x"]) == 2
    assert "unknown env 'spaceship'" in capsys.readouterr().err
    assert cli.main(["play", "household", "--task", "train-pick-99999"]) == 2
    assert "index out of range" in capsys.readouterr().err
