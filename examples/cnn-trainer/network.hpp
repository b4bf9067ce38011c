#pragma once
// A network: the model's layers built for one global batch size, the buffers between them,
// and the moves (local copies or redistributions) where consecutive layers lay out their
// tensors differently. Forward, softmax + cross-entropy, backward.
#include "layers.hpp"
#include "memory_plan.hpp"
#include "transfer.hpp"

#include <memory>
#include <string>
#include <vector>

namespace trainer {

/// Creates the model's parameters (deterministic initialisation from `seed`, the same on
/// every rank) and returns each layer's parameter indices. Checks the shapes flowing through
/// the layers; throws `halox::error` naming the model file and line of a layer that does not
/// fit its input.
template <class T>
std::vector<layer_params> make_params(model_spec const& m, std::uint64_t seed, param_store<T>& ps);

/// Sums of one batch's loss (on the calling rank's samples).
struct loss_sums {
  double loss = 0;    ///< sum over the rank's samples of the cross-entropy
  double correct = 0; ///< samples whose arg-max is the label
};

/// How a network holds its step's memory: which layers' inputs are checkpoints of segments
/// whose forward runs again during backward, and whether convolutions keep their reordered
/// inputs from forward to backward.
struct memory_plan {
  /// The first layer of every segment after the first, ascending (each one a layer whose
  /// forward leaves its input unchanged: `network::segment_starts()`). Empty: no recomputation,
  /// every activation that backward reads is kept from forward.
  std::vector<std::size_t> segments;
  /// A convolution keeps its reordered input from forward to backward
  /// (dist_options::keep_reorders) where that input takes at most this many bytes on this rank:
  /// the copy saves one reorder per step, which matters on small maps, and costs a copy of the
  /// input, which matters on large ones. 0: none keeps; SIZE_MAX: all do.
  std::size_t keep_reorders = auto_keep;
  /// What --keep-reorders auto keeps: inputs up to 4 MiB per rank.
  static constexpr std::size_t auto_keep = std::size_t(4) << 20;
  /// The outputs of cheap layers (batch norm, pooling, an unfused ReLU) that feed the next
  /// layer directly are dropped after forward and computed again, from the layer's input,
  /// right before backward first reads them: a convolution's input then lives through its own
  /// backward only. Cheaper than segments (no convolution runs twice).
  bool recompute_cheap = false;
  /// Each layer call's share of the operators' shared scratch (the copies and scratchpads
  /// oneDNN needs, recorded in the network's first step) is placed in the arena by lifetime and
  /// lent to the call (ops::lend_scratch), sharing bytes with what is dead at that moment
  /// instead of adding to the step's peak.
  bool scratch = true;
};

/// Bytes one rank uses for a step, by kind (see `network::memory`).
struct step_memory {
  std::size_t arena = 0;         ///< activations and gradients as placed by lifetime
  std::size_t activations = 0;   ///< of which activation buffers, one allocation each
  std::size_t gradients = 0;     ///< and gradient buffers, one allocation each
  std::size_t operators = 0;     ///< held by the layers' operators between calls, and own scratch
  std::size_t kept_reorders = 0; ///< of which reordered copies kept from forward to backward
  std::size_t keepable_reorders = 0; ///< what they are with keep_reorders on
  std::size_t moves = 0;             ///< redistribution workspaces between layers
  std::size_t shared = 0;            ///< the operators' shared scratch (per thread, not per layer)
  std::size_t shared_peak = 0;       ///< the most it held so far (first calls measure candidates)
  [[nodiscard]] std::size_t total() const noexcept { return arena + operators + moves + shared; }
};

/// The layers of `m` built for batches of `batch` samples.
template <class T> class network {
public:
  /// Collective over `grids.comm()`. `rank_weight`: the ranks' shares of the work (`balancer`):
  /// every split dimension, samples or space, gives each part its ranks' share; empty: balanced
  /// blocks.
  network(model_spec const& m, halox::index_t batch, param_store<T>& ps,
          std::vector<layer_params> const& lp, grid_cache& grids, build_options const& bo = {},
          std::vector<double> const& rank_weight = {}, memory_plan const& plan = {},
          bool own_arena = true);
  /// Layout of the input batch (its owned block is what this rank's data loader fills).
  [[nodiscard]] halox::tensor_desc const& input_desc() const { return layers_[0]->in_desc(); }
  /// The input buffer (laid out as `input_desc()`, `input_desc().local_elements()` values).
  [[nodiscard]] T* input() { return in_[0].data; }
  /// Layout of the class scores [N, classes] (sample-parallel).
  [[nodiscard]] halox::tensor_desc const& logits_desc() const { return layers_.back()->out_desc(); }
  /// Runs every layer forward.
  void forward(step_context const& c);
  /// Softmax + cross-entropy of the logits against `labels` (one per owned sample, in order);
  /// the loss is the mean over the `batch` samples of the whole batch, so the gradient of the
  /// logits is (softmax - one-hot) / batch. Returns this rank's sums.
  loss_sums loss(std::vector<int> const& labels, step_context const& c);
  /// Runs every layer backward from the gradient `loss` left (recomputing the forward of each
  /// checkpointed segment first); parameter gradients land in the store as this rank's partial
  /// sums, listed in `c.bucket` for the step to sum.
  void backward(step_context const& c);
  /// One line per layer: kind, strategy grid, input and output shape, moves.
  [[nodiscard]] std::string describe() const;
  /// What each layer's operator measured and chose while training, on this rank (layers that
  /// choose nothing are left out).
  [[nodiscard]] std::string describe_tuned() const;
  /// Each layer's kind as the model file names it (conv, relu, ...).
  [[nodiscard]] std::vector<std::string> const& kinds() const noexcept { return kinds_; }
  /// Global batch size.
  [[nodiscard]] halox::index_t batch() const noexcept { return batch_; }

  /// The plan in force.
  [[nodiscard]] memory_plan const& plan() const noexcept { return plan_; }
  /// Switches to `p`: the step's buffers are placed again (their content is lost: call between
  /// steps) and the convolutions told whether to keep reorders. Not collective; every rank
  /// must switch to the same plan before the next step.
  void set_plan(memory_plan const& p);
  /// Layers a segment may start at: where recomputing from the layer's input reproduces the
  /// forward (a layer that does not update its input in place), after the first layer.
  [[nodiscard]] std::vector<std::size_t> segment_starts() const;
  /// Whether some layer's output can be recomputed cheaply (memory_plan::recompute_cheap).
  [[nodiscard]] bool has_cheap_layers() const {
    for (std::size_t j = 0; j < layers_.size(); ++j)
      if (cheap(j)) return true;
    return false;
  }
  /// The first step recorded what each layer's calls ask of the operators' shared scratch, and
  /// the plan in force does not place it yet: `set_plan(plan())` does.
  [[nodiscard]] bool scratch_ready() const noexcept {
    return recorded_ && plan_.scratch && !placed_;
  }
  /// Bytes of the arena the plan in force needs (see `bind`).
  [[nodiscard]] std::size_t arena_need() const noexcept { return need_; }
  /// Places the step's buffers in `base` (at least `arena_need()` bytes, 64-byte aligned),
  /// which the caller owns: networks that never run at the same time (other batch sizes) can
  /// share one. Only for a network built without an arena of its own; call again after
  /// `set_plan`.
  void bind(T* base);
  /// The arena bytes plan `p` would take on this rank (pure arithmetic).
  [[nodiscard]] std::size_t arena_bytes(memory_plan const& p) const;
  /// `k` segments (k - 1 of them recomputed) whose starts split the activations into parts of
  /// about equal bytes; fewer where the network has fewer places to start one.
  [[nodiscard]] memory_plan segmented(int k, std::size_t keep_reorders) const;
  /// What a step would take on this rank under plan `p`: its arena exactly, the operators as
  /// measured by the calls so far (kept reorders as `p` says), moves and shared scratch.
  [[nodiscard]] std::size_t predict(memory_plan const& p) const;
  /// This rank's memory now, by kind (operator sizes follow the calls made so far).
  [[nodiscard]] step_memory memory() const;
  /// Per layer: its activation bytes (its output, or its input for the first layer), the
  /// gradient of its output, and what its operator holds, one line each, then the totals.
  [[nodiscard]] std::string describe_memory() const;

private:
  // A buffer and the layout it is read and written with; `id` names the storage behind it
  // (several slots share one where layers chain or run in place), -1 none.
  struct slot {
    int id = -1;
    halox::tensor_desc const* desc = nullptr;
    T* data = nullptr;
    [[nodiscard]] halox::tensor_view view() const {
      return id >= 0
                 ? halox::tensor_view(*desc, data,
                                      static_cast<std::size_t>(desc->local_elements()) * sizeof(T))
                 : halox::tensor_view{};
    }
  };
  // One step of the schedule that forward and backward run, and that places the buffers.
  enum class act { load, move_fwd, fwd, loss, zero_skip, add_skip, bwd, move_bwd, halo };
  struct action {
    act what;
    std::size_t layer;
    bool recompute = false;
  };
  void plan_slots();
  [[nodiscard]] std::vector<action> schedule(memory_plan const& p) const;
  [[nodiscard]] std::vector<std::size_t> storage_sizes(memory_plan const& p) const;
  [[nodiscard]] placement place(memory_plan const& p, std::vector<action> const& s) const;
  void run(action const& a, step_context const& c);
  // Around layer i's call: records what it asks of the shared scratch (first step), or lends it
  // its place in the arena (`on`), or takes it back.
  void scratch_call(std::size_t i, bool backward, bool on);
  std::vector<halox::ops::scratch_need> need_fwd_, need_bwd_; // per layer
  // The bytes of a call's scratch placed in the arena: none where it is small (under 4 MiB),
  // which stays in the operators' own buffers, hot in cache from call to call.
  static std::size_t lent(halox::ops::scratch_need const& n) {
    return n.bytes >= (std::size_t(4) << 20) ? n.bytes : 0;
  }
  bool recording_ = true, recorded_ = false, placed_ = false;
  // Whether layer i keeps reorders under plan p.
  [[nodiscard]] bool keeps(std::size_t i, memory_plan const& p) const;
  // Cheap layers whose outputs are computed again in backward (memory_plan::recompute_cheap).
  [[nodiscard]] bool cheap(std::size_t j) const;
  void regenerate(std::size_t i, std::vector<bool>& fresh, std::vector<action>& s) const;
  void ensure(int id, std::vector<bool>& fresh, std::vector<action>& s) const;

  halox::index_t batch_;
  std::vector<std::unique_ptr<layer<T>>> layers_;
  std::vector<std::unique_ptr<transfer<T>>> moves_; // moves_[i]: layer i-1 -> layer i, if not local
  std::vector<bool> local_;      // layer i-1's output blocks are layer i's input blocks
  std::vector<bool> in_place_;   // layer i reads and writes one buffer (pointwise layers)
  std::vector<bool> fused_away_; // layer i (a ReLU) runs inside layer i-1
  std::vector<slot> in_, out_, dout_, din_; // x, y, dy and dx of each layer
  // Storages, by id: 0..L-1 layer i's input, L.. its output where it is not the next layer's
  // input, 2L.. dx where moved, 3L.. dy, 4L.. the gradient a residual add sends back to layer
  // i, 5L + 2i and 5L + 2i + 1 the operators' scratch of layer i's forward and backward. All
  // live in the arena, placed by lifetime; `where_[id]` is a storage's address.
  std::vector<T> arena_; // own_: the arena; otherwise empty and the caller's `bind`s it
  bool own_ = true;
  std::size_t need_ = 0;             // bytes of the arena of the plan in force
  std::vector<std::size_t> offsets_; // of each storage in it
  std::vector<T*> where_;
  std::vector<halox::tensor_desc const*> skip_desc_; // layout of a skip source's output
  std::vector<bool> is_skip_source_;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::vector<std::size_t> skip_src_;   // of an add layer: the layer whose output it adds
  std::vector<std::size_t> skip_first_; // of a skip source: the add whose backward feeds it first
  std::vector<int> skip_out_;           // of a skip source: the storage of its output
  std::vector<std::string> kinds_;
  memory_plan plan_;
  std::vector<action> forward_, backward_;     // the schedule in force
  std::size_t act_bytes_ = 0, grad_bytes_ = 0; // one allocation per storage
  std::size_t live_peak_ = 0;                  // the most bytes live at once in the arena
};

} // namespace trainer
