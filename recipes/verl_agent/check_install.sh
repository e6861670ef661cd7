#!/usr/bin/env bash
# Does `pip install proas` move any of verl-agent's pins? pip's resolver, against the live index:
# resolve verl-agent's requirements (its setup.py at commit 796ed31, plus the vllm==0.11.0 its
# README installs) alone, then with proas added, and compare the two sets of versions (nothing is
# installed: --dry-run). Needs PyPI; docs/verl.md section 2 gives the result.
#
#   bash recipes/verl_agent/check_install.sh [PROAS_DIR]
set -euo pipefail
PROAS_DIR="$(cd "${1:-$(dirname "$0")/../..}" && pwd)"
tmp="$(mktemp -d)"
cat >"$tmp/verl-agent.txt" <<'REQ'
accelerate
codetiming
datasets
dill
hydra-core
numpy
pandas
peft
pyarrow>=19.0.0
pybind11
pylatexenc
ray[default]>=2.41.0,<=2.50.0
torchdata
tensordict>=0.8.0,<=0.10.0,!=0.9.0
transformers<=4.57.3
wandb
packaging>=20.0
vllm==0.11.0
REQ
resolve() {  # $1: report file; the rest: what to resolve
    local report="$1"; shift
    python3 -m pip install --dry-run --ignore-installed --quiet --disable-pip-version-check --report "$report" "$@" \
        2> >(grep -v "^WARNING: Location 'file:" >&2)
}
resolve "$tmp/alone.json" -r "$tmp/verl-agent.txt"
resolve "$tmp/with.json" -r "$tmp/verl-agent.txt" "$PROAS_DIR"
python3 - "$tmp/alone.json" "$tmp/with.json" <<'PY'
import json, sys
load = lambda p: {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.load(open(p))["install"]}
alone, both = load(sys.argv[1]), load(sys.argv[2])
moved = {k: (v, both.get(k)) for k, v in alone.items() if both.get(k) != v}
print(f"verl-agent alone: {len(alone)} packages (torch {alone.get('torch')}, vllm {alone.get('vllm')}, "
      f"transformers {alone.get('transformers')}); with proas: {len(both)}, added: {', '.join(sorted(set(both) - set(alone)))}")
print("moved by proas: " + (", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(moved.items())) or "none"))
sys.exit(1 if moved else 0)
PY
rm -rf "$tmp"
