#include <halox/error.hpp>
#include <halox/tensor_desc.hpp>

#include "common/agreement.hpp"
#include "model/checked_math.hpp"
#include "model/describe_fields.hpp"

#include <memory>
#include <optional>

namespace halox {

namespace {
// Builds the distribution and checks this rank's buffer layout inside the collective check so
// that an invalid description on any rank (a bad extent, strides whose offsets overflow) makes
// every rank throw, rather than leaving the valid ranks waiting in a later call.
distribution checked(process_grid const& grid, std::vector<index_t>&& shape, dtype type,
                     std::vector<dim_options>&& options, std::vector<index_t> const& strides) {
  std::optional<distribution> dist;
  detail::collective_check(
      grid.comm(), "tensor_desc",
      [&] {
        dist.emplace(std::move(shape), type, grid.dims(), std::move(options));
        auto const local = dist->local_shape(grid.rank());
        if (!strides.empty()) validate_strides(local, strides);
        index_t const elements = required_elements(
            local, strides.empty() ? dist->default_strides(grid.rank()) : strides);
        // local_bytes() multiplies by the element size: that must fit too.
        index_t bytes = 0;
        auto const esize = static_cast<index_t>(size_of(type));
        HALOX_REQUIRE(detail::checked_mul(elements, esize, bytes), errc::invalid_argument,
                      "the local buffer of " + std::to_string(elements) + " elements of " +
                          std::to_string(esize) + " bytes exceeds the byte limit " +
                          detail::index_limit_str() + "; use smaller strides");
      },
      [&] { return dist->hash(); }, [&] { return detail::describe_fields(*dist); });
  return std::move(*dist);
}
} // namespace

tensor_desc::tensor_desc(process_grid grid, std::vector<index_t> shape, dtype type,
                         std::vector<dim_options> options, std::vector<index_t> strides)
    : grid_(std::move(grid)),
      dist_(checked(grid_, std::move(shape), type, std::move(options), strides)) {
  local_shape_ = dist_.local_shape(grid_.rank());
  strides_ = strides.empty() ? dist_.default_strides(grid_.rank()) : std::move(strides);
  local_elements_ = required_elements(local_shape_, strides_);
  owned_ = dist_.owned_box(grid_.rank());
  for (int d = 0; d < ndim(); ++d) owned_offset_elements_ += owned_offset_at(d) * strides_[d];
}

std::vector<index_t> tensor_desc::owned_offset() const {
  std::vector<index_t> o(ndim(), 0);
  if (empty()) return o;
  for (int d = 0; d < ndim(); ++d) o[d] = dist_.options(d).halo_lo;
  return o;
}

index_t tensor_desc::local_offset(std::vector<index_t> const& global_idx) const {
  HALOX_REQUIRE(static_cast<int>(global_idx.size()) == ndim(), errc::invalid_argument,
                "index of rank " + std::to_string(global_idx.size()) + " for a tensor of rank " +
                    std::to_string(ndim()));
  box const a = dist_.allocated_box(grid_.rank());
  index_t off = 0;
  for (int d = 0; d < ndim(); ++d) {
    HALOX_REQUIRE(global_idx[d] >= a.lo[d] && global_idx[d] < a.hi[d], errc::invalid_argument,
                  "global index " + std::to_string(global_idx[d]) + " on dim " + std::to_string(d) +
                      " is outside this rank's allocated range [" + std::to_string(a.lo[d]) + ", " +
                      std::to_string(a.hi[d]) + ")");
    off += (global_idx[d] - a.lo[d]) * strides_[d];
  }
  return off;
}

} // namespace halox
