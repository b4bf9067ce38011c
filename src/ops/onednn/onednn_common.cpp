#include "ops/onednn/onednn_common.hpp"

namespace halox::ops::detail::onednn {

context& ctx() {
  thread_local context c;
  return c;
}

tag plain_tag(int nsp) { return nsp == 1 ? tag::ncw : nsp == 2 ? tag::nchw : tag::ncdhw; }
tag channels_last_tag(int nsp) { return nsp == 1 ? tag::nwc : nsp == 2 ? tag::nhwc : tag::ndhwc; }
tag weights_tag(int nsp) { return nsp == 1 ? tag::oiw : nsp == 2 ? tag::oihw : tag::oidhw; }

memory::desc strided_md(index_t n, index_t c, dims const& ext, index_t sn, index_t sc,
                        dims const& str) {
  memory::dims dims{n, c}, strides{sn, sc};
  for (std::size_t i = 0; i < ext.size(); ++i) {
    dims.push_back(ext[i]);
    strides.push_back(str[i]);
  }
  return memory::desc(dims, dt::f32, strides);
}

double time_best(std::function<void()> const& f, int reps) {
  f();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    auto const t0 = std::chrono::steady_clock::now();
    f();
    double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = s < best ? s : best;
  }
  return best;
}

void rethrow(char const* op, dnnl::error const& e) {
  ::halox::detail::throw_error(errc::internal,
                               std::string(op) + ": oneDNN failed (" + e.what() + ", status " +
                                   std::to_string(static_cast<int>(e.status)) +
                                   "); use provider reference for this layer",
                               "oneDNN", __FILE__, __LINE__);
}

std::string dims_str(memory::dims const& d) {
  std::string s;
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? "x" : "") + std::to_string(d[i]);
  return s;
}

std::size_t fingerprint_hash::operator()(fingerprint const& f) const noexcept {
  std::uint64_t h = 1469598103934665603ull;
  for (std::int64_t x : f) h = (h ^ static_cast<std::uint64_t>(x)) * 1099511628211ull;
  return static_cast<std::size_t>(h);
}

void put_dims(fingerprint& f, memory::dims const& d) {
  f.push_back(static_cast<std::int64_t>(d.size()));
  f.insert(f.end(), d.begin(), d.end());
}

void put_md(fingerprint& f, memory::desc const& md) {
  int const n = md.data.ndims;
  f.push_back(n);
  f.insert(f.end(), md.data.dims, md.data.dims + n);
  f.insert(f.end(), md.data.format_desc.blocking.strides, md.data.format_desc.blocking.strides + n);
}

} // namespace halox::ops::detail::onednn
