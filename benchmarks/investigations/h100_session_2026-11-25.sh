# The lent-H100 runs of 2026-11-25 (issues 27, 28, 30, 33), from the project root with .gpu/
# carried (gpu_setup.sh; .gpu/wheels: pytest, pytest-xdist, hypothesis, iree_base_runtime for
# cp312). STEPS names what to run, in order (default: every step):
#   tests     the tests a GPU changes: fork, one lane under a loop limit, clip, random
#   groups    the benchmark's overhead, roundtrip and chain groups (medians)
#   host      investigations/host_overhead.py (a small call's host time, by part)
#   f16       investigations/f16_process.py (ReLU grad per process variant, clocks)
#   kernels   the kernel rows with CUDA started first (as RESULTS.md's earlier tables)
#   nocuda    the kernel rows in a process without CUDA (what a numpy user gets)
#   iree      IREE as a peer, from benchmarks/iree-cache/ampere
# KOPS: the operators of `kernels`/`nocuda` (default relu,resample,bn,random_generator).
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
STEPS=${STEPS:-tests groups host f16 kernels nocuda iree}
KOPS=${KOPS:-relu,resample,bn,random_generator}
source benchmarks/gpu_setup.sh > "$OUT/setup.txt" 2>&1 || { tail -30 "$OUT/setup.txt"; exit 1; }
python3 -m pip install -q --no-index --find-links .gpu/wheels pytest pytest-xdist hypothesis \
  >> "$OUT/setup.txt" 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/iree-site \
  .gpu/wheels/iree_base_runtime-*.whl >> "$OUT/setup.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,pstate --format=csv \
  >> "$OUT/setup.txt"
for step in $STEPS; do
  t0=$SECONDS
  case $step in
    tests) timeout 150 python3 -m pytest -q -n 8 -p no:cacheprovider tests/test_hardening.py \
             tests/test_random_generator.py tests/test_activation_relu_grad.py \
             tests/test_batch_normalization_grad.py -k "fork or one_lane or random" \
             > "$OUT/tests.txt" 2>&1; tail -3 "$OUT/tests.txt" ;;
    groups) timeout 120 python3 benchmarks/run.py --ops overhead,roundtrip,chain \
              --out /tmp/s-groups > "$OUT/groups-log.txt" 2>&1
            cp /tmp/s-groups/results.json "$OUT/groups.json" ;;
    host) timeout 100 python3 benchmarks/investigations/host_overhead.py --out "$OUT" \
            > "$OUT/host-log.txt" 2>&1 ;;
    f16) timeout 100 python3 benchmarks/investigations/f16_process.py --out "$OUT" \
           > "$OUT/f16-log.txt" 2>&1 ;;
    kernels) timeout 240 python3 benchmarks/run.py --cuda-first --repeat 20 --ops "$KOPS" \
               --out /tmp/s-k > "$OUT/kernels-log.txt" 2>&1
             cp /tmp/s-k/results.json "$OUT/kernels-cuda-first.json" ;;
    nocuda) timeout 240 python3 benchmarks/run.py --no-torch --repeat 20 --ops "$KOPS" \
              --out /tmp/s-n > "$OUT/nocuda-log.txt" 2>&1
            cp /tmp/s-n/results.json "$OUT/kernels-no-cuda.json" ;;
    iree) PYTHONPATH=$PYTHONPATH:/tmp/iree-site timeout 90 python3 benchmarks/run.py --ops iree \
            --no-torch --out /tmp/s-i > "$OUT/iree-log.txt" 2>&1
          cp /tmp/s-i/results.json "$OUT/iree.json" ;;
  esac
  echo "== $step rc=$? in $((SECONDS - t0)) s"
done
nvidia-smi --query-gpu=clocks.sm,clocks.mem,pstate --format=csv >> "$OUT/setup.txt"
