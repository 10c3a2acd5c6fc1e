# The lent-GPU runs of 2026-12-04 (evening): ADAM_OPTIMIZER's Betas and Epsilon as push
# constants (one pipeline for every scalar), timed against the previous commit, and loads two
# passes ahead. From the project root, with .gpu and benchmarks/investigations/adam-spirv
# carried (build it first: python3 benchmarks/investigations/adam_variants.py --build
# benchmarks/investigations/adam-spirv) and a `git archive` of the previous commit's
# pyvkgrad, benchmarks (without results) and tests/fingerprints.json in .old-main:
#     STEPS="tests fp compare adam" bash benchmarks/investigations/h200_scalars.sh
# tests: TESTS (default Adam's tests); fp: the fingerprints; compare: the COMPARE_OPS rows
# (default adam_optimizer) of .old-main (torch-free) and of this tree, alternated ROUNDS times
# (default 2), then this tree's with PyTorch's side (not with TORCH_ROWS=0); adam:
# adam_variants.py's ADAM_VARIANTS (default shipped, prefetch2, no_cr, memory), both data
# types. (Run 4, the BatchNorm sums kernel's unrolled chunk loops: STEPS="fp compare"
# COMPARE_OPS=batch_normalization_grad,batch_normalization_training_grad,
# batch_normalization_training ROUNDS=1 TORCH_ROWS=0.)
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-tests fp compare adam} "
[[ $steps == *" tests "* ]] && tests_step "${TESTS:-tests/test_adam_optimizer.py}"
[[ $steps == *" fp "* ]] && fp_step
[[ $steps == *" compare "* ]] && {
  ops=${COMPARE_OPS:-adam_optimizer}
  for r in $(seq ${ROUNDS:-2}); do
    in_tree .old-main run rows-old-$r 150 python3 benchmarks/run.py --ops $ops \
      --repeat 20 --no-torch --out $OUT/rows-old-$r
    run rows-new-$r 150 python3 benchmarks/run.py --ops $ops --repeat 20 --no-torch \
      --out $OUT/rows-new-$r
  done
  [[ ${TORCH_ROWS:-1} == 0 ]] || rows_step $ops
  for f in $OUT/rows-old-* $OUT/rows-new-*; do
    [[ $f == *.txt ]] && { echo "-- $(basename $f)"; grep -h "^[A-Z_]*  " $f | cut -c1-150; }
  done; }
[[ $steps == *" adam "* ]] && { ADAM_VARIANTS=${ADAM_VARIANTS:-shipped,prefetch2,no_cr,memory} \
  run adam ${ADAM_LIMIT:-240} python3 benchmarks/investigations/adam_variants.py \
  --spirv benchmarks/investigations/adam-spirv --out $OUT/adam.json; \
  grep -h " us" $OUT/adam.txt | cut -c1-160; }
true
