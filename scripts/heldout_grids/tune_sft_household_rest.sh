# Household DAPO and GiGPO (both arms) of the SFT-start tuning grid (heldout_tune_sft;
# results/heldout/tuning_sft/), one runner of 16 jobs on the device's 16 cores. Shop's arms of the
# same grid are cheap enough for two cores and run on the development machine:
#   python -m proas experiment run heldout_tune_sft --envs shop --jobs 2 --out RES
# The SFT starts are made again here (seeded, so the same as the development machine's). From the
# frozen code of every held-out run so far:
#   mkdir -p .frozen && git archive b0d0c607801f44898804190b24e64667ab834ad7 src | tar x -C .frozen
#   SRC=.frozen/src GRID=scripts/heldout_grids/tune_sft_household_rest.sh bash scripts/heldout_device.sh start heldout_tune_sft b0d0c607801f44898804190b24e64667ab834ad7 560   # carry .whl, .frozen
python3 -m proas experiment run heldout_tune_sft --envs household --rows sft_start dapo_none_sgd0.03 dapo_none_sgd0.1 dapo_none_sgd0.3 dapo_none_sgd1 dapo_none_adamw0.0003 dapo_none_adamw0.001 dapo_none_adamw0.003 dapo_proas_sgd0.03 dapo_proas_sgd0.1 dapo_proas_sgd0.3 dapo_proas_sgd1 dapo_proas_adamw0.0003 dapo_proas_adamw0.001 dapo_proas_adamw0.003 gigpo_none_sgd0.03 gigpo_none_sgd0.1 gigpo_none_sgd0.3 gigpo_none_sgd1 gigpo_none_adamw0.0003 gigpo_none_adamw0.001 gigpo_none_adamw0.003 gigpo_proas_sgd0.03 gigpo_proas_sgd0.1 gigpo_proas_sgd0.3 gigpo_proas_sgd1 gigpo_proas_adamw0.0003 gigpo_proas_adamw0.001 gigpo_proas_adamw0.003 --jobs 16 --out $RES > $RES/log_household.txt 2>&1 &
