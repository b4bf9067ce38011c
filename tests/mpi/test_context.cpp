// Contexts, caller workspaces and allocators, plan lifetime: through the public API at every
// rank count. A 2-D periodic tensor whose cells hold their global index is the oracle: after a
// forward exchange every halo cell must hold the index of the cell it mirrors.
#include "support/alloc_counter.hpp"
#include "support/mpi_helpers.hpp"
#include "tune/plan_cache.hpp"

#include <halox/halox.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <new>
#include <string>
#include <vector>

// Counts every C++ allocation of the process, so a test can prove that executing a plan
// allocates nothing. (MPI is a C library: its own mallocs are not counted, nor are they halox's.)
namespace {
std::atomic<long> g_news{0};
}
long halox::test::allocations_so_far() { return g_news.load(); }

void* operator new(std::size_t n) {
  ++g_news;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::nothrow_t const&) noexcept {
  ++g_news;
  return std::malloc(n ? n : 1);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too: under AddressSanitizer the ones not defined here come from its runtime,
// which would see our free() of its operator new as a mismatch.
void operator delete(void* p, std::nothrow_t const&) noexcept { std::free(p); }
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new[](std::size_t n, std::nothrow_t const& t) noexcept { return operator new(n, t); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::nothrow_t const&) noexcept { std::free(p); }

namespace {

using namespace halox;
using halox::test::expect_error_everywhere;
using halox::test::world_rank;
using halox::test::world_size;

constexpr index_t rows = 9, cols = 7;

using halox::test::allocations_during;

std::vector<int> near_square(int p) {
  int a = 1;
  for (int k = 1; k * k <= p; ++k)
    if (p % k == 0) a = k;
  return {a, p / a};
}

tensor_desc make_tensor(MPI_Comm comm) {
  process_grid g(comm, near_square(world_size()));
  return tensor_desc(g, {rows, cols}, dtype::float64,
                     {dim_options::halo(1, true), dim_options::halo(2, true)});
}

double global_value(index_t i, index_t j) {
  i = (i % rows + rows) % rows;
  j = (j % cols + cols) % cols;
  return static_cast<double>(i * cols + j);
}

// Owned cells hold their global index; halos hold -1.
void fill(tensor_desc const& t, std::vector<double>& buf) {
  buf.assign(t.local_elements(), -1.0);
  auto const o = t.owned_box();
  for (index_t i = o.lo[0]; i < o.hi[0]; ++i)
    for (index_t j = o.lo[1]; j < o.hi[1]; ++j) buf[t.local_offset({i, j})] = global_value(i, j);
}

// Number of cells (owned and halo) that differ from the oracle.
int wrong_cells(tensor_desc const& t, std::vector<double> const& buf) {
  auto const o = t.owned_box();
  int wrong = 0;
  for (index_t i = o.lo[0] - 1; i < o.hi[0] + 1; ++i)
    for (index_t j = o.lo[1] - 2; j < o.hi[1] + 2; ++j)
      if (!o.empty() && buf[t.local_offset({i, j})] != global_value(i, j)) ++wrong;
  return wrong;
}

TEST(Context, DefaultContextIsSharedByThePlansOfAGrid) {
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  halo_plan a(t), b(t);
  EXPECT_TRUE(a.get_context() == b.get_context());
  EXPECT_TRUE(a.get_context() == context::of(t.grid().comm()));
  EXPECT_GE(a.get_context().plans_built(), 2u);
  EXPECT_NE(a.describe().find("message tag"), std::string::npos);
  // Every plan of the grid messages on one private communicator, not one each.
  int cmp = MPI_UNEQUAL;
  MPI_Comm_compare(a.get_context().comm(), t.grid().comm(), &cmp);
  EXPECT_EQ(cmp, MPI_CONGRUENT);
}

TEST(Context, ExplicitContextServesGridsOfTheSameProcesses) {
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  tensor_desc const u(process_grid(MPI_COMM_WORLD, {world_size(), 1}), {rows, cols}, dtype::float64,
                      {dim_options::halo(1, true), dim_options::halo(2, true)});
  for (backend b : host_backends()) {
    halo_options o;
    o.method = b;
    halo_plan p(ctx, t, o), q(ctx, u, o);
    EXPECT_TRUE(p.get_context() == ctx);
    std::vector<double> x, y;
    fill(t, x);
    fill(u, y);
    p.execute(tensor_view(t, x));
    q.execute(tensor_view(u, y));
    EXPECT_EQ(wrong_cells(t, x), 0) << to_string(b);
    EXPECT_EQ(wrong_cells(u, y), 0) << to_string(b);
  }
  EXPECT_GE(ctx.plans_built(), 2 * host_backends().size());
}

TEST(Context, PlansOfOneContextInFlightTogetherDoNotMixMessages) {
  context ctx(MPI_COMM_WORLD);
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  for (backend b : {backend::mpi_pack, backend::mpi_datatype, backend::mpi_persistent}) {
    halo_options o;
    o.method = b;
    halo_plan p(ctx, t, o), q(ctx, t, o);
    std::vector<double> x, y;
    fill(t, x);
    fill(t, y);
    for (double& v : y) v = v < 0 ? v : v + 1000.0;
    p.start(tensor_view(t, x));
    q.start(tensor_view(t, y));
    q.wait();
    p.wait();
    EXPECT_EQ(wrong_cells(t, x), 0) << to_string(b);
    for (double& v : y) v -= 1000.0;
    EXPECT_EQ(wrong_cells(t, y), 0) << to_string(b) << ": the second plan got the first's data";
  }
}

TEST(Context, ContextOfOtherProcessesIsRejectedEverywhere) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() % 2, world_rank(), &half);
  {
    context ctx(half);
    tensor_desc const t = make_tensor(MPI_COMM_WORLD);
    expect_error_everywhere([&] { halo_plan p(ctx, t); }, errc::invalid_argument,
                            "another group of processes");
  }
  MPI_Comm_free(&half);
}

TEST(Context, PrivateCommunicatorReturnsMpiErrors) {
  context ctx(MPI_COMM_WORLD);
  int value = 0;
  // A destination rank that does not exist: with MPI_ERRORS_RETURN this is an error code, not
  // an abort of the job, so halox can turn it into a halox::error.
  int const rc = MPI_Send(&value, 1, MPI_INT, ctx.size() + 5, 0, ctx.comm());
  EXPECT_NE(rc, MPI_SUCCESS);
}

struct counting_allocator {
  std::map<void*, std::size_t> live;
  long allocations = 0, releases = 0;
  allocator hooks() {
    allocator a;
    a.allocate = [this](std::size_t n, memory_kind k) -> void* {
      EXPECT_EQ(k, memory_kind::host);
      void* p = std::aligned_alloc(64, (n + 63) / 64 * 64);
      live[p] = n;
      ++allocations;
      return p;
    };
    a.deallocate = [this](void* p, std::size_t n, memory_kind) {
      EXPECT_EQ(live[p], n);
      live.erase(p);
      ++releases;
      std::free(p);
    };
    return a;
  }
};

TEST(Context, CallerAllocatorOwnsAllPlanMemory) {
  counting_allocator counter;
  {
    context_options co;
    co.alloc = counter.hooks();
    context ctx(MPI_COMM_WORLD, co);
    tensor_desc const t = make_tensor(MPI_COMM_WORLD);
    {
      halo_options o; // automatic: the tuning trials' scratch comes from the allocator too
      halo_plan p(ctx, t, o);
      std::vector<double> x;
      fill(t, x);
      p.execute(tensor_view(t, x));
      EXPECT_EQ(wrong_cells(t, x), 0);
      std::size_t held = 0;
      for (auto const& [ptr, n] : counter.live) held += n;
      EXPECT_EQ(ctx.bytes_in_use(memory_kind::host), held);
      EXPECT_GE(held, p.workspace_bytes().host);
    }
    EXPECT_EQ(ctx.bytes_in_use(memory_kind::host), 0u);
  }
  EXPECT_TRUE(counter.live.empty());
  EXPECT_EQ(counter.allocations, counter.releases);
  if (world_size() > 1) EXPECT_GT(counter.allocations, 0);
}

TEST(Context, OnlyOneAllocatorHookIsRejected) {
  context_options co;
  co.alloc.allocate = [](std::size_t, memory_kind) -> void* { return nullptr; };
  expect_error_everywhere([&] { context ctx(MPI_COMM_WORLD, co); }, errc::invalid_argument,
                          "only one of allocate/deallocate");
}

TEST(Workspace, CallerWorkspaceAtANewAddressEveryStep) {
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  for (backend b : host_backends()) {
    halo_options o;
    o.method = b;
    o.external_workspace = true;
    halo_plan p(t, o);
    std::vector<double> x;
    fill(t, x);
    auto const need = p.workspace_bytes();
    EXPECT_EQ(need.pinned_host, 0u);
    EXPECT_EQ(need.device, 0u);
    for (int step = 0; step < 3; ++step) {
      // A fresh allocation each step, as a framework's caching allocator may hand out.
      std::vector<std::byte> area(need.host + 64 * (step + 1));
      auto* base = reinterpret_cast<std::byte*>(
          (reinterpret_cast<std::uintptr_t>(area.data()) + 63) / 64 * 64);
      workspace w;
      w.host = base;
      w.host_bytes = need.host;
      p.set_workspace(w);
      std::vector<double> fresh = x; // and a buffer at a new address too
      p.execute(tensor_view(t, fresh));
      EXPECT_EQ(wrong_cells(t, fresh), 0) << to_string(b) << " step " << step;
      // The reverse exchange (sum) uses the same workspace.
      p.execute_reverse(tensor_view(t, fresh));
    }
  }
}

TEST(Workspace, ExecutingWithoutOneIsAnErrorOnEveryRank) {
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  halo_options o;
  o.method = backend::mpi_pack;
  o.external_workspace = true;
  halo_plan p(t, o);
  std::vector<double> x;
  fill(t, x);
  expect_error_everywhere([&] { p.execute(tensor_view(t, x)); }, errc::invalid_state,
                          "no workspace");
  if (p.workspace_bytes().host > 0) {
    workspace w;
    std::vector<std::byte> small(64);
    w.host = small.data();
    w.host_bytes = 1;
    expect_error_everywhere([&] { p.set_workspace(w); }, errc::invalid_argument,
                            "workspace_bytes()");
  }
}

TEST(Workspace, RedistributionWithHaloAfterInOneCallerWorkspace) {
  int const p = world_size();
  process_grid rows_grid(MPI_COMM_WORLD, {p, 1}), cols_grid(MPI_COMM_WORLD, {1, p});
  tensor_desc const src(rows_grid, {rows, cols}, dtype::float64);
  tensor_desc const dst(cols_grid, {rows, cols}, dtype::float64,
                        {dim_options::halo(1, true), dim_options::halo(2, true)});
  redistribute_options o;
  o.external_workspace = true;
  o.halo_after = true;
  o.method = backend::mpi_pack;
  redistribute_plan plan(src, dst, o);
  auto const need = plan.workspace_bytes();
  std::vector<std::byte> area(need.host + 64);
  workspace w;
  w.host =
      reinterpret_cast<std::byte*>((reinterpret_cast<std::uintptr_t>(area.data()) + 63) / 64 * 64);
  w.host_bytes = need.host;
  plan.set_workspace(w);
  std::vector<double> a, b(dst.local_elements(), -1.0);
  fill(src, a);
  plan.execute(tensor_view(src, a), tensor_view(dst, b));
  EXPECT_EQ(wrong_cells(dst, b), 0);
}

TEST(Workspace, ExecutionAllocatesNothing) {
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  int const p = world_size();
  process_grid cols_grid(MPI_COMM_WORLD, {1, p});
  tensor_desc const u(cols_grid, {rows, cols}, dtype::float64);
  for (backend b : host_backends()) {
    halo_options o;
    o.method = b;
    long const at_start = g_news.load();
    halo_plan h(t, o);
    EXPECT_GT(g_news.load(), at_start) << "the allocation counter is not in effect";
    redistribute_options ro;
    ro.method = b;
    redistribute_plan r(t, u, ro);
    std::vector<double> x, y(u.local_elements());
    fill(t, x);
    std::vector<tensor_view> both{tensor_view(t, x)};
    tensor_view const vx(t, x), vy(u, y);
    // First executions may set up lazily inside MPI; halox does not.
    h.execute(vx);
    h.execute_reverse(vx, reduce_op::max);
    r.execute(vx, vy);
    r.execute_inverse(vy, vx);
    auto count = [&](char const* what, auto&& run) {
      long const during = allocations_during([&] {
        for (int k = 0; k < 5; ++k) run();
      });
      EXPECT_EQ(during, 0) << to_string(b) << " " << what << " allocated " << during
                           << " times in 5 executions";
    };
    count("halo execute", [&] { h.execute(vx); });
    count("halo start/wait of a list", [&] {
      h.start(both);
      h.wait();
    });
    count("halo execute_reverse", [&] { h.execute_reverse(vx, reduce_op::max); });
    count("redistribute execute", [&] { r.execute(vx, vy); });
    count("redistribute execute_inverse", [&] { r.execute_inverse(vy, vx); });
    EXPECT_EQ(wrong_cells(t, x), 0) << to_string(b);
  }
}

// The online re-check of an automatic plan times, alternates and decides (one all-reduce) on
// the execution path: none of it may allocate either.
TEST(Workspace, AutomaticRecheckAllocatesNothing) {
  if (world_size() < 2) GTEST_SKIP() << "an automatic plan needs messages to measure";
  char const* old = std::getenv("HALOX_TUNE_RECHECK");
  std::string const saved = old ? old : "";
  for (char const* mode : {"always", "switch"}) {
    setenv("HALOX_TUNE_RECHECK", mode, 1);
    clear_plan_cache();
    tensor_desc const t = make_tensor(MPI_COMM_WORLD);
    halo_options o;
    o.tune.trials = 3;
    halo_plan h(t, o);
    ASSERT_NE(h.describe().find("re-check against"), std::string::npos) << h.describe();
    std::vector<double> x;
    fill(t, x);
    tensor_view const vx(t, x);
    // As in ExecutionAllocatesNothing, each executor's first run on these buffers is not
    // counted (alltoallw builds its absolute-address types for a new buffer address then): the
    // re-check's first pair runs the choice and the runner-up once each.
    h.execute(vx);
    h.execute(vx);
    h.execute_reverse(vx, reduce_op::max);
    long const during = allocations_during([&] {
      for (int k = 0; k < 12; ++k) {
        h.execute(vx);
        if (k == 3) h.execute_reverse(vx, reduce_op::max); // before the decision: same choice
      }
    });
    EXPECT_EQ(during, 0) << mode << ": the re-check allocated " << during << " times";
    std::string const d = h.describe();
    bool const switched = d.find("re-check switched") != std::string::npos;
    bool const confirmed = d.find("re-check confirmed") != std::string::npos;
    EXPECT_TRUE(std::string(mode) == "switch" ? switched : switched || confirmed) << d;
    EXPECT_EQ(wrong_cells(t, x), 0) << mode;
  }
  if (old)
    setenv("HALOX_TUNE_RECHECK", saved.c_str(), 1);
  else
    unsetenv("HALOX_TUNE_RECHECK");
  clear_plan_cache();
}

TEST(Workspace, WatchAndTheReCheckItStartsAllocateNothing) {
  if (world_size() < 2) GTEST_SKIP() << "an automatic plan needs messages to measure";
  clear_plan_cache();
  // mpi_persistent wins the race clearly (10 ms against mpi_pack's 50: no first re-check, the
  // watch on); from forward execution 8 on it takes 200 ms, so the check after 16 executions
  // starts a re-check, which switches to mpi_pack 10 executions later.
  struct reset_hooks {
    ~reset_hooks() { detail::test_hooks() = {}; }
  } const reset;
  auto& hooks = detail::test_hooks();
  hooks.skew = [](backend b, int) {
    return b == backend::mpi_persistent ? 0.01 : b == backend::mpi_pack ? 0.05 : 1.0;
  };
  hooks.exec_skew = [](backend b, long long n) {
    if (b == backend::mpi_persistent) return n < 8 ? 0.01 : 0.2;
    return b == backend::mpi_pack ? 0.05 : 1.0;
  };
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  halo_options o;
  o.tune.trials = 3;
  halo_plan h(t, o);
  ASSERT_NE(h.describe().find("watching against mpi_pack"), std::string::npos) << h.describe();
  std::vector<double> x;
  fill(t, x);
  tensor_view const vx(t, x);
  h.execute(vx);
  h.execute_reverse(vx, reduce_op::max);
  long const during = allocations_during([&] {
    for (int k = 0; k < 40; ++k) h.execute(vx);
  });
  EXPECT_EQ(during, 0) << "the watch and its re-check allocated " << during << " times";
  std::string const d = h.describe();
  EXPECT_NE(d.find("re-check switched from mpi_persistent to mpi_pack (the watch saw"),
            std::string::npos)
      << d;
  EXPECT_EQ(wrong_cells(t, x), 0);
  clear_plan_cache();
}

TEST(Lifetime, DestroyingAPlanInFlightCompletesItsMessages) {
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  for (backend b : host_backends()) {
    halo_options o;
    o.method = b;
    std::vector<double> x;
    fill(t, x);
    {
      halo_plan p(t, o);
      p.start(tensor_view(t, x));
      // p goes out of scope without wait() on every rank, as when an exception unwinds.
    }
    // Whatever was exchanged is complete: the next plan of the same context starts clean.
    halo_plan q(t, o);
    fill(t, x);
    q.execute(tensor_view(t, x));
    EXPECT_EQ(wrong_cells(t, x), 0) << to_string(b);
  }
}

TEST(Lifetime, ExceptionBetweenStartAndWaitUnwindsCleanly) {
  tensor_desc const t = make_tensor(MPI_COMM_WORLD);
  std::vector<double> x;
  fill(t, x);
  halo_options o;
  o.method = backend::mpi_pack;
  bool caught = false;
  try {
    halo_plan p(t, o);
    p.start(tensor_view(t, x));
    throw std::runtime_error("user code failed between start and wait");
  } catch (std::runtime_error const&) {
    caught = true;
  }
  EXPECT_TRUE(caught);
  MPI_Barrier(MPI_COMM_WORLD);
  halo_plan q(t, o);
  fill(t, x);
  q.execute(tensor_view(t, x));
  EXPECT_EQ(wrong_cells(t, x), 0);
}

} // namespace
