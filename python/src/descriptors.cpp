// Bindings of the describing half of the API: enums, boxes, process grids, distributions,
// tensor descriptors and contexts.
#include "bindings.hpp"
#include "buffers.hpp"
#include "comm.hpp"

#include <pybind11/stl.h>

namespace halox_py {

namespace {

py::tuple to_tuple(halox::index_t const* v, int n) {
  py::tuple t(n);
  for (int i = 0; i < n; ++i) t[i] = v[i];
  return t;
}

py::tuple box_slices(halox::box const& b, std::vector<halox::index_t> const& origin) {
  py::tuple t(b.nd);
  for (int d = 0; d < b.nd; ++d) {
    halox::index_t const o = origin.empty() ? 0 : origin[d];
    t[d] = py::slice(b.lo[d] - o, b.hi[d] - o, 1);
  }
  return t;
}

std::vector<halox::dim_options> to_options(py::handle opts, std::size_t ndim) {
  std::vector<halox::dim_options> out;
  if (opts.is_none()) return out;
  for (auto o : opts)
    out.push_back(o.is_none() ? halox::dim_options{} : o.cast<halox::dim_options>());
  if (!out.empty() && out.size() != ndim)
    fail("options has " + std::to_string(out.size()) + " entries but the tensor has " +
         std::to_string(ndim) + " dimensions; pass one DimOptions (or None) per dimension");
  return out;
}

std::vector<halox::index_t> vec_or_empty(py::handle h) {
  if (h.is_none()) return {};
  return h.cast<std::vector<halox::index_t>>();
}

std::vector<int> ints_or_empty(py::handle h) {
  if (h.is_none()) return {};
  return h.cast<std::vector<int>>();
}

std::string numpy_name(halox::dtype t) {
  if (t == halox::dtype::bfloat16)
    fail("NumPy has no bfloat16; allocate bfloat16 buffers with torch instead");
  return halox::to_string(t);
}

} // namespace

void bind_descriptors(py::module_& m) {
  py::enum_<halox::dtype>(m, "dtype", "Element type of a distributed tensor.")
      .value("float32", halox::dtype::float32, "C float, 4 bytes.")
      .value("float64", halox::dtype::float64, "C double, 8 bytes.")
      .value("float16", halox::dtype::float16, "IEEE 754 half precision, 2 bytes.")
      .value("bfloat16", halox::dtype::bfloat16, "bfloat16 (the upper half of a float32), 2 bytes.")
      .value("int32", halox::dtype::int32, "32-bit signed integer, 4 bytes.")
      .value("int64", halox::dtype::int64, "64-bit signed integer, 8 bytes.")
      .value("uint8", halox::dtype::uint8, "8-bit unsigned integer, 1 byte.");
  m.def(
      "size_of", [](py::handle t) { return halox::size_of(to_dtype(t)); },
      "Bytes per element of a dtype.");

  py::class_<halox::box>(m, "Box", "A half-open box [lo, hi) in global coordinates.")
      .def_property_readonly(
          "lo", [](halox::box const& b) { return to_tuple(b.lo, b.nd); },
          "First index per dimension (tuple of int).")
      .def_property_readonly(
          "hi", [](halox::box const& b) { return to_tuple(b.hi, b.nd); },
          "One past the last index per dimension (tuple of int).")
      .def_property_readonly(
          "ndim", [](halox::box const& b) { return b.nd; }, "Number of dimensions in use (int).")
      .def_property_readonly(
          "shape",
          [](halox::box const& b) {
            py::tuple t(b.nd);
            for (int d = 0; d < b.nd; ++d) t[d] = b.extent(d);
            return t;
          },
          "Extent per dimension (tuple of int; 0 where the box is empty, "
          "saturated at 2**63 - 1).")
      .def_property_readonly("volume", &halox::box::volume,
                             "Number of cells (int; saturated at 2**63 - 1).")
      .def_property_readonly("empty", &halox::box::empty, "True when the box holds no cell.")
      .def(
          "slices",
          [](halox::box const& b, py::handle origin) {
            return box_slices(b, vec_or_empty(origin));
          },
          py::arg("origin") = py::none(),
          "Slices selecting the box from an array whose first element sits at global `origin` "
          "(default: the global origin).")
      .def("__eq__", [](halox::box const& a, halox::box const& b) { return a == b; })
      .def("__repr__", [](halox::box const& b) {
        std::string s = "Box(";
        for (int d = 0; d < b.nd; ++d)
          s += (d ? ", " : "") + std::to_string(b.lo[d]) + ":" + std::to_string(b.hi[d]);
        return s + ")";
      });

  m.def(
      "choose_grid",
      [](int nprocs, std::vector<int> dims, std::vector<halox::index_t> const& shape, py::handle lo,
         py::handle hi) {
        return halox::choose_grid(nprocs, std::move(dims), shape, ints_or_empty(lo),
                                  ints_or_empty(hi));
      },
      py::arg("nprocs"), py::arg("dims"), py::arg("shape"), py::arg("halo_lo") = py::none(),
      py::arg("halo_hi") = py::none(),
      "Chooses the zero entries of `dims` for `nprocs` processes and a tensor of `shape`.");

  py::class_<halox::process_grid>(m, "ProcessGrid",
                                  "A Cartesian grid of processes over a communicator.")
      .def(py::init([](py::handle comm, std::vector<int> dims) {
             return halox::process_grid(to_comm(comm), std::move(dims));
           }),
           py::arg("comm"), py::arg("dims"),
           "Collective. `dims` are positive with product equal to the communicator size.")
      .def_static(
          "create",
          [](py::handle comm, std::vector<int> dims, std::vector<halox::index_t> const& shape,
             py::handle lo, py::handle hi) {
            return halox::process_grid::create(to_comm(comm), std::move(dims), shape,
                                               ints_or_empty(lo), ints_or_empty(hi));
          },
          py::arg("comm"), py::arg("dims"), py::arg("shape"), py::arg("halo_lo") = py::none(),
          py::arg("halo_hi") = py::none(),
          "Collective. Zeros in `dims` are chosen for a tensor of `shape` with these halo widths.")
      .def_property_readonly("rank", &halox::process_grid::rank,
                             "Calling process's rank in the grid's communicator (int).")
      .def_property_readonly("size", &halox::process_grid::size, "Number of processes (int).")
      .def_property_readonly("ndim", &halox::process_grid::ndim, "Number of grid dimensions (int).")
      .def_property_readonly("dims", &halox::process_grid::dims,
                             "Processes per dimension (list of int).")
      .def(
          "coords",
          [](halox::process_grid const& g, py::handle rank) {
            return rank.is_none() ? g.coords() : g.coords(rank.cast<int>());
          },
          py::arg("rank") = py::none(), "Grid coordinates of `rank` (default: this process).")
      .def("rank_of", &halox::process_grid::rank_of, py::arg("coords"),
           "Rank (int) at grid coordinates `coords` (each 0 <= coords[d] < dims[d]).")
      .def_property_readonly(
          "comm",
          [](halox::process_grid const& g) {
            return from_comm(g.comm(), false, std::make_shared<halox::process_grid const>(g));
          },
          "The grid's private communicator (halox.Comm, or mpi4py's type when mpi4py is in "
          "use), owned by the grid: do not free it.")
      .def(
          "sub_comm",
          [](halox::process_grid const& g, std::vector<bool> const& keep) {
            halox::communicator sub = g.sub_comm(keep);
            MPI_Comm dup = MPI_COMM_NULL;
            HALOX_MPI_CHECK(MPI_Comm_dup(sub.get(), &dup));
            return from_comm(dup, true);
          },
          py::arg("keep"),
          "Collective. A new communicator spanning the dimensions where keep[d] is true (a "
          "halox.Comm that frees itself, or with mpi4py an mpi4py object to .Free()).")
      .def("__repr__", [](halox::process_grid const& g) {
        return "ProcessGrid(dims=" + shape_str({g.dims().begin(), g.dims().end()}) +
               ", rank=" + std::to_string(g.rank()) + ")";
      });

  py::class_<halox::dim_options>(m, "DimOptions",
                                 "How one dimension is padded and split (halos, periodicity, "
                                 "explicit part sizes).")
      .def(py::init([](int lo, int hi, bool periodic, py::handle sizes) {
             halox::dim_options o;
             o.halo_lo = lo;
             o.halo_hi = hi;
             o.periodic = periodic;
             o.sizes = vec_or_empty(sizes);
             return o;
           }),
           py::arg("halo_lo") = 0, py::arg("halo_hi") = 0, py::arg("periodic") = false,
           py::arg("sizes") = py::none())
      .def_static("halo", &halox::dim_options::halo, py::arg("width"), py::arg("periodic") = false,
                  "Symmetric halo of `width`.")
      .def_readwrite("halo_lo", &halox::dim_options::halo_lo,
                     "Ghost cells before the owned block (int, elements).")
      .def_readwrite("halo_hi", &halox::dim_options::halo_hi,
                     "Ghost cells after the owned block (int, elements).")
      .def_readwrite("periodic", &halox::dim_options::periodic,
                     "Wrap around at the global boundary (bool).")
      .def_readwrite("sizes", &halox::dim_options::sizes,
                     "Explicit part sizes (list of int, summing to the extent); empty: balanced "
                     "blocks.")
      .def("__repr__", [](halox::dim_options const& o) {
        return "DimOptions(halo_lo=" + std::to_string(o.halo_lo) +
               ", halo_hi=" + std::to_string(o.halo_hi) +
               ", periodic=" + (o.periodic ? "True" : "False") + ")";
      });

  py::class_<halox::distribution>(m, "Distribution",
                                  "The global, MPI-free description of a block-distributed tensor.")
      .def(py::init([](std::vector<halox::index_t> shape, py::handle type, std::vector<int> parts,
                       py::handle options) {
             auto opts = to_options(options, shape.size());
             return halox::distribution(std::move(shape), to_dtype(type), std::move(parts),
                                        std::move(opts));
           }),
           py::arg("shape"), py::arg("dtype"), py::arg("parts"), py::arg("options") = py::none())
      .def_property_readonly("ndim", &halox::distribution::ndim, "Tensor rank (int, 1..8).")
      .def_property_readonly("shape", &halox::distribution::shape,
                             "Global shape (list of int, elements).")
      .def_property_readonly("dtype", &halox::distribution::type, "Element type (halox.dtype).")
      .def_property_readonly("parts", &halox::distribution::parts,
                             "Parts (grid extent) per dimension (list of int).")
      .def_property_readonly("nranks", &halox::distribution::nranks,
                             "Number of ranks of the grid (int, the product of parts).")
      .def("options", &halox::distribution::options, py::arg("dim"),
           "Options of dimension `dim` (a DimOptions: halos, periodicity, explicit sizes).")
      .def("part_start", &halox::distribution::part_start, py::arg("dim"), py::arg("part"),
           "First global index (int) of part `part` along `dim` (0 <= part <= parts[dim]; "
           "parts[dim] gives the extent).")
      .def("part_size", &halox::distribution::part_size, py::arg("dim"), py::arg("part"),
           "Number of elements (int, may be 0) of part `part` along `dim`.")
      .def("part_of", &halox::distribution::part_of, py::arg("dim"), py::arg("index"),
           "Part (int) owning global index `index` along `dim` (0 <= index < extent); of empty "
           "parts sharing a start with a non-empty one, the non-empty part.")
      .def("coords_of", &halox::distribution::coords_of, py::arg("rank"),
           "Grid coordinates of `rank` (list of int).")
      .def("rank_of", &halox::distribution::rank_of, py::arg("coords"),
           "Rank (int) at grid coordinates `coords`.")
      .def("owner", &halox::distribution::owner, py::arg("index"),
           "Rank (int) owning the global index `index` (one entry per dimension).")
      .def("owned_box", &halox::distribution::owned_box, py::arg("rank"),
           "Owned block of `rank` in global coordinates (a Box; empty for a rank that owns "
           "nothing).")
      .def("allocated_box", &halox::distribution::allocated_box, py::arg("rank"),
           "Owned block plus halos of `rank` in global coordinates (a Box; may reach below 0 or "
           "past the extent; empty for a rank that owns nothing).")
      .def("local_shape", &halox::distribution::local_shape, py::arg("rank"),
           "Allocated local shape of `rank` (list of int: owned + halos per dimension; zeros for "
           "a rank that owns nothing).")
      .def("empty", &halox::distribution::empty, py::arg("rank"),
           "True when `rank` owns no element.")
      .def_property_readonly("hash", &halox::distribution::hash,
                             "A 64-bit hash of the whole global description (int), as used for "
                             "the cross-rank consistency check and as a plan-cache key.")
      .def("__eq__",
           [](halox::distribution const& a, halox::distribution const& b) { return a == b; })
      .def("__str__", &halox::distribution::str)
      .def("__repr__",
           [](halox::distribution const& d) { return "Distribution(" + d.str() + ")"; });

  py::class_<halox::tensor_desc>(m, "TensorDesc",
                                 "A distributed tensor as seen by the calling rank (collective to "
                                 "build).")
      .def(py::init([](halox::process_grid const& grid, std::vector<halox::index_t> shape,
                       py::handle type, py::handle options, py::handle strides) {
             auto opts = to_options(options, shape.size());
             return halox::tensor_desc(grid, std::move(shape), to_dtype(type), std::move(opts),
                                       vec_or_empty(strides));
           }),
           py::arg("grid"), py::arg("shape"), py::arg("dtype"), py::arg("options") = py::none(),
           py::arg("strides") = py::none(),
           "Collective. `options`: one DimOptions (or None) per dimension; `strides`: element "
           "strides of this rank's buffer (default row-major).")
      .def_property_readonly("dist", &halox::tensor_desc::dist,
                             "The global description (a Distribution).")
      .def_property_readonly("grid", &halox::tensor_desc::grid, "The process grid (a ProcessGrid).")
      .def_property_readonly("ndim", &halox::tensor_desc::ndim, "Tensor rank (int).")
      .def_property_readonly("dtype", &halox::tensor_desc::type, "Element type (halox.dtype).")
      .def_property_readonly("shape", &halox::tensor_desc::shape,
                             "Global shape (list of int, elements).")
      .def(
          "owned_box",
          [](halox::tensor_desc const& t, py::handle rank) {
            return rank.is_none() ? t.owned_box() : t.owned_box(rank.cast<int>());
          },
          py::arg("rank") = py::none(), "Owned block (global coordinates) of `rank` or this rank.")
      .def("owner", &halox::tensor_desc::owner, py::arg("index"),
           "Rank (int) owning the global index `index` (one entry per dimension).")
      .def_property_readonly("local_shape", &halox::tensor_desc::local_shape,
                             "Allocated local shape of this rank (list of int: owned + halos).")
      .def_property_readonly("strides", &halox::tensor_desc::strides,
                             "Strides of this rank's local buffer (list of int, in elements).")
      .def_property_readonly("owned_offset", &halox::tensor_desc::owned_offset,
                             "Per-dimension offset of the first owned cell inside the local "
                             "buffer (list of int: halo_lo, or 0 on a rank that owns nothing).")
      .def_property_readonly("owned_offset_elements", &halox::tensor_desc::owned_offset_elements,
                             "Offset of the first owned cell from the local buffer's start (int, "
                             "in elements).")
      .def_property_readonly("local_elements", &halox::tensor_desc::local_elements,
                             "Elements the local buffer must hold (int).")
      .def_property_readonly("local_bytes", &halox::tensor_desc::local_bytes,
                             "Bytes the local buffer must hold (int).")
      .def("local_offset", &halox::tensor_desc::local_offset, py::arg("index"),
           "Offset (int, in elements) of global index `index` inside the local buffer; the index "
           "may lie in the halo (then it is taken relative to the allocated box, without "
           "periodic wrapping).")
      .def_property_readonly("empty", &halox::tensor_desc::empty,
                             "True when this rank owns nothing.")
      .def_property_readonly(
          "owned_slices",
          [](halox::tensor_desc const& t) {
            // The owned block inside the local buffer: it starts at owned_offset().
            halox::box const b = t.owned_box();
            py::tuple s(t.ndim());
            auto const off = t.owned_offset();
            for (int d = 0; d < t.ndim(); ++d) s[d] = py::slice(off[d], off[d] + b.extent(d), 1);
            return s;
          },
          "Slices selecting this rank's owned block inside its local buffer.")
      .def_property_readonly(
          "global_slices",
          [](halox::tensor_desc const& t) { return box_slices(t.owned_box(), {}); },
          "Slices selecting this rank's owned block inside the global tensor.")
      .def(
          "zeros",
          [](halox::tensor_desc const& t) {
            return py::module_::import("numpy").attr("zeros")(py::cast(t.local_shape()),
                                                              py::str(numpy_name(t.type())));
          },
          "A zero-filled NumPy array shaped like this rank's local buffer (owned block + halos).")
      .def("__repr__",
           [](halox::tensor_desc const& t) { return "TensorDesc(" + t.dist().str() + ")"; });

  py::enum_<halox::memory_kind>(m, "MemoryKind", "Kinds of memory a plan may ask an allocator for.")
      .value("host", halox::memory_kind::host,
             "Ordinary CPU memory (pack buffers of host plans, scratch).")
      .value("pinned_host", halox::memory_kind::pinned_host,
             "Page-locked CPU memory (staging of the staged_mpi backend).")
      .value("device", halox::memory_kind::device,
             "CUDA device memory (pack streams and descriptors of device plans).");

  py::class_<halox::context>(m, "Context",
                             "Transport resources shared by the plans built on one communicator.")
      .def(py::init([](py::handle comm) { return halox::context(to_comm(comm)); }), py::arg("comm"),
           "Collective: duplicates the communicator.")
      .def_static(
          "of", [](py::handle comm) { return halox::context::of(to_comm(comm)); }, py::arg("comm"),
          "The default context of a communicator (collective on first use).")
      .def_property_readonly("rank", &halox::context::rank,
                             "Calling process's rank in the context's communicator (int).")
      .def_property_readonly("size", &halox::context::size, "Number of processes (int).")
      .def_property_readonly("plans_built", &halox::context::plans_built,
                             "Number of plans built from this context so far (int; each takes "
                             "one message tag).")
      .def_property_readonly("has_nccl", &halox::context::has_nccl,
                             "True when the NCCL communicator exists (a device plan with the "
                             "nccl backend was built).")
      .def("bytes_in_use", &halox::context::bytes_in_use, py::arg("kind"),
           "Bytes (int) currently held by plans of this context in memory of `kind` (a "
           "MemoryKind).")
      .def("describe", &halox::context::describe,
           "One line (str): communicator size, plans built, memory in use, NCCL state, selected "
           "device.")
      .def("__eq__", [](halox::context const& a, halox::context const& b) { return a == b; });
}

} // namespace halox_py
