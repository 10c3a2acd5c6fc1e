# The lent-GPU runs of 2026-12-03 (night 2): BATCH_NORMALIZATION_TRAINING's Output written by
# the sums kernel (OUTPUT_HERE). From the project root with .gpu carried:
#     STEPS="tests variants fp rows" bash benchmarks/investigations/h200_output_here.sh
# tests: the operator's tests on the device; variants: bn_training_variants.py's settings
# (BN_VARIANTS and BN_SHAPES pick them), the same bits checked; fp: the 239 fingerprints; rows: the
# benchmark's BATCH_NORMALIZATION_TRAINING rows with PyTorch's side; ablation:
# bn_sums_ablation.py's previous and paired (the shipped kernel) on the three BatchNorm
# operators (run 4: the exact sums rounded in registers against acfc877's shaders, built first
# with python3 benchmarks/investigations/bn_sums_ablation.py --build
# benchmarks/investigations/bn-sums-spirv --previous <acfc877's shaders>, that folder carried);
# TESTS: the tests of the tests step.
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-tests variants fp rows} "
[[ $steps == *" tests "* ]] && { run tests 200 python3 -m pytest -q -p no:cacheprovider -x \
  ${TESTS:-tests/test_batch_normalization_training.py}; tail -2 $OUT/tests.txt; }
[[ $steps == *" variants "* ]] && { \
  BN_VARIANTS=${BN_VARIANTS:-"element-wise;here;here, 2 a lane;here, 4 a lane"} \
  run variants 330 python3 benchmarks/investigations/bn_training_variants.py --cuda-first; \
  cut -c1-120 $OUT/variants.txt; }
[[ $steps == *" ablation "* ]] && { BN_VARIANTS=${BN_VARIANTS:-previous,paired} \
  BN_TARGETS=${BN_TARGETS:-512} run ablation 300 python3 \
  benchmarks/investigations/bn_sums_ablation.py --spirv benchmarks/investigations/bn-sums-spirv \
  --out $OUT/ablation.json; grep " us" $OUT/ablation.txt | cut -c1-130; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
[[ $steps == *" rows "* ]] && { run rows 300 python3 benchmarks/run.py \
  --ops ${ROWS_OPS:-batch_normalization_training} --repeat 20 --out $OUT/rows; \
  grep -h "^[A-Z_]*  \|copy roofline" $OUT/rows.txt | cut -c1-170; }
true
