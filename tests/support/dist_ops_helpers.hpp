#pragma once
// Helpers of the distributed-operator tests: random global tensors, the owned cells of a local
// buffer, scattering a global tensor into a rank's buffer, and comparisons with a serial result.

#include <halox/box.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/tensor_desc.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace halox::test {

using shape_t = std::vector<index_t>;

template <class T>
std::vector<T> random_tensor(shape_t const& s, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<T> v(static_cast<std::size_t>(halox::ops::element_count(s)));
  for (auto& x : v) x = static_cast<T>(u(g));
  return v;
}

// Calls f(global index, row-major offset in the global tensor, offset in the local buffer) for
// every owned cell of `d` on this rank.
template <class F> void for_each_owned(tensor_desc const& d, F&& f) {
  box const own = d.owned_box();
  if (own.empty()) return;
  auto const off = d.owned_offset();
  int const nd = d.ndim();
  shape_t i(own.lo, own.lo + nd);
  while (true) {
    index_t g = 0, l = 0;
    for (int k = 0; k < nd; ++k) {
      g = g * d.shape()[k] + i[k];
      l += (i[k] - own.lo[k] + off[k]) * d.strides()[k];
    }
    f(i, g, l);
    int k = nd - 1;
    for (; k >= 0; --k) {
      if (++i[k] < own.hi[k]) break;
      i[k] = own.lo[k];
    }
    if (k < 0) return;
  }
}

// A local buffer of `d`: owned cells from `global`, halo cells NaN (so that a halo the exchange
// misses, or a padding cell a kernel reads, shows).
template <class T> std::vector<T> scatter(tensor_desc const& d, std::vector<T> const& global) {
  std::vector<T> v(static_cast<std::size_t>(d.local_elements()),
                   std::numeric_limits<T>::quiet_NaN());
  for_each_owned(d, [&](shape_t const&, index_t g, index_t l) { v[l] = global[g]; });
  return v;
}

inline std::string idx_str(shape_t const& i) {
  std::ostringstream os;
  os << "[";
  for (std::size_t k = 0; k < i.size(); ++k) os << (k ? "," : "") << i[k];
  return os.str() + "]";
}

// Owned cells of `local` against `global`: |got - want| <= tol * max(1, max|want|); tol 0 asks
// for bitwise equality (NaN never equals).
template <class T> void expect_owned(tensor_desc const& d, std::vector<T> const& local,
                                     std::vector<T> const& global, double tol,
                                     std::string const& what) {
  double scale = 1;
  for (T x : global) scale = std::max(scale, std::abs(static_cast<double>(x)));
  index_t bad = 0;
  std::string first;
  for_each_owned(d, [&](shape_t const& i, index_t g, index_t l) {
    double const got = local[l], want = global[g];
    bool const ok = tol == 0 ? local[l] == global[g] : std::abs(got - want) <= tol * scale;
    if (!ok && bad++ == 0) {
      std::ostringstream os;
      os.precision(17);
      os << idx_str(i) << " got " << got << " want " << want;
      first = os.str();
    }
  });
  EXPECT_EQ(bad, 0) << what << ": " << bad << " mismatches (tol " << tol << "), first " << first;
}

template <class T> void expect_close(std::vector<T> const& got, std::vector<T> const& want,
                                     double tol, std::string const& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1, err = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    err = std::max(err, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  }
  EXPECT_LE(err, tol * scale) << what << ": max error " << err << " (scale " << scale << ")";
}

} // namespace halox::test
