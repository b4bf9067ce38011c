// Gather and scatter are redistributions to and from a distribution held whole by one rank:
// no separate code path, so every backend and every layout of the distributed side applies.
#include "common/agreement.hpp"

#include <halox/error.hpp>
#include <halox/redistribute.hpp>

namespace halox {

namespace {
// Every rank must agree on the root and, on the root, the whole-tensor buffer must be large
// enough; checked collectively so that a bad argument on one rank cannot hang the others.
void check_root_buffer(tensor_desc const& whole, int root, void const* data, std::size_t bytes,
                       char const* what) {
  detail::collective_check(
      whole.grid().comm(), what,
      [&] {
        std::size_t const need = whole.local_bytes();
        HALOX_REQUIRE(bytes >= need, errc::invalid_argument,
                      std::string(what) + ": the global buffer on the root holds " +
                          std::to_string(bytes) + " bytes but the global tensor " +
                          whole.dist().str() + " needs " + std::to_string(need));
        HALOX_REQUIRE(need == 0 || data != nullptr, errc::invalid_argument,
                      std::string(what) + ": the global buffer on the root is a null pointer");
      },
      [&] { return static_cast<std::uint64_t>(root); });
}
} // namespace

tensor_desc whole_on_rank(tensor_desc const& like, int root) {
  int const p = like.grid().size();
  detail::collective_check(
      like.grid().comm(), "whole_on_rank",
      [&] {
        HALOX_REQUIRE(root >= 0 && root < p, errc::invalid_argument,
                      "root " + std::to_string(root) + " is not a rank of the grid of " +
                          std::to_string(p) + " processes");
      },
      [&] { return static_cast<std::uint64_t>(root); });
  // Dimension 0 split over every process with all of it on `root`: the root's local buffer is
  // then the whole tensor, row-major, and the others own nothing.
  std::vector<int> dims(like.ndim(), 1);
  dims[0] = p;
  std::vector<dim_options> opts(like.ndim());
  opts[0].sizes.assign(p, 0);
  opts[0].sizes[root] = like.shape()[0];
  return tensor_desc(process_grid(like.grid().comm(), dims), like.shape(), like.type(), opts);
}

void gather(tensor_desc const& src, tensor_view const& src_buf, int root, void* out,
            std::size_t out_bytes, redistribute_options const& options) {
  tensor_desc const whole = whole_on_rank(src, root);
  check_root_buffer(whole, root, out, out_bytes, "gather");
  redistribute_options o = options;
  o.halo_after = false; // the whole tensor has no halo
  redistribute_plan plan(src, whole, o);
  plan.execute(src_buf, tensor_view(whole, out, out_bytes));
}

std::vector<std::byte> gather(tensor_desc const& src, tensor_view const& src_buf, int root,
                              redistribute_options const& options) {
  std::vector<std::byte> out;
  if (src.grid().rank() == root) {
    std::size_t n = size_of(src.type());
    for (index_t e : src.shape()) n *= static_cast<std::size_t>(e);
    out.resize(n);
  }
  gather(src, src_buf, root, out.data(), out.size(), options);
  return out;
}

void scatter(int root, void const* global, std::size_t bytes, tensor_desc const& dst,
             tensor_view const& dst_buf, redistribute_options const& options) {
  tensor_desc const whole = whole_on_rank(dst, root);
  check_root_buffer(whole, root, global, bytes, "scatter");
  redistribute_plan plan(whole, dst, options);
  // The plan only reads its source buffer; tensor_view is mutable because plans also run the
  // other way.
  plan.execute(tensor_view(whole, const_cast<void*>(global), bytes), dst_buf);
}

} // namespace halox
