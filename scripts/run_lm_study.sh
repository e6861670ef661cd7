#!/usr/bin/env bash
# The lm study behind results/lm/ (README.md there), on one GPU machine.
#
#   bash scripts/run_lm_study.sh start SECONDS [RL_END]  # install, GPU checks, launch, watch, pack
#   bash scripts/run_lm_study.sh watch SECONDS           # a later call on the same (warm) machine
#   bash scripts/run_lm_study.sh finish SECONDS          # watch, then stop the runs, pack
#   WORK=DIR RES=DIR OUT=DIR bash scripts/run_lm_study.sh ...   # other places than the defaults
#
# As scripts/run_device_study.sh: the pipeline runs detached (setsid) into $RES (default
# $WORK/lmres; WORK, where the wheels are installed and the code is copied, defaults to /tmp), each call
# watches it for SECONDS and packs the small files of every run into $OUT/lm_study.tgz. RL runs
# stop by themselves RL_END seconds (default 1500) after `start` began (`--time-limit`);
# `finish` stops whatever still runs before packing.
#   0. GPU checks first, the GPU to themselves: the CUDA tests of the static decoder and of
#      score mode's packed passes, and benchmarks/lm_score.py at the study's shapes (fp32) and at
#      its defaults (bf16), into gpu_checks.txt. When those tests pass and packed is faster there
#      at loss+backward, the study runs score_impl=packed (faster at acting too) or auto (packed
#      for the loss only); expand otherwise (score_impl.txt says which; the run recorded in
#      results/lm/ chose expand, when the choice was packed or expand).
# Then per env, both envs side by side:
#   1. `proas lm tokenizer --vocab 4096 --max-tasks 200` and `proas lm new-model --size small`
#      (a 5M-parameter Qwen2 model with random weights) into $RES/models/ENV;
#   2. the study's SFT rows on seed 0, side by side (`proas experiment run lm_warm`);
#   3. the SFT run whose best validation SR is nearest 15% (within 5-30% where one is) linked as
#      $RES/lm_start/ENV (a link, left out of the pack); the choice is written to
#      lm_start/choice_ENV.json;
#   4. the RL rows from it: $RL_ROWS (default: GRPO and GRPO+ProAS at lr 1e-3, the second try's)
#      on $RL_SEEDS (default "0 1 2"), and on shop $SHOP_SEED0_ROWS (default: the lr 3e-4 rows)
#      on seed 0;
#   5. each env's start is exported (`proas lm export`) and packed as $OUT/start_ENV.tgz.partNN
#      (under 16 MiB each): unpack it under .whl/lm_start/ENV here and carry .whl, and a later
#      session skips steps 1-3 for that env (RL from the same start).
# ENVS (default "household shop") picks the envs, SFT_ROWS (default: the three) the SFT
# candidates, RL_ROWS_household / RL_ROWS_shop (default: $RL_ROWS) one env's RL rows. The
# control rows `*_rep16` read their schedules from $RES/schedules, which `start` writes with
# scripts/repeat_schedule.py (shop, seeds 0-2: the same files each time, hash-checked). CHECKS=quick runs only the packed-scoring CUDA
# tests instead of step 0's checks and then uses score_impl=auto (the default, which the full
# checks' figures chose). The commands of each try are in results/lm/README.md.
# Needs .whl/ as scripts/run_device_study.sh does: carry it. What of the pack results/lm/ keeps is
# results/README.md's rule ("What results/ holds").
set -u
MODE=${1:?start, watch or finish}
BUDGET=${2:-0}
RL_END=${3:-1500}
export WORK=${WORK:-/tmp}
export RES=${RES:-$WORK/lmres}
export RL_ROWS=${RL_ROWS:-grpo_lm grpo_proas_lm}
export SHOP_SEED0_ROWS=${SHOP_SEED0_ROWS-grpo_lm_lr3e-4 grpo_proas_lm_lr3e-4}
ENVS=${ENVS:-household shop}
export SFT_ROWS=${SFT_ROWS:-sft_t400_e10 sft_t800_e8 sft_t1600_e5}
export RL_SEEDS=${RL_SEEDS:-0 1 2}
export RL_ROWS_household=${RL_ROWS_household:-$RL_ROWS} RL_ROWS_shop=${RL_ROWS_shop:-$RL_ROWS}
CHECKS=${CHECKS:-full}
OUT=${OUT:-/tmp/out}
T0=$SECONDS
export PYTHONPATH=$WORK/site:$WORK/code/pkgs:$WORK/code/src
export JAX_PLATFORMS=cpu PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True

if [ "$MODE" = start ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$WORK/site" .whl/*.whl || [ -n "${LOCAL_TEST:-}" ] || exit 1
  mkdir -p "$WORK/code" "$RES" && cp -r src .whl/pkgs "$WORK/code/" || exit 1
  [ -d .whl/lm_start ] && cp -r .whl/lm_start "$WORK/code/carried_start"
  for s in 0 1 2; do
    python3 scripts/repeat_schedule.py --env shop --seed $s --out "$RES/schedules" || exit 1
  done
  echo $(( $(date +%s) + RL_END )) > "$RES/rl_deadline"
  echo "$ENVS" > "$RES/envs"
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"
  if [ "$CHECKS" = quick ]; then
    { python3 -m pytest -q -p no:cacheprovider tests/test_policies_lm.py -k cuda 2>&1 | tail -n 3
      echo "tests rc ${PIPESTATUS[0]}"; } > "$RES/gpu_checks.txt" 2>&1
    { grep -q "tests rc 0$" "$RES/gpu_checks.txt" && echo auto || echo expand; } > "$RES/score_impl.txt"
  else
  {
    python3 -m pytest -q -p no:cacheprovider tests/test_lm_decode.py 2>&1 | tail -n 3; r1=${PIPESTATUS[0]}
    python3 -m pytest -q -p no:cacheprovider tests/test_policies_lm.py -k cuda 2>&1 | tail -n 3; r2=${PIPESTATUS[0]}
    echo "tests rc $((r1 + r2))"
    python3 benchmarks/lm_score.py --device cuda --dtype fp32 --decisions 64 --prompt 400 --candidates 30 \
      --cand-tokens 12 --repeats 5
    python3 benchmarks/lm_score.py --device cuda --repeats 5
  } > "$RES/gpu_checks.txt" 2>&1
  cat "$RES/gpu_checks.txt"
  python3 - "$RES" <<'EOP' > "$RES/score_impl.txt"
import re, sys
text = open(sys.argv[1] + "/gpu_checks.txt").read()
ok = re.search(r"tests rc 0\b", text) is not None
ups = [float(x) for x in re.findall(r"packed speed-up, [a-z+]+: ([0-9.]+)x", text)[:2]]  # the fp32 run's
act, loss = ups if len(ups) == 2 else (0.0, 0.0)
print("expand" if not ok or loss <= 1.0 else "packed" if act > 1.0 else "auto")
EOP
  fi
  IMPL=$(cat "$RES/score_impl.txt"); echo "score_impl: $IMPL"
  sed "s/policy.lm.score_impl=expand/policy.lm.score_impl=$IMPL/" "${LM_STUDY:-src/proas/experiments/configs/lm_warm.yaml}" \
    > "$RES/lm_warm.yaml"
  cat > "$WORK/lmstudy.sh" <<'EOS'
env=$1
cd "$WORK/code"
left() { local s=$(( $(cat "$RES/rl_deadline") - $(date +%s) )); echo $(( s > 30 ? s : 30 )); }
mkdir -p "$RES/lm_start"
if [ -d "$WORK/code/carried_start/$env" ]; then  # a start carried from an earlier session
  ln -sfn "$WORK/code/carried_start/$env" "$RES/lm_start/$env"
  cp "$WORK/code/carried_start/$env/choice_$env.json" "$RES/lm_start/" 2>/dev/null
  echo "carried start: $(cat "$RES/lm_start/choice_$env.json" 2>/dev/null)" > "$RES/log_choice_$env.txt"
else
{ python3 -m proas lm tokenizer --env $env --vocab 4096 --max-tasks 200 --out "$RES/tok/$env" \
    && python3 -m proas lm new-model --tokenizer "$RES/tok/$env" --size small --out "$RES/models/$env"
} > "$RES/log_models_$env.txt" 2>&1 || exit 1
python3 -m proas experiment run "$RES/lm_warm.yaml" --envs $env --rows $SFT_ROWS \
  --seeds 0 --jobs 3 --out "$RES" > "$RES/log_sft_$env.txt" 2>&1
python3 - "$RES" $env <<'EOP' > "$RES/log_choice_$env.txt" 2>&1 || exit 1
import json, os, pathlib, sys
res, env = pathlib.Path(sys.argv[1]), sys.argv[2]
(res / "lm_start").mkdir(exist_ok=True)
runs = {s.parent.parent.name: json.loads(s.read_text())["best_val_sr"]
        for s in sorted(res.glob(f"{env}/sft_*/seed0/summary.json"))}
if not runs:
    sys.exit(f"{env}: no finished SFT run")
inside = {k: v for k, v in runs.items() if 0.05 <= v <= 0.30}  # summary.json holds fractions
pick = min(inside or runs, key=lambda k: (abs(runs[k] - 0.15), k))
link = res / "lm_start" / env
if link.is_symlink() or link.exists():
    link.unlink()
os.symlink(res / env / pick / "seed0", link)
choice = {"chosen": pick, "best_val_sr": runs, "in_band": bool(inside)}
print(json.dumps(choice, indent=1))
(res / "lm_start" / f"choice_{env}.json").write_text(json.dumps(choice, indent=1) + "\n")
EOP
{ python3 -m proas lm export "$RES/lm_start/$env" "$RES/export/$env" \
    && cp "$RES/lm_start/choice_$env.json" "$RES/export/$env/" \
    && tar cf - -C "$RES/export" $env | gzip -1 | split -b 15m -d - "$RES/export/start_$env.tgz.part"
} >> "$RES/log_choice_$env.txt" 2>&1
fi
rows=RL_ROWS_$env
python3 -m proas experiment run "$RES/lm_warm.yaml" --envs $env --rows ${!rows} --seeds $RL_SEEDS --jobs 12 \
  --time-limit $(left) --out "$RES" > "$RES/log_rl_$env.txt" 2>&1 &
if [ $env = shop ] && [ -n "$SHOP_SEED0_ROWS" ]; then
  python3 -m proas experiment run "$RES/lm_warm.yaml" --envs $env --rows $SHOP_SEED0_ROWS \
    --seeds 0 --jobs 4 --time-limit $(left) --out "$RES" > "$RES/log_rl_${env}_lr.txt" 2>&1 &
fi
wait
echo done > "$RES/DONE_$env"
EOS
  for env in $ENVS; do
    setsid nohup bash "$WORK/lmstudy.sh" $env > "$WORK/lmstudy_$env.log" 2>&1 < /dev/null &
  done
  sleep 5
elif [ ! -d "$RES" ]; then
  echo "no study on this machine (a fresh one): nothing to watch"; exit 3
else
  ENVS=$(cat "$RES/envs")  # the envs the start launched
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
            f"{last.get('step', 0)}{'*' if done else ''}" + (f"({100 * val:.0f})" if isinstance(val, (int, float)) else ""))
    print(env, " ".join(f"{r}:{','.join(s)}" for r, s in rows.items()))
EOP
}
all_done() { local e; for e in $ENVS; do [ -e "$RES/DONE_$e" ] || return 1; done; }
while [ $((SECONDS - T0)) -lt "$BUDGET" ] && ! all_done; do
  sleep 20
  [ $(( (SECONDS - T0) % 120 )) -lt 20 ] && { echo "--- $((SECONDS - T0)) s, load $(cut -d' ' -f1 /proc/loadavg)"; progress;
    nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader 2>/dev/null; }
done
if [ "$MODE" = finish ]; then  # SIGTERM: each run keeps the steps it logged
  pkill -TERM -f '[p]roas experiment run' ; pkill -TERM -f '[p]roas train' ; sleep 8
fi
mkdir -p "$OUT"
tar czf "$OUT/lm_study.tgz" -C "$RES" --exclude=tb --exclude='*.pt' --exclude='*.safetensors' --exclude=graph.json \
  --exclude=rollouts --exclude=checkpoints --exclude=best --exclude=models --exclude=tok --exclude=export \
  --exclude=./lm_start/household --exclude=./lm_start/shop . 2>/dev/null  # the start links: results/ holds no links
cp "$RES"/export/start_*.tgz.part* "$OUT/" 2>/dev/null; ls -la "$OUT"
echo "=== after $((SECONDS - T0)) s"; progress; cat "$RES"/log_choice_*.txt 2>/dev/null; tail -n 3 "$RES"/log_*.txt
tail -n 5 "$WORK"/lmstudy_*.log
