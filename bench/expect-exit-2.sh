# Sourced by the bad-argument checks of the benchmarks (bench/check-bad-args.sh,
# bench/tiling/check-bad-args.sh): `expect_2 NEEDLE [ENV=VALUE...] -- ARGS...` runs "$bench"
# with ARGS (and the environment settings) and records a failure in `failed` unless it exits
# with code 2 and its output contains NEEDLE. The caller sets `bench` and ends with
# `exit $failed`.
failed=0

expect_2() {
  local needle=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  local out rc
  out=$(env "${envs[@]}" timeout 60 "$bench" "$@" 2>&1)
  rc=$?
  if [[ $rc -ne 2 || $out != *"$needle"* ]]; then
    echo "FAIL: ${envs[*]} $bench $*: exit $rc (want 2), output:"
    echo "$out"
    failed=1
  else
    echo "ok: ${envs[*]} $* -> exit 2: $out"
  fi
}
