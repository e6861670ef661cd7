#!/usr/bin/env bash
# One device call for the lm study's shop divergence screen (issue #43) and the cuDNN NaN lead
# (issue #44), written for a session that may get only this one call:
#   1. the screen (STUDY=lm_screen SEEDS=200 scripts/run_lm_competent.sh start; ROWS, default
#      the weak start's rows, the protocol's primary question; ENVS, default both: household's
#      screen runs beside shop's, as the protocol's amendment allows), detached, with the lm
#      policy's default sdpa kernel (efficient);
#   2. meanwhile scripts/lm_kernel_check_device.sh's attn part on the screen's shop model
#      (sdpa's gradient at 512, 640 and 704 left-padded tokens per kernel) -> $OUT/attn_check.txt
#   3. watch the screen; once it has ended, with time left, that script's profile part with the
#      GPU to itself (seconds per RL step per attention choice)          -> $OUT/step_profile.txt
#   4. DEADLINE s after the start: pack the screen's runs ($OUT/lm_screen.tgz, no weights) and
#      read them by the protocol's rules ($OUT/screen.md, scripts/lm_screen_verdict.py). A screen
#      still running goes on; a later call can `watch` and `pack` it
#      (STUDY=lm_screen bash scripts/run_lm_competent.sh watch|pack).
# Carry .whl. ENVS (default both) narrows the envs, e.g. ENVS=household once shop's screen is done;
# STEPS (default the study's 40) lets the runs go on, e.g. to the ranking's 150; CHECKS (default
# "attn profile") names the parts of scripts/lm_kernel_check_device.sh to run, "" for none, and
# "passes" adds benchmarks/lm_passes.py on the GPU before the screen starts (0b).
# ROWS2 (with ENVS2, STEPS2) starts a second grid beside the first, e.g. household's 40-step
# screen beside shop's 150-step runs.
# START_READS (e.g. "1 2 3 4") validates each SFT start again at those sampling seeds
# (scripts/lm_start_reads.py), for the bar's reference.
#
#   bash scripts/lm_screen_device.sh [DEADLINE]
set -u
OUT=${OUT:-/tmp/out}
DEADLINE=${1:-560}
WORK=${WORK:-/tmp/lmcomp}
RES=$WORK/res
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/step_profile.txt"
echo "commit: ${PROAS_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown: pass PROAS_COMMIT)}"

# 0. pre-flight (run_lm_competent.sh preflight): the models, and one tiny RL step per env under
#    the kernel the runs will use. If it fails (as `efficient` alone once did in every run), the
#    screen runs under policy.lm.sdpa_kernel=math instead, and says so.
EXTRA=${EXTRA:-} STUDY=lm_screen WORK=$WORK bash scripts/run_lm_competent.sh preflight > "$OUT/preflight.txt" 2>&1
pf=$?
grep -v "not a supported wheel" "$OUT/preflight.txt" | tail -n 6
if [ $pf -ne 0 ]; then
  echo "preflight failed: the screen runs under policy.lm.sdpa_kernel=math" | tee -a "$OUT/preflight.txt"
  EXTRA="${EXTRA:-} policy.lm.sdpa_kernel=math"
fi
export EXTRA
CHECKS=${CHECKS-attn profile}

# 0b. CHECKS with "passes": benchmarks/lm_passes.py on the GPU while it is free (score mode's
#     passes in width order against the order they came, household and shop, the study's model
#     size; about a minute)                                              -> $OUT/lm_passes.txt
#     and again with a quarter of the default pass budget (fewer padded tokens, more passes)
case " $CHECKS " in *" passes "*)
  for budget in 262144 65536; do
    PYTHONPATH=$WORK/site:$PWD/.whl/pkgs:$PWD/src OMP_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false timeout 200 \
      python3 benchmarks/lm_passes.py --device cuda --size small --time-decisions 256 --repeats 3 \
      policy.lm.score_tokens_per_pass=$budget 2>&1 | grep -v "Loading weights" >> "$OUT/lm_passes.txt"
  done
  tail -n 24 "$OUT/lm_passes.txt" ;;
esac

# 1. the screen, detached
WEAK="sft_weak_shop sft_weak_household $(for lr in 1e-5 3e-5 1e-4 3e-4; do printf 'grpo_weak_lr%s_kl0 grpo_weak_lr%s_kl0.01 ' $lr $lr; done)"
ROWS=${ROWS:-$WEAK} STEPS=${STEPS:-} STUDY=lm_screen SEEDS=200 ENVS=${ENVS:-"shop household"} WORK=$WORK bash scripts/run_lm_competent.sh start 2400 2>&1 | tail -n 5
# 1b. optionally a second grid beside it, with its own rows, envs and step budget (a study's step
#     budget is one for all its runs), in its own work dir: ROWS2, ENVS2, STEPS2 (WORK2, default
#     $WORK-2); `watch` below waits for both, and step 4 packs and reads both
if [ -n "${ROWS2:-}" ]; then
  ROWS=$ROWS2 STEPS=${STEPS2:-} STUDY=lm_screen SEEDS=200 ENVS=${ENVS2:-"shop household"} WORK=${WORK2:-$WORK-2} \
    bash scripts/run_lm_competent.sh start 2400 2>&1 | tail -n 5
fi
export PYTHONPATH=$WORK/site:$PWD/.whl/pkgs:$PWD/src
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 JAX_PLATFORMS=cpu
# 1c. START_READS (sampling seeds, e.g. "1 2 3 4"): each grid's SFT starts validated again at
#     these seeds as soon as they exist (scripts/lm_start_reads.py, detached), the bar's reference
#     by the protocol's 2026-12-08 amendment; pack carries RES/start_reads.jsonl
if [ -n "${START_READS:-}" ]; then
  for w in "$WORK" ${ROWS2:+"${WORK2:-$WORK-2}"}; do
    setsid nohup python3 scripts/lm_start_reads.py "$w/res" --seeds $START_READS --wait 1500 \
      > "$w/res/start_reads.log" 2>&1 < /dev/null &
  done
fi
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)" | tee -a "$OUT/step_profile.txt"
echo "screen started: $SECONDS s"

# 2. the cuDNN NaN lead (scripts/lm_kernel_check_device.sh's attn part, on the screen's model)
case " $CHECKS " in *" attn "*) MODELS=$RES/models PARTS=attn OUT=$OUT bash scripts/lm_kernel_check_device.sh $((DEADLINE - SECONDS)) ;; esac

# 3. watch; the step profile once the GPU is free
left=$((DEADLINE - 45 - SECONDS))
[ $left -gt 20 ] && ALSO_WORK=${ROWS2:+${WORK2:-$WORK-2}} STUDY=lm_screen WORK=$WORK bash scripts/run_lm_competent.sh watch $left
if [[ " $CHECKS " == *" profile "* ]] && ! pgrep -f "[p]roas experiment run" > /dev/null \
    && [ $((DEADLINE - SECONDS)) -gt 150 ]; then
  MODELS=$RES/models PARTS=profile OUT=$OUT bash scripts/lm_kernel_check_device.sh $((DEADLINE - 45 - SECONDS))
fi

# 4. what the screen has so far
STUDY=lm_screen WORK=$WORK OUT=$OUT bash scripts/run_lm_competent.sh pack > /dev/null 2>&1
python3 scripts/lm_screen_verdict.py "$RES" --csv "$OUT/screen.csv" --steps "$OUT/steps.csv" > "$OUT/screen.md" 2>&1
cat "$OUT/screen.md"
if [ -n "${ROWS2:-}" ]; then
  mkdir -p "$OUT/second"
  STUDY=lm_screen WORK=${WORK2:-$WORK-2} OUT=$OUT/second bash scripts/run_lm_competent.sh pack > /dev/null 2>&1
  python3 scripts/lm_screen_verdict.py "${WORK2:-$WORK-2}/res" --csv "$OUT/second/screen.csv" \
    --steps "$OUT/second/steps.csv" > "$OUT/second/screen.md" 2>&1
  cat "$OUT/second/screen.md"
fi
exit 0
