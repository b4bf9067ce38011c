// The cut of long messages into fragments (plan/fragments.cpp) for the pipelined backend: the
// byte ranges tile the message in whole elements, and each side's sub-boxes of a range, packed
// in order, give exactly that range of the whole message's packed stream whatever the strides.

#include "exec/cpu/pack.hpp"
#include "plan/fragments.hpp"

#include <halox/error.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace halox;
using namespace halox::detail;

namespace {

// Cells of `b` as coordinate tuples in row-major order.
std::vector<std::vector<index_t>> cells(box const& b) {
  std::vector<std::vector<index_t>> out;
  if (b.empty()) return out;
  std::vector<index_t> i(b.lo, b.lo + b.nd);
  for (;;) {
    out.push_back(i);
    int d = b.nd - 1;
    for (; d >= 0; --d) {
      if (++i[d] < b.hi[d]) break;
      i[d] = b.lo[d];
    }
    if (d < 0) return out;
  }
}

box random_box(std::mt19937& rng, int nd) {
  box b;
  b.nd = nd;
  for (int d = 0; d < nd; ++d) {
    b.lo[d] = static_cast<index_t>(rng() % 4);
    b.hi[d] = b.lo[d] + 1 + static_cast<index_t>(rng() % 5);
  }
  return b;
}

} // namespace

TEST(Fragments, BoxRangeIsExactlyThoseCellsInOrder) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 3000; ++trial) {
    int const nd = 1 + static_cast<int>(rng() % 5);
    box const b = random_box(rng, nd);
    auto const all = cells(b);
    index_t const n = static_cast<index_t>(all.size());
    index_t first = static_cast<index_t>(rng() % (n + 1));
    index_t last = static_cast<index_t>(rng() % (n + 1));
    if (first > last) std::swap(first, last);
    auto const boxes = box_range(b, first, last);
    EXPECT_LE(boxes.size(), static_cast<std::size_t>(2 * nd - 1));
    std::vector<std::vector<index_t>> got;
    for (auto const& x : boxes) {
      EXPECT_FALSE(x.empty());
      for (auto& c : cells(x)) got.push_back(c);
    }
    std::vector<std::vector<index_t>> want(all.begin() + first, all.begin() + last);
    ASSERT_EQ(got, want) << "nd " << nd << " elements [" << first << ", " << last << ")";
  }
}

TEST(Fragments, BoxRangeRejectsARangeOutsideTheBox) {
  box b;
  b.nd = 2;
  b.hi[0] = 2;
  b.hi[1] = 3;
  EXPECT_THROW((void)box_range(b, 0, 7), halox::error);
  EXPECT_THROW((void)box_range(b, 4, 3), halox::error);
  EXPECT_TRUE(box_range(b, 6, 6).empty());
}

TEST(Fragments, AutomaticCutLeavesShortMessagesWholeAndSplitsLongOnesInWholeElements) {
  auto whole = cut_message(2 * pipeline_min_fragment - 8, 8, 0);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].bytes, 2 * pipeline_min_fragment - 8);

  std::size_t const big = (std::size_t{32} << 20) + 12; // not a multiple of the fragment
  auto cut = cut_message(big, 4, 0);
  EXPECT_GE(cut.size(), pipeline_target_fragments);
  EXPECT_LE(cut.size(), pipeline_target_fragments + 1);
  std::size_t off = 0;
  for (auto const& r : cut) {
    EXPECT_EQ(r.offset, off);
    EXPECT_GE(r.bytes, 4u);
    EXPECT_EQ(r.offset % 4, 0u);
    off += r.bytes;
  }
  EXPECT_EQ(off, big);
  // Mixed element sizes are never cut; nor is a message no longer than the fragment asked for.
  EXPECT_EQ(cut_message(big, 0, 0).size(), 1u);
  EXPECT_EQ(cut_message(1000, 8, 1000).size(), 1u);
  // An explicit fragment size is rounded down to whole elements (at least one).
  auto small = cut_message(80, 8, 20);
  ASSERT_EQ(small.size(), 5u);
  EXPECT_EQ(small[0].bytes, 16u);
  EXPECT_EQ(cut_message(24, 8, 3).size(), 3u);
}

TEST(Fragments, PackingTheFragmentsGivesTheWholeMessagesStream) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    int const nd = 1 + static_cast<int>(rng() % 4);
    std::size_t const e = std::size_t{1} << (rng() % 4); // 1, 2, 4, 8 bytes
    schedule s;
    message m;
    m.peer = 1;
    int const nslots = 1 + static_cast<int>(rng() % 2);
    std::vector<std::vector<std::byte>> data(nslots);
    std::vector<void*> bufs(nslots);
    for (int k = 0; k < nslots; ++k) {
      slot_layout l;
      l.elem_size = e;
      l.type = e == 1   ? dtype::uint8
               : e == 2 ? dtype::float16
               : e == 4 ? dtype::float32
                        : dtype::float64;
      std::vector<index_t> shape(nd);
      for (auto& x : shape) x = 8;
      l.strides.assign(nd, 1);
      for (int d = nd - 2; d >= 0; --d) l.strides[d] = l.strides[d + 1] * (shape[d + 1] + 1);
      l.elements = l.strides[0] * shape[0];
      s.slots.push_back(l);
      data[k].resize(static_cast<std::size_t>(l.elements) * e);
      for (std::size_t i = 0; i < data[k].size(); ++i)
        data[k][i] = static_cast<std::byte>((i * 7 + static_cast<std::size_t>(k) * 13) & 0xff);
      bufs[k] = data[k].data();
    }
    int const nregions = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < nregions; ++i)
      m.regions.push_back({static_cast<int>(rng() % nslots), random_box(rng, nd)});
    for (auto const& r : m.regions) m.bytes += region_bytes(s, r);
    s.sends.push_back(m);

    std::vector<std::byte> whole(m.bytes);
    pack_message(s, m, bufs.data(), whole.data());
    std::size_t const setting = e * (1 + rng() % 40);
    auto const cut = cut_message(m.bytes, message_elem_size(s, m), setting);
    std::vector<std::byte> pieces(m.bytes);
    std::size_t covered = 0;
    for (auto const& r : cut) {
      std::size_t at = r.offset;
      for (auto const& reg : regions_of_range(s, m, r))
        at += pack_region(s, reg, bufs.data(), pieces.data() + at);
      EXPECT_EQ(at, r.offset + r.bytes);
      covered += r.bytes;
    }
    EXPECT_EQ(covered, m.bytes);
    ASSERT_EQ(0, std::memcmp(whole.data(), pieces.data(), m.bytes)) << "trial " << trial;
  }
}
