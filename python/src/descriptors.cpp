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
      .value("float32", halox::dtype::float32)
      .value("float64", halox::dtype::float64)
      .value("float16", halox::dtype::float16)
      .value("bfloat16", halox::dtype::bfloat16)
      .value("int32", halox::dtype::int32)
      .value("int64", halox::dtype::int64)
      .value("uint8", halox::dtype::uint8);
  m.def(
      "size_of", [](py::handle t) { return halox::size_of(to_dtype(t)); },
      "Bytes per element of a dtype.");

  py::class_<halox::box>(m, "Box", "A half-open box [lo, hi) in global coordinates.")
      .def_property_readonly("lo", [](halox::box const& b) { return to_tuple(b.lo, b.nd); })
      .def_property_readonly("hi", [](halox::box const& b) { return to_tuple(b.hi, b.nd); })
      .def_property_readonly("ndim", [](halox::box const& b) { return b.nd; })
      .def_property_readonly("shape",
                             [](halox::box const& b) {
                               py::tuple t(b.nd);
                               for (int d = 0; d < b.nd; ++d) t[d] = b.extent(d);
                               return t;
                             })
      .def_property_readonly("volume", &halox::box::volume)
      .def_property_readonly("empty", &halox::box::empty)
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
      .def_property_readonly("rank", &halox::process_grid::rank)
      .def_property_readonly("size", &halox::process_grid::size)
      .def_property_readonly("ndim", &halox::process_grid::ndim)
      .def_property_readonly("dims", &halox::process_grid::dims)
      .def(
          "coords",
          [](halox::process_grid const& g, py::handle rank) {
            return rank.is_none() ? g.coords() : g.coords(rank.cast<int>());
          },
          py::arg("rank") = py::none(), "Grid coordinates of `rank` (default: this process).")
      .def("rank_of", &halox::process_grid::rank_of, py::arg("coords"))
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
      .def_readwrite("halo_lo", &halox::dim_options::halo_lo)
      .def_readwrite("halo_hi", &halox::dim_options::halo_hi)
      .def_readwrite("periodic", &halox::dim_options::periodic)
      .def_readwrite("sizes", &halox::dim_options::sizes)
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
      .def_property_readonly("ndim", &halox::distribution::ndim)
      .def_property_readonly("shape", &halox::distribution::shape)
      .def_property_readonly("dtype", &halox::distribution::type)
      .def_property_readonly("parts", &halox::distribution::parts)
      .def_property_readonly("nranks", &halox::distribution::nranks)
      .def("options", &halox::distribution::options, py::arg("dim"))
      .def("part_start", &halox::distribution::part_start, py::arg("dim"), py::arg("part"))
      .def("part_size", &halox::distribution::part_size, py::arg("dim"), py::arg("part"))
      .def("part_of", &halox::distribution::part_of, py::arg("dim"), py::arg("index"))
      .def("coords_of", &halox::distribution::coords_of, py::arg("rank"))
      .def("rank_of", &halox::distribution::rank_of, py::arg("coords"))
      .def("owner", &halox::distribution::owner, py::arg("index"))
      .def("owned_box", &halox::distribution::owned_box, py::arg("rank"))
      .def("allocated_box", &halox::distribution::allocated_box, py::arg("rank"))
      .def("local_shape", &halox::distribution::local_shape, py::arg("rank"))
      .def("empty", &halox::distribution::empty, py::arg("rank"))
      .def_property_readonly("hash", &halox::distribution::hash)
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
      .def_property_readonly("dist", &halox::tensor_desc::dist)
      .def_property_readonly("grid", &halox::tensor_desc::grid)
      .def_property_readonly("ndim", &halox::tensor_desc::ndim)
      .def_property_readonly("dtype", &halox::tensor_desc::type)
      .def_property_readonly("shape", &halox::tensor_desc::shape)
      .def(
          "owned_box",
          [](halox::tensor_desc const& t, py::handle rank) {
            return rank.is_none() ? t.owned_box() : t.owned_box(rank.cast<int>());
          },
          py::arg("rank") = py::none(), "Owned block (global coordinates) of `rank` or this rank.")
      .def("owner", &halox::tensor_desc::owner, py::arg("index"))
      .def_property_readonly("local_shape", &halox::tensor_desc::local_shape)
      .def_property_readonly("strides", &halox::tensor_desc::strides)
      .def_property_readonly("owned_offset", &halox::tensor_desc::owned_offset)
      .def_property_readonly("owned_offset_elements", &halox::tensor_desc::owned_offset_elements)
      .def_property_readonly("local_elements", &halox::tensor_desc::local_elements)
      .def_property_readonly("local_bytes", &halox::tensor_desc::local_bytes)
      .def("local_offset", &halox::tensor_desc::local_offset, py::arg("index"))
      .def_property_readonly("empty", &halox::tensor_desc::empty)
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

  py::enum_<halox::memory_kind>(m, "MemoryKind")
      .value("host", halox::memory_kind::host)
      .value("pinned_host", halox::memory_kind::pinned_host)
      .value("device", halox::memory_kind::device);

  py::class_<halox::context>(m, "Context",
                             "Transport resources shared by the plans built on one communicator.")
      .def(py::init([](py::handle comm) { return halox::context(to_comm(comm)); }), py::arg("comm"),
           "Collective: duplicates the communicator.")
      .def_static(
          "of", [](py::handle comm) { return halox::context::of(to_comm(comm)); }, py::arg("comm"),
          "The default context of a communicator (collective on first use).")
      .def_property_readonly("rank", &halox::context::rank)
      .def_property_readonly("size", &halox::context::size)
      .def_property_readonly("plans_built", &halox::context::plans_built)
      .def_property_readonly("has_nccl", &halox::context::has_nccl)
      .def("bytes_in_use", &halox::context::bytes_in_use, py::arg("kind"))
      .def("describe", &halox::context::describe)
      .def("__eq__", [](halox::context const& a, halox::context const& b) { return a == b; });
}

} // namespace halox_py
