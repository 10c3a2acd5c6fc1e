# One lent-GPU run for issue 13's round-trip and host-overhead targets (set up by
# benchmarks/gpu_setup.sh): the round-trip diagnostic with its variants, the test suite on the
# GPU, the benchmark's roundtrip and overhead groups, and the validation pass. Logs and JSON
# under $OUT. Run from the project root with .gpu carried:  bash benchmarks/investigations/h100_roundtrip.sh
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info 2>&1 | tee $OUT/info.txt | head -3
timeout 200 python3 benchmarks/investigations/roundtrip_parts.py --out $OUT > $OUT/parts.txt 2>&1
echo "parts rc=$?"; cat $OUT/parts.txt | cut -c1-400
timeout 300 python3 -m pytest -q -x -p no:cacheprovider -W ignore::RuntimeWarning tests \
    > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"; tail -4 $OUT/pytest.txt
timeout ${BENCH_TIMEOUT:-150} python3 benchmarks/run.py --isolate --repeat 20 \
    --ops ${BENCH_OPS:-roundtrip,overhead} --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | tail -20
if [ -n "${VALIDATE:-}" ]; then
  dpkg -x .gpu/vvl/*.deb / && ldconfig
  export VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
  timeout ${VALIDATE} tools/validate -q > $OUT/validate.txt 2>&1; echo "validate rc=$?"
  tail -5 $OUT/validate.txt
fi
