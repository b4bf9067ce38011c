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
      .value("automatic", halox::backend::automatic)
      .value("mpi_datatype", halox::backend::mpi_datatype)
      .value("mpi_pack", halox::backend::mpi_pack)
      .value("mpi_persistent", halox::backend::mpi_persistent)
      .value("mpi_neighbor", halox::backend::mpi_neighbor)
      .value("alltoallv", halox::backend::alltoallv)
      .value("alltoallw", halox::backend::alltoallw)
      .value("cuda_aware_mpi", halox::backend::cuda_aware_mpi)
      .value("staged_mpi", halox::backend::staged_mpi)
      .value("nccl", halox::backend::nccl)
      .value("device_mpi_datatype", halox::backend::device_mpi_datatype)
      .value("ucx", halox::backend::ucx)
      .value("ucx_iov", halox::backend::ucx_iov)
      .value("cma", halox::backend::cma)
      .value("mpi_pipeline", halox::backend::mpi_pipeline);
  py::enum_<halox::reduce_op>(m, "ReduceOp", "Reduction of the reverse halo exchange.")
      .value("sum", halox::reduce_op::sum)
      .value("max", halox::reduce_op::max)
      .value("min", halox::reduce_op::min);
  py::enum_<halox::memory_space>(m, "MemorySpace", "Where a plan's buffers live.")
      .value("host", halox::memory_space::host)
      .value("device", halox::memory_space::device);
  py::enum_<halox::boundary_fill>(m, "BoundaryFill",
                                  "What a halo exchange does with halo cells past a non-periodic "
                                  "global boundary.")
      .value("untouched", halox::boundary_fill::untouched)
      .value("constant", halox::boundary_fill::constant);

  m.def("host_backends", &halox::host_backends, "Backends that run on host memory.");
  m.def("device_backends", &halox::device_backends,
        "Backends that run on device memory (empty without CUDA).");
  m.def(
      "backend_from_string", [](std::string const& s) { return halox::backend_from_string(s); },
      py::arg("name"));
  m.def("build_info", &halox::build_info,
        "What this build contains: version, MPI library, enabled backends.");
  m.def("mpi_library_version", &halox::mpi_library_version);
  m.attr("VERSION") = HALOX_VERSION_STRING;
  m.attr("MPI_FLAVOUR") = HALOX_MPI_FLAVOUR;
  m.attr("HAS_CUDA") = static_cast<bool>(HALOX_HAS_CUDA);

  halox_py::bind_comm(m);
  halox_py::bind_descriptors(m);
  halox_py::bind_plans(m);
  halox_py::bind_window(m);
  halox_py::bind_batch_norm(m);
}
