#!/usr/bin/env bash
# The study behind results/: one 16-core machine, one fixed slot of wall time (LIMIT seconds).
# Every run goes at once (oversubscribed, one thread each), so all rows of a table progress at
# the same rate; at the limit the runners stop what is still going (checkpoints kept, and
# `proas experiment run` with the same arguments resumes them). `proas report` then compares the
# rows of each table within the steps that every run of that table reached.
#
# What runs (a reduced setting, see results/README.md):
#   shop:      main table's group rows + both ablation tables, seeds 0-2, SHOP_STEPS steps
#   household: (HOUSEHOLD=1) main table's group rows, seeds 0-2, up to 150 steps (as many as the
#              slot allows)
#
# On the device machine (no registry there): the wheels of omegaconf, antlr4-python3-runtime,
# rapidfuzz, bm25s, PyStemmer and a copy of the installed `alfworld` package under .whl/pkgs,
#   pip install --no-index --no-deps --target /tmp/site .whl/*.whl
#   PYTHONPATH=/tmp/site:$PWD/.whl/pkgs:$PWD/src LIMIT=470 PACK=$OUT/study.tgz \
#       bash results/run_device_study.sh /tmp/res
set -u
OUT_DIR=${1:-results/runs}
LIMIT=${LIMIT:-470}
SHOP_STEPS=${SHOP_STEPS:-100}
HOUSEHOLD=${HOUSEHOLD:-1}   # 0: shop only (a short slot)
export CUDA_VISIBLE_DEVICES= JAX_PLATFORMS=cpu   # bm25s may import jax; keep every run off the GPU
run() { python3 -m proas experiment run "$@" --out "$OUT_DIR" --time-limit "$LIMIT"; }
MAIN_ROWS="grpo grpo_proas dapo dapo_proas gigpo gigpo_proas"
mkdir -p "$OUT_DIR"
# PACK=file.tgz: every minute, pack the small files of every run there (a call cut off by the
# session's device time still brings back what was done; the first attempt lost everything)
if [ -n "${PACK:-}" ]; then
  ( while sleep 60; do
      tar czf "$PACK.tmp" -C "$OUT_DIR" --exclude=tb --exclude='*.pt' --exclude=graph.json --exclude=curve.png . \
        2>/dev/null && mv "$PACK.tmp" "$PACK"
    done ) &
  PACKER=$!
fi
PIDS=()
# the distillation teacher first (higher priority), its student when it is done
run ablation_arg --envs shop --rows arg_teacher arg_distill --steps $SHOP_STEPS --jobs 6 > "$OUT_DIR/log_arg_distill.txt" 2>&1 &
PIDS+=($!)
nice -n 5 bash -c "$(declare -f run); OUT_DIR=$OUT_DIR LIMIT=$LIMIT; run main --envs shop --rows $MAIN_ROWS --steps $SHOP_STEPS --jobs 18" > "$OUT_DIR/log_main_shop.txt" 2>&1 &
PIDS+=($!)
nice -n 5 bash -c "$(declare -f run); OUT_DIR=$OUT_DIR LIMIT=$LIMIT; run ablation_shaping --envs shop --rows grpo_progress_reward grpo_no_mui grpo_no_apr grpo_mask_pm grpo_suffix --steps $SHOP_STEPS --jobs 15" > "$OUT_DIR/log_shaping_shop.txt" 2>&1 &
PIDS+=($!)
nice -n 5 bash -c "$(declare -f run); OUT_DIR=$OUT_DIR LIMIT=$LIMIT; run ablation_arg --envs shop --rows arg_random arg_static arg_incomplete arg_incomplete_static --steps $SHOP_STEPS --jobs 12" > "$OUT_DIR/log_arg_shop.txt" 2>&1 &
PIDS+=($!)
[ "$HOUSEHOLD" = 1 ] && nice -n 5 bash -c "$(declare -f run); OUT_DIR=$OUT_DIR LIMIT=$LIMIT; run main --envs household --rows $MAIN_ROWS --steps 150 --jobs 18" > "$OUT_DIR/log_main_household.txt" 2>&1 &
PIDS+=($!)
wait "${PIDS[@]}"
[ -n "${PACK:-}" ] && kill "$PACKER" && tar czf "$PACK" -C "$OUT_DIR" --exclude=tb --exclude='*.pt' --exclude=graph.json --exclude=curve.png .
tail -n 2 "$OUT_DIR"/log_*.txt
