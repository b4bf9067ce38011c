#!/usr/bin/env bash
# A bad option of halox-bench-tiling must stop it with a message naming the value and exit code
# 2, never an abort or a hang. Registered as the ctest `bench_tiling_bad_args` (label unit) by
# bench/tiling/CMakeLists.txt; runs the benchmark as a single process.
#
# Usage: bench/tiling/check-bad-args.sh HALOX_BENCH_TILING
set -uo pipefail
bench=$1
source "$(dirname "${BASH_SOURCE[0]}")/../expect-exit-2.sh"

expect_2 "--depths '0' is invalid: item '0' is not a whole number from 1 to 1024" -- --depths 0
expect_2 "--depths '1,,2' is invalid: item ''" -- --depths 1,,2
expect_2 "--latency-us '-5' is invalid" -- --latency-us -5
expect_2 "--latency-us 'nan' is invalid" -- --latency-us nan
expect_2 "--shape '8x8' is invalid: give three extents" -- --shape 8x8
expect_2 "--shape '8x0x8' is invalid: item '0'" -- --shape 8x0x8
expect_2 "--steps 'x' is not a whole number" -- --steps x
expect_2 "--reps '0' is not a whole number from 1" -- --reps 0
expect_2 "--periodic '0,2,0' is invalid: item '2' is not 0 or 1" -- --periodic 0,2,0
expect_2 "--backend 'carrier-pigeon' is invalid" -- --backend carrier-pigeon
expect_2 "--stat 'mean' is invalid: use median or min" -- --stat mean
expect_2 "unknown option '--fast'" -- --fast 1
expect_2 "option '--steps' needs a value" -- --steps
# A depth too deep for a non-periodic extent: the library's message, on every rank.
expect_2 "exceeds the extent 8 of that non-periodic dimension" -- --shape 8x8x8 --depths 9 --reps 1

# Valid values still run (a tiny problem).
if ! out=$(timeout 60 "$bench" --shape 6x5x4 --steps 3 --depths 1,3 --latency-us 0 --reps 1 \
  --warmup 0 2>&1); then
  echo "FAIL: valid options rejected: $out"
  failed=1
fi
exit $failed
