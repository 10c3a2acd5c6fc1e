# The lent-GPU runs of 2026-12-04 (afternoon): where every operator stands. From the project
# root with .gpu carried:
#     STEPS="tests fp rows" bash benchmarks/investigations/h200_status.sh
# tests: TESTS on the device (default: ROI_ALIGN_GRAD's tests, whose kernels changed after the
#   last fingerprint run); fp: the fingerprints; rows: the benchmark's ROWS_OPS rows (default
#   every operator) with PyTorch's side, under ROWS_LIMIT seconds.
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-tests fp rows} "
[[ $steps == *" tests "* ]] && tests_step "${TESTS:-tests/test_roi_align_grad.py}"
[[ $steps == *" fp "* ]] && fp_step
[[ $steps == *" rows "* ]] && {
  ops=${ROWS_OPS:+--ops $ROWS_OPS}
  run rows ${ROWS_LIMIT:-420} python3 benchmarks/run.py $ops --repeat 20 --out $OUT/rows
  grep -h "^[A-Z_]*  \|copy roofline\|fill" $OUT/rows.txt | cut -c1-170; }
true
