# One lent-GPU run: what NVIDIA's compiler made of the kernels (pipeline_stats.py: registers and
# the driver's other statistics, for the benchmark's cases and the pooling ablation's
# variants), then the pooling ablation's times. Build the variants here first:
#     python3 benchmarks/investigations/pooling_ablation.py --build benchmarks/investigations/pooling-spirv
# then, from the project root with .gpu and benchmarks/investigations/pooling-spirv carried:
#     STEPS="stats ablation" bash benchmarks/investigations/h200_pipeline_stats.sh
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-stats ablation} "
[[ $steps == *" stats "* ]] && { run stats 240 python3 benchmarks/investigations/pipeline_stats.py \
  --ops ${STATS_OPS:-avg,max,batch_normalization_training,bn,adam_optimizer,random_generator} \
  --spirv benchmarks/investigations/pooling-spirv --ir $OUT/ir --out $OUT/stats.json; \
  head -c 6000 $OUT/stats.txt; }
[[ $steps == *" ablation "* ]] && { run ablation 420 python3 \
  benchmarks/investigations/pooling_ablation.py --spirv benchmarks/investigations/pooling-spirv \
  --out $OUT/ablation.json; grep -h "us " $OUT/ablation.txt | cut -c1-150; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
true
