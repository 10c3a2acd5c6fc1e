# Sourced by the h200_*.sh runs (from the project root, .gpu carried, results under $OUT):
# builds the runtime (benchmarks/gpu_setup.sh, its log in $OUT/setup.log), records the GPU and
# its clocks in $OUT/gpu.txt, and defines
#   run NAME SECONDS COMMAND...   COMMAND's output to $OUT/NAME.txt under a time limit, then a
#                                 line with its exit status and seconds;
#   in_tree TREE COMMAND...       COMMAND inside a carried tree (a `git archive` of pyvkgrad,
#                                 benchmarks and tests/fingerprints.json of another commit, e.g.
#                                 .old-main), with this checkout's runtime and timing code, so
#                                 both trees are timed alike.
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,pstate --format=csv | tee $OUT/gpu.txt
run() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > $OUT/$name.txt 2>&1
  echo "== $name rc=$? in $((SECONDS - t0)) s"
}
in_tree() {
  local tree=$1; shift
  cp pyvkgrad/_kompute.*.so $tree/pyvkgrad/
  cp benchmarks/bench_timing.py benchmarks/run.py $tree/benchmarks/
  (cd $tree && export PYTHONPATH=$PWD && "$@")
}
# The steps most runs share: the tests named in $1 on the device (a -k expression must be one
# word), the fingerprint check, and the benchmark's rows of the operators in $1 with
# PyTorch's side.
tests_step() {
  run tests 200 python3 -m pytest -q -p no:cacheprovider -x $1; tail -2 $OUT/tests.txt
}
fp_step() {
  run fingerprint 200 python3 -m pyvkgrad fingerprint --check tests/fingerprints.json
  tail -1 $OUT/fingerprint.txt
}
rows_step() {
  run rows 300 python3 benchmarks/run.py --ops $1 --repeat 20 --out $OUT/rows
  grep -h "^[A-Z_]*  \|copy roofline\|fill" $OUT/rows.txt | cut -c1-170
}
