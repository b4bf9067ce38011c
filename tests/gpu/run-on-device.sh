#!/usr/bin/env bash
# Runs the GPU tests (1 and 2 ranks: the halo exchange, the cudnn provider and the distributed
# operators on device buffers), the pack bandwidth benchmark and the distributed convolution
# benchmark on device buffers on a machine with a CUDA
# device, in well under 8 minutes. Such a machine often has only the CUDA toolkit (no MPI, no
# GoogleTest), so the binaries can be prepared elsewhere and carried over as a bundle.
#
#   tests/gpu/run-on-device.sh --bundle [DIR]
#       On the build machine, after building build-cuda (or $HALOX_BUILD_DIR): packs the GPU
#       test binaries, the MPI libraries they load (MPICH, UCX, hwloc, ...), the MPICH launcher
#       and libstdc++ into DIR/bundle.tar.gz (default DIR build-gpu-bundle, about 17 MiB). NCCL
#       (over 200 MiB), cuDNN (over 500 MiB) and the CUDA driver are expected on the GPU
#       machine: in /usr/local/cuda, or cuDNN from the nvidia-cudnn Python wheel.
#   tests/gpu/run-on-device.sh [DIR]
#       On the GPU machine: runs the tests from DIR when it holds a bundle (unpacked there on
#       first use); otherwise builds them first into build-gpu (needs cmake, ninja or make, MPI
#       and GoogleTest there).
#
# Logs go to $OUT when it is set (the device runner copies it back), else to DIR/logs.
# Exit status: 0 when every test passed or skipped, 1 otherwise.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

# ---- bundle mode ------------------------------------------------------------------------------
if [[ ${1:-} == --bundle ]]; then
  dir=${2:-build-gpu-bundle}
  build=${HALOX_BUILD_DIR:-build-cuda}
  bins=("$build/tests/gpu/halox_gpu_tests" "$build/tests/gpu/halox_gpu_pack_bench")
  for b in "${bins[@]}"; do
    [[ -x $b ]] || { echo "missing $b: build it first (ninja -C $build halox_gpu_tests halox_gpu_pack_bench)"; exit 1; }
  done
  # The operators' GPU tests and benchmark, when the build has cuDNN.
  for b in "$build/tests/gpu/halox_gpu_ops_tests" "$build/tests/gpu/halox_gpu_dist_ops_tests" \
    "$build/bench/ops/halox-bench-ops"; do
    [[ -x $b ]] && bins+=("$b")
  done
  rm -rf "$dir" && mkdir -p "$dir"
  dir_final=$dir
  dir=$(mktemp -d)/bundle
  mkdir -p "$dir/bin" "$dir/lib"
  for b in "${bins[@]}"; do strip --strip-debug -o "$dir/bin/$(basename "$b")" "$b"; done
  # The MPICH launcher, for the 2-rank run (Debian's hydra loads libslurm and its kin).
  launchers=()
  for exe in mpiexec.hydra hydra_pmi_proxy; do
    p=$(command -v "$exe") && launchers+=("$p")
  done
  # Every shared library the binaries and the launcher load, except the C library family
  # (always there) and the CUDA toolkit's own (the GPU machine has a toolkit; NCCL is too large
  # to carry).
  ldd "${bins[@]}" "${launchers[@]}" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | while read -r lib; do
    case $(basename "$lib") in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux*) continue ;;
    esac
    [[ $lib == /usr/local/cuda* && $(basename "$lib") != libcudart.so* ]] && continue
    [[ $(basename "$lib") == libcudnn* ]] && continue
    strip --strip-unneeded -o "$dir/lib/$(basename "$lib")" "$(readlink -f "$lib")"
  done
  cp "${launchers[@]}" "$dir/bin/"
  # UCX's transport modules.
  ucx_modules=$(dirname "$(ldconfig -p | awk '/libuct.so.0 /{print $NF; exit}')")/ucx
  [[ -d $ucx_modules ]] && mkdir -p "$dir/lib/ucx" && cp -L "$ucx_modules"/*.so.0 "$dir/lib/ucx/" 2>/dev/null
  git rev-parse HEAD >"$dir/COMMIT" 2>/dev/null || true
  tar -C "$dir" -czf "$dir_final/bundle.tar.gz" . && rm -rf "$(dirname "$dir")"
  echo "bundle $dir_final/bundle.tar.gz ($(du -sh "$dir_final/bundle.tar.gz" | cut -f1)), commit $(git rev-parse --short HEAD 2>/dev/null)"
  echo "run it on a GPU machine with: tests/gpu/run-on-device.sh $dir_final"
  exit 0
fi

# ---- run mode ---------------------------------------------------------------------------------
dir=${1:-build-gpu-bundle}
start=$(date +%s)
logs=${OUT:-$dir/logs}
mkdir -p "$logs"
echo "== device"
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>&1 ||
  echo "nvidia-smi failed (no driver?)"

if [[ -f $dir/bundle.tar.gz && ! -x $dir/bin/halox_gpu_tests ]]; then
  tar -C "$dir" -xzf "$dir/bundle.tar.gz" && echo "unpacked $dir/bundle.tar.gz (commit $(cat "$dir/COMMIT"))"
fi
if [[ ! -x $dir/bin/halox_gpu_tests ]]; then
  echo "== no bundle in $dir: building into build-gpu"
  cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
  gen=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
  if ! cmake -S . -B build-gpu -G "$gen" -DHALOX_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${cap:-90}" \
    -DHALOX_BUILD_EXAMPLES=OFF -DHALOX_BUILD_BENCH=OFF >"$logs/configure.log" 2>&1; then
    tail -20 "$logs/configure.log"
    echo "configure failed: this machine lacks a build dependency (MPI? GoogleTest?); build a bundle"
    echo "elsewhere with: tests/gpu/run-on-device.sh --bundle, and carry build-gpu-bundle"
    exit 1
  fi
  cmake --build build-gpu -j "$(nproc)" --target halox_gpu_tests halox_gpu_pack_bench \
    >"$logs/build.log" 2>&1 || { tail -30 "$logs/build.log"; exit 1; }
  dir=build-gpu/tests/gpu-run
  mkdir -p "$dir/bin"
  cp build-gpu/tests/gpu/halox_gpu_tests build-gpu/tests/gpu/halox_gpu_pack_bench "$dir/bin/"
  echo "built in $(($(date +%s) - start)) s"
fi

export PATH="$root/$dir/bin:$PATH"
export LD_LIBRARY_PATH="$root/$dir/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
# cuDNN: the toolkit's, else the one Python's nvidia-cudnn wheel ships.
if ! ldconfig -p | grep -q libcudnn.so.9 && [[ ! -e /usr/local/cuda/lib64/libcudnn.so.9 ]]; then
  for py in python3 /usr/bin/python3; do
    cudnn_lib=$("$py" -c 'import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], "lib"))' 2>/dev/null) && break
  done
  [[ -n ${cudnn_lib:-} ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cudnn_lib"
fi
[[ -d $dir/lib/ucx ]] && export UCX_MODULE_DIR="$root/$dir/lib/ucx"
export HYDRA_LAUNCHER=fork
if missing=$(ldd "$dir/bin/halox_gpu_tests" | grep "not found"); then
  echo "libraries missing on this machine:"
  echo "$missing"
  exit 1
fi
launcher=(mpiexec -n)
command -v mpiexec.hydra >/dev/null && launcher=(mpiexec.hydra -launcher fork -n)

status=0
run() { # name, timeout, command...
  local name=$1 limit=$2
  shift 2
  echo "== $name"
  local t0=$(date +%s)
  timeout "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local log=$logs/$name.log
  # Counts, failures, and each distinct skip reason once.
  grep -E '^\[  (PASSED|SKIPPED|FAILED)  \] [0-9]+ test' "$log"
  grep -E '^\[rank [0-9]+\]|^\[  FAILED  \] [A-Za-z]' "$log" | sort -u | head -40
  grep -E '^(no CUDA device|NCCL needs|MPI is not CUDA-aware)' "$log" | sort | uniq -c | sed 's/^/  skip: /'
  grep -vE '^\[|^(no CUDA device|NCCL needs|MPI is not CUDA-aware)|^Note:|^Running main|: Skipped$|^$' \
    "$log" | head -40
  [[ $rc == 77 ]] && echo "-- $name: skipped" && return
  echo "-- $name: exit $rc in $(($(date +%s) - t0)) s (log: $log)"
  [[ $rc == 0 ]] || status=1
}

run gpu_tests.np1 240 "${launcher[@]}" 1 halox_gpu_tests
run gpu_tests.np2 180 "${launcher[@]}" 2 halox_gpu_tests
run pack_bench 120 halox_gpu_pack_bench
if [[ -x $dir/bin/halox_gpu_dist_ops_tests ]]; then
  run gpu_ops.np1 180 "${launcher[@]}" 1 halox_gpu_ops_tests
  run gpu_dist_ops.np1 180 "${launcher[@]}" 1 halox_gpu_dist_ops_tests
  run gpu_dist_ops.np2 180 "${launcher[@]}" 2 halox_gpu_dist_ops_tests
  # The distributed convolution on device buffers, 1 and 2 ranks (sharing one GPU at 2).
  for n in 1 2; do
    run "bench_ops_cudnn.np$n" 180 "${launcher[@]}" "$n" halox-bench-ops --provider cudnn \
      --overlap all --iters 5
  done
fi
[[ $(grep -c "no CUDA device visible" "$logs"/gpu_tests.np1.log) -gt 0 ]] &&
  echo "NOTE: the tests skipped: no usable CUDA device here"
echo "== done in $(($(date +%s) - start)) s: $([[ $status == 0 ]] && echo all passed or skipped || echo FAILURES)"
exit $status
