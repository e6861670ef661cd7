# The rest of the SFT-start tuning grid (heldout_tune_sft; results/heldout/tuning_sft/): household
# GRPO and GRPO+ProAS ran on the development machine (tuning_sft/runs.csv); this runs household
# DAPO and GiGPO (both arms) and every shop arm, as two runners side by side on 16 cores. The SFT
# starts are made again there (minutes; sft_start is the rows' dependency). Run from the frozen
# code of every held-out run so far:
#   mkdir -p .frozen && git archive b0d0c607801f44898804190b24e64667ab834ad7 src | tar x -C .frozen
#   SRC=.frozen/src GRID=scripts/heldout_grids/tune_sft_rest.sh bash scripts/heldout_device.sh start heldout_tune_sft b0d0c607801f44898804190b24e64667ab834ad7 560   # carry .whl, .frozen
#   bash scripts/heldout_device.sh watch heldout_tune_sft b0d0c607801f44898804190b24e64667ab834ad7 560
# then: proas heldout select results/heldout/tuning_sft/runs.csv RES --start sft --records ... --out ...
python3 -m proas experiment run heldout_tune_sft --envs household --rows sft_start dapo_none_sgd0.03 dapo_none_sgd0.1 dapo_none_sgd0.3 dapo_none_sgd1 dapo_none_adamw0.0003 dapo_none_adamw0.001 dapo_none_adamw0.003 dapo_proas_sgd0.03 dapo_proas_sgd0.1 dapo_proas_sgd0.3 dapo_proas_sgd1 dapo_proas_adamw0.0003 dapo_proas_adamw0.001 dapo_proas_adamw0.003 gigpo_none_sgd0.03 gigpo_none_sgd0.1 gigpo_none_sgd0.3 gigpo_none_sgd1 gigpo_none_adamw0.0003 gigpo_none_adamw0.001 gigpo_none_adamw0.003 gigpo_proas_sgd0.03 gigpo_proas_sgd0.1 gigpo_proas_sgd0.3 gigpo_proas_sgd1 gigpo_proas_adamw0.0003 gigpo_proas_adamw0.001 gigpo_proas_adamw0.003 --jobs 10 --out $RES > $RES/log_household.txt 2>&1 &
python3 -m proas experiment run heldout_tune_sft --envs shop --jobs 6 --out $RES > $RES/log_shop.txt 2>&1 &
