// The CPU pack path (exec/cpu/pack.cpp) against an element-by-element oracle: packing walks each
// region in row-major box order whatever its strides (fixed-size run copies for short runs, an
// odometer over the outer loops), and local copies run straight from source to destination
// (tiled when the two sides' strides transpose) with the same result as going through the
// canonical packed order.

#include "exec/cpu/pack.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace halox;
using namespace halox::detail;

namespace {

// Element offsets of box `b` in row-major box order.
std::vector<index_t> offsets(box const& b, std::vector<index_t> const& strides) {
  std::vector<index_t> out;
  if (b.empty()) return out;
  std::vector<index_t> i(b.lo, b.lo + b.nd);
  for (;;) {
    index_t o = 0;
    for (int d = 0; d < b.nd; ++d) o += i[d] * strides[d];
    out.push_back(o);
    int d = b.nd - 1;
    for (; d >= 0; --d) {
      if (++i[d] < b.hi[d]) break;
      i[d] = b.lo[d];
    }
    if (d < 0) return out;
  }
}

struct random_layout {
  std::vector<index_t> shape, strides;
  index_t elements = 0;
};

// A buffer of `nd` dims with padded strides in a random dimension order (so that two slots may
// be contiguous along different dimensions).
random_layout make_layout(std::mt19937& rng, int nd, std::vector<index_t> const& shape) {
  random_layout l;
  l.shape = shape;
  l.strides.assign(nd, 0);
  std::vector<int> order(nd);
  std::iota(order.begin(), order.end(), 0);
  if (rng() % 3 == 0) std::shuffle(order.begin(), order.end(), rng);
  index_t s = 1;
  for (int k = nd - 1; k >= 0; --k) {
    int const d = order[k];
    l.strides[d] = s;
    s *= shape[d] + static_cast<index_t>(rng() % 3 == 0 ? rng() % 3 : 0);
  }
  l.elements = s;
  return l;
}

box random_box(std::mt19937& rng, std::vector<index_t> const& shape, std::vector<index_t> ext) {
  box b;
  b.nd = static_cast<int>(shape.size());
  for (int d = 0; d < b.nd; ++d) {
    b.lo[d] = static_cast<index_t>(rng() % static_cast<unsigned>(shape[d] - ext[d] + 1));
    b.hi[d] = b.lo[d] + ext[d];
  }
  return b;
}

dtype type_of_size(std::size_t e) {
  switch (e) {
  case 1: return dtype::uint8;
  case 2: return dtype::float16;
  case 4: return dtype::int32;
  default: return dtype::int64;
  }
}

template <class T> void fill_random(std::vector<std::byte>& v, std::mt19937& rng) {
  for (std::size_t i = 0; i + sizeof(T) <= v.size(); i += sizeof(T)) {
    T x = static_cast<T>(rng() % 100);
    std::memcpy(v.data() + i, &x, sizeof(T));
  }
}

} // namespace

TEST(CpuPack, RandomRegionsMatchElementOracle) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    int const nd = 1 + static_cast<int>(rng() % 4);
    std::size_t const e = std::size_t{1} << (rng() % 4);
    std::vector<index_t> shape(nd), ext(nd);
    for (int d = 0; d < nd; ++d) {
      shape[d] = 1 + static_cast<index_t>(rng() % 9);
      ext[d] = 1 + static_cast<index_t>(rng() % static_cast<unsigned>(shape[d]));
    }
    random_layout const l = make_layout(rng, nd, shape);
    schedule s;
    s.slots.push_back({l.strides, l.elements, type_of_size(e), e});
    region r{0, random_box(rng, shape, ext)};
    std::vector<std::byte> buf(static_cast<std::size_t>(l.elements) * e);
    fill_random<std::uint8_t>(buf, rng);
    auto const offs = offsets(r.b, l.strides);
    std::vector<std::byte> packed(offs.size() * e), expect(offs.size() * e);
    for (std::size_t k = 0; k < offs.size(); ++k)
      std::memcpy(expect.data() + k * e, buf.data() + offs[k] * static_cast<index_t>(e), e);
    void const* in[] = {buf.data()};
    ASSERT_EQ(pack_region(s, r, in, packed.data()), packed.size());
    ASSERT_EQ(packed, expect) << "trial " << trial;
    // Unpack a shuffled stream back and compare element by element.
    std::vector<std::byte> back(buf.size(), std::byte{0});
    void* out[] = {back.data()};
    ASSERT_EQ(unpack_region(s, r, out, packed.data(), combine_op::replace), packed.size());
    for (std::size_t k = 0; k < offs.size(); ++k)
      ASSERT_EQ(
          std::memcmp(back.data() + offs[k] * static_cast<index_t>(e), packed.data() + k * e, e),
          0);
  }
}

TEST(CpuPack, ShortRunsOfEveryLength) {
  // One strided loop of runs of 1..80 elements of every element size: the run copy is chosen
  // by the run's byte length (fixed, overlapping or library copies).
  for (std::size_t e : {1, 2, 4, 8})
    for (index_t run = 1; run <= 80; ++run) {
      index_t const rows = 5, stride = run + 3;
      schedule s;
      s.slots.push_back({{stride, 1}, rows * stride, type_of_size(e), e});
      box b;
      b.nd = 2;
      b.lo[0] = 0;
      b.hi[0] = rows;
      b.lo[1] = 1;
      b.hi[1] = 1 + run;
      std::vector<std::byte> buf(static_cast<std::size_t>(rows * stride) * e);
      for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>(i * 7 + 1);
      std::vector<std::byte> packed(static_cast<std::size_t>(rows * run) * e);
      void const* in[] = {buf.data()};
      pack_region(s, region{0, b}, in, packed.data());
      for (index_t k = 0; k < rows; ++k)
        ASSERT_EQ(std::memcmp(packed.data() + static_cast<std::size_t>(k * run) * e,
                              buf.data() + static_cast<std::size_t>(k * stride + 1) * e,
                              static_cast<std::size_t>(run) * e),
                  0)
            << "element size " << e << ", run " << run;
    }
}

TEST(CpuPack, LocalCopiesMatchPackedOrder) {
  // Direct copies (same shape on both sides, any strides, transposed included) and combining
  // copies give what packing the source and unpacking into the destination gives.
  std::mt19937 rng(11);
  int transposed = 0;
  for (int trial = 0; trial < 400; ++trial) {
    int const nd = 1 + static_cast<int>(rng() % 4);
    std::vector<index_t> s1(nd), s2(nd), ext(nd);
    for (int d = 0; d < nd; ++d) {
      ext[d] = 1 + static_cast<index_t>(rng() % 40 / (nd > 2 ? 6 : 1));
      s1[d] = ext[d] + static_cast<index_t>(rng() % 3);
      s2[d] = ext[d] + static_cast<index_t>(rng() % 3);
    }
    random_layout const a = make_layout(rng, nd, s1), b = make_layout(rng, nd, s2);
    if (a.strides != b.strides) ++transposed;
    schedule s;
    s.slots.push_back({a.strides, a.elements, dtype::int32, 4});
    s.slots.push_back({b.strides, b.elements, dtype::int32, 4});
    s.copies.push_back({region{0, random_box(rng, s1, ext)}, region{1, random_box(rng, s2, ext)}});
    std::vector<std::byte> src(static_cast<std::size_t>(a.elements) * 4),
        dst(static_cast<std::size_t>(b.elements) * 4);
    fill_random<std::int32_t>(src, rng);
    fill_random<std::int32_t>(dst, rng);
    auto const op = rng() % 2 ? combine_op::replace : combine_op::sum;
    // Oracle: the canonical packed order, element by element.
    std::vector<std::byte> expect = dst;
    auto const so = offsets(s.copies[0].src.b, a.strides);
    auto const dof = offsets(s.copies[0].dst.b, b.strides);
    ASSERT_EQ(so.size(), dof.size());
    for (std::size_t k = 0; k < so.size(); ++k) {
      std::int32_t x, y;
      std::memcpy(&x, src.data() + so[k] * 4, 4);
      std::memcpy(&y, expect.data() + dof[k] * 4, 4);
      y = op == combine_op::replace ? x : x + y;
      std::memcpy(expect.data() + dof[k] * 4, &y, 4);
    }
    std::vector<std::byte> scratch(max_copy_bytes(s));
    void* bufs[] = {src.data(), dst.data()};
    run_local_copies(s, bufs, op, scratch.data());
    ASSERT_EQ(dst, expect) << "trial " << trial;
  }
  EXPECT_GT(transposed, 50);
}

TEST(CpuPack, AliasedBuffersGoThroughTheScratchOrder) {
  // Source and destination slots on one buffer, overlapping regions: the copy must read every
  // source element before writing any (as through the scratch buffer), not smear values.
  schedule s;
  s.slots.push_back({{1}, 64, dtype::int32, 4});
  s.slots.push_back({{1}, 64, dtype::int32, 4});
  box a, b;
  a.nd = b.nd = 1;
  a.lo[0] = 0;
  a.hi[0] = 32;
  b.lo[0] = 1;
  b.hi[0] = 33;
  s.copies.push_back({region{0, a}, region{1, b}});
  std::vector<std::int32_t> v(64);
  std::iota(v.begin(), v.end(), 0);
  std::vector<std::byte> scratch(max_copy_bytes(s));
  void* bufs[] = {v.data(), v.data()};
  run_local_copies(s, bufs, combine_op::replace, scratch.data());
  for (int i = 1; i < 33; ++i) ASSERT_EQ(v[i], i - 1);
}
