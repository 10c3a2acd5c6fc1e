# The lent-GPU runs of 2026-12-03 (late): the pooling tiles' float16 division without its other
# roads and max pooling's dY loaded before its winner, against the previous kernels
# (pooling_ablation.py's previous, shipped, half_roads, winner_first; build them first, with the
# previous commit's shaders:
#     git archive abe3dec shaders | tar -x -C /tmp/prev
#     POOLING_PREVIOUS=/tmp/prev/shaders python3 benchmarks/investigations/pooling_ablation.py \
#         --build benchmarks/investigations/pooling-spirv)
# then the pooling tests on the device, the fingerprints and the benchmark's pooling rows with
# PyTorch's side. From the project root with .gpu and that folder carried:
#     STEPS="tests pool fp rows" bash benchmarks/investigations/h200_late.sh
# (run 1 timed walks of tiles, commit 13155ca, with pooling_ablation.py's plan variants of
# that commit; run 2 the variants as then named half_specials and term_first(_float); run 4
# HALF_BY_FLOATS (commit 44baec1, reverted): POOLING_KINDS=avg
# POOLING_VARIANTS=previous,shipped,half_by_integers ROWS_OPS=average_pooling_grad, previous
# at 3b6e837's shaders; run 5 WINNER_WORDS: POOLING_KINDS=max
# POOLING_VARIANTS=previous,shipped,winner_by_window ROWS_OPS=max_pooling_grad TESTS_K="winners
# or argmax_pass", previous at f988419's shaders.)
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-tests pool fp rows} "
[[ $steps == *" tests "* ]] && { run tests 200 python3 -m pytest -q -p no:cacheprovider -x \
  tests/test_pooling_grad_tiles.py -k "${TESTS_K:-division or gathers_bits or halves or special_values}"; \
  tail -2 $OUT/tests.txt; }
[[ $steps == *" pool "* ]] && { POOLING_VARIANTS=${POOLING_VARIANTS:-previous,shipped,half_roads,winner_first} \
  run pool 200 python3 benchmarks/investigations/pooling_ablation.py \
  --spirv benchmarks/investigations/pooling-spirv --out $OUT/pool.json; \
  grep -h " us" $OUT/pool.txt | sed -e 's/ stride 2 padding [01]//; s/(rte16 SPIR-V)//' | cut -c1-150; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
[[ $steps == *" rows "* ]] && { run rows 300 python3 benchmarks/run.py \
  --ops ${ROWS_OPS:-average_pooling_grad,max_pooling_grad} --repeat 20 --out $OUT/rows; \
  grep -h "^[A-Z_]*  \|copy roofline" $OUT/rows.txt | cut -c1-170; }
true
