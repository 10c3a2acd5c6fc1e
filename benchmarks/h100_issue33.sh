# Issue 33's lent-GPU run, from the project root with .gpu/ carried (benchmarks/gpu_setup.sh
# says what it holds; for IREE also .gpu/wheels/iree_base_runtime-3.13.0-cp312-*.whl):
#     bash benchmarks/h100_issue33.sh            (OUT set by the device tool; else ./bench-out)
# Steps, each under its own timeout (about 15 minutes in all at most: more than one device-tool
# call allows, so run it in parts: STEPS, default "groups kernels host_overhead f16_process
# iree", names the steps to run, e.g. STEPS=iree): the benchmark's groups
# overhead, roundtrip, chain (medians; PyTorch in its own process); the kernel rows (KOPS,
# default relu,resample,bn: every case in a fresh torch-free process, PyTorch's side in
# another); investigations/host_overhead.py; investigations/f16_process.py; the IREE group
# from benchmarks/iree-cache/ampere (no compiler needed). At most 6 files under $OUT:
# groups.json, kernels.json, host_overhead.json, f16_process.json, iree.json, log.txt.
# Off NVIDIA (a dry run on lavapipe: QUICK=1) gpu_setup.sh is skipped.
OUT=${OUT:-bench-out}
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: > "$LOG"
Q=${QUICK:+--quick}
if command -v nvidia-smi > /dev/null 2>&1; then
  source benchmarks/gpu_setup.sh || { echo "gpu_setup failed" | tee -a "$LOG"; exit 1; }
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,pstate --format=csv >> "$LOG"
else
  echo "no nvidia-smi: gpu_setup.sh skipped (dry run)" | tee -a "$LOG"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
fi
PY=${PYTHON:-python3}
if ls .gpu/wheels/iree_base_runtime-*.whl > /dev/null 2>&1 \
    && ! $PY -c "import iree.runtime" 2> /dev/null; then
  $PY -m pip install -q --no-index --no-deps --target /tmp/iree-site .gpu/wheels/iree_base_runtime-*.whl \
    >> "$LOG" 2>&1 && export PYTHONPATH=$PYTHONPATH:/tmp/iree-site
fi
STEPS=" ${STEPS:-groups kernels host_overhead f16_process iree} "
step() {  # step NAME SECONDS COMMAND...: runs it (if STEPS names it), logs its output and status
  local name=$1 limit=$2; shift 2
  [[ "$STEPS" == *" $name "* ]] || return 0
  echo "== $name (timeout ${limit}s): $*" >> "$LOG"
  local t0=$SECONDS
  timeout "$limit" "$@" >> "$LOG" 2>&1
  echo "== $name rc=$? in $((SECONDS - t0)) s" | tee -a "$LOG"
}
step groups 90 $PY benchmarks/run.py $Q --ops overhead,roundtrip,chain --out /tmp/i33-groups
cp /tmp/i33-groups/results.json "$OUT/groups.json" 2> /dev/null
step kernels ${KTIMEOUT:-210} $PY benchmarks/run.py $Q --isolate --repeat 20 \
  --ops ${KOPS:-relu,resample,bn} --out /tmp/i33-kernels
cp /tmp/i33-kernels/results.json "$OUT/kernels.json" 2> /dev/null
step host_overhead 75 $PY benchmarks/investigations/host_overhead.py $Q --out "$OUT"
step f16_process 75 $PY benchmarks/investigations/f16_process.py $Q --out "$OUT"
step iree ${ITIMEOUT:-420} $PY benchmarks/run.py $Q --repeat 20 --ops iree --no-torch --out /tmp/i33-iree
$PY -c 'import json, sys; r = json.load(open(sys.argv[1])); json.dump(
  {k: r[k] for k in ("date", "device", "driver", "wait", "iree") if k in r}, open(sys.argv[2], "w"),
  indent=1)' /tmp/i33-iree/results.json "$OUT/iree.json" 2>> "$LOG"
grep -v "^\[\|^    " "$LOG" | cut -c1-220 | tail -80
