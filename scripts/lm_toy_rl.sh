#!/usr/bin/env bash
# Does GRPO teach a from-scratch lm at all, and at what rate? A CPU probe on the tests' toy env
# (tests/toy_env.py: fetch an item from one of 3 places and drop it at another, 6 steps at most;
# 32 training tasks, 8 tasks x 4 episodes a step), 60 steps of GRPO from random weights:
#   - the scorer at its defaults (hashed n-gram features, SGD 1.0), the reference that learns;
#   - the lm (`tiny` Qwen2, score mode, score_norm=mean so that a random model is near uniform
#     over the candidates) at AdamW 1e-3, 3e-3, 1e-2 with the default minibatch (256: one update a
#     step here) and with minibatch 32 (about six updates a step), SEEDS each: the same rates at
#     both minibatches tell the count of updates from the size of each.
# Prints training SR per 10 steps and the entropy of a decision, per run; runs land in OUT.
#
#   bash scripts/lm_toy_rl.sh [OUT]        (SEEDS="0 1" JOBS=2 by default; about 4 min a run on 2 cores)
set -u
OUT=${1:-/tmp/lm_toy_rl}
SEEDS=${SEEDS-0 1}  # empty: the scorer alone
JOBS=${JOBS:-2}
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH=$PWD/tests:$PWD/src${PYTHONPATH:+:$PYTHONPATH} OMP_NUM_THREADS=1
TOY=(env.name=toy_env:make_env env.options.n_places=3 env.options.max_steps=6 env.options.n_train=32
     env.options.n_valid=8 env.tasks_per_step=8 env.group_size=4 train.progress=false train.steps=60
     algo.estimator=grpo algo.shaping=none)
LM=(policy=lm policy.lm.model_config=tiny policy.lm.mode=score policy.lm.score_norm=mean policy.lm.device=cpu)
runs=("scorer_s0|seed=0")
for s in $SEEDS; do
  for lr in 1e-3 3e-3 1e-2; do runs+=("lm_lr${lr}_mb256_s$s|seed=$s ${LM[*]} policy.lm.lr=$lr"); done
  for lr in 1e-3 3e-3 1e-2; do runs+=("lm_lr${lr}_mb32_s$s|seed=$s ${LM[*]} policy.lm.lr=$lr algo.minibatch_size=32"); done
done
mkdir -p "$OUT"
for r in "${runs[@]}"; do
  name=${r%%|*}; over=${r#*|}
  [ -f "$OUT/$name/summary.json" ] && continue
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 2; done
  # shellcheck disable=SC2086
  python3 -m proas train "${TOY[@]}" $over --run-dir "$OUT/$name" > "$OUT/$name.log" 2>&1 &
done
wait
python3 - "$OUT" <<'EOP'
import pathlib, statistics, sys
from proas.experiments.heldout import run_metrics  # the trainer's reader (a resumed step's last record)
out = pathlib.Path(sys.argv[1])
print("run | train SR % per 10 steps (1-10 ... 51-60) | entropy, steps 1-10 -> 51-60")
for run in sorted(p for p in out.iterdir() if p.is_dir()):
    tr = [r for r in run_metrics(run) if "train/sr" in r]
    sr = [100 * statistics.mean(r["train/sr"] for r in tr[a:a + 10]) for a in range(0, len(tr), 10)]
    ent = [statistics.mean(r["loss/entropy"] for r in tr[a:a + 10]) for a in (0, max(0, len(tr) - 10))]
    print(f"{run.name} | {' '.join(f'{x:5.1f}' for x in sr)} | {ent[0]:.2f} -> {ent[1]:.2f}")
EOP
