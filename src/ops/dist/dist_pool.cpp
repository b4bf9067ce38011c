#include "ops/dist/dist_window.hpp"
#include "ops/kernels/elementwise.hpp"
#include "ops/providers/memory.hpp"

#include <halox/error.hpp>
#include <halox/ops/dist_pool.hpp>
#include <halox/ops/provider.hpp>

#include <mpi.h>

#include <algorithm>
#include <type_traits>
#include <vector>

namespace halox::ops {

template <class T> struct dist_pool<T>::impl {
  detail::window_layer layer;
  pool_params p;
  local_kernels<T> k; // the provider that computes every box
  dist_timings t;
  // Max pooling where this rank's backward reads outputs another rank owns (a split window
  // row): `bwd_out`, the outputs touching the owned inputs, is larger than the owned outputs.
  // The forward then computes all of bwd_out into `kb` (over `yk`) and copies the owned part to
  // y, so that the winners it keeps are those of the outputs backward reads: without it that
  // rank's backward found all its winners again (a whole forward pass) while the other's used
  // them. Built once: a forward call allocates nothing.
  box bwd_out;
  bool widen = false;
  std::vector<T> yk;
  block_ref<T> kb;    // yk as the block of bwd_out
  dims own_shape;     // [N, C, owned output extents...]
  index_t own_at = 0; // offset of the first owned output in yk

  // Padding never takes part in a max (and average pooling counts it without reading it), so
  // halo cells beyond the global boundary are left as they are.
  impl(tensor_desc const& x, pool_params const& p_, dist_options const& o)
      : layer("dist_pool", x, windows(x, p_), x.shape().size() > 1 ? x.shape()[1] : 0,
              p_.kind == pool_kind::max, boundary_fill::untouched, o),
        p(p_), k(o.provider, o.threads) {
    // Only where the kernels keep winners (oneDNN, float, host memory); the others find them
    // again in backward whatever the forward computed.
    if (p.kind != pool_kind::max || !std::is_same_v<T, float> ||
        k.provider() != compute_provider::onednn || layer.mem != memory_space::host ||
        layer.in_own.empty())
      return;
    box const& own = layer.out_own;
    std::vector<detail::range1> r;
    for (int i = 0; i < own.nd; ++i)
      r.push_back(detail::output_footprint(layer.win[static_cast<std::size_t>(i)],
                                           {layer.in_own.lo[i], layer.in_own.hi[i]}));
    bwd_out = detail::make_box(r);
    widen = !bwd_out.empty() && bwd_out.volume() > own.volume();
    if (!widen) return;
    box const xo = layer.in->owned_box(); // N and C as the output's
    dims shape{xo.extent(0), xo.extent(1)}, origin;
    own_shape = shape;
    for (int d = 0; d < own.nd; ++d) {
      shape.push_back(bwd_out.extent(d));
      origin.push_back(bwd_out.lo[d]);
      own_shape.push_back(own.extent(d));
    }
    yk.resize(static_cast<std::size_t>(element_count(shape)));
    kb = block_ref<T>(tensor_ref<T>(yk.data(), shape), origin);
    for (int d = 0; d < own.nd; ++d)
      own_at += (own.lo[d] - bwd_out.lo[d]) * kb.ref.strides[static_cast<std::size_t>(2 + d)];
  }

  // The forward of the owned outputs through bwd_out (see above), keeping its winners.
  void widened_forward(const_block_ref<T> const& xb, block_ref<T> const& yb) {
    k.pool_forward_box(xb, layer.in_ext, kb, bwd_out, p, /*keep=*/true);
    box const& own = layer.out_own;
    T* y = yb.ref.data;
    for (int d = 0; d < own.nd; ++d) // y's origin: empty means all zeros
      y += (own.lo[d] - (yb.origin.empty() ? 0 : yb.origin[static_cast<std::size_t>(d)])) *
           yb.ref.strides[static_cast<std::size_t>(2 + d)];
    T const* src = yk.data() + own_at;
    // y may have any strides: runs are rows where its last dimension is dense, else elements.
    detail::for_each_run(own_shape, yb.ref.strides, kb.ref.strides, kb.ref.strides,
                         [&](index_t oy, index_t ok, index_t, index_t n) {
                           std::copy(src + ok, src + ok + n, y + oy);
                         });
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
  // Where no rank's dx reads dy of another rank (dy_local), dx reads dy in place: no gather.
  bool const gathers = !L.dy_local;
  box_gather_plan& gather = L.gather_for(L.opt.overlap && L.bwd_tune.split());
  T* const ws = detail::gather_workspace<T>(L, gathers, gather);
  const_block_ref<T> const dy_ws = detail::gathered_dy<T>(gathers, L.out_own, ws, gather, dy_own);
  detail::run_tuned(
      L.opt, L.bwd_tune, L.tune_comm.get(), L.bwd_polls, L.in->grid().comm(),
      [&] {
        if (gathers) gather.start(dy, ws);
      },
      [&] {
        if (gathers) gather.wait();
      },
      L.bwd_interior, L.bwd_boundary, L.in_own,
      [&](box const& b, bool gathered) {
        // x is the buffer of the last forward, unchanged since (the documented contract)
        I.k.pool_backward_box(xb, gathered ? dy_ws : dy_own, L.in_ext, dxb, b, I.p,
                              /*x_kept=*/is_max);
      },
      t);
  t.total = MPI_Wtime() - t0;
}

template <class T> void dist_pool<T>::exchange_halo(tensor_view const& x) {
  impl_->layer.exchange_halo(x, "dist_pool::exchange_halo: x");
}

template <class T> memory_use dist_pool<T>::memory() const {
  memory_use m = impl_->k.memory();
  m += impl_->layer.plan_memory();
  m.held_host += impl_->yk.capacity() * sizeof(T); // the widened forward's outputs
  return m;
}

template class dist_pool<float>;
template class dist_pool<double>;

} // namespace halox::ops
