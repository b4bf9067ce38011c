// The CUDA pack path without a GPU: the descriptor batches of exec/cuda/pack_batch.hpp are run
// by a host emulation of kernels/pack.cu that calls the same index functions (find_region,
// effective_word, for_each_word) thread by thread, and must produce byte-identical
// packed streams and buffers to the CPU pack path (exec/cpu/pack.cpp) on random schedules.
// The emulation also checks what the kernels rely on: every word access is aligned to its width,
// every packed byte is written exactly once, and no two regions of one unpack launch touch the
// same buffer byte.

#include "exec/cpu/pack.hpp"
#include "exec/cuda/pack_batch.hpp"
#include "plan/halo_planner.hpp"

#include <halox/config.hpp>
#include <halox/error.hpp>
#if HALOX_HAS_CUDA
#include "exec/cuda/cuda_handle.hpp"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <set>
#include <vector>

using namespace halox;
using namespace halox::detail;
using namespace halox::detail::gpu;

namespace {

// A host allocation whose base address is `misalign` bytes past a 256-byte boundary.
struct host_buffer {
  std::vector<unsigned char> raw;
  unsigned char* p = nullptr;
  host_buffer(std::size_t bytes, std::size_t misalign) : raw(bytes + 256 + misalign) {
    auto a = reinterpret_cast<std::uintptr_t>(raw.data());
    p = raw.data() + ((256 - a % 256) % 256) + misalign;
  }
};

std::uintptr_t addr(void const* p) { return reinterpret_cast<std::uintptr_t>(p); }

// What the random schedules exercised (reset and checked by each random test).
struct coverage {
  std::set<int> words; // effective word widths used
  int multi_chunk = 0; // regions spanning several blocks
  int deep = 0;        // regions with two or more outer loops
  int multi_level = 0; // unpack batches with several conflict levels
  int fills = 0;       // fill regions
};
coverage cov;

// Runs f<W>(...) for the run-time word width w, as the kernels' switch does.
template <class F> void with_word(int w, F&& f) {
  switch (w) {
  case 16: f(std::integral_constant<int, 16>{}); break;
  case 8: f(std::integral_constant<int, 8>{}); break;
  case 4: f(std::integral_constant<int, 4>{}); break;
  case 2: f(std::integral_constant<int, 2>{}); break;
  default: f(std::integral_constant<int, 1>{}); break;
  }
}

// Calls body(d, block, W-tag) for every block of every launch, like the kernels' prologue.
template <class Body> void each_block(desc_batch const& b, launch_range const& l, Body&& body) {
  for (index_t block = l.block_lo; block < l.block_hi; ++block) {
    int const i = find_region(b.regions.data(), l.first, l.last, block);
    ASSERT_GE(i, l.first);
    ASSERT_LT(i, l.last);
    region_desc const& d = b.regions[static_cast<std::size_t>(i)];
    ASSERT_GE(block, d.block_begin);
    ASSERT_LT(block, d.block_begin + chunks_of(d.bytes));
    body(d, block);
  }
}

void emulate_pack(desc_batch const& b, std::vector<void*> const& slots, unsigned char* stream,
                  std::vector<int>& writes) {
  for (auto const& l : b.launches)
    each_block(b, l, [&](region_desc const& d, index_t block) {
      auto* buf = static_cast<unsigned char*>(slots[static_cast<std::size_t>(d.slot)]);
      int const w = effective_word(d, pow2_divisor(addr(buf)));
      cov.words.insert(w);
      cov.multi_chunk += block > d.block_begin;
      cov.deep += d.sr.nloops >= 2;
      with_word(w, [&](auto wt) {
        constexpr int W = decltype(wt)::value;
        for (int tid = 0; tid < block_threads; ++tid)
          for_each_word<W>(d, block, tid, block_threads, [&](index_t bo, index_t so) {
            ASSERT_EQ(addr(buf + bo) % W, 0u);
            ASSERT_EQ(addr(stream + so) % W, 0u);
            std::memcpy(stream + so, buf + bo, W);
            for (int k = 0; k < W; ++k) ++writes[static_cast<std::size_t>(so + k)];
          });
      });
    });
}

template <class T, class C> void combine_elems(region_desc const& d, index_t block,
                                               unsigned char* buf, unsigned char const* stream,
                                               C combine) {
  for (int tid = 0; tid < block_threads; ++tid)
    for_each_word<static_cast<int>(sizeof(T))>(d, block, tid, block_threads,
                                               [&](index_t bo, index_t so) {
                                                 ASSERT_EQ(addr(buf + bo) % sizeof(T), 0u);
                                                 T v, x;
                                                 std::memcpy(&v, stream + so, sizeof(T));
                                                 std::memcpy(&x, buf + bo, sizeof(T));
                                                 combine(x, v);
                                                 std::memcpy(buf + bo, &x, sizeof(T));
                                               });
}

void combine_region(region_desc const& d, index_t block, unsigned char* buf,
                    unsigned char const* stream, combine_op op) {
  auto typed = [&](auto tag) {
    using T = decltype(tag);
    combine_elems<T>(d, block, buf, stream, [op](T& x, T v) { combine_value(x, v, op); });
  };
  switch (static_cast<dtype>(d.type)) {
  case dtype::float32: typed(float{}); break;
  case dtype::float64: typed(double{}); break;
  case dtype::int32: typed(std::int32_t{}); break;
  case dtype::int64: typed(std::int64_t{}); break;
  case dtype::uint8: typed(std::uint8_t{}); break;
  case dtype::float16:
    combine_elems<std::uint16_t>(d, block, buf, stream, [op](std::uint16_t& x, std::uint16_t v) {
      combine_half<false>(x, v, op);
    });
    break;
  case dtype::bfloat16:
    combine_elems<std::uint16_t>(d, block, buf, stream, [op](std::uint16_t& x, std::uint16_t v) {
      combine_half<true>(x, v, op);
    });
    break;
  }
}

void emulate_unpack(desc_batch const& b, std::vector<void*> const& slots,
                    unsigned char const* stream, combine_op op) {
  cov.multi_level += b.launches.size() > 1;
  for (auto const& l : b.launches) {
    std::vector<std::set<std::pair<int, index_t>>> per_region(b.regions.size());
    each_block(b, l, [&](region_desc const& d, index_t block) {
      auto* buf = static_cast<unsigned char*>(slots[static_cast<std::size_t>(d.slot)]);
      int const w = effective_word(d, pow2_divisor(addr(buf)));
      if (d.kind == static_cast<std::uint8_t>(region_kind::fill)) {
        ++cov.fills;
        ASSERT_GE(w, d.elem_size); // what lets the kernel store the repeated pattern as is
        with_word(w, [&](auto wt) {
          constexpr int W = decltype(wt)::value;
          for (int tid = 0; tid < block_threads; ++tid)
            for_each_word<W>(d, block, tid, block_threads, [&](index_t bo, index_t) {
              ASSERT_EQ(addr(buf + bo) % W, 0u);
              std::memcpy(buf + bo, d.fill, W);
            });
        });
      } else if (op == combine_op::replace) {
        with_word(w, [&](auto wt) {
          constexpr int W = decltype(wt)::value;
          for (int tid = 0; tid < block_threads; ++tid)
            for_each_word<W>(d, block, tid, block_threads, [&](index_t bo, index_t so) {
              ASSERT_EQ(addr(buf + bo) % W, 0u);
              ASSERT_EQ(addr(stream + so) % W, 0u);
              std::memcpy(buf + bo, stream + so, W);
            });
        });
      } else {
        combine_region(d, block, buf, stream, op);
      }
      // The bytes this block wrote, for the race check below.
      auto& mine = per_region[static_cast<std::size_t>(&d - b.regions.data())];
      for (int tid = 0; tid < block_threads; ++tid)
        for_each_word<1>(d, block, tid, block_threads, [&](index_t bo, index_t) {
          mine.insert({d.slot, bo});
        });
    });
    // Race freedom: the regions of one launch write disjoint bytes.
    std::set<std::pair<int, index_t>> touched;
    for (auto const& r : per_region)
      for (auto const& x : r) ASSERT_TRUE(touched.insert(x).second) << "two regions of one launch";
  }
}

// ---- random schedules ---------------------------------------------------------------------

struct case_t {
  schedule s;
  std::vector<distribution> dists;
};

distribution random_distribution(std::mt19937& rng, dtype t) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int const nd = pick(1, 4);
  std::vector<index_t> shape(static_cast<std::size_t>(nd));
  std::vector<int> parts(static_cast<std::size_t>(nd));
  std::vector<dim_options> opts(static_cast<std::size_t>(nd));
  for (std::size_t d = 0; d < shape.size(); ++d) {
    shape[d] = pick(1, nd <= 2 ? 14 : 6);
    parts[d] = pick(1, 3);
    opts[d].periodic = pick(0, 1) == 0;
    int const maxw = opts[d].periodic ? static_cast<int>(shape[d]) + 2 : static_cast<int>(shape[d]);
    opts[d].halo_lo = std::min(pick(0, 3), maxw);
    opts[d].halo_hi = std::min(pick(0, 3), maxw);
  }
  return distribution(shape, t, parts, opts);
}

// Fewer, larger blocks: regions of many chunks.
distribution large_distribution(std::mt19937& rng, dtype t) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  if (pick(0, 1) == 0)
    return distribution({pick(60, 200), pick(60, 200)}, t, {pick(1, 2), pick(1, 2)},
                        {dim_options::halo(pick(1, 4), true), dim_options::halo(pick(1, 4), true)});
  return distribution({pick(20, 40), pick(20, 40), pick(20, 40)}, t, {pick(1, 2), 1, pick(1, 2)},
                      {dim_options::halo(pick(1, 2), true), dim_options::halo(pick(0, 2), true),
                       dim_options::halo(pick(1, 2), pick(0, 1) == 0)});
}

// Strides of `rank`'s allocation: a random dimension order and random padding.
std::vector<index_t> random_strides(std::mt19937& rng, distribution const& dist, int rank) {
  auto const ext = dist.local_shape(rank);
  std::vector<int> order(ext.size());
  std::iota(order.begin(), order.end(), 0);
  if (rng() % 2) std::shuffle(order.begin(), order.end(), rng);
  std::vector<index_t> st(ext.size());
  index_t s = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    st[static_cast<std::size_t>(*it)] = s;
    s *= ext[static_cast<std::size_t>(*it)] + static_cast<index_t>(rng() % 3);
  }
  return st;
}

constexpr dtype all_types[] = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16,
                               dtype::int32,   dtype::int64,   dtype::uint8};

// One rank's schedule of one to three tensors (merged, mixed dtypes: odd stream alignments).
schedule random_schedule(std::mt19937& rng, bool fill) {
  schedule s;
  int const ntensors = 1 + static_cast<int>(rng() % 3);
  for (int t = 0; t < ntensors; ++t) {
    distribution const d = rng() % 8 == 0 ? large_distribution(rng, all_types[rng() % 7])
                                          : random_distribution(rng, all_types[rng() % 7]);
    int const rank = static_cast<int>(rng() % static_cast<unsigned>(d.nranks()));
    auto const st = rng() % 2 ? random_strides(rng, d, rank) : std::vector<index_t>{};
    s.merge(plan_halo(d, rank, st, fill));
  }
  return s;
}

std::vector<host_buffer> make_slots(std::mt19937& rng, schedule const& s) {
  std::vector<host_buffer> out;
  for (auto const& sl : s.slots) {
    std::size_t const e = sl.elem_size;
    std::size_t const misalign = e * (rng() % (16 / e)); // base divisible by e, not always by 16
    out.emplace_back(static_cast<std::size_t>(sl.elements) * e, misalign);
  }
  return out;
}

void randomize(std::mt19937& rng, unsigned char* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(rng());
}

std::vector<void*> pointers(std::vector<host_buffer>& b) {
  std::vector<void*> p;
  for (auto& x : b) p.push_back(x.p);
  return p;
}

void force_wide(desc_batch& b) {
  for (auto& d : b.regions) d.narrow = 0;
}

// Pack: emulated kernels vs exec/cpu/pack.cpp, the whole stream byte for byte.
void check_pack(std::mt19937& rng, schedule const& s, bool wide) {
  stream_layout const l = make_stream_layout(s);
  desc_batch b = make_pack_batch(s, l, true);
  if (wide) force_wide(b);
  auto slots = make_slots(rng, s);
  for (std::size_t i = 0; i < slots.size(); ++i)
    randomize(rng, slots[i].p,
              static_cast<std::size_t>(s.slots[i].elements) * s.slots[i].elem_size);
  auto ptr = pointers(slots);
  auto const n = static_cast<std::size_t>(l.total);
  host_buffer ref(n, 0), got(n, 0);
  std::memset(ref.p, 0xab, n);
  std::memset(got.p, 0xab, n);
  std::vector<void const*> cptr(ptr.begin(), ptr.end());
  for (std::size_t i = 0; i < s.sends.size(); ++i)
    pack_message(s, s.sends[i], cptr.data(),
                 reinterpret_cast<std::byte*>(ref.p + l.send_offset[i]));
  for (std::size_t i = 0; i < s.copies.size(); ++i)
    pack_region(s, s.copies[i].src, cptr.data(),
                reinterpret_cast<std::byte*>(ref.p + l.copy_offset[i]));
  std::vector<int> writes(n, 0);
  emulate_pack(b, ptr, got.p, writes);
  ASSERT_EQ(0, std::memcmp(ref.p, got.p, n)) << s.str();
  // Exactly the message and copy bytes are written, once each.
  std::vector<int> expect(n, 0);
  for (std::size_t i = 0; i < s.sends.size(); ++i)
    std::fill_n(expect.begin() + l.send_offset[i], s.sends[i].bytes, 1);
  for (std::size_t i = 0; i < s.copies.size(); ++i)
    std::fill_n(expect.begin() + l.copy_offset[i], region_bytes(s, s.copies[i].src), 1);
  ASSERT_EQ(writes, expect) << s.str();
}

// Unpack: emulated kernels vs exec/cpu/pack.cpp, every buffer byte for byte.
void check_unpack(std::mt19937& rng, schedule const& s, combine_op op, bool wide) {
  stream_layout const l = make_stream_layout(s);
  double const fill_value = -2.5;
  desc_batch b = make_unpack_batch(s, l, true, true, fill_value);
  if (wide) force_wide(b);
  auto const n = static_cast<std::size_t>(l.total);
  host_buffer stream(n, 0);
  randomize(rng, stream.p, n);
  auto ref = make_slots(rng, s);
  auto got = make_slots(rng, s);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    std::size_t const bytes = static_cast<std::size_t>(s.slots[i].elements) * s.slots[i].elem_size;
    randomize(rng, ref[i].p, bytes);
    std::memcpy(got[i].p, ref[i].p, bytes);
  }
  auto rp = pointers(ref);
  auto gp = pointers(got);
  // The CPU reference applies the same regions in the batch's order (schedule order within
  // each conflict level): the order of contributions to one cell is what the levels fix.
  struct item {
    region const* r;
    index_t at; // stream offset; -1 for a fill
  };
  std::vector<item> items;
  for (std::size_t i = 0; i < s.recvs.size(); ++i) {
    index_t at = l.recv_offset[i];
    for (auto const& r : s.recvs[i].regions) {
      auto const n = static_cast<index_t>(region_bytes(s, r));
      if (n > 0) items.push_back({&r, at});
      at += n;
    }
  }
  for (std::size_t i = 0; i < s.copies.size(); ++i)
    if (region_bytes(s, s.copies[i].dst) > 0) items.push_back({&s.copies[i].dst, l.copy_offset[i]});
  for (auto const& f : s.fills)
    if (region_bytes(s, f) > 0) items.push_back({&f, -1});
  ASSERT_EQ(items.size(), b.source.size());
  for (int k : b.source) {
    item const& it = items[static_cast<std::size_t>(k)];
    if (it.at >= 0) {
      unpack_region(s, *it.r, rp.data(), reinterpret_cast<std::byte const*>(stream.p + it.at), op);
    } else {
      schedule one;
      one.slots = s.slots;
      one.fills = {*it.r};
      run_fills(one, rp.data(), fill_value);
    }
  }
  emulate_unpack(b, gp, stream.p, op);
  for (std::size_t i = 0; i < ref.size(); ++i) {
    std::size_t const bytes = static_cast<std::size_t>(s.slots[i].elements) * s.slots[i].elem_size;
    ASSERT_EQ(0, std::memcmp(ref[i].p, got[i].p, bytes)) << "slot " << i << "\n" << s.str();
  }
}

} // namespace

TEST(PackDescriptors, WordWidthFollowsAlignment) {
  // 8 floats per row, halo 0: a 4x8 float32 box with row stride 8 is one 128-byte run.
  schedule s;
  s.slots.push_back({{8, 1}, 64, dtype::float32, 4});
  region r;
  r.b.nd = 2;
  r.b.lo[0] = 2;
  r.b.hi[0] = 6;
  r.b.hi[1] = 8;
  region_desc d = batch_detail::describe(s, r, 32, region_kind::copy, 0.0);
  EXPECT_EQ(d.sr.nloops, 0);
  EXPECT_EQ(d.run_bytes, 128);
  EXPECT_EQ(d.word, 16);
  // Columns 1..3 of each row: 12-byte runs at a 4-byte offset, stride 32 bytes.
  r.b.lo[1] = 1;
  r.b.hi[1] = 4;
  d = batch_detail::describe(s, r, 32, region_kind::copy, 0.0);
  EXPECT_EQ(d.word, 4);
  // A stream position of 2 bytes limits any region to 2-byte words.
  d = batch_detail::describe(s, r, 34, region_kind::copy, 0.0);
  EXPECT_EQ(d.word, 2);
  EXPECT_EQ(effective_word(d, 16), 2);
  // A base pointer divisible only by 4 caps a 16-byte word at 4.
  r.b.lo[1] = 0;
  r.b.hi[1] = 8;
  d = batch_detail::describe(s, r, 0, region_kind::copy, 0.0);
  EXPECT_EQ(effective_word(d, 4), 4);
}

TEST(PackDescriptors, BlocksFindTheirRegion) {
  std::vector<region_desc> regs(4);
  index_t const bytes[] = {1, chunk_bytes * 3, chunk_bytes, chunk_bytes + 5};
  std::vector<int> level(4, 0);
  for (int i = 0; i < 4; ++i) regs[static_cast<std::size_t>(i)].bytes = bytes[i];
  desc_batch const b = batch_detail::finish(regs, level);
  ASSERT_EQ(b.launches.size(), 1u);
  EXPECT_EQ(b.launches[0].block_hi, 1 + 3 + 1 + 2);
  int const expect[] = {0, 1, 1, 1, 2, 3, 3};
  for (index_t blk = 0; blk < 7; ++blk)
    EXPECT_EQ(find_region(b.regions.data(), 0, 4, blk), expect[blk]) << "block " << blk;
}

TEST(PackDescriptors, ReverseCornersAreSerialised) {
  // 2-D periodic on one rank with halo 1: the reverse exchange combines 8 halo boxes into the
  // owned cells, the corner cells from three of them.
  distribution d({6, 6}, dtype::float32, {1, 1},
                 {dim_options::halo(1, true), dim_options::halo(1, true)});
  schedule const s = plan_halo(d, 0, {}, false).reversed();
  stream_layout const l = make_stream_layout(s);
  desc_batch const b = make_unpack_batch(s, l, true, true, 0.0);
  EXPECT_EQ(b.launches.size(), 3u); // a corner cell takes 3 contributions: 3 levels suffice
  // 3-D: a corner cell takes 7 contributions (3 faces, 3 edges, 1 corner).
  distribution d3(
      {6, 6, 6}, dtype::float32, {1, 1, 1},
      {dim_options::halo(1, true), dim_options::halo(1, true), dim_options::halo(1, true)});
  schedule const s3 = plan_halo(d3, 0, {}, false).reversed();
  desc_batch const b3 = make_unpack_batch(s3, make_stream_layout(s3), true, true, 0.0);
  EXPECT_GE(b3.launches.size(), 7u);
  EXPECT_LE(b3.launches.size(), 8u);
  schedule const fwd = plan_halo(d, 0, {}, true);
  desc_batch const f = make_unpack_batch(fwd, make_stream_layout(fwd), true, true, 0.0);
  EXPECT_EQ(f.launches.size(), 1u);
}

TEST(PackDescriptors, RandomSchedulesMatchCpuPack) {
  cov = {};
  std::mt19937 rng(20240611);
  for (int iter = 0; iter < 400; ++iter) {
    schedule const fwd = random_schedule(rng, iter % 2 == 0);
    bool const wide = iter % 3 == 0;
    check_pack(rng, fwd, wide);
    check_unpack(rng, fwd, combine_op::replace, wide);
    if (HasFatalFailure()) return;
  }
  // What the random schedules reached, so the test cannot pass by missing a code path.
  EXPECT_EQ(cov.words, (std::set<int>{1, 2, 4, 8, 16}));
  EXPECT_GT(cov.multi_chunk, 0);
  EXPECT_GT(cov.deep, 0);
  EXPECT_GT(cov.fills, 0);
}

TEST(PackDescriptors, RandomReverseSchedulesMatchCpuCombine) {
  cov = {};
  std::mt19937 rng(777);
  combine_op const ops[] = {combine_op::sum, combine_op::max, combine_op::min};
  for (int iter = 0; iter < 400; ++iter) {
    schedule const rev = random_schedule(rng, false).reversed();
    bool const wide = iter % 3 == 0;
    check_pack(rng, rev, wide);
    check_unpack(rng, rev, ops[iter % 3], wide);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(cov.multi_level, 0);
  EXPECT_GT(cov.multi_chunk, 0);
}

// The check macros of the GPU layer (CUDA builds; no device needed).
#if HALOX_HAS_CUDA
TEST(CudaCheck, ThrowsNamingTheCallAndEvaluatesItOnce) {
  int calls = 0;
  auto failing = [&] {
    ++calls;
    return cudaErrorInvalidValue;
  };
  try {
    HALOX_CUDA_CHECK(failing());
    FAIL() << "no exception";
  } catch (error const& e) {
    EXPECT_EQ(e.code(), errc::cuda_error);
    EXPECT_NE(e.call().find("failing()"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidValue"), std::string::npos) << e.what();
  }
  EXPECT_EQ(calls, 1);
  HALOX_CUDA_CHECK(cudaSuccess);
}

#if HALOX_HAS_NCCL
TEST(NcclCheck, ThrowsNamingTheCall) {
  try {
    HALOX_NCCL_CHECK(ncclInvalidArgument);
    FAIL() << "no exception";
  } catch (error const& e) {
    EXPECT_EQ(e.code(), errc::nccl_error);
    EXPECT_NE(e.call().find("ncclInvalidArgument"), std::string::npos) << e.what();
  }
}
#endif
#endif
