#!/usr/bin/env bash
# Can an SFT start act by generation? (issue #44: verl-agent's trainer acts by generation, the lm
# study's policy scores candidates.) Waits up to WAIT s for an SFT run to finish (its
# summary.json), then runs `proas direct` on its best checkpoint in score and in generate mode
# side by side, on TASKS tuning tasks of ENV (default household, 128), and writes
# $OUT/start_modes_<mode>.json (SR, env-error rate, ...) with each mode's log beside it.
#
#   RUN=<sft run dir> bash scripts/lm_start_modes.sh [WAIT]
# On the device, after scripts/run_lm_competent.sh start made RUN (PYTHONPATH as it sets it).
set -u
RUN=${RUN:?RUN=<an SFT run dir>}
WAIT=${1:-600}
ENV=${ENV:-household}
TASKS=${TASKS:-128}
OUT=${OUT:-/tmp/out}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
T0=$SECONDS
until [ -f "$RUN/summary.json" ]; do
  [ $((SECONDS - T0)) -ge "$WAIT" ] && { echo "start_modes: $RUN has not finished after $WAIT s"; exit 1; }
  sleep 10
done
echo "start_modes: $RUN finished; direct on $TASKS tuning tasks of $ENV"
for mode in score generate; do
  python3 -m proas direct "env=$ENV" seed=200 policy=lm "policy.lm.mode=$mode" "policy.lm.init_from=$RUN" \
    "policy.lm.device=$DEVICE" "env.fixed_val_set.path=src/proas/data/tuning_val_set/$ENV.jsonl" \
    --tasks "$TASKS" --json > "$OUT/start_modes_$mode.json" 2> "$OUT/start_modes_$mode.log" &
done
wait
for mode in score generate; do echo "$mode: $(cat "$OUT/start_modes_$mode.json")"; done
echo "start_modes: $((SECONDS - T0)) s"
