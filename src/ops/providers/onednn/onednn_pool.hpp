#pragma once
// oneDNN pooling (pooling_v2: max, average with or without the padding, dilation) on boxes of
// the caller's buffers, in the plain dense layout (the caller's strided views are reordered into
// it). Max-pooling backward runs the forward pass on the windows of the outputs touching the box
// to get oneDNN's workspace (the winners) again, as the reference re-evaluates them, unless the
// caller vouches that x is unchanged since a forward call that kept them for the same outputs.

#include "ops/providers/onednn/onednn_common.hpp"

#include <halox/ops/window.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace halox::ops::detail::onednn {

/// Builds, caches and runs pooling primitives.
class pool_engine {
public:
  pool_engine();
  ~pool_engine();
  pool_engine(pool_engine const&) = delete;
  pool_engine& operator=(pool_engine const&) = delete;

  /// As `pool_forward_box`; false when oneDNN cannot express the problem (the caller then
  /// uses the reference kernel). `keep`: max pooling runs in training mode and keeps the
  /// winners for a `backward` with `x_kept` (until the next call of either).
  bool forward(const_block_ref<float> x, dims const& in_extent, block_ref<float> y,
               box const& out_box, pool_params const& p, bool keep = false);
  /// As `pool_backward_box`; false as for `forward`. `x_kept`: x is unchanged since the last
  /// `forward` call; if that call kept the winners of the outputs this backward reads, they
  /// are used instead of a second forward pass.
  bool backward(const_block_ref<float> x, const_block_ref<float> dy, dims const& in_extent,
                block_ref<float> dx, box const& in_box, pool_params const& p, bool x_kept = false);
  /// One line per problem seen.
  [[nodiscard]] std::string describe() const;
  /// Bytes held between calls: the winners kept for backward (oneDNN's workspaces).
  [[nodiscard]] std::size_t held_bytes() const;

private:
  struct plan;
  struct io;
  struct geom;
  std::map<std::string, std::unique_ptr<plan>> plans_; // by problem (readable key)
  // Per problem and caller view layout: the reorders between the views and the plan's dense
  // buffers, built once, so a repeated call creates no primitive and allocates no key.
  std::unordered_map<fingerprint, std::unique_ptr<io>, fingerprint_hash> ios_;
  fingerprint scratch_; // reused for the lookup
  std::unique_ptr<geom> geom_;
  // The winners in a plan's workspace that the last forward call kept: for that source view
  // (data pointer and layout) only.
  struct kept {
    plan const* pl = nullptr;
    float const* x = nullptr;
    memory::desc xmd;
  } kept_;
};

} // namespace halox::ops::detail::onednn
