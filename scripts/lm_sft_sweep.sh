#!/usr/bin/env bash
# From-scratch SFT of the lm policy (score mode): which tokenizer, size, score norm and schedule
# make it competent (issue #25, item 4). One GPU machine; the rows run side by side, detached.
#
#   bash scripts/lm_sft_sweep.sh start LIMIT   # install .whl, write tokenizers/models, launch every row
#   bash scripts/lm_sft_sweep.sh pack          # $OUT/lm_sft_sweep.tgz: each run's metrics and log, no weights
#   python scripts/analyse_sft_sweep.py RUNS --csv RUNS/rows.csv   # here, on the unpacked runs/: the table
#   ROWS="hh_word_small_mean ..." ... start    # a subset of the rows below
#
# Every row is `proas sft` on its seed's training schedule (the tasks the main study's SFT row
# imitates; seed 0 unless the row names one), validated after each epoch on the shipped 128-task
# validation set at temperature 0.4 (the lm's defaults: fp32 weights, bf16 autocast, AdamW,
# gradients clipped at 1). LIMIT
# seconds after start every row still running is stopped (`timeout`): the epochs it finished
# are in its metrics.jsonl. Carry .whl (scripts/run_device_study.sh says what it holds).
set -u
MODE=${1:?start or pack}
LIMIT=${2:-900}
WORK=${WORK:-/tmp/sftsweep}
OUT=${OUT:-/tmp/out}
export PYTHONPATH=$WORK/site:$WORK/code/pkgs:$WORK/code/src
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 JAX_PLATFORMS=cpu

# id | env | tokenizer span | model size | score norm | peak lr | epochs | batch [| seed, default 0
#   [| sequence loss weight, default 0: `proas sft --sequence-loss`]]
# (rounds 1 and 2 ran on 2026-12-03, results/lm/sft_sweep/; round 3, the *_e<N> rows: the best
# settings of rounds 1-2, whose validation SR was still rising, with longer schedules, each with
# and without the whole-sequence loss (*_seq1); the *_seq1_s1/_s2 rows are the next round: the two
# rows that passed the bar on seed 0, on seeds 1 and 2)
ALL_ROWS="
hh_line_small_sum|household|line|small|sum|1e-3|4|32
hh_word_small_sum|household|word|small|sum|1e-3|4|32
hh_word_small_mean|household|word|small|mean|1e-3|4|32
hh_word_small_mean_lr3e-3|household|word|small|mean|3e-3|4|32
hh_word_base_mean|household|word|base|mean|5e-4|3|32
sh_line_small_sum|shop|line|small|sum|1e-3|4|32
sh_word_small_sum|shop|word|small|sum|1e-3|4|32
sh_word_small_mean|shop|word|small|mean|1e-3|4|32
sh_word_small_mean_lr3e-3|shop|word|small|mean|3e-3|4|32
sh_word_base_mean|shop|word|base|mean|5e-4|3|32
hh_line_base_sum_e2|household|line|base|sum|5e-4|2|32
hh_line_small_mean_e2|household|line|small|mean|1e-3|2|32
sh_line_base_sum_e2|shop|line|base|sum|5e-4|2|32
sh_line_small_mean_e2|shop|line|small|mean|1e-3|2|32
hh_word_base_mean_e10|household|word|base|mean|5e-4|10|32
hh_word_base_sum_e10|household|word|base|sum|5e-4|10|32
hh_word_small_sum_e12|household|word|small|sum|1e-3|12|32
sh_line_small_sum_e12|shop|line|small|sum|1e-3|12|32
sh_line_base_sum_e10|shop|line|base|sum|5e-4|10|32
sh_word_base_mean_e10|shop|word|base|mean|5e-4|10|32
hh_word_base_mean_e6|household|word|base|mean|5e-4|6|32
hh_word_base_mean_e6_seq1|household|word|base|mean|5e-4|6|32|0|1
hh_word_small_sum_e8|household|word|small|sum|1e-3|8|32
hh_word_small_sum_e8_seq1|household|word|small|sum|1e-3|8|32|0|1
sh_line_small_sum_e12_seq1|shop|line|small|sum|1e-3|12|32|0|1
sh_word_base_mean_e8|shop|word|base|mean|5e-4|8|32
sh_word_base_mean_e8_seq1|shop|word|base|mean|5e-4|8|32|0|1
hh_word_small_sum_e8_seq1_s1|household|word|small|sum|1e-3|8|32|1|1
hh_word_small_sum_e8_seq1_s2|household|word|small|sum|1e-3|8|32|2|1
sh_line_small_sum_e12_seq1_s1|shop|line|small|sum|1e-3|12|32|1|1
sh_line_small_sum_e12_seq1_s2|shop|line|small|sum|1e-3|12|32|2|1
"
ROWS=${ROWS:-$(echo "$ALL_ROWS" | cut -d'|' -f1 | grep -v '_e[0-9]' | xargs)}

# one row: $1 id, $2 env, $3 span, $4 size, $5 score norm, $6 lr, $7 epochs, $8 batch, $9 seed,
# ${10} sequence loss weight
ROW_SCRIPT='
id=$1 env=$2 span=$3 size=$4 norm=$5 lr=$6 epochs=$7 batch=$8 seed=$9 seq=${10}
cd "$WORK" || exit 1
tok=models/tok_${env}_$span model=models/${env}_${span}_$size
# the tokenizer of an (env, span) and its models are written once; rows sharing them wait (one
# lock for both: rows of two sizes share the tokenizer)
exec 9> "models/.lock_${env}_$span"; flock 9
[ -d "$tok" ] || python3 -m proas lm tokenizer --env "$env" --vocab 4096 --max-tasks 200 --span "$span" --out "$tok"
[ -d "$model" ] || python3 -m proas lm new-model --tokenizer "$tok" --size "$size" --out "$model"
flock -u 9
left=$(( $(cat deadline) - $(date +%s) ))
nice -n 10 timeout "$left" python3 -m proas sft --run-dir "runs/$id" --epochs "$epochs" --lr "$lr" \
  --batch-size "$batch" --sequence-loss "$seq" --val-every 1 env="$env" policy=lm policy.lm.mode=score \
  policy.lm.model_path="$model" policy.lm.score_norm="$norm" policy.lm.lr_schedule=cosine \
  policy.lm.warmup_ratio=0.05 seed="$seed" "env.fixed_train_set.path=$WORK/code/src/proas/data/fixed_train_set/seed$seed/$env" \
  train.progress=false
echo "rc $?"
'

if [ "$MODE" = start ]; then
  mkdir -p "$WORK/code" "$WORK/runs" "$WORK/models"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$WORK/site" .whl/*.whl || [ -n "${LOCAL_TEST:-}" ] || exit 1
  cp -r src .whl/pkgs "$WORK/code/" || exit 1
  echo $(( $(date +%s) + LIMIT )) > "$WORK/deadline"
  for id in $ROWS; do
    line=$(echo "$ALL_ROWS" | grep "^$id|") || { echo "unknown row $id" >&2; exit 2; }
    IFS='|' read -r _ env span size norm lr epochs batch seed seq <<< "$line"
    echo "$line" > "$WORK/runs/$id.row"  # what the row is, for scripts/analyse_sft_sweep.py
    # setsid: the rows outlive the call that starts them (the device kills the call's process group)
    WORK=$WORK setsid bash -c "$ROW_SCRIPT" _ "$id" "$env" "$span" "$size" "$norm" "$lr" "$epochs" "$batch" "${seed:-0}" "${seq:-0}" \
      > "$WORK/runs/$id.log" 2>&1 < /dev/null &
  done
  echo "started: $ROWS"
elif [ "$MODE" = pack ]; then
  mkdir -p "$OUT"
  (cd "$WORK" && find runs -name metrics.jsonl -o -name config.yaml -o -name '*.log' -o -name '*.row' -o -name summary.json \
      | grep -v /best/ | tar czf "$OUT/lm_sft_sweep.tgz" -T -) && echo "packed $OUT/lm_sft_sweep.tgz"
  for f in "$WORK"/runs/*.log; do echo "== $f"; grep -E "epoch|oracle steps|rc |Error|error" "$f" | tail -n 8; done
else
  echo "unknown mode $MODE (start, pack)" >&2; exit 2
fi
