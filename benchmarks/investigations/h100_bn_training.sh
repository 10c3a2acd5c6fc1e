# One lent-GPU run for BATCH_NORMALIZATION_TRAINING (issue 30): its plan variants and kernel
# parts, the benchmark beside PyTorch's CUDA training batch_norm, and the fingerprint check
# (the same bits as lavapipe). Run from the project root with .gpu carried:
#     bash benchmarks/investigations/h100_bn_training.sh     (results under $OUT)
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info 2>&1 | tee $OUT/info.txt | head -3
timeout 200 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json \
    > $OUT/fingerprint-check.txt 2>&1; echo "fingerprint rc=$?"; tail -5 $OUT/fingerprint-check.txt
timeout 200 python3 benchmarks/investigations/bn_training_variants.py --cuda-first --repeat 20 \
    > $OUT/variants.txt 2>&1; echo "variants rc=$?"; cat $OUT/variants.txt
timeout ${BENCH_TIMEOUT:-150} python3 benchmarks/run.py --cuda-first --repeat 20 \
    --ops ${BENCH_OPS:-batch_normalization_training} --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | tail -20
