#include "ops/dist_window.hpp"
#include "ops/memory.hpp"

#include <halox/error.hpp>
#include <halox/ops/dist_pool.hpp>
#include <halox/ops/provider.hpp>

#include <mpi.h>

#include <cstring>
#include <type_traits>
#include <vector>

namespace halox::ops {

template <class T> struct dist_pool<T>::impl {
  detail::window_layer layer;
  pool_params p;
  local_kernels<T> k;         // the provider that computes every box
  detail::space_buffer<T> ws; // gathered dy, in the provider's memory
  dist_timings t;
  // Max pooling where this rank's backward reads outputs another rank owns (a split window
  // row): `bwd_out`, the outputs touching the owned inputs, is larger than the owned outputs.
  // The forward then computes all of bwd_out into `yk` and copies the owned part to y, so that
  // the winners it keeps are those of the outputs backward reads: without it that rank's
  // backward found all its winners again (a whole forward pass) while the other's used them.
  box bwd_out;
  bool widen = false;
  std::vector<T> yk;

  // Padding never takes part in a max (and average pooling counts it without reading it), so
  // halo cells beyond the global boundary are left as they are.
  impl(tensor_desc const& x, pool_params const& p_, dist_options const& o)
      : layer("dist_pool", x, windows(x, p_), x.shape().size() > 1 ? x.shape()[1] : 0,
              p_.kind == pool_kind::max, boundary_fill::untouched, o),
        p(p_), k(o.provider, o.threads), ws(detail::space_ops(layer.mem)) {
    // Only where the kernels keep winners (oneDNN, float, host memory); the others find them
    // again in backward whatever the forward computed.
    if (p.kind != pool_kind::max || !std::is_same_v<T, float> ||
        k.provider() != compute_provider::onednn || layer.mem != memory_space::host ||
        layer.in_own.empty())
      return;
    std::vector<detail::range1> r;
    for (std::size_t i = 0; i < layer.win.size(); ++i)
      r.push_back(detail::output_footprint(layer.win[i], {layer.in_own.lo[static_cast<int>(i)],
                                                          layer.in_own.hi[static_cast<int>(i)]}));
    bwd_out = detail::make_box(r);
    widen = !bwd_out.empty() && bwd_out.volume() > layer.out_own.volume();
  }

  // The forward of the owned outputs through bwd_out (see above), keeping its winners.
  void widened_forward(const_block_ref<T> const& xb, block_ref<T> const& yb) {
    dims shape{yb.ref.shape[0], yb.ref.shape[1]};
    dims origin;
    for (int d = 0; d < bwd_out.nd; ++d) {
      shape.push_back(bwd_out.extent(d));
      origin.push_back(bwd_out.lo[d]);
    }
    yk.resize(static_cast<std::size_t>(element_count(shape))); // once: the shape stays
    block_ref<T> const kb(tensor_ref<T>(yk.data(), shape), origin);
    k.pool_forward_box(xb, layer.in_ext, kb, bwd_out, p, /*keep=*/true);
    // The owned outputs' rows, from kb to y.
    auto const org = [](block_ref<T> const& b, int d) { // an empty origin is all zeros
      return b.origin.empty() ? index_t{0} : b.origin[static_cast<std::size_t>(d)];
    };
    box const& own = layer.out_own;
    int const nsp = own.nd;
    index_t const row = own.extent(nsp - 1);
    index_t rows = 1;
    for (int d = 0; d + 1 < nsp; ++d) rows *= own.extent(d);
    for (index_t n = 0; n < shape[0]; ++n)
      for (index_t c = 0; c < shape[1]; ++c)
        for (index_t q = 0; q < rows; ++q) {
          index_t rest = q, src = n * kb.ref.strides[0] + c * kb.ref.strides[1];
          index_t dst = n * yb.ref.strides[0] + c * yb.ref.strides[1];
          for (int d = nsp - 1; d >= 0; --d) {
            index_t const i = d == nsp - 1 ? own.lo[d] : own.lo[d] + rest % own.extent(d);
            if (d < nsp - 1) rest /= own.extent(d);
            src += (i - org(kb, d)) * kb.ref.strides[2 + d];
            dst += (i - org(yb, d)) * yb.ref.strides[2 + d];
          }
          index_t const ys = yb.ref.strides[static_cast<std::size_t>(1 + nsp)];
          if (ys == 1)
            std::memcpy(yb.ref.data + dst, kb.ref.data + src,
                        static_cast<std::size_t>(row) * sizeof(T));
          else // y's rows may be strided (any strides are allowed)
            for (index_t j = 0; j < row; ++j) yb.ref.data[dst + j * ys] = kb.ref.data[src + j];
        }
  }

  static std::vector<detail::win1> windows(tensor_desc const& x, pool_params const& p) {
    HALOX_REQUIRE(x.type() == dtype_of<T>(), errc::invalid_argument,
                  std::string("dist_pool<") + to_string(dtype_of<T>()) + ">: the input has dtype " +
                      to_string(x.type()) + "; instantiate dist_pool with the matching type");
    HALOX_REQUIRE(x.ndim() >= 3, errc::invalid_argument,
                  "dist_pool: the input " + x.dist().str() + " has no spatial dimension");
    std::vector<index_t> in(x.shape().begin() + 2, x.shape().end());
    return detail::pool_windows(in, p);
  }
};

template <class T>
dist_pool<T>::dist_pool(tensor_desc const& x, pool_params const& p, dist_options const& o)
    : impl_(std::make_unique<impl>(x, p, o)) {}

template <class T> dist_pool<T>::~dist_pool() = default;
template <class T> dist_pool<T>::dist_pool(dist_pool&&) noexcept = default;
template <class T> dist_pool<T>& dist_pool<T>::operator=(dist_pool&&) noexcept = default;

template <class T> tensor_desc const& dist_pool<T>::input_desc() const noexcept {
  return *impl_->layer.in;
}
template <class T> tensor_desc const& dist_pool<T>::output_desc() const noexcept {
  return *impl_->layer.out;
}
template <class T> std::vector<int> const& dist_pool<T>::halo_lo() const noexcept {
  return impl_->layer.halo_lo;
}
template <class T> std::vector<int> const& dist_pool<T>::halo_hi() const noexcept {
  return impl_->layer.halo_hi;
}
template <class T> dist_timings const& dist_pool<T>::timings() const noexcept { return impl_->t; }
template <class T> std::size_t dist_pool<T>::bytes_sent() const noexcept {
  return impl_->layer.halo->bytes_sent() + impl_->layer.gather->bytes_sent();
}
template <class T> std::string dist_pool<T>::describe() const {
  return impl_->layer.describe() + "  compute provider " + to_string(impl_->k.provider()) + ", " +
         impl_->k.threads_description() + "\n" + impl_->k.describe();
}

template <class T> void dist_pool<T>::forward(tensor_view const& x, tensor_view const& y) {
  auto& L = impl_->layer;
  dist_timings& t = impl_->t;
  t = {};
  double const t0 = MPI_Wtime();
  detail::check_layout(x, *L.in, "dist_pool::forward: x");
  detail::check_partition(y, *L.out, "dist_pool::forward: y");
  const_block_ref<T> const xb = haloed_block<T const>(x);
  block_ref<T> const yb = haloed_block<T>(y);
  detail::run_tuned(
      L.opt, L.fwd_tune, L.tune_comm.get(), L.fwd_polls, L.in->grid().comm(),
      [&] { L.halo->start(x); }, [&] { L.halo->wait(); }, L.fwd_interior, L.fwd_boundary, L.out_own,
      [&](box const& b, bool after_exchange) {
        // The whole block in one call, with the halo in place: the outputs beyond the owned
        // ones read it even where the owned ones do not (then computed before it arrives).
        if (impl_->widen && after_exchange && b == L.out_own)
          impl_->widened_forward(xb, yb);
        else
          impl_->k.pool_forward_box(xb, L.in_ext, yb, b, impl_->p, /*keep=*/true);
      },
      t);
  t.total = MPI_Wtime() - t0;
}

template <class T>
void dist_pool<T>::backward(tensor_view const& x, tensor_view const& dy, tensor_view const& dx) {
  impl& I = *impl_;
  auto& L = I.layer;
  dist_timings& t = I.t;
  t = {};
  double const t0 = MPI_Wtime();
  bool const is_max = I.p.kind == pool_kind::max;
  detail::check_layout(dy, *L.out, "dist_pool::backward: dy");
  if (is_max) detail::check_layout(x, *L.in, "dist_pool::backward: x");
  detail::check_partition(dx, *L.in, "dist_pool::backward: dx");
  const_block_ref<T> const xb = is_max ? haloed_block<T const>(x) : const_block_ref<T>{};
  const_block_ref<T> const dy_own = haloed_block<T const>(dy);
  block_ref<T> const dxb = haloed_block<T>(dx);
  box_gather_plan& gather = L.gather_for(L.opt.overlap && L.bwd_tune.split());
  T* const ws = I.ws.reserve(static_cast<std::size_t>(gather.elements()));
  const_block_ref<T> const dy_ws = detail::workspace_block<T>(ws, gather);
  detail::run_tuned(
      L.opt, L.bwd_tune, L.tune_comm.get(), L.bwd_polls, L.in->grid().comm(),
      [&] { gather.start(dy, ws); }, [&] { gather.wait(); }, L.bwd_interior, L.bwd_boundary,
      L.in_own,
      [&](box const& b, bool gathered) {
        // x is the buffer of the last forward, unchanged since (the documented contract)
        I.k.pool_backward_box(xb, gathered ? dy_ws : dy_own, L.in_ext, dxb, b, I.p,
                              /*x_kept=*/is_max);
      },
      t);
  t.total = MPI_Wtime() - t0;
}

template class dist_pool<float>;
template class dist_pool<double>;

} // namespace halox::ops
