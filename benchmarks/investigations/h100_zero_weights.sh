# Lent-GPU run for issue 13's float16 column pairs: zero weights (ZERO_WEIGHTS) and aligned dY
# words (DY_ALIGNED) in the walk kernels (include/resample_grad_walk.glsl), from the project
# root with .gpu carried. The ResampleGrad tests on the H100 (every walk setting bitwise against
# the gather, the non-finite fallback), then the walk variants on the NCHW cases. `final`: the
# tests and the benchmark's ResampleGrad rows with the defaults the variants chose.
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info > $OUT/info.txt 2>&1
if [ "$1" = final ]; then  # with the tuned defaults: the tests, then the benchmark's rows
  timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_resample_grad.py \
    > $OUT/pytest-resample.txt 2>&1
  echo "pytest rc=$?"; tail -1 $OUT/pytest-resample.txt
  timeout 360 python3 benchmarks/run.py --isolate --repeat 20 --ops resample_grad \
    --out $OUT/bench > $OUT/bench.txt 2>&1
  echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | cut -c1-200 | tail -45
  exit
fi
timeout 200 python3 -m pytest -q -p no:cacheprovider tests/test_resample_grad.py \
  > $OUT/pytest-resample.txt 2>&1
echo "pytest rc=$?"; tail -3 $OUT/pytest-resample.txt
variants=gather,walk,walk-r2,walk-r4,walk-r8,walk-select,walk-pred,walk-zw,walk-align
variants=$variants,walk-zw-align,walk-zwa-r2,walk-zwa-r4,walk-zwa-r8,walk-zwa-loop,walk-cols2-zw
timeout 300 python3 benchmarks/investigations/gather_variants.py --out $OUT --cases ${1:-1,3,5,7,9,11,13,15,2,10} \
  --variants $variants > $OUT/gather-variants-summary.txt 2> $OUT/gather-variants-progress.txt
echo "variants rc=$?"; cat $OUT/gather-variants.txt 2>/dev/null || cat $OUT/gather-variants-summary.txt
