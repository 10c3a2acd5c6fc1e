# One lent-GPU run of the PyTorch bridge (run from the project root with the device tool; the
# machine has PyTorch with CUDA): build the patched kp, run the bridge's tests on the NVIDIA
# Vulkan device, then benchmarks/torch_bridge.py (PyTorch CUDA backward vs the bridge) and the
# tap-exactness study against PyTorch's CUDA kernels' inputs.
source benchmarks/gpu_setup.sh || exit 1
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_torch_bridge.py \
  tests/test_torch_resample_map.py > $OUT/pytest-torch.txt 2>&1
timeout 240 python3 benchmarks/torch_bridge.py --out $OUT > $OUT/torch_bridge.txt 2>&1
tail -3 $OUT/pytest-torch.txt; cat $OUT/torch_bridge.txt
