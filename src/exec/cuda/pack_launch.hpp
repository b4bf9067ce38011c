#pragma once
// Host-callable launchers of the batched pack/unpack kernels (kernels/pack.cu). Callable from
// code compiled without nvcc.

#include "exec/cuda/pack_desc.hpp"

#include <cuda_runtime_api.h>

namespace halox::detail::gpu {

/// Enqueues on `s` the copy of regions [a.first, a.last) of slot buffers into the packed stream
/// (blocks [a.block_lo, a.block_hi)). Throws `halox::error` (cuda_error) if the launch fails.
void launch_pack(launch_args const& a, cudaStream_t s);

/// Enqueues on `s` the unpack of regions [a.first, a.last): copy regions take their bytes from
/// the packed stream (combining with `a.op`), fill regions are set to their constant. The
/// regions of one launch must not overlap (see exec/cuda/pack_batch.hpp).
void launch_unpack(launch_args const& a, cudaStream_t s);

} // namespace halox::detail::gpu
