# One device session of the held-out study (results/heldout/README.md): the SFT-start evaluation
# of household DAPO and GiGPO (results/heldout/sft/heldout_sft_household.yaml: 20 runs and the
# seeds' SFT starts) from frozen b0d0c60, and household's half of the other baselines' tuning grid
# (heldout_tune_other: PPO and MiGPO, 28 runs) from the checkout sent, which holds PPO's
# lambda and state critic (ae07555, after b0d0c60): its runs record OTHER_COMMIT, the commit of
# that checkout. Shop's halves run on the development machine. Run by
#   mkdir -p .frozen && git archive b0d0c607801f44898804190b24e64667ab834ad7 src | tar x -C .frozen
#   export OTHER_COMMIT=<the checkout's commit>; SRC=.frozen/src GRID=scripts/heldout_grids/sft_eval_household_tune_other.sh bash scripts/heldout_device.sh start heldout_sft b0d0c607801f44898804190b24e64667ab834ad7 560   # carry .whl, .frozen
#   bash scripts/heldout_device.sh watch heldout_sft b0d0c607801f44898804190b24e64667ab834ad7 560
python3 -m proas experiment run $REPO/results/heldout/sft/heldout_sft_household.yaml --jobs 8 --out $RES > $RES/log_sft.txt 2>&1 &
PYTHONPATH=/tmp/site:/tmp/code/pkgs:$REPO/src PROAS_COMMIT=${OTHER_COMMIT:?the checkout\'s commit} \
  python3 -m proas experiment run heldout_tune_other --envs household --jobs 8 --out $RES > $RES/log_other.txt 2>&1 &
