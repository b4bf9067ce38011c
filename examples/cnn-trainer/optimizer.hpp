#pragma once
// SGD with momentum and weight decay (PyTorch's formulation), applied identically on every
// rank to the replicated parameters and their all-reduced gradients.
#include "params.hpp"

#include <cstddef>

namespace trainer {

/// One SGD update of n parameters: g = grad + wd * value, velocity = mu * velocity + g,
/// value -= lr * velocity, element by element (a SIMD loop; simd_clones.hpp).
template <class T>
void sgd_update(std::size_t n, T* value, T const* grad, T* velocity, T wd, T mu, T lr);

/// Hyper-parameters of the optimizer.
struct sgd {
  double lr = 0.05;           ///< learning rate
  double momentum = 0.9;      ///< v = momentum * v + g
  double weight_decay = 5e-4; ///< g += weight_decay * w on parameters flagged `decay`

  /// One step on every trainable parameter of `ps`.
  template <class T> void step(param_store<T>& ps) const {
    for (auto& p : ps.params) {
      if (!p.trainable) continue;
      sgd_update(p.value.size(), p.value.data(), p.grad.data(), p.velocity.data(),
                 p.decay ? T(weight_decay) : T(0), T(momentum), T(lr));
    }
  }
};

} // namespace trainer
