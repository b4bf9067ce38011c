#include "ops/providers/onednn/onednn_common.hpp"
#include "ops/providers/memory.hpp"

#include <sys/mman.h>

#include <algorithm>

namespace halox::ops::detail::onednn {

context& ctx() {
  thread_local context c;
  return c;
}

// Large buffers come straight from mmap, so that a buffer given back returns its pages to the
// system at once (the allocator's heap may keep them once its threshold has grown).
void* scratch_arena::get(role r, std::size_t bytes) {
  int const k = static_cast<int>(r);
  seen_[k] = std::max(seen_[k], (bytes + 63) / 64 * 64);
  if (region_ && bytes <= cap_[k]) { // the caller's memory, lent for these calls
    bufs_[k].stamp = ++next_;
    return region_ + at_[k];
  }
  buf& b = bufs_[k];
  if (bytes > b.n) {
    drop(b);
    std::size_t const n = (bytes + 4095) / 4096 * 4096;
    allocator const& al = scratch_allocator(); // the caller's, where one was set
    void* p = nullptr;
    if (al.allocate) {
      p = al.allocate(n, memory_kind::host);
      b.from = &al;
    } else {
      p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) p = nullptr;
      b.from = nullptr;
    }
    if (p == nullptr)
      throw halox::error(
          errc::out_of_memory,
          "oneDNN provider: could not allocate " + std::to_string(n) +
              " bytes of scratch; use smaller blocks (more ranks) or a smaller batch");
    b.p = p;
    b.n = n;
    peak_ = std::max(peak_, this->bytes());
  }
  b.stamp = ++next_;
  return b.p;
}

void scratch_arena::drop(buf& b) noexcept {
  if (b.p && b.from)
    b.from->deallocate(b.p, b.n, memory_kind::host);
  else if (b.p)
    munmap(b.p, b.n);
  b.p = nullptr;
  b.n = 0;
  b.stamp = ++next_;
}

std::size_t scratch_arena::bytes() const noexcept {
  std::size_t n = 0;
  for (buf const& b : bufs_) n += b.n;
  return n;
}

void scratch_arena::release() noexcept {
  for (buf& b : bufs_) drop(b);
}

void scratch_arena::mark() noexcept {
  for (std::size_t& v : seen_) v = 0;
}

void scratch_arena::asked(std::size_t* per_role) const noexcept {
  for (int k = 0; k < static_cast<int>(role::count); ++k) per_role[k] = seen_[k];
}

void scratch_arena::lend(void* p, std::size_t const* size) noexcept {
  region_ = static_cast<char*>(p);
  std::size_t at = 0;
  for (int k = 0; k < static_cast<int>(role::count); ++k) {
    at_[k] = at;
    cap_[k] = p ? size[k] : 0;
    at += cap_[k];
    bufs_[k].stamp = ++next_; // what a role held is not where it is now
  }
}

scratch_arena& arena() {
  thread_local scratch_arena a;
  return a;
}

std::size_t arena_bytes() noexcept { return arena().bytes(); }
std::size_t arena_peak() noexcept { return arena().peak(); }
void arena_release() noexcept { arena().release(); }

tag plain_tag(int nsp) { return nsp == 1 ? tag::ncw : nsp == 2 ? tag::nchw : tag::ncdhw; }
tag channels_last_tag(int nsp) { return nsp == 1 ? tag::nwc : nsp == 2 ? tag::nhwc : tag::ndhwc; }
tag weights_tag(int nsp) { return nsp == 1 ? tag::oiw : nsp == 2 ? tag::oihw : tag::oidhw; }

bound::bound(dnnl::primitive p, std::initializer_list<std::pair<int, memory>> args)
    : prim_(std::move(p)) {
  for (auto const& [arg, m] : args) add(arg, m);
}

// A reorder's scratchpad, like a primitive's, comes from the shared arena at each execution.
bound bound::reorder(memory const& from, memory const& to) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(from, to, attr);
  bound b(dnnl::reorder(pd), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
  b.pad_bytes_ = pd.scratchpad_desc().get_size();
  if (b.pad_bytes_) {
    b.pad_ = memory(pd.scratchpad_desc(), from.get_engine(), DNNL_MEMORY_NONE);
    b.add(DNNL_ARG_SCRATCHPAD, b.pad_);
  }
  return b;
}

void bound::add(int arg, memory const& m) {
  held_.push_back(m);
  args_.push_back({arg, m.get()});
}

void bound::execute(dnnl::stream const& s) const {
  if (pad_bytes_) pad_.set_data_handle(arena().get(role::rpad, pad_bytes_));
  dnnl::error::wrap_c_api(
      dnnl_primitive_execute(prim_.get(), s.get(), static_cast<int>(args_.size()), args_.data()),
      "could not execute a primitive");
}

memory::desc strided_md(int ndims, index_t const* dims, index_t const* strides) {
  HALOX_REQUIRE(ndims >= 0 && ndims <= DNNL_MAX_NDIMS, errc::internal,
                "oneDNN view of " + std::to_string(ndims) + " dimensions");
  dnnl_dims_t d{}, s{};
  std::copy(dims, dims + ndims, d);
  std::copy(strides, strides + ndims, s);
  dnnl_memory_desc_t md{};
  dnnl::error::wrap_c_api(dnnl_memory_desc_init_by_strides(&md, ndims, d, dnnl_f32, s),
                          "could not describe a strided view");
  return memory::desc(md);
}

memory::desc strided_md(index_t n, index_t c, int nsp, index_t const* ext, index_t sn, index_t sc,
                        index_t const* str) {
  HALOX_REQUIRE(nsp >= 0 && nsp <= 3, errc::internal,
                "oneDNN view with " + std::to_string(nsp) + " spatial dimensions");
  index_t dims[5] = {n, c}, strides[5] = {sn, sc};
  std::copy(ext, ext + nsp, dims + 2);
  std::copy(str, str + nsp, strides + 2);
  return strided_md(2 + nsp, dims, strides);
}

memory::desc strided_md(index_t n, index_t c, dims const& ext, index_t sn, index_t sc,
                        dims const& str) {
  return strided_md(n, c, static_cast<int>(ext.size()), ext.data(), sn, sc, str.data());
}

std::vector<double> time_interleaved(std::vector<std::function<void()>> const& fs, int rounds) {
  for (auto const& f : fs) f(); // warm-up: first touches, lazily built kernels
  std::vector<double> best(fs.size(), 1e300);
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < fs.size(); ++k) {
      std::size_t const i = (k + static_cast<std::size_t>(r)) % fs.size(); // rotate the order
      auto const t0 = std::chrono::steady_clock::now();
      fs[i]();
      double const s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[i] = s < best[i] ? s : best[i];
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
