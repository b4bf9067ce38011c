// The halox._halox extension module: the public API of halox::halox for Python. The pure-Python
// package (python/halox/__init__.py) re-exports it and adds halox.torch.
#include "bindings.hpp"
#include "buffers.hpp"
#include "comm.hpp"

#include <halox/halox.hpp>

#include <pybind11/stl.h>

namespace py = pybind11;

PYBIND11_MODULE(_halox, m) {
  m.doc() = "halox: halo exchange and redistribution of distributed N-d tensors over MPI";
  // Before anything that may call MPI: initialise it unless another binding (mpi4py) did.
  halox_py::init_mpi(m);

  // halox::error becomes halox.Error (a RuntimeError) carrying the C++ message and its parts, so
  // Python code can branch on the category without parsing the text.
  static py::exception<halox::error> error_type(m, "Error", PyExc_RuntimeError);
  error_type.doc() =
      "The one exception type raised by halox (a RuntimeError). str(e) reads 'halox error "
      "[<code>] on rank <r>: <message> (at <call>, <file>:<line>)'. Attributes: code (str, the "
      "category, e.g. 'invalid_argument', 'mpi_error', 'timeout', 'peer_failed'), rank (int, "
      "the world rank that raised it, -1 if MPI was not initialised), message (str, without the "
      "decoration) and call (str, the failing call or expression, when known).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (halox::error const& e) {
      py::object err = py::reinterpret_borrow<py::object>(error_type)(e.what());
      err.attr("code") = halox::to_string(e.code());
      err.attr("rank") = e.rank();
      err.attr("message") = e.message();
      err.attr("call") = e.call();
      PyErr_SetObject(error_type.ptr(), err.ptr());
    }
  });

  py::enum_<halox::backend>(m, "Backend", "How a plan moves its data.")
      .value("automatic", halox::backend::automatic,
             "Measure the applicable candidates at plan time and keep the fastest.")
      .value("mpi_datatype", halox::backend::mpi_datatype,
             "MPI derived datatypes + MPI_Isend/MPI_Irecv; halox packs nothing.")
      .value("mpi_pack", halox::backend::mpi_pack,
             "halox packs into one buffer per peer + Isend/Irecv ('p2p'); contiguous single-region "
             "messages are sent and received in place.")
      .value("mpi_persistent", halox::backend::mpi_persistent,
             "Like mpi_pack, with persistent requests (MPI_Send_init/MPI_Recv_init).")
      .value("mpi_neighbor", halox::backend::mpi_neighbor,
             "Pack + MPI_Ineighbor_alltoallv on a distributed-graph topology.")
      .value("alltoallv", halox::backend::alltoallv,
             "Pack + one MPI_Ialltoallv over the whole communicator.")
      .value("alltoallw", halox::backend::alltoallw,
             "Derived datatypes + one MPI_Ialltoallw over the whole communicator.")
      .value("cuda_aware_mpi", halox::backend::cuda_aware_mpi,
             "Device buffers: CUDA pack kernels, device pointers handed to MPI.")
      .value("staged_mpi", halox::backend::staged_mpi,
             "Device buffers: CUDA pack, copy to pinned host memory, MPI, copy back.")
      .value("nccl", halox::backend::nccl,
             "Device buffers: CUDA pack + ncclSend/ncclRecv on the stream.")
      .value("device_mpi_datatype", halox::backend::device_mpi_datatype,
             "Device buffers given to MPI with derived datatypes.")
      .value("ucx", halox::backend::ucx,
             "Host buffers, UCX tag messages without MPI: one packed message per peer (builds with "
             "UCX).")
      .value("ucx_iov", halox::backend::ucx_iov,
             "Like ucx, but multi-region messages go as UCP iov lists straight from/to the tensor, "
             "no packing.")
      .value("cma", halox::backend::cma,
             "Host buffers of processes on one node (Linux): each receiver reads straight from the "
             "sender's tensor with process_vm_readv (one copy, no packing).")
      .value("mpi_pipeline", halox::backend::mpi_pipeline,
             "Like mpi_pack, but a long message travels in fragments so that packing, transfer and "
             "unpacking overlap.");
  py::enum_<halox::reduce_op>(m, "ReduceOp", "Reduction of the reverse halo exchange.")
      .value("sum", halox::reduce_op::sum, "The owner's value plus every halo copy's (gradients).")
      .value("max", halox::reduce_op::max, "The largest of the owner's value and its halo copies'.")
      .value("min", halox::reduce_op::min,
             "The smallest of the owner's value and its halo copies'.");
  py::enum_<halox::memory_space>(m, "MemorySpace", "Where a plan's buffers live.")
      .value("host", halox::memory_space::host, "Ordinary CPU memory.")
      .value("device", halox::memory_space::device, "CUDA device memory (needs a CUDA build).");
  py::enum_<halox::boundary_fill>(m, "BoundaryFill",
                                  "What a halo exchange does with halo cells past a non-periodic "
                                  "global boundary.")
      .value("untouched", halox::boundary_fill::untouched, "Leave them as they are.")
      .value("constant", halox::boundary_fill::constant,
             "Set them to the plan's fill_value (zero padding for convolutions).");

  m.def("host_backends", &halox::host_backends, "Backends that run on host memory.");
  m.def("device_backends", &halox::device_backends,
        "Backends that run on device memory (empty without CUDA).");
  m.def(
      "backend_from_string", [](std::string const& s) { return halox::backend_from_string(s); },
      py::arg("name"),
      "The Backend named `name` (str; also accepts 'auto' and 'p2p' = mpi_pack). Raises "
      "halox.Error listing the accepted names.");
  m.def("build_info", &halox::build_info,
        "What this build contains: version, MPI library, enabled backends.");
  m.def("mpi_library_version", &halox::mpi_library_version,
        "The MPI library's own version string (str; MPI_Get_library_version), first line only.");
  m.attr("VERSION") = HALOX_VERSION_STRING;
  m.attr("MPI_FLAVOUR") = HALOX_MPI_FLAVOUR;
  m.attr("HAS_CUDA") = static_cast<bool>(HALOX_HAS_CUDA);

  halox_py::bind_comm(m);
  halox_py::bind_descriptors(m);
  halox_py::bind_plans(m);
  halox_py::bind_window(m);
  halox_py::bind_batch_norm(m);
}
