# One lent-GPU run for the BatchNorm exact sums' loads (run 1: each lane's first chunk before
# the item's barriers, the next chunk while the current one sums; run 2: float16 chunks in
# pairs): the device's float controls, the fingerprints, the BatchNorm tests and in-place
# check, bn_sums_ablation.py's variants
# (built here first: python3 benchmarks/investigations/bn_sums_ablation.py --build
# benchmarks/investigations/bn-sums-spirv --previous <the previous commit's shaders/>), then
# the benchmark's BatchNorm rows with PyTorch's side. From the project root with .gpu and
# benchmarks/investigations/bn-sums-spirv carried:
#     STEPS="controls fp tests ablation rows" bash benchmarks/investigations/h200_bn_sums.sh
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-controls fp tests ablation rows} "
[[ $steps == *" controls "* ]] && { run float_controls 60 python3 \
  benchmarks/investigations/float_controls.py; cat $OUT/float_controls.txt; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
[[ $steps == *" tests "* ]] && { run tests 300 python3 -m pytest -q -p no:cacheprovider -x \
  ${TESTS:-tests/test_batch_normalization_grad_exact.py}; tail -3 $OUT/tests.txt; \
  run in_place 120 python3 benchmarks/investigations/bn_in_place.py; tail -5 $OUT/in_place.txt; }
[[ $steps == *" ablation "* ]] && { run ablation 420 python3 \
  benchmarks/investigations/bn_sums_ablation.py --spirv benchmarks/investigations/bn-sums-spirv \
  --out $OUT/ablation.json; grep -c "same bits True" $OUT/ablation.txt; \
  grep -c "same bits False" $OUT/ablation.txt; }
[[ $steps == *" rows "* ]] && { run rows 300 python3 benchmarks/run.py \
  --ops bn,batch_normalization_training --repeat 20 --out $OUT/rows; \
  grep -h "^BATCH\|copy roofline" $OUT/rows.txt | head -40; }
true
