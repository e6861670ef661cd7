#!/usr/bin/env bash
# ProAS in verl-agent's trainer on one H200, end to end (issue #26, item 5). docs/verl.md section
# 10 says what each step is for; results/verl_agent/ holds what it gave on proas/household.
#
# On the device, in the repo root. The wheels (fetch_wheels.sh) travel over two calls in a row
# into $WHEELS (a warm machine keeps /tmp); the patched verl-agent copy (its verl/, agent_system/
# without env_package/gym_cards, gigpo/; no .git) travels as a carried folder, VERL_AGENT_DIR.
# PHASES picks the trainer runs (one call each fits the 10-minute limit; the machine stays warm):
#
#   WHEELS=/tmp/proas-wheels VERL_AGENT_DIR=.verl-agent ENV=proas/household PHASES="full" bash recipes/verl_agent/device/run.sh
#   ... PHASES="cut" ...; ... PHASES="resume" ...   (then ENV=alfworld/AlfredTWEnv)
#   ... PHASES="resume-full" ...   (a copy of the full run's step-STEPS/2 checkpoint, resumed)
set -euo pipefail
export PYTHONUNBUFFERED=1
REPO=$(pwd)
: "${VERL_AGENT_DIR:?the patched verl-agent copy}"
ENV=${ENV:-proas/household}
STEPS=${STEPS:-10}
WORK=${WORK:-/tmp/proas-va}
OUTDIR=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUTDIR"
WHEELS=${WHEELS:-/tmp/proas-wheels}
PHASES=${PHASES:-full cut resume}
VERL_AGENT_DIR=$(cd "$VERL_AGENT_DIR" && pwd)
python3 -m pip install -q --no-index --no-deps "$WHEELS"/*.whl
python3 -m pip install -q --no-deps --no-build-isolation -e "$REPO"
# no flash-attn wheel: the sdpa switch (sdpa.patch, applied to the copy before it travels, with
# verl-agent.patch) and the stand-in flash_attn module verl-agent imports whenever CUDA is
# present (device/flash_attn on PYTHONPATH)
grep -q PROAS_ATTN_IMPLEMENTATION "$VERL_AGENT_DIR/verl/workers/fsdp_workers.py" || {
    echo "run.sh: apply recipes/verl_agent/device/sdpa.patch to $VERL_AGENT_DIR first" >&2; exit 2; }
grep -q with_proas_envs "$VERL_AGENT_DIR/agent_system/environments/env_manager.py" || {
    echo "run.sh: apply recipes/verl_agent/verl-agent.patch to $VERL_AGENT_DIR first" >&2; exit 2; }
grep -q PROAS_RESUME_CHECK "$VERL_AGENT_DIR/verl/utils/checkpoint/fsdp_checkpoint_manager.py" || {
    echo "run.sh: apply recipes/verl_agent/device/resume_check.patch to $VERL_AGENT_DIR first" >&2; exit 2; }
# on every resume, verl-agent's checkpoint manager checks that the loaded weights equal the file's
export PROAS_RESUME_CHECK=1
# sdpa, held to its `efficient` kernel: under PyTorch's own choice (cuDNN's kernel on H100 and
# H200 with PyTorch 2.11) the gradient of a first run was NaN in every update (verl skips such
# updates, so nothing trained); attn_check.py reproduced it on a left-padded batch of 704 tokens
# (64 more than a multiple of 128), where cuDNN's gradient is NaN and efficient's finite
# (results/verl_agent/attn_check.txt). The stand-in flash_attn package applies PROAS_SDPA_KERNEL
# in each process that imports it. PROAS_ATTN_IMPLEMENTATION=eager is the fallback.
export PROAS_ATTN_IMPLEMENTATION=${PROAS_ATTN_IMPLEMENTATION:-sdpa}
export PROAS_SDPA_KERNEL=${PROAS_SDPA_KERNEL-efficient}
export PYTHONPATH="$VERL_AGENT_DIR:$REPO/recipes/verl_agent/device:${PYTHONPATH:-}"
# the policy: a from-scratch Qwen2 with proas's env tokenizer (chat template included)
[[ -d "$WORK/tok" ]] || proas lm tokenizer --env household --vocab 4096 --max-tasks 200 --out "$WORK/tok"
[[ -d "$WORK/model" ]] || proas lm new-model --tokenizer "$WORK/tok" --size small --out "$WORK/model"
# once per machine, as the model: the check's verdict does not change between calls
if [[ ! -f "$WORK/attn_check.txt" ]]; then
    python3 "$REPO/recipes/verl_agent/device/attn_check.py" "$WORK/model" --device cuda \
        --require "$PROAS_ATTN_IMPLEMENTATION" --lengths 640 704 --kernel "${PROAS_SDPA_KERNEL:-default}" \
        > "$WORK/attn_check.tmp" || { cat "$WORK/attn_check.tmp" >&2; exit 1; }
    mv "$WORK/attn_check.tmp" "$WORK/attn_check.txt"
fi
cp "$WORK/attn_check.txt" "$OUTDIR/"
# ALFWorld's own env reads games from $ALFWORLD_DATA: proas's exported ones
export ALFWORLD_DATA=$WORK/alfworld
[[ -d "$ALFWORLD_DATA/json_2.1.1/train" ]] || proas household export --out "$ALFWORLD_DATA/json_2.1.1" --split train --limit 64 \
    --logic "$ALFWORLD_DATA/logic"
[[ -d "$ALFWORLD_DATA/json_2.1.1/valid_seen" ]] || proas household export --out "$ALFWORLD_DATA/json_2.1.1" --split valid_seen --limit 8
python3 recipes/verl_agent/device/prepare_data.py "$WORK/data" --train 4 --val 8
[[ -f "$WORK/arg.json.gz" ]] || proas verl build-graph --env household --variant oracle --tasks 400 --out "$WORK/arg.json.gz"
run() {  # $1: run dir, $2: total steps, $3: resume mode
    (cd "$VERL_AGENT_DIR" && python3 -m verl.trainer.main_ppo \
        algorithm.adv_estimator=grpo env.env_name="$ENV" env.seed=0 env.max_steps=15 env.rollout.n=4 \
        data.train_files="$WORK/data/train.parquet" data.val_files="$WORK/data/test.parquet" \
        data.train_batch_size=4 data.val_batch_size=8 data.max_prompt_length=2048 data.max_response_length=64 \
        data.truncation=left data.return_raw_chat=True \
        actor_rollout_ref.model.path="$WORK/model" actor_rollout_ref.rollout.name=hf \
        actor_rollout_ref.rollout.n=1 actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.model.use_remove_padding=False \
        actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
        actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
        actor_rollout_ref.actor.optim.lr=1e-5 actor_rollout_ref.actor.use_kl_loss=False \
        actor_rollout_ref.rollout.val_kwargs.temperature=0.4 actor_rollout_ref.rollout.val_kwargs.do_sample=True \
        proas.enable=True proas.graph="$WORK/arg.json.gz" \
        trainer.logger="['console']" trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.val_before_train=False \
        trainer.test_freq=-1 trainer.save_freq=5 trainer.total_training_steps="$2" trainer.total_epochs=1000 \
        trainer.resume_mode="$3" trainer.default_local_dir="$1" trainer.project_name=proas trainer.experiment_name=run) \
        2>&1 | tee -a "$OUTDIR/$(basename "$1").log"
}
tag=${ENV//\//_}
for phase in $PHASES; do
    case $phase in
        full) run "$WORK/$tag-full" "$STEPS" disable ;;             # uninterrupted: STEPS steps, a checkpoint every 5
        cut) run "$WORK/$tag-cut" $(( STEPS / 2 )) disable ;;       # stopped at the first checkpoint...
        resume) run "$WORK/$tag-cut" "$STEPS" auto ;;               # ...and resumed from it
        resume-full)  # the full run's first checkpoint, copied to a new dir and resumed: the resumed
                      # steps share the full run's history, so they compare with its own steps
            half=$(( STEPS / 2 ))
            rm -rf "$WORK/$tag-resumed" && mkdir -p "$WORK/$tag-resumed"
            cp -r "$WORK/$tag-full/global_step_$half" "$WORK/$tag-resumed/"
            echo "$half" > "$WORK/$tag-resumed/latest_checkpointed_iteration.txt"
            run "$WORK/$tag-resumed" "$STEPS" auto ;;
        *) echo "unknown phase $phase (full, cut, resume, resume-full)" >&2; exit 2 ;;
    esac
done
# the resumed run's checkpoints against the uninterrupted run's, tensor by tensor (step STEPS/2:
# the same first steps twice, i.e. the GPU's own nondeterminism; step STEPS: after the resume)
if [[ " $PHASES " == *" resume "* ]]; then
    for step in $(( STEPS / 2 )) "$STEPS"; do
        python3 "$REPO/recipes/verl_agent/device/compare_ckpt.py" "$WORK/$tag-full/global_step_$step/actor" \
            "$WORK/$tag-cut/global_step_$step/actor" | tee -a "$OUTDIR/$tag-compare.txt"
    done
fi
if [[ " $PHASES " == *" resume-full "* ]]; then
    python3 "$REPO/recipes/verl_agent/device/compare_ckpt.py" "$WORK/$tag-full/global_step_$STEPS/actor" \
        "$WORK/$tag-resumed/global_step_$STEPS/actor" | tee -a "$OUTDIR/$tag-compare.txt"
fi
exit 0
