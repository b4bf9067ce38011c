// Geometry of the distributed windowed operators (src/ops/dist_geometry.hpp), checked against
// the serial footprint functions and against brute force over random windows and partitions.
#include "ops/dist/dist_geometry.hpp"
#include "ops/dist/dist_window.hpp"

#include <halox/ops/window.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace {

using halox::box;
using halox::index_t;
using namespace halox::ops::detail;

struct rng {
  std::mt19937_64 g;
  explicit rng(std::uint64_t seed) : g(seed) {}
  index_t operator()(index_t lo, index_t hi) { // inclusive
    return std::uniform_int_distribution<index_t>(lo, hi)(g);
  }
};

// A random valid 1-D window (the dilated kernel fits the padded input).
win1 random_window(rng& r) {
  while (true) {
    win1 w;
    w.in = r(1, 24);
    w.k = r(1, 7);
    w.s = r(1, 4);
    w.dil = r(1, 3);
    w.pl = r(0, 4);
    w.ph = r(0, 4);
    index_t const padded = w.in + w.pl + w.ph;
    if (w.span() + 1 > padded) continue;
    w.out = (padded - w.span() - 1) / w.s + 1;
    return w;
  }
}

// Random part starts: `parts` parts, some possibly empty.
std::vector<index_t> random_starts(rng& r, index_t extent, int parts) {
  std::vector<index_t> cut;
  for (int p = 1; p < parts; ++p) cut.push_back(r(0, extent));
  std::sort(cut.begin(), cut.end());
  std::vector<index_t> s{0};
  s.insert(s.end(), cut.begin(), cut.end());
  s.push_back(extent);
  return s;
}

box box1(range1 r) {
  box b;
  b.nd = 1;
  b.lo[0] = r.lo;
  b.hi[0] = r.hi;
  return b;
}

halox::ops::conv_params params1(win1 const& w) { return {{w.s}, {w.pl}, {w.ph}, {w.dil}}; }

TEST(DistOpsGeometry, FootprintsMatchTheSerialKernels) {
  rng r(1);
  for (int it = 0; it < 3000; ++it) {
    win1 const w = random_window(r);
    index_t const a = r(0, w.out), b = r(a, w.out);
    box const fi = halox::ops::conv_input_footprint(box1({a, b}), {w.in}, {w.k}, params1(w));
    range1 const mi = input_footprint(w, {a, b});
    ASSERT_EQ(mi.lo, fi.lo[0]) << it;
    ASSERT_EQ(mi.hi, fi.hi[0]) << it;
    index_t const c = r(0, w.in), d = r(c, w.in);
    box const fo = halox::ops::conv_output_footprint(box1({c, d}), {w.in}, {w.k}, params1(w));
    range1 const mo = output_footprint(w, {c, d});
    ASSERT_EQ(mo.lo, fo.lo[0]) << it;
    ASSERT_EQ(mo.hi, fo.hi[0]) << it;
  }
}

// The span is the footprint before clipping: every tap of the first and last window, padding
// included, and the footprint is the span clipped to the input.
TEST(DistOpsGeometry, InputSpanIsTheUnclippedFootprint) {
  rng r(7);
  for (int it = 0; it < 3000; ++it) {
    win1 const w = random_window(r);
    index_t const a = r(0, w.out - 1), b = r(a + 1, w.out);
    box const span = halox::ops::conv_input_span(box1({a, b}), {w.in}, {w.k}, params1(w));
    ASSERT_EQ(span.lo[0], a * w.s - w.pl) << it;
    ASSERT_EQ(span.hi[0], (b - 1) * w.s - w.pl + (w.k - 1) * w.dil + 1) << it;
    box const fp = halox::ops::conv_input_footprint(box1({a, b}), {w.in}, {w.k}, params1(w));
    index_t const lo = std::max<index_t>(span.lo[0], 0), hi = std::min(span.hi[0], w.in);
    ASSERT_EQ(fp.lo[0], lo < hi ? lo : 0) << it;
    ASSERT_EQ(fp.hi[0], lo < hi ? hi : 0) << it;
    halox::ops::pool_params pp;
    pp.kernel = {w.k};
    pp.stride = {w.s};
    pp.pad_lo = {w.pl};
    pp.pad_hi = {w.ph};
    pp.dilation = {w.dil};
    box pool_span;
    try {
      pool_span = halox::ops::pool_input_span(box1({a, b}), {w.in}, pp);
    } catch (halox::error const&) {
      continue; // padding beyond what pooling allows
    }
    ASSERT_EQ(pool_span, span) << it;
  }
  box empty;
  empty.nd = 1;
  box const none = halox::ops::conv_input_span(empty, {8}, {3}, {});
  EXPECT_EQ(none.lo[0], 0);
  EXPECT_EQ(none.hi[0], 0);
}

TEST(DistOpsGeometry, WindowsResolveLikeTheSerialGeometry) {
  halox::ops::pool_params pp;
  pp.kernel = {3};
  pp.pad_lo = {1};
  auto const w = pool_windows({7, 9}, pp);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].s, 3); // stride defaults to the kernel
  EXPECT_EQ(w[1].out, 3);
  auto const c = conv_windows({8}, {3}, {{2}, {1}, {1}, {}});
  EXPECT_EQ(c[0].out, 4);
}

TEST(DistOpsGeometry, EveryOutputGoesToThePartOwningItsAnchor) {
  rng r(2);
  for (int it = 0; it < 2000; ++it) {
    win1 const w = random_window(r);
    auto const in = random_starts(r, w.in, static_cast<int>(r(1, 9)));
    auto const out = output_starts(w, in);
    ASSERT_EQ(out.front(), 0);
    ASSERT_EQ(out.back(), w.out);
    for (std::size_t p = 0; p + 1 < out.size(); ++p) {
      ASSERT_LE(out[p], out[p + 1]);
      for (index_t o = out[p]; o < out[p + 1]; ++o) {
        ASSERT_GE(anchor(w, o), in[p]);
        ASSERT_LT(anchor(w, o), in[p + 1]);
      }
    }
  }
}

TEST(DistOpsGeometry, SameConvolutionKeepsTheInputDistribution) {
  win1 w{10, 10, 3, 1, 1, 1, 1};
  std::vector<index_t> const in{0, 3, 6, 8, 10};
  EXPECT_EQ(output_starts(w, in), in);
  win1 s2{10, 5, 3, 2, 1, 1, 1}; // stride 2: output o is centred on input 2o
  EXPECT_EQ(output_starts(s2, in), (std::vector<index_t>{0, 2, 3, 4, 5}));
}

TEST(DistOpsGeometry, HalosCoverEveryPartsFootprintsAndNoMore) {
  rng r(3);
  for (int it = 0; it < 2000; ++it) {
    win1 const w = random_window(r);
    auto const in = random_starts(r, w.in, static_cast<int>(r(1, 9)));
    auto const own = ranges_of(in), out = ranges_of(output_starts(w, in));
    std::vector<range1> fwd, bwd;
    for (std::size_t p = 0; p < own.size(); ++p) {
      fwd.push_back(input_footprint(w, out[p]));
      bwd.push_back(input_footprint(w, output_footprint(w, own[p])));
    }
    for (auto const* need : {&fwd, &bwd}) {
      halo1 const h = halo_for(own, *need);
      bool tight_lo = h.lo == 0, tight_hi = h.hi == 0;
      for (std::size_t p = 0; p < own.size(); ++p) {
        range1 const n = (*need)[p];
        if (own[p].empty() || n.empty()) continue;
        ASSERT_GE(n.lo, own[p].lo - h.lo);
        ASSERT_LE(n.hi, own[p].hi + h.hi);
        tight_lo = tight_lo || n.lo == own[p].lo - h.lo;
        tight_hi = tight_hi || n.hi == own[p].hi + h.hi;
      }
      EXPECT_TRUE(tight_lo && tight_hi) << "a halo wider than any part needs, iteration " << it;
    }
  }
}

TEST(DistOpsGeometry, ForwardInteriorIsExactlyTheOutputsReadingOwnedInputs) {
  rng r(4);
  for (int it = 0; it < 2000; ++it) {
    win1 const w = random_window(r);
    auto const in = random_starts(r, w.in, static_cast<int>(r(1, 6)));
    auto const own = ranges_of(in), out = ranges_of(output_starts(w, in));
    for (std::size_t p = 0; p < own.size(); ++p) {
      range1 const i = forward_interior(w, out[p], own[p]);
      ASSERT_GE(i.lo, out[p].lo);
      ASSERT_LE(i.hi, out[p].hi);
      for (index_t o = out[p].lo; o < out[p].hi; ++o) {
        range1 const f = input_footprint(w, {o, o + 1});
        if (f.empty()) continue; // all padding: either side is correct
        bool const inside = f.lo >= own[p].lo && f.hi <= own[p].hi;
        ASSERT_EQ(o >= i.lo && o < i.hi, inside) << "iteration " << it << " output " << o;
      }
      range1 const whole = input_footprint(w, i); // what the kernel checks for the box
      if (!whole.empty()) {
        ASSERT_GE(whole.lo, own[p].lo);
        ASSERT_LE(whole.hi, own[p].hi);
      }
    }
  }
}

TEST(DistOpsGeometry, BackwardInteriorIsExactlyTheInputsReadByOwnedOutputsOnly) {
  rng r(5);
  for (int it = 0; it < 2000; ++it) {
    win1 const w = random_window(r);
    auto const in = random_starts(r, w.in, static_cast<int>(r(1, 6)));
    auto const own = ranges_of(in), out = ranges_of(output_starts(w, in));
    for (std::size_t p = 0; p < own.size(); ++p) {
      range1 const b = backward_interior(w, own[p], out[p]);
      for (index_t x = own[p].lo; x < own[p].hi; ++x) {
        range1 const f = output_footprint(w, {x, x + 1});
        if (f.empty()) continue;
        bool const inside = f.lo >= out[p].lo && f.hi <= out[p].hi;
        ASSERT_EQ(x >= b.lo && x < b.hi, inside) << "iteration " << it << " input " << x;
      }
      range1 const whole = output_footprint(w, b);
      if (!whole.empty()) {
        ASSERT_GE(whole.lo, out[p].lo);
        ASSERT_LE(whole.hi, out[p].hi);
      }
    }
  }
}

TEST(DistOpsGeometry, BoundaryBoxesTileTheRestOfTheBlock) {
  rng r(6);
  for (int it = 0; it < 500; ++it) {
    int const nd = static_cast<int>(r(1, 3));
    std::vector<range1> o(nd), i(nd);
    for (int d = 0; d < nd; ++d) {
      o[d].lo = r(0, 3);
      o[d].hi = o[d].lo + r(0, 5);
      i[d].lo = r(o[d].lo, o[d].hi);
      i[d].hi = r(i[d].lo, o[d].hi);
    }
    box const outer = make_box(o), inner = make_box(i);
    auto const parts = boundary_boxes(outer, inner);
    index_t vol = inner.volume();
    for (auto const& b : parts) {
      ASSERT_FALSE(b.empty());
      vol += b.volume();
      ASSERT_TRUE(halox::intersect(b, inner).empty());
      for (auto const& c : parts) {
        if (&c != &b) {
          ASSERT_TRUE(halox::intersect(b, c).empty());
        }
      }
      ASSERT_EQ(halox::intersect(b, outer), b);
    }
    ASSERT_EQ(vol, outer.volume()) << "iteration " << it;
  }
}

TEST(DistOpsGeometry, InteriorPiecesTileTheBox) {
  box const b = make_box({{2, 3}, {0, 10}, {4, 7}}); // extent 1 along the first dimension
  for (int n : {1, 3, 8, 10, 20}) {
    auto const pieces = split_box(b, n);
    EXPECT_EQ(static_cast<int>(pieces.size()), std::min(std::max(n, 1), 10));
    index_t next = 0, vol = 0;
    for (auto const& p : pieces) {
      EXPECT_EQ(p.lo[1], next); // cut along the second dimension, in order, no gaps
      next = p.hi[1];
      vol += p.volume();
      EXPECT_EQ(p.lo[2], 4);
      EXPECT_EQ(p.hi[2], 7);
    }
    EXPECT_EQ(vol, b.volume());
  }
  EXPECT_EQ(split_box(make_box({{0, 1}}), 4).size(), 1u);
}

TEST(DistOpsGeometry, GlobalPoolingSplitFourWaysNeedsTwoHopHalos) {
  // 7x7 max pooling of a 7-wide image split 2,2,2,1: only the part owning the centre (input
  // 3, part 1) computes the single output, and needs all 7 inputs; every part needs its dy.
  win1 const w{7, 1, 7, 7, 0, 0, 1};
  std::vector<index_t> const in{0, 2, 4, 6, 7};
  auto const out = ranges_of(output_starts(w, in));
  EXPECT_TRUE(out[0].empty() && out[2].empty() && out[3].empty());
  EXPECT_EQ(out[1].size(), 1);
  std::vector<range1> fwd;
  for (auto const& o : out) fwd.push_back(input_footprint(w, o));
  halo1 const h = halo_for(ranges_of(in), fwd);
  EXPECT_EQ(h.lo, 2);
  EXPECT_EQ(h.hi, 3); // reaches past part 2 into part 3
  for (auto const& p : ranges_of(in)) EXPECT_EQ(output_footprint(w, p).size(), 1);
}

} // namespace

// The interior is cut into pieces for MPI progress only while this rank's exchange moves
// messages of at least progress_min_bytes per peer (smaller ones travel eagerly).
TEST(DistOpsGeometry, ProgressPiecesOnlyForLargeMessages) {
  halox::ops::dist_options o;
  o.progress_polls = 8;
  o.progress_min_bytes = 1000;
  using halox::ops::detail::progress_pieces;
  EXPECT_EQ(progress_pieces(o, 0, 0), 1);       // no peers: nothing to progress
  EXPECT_EQ(progress_pieces(o, 5000, 0), 1);    // (bytes without peers: a copy to oneself)
  EXPECT_EQ(progress_pieces(o, 0, 2), 1);       // peers but nothing moves
  EXPECT_EQ(progress_pieces(o, 1999, 2), 1);    // 999 bytes per peer: eager
  EXPECT_EQ(progress_pieces(o, 2000, 2), 8);    // 1000 per peer: at the threshold
  EXPECT_EQ(progress_pieces(o, 1 << 20, 4), 8); // large messages
  o.progress_min_bytes = 0;                     // always split while anything moves
  EXPECT_EQ(progress_pieces(o, 8, 4), 8);
  o.progress_polls = 1;
  EXPECT_EQ(progress_pieces(o, 1 << 20, 4), 1);
}

// The overlap tuner: one untimed call per mode, then the modes alternate for `trials` timed
// calls each; the sum (over ranks, here the identity) of each mode's fastest call decides, the
// split on a tie; with no trials it always splits and never sums.
TEST(DistOpsGeometry, OverlapTunerKeepsTheFasterMode) {
  using halox::ops::detail::overlap_tuner;
  auto run = [](int trials, double split_s, double whole_s, int& sums) {
    overlap_tuner t(trials);
    std::vector<bool> modes;
    for (int i = 0; i < 2 + 2 * trials + 3; ++i) {
      bool const s = t.split();
      modes.push_back(s);
      // The untimed calls are slow (kernels built there) and must not count.
      double const secs = i < 2 ? 100.0 : s ? split_s + 1e-3 * i : whole_s + 1e-3 * i;
      t.record(secs, [&](double(&v)[2]) {
        ++sums;
        EXPECT_LT(v[0], 100.0);
        EXPECT_LT(v[1], 100.0);
      });
    }
    return std::make_pair(modes, t.describe());
  };
  int sums = 0;
  auto [m1, d1] = run(2, 2.0, 1.0, sums);
  EXPECT_EQ(m1, (std::vector<bool>{true, false, true, false, true, false, false, false, false}));
  EXPECT_EQ(sums, 1);
  EXPECT_EQ(d1.rfind("whole (", 0), 0u) << d1;
  auto [m2, d2] = run(3, 1.0, 2.0, sums);
  EXPECT_EQ(m2.back(), true);
  EXPECT_EQ(d2.rfind("split (", 0), 0u) << d2;
  EXPECT_EQ(sums, 2);
  auto [m3, d3] = run(1, 1.0, 1.0, sums); // the same calls: i adds less to the split's
  EXPECT_EQ(m3.back(), true) << d3;
  auto [m4, d4] = run(0, 2.0, 1.0, sums);
  EXPECT_EQ(m4, std::vector<bool>(5, true));
  EXPECT_EQ(sums, 3) << "no trials, no collective";
  EXPECT_EQ(d4, "split (not measured)");
}
