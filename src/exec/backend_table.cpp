#include "exec/backend_table.hpp"

#include "exec/cpu/packing_executor.hpp"
#include "exec/mpi/collective_executor.hpp"
#include "exec/mpi/mpi_transport.hpp"

#include <halox/config.hpp>
#include <halox/error.hpp>

#include <string>

// Each optional backend's folder is compiled only when its build option is on; the table names
// its maker through one of these, which leave a null maker otherwise.
#if HALOX_HAS_UCX
#include "exec/ucx/ucx_transport.hpp"
#define HALOX_IF_UCX(maker) maker
#else
#define HALOX_IF_UCX(maker) nullptr
#endif
#if HALOX_HAS_CMA
#include "exec/cma/cma_transport.hpp"
#define HALOX_IF_CMA(maker) maker
#else
#define HALOX_IF_CMA(maker) nullptr
#endif
#if HALOX_HAS_CUDA
#include "exec/cuda/device_executors.hpp"
#define HALOX_IF_CUDA(maker) maker
#else
#define HALOX_IF_CUDA(maker) nullptr
#endif
#if HALOX_HAS_CUDA && HALOX_HAS_NCCL
#include "exec/nccl/nccl_transport.hpp"
#define HALOX_IF_NCCL(maker) maker
#else
#define HALOX_IF_NCCL(maker) nullptr
#endif

namespace halox::detail {

namespace {

// A backend made of the packing executor with strategy `P` over the transport `T` makes.
template <packing P, transport_maker T>
std::unique_ptr<executor> packed(backend b, schedule const& s, exec_config const& cfg) {
  return std::make_unique<packing_executor>(s, cfg, b, P, T);
}

#if HALOX_HAS_CUDA
// A GPU backend made of the device packing executor (CUDA pack kernels) with staging `S` over
// the transport `T` makes.
template <staging S, transport_maker T>
std::unique_ptr<executor> device_packed(backend b, schedule const& s, exec_config const& cfg) {
  return make_device_packing_executor(b, s, cfg, S, T);
}
#endif

constexpr auto host = memory_space::host;
constexpr auto device = memory_space::device;

// clang-format off
// One line registers a backend. The order is the order of host_backends() and device_backends().
constexpr backend_entry table[] = {
  // backend                       name                   memory  transport         packing              maker
  {backend::mpi_datatype,        "mpi_datatype",        host,   "mpi",            "derived datatypes", packed<packing::datatypes, make_mpi_transport>},
  {backend::mpi_pack,            "mpi_pack",            host,   "mpi",            "pack",              packed<packing::pack, make_mpi_transport>},
  {backend::mpi_persistent,      "mpi_persistent",      host,   "mpi persistent", "pack",              packed<packing::pack, make_persistent_mpi_transport>},
  {backend::mpi_pipeline,        "mpi_pipeline",        host,   "mpi",            "pipelined",         packed<packing::pipelined, make_mpi_transport>},
  {backend::mpi_neighbor,        "mpi_neighbor",        host,   "mpi neighbourhood collective", "pack", make_collective_executor},
  {backend::alltoallv,           "alltoallv",           host,   "mpi collective", "pack",              make_collective_executor},
  {backend::alltoallw,           "alltoallw",           host,   "mpi collective", "derived datatypes", make_collective_executor},
  {backend::cuda_aware_mpi,      "cuda_aware_mpi",      device, "mpi (device pointers)", "pack (CUDA kernels)", HALOX_IF_CUDA((device_packed<staging::none, make_cuda_aware_mpi_transport>))},
  {backend::staged_mpi,          "staged_mpi",          device, "mpi (staged through pinned host memory)", "pack (CUDA kernels)", HALOX_IF_CUDA((device_packed<staging::pinned_host, make_mpi_transport>))},
  {backend::nccl,                "nccl",                device, "nccl (stream-ordered)", "pack (CUDA kernels)", HALOX_IF_NCCL((device_packed<staging::none, make_nccl_transport>))},
  {backend::device_mpi_datatype, "device_mpi_datatype", device, "mpi (device pointers)", "derived datatypes", HALOX_IF_CUDA(make_device_datatype_executor)},
  {backend::ucx,                 "ucx",                 host,   "ucx",            "pack",              HALOX_IF_UCX((packed<packing::pack, make_ucx_transport>))},
  {backend::ucx_iov,             "ucx_iov",             host,   "ucx",            "iov",               HALOX_IF_UCX((packed<packing::iov, make_ucx_transport>))},
  {backend::cma,                 "cma",                 host,   "cma",            "iov",               HALOX_IF_CMA((packed<packing::iov, make_cma_transport>))},
};
// clang-format on

} // namespace

backend_range backend_table() noexcept { return {table, table + sizeof table / sizeof table[0]}; }

backend_entry const* find_backend(backend b) noexcept {
  for (auto const& e : table)
    if (e.id == b) return &e;
  return nullptr;
}

std::string backend_axes(backend b) {
  backend_entry const* e = find_backend(b);
  if (e == nullptr) return {};
  return std::string("transport ") + e->transport + ", packing " + e->packing;
}

bool backend_available(backend b, memory_space mem) noexcept {
  if (b == backend::automatic) return true;
  backend_entry const* e = find_backend(b);
  return e != nullptr && e->make != nullptr && e->memory == mem;
}

std::unique_ptr<executor> make_executor(backend b, schedule const& s, exec_config const& cfg) {
  HALOX_REQUIRE(backend_available(b, cfg.memory) && b != backend::automatic, errc::unsupported,
                std::string("backend ") + to_string(b) + " is not available for " +
                    (cfg.memory == memory_space::host ? "host" : "device") +
                    " memory in this build; see halox::host_backends() / device_backends()");
  return find_backend(b)->make(b, s, cfg);
}

} // namespace halox::detail
