"""What a new user meets first on the command line (issue #27, item 12): a config typo is
reported before the trainer and torch load, and the help text keeps one set of conventions."""

from __future__ import annotations

import argparse
import gc
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from proas.cli import build_parser, run, walk

ROOT = Path(__file__).resolve().parents[1]

#: the CLI with torch (and what needs it) unimportable: a command that imports it before
#: checking its config fails with ImportError instead of the one-line config error
NO_TORCH = """
import sys
for name in ("torch", "transformers", "peft"):
    sys.modules[name] = None
from proas.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _commands_with_overrides():
    out = []
    for path, parser in walk(build_parser()):
        if any(a.dest == "overrides" for a in parser._actions):
            out.append((path, parser))
    return out


def _required_options(parser: argparse.ArgumentParser, tmp: Path) -> list[str]:
    """A placeholder value for each required option (none of them is read before the config)."""
    args = []
    for a in parser._actions:
        if a.option_strings and a.required:
            args += [a.option_strings[-1], a.choices[0] if a.choices else str(tmp / a.dest)]
    return args


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run([sys.executable, "-c", NO_TORCH, *argv], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=120)


@pytest.mark.parametrize("path", [p for p, _ in _commands_with_overrides()], ids=" ".join)
def test_a_config_typo_is_reported_before_torch_loads(path, tmp_path):
    parser = dict(walk(build_parser()))[path]
    for bad in ("algo.estimater=grpo", "train.steps=many"):
        out = _run([*path, *_required_options(parser, tmp_path), bad], tmp_path)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("proas: error: config:"), out.stderr
    assert not any(tmp_path.iterdir())  # nothing written


def test_the_commands_with_overrides_are_found():
    names = {" ".join(p) for p, _ in _commands_with_overrides()}
    assert {"train", "direct", "sft", "react"} <= names


def test_a_typo_in_a_resume_override_is_reported_before_torch_loads(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("seed: 0\n")
    out = _run(["train", "--resume", str(run), "train.stepz=9"], tmp_path)
    assert out.returncode == 2 and out.stderr.startswith("proas: error: config:"), out.stderr


def test_show_config_needs_no_torch(tmp_path):
    out = _run(["train", "--show-config", "env=shop"], tmp_path)
    assert out.returncode == 0 and "name: shop" in out.stdout, out.stderr


# ---------------------------------------------------------------------------- help text
#: a metavar for each kind of number: a count, a seed, a size... (the same kind, the same name)
INT_METAVARS = {"N", "SEED", "BYTES", "PORT", "STEP"}
FLOAT_METAVARS = {"SECONDS", "T", "RATE", "FRACTION", "WEIGHT"}  # WEIGHT: a loss term's weight
METAVAR = r"[A-Z][A-Z0-9_]*(=[A-Z]+)?(\.[a-z]+)?(\|[A-Z][A-Z0-9_]*)*"


def _arguments():
    """``(command, action)`` of every argument of every command, help and subcommands aside."""
    for path, parser in walk(build_parser()):
        for a in parser._actions:
            if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            yield " ".join(path), a


def _takes_value(a) -> bool:
    return a.nargs != 0


def test_every_argument_has_help():
    missing = [f"{cmd} {a.option_strings or a.dest}" for cmd, a in _arguments() if not a.help]
    assert not missing, missing


def test_every_command_says_what_it_does_in_its_own_help():
    """`proas eval --help` (and every other command's) opens with what the command does, as the
    list of `proas --help` says it: a newcomer reads the command's help, not its parent's."""
    silent = [" ".join(path) for path, parser in walk(build_parser()) if path and not parser.description]
    assert not silent, silent
    text = build_parser()._subparsers._group_actions[0].choices["eval"].format_help()
    assert "\n\nEvaluate a trained policy on the validation set.\n" in text


def test_every_default_is_shown():
    """An option that takes a value and has a default (0 included) says it in its help."""
    hidden = []
    for path, parser in walk(build_parser()):
        text = parser.format_help()
        options = text[text.index("\noptions:"):]
        for a in parser._actions:
            if a.option_strings and a.default is not None and a.default is not argparse.SUPPRESS and _takes_value(a):
                start = re.search(rf"^  (-\S+, )*{re.escape(a.option_strings[0])}\b", options, flags=re.M).start()
                block = options[start:]
                end = block.find("\n  -", 1)
                block = block if end < 0 else block[:end]
                if "default" not in block:
                    hidden.append(f"{' '.join(path)} {a.option_strings[-1]}")
    assert not hidden, hidden


def test_metavars_follow_one_convention():
    """Every argument that takes a value names it with an explicit upper-case metavar (or lists
    its choices); numbers of one kind share one name (N for counts, SECONDS for times ...); an
    option spelt the same way in several commands is named the same way in each; subcommands
    are COMMAND everywhere."""
    bad = []
    by_flag: dict[str, set] = {}
    for cmd, a in _arguments():
        if not _takes_value(a):
            continue
        name = f"{cmd} {a.option_strings[-1] if a.option_strings else a.dest}"
        if a.choices is not None and a.metavar is None:
            continue
        mv = a.metavar
        if mv is None or not re.fullmatch(METAVAR, mv):
            bad.append(f"{name}: metavar {mv!r}")
            continue
        kind = getattr(a.type, "kind", a.type)  # a proas.ranges.Number: int or float
        if kind is int and mv not in INT_METAVARS:
            bad.append(f"{name}: an integer named {mv} (one of {sorted(INT_METAVARS)})")
        if kind is float and mv not in FLOAT_METAVARS:
            bad.append(f"{name}: a number named {mv} (one of {sorted(FLOAT_METAVARS)})")
        if a.option_strings and a.option_strings[-1] != "--out":  # --out is a file or a folder
            by_flag.setdefault((a.option_strings[-1], kind), set()).add(mv)
    bad += [f"{flag}: named {sorted(mvs)}" for (flag, _), mvs in by_flag.items() if len(mvs) > 1]
    for path, parser in walk(build_parser()):
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction) and a.metavar != "COMMAND":
                bad.append(f"{' '.join(path) or 'proas'}: subcommands named {a.metavar!r}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------- task ids
def test_proas_tasks_lists_the_ids_that_play_and_the_task_sets_take(capsys):
    from proas.cli import main
    from proas.envs import make

    assert main(["tasks", "household"]) == 0
    out, err = capsys.readouterr()
    ids = out.split()
    env = make("household")
    assert ids == env.task_ids("valid") and len(ids) == 128 and err.strip() == "128 tasks in household's valid split"
    assert main(["tasks", "household", "--split", "train"]) == 0
    train = capsys.readouterr().out.split()
    assert "train-heat-0003" in train and not set(train) & set(ids)
    env.reset(train[0])  # an id it lists starts
    assert main(["tasks", "household", "--split", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "valid_seen" in err


def test_play_takes_only_the_backends_there_are(capsys):
    from proas.cli import main

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["play", "household", "--task", "x", "--backend", "fst"])
    assert exc.value.code == 2 and "invalid choice: 'fst'" in capsys.readouterr().err
    assert main(["play", "shop", "--task", "x", "--backend", "fast"]) == 2
    assert "household only" in capsys.readouterr().err


def test_the_entry_point_returns_mains_status_and_freezes_what_is_left(monkeypatch):
    """``run`` (the ``proas`` script, ``python -m proas``) passes ``main``'s exit status on and
    moves what is left out of the collector's generations, which spares the passes over it on
    the way out."""
    monkeypatch.setattr(sys, "argv", ["proas", "train", "no_such_key=1"])
    gc.unfreeze()
    try:
        assert run() == 2
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    proc = subprocess.run([sys.executable, "-m", "proas", "train", "no_such_key=1"], capture_output=True, text=True)
    assert proc.returncode == 2 and "no_such_key" in proc.stderr
