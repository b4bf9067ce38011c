#pragma once
// oneDNN LRN across channels on the caller's strided views, in a dense layout chosen per shape:
// plain, or channel-blocked where only that layout has oneDNN's optimised kernels (the views are
// reordered into it and back). Where oneDNN has only its reference implementation, or centres
// the window differently from PyTorch (even sizes: one channel fewer below), the caller uses
// halox's reference kernels. Backward runs the training forward again on x to get oneDNN's
// workspace.

#include "ops/onednn/onednn_common.hpp"

#include <halox/ops/lrn.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace halox::ops::detail::onednn {

/// Builds, caches (per shape and parameters) and runs LRN primitives.
class lrn_engine {
public:
  lrn_engine();
  ~lrn_engine();
  lrn_engine(lrn_engine const&) = delete;
  lrn_engine& operator=(lrn_engine const&) = delete;

  /// As `lrn_forward`; false when oneDNN cannot express the problem (the caller then uses the
  /// reference kernel).
  bool forward(const_tensor_ref<float> x, tensor_ref<float> y, lrn_params const& p);
  /// As `lrn_backward`; false as for `forward`.
  bool backward(const_tensor_ref<float> x, const_tensor_ref<float> dy, tensor_ref<float> dx,
                lrn_params const& p);
  /// One line per problem seen.
  [[nodiscard]] std::string describe() const;

private:
  struct plan;
  struct io;
  plan* find(const_tensor_ref<float> const& x, lrn_params const& p, bool for_backward);
  // The views of one call as memories and their reorders, per problem and view layout (built
  // once: a repeated call creates no primitive and allocates no key).
  // `a` is y (forward) or dy, `b` dx (backward only); all have x's shape.
  io* views(bool for_backward, lrn_params const& p, const_tensor_ref<float> const& x,
            dims const& a_strides, dims const& b_strides);

  std::map<std::string, std::unique_ptr<plan>> plans_; // by problem (readable key)
  std::unordered_map<fingerprint, std::unique_ptr<io>, fingerprint_hash> ios_;
  fingerprint scratch_; // reused for the lookup
};

} // namespace halox::ops::detail::onednn
