#include "ops/dist/dist_window.hpp"
#include "ops/providers/memory.hpp"

#include <halox/error.hpp>
#include <halox/ops/dist_conv.hpp>
#include <halox/ops/provider.hpp>

#include <mpi.h>

namespace halox::ops {

template <class T> struct dist_conv<T>::impl {
  detail::window_layer layer;
  std::vector<index_t> w_shape;
  conv_params p;
  local_kernels<T> k;    // the provider that computes every box
  communicator reduce;   // private duplicate: our all-reductions never meet the caller's
  detail::space_ops mem; // where the layer's buffers live (the provider's memory)
  detail::space_buffer<T> dev_grads; // device providers: partial dw then db, on the device
  std::vector<T> grads;              // partial dw then db (host), all-reduced in one call
  dist_timings t;
  // A gradient all-reduce in flight (defer_gradient_reduce) and where its sums go.
  MPI_Request grad_req = MPI_REQUEST_NULL;
  tensor_ref<T> dw_out;
  T* db_out = nullptr;

  // Waits for the gradient all-reduce in flight, if any, and writes dw and db; the wait counts
  // as reduce time of the current call.
  void finish_reduce() {
    if (grad_req == MPI_REQUEST_NULL) return;
    double const c = MPI_Wtime();
    HALOX_MPI_CHECK(MPI_Wait(&grad_req, MPI_STATUS_IGNORE));
    double const waited = MPI_Wtime() - c;
    t.reduce += waited;
    t.total += waited;
    store_grads();
  }
  // Writes `grads` (the sums, or this rank's partial sums when not reduced) to dw and db.
  void store_grads() {
    index_t const nw = element_count(w_shape), nb = w_shape[0];
    if (dw_out.data) detail::copy_into<T>(mem, grads.data(), dw_out);
    if (db_out) detail::copy_into<T>(mem, grads.data() + nw, tensor_ref<T>(db_out, {nb}));
  }
  ~impl() {
    // A deferred reduction nobody finished: every rank posted it, so it completes; the sums
    // are dropped (dw and db may be gone by now).
    if (grad_req != MPI_REQUEST_NULL) MPI_Wait(&grad_req, MPI_STATUS_IGNORE);
  }

  // The halo is zero-filled beyond the global boundary although the kernels never read there:
  // the haloed input then is the zero-padded input, ready for kernels that do (cuDNN, oneDNN).
  impl(tensor_desc const& x, std::vector<index_t> w, conv_params const& p_, dist_options const& o)
      : layer("dist_conv", x, windows(x, w, p_), w.empty() ? 0 : w[0], false,
              boundary_fill::constant, o),
        w_shape(std::move(w)), p(p_), k(o.provider, o.threads),
        reduce(detail::dup_comm(x.grid().comm())), mem(layer.mem), dev_grads(mem) {
    k.keep_reorders(o.keep_reorders);
  }

  static std::vector<detail::win1> windows(tensor_desc const& x, std::vector<index_t> const& w,
                                           conv_params const& p) {
    HALOX_REQUIRE(x.type() == dtype_of<T>(), errc::invalid_argument,
                  std::string("dist_conv<") + to_string(dtype_of<T>()) + ">: the input has dtype " +
                      to_string(x.type()) + "; instantiate dist_conv with the matching type");
    HALOX_REQUIRE(w.size() == x.shape().size() && w.size() >= 3 && w[1] == x.shape()[1],
                  errc::invalid_argument,
                  "dist_conv: weight shape of rank " + std::to_string(w.size()) + " with Cin " +
                      (w.size() > 1 ? std::to_string(w[1]) : std::string("?")) +
                      " does not fit the input " + x.dist().str() + "; expected [Cout, " +
                      std::to_string(x.shape()[1]) + ", k...]");
    std::vector<index_t> in(x.shape().begin() + 2, x.shape().end());
    std::vector<index_t> k(w.begin() + 2, w.end());
    return detail::conv_windows(in, k, p);
  }
};

template <class T> dist_conv<T>::dist_conv(tensor_desc const& x, std::vector<index_t> w_shape,
                                           conv_params const& p, dist_options const& o)
    : impl_(std::make_unique<impl>(x, std::move(w_shape), p, o)) {}

template <class T> dist_conv<T>::~dist_conv() = default;
template <class T> dist_conv<T>::dist_conv(dist_conv&&) noexcept = default;
template <class T> dist_conv<T>& dist_conv<T>::operator=(dist_conv&&) noexcept = default;

template <class T> tensor_desc const& dist_conv<T>::input_desc() const noexcept {
  return *impl_->layer.in;
}
template <class T> tensor_desc const& dist_conv<T>::output_desc() const noexcept {
  return *impl_->layer.out;
}
template <class T> std::vector<index_t> const& dist_conv<T>::weight_shape() const noexcept {
  return impl_->w_shape;
}
template <class T> std::vector<int> const& dist_conv<T>::halo_lo() const noexcept {
  return impl_->layer.halo_lo;
}
template <class T> std::vector<int> const& dist_conv<T>::halo_hi() const noexcept {
  return impl_->layer.halo_hi;
}
template <class T> dist_timings const& dist_conv<T>::timings() const noexcept { return impl_->t; }
template <class T> void dist_conv<T>::finish_gradients() { impl_->finish_reduce(); }
template <class T> bool dist_conv<T>::gradients_pending() const noexcept {
  return impl_->grad_req != MPI_REQUEST_NULL;
}
template <class T> std::size_t dist_conv<T>::bytes_sent() const noexcept {
  return impl_->layer.halo->bytes_sent() + impl_->layer.gather->bytes_sent();
}
template <class T> std::string dist_conv<T>::describe() const {
  return impl_->layer.describe() + "  compute provider " + to_string(impl_->k.provider()) + ", " +
         impl_->k.threads_description() + "\n" + impl_->k.describe();
}

namespace {
void check_weights(dims const& expected, dims const& got, char const* what) {
  HALOX_REQUIRE(got == expected, errc::invalid_argument,
                std::string("dist_conv: ") + what + " has shape " + detail::shape_str(got) +
                    " but the layer was built for weights " + detail::shape_str(expected));
}
} // namespace

template <class T> void dist_conv<T>::forward(tensor_view const& x, const_tensor_ref<T> w,
                                              T const* bias, tensor_view const& y) {
  run_forward(x, std::move(w), bias, y, false);
}

template <class T> void dist_conv<T>::forward_relu(tensor_view const& x, const_tensor_ref<T> w,
                                                   T const* bias, tensor_view const& y) {
  run_forward(x, std::move(w), bias, y, true);
}

template <class T> void dist_conv<T>::backward_relu(tensor_view const& x, tensor_view const& y,
                                                    tensor_view const& dy, const_tensor_ref<T> w,
                                                    tensor_view const& dx, tensor_ref<T> dw,
                                                    T* db) {
  auto& L = impl_->layer;
  detail::check_layout(dy, *L.out, "dist_conv::backward_relu: dy");
  double const mask = detail::mask_relu_gradient(
      impl_->k, *L.out, y, dy, "dist_conv::backward_relu: y", "dist_conv::backward_relu: dy");
  backward(x, dy, std::move(w), dx, std::move(dw), db);
  impl_->t.total += mask;
  impl_->t.compute += mask;
}

template <class T> void dist_conv<T>::run_forward(tensor_view const& x, const_tensor_ref<T> w,
                                                  T const* bias, tensor_view const& y, bool relu) {
  auto& L = impl_->layer;
  dist_timings& t = impl_->t;
  t = {};
  double const t0 = MPI_Wtime();
  impl_->finish_reduce(); // a deferred gradient reduction of the last backward
  detail::check_layout(x, *L.in, "dist_conv::forward: x");
  detail::check_partition(y, *L.out, "dist_conv::forward: y");
  check_weights(impl_->w_shape, w.shape, "w");
  // Once the exchange is complete its zero fill beyond the global boundary is the padding
  // (see impl), which the kernels may read; the interior pieces run before that fill.
  const_block_ref<T> const xb = haloed_block<T const>(x);
  const_block_ref<T> xb_filled = xb;
  xb_filled.zero_padding = true;
  block_ref<T> const yb = haloed_block<T>(y);
  detail::run_tuned(
      L.opt, L.fwd_tune, L.tune_comm.get(), L.fwd_polls, L.in->grid().comm(),
      [&] { L.halo->start(x); }, [&] { L.halo->wait(); }, L.fwd_interior, L.fwd_boundary, L.out_own,
      [&](box const& b, bool exchanged) {
        auto const& xs = exchanged ? xb_filled : xb;
        if (relu)
          impl_->k.conv_forward_relu_box(xs, L.in_ext, w, bias, yb, b, impl_->p);
        else
          impl_->k.conv_forward_box(xs, L.in_ext, w, bias, yb, b, impl_->p);
      },
      t);
  t.total = MPI_Wtime() - t0;
}

template <class T> void dist_conv<T>::backward(tensor_view const& x, tensor_view const& dy,
                                               const_tensor_ref<T> w, tensor_view const& dx,
                                               tensor_ref<T> dw, T* db) {
  impl& I = *impl_;
  auto& L = I.layer;
  dist_timings& t = I.t;
  t = {};
  double const t0 = MPI_Wtime();
  I.finish_reduce(); // the last backward's deferred reduction: I.grads is about to be reused
  bool const want_dx = dx.desc != nullptr, want_dw = dw.data != nullptr, want_db = db != nullptr;
  detail::check_layout(dy, *L.out, "dist_conv::backward: dy");
  if (want_dw) detail::check_layout(x, *L.in, "dist_conv::backward: x");
  if (want_dx) {
    detail::check_partition(dx, *L.in, "dist_conv::backward: dx");
    check_weights(I.w_shape, w.shape, "w");
  }
  if (want_dw) check_weights(I.w_shape, dw.shape, "dw");

  index_t const nw = element_count(I.w_shape), nb = I.w_shape[0];
  const_block_ref<T> const dy_own = haloed_block<T const>(dy);
  block_ref<T> const dxb = want_dx ? haloed_block<T>(dx) : block_ref<T>{};
  // Overlap splits off the interior of dx unless measuring found one call on the whole block
  // faster; the weight gradients run during the gather either way. Where no rank's dx reads
  // dy of another rank (dy_local), there is nothing to gather: dx reads dy in place.
  bool const split = L.opt.overlap && L.bwd_tune.split();
  bool const gathers = want_dx && !L.dy_local;
  box_gather_plan& gather = L.gather_for(split);
  T* const ws = detail::gather_workspace<T>(L, gathers, gather);
  const_block_ref<T> const dy_ws = detail::gathered_dy<T>(gathers, L.out_own, ws, gather, dy_own);
  MPI_Request req = MPI_REQUEST_NULL;
  bool weights_done = false; // dw has been computed from dy_own in this call

  // Weight and bias gradients need only owned dy and the input halos left by forward, so they
  // are computed while the dy gather runs, and their all-reduce is posted right away. A device
  // provider accumulates them on the device; they are all-reduced in host memory (any MPI).
  auto weight_grads = [&] {
    if (!want_dw && !want_db) return;
    double const c = MPI_Wtime();
    std::size_t const ng = static_cast<std::size_t>(nw + nb);
    I.grads.assign(ng, T(0));
    T* const part = I.mem.host() ? I.grads.data() : I.dev_grads.reserve(ng);
    if (!I.mem.host()) I.mem.zero(part, ng * sizeof(T));
    if (!L.out_own.empty()) {
      // x's halos, zero fill included, are as forward left them.
      const_block_ref<T> xb = haloed_block<T const>(x);
      xb.zero_padding = true;
      // x is the buffer of the last forward, unchanged since (the caller's promise): a provider
      // may read the copy of it that forward made in its own layout.
      if (want_dw)
        I.k.conv_backward_weights_box(xb, L.in_ext, dy_own, tensor_ref<T>(part, I.w_shape),
                                      L.out_own, I.p, /*x_kept=*/true);
      weights_done = want_dw;
      if (want_db) I.k.conv_backward_bias_box(dy_own, L.out_own, part + nw);
    }
    if (!I.mem.host()) I.mem.to_host(I.grads.data(), part, ng * sizeof(T));
    double const s = MPI_Wtime();
    t.compute += s - c;
    if (!L.opt.reduce_gradients) return; // the caller sums the partials over the ranks
    HALOX_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, I.grads.data(), static_cast<int>(nw + nb),
                                   detail::mpi_type<T>(), MPI_SUM, I.reduce.get(), &req));
    t.reduce += MPI_Wtime() - s;
  };
  // dy read in place right after the weight gradients read it: a provider may read the copy
  // of it that call made.
  auto dx_box = [&](box const& b, bool gathered) {
    bool const in_place = !gathered || !gathers;
    I.k.conv_backward_data_box(gathered ? dy_ws : dy_own, L.in_ext, w, dxb, b, I.p,
                               /*dy_kept=*/in_place && weights_done);
  };

  // The interior pieces also progress the weight-gradient all-reduce posted before them.
  int const polls =
      L.bwd_polls > 1 || ((want_dw || want_db) && L.opt.reduce_gradients && I.reduce.size() > 1 &&
                          static_cast<std::size_t>(nw + nb) * sizeof(T) >= L.opt.progress_min_bytes)
          ? L.opt.progress_polls
          : 1;
  double c = MPI_Wtime();
  if (gathers) gather.start(dy, ws);
  double n = MPI_Wtime();
  t.start += n - c;
  if (L.opt.overlap) {
    weight_grads();
    c = MPI_Wtime();
    if (split && want_dx && !L.bwd_interior.empty())
      detail::run_in_pieces(L.bwd_interior, polls, I.reduce.get(), dx_box);
    n = MPI_Wtime();
    t.compute += n - c;
  }
  if (gathers) gather.wait();
  c = MPI_Wtime();
  t.wait += c - n;
  if (want_dx) {
    if (split)
      for (auto const& b : L.bwd_boundary) dx_box(b, true);
    else if (!L.in_own.empty())
      dx_box(L.in_own, true);
  }
  t.compute += MPI_Wtime() - c;
  if (!L.opt.overlap) weight_grads();
  t.total = MPI_Wtime() - t0;
  if (want_dw || want_db) {
    I.grad_req = req;
    I.dw_out = want_dw ? std::move(dw) : tensor_ref<T>{};
    I.db_out = want_db ? db : nullptr;
    if (!L.opt.reduce_gradients)
      I.store_grads();
    else if (!L.opt.defer_gradient_reduce)
      I.finish_reduce();
  }
  L.bwd_tune.record(t.total, [&](double(&v)[2]) { detail::sum_over(L.tune_comm.get(), v); });
}

template <class T> void dist_conv<T>::exchange_halo(tensor_view const& x) {
  impl_->layer.exchange_halo(x, "dist_conv::exchange_halo: x");
}

template <class T> memory_use dist_conv<T>::memory() const {
  impl const& I = *impl_;
  memory_use m = I.k.memory();
  m += I.layer.plan_memory();
  std::size_t const g = I.grads.capacity() * sizeof(T);
  m.held_host += g; // partial weight gradients, all-reduced in host memory
  if (!I.mem.host()) m.held_device += g;
  return m;
}

template <class T> void dist_conv<T>::keep_reorders(bool keep) {
  impl_->layer.opt.keep_reorders = keep;
  impl_->k.keep_reorders(keep);
}

template class dist_conv<float>;
template class dist_conv<double>;

} // namespace halox::ops
