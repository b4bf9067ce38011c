# Optional backends. Each HALOX_ENABLE_* defaults to ON when its dependency is found.

# --- CUDA ---
# check_language finds nvcc on PATH, or where CMAKE_CUDA_COMPILER / the CUDACXX environment
# variable point (e.g. -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc). FindCUDAToolkit then
# follows that compiler, or -DCUDAToolkit_ROOT=<dir>.
check_language(CUDA)
set(_halox_cuda_default OFF)
if(CMAKE_CUDA_COMPILER)
  set(_halox_cuda_default ON)
endif()
option(HALOX_ENABLE_CUDA "Build the CUDA pack/unpack kernels and GPU backends" ${_halox_cuda_default})
if(HALOX_ENABLE_CUDA)
  if(NOT CMAKE_CUDA_COMPILER)
    message(FATAL_ERROR "HALOX_ENABLE_CUDA=ON but no CUDA compiler was found; set "
                        "CMAKE_CUDA_COMPILER (or CUDACXX) to nvcc, or turn the option off")
  endif()
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)
  find_package(CUDAToolkit REQUIRED)
endif()

# --- NCCL ---
# Looked for under NCCL_ROOT (CMake variable or environment), then next to the CUDA toolkit, then
# in the system paths.
set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "NCCL installation prefix (optional)")
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
set(_halox_nccl_default OFF)
if(HALOX_ENABLE_CUDA AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(_halox_nccl_default ON)
endif()
option(HALOX_ENABLE_NCCL "Build the NCCL backend (needs CUDA)" ${_halox_nccl_default})
if(HALOX_ENABLE_NCCL AND NOT (HALOX_ENABLE_CUDA AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY))
  message(FATAL_ERROR "HALOX_ENABLE_NCCL=ON needs HALOX_ENABLE_CUDA=ON and NCCL (nccl.h, libnccl); set NCCL_INCLUDE_DIR/NCCL_LIBRARY or turn the option off")
endif()

# --- UCX ---
find_package(ucx QUIET)
option(HALOX_ENABLE_UCX "Build the ucx / ucx_iov backends (UCP, host memory)" ${ucx_FOUND})
if(HALOX_ENABLE_UCX AND NOT ucx_FOUND)
  message(FATAL_ERROR "HALOX_ENABLE_UCX=ON but UCX was not found; install libucx-dev or turn the option off")
endif()

# --- hwloc ---
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(HWLOC QUIET IMPORTED_TARGET hwloc)
endif()
option(HALOX_ENABLE_HWLOC "Use hwloc to describe the node topology" ${HWLOC_FOUND})
if(HALOX_ENABLE_HWLOC AND NOT HWLOC_FOUND)
  message(FATAL_ERROR "HALOX_ENABLE_HWLOC=ON but hwloc was not found; install libhwloc-dev or turn the option off")
endif()

# --- cross-memory attach (process_vm_readv, Linux 3.2+) ---
if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
  set(_halox_cma_default ON)
else()
  set(_halox_cma_default OFF)
endif()
option(HALOX_ENABLE_CMA "Build the cma backend (single-copy transfers within a node, Linux)" ${_halox_cma_default})
if(HALOX_ENABLE_CMA AND NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
  message(FATAL_ERROR "HALOX_ENABLE_CMA=ON needs Linux (process_vm_readv); turn the option off")
endif()

foreach(_opt CUDA NCCL UCX HWLOC CMA)
  if(HALOX_ENABLE_${_opt})
    set(HALOX_HAS_${_opt} 1)
  else()
    set(HALOX_HAS_${_opt} 0)
  endif()
endforeach()

# --- oneDNN (the `onednn` compute provider of halox::ops) ---
find_package(dnnl QUIET CONFIG)
option(HALOX_ENABLE_ONEDNN "Build the oneDNN compute provider of halox::ops" ${dnnl_FOUND})
if(HALOX_ENABLE_ONEDNN AND NOT dnnl_FOUND)
  message(FATAL_ERROR "HALOX_ENABLE_ONEDNN=ON but oneDNN (dnnl-config.cmake) was not found; "
                      "install libdnnl-dev, set dnnl_DIR, or turn the option off")
endif()

# --- OpenBLAS (the matrix products of the operators' convolution kernels) ---
# Linked by its library path (like NCCL and cuDNN), so a consumer of a static halox::ops needs no
# lookup. Without it the kernels use plain loops: correct and position-independent, but slow.
find_path(HALOX_CBLAS_INCLUDE_DIR cblas.h
          PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu/openblas-pthread
                        x86_64-linux-gnu/openblas-openmp aarch64-linux-gnu/openblas-pthread)
find_library(HALOX_OPENBLAS_LIBRARY NAMES openblas
             PATH_SUFFIXES openblas-pthread openblas-openmp)
set(_halox_openblas_default OFF)
if(HALOX_CBLAS_INCLUDE_DIR AND HALOX_OPENBLAS_LIBRARY)
  set(_halox_openblas_default ON)
endif()
option(HALOX_ENABLE_OPENBLAS "Use OpenBLAS for the matrix products of halox::ops' convolutions"
       ${_halox_openblas_default})
if(HALOX_ENABLE_OPENBLAS AND NOT _halox_openblas_default)
  message(FATAL_ERROR "HALOX_ENABLE_OPENBLAS=ON but OpenBLAS (cblas.h, libopenblas) was not "
                      "found; install libopenblas-dev, set HALOX_CBLAS_INCLUDE_DIR and "
                      "HALOX_OPENBLAS_LIBRARY, or turn the option off")
endif()

# --- cuDNN (the `cudnn` compute provider of halox::ops; needs CUDA) ---
set(CUDNN_ROOT "$ENV{CUDNN_ROOT}" CACHE PATH "cuDNN installation prefix (optional)")
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include)
find_library(CUDNN_LIBRARY cudnn HINTS ${CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR}
             PATH_SUFFIXES lib lib64)
set(_halox_cudnn_default OFF)
if(HALOX_ENABLE_CUDA AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
  set(_halox_cudnn_default ON)
endif()
option(HALOX_ENABLE_CUDNN "Build the cuDNN compute provider of halox::ops (needs CUDA)"
       ${_halox_cudnn_default})
if(HALOX_ENABLE_CUDNN AND NOT (HALOX_ENABLE_CUDA AND CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY))
  message(FATAL_ERROR "HALOX_ENABLE_CUDNN=ON needs HALOX_ENABLE_CUDA=ON and cuDNN (cudnn.h, "
                      "libcudnn); install cuDNN, set CUDNN_ROOT or CUDNN_INCLUDE_DIR/CUDNN_LIBRARY, "
                      "or turn the option off")
endif()
foreach(_opt ONEDNN CUDNN)
  if(HALOX_ENABLE_${_opt})
    set(HALOX_HAS_${_opt} 1)
  else()
    set(HALOX_HAS_${_opt} 0)
  endif()
endforeach()
