# pyvkgrad.torch.optim.Adam's whole step against PyTorch's Adam (benchmarks/adam_step.py), and
# the bridge's per-module rows (benchmarks/torch_bridge.py, reuse and one-call), on this tree
# and on an earlier one (.old-main, with this adam_step.py), with the optimizer's, the
# recording's and the bridge's tests, and where the step's time goes (adam_step_parts.py).
# From the project root: source this with $OUT set.
source benchmarks/investigations/h200_prelude.sh
run tests 400 python3 -m pytest -q -p no:cacheprovider -x tests/test_torch_optim.py tests/test_torch_optim_state.py tests/test_torch_bridge.py tests/test_device_state.py tests/test_adam_optimizer.py -k "not float16_rounding_of_every"; tail -2 $OUT/tests.txt
run parts 120 python3 benchmarks/investigations/adam_step_parts.py; cat $OUT/parts.txt
run step_new 300 python3 benchmarks/adam_step.py --out $OUT/new; grep "elements)" $OUT/step_new.txt
run bridge_new 300 python3 benchmarks/torch_bridge.py --executions reuse,one-call --out $OUT/bridge_new; sed -n "/^1. backward/,/^3. /p" $OUT/bridge_new.txt
in_tree .old-main run bridge_old 300 python3 benchmarks/torch_bridge.py --executions reuse,one-call --out $OUT/bridge_old; sed -n "/^1. backward/,/^3. /p" $OUT/bridge_old.txt
