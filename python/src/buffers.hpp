#pragma once
/// \file buffers.hpp
/// Conversions between Python objects and halox values: element types,
/// and NumPy arrays / torch tensors seen as local buffers of a descriptor (never copied).

#include <halox/halox.hpp>

#include <pybind11/pybind11.h>

#include <cstddef>
#include <string>
#include <vector>

namespace halox_py {

namespace py = pybind11;

/// Throws `halox::error` (invalid_argument) with `msg`.
[[noreturn]] void fail(std::string const& msg);

/// Element type from a halox.dtype, a name ("float32"), a NumPy dtype or type, or a torch dtype.
halox::dtype to_dtype(py::handle h);
/// Backend from a halox.Backend or a name ("auto", "mpi_pack", ...).
halox::backend to_backend(py::handle h);
/// Reduction from a halox.ReduceOp or a name ("sum", "max", "min").
halox::reduce_op to_reduce_op(py::handle h);
/// Memory space from a halox.MemorySpace or a name ("host", "device").
halox::memory_space to_memory(py::handle h);

/// A local buffer described by an array-like object.
struct local_buffer {
  void* data = nullptr;
  std::size_t bytes = 0; ///< from the first to one past the last addressed byte
  halox::dtype type = halox::dtype::float32;
  std::vector<halox::index_t> shape;
  std::vector<halox::index_t> strides; ///< in elements
  bool writable = true;
  std::string device = "cpu"; ///< "cpu" for NumPy arrays; torch's device type otherwise
};

/// Reads a NumPy array (or any buffer-protocol object) or a torch tensor without copying.
/// Throws `halox::error` naming what is unusable (negative strides, unknown element type, ...).
local_buffer buffer_of(py::handle obj);

/// A view of `obj` as this rank's buffer of `desc`. Throws `halox::error`, naming `what`, the
/// mismatch and the fix, unless dtype, local shape and strides match and the memory is usable
/// (writable when `writable`; on the device when `memory` is device).
halox::tensor_view view_of(py::handle obj, halox::tensor_desc const& desc, std::string const& what,
                           bool writable, halox::memory_space memory);

/// Runs `validate` (which may touch Python objects) as a collective check over `comm`: every
/// rank returns, or every rank throws `halox::error`.
void collective(MPI_Comm comm, std::string const& what, std::function<void()> const& validate);

/// The Python type name of `h` ("ndarray", "Intracomm", ...) for messages.
std::string type_name(py::handle h);

/// "(2, 3, 4)" for messages.
std::string shape_str(std::vector<halox::index_t> const& v);

} // namespace halox_py
