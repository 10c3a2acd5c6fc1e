# One lent-GPU run for the fast cr_div and cr_sqrt (issue 30; set up by benchmarks/gpu_setup.sh):
# their bit-for-bit test against numpy (the previous functions and skewed estimates too) and
# the tests of their main users on the GPU, the fingerprints, then cr_throughput.py (ADAM_OPTIMIZER
# and the cr_ops kernel, previous against current, bits compared) and the benchmark's Adam
# rows beside PyTorch's fused CUDA Adam; logs and JSON under $OUT. Run from the project root
# with .gpu carried:  bash benchmarks/investigations/h100_cr_throughput.sh
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info 2>&1 | tee $OUT/info.txt | head -3
timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/test_correctly_rounded.py \
    tests/test_adam_optimizer.py tests/test_batch_normalization_training.py \
    > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"; tail -3 $OUT/pytest.txt
python3 -m pyvkgrad fingerprint --check tests/fingerprints.json > $OUT/fingerprint.txt 2>&1
echo "fingerprint rc=$?"; tail -2 $OUT/fingerprint.txt
timeout 200 python3 benchmarks/investigations/cr_throughput.py --repeat ${REPEAT:-20} \
    --out $OUT/cr_throughput.json > $OUT/cr_throughput.txt 2>&1
echo "cr_throughput rc=$?"; cat $OUT/cr_throughput.txt
timeout 150 python3 -m pyvkgrad bench --cuda-first --repeat 20 --ops adam_optimizer \
    --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | tail -12
