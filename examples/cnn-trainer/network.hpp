#pragma once
// A network: the model's layers built for one global batch size, the buffers between them,
// and the moves (local copies or redistributions) where consecutive layers lay out their
// tensors differently. Forward, softmax + cross-entropy, backward.
#include "layers.hpp"
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

/// The layers of `m` built for batches of `batch` samples.
template <class T> class network {
public:
  /// Collective over `grids.comm()`. `rank_weight`: the ranks' shares of the work (`balancer`):
  /// every split dimension, samples or space, gives each part its ranks' share; empty: balanced
  /// blocks.
  network(model_spec const& m, halox::index_t batch, param_store<T>& ps,
          std::vector<layer_params> const& lp, grid_cache& grids, build_options const& bo = {},
          std::vector<double> const& rank_weight = {});
  /// Layout of the input batch (its owned block is what this rank's data loader fills).
  [[nodiscard]] halox::tensor_desc const& input_desc() const { return layers_[0]->in_desc(); }
  /// The input buffer (laid out as `input_desc()`).
  [[nodiscard]] std::vector<T>& input() { return x_[0]; }
  /// Layout of the class scores [N, classes] (sample-parallel).
  [[nodiscard]] halox::tensor_desc const& logits_desc() const { return layers_.back()->out_desc(); }
  /// Runs every layer forward.
  void forward(step_context const& c);
  /// Softmax + cross-entropy of the logits against `labels` (one per owned sample, in order);
  /// the loss is the mean over the `batch` samples of the whole batch, so the gradient of the
  /// logits is (softmax - one-hot) / batch. Returns this rank's sums.
  loss_sums loss(std::vector<int> const& labels, step_context const& c);
  /// Runs every layer backward from the gradient `loss` left; parameter gradients land in the
  /// store as this rank's partial sums, listed in `c.bucket` for the step to sum.
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
  /// Elements of the gradient arena, and what the gradients would take with a buffer each.
  [[nodiscard]] std::size_t gradient_elements() const noexcept { return grad_arena_.size(); }
  [[nodiscard]] std::size_t gradient_elements_unplanned() const noexcept { return grad_naive_; }

private:
  // A buffer and the layout it is read and written with. `buf` names the storage behind it
  // (an activation vector, or a gradient whose place in the gradient arena `data` is).
  struct slot {
    std::vector<T>* buf = nullptr;
    halox::tensor_desc const* desc = nullptr;
    T* data = nullptr;
    [[nodiscard]] halox::tensor_view view() const {
      return buf ? halox::tensor_view(*desc, data,
                                      static_cast<std::size_t>(desc->local_elements()) * sizeof(T))
                 : halox::tensor_view{};
    }
  };
  void plan_buffers();
  void plan_gradients();

  halox::index_t batch_;
  std::vector<std::unique_ptr<layer<T>>> layers_;
  std::vector<std::unique_ptr<transfer<T>>> moves_; // moves_[i]: layer i-1 -> layer i, if not local
  std::vector<bool> local_;      // layer i-1's output blocks are layer i's input blocks
  std::vector<bool> in_place_;   // layer i reads and writes one buffer (pointwise layers)
  std::vector<bool> fused_away_; // layer i (a ReLU) runs inside layer i-1
  std::vector<slot> in_, out_, dout_, din_; // x, y, dy and dx of each layer
  // Storage behind the slots: x_[i] layer i's input, y_[i] its output where it is moved by a
  // redistribution (or is the logits). dy_[i] / dx_[i] name the gradients likewise, but stay
  // empty: the gradients live in `grad_arena_`, placed by their lifetimes (plan_gradients).
  std::vector<std::vector<T>> x_, y_, dx_, dy_, skip_grad_;
  std::vector<T> grad_arena_;
  std::size_t grad_naive_ = 0; // elements the gradients would take, one buffer each
  std::vector<halox::tensor_desc const*> skip_desc_; // layout of a skip source's output
  std::vector<bool> is_skip_source_;
  std::vector<std::string> kinds_;
};

} // namespace trainer
