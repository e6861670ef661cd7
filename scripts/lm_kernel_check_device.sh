#!/usr/bin/env bash
# The short device call of issues #43 and #44 (for a session with a few minutes of device time):
# which sdpa kernel is fastest for an lm RL step, and whether cuDNN's gives NaN gradients.
#   attn:    attn_check.py on a `small` model: sdpa's loss and gradient on left-padded random-token
#            batches of 512, 640 and 704 tokens under PyTorch's kernel choice, cuDNN and efficient
#                                                                        -> $OUT/attn_check.txt
#   profile: scripts/lm_step_profile.py, one run alone: seconds per RL step per attention choice
#            (shop: PyTorch's, efficient, eager; household at 20 env steps an episode: PyTorch's,
#            efficient)                                                  -> $OUT/step_profile.txt
# Each part stops DEADLINE s after the start at the latest. PARTS (default "attn profile") picks
# the parts. MODELS names a folder holding the shop and household models (scripts/lm_screen_device.sh
# passes its study's, with its PYTHONPATH set); unset, this installs .whl and makes them. Carry .whl.
#
#   bash scripts/lm_kernel_check_device.sh [DEADLINE]
set -u
OUT=${OUT:-/tmp/out}
DEADLINE=${1:-300}
PARTS=${PARTS:-attn profile}
mkdir -p "$OUT"
if [ -z "${MODELS:-}" ]; then
  P=/tmp/lmprof
  mkdir -p "$P"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$P/site" .whl/*.whl || exit 1
  export PYTHONPATH=$P/site:$PWD/.whl/pkgs:$PWD/src
  export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1 JAX_PLATFORMS=cpu
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), 'transformers', transformers.__version__)"
  } | tee "$OUT/step_profile.txt"
  for env in shop household; do
    span=line; [ $env = household ] && span=word
    python3 -m proas lm tokenizer --env $env --vocab 4096 --max-tasks 200 --span $span --out "$P/tok/$env" > /dev/null \
      && python3 -m proas lm new-model --tokenizer "$P/tok/$env" --size small --out "$P/models/$env" > /dev/null 2>&1 || exit 1
  done
  MODELS=$P/models
  echo "models: $SECONDS s"
fi
if [[ " $PARTS " == *" attn "* ]]; then
  timeout $((DEADLINE - SECONDS)) python3 recipes/verl_agent/device/attn_check.py "$MODELS/shop" --device cuda \
    --lengths 512 640 704 2>&1 | grep attn_check | tee "$OUT/attn_check.txt"
  echo "attn_check: $SECONDS s"
fi
if [[ " $PARTS " == *" profile "* ]]; then
  COMMON="policy.lm.score_norm=sum policy.lm.micro_batch_size=64"
  prof() { timeout $((DEADLINE - SECONDS)) python3 scripts/lm_step_profile.py "$@" 2>&1 \
             | grep -E "^(shop|household) " | tee -a "$OUT/step_profile.txt"; }
  prof --model "$MODELS/shop" --env shop --steps 1 --choices default efficient eager -- $COMMON
  [ $((DEADLINE - SECONDS)) -gt 40 ] && prof --model "$MODELS/household" --env household --steps 1 --max-steps 20 \
    --choices default efficient -- $COMMON
  echo "profile: $SECONDS s"
fi
