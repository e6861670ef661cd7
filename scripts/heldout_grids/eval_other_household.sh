# The other baselines' evaluation on household (results/heldout/other/heldout_other_household.yaml:
# PPO and MiGPO at their tuned settings, seeds 100-104, 10 runs) from the checkout sent, whose
# commit is OTHER_COMMIT. Run by
#   export OTHER_COMMIT=<the checkout's commit>; GRID=scripts/heldout_grids/eval_other_household.sh bash scripts/heldout_device.sh start heldout_other $OTHER_COMMIT 440   # carry .whl
PYTHONPATH=/tmp/site:/tmp/code/pkgs:$REPO/src PROAS_COMMIT=${OTHER_COMMIT:?the checkout\'s commit} \
  python3 -m proas experiment run $REPO/results/heldout/other/heldout_other_household.yaml --jobs 10 --out $RES > $RES/log_other.txt 2>&1 &
