# Lent-GPU run for issue 13's one-pass batch-normalization reductions (FINISH in
# shaders/batch_normalization_grad_partials.comp: stage 1 finishes each channel where there are
# ONE_PASS_MIN_GROUPS channel groups), from the project root with .gpu carried: the BN tests on
# the H100, then under the validation layer (synchronization), the one-pass sweep
# (benchmarks/investigations/bn_grad_parts.py --one-pass; skipped with `final`), then the benchmark's BN rows
# next to PyTorch.
source benchmarks/investigations/h100_bn_prelude.sh
validate_bn
[ "$1" = final ] || timeout 150 python3 benchmarks/investigations/bn_grad_parts.py --one-pass --out $OUT > $OUT/one-pass.txt 2>&1
echo "one-pass rc=$?"
[ "$1" = final ] || python3 benchmarks/investigations/bn_grad_parts.py --summary $OUT/one-pass.txt
timeout 150 python3 benchmarks/run.py --isolate --repeat 20 --ops bn --out $OUT/bench \
  > $OUT/bench.txt 2>&1
echo "bench rc=$?"; grep -v "^\[" $OUT/bench.txt | cut -c1-200 | tail -12
