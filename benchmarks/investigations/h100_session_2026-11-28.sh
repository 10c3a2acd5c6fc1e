# The 2026-11-28 session's last lent-GPU run: the fingerprints (BATCH_NORMALIZATION_TRAINING,
# the pooling tiles, ROI_ALIGN_GRAD's culling and dROI), the benchmark rows of the operators
# that changed beside PyTorch's CUDA backward, then issue 33's IREE peer group. Run from the
# project root with .gpu carried (with .gpu/wheels/iree_base_runtime-3.13.0-cp312-*.whl):
#     bash benchmarks/investigations/h100_session_2026-11-28.sh        (results under $OUT)
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info 2>&1 | tee $OUT/info.txt | head -3
timeout 120 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json \
    > $OUT/fingerprint-check.txt 2>&1; echo "fingerprint rc=$?"; head -3 $OUT/fingerprint-check.txt
timeout 240 python3 benchmarks/run.py --cuda-first --repeat 20 --ops \
    batch_normalization_training,average_pooling_grad,max_pooling_grad,roi_align_grad \
    --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | tail -22
ITIMEOUT=${ITIMEOUT:-200} STEPS=iree timeout 230 bash benchmarks/h100_issue33.sh; echo "iree rc=$?"
tail -30 $OUT/log.txt 2>/dev/null
