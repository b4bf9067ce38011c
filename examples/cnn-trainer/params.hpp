#pragma once
// The trainable parameters and state buffers of a model, replicated on every rank and shared
// by the networks built for different batch sizes.
#include <halox/box.hpp>

#include <string>
#include <vector>

namespace trainer {

/// One parameter array (weights, bias, gamma, beta) or state buffer (running statistics).
template <class T> struct param {
  std::string name;                  ///< unique, e.g. "3.conv.weight"
  std::vector<halox::index_t> shape; ///< global shape
  std::vector<T> value;              ///< the values, identical on every rank
  std::vector<T> grad;               ///< gradient of the last backward (trainable only)
  std::vector<T> velocity;           ///< SGD momentum buffer (trainable only)
  bool trainable = true;             ///< false: state updated by the forward pass
  bool decay = false;                ///< weight decay applies (weights, not biases or BN)
};

/// All parameters of a model, in layer order.
template <class T> struct param_store {
  std::vector<param<T>> params; ///< in the order the layers created them

  /// Adds a parameter filled with `init`; returns its index.
  int add(std::string name, std::vector<halox::index_t> shape, std::vector<T> init, bool trainable,
          bool decay) {
    param<T> p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.value = std::move(init);
    if (trainable) {
      p.grad.assign(p.value.size(), T(0));
      p.velocity.assign(p.value.size(), T(0));
    }
    p.trainable = trainable;
    p.decay = decay;
    params.push_back(std::move(p));
    return static_cast<int>(params.size()) - 1;
  }
};

} // namespace trainer
