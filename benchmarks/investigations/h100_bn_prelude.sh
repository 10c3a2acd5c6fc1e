# Sourced by the BatchNorm lent-GPU scripts (h100_bn_one_pass.sh, h100_bn_l2_order.sh), from the
# project root with .gpu carried: sets the machine up, writes `pyvkgrad info`, runs the BN tests
# on the H100, and defines validate_bn (the BN tests under the validation layer's
# synchronization checks).
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info > $OUT/info.txt 2>&1
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_batch_normalization_grad.py \
  > $OUT/pytest-bn.txt 2>&1
echo "pytest rc=$?"; tail -1 $OUT/pytest-bn.txt

validate_bn() {
  ( dpkg -x .gpu/vvl/vulkan-validationlayers_*.deb / && ldconfig \
    && VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d timeout 200 tools/validate -q \
       -p no:cacheprovider tests/test_batch_normalization_grad.py ) > $OUT/validate-bn.txt 2>&1
  echo "validate rc=$?"; tail -4 $OUT/validate-bn.txt
}
