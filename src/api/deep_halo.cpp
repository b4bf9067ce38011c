#include "common/agreement.hpp"
#include "plan/deep_halo_geometry.hpp"

#include <halox/deep_halo.hpp>
#include <halox/error.hpp>

#include <sstream>

namespace halox {

namespace {
std::string radius_str(std::vector<int> const& r) {
  std::string s;
  for (std::size_t d = 0; d < r.size(); ++d) s += (d ? "," : "") + std::to_string(r[d]);
  return s;
}

// Validates inside one agreement so that a bad depth or radius on any rank makes every rank
// throw (instead of the valid ranks waiting in tensor_desc's own collective check), and ranks
// passing different depths or radii are told so by name.
std::vector<dim_options> checked_dims(process_grid const& grid, std::vector<index_t> const& shape,
                                      std::vector<int> const& radius, int depth,
                                      std::vector<dim_options>&& dims) {
  std::vector<dim_options> out;
  detail::collective_check(
      grid.comm(), "deep_halo_schedule",
      [&] { out = detail::deep_halo_dims(shape, radius, depth, std::move(dims)); },
      [&] {
        std::uint64_t h = 0xcbf29ce484222325ull;
        auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
        mix(static_cast<std::uint64_t>(depth));
        for (int r : radius) mix(static_cast<std::uint64_t>(r));
        return h;
      },
      [&] { return "depth=" + std::to_string(depth) + "; radius=" + radius_str(radius); });
  return out;
}

halo_plan make_plan(context const* ctx, tensor_desc const& desc, halo_options const& o) {
  return ctx ? halo_plan(*ctx, desc, o) : halo_plan(desc, o);
}
} // namespace

deep_halo_schedule::deep_halo_schedule(process_grid grid, std::vector<index_t> shape, dtype type,
                                       std::vector<int> radius, int depth,
                                       std::vector<dim_options> dims,
                                       halo_options const& plan_options)
    : deep_halo_schedule(nullptr, std::move(grid), std::move(shape), type, std::move(radius), depth,
                         std::move(dims), plan_options) {}

deep_halo_schedule::deep_halo_schedule(context const& ctx, process_grid grid,
                                       std::vector<index_t> shape, dtype type,
                                       std::vector<int> radius, int depth,
                                       std::vector<dim_options> dims,
                                       halo_options const& plan_options)
    : deep_halo_schedule(&ctx, std::move(grid), std::move(shape), type, std::move(radius), depth,
                         std::move(dims), plan_options) {}

deep_halo_schedule::deep_halo_schedule(context const* ctx, process_grid&& grid,
                                       std::vector<index_t>&& shape, dtype type,
                                       std::vector<int>&& radius, int depth,
                                       std::vector<dim_options>&& dims,
                                       halo_options const& plan_options)
    : radius_(std::move(radius)), depth_(depth),
      desc_(grid, shape, type, checked_dims(grid, shape, radius_, depth, std::move(dims))),
      plan_(make_plan(ctx, desc_, plan_options)),
      cells_(detail::deep_halo_cells(desc_.dist(), desc_.grid().rank(), radius_, depth_)) {}

box deep_halo_schedule::valid_region(int step) const {
  int const rank = desc_.grid().rank();
  return detail::to_local(desc_.dist(), rank, valid_region_global(step));
}

box deep_halo_schedule::valid_region_global(int step) const {
  return detail::deep_halo_region(desc_.dist(), desc_.grid().rank(), radius_, depth_, step);
}

double deep_halo_schedule::redundant_fraction() const noexcept {
  if (cells_ == 0) return 0.0;
  double const useful =
      static_cast<double>(depth_) * static_cast<double>(desc_.owned_box().volume());
  return 1.0 - useful / static_cast<double>(cells_);
}

std::string deep_halo_schedule::describe() const {
  std::ostringstream os;
  os << "deep_halo_schedule on rank " << desc_.grid().rank() << ": depth " << depth_ << ", radius "
     << radius_str(radius_) << ", " << messages() << " message(s) and " << bytes()
     << " B sent per exchange, " << cells_ << " cells computed per cycle (redundant share "
     << redundant_fraction() << ")";
  auto step_line = [&](int s) {
    box const b = valid_region(s);
    os << "\n  step " << s << ": local [";
    for (int d = 0; d < b.nd; ++d) os << (d ? ", " : "") << b.lo[d] << ":" << b.hi[d];
    os << ")";
  };
  // The first and last steps tell the pattern; a deep schedule does not print thousands.
  int const half = 4;
  if (depth_ <= 2 * half) {
    for (int s = 1; s <= depth_; ++s) step_line(s);
  } else {
    for (int s = 1; s <= half; ++s) step_line(s);
    os << "\n  ... " << depth_ - 2 * half << " more step(s)";
    for (int s = depth_ - half + 1; s <= depth_; ++s) step_line(s);
  }
  os << "\n" << plan_.describe();
  return os.str();
}

} // namespace halox
