#!/usr/bin/env bash
# Create (or reuse) a separate virtual environment with the real verl 0.9.1 for tests/test_verl_*.py.
#
#   bash .ci/verl_env.sh VENV_DIR        # then: VENV_DIR/bin/python -m pytest -q tests/test_verl_*.py
#
# verl needs numpy>=2 and transformers>=5.5, which the project's main interpreter must not get,
# hence a venv of its own. The CPU build of torch is installed first and pinned in the verl
# install, so tensordict never pulls a CUDA build (that costs 3 GB more). proas itself goes in
# editable and without its dependencies: the credit layer and the verl integration need only
# numpy, networkx, omegaconf and rich. Idempotent: a venv whose stamp matches this script's
# requirements is reused as it is.
set -euo pipefail
VENV="${1:?usage: .ci/verl_env.sh VENV_DIR}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
export PIP_DISABLE_PIP_VERSION_CHECK=1

TORCH="torch==2.13.0"
VERL="verl==0.9.1"
# verl.trainer.ppo.ray_trainer (compute_advantage) imports these; they are in verl's
# `verl-core` extra, which would also bring much more.
TRAINER_EXTRAS="cachetools uvicorn fastapi"
# verl-agent's ray_trainer module (tests/test_verl_agent.py, with VERL_AGENT_DIR) also imports
# openai; proas's shop env needs rapidfuzz, bm25s and PyStemmer, its household generator the
# alfworld package's data (without TextWorld and the planner: --no-deps), so that verl-agent's
# rollout loop can play both there. Kept out of the stamp, so an older venv is topped up instead
# of rebuilt.
VERL_AGENT_EXTRAS="openai rapidfuzz>=3.0 bm25s>=0.2 PyStemmer>=2.2"
ALFWORLD="alfworld==0.4.2"
EXTRAS_IMPORT="import openai, rapidfuzz, bm25s, Stemmer, alfworld.gen.constants"
PROAS_DEPS="numpy networkx>=3.0 omegaconf>=2.3 rich>=13 pytest>=8 pytest-timeout>=2.3 hypothesis>=6.100"
STAMP_TEXT="$TORCH $VERL $TRAINER_EXTRAS $PROAS_DEPS"
STAMP="$VENV/.proas-verl-stamp"

start=$(date +%s)
# pip install, quiet; the machine's pip config names local index folders that may be absent,
# and pip warns once per package about each: drop those lines, keep everything else.
pip_install() {
    local log rc=0
    log="$(mktemp)"
    "$VENV/bin/python" -m pip install -q "$@" 2>"$log" || rc=$?
    grep -v "^WARNING: Location 'file:" "$log" >&2 || true
    rm -f "$log"
    return "$rc"
}

if [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]] \
    && "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('verl') is None)"; then
    # the venv may have been built for another checkout: point its editable proas here
    where="$("$VENV/bin/python" -c "import proas, os; print(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(proas.__file__)))))" 2>/dev/null || true)"
    if [[ "$where" != "$REPO" ]]; then
        pip_install --no-deps -e "$REPO"
    fi
    if ! "$VENV/bin/python" -c "$EXTRAS_IMPORT" 2>/dev/null; then
        pip_install "$TORCH" $VERL_AGENT_EXTRAS
        pip_install --no-deps "$ALFWORLD"
    fi
    echo "verl venv: reusing $VENV (proas from $REPO)"
    exit 0
fi

python3 -m venv "$VENV"
pip_install "$TORCH"
# torch pinned again so the resolver keeps the CPU build already installed.
pip_install "$VERL" "$TORCH" $TRAINER_EXTRAS
pip_install --no-deps -e "$REPO"
pip_install "$TORCH" $PROAS_DEPS $VERL_AGENT_EXTRAS
pip_install --no-deps "$ALFWORLD"
"$VENV/bin/python" -c "import torch, verl, proas; print('verl venv: verl', verl.__version__, '| torch', torch.__version__)"
echo "$STAMP_TEXT" >"$STAMP"
echo "verl venv: built $VENV in $(( $(date +%s) - start ))s"
