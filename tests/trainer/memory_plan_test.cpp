// The step's buffer placement (examples/cnn-trainer/memory_plan.hpp), without MPI: buffers share
// bytes exactly where their lifetimes do not meet.
#include "memory_plan.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

namespace {
using trainer::buffer_use;
using trainer::place_buffers;

// Whether two placed buffers overlap in the arena.
bool overlap(trainer::placement const& p, std::vector<std::size_t> const& n, std::size_t a,
             std::size_t b) {
  return p.offset[a] < p.offset[b] + n[b] && p.offset[b] < p.offset[a] + n[a];
}

TEST(MemoryPlan, ChainNeedsTwoBuffers) {
  // x0 -> x1 -> x2 -> x3: each written at t and read at t + 1 only.
  std::vector<std::size_t> n{640, 640, 640, 640};
  std::vector<buffer_use> u;
  for (std::size_t b = 0; b < 4; ++b) {
    u.push_back({b, static_cast<long>(b), true});
    u.push_back({b, static_cast<long>(b) + 1, false});
  }
  auto const p = place_buffers(n, u);
  EXPECT_EQ(p.bytes, 1280u);
  EXPECT_EQ(p.unplanned, 2560u);
  for (std::size_t b = 0; b + 1 < 4; ++b) EXPECT_FALSE(overlap(p, n, b, b + 1));
}

TEST(MemoryPlan, KeptActivationsDoNotShare) {
  // Three activations read again in backward (t = 10 - b) are all live at t = 5.
  std::vector<std::size_t> n{256, 512, 128};
  std::vector<buffer_use> u;
  for (std::size_t b = 0; b < 3; ++b) {
    u.push_back({b, static_cast<long>(b), true});
    u.push_back({b, 10 - static_cast<long>(b), false});
  }
  auto const p = place_buffers(n, u);
  EXPECT_EQ(p.bytes, 896u);
  for (std::size_t a = 0; a < 3; ++a)
    for (std::size_t b = a + 1; b < 3; ++b) EXPECT_FALSE(overlap(p, n, a, b));
}

TEST(MemoryPlan, RewrittenBufferLivesTwice) {
  // Buffer 0 is written at 0, read at 1 (forward), written again at 5 and read at 6 (a
  // recomputed segment); buffer 1 lives from 2 to 4, between the two, and may share its bytes.
  std::vector<std::size_t> n{512, 512};
  std::vector<buffer_use> u{{0, 0, true},  {0, 1, false}, {0, 5, true},
                            {0, 6, false}, {1, 2, true},  {1, 4, false}};
  auto const p = place_buffers(n, u);
  EXPECT_EQ(p.bytes, 512u);
  // Read at 3 as well: the content written at 0 must survive until then.
  u.push_back({0, 3, false});
  auto const q = place_buffers(n, u);
  EXPECT_EQ(q.bytes, 1024u);
  EXPECT_FALSE(overlap(q, n, 0, 1));
}

TEST(MemoryPlan, ReadAndWriteAtOnceIsAnUpdate) {
  // An in-place layer reads and writes at 2: the content from 0 must be there.
  std::vector<std::size_t> n{64, 64};
  std::vector<buffer_use> u{{0, 0, true},  {0, 2, true}, {0, 2, false},
                            {0, 3, false}, {1, 1, true}, {1, 1, false}};
  auto const p = place_buffers(n, u);
  EXPECT_FALSE(overlap(p, n, 0, 1));
}

TEST(MemoryPlan, AlignsEveryBuffer) {
  std::vector<std::size_t> n{100, 10, 1};
  std::vector<buffer_use> u{{0, 0, true}, {1, 0, true}, {2, 0, true}};
  auto const p = place_buffers(n, u, 64);
  for (std::size_t o : p.offset) EXPECT_EQ(o % 64, 0u);
  EXPECT_EQ(p.bytes, 128u + 64u + 64u);
}
} // namespace

namespace {
TEST(MemoryPlan, NeverBelowTheLivePeakAndOftenAtIt) {
  // Buffers of mixed sizes and overlapping lifetimes, as a network's step makes them.
  std::vector<std::size_t> n;
  std::vector<trainer::buffer_use> u;
  for (std::size_t b = 0; b < 40; ++b) {
    n.push_back(64 * (1 + (b * 7) % 11));
    long const t0 = static_cast<long>((b * 5) % 23), t1 = t0 + 1 + static_cast<long>(b % 6);
    u.push_back({b, t0, true});
    u.push_back({b, t1, false});
  }
  auto const p = trainer::place_buffers(n, u);
  EXPECT_GE(p.bytes, p.live_peak);
  EXPECT_LE(p.bytes, p.live_peak + p.live_peak / 4); // the greedy orders come close
  for (std::size_t a = 0; a < n.size(); ++a)
    for (std::size_t b = a + 1; b < n.size(); ++b) {
      long const a0 = u[2 * a].time, a1 = u[2 * a + 1].time, b0 = u[2 * b].time,
                 b1 = u[2 * b + 1].time;
      if (a0 <= b1 && b0 <= a1)
        EXPECT_FALSE(p.offset[a] < p.offset[b] + n[b] && p.offset[b] < p.offset[a] + n[a])
            << "buffers " << a << " and " << b << " are live together and share bytes";
    }
}
} // namespace
