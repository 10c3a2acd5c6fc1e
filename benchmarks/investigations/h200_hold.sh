# One lent-GPU run for issue 33 with the benchmark's hold (each timing after 1 s of steady GPU
# work, run.py's default on a GPU). From the project root with .gpu carried:
#     STEPS="fp host relu bn" bash benchmarks/investigations/h200_hold.sh   (results under $OUT)
# Steps: fp, the fingerprint check; host, the overhead, round-trip and chain groups with
# PyTorch's side; relu and bn, those kernel rows in a torch-free process (bn: BN_OPS, default
# bn,batch_normalization_training), and with .old-main carried the same rows of that tree.
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,pstate --format=csv | tee $OUT/gpu.txt
run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > $OUT/$name.txt 2>&1
  echo "== $name rc=$? in $((SECONDS - t0)) s"
}
steps=" ${STEPS:-fp host relu} "
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json
  tail -2 $OUT/fingerprint.txt; }
if [[ $steps == *" host "* ]]; then
  run host 240 python3 benchmarks/run.py --ops overhead,roundtrip,chain --out $OUT/host
  grep -h "clocks\|^host\|^round\|^chain\|^fence" $OUT/host.txt
fi
if [[ $steps == *" relu "* ]]; then
  run relu 200 python3 benchmarks/run.py --ops relu --no-torch --repeat 20 --out $OUT/relu
  grep -h "clocks after the copy\|^ACTIVATION\|copy roofline" $OUT/relu.txt
fi
if [[ $steps == *" bn "* ]]; then
  run bn 250 python3 benchmarks/run.py --ops ${BN_OPS:-bn,batch_normalization_training} --no-torch --repeat 20 --out $OUT/bn
  if [ -d .old-main ]; then
    cp pyvkgrad/_kompute.*.so .old-main/pyvkgrad/
    cp benchmarks/bench_timing.py benchmarks/run.py .old-main/benchmarks/  # the same timing
    (cd .old-main && export PYTHONPATH=$PWD && run bn-old 250 python3 benchmarks/run.py \
       --ops ${BN_OPS:-bn,batch_normalization_training} --no-torch --repeat 20 --out $OUT/bn-old)
  fi
  grep -h "clocks after the copy\|^BATCH\|copy roofline" $OUT/bn.txt $OUT/bn-old.txt
fi
rm -f $OUT/*/results.png
