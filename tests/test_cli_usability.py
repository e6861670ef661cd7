"""What a new user meets first on the command line (issue #27, item 12): a config typo is
reported before the trainer and torch load, and the help text keeps one set of conventions."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proas.cli import build_parser

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


def _walk(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(command path, parser)`` of every command and subcommand."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _walk(sub, path + (name,))


def _commands_with_overrides():
    out = []
    for path, parser in _walk(build_parser()):
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
    parser = dict(_walk(build_parser()))[path]
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
