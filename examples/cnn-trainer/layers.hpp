#pragma once
// The layers of the trainer's networks. Each layer is built for one batch size from the
// descriptor of its input blocks and says how its input buffer must be laid out (halos
// included) and what its output blocks are; the network allocates the buffers and moves data
// between layers.
#include "model.hpp"
#include "params.hpp"
#include "tensor_util.hpp"

#include <halox/backend.hpp>
#include <halox/grid.hpp>
#include <halox/ops/provider.hpp>
#include <halox/tensor_desc.hpp>

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

namespace trainer {

/// Process grids over the world communicator, one per distinct shape of grid, built on
/// first use (building one is collective, so every rank asks for the same grids in the same
/// order).
class grid_cache {
public:
  explicit grid_cache(MPI_Comm comm) : comm_(comm) {}
  /// The grid with extents `dims`.
  halox::process_grid const& get(std::vector<int> const& dims);
  /// The communicator the grids are built over.
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }

private:
  MPI_Comm comm_;
  std::map<std::vector<int>, std::unique_ptr<halox::process_grid>> grids_;
};

/// Indices of a layer's parameters in the `param_store` (-1: the layer has none).
struct layer_params {
  int weight = -1, bias = -1, gamma = -1, beta = -1, running_mean = -1, running_var = -1;
};

/// Wall time per layer summed over the profiled steps (--profile), in seconds. Entry i covers
/// layer i and the move into it (forward) or out of it (backward); `*_comm` is the part spent
/// in halo exchanges, redistributions and all-reductions.
struct layer_clock {
  std::vector<double> fwd, bwd, fwd_comm, bwd_comm;
  double step = 0; ///< whole steps (data, loss, optimizer and the final gradient wait included)
  long steps = 0;  ///< steps summed
};

class grad_reducer;

/// A parameter gradient (`count` elements of the network's type at `data`) that holds this
/// rank's partial sum after backward; the step sums it over the ranks. `in_double`: `count`
/// doubles instead (exact_grads' partial sums, which a finisher rounds into the gradients).
struct grad_part {
  void* data = nullptr;
  std::size_t count = 0;
  bool in_double = false;
};

/// What a forward or backward call needs beyond its buffers.
struct step_context {
  bool training = true;         ///< batch statistics and dropout (true) or inference
  std::uint64_t seed = 0;       ///< the run's seed (dropout masks)
  std::uint64_t step = 0;       ///< global step number (dropout masks)
  phase_times* times = nullptr; ///< where the layer adds its time
  /// The gradient buckets: layers leave their weight and bias gradients as partial sums and
  /// add them here, in backward order (the same on every rank); the reducer sums them over the
  /// ranks in buckets that start while the layers below run backward.
  grad_reducer* grads = nullptr;
  /// Run once the bucket is summed: turn double sums into the parameter gradients.
  std::vector<std::function<void()>>* finish = nullptr;
  /// Convolution and FC weight gradients accumulated in double and summed in double across
  /// ranks, rounded once, so float32 runs follow the 1-rank trajectory closely.
  bool exact_grads = false;
  /// Where the network adds each layer's time (--profile); null: not measured.
  layer_clock* clock = nullptr;
  /// A forward run again during backward (a checkpointed segment): the same results, but no
  /// lasting effect (batch norm leaves its running statistics alone).
  bool recompute = false;
};

/// A layer of a network built for one batch size.
template <class T> class layer {
public:
  virtual ~layer() = default;
  /// Layout the input buffer x (and dx) must have.
  [[nodiscard]] virtual halox::tensor_desc const& in_desc() const = 0;
  /// Layout of the output y and of dy.
  [[nodiscard]] virtual halox::tensor_desc const& out_desc() const = 0;
  /// y = layer(x). x's halos may be overwritten.
  virtual void forward(halox::tensor_view const& x, halox::tensor_view const& y,
                       step_context const& c) = 0;
  /// dx from dy (x and y are the buffers of the last forward); parameter gradients into the
  /// store. `dx` is an empty view when the gradient of the input is not needed (first layer).
  virtual void backward(halox::tensor_view const& x, halox::tensor_view const& y,
                        halox::tensor_view const& dy, halox::tensor_view const& dx,
                        step_context const& c) = 0;
  /// Asks the layer to apply a ReLU to its output in the same pass, and to take the gradient of
  /// the ReLU's output in backward (then `y` is the ReLU's output and `dy` may be overwritten).
  /// False when the layer cannot; the network then runs the ReLU itself.
  virtual bool fuse_relu() { return false; }
  /// What the layer's operator measured and chose while training (overlap modes, kernel
  /// layouts, exchanges), for --describe; empty for layers that choose nothing.
  [[nodiscard]] virtual std::string tuned() const { return {}; }
  /// Whether backward reads the forward's input x, and its output y: the network keeps a
  /// buffer from forward to backward only where one does.
  [[nodiscard]] virtual bool backward_reads_input() const { return true; }
  [[nodiscard]] virtual bool backward_reads_output() const { return false; }
  /// What the layer holds besides its input and output buffers (its operator's memory, its own
  /// scratch), on this rank; sizes follow the calls made so far.
  [[nodiscard]] virtual halox::ops::memory_use memory() const { return {}; }
  /// Fills the halo of its input buffer `x` as its forward does (collective), after the layer
  /// before computed x's owned cells again; layers without an input halo do nothing.
  virtual void exchange_halo(halox::tensor_view const& x) { (void)x; }
  /// Whether its operator may keep reordered copies from forward to backward
  /// (dist_options::keep_reorders); layers that keep none ignore it.
  virtual void keep_reorders(bool keep) { (void)keep; }
};

/// Buffers of another layer that a residual add reads and accumulates into (laid out as `desc`:
/// the other layer's output, or the input buffer of the layer after it when the network writes
/// that output there directly).
template <class T> struct skip_source {
  halox::tensor_desc const* desc = nullptr; ///< layout of `output` and `grad`
  T* const* output = nullptr; ///< where its output lies (read in forward; placed by the network)
  T* const* grad = nullptr;   ///< where its extra gradient lies (accumulated in backward)
};

/// How layers are built, beyond the model file.
struct build_options {
  /// Kernels whose results do not depend on how the blocks are split (`--deterministic`): the
  /// LRN layer then runs halox's own kernels on every rank, where oneDNN would choose its
  /// implementation by block shape.
  bool deterministic = false;
  /// How the operators' halo exchanges and gathers and the redistributions between layers move
  /// data (--backend); a fixed backend, so that no plan measures candidates at build time.
  halox::backend exchange = halox::backend::mpi_pack;
};

/// Builds the layer `spec` (number `index` in the model) whose input has the blocks of `x`.
template <class T>
std::unique_ptr<layer<T>> make_layer(layer_spec const& spec, int index, halox::tensor_desc const& x,
                                     param_store<T>& store, layer_params const& lp,
                                     grid_cache& grids, skip_source<T> const& skip,
                                     build_options const& bo);

} // namespace trainer
