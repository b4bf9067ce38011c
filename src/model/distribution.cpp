#include <halox/distribution.hpp>
#include <halox/error.hpp>

#include "model/checked_math.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace halox {

using detail::checked_add;
using detail::checked_mul;
using detail::index_limit_str;

namespace {
std::string dim_name(int d) { return "dim " + std::to_string(d); }

std::string shape_str(std::vector<index_t> const& shape) {
  std::string s;
  for (std::size_t d = 0; d < shape.size(); ++d) s += (d ? "x" : "") + std::to_string(shape[d]);
  return s;
}

std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  // FNV-1a over the 8 bytes of v: cheap, deterministic across ranks and builds.
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;
  }
  return h;
}
} // namespace

distribution::distribution(std::vector<index_t> shape, dtype type, std::vector<int> parts,
                           std::vector<dim_options> options)
    : shape_(std::move(shape)), type_(type), parts_(std::move(parts)),
      options_(std::move(options)) {
  int const nd = ndim();
  HALOX_REQUIRE(nd >= 1 && nd <= max_dims, errc::invalid_argument,
                "tensor rank " + std::to_string(nd) +
                    " is not supported; halox handles ranks 1 to " + std::to_string(max_dims));
  (void)size_of(type_); // throws for an unknown dtype value
  HALOX_REQUIRE(static_cast<int>(parts_.size()) == nd, errc::invalid_argument,
                "the process grid has " + std::to_string(parts_.size()) +
                    " dimensions but the tensor has " + std::to_string(nd) +
                    "; give one process count per tensor dimension (1 for dimensions not split)");
  if (options_.empty()) options_.resize(nd);
  HALOX_REQUIRE(static_cast<int>(options_.size()) == nd, errc::invalid_argument,
                std::to_string(options_.size()) + " dim_options given for a tensor of rank " +
                    std::to_string(nd) + "; give one per dimension or none");
  starts_.resize(nd);
  nranks_ = 1;
  std::size_t const esize = size_of(type_);
  index_t global_cells = 1, local_cells = 1;
  for (int d = 0; d < nd; ++d) {
    index_t const n = shape_[d];
    int const p = parts_[d];
    auto const& o = options_[d];
    HALOX_REQUIRE(n > 0, errc::invalid_argument,
                  "extent " + std::to_string(n) + " on " + dim_name(d) +
                      " must be positive; every global dimension needs at least one element");
    HALOX_REQUIRE(p > 0, errc::invalid_argument,
                  "process count " + std::to_string(p) + " on " + dim_name(d) +
                      " must be positive (use 1 for a dimension that is not split)");
    // Checked before anything is sized by p: a part count is only as trustworthy as its caller.
    HALOX_REQUIRE(p <= max_grid_ranks / nranks_, errc::invalid_argument,
                  "process count " + std::to_string(p) + " on " + dim_name(d) +
                      " makes the process grid larger than halox's limit of 2^30 (" +
                      std::to_string(max_grid_ranks) +
                      ") processes; use process counts whose product is the number of ranks");
    nranks_ *= p;
    HALOX_REQUIRE(o.halo_lo >= 0 && o.halo_hi >= 0, errc::invalid_argument,
                  "halo widths (" + std::to_string(o.halo_lo) + ", " + std::to_string(o.halo_hi) +
                      ") on " + dim_name(d) + " must not be negative");
    if (!o.periodic) {
      int const w = std::max(o.halo_lo, o.halo_hi);
      HALOX_REQUIRE(w <= n, errc::invalid_argument,
                    "halo width " + std::to_string(w) + " on " + dim_name(d) +
                        " exceeds the global extent " + std::to_string(n) +
                        "; use a width of at most " + std::to_string(n) +
                        " or make the dimension periodic");
    }
    index_t largest = 0; // largest part along d
    if (o.sizes.empty()) {
      largest = n / p + (n % p != 0 ? 1 : 0);
    } else {
      HALOX_REQUIRE(o.sizes.size() == static_cast<std::size_t>(p), errc::invalid_argument,
                    std::to_string(o.sizes.size()) + " explicit part sizes on " + dim_name(d) +
                        " but the grid has " + std::to_string(p) +
                        " processes there; give one size per process");
      auto& s = starts_[d];
      s.assign(static_cast<std::size_t>(p) + 1, 0);
      for (int i = 0; i < p; ++i) {
        HALOX_REQUIRE(o.sizes[i] >= 0, errc::invalid_argument,
                      "part size " + std::to_string(o.sizes[i]) + " of part " + std::to_string(i) +
                          " on " + dim_name(d) + " must not be negative");
        HALOX_REQUIRE(o.sizes[i] <= n, errc::invalid_argument,
                      "part size " + std::to_string(o.sizes[i]) + " of part " + std::to_string(i) +
                          " on " + dim_name(d) + " exceeds the extent " + std::to_string(n) +
                          "; the sizes must sum to the extent");
        // Both terms are at most n, so the sum may pass n but is checked before it is used.
        HALOX_REQUIRE(checked_add(s[i], o.sizes[i], s[i + 1]) && s[i + 1] <= n,
                      errc::invalid_argument,
                      "explicit part sizes on " + dim_name(d) + " pass the extent " +
                          std::to_string(n) + " at part " + std::to_string(i) + " (size " +
                          std::to_string(o.sizes[i]) + "); they must sum to the extent");
        largest = std::max(largest, o.sizes[i]);
      }
      HALOX_REQUIRE(s[p] == n, errc::invalid_argument,
                    "explicit part sizes on " + dim_name(d) + " sum to " + std::to_string(s[p]) +
                        " but the extent is " + std::to_string(n) +
                        "; they must sum to the extent");
    }
    // Allocated coordinates reach from -halo_lo to extent + halo_hi, and a rank's allocated
    // extent is its part plus both halos: all must be representable.
    index_t reach = 0, alloc = 0;
    HALOX_REQUIRE(checked_add(n, o.halo_hi, reach) &&
                      checked_add(largest, index_t{o.halo_lo} + o.halo_hi, alloc),
                  errc::invalid_argument,
                  "extent " + std::to_string(n) + " plus the halos (" + std::to_string(o.halo_lo) +
                      ", " + std::to_string(o.halo_hi) + ") on " + dim_name(d) +
                      " exceeds the index limit " + index_limit_str() +
                      "; use a smaller extent or split the tensor");
    HALOX_REQUIRE(checked_mul(global_cells, n, global_cells), errc::invalid_argument,
                  "the shape " + shape_str(shape_) + " has more than " + index_limit_str() +
                      " elements (the product overflows at extent " + std::to_string(n) + " on " +
                      dim_name(d) + "); use a smaller shape");
    HALOX_REQUIRE(checked_mul(local_cells, alloc, local_cells), errc::invalid_argument,
                  "the largest rank's allocated element count (owned + halos) overflows at " +
                      std::to_string(alloc) + " on " + dim_name(d) + ": it must be at most " +
                      index_limit_str() + "; use a smaller shape, smaller halos or more parts");
  }
  index_t bytes = 0;
  HALOX_REQUIRE(checked_mul(global_cells, static_cast<index_t>(esize), bytes) &&
                    checked_mul(local_cells, static_cast<index_t>(esize), bytes),
                errc::invalid_argument,
                "the tensor of " + std::to_string(global_cells) + " elements (" +
                    std::to_string(local_cells) + " on the largest rank) of " +
                    std::to_string(esize) + " bytes each exceeds the byte limit " +
                    index_limit_str() + "; use a smaller shape");
}

index_t distribution::part_start(int d, int p) const {
  auto const& s = starts_[d];
  if (!s.empty()) return s[p];
  // Balanced: the first n % parts parts hold one extra element. p * q <= n cannot overflow.
  index_t const n = shape_[d], parts = parts_[d];
  index_t const q = n / parts, r = n % parts;
  return p * q + std::min<index_t>(p, r);
}

int distribution::part_of(int d, index_t i) const {
  auto const& s = starts_[d];
  if (s.empty()) {
    // Balanced: parts [0, r) hold q + 1 elements, the rest q; empty parts (q == 0) come last.
    index_t const n = shape_[d], parts = parts_[d];
    index_t const q = n / parts, r = n % parts;
    index_t const big = r * (q + 1);
    return static_cast<int>(i < big ? i / (q + 1) : r + (i - big) / q);
  }
  // Last start <= i whose part is non-empty: upper_bound finds the first start > i.
  auto it = std::upper_bound(s.begin(), s.end() - 1, i);
  int p = static_cast<int>(it - s.begin()) - 1;
  while (p > 0 && part_size(d, p) == 0) --p;
  return p;
}

coords_t distribution::coords_of(int rank) const {
  coords_t c(ndim());
  for (int d = ndim() - 1; d >= 0; --d) {
    c[d] = rank % parts_[d];
    rank /= parts_[d];
  }
  return c;
}

int distribution::rank_of(coords_t const& c) const {
  int r = 0;
  for (int d = 0; d < ndim(); ++d) r = r * parts_[d] + c[d];
  return r;
}

int distribution::owner(std::vector<index_t> const& idx) const {
  HALOX_REQUIRE(static_cast<int>(idx.size()) == ndim(), errc::invalid_argument,
                "index of rank " + std::to_string(idx.size()) + " for a tensor of rank " +
                    std::to_string(ndim()));
  coords_t c(ndim());
  for (int d = 0; d < ndim(); ++d) {
    HALOX_REQUIRE(idx[d] >= 0 && idx[d] < shape_[d], errc::invalid_argument,
                  "index " + std::to_string(idx[d]) + " on " + dim_name(d) +
                      " is outside the global extent " + std::to_string(shape_[d]));
    c[d] = part_of(d, idx[d]);
  }
  return rank_of(c);
}

box distribution::owned_box(int rank) const {
  HALOX_REQUIRE(rank >= 0 && rank < nranks_, errc::invalid_argument,
                "rank " + std::to_string(rank) + " is outside the grid of " +
                    std::to_string(nranks_) + " processes");
  box b;
  b.nd = ndim();
  auto const c = coords_of(rank);
  bool empty = false;
  for (int d = 0; d < ndim(); ++d) {
    b.lo[d] = part_start(d, c[d]);
    b.hi[d] = b.lo[d] + part_size(d, c[d]);
    empty = empty || b.hi[d] == b.lo[d];
  }
  if (empty)
    for (int d = 0; d < ndim(); ++d) b.hi[d] = b.lo[d];
  return b;
}

box distribution::allocated_box(int rank) const {
  box b = owned_box(rank);
  if (b.empty()) return b;
  for (int d = 0; d < ndim(); ++d) {
    b.lo[d] -= options_[d].halo_lo;
    b.hi[d] += options_[d].halo_hi;
  }
  return b;
}

std::vector<index_t> distribution::local_shape(int rank) const {
  box const b = allocated_box(rank);
  std::vector<index_t> s(ndim());
  for (int d = 0; d < ndim(); ++d) s[d] = b.extent(d);
  return s;
}

std::vector<index_t> distribution::default_strides(int rank) const {
  auto const s = local_shape(rank);
  std::vector<index_t> st(ndim());
  index_t acc = 1;
  for (int d = ndim() - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= std::max<index_t>(s[d], 1);
  }
  return st;
}

std::uint64_t distribution::hash() const noexcept {
  std::uint64_t h = 1469598103934665603ull;
  h = mix(h, static_cast<std::uint64_t>(ndim()));
  h = mix(h, static_cast<std::uint64_t>(type_));
  for (int d = 0; d < ndim(); ++d) {
    h = mix(h, static_cast<std::uint64_t>(shape_[d]));
    h = mix(h, static_cast<std::uint64_t>(parts_[d]));
    h = mix(h, static_cast<std::uint64_t>(options_[d].halo_lo));
    h = mix(h, static_cast<std::uint64_t>(options_[d].halo_hi));
    h = mix(h, options_[d].periodic ? 1u : 0u);
    // Every start, computed for balanced dimensions: the same hash as when they were stored.
    for (int p = 0; p <= parts_[d]; ++p) h = mix(h, static_cast<std::uint64_t>(part_start(d, p)));
  }
  return h;
}

std::string distribution::str() const {
  std::ostringstream os;
  os << to_string(type_) << "[";
  for (int d = 0; d < ndim(); ++d) os << (d ? "x" : "") << shape_[d];
  os << "] grid ";
  for (int d = 0; d < ndim(); ++d) os << (d ? "x" : "") << parts_[d];
  os << " halo(";
  for (int d = 0; d < ndim(); ++d)
    os << (d ? "|" : "") << options_[d].halo_lo << "," << options_[d].halo_hi
       << (options_[d].periodic ? "p" : "");
  os << ")";
  // Explicit part sizes distinguish descriptions that are otherwise alike (a mismatch error
  // would print two identical lines without them); long lists are cut.
  for (int d = 0; d < ndim(); ++d) {
    auto const& sz = options_[d].sizes;
    if (sz.empty()) continue;
    os << " sizes" << d << "(";
    std::size_t const shown = sz.size() > 16 ? 16 : sz.size();
    for (std::size_t i = 0; i < shown; ++i) os << (i ? "," : "") << sz[i];
    if (shown < sz.size()) os << ",... " << sz.size() << " parts";
    os << ")";
  }
  return os.str();
}

bool operator==(distribution const& a, distribution const& b) {
  if (a.ndim() != b.ndim() || a.type() != b.type() || a.shape() != b.shape() ||
      a.parts() != b.parts())
    return false;
  for (int d = 0; d < a.ndim(); ++d) {
    auto const &x = a.options(d), &y = b.options(d);
    if (x.halo_lo != y.halo_lo || x.halo_hi != y.halo_hi || x.periodic != y.periodic) return false;
    for (int p = 0; p < a.parts()[d]; ++p)
      if (a.part_start(d, p) != b.part_start(d, p)) return false;
  }
  return true;
}

void validate_strides(std::vector<index_t> const& local_shape,
                      std::vector<index_t> const& strides) {
  int const nd = static_cast<int>(local_shape.size());
  HALOX_REQUIRE(static_cast<int>(strides.size()) == nd, errc::invalid_argument,
                std::to_string(strides.size()) + " strides given for a tensor of rank " +
                    std::to_string(nd) + "; give one stride per dimension or none");
  std::vector<int> order(nd);
  std::iota(order.begin(), order.end(), 0);
  // Sort by stride; then each stride must cover the span of the dimension below it.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return strides[a] < strides[b]; });
  index_t need = 1;
  for (int d : order) {
    HALOX_REQUIRE(strides[d] >= 1, errc::invalid_argument,
                  "stride " + std::to_string(strides[d]) + " on dim " + std::to_string(d) +
                      " must be at least 1");
    if (local_shape[d] <= 1) continue;
    HALOX_REQUIRE(strides[d] >= need, errc::invalid_argument,
                  "stride " + std::to_string(strides[d]) + " on dim " + std::to_string(d) +
                      " is smaller than the " + std::to_string(need) +
                      " elements spanned by the faster dimensions; cells would alias. Use a "
                      "stride of at least " +
                      std::to_string(need));
    // Saturates: a span past the index limit only matters if a slower dimension must step
    // over it (then no stride can), or if the largest offset overflows (checked below).
    need = detail::saturating_mul(strides[d], local_shape[d]);
  }
  (void)required_elements(local_shape, strides); // the largest offset must be representable
}

index_t required_elements(std::vector<index_t> const& local_shape,
                          std::vector<index_t> const& strides) {
  HALOX_REQUIRE(strides.size() == local_shape.size(), errc::invalid_argument,
                std::to_string(strides.size()) + " strides given for a tensor of rank " +
                    std::to_string(local_shape.size()) + "; give one stride per dimension");
  index_t last = 0;
  for (std::size_t d = 0; d < local_shape.size(); ++d)
    if (local_shape[d] == 0) return 0;
  for (std::size_t d = 0; d < local_shape.size(); ++d) {
    index_t step = 0;
    HALOX_REQUIRE(local_shape[d] > 0 && checked_mul(local_shape[d] - 1, strides[d], step) &&
                      checked_add(last, step, last) && last < detail::index_max,
                  errc::invalid_argument,
                  "a buffer of local extent " + std::to_string(local_shape[d]) + " with stride " +
                      std::to_string(strides[d]) + " on dim " + std::to_string(d) +
                      " has offsets beyond the index limit " + index_limit_str() +
                      "; use smaller strides or a smaller local shape");
  }
  return last + 1;
}

} // namespace halox
