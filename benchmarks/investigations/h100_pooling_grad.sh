# One lent-GPU run for the pooling grads' tiles (set up by benchmarks/gpu_setup.sh): their tests
# and the fingerprints on the GPU, the tile shapes against the per-element gather
# (pooling_grad_variants.py: time, bits, SPIR-V), then the benchmark's pooling rows beside
# PyTorch's CUDA backward; logs and JSON under $OUT. Run from the project root with .gpu
# carried:  bash benchmarks/investigations/h100_pooling_grad.sh
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info 2>&1 | tee $OUT/info.txt | head -3
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/test_pooling_grad_tiles.py \
    tests/test_pooling_grad.py > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"; tail -3 $OUT/pytest.txt
python3 -m pyvkgrad fingerprint --check tests/fingerprints.json > $OUT/fingerprint.txt 2>&1
echo "fingerprint rc=$?"; tail -2 $OUT/fingerprint.txt
timeout 150 python3 benchmarks/investigations/pooling_grad_variants.py --repeat 20 \
    --widths 0,4,8 --heights ${HEIGHTS:-2,4} --out $OUT/variants.json \
    > $OUT/variants.txt 2>&1; echo "variants rc=$?"; cat $OUT/variants.txt
timeout 200 python3 -m pyvkgrad bench --cuda-first --repeat 20 \
    --ops average_pooling_grad,max_pooling_grad --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | tail -20
