#!/usr/bin/env bash
# Checks that every tracked C++ source (*.hpp *.cpp *.cu *.cuh) matches .clang-format, changing
# nothing. Registered as the ctest `format` (label lint) by tests/extra.cmake.
#
# Usage: tests/check-format.sh [SOURCE_DIR] [CLANG_FORMAT]
# Exit status: 0 all formatted; 1 some files are not (they are listed); 77 clang-format is not
# installed (ctest reports the test as skipped).
set -euo pipefail

src=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
clang_format=${2:-${CLANG_FORMAT:-clang-format}}

if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check-format: '$clang_format' not found; install clang-format to run this check"
  exit 77
fi
cd "$src"

# Tracked files only (new files count once they are added); a tarball without .git falls back
# to the source folders.
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.hpp' '*.cpp' '*.cu' '*.cuh')
else
  mapfile -t files < <(find include src tests examples bench kernels -type f \
    \( -name '*.hpp' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | sort)
fi

checked=0
bad=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue # tracked but deleted in the working tree
  checked=$((checked + 1))
  if ! "$clang_format" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done

if ((${#bad[@]} == 0)); then
  echo "check-format: all $checked files match .clang-format ($("$clang_format" --version))"
  exit 0
fi
echo "check-format: ${#bad[@]} of $checked files do not match .clang-format:"
printf '  %s\n' "${bad[@]}"
echo "See the changes with: clang-format --dry-run FILE; apply them with: clang-format -i FILE"
exit 1
