# One lent-GPU run for the float16 stores and ADAM_OPTIMIZER's quick float16 step. From the
# project root with .gpu (and .old-main: a `git archive` of pyvkgrad, benchmarks and
# tests/fingerprints.json of the commit to compare with) carried:
#     STEPS="tests fp variants rows" bash benchmarks/investigations/h200_half.sh
# Steps: tests, pytest on TESTS; fp, the fingerprint check; variants, adam_variants.py on the
# SPIR-V it built into benchmarks/investigations/adam-spirv (carry it: it is not committed);
# rows, run.py on OPS with PyTorch's side (its own process), then .old-main's rows torch-free.
# (OLD_OPS: other operators for .old-main.)
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
run() {  # run NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > $OUT/$name.txt 2>&1
  echo "== $name rc=$? in $((SECONDS - t0)) s"
}
steps=" ${STEPS:-tests fp variants rows} "
OPS=${OPS:-adam_optimizer,average_pooling_grad,max_pooling_grad}
[[ $steps == *" tests "* ]] && { run tests 250 python3 -m pytest -q -p no:cacheprovider \
  ${TESTS:-tests/test_correctly_rounded.py tests/test_adam_optimizer.py}; tail -3 $OUT/tests.txt; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
[[ $steps == *" variants "* ]] && { run adam_variants 250 python3 \
  benchmarks/investigations/adam_variants.py --spirv benchmarks/investigations/adam-spirv \
  --out $OUT/adam_variants.json; cat $OUT/adam_variants.txt; }
if [[ $steps == *" rows "* ]]; then
  run rows 300 python3 benchmarks/run.py --ops $OPS --repeat 20 --out $OUT/rows
  grep -h "^[A-Z_]* \|copy roofline" $OUT/rows.txt
  if [ -d .old-main ]; then
    cp pyvkgrad/_kompute.*.so .old-main/pyvkgrad/
    cp benchmarks/bench_timing.py benchmarks/run.py .old-main/benchmarks/  # the same timing
    (cd .old-main && export PYTHONPATH=$PWD && run rows.old-main 300 python3 benchmarks/run.py \
       --ops ${OLD_OPS:-$OPS} --no-torch --repeat 20 --out $OUT/rows.old-main)
    grep -h "^[A-Z_]* \|copy roofline" $OUT/rows.old-main.txt
  fi
fi
rm -rf $OUT/rows $OUT/rows.old-main  # (the text has every row)
