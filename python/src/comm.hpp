#pragma once
/// \file comm.hpp
/// halox.Comm: the package's own communicator, so that halox runs on any MPI without mpi4py.
/// Everything that takes a communicator accepts a halox.Comm, an mpi4py communicator (when
/// mpi4py runs on halox's MPI) or an integer Fortran handle (`comm.py2f()` of any binding).

#include <halox/halox.hpp>

#include <pybind11/pybind11.h>

#include <memory>

namespace halox_py {

namespace py = pybind11;

/// A communicator seen from Python: either owned (made by split/dup, freed by free() or when
/// the object goes away) or borrowed (COMM_WORLD, another binding's handle, a grid's own
/// communicator), in which case `keep` holds whatever keeps the handle valid.
class py_comm {
public:
  py_comm() = default;
  /// Borrows `c`; `keep` (may be null) keeps its owner alive as long as this object.
  py_comm(MPI_Comm c, std::shared_ptr<void const> keep) : handle_(c), keep_(std::move(keep)) {}
  /// Takes ownership of `c`.
  static py_comm owning(MPI_Comm c);

  /// The handle; throws `halox::error` naming `what` when the communicator was freed.
  [[nodiscard]] MPI_Comm get(char const* what = "Comm") const;
  [[nodiscard]] bool owned() const noexcept { return owner_ != nullptr; }
  [[nodiscard]] bool is_null() const noexcept { return handle_ == MPI_COMM_NULL; }
  /// Frees an owned communicator (collective); forgets a borrowed one.
  void free();

private:
  MPI_Comm handle_ = MPI_COMM_NULL;
  std::shared_ptr<halox::communicator> owner_;
  std::shared_ptr<void const> keep_;
};

/// The MPI_Comm behind a halox.Comm, an mpi4py communicator or an integer Fortran handle
/// (borrowed, not duplicated). Throws `halox::error` naming the object and the fix otherwise,
/// and when an mpi4py communicator belongs to another MPI library than this build's.
MPI_Comm to_comm(py::handle comm);

/// `c` as the communicator type the program uses: an mpi4py object when mpi4py is loaded and
/// runs on halox's MPI, else a halox.Comm. `owned`: the caller is given `c` to free (halox.Comm
/// frees it when collected; mpi4py objects with .Free()). `keep` keeps a borrowed `c` valid.
py::object from_comm(MPI_Comm c, bool owned, std::shared_ptr<void const> keep = nullptr);

/// "mpi4py" when mpi4py is loaded and runs on halox's MPI, else "built-in".
std::string comm_path();

/// Initialises MPI when nobody has (MPI_THREAD_MULTIPLE requested, as mpi4py does) and then
/// finalises it at interpreter exit; leaves an MPI initialised by another binding alone.
void init_mpi(py::module_& m);

/// halox.Comm, comm_world(), as_comm() and the MPI bookkeeping functions.
void bind_comm(py::module_& m);

} // namespace halox_py
