# Lent-GPU run for issue 13's closing figures, from the project root with .gpu carried: the BN
# tests on the H100 (h100_bn_prelude.sh), benchmarks/investigations/dispatch_floor.py, then the benchmark
# (benchmarks/run.py, every case in its own process) for OPS (default: every operator and
# group). With SUITE=1 instead of the benchmark: the whole suite, then the whole suite under
# the validation layer's synchronization checks.
source benchmarks/investigations/h100_bn_prelude.sh
if [ -n "$SUITE" ]; then
  timeout 280 python3 -m pytest -q -p no:cacheprovider tests > $OUT/pytest-all.txt 2>&1
  echo "suite rc=$?"; tail -1 $OUT/pytest-all.txt
  ( dpkg -x .gpu/vvl/vulkan-validationlayers_*.deb / && ldconfig \
    && VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d timeout 280 tools/validate -q \
       -p no:cacheprovider ) > $OUT/validate-all.txt 2>&1
  echo "validate rc=$?"; tail -4 $OUT/validate-all.txt
  exit 0
fi
timeout 60 python3 benchmarks/investigations/dispatch_floor.py > $OUT/floor.txt 2>&1
echo "floor rc=$?"; cut -c1-400 $OUT/floor.txt
timeout ${BENCH_TIMEOUT:-420} python3 benchmarks/run.py --isolate --repeat 20 ${OPS:+--ops $OPS} \
  --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | cut -c1-200 | tail -70
