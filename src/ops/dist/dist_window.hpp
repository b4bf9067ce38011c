#pragma once
// The distributed part of a windowed layer (convolution or pooling), independent of the
// element type and of what the kernels compute: descriptors with derived halos and output
// distribution, the forward halo plan, the backward dy gather, this rank's interior and
// boundary boxes, and the overlap loop that runs kernels around an exchange.

#include "ops/dist/dist_geometry.hpp"
#include "ops/providers/memory.hpp"

#include <halox/box_gather.hpp>
#include <halox/halo.hpp>
#include <halox/ops/dist_common.hpp>
#include <halox/ops/provider.hpp>
#include <halox/tensor_desc.hpp>

#include <mpi.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace halox::ops::detail {

/// Chooses by measurement, for one direction of one layer, between splitting off the interior
/// (computed while the exchange runs, the boundary boxes after it) and computing the whole
/// block in one call after the exchange (`dist_options::overlap_trials`). Calls 0 and 1 run
/// one mode each untimed (they build the kernels); the next 2 x trials alternate and keep each
/// mode's fastest call; then `record` sums the two over the ranks (one collective, the same call
/// on every rank) and fixes the mode whose sum is smaller, the split on a tie. Pure state: the
/// caller times the calls and provides the sum.
class overlap_tuner {
public:
  /// `trials` timed calls per mode; 0: always split (nothing measured).
  explicit overlap_tuner(int trials = 0) : trials_(trials) {}

  /// Whether the next call splits off the interior.
  [[nodiscard]] bool split() const noexcept {
    if (trials_ == 0) return true;
    if (chosen_ >= 0) return chosen_ == 1;
    return calls_ % 2 == 0;
  }
  /// Records the call just made (in the mode `split()` gave), which took `seconds`; on the last
  /// measured call, `sum(v)` replaces v[0] (whole) and v[1] (split) by their sums over the ranks.
  template <class Sum> void record(double seconds, Sum&& sum) {
    if (trials_ == 0 || chosen_ >= 0) return;
    int const mode = calls_ % 2 == 0 ? 1 : 0;
    if (calls_ >= 2) best_[mode] = calls_ < 4 ? seconds : std::min(best_[mode], seconds);
    if (++calls_ < 2 + 2 * trials_) return;
    sum(best_);
    chosen_ = best_[0] < best_[1] ? 0 : 1;
  }
  /// Measuring, or the mode kept and the summed fastest calls it was chosen by.
  [[nodiscard]] std::string describe() const;

private:
  int trials_ = 0, calls_ = 0, chosen_ = -1; // chosen_: -1 measuring, 0 whole, 1 split
  double best_[2] = {0, 0};                  // fastest call of [whole, split]
};

/// Geometry and communication of one distributed windowed layer.
struct window_layer {
  /// Collective over `x`'s grid. `win` has one window per spatial dimension; `out_channels` is
  /// the channel count of the output; with `x_for_backward` the input halo also covers what
  /// max-pooling backward re-reads (the input footprint of the output footprint of each block);
  /// `fill` is applied to halo cells beyond the global boundary; `what` names the operator in
  /// errors.
  window_layer(char const* what, tensor_desc const& x, std::vector<win1> win, index_t out_channels,
               bool x_for_backward, boundary_fill fill, dist_options const& o);

  std::string name;                        ///< operator name for messages
  std::vector<win1> win;                   ///< per spatial dimension
  std::vector<index_t> in_ext;             ///< global spatial input extent
  dist_options opt;                        ///< as given
  memory_space mem = memory_space::host;   ///< where x, y, dy, dx and the workspace live
  std::optional<tensor_desc> in;           ///< input with halos (what callers allocate for x)
  std::optional<tensor_desc> out;          ///< output, no halos, derived part sizes
  std::vector<int> halo_lo, halo_hi;       ///< input halos per dimension (0 on N and C)
  std::unique_ptr<halo_plan> halo;         ///< forward exchange of the input
  std::unique_ptr<box_gather_plan> gather; ///< backward gather of dy
  /// With measured overlap: the dy gather that copies all of the rank's own dy the block needs
  /// into the workspace, for backward calls computed whole (`gather` copies only what the
  /// boundary boxes read). The same messages as `gather`.
  std::unique_ptr<box_gather_plan> gather_whole;
  overlap_tuner fwd_tune, bwd_tune; ///< split or whole, per direction
  communicator tune_comm;           ///< private, for the tuners' one all-reduce each

  box in_own, out_own;           ///< this rank's owned spatial boxes (global coordinates)
  box fwd_interior;              ///< outputs computable from owned inputs only
  std::vector<box> fwd_boundary; ///< the rest of out_own
  box bwd_interior;              ///< inputs whose gradient needs only owned dy
  std::vector<box> bwd_boundary; ///< the rest of in_own
  /// Pieces of the overlapped interior (`progress_pieces`).
  int fwd_polls = 1, bwd_polls = 1;
  /// Every part's backward reads only dy it owns (no split spatial dimension, or windows that
  /// never cross a block edge): backward reads dy in place and runs no gather on any rank.
  bool dy_local = false;

  /// The dy gather of a backward call: `gather`, or with `split` false `gather_whole` where
  /// built.
  [[nodiscard]] box_gather_plan& gather_for(bool split) const {
    return split || !gather_whole ? *gather : *gather_whole;
  }

  /// Multi-line account of halos, output distribution, boxes and exchanges.
  [[nodiscard]] std::string describe() const;
  /// What the plans hold for their life (the halo exchange's pack buffers and staging), as
  /// held memory; the dy a backward call gathers lives in the shared workspace.
  [[nodiscard]] memory_use plan_memory() const;
  /// Fills x's halo as a forward call does (the operators' `exchange_halo`); `what` names the
  /// caller in the layout check's error.
  void exchange_halo(tensor_view const& x, char const* what) const;
};

/// Where a backward call of `L` gathers dy with `g` (null when it gathers nothing): the thread's
/// shared workspace in the layer's memory space, needed until that call returns, not one buffer
/// per layer.
template <class T>
[[nodiscard]] T* gather_workspace(window_layer const& L, bool gathers, box_gather_plan const& g) {
  return gathers ? static_cast<T*>(shared_workspace(
                       space_ops(L.mem), static_cast<std::size_t>(g.elements()) * sizeof(T)))
                 : nullptr;
}

/// `w`'s areas as held memory (pinned host memory counts as host memory).
[[nodiscard]] memory_use held(workspace_size const& w) noexcept;

/// Throws unless `o.overlap_trials` is in [0, 1000]; `what` names the operator.
void check_overlap_trials(std::string const& what, dist_options const& o);

/// The tuners' collective: v[0] and v[1] summed over `comm` (the same call on every rank).
void sum_over(MPI_Comm comm, double (&v)[2]);

/// Whether a layer measures its overlap (the same on every rank): overlap on, trials asked
/// for, and more than one rank.
[[nodiscard]] bool measures_overlap(dist_options const& o, MPI_Comm comm);

/// Resolves `o.provider` for element type `t` and checks that a distributed layer can run it:
/// a non-negative thread count and, for a provider computing on device memory (cudnn), a
/// visible GPU and a backend that moves device memory (or `automatic`). Returns the memory
/// space of the layer's buffers. Call inside the constructor's collective check, so that a rank
/// without a GPU fails everywhere.
memory_space check_provider(std::string const& what, dist_options const& o, dtype t);

/// Throws `halox::error` unless `v` is a buffer of a tensor with the same global shape, dtype
/// and blocks as `expected` (halo widths and strides may differ) and large enough.
void check_partition(tensor_view const& v, tensor_desc const& expected, char const* what);
/// Throws unless `v` is laid out exactly as `expected` (same distribution and strides).
void check_layout(tensor_view const& v, tensor_desc const& expected, char const* what);

/// "[2, 3, 4]" for messages.
[[nodiscard]] std::string shape_str(dims const& shape);

/// The MPI datatype of float or double.
template <class T> MPI_Datatype mpi_type() {
  return std::is_same_v<T, float> ? MPI_FLOAT : MPI_DOUBLE;
}

/// The gathered workspace `ws` of `g` as a block at its global spatial origin.
template <class T> const_block_ref<T> workspace_block(T const* ws, box_gather_plan const& g) {
  dims const origin(g.origin().begin() + 2, g.origin().end());
  return const_block_ref<T>(const_tensor_ref<T>(ws, g.shape()), origin);
}

/// What a backward call's boxes read as gathered dy: the workspace `ws` of `g`, or, where nothing
/// is gathered (`gathers` false: `window_layer::dy_local`), the caller's `dy_own` in place, except
/// on a rank that owns no outputs (`out_own` empty), which reads the empty workspace: it keeps the
/// batch and channel extents the kernels check.
template <class T> const_block_ref<T> gathered_dy(bool gathers, box const& out_own, T const* ws,
                                                  box_gather_plan const& g,
                                                  const_block_ref<T> const& dy_own) {
  return gathers || out_own.empty() ? workspace_block<T>(ws, g) : dy_own;
}

/// A private duplicate of `c` (collective), so an operator's own collectives never match the
/// caller's.
[[nodiscard]] communicator dup_comm(MPI_Comm c);

/// `b` cut along its first dimension of extent > 1 into at most `n` slabs of nearly equal
/// size (just `b` when n <= 1 or nothing can be cut).
[[nodiscard]] std::vector<box> split_box(box const& b, int n);
/// How many slabs `split_box(b, n)` holds, and slab `i` of them, without building the list
/// (overlapped kernels cut their interior on every execution).
[[nodiscard]] int slab_count(box const& b, int n);
[[nodiscard]] box slab(box const& b, int n, int i);

/// Lets MPI advance transfers in flight: without an asynchronous progress thread, a large
/// (rendezvous) message moves only while its receiver is inside an MPI call, so a rank busy in
/// a kernel would otherwise leave it waiting until `wait()`. Probing changes no state.
void poke_progress(MPI_Comm comm);

/// The first step of the backward of a layer whose ReLU is fused into it: turns `dy`, the
/// gradient of the ReLU's output `y`, into the gradient of the layer's own output (dy where
/// y > 0, else 0) in place on the owned block. Both have the blocks of `d`; `y_name` and
/// `dy_name` name them in errors. Returns the seconds it took (the layer's backward then resets
/// its timings).
template <class T> double mask_relu_gradient(local_kernels<T>& k, tensor_desc const& d,
                                             tensor_view const& y, tensor_view const& dy,
                                             char const* y_name, char const* dy_name) {
  double const t0 = MPI_Wtime();
  check_partition(y, d, y_name);
  check_partition(dy, d, dy_name);
  if (!d.empty()) k.relu_backward(owned_ref<T const>(y), owned_ref<T const>(dy), owned_ref<T>(dy));
  return MPI_Wtime() - t0;
}

/// Pieces to compute an overlapped interior in: `o.progress_polls` while this rank's exchange
/// moves messages large enough to need MPI progress (`o.progress_min_bytes` per peer on
/// average), else 1 (no peers, as in a sample-parallel split, or small eager messages: one
/// kernel call on the whole interior is faster than several on its slabs).
inline int progress_pieces(dist_options const& o, std::size_t bytes, int peers) {
  if (peers <= 0 || bytes == 0) return 1;
  return bytes / static_cast<std::size_t>(peers) >= o.progress_min_bytes ? o.progress_polls : 1;
}

/// Runs `kernel(piece, false)` over `b` in `polls` pieces, poking MPI progress on `comm` after
/// each: how the interior computes while an exchange is in flight. Sub-box kernels are exact,
/// so the pieces give the same bits as one call.
template <class Kernel>
void run_in_pieces(box const& b, int polls, MPI_Comm comm, Kernel&& kernel) {
  for (int i = 0, n = slab_count(b, polls); i < n; ++i) {
    kernel(slab(b, polls, i), false);
    poke_progress(comm);
  }
}

/// Runs `kernel(box, after_exchange)` on `interior` between `start()` and `wait()` (in `polls`
/// pieces, see `run_in_pieces`), then on the `boundary` boxes; without `split`, after `wait()`
/// on `whole`. Accumulates into `t`.
template <class Start, class Wait, class Kernel>
void run_overlapped(bool split, int polls, MPI_Comm comm, Start&& start, Wait&& wait,
                    box const& interior, std::vector<box> const& boundary, box const& whole,
                    Kernel&& kernel, dist_timings& t) {
  double c = MPI_Wtime();
  start();
  double n = MPI_Wtime();
  t.start += n - c;
  if (split && !interior.empty()) {
    run_in_pieces(interior, polls, comm, kernel);
    c = MPI_Wtime();
    t.compute += c - n;
    n = c;
  }
  wait();
  c = MPI_Wtime();
  t.wait += c - n;
  if (split) {
    for (auto const& b : boundary) kernel(b, true);
  } else if (!whole.empty()) {
    kernel(whole, true);
  }
  t.compute += MPI_Wtime() - c;
}

/// `run_overlapped` in the mode `tune` gives (split only with `o.overlap`), recording the call's
/// time with `tune` (all-reduced over `tune_comm` when the measuring ends).
template <class Start, class Wait, class Kernel>
void run_tuned(dist_options const& o, overlap_tuner& tune, MPI_Comm tune_comm, int polls,
               MPI_Comm comm, Start&& start, Wait&& wait, box const& interior,
               std::vector<box> const& boundary, box const& whole, Kernel&& kernel,
               dist_timings& t) {
  bool const split = o.overlap && tune.split();
  double const t0 = MPI_Wtime();
  run_overlapped(split, polls, comm, start, wait, interior, boundary, whole, kernel, t);
  tune.record(MPI_Wtime() - t0, [&](double(&v)[2]) { sum_over(tune_comm, v); });
}

} // namespace halox::ops::detail
