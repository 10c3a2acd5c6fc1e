# One lent-GPU run (set up by benchmarks/gpu_setup.sh): the test suite on the GPU, then the benchmark with
# every case in its own process; logs and JSON under $OUT. Run from the project root with .gpu
# carried:  bash benchmarks/investigations/h100_check.sh
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info 2>&1 | tee $OUT/info.txt | head -3
timeout 300 python3 -m pytest -q -x -p no:cacheprovider -W ignore::RuntimeWarning tests \
    > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"; tail -4 $OUT/pytest.txt
timeout ${BENCH_TIMEOUT:-260} python3 benchmarks/run.py --isolate --repeat 20 \
    --ops ${BENCH_OPS:-bn,resample,roundtrip,overhead} --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | tail -60
