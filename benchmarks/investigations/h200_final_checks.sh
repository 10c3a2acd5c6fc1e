# 2026-12-04 (late), the final tree on the H200: the fingerprints (LOCAL_RESPONSE_NORMALIZATION_GRAD's
# first kernel changed: NaN where N < 0), and the tests of what changed (LRN_GRAD's,
# ROI_ALIGN_GRAD's, the bridge's, its pooling and LRN, the optimizer's). From the project root,
# $OUT set.
source benchmarks/investigations/h200_prelude.sh
fp_step
run tests 400 python3 -m pytest -q -p no:cacheprovider tests/test_local_response_normalization_grad.py tests/test_roi_align_grad.py tests/test_torch_bridge.py tests/test_torch_pooling.py tests/test_torch_local_response_norm.py tests/test_torch_optim.py tests/test_torch_optim_state.py; tail -3 $OUT/tests.txt
