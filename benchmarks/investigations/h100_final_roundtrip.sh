# The lent-GPU run behind RESULTS.md's round-trip section and the channel-group measurement:
# the training grad in channel groups, then the benchmark's roundtrip, overhead and chain groups
# three times (each in fresh processes), for the spread. Run with .gpu carried.
set -o pipefail
source benchmarks/gpu_setup.sh > $OUT/setup.log 2>&1 || { tail -30 $OUT/setup.log; exit 1; }
python3 -m pyvkgrad info > $OUT/info.txt 2>&1
timeout 150 python3 benchmarks/investigations/bn_channel_groups.py --out $OUT > $OUT/groups.txt 2>&1
echo "groups rc=$?"; cut -c1-160 $OUT/groups.txt
for i in 1 2 3; do
  timeout 110 python3 benchmarks/run.py --isolate --repeat 20 --ops roundtrip,overhead,chain \
      --out $OUT/bench$i > $OUT/bench$i.txt 2>&1
  echo "bench$i rc=$?"; grep -E "one_call|case|chain" $OUT/bench$i.txt | cut -c1-200 | head -12
done
