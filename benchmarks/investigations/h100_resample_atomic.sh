# One lent-GPU run: build the patched kp (float atomics enabled), run the suite on the GPU,
# then the ResampleGrad benchmark (gather and the native-atomic kernel, float32 and float16).
source benchmarks/gpu_setup.sh || exit 1
python3 -m pyvkgrad info > $OUT/info.txt 2>&1
timeout 200 python3 -m pytest -q -p no:cacheprovider tests > $OUT/pytest.txt 2>&1
timeout 300 python3 -m pyvkgrad bench --isolate --ops resample --repeat 20 --out $OUT/resample \
  > $OUT/bench-resample.txt 2>&1
cat $OUT/info.txt; tail -3 $OUT/pytest.txt; grep -i "resample\|operator" $OUT/bench-resample.txt | tail -20
