# One lent-GPU run for issue 29's BatchNorm grads on the exact sums, and issue 33's warm-up and
# host figures. From the project root with .gpu carried (and .old-main: `git archive` of the
# commit before, pyvkgrad and benchmarks/, for the same-run comparison; optional):
#     bash benchmarks/investigations/h100_bn_grads_exact.sh      (results under $OUT)
# Steps: the fingerprint check (the same bits as lavapipe); the BatchNorm grad rows now, before
# (.old-main) and now again, with --cuda-first; ReLU grad's rows in a torch-free process and
# with --cuda-first; the host-overhead and round-trip groups; with STEPS naming `parts`, the
# grads' parts and plan variants (bn_grad_variants.py). (Run 2 of
# results/h200-2026-11-28-bn-grads-exact/ tried a 0.3 s copy warm-up before each case instead
# of --cuda-first: no change, so the benchmark has none.)
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
python3 -m pyvkgrad info > $OUT/info.txt 2>&1
run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > $OUT/$name.txt 2>&1
  echo "== $name rc=$? in $((SECONDS - t0)) s"
}
[[ " ${STEPS:-fp bn relu host} " == *" fp "* ]] && {
  run fingerprint 200 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json
  tail -3 $OUT/fingerprint.txt; }
if [[ " ${STEPS:-fp bn relu host} " == *" bn "* ]]; then
  run bn-new 200 python3 benchmarks/run.py --cuda-first --repeat 20 --ops ${BN_OPS:-bn} --out $OUT/bn-new
  if [ -d .old-main ]; then
    cp pyvkgrad/_kompute.*.so .old-main/pyvkgrad/
    (cd .old-main && export PYTHONPATH=$PWD && run bn-old 200 python3 benchmarks/run.py --cuda-first \
       --repeat 20 --ops ${BN_OPS:-bn} --no-torch --out $OUT/bn-old)
  fi
  run bn-new2 200 python3 benchmarks/run.py --cuda-first --repeat 20 --ops ${BN_OPS:-bn} --no-torch \
    --out $OUT/bn-new2
  grep -h "^BATCH" $OUT/bn-new.txt $OUT/bn-old.txt $OUT/bn-new2.txt
fi
if [[ " ${STEPS:-fp bn relu host} " == *" parts "* ]]; then
  run parts 300 python3 benchmarks/investigations/bn_grad_variants.py --cuda-first --repeat 10
  cat $OUT/parts.txt
fi
if [[ " ${STEPS:-fp bn relu host} " == *" relu "* ]]; then
  run relu-plain 150 python3 benchmarks/run.py --repeat 20 --ops relu --no-torch \
    --out $OUT/relu-plain
  run relu-cuda 150 python3 benchmarks/run.py --cuda-first --repeat 20 --ops relu --no-torch \
    --out $OUT/relu-cuda
  grep -h "^ACTIVATION" $OUT/relu-plain.txt $OUT/relu-cuda.txt
fi
if [[ " ${STEPS:-fp bn relu host} " == *" host "* ]]; then
  run host 150 python3 benchmarks/run.py --ops overhead,roundtrip --out $OUT/host
  grep -v "^\[" $OUT/host.txt | tail -25
fi
rm -f $OUT/*/results.png
