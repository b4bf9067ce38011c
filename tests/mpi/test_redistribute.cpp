// Redistribution over MPI_COMM_WORLD at every rank count the suite runs (1, 2, 3, 4, 6, 8):
// every owned and halo cell is compared with the global tensor after each move.
//
// Every rank reaches the same collectives whatever its checks found: only EXPECT_* around
// collectives, and skips decided from the world size alone.
#include <halox/error.hpp>
#include <halox/redistribute.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include "support/mpi_helpers.hpp"
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace halox;

namespace {

using halox::test::expect_error_everywhere;
using halox::test::world_rank;
using halox::test::world_size;

using shape_t = std::vector<index_t>;
constexpr double sentinel = -7.0;

double value_at(shape_t const& g, shape_t const& shape) {
  double v = 0;
  for (std::size_t d = 0; d < g.size(); ++d) v = v * static_cast<double>(shape[d]) + g[d];
  return v + 1.0;
}

// f(offset, global index, owned) for every allocated cell of the calling rank.
template <class F> void for_each_local(tensor_desc const& t, F&& f) {
  box const a = t.dist().allocated_box(t.grid().rank());
  box const o = t.owned_box();
  if (a.empty()) return;
  shape_t g(a.lo, a.lo + t.ndim());
  while (true) {
    index_t off = 0;
    bool owned = true;
    for (int d = 0; d < t.ndim(); ++d) {
      off += (g[d] - a.lo[d]) * t.strides()[d];
      owned = owned && g[d] >= o.lo[d] && g[d] < o.hi[d];
    }
    f(off, g, owned);
    int d = t.ndim() - 1;
    while (d >= 0 && ++g[d] == a.hi[d]) {
      g[d] = a.lo[d];
      --d;
    }
    if (d < 0) return;
  }
}

// A buffer for `t`: owned cells hold the global values (or the sentinel), halo cells the
// sentinel.
std::vector<double> make_buffer(tensor_desc const& t, bool owned_values) {
  std::vector<double> b(static_cast<std::size_t>(t.local_elements()), sentinel);
  if (owned_values)
    for_each_local(t, [&](index_t off, shape_t const& g, bool owned) {
      if (owned) b[off] = value_at(g, t.shape());
    });
  return b;
}

// Value a halo cell holds after a halo exchange: the owner's value (periodic dimensions wrap);
// nullopt beyond a non-periodic boundary.
std::optional<double> exchanged_value(tensor_desc const& t, shape_t g) {
  for (int d = 0; d < t.ndim(); ++d) {
    index_t const n = t.shape()[d];
    if (g[d] >= 0 && g[d] < n) continue;
    if (!t.dist().options(d).periodic) return std::nullopt;
    g[d] = ((g[d] % n) + n) % n;
  }
  return value_at(g, t.shape());
}

// Number of cells that differ from what they must hold: owned cells the global value, halo
// cells the sentinel (or, with `halos_exchanged`, the exchanged value / `boundary`).
int mismatches(tensor_desc const& t, std::vector<double> const& b, bool halos_exchanged = false,
               double boundary = sentinel) {
  int bad = 0;
  for_each_local(t, [&](index_t off, shape_t const& g, bool owned) {
    double want = sentinel;
    if (owned)
      want = value_at(g, t.shape());
    else if (halos_exchanged)
      want = exchanged_value(t, g).value_or(boundary);
    if (b[off] != want && bad++ == 0)
      ADD_FAILURE() << t.dist().str() << " rank " << t.grid().rank() << " offset " << off << ": "
                    << b[off] << " instead of " << want;
  });
  return bad;
}

tensor_desc make_desc(MPI_Comm comm, std::vector<int> dims, shape_t shape,
                      std::vector<dim_options> opts = {}, int pad = 0) {
  std::vector<index_t> strides;
  if (pad > 0) {
    // Row-major with `pad` extra cells per dimension, like a framework's padded allocation.
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    auto const local = distribution(shape, dtype::float64, dims, opts).local_shape(rank);
    strides.resize(local.size());
    index_t acc = 1;
    for (int d = static_cast<int>(local.size()) - 1; d >= 0; --d) {
      strides[d] = acc;
      acc *= local[d] + pad;
    }
  }
  return tensor_desc(process_grid(comm, dims), shape, dtype::float64, opts, strides);
}

// Two factors a*b = n with a as close to sqrt(n) as possible (a <= b).
std::pair<int, int> split2(int n) {
  int a = 1;
  for (int i = 1; i * i <= n; ++i)
    if (n % i == 0) a = i;
  return {a, n / a};
}

// Runs src -> dst with `plan` on fresh buffers and counts wrong cells on both sides.
int run_forward(redistribute_plan& plan, tensor_desc const* src, tensor_desc const* dst,
                bool halos_exchanged = false, double boundary = sentinel) {
  std::vector<double> s = src ? make_buffer(*src, true) : std::vector<double>{};
  std::vector<double> d = dst ? make_buffer(*dst, false) : std::vector<double>{};
  plan.execute(src ? tensor_view(*src, s) : tensor_view{},
               dst ? tensor_view(*dst, d) : tensor_view{});
  int bad = src ? mismatches(*src, s) : 0;
  return bad + (dst ? mismatches(*dst, d, halos_exchanged, boundary) : 0);
}

// The inverse: dst (owned values) -> src (sentinel), then src is checked.
int run_inverse(redistribute_plan& plan, tensor_desc const* src, tensor_desc const* dst) {
  std::vector<double> s = src ? make_buffer(*src, false) : std::vector<double>{};
  std::vector<double> d = dst ? make_buffer(*dst, true) : std::vector<double>{};
  plan.execute_inverse(dst ? tensor_view(*dst, d) : tensor_view{},
                       src ? tensor_view(*src, s) : tensor_view{});
  return src ? mismatches(*src, s) : 0;
}

class RedistBackends : public testing::TestWithParam<backend> {
protected:
  redistribute_options opts() const {
    redistribute_options o;
    o.method = GetParam();
    return o;
  }
};

TEST_P(RedistBackends, SampleSpatialHybridRoundTrip) {
  int const p = world_size();
  auto const [a, b] = split2(p);
  shape_t const shape{5, 3, 9, 10}; // 5 samples: uneven, and empty sample ranks from 6 up
  auto const sample = make_desc(MPI_COMM_WORLD, {p, 1, 1, 1}, shape);
  auto const spatial = make_desc(MPI_COMM_WORLD, {1, 1, a, b}, shape);
  auto const hybrid = make_desc(MPI_COMM_WORLD, {a, 1, b, 1}, shape);
  redistribute_plan to_spatial(sample, spatial, opts());
  redistribute_plan to_hybrid(spatial, hybrid, opts());
  redistribute_plan to_sample(hybrid, sample, opts());
  EXPECT_EQ(to_spatial.selected_backend(), GetParam());
  EXPECT_EQ(run_forward(to_spatial, &sample, &spatial), 0);
  EXPECT_EQ(run_forward(to_hybrid, &spatial, &hybrid), 0);
  EXPECT_EQ(run_forward(to_sample, &hybrid, &sample), 0);
  EXPECT_EQ(run_inverse(to_spatial, &sample, &spatial), 0);
  EXPECT_EQ(run_inverse(to_hybrid, &spatial, &hybrid), 0);
}

TEST_P(RedistBackends, UnevenHaloStridedRandomPairs) {
  int const p = world_size();
  for (int c = 0; c < 4; ++c) {
    std::mt19937 rng(1000u * static_cast<unsigned>(p) + static_cast<unsigned>(c));
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    int const nd = pick(2, 4);
    shape_t shape(nd);
    for (auto& e : shape) e = pick(1, 7);
    auto random_desc = [&] {
      std::vector<int> dims(nd, 1);
      for (int f = 2, n = p; n > 1; ++f) // prime factors of p, each on a random dimension
        for (; n % f == 0; n /= f) dims[pick(0, nd - 1)] *= f;
      std::vector<dim_options> o(nd);
      for (int d = 0; d < nd; ++d) {
        o[d].periodic = pick(0, 1) == 1;
        o[d].halo_lo = std::min<int>(pick(0, 2), static_cast<int>(shape[d]));
        o[d].halo_hi = std::min<int>(pick(0, 2), static_cast<int>(shape[d]));
        if (pick(0, 1) == 1) {
          o[d].sizes.assign(dims[d], 0);
          for (index_t i = 0; i < shape[d]; ++i) o[d].sizes[pick(0, dims[d] - 1)] += 1;
        }
      }
      return make_desc(MPI_COMM_WORLD, dims, shape, o, pick(0, 2));
    };
    auto const src = random_desc();
    auto const dst = random_desc();
    SCOPED_TRACE(src.dist().str() + " -> " + dst.dist().str());
    redistribute_plan plan(src, dst, opts());
    EXPECT_EQ(run_forward(plan, &src, &dst), 0);
    EXPECT_EQ(run_inverse(plan, &src, &dst), 0);
  }
}

TEST_P(RedistBackends, SubCommSourceToAllAndBack) {
  int const p = world_size(), me = world_rank();
  int const k = (p + 1) / 2;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, me < k ? 0 : MPI_UNDEFINED, me, &sub);
  shape_t const shape{6, 4, 7};
  auto const [a, b] = split2(p);
  std::optional<tensor_desc> part;
  if (sub != MPI_COMM_NULL) part.emplace(make_desc(sub, {k, 1, 1}, shape, {}, 1));
  auto const all = make_desc(MPI_COMM_WORLD, {1, a, b}, shape,
                             {{}, dim_options::halo(1), dim_options::halo(2, true)});
  tensor_desc const* src = part ? &*part : nullptr;
  redistribute_plan out(MPI_COMM_WORLD, src, &all, opts());
  EXPECT_EQ(out.is_source(), me < k);
  EXPECT_TRUE(out.is_destination());
  EXPECT_EQ(run_forward(out, src, &all), 0);
  EXPECT_EQ(run_inverse(out, src, &all), 0);
  // The other way round, exchanging the sub-communicator side's halos afterwards.
  redistribute_options o = opts();
  o.halo_after = true;
  std::optional<tensor_desc> haloed;
  if (sub != MPI_COMM_NULL)
    haloed.emplace(make_desc(sub, {1, k, 1}, shape, {{}, dim_options::halo(1, true), {}}));
  redistribute_plan back(MPI_COMM_WORLD, &all, haloed ? &*haloed : nullptr, o);
  EXPECT_EQ(run_forward(back, &all, haloed ? &*haloed : nullptr, true), 0);
  part.reset();
  haloed.reset();
  if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
}

TEST_P(RedistBackends, GatherScatterRoundTrip) {
  int const p = world_size(), me = world_rank();
  auto const [a, b] = split2(p);
  shape_t const shape{7, 5, 3};
  auto const src = make_desc(MPI_COMM_WORLD, {a, b, 1}, shape,
                             {dim_options::halo(1), dim_options::halo(2, true), {}}, 1);
  auto s = make_buffer(src, true);
  int const root = p - 1;
  auto const global = gather(src, tensor_view(src, s), root, opts());
  ASSERT_EQ(global.size(), me == root ? 7u * 5u * 3u * sizeof(double) : 0u);
  std::vector<double> whole(global.size() / sizeof(double));
  if (!global.empty()) std::memcpy(whole.data(), global.data(), global.size());
  for (std::size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(whole[i], i + 1.0) << "element " << i;

  // Scatter it back from the root into another layout, with its halos filled.
  auto const dst = make_desc(MPI_COMM_WORLD, {b, 1, a}, shape,
                             {dim_options::halo(1), {}, dim_options::halo(1, true)});
  redistribute_options o = opts();
  o.halo_after = true;
  o.halo.boundary = boundary_fill::constant;
  o.halo.fill_value = 0.25;
  auto d = make_buffer(dst, false);
  scatter(root, whole.data(), whole.size() * sizeof(double), dst, tensor_view(dst, d), o);
  EXPECT_EQ(mismatches(dst, d, true, 0.25), 0);
}

INSTANTIATE_TEST_SUITE_P(RedistAllHostBackends, RedistBackends, testing::ValuesIn(host_backends()),
                         [](auto const& info) { return std::string(to_string(info.param)); });

TEST(RedistEmptyRank, MostRanksOwnNothingOnEitherSide) {
  int const p = world_size();
  shape_t const shape{2, 7};
  dim_options last_only;
  last_only.sizes.assign(p, 0);
  last_only.sizes[p - 1] = 7;
  auto const src = make_desc(MPI_COMM_WORLD, {p, 1}, shape, {dim_options::halo(1), {}});
  auto const dst = make_desc(MPI_COMM_WORLD, {1, p}, shape, {{}, last_only});
  redistribute_plan plan(src, dst);
  EXPECT_EQ(run_forward(plan, &src, &dst), 0);
  EXPECT_EQ(run_inverse(plan, &src, &dst), 0);
  if (world_rank() >= 2 && world_rank() != p - 1) {
    EXPECT_EQ(plan.num_peers(), 0);
  }
}

TEST(RedistHalo, SourceAndDestinationHalosStayUntouched) {
  int const p = world_size();
  auto const [a, b] = split2(p);
  shape_t const shape{4, 9, 8};
  auto const src = make_desc(MPI_COMM_WORLD, {1, a, b}, shape,
                             {{}, dim_options::halo(2), dim_options::halo(1, true)}, 2);
  auto const dst = make_desc(MPI_COMM_WORLD, {b, 1, a}, shape,
                             {dim_options::halo(1, true), {}, dim_options{0, 3, false, {}}}, 1);
  redistribute_plan plan(src, dst);
  EXPECT_EQ(run_forward(plan, &src, &dst), 0);
  EXPECT_EQ(run_inverse(plan, &src, &dst), 0);
}

TEST(RedistHalo, HaloAfterExchangesTheDestination) {
  int const p = world_size();
  auto const [a, b] = split2(p);
  shape_t const shape{3, 10, 9};
  auto const src = make_desc(MPI_COMM_WORLD, {p, 1, 1}, shape);
  auto const dst = make_desc(MPI_COMM_WORLD, {1, a, b}, shape,
                             {{}, dim_options::halo(2, true), dim_options::halo(1)});
  redistribute_options o;
  o.halo_after = true;
  redistribute_plan plan(src, dst, o);
  EXPECT_EQ(run_forward(plan, &src, &dst, true), 0);
  // start/wait runs the exchange too.
  auto s = make_buffer(src, true);
  auto d = make_buffer(dst, false);
  plan.start(tensor_view(src, s), tensor_view(dst, d));
  plan.wait();
  EXPECT_EQ(mismatches(dst, d, true), 0);
}

TEST(RedistSubComm, DisjointGroupsWithBystanders) {
  int const p = world_size(), me = world_rank();
  if (p < 2) GTEST_SKIP() << "needs two processes";
  // Source on ranks 0, 3, 6, ...; destination on 1, 4, 7, ... in reverse order; the others in
  // neither group.
  MPI_Comm sc = MPI_COMM_NULL, dc = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, me % 3 == 0 ? 0 : MPI_UNDEFINED, me, &sc);
  MPI_Comm_split(MPI_COMM_WORLD, me % 3 == 1 ? 0 : MPI_UNDEFINED, -me, &dc);
  int const ns = (p + 2) / 3, nd = (p + 1) / 3;
  shape_t const shape{5, 6};
  std::optional<tensor_desc> src, dst;
  if (sc != MPI_COMM_NULL) src.emplace(make_desc(sc, {ns, 1}, shape, {dim_options::halo(1), {}}));
  if (dc != MPI_COMM_NULL) dst.emplace(make_desc(dc, {1, nd}, shape, {}, 1));
  tensor_desc const* s = src ? &*src : nullptr;
  tensor_desc const* d = dst ? &*dst : nullptr;
  redistribute_plan plan(MPI_COMM_WORLD, s, d);
  if (!s && !d) EXPECT_EQ(plan.num_peers(), 0) << plan.describe();
  EXPECT_EQ(run_forward(plan, s, d), 0);
  EXPECT_EQ(run_inverse(plan, s, d), 0);
  src.reset();
  dst.reset();
  if (sc != MPI_COMM_NULL) MPI_Comm_free(&sc);
  if (dc != MPI_COMM_NULL) MPI_Comm_free(&dc);
}

TEST(RedistIdentity, SameDistributionIsALocalCopyAndRunsInPlace) {
  auto const [a, b] = split2(world_size());
  auto const t = make_desc(MPI_COMM_WORLD, {a, b}, {6, 8}, {dim_options::halo(1), {}}, 1);
  redistribute_plan plan(t, t);
  EXPECT_EQ(plan.bytes_sent(), 0u);
  EXPECT_EQ(plan.num_peers(), 0);
  EXPECT_NE(plan.describe().find("local copies"), std::string::npos) << plan.describe();
  EXPECT_EQ(run_forward(plan, &t, &t), 0);
  auto buf = make_buffer(t, true);
  plan.execute(tensor_view(t, buf), tensor_view(t, buf));
  EXPECT_EQ(mismatches(t, buf), 0);
}

TEST(RedistErrors, ShapeOrDtypeMismatchOnEveryRank) {
  int const p = world_size();
  auto const a = make_desc(MPI_COMM_WORLD, {p, 1}, {8, 6});
  auto const b = make_desc(MPI_COMM_WORLD, {1, p}, {8, 7});
  expect_error_everywhere([&] { redistribute_plan(a, b); }, errc::invalid_argument, "[8x6]");
  expect_error_everywhere([&] { redistribute_plan(MPI_COMM_WORLD, &a, &b); },
                          errc::invalid_argument, "[8x7]");
  tensor_desc const c(process_grid(MPI_COMM_WORLD, {1, p}), {8, 6}, dtype::int32);
  expect_error_everywhere([&] { redistribute_plan(a, c); }, errc::invalid_argument, "int32");
}

TEST(RedistErrors, GroupsOutsideTheParentOrMissingDescriptors) {
  int const p = world_size(), me = world_rank();
  if (p < 2) GTEST_SKIP() << "needs two processes";
  auto const all = make_desc(MPI_COMM_WORLD, {p, 1}, {8, 6});
  MPI_Comm half = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &half);
  expect_error_everywhere([&] { redistribute_plan(half, &all, &all); }, errc::invalid_argument,
                          "not in the parent communicator");
  MPI_Comm_free(&half);
  expect_error_everywhere(
      [&] { redistribute_plan(MPI_COMM_WORLD, me == 0 ? nullptr : &all, &all); },
      errc::invalid_argument, "every process of the source grid must pass it");
  expect_error_everywhere([&] { redistribute_plan(MPI_COMM_WORLD, &all, nullptr); },
                          errc::invalid_argument, "no process passed a destination descriptor");
}

TEST(RedistErrors, BadBuffersOnEveryRank) {
  int const p = world_size();
  // Every rank owns cells on both sides and, from two ranks up, sends to every other: each rank
  // detects the bad input itself.
  auto const a = make_desc(MPI_COMM_WORLD, {p, 1}, {p, 2 * p});
  auto const b = make_desc(MPI_COMM_WORLD, {1, p}, {p, 2 * p});
  auto const other = make_desc(MPI_COMM_WORLD, {p, 1}, {p, 5});
  // A point-to-point backend: after a failed execute, a collective one (which the automatic
  // choice may measure fastest) leaves the context unusable, as a rank cannot know that every
  // peer failed too, and the later checks would read that instead of the bad input.
  redistribute_options o;
  o.method = backend::mpi_pack;
  redistribute_plan plan(a, b, o);
  auto sa = make_buffer(a, true);
  auto sb = make_buffer(b, false);
  auto so = make_buffer(other, true);
  expect_error_everywhere(
      [&] { plan.execute(tensor_view(a, sa.data(), sa.size() * 8 - 1), tensor_view(b, sb)); },
      errc::invalid_argument, "bytes but the descriptor needs");
  expect_error_everywhere([&] { plan.execute(tensor_view(other, so), tensor_view(b, sb)); },
                          errc::invalid_argument, "but the plan was built for");
  expect_error_everywhere([&] { plan.wait(); }, errc::invalid_state, "without a matching start");
  // A second start is refused without disturbing the redistribution in flight.
  auto sb2 = make_buffer(b, false);
  plan.start(tensor_view(a, sa), tensor_view(b, sb));
  expect_error_everywhere([&] { plan.start(tensor_view(a, so), tensor_view(b, sb2)); },
                          errc::invalid_state, "still in flight");
  plan.wait();
  EXPECT_EQ(mismatches(b, sb), 0);
  if (p > 1) {
    std::vector<double> shared(sa.size() + sb.size());
    expect_error_everywhere([&] { plan.execute(tensor_view(a, shared), tensor_view(b, shared)); },
                            errc::invalid_argument, "cannot run in place");
  }
}

} // namespace
