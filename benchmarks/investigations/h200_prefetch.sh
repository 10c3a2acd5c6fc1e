# The lent-GPU runs of 2026-12-04: RANDOM_GENERATOR's tickets (STATE_HERE) counted in one
# word or spread over several (random_generator.py's TICKET_WORDS), and the output without a
# state (what the tickets cost). From the project root with .gpu carried:
#     STEPS="variants tests fp rows" bash benchmarks/investigations/h200_tickets.sh
# variants: random_variants.py over PASSES, TICKETS and the states, twice (the order of the
# settings reversed the second time), every output and new state checked; tests: the
# operator's tests on the device; fp: the 239 fingerprints; rows: the benchmark's
# RANDOM_GENERATOR rows with PyTorch's side.
source benchmarks/investigations/h200_prelude.sh
steps=" ${STEPS:-variants tests fp} "
[[ $steps == *" variants "* ]] && for pass in 1 2; do
  tickets=${TICKETS:-1,16,64}
  [[ $pass == 2 ]] && tickets=$(echo $tickets | tr ',' '\n' | tac | paste -sd,)
  run variants$pass 300 python3 benchmarks/investigations/random_variants.py --blocks 1 \
    --passes ${PASSES:-4,8,16} --state ${STATES:-here,none} --tickets $tickets \
    --out $OUT/variants$pass.json
  cut -c1-175 $OUT/variants$pass.txt
done
[[ $steps == *" tests "* ]] && { run tests 200 python3 -m pytest -q -p no:cacheprovider -x \
  ${TESTS:-tests/test_random_generator.py}; tail -2 $OUT/tests.txt; }
[[ $steps == *" fp "* ]] && { run fingerprint 200 python3 -m pyvkgrad fingerprint --check \
  tests/fingerprints.json; tail -1 $OUT/fingerprint.txt; }
[[ $steps == *" rows "* ]] && { run rows 300 python3 benchmarks/run.py \
  --ops ${ROWS_OPS:-random_generator} --repeat 20 --out $OUT/rows; \
  grep -h "^[A-Z_]*  \|copy roofline\|fill" $OUT/rows.txt | cut -c1-170; }
true
