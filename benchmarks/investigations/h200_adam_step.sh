# pyvkgrad.torch.optim.Adam's whole step against PyTorch's Adam (benchmarks/adam_step.py), on
# this tree and on the tree before packs (.old-main, with this adam_step.py), with the
# optimizer's tests and where the step's time goes (adam_step_parts.py). From the project
# root: source this with $OUT set.
source benchmarks/investigations/h200_prelude.sh
run tests 300 python3 -m pytest -q -p no:cacheprovider -x tests/test_torch_optim.py tests/test_torch_optim_state.py; tail -2 $OUT/tests.txt
run parts 120 python3 benchmarks/investigations/adam_step_parts.py; cat $OUT/parts.txt
run step_new 300 python3 benchmarks/adam_step.py --out $OUT/new; grep "elements)" $OUT/step_new.txt
in_tree .old-main run step_old 300 python3 benchmarks/adam_step.py --repeat 10 --out $OUT/old; grep "elements)" $OUT/step_old.txt
