// Plan churn: builds, executes once and destroys thousands of plans (halo exchanges with every
// host backend, redistributions, box gathers, plus a fresh context and a fresh grid per round)
// and checks that nothing accumulates: the live MPI communicators, groups, datatypes and
// persistent requests, the live C++ allocations, and the resident set size are compared after a
// warm-up round and after many more rounds. A long-running application builds plans as its
// shapes change; a plan that forgets to free one handle would exhaust the MPI library's handle
// tables after enough of them.
//
// The MPI handles are counted by PMPI interposition: this executable defines the MPI functions
// halox creates and frees handles with, and each forwards to its PMPI_ twin. The executable
// exports its symbols (ENABLE_EXPORTS), so the wrappers also catch the calls of a shared halox.
//
// Rounds: HALOX_CHURN_ROUNDS (default 200) after HALOX_CHURN_WARMUP (default 4).
#include "support/mpi_helpers.hpp"

#include <halox/box_gather.hpp>
#include <halox/halox.hpp>
#include <halox/redistribute.hpp>

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

// ---- live C++ allocations of the whole process (halox's included) ------------------------------
namespace {
std::atomic<long> g_live_news{0};
}
void* operator new(std::size_t n) {
  if (void* p = std::malloc(n ? n : 1)) {
    ++g_live_news;
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  if (p) --g_live_news;
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept { operator delete(p); }
// The other forms too: under AddressSanitizer the ones not defined here come from its runtime,
// which would see our free() of its operator new as a mismatch.
void* operator new(std::size_t n, std::nothrow_t const&) noexcept {
  void* p = std::malloc(n ? n : 1);
  if (p) ++g_live_news;
  return p;
}
void operator delete(void* p, std::nothrow_t const&) noexcept { operator delete(p); }
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new[](std::size_t n, std::nothrow_t const& t) noexcept { return operator new(n, t); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete[](void* p, std::size_t) noexcept { operator delete(p); }
void operator delete[](void* p, std::nothrow_t const&) noexcept { operator delete(p); }

// ---- live MPI handles, by PMPI interposition
// -----------------------------------------------------
namespace {
long g_comms = 0, g_groups = 0, g_types = 0;
// Handles ever created, to prove that the interposition is in effect.
long g_types_made = 0, g_requests_made = 0;
// Persistent requests by handle: MPI_Request_free may also be called on other requests, which
// must not be subtracted.
std::vector<MPI_Request>& persistent_requests() {
  static std::vector<MPI_Request> live;
  return live;
}
int count_comm(int rc, MPI_Comm const* c) {
  if (rc == MPI_SUCCESS && *c != MPI_COMM_NULL) ++g_comms;
  return rc;
}
int count_type(int rc) {
  if (rc == MPI_SUCCESS) ++g_types, ++g_types_made;
  return rc;
}
int count_request(int rc, MPI_Request const* r) {
  if (rc == MPI_SUCCESS) persistent_requests().push_back(*r), ++g_requests_made;
  return rc;
}
} // namespace

extern "C" {
int MPI_Comm_dup(MPI_Comm comm, MPI_Comm* out) { return count_comm(PMPI_Comm_dup(comm, out), out); }
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm* out) {
  return count_comm(PMPI_Comm_split(comm, color, key, out), out);
}
int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm* out) {
  return count_comm(PMPI_Comm_create(comm, group, out), out);
}
int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm* out) {
  return count_comm(PMPI_Comm_create_group(comm, group, tag, out), out);
}
int MPI_Dist_graph_create_adjacent(MPI_Comm comm, int indegree, int const sources[],
                                   int const sourceweights[], int outdegree,
                                   int const destinations[], int const destweights[], MPI_Info info,
                                   int reorder, MPI_Comm* out) {
  return count_comm(PMPI_Dist_graph_create_adjacent(comm, indegree, sources, sourceweights,
                                                    outdegree, destinations, destweights, info,
                                                    reorder, out),
                    out);
}
int MPI_Comm_free(MPI_Comm* c) {
  int const rc = PMPI_Comm_free(c);
  if (rc == MPI_SUCCESS) --g_comms;
  return rc;
}
int MPI_Comm_group(MPI_Comm comm, MPI_Group* g) {
  int const rc = PMPI_Comm_group(comm, g);
  if (rc == MPI_SUCCESS && *g != MPI_GROUP_EMPTY) ++g_groups;
  return rc;
}
int MPI_Group_free(MPI_Group* g) {
  int const rc = PMPI_Group_free(g);
  if (rc == MPI_SUCCESS) --g_groups;
  return rc;
}
int MPI_Type_contiguous(int count, MPI_Datatype old, MPI_Datatype* out) {
  return count_type(PMPI_Type_contiguous(count, old, out));
}
int MPI_Type_vector(int count, int blocklength, int stride, MPI_Datatype old, MPI_Datatype* out) {
  return count_type(PMPI_Type_vector(count, blocklength, stride, old, out));
}
int MPI_Type_create_hvector(int count, int blocklength, MPI_Aint stride, MPI_Datatype old,
                            MPI_Datatype* out) {
  return count_type(PMPI_Type_create_hvector(count, blocklength, stride, old, out));
}
int MPI_Type_create_struct(int count, int const blocklengths[], MPI_Aint const displacements[],
                           MPI_Datatype const types[], MPI_Datatype* out) {
  return count_type(PMPI_Type_create_struct(count, blocklengths, displacements, types, out));
}
int MPI_Type_create_subarray(int ndims, int const sizes[], int const subsizes[], int const starts[],
                             int order, MPI_Datatype old, MPI_Datatype* out) {
  return count_type(PMPI_Type_create_subarray(ndims, sizes, subsizes, starts, order, old, out));
}
int MPI_Type_dup(MPI_Datatype old, MPI_Datatype* out) {
  return count_type(PMPI_Type_dup(old, out));
}
int MPI_Type_free(MPI_Datatype* t) {
  int const rc = PMPI_Type_free(t);
  if (rc == MPI_SUCCESS) --g_types;
  return rc;
}
int MPI_Send_init(void const* buf, int count, MPI_Datatype type, int dest, int tag, MPI_Comm comm,
                  MPI_Request* r) {
  return count_request(PMPI_Send_init(buf, count, type, dest, tag, comm, r), r);
}
int MPI_Recv_init(void* buf, int count, MPI_Datatype type, int source, int tag, MPI_Comm comm,
                  MPI_Request* r) {
  return count_request(PMPI_Recv_init(buf, count, type, source, tag, comm, r), r);
}
int MPI_Request_free(MPI_Request* r) {
  MPI_Request const handle = *r;
  int const rc = PMPI_Request_free(r);
  auto& live = persistent_requests();
  auto const it = std::find(live.begin(), live.end(), handle);
  if (rc == MPI_SUCCESS && it != live.end()) live.erase(it);
  return rc;
}
} // extern "C"

namespace {

using namespace halox;
using halox::test::world_size;

struct snapshot {
  long comms, groups, types, requests, news;
  std::size_t rss_bytes;
};

std::size_t resident_bytes() {
  long pages = 0, resident = 0;
  if (std::FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

snapshot take() {
  return {g_comms,
          g_groups,
          g_types,
          static_cast<long>(persistent_requests().size()),
          g_live_news.load(),
          resident_bytes()};
}

int env_int(char const* name, int fallback) {
  char const* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::vector<double> buffer(tensor_desc const& t) {
  std::vector<double> b(t.local_elements());
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<double>(i);
  return b;
}

// A 2-D tensor with periodic halos on a grid of n x 1 (or 1 x n) ranks.
tensor_desc make_tensor(process_grid const& g) {
  return tensor_desc(g, {12, 10}, dtype::float64,
                     {dim_options::halo(1, true), dim_options::halo(2, true)});
}

// One round: every kind of plan with every host backend, built, executed once and destroyed.
void churn_round(tensor_desc const& rows, tensor_desc const& cols) {
  std::vector<double> a = buffer(rows), b = buffer(cols);
  distribution const& dist = rows.dist();
  std::vector<std::vector<index_range>> need(dist.ndim());
  for (int d = 0; d < dist.ndim(); ++d)
    need[d].assign(static_cast<std::size_t>(dist.parts()[d]), index_range{0, rows.shape()[d]});
  for (backend m : host_backends()) {
    {
      halo_options o;
      o.method = m;
      halo_plan p(rows, o);
      p.execute(tensor_view(rows, a));
      p.execute_reverse(tensor_view(rows, a));
    }
    {
      redistribute_options o;
      o.method = m;
      redistribute_plan p(rows, cols, o);
      p.execute(tensor_view(rows, a), tensor_view(cols, b));
      p.execute_inverse(tensor_view(cols, b), tensor_view(rows, a));
    }
    {
      box_gather_options o;
      o.method = m;
      box_gather_plan p(rows, need, o);
      std::vector<double> ws(static_cast<std::size_t>(p.elements()));
      p.execute(tensor_view(rows, a), ws.data());
    }
  }
  // A context and a grid (whose default context lives as long as its communicator) of their own.
  context ctx(MPI_COMM_WORLD);
  halo_options o;
  o.method = backend::mpi_persistent;
  halo_plan(ctx, rows, o).execute(tensor_view(rows, a));
  process_grid fresh(MPI_COMM_WORLD, {world_size(), 1});
  tensor_desc const t = make_tensor(fresh);
  std::vector<double> c = buffer(t);
  o.method = backend::mpi_neighbor;
  halo_plan(t, o).execute(tensor_view(t, c));
}

// Resident memory may grow this much over the measured rounds without failing the test: malloc
// keeps freed pages and the MPI library grows pools lazily, but a plan that leaked even a few
// hundred bytes would exceed it over the thousands of plans built.
constexpr std::size_t rss_slack_bytes = 2u << 20;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool rss_meaningful = false; // AddressSanitizer's quarantine holds freed memory
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool rss_meaningful = false;
#else
constexpr bool rss_meaningful = true;
#endif
#else
constexpr bool rss_meaningful = true;
#endif

TEST(PlanChurn, NothingAccumulatesOverThousandsOfPlans) {
  int const warmup = std::max(1, env_int("HALOX_CHURN_WARMUP", 4));
  int const rounds = std::max(1, env_int("HALOX_CHURN_ROUNDS", 200));
  process_grid by_rows(MPI_COMM_WORLD, {world_size(), 1}),
      by_cols(MPI_COMM_WORLD, {1, world_size()});
  tensor_desc const rows = make_tensor(by_rows), cols = make_tensor(by_cols);

  for (int r = 0; r < warmup; ++r) churn_round(rows, cols);
  snapshot const before = take();
  for (int r = 0; r < rounds; ++r) churn_round(rows, cols);
  snapshot const after = take();

  std::size_t const plans_per_round = 3 * host_backends().size() + 2;
  if (halox::test::world_rank() == 0)
    std::printf("churn: %d rounds of %zu plans after %d warm-up rounds; live comms %ld -> %ld, "
                "groups %ld -> %ld, datatypes %ld -> %ld, persistent requests %ld -> %ld, C++ "
                "allocations %ld -> %ld, RSS %.1f -> %.1f MiB\n",
                rounds, plans_per_round, warmup, before.comms, after.comms, before.groups,
                after.groups, before.types, after.types, before.requests, after.requests,
                before.news, after.news, before.rss_bytes / 1048576.0, after.rss_bytes / 1048576.0);
  EXPECT_EQ(after.comms, before.comms) << "live communicators grew";
  EXPECT_EQ(after.groups, before.groups) << "live groups grew";
  EXPECT_EQ(after.types, before.types) << "live datatypes grew";
  EXPECT_EQ(after.requests, before.requests) << "live persistent requests grew";
  EXPECT_EQ(after.news, before.news) << "live C++ allocations grew";
  // The counters must have seen the plans' handles, or the interposition is not in effect.
  EXPECT_GT(before.comms, 0) << "no communicator creation was counted";
  EXPECT_GT(g_types_made, 0) << "no datatype creation was counted";
  EXPECT_GT(g_requests_made, 0) << "no persistent request creation was counted";
  if (rss_meaningful) {
    EXPECT_LE(after.rss_bytes, before.rss_bytes + rss_slack_bytes)
        << "resident memory grew by " << (after.rss_bytes - before.rss_bytes) << " bytes";
  }
}

} // namespace
