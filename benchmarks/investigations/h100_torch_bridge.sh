# One lent-GPU run of the PyTorch bridge (from the project root, with the device tool, on a
# machine whose PyTorch has CUDA): build the patched kp, run the bridge's tests on the NVIDIA
# Vulkan device (test_cuda_tensors runs there), then benchmarks/torch_bridge.py: PyTorch's CUDA
# backward against the bridge's, per module and for a small CNN, and the determinism check.
source benchmarks/gpu_setup.sh || exit 1
python3 -c 'import torch; print(torch.__version__, torch.cuda.get_device_name(0))'
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_torch_bridge.py \
  tests/test_torch_resample_map.py > $OUT/pytest-torch.txt 2>&1
timeout 280 python3 benchmarks/torch_bridge.py --out $OUT > $OUT/torch_bridge.txt 2>&1
tail -3 $OUT/pytest-torch.txt; cat $OUT/torch_bridge.txt
