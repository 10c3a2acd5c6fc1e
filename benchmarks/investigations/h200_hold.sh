# One lent-GPU run for issue 33 with the benchmark's hold (each timing after 1 s of steady GPU
# work, run.py's default on a GPU). From the project root with .gpu carried:
#     STEPS="fp host relu rows" bash benchmarks/investigations/h200_hold.sh  (results under $OUT)
# Steps: clock, gpu_clock.py (host overhead cold, after 0.1-3 s of steady work and 0-3 s after
# it, nvidia-smi sampling the SM clock every 50 ms) and the overhead and round-trip groups
# without the hold (--hold 0) and with it; tests, pytest on TESTS (files); fp, the fingerprint
# check; host, the overhead,
# round-trip and chain groups with PyTorch's side; relu and rows, kernel rows in a torch-free
# process (rows: OPS, default bn,batch_normalization_training), and with .old-main or .variant
# carried (a `git archive` of pyvkgrad, benchmarks and tests/fingerprints.json of another
# commit) that tree's rows and fingerprints; iree, the IREE group (the runtime's wheel in
# .gpu/wheels).
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-fp host relu} "
if [[ $steps == *" clock "* ]]; then
  run clock 150 python3 benchmarks/investigations/gpu_clock.py --out $OUT/clock
  grep -v "^{" $OUT/clock.txt | tail -16
  run host-nohold 150 python3 benchmarks/run.py --ops overhead,roundtrip --no-torch --hold 0 \
    --out $OUT/host-nohold
  run host-hold 200 python3 benchmarks/run.py --ops overhead,roundtrip --out $OUT/host-hold
  grep -h "clocks\|^host\|^round" $OUT/host-nohold.txt $OUT/host-hold.txt
fi
[[ $steps == *" tests "* ]] && { run tests 300 python3 -m pytest -q -p no:cacheprovider $TESTS
  tail -15 $OUT/tests.txt; }
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
if [[ $steps == *" rows "* ]]; then
  run rows 250 python3 benchmarks/run.py --ops ${OPS:-bn,batch_normalization_training} --no-torch --repeat 20 --out $OUT/rows
  for tree in .old-main .variant; do  # other trees carried for a same-run comparison
    [ -d $tree ] || continue
    in_tree $tree run rows$tree 250 python3 benchmarks/run.py \
      --ops ${OPS:-bn,batch_normalization_training} --no-torch --repeat 20 --out $OUT/rows$tree
    [ -f $tree/tests/fingerprints.json ] && in_tree $tree run fingerprint$tree 200 \
      python3 -m pyvkgrad fingerprint --check tests/fingerprints.json
  done
  grep -h "clocks after the copy\|^[A-Z_]* \|copy roofline\|cases give" $OUT/rows*.txt $OUT/fingerprint*.txt
fi
if [[ $steps == *" iree "* ]]; then  # IREE's runtime from .gpu/wheels, the committed modules
  python3 -m pip install -q --no-index --no-deps --target /tmp/iree-site .gpu/wheels/iree_base_runtime-*.whl \
    > $OUT/iree-install.txt 2>&1
  PYTHONPATH=$PYTHONPATH:/tmp/iree-site run iree 420 python3 benchmarks/run.py --ops iree --no-torch \
    --repeat 20 --out $OUT/iree
  grep -v "^\[\|^    " $OUT/iree.txt | tail -30
fi
rm -f $OUT/*/results.png
