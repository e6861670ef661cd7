#!/usr/bin/env bash
# Where an lm RL step's time goes on one GPU machine (issue #43, item 5): profiles of one run
# alone per env (py-spy, raw stacks), then 8 household + 8 shop runs side by side as the study
# grid runs them today (one process each), with and without the CUDA MPS daemon. Carry .whl
# (scripts/run_device_study.sh says what it holds, plus a py-spy wheel).
#
#   bash scripts/lm_profile_device.sh [STEPS_ALONE] [STEPS_GRID]
#
# Writes under $OUT: prof_<env>.txt (py-spy raw), grid_<mode>.txt (per-run step times), dmon_<mode>.txt.
set -u
OUT=${OUT:-/tmp/out}
SA=${1:-6}
SG=${2:-6}
W=/tmp/lmprof
mkdir -p "$W" "$OUT"
[ -n "${LOCAL_TEST:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$W/site" .whl/*.whl || exit 1
export PYTHONPATH=$W/site:$PWD/.whl/pkgs:$PWD/src PATH=$W/site/bin:$PATH
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 JAX_PLATFORMS=cpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
for env in household shop; do
  span=line; [ $env = household ] && span=word
  python3 -m proas lm tokenizer --env $env --vocab 4096 --max-tasks 200 --span $span --out "$W/tok/$env" > /dev/null \
    && python3 -m proas lm new-model --tokenizer "$W/tok/$env" --size small --out "$W/models/$env" | tail -1 || exit 1
done
COMMON="policy=lm policy.lm.mode=score policy.lm.score_norm=sum policy.lm.micro_batch_size=64 train.progress=false"
COMMON="$COMMON policy.lm.lr=1e-4 train.save_every=1000 train.rollout_log_every=0 ${EXTRA:-}"
cat > "$W/one.sh" <<EOS
env=\$1 seed=\$2 steps=\$3 out=\$4; shift 4
exec python3 -m proas train env=\$env seed=\$seed $COMMON policy.lm.model_path=$W/models/\$env train.steps=\$steps \\
  train.out_dir=\$out train.run_name=\$env-s\$seed "\$@"
EOS
one() { bash "$W/one.sh" "$@"; }  # env seed steps outdir [overrides...]
summ() {  # dir label
  python3 - "$1" "$2" <<'EOP'
import json, pathlib, statistics as st, sys
rows = []
for m in sorted(pathlib.Path(sys.argv[1]).glob("*/metrics.jsonl")):
    recs = [json.loads(x) for x in m.read_text().splitlines() if x.strip()]
    steps = [r for r in recs if "time/step" in r]
    if not steps:
        print(m.parent.name, "no steps"); continue
    val = [r.get("time/val", 0) for r in recs if "time/val" in r]
    f = lambda k: st.mean(r[k] for r in steps[1:] or steps)
    rows.append(f)
    print(f"{sys.argv[2]} {m.parent.name}: steps {len(steps)} step {f('time/step'):.2f}s rollout {f('time/rollout'):.2f} "
          f"update {f('time/update'):.2f} val {st.mean(val) if val else 0:.2f}s x{len(val)} wall {recs[-1].get('time/wall', 0):.0f}s "
          f"env-steps/step {f('train/steps'):.0f}")
EOP
}
# 0. score mode's passes alone (expand against packed), the GPU to itself
python3 benchmarks/lm_score.py --device cuda > "$OUT/lm_score.txt" 2>&1; tail -n 6 "$OUT/lm_score.txt"
# 1. each env alone, under py-spy (validation every 3 steps, so its cost shows too)
for env in shop household; do
  t0=$SECONDS
  py-spy record -r 50 -f raw -o "$OUT/prof_$env.txt" -- \
    python3 -m proas train env=$env seed=200 $COMMON policy.lm.model_path=$W/models/$env train.steps=$SA \
      train.val_every=2 train.out_dir=$W/alone train.run_name=$env > "$W/alone_$env.log" 2>&1 \
    || { echo "py-spy failed; plain run"; one $env 200 $SA $W/alone train.val_every=2 > "$W/alone_$env.log" 2>&1; }
  echo "alone $env: $((SECONDS - t0)) s"
done
summ $W/alone alone
# 2. the grid as today: 8 household + 8 shop processes, no validation after step 0
grid() {  # label
  local d=$W/grid_$1; t0=$SECONDS
  nvidia-smi dmon -s u -d 1 > "$OUT/dmon_$1.txt" 2>&1 & local dm=$!
  local pids=()
  for s in $(seq 0 $((${NGRID:-8} - 1))); do
    for env in household shop; do
      timeout ${GRID_LIMIT:-240} bash "$W/one.sh" $env $s $SG $d train.val_every=1000 train.val_before_train=false \
        > "$d-$env-$s.log" 2>&1 &
      pids+=($!)
    done
  done
  wait "${pids[@]}"
  kill $dm 2>/dev/null
  echo "grid $1: $((SECONDS - t0)) s wall for 16 runs x $SG steps"
  summ $d $1 | tee "$OUT/grid_$1.txt"
}
mkdir -p $W/grid_plain $W/grid_mps
grid plain
if command -v nvidia-cuda-mps-control > /dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$W/mps CUDA_MPS_LOG_DIRECTORY=$W/mpslog
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  nvidia-cuda-mps-control -d && sleep 1 && grid mps
  echo quit | nvidia-cuda-mps-control
else
  echo "no nvidia-cuda-mps-control"
fi
tail -n 3 $W/grid_plain-household-0.log
