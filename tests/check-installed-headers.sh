#!/usr/bin/env bash
# Checks that no header under include/halox (the tree `cmake --install` copies) includes a CUDA or
# NCCL header: a consumer of a CUDA-enabled halox must be able to compile against the installed
# headers with a plain C++ compiler and no CUDA toolkit on its include path. CUDA-only helpers
# belong under src/ (e.g. src/exec/cuda/cuda_handle.hpp). Registered as the ctest
# `installed_headers` (label lint) by tests/extra.cmake.
#
# Usage: tests/check-installed-headers.sh [SOURCE_DIR]
# Exit status: 0 clean; 1 some headers include CUDA/NCCL headers (each file and line is listed).
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
echo "check-installed-headers: no CUDA/NCCL includes under ${tree#"$src"/}"
