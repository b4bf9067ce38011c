#!/usr/bin/env bash
# Checks that no header under include/halox (the tree `cmake --install` copies) includes a CUDA or
# NCCL header or one of halox's internal (src/) headers, and that each include/halox/detail/
# header is needed by a public one. A consumer of a CUDA-enabled halox must be able to compile
# against the installed headers with a plain C++ compiler and no CUDA toolkit on its include
# path, and without halox's source tree. CUDA-only helpers belong under src/ (e.g. src/exec/cuda/cuda_handle.hpp). Registered as the ctest
# `installed_headers` (label lint) by tests/extra.cmake.
#
# Usage: tests/check-installed-headers.sh [SOURCE_DIR]
# Exit status: 0 clean; 1 a violation (each file and line is listed).
set -euo pipefail

src=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
tree=$src/include/halox
[[ -d $tree ]] || {
  echo "check-installed-headers: $tree not found"
  exit 1
}

# Any #include whose file name mentions cuda or nccl (cuda_runtime_api.h, cuda_fp16.h, nccl.h,
# ...), case-insensitively, with either <> or "".
pattern='^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"][^>"]*(cuda|nccl)[^>"]*[>"]'
if hits=$(grep -rniE "$pattern" "$tree"); then
  echo "check-installed-headers: installed headers must not include CUDA or NCCL headers:"
  while IFS= read -r line; do
    echo "  ${line#"$src"/}"
  done <<<"$hits"
  exit 1
fi

# Nothing installed reaches into the source tree (src/...: "common/...", "exec/...", ...).
internal='^[[:space:]]*#[[:space:]]*include[[:space:]]*"(common|core|plan|exec|tune|ops|engine)/'
if hits=$(grep -rnE "$internal" "$tree"); then
  echo "check-installed-headers: installed headers must not include halox's internal headers:"
  while IFS= read -r line; do
    echo "  ${line#"$src"/}"
  done <<<"$hits"
  exit 1
fi

# include/halox/detail holds only what public headers need: each file there is included by
# another installed header. Internal helpers belong under src/ (src/common for every layer).
status=0
for f in "$tree"/detail/*.hpp; do
  [[ -e $f ]] || continue
  name=detail/$(basename "$f")
  if ! grep -rlqE "^[[:space:]]*#[[:space:]]*include[[:space:]]*<halox/$name>" --exclude="$(basename "$f")" "$tree"; then
    echo "check-installed-headers: include/halox/$name is installed but no public header includes" \
      "it; move it under src/ (src/common for helpers every layer uses)"
    status=1
  fi
done
((status == 0)) || exit 1
echo "check-installed-headers: no CUDA/NCCL or internal includes under ${tree#"$src"/}; every" \
  "detail/ header is needed by a public one"
