# The lent-GPU runs of 2026-12-04. From the project root with .gpu carried (and for ablation
# benchmarks/investigations/bn-sums-spirv, built first with
#     python3 benchmarks/investigations/bn_sums_ablation.py --build benchmarks/investigations/bn-sums-spirv):
#     STEPS="random ablation tests fp rows" bash benchmarks/investigations/h200_prefetch.sh
# random: RANDOM_GENERATOR, random_variants.py over PASSES and STATES (here, none: no
#   OutputStateTensor), twice (the settings' order reversed the second time), every output and
#   new state checked (runs 1 and 2 timed two ticket designs too, with commits b54768a and
#   e0b47a5);
# ablation: bn_sums_ablation.py's BN_VARIANTS on BN_OPS (the BatchNorm exact sums: RUN, and
#   where the time goes; runs 2-4 also timed commits d5e9a32's prefetch and 42390ff's copies);
# tests: TESTS on the device (a -k expression of one word); fp: the 239 fingerprints; rows:
#   the benchmark's ROWS_OPS rows with PyTorch's side.
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-random ablation tests fp} "
[[ $steps == *" random "* ]] && for pass in 1 2; do
  states=${STATES:-here,none}
  [[ $pass == 2 ]] && states=$(echo $states | tr ',' '\n' | tac | paste -sd,)
  run random$pass 300 python3 benchmarks/investigations/random_variants.py --blocks 1 \
    --passes ${PASSES:-8} --state $states --out $OUT/random$pass.json
  cut -c1-175 $OUT/random$pass.txt
done
[[ $steps == *" ablation "* ]] && { BN_VARIANTS=${BN_VARIANTS:-paired,no_runs,no_shift,no_exact,no_tail,no_flush} \
  BN_OPS=${BN_OPS:-training,grad} BN_TARGETS=${BN_TARGETS:-512} run ablation 400 python3 \
  benchmarks/investigations/bn_sums_ablation.py --spirv benchmarks/investigations/bn-sums-spirv \
  --out $OUT/ablation.json; grep " us" $OUT/ablation.txt | cut -c1-150; }
[[ $steps == *" tests "* ]] && tests_step "${TESTS:-tests/test_random_generator.py}"
[[ $steps == *" fp "* ]] && fp_step
[[ $steps == *" rows "* ]] && rows_step "${ROWS_OPS:-random_generator}"
true
