# One lent-GPU run for the shared pipelines (patch part 15): benchmarks/torch_bridge.py (PyTorch
# CUDA's backward against the bridge's, every execution) in this tree and in .old-main, a whole
# `git archive` of the commit to compare with, built with its own runtime (gpu_setup.sh there),
# so that its `fresh` execution compiles pipelines as it did. From the project root with .gpu
# and .old-main carried:
#     bash benchmarks/investigations/h200_bridge.sh
source benchmarks/investigations/h200_prelude.sh
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'
run bridge 250 python3 benchmarks/torch_bridge.py --out $OUT/bridge; tail -25 $OUT/bridge.txt
cd .old-main && ln -sfn ../.gpu .gpu
source benchmarks/gpu_setup.sh > $OUT/old-setup.log 2>&1 || { tail -20 $OUT/old-setup.log; exit 1; }
python3 -c 'import pyvkgrad._kompute as k; print(".old-main runtime: patch level", k.pyvkgrad_patch)'
run bridge.old-main 250 python3 benchmarks/torch_bridge.py --out $OUT/bridge-old
tail -25 $OUT/bridge.old-main.txt
