# Lent-GPU runs for issue 13's linear gather with row sums (include/resample_grad.glsl's
# ROW_SUM), from the project root with .gpu carried. Default: the ResampleGrad tests on the
# H100 (the documented arithmetic, the walk kernels bitwise against the gather), the walk
# variants on the linear cases (which chose _WALK_TUNED's settings). `final`: which fma the
# device has (benchmarks/investigations/fma_probe.py), then the benchmark's ResampleGrad rows next to PyTorch.
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info > $OUT/info.txt 2>&1
if [ "$1" = final ]; then
  python3 benchmarks/investigations/fma_probe.py 2>&1 | tee $OUT/fma-probe.txt
  timeout 400 python3 benchmarks/run.py --isolate --repeat 20 --ops resample_grad \
    --out $OUT/bench > $OUT/bench.txt 2>&1
  echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | cut -c1-200 | tail -45
  exit
fi
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_resample_grad.py \
  > $OUT/pytest-resample.txt 2>&1
echo "pytest rc=$?"; tail -3 $OUT/pytest-resample.txt
timeout 220 python3 benchmarks/investigations/gather_variants.py --out $OUT --cases 2,3,6,7,10,11,14,15,18,19 \
  > $OUT/gather-variants-summary.txt 2> $OUT/gather-variants-progress.txt
echo "variants rc=$?"; cat $OUT/gather-variants-summary.txt
