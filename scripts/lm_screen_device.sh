#!/usr/bin/env bash
# One device call that measures before it spends (issues #43 and #44), then starts the lm study's
# shop divergence screen detached:
#   1. attn_check.py on a `small` model: sdpa's loss and gradient on left-padded random-token
#      batches of 512, 640 and 704 tokens, under PyTorch's kernel choice, cuDNN and efficient
#      (the cuDNN NaN lead of results/verl_agent/README.md)       -> $OUT/attn_check.txt
#   2. scripts/lm_step_profile.py: seconds per RL step of one run alone with the kernel left to
#      PyTorch, held to `efficient`, and `eager` attention (shop; household at 20 env steps an
#      episode), and shop's `score_impl=shared` under the fastest       -> $OUT/step_profile.txt
#   3. the screen (STUDY=lm_screen SEEDS=200 ENVS=shop scripts/run_lm_competent.sh start; ROWS,
#      default the weak start's rows) with the kernel that was fastest on shop in 2, then `watch`
#      until DEADLINE s after the start.
# Later calls: `WORK=/tmp/lmcomp bash scripts/run_lm_competent.sh watch|pack` (STUDY=lm_screen).
# Carry .whl.
#
#   bash scripts/lm_screen_device.sh [DEADLINE]
set -u
OUT=${OUT:-/tmp/out}
DEADLINE=${1:-560}
P=/tmp/lmprof
mkdir -p "$OUT" "$P"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$P/site" .whl/*.whl || exit 1
export PYTHONPATH=$P/site:$PWD/.whl/pkgs:$PWD/src
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 JAX_PLATFORMS=cpu
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/step_profile.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)" | tee -a "$OUT/step_profile.txt"
for env in shop household; do
  span=line; [ $env = household ] && span=word
  python3 -m proas lm tokenizer --env $env --vocab 4096 --max-tasks 200 --span $span --out "$P/tok/$env" > /dev/null \
    && python3 -m proas lm new-model --tokenizer "$P/tok/$env" --size small --out "$P/models/$env" > /dev/null 2>&1 || exit 1
done
echo "models: $SECONDS s"

# 1. the cuDNN NaN lead
python3 recipes/verl_agent/device/attn_check.py "$P/models/shop" --device cuda --lengths 512 640 704 2>&1 \
  | grep attn_check | tee "$OUT/attn_check.txt"
echo "attn_check: $SECONDS s"

# 2. a step per attention choice, one run alone
COMMON="policy.lm.score_norm=sum policy.lm.micro_batch_size=64"
prof() { python3 scripts/lm_step_profile.py "$@" 2>&1 | grep -E "^(shop|household) " | tee -a "$OUT/step_profile.txt"; }
prof --model "$P/models/shop" --env shop --steps 1 --choices default efficient eager -- $COMMON
best=$(grep "^shop " "$OUT/step_profile.txt" | grep -v failed | sort -t' ' -k4 -g | head -1 | awk '{print $2}' | tr -d :)
echo "fastest on shop: ${best:-none}" | tee -a "$OUT/step_profile.txt"
case $best in
  efficient|math|cudnn) EXTRA="policy.lm.sdpa_kernel=$best"; kflag=(--choices "$best") ;;
  eager) EXTRA="policy.lm.attn_implementation=eager"; kflag=(--choices eager) ;;
  *) EXTRA=""; kflag=(--choices default) ;;
esac
echo "shared score passes under $best:" | tee -a "$OUT/step_profile.txt"
prof --model "$P/models/shop" --env shop --steps 1 "${kflag[@]}" -- $COMMON policy.lm.score_impl=shared
prof --model "$P/models/household" --env household --steps 1 --max-steps 20 --choices default efficient -- $COMMON
echo "profile: $SECONDS s"

# 3. the shop screen, detached, then watch
# ROWS (default: the weak start's, the protocol's primary question) narrows the screen's rows
WEAK="sft_weak_shop $(for lr in 1e-5 3e-5 1e-4 3e-4; do printf 'grpo_weak_lr%s_kl0 grpo_weak_lr%s_kl0.01 ' $lr $lr; done)"
ROWS=${ROWS:-$WEAK} EXTRA=$EXTRA STUDY=lm_screen SEEDS=200 ENVS=shop bash scripts/run_lm_competent.sh start 2400 2>&1 | tail -n 5
left=$((DEADLINE - SECONDS))
[ $left -gt 30 ] && STUDY=lm_screen bash scripts/run_lm_competent.sh watch $left
exit 0
