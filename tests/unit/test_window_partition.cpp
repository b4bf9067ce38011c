// The public split of a window over the parts of one dimension
// (include/halox/ops/window_partition.hpp): the distributed operators' anchor rule and halos
// when no output blocks are given, brute-force spans and tight halos for given output blocks,
// and errors that name the bad argument.
#include "ops/dist/dist_geometry.hpp"

#include <halox/error.hpp>
#include <halox/ops/window.hpp>
#include <halox/ops/window_partition.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace {

using halox::index_t;
using halox::ops::halo_reach;
using halox::ops::window_1d;
using halox::ops::window_partition;
namespace detail = halox::ops::detail;

struct rng {
  std::mt19937_64 g;
  explicit rng(std::uint64_t seed) : g(seed) {}
  index_t operator()(index_t lo, index_t hi) { // inclusive
    return std::uniform_int_distribution<index_t>(lo, hi)(g);
  }
};

// A random valid window (the dilated kernel fits the padded input) and its output extent.
window_1d random_window(rng& r, index_t& out) {
  while (true) {
    window_1d w;
    w.in_extent = r(1, 24);
    w.kernel = r(1, 7);
    w.stride = r(1, 4);
    w.dilation = r(1, 3);
    w.pad_lo = r(0, 4);
    w.pad_hi = r(0, 4);
    index_t const padded = w.in_extent + w.pad_lo + w.pad_hi;
    index_t const eff = (w.kernel - 1) * w.dilation + 1;
    if (eff > padded) continue;
    out = (padded - eff) / w.stride + 1;
    return w;
  }
}

// `parts` random part starts of `extent` (some parts possibly empty).
std::vector<index_t> random_starts(rng& r, index_t extent, int parts) {
  std::vector<index_t> s{0};
  for (int p = 1; p < parts; ++p) s.push_back(r(0, extent));
  std::sort(s.begin(), s.end());
  s.push_back(extent);
  return s;
}

detail::win1 win1_of(window_1d const& w, index_t out) {
  return {w.in_extent, out, w.kernel, w.stride, w.pad_lo, w.pad_hi, w.dilation};
}

} // namespace

// Without output blocks, the split is the distributed operators' own: outputs go to the part
// owning their anchor, and the halos cover the clipped footprints (src/ops/dist/dist_window.cpp).
TEST(WindowPartition, AnchorRuleAndFootprintHalosAreTheDistributedOperators) {
  rng r(11);
  for (int it = 0; it < 3000; ++it) {
    index_t out = 0;
    window_1d const w = random_window(r, out);
    auto const in = random_starts(r, w.in_extent, static_cast<int>(r(1, 9)));
    auto const got = window_partition(w, in);
    detail::win1 const g = win1_of(w, out);
    ASSERT_EQ(got.out_extent, out) << it;
    ASSERT_EQ(got.out_starts, detail::output_starts(g, in)) << it;
    auto const own = detail::ranges_of(in), outs = detail::ranges_of(got.out_starts);
    std::vector<detail::range1> fwd;
    for (std::size_t p = 0; p < own.size(); ++p) {
      fwd.push_back(detail::input_footprint(g, outs[p]));
      ASSERT_EQ(got.need_lo[p], fwd.back().lo) << it;
      ASSERT_EQ(got.need_hi[p], fwd.back().hi) << it;
    }
    detail::halo1 const h = detail::halo_for(own, fwd);
    ASSERT_EQ(got.halo_lo, h.lo) << it;
    ASSERT_EQ(got.halo_hi, h.hi) << it;
  }
}

// Given output blocks are kept; with reach = span every part's need is the first and last tap of
// its outputs, padding included, and the halos are the tightest that hold every need.
TEST(WindowPartition, SpanNeedsAreEveryTapAndHalosAreTight) {
  rng r(12);
  for (int it = 0; it < 3000; ++it) {
    index_t out = 0;
    window_1d const w = random_window(r, out);
    int const parts = static_cast<int>(r(1, 9));
    auto const in = random_starts(r, w.in_extent, parts);
    auto const out_starts = random_starts(r, out, parts);
    auto const got = window_partition(w, in, out_starts, halo_reach::span);
    ASSERT_EQ(got.out_starts, out_starts) << it;
    index_t lo_w = 0, hi_w = 0;
    for (std::size_t p = 0; p + 1 < in.size(); ++p) {
      index_t lo = 0, hi = 0; // brute force over every tap of every output of the part
      for (index_t o = out_starts[p]; o < out_starts[p + 1]; ++o)
        for (index_t j = 0; j < w.kernel; ++j) {
          index_t const i = o * w.stride - w.pad_lo + j * w.dilation;
          lo = o == out_starts[p] && j == 0 ? i : std::min(lo, i);
          hi = o == out_starts[p] && j == 0 ? i + 1 : std::max(hi, i + 1);
        }
      ASSERT_EQ(got.need_lo[p], lo) << it << " part " << p;
      ASSERT_EQ(got.need_hi[p], hi) << it << " part " << p;
      if (in[p] < in[p + 1] && lo < hi) {
        lo_w = std::max(lo_w, in[p] - lo);
        hi_w = std::max(hi_w, hi - in[p + 1]);
      }
    }
    ASSERT_EQ(got.halo_lo, lo_w) << it;
    ASSERT_EQ(got.halo_hi, hi_w) << it;
  }
}

TEST(WindowPartition, SameConvolutionOverBalancedBlocks) {
  // 3x3 "same" convolution of 10 cells over 4 balanced parts: one cell of padding or neighbour
  // on either side of every block.
  window_1d const w{10, 3, 1, 1, 1, 1};
  std::vector<index_t> const in{0, 3, 6, 8, 10};
  auto const span = window_partition(w, in, in, halo_reach::span);
  EXPECT_EQ(span.halo_lo, 1);
  EXPECT_EQ(span.halo_hi, 1);
  EXPECT_EQ(span.need_lo, (std::vector<index_t>{-1, 2, 5, 7}));
  EXPECT_EQ(span.need_hi, (std::vector<index_t>{4, 7, 9, 11}));
  auto const fp = window_partition(w, in);
  EXPECT_EQ(fp.out_starts, in);
  EXPECT_EQ(fp.need_lo, (std::vector<index_t>{0, 2, 5, 7}));
  EXPECT_EQ(fp.need_hi, (std::vector<index_t>{4, 7, 9, 10}));
  EXPECT_EQ(fp.halo_lo, 1);
  EXPECT_EQ(fp.halo_hi, 1);
}

TEST(WindowPartition, BadArgumentsAreNamed) {
  auto fails = [](auto&& call, char const* what) {
    try {
      call();
    } catch (halox::error const& e) {
      EXPECT_EQ(e.code(), halox::errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error for " << what;
  };
  window_1d const w{8, 3, 1, 0, 0, 1};
  fails([&] { (void)window_partition(w, {0, 4, 7}); }, "input starts");
  fails([&] { (void)window_partition(w, {0, 5, 4, 8}); }, "input starts");
  fails([&] { (void)window_partition(w, {0, 4, 8}, {0, 6}); }, "output starts for");
  fails([&] { (void)window_partition(w, {0, 4, 8}, {0, 2, 7}); }, "output starts");
  fails([&] { (void)window_partition({2, 5, 1, 0, 0, 1}, {0, 2}); }, "larger than the padded");
  fails([&] { (void)window_partition({8, 3, 0, 0, 0, 1}, {0, 8}); }, "stride");
  fails([&] { (void)window_partition({0, 1, 1, 0, 0, 1}, {0, 0}); }, "input extent");
}
