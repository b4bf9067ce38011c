#pragma once
// SGD with momentum and weight decay (PyTorch's formulation), applied identically on every
// rank to the replicated parameters and their all-reduced gradients.
#include "params.hpp"

namespace trainer {

/// Hyper-parameters of the optimizer.
struct sgd {
  double lr = 0.05;           ///< learning rate
  double momentum = 0.9;      ///< v = momentum * v + g
  double weight_decay = 5e-4; ///< g += weight_decay * w on parameters flagged `decay`

  /// One step on every trainable parameter of `ps`.
  template <class T> void step(param_store<T>& ps) const {
    for (auto& p : ps.params) {
      if (!p.trainable) continue;
      T const wd = p.decay ? T(weight_decay) : T(0), mu = T(momentum), a = T(lr);
      for (std::size_t i = 0; i < p.value.size(); ++i) {
        T const g = p.grad[i] + wd * p.value[i];
        p.velocity[i] = mu * p.velocity[i] + g;
        p.value[i] -= a * p.velocity[i];
      }
    }
  }
};

} // namespace trainer
