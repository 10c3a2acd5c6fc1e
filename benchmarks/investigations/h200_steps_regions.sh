# 2026-12-04 (late): Adam's step counts in place and ROI_ALIGN_GRAD's region count as a push
# constant, on the H200. From the project root, with $OUT set and .old-main (a `git archive` of
# the last landed commit: pyvkgrad, benchmarks, tests/fingerprints.json) carried. STEPS picks:
#   tests   the fingerprints; the optimizer's, Adam's and ROI_ALIGN_GRAD's tests;
#   steps   benchmarks/adam_step.py for this tree and the old one, alternated twice (the host's
#           speed drifts between machine starts: compare within a run);
#   rows    the ROI_ALIGN_GRAD rows with PyTorch's side.
# Run 1 ran "tests steps rows" (its old-tree step failed to start); run 2 "tests steps".
source benchmarks/investigations/h200_prelude.sh
if [[ " ${STEPS:-tests steps rows} " == *" tests "* ]]; then
  fp_step
  run tests 150 python3 -m pytest -q -p no:cacheprovider -x tests/test_torch_optim.py tests/test_torch_optim_state.py tests/test_adam_optimizer.py tests/test_roi_align_grad.py; tail -2 $OUT/tests.txt
fi
if [[ " ${STEPS:-tests steps rows} " == *" steps "* ]]; then
  for i in 1 2; do
    run step$i 120 python3 benchmarks/adam_step.py --out $OUT/step$i; grep "elements)" $OUT/step$i.txt
    in_tree .old-main run step-old$i 120 python3 benchmarks/adam_step.py --out $OUT/step-old$i
    grep "elements)" $OUT/step-old$i.txt
  done
fi
if [[ " ${STEPS:-tests steps rows} " == *" rows "* ]]; then
  rows_step roi_align_grad
fi
