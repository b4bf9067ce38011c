#include "buffers.hpp"

#include <cstdint>
#include <sstream>

namespace halox_py {

void fail(std::string const& msg) { throw halox::error(halox::errc::invalid_argument, msg); }

std::string shape_str(std::vector<halox::index_t> const& v) {
  std::ostringstream s;
  s << '(';
  for (std::size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  if (v.size() == 1) s << ',';
  s << ')';
  return s.str();
}

std::string type_name(py::handle h) {
  return py::str(py::type::handle_of(h).attr("__qualname__")).cast<std::string>();
}

halox::dtype to_dtype(py::handle h) {
  if (py::isinstance<halox::dtype>(h)) return h.cast<halox::dtype>();
  if (py::isinstance<py::str>(h)) return halox::dtype_from_string(h.cast<std::string>());
  std::string const module = py::str(py::type::handle_of(h).attr("__module__")).cast<std::string>();
  if (module == "torch") { // torch.float32 prints as "torch.float32"
    std::string name = py::str(h).cast<std::string>();
    if (name.rfind("torch.", 0) == 0) name = name.substr(6);
    return halox::dtype_from_string(name);
  }
  std::string name;
  try {
    name = py::module_::import("numpy").attr("dtype")(h).attr("name").cast<std::string>();
  } catch (py::error_already_set const&) {
    fail("cannot read an element type from a " + type_name(h) +
         "; pass halox.dtype.float32, a name such as 'float32', a NumPy dtype or a torch dtype");
  }
  return halox::dtype_from_string(name);
}

halox::backend to_backend(py::handle h) {
  if (py::isinstance<halox::backend>(h)) return h.cast<halox::backend>();
  if (py::isinstance<py::str>(h)) return halox::backend_from_string(h.cast<std::string>());
  fail("backend must be a halox.Backend or a name such as 'auto' or 'mpi_pack', got a " +
       type_name(h));
}

halox::reduce_op to_reduce_op(py::handle h) {
  if (py::isinstance<halox::reduce_op>(h)) return h.cast<halox::reduce_op>();
  if (py::isinstance<py::str>(h)) {
    auto const s = h.cast<std::string>();
    if (s == "sum") return halox::reduce_op::sum;
    if (s == "max") return halox::reduce_op::max;
    if (s == "min") return halox::reduce_op::min;
    fail("unknown reduction '" + s + "'; use 'sum', 'max' or 'min'");
  }
  fail("op must be a halox.ReduceOp or one of 'sum', 'max', 'min', got a " + type_name(h));
}

halox::memory_space to_memory(py::handle h) {
  if (py::isinstance<halox::memory_space>(h)) return h.cast<halox::memory_space>();
  if (py::isinstance<py::str>(h)) {
    auto const s = h.cast<std::string>();
    if (s == "host") return halox::memory_space::host;
    if (s == "device") return halox::memory_space::device;
    fail("unknown memory space '" + s + "'; use 'host' or 'device'");
  }
  fail("memory must be a halox.MemorySpace or 'host' / 'device', got a " + type_name(h));
}

namespace {

std::size_t span_bytes(std::vector<halox::index_t> const& shape,
                       std::vector<halox::index_t> const& strides, std::size_t item) {
  halox::index_t last = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return 0;
    last += (shape[d] - 1) * strides[d];
  }
  return static_cast<std::size_t>(last + 1) * item;
}

local_buffer torch_buffer(py::handle t) {
  local_buffer b;
  b.type = to_dtype(t.attr("dtype"));
  b.device = t.attr("device").attr("type").cast<std::string>();
  b.data = reinterpret_cast<void*>(t.attr("data_ptr")().cast<std::uintptr_t>());
  for (auto s : t.attr("shape")) b.shape.push_back(s.cast<halox::index_t>());
  for (auto s : t.attr("stride")()) b.strides.push_back(s.cast<halox::index_t>());
  b.bytes = span_bytes(b.shape, b.strides, halox::size_of(b.type));
  return b;
}

halox::dtype from_format(py::buffer_info const& info) {
  std::string f = info.format;
  if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f = f.substr(1);
  if (f == "f") return halox::dtype::float32;
  if (f == "d") return halox::dtype::float64;
  if (f == "e") return halox::dtype::float16;
  if (f == "B") return halox::dtype::uint8;
  if ((f == "i" || f == "l" || f == "q") && info.itemsize == 4) return halox::dtype::int32;
  if ((f == "i" || f == "l" || f == "q") && info.itemsize == 8) return halox::dtype::int64;
  fail("buffer element format '" + info.format +
       "' is not one halox moves; use float32, float64, float16, int32, int64 or uint8");
}

} // namespace

local_buffer buffer_of(py::handle obj) {
  if (obj.is_none()) fail("got None where a NumPy array or torch tensor was expected");
  // torch tensors: data_ptr() already includes the storage offset, stride() is in elements.
  if (py::hasattr(obj, "data_ptr") && py::hasattr(obj, "element_size")) return torch_buffer(obj);
  if (!PyObject_CheckBuffer(obj.ptr()))
    fail("expected a NumPy array or a torch tensor, got a " + type_name(obj));
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(obj).request();
  local_buffer b;
  b.type = from_format(info);
  b.data = info.ptr;
  b.writable = !info.readonly;
  for (auto s : info.shape) b.shape.push_back(s);
  for (std::size_t d = 0; d < info.strides.size(); ++d) {
    auto const s = info.strides[d];
    if (s < 0 || s % info.itemsize != 0)
      fail("array stride " + std::to_string(s) + " bytes on dim " + std::to_string(d) +
           " is negative or not a multiple of the element size; pass a copy "
           "(numpy.ascontiguousarray)");
    b.strides.push_back(s / info.itemsize);
  }
  b.bytes = span_bytes(b.shape, b.strides, info.itemsize);
  return b;
}

halox::tensor_view view_of(py::handle obj, halox::tensor_desc const& desc, std::string const& what,
                           bool writable, halox::memory_space memory) {
  local_buffer const b = buffer_of(obj);
  std::string const of = what + ": ";
  std::string const dist = desc.dist().str();
  if (b.type != desc.type())
    fail(of + "the tensor has dtype " + halox::to_string(b.type) + " but the descriptor " + dist +
         " holds " + halox::to_string(desc.type()) + "; convert it (x.astype / x.to) or plan for " +
         halox::to_string(b.type));
  if (b.shape != desc.local_shape())
    fail(of + "the tensor has shape " + shape_str(b.shape) + " but this rank's buffer of " + dist +
         " has shape " + shape_str(desc.local_shape()) +
         " (owned block + halos); allocate it with desc.zeros() or desc.local_shape");
  bool const any = desc.local_elements() > 0;
  if (any && b.strides != desc.strides()) {
    // Extent-1 dimensions may carry any stride: no two cells are ever a step apart there.
    bool same = true;
    for (std::size_t d = 0; d < b.strides.size(); ++d)
      if (b.shape[d] > 1 && b.strides[d] != desc.strides()[d]) same = false;
    if (!same)
      fail(of + "the tensor has strides " + shape_str(b.strides) + " (elements) but " + dist +
           " expects " + shape_str(desc.strides()) +
           "; pass a contiguous tensor (x.contiguous() / numpy.ascontiguousarray(x)) or build the "
           "TensorDesc with strides=" +
           shape_str(b.strides));
  }
  if (writable && !b.writable)
    fail(of + "the array is read-only but the plan writes into it; pass a writable array "
              "(x.copy() or x.setflags(write=True))");
  bool const on_device = b.device != "cpu";
  if (on_device && memory == halox::memory_space::host)
    fail(of + "the tensor lives on device '" + b.device +
         "' but the plan was built for host memory; move it with x.cpu() or build the plan with "
         "memory='device'");
  if (!on_device && memory == halox::memory_space::device)
    fail(of + "the tensor is in host memory but the plan was built for device memory; move it "
              "with x.cuda() or build the plan with memory='host'");
  if (any && b.data == nullptr) fail(of + "the tensor has no storage (null data pointer)");
  return halox::tensor_view(desc, b.data, b.bytes);
}

void collective(MPI_Comm comm, std::string const& what, std::function<void()> const& validate) {
  halox::check_collectively(comm, what, [&] {
    try {
      validate();
    } catch (py::error_already_set& e) {
      // A Python exception (an attribute missing on a foreign object, ...) must become a
      // halox::error here so that the collective check reports it on every rank.
      fail(what + ": " + e.what());
    }
  });
}

} // namespace halox_py
