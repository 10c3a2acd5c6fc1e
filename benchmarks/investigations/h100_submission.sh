# One lent-GPU run: build the patched kp, then measure submission cost and the recorded chain
# with fence polling off and on, and run the test suite on the GPU.
source benchmarks/gpu_setup.sh || exit 1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests > $OUT/pytest.txt 2>&1
timeout 100 python3 benchmarks/investigations/submit_cost.py > $OUT/submit_cost.txt 2>&1
for spin in 0 2000; do
  PYVKGRAD_WAIT_SPIN_US=$spin timeout 120 python3 -m pyvkgrad bench --ops chain,overhead --repeat 200 \
    --out $OUT/spin$spin > $OUT/bench-spin$spin.txt 2>&1
done
tail -3 $OUT/pytest.txt; cat $OUT/submit_cost.txt; grep -h -A1 "chain\|overhead" $OUT/bench-spin*.txt | tail -30
