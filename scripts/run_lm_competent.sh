#!/usr/bin/env bash
# The lm study from a competent from-scratch start (issue #25, items 4 and 5):
# src/proas/experiments/configs/lm_competent.yaml on one GPU machine, detached (setsid: it
# outlives the call that starts it; the machine must stay warm between calls).
#
#   bash scripts/run_lm_competent.sh start LIMIT     # install .whl, copy the code, write each env's
#                                                    # tokenizer and model, launch the grid; LIMIT s
#                                                    # after the start every run still going is stopped
#   bash scripts/run_lm_competent.sh watch SECONDS   # a later call: progress for SECONDS, or until the grid ends
#                                                    # (ALSO_WORK=DIR...: their grids' progress too)
#   bash scripts/run_lm_competent.sh pack            # $OUT/lm_competent.tgz: every run's metrics, config,
#                                                    # summary and log, no weights
#   bash scripts/run_lm_competent.sh preflight       # install, models (which `start` keeps), then one
#                                                    # tiny RL step per env with EXTRA's overrides:
#                                                    # exit 1 with the error if one fails (seconds,
#                                                    # before a grid that would fail in every run)
#
# The grid: SFT with the whole-sequence loss on seeds 0-2 (household 5 epochs, shop 12, and a weak
# 2-epoch start on shop), then on shop GRPO and GRPO+ProAS from each seed's own starts, as each
# start finishes (`needs`). Each env's tokenizer: word-span on household, line-span on shop (what
# results/lm/sft_sweep/ found), 4096 tokens; the model `small`. SEEDS (default "0 1 2"), ROWS
# (default: all) and JOBS (default 21: every run at once) narrow it. STUDY (default lm_competent)
# runs another lm study the same way, e.g. `STUDY=lm_screen SEEDS=200` for the lm study's
# divergence screen (docs/lm-study-protocol.md); ENVS (default: the study's) narrows the envs,
# e.g. `ENVS=shop`. EXTRA (default: none) appends overrides to the study's `common` list in the
# machine's copy, e.g. `EXTRA=policy.lm.sdpa_kernel=efficient`, the attention kernel a profile
# chose; each run's config.yaml records it. STEPS (default: the study's) sets every RL run's step
# budget, e.g. STEPS=150 lets a screen's runs go on to the ranking's length. Carry .whl (scripts/run_device_study.sh says
# what it holds).
set -u
MODE=${1:?start, watch, pack or preflight}
ARG=${2:-0}
WORK=${WORK:-/tmp/lmcomp}
OUT=${OUT:-/tmp/out}
RES=$WORK/res
SEEDS=${SEEDS:-0 1 2}
STUDY=${STUDY:-lm_competent}
JOBS=${JOBS:-21}
export PYTHONPATH=$WORK/site:$WORK/code/pkgs:$WORK/code/src
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 JAX_PLATFORMS=cpu
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
# the commit each run's summary.json names: the runs work in a copy of src/ without .git, so the
# trainer cannot ask git; pass PROAS_COMMIT=<hash> where the device's copy has no .git either
PROAS_COMMIT=${PROAS_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}
if [ -n "$PROAS_COMMIT" ] && [ -n "$(git status --porcelain -- src 2>/dev/null)" ]; then PROAS_COMMIT="$PROAS_COMMIT-dirty"; fi
export PROAS_COMMIT

failures() {  # the last lines of up to three failed runs' logs (the grid log names them)
  grep -o "see [^)]*train.log" "$RES/grid.log" 2>/dev/null | cut -d' ' -f2 | sort -u | head -n 3 \
    | while read -r log; do echo "--- $log"; tail -n 3 "$log"; done
}

progress() {  # per env and row: the epoch (SFT) or step (RL) each seed reached, * = finished, (val SR %);
              # also for each work dir in ALSO_WORK (e.g. lm_screen_device.sh's second grid)
  local w
  for w in "$WORK" ${ALSO_WORK:-}; do
  [ "$w" = "$WORK" ] || echo "($w)"
  python3 - "$w/res" <<'EOP'
import json, pathlib, sys
res = pathlib.Path(sys.argv[1])
for env in ("household", "shop"):
    rows = {}
    for m in sorted(res.glob(f"{env}/*/seed*/metrics.jsonl")):
        recs = []
        for line in m.read_text().splitlines():
            try:
                recs.append(json.loads(line))
            except ValueError:
                pass
        last = recs[-1] if recs else {}
        vals = [r["val/sr"] for r in recs if isinstance(r.get("val/sr"), (int, float))]
        done = "*" if (m.parent / "summary.json").exists() else ""
        val = f"({100 * vals[-1]:.0f}, best {100 * max(vals):.0f})" if vals else ""
        rows.setdefault(m.parent.parent.name, []).append(f"{last.get('step', 0)}{done}{val}")
    print(env, " ".join(f"{r}:{','.join(s)}" for r, s in rows.items()))
EOP
  done
}

setup() {  # install .whl, copy the code (EXTRA into the study's common), each env's tokenizer and model
  # once a machine: preflight and start in one call install the same carried wheels
  [ -f "$WORK/site/.installed" ] || { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$WORK/site" .whl/*.whl && touch "$WORK/site/.installed"; } || [ -n "${LOCAL_TEST:-}" ] || exit 1
  mkdir -p "$WORK/code" "$RES/models" "$RES/tok" && cp -r src .whl/pkgs "$WORK/code/" || exit 1
  if [ -n "${EXTRA:-}" ]; then
    python3 - "$WORK/code/src/proas/experiments/configs/$STUDY.yaml" $EXTRA <<'EOP' || exit 1
import pathlib, sys, yaml
path = pathlib.Path(sys.argv[1])
study = yaml.safe_load(path.read_text())
study["common"] = list(study.get("common") or []) + sys.argv[2:]
path.write_text(yaml.safe_dump(study, sort_keys=False, width=120))
print("common +", " ".join(sys.argv[2:]))
EOP
  fi
  for env in household shop; do  # a second start on the same machine keeps the models it made
    [ -f "$RES/models/$env/config.json" ] && { echo "model: kept $RES/models/$env"; continue; }
    span=line; [ $env = household ] && span=word
    rm -rf "$RES/tok/$env" "$RES/models/$env"
    python3 -m proas lm tokenizer --env $env --vocab 4096 --max-tasks 200 --span $span --out "$RES/tok/$env" \
      && python3 -m proas lm new-model --tokenizer "$RES/tok/$env" --size small --out "$RES/models/$env" || break
  done > "$RES/models.log" 2>&1
  [ -f "$RES/models/household/config.json" ] && [ -f "$RES/models/shop/config.json" ] \
    || { tail -n 5 "$RES/models.log"; exit 1; }
  grep "parameters\|kept" "$RES/models.log"
}

if [ "$MODE" = preflight ]; then
  setup || exit 1
  cd "$WORK/code" || exit 1
  for env in household shop; do
    rm -rf "$WORK/preflight_$env"
    # shellcheck disable=SC2086
    if ! python3 -m proas train env=$env policy=lm policy.lm.mode=score policy.lm.score_norm=sum \
        "policy.lm.model_path=$RES/models/$env" env.tasks_per_step=2 env.group_size=2 env.max_steps=6 \
        env.fixed_val_set.size=2 train.steps=1 train.progress=false ${EXTRA:-} \
        --run-dir "$WORK/preflight_$env" > "$WORK/preflight_$env.log" 2>&1; then
      echo "preflight: $env failed:"; tail -n 3 "$WORK/preflight_$env.log"; exit 1
    fi
    echo "preflight: $env ok ($(grep -o 'step 1/1.*' "$WORK/preflight_$env.log" | head -n 1))"
  done
  exit 0
fi

if [ "$MODE" = start ]; then
  setup || exit 1
  rows=()
  [ -n "${ROWS:-}" ] && rows=(--rows $ROWS)
  [ -n "${ENVS:-}" ] && rows+=(--envs $ENVS)
  [ -n "${STEPS:-}" ] && rows+=(--steps "$STEPS")
  cd "$WORK/code" || exit 1
  setsid nohup python3 -m proas experiment run "src/proas/experiments/configs/$STUDY.yaml" --seeds $SEEDS \
    "${rows[@]}" --jobs "$JOBS" --time-limit "$ARG" --out "$RES" > "$RES/grid.log" 2>&1 < /dev/null &
  sleep 20
  cat "$RES/grid.log"; failures
elif [ "$MODE" = watch ]; then
  [ -d "$RES" ] || { echo "no study on this machine (a fresh one): nothing to watch"; exit 3; }
  T0=$SECONDS
  while [ $((SECONDS - T0)) -lt "$ARG" ] && pgrep -f "[p]roas experiment run" > /dev/null; do
    sleep 20
    [ $(( (SECONDS - T0) % 120 )) -lt 20 ] && { echo "--- $((SECONDS - T0)) s"; progress; }
  done
  echo "=== after $((SECONDS - T0)) s"; progress; tail -n 5 "$RES/grid.log"; failures
elif [ "$MODE" = pack ]; then
  [ -d "$RES" ] || { echo "no study on this machine (a fresh one): nothing to pack"; exit 3; }
  mkdir -p "$OUT"
  (cd "$RES" && find . \( -name metrics.jsonl -o -name config.yaml -o -name summary.json -o -name train.log \
      -o -name grid.log -o -name models.log -o -name start_reads.jsonl -o -name start_reads.log \) -not -path '*/best/*' -not -path '*/checkpoints/*' \
      | tar czf "$OUT/$STUDY.tgz" -T -) && echo "packed $OUT/$STUDY.tgz"
  progress; tail -n 8 "$RES/grid.log"; failures
else
  echo "unknown mode $MODE (start, watch, pack, preflight)" >&2; exit 2
fi
