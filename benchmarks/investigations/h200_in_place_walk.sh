# One lent-GPU run for a variant that was not kept (results/h200-2026-12-02-pipelines-in-place/
# README.md): the sums kernel's dX stores walking dY's offsets again (no offsets kept per
# element): BATCH_NORMALIZATION_GRAD rows first, then bn_in_place.py, the fingerprints and
# the BatchNorm grad tests. From the project root with .gpu carried.
source benchmarks/investigations/h200_prelude.sh
run rows 200 python3 benchmarks/run.py --ops batch_normalization_grad --repeat 20 --no-torch --out $OUT/rows; grep -h "^[A-Z_]* \|copy roofline" $OUT/rows.txt
rm -rf $OUT/rows
run in_place 120 python3 benchmarks/investigations/bn_in_place.py --repeat 20; cat $OUT/in_place.txt
run fingerprint 200 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json; tail -1 $OUT/fingerprint.txt
N=""; python3 -c "import xdist" 2>/dev/null && N="-n 8"
run tests 200 python3 -m pytest -q -p no:cacheprovider $N tests/test_batch_normalization_grad.py; tail -3 $OUT/tests.txt
