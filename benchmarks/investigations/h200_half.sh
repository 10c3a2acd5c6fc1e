# One lent-GPU run for the float16 stores and ADAM_OPTIMIZER's quick float16 step. From the
# project root with .gpu (and .old-main: a `git archive` of pyvkgrad, benchmarks and
# tests/fingerprints.json of the commit to compare with) carried:
#     STEPS="tests fp variants rows" bash benchmarks/investigations/h200_half.sh
# Steps: tests, pytest on TESTS; fp, the fingerprint check; variants, adam_variants.py on the
# SPIR-V it built into benchmarks/investigations/adam-spirv (carry it: it is not committed);
# items, adam_items.py (ADAM_OPTIMIZER's items per invocation); newtensors, new_tensors.py
# (a pipeline compiled against one shared, patch part 15);
# random, random_variants.py (RANDOM_GENERATOR's blocks per invocation, RANDOM_BLOCKS, passes
# per invocation, RANDOM_PASSES, and where the new state is stored, RANDOM_STATE); ablation,
# pooling_ablation.py on the SPIR-V built into benchmarks/investigations/pooling-spirv (carry
# it); tiles, pooling_grad_variants.py (TILE_KINDS, TILE_WIDTHS, TILE_HEIGHTS, TILE_ARGMAX);
# rows, run.py on OPS with PyTorch's side (its own process; ROWS_ARGS=--no-torch: without),
# then .old-main's rows torch-free. (OLD_OPS: other operators for .old-main.)
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-tests fp variants rows} "
OPS=${OPS:-adam_optimizer,average_pooling_grad,max_pooling_grad}
[[ $steps == *" tests "* ]] && { run tests 250 python3 -m pytest -q -p no:cacheprovider \
  ${TESTS:-tests/test_correctly_rounded.py tests/test_adam_optimizer.py}; tail -3 $OUT/tests.txt; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
[[ $steps == *" variants "* ]] && { run adam_variants 250 python3 \
  benchmarks/investigations/adam_variants.py --spirv benchmarks/investigations/adam-spirv \
  --out $OUT/adam_variants.json; cat $OUT/adam_variants.txt; }
[[ $steps == *" items "* ]] && { run adam_items 250 python3 \
  benchmarks/investigations/adam_items.py --out $OUT/adam_items.json; \
  cat $OUT/adam_items.txt; }
[[ $steps == *" random "* ]] && { run random_variants 200 python3 \
  benchmarks/investigations/random_variants.py --blocks ${RANDOM_BLOCKS:-1,2,3,4} \
  --state ${RANDOM_STATE:-here} --passes ${RANDOM_PASSES:-1} --out $OUT/random_variants.json; \
  cat $OUT/random_variants.txt; }
[[ $steps == *" newtensors "* ]] && { run new_tensors 120 python3 \
  benchmarks/investigations/new_tensors.py --out $OUT/new_tensors.json; cat $OUT/new_tensors.txt; }
[[ $steps == *" ablation "* ]] && { run pooling_ablation 250 python3 \
  benchmarks/investigations/pooling_ablation.py --spirv benchmarks/investigations/pooling-spirv \
  --out $OUT/pooling_ablation.json; cat $OUT/pooling_ablation.txt; }
[[ $steps == *" tiles "* ]] && { run pooling_tiles 250 python3 \
  benchmarks/investigations/pooling_grad_variants.py --kinds ${TILE_KINDS:-max} \
  --widths ${TILE_WIDTHS:-0,4,8} --heights ${TILE_HEIGHTS:-2,4} --argmax ${TILE_ARGMAX:-None} \
  --repeat 10 \
  --out $OUT/pooling_tiles.json; cat $OUT/pooling_tiles.txt; }
if [[ $steps == *" rows "* ]]; then
  run rows 300 python3 benchmarks/run.py --ops $OPS --repeat 20 ${ROWS_ARGS:-} --out $OUT/rows
  grep -h "^[A-Z_]* \|copy roofline" $OUT/rows.txt
  if [ -d .old-main ]; then
    in_tree .old-main run rows.old-main 300 python3 benchmarks/run.py --ops ${OLD_OPS:-$OPS} \
      --no-torch --repeat 20 --out $OUT/rows.old-main
    grep -h "^[A-Z_]* \|copy roofline" $OUT/rows.old-main.txt
  fi
fi
rm -rf $OUT/rows $OUT/rows.old-main  # (the text has every row)
