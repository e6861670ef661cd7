#!/usr/bin/env bash
# The device part of the study behind results/ (results/README.md says what ran where).
#
#   bash results/run_device_study.sh start SECONDS   # install, launch the grid, watch, pack
#   bash results/run_device_study.sh watch SECONDS   # a later call on the same (warm) machine
#
# The device machine runs one command for at most 10 minutes, but a process that starts its own
# session (setsid) lives on until the machine is given back. `start` launches the whole grid
# that way into /tmp/res and watches it for SECONDS; each `watch` call, made while the machine
# is still warm, watches it for SECONDS more. Every call ends by packing the small files of
# every run (metrics.jsonl, summary.json, config.yaml, train.log, the study configs) into
# $OUT/study.tgz, so what came back so far is kept even if the machine goes away.
#
# What runs, all at once, one CPU thread each (16 cores, oversubscribed; nice 0 first):
#   main table, group rows (GRPO, DAPO, GiGPO, each with and without ProAS): household + shop
#   the Distill row's teacher (GiGPO, graph grown from its own rollouts) and student: shop
#   nice 5: ablation (a) shaping rows and ablation (b) ARG rows: shop
# seeds 0-2, 150 steps. Needs .whl/ (omegaconf, antlr4-python3-runtime, rapidfuzz, bm25s,
# PyStemmer wheels, and a copy of the installed `alfworld` package under .whl/pkgs): carry it.
set -u
MODE=${1:?start or watch}
BUDGET=${2:?seconds to watch}
RES=/tmp/res
OUT=${OUT:-/tmp/out}
T0=$SECONDS
export PYTHONPATH=/tmp/site:/tmp/code/pkgs:/tmp/code/src
export CUDA_VISIBLE_DEVICES= JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1   # bm25s may import jax: keep it off the GPU
MAIN_ROWS="grpo grpo_proas dapo dapo_proas gigpo gigpo_proas"

if [ "$MODE" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || [ -n "${LOCAL_TEST:-}" ] || exit 1
  mkdir -p /tmp/code "$RES" && cp -r src .whl/pkgs /tmp/code/ || exit 1
  python3 -c "import proas.envs.household.generator as g, proas.envs.shop, omegaconf, bm25s; g._alfworld(); g.domain_and_grammar()" \
    || { echo "imports failed"; exit 1; }
  nproc; python3 -c "import platform; print(platform.processor())"
  cat > /tmp/study.sh <<EOF
cd /tmp/code
run() { python3 -m proas experiment run "\$@" --out $RES; }
run main --rows $MAIN_ROWS --jobs 36 > $RES/log_main.txt 2>&1 &
run ablation_arg --envs shop --rows arg_teacher arg_distill --jobs 6 > $RES/log_arg_distill.txt 2>&1 &
nice -n 5 bash -c "\$(declare -f run); run ablation_shaping --envs shop --rows grpo_progress_reward grpo_no_mui grpo_no_apr grpo_mask_pm grpo_suffix --jobs 15" > $RES/log_shaping.txt 2>&1 &
nice -n 5 bash -c "\$(declare -f run); run ablation_arg --envs shop --rows arg_random arg_static arg_incomplete arg_incomplete_static --jobs 12" > $RES/log_arg.txt 2>&1 &
wait
echo done > $RES/ALL_DONE
EOF
  setsid nohup bash /tmp/study.sh > /tmp/study.log 2>&1 < /dev/null &
  sleep 5
elif [ ! -d "$RES" ]; then
  echo "no study on this machine (a fresh one): nothing to watch"; exit 3
fi

progress() {  # runs, finished runs, and the mean step reached, per env
  python3 - "$RES" <<'EOF'
import json, pathlib, sys
res = pathlib.Path(sys.argv[1])
for env in ("household", "shop"):
    rows = {}
    for m in sorted(res.glob(f"{env}/*/seed*/metrics.jsonl")):
        lines = m.read_text().splitlines()
        step = json.loads(lines[-1])["step"] if lines else 0
        done = (m.parent / "summary.json").exists()
        rows.setdefault(m.parent.parent.name, []).append(f"{step}{'*' if done else ''}")
    print(env, " ".join(f"{r}:{','.join(s)}" for r, s in rows.items()))
EOF
}
while [ $((SECONDS - T0)) -lt "$BUDGET" ] && [ ! -e "$RES/ALL_DONE" ]; do
  sleep 20
  [ $(( (SECONDS - T0) % 120 )) -lt 20 ] && { echo "--- $((SECONDS - T0)) s, load $(cut -d' ' -f1 /proc/loadavg)"; progress; }
done
mkdir -p "$OUT"
tar czf "$OUT/study.tgz" -C "$RES" --exclude=tb --exclude='*.pt' --exclude=graph.json --exclude=curve.png \
  --exclude=rollouts --exclude=checkpoints --exclude=best . && ls -la "$OUT"
echo "=== after $((SECONDS - T0)) s"; progress; tail -n 3 "$RES"/log_*.txt
