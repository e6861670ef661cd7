#!/usr/bin/env bash
# The lm study behind results/lm/ (README.md there), on one GPU machine.
#
#   bash results/lm/run_lm_study.sh install         # install the carried wheels, copy the code only
#   bash results/lm/run_lm_study.sh start SECONDS   # install (unless done), launch, watch, pack
#   bash results/lm/run_lm_study.sh watch SECONDS   # a later call on the same (warm) machine
#
# As results/run_device_study.sh: the pipeline runs detached (setsid) into /tmp/lmres, each call
# watches it for SECONDS and packs the small files of every run into $OUT/lm_study.tgz.
# The pipeline, for household and shop at once:
#   1. `proas lm tokenizer --vocab 4096 --max-tasks 200` and `proas lm new-model --size small`
#      (a 5M-parameter Qwen2 model with random weights) into /tmp/lmres/models/ENV;
#   2. the study's hidden SFT rows on seed 0, side by side (`proas experiment run lm_warm`);
#   3. per env, the SFT run whose best validation SR is nearest 15% (within 5-30% where one is)
#      linked as /tmp/lmres/lm_start/ENV; the choice is written to lm_start/choice.json;
#   4. the RL rows (GRPO, GRPO+ProAS, seeds 0-2, both envs: 12 runs side by side on the GPU).
# Needs .whl/ as results/run_device_study.sh does: carry it.
set -u
MODE=${1:?start or watch}
BUDGET=${2:-0}
export RES=/tmp/lmres
OUT=${OUT:-/tmp/out}
T0=$SECONDS
export PYTHONPATH=/tmp/site:/tmp/code/pkgs:/tmp/code/src
export JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

if [ "$MODE" = install ] || { [ "$MODE" = start ] && [ ! -d /tmp/code/src ]; }; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || [ -n "${LOCAL_TEST:-}" ] || exit 1
  mkdir -p /tmp/code "$RES" && cp -r src .whl/pkgs /tmp/code/ || exit 1
  [ "$MODE" = install ] && exit 0
fi
if [ "$MODE" = start ]; then
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
  cat > /tmp/lmstudy.sh <<'EOS'
cd /tmp/code
ENVS="household shop"
for env in $ENVS; do
  [ -e "$RES/models/$env/config.json" ] && continue
  python3 -m proas lm tokenizer --env $env --vocab 4096 --max-tasks 200 --out "$RES/tok/$env" \
    && python3 -m proas lm new-model --tokenizer "$RES/tok/$env" --size small --out "$RES/models/$env" || exit 1
done > "$RES/log_models.txt" 2>&1
python3 -m proas experiment run lm_warm --rows sft_t100_e8 sft_t100_e16 sft_t200_e6 sft_t200_e12 --seeds 0 \
  --jobs 8 --out "$RES" > "$RES/log_sft.txt" 2>&1
python3 - "$RES" <<'EOP' > "$RES/log_choice.txt" 2>&1 || exit 1
import json, os, pathlib, sys
res = pathlib.Path(sys.argv[1]); (res / "lm_start").mkdir(exist_ok=True); choice = {}
for env in ("household", "shop"):
    runs = {}
    for s in sorted(res.glob(f"{env}/sft_*/seed0/summary.json")):
        runs[s.parent.parent.name] = json.loads(s.read_text())["best_val_sr"]
    if not runs:
        sys.exit(f"{env}: no finished SFT run")
    inside = {k: v for k, v in runs.items() if 0.05 <= v <= 0.30}  # summary.json holds fractions
    pick = min(inside or runs, key=lambda k: (abs(runs[k] - 0.15), k))
    link = res / "lm_start" / env
    if link.is_symlink() or link.exists():
        link.unlink()
    os.symlink(res / env / pick / "seed0", link)
    choice[env] = {"chosen": pick, "best_val_sr": runs, "in_band": bool(inside)}
print(json.dumps(choice, indent=1))
(res / "lm_start" / "choice.json").write_text(json.dumps(choice, indent=1) + "\n")
EOP
python3 -m proas experiment run lm_warm --rows grpo_lm grpo_proas_lm --jobs 12 --out "$RES" > "$RES/log_rl.txt" 2>&1
echo done > "$RES/ALL_DONE"
EOS
  setsid nohup bash /tmp/lmstudy.sh > /tmp/lmstudy.log 2>&1 < /dev/null &
  sleep 5
elif [ ! -d "$RES" ]; then
  echo "no study on this machine (a fresh one): nothing to watch"; exit 3
fi

progress() {  # per env and row: the step (RL) or epoch (SFT) each run reached (* = finished)
  python3 - "$RES" <<'EOP'
import json, pathlib, sys
res = pathlib.Path(sys.argv[1])
for env in ("household", "shop"):
    rows = {}
    for m in sorted(res.glob(f"{env}/*/seed*/metrics.jsonl")):
        lines = m.read_text().splitlines()
        try:
            last = json.loads(lines[-1]) if lines else {}
        except ValueError:
            last = {}
        done = (m.parent / "summary.json").exists()
        val = last.get("val/sr")
        rows.setdefault(m.parent.parent.name, []).append(
            f"{last.get('step', 0)}{'*' if done else ''}" + (f"({val:.0f})" if isinstance(val, (int, float)) else ""))
    print(env, " ".join(f"{r}:{','.join(s)}" for r, s in rows.items()))
EOP
}
while [ $((SECONDS - T0)) -lt "$BUDGET" ] && [ ! -e "$RES/ALL_DONE" ]; do
  sleep 20
  [ $(( (SECONDS - T0) % 120 )) -lt 20 ] && { echo "--- $((SECONDS - T0)) s, load $(cut -d' ' -f1 /proc/loadavg)"; progress;
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null; }
done
mkdir -p "$OUT"
tar czf "$OUT/lm_study.tgz" -C "$RES" --exclude=tb --exclude='*.pt' --exclude='*.safetensors' --exclude=graph.json \
  --exclude=rollouts --exclude=checkpoints --exclude=best --exclude=models --exclude=tok . 2>/dev/null; ls -la "$OUT"
echo "=== after $((SECONDS - T0)) s"; progress; cat "$RES/log_choice.txt" 2>/dev/null; tail -n 3 "$RES"/log_*.txt
tail -n 5 /tmp/lmstudy.log
