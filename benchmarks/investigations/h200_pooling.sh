# One lent-GPU run for the pooling grads' kernels: the division and winners-pass tests, the
# fingerprints, pooling_ablation.py on the SPIR-V it built into
# benchmarks/investigations/pooling-spirv (carry it: not committed) and the pooling rows,
# torch-free. From the project root with .gpu carried:
#     bash benchmarks/investigations/h200_pooling.sh
source benchmarks/investigations/h200_prelude.sh
run tests 150 python3 -m pytest -q -p no:cacheprovider \
  tests/test_pooling_grad_tiles.py::test_the_division_by_every_count \
  tests/test_pooling_grad_tiles.py::test_the_winners_pass_by_rows; tail -1 $OUT/tests.txt
run fingerprint 100 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json
tail -1 $OUT/fingerprint.txt
run pooling_ablation 150 python3 benchmarks/investigations/pooling_ablation.py \
  --spirv benchmarks/investigations/pooling-spirv --out $OUT/pooling_ablation.json
cat $OUT/pooling_ablation.txt
run rows 150 python3 benchmarks/run.py --ops average_pooling_grad,max_pooling_grad --no-torch \
  --repeat 20 --out $OUT/rows
grep -h "^[A-Z_]* " $OUT/rows.txt; rm -rf $OUT/rows
