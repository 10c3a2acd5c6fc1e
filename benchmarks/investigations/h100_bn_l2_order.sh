# Lent-GPU run for issue 13's BatchNorm L2 order and loads ahead (L2_ORDER and LOAD_BYTES_AHEAD
# in pyvkgrad/ops/_batch_normalization_plan.py), from the project root with .gpu carried: the BN
# tests on the H100, then `benchmarks/investigations/bn_grad_parts.py --l2-order` (SWEEP=--ahead: the loads
# ahead; each setting warm and cold, outputs bitwise against the first). With `final` instead:
# the BN tests under the validation layer, and the benchmark's BN rows next to PyTorch.
source benchmarks/investigations/h100_bn_prelude.sh
if [ "$1" = final ]; then
  validate_bn
  timeout 200 python3 benchmarks/run.py --isolate --repeat 20 --ops bn --out $OUT/bench \
    > $OUT/bench.txt 2>&1
  echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | cut -c1-200 | tail -14
  # ALL=1: the whole suite on the H100 too.
  if [ -n "$ALL" ]; then
    timeout 330 python3 -m pytest -q -p no:cacheprovider tests > $OUT/pytest-all.txt 2>&1
    echo "suite rc=$?"; tail -1 $OUT/pytest-all.txt
  fi
  exit 0
fi
timeout ${SWEEP_TIMEOUT:-200} python3 benchmarks/investigations/bn_grad_parts.py ${SWEEP:---l2-order} --out $OUT \
  > $OUT/sweep.txt 2>&1
echo "sweep rc=$?"
python3 benchmarks/investigations/bn_grad_parts.py --summary $OUT/sweep.txt
