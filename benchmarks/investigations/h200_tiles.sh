# One lent-GPU run: the pooling grads' tile shapes (pooling_grad_variants.py: TILE_WIDTH x
# TILE_HEIGHT, with tiles of up to 64 cells, row by row), the BatchNorm exact sums' dX stored
# at each element's load (bn_sums_ablation.py against the previous kernel; build it first:
#     python3 benchmarks/investigations/bn_sums_ablation.py --build \
#         benchmarks/investigations/bn-sums-spirv --previous <the previous commit's shaders/>),
# and the registers of both (pipeline_stats.py). From the project root with .gpu and
# benchmarks/investigations/bn-sums-spirv carried:
#     STEPS="stats bn tiles fp rows" bash benchmarks/investigations/h200_tiles.sh
# (rows: with .old-main carried too). Run 2 of 2026-12-03 (later) ran "stats bn tiles fp", run 3
# "stats bn fp rows" (its .old-main rows failed: `run` called in_tree through timeout).
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-stats bn tiles fp} "
[[ $steps == *" stats "* ]] && { run stats 120 python3 benchmarks/investigations/pipeline_stats.py \
  --ops ${STATS_OPS:-avg,max,batch_normalization_grad} --out $OUT/stats.json; \
  grep -o "^.*Register Count=[0-9]*, Binary Size=[0-9]*" $OUT/stats.txt | cut -c1-160; }
[[ $steps == *" bn "* ]] && { BN_OPS=${BN_OPS:-grad} run bn 300 python3 \
  benchmarks/investigations/bn_sums_ablation.py --spirv benchmarks/investigations/bn-sums-spirv \
  --out $OUT/bn.json; grep -h " us" $OUT/bn.txt | cut -c1-160; }
[[ $steps == *" tiles "* ]] && { run tiles 420 python3 \
  benchmarks/investigations/pooling_grad_variants.py --widths ${WIDTHS:-None,8,16} \
  --heights ${HEIGHTS:-2,4,8} --repeat 10 --out $OUT/tiles.json; \
  grep -h " us" $OUT/tiles.txt | cut -c1-170; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
# main's rows beside this tree's (a `git archive` of main in .old-main, carried; torch-free),
# then this tree's with PyTorch's side: ROWS_OPS (default the two operators changed here).
[[ $steps == *" rows "* ]] && { ROWS=${ROWS_OPS:-average_pooling_grad,batch_normalization_grad}; \
  in_tree .old-main run rows-old 240 python3 benchmarks/run.py --ops $ROWS --repeat 20 \
  --no-torch --out $OUT/rows-old; run rows 300 python3 benchmarks/run.py --ops $ROWS \
  --repeat 20 --out $OUT/rows; grep -h "us" $OUT/rows-old.txt $OUT/rows.txt | cut -c1-160; }
true
