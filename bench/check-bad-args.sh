#!/usr/bin/env bash
# A bad numeric option of halox-bench (Google Benchmark's numeric flags or a HALOX_BENCH_*
# setting) must stop it with a message naming the value and exit code 2, never an abort.
# Registered as the ctest `bench_bad_args` (label unit) by bench/CMakeLists.txt.
#
# Usage: bench/check-bad-args.sh HALOX_BENCH
set -uo pipefail
bench=$1
source "$(dirname "${BASH_SOURCE[0]}")/expect-exit-2.sh"

expect_2 "--benchmark_repetitions='-3' is invalid" -- --benchmark_repetitions=-3
expect_2 "--benchmark_repetitions='0' is invalid" -- --benchmark_repetitions=0
expect_2 "--benchmark_repetitions='99999999999' is invalid" -- --benchmark_repetitions=99999999999
expect_2 "--benchmark_min_time='-1' is invalid" -- --benchmark_min_time=-1
expect_2 "--benchmark_min_warmup_time='nan' is invalid" -- --benchmark_min_warmup_time=nan
expect_2 "HALOX_BENCH_WARMUP='-1' is invalid" HALOX_BENCH_WARMUP=-1 -- --benchmark_list_tests=true
expect_2 "HALOX_BENCH_MAX_ITERS='1e12' is invalid" HALOX_BENCH_MAX_ITERS=1e12 -- --benchmark_list_tests=true
expect_2 "HALOX_BENCH_SCALE='x' is invalid" HALOX_BENCH_SCALE=x -- --benchmark_list_tests=true

# Valid values still run (listing only, so nothing is timed).
if ! out=$(HALOX_BENCH_WARMUP=0 timeout 60 "$bench" --benchmark_repetitions=2 \
  --benchmark_list_tests=true 2>&1); then
  echo "FAIL: valid flags rejected: $out"
  failed=1
fi
exit $failed
