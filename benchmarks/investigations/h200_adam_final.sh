# The final tree's Adam rows and tests on the H200 (after the review): with STEPS containing
# "tests" the optimizer's, the recording's and Adam's tests and the fingerprints; always
# benchmarks/adam_step.py twice and the parts. From the project root: source this with $OUT set.
source benchmarks/investigations/h200_prelude.sh
if [[ " ${STEPS:-tests} " == *" tests "* ]]; then
  run tests 300 python3 -m pytest -q -p no:cacheprovider -x tests/test_torch_optim.py tests/test_torch_optim_state.py tests/test_adam_optimizer.py -k "optim or push_constants or state_machine"; tail -2 $OUT/tests.txt
  fp_step
fi
run parts 120 python3 benchmarks/investigations/adam_step_parts.py; cat $OUT/parts.txt
run step1 300 python3 benchmarks/adam_step.py --out $OUT/step1; grep "elements)" $OUT/step1.txt
run step2 300 python3 benchmarks/adam_step.py --out $OUT/step2; grep "elements)" $OUT/step2.txt
