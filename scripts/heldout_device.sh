#!/usr/bin/env bash
# The held-out study's grids on the 16-core device machine (docs/study-protocol.md).
#
#   bash scripts/heldout_device.sh start STUDY COMMIT SECONDS   # install, launch, watch, pack
#   bash scripts/heldout_device.sh watch STUDY COMMIT SECONDS   # a later call on the same warm machine
#   SEED_FROM=DIR bash scripts/heldout_device.sh start ...   # copy finished runs there first: skipped
#   GRID=scripts/heldout_grids/F.sh bash scripts/heldout_device.sh start ...   # run that file's commands
#   SRC=.frozen/src bash scripts/heldout_device.sh start ...   # run that source instead of src/
#
# STUDY is a shipped study (heldout_tune, heldout_tune_sft, ...); COMMIT the commit of the
# checkout that was sent (the copy there has no .git), recorded in each run's summary.json as
# PROAS_COMMIT. A command on the device lasts at most 10 minutes, but a process that starts its
# own session (setsid) lives until the machine is given back: `start` launches the grid that way
# into /tmp/res/STUDY, one CPU thread a run, household and shop as two runners side by side (so
# that neither env's arms wait for the other's) or the commands of a GRID file (shell lines, each
# a `proas experiment run ... --out $RES &`, for a part of a grid; $REPO is the checkout sent, for
# study configs kept under results/), and each call watches it for SECONDS, then packs
# the small files of every run (metrics.jsonl, summary.json, config.yaml, train.log, the study
# config) into $OUT/STUDY.tgz, so what came back so far is kept if the machine goes away. The
# runner resumes unfinished runs, so the same study can be continued on a later machine from
# those files plus checkpoints (not packed: a run cut short there is rerun).
#
# Needs .whl/ carried: wheels of omegaconf, antlr4-python3-runtime, rapidfuzz, bm25s, PyStemmer
# for the device's Python, and a copy of the installed `alfworld` package under .whl/pkgs.
set -u
MODE=${1:?start or watch}
STUDY=${2:?study name}
export PROAS_COMMIT=${3:?commit of the checkout}
BUDGET=${4:?seconds to watch}
JOBS_HOUSEHOLD=${JOBS_HOUSEHOLD:-9}
JOBS_SHOP=${JOBS_SHOP:-7}
RES=/tmp/res/$STUDY
OUT=${OUT:-/tmp/out}
T0=$SECONDS
export PYTHONPATH=/tmp/site:/tmp/code/pkgs:/tmp/code/src
export CUDA_VISIBLE_DEVICES= JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1   # bm25s may import jax: keep it off the GPU

if [ "$MODE" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || [ -n "${LOCAL_TEST:-}" ] || exit 1
  # SRC: the package source to run (default the checkout's src; a frozen copy of an earlier
  # commit, e.g. `git archive COMMIT src | tar x -C .frozen` carried as .frozen, keeps a grid on one code)
  mkdir -p /tmp/code "$RES" && rm -rf /tmp/code/src /tmp/code/scripts && cp -r "${SRC:-src}" /tmp/code/src \
    && cp -r scripts .whl/pkgs /tmp/code/ || exit 1
  # runs finished in an earlier session (their metrics.jsonl, config.yaml, summary.json, e.g.
  # results/heldout/tuning/runs): the runner skips them
  if [ -n "${SEED_FROM:-}" ]; then cp -rn "$SEED_FROM"/. "$RES"/ || exit 1; fi
  python3 -c "import proas.envs.household.generator as g, proas.envs.shop, omegaconf, bm25s; g._alfworld()" \
    || { echo "imports failed"; exit 1; }
  echo "cores: $(nproc); commit $PROAS_COMMIT"
  if [ -n "${GRID:-}" ]; then   # a grid file of its own: its commands, with RES set, instead of the two runners
    { echo "REPO='$PWD'; cd /tmp/code; RES=$RES"; cat "$GRID"; echo "wait; echo done > $RES/ALL_DONE"; } \
      > "/tmp/grid_$STUDY.sh" || exit 1
    cp "$GRID" "$RES/grid.sh"
  else
  cat > "/tmp/grid_$STUDY.sh" <<EOF
cd /tmp/code
python3 -m proas experiment run $STUDY --envs household --jobs $JOBS_HOUSEHOLD ${STEPS:+--steps $STEPS} --out $RES > $RES/log_household.txt 2>&1 &
python3 -m proas experiment run $STUDY --envs shop --jobs $JOBS_SHOP ${STEPS:+--steps $STEPS} --out $RES > $RES/log_shop.txt 2>&1 &
wait
echo done > $RES/ALL_DONE
EOF
  fi
  setsid nohup bash "/tmp/grid_$STUDY.sh" > "/tmp/grid_$STUDY.log" 2>&1 < /dev/null &
  sleep 5
elif [ ! -d "$RES" ]; then
  echo "no $STUDY on this machine (a fresh one): nothing to watch"; exit 3
fi

progress() {  # runs finished and started per env, and the slowest run's step
  python3 - "$RES" <<'EOF'
import json, pathlib, sys
res = pathlib.Path(sys.argv[1])
for env in ("household", "shop"):
    runs = sorted(res.glob(f"{env}/*/seed*/metrics.jsonl"))
    done = sum((m.parent / "summary.json").exists() for m in runs)
    steps = []
    for m in runs:
        if (m.parent / "summary.json").exists():
            continue
        lines = m.read_text().splitlines()
        try:
            steps.append(json.loads(lines[-1])["step"] if lines else 0)
        except ValueError:
            pass
    print(f"{env}: {done} finished, {len(runs) - done} running (steps {sorted(steps)})")
EOF
}
while [ $((SECONDS - T0)) -lt "$BUDGET" ] && [ ! -e "$RES/ALL_DONE" ]; do
  sleep 20
  [ $(( (SECONDS - T0) % 120 )) -lt 20 ] && { echo "--- $((SECONDS - T0)) s, load $(cut -d' ' -f1 /proc/loadavg)"; progress; }
done
mkdir -p "$OUT"
tar czf "$OUT/$STUDY.tgz" -C "$RES" --exclude=tb --exclude='*.pt' --exclude=graph.json --exclude=curve.png \
  --exclude=rollouts --exclude=checkpoints --exclude=best . && ls -la "$OUT"
echo "=== after $((SECONDS - T0)) s"; progress; tail -n 2 "$RES"/log_*.txt
