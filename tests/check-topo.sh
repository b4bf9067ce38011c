#!/usr/bin/env bash
# Runs halox-topo under mpiexec and checks its report: exit status 0, the header, one line per
# rank 0..N-1 in the documented format, the device reasons, a final warning count, and nothing
# else but warnings.
#   check-topo.sh <ranks> <launcher and flags...> <halox-topo>
set -u
n=$1
shift
out=$("$@" 2>&1)
rc=$?
echo "$out"
fail() { echo "check-topo: $*" >&2; exit 1; }
[ "$rc" -eq 0 ] || fail "halox-topo exited with $rc, expected 0"
echo "$out" | grep -Eq "^halox-topo: $n rank\(s\) on [0-9]+ node\(s\)$" || fail "no header line for $n ranks"
for ((r = 0; r < n; r++)); do
  c=$(echo "$out" | grep -Ec "^rank $r: node [^ ]+ socket [0-9,-]+ numa [0-9,-]+ cpus [0-9,-]+ cores [0-9]+ gpu [^ ]+ nic [^ ]+ device ([0-9]+|none)$")
  [ "$c" -eq 1 ] || fail "expected one report line for rank $r, found $c"
done
echo "$out" | grep -Eq "^device: (all ranks|rank [0-9]+): " || fail "no device reason line"
echo "$out" | grep -Eq "^halox-topo: [0-9]+ warning\(s\)$" || fail "no warning count line"
other=$(echo "$out" | grep -Ev "^(halox-topo: |rank [0-9]+: |device: |warning: )")
[ -z "$other" ] || fail "unexpected output: $other"
echo "check-topo: ok"
