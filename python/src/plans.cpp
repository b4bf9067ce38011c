// Bindings of the plans. Each wrapper keeps the descriptors it was planned with (buffers are
// checked against them) and, between start and wait, the Python objects whose memory the
// exchange is using, so that they cannot be freed while MPI still reads or writes them.
//
// Buffers are checked collectively before every execution (one small all-reduce): a wrong dtype
// or shape on one rank then raises halox.Error on every rank instead of leaving the others
// waiting for its messages. `plan.checks = False` skips that all-reduce once a program is known
// to be right.
#include "bindings.hpp"
#include "buffers.hpp"
#include "comm.hpp"

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace halox_py {

namespace {

halox::tune_options to_tune(py::handle h) {
  halox::tune_options t;
  if (h.is_none()) return t;
  auto d = h.cast<py::dict>();
  for (auto item : d) {
    auto const key = item.first.cast<std::string>();
    if (key == "warmup")
      t.warmup = item.second.cast<int>();
    else if (key == "trials")
      t.trials = item.second.cast<int>();
    else if (key == "budget_seconds")
      t.budget_seconds = item.second.cast<double>();
    else if (key == "cache_file")
      t.cache_file = item.second.cast<std::string>();
    else if (key == "max_rounds")
      t.max_rounds = item.second.cast<int>();
    else if (key == "recheck")
      t.recheck = item.second.cast<bool>();
    else if (key == "watch")
      t.watch = item.second.cast<bool>();
    else
      fail("unknown tune option '" + key +
           "'; use warmup, trials, budget_seconds, cache_file, max_rounds, recheck or watch");
  }
  return t;
}

halox::boundary_fill to_boundary(py::handle h) {
  if (py::isinstance<halox::boundary_fill>(h)) return h.cast<halox::boundary_fill>();
  auto const s = h.cast<std::string>();
  if (s == "untouched") return halox::boundary_fill::untouched;
  if (s == "constant") return halox::boundary_fill::constant;
  fail("unknown boundary '" + s + "'; use 'untouched' or 'constant'");
}

/// The items of a tensor argument: one object or a list/tuple of them.
std::vector<py::handle> items_of(py::handle xs, std::size_t expected, std::string const& what) {
  std::vector<py::handle> items;
  if (py::isinstance<py::list>(xs) || py::isinstance<py::tuple>(xs))
    for (auto x : xs) items.push_back(x);
  else
    items.push_back(xs);
  if (items.size() != expected)
    fail(what + ": got " + std::to_string(items.size()) + " tensor(s) but the plan was built for " +
         std::to_string(expected) + "; pass one buffer per planned tensor, in planning order");
  return items;
}

/// Runs `build` (the buffer checks of one execution, without the collective check); when it
/// throws, `skip` first tells the peers that this rank will not run the execution (so they
/// raise peer_failed instead of waiting for it), then the error goes on.
template <class Build, class Skip> void announced(Build&& build, Skip&& skip) {
  try {
    build();
  } catch (halox::error const& e) {
    skip(e.message());
    throw;
  } catch (py::error_already_set& e) {
    std::string const why = e.what();
    skip(why);
    fail(why);
  }
}

class py_halo_plan {
public:
  py_halo_plan(py::handle descs, py::handle ctx, py::handle backend, py::handle boundary,
               double fill_value, py::handle memory, py::handle tune) {
    if (py::isinstance<halox::tensor_desc>(descs))
      descs_.push_back(descs.cast<halox::tensor_desc>());
    else
      for (auto d : descs) descs_.push_back(d.cast<halox::tensor_desc>());
    if (descs_.empty()) fail("HaloPlan needs at least one TensorDesc");
    opts_.method = to_backend(backend);
    opts_.boundary = to_boundary(boundary);
    opts_.fill_value = fill_value;
    opts_.memory = to_memory(memory);
    opts_.tune = to_tune(tune);
    std::optional<halox::context> const context =
        ctx.is_none() ? std::nullopt : std::optional<halox::context>(ctx.cast<halox::context>());
    py::gil_scoped_release nogil; // planning is collective: let other Python threads run
    if (context)
      plan_ = std::make_unique<halox::halo_plan>(*context, descs_, opts_);
    else
      plan_ = std::make_unique<halox::halo_plan>(descs_, opts_);
  }

  void execute(py::handle xs, std::uintptr_t stream) {
    auto vs = views(xs, "HaloPlan.execute", false);
    py::gil_scoped_release nogil;
    plan_->execute(vs, reinterpret_cast<halox::stream_handle>(stream));
  }
  bool skip_execution(std::string const& reason, bool reverse) {
    py::gil_scoped_release nogil;
    return plan_->skip_execution(reason, reverse);
  }
  void start(py::handle xs) {
    auto vs = views(xs, "HaloPlan.start", false);
    {
      py::gil_scoped_release nogil;
      plan_->start(vs);
    }
    pending_ = py::reinterpret_borrow<py::object>(xs);
  }
  void start_reverse(py::handle xs, py::handle op) {
    auto const r = to_reduce_op(op);
    auto vs = views(xs, "HaloPlan.start_reverse", true);
    {
      py::gil_scoped_release nogil;
      plan_->start_reverse(vs, r);
    }
    pending_ = py::reinterpret_borrow<py::object>(xs);
  }
  void wait() {
    {
      py::gil_scoped_release nogil;
      plan_->wait();
    }
    pending_ = py::none();
  }
  void execute_reverse(py::handle xs, py::handle op, std::uintptr_t stream) {
    auto const r = to_reduce_op(op);
    auto vs = views(xs, "HaloPlan.execute_reverse", true);
    py::gil_scoped_release nogil;
    plan_->execute_reverse(vs, r, reinterpret_cast<halox::stream_handle>(stream));
  }

  halox::halo_plan const& plan() const { return *plan_; }
  std::vector<halox::tensor_desc> const& descs() const { return descs_; }
  halox::halo_options const& options() const { return opts_; }
  bool checks = true;

private:
  std::vector<halox::tensor_view> views(py::handle xs, std::string const& what, bool reverse) {
    std::vector<halox::tensor_view> vs;
    auto build = [&] {
      auto items = items_of(xs, descs_.size(), what);
      for (std::size_t i = 0; i < items.size(); ++i)
        vs.push_back(
            view_of(items[i], descs_[i],
                    descs_.size() > 1 ? what + " (tensor " + std::to_string(i) + ")" : what, true,
                    opts_.memory));
    };
    if (checks)
      collective(plan_->get_context().comm(), what, build);
    else
      announced(build, [&](std::string const& why) { (void)plan_->skip_execution(why, reverse); });
    return vs;
  }

  std::vector<halox::tensor_desc> descs_;
  halox::halo_options opts_;
  std::unique_ptr<halox::halo_plan> plan_;
  py::object pending_ = py::none();
};

class py_redistribute_plan {
public:
  py_redistribute_plan(py::handle src, py::handle dst, py::handle parent, py::handle ctx,
                       py::handle backend, bool halo_after, py::handle memory, py::handle tune) {
    if (!src.is_none()) src_ = src.cast<halox::tensor_desc>();
    if (!dst.is_none()) dst_ = dst.cast<halox::tensor_desc>();
    opts_.method = to_backend(backend);
    opts_.halo_after = halo_after;
    opts_.memory = to_memory(memory);
    opts_.halo.memory = opts_.memory;
    opts_.halo.method = opts_.method;
    opts_.tune = to_tune(tune);
    opts_.halo.tune = opts_.tune;
    halox::tensor_desc const* s = src_ ? &*src_ : nullptr;
    halox::tensor_desc const* d = dst_ ? &*dst_ : nullptr;
    if (parent.is_none() && (!s || !d))
      fail("RedistributePlan: src and dst are both needed unless parent= names the communicator "
           "holding both grids (then a rank outside a grid passes None for it)");
    MPI_Comm const parent_comm = parent.is_none() ? MPI_COMM_NULL : to_comm(parent);
    std::optional<halox::context> const context =
        ctx.is_none() ? std::nullopt : std::optional<halox::context>(ctx.cast<halox::context>());
    py::gil_scoped_release nogil;
    if (parent_comm != MPI_COMM_NULL)
      plan_ = context ? std::make_unique<halox::redistribute_plan>(*context, s, d, opts_)
                      : std::make_unique<halox::redistribute_plan>(parent_comm, s, d, opts_);
    else
      plan_ = context ? std::make_unique<halox::redistribute_plan>(*context, *s, *d, opts_)
                      : std::make_unique<halox::redistribute_plan>(*s, *d, opts_);
  }

  void execute(py::handle src, py::handle dst, std::uintptr_t stream) {
    auto [s, d] = views(src, dst, "RedistributePlan.execute", false);
    py::gil_scoped_release nogil;
    plan_->execute(s, d, reinterpret_cast<halox::stream_handle>(stream));
  }
  bool skip_execution(std::string const& reason, bool inverse) {
    py::gil_scoped_release nogil;
    return plan_->skip_execution(reason, inverse);
  }
  void start(py::handle src, py::handle dst) {
    auto [s, d] = views(src, dst, "RedistributePlan.start", false);
    {
      py::gil_scoped_release nogil;
      plan_->start(s, d);
    }
    pending_ = py::make_tuple(src, dst);
  }
  void execute_inverse(py::handle dst, py::handle src, std::uintptr_t stream) {
    auto [s, d] = views(src, dst, "RedistributePlan.execute_inverse", true);
    py::gil_scoped_release nogil;
    plan_->execute_inverse(d, s, reinterpret_cast<halox::stream_handle>(stream));
  }
  void start_inverse(py::handle dst, py::handle src) {
    auto [s, d] = views(src, dst, "RedistributePlan.start_inverse", true);
    {
      py::gil_scoped_release nogil;
      plan_->start_inverse(d, s);
    }
    pending_ = py::make_tuple(src, dst);
  }
  void wait() {
    {
      py::gil_scoped_release nogil;
      plan_->wait();
    }
    pending_ = py::none();
  }

  halox::redistribute_plan const& plan() const { return *plan_; }
  py::object src() const { return src_ ? py::cast(*src_) : py::none(); }
  py::object dst() const { return dst_ ? py::cast(*dst_) : py::none(); }
  bool halo_after() const { return opts_.halo_after; }
  bool checks = true;

private:
  std::pair<halox::tensor_view, halox::tensor_view> views(py::handle src, py::handle dst,
                                                          std::string const& what, bool inverse) {
    halox::tensor_view s, d;
    auto build = [&] {
      if (plan_->is_source()) {
        if (src.is_none())
          fail(what + ": this rank belongs to the source grid but got None for the source; "
                      "pass its local source buffer");
        s = view_of(src, *src_, what + " (source)", true, opts_.memory);
      }
      if (plan_->is_destination()) {
        if (dst.is_none())
          fail(what + ": this rank belongs to the destination grid but got None for the "
                      "destination; pass its local destination buffer");
        d = view_of(dst, *dst_, what + " (destination)", true, opts_.memory);
      }
    };
    if (checks)
      collective(plan_->get_context().comm(), what, build);
    else
      announced(build, [&](std::string const& why) { (void)plan_->skip_execution(why, inverse); });
    return {s, d};
  }

  std::optional<halox::tensor_desc> src_, dst_;
  halox::redistribute_options opts_;
  std::unique_ptr<halox::redistribute_plan> plan_;
  py::object pending_ = py::none();
};

class py_box_gather_plan {
public:
  py_box_gather_plan(halox::tensor_desc const& src, py::handle need, py::handle backend,
                     py::handle tune)
      : src_(src) {
    std::vector<std::vector<halox::index_range>> ranges;
    for (auto dim : need) {
      std::vector<halox::index_range> r;
      for (auto lohi : dim) {
        auto const p = lohi.cast<std::pair<halox::index_t, halox::index_t>>();
        r.push_back({p.first, p.second});
      }
      ranges.push_back(std::move(r));
    }
    halox::box_gather_options o;
    o.method = to_backend(backend);
    o.tune = to_tune(tune);
    py::gil_scoped_release nogil;
    plan_ = std::make_unique<halox::box_gather_plan>(src_, ranges, o);
  }

  py::object execute(py::handle x, py::handle out) {
    halox::tensor_view v;
    void* ws = nullptr;
    py::object result = out.is_none()
                            ? py::module_::import("numpy").attr("empty")(
                                  py::cast(plan_->shape()), py::str(halox::to_string(src_.type())))
                            : py::reinterpret_borrow<py::object>(out);
    collective(src_.grid().comm(), "BoxGatherPlan.execute", [&] {
      v = view_of(x, src_, "BoxGatherPlan.execute (source)", false, halox::memory_space::host);
      local_buffer const b = buffer_of(result);
      if (b.type != src_.type() || b.shape != plan_->shape() || !b.writable)
        fail("BoxGatherPlan.execute: out must be a writable " +
             std::string(halox::to_string(src_.type())) + " array of shape " +
             shape_str(plan_->shape()) + ", got " + halox::to_string(b.type) + " " +
             shape_str(b.shape));
      halox::index_t expect = 1;
      for (auto d = b.shape.size(); d-- > 0;) {
        if (b.shape[d] > 1 && b.strides[d] != expect)
          fail("BoxGatherPlan.execute: out must be contiguous (row-major); pass "
               "numpy.empty(plan.shape) or leave it out");
        expect *= b.shape[d];
      }
      ws = b.data;
    });
    {
      py::gil_scoped_release nogil;
      plan_->execute(v, ws);
    }
    return result;
  }

  halox::box_gather_plan const& plan() const { return *plan_; }

private:
  halox::tensor_desc src_;
  std::unique_ptr<halox::box_gather_plan> plan_;
};

halox::redistribute_options gather_options(py::handle backend, bool halo_after) {
  halox::redistribute_options o;
  o.method = to_backend(backend);
  o.halo_after = halo_after;
  o.halo.method = o.method;
  return o;
}

/// Checks a whole-tensor array on the root: dtype, global shape, row-major.
void check_global(py::handle a, halox::tensor_desc const& desc, std::string const& what,
                  bool writable, void** data) {
  local_buffer const b = buffer_of(a);
  if (b.device != "cpu") fail(what + ": the global tensor must be in host memory");
  if (b.type != desc.type() || b.shape != desc.shape())
    fail(what + ": the global tensor has dtype " + halox::to_string(b.type) + " and shape " +
         shape_str(b.shape) + " but " + desc.dist().str() + " needs " +
         halox::to_string(desc.type()) + " " + shape_str(desc.shape()));
  halox::index_t expect = 1;
  for (auto d = b.shape.size(); d-- > 0;) {
    if (b.shape[d] > 1 && b.strides[d] != expect)
      fail(what + ": the global tensor must be contiguous (row-major); pass "
                  "numpy.ascontiguousarray(x) or x.contiguous()");
    expect *= b.shape[d];
  }
  if (writable && !b.writable) fail(what + ": the global array is read-only");
  *data = b.data;
}

} // namespace

void bind_plans(py::module_& m) {
  py::class_<py_halo_plan>(m, "HaloPlan",
                           "A halo exchange of one or several tensors, planned once (collective) "
                           "and executed many times on NumPy arrays or torch tensors.")
      .def(py::init<py::handle, py::handle, py::handle, py::handle, double, py::handle,
                    py::handle>(),
           py::arg("descs"), py::kw_only(), py::arg("context") = py::none(),
           py::arg("backend") = "auto", py::arg("boundary") = "untouched",
           py::arg("fill_value") = 0.0, py::arg("memory") = "host", py::arg("tune") = py::none())
      .def("execute", &py_halo_plan::execute, py::arg("x"), py::kw_only(), py::arg("stream") = 0,
           "Forward exchange (owners -> halos) of x (or a list, one per planned tensor). stream: "
           "a CUDA stream handle (torch.cuda.current_stream().cuda_stream) for a device plan; "
           "0 is the default stream.")
      .def("skip_execution", &py_halo_plan::skip_execution, py::arg("reason"),
           py::arg("reverse") = false,
           "This rank will not run the next forward (or reverse) exchange: its peers waiting in "
           "it raise halox.Error (peer_failed) naming reason. True when every peer skipped it "
           "too (the plan runs on), False when one went ahead (the plan cannot run again).")
      .def("start", &py_halo_plan::start, py::arg("x"), "Begins a forward exchange.")
      .def("wait", &py_halo_plan::wait, "Completes the exchange begun by start/start_reverse.")
      .def("execute_reverse", &py_halo_plan::execute_reverse, py::arg("x"), py::arg("op") = "sum",
           py::kw_only(), py::arg("stream") = 0,
           "Reverse exchange: halo cells combined into their owners with op (sum, max, min).")
      .def("start_reverse", &py_halo_plan::start_reverse, py::arg("x"), py::arg("op") = "sum",
           "Begins a reverse exchange of x (or a list, one per planned tensor) with op (sum, max, "
           "min); wait completes it.")
      .def_readwrite(
          "checks", &py_halo_plan::checks,
          "Check buffers collectively before executing (default True). False: each rank checks "
          "its own, and one whose buffers fail tells its peers (they raise "
          "halox.Error with code peer_failed instead of waiting).")
      .def_property_readonly("descs", &py_halo_plan::descs,
                             "The planned tensors (list of TensorDesc, in planning order).")
      .def_property_readonly(
          "boundary", [](py_halo_plan const& p) { return p.options().boundary; },
          "What the exchange does with halo cells past a non-periodic global boundary (a "
          "BoundaryFill).")
      .def_property_readonly(
          "fill_value", [](py_halo_plan const& p) { return p.options().fill_value; },
          "Value (float) written into those halo cells when boundary is constant.")
      .def_property_readonly(
          "selected_backend", [](py_halo_plan const& p) { return p.plan().selected_backend(); },
          "The Backend in use (the measured winner when automatic was requested).")
      .def_property_readonly(
          "num_tensors", [](py_halo_plan const& p) { return p.plan().num_tensors(); },
          "Number of tensors exchanged (int).")
      .def_property_readonly(
          "bytes_sent", [](py_halo_plan const& p) { return p.plan().bytes_sent(); },
          "Bytes (int) this rank sends per forward exchange (local copies excluded).")
      .def_property_readonly(
          "bytes_received", [](py_halo_plan const& p) { return p.plan().bytes_received(); },
          "Bytes (int) this rank receives per forward exchange (local copies excluded).")
      .def_property_readonly(
          "num_peers", [](py_halo_plan const& p) { return p.plan().num_peers(); },
          "Number of peers (int) this rank exchanges messages with.")
      .def_property_readonly(
          "context", [](py_halo_plan const& p) { return p.plan().get_context(); },
          "The Context the plan was built on.")
      .def_property_readonly(
          "workspace_bytes", [](py_halo_plan const& p) { return p.plan().workspace_bytes().host; },
          "Bytes (int) of host scratch memory the plan uses while executing (pack buffers, "
          "landing areas).")
      .def(
          "describe", [](py_halo_plan const& p) { return p.plan().describe(); },
          "Human-readable account (str): tensors, peers, bytes, regions, the chosen backend and, "
          "after automatic selection, the measured time of every candidate.");

  py::class_<py_redistribute_plan>(m, "RedistributePlan",
                                   "Moves a tensor from one distribution to another (collective "
                                   "to build and to execute).")
      .def(py::init<py::handle, py::handle, py::handle, py::handle, py::handle, bool, py::handle,
                    py::handle>(),
           py::arg("src"), py::arg("dst"), py::kw_only(), py::arg("parent") = py::none(),
           py::arg("context") = py::none(), py::arg("backend") = "auto",
           py::arg("halo_after") = false, py::arg("memory") = "host", py::arg("tune") = py::none())
      .def("execute", &py_redistribute_plan::execute, py::arg("src"), py::arg("dst"), py::kw_only(),
           py::arg("stream") = 0,
           "Forward: owned cells of src -> owned cells of dst (None for a side this rank is not "
           "part of).")
      .def("skip_execution", &py_redistribute_plan::skip_execution, py::arg("reason"),
           py::arg("inverse") = false,
           "This rank will not run the next forward (or inverse) redistribution; see "
           "HaloPlan.skip_execution.")
      .def("start", &py_redistribute_plan::start, py::arg("src"), py::arg("dst"),
           "Begins a forward redistribution; src may be read but not written, and dst not "
           "touched, until wait.")
      .def("wait", &py_redistribute_plan::wait,
           "Completes the redistribution begun by start or start_inverse (then, for a forward one "
           "with halo_after, exchanges the destination's halos).")
      .def("execute_inverse", &py_redistribute_plan::execute_inverse, py::arg("dst"),
           py::arg("src"), py::kw_only(), py::arg("stream") = 0,
           "Inverse: owned cells of dst -> owned cells of src.")
      .def("start_inverse", &py_redistribute_plan::start_inverse, py::arg("dst"), py::arg("src"),
           "Begins an inverse redistribution (reading dst, writing src); wait completes it.")
      .def_readwrite("checks", &py_redistribute_plan::checks,
                     "Check buffers collectively before executing (default True); see "
                     "HaloPlan.checks.")
      .def_property_readonly("src", &py_redistribute_plan::src,
                             "The source TensorDesc (None on a rank outside the source grid).")
      .def_property_readonly(
          "dst", &py_redistribute_plan::dst,
          "The destination TensorDesc (None on a rank outside the destination grid).")
      .def_property_readonly("halo_after", &py_redistribute_plan::halo_after,
                             "True when the destination's halo exchange runs right after every "
                             "forward execution.")
      .def_property_readonly(
          "is_source", [](py_redistribute_plan const& p) { return p.plan().is_source(); },
          "True when this rank belongs to the source grid.")
      .def_property_readonly(
          "is_destination", [](py_redistribute_plan const& p) { return p.plan().is_destination(); },
          "True when this rank belongs to the destination grid.")
      .def_property_readonly(
          "selected_backend",
          [](py_redistribute_plan const& p) { return p.plan().selected_backend(); },
          "The Backend in use (the measured winner when automatic was requested).")
      .def_property_readonly(
          "bytes_sent", [](py_redistribute_plan const& p) { return p.plan().bytes_sent(); },
          "Bytes (int) this rank sends per forward redistribution (the local copy excluded).")
      .def_property_readonly(
          "bytes_received", [](py_redistribute_plan const& p) { return p.plan().bytes_received(); },
          "Bytes (int) this rank receives per forward redistribution (the local copy excluded).")
      .def_property_readonly(
          "num_peers", [](py_redistribute_plan const& p) { return p.plan().num_peers(); },
          "Number of distinct processes (int) this rank sends to or receives from.")
      .def_property_readonly(
          "context", [](py_redistribute_plan const& p) { return p.plan().get_context(); },
          "The Context the plan was built on.")
      .def(
          "describe", [](py_redistribute_plan const& p) { return p.plan().describe(); },
          "Human-readable account (str): both distributions, this rank's membership, peers, "
          "bytes, the chosen backend and the per-peer boxes.");

  py::class_<py_box_gather_plan>(m, "BoxGatherPlan",
                                 "Every rank receives one global box of a tensor into a private "
                                 "contiguous array.")
      .def(py::init<halox::tensor_desc const&, py::handle, py::handle, py::handle>(),
           py::arg("desc"), py::arg("need"), py::kw_only(), py::arg("backend") = "auto",
           py::arg("tune") = py::none(),
           "need[d] holds one (lo, hi) range per grid part along dimension d.")
      .def("execute", &py_box_gather_plan::execute, py::arg("x"), py::arg("out") = py::none(),
           "Gathers this rank's box from x; returns `out` (a new NumPy array by default).")
      .def_property_readonly(
          "box", [](py_box_gather_plan const& p) { return p.plan().my_box(); },
          "Global box this rank receives (a Box over all dimensions; empty when it needs "
          "nothing).")
      .def_property_readonly(
          "shape", [](py_box_gather_plan const& p) { return p.plan().shape(); },
          "Shape of the gathered array (list of int): the extent of this rank's range along each "
          "dimension. When one of them is empty the others keep their extents.")
      .def_property_readonly(
          "origin", [](py_box_gather_plan const& p) { return p.plan().origin(); },
          "Global position of the gathered array's first element along each dimension (list of "
          "int).")
      .def(
          "describe", [](py_box_gather_plan const& p) { return p.plan().describe(); },
          "Human-readable account (str): the tensor, this rank's box, peers, bytes and the "
          "chosen backend.");

  m.def("whole_on_rank", &halox::whole_on_rank, py::arg("like"), py::arg("root"),
        "Collective. The descriptor of the same tensor held entirely by `root`.");
  m.def(
      "gather",
      [](halox::tensor_desc const& desc, py::handle x, int root, py::handle backend) {
        bool const is_root = desc.grid().rank() == root;
        py::object out = py::none();
        if (is_root)
          out = py::module_::import("numpy").attr("empty")(py::cast(desc.shape()),
                                                           py::str(halox::to_string(desc.type())));
        halox::tensor_view v;
        void* data = nullptr;
        collective(desc.grid().comm(), "gather", [&] {
          if (root < 0 || root >= desc.grid().size())
            fail("gather: root " + std::to_string(root) + " is not a rank of the grid (0.." +
                 std::to_string(desc.grid().size() - 1) + ")");
          v = view_of(x, desc, "gather", false, halox::memory_space::host);
          if (is_root) check_global(out, desc, "gather", true, &data);
        });
        std::size_t total = 0;
        if (is_root) {
          total = halox::size_of(desc.type());
          for (auto e : desc.shape()) total *= static_cast<std::size_t>(e);
        }
        auto const opts = gather_options(backend, false);
        {
          py::gil_scoped_release nogil;
          halox::gather(desc, v, root, data, total, opts);
        }
        return out;
      },
      py::arg("desc"), py::arg("x"), py::arg("root") = 0, py::kw_only(),
      py::arg("backend") = "auto",
      "Collective. The whole tensor as a NumPy array on `root`, None elsewhere.");
  m.def(
      "scatter",
      [](py::handle global, halox::tensor_desc const& desc, py::handle out, int root,
         py::handle backend, bool halo_after) {
        bool const is_root = desc.grid().rank() == root;
        halox::tensor_view v;
        void* data = nullptr;
        collective(desc.grid().comm(), "scatter", [&] {
          if (root < 0 || root >= desc.grid().size())
            fail("scatter: root " + std::to_string(root) + " is not a rank of the grid (0.." +
                 std::to_string(desc.grid().size() - 1) + ")");
          v = view_of(out, desc, "scatter", true, halox::memory_space::host);
          if (is_root) {
            if (global.is_none()) fail("scatter: the root got None for the global tensor");
            check_global(global, desc, "scatter", false, &data);
          }
        });
        std::size_t total = 0;
        if (is_root) {
          total = halox::size_of(desc.type());
          for (auto e : desc.shape()) total *= static_cast<std::size_t>(e);
        }
        auto const opts = gather_options(backend, halo_after);
        py::gil_scoped_release nogil;
        halox::scatter(root, data, total, desc, v, opts);
      },
      py::arg("global_tensor"), py::arg("desc"), py::arg("out"), py::kw_only(), py::arg("root") = 0,
      py::arg("backend") = "auto", py::arg("halo_after") = false,
      "Collective. Scatters `global_tensor` (read on `root` only) into each rank's owned block "
      "of `out`.");
}

} // namespace halox_py
