// The backend table: every public backend has exactly one entry, names round-trip, the lists
// of host and device backends follow the table's order and memory, and each entry names its
// transport and packing axes.
#include "exec/backend_table.hpp"

#include <halox/backend.hpp>
#include <halox/config.hpp>
#include <halox/error.hpp>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace {

using namespace halox;
using detail::backend_table;

// Every enumerator after `automatic`, in declaration order (mpi_pipeline is the last).
std::vector<backend> every_backend() {
  std::vector<backend> out;
  for (int v = 1; v <= static_cast<int>(backend::mpi_pipeline); ++v)
    out.push_back(static_cast<backend>(v));
  return out;
}

TEST(BackendTable, EveryEnumeratorHasOneEntryWithAUniqueName) {
  std::set<std::string> names;
  std::size_t entries = 0;
  for (auto const& e : backend_table()) {
    ++entries;
    EXPECT_TRUE(names.insert(e.name).second) << "name " << e.name << " twice";
    EXPECT_NE(e.id, backend::automatic);
    EXPECT_STRNE(e.transport, "");
    EXPECT_STRNE(e.packing, "");
  }
  EXPECT_EQ(entries, every_backend().size());
  for (backend b : every_backend()) {
    ASSERT_NE(detail::find_backend(b), nullptr) << static_cast<int>(b);
    EXPECT_EQ(backend_from_string(to_string(b)), b) << to_string(b);
  }
  EXPECT_EQ(detail::find_backend(backend::automatic), nullptr);
  EXPECT_STREQ(to_string(backend::automatic), "auto");
  EXPECT_EQ(backend_from_string("p2p"), backend::mpi_pack);
  EXPECT_EQ(backend_from_string("automatic"), backend::automatic);
}

TEST(BackendTable, AnUnknownNameListsEveryName) {
  try {
    (void)backend_from_string("carrier_pigeon");
    FAIL() << "an unknown backend name was accepted";
  } catch (error const& e) {
    EXPECT_EQ(e.code(), errc::invalid_argument);
    std::string const m = e.message();
    EXPECT_NE(m.find("carrier_pigeon"), std::string::npos) << m;
    for (auto const& entry : backend_table())
      EXPECT_NE(m.find(entry.name), std::string::npos) << entry.name << " missing from: " << m;
  }
}

TEST(BackendTable, ListsFollowTheTableAndItsMemory) {
  std::vector<backend> host, device;
  for (auto const& e : backend_table()) {
    if (e.make == nullptr) continue;
    (e.memory == memory_space::host ? host : device).push_back(e.id);
    EXPECT_TRUE(detail::backend_available(e.id, e.memory)) << e.name;
    memory_space const other =
        e.memory == memory_space::host ? memory_space::device : memory_space::host;
    EXPECT_FALSE(detail::backend_available(e.id, other)) << e.name;
  }
  EXPECT_EQ(host_backends(), host);
  EXPECT_EQ(device_backends(), device);
  // What every build has, and what only some have.
  for (backend b :
       {backend::mpi_datatype, backend::mpi_pack, backend::mpi_persistent, backend::mpi_pipeline,
        backend::mpi_neighbor, backend::alltoallv, backend::alltoallw})
    EXPECT_TRUE(detail::backend_available(b, memory_space::host)) << to_string(b);
  EXPECT_EQ(detail::backend_available(backend::ucx, memory_space::host), HALOX_HAS_UCX != 0);
  EXPECT_EQ(detail::backend_available(backend::cma, memory_space::host), HALOX_HAS_CMA != 0);
  EXPECT_EQ(detail::backend_available(backend::nccl, memory_space::device),
            HALOX_HAS_CUDA != 0 && HALOX_HAS_NCCL != 0);
}

TEST(BackendTable, PresetsNameTheirTransportAndPacking) {
  EXPECT_EQ(detail::backend_axes(backend::mpi_pack), "transport mpi, packing pack");
  EXPECT_EQ(detail::backend_axes(backend::mpi_pipeline), "transport mpi, packing pipelined");
  EXPECT_EQ(detail::backend_axes(backend::ucx), "transport ucx, packing pack");
  EXPECT_EQ(detail::backend_axes(backend::ucx_iov), "transport ucx, packing iov");
  EXPECT_EQ(detail::backend_axes(backend::cma), "transport cma, packing iov");
  EXPECT_EQ(detail::backend_axes(backend::mpi_datatype),
            "transport mpi, packing derived datatypes");
  EXPECT_EQ(detail::backend_axes(backend::staged_mpi),
            "transport mpi (staged through pinned host memory), packing pack (CUDA kernels)");
  EXPECT_EQ(detail::backend_axes(backend::nccl),
            "transport nccl (stream-ordered), packing pack (CUDA kernels)");
  EXPECT_EQ(detail::backend_axes(backend::automatic), "");
}

} // namespace
