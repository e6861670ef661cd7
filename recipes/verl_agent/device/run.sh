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
#
# The learning run (docs/verl.md section 10, "The learning run"): MODEL=DIR (a model with its
# tokenizer, e.g. `proas lm sft-rows`' output) instead of the from-scratch one, and
#   MODEL=DIR ENV=alfworld/AlfredTWEnv PHASES="learn watch pack" WATCH=420 bash .../run.sh
#   PHASES="watch pack" WATCH=560 bash .../run.sh      (next calls: no setup, only the logs)
# `learn` starts one detached trainer per arm and rate (ARMS x LRS) side by side on the GPU, each
# resuming from its last checkpoint if it has one; `watch` prints their progress until they all
# end or WATCH seconds pass; `pack` copies their logs and the per-step CSV to $OUT; `stop` ends
# the arms named in STOP.
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
MODEL=${MODEL:-}
# the learning run's arms (GRPO: ProAS's hook with shaping none, i.e. verl-agent's own advantages
# with ProAS's columns logged; GRPO+ProAS: shaping proas) and rates, one trainer per pair
ARMS=${ARMS:-grpo grpo_proas}
LRS=${LRS:-1e-5 1e-4}
LEARN_STEPS=${LEARN_STEPS:-40}
VAL_EPISODES=${VAL_EPISODES:-64}
WATCH=${WATCH:-540}
LEARN=$WORK/learn
# every phase, arm, rate and count is checked before anything is installed or started: a typo
# in the last arm listed used to stop `learn` only when its turn came, after the arms before it
# had started
for phase in $PHASES; do
    case $phase in full|cut|resume|resume-full|learn|watch|pack|stop) ;;
        *) echo "run.sh: unknown phase $phase (full, cut, resume, resume-full, learn, watch, pack, stop)" >&2; exit 2 ;;
    esac
done
shaping_of() {  # an arm's ProAS shaping; no output and status 1 for an unknown arm
    case $1 in
        grpo) echo none ;;        # verl-agent's own GRPO advantages (docs/verl.md section 7)
        grpo_proas) echo proas ;;
        *) return 1 ;;
    esac
}
for arm in $ARMS; do
    shaping_of "$arm" > /dev/null || { echo "run.sh: unknown arm $arm in ARMS (grpo, grpo_proas)" >&2; exit 2; }
done
for lr in $LRS; do
    [[ $lr =~ ^[0-9]+(\.[0-9]+)?([eE]-?[0-9]+)?$ ]] && awk -v x="$lr" 'BEGIN { exit !(x > 0) }' \
        || { echo "run.sh: LRS holds $lr, not a positive number" >&2; exit 2; }
done
for var in STEPS LEARN_STEPS VAL_EPISODES WATCH; do
    [[ ${!var} =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: $var=${!var} is not a positive whole number" >&2; exit 2; }
done
[[ -n "${ARMS// }" && -n "${LRS// }" ]] || { echo "run.sh: ARMS and LRS must each name at least one" >&2; exit 2; }
VERL_AGENT_DIR=$(cd "$VERL_AGENT_DIR" && pwd)
export PYTHONPATH="$VERL_AGENT_DIR:$REPO/recipes/verl_agent/device:${PYTHONPATH:-}"

arm_names() { local arm lr; for arm in $ARMS; do for lr in $LRS; do echo "$arm-lr$lr"; done; done; }
watch_arms() {  # progress lines until every arm has ended or WATCH seconds have passed
    local end=$(( SECONDS + WATCH )) name running line
    while :; do
        running=0
        for name in $(arm_names); do
            [[ -f "$LEARN/$name.pid" ]] || { echo "$name: not started"; continue; }
            if [[ -f "$LEARN/$name.rc" ]]; then line="ended, exit $(cat "$LEARN/$name.rc")"
            elif kill -0 "$(cat "$LEARN/$name.pid")" 2>/dev/null; then running=$(( running + 1 )); line=running
            else line="gone (no exit status: killed?)"; fi
            echo "$(date +%T) $name: $line; $(grep -aoE 'step:[0-9]+ - ' "$LEARN/$name.log" 2>/dev/null | tail -1 | tr -d ' -')" \
                "$(grep -aoE 'val/success_rate:[0-9.]+' "$LEARN/$name.log" 2>/dev/null | tail -1)" \
                "$(grep -aoE 'episode/success_rate:[0-9.]+' "$LEARN/$name.log" 2>/dev/null | tail -1)"
        done
        # the machine's load: 4 trainers with their env workers share its memory, cores and GPU
        echo "$(date +%T) host memory used $(free -g 2>/dev/null | awk '/^Mem:/{print $3 "/" $2}') GiB, load $(cut -d' ' -f1 /proc/loadavg)," \
            "GPU $(nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null || echo none)"
        (( running == 0 || SECONDS >= end )) && break
        sleep 30
    done
}
pack_arms() {  # every arm's log (and its exit status) and the per-step CSV of all arms, to $OUT
    local name specs=()
    for name in $(arm_names); do
        [[ -f "$LEARN/$name.log" ]] || continue
        cp "$LEARN/$name.log" "$OUTDIR/"
        specs+=("$name=$LEARN/$name.log")
    done
    (( ${#specs[@]} )) || { echo "pack: no arm logs under $LEARN" >&2; return 1; }
    python3 "$REPO/recipes/verl_agent/device/steps_csv.py" "${specs[@]}" > "$OUTDIR/learn_steps.csv" \
        || echo "pack: steps_csv.py found no step lines yet" >&2
    ls -l "$OUTDIR"
}
stop_arms() {  # STOP's arms (names as arm_names prints them): their whole session, Ray cluster included
    local name
    for name in ${STOP:?STOP=NAME... (e.g. grpo-lr1e-5)}; do
        [[ -f "$LEARN/$name.pid" ]] || { echo "$name: not started" >&2; continue; }
        kill -TERM -- "-$(cat "$LEARN/$name.pid")" 2>/dev/null && echo "$name: stopped (resumes from its last checkpoint)" \
            || echo "$name: not running"
    done
}
# watch, stop and pack read what `learn` left in $WORK: no installs, nothing set up
only_logs=1
for phase in $PHASES; do [[ $phase == watch || $phase == pack || $phase == stop ]] || only_logs=0; done
if (( only_logs )); then
    for phase in $PHASES; do
        case $phase in watch) watch_arms ;; pack) pack_arms ;; stop) stop_arms ;; esac
    done
    exit 0
fi
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
# the policy: MODEL, or a from-scratch Qwen2 with proas's env tokenizer (chat template included)
if [[ -n "$MODEL" ]]; then
    MODEL_DIR=$(cd "$MODEL" && pwd)
else
    [[ -d "$WORK/tok" ]] || proas lm tokenizer --env household --vocab 4096 --max-tasks 200 --out "$WORK/tok"
    [[ -d "$WORK/model" ]] || proas lm new-model --tokenizer "$WORK/tok" --size small --out "$WORK/model"
    MODEL_DIR=$WORK/model
fi
# once per machine and model: the check's verdict does not change between calls
check=$WORK/attn_check-$(printf %s "$MODEL_DIR" | md5sum | cut -c1-8).txt
if [[ ! -f "$check" ]]; then
    python3 "$REPO/recipes/verl_agent/device/attn_check.py" "$MODEL_DIR" --device cuda \
        --require "$PROAS_ATTN_IMPLEMENTATION" --lengths 640 704 --kernel "${PROAS_SDPA_KERNEL:-default}" \
        > "$check.tmp" || { cat "$check.tmp" >&2; exit 1; }
    mv "$check.tmp" "$check"
fi
cp "$check" "$OUTDIR/attn_check.txt"
# ALFWorld's own env reads games from $ALFWORLD_DATA: proas's exported ones. The machinery
# phases: the first 64 training tasks (all of type pick) and 8 validation ones; the learning
# run: 16 training tasks of each of the six types, and the 128 fixed validation tasks (the lm
# study's; the six types in ALFWorld's valid_seen proportions)
if [[ " $PHASES " == *" learn "* ]]; then
    export ALFWORLD_DATA=$WORK/alfworld_learn
    [[ -d "$ALFWORLD_DATA/json_2.1.1/train" ]] || proas household export --out "$ALFWORLD_DATA/json_2.1.1" --split train \
        --per-type 16 --logic "$ALFWORLD_DATA/logic"
    [[ -d "$ALFWORLD_DATA/json_2.1.1/valid_seen" ]] || proas household export --out "$ALFWORLD_DATA/json_2.1.1" --split valid
    # the oracle ARG of every training task: the first 400 alone are all of type pick
    GRAPH=$WORK/arg_train.json.gz
    [[ -f "$GRAPH" ]] || proas verl build-graph --env household --variant oracle --out "$GRAPH"
else
    export ALFWORLD_DATA=$WORK/alfworld
    [[ -d "$ALFWORLD_DATA/json_2.1.1/train" ]] || proas household export --out "$ALFWORLD_DATA/json_2.1.1" --split train --limit 64 \
        --logic "$ALFWORLD_DATA/logic"
    [[ -d "$ALFWORLD_DATA/json_2.1.1/valid_seen" ]] || proas household export --out "$ALFWORLD_DATA/json_2.1.1" --split valid_seen --limit 8
    GRAPH=$WORK/arg.json.gz
    [[ -f "$GRAPH" ]] || proas verl build-graph --env household --variant oracle --tasks 400 --out "$GRAPH"
fi
python3 recipes/verl_agent/device/prepare_data.py "$WORK/data" --train 4 --val 8
# the learning run's settings, after run()'s own (later Hydra overrides win): 8 tasks x 4
# rollouts a step, 20 env steps (the oracle needs at most 11), validation before training and
# every 5 steps on VAL_EPISODES episodes of the held-out games in one batch, a checkpoint every 5
# steps; KL to the start as verl-agent's ALFWorld GRPO script (low_var_kl, 0.01); each trainer
# its own Ray cluster (address=local), so several share the machine
learn_overrides=(
    data.train_batch_size=8 env.rollout.n=4 env.max_steps=20
    data.val_batch_size="$VAL_EPISODES" data.train_files="$WORK/data_learn/train.parquet" data.val_files="$WORK/data_learn/test.parquet"
    actor_rollout_ref.actor.ppo_mini_batch_size=64 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=32
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=32 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=32
    actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.01 actor_rollout_ref.actor.kl_loss_type=low_var_kl
    trainer.val_before_train=True trainer.test_freq=5 trainer.save_freq=5
    +ray_init.address=local +ray_init.include_dashboard=False
)
run() {  # $1: run dir, $2: total steps, $3: resume mode, then more overrides
    (cd "$VERL_AGENT_DIR" && python3 -m verl.trainer.main_ppo \
        algorithm.adv_estimator=grpo env.env_name="$ENV" env.seed=0 env.max_steps=15 env.rollout.n=4 \
        data.train_files="$WORK/data/train.parquet" data.val_files="$WORK/data/test.parquet" \
        data.train_batch_size=4 data.val_batch_size=8 data.max_prompt_length=2048 data.max_response_length=64 \
        data.truncation=left data.return_raw_chat=True \
        actor_rollout_ref.model.path="$MODEL_DIR" actor_rollout_ref.rollout.name=hf \
        actor_rollout_ref.rollout.n=1 actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.model.use_remove_padding=False \
        actor_rollout_ref.actor.ppo_mini_batch_size=16 actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4 \
        actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
        actor_rollout_ref.actor.optim.lr=1e-5 actor_rollout_ref.actor.use_kl_loss=False \
        actor_rollout_ref.rollout.val_kwargs.temperature=0.4 actor_rollout_ref.rollout.val_kwargs.do_sample=True \
        proas.enable=True proas.graph="$GRAPH" \
        trainer.logger="['console']" trainer.n_gpus_per_node=1 trainer.nnodes=1 trainer.val_before_train=False \
        trainer.test_freq=-1 trainer.save_freq=5 trainer.total_training_steps="$2" trainer.total_epochs=1000 \
        trainer.resume_mode="$3" trainer.default_local_dir="$1" trainer.project_name=proas trainer.experiment_name=run \
        "${@:4}")
}
learn() {  # one detached trainer per arm and rate, side by side; each resumes from its last checkpoint
    local arm lr shaping name
    unset RAY_ADDRESS
    python3 recipes/verl_agent/device/prepare_data.py "$WORK/data_learn" --train 8 --val "$VAL_EPISODES"
    mkdir -p "$LEARN"
    for arm in $ARMS; do
        shaping=$(shaping_of "$arm")  # ARMS was checked before setup
        for lr in $LRS; do
            name=$arm-lr$lr
            if [[ -f "$LEARN/$name.pid" && ! -f "$LEARN/$name.rc" ]] && kill -0 "$(cat "$LEARN/$name.pid")" 2>/dev/null; then
                echo "$name: running already"; continue
            fi
            rm -f "$LEARN/$name.rc" "$LEARN/$name.pid"
            # setsid + nohup: the trainer and its Ray cluster outlive this call while the machine
            # stays warm; the trainer's own shell writes its pid, then its exit status
            setsid nohup bash -c 'echo $$ > "$LEARN/$0.pid"; run "$@"; echo $? > "$LEARN/$0.rc"' "$name" \
                "$LEARN/$name" "$LEARN_STEPS" auto "${learn_overrides[@]}" proas.shaping="$shaping" \
                actor_rollout_ref.actor.optim.lr="$lr" trainer.experiment_name="$name" \
                >> "$LEARN/$name.log" 2>&1 < /dev/null &
            for _ in $(seq 50); do [[ -f "$LEARN/$name.pid" ]] && break; sleep 0.2; done  # for watch, next
            echo "$name: started (log $LEARN/$name.log)"
        done
    done
}
export -f run
export REPO WORK LEARN VERL_AGENT_DIR ENV MODEL_DIR GRAPH ALFWORLD_DATA
tag=${ENV//\//_}
log() { tee -a "$OUTDIR/$tag-$1.log"; }
for phase in $PHASES; do
    case $phase in
        full) run "$WORK/$tag-full" "$STEPS" disable 2>&1 | log full ;;         # uninterrupted: STEPS steps, a checkpoint every 5
        cut) run "$WORK/$tag-cut" $(( STEPS / 2 )) disable 2>&1 | log cut ;;    # stopped at the first checkpoint...
        resume) run "$WORK/$tag-cut" "$STEPS" auto 2>&1 | log cut ;;            # ...and resumed from it
        resume-full)  # the full run's first checkpoint, copied to a new dir and resumed: the resumed
                      # steps share the full run's history, so they compare with its own steps
            half=$(( STEPS / 2 ))
            rm -rf "$WORK/$tag-resumed" && mkdir -p "$WORK/$tag-resumed"
            cp -r "$WORK/$tag-full/global_step_$half" "$WORK/$tag-resumed/"
            echo "$half" > "$WORK/$tag-resumed/latest_checkpointed_iteration.txt"
            run "$WORK/$tag-resumed" "$STEPS" auto 2>&1 | log resumed ;;
        learn) learn ;;
        watch) watch_arms ;;
        pack) pack_arms ;;
        stop) stop_arms ;;    # (PHASES was checked before setup)
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
