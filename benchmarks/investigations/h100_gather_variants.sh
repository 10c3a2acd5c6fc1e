# One lent-GPU run for issue 13 (ResampleGrad gather speed), from the project root:
#   the ResampleGrad tests on the GPU (they check the walk kernels bitwise against
#   resample_grad_gather on the device itself), then benchmarks/investigations/gather_variants.py (every
#   variant bitwise against today's kernel on the benchmark shapes, timed next to the
#   same-bytes copy roofline). About 4 minutes on a fresh H100 (1 of them building kp).
# Where pyvkgrad is installed otherwise (a wheel with its own Kompute), replace the first line
# by that install step: the rest needs only an importable pyvkgrad.
source benchmarks/gpu_setup.sh || exit 1
python3 -m pyvkgrad info > $OUT/info.txt 2>&1
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_resample_grad.py \
  > $OUT/pytest-resample.txt 2>&1
timeout 330 python3 benchmarks/investigations/gather_variants.py --out $OUT \
  > $OUT/gather-variants-summary.txt 2> $OUT/gather-variants-progress.txt
head -4 $OUT/info.txt; tail -3 $OUT/pytest-resample.txt; cat $OUT/gather-variants-summary.txt
