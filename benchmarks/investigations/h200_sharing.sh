# One lent-GPU run for the shared pipelines (c7e7c38): pipeline_sharing.py in this tree and in
# .old-main (carried: a `git archive` of b4504d9), the fingerprints, and the suites that record
# many-slice plans. From the project root with .gpu and .old-main carried.
source benchmarks/investigations/h200_prelude.sh
run sharing 120 python3 benchmarks/investigations/pipeline_sharing.py --out $OUT/sharing.json; cat $OUT/sharing.txt
cp benchmarks/investigations/pipeline_sharing.py .old-main/benchmarks/
in_tree .old-main run sharing.old-main 200 python3 benchmarks/pipeline_sharing.py --out $OUT/sharing.old-main.json; cat $OUT/sharing.old-main.txt
run fingerprint 200 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json; tail -1 $OUT/fingerprint.txt
N=""; python3 -c "import xdist" 2>/dev/null && N="-n 8"
run tests 280 python3 -m pytest -q -p no:cacheprovider $N tests/test_device_contract.py tests/test_batch_normalization_grad.py tests/test_pooling_grad.py tests/test_device_state.py; tail -4 $OUT/tests.txt
