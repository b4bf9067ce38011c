#!/usr/bin/env bash
# halox-train --describe-file FILE: the --describe reports go to FILE, not to stdout, and the
# run's last line names the file (so that the result is what a reader sees last).
# Usage: check-describe-file.sh FILE <launcher and halox-train command...>
set -euo pipefail
file=$1
shift
rm -f "$file"
out=$("$@" --describe-file "$file")
printf '%s\n' "$out"
fail() { echo "check-describe-file: $*" >&2; exit 1; }
last=$(printf '%s\n' "$out" | tail -n 1)
[[ $last == "layer report (grids, redistributions, what each operator chose, memory): $file" ]] ||
  fail "the last line does not name the report: '$last'"
[[ -s $file ]] || fail "$file was not written"
for what in "memory on rank 0" "predicted peak" "grid"; do
  grep -q "$what" "$file" || fail "'$what' missing from $file"
  ! printf '%s\n' "$out" | head -n -1 | grep -q "$what" || fail "'$what' printed on stdout as well"
done
echo "check-describe-file: $(wc -l <"$file") report lines in $file, none on stdout"
