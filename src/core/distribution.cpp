#include <halox/distribution.hpp>
#include <halox/error.hpp>

#include <algorithm>
#include <numeric>
#include <sstream>

namespace halox {

namespace {
std::string dim_name(int d) { return "dim " + std::to_string(d); }

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
    auto& s = starts_[d];
    s.assign(p + 1, 0);
    if (o.sizes.empty()) {
      index_t const q = n / p, r = n % p;
      for (int i = 0; i < p; ++i) s[i + 1] = s[i] + q + (i < r ? 1 : 0);
    } else {
      HALOX_REQUIRE(static_cast<int>(o.sizes.size()) == p, errc::invalid_argument,
                    std::to_string(o.sizes.size()) + " explicit part sizes on " + dim_name(d) +
                        " but the grid has " + std::to_string(p) +
                        " processes there; give one size per process");
      for (int i = 0; i < p; ++i) {
        HALOX_REQUIRE(o.sizes[i] >= 0, errc::invalid_argument,
                      "part size " + std::to_string(o.sizes[i]) + " of part " + std::to_string(i) +
                          " on " + dim_name(d) + " must not be negative");
        s[i + 1] = s[i] + o.sizes[i];
      }
      HALOX_REQUIRE(s[p] == n, errc::invalid_argument,
                    "explicit part sizes on " + dim_name(d) + " sum to " + std::to_string(s[p]) +
                        " but the extent is " + std::to_string(n) +
                        "; they must sum to the extent");
    }
    HALOX_REQUIRE(nranks_ <= (1 << 30) / p, errc::invalid_argument,
                  "the process grid has more than 2^30 processes");
    nranks_ *= p;
  }
}

int distribution::part_of(int d, index_t i) const {
  auto const& s = starts_[d];
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
    for (index_t s : starts_[d]) h = mix(h, static_cast<std::uint64_t>(s));
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
    need = strides[d] * local_shape[d];
  }
}

index_t required_elements(std::vector<index_t> const& local_shape,
                          std::vector<index_t> const& strides) {
  index_t last = 0;
  for (std::size_t d = 0; d < local_shape.size(); ++d) {
    if (local_shape[d] == 0) return 0;
    last += (local_shape[d] - 1) * strides[d];
  }
  return last + 1;
}

} // namespace halox
