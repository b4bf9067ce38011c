#include <halox/distribution.hpp>
#include <halox/error.hpp>
#include <halox/grid.hpp>

#include "common/agreement.hpp"
#include "model/checked_math.hpp"

#include <algorithm>
#include <limits>
#include <map>
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

// Along one dimension split into `parts` balanced blocks, what part p's halo range
// [start - lo, end + hi) holds: `valid` coordinates that exist (clipped at a non-periodic
// boundary, wrapped around a periodic one) and `self` of them that part p owns itself. A rank's
// halo cells received from other processes are then prod(valid) - prod(self) over the
// dimensions, because both sets are Cartesian products of these per-dimension sets.
struct dim_term {
  index_t valid = 0, self = 0;
  bool operator<(dim_term const& o) const {
    return std::tie(valid, self) < std::tie(o.valid, o.self);
  }
  bool operator==(dim_term const& o) const { return valid == o.valid && self == o.self; }
};

// floor(x / n) for n > 0.
index_t floor_div(index_t x, index_t n) { return x / n - (x % n != 0 && x < 0 ? 1 : 0); }

// Number of x in [0, x_end) (negative x_end: minus the number in [x_end, 0)) whose position
// modulo n lies in [s, e).
index_t wrapped_count(index_t x_end, index_t n, index_t s, index_t e) {
  index_t const k = floor_div(x_end, n);
  return k * (e - s) + std::clamp<index_t>(x_end - k * n - s, 0, e - s);
}

dim_term term_of(index_t n, int parts, int p, index_t lo, index_t hi, bool periodic) {
  index_t const q = n / parts, r = n % parts;
  index_t const s = p * q + std::min<index_t>(p, r), e = s + q + (p < r ? 1 : 0);
  if (e == s) return {}; // an empty rank allocates, and so receives, nothing
  index_t const a = s - lo, b = e + hi;
  if (!periodic) return {std::min(n, b) - std::max<index_t>(0, a), e - s};
  return {b - a, wrapped_count(b, n, s, e) - wrapped_count(a, n, s, e)};
}

// Per dimension and part count: the distinct terms (for the busiest rank) and their sums over
// the parts (for the total over ranks).
struct dim_summary {
  std::vector<dim_term> distinct;
  index_t valid_sum = 0, self_sum = 0;
};

struct grid_cost {
  index_t overfull = 0; // parts beyond the extent (ranks left empty): avoid first
  index_t busiest = 0;  // halo cells received by the busiest rank
  index_t block = 1;    // cells of the largest owned block
  index_t total = 0;    // halo cells received over all ranks
  auto key() const { return std::tie(overfull, busiest, block, total); }
};

class grid_search {
public:
  grid_search(std::vector<index_t> const& shape, std::vector<index_t> lo, std::vector<index_t> hi,
              std::vector<bool> periodic)
      : shape_(shape), lo_(std::move(lo)), hi_(std::move(hi)), periodic_(std::move(periodic)),
        memo_(shape.size()) {}

  grid_cost cost(std::vector<int> const& dims) {
    grid_cost c;
    std::size_t const nd = dims.size();
    std::vector<dim_summary const*> sum(nd);
    index_t valid_all = 1, self_all = 1;
    for (std::size_t d = 0; d < nd; ++d) {
      c.overfull += std::max<index_t>(0, dims[d] - shape_[d]);
      c.block = detail::saturating_mul(c.block, (shape_[d] + dims[d] - 1) / dims[d]);
      sum[d] = &summary(d, dims[d]);
      valid_all = detail::saturating_mul(valid_all, sum[d]->valid_sum);
      self_all = detail::saturating_mul(self_all, sum[d]->self_sum);
    }
    c.total = valid_all - self_all;
    // The busiest rank: every combination of distinct per-dimension terms occurs on some rank.
    std::vector<std::size_t> at(nd, 0);
    for (;;) {
      index_t v = 1, own = 1;
      for (std::size_t d = 0; d < nd; ++d) {
        v = detail::saturating_mul(v, sum[d]->distinct[at[d]].valid);
        own = detail::saturating_mul(own, sum[d]->distinct[at[d]].self);
      }
      c.busiest = std::max(c.busiest, v - own);
      std::size_t d = 0;
      while (d < nd && ++at[d] == sum[d]->distinct.size()) at[d++] = 0;
      if (d == nd) break;
    }
    return c;
  }

private:
  dim_summary const& summary(std::size_t d, int parts) {
    auto it = memo_[d].find(parts);
    if (it != memo_[d].end()) return it->second;
    dim_summary s;
    for (int p = 0; p < parts; ++p) {
      dim_term const t = term_of(shape_[d], parts, p, lo_[d], hi_[d], periodic_[d]);
      s.distinct.push_back(t);
      s.valid_sum = detail::saturating_add(s.valid_sum, t.valid);
      s.self_sum = detail::saturating_add(s.self_sum, t.self);
      // Balanced blocks repeat: keep the list short while scanning a long dimension.
      if (s.distinct.size() > 64) {
        std::sort(s.distinct.begin(), s.distinct.end());
        s.distinct.erase(std::unique(s.distinct.begin(), s.distinct.end()), s.distinct.end());
      }
    }
    std::sort(s.distinct.begin(), s.distinct.end());
    s.distinct.erase(std::unique(s.distinct.begin(), s.distinct.end()), s.distinct.end());
    return memo_[d].emplace(parts, std::move(s)).first->second;
  }

  std::vector<index_t> const& shape_;
  std::vector<index_t> lo_, hi_;
  std::vector<bool> periodic_;
  std::vector<std::map<int, dim_summary>> memo_;
};

struct search_state {
  grid_search model;
  std::vector<int> const& fixed;
  std::vector<int> divisors; // of nprocs, ascending
  std::vector<int> cur, best;
  grid_cost best_cost{};
  bool found = false;
};

void search(search_state& st, int remaining, std::size_t d) {
  if (d == st.cur.size()) {
    if (remaining != 1) return;
    grid_cost const c = st.model.cost(st.cur);
    // Ties go to the grid that splits outer dimensions most (lexicographically largest), so
    // an NCHW tensor without batch halo goes sample-parallel rather than channel-parallel.
    if (!st.found || c.key() < st.best_cost.key() ||
        (c.key() == st.best_cost.key() && st.cur > st.best)) {
      st.best = st.cur;
      st.best_cost = c;
      st.found = true;
    }
    return;
  }
  if (st.fixed[d] > 0) {
    if (remaining % st.fixed[d] != 0) return;
    st.cur[d] = st.fixed[d];
    search(st, remaining / st.fixed[d], d + 1);
    return;
  }
  for (int f : st.divisors) {
    if (f > remaining) break;
    if (remaining % f != 0) continue;
    st.cur[d] = f;
    search(st, remaining / f, d + 1);
  }
}

} // namespace

std::vector<int> choose_grid(int nprocs, std::vector<int> dims, std::vector<index_t> const& shape,
                             std::vector<int> const& halo_lo, std::vector<int> const& halo_hi) {
  return choose_grid(nprocs, std::move(dims), shape, halo_lo, halo_hi, {});
}

std::vector<int> choose_grid(int nprocs, std::vector<int> dims, std::vector<index_t> const& shape,
                             std::vector<int> const& halo_lo, std::vector<int> const& halo_hi,
                             std::vector<bool> const& periodic) {
  HALOX_REQUIRE(nprocs >= 1 && nprocs <= max_grid_ranks, errc::invalid_argument,
                "cannot build a grid for " + std::to_string(nprocs) +
                    " processes; halox supports 1 to 2^30 (" + std::to_string(max_grid_ranks) +
                    ")");
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
    std::vector<index_t> out(nd, 0);
    for (std::size_t d = 0; d < w.size(); ++d) {
      HALOX_REQUIRE(w[d] >= 0, errc::invalid_argument,
                    std::string(name) + " width " + std::to_string(w[d]) + " on dim " +
                        std::to_string(d) + " must not be negative");
      out[d] = w[d];
    }
    return out;
  };
  auto const lo = widths(halo_lo, "halo_lo");
  auto const hi = widths(halo_hi, "halo_hi");
  HALOX_REQUIRE(periodic.empty() || periodic.size() == nd, errc::invalid_argument,
                "periodic has " + std::to_string(periodic.size()) +
                    " entries; give one per dimension or none");
  std::vector<bool> const wrap = periodic.empty() ? std::vector<bool>(nd, false) : periodic;
  for (std::size_t d = 0; d < nd; ++d) {
    index_t reach = 0;
    HALOX_REQUIRE(shape[d] > 0 && detail::checked_add(shape[d], lo[d] + hi[d], reach),
                  errc::invalid_argument,
                  "extent " + std::to_string(shape[d]) + " on dim " + std::to_string(d) +
                      " must be positive, and with its halos at most " + detail::index_limit_str());
  }
  index_t fixed_product = 1; // saturates: huge fixed counts must give an error, not overflow
  for (std::size_t d = 0; d < nd; ++d) {
    HALOX_REQUIRE(dims[d] >= 0, errc::invalid_argument,
                  "process count " + std::to_string(dims[d]) + " on dim " + std::to_string(d) +
                      " must be positive, or 0 to let halox choose");
    if (dims[d] > 0) fixed_product = detail::saturating_mul(fixed_product, dims[d]);
  }
  HALOX_REQUIRE(fixed_product <= nprocs && nprocs % fixed_product == 0, errc::invalid_argument,
                "the fixed process counts " + dims_str(dims) + " multiply to " +
                    (fixed_product == detail::index_max ? "more than " + detail::index_limit_str()
                                                        : std::to_string(fixed_product)) +
                    ", which does not divide the " + std::to_string(nprocs) +
                    " processes; change them or use 0 for free entries");
  bool const any_free = std::any_of(dims.begin(), dims.end(), [](int x) { return x == 0; });
  HALOX_REQUIRE(any_free || fixed_product == nprocs, errc::invalid_argument,
                "grid " + dims_str(dims) + " has " + std::to_string(fixed_product) +
                    " processes but the communicator has " + std::to_string(nprocs) +
                    "; make the product equal, or use 0 for entries halox should choose");
  search_state st{grid_search(shape, lo, hi, wrap), dims, {}, std::vector<int>(nd, 1), {}};
  for (int f = 1; f <= nprocs / f; ++f)
    if (nprocs % f == 0) {
      st.divisors.push_back(f);
      if (f != nprocs / f) st.divisors.push_back(nprocs / f);
    }
  std::sort(st.divisors.begin(), st.divisors.end());
  search(st, nprocs, 0);
  HALOX_REQUIRE(st.found, errc::internal, "no grid found for " + std::to_string(nprocs));
  return st.best;
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
        index_t prod = 1; // saturates: one rank's huge counts must be an error everywhere
        for (std::size_t d = 0; d < dims_.size(); ++d) {
          HALOX_REQUIRE(dims_[d] > 0, errc::invalid_argument,
                        "process count " + std::to_string(dims_[d]) + " on dim " +
                            std::to_string(d) +
                            " must be positive (use process_grid::create to choose zeros)");
          prod = detail::saturating_mul(prod, dims_[d]);
        }
        HALOX_REQUIRE(prod == size_, errc::invalid_argument,
                      "grid " + dims_str(dims_) + " has " +
                          (prod == detail::index_max ? "more than " + detail::index_limit_str()
                                                     : std::to_string(prod)) +
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
  return create(comm, std::move(dims), shape, halo_lo, halo_hi, {});
}

process_grid process_grid::create(MPI_Comm comm, std::vector<int> dims,
                                  std::vector<index_t> const& shape,
                                  std::vector<int> const& halo_lo, std::vector<int> const& halo_hi,
                                  std::vector<bool> const& periodic) {
  int size = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::vector<int> chosen;
  // choose_grid is deterministic, so ranks with equal inputs agree; the constructor's collective
  // check catches ranks whose inputs (and thus choices) differ. A local failure must still reach
  // the collective so the other ranks do not hang: pass invalid dims through in that case.
  std::string failure;
  try {
    chosen = choose_grid(size, dims, shape, halo_lo, halo_hi, periodic);
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
