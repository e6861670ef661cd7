#!/usr/bin/env bash
# The device part of the faithful study, results/history/faithful/ (what ran where: its README points to the write-up).
#
#   bash scripts/run_device_study.sh start SECONDS   # install, launch the grid, watch, pack
#   bash scripts/run_device_study.sh watch SECONDS   # a later call on the same (warm) machine
#   WORK=DIR RES=DIR OUT=DIR bash scripts/run_device_study.sh ...   # other places than the defaults
#
# The device machine runs one command for at most 10 minutes, but a process that starts its own
# session (setsid) lives on until the machine is given back. `start` launches the whole grid
# that way into $RES (default $WORK/res; WORK, where the wheels are installed and the code is
# copied, defaults to /tmp) and watches it for SECONDS; each `watch` call, made while the machine
# is still warm, watches it for SECONDS more. Every call ends by packing the small files of
# every run (metrics.jsonl, summary.json, config.yaml, train.log, the study configs) into
# $OUT/study.tgz (default /tmp/out), so what came back so far is kept even if the machine goes
# away. What of it results/ keeps is results/README.md's rule ("What results/ holds").
#
# What runs, one CPU thread each, about 22 at a time on the 16 cores, so that runs finish one
# after another (a run left unfinished when the machine goes is resumed or rerun elsewhere):
#   nice 0: `main` group rows (GRPO, DAPO, GiGPO, each with and without ProAS) and `main_warm`
#           (the same rows started from a short SFT run), household + shop, seeds 0-2
#   nice 5: `ablation_rea` (Rea = state_action, node) and the main job (`proas train` on its
#           defaults) with seeds 0-4, one after another
# 150 steps. Needs .whl/ (omegaconf, antlr4-python3-runtime, rapidfuzz, bm25s, PyStemmer
# wheels, and a copy of the installed `alfworld` package under .whl/pkgs): carry it.
set -u
MODE=${1:?start or watch}
BUDGET=${2:?seconds to watch}
export WORK=${WORK:-/tmp}
export RES=${RES:-$WORK/res}
OUT=${OUT:-/tmp/out}
T0=$SECONDS
export PYTHONPATH=$WORK/site:$WORK/code/pkgs:$WORK/code/src
export CUDA_VISIBLE_DEVICES= JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1   # bm25s may import jax: keep it off the GPU

if [ "$MODE" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$WORK/site" .whl/*.whl || [ -n "${LOCAL_TEST:-}" ] || exit 1
  mkdir -p "$WORK/code" "$RES" && cp -r src .whl/pkgs "$WORK/code/" || exit 1
  python3 -c "import proas.envs.household.generator as g, proas.envs.shop, omegaconf, bm25s; g._alfworld(); g.domain_and_grammar()" \
    || { echo "imports failed"; exit 1; }
  nproc; python3 -c "import platform; print(platform.processor())"
  cat > "$WORK/study.sh" <<'EOF'
cd "$WORK/code"
run() { python3 -m proas experiment run "$@" --out "$RES"; }
run main --rows grpo grpo_proas dapo dapo_proas gigpo gigpo_proas --jobs 9 > "$RES/log_main.txt" 2>&1 &
run main_warm --jobs 9 > "$RES/log_warm.txt" 2>&1 &
nice -n 5 python3 -m proas experiment run ablation_rea --rows rea_state_action rea_node --jobs 3 --out "$RES" \
  > "$RES/log_rea.txt" 2>&1 &
(for s in 0 1 2 3 4; do
   nice -n 5 python3 -m proas train seed=$s train.out_dir="$RES/mainjob" train.run_name=seed$s train.progress=false \
     > "$RES/log_mainjob_$s.txt" 2>&1
 done) &
wait
echo done > "$RES/ALL_DONE"
EOF
  setsid nohup bash "$WORK/study.sh" > "$WORK/study.log" 2>&1 < /dev/null &
  sleep 5
elif [ ! -d "$RES" ]; then
  echo "no study on this machine (a fresh one): nothing to watch"; exit 3
fi

progress() {  # per env and row: the step each run reached (* = finished)
  python3 - "$RES" <<'EOF'
import json, pathlib, sys
res = pathlib.Path(sys.argv[1])
for env, pattern in (("household", "household/*/seed*/metrics.jsonl"), ("shop", "shop/*/seed*/metrics.jsonl"),
                     ("mainjob", "mainjob/*/metrics.jsonl")):
    rows = {}
    for m in sorted(res.glob(pattern)):
        lines = m.read_text().splitlines()
        try:
            step = json.loads(lines[-1])["step"] if lines else 0
        except ValueError:
            step = "?"
        done = (m.parent / "summary.json").exists()
        key = m.parent.name if env == "mainjob" else m.parent.parent.name
        rows.setdefault(key, []).append(f"{step}{'*' if done else ''}")
    print(env, " ".join(f"{r}:{','.join(s)}" for r, s in rows.items()))
EOF
}
while [ $((SECONDS - T0)) -lt "$BUDGET" ] && [ ! -e "$RES/ALL_DONE" ]; do
  sleep 20
  [ $(( (SECONDS - T0) % 120 )) -lt 20 ] && { echo "--- $((SECONDS - T0)) s, load $(cut -d' ' -f1 /proc/loadavg)"; progress; }
done
mkdir -p "$OUT"
if [ -n "${PACK_CHECKPOINTS:-}" ]; then
  # the newest checkpoint of every run that has not finished, so it can be resumed elsewhere;
  # split into files of at most 15 MB (the device tool's limit on a returned file is 16 MB)
  (cd "$RES" && for d in $(find . -name latest.json -path '*checkpoints*' | xargs -r -n1 dirname | xargs -r -n1 dirname); do
     [ -e "$d/summary.json" ] && continue
     step=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['dir'])" "$d/checkpoints/latest.json" 2>/dev/null) || continue
     echo "$d/checkpoints/latest.json"; echo "$d/checkpoints/$step"
   done) > "$WORK/ckpt_list.txt"
  tar czf "$WORK/ckpt.tgz" -C "$RES" -T "$WORK/ckpt_list.txt" && split -b 15m -d "$WORK/ckpt.tgz" "$OUT/ckpt.tgz." && ls -la "$OUT"
fi
tar czf "$OUT/study.tgz" -C "$RES" --exclude=tb --exclude='*.pt' --exclude=graph.json --exclude=curve.png \
  --exclude=rollouts --exclude=checkpoints --exclude=best . && ls -la "$OUT"
echo "=== after $((SECONDS - T0)) s"; progress; tail -n 3 "$RES"/log_*.txt
