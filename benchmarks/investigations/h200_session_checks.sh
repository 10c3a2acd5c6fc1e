# 2026-12-04 (evening 2), the tree on the H200: the fingerprints (ROI_ALIGN_GRAD's select and
# roi_partials kernels rebuilt from a shared dy_coordinates), and the tests of what changed
# (binding by a tensor's own elements, Submission.begin, the re-entry refusal and the
# collect batch, a dropped Device freed, DirectML field names in the one-call checks,
# roi_align's forward in slabs, the bridge under torch.compile, the CLI; run 2 also the runtime
# patch part 17 and the Adam fixes). From the project
# root, $OUT set.
source benchmarks/investigations/h200_prelude.sh
fp_step
run tests 420 python3 -m pytest -q -p no:cacheprovider tests/test_roi_align_grad.py tests/test_torch_roi_align.py tests/test_device_contract.py tests/test_device.py tests/test_device_state.py tests/test_state.py tests/test_operators.py tests/test_activation_relu_grad.py tests/test_torch_bridge.py tests/test_torch_optim.py; tail -3 $OUT/tests.txt
