#pragma once
/// \file dist_common.hpp
/// What the distributed operators share: options, timings, and views of the owned block of a
/// distributed buffer for the serial kernels.
///
/// The distributed operators work on NC[D]HW tensors described by a `tensor_desc` whose grid
/// splits the batch dimension N and the spatial dimensions, never the channels (the grid's
/// extent along dimension 1 must be 1), except `dist_lrn`'s. See docs/dist_ops.md.

#include <halox/backend.hpp>
#include <halox/halo.hpp>
#include <halox/ops/provider.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/tensor_view.hpp>

#include <cstddef>
#include <vector>

namespace halox::ops {

/// Options of the distributed windowed operators (convolution, pooling). Every rank must pass
/// the same options.
struct dist_options {
  /// Compute the part of the result that needs no remote data while the exchange runs (true),
  /// or exchange first and compute everything afterwards (false). Results are bitwise equal.
  bool overlap = true;
  /// With overlap, the interior is computed in this many pieces with an MPI progress poll after
  /// each, so that large messages, which MPI moves only while the receiver is inside an MPI
  /// call, advance during the compute instead of at `wait`. 1: one piece, no poll. Applied
  /// only where this rank's exchange moves at least `progress_min_bytes` per peer: smaller
  /// messages travel eagerly, need no progress, and one kernel call on the whole interior is
  /// faster than several on its slabs.
  int progress_polls = 8;
  /// Bytes per peer (sent plus received) from which the interior is split for progress polls.
  std::size_t progress_min_bytes = std::size_t(64) << 10;
  /// With overlap, the least share of this rank's block (the output forward, the input
  /// backward) the interior must cover, in [0, 1]; where it covers less, this rank computes its
  /// block in one call after the exchange, as without overlap. A small interior (small maps
  /// cut into a few rows) hides little of the exchange, while each boundary box is one more
  /// kernel call, and with the oneDNN provider one more pair of layout reorders. 0: always
  /// split. Results are bitwise equal either way.
  double overlap_min_interior = 0.75;
  /// With overlap on more than one rank, each direction (forward, backward) of a layer measures
  /// whether splitting off the interior pays: after one untimed call of each mode (which builds
  /// the kernels), its calls alternate between the split and one call on the whole block after
  /// the exchange for this many calls of each; then every rank keeps the mode whose fastest
  /// call, summed over the ranks, was shorter (one all-reduce). On small maps and with
  /// providers that copy each box, the split's extra calls can cost more than the exchange it
  /// hides. 0: no measuring, split wherever `overlap_min_interior` allows. In [0, 1000].
  /// Results are bitwise equal in either mode.
  int overlap_trials = 3;
  /// `dist_conv::backward` returns with the all-reduce of the weight and bias gradients still in
  /// flight (true) instead of waiting for it (false): it then overlaps with whatever the caller
  /// runs next (the backward of earlier layers), and the ranks do not meet at every layer's
  /// reduction. `dist_conv::finish_gradients()` completes it; dw and db hold their sums only
  /// after that. The same on every rank is not required. Results are bitwise equal either way.
  bool defer_gradient_reduce = false;
  /// `dist_conv::backward` all-reduces the weight and bias gradients over the grid (true), or
  /// leaves dw and db holding this rank's partial sums, over the outputs it owns, for the
  /// caller to sum over the ranks (false): a training loop can then reduce the gradients of
  /// all its layers in one all-reduce (a gradient bucket) instead of one per layer. On small
  /// networks the per-call costs of many small all-reductions outweigh what overlapping them
  /// with backward gains. With false, `defer_gradient_reduce` has no effect.
  bool reduce_gradients = true;
  /// How halos and output gradients move. `automatic` measures the candidates when the
  /// operator is built (several collective rounds); the default never does.
  backend method = backend::mpi_pack;
  /// Settings of the measurement when `method` is `automatic`.
  tune_options tune;
  /// Which library computes the local kernels (docs/providers.md). `automatic`: the fastest
  /// built in for the element type (oneDNN for float when built, else the reference kernels).
  compute_provider provider = compute_provider::automatic;
  /// OpenMP threads of each local kernel call on this rank; 0: `default_threads()` (the OpenMP
  /// default, OMP_NUM_THREADS, unless several unbound ranks share the node's CPUs).
  int threads = 0;
  /// Whether a provider may keep, from a convolution's forward to its backward, the copy of x
  /// it reordered into its own layout (oneDNN's blocked layouts), so that the weight gradient
  /// reads it instead of reordering x again: a little faster, at one more copy of x held
  /// between the calls (`memory()` counts it as held). false: backward reorders x again and
  /// nothing is held. Can be changed later with the operator's `keep_reorders`. Results are
  /// bitwise equal either way.
  bool keep_reorders = true;
};

/// Where the time of the last call of an operator went, in seconds, on the calling rank.
/// Communication is `start + wait + reduce`; with overlap, the exchange progresses during
/// `compute`, so `wait` is the part of it that was not hidden.
struct dist_timings {
  double total = 0;   ///< wall time of the whole call
  double compute = 0; ///< local kernels (interior and boundary)
  double start = 0;   ///< posting the exchange (packing, sends, receives)
  double wait = 0;    ///< blocked completing the exchange (halo or output-gradient gather)
  double reduce = 0;  ///< blocked in all-reductions (weight gradients, batch-norm statistics)

  /// Time spent in communication calls.
  [[nodiscard]] double comm() const noexcept { return start + wait + reduce; }
};

/// The owned block of a local buffer as a strided view (halos excluded): what pointwise
/// operators and comparisons work on. Empty (shape of zeros) on a rank that owns nothing.
template <class T> [[nodiscard]] tensor_ref<T> owned_ref(tensor_view const& v) {
  tensor_desc const& d = *v.desc;
  tensor_ref<T> r;
  box const own = d.owned_box();
  r.shape.resize(static_cast<std::size_t>(d.ndim()));
  for (int i = 0; i < d.ndim(); ++i) r.shape[i] = own.extent(i);
  r.strides = d.strides();
  r.data = own.empty() ? nullptr : static_cast<T*>(v.data) + d.owned_offset_elements();
  return r;
}

/// The whole allocated spatial block of a local buffer (owned block plus halos along the
/// spatial dimensions, the owned range along N and C), placed at its global spatial origin:
/// what the `*_box` kernels read and write. Empty on a rank that owns nothing.
template <class T> [[nodiscard]] block_ref<T> haloed_block(tensor_view const& v) {
  tensor_desc const& d = *v.desc;
  int const nd = d.ndim();
  block_ref<T> b;
  box const own = d.owned_box();
  b.ref.strides = d.strides();
  b.ref.shape = d.local_shape();
  b.origin.assign(static_cast<std::size_t>(nd > 2 ? nd - 2 : 0), 0);
  if (own.empty()) {
    b.ref.shape.assign(static_cast<std::size_t>(nd), 0);
    return b;
  }
  b.ref.data = static_cast<T*>(v.data) + d.owned_offset_at(0) * d.strides()[0] +
               d.owned_offset_at(1) * d.strides()[1];
  b.ref.shape[0] = own.extent(0);
  b.ref.shape[1] = own.extent(1);
  for (int i = 2; i < nd; ++i) b.origin[i - 2] = own.lo[i] - d.owned_offset_at(i);
  return b;
}

} // namespace halox::ops
