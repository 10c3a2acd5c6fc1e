# One lent-GPU run for BATCH_NORMALIZATION_GRAD in place over X (the sums kernel's WRITE_DX
# stores after the chunk's loads): bn_in_place.py in .old-main (carried: a `git archive` of
# b4504d9) and in this tree, the BatchNorm and device-contract tests, the fingerprints, and the
# BatchNorm grad rows of both trees. From the project root with .gpu and .old-main carried.
source benchmarks/investigations/h200_prelude.sh
cp benchmarks/investigations/bn_in_place.py .old-main/benchmarks/
in_tree .old-main run in_place.old-main 120 python3 benchmarks/bn_in_place.py --repeat 20; cat $OUT/in_place.old-main.txt
run in_place 120 python3 benchmarks/investigations/bn_in_place.py --repeat 20; cat $OUT/in_place.txt
N=""; python3 -c "import xdist" 2>/dev/null && N="-n 8"
run tests 200 python3 -m pytest -q -p no:cacheprovider $N tests/test_batch_normalization_grad.py tests/test_device_contract.py; tail -3 $OUT/tests.txt
run fingerprint 200 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json; tail -1 $OUT/fingerprint.txt
OPS=batch_normalization_grad
run rows 200 python3 benchmarks/run.py --ops $OPS --repeat 20 --no-torch --out $OUT/rows; grep -h "^[A-Z_]* \|copy roofline" $OUT/rows.txt
in_tree .old-main run rows.old-main 200 python3 benchmarks/run.py --ops $OPS --no-torch --repeat 20 --out $OUT/rows.old-main; grep -h "^[A-Z_]* \|copy roofline" $OUT/rows.old-main.txt
rm -rf $OUT/rows $OUT/rows.old-main
