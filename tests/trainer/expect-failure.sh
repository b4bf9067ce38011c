#!/usr/bin/env bash
# expect-failure.sh RANKS REGEX COMMAND...: passes when COMMAND (an mpiexec line running
# halox-train with --debug-print) exits non-zero, its output matches REGEX, and every one of the
# RANKS ranks reported the error (so none of them was left waiting for the others).
set -u
ranks=$1 regex=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if ((rc == 0)); then
  echo "expect-failure: the command succeeded; it should have failed" >&2
  exit 1
fi
if ! grep -Eq -- "$regex" <<<"$out"; then
  echo "expect-failure: no line matches '$regex'" >&2
  exit 1
fi
n=$(grep -Ec "^\[[0-9]+/$ranks\] halox-train: error" <<<"$out")
if ((n != ranks)); then
  echo "expect-failure: $n of $ranks ranks reported the error" >&2
  exit 1
fi
echo "expect-failure: exit status $rc on all $ranks ranks, message as expected"
