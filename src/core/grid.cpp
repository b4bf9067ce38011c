#include <halox/error.hpp>
#include <halox/grid.hpp>

#include "core/collective_check.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <tuple>

namespace halox {

int communicator::rank() const {
  int r = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(get(), &r));
  return r;
}

int communicator::size() const {
  int s = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(get(), &s));
  return s;
}

namespace {

std::string dims_str(std::vector<int> const& dims) {
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? "x" : "") + std::to_string(dims[i]);
  return s;
}

struct grid_cost {
  index_t overfull; // parts beyond the extent (ranks left empty): avoid first
  double halo;      // halo cells per rank (largest block)
  index_t block;    // cells of the largest owned block
  auto key() const { return std::tie(overfull, halo, block); }
};

grid_cost cost_of(std::vector<int> const& dims, std::vector<index_t> const& shape,
                  std::vector<int> const& lo, std::vector<int> const& hi) {
  grid_cost c{0, 0.0, 1};
  int const nd = static_cast<int>(dims.size());
  std::vector<index_t> blk(nd);
  for (int d = 0; d < nd; ++d) {
    blk[d] = (shape[d] + dims[d] - 1) / dims[d];
    c.overfull += std::max<index_t>(0, dims[d] - shape[d]);
    c.block *= blk[d];
  }
  // Halo cells a rank receives: (block + halos) volume minus block volume, counting only the
  // dimensions that are actually split (an unsplit dimension's halo is boundary, not traffic).
  double with = 1.0, without = 1.0;
  for (int d = 0; d < nd; ++d) {
    double const w = dims[d] > 1 ? static_cast<double>(lo[d] + hi[d]) : 0.0;
    with *= static_cast<double>(blk[d]) + w;
    without *= static_cast<double>(blk[d]);
  }
  c.halo = with - without;
  return c;
}

void search(int remaining, std::size_t d, std::vector<int>& cur, std::vector<int> const& fixed,
            std::vector<index_t> const& shape, std::vector<int> const& lo,
            std::vector<int> const& hi, std::vector<int>& best, grid_cost& best_cost, bool& found) {
  if (d == cur.size()) {
    if (remaining != 1) return;
    grid_cost const c = cost_of(cur, shape, lo, hi);
    // Ties go to the grid that splits outer dimensions most (lexicographically largest), so
    // an NCHW tensor without batch halo goes sample-parallel rather than channel-parallel.
    if (!found || c.key() < best_cost.key() || (c.key() == best_cost.key() && cur > best)) {
      best = cur;
      best_cost = c;
      found = true;
    }
    return;
  }
  if (fixed[d] > 0) {
    if (remaining % fixed[d] != 0) return;
    cur[d] = fixed[d];
    search(remaining / fixed[d], d + 1, cur, fixed, shape, lo, hi, best, best_cost, found);
    return;
  }
  for (int f = 1; f <= remaining; ++f) {
    if (remaining % f != 0) continue;
    cur[d] = f;
    search(remaining / f, d + 1, cur, fixed, shape, lo, hi, best, best_cost, found);
  }
}

} // namespace

std::vector<int> choose_grid(int nprocs, std::vector<int> dims, std::vector<index_t> const& shape,
                             std::vector<int> const& halo_lo, std::vector<int> const& halo_hi) {
  HALOX_REQUIRE(nprocs >= 1, errc::invalid_argument,
                "cannot build a grid for " + std::to_string(nprocs) + " processes");
  std::size_t const nd = dims.size();
  HALOX_REQUIRE(nd >= 1 && nd <= static_cast<std::size_t>(max_dims), errc::invalid_argument,
                "grid rank " + std::to_string(nd) + " is not supported; use 1 to " +
                    std::to_string(max_dims) + " dimensions");
  HALOX_REQUIRE(shape.size() == nd, errc::invalid_argument,
                "shape has " + std::to_string(shape.size()) + " dimensions but dims has " +
                    std::to_string(nd) + "; they must match");
  auto widths = [&](std::vector<int> const& w, char const* name) {
    HALOX_REQUIRE(w.empty() || w.size() == nd, errc::invalid_argument,
                  std::string(name) + " has " + std::to_string(w.size()) +
                      " entries; give one per dimension or none");
    return w.empty() ? std::vector<int>(nd, 0) : w;
  };
  auto const lo = widths(halo_lo, "halo_lo");
  auto const hi = widths(halo_hi, "halo_hi");
  int fixed_product = 1;
  for (std::size_t d = 0; d < nd; ++d) {
    HALOX_REQUIRE(dims[d] >= 0, errc::invalid_argument,
                  "process count " + std::to_string(dims[d]) + " on dim " + std::to_string(d) +
                      " must be positive, or 0 to let halox choose");
    if (dims[d] > 0) fixed_product *= dims[d];
  }
  HALOX_REQUIRE(nprocs % fixed_product == 0, errc::invalid_argument,
                "the fixed process counts " + dims_str(dims) + " multiply to " +
                    std::to_string(fixed_product) + ", which does not divide the " +
                    std::to_string(nprocs) + " processes; change them or use 0 for free entries");
  bool const any_free = std::any_of(dims.begin(), dims.end(), [](int x) { return x == 0; });
  HALOX_REQUIRE(any_free || fixed_product == nprocs, errc::invalid_argument,
                "grid " + dims_str(dims) + " has " + std::to_string(fixed_product) +
                    " processes but the communicator has " + std::to_string(nprocs) +
                    "; make the product equal, or use 0 for entries halox should choose");
  std::vector<int> cur(nd, 1), best;
  grid_cost best_cost{};
  bool found = false;
  search(nprocs, 0, cur, dims, shape, lo, hi, best, best_cost, found);
  HALOX_REQUIRE(found, errc::internal, "no grid found for " + std::to_string(nprocs));
  return best;
}

process_grid::process_grid(MPI_Comm comm, std::vector<int> dims) : dims_(std::move(dims)) {
  HALOX_REQUIRE(comm != MPI_COMM_NULL, errc::invalid_argument,
                "process_grid needs a valid communicator, got MPI_COMM_NULL");
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size_));
  detail::collective_check(
      comm, "process_grid",
      [&] {
        HALOX_REQUIRE(!dims_.empty() && dims_.size() <= static_cast<std::size_t>(max_dims),
                      errc::invalid_argument,
                      "grid rank " + std::to_string(dims_.size()) + " is not supported; use 1 to " +
                          std::to_string(max_dims) + " dimensions");
        long long prod = 1;
        for (std::size_t d = 0; d < dims_.size(); ++d) {
          HALOX_REQUIRE(dims_[d] > 0, errc::invalid_argument,
                        "process count " + std::to_string(dims_[d]) + " on dim " +
                            std::to_string(d) +
                            " must be positive (use process_grid::create to choose zeros)");
          prod *= dims_[d];
        }
        HALOX_REQUIRE(prod == size_, errc::invalid_argument,
                      "grid " + dims_str(dims_) + " has " + std::to_string(prod) +
                          " processes but the communicator has " + std::to_string(size_) +
                          "; make the product of the process counts equal to the communicator "
                          "size");
      },
      [&] {
        std::uint64_t h = 1469598103934665603ull;
        for (int x : dims_) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ull;
        return h;
      });
  MPI_Comm dup = MPI_COMM_NULL;
  HALOX_MPI_CHECK(MPI_Comm_dup(comm, &dup));
  comm_ = std::make_shared<communicator>(dup);
  // halox's own communicator: MPI failures on it come back as codes that HALOX_MPI_CHECK turns
  // into halox::error, instead of aborting (communicators split from it inherit this).
  HALOX_MPI_CHECK(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN));
  HALOX_MPI_CHECK(MPI_Comm_rank(dup, &rank_));
}

process_grid process_grid::create(MPI_Comm comm, std::vector<int> dims,
                                  std::vector<index_t> const& shape,
                                  std::vector<int> const& halo_lo,
                                  std::vector<int> const& halo_hi) {
  int size = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> chosen;
  // choose_grid is deterministic, so ranks with equal inputs agree; the constructor's collective
  // check catches ranks whose inputs (and thus choices) differ. A local failure must still reach
  // the collective so the other ranks do not hang: pass invalid dims through in that case.
  std::string failure;
  try {
    chosen = choose_grid(size, dims, shape, halo_lo, halo_hi);
  } catch (error const& e) {
    failure = e.message();
  }
  if (!failure.empty()) {
    detail::collective_check(
        comm, "process_grid::create", [&] { throw error(errc::invalid_argument, failure); },
        [] { return 0ull; });
  }
  return process_grid(comm, chosen);
}

std::vector<int> process_grid::coords(int rank) const {
  HALOX_REQUIRE(rank >= 0 && rank < size_, errc::invalid_argument,
                "rank " + std::to_string(rank) + " is outside the grid of " +
                    std::to_string(size_) + " processes");
  std::vector<int> c(dims_.size());
  for (int d = ndim() - 1; d >= 0; --d) {
    c[d] = rank % dims_[d];
    rank /= dims_[d];
  }
  return c;
}

int process_grid::rank_of(std::vector<int> const& c) const {
  HALOX_REQUIRE(static_cast<int>(c.size()) == ndim(), errc::invalid_argument,
                "coordinates of rank " + std::to_string(c.size()) + " for a grid of rank " +
                    std::to_string(ndim()));
  int r = 0;
  for (int d = 0; d < ndim(); ++d) {
    HALOX_REQUIRE(c[d] >= 0 && c[d] < dims_[d], errc::invalid_argument,
                  "coordinate " + std::to_string(c[d]) + " on dim " + std::to_string(d) +
                      " is outside [0, " + std::to_string(dims_[d]) + ")");
    r = r * dims_[d] + c[d];
  }
  return r;
}

communicator process_grid::sub_comm(std::vector<bool> const& keep) const {
  HALOX_REQUIRE(static_cast<int>(keep.size()) == ndim(), errc::invalid_argument,
                "sub_comm got " + std::to_string(keep.size()) + " flags for a grid of rank " +
                    std::to_string(ndim()) + "; give one per dimension");
  auto const c = coords();
  // Colour: coordinates along dropped dimensions; key: row-major position along kept ones.
  int color = 0, key = 0;
  for (int d = 0; d < ndim(); ++d) {
    if (keep[d])
      key = key * dims_[d] + c[d];
    else
      color = color * dims_[d] + c[d];
  }
  MPI_Comm sub = MPI_COMM_NULL;
  HALOX_MPI_CHECK(MPI_Comm_split(comm(), color, key, &sub));
  return communicator(sub);
}

} // namespace halox
