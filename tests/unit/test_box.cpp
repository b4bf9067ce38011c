#include "common/strided_region.hpp"

#include <gtest/gtest.h>

#include <vector>

using halox::box;
using halox::index_t;
using halox::detail::make_region;

namespace {
box make_box(std::vector<index_t> lo, std::vector<index_t> hi) {
  box b;
  b.nd = static_cast<int>(lo.size());
  for (int d = 0; d < b.nd; ++d) {
    b.lo[d] = lo[d];
    b.hi[d] = hi[d];
  }
  return b;
}
// Offsets of every cell of `b` in row-major box order, walked naively.
std::vector<index_t> naive_offsets(box const& b, std::vector<index_t> const& strides) {
  std::vector<index_t> out;
  std::vector<index_t> i(b.lo, b.lo + b.nd);
  if (b.empty()) return out;
  while (true) {
    index_t off = 0;
    for (int d = 0; d < b.nd; ++d) off += i[d] * strides[d];
    out.push_back(off);
    int d = b.nd - 1;
    while (d >= 0 && ++i[d] == b.hi[d]) {
      i[d] = b.lo[d];
      --d;
    }
    if (d < 0) break;
  }
  return out;
}
std::vector<index_t> region_offsets(halox::detail::strided_region const& r) {
  std::vector<index_t> out;
  for (index_t k = 0; k < r.runs(); ++k)
    for (index_t e = 0; e < r.run; ++e) out.push_back(r.run_offset(k) + e);
  return out;
}
} // namespace

TEST(Box, IntersectAndVolume) {
  box a = make_box({0, 0}, {4, 5});
  box b = make_box({2, -1}, {6, 3});
  box c = intersect(a, b);
  EXPECT_EQ(c, make_box({2, 0}, {4, 3}));
  EXPECT_EQ(c.volume(), 6);
  EXPECT_TRUE(intersect(a, make_box({4, 0}, {5, 5})).empty());
}

TEST(Box, FullRowsCollapseToOneRun) {
  // 3-D buffer 4x5x6, row-major: a box spanning full rows and planes is one contiguous run.
  std::vector<index_t> st{30, 6, 1};
  auto r = make_region(make_box({1, 0, 0}, {3, 5, 6}), st.data());
  EXPECT_EQ(r.nloops, 0);
  EXPECT_EQ(r.run, 60);
  EXPECT_EQ(r.offset, 30);
}

TEST(Box, StridedFaceMatchesNaiveWalk) {
  std::vector<index_t> st{30, 6, 1};
  for (auto b : {make_box({0, 1, 0}, {4, 2, 6}), make_box({0, 0, 5}, {4, 5, 6}),
                 make_box({1, 2, 3}, {3, 4, 5}), make_box({2, 2, 2}, {3, 3, 3})}) {
    auto r = make_region(b, st.data());
    EXPECT_EQ(region_offsets(r), naive_offsets(b, st));
    EXPECT_EQ(r.elements(), b.volume());
  }
}

TEST(Box, PaddedAndPermutedStrides) {
  // Padded rows (stride 8 for a row of 6) and a column-major layout.
  std::vector<index_t> padded{40, 8, 1};
  std::vector<index_t> colmajor{1, 4, 20};
  for (auto const& st : {padded, colmajor}) {
    for (auto b : {make_box({0, 0, 0}, {4, 5, 6}), make_box({1, 1, 1}, {4, 3, 6})}) {
      auto r = make_region(b, st.data());
      EXPECT_EQ(region_offsets(r), naive_offsets(b, st));
    }
  }
}

TEST(Box, EmptyBoxHasNoElements) {
  std::vector<index_t> st{6, 1};
  auto r = make_region(make_box({1, 2}, {1, 5}), st.data());
  EXPECT_EQ(r.elements(), 0);
}
