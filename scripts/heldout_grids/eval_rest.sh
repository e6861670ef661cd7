# The rest of the random-start evaluation (results/heldout/README.md) and the ablations, as three
# runners side by side on 16 cores. Household seeds 100-101 ran on the development machine; every
# household seed from 102 runs here, all of its rows, so that a seed's pairs share a machine.
# Run from a frozen copy of b0d0c60, the code of the tuning and of every evaluation run so far:
#   mkdir -p .frozen && git archive b0d0c607801f44898804190b24e64667ab834ad7 src | tar x -C .frozen
#   SRC=.frozen/src GRID=scripts/heldout_grids/eval_rest.sh bash scripts/heldout_device.sh start heldout_eval b0d0c607801f44898804190b24e64667ab834ad7 560   # carry .whl, .frozen
#   bash scripts/heldout_device.sh watch heldout_eval b0d0c607801f44898804190b24e64667ab834ad7 560
python3 -m proas experiment run $REPO/results/heldout/main/heldout_main.yaml --envs household --seeds 102 103 104 105 106 107 108 109 --jobs 12 --out $RES > $RES/log_main.txt 2>&1 &
python3 -m proas experiment run $REPO/results/heldout/ablation/heldout_ablation.yaml --envs household --jobs 3 --out $RES > $RES/log_abl_household.txt 2>&1 &
python3 -m proas experiment run $REPO/results/heldout/ablation/heldout_ablation.yaml --envs shop --jobs 1 --out $RES > $RES/log_abl_shop.txt 2>&1 &
