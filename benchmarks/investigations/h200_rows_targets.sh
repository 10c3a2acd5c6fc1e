# The lent-GPU runs of 2026-12-03 (night): the pooling grads' float16 rows stored through
# halves_from_floats8 (pooling_ablation.py's shipped, pairs, row_unrolled and device_half, both
# SPIR-V of each; build them first:
#     python3 benchmarks/investigations/pooling_ablation.py --build benchmarks/investigations/pooling-spirv)
# and the BatchNorm exact sums' work-item target (bn_sums_ablation.py over BN_TARGETS, the
# shipped kernel; build it first: python3 benchmarks/investigations/bn_sums_ablation.py --build
# benchmarks/investigations/bn-sums-spirv). From the project root with .gpu and both folders
# carried; adam: ADAM_OPTIMIZER float16 with its words through halves_from_floats8 against
# the previous stores, word by word (adam_variants.py's pairs; run 2 ran the row as "rows"
# against "shipped" of 142392d), built first likewise into benchmarks/investigations/adam-spirv,
# carried;
# rows: the benchmark's pooling rows with PyTorch's side:
#     STEPS="pool bn adam fp rows" bash benchmarks/investigations/h200_rows_targets.sh
# compare: COMPARE_OPS' benchmark rows of a `git archive` of the previous commit (.old-main,
# carried; torch-free) beside this tree's with PyTorch's side.
# tests: TESTS (default tests/test_correctly_rounded.py) on the device. ADAM_DATA=small (with
# adam) times Adam on small gradients, most of its float16 v' subnormal halves.
# (run 1 ran "pool bn"; run 2 "pool adam fp rows" with POOLING_DTYPES=float16; run 3 "fp
# compare" for ADAM_OPTIMIZER and BATCH_NORMALIZATION_TRAINING against 142392d; run 4 "pool"
# with the preserve16 variants; run 5 "tests fp pool adam rows", halves_from_floats8 converting
# the signed values)
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-pool bn adam fp rows} "
[[ $steps == *" tests "* ]] && { run tests 200 python3 -m pytest -q -p no:cacheprovider -x \
  ${TESTS:-tests/test_correctly_rounded.py}; tail -3 $OUT/tests.txt; }
[[ $steps == *" pool "* ]] && { POOLING_VARIANTS=${POOLING_VARIANTS:-shipped,pairs,row_unrolled,device_half} \
  run pool ${POOL_LIMIT:-150} python3 benchmarks/investigations/pooling_ablation.py \
  --spirv benchmarks/investigations/pooling-spirv --out $OUT/pool.json; \
  grep -h " us" $OUT/pool.txt | cut -c1-160; }
[[ $steps == *" bn "* ]] && { BN_OPS=${BN_OPS:-grad,training_grad,training} \
  BN_TARGETS=${BN_TARGETS:-512,256,1024} BN_VARIANTS=paired run bn ${BN_LIMIT:-330} python3 \
  benchmarks/investigations/bn_sums_ablation.py --spirv benchmarks/investigations/bn-sums-spirv \
  --out $OUT/bn.json; grep -h " us" $OUT/bn.txt | cut -c1-160; }
[[ $steps == *" adam "* ]] && { ADAM_VARIANTS=${ADAM_VARIANTS:-shipped,pairs,rte16,pairs_rte16} \
  ADAM_DTYPES=float16 run adam ${ADAM_LIMIT:-200} python3 \
  benchmarks/investigations/adam_variants.py --spirv benchmarks/investigations/adam-spirv \
  --out $OUT/adam.json; grep -h " us" $OUT/adam.txt | cut -c1-160; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
[[ $steps == *" rows "* ]] && { run rows 300 python3 benchmarks/run.py \
  --ops ${ROWS_OPS:-average_pooling_grad,max_pooling_grad} --repeat 20 --out $OUT/rows; \
  grep -h "^[A-Z_]*  \|copy roofline" $OUT/rows.txt | cut -c1-170; }
[[ $steps == *" compare "* ]] && { OPS=${COMPARE_OPS:-adam_optimizer,batch_normalization_training}; \
  in_tree .old-main run rows-old 200 python3 benchmarks/run.py --ops $OPS --repeat 20 \
  --no-torch --out $OUT/rows-old; run rows-new 300 python3 benchmarks/run.py --ops $OPS \
  --repeat 20 --out $OUT/rows-new; grep -h "^[A-Z_]*  \|copy roofline" $OUT/rows-old.txt \
  $OUT/rows-new.txt | cut -c1-170; }
true
