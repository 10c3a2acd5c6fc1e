# One lent-GPU run for issue 33: does holding the GPU busy raise the clock that host overhead
# runs at? From the project root with .gpu carried:
#     bash benchmarks/investigations/h200_clock.sh      (results under $OUT)
# Steps: gpu_clock.py (host overhead cold, after holds of 0.1-3 s, and after idle gaps, with
# nvidia-smi sampling the SM clock every 50 ms); the benchmark's overhead and round-trip groups
# as they are, and with --hold 1; ReLU grad's kernel rows with --hold 1 (torch-free process).
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,pstate --format=csv | tee $OUT/gpu.txt
run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > $OUT/$name.txt 2>&1
  echo "== $name rc=$? in $((SECONDS - t0)) s"
}
steps=" ${STEPS:-clock host relu} "
[[ $steps == *" clock "* ]] && { run clock 150 python3 benchmarks/investigations/gpu_clock.py --out $OUT/clock
  grep -v "^{" $OUT/clock.txt | tail -16; }
if [[ $steps == *" host "* ]]; then
  run host-nohold 150 python3 benchmarks/run.py --ops overhead,roundtrip --no-torch --out $OUT/host-nohold
  run host-hold 200 python3 benchmarks/run.py --ops overhead,roundtrip --hold 1 --out $OUT/host-hold
  grep -h "clocks\|^host\|^round" $OUT/host-nohold.txt $OUT/host-hold.txt
fi
if [[ $steps == *" relu "* ]]; then
  run relu-hold 200 python3 benchmarks/run.py --ops relu --no-torch --hold 1 --repeat 20 --out $OUT/relu-hold
  grep -h "clocks\|^ACTIVATION\|copy roofline" $OUT/relu-hold.txt
fi
rm -f $OUT/*/results.png
