#include "comm.hpp"

#include "buffers.hpp"

#include <pybind11/stl.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace halox_py {

namespace {

std::string first_line(std::string s) {
  auto const nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

/// mpi4py's module when the program has imported it (halox never imports it by itself).
py::object loaded_mpi4py() {
  py::dict modules = py::module_::import("sys").attr("modules");
  if (!modules.contains("mpi4py.MPI")) return py::none();
  return modules["mpi4py.MPI"];
}

/// Whether the loaded mpi4py runs on the MPI library this extension is linked with. The first
/// line of MPI_Get_library_version names the library and its version; two different libraries
/// never print the same one. Asked once: the answer cannot change within a process.
bool mpi4py_matches(py::object const& mpi) {
  static int known = -1;
  if (known < 0) {
    std::string const theirs = first_line(mpi.attr("Get_library_version")().cast<std::string>());
    known = theirs == halox::mpi_library_version() ? 1 : 0;
  }
  return known == 1;
}

bool is_mpi4py_comm(py::handle h) {
  auto const module = py::str(py::type::handle_of(h).attr("__module__")).cast<std::string>();
  return module == "mpi4py.MPI";
}

bool halox_initialised_mpi = false;

MPI_Datatype mpi_type_of(halox::dtype t, char const* what) {
  switch (t) {
  case halox::dtype::float32: return MPI_FLOAT;
  case halox::dtype::float64: return MPI_DOUBLE;
  case halox::dtype::int32: return MPI_INT32_T;
  case halox::dtype::int64: return MPI_INT64_T;
  case halox::dtype::uint8: return MPI_UINT8_T;
  default: break;
  }
  fail(std::string(what) + ": element type " + halox::to_string(t) +
       " has no MPI reduction; convert to float32 or float64 first");
}

MPI_Op mpi_op_of(std::string const& op) {
  if (op == "sum") return MPI_SUM;
  if (op == "max") return MPI_MAX;
  if (op == "min") return MPI_MIN;
  if (op == "prod") return MPI_PROD;
  fail("Comm: unknown reduction op='" + op + "'; use 'sum', 'max', 'min' or 'prod'");
}

/// A host buffer that a collective may read and write in place: contiguous, writable, on the CPU.
local_buffer inplace_buffer(py::handle obj, char const* what) {
  local_buffer b = buffer_of(obj);
  if (b.device != "cpu")
    fail(std::string(what) + ": the tensor lives on device '" + b.device +
         "'; pass a CPU tensor (x.cpu()) or a NumPy array");
  if (!b.writable)
    fail(std::string(what) + ": the array is read-only; pass a writable array (x.copy())");
  halox::index_t expect = 1;
  for (std::size_t d = b.shape.size(); d-- > 0;) {
    if (b.shape[d] > 1 && b.strides[d] != expect)
      fail(std::string(what) + ": the buffer is not contiguous (strides " + shape_str(b.strides) +
           " elements for shape " + shape_str(b.shape) +
           "); pass numpy.ascontiguousarray(x) or x.contiguous()");
    expect *= b.shape[d];
  }
  return b;
}

std::size_t element_count(local_buffer const& b) {
  std::size_t n = 1;
  for (auto e : b.shape) n *= static_cast<std::size_t>(e);
  return n;
}

int checked_count(std::size_t n, char const* what) {
  if (n > static_cast<std::size_t>(INT_MAX))
    fail(std::string(what) + ": " + std::to_string(n) +
         " elements exceed one MPI call's count (2^31 - 1); split the buffer");
  return static_cast<int>(n);
}

void allreduce_inplace(py_comm const& c, py::handle buf, std::string const& op) {
  MPI_Comm const comm = c.get("Comm.allreduce_inplace");
  local_buffer const b = inplace_buffer(buf, "Comm.allreduce_inplace");
  MPI_Datatype const type = mpi_type_of(b.type, "Comm.allreduce_inplace");
  MPI_Op const mop = mpi_op_of(op);
  int const n = checked_count(element_count(b), "Comm.allreduce_inplace");
  if (n == 0) return;
  py::gil_scoped_release nogil;
  HALOX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, b.data, n, type, mop, comm));
}

void bcast_inplace(py_comm const& c, py::handle buf, int root) {
  MPI_Comm const comm = c.get("Comm.bcast_inplace");
  local_buffer const b = inplace_buffer(buf, "Comm.bcast_inplace");
  std::size_t const bytes = element_count(b) * halox::size_of(b.type);
  int const n = checked_count(bytes, "Comm.bcast_inplace");
  if (n == 0) return;
  py::gil_scoped_release nogil;
  HALOX_MPI_CHECK(MPI_Bcast(b.data, n, MPI_BYTE, root, comm));
}

/// Every rank's `send` (a contiguous buffer of n elements) into `recv` (contiguous, size * n
/// elements of the same type), in rank order: one MPI_Allgather, nothing pickled or allocated.
void allgather_into(py_comm const& c, py::handle send, py::handle recv) {
  MPI_Comm const comm = c.get("Comm.allgather_into");
  local_buffer const s = inplace_buffer(send, "Comm.allgather_into (send)");
  local_buffer const r = inplace_buffer(recv, "Comm.allgather_into (recv)");
  int size = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  std::size_t const n = element_count(s);
  if (r.type != s.type || element_count(r) != n * static_cast<std::size_t>(size))
    fail("Comm.allgather_into: recv holds " + std::to_string(element_count(r)) + " " +
         halox::to_string(r.type) + " elements but " + std::to_string(size) + " ranks send " +
         std::to_string(n) + " " + halox::to_string(s.type) +
         " each; pass recv of the send's dtype with size * send.numel() elements");
  std::size_t const bytes = n * halox::size_of(s.type);
  int const count = checked_count(bytes, "Comm.allgather_into");
  if (count == 0) return;
  py::gil_scoped_release nogil;
  HALOX_MPI_CHECK(MPI_Allgather(s.data, count, MPI_BYTE, r.data, count, MPI_BYTE, comm));
}

/// mpi4py's lowercase semantics: a new value, the reduction of every rank's `value`.
py::object allreduce_value(py_comm const& c, py::handle value, std::string const& op) {
  if (py::hasattr(value, "data_ptr") && py::hasattr(value, "element_size")) {
    py::object t = value.attr("detach")().attr("clone")().attr("contiguous")();
    allreduce_inplace(c, t, op);
    return t;
  }
  py::module_ np = py::module_::import("numpy");
  // A C-ordered copy (numpy.ascontiguousarray would turn a number into a 1-element array).
  py::object a =
      np.attr("array")(py::isinstance<py::bool_>(value) ? py::int_(value.cast<bool>())
                                                        : py::reinterpret_borrow<py::object>(value),
                       py::arg("order") = "C");
  if (a.attr("dtype").attr("kind").cast<std::string>() == "b") a = a.attr("astype")("int64");
  allreduce_inplace(c, a, op);
  if (a.attr("ndim").cast<int>() == 0) return a.attr("item")();
  return a;
}

std::string pickled(py::handle obj) {
  py::module_ pickle = py::module_::import("pickle");
  return pickle.attr("dumps")(obj, pickle.attr("HIGHEST_PROTOCOL")).cast<std::string>();
}

py::object unpickled(char const* data, std::size_t n) {
  return py::module_::import("pickle").attr("loads")(py::bytes(data, n));
}

py::list allgather_object(py_comm const& c, py::handle obj) {
  MPI_Comm const comm = c.get("Comm.allgather");
  std::string const mine = pickled(obj);
  int size = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  long long const n = static_cast<long long>(mine.size());
  std::vector<long long> lens(static_cast<std::size_t>(size));
  std::vector<int> counts(lens.size()), displs(lens.size());
  {
    py::gil_scoped_release nogil;
    HALOX_MPI_CHECK(MPI_Allgather(&n, 1, MPI_LONG_LONG, lens.data(), 1, MPI_LONG_LONG, comm));
  }
  long long total = 0;
  for (std::size_t r = 0; r < lens.size(); ++r) {
    if (total + lens[r] > INT_MAX)
      fail("Comm.allgather: the pickled objects of all ranks exceed 2 GiB; gather arrays with "
           "halox.gather or in pieces");
    displs[r] = static_cast<int>(total);
    counts[r] = static_cast<int>(lens[r]);
    total += lens[r];
  }
  std::string all(static_cast<std::size_t>(total), '\0');
  {
    py::gil_scoped_release nogil;
    HALOX_MPI_CHECK(MPI_Allgatherv(mine.data(), static_cast<int>(n), MPI_BYTE, all.data(),
                                   counts.data(), displs.data(), MPI_BYTE, comm));
  }
  py::list out;
  for (std::size_t r = 0; r < lens.size(); ++r)
    out.append(unpickled(all.data() + displs[r], static_cast<std::size_t>(counts[r])));
  return out;
}

py::object bcast_object(py_comm const& c, py::handle obj, int root) {
  MPI_Comm const comm = c.get("Comm.bcast");
  int me = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &me));
  std::string data = me == root ? pickled(obj) : std::string();
  long long n = static_cast<long long>(data.size());
  {
    py::gil_scoped_release nogil;
    HALOX_MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm));
  }
  if (n > INT_MAX) fail("Comm.bcast: the pickled object exceeds 2 GiB; broadcast arrays in place");
  data.resize(static_cast<std::size_t>(n));
  {
    py::gil_scoped_release nogil;
    HALOX_MPI_CHECK(MPI_Bcast(data.data(), static_cast<int>(n), MPI_BYTE, root, comm));
  }
  if (me == root) return py::reinterpret_borrow<py::object>(obj);
  return unpickled(data.data(), data.size());
}

int comm_rank(MPI_Comm c) {
  int r = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(c, &r));
  return r;
}

int comm_size(MPI_Comm c) {
  int s = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(c, &s));
  return s;
}

} // namespace

py_comm py_comm::owning(MPI_Comm c) {
  py_comm p;
  p.handle_ = c;
  p.owner_ = std::make_shared<halox::communicator>(c);
  return p;
}

MPI_Comm py_comm::get(char const* what) const {
  if (handle_ == MPI_COMM_NULL)
    fail(std::string(what) + ": the communicator was freed (or split() left this process out); "
                             "use a valid one");
  return handle_;
}

void py_comm::free() {
  owner_.reset();
  keep_.reset();
  handle_ = MPI_COMM_NULL;
}

MPI_Comm to_comm(py::handle comm) {
  if (py::isinstance<py_comm>(comm)) return comm.cast<py_comm const&>().get("halox.Comm");
  if (py::isinstance<py::int_>(comm) && !py::isinstance<py::bool_>(comm)) {
    auto const f = comm.cast<long long>();
    if (f < INT_MIN || f > INT_MAX)
      fail("communicator handle " + std::to_string(f) +
           " is not a Fortran handle (comm.py2f() of an MPI binding)");
    if (f == MPI_Comm_c2f(MPI_COMM_NULL))
      fail("communicator handle " + std::to_string(f) + " is MPI_COMM_NULL; pass a valid one");
    return MPI_Comm_f2c(static_cast<MPI_Fint>(f));
  }
  if (is_mpi4py_comm(comm)) {
    py::object mpi = loaded_mpi4py();
    if (!mpi4py_matches(mpi))
      fail("this mpi4py runs on '" +
           first_line(mpi.attr("Get_library_version")().cast<std::string>()) +
           "' but halox was built with '" + halox::mpi_library_version() +
           "'; two MPI libraries cannot share a process: pass halox.comm_world() (or "
           "halox.Comm objects) instead, or build halox for mpi4py's MPI");
    auto const addr = mpi.attr("_addressof")(comm).cast<std::uintptr_t>();
    MPI_Comm const c = *reinterpret_cast<MPI_Comm*>(addr);
    if (c == MPI_COMM_NULL) fail("the mpi4py communicator is MPI.COMM_NULL; pass a valid one");
    return c;
  }
  fail("expected a communicator (halox.Comm such as halox.comm_world(), an mpi4py communicator "
       "or an integer handle from comm.py2f()), got a " +
       type_name(comm));
}

std::string comm_path() {
  py::object mpi = loaded_mpi4py();
  return !mpi.is_none() && mpi4py_matches(mpi) ? "mpi4py" : "built-in";
}

py::object from_comm(MPI_Comm c, bool owned, std::shared_ptr<void const> keep) {
  if (comm_path() == "mpi4py") {
    // The mpi4py object only names the handle: a borrowed one stays valid while its owner (the
    // grid) lives, an owned one is the caller's to .Free(), as for any mpi4py communicator.
    py::object mpi = loaded_mpi4py();
    py::object obj = mpi.attr("Intracomm")();
    auto const addr = mpi.attr("_addressof")(obj).cast<std::uintptr_t>();
    *reinterpret_cast<MPI_Comm*>(addr) = c;
    return obj;
  }
  return py::cast(owned ? py_comm::owning(c) : py_comm(c, std::move(keep)));
}

void init_mpi(py::module_& m) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (fin)
    throw py::import_error("halox: MPI was already finalised in this process; import halox "
                           "before MPI is finalised");
  int provided = MPI_THREAD_SINGLE;
  if (!init) {
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      throw py::import_error("halox: MPI_Init_thread failed; run under mpiexec or check the "
                             "MPI installation");
    halox_initialised_mpi = true;
    // Finalise at exit, after collecting what is unreachable so that plans and contexts free
    // their MPI resources first. Objects still referenced then are released later without MPI
    // calls (halox skips them once MPI is finalised).
    py::module_::import("atexit").attr("register")(py::cpp_function([] {
      py::module_::import("gc").attr("collect")();
      int f = 0;
      MPI_Finalized(&f);
      if (!f) MPI_Finalize();
    }));
  } else {
    MPI_Query_thread(&provided);
  }
  char const* level = provided == MPI_THREAD_MULTIPLE     ? "multiple"
                      : provided == MPI_THREAD_SERIALIZED ? "serialized"
                      : provided == MPI_THREAD_FUNNELED   ? "funneled"
                                                          : "single";
  m.attr("_MPI_THREAD_LEVEL") = level;
}

void bind_comm(py::module_& m) {
  py::class_<py_comm>(m, "Comm",
                      "An MPI communicator held by halox, for programs without mpi4py (or on "
                      "an MPI that mpi4py does not use). Its collectives are the few a "
                      "training loop needs; halox is not an MPI binding.")
      .def_property_readonly(
          "rank", [](py_comm const& c) { return comm_rank(c.get("Comm.rank")); },
          "Rank of this process.")
      .def_property_readonly(
          "size", [](py_comm const& c) { return comm_size(c.get("Comm.size")); },
          "Number of processes.")
      .def_property_readonly("owned", &py_comm::owned,
                             "Whether this object frees the communicator (split/dup results).")
      .def(
          "split",
          [](py_comm const& c, py::object color, int key) -> py::object {
            MPI_Comm const comm = c.get("Comm.split");
            int const col = color.is_none() ? MPI_UNDEFINED : color.cast<int>();
            if (col < 0 && col != MPI_UNDEFINED)
              fail("Comm.split: color=" + std::to_string(col) +
                   " is negative; use a colour >= 0, or None to be left out");
            MPI_Comm out = MPI_COMM_NULL;
            {
              py::gil_scoped_release nogil;
              HALOX_MPI_CHECK(MPI_Comm_split(comm, col, key, &out));
            }
            if (out == MPI_COMM_NULL) return py::none();
            return py::cast(py_comm::owning(out));
          },
          py::arg("color"), py::arg("key") = 0,
          "Collective. The processes with the same `color` form a new communicator, ordered by "
          "`key` then by rank; `color=None` leaves this process out (returns None).")
      .def(
          "dup",
          [](py_comm const& c) {
            MPI_Comm const comm = c.get("Comm.dup");
            MPI_Comm out = MPI_COMM_NULL;
            {
              py::gil_scoped_release nogil;
              HALOX_MPI_CHECK(MPI_Comm_dup(comm, &out));
            }
            return py_comm::owning(out);
          },
          "Collective. A new communicator with the same processes.")
      .def(
          "barrier",
          [](py_comm const& c) {
            MPI_Comm const comm = c.get("Comm.barrier");
            py::gil_scoped_release nogil;
            HALOX_MPI_CHECK(MPI_Barrier(comm));
          },
          "Collective. Returns when every process has called it.")
      .def(
          "abort",
          [](py_comm const& c, int code) {
            MPI_Comm const comm = c.get("Comm.abort");
            std::fflush(stdout);
            std::fflush(stderr);
            MPI_Abort(comm, code);
          },
          py::arg("code") = 1,
          "Ends every process of the job (MPI_Abort) with exit status `code`: for an error "
          "handler when the other processes may be waiting for this one.")
      .def("allreduce", &allreduce_value, py::arg("value"), py::arg("op") = "sum",
           "Collective. The reduction ('sum', 'max', 'min', 'prod') of every process's `value` "
           "(a number, NumPy array or CPU torch tensor), as a new object of the same kind.")
      .def("allreduce_inplace", &allreduce_inplace, py::arg("buffer"), py::arg("op") = "sum",
           "Collective. Reduces a contiguous, writable NumPy array or CPU tensor in place.")
      .def("bcast", &bcast_object, py::arg("obj"), py::arg("root") = 0,
           "Collective. `root`'s picklable object on every process.")
      .def("bcast_inplace", &bcast_inplace, py::arg("buffer"), py::arg("root") = 0,
           "Collective. Overwrites a contiguous NumPy array or CPU tensor with `root`'s.")
      .def("allgather_into", &allgather_into, py::arg("send"), py::arg("recv"),
           "Collective. Every process's `send` (a contiguous NumPy array or CPU tensor) into "
           "`recv` (size x send's elements, same dtype), in rank order; nothing is pickled.")
      .def("allgather", &allgather_object, py::arg("obj"),
           "Collective. The list of every process's picklable object, in rank order.")
      .def(
          "py2f",
          [](py_comm const& c) { return static_cast<long long>(MPI_Comm_c2f(c.get("Comm.py2f"))); },
          "The Fortran handle (an integer), which any MPI binding of the same MPI accepts.")
      .def("free", &py_comm::free,
           "Frees an owned communicator (collective) or forgets a borrowed one; the object is "
           "unusable afterwards.")
      .def("__eq__",
           [](py_comm const& a, py::handle b) {
             if (!py::isinstance<py_comm>(b)) return false;
             auto const& o = b.cast<py_comm const&>();
             return !a.is_null() && !o.is_null() && a.get() == o.get();
           })
      .def("__hash__",
           [](py_comm const& c) {
             return c.is_null() ? 0LL : static_cast<long long>(MPI_Comm_c2f(c.get()));
           })
      .def("__repr__", [](py_comm const& c) -> std::string {
        if (c.is_null()) return "Comm(freed)";
        return "Comm(rank=" + std::to_string(comm_rank(c.get())) +
               ", size=" + std::to_string(comm_size(c.get())) + (c.owned() ? ", owned" : "") + ")";
      });

  m.def(
      "comm_world", [] { return py_comm(MPI_COMM_WORLD, nullptr); },
      "All processes of the job (MPI_COMM_WORLD), as a halox.Comm.");
  m.def(
      "comm_self", [] { return py_comm(MPI_COMM_SELF, nullptr); },
      "This process alone (MPI_COMM_SELF), as a halox.Comm.");
  m.def(
      "as_comm",
      [](py::object comm) -> py::object {
        if (py::isinstance<py_comm>(comm)) return comm;
        MPI_Comm const c = to_comm(comm);
        // Keep the original object alive: its owner decides when the handle is freed.
        auto keep = std::shared_ptr<void const>(new py::object(comm), [](void const* p) {
          py::gil_scoped_acquire gil;
          delete static_cast<py::object const*>(p);
        });
        return py::cast(py_comm(c, std::move(keep)));
      },
      py::arg("comm"),
      "A halox.Comm for any accepted communicator (halox.Comm, mpi4py, integer handle), "
      "borrowing its handle.");
  m.def("comm_path", &comm_path,
        "'mpi4py' when mpi4py is loaded and runs on halox's MPI (halox then hands out mpi4py "
        "communicators), else 'built-in'.");
  m.def(
      "_mpi_initialised_by_halox", [] { return halox_initialised_mpi; },
      "Whether importing halox initialised MPI (it then finalises it at exit).");
}

} // namespace halox_py
