"""Installing proas into a verl-agent environment keeps verl-agent's pins: pip's own resolver,
offline, on proas's declared dependencies (pyproject.toml) against the versions verl-agent's
install fixes (its setup.py at the recipe's commit 796ed31, and the vLLM 0.11.0 its README
installs, which pins torch 2.8.0).

The index is a folder of metadata-only wheels: verl-agent's versions of the packages both need,
one version of each package only proas needs, and proas itself with the ``Requires-Dist`` lines
of pyproject.toml. ``pip install --dry-run --no-index`` then resolves ``proas`` with verl-agent's
versions as constraints; a requirement of proas that excludes one of them (as ``torch==2.13.0``
did) makes pip fail with ResolutionImpossible.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]

#: what a verl-agent install at commit 796ed31 fixes among the packages proas also needs:
#: vllm 0.11.0 (its README) pins torch 2.8.0; its setup.py caps transformers at 4.57.3, ray at
#: 2.50.0 and tensordict at 0.10.0; hydra-core 1.3 keeps omegaconf below 2.4
VERL_AGENT = {
    "torch": "2.8.0", "transformers": "4.57.3", "numpy": "2.2.6", "omegaconf": "2.3.0", "peft": "0.17.1",
    "pydantic": "2.12.3", "uvicorn": "0.38.0", "starlette": "0.48.0", "rich": "14.2.0", "networkx": "3.5",
    "tensorboard": "2.20.0", "matplotlib": "3.10.7",
}
#: packages only proas needs (any version its requirement admits will do here)
PROAS_ONLY = {"rapidfuzz": "3.14.3", "bm25s": "0.2.14", "pystemmer": "3.0.0"}


def wheel(folder: Path, name: str, version: str, requires: list[str] = ()) -> None:
    dist = f"{name.replace('-', '_')}-{version}"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as z:
        z.writestr(f"{dist}.dist-info/METADATA", "\n".join(meta) + "\n")
        z.writestr(f"{dist}.dist-info/WHEEL",
                   "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{dist}.dist-info/RECORD", "")


def proas_requirements() -> list[str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]


def resolve(tmp_path: Path, requires: list[str]) -> subprocess.CompletedProcess:
    index = tmp_path / "index"
    index.mkdir()
    for name, version in {**VERL_AGENT, **PROAS_ONLY}.items():
        wheel(index, name, version)
    wheel(index, "proas", "0.1.0", requires)
    pins = tmp_path / "verl-agent.txt"
    pins.write_text("".join(f"{name}=={version}\n" for name, version in VERL_AGENT.items()))
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-index", "--find-links",
         str(index), "--report", str(report), "-c", str(pins), "proas"],
        capture_output=True, text=True, timeout=300,
        env={"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_CONFIG_FILE": "/dev/null", "PATH": "/usr/bin:/bin"},
    )
    proc.report = json.loads(report.read_text()) if report.is_file() else None
    return proc


def test_proas_declares_no_torch_pin():
    torch = [r for r in proas_requirements() if re.match(r"torch\b", r)]
    assert torch and "==" not in torch[0]


def test_pips_resolver_installs_proas_beside_verl_agents_pins(tmp_path):
    proc = resolve(tmp_path, proas_requirements())
    assert proc.returncode == 0, proc.stderr[-2000:]
    chosen = {item["metadata"]["name"].lower(): item["metadata"]["version"] for item in proc.report["install"]}
    for name, version in VERL_AGENT.items():
        assert chosen.get(name, version) == version, name


def test_pips_resolver_refuses_a_requirement_that_moves_a_verl_agent_pin(tmp_path):
    """The check can fail: the torch pin proas used to declare conflicts with verl-agent's."""
    requires = [r if not re.match(r"torch\b", r) else "torch==2.13.0" for r in proas_requirements()]
    proc = resolve(tmp_path, requires)
    assert proc.returncode != 0 and "ResolutionImpossible" in proc.stderr + proc.stdout
