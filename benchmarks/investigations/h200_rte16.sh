# One lent-GPU run for the kernels' rte16 SPIR-V (float16 conversions rounded to nearest even
# by the device under RoundingModeRTE, load_store.glsl): the fingerprints and the float16
# rounding test with it (the default where the device supports it), then the benchmark's rows
# with it and without it (PYVKGRAD_FLOAT16_RTE=0: the integer rounding, the same bits), in
# turn, torch-free. From the project root with .gpu carried:
#     STEPS="fp tests rows" OPS=... PASSES="rte16 integer rte16b" \
#         bash benchmarks/investigations/h200_rte16.sh
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-fp tests rows} "
OPS=${OPS:-adam_optimizer,average_pooling_grad,max_pooling_grad}
python3 -m pyvkgrad info | grep -i -E "^device|float16|same bits" | tee $OUT/info.txt
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; \
  PYVKGRAD_FLOAT16_RTE=0 run fingerprint.integer 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.integer.txt; }
[[ $steps == *" tests "* ]] && { run tests 250 python3 -m pytest -q -p no:cacheprovider \
  ${TESTS:-tests/test_correctly_rounded.py}; tail -3 $OUT/tests.txt; }
if [[ $steps == *" rows "* ]]; then
  for pass in ${PASSES:-rte16 integer rte16b}; do
    [ $pass = integer ] && export PYVKGRAD_FLOAT16_RTE=0 || unset PYVKGRAD_FLOAT16_RTE
    run rows.$pass 200 python3 benchmarks/run.py --ops $OPS --no-torch --repeat 20 \
      --out $OUT/rows.$pass
    grep -h "^[A-Z_]* .*float16\|copy roofline" $OUT/rows.$pass.txt
  done
  rm -rf $OUT/rows.rte16 $OUT/rows.integer $OUT/rows.rte16b
fi
