#pragma once
// The trainer's model description: a list of layers with their parameters and parallel
// strategies, read from a small line-oriented text format (docs/trainer.md) or taken from the
// built-in models.
#include <halox/box.hpp>

#include <string>
#include <vector>

namespace trainer {

/// One layer as written in a model file.
struct layer_spec {
  std::string kind;     ///< conv, bn, relu, lrn, maxpool, avgpool, add, dropout, flatten, fc
  int line = 0;         ///< line in the model file (0 for built-in models)
  std::string label;    ///< name other layers refer to (`add from=LABEL`)
  std::string strategy; ///< sample, spatial, hybrid or NxCxHxW...; empty: the model's default
  int out = 0;          ///< conv: output channels; fc: output features
  std::vector<halox::index_t> kernel, stride, pad, dilation; ///< conv and pooling windows
  bool bias = true;                                          ///< conv and fc
  bool global_stats = true;                                  ///< bn: global or local statistics
  std::string from;                                          ///< add: label of the other input
  double p = 0.5;                                            ///< dropout probability
  int lrn_size = 5;                                          ///< lrn: channels per window
  double lrn_alpha = 1e-4; ///< lrn: scale of the sum of squares (divided by the size)
  double lrn_beta = 0.75;  ///< lrn: exponent
  double lrn_k = 1.0;      ///< lrn: additive constant
};

/// A whole model.
struct model_spec {
  std::string name;                  ///< model name
  std::string source;                ///< file it came from, or "built-in"
  std::vector<halox::index_t> input; ///< C, [D,] H, W of one sample
  int classes = 0;                   ///< number of classes (the last layer's output features)
  std::string dtype = "float32";     ///< float32 or float64
  std::string strategy = "sample";   ///< default strategy of the layers
  std::vector<layer_spec> layers;    ///< in order; softmax + cross-entropy follow the last
  /// Number of spatial dimensions (2 or 3).
  [[nodiscard]] int spatial_dims() const { return static_cast<int>(input.size()) - 1; }
};

/// Parses a model from `text`; `source` names it in error messages. Throws `halox::error`
/// naming the source, line and field of the first problem.
[[nodiscard]] model_spec parse_model(std::string const& text, std::string const& source);

/// Reads and parses a model file.
[[nodiscard]] model_spec load_model_file(std::string const& path);

/// Names of the built-in models.
[[nodiscard]] std::vector<std::string> builtin_model_names();

/// The text of a built-in model (the same as examples/cnn-trainer/models/NAME.model), or an
/// empty string when there is no such model.
[[nodiscard]] std::string builtin_model_text(std::string const& name);

/// A built-in model by name, or a model file when `name_or_file` is not a built-in name.
[[nodiscard]] model_spec resolve_model(std::string const& name_or_file);

/// Checks that `s` is a valid strategy string (sample, spatial, hybrid, or a grid written
/// NxCxHxW[xD]); returns an empty string when it is, else what is wrong.
[[nodiscard]] std::string check_strategy(std::string const& s, int spatial_dims);

/// The process grid [N, C, spatial...] a strategy means for `nprocs` processes and an input of
/// `shape` [N, C, spatial...]. Throws `halox::error` when an explicit grid does not multiply to
/// `nprocs`.
[[nodiscard]] std::vector<int> strategy_grid(std::string const& s, int nprocs,
                                             std::vector<halox::index_t> const& shape);

} // namespace trainer
