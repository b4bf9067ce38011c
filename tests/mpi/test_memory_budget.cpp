// ops::memory_budget: which reorders it keeps under a limit (largest first, the choice applied
// to the operators), that it switches them back on when room returns, that a budget nothing
// fits fails on every rank with the rank, the bytes and the fixes (and changes nothing), and
// that on a real convolution the dropped reorder is freed and backward's results are unchanged.
#include <halox/error.hpp>
#include <halox/ops/distributed.hpp>

#include "support/dist_ops_helpers.hpp"
#include "support/mpi_helpers.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace {

namespace ops = halox::ops;
using halox::errc;
using halox::process_grid;
using halox::tensor_desc;
using halox::tensor_view;
using halox::test::random_tensor;
using halox::test::scatter;
using halox::test::shape_t;

constexpr std::size_t MiB = std::size_t(1) << 20;

// Something that reports a memory_use and keeps reorders when told to, as dist_conv does.
struct fake_operator {
  std::size_t held = 0, keepable = 0;
  bool keeping = true;
  int switches = 0;
  [[nodiscard]] ops::memory_use memory() const {
    ops::memory_use m;
    m.keepable_reorders = keepable;
    m.kept_reorders = keeping ? keepable : 0;
    m.held_host = held + m.kept_reorders;
    m.call_host = MiB;
    return m;
  }
  void keep_reorders(bool k) {
    keeping = k;
    ++switches;
  }
};

// Something without reorders to drop (as dist_pool).
struct fixed_operator {
  std::size_t held = 0;
  [[nodiscard]] ops::memory_use memory() const {
    ops::memory_use m;
    m.held_host = held;
    return m;
  }
};

TEST(MemoryBudget, KeepsTheLargestReordersThatFitAndDropsTheRest) {
  ops::release_shared_scratch(); // the other suites' scratch would count too
  fake_operator a{4 * MiB, 30 * MiB}, b{4 * MiB, 20 * MiB}, c{4 * MiB, 10 * MiB};
  fixed_operator pool{6 * MiB};
  // Without reorders: 3 x (4 + 1) + 6 = 21 MiB, plus the caller's 9: 30. Room for 42 more:
  // a's 30 fits, b's 20 then does not, c's 10 does.
  ops::memory_budget budget(72 * MiB, MPI_COMM_WORLD);
  budget.add("a", a);
  budget.add("b", b);
  budget.add("c", c);
  budget.add("pool", pool);
  EXPECT_EQ(budget.used(), 21 * MiB + 60 * MiB);
  ops::budget_fit const f = budget.fit(9 * MiB);
  EXPECT_EQ(f.least, 30 * MiB);
  EXPECT_EQ(f.kept_reorders, 40 * MiB);
  EXPECT_EQ(f.dropped_reorders, 20 * MiB);
  EXPECT_EQ(f.need, 70 * MiB);
  EXPECT_EQ(f.dropped, std::vector<std::string>{"b"});
  EXPECT_EQ(f.most_need, 70 * MiB);
  EXPECT_EQ(f.most_rank, 0);
  EXPECT_TRUE(a.keeping);
  EXPECT_FALSE(b.keeping);
  EXPECT_TRUE(c.keeping);
  EXPECT_EQ(budget.used() + 9 * MiB, f.need) << "the fit's need is what the operators now hold";
  EXPECT_NE(f.describe().find("dropped 20.00 MiB (b)"), std::string::npos) << f.describe();
  std::string const table = budget.describe();
  EXPECT_NE(table.find("off (20.00 MiB)"), std::string::npos) << table;
  EXPECT_NE(table.find("shared scratch"), std::string::npos) << table;

  // More room: b keeps its reorder again, nothing is dropped.
  ops::memory_budget roomy(200 * MiB, MPI_COMM_WORLD);
  roomy.add("a", a);
  roomy.add("b", b);
  roomy.add("c", c);
  ops::budget_fit const g = roomy.fit();
  EXPECT_TRUE(b.keeping);
  EXPECT_EQ(g.dropped_reorders, 0u);
  EXPECT_TRUE(g.dropped.empty());
  EXPECT_EQ(g.need, 15 * MiB + 60 * MiB);

  // Only the operators' leanest needs: every reorder dropped, and still within the limit.
  ops::memory_budget tight(30 * MiB, MPI_COMM_WORLD);
  tight.add("a", a);
  tight.add("b", b);
  tight.add("c", c);
  ops::budget_fit const h = tight.fit(15 * MiB);
  EXPECT_EQ(h.need, 30 * MiB);
  EXPECT_EQ(h.dropped, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(a.keeping || b.keeping || c.keeping);
}

// One rank needs more than the limit allows: every rank throws out_of_memory with that rank's
// numbers, and no operator was switched.
TEST(MemoryBudget, NothingFitsFailsOnEveryRankNamingTheRankAndTheBytes) {
  ops::release_shared_scratch();
  int const p = halox::test::world_size(), r = halox::test::world_rank();
  fake_operator conv{8 * MiB, 16 * MiB};
  ops::memory_budget budget(32 * MiB, MPI_COMM_WORLD);
  budget.add("conv1", conv);
  // The last rank's caller holds 30 MiB: with conv's 9 it needs 39 of 32.
  std::size_t const caller = r == p - 1 ? 30 * MiB : MiB;
  std::string const expected = "rank " + std::to_string(p - 1) + " needs at least " +
                               std::to_string(39 * MiB) + " bytes (39.00 MiB) with no reorder kept";
  halox::test::expect_error_everywhere([&] { (void)budget.fit(caller); }, errc::out_of_memory,
                                       expected);
  halox::test::expect_error_everywhere([&] { (void)budget.fit(caller); }, errc::out_of_memory,
                                       "the largest, conv1, 9.00 MiB");
  halox::test::expect_error_everywhere([&] { (void)budget.fit(caller); }, errc::out_of_memory,
                                       "Raise the budget to at least " + std::to_string(39 * MiB));
  EXPECT_EQ(conv.switches, 0);
  EXPECT_TRUE(conv.keeping);
}

TEST(MemoryBudget, BadArgumentsAreRefused) {
  halox::test::expect_error_everywhere([] { ops::memory_budget b(0, MPI_COMM_WORLD); },
                                       errc::invalid_argument, "a budget of 0 bytes fits nothing");
  halox::test::expect_error_everywhere([] { ops::memory_budget b(MiB, MPI_COMM_NULL); },
                                       errc::invalid_argument, "comm is MPI_COMM_NULL");
  ops::memory_budget b(MiB, MPI_COMM_WORLD);
  halox::test::expect_error_everywhere([&] { b.add("x", std::function<ops::memory_use()>{}); },
                                       errc::invalid_argument, "the memory function is empty");
}

// A device budget counts device bytes only: host operators add nothing to it.
TEST(MemoryBudget, DeviceBudgetCountsDeviceBytes) {
  fake_operator a{4 * MiB, 30 * MiB};
  ops::memory_budget budget(8 * MiB, MPI_COMM_WORLD, halox::memory_space::device);
  budget.add("a", a);
  ops::budget_fit const f = budget.fit(3 * MiB);
  EXPECT_EQ(f.need, 3 * MiB + ops::shared_scratch_bytes().device);
  EXPECT_TRUE(a.keeping) << "host reorders are not a device budget's to drop";
  EXPECT_EQ(a.switches, 0);
}

// On a convolution split over space: a budget that leaves no room for its kept reorder frees
// it, the accounting follows, and backward gives the same bits as with the reorder kept.
TEST(MemoryBudget, ConvolutionDropsItsReorderWithTheSameResults) {
  int const p = halox::test::world_size();
  process_grid grid(MPI_COMM_WORLD, {1, 1, p, 1});
  tensor_desc const xd(grid, {2, 16, 8 * static_cast<halox::index_t>(p), 24},
                       halox::dtype::float32);
  shape_t const ws{16, 16, 3, 3};
  ops::conv_params const cp{{}, {1}, {1}, {}};
  ops::dist_conv<float> conv(xd, ws, cp);
  auto const x = random_tensor<float>(xd.shape(), 51), w = random_tensor<float>(ws, 52);
  tensor_desc const& in = conv.input_desc();
  tensor_desc const& out = conv.output_desc();
  auto xl = scatter(in, x);
  std::vector<float> y(static_cast<std::size_t>(out.local_elements()));
  std::vector<float> dy = scatter(out, random_tensor<float>(out.shape(), 53));
  auto step = [&] {
    std::vector<float> dx(xl.size()), dw(w.size()), db(16);
    conv.forward(tensor_view(in, xl), {w.data(), ws}, nullptr, tensor_view(out, y));
    conv.backward(tensor_view(in, xl), tensor_view(out, dy), {w.data(), ws}, tensor_view(in, dx),
                  {dw.data(), ws}, db.data());
    dx.insert(dx.end(), dw.begin(), dw.end());
    return dx;
  };
  std::vector<float> const kept = step();
  ops::memory_use const before = conv.memory();

  ops::memory_budget budget(std::size_t(1) << 40, MPI_COMM_WORLD);
  budget.add("conv", conv);
  ops::budget_fit const ample = budget.fit();
  EXPECT_EQ(ample.kept_reorders, before.keepable_reorders);
  EXPECT_EQ(ample.need, budget.used()) << "a budget with room changes nothing";

  // Exactly this rank's leanest need: no room for the reorder.
  ops::memory_budget tight(ample.least, MPI_COMM_WORLD);
  tight.add("conv", conv);
  ops::budget_fit const f = tight.fit();
  EXPECT_EQ(f.kept_reorders, 0u);
  EXPECT_EQ(f.dropped_reorders, before.keepable_reorders);
  EXPECT_EQ(conv.memory().kept_reorders, 0u);
  EXPECT_EQ(tight.used(), f.need) << "the dropped reorder is freed at once";
  std::vector<float> const dropped = step();
  EXPECT_EQ(dropped, kept) << "backward without the kept reorder gave other bits";
  EXPECT_EQ(conv.memory().kept_reorders, 0u) << "forward kept a reorder after the budget said no";
}

} // namespace
