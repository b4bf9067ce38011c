#include "ops/dist/dist_window.hpp"

#include <halox/collective.hpp>
#include <halox/error.hpp>
#include <halox/ops/dist_lrn.hpp>

#include <mpi.h>

#include <optional>
#include <sstream>

namespace halox::ops {
namespace {

constexpr auto bad = errc::invalid_argument;

std::vector<dim_options> same_blocks(distribution const& d) {
  std::vector<dim_options> o(static_cast<std::size_t>(d.ndim()));
  for (int i = 0; i < d.ndim(); ++i)
    for (int p = 0; p < d.parts()[i]; ++p) o[i].sizes.push_back(d.part_size(i, p));
  return o;
}

// The owned N and spatial block of a buffer with every channel it holds inside [0, channels):
// what the channel-block kernels read. `c0` receives the global channel of its channel 0.
template <class T> tensor_ref<T> channel_view(tensor_view const& v, index_t& c0) {
  tensor_desc const& d = *v.desc;
  tensor_ref<T> r = owned_ref<T>(v);
  box const own = d.owned_box();
  c0 = own.lo[1];
  if (own.empty()) return r;
  index_t const lo = std::max<index_t>(0, own.lo[1] - d.owned_offset_at(1));
  index_t const hi = std::min(d.shape()[1], own.lo[1] - d.owned_offset_at(1) + d.local_shape()[1]);
  r.data -= (own.lo[1] - lo) * r.strides[1];
  r.shape[1] = hi - lo;
  c0 = lo;
  return r;
}

// Channels [lo, hi) of a view whose channel 0 is global channel c0.
template <class T> tensor_ref<T> channels(tensor_ref<T> r, index_t c0, index_t lo, index_t hi) {
  r.data += (lo - c0) * r.strides[1];
  r.shape[1] = hi - lo;
  return r;
}

box channel_box(index_t lo, index_t hi) {
  box b;
  b.nd = 1;
  b.lo[0] = lo;
  b.hi[0] = hi > lo ? hi : lo;
  return b;
}

} // namespace

template <class T> struct dist_lrn<T>::impl {
  lrn_params p;
  dist_options opt;
  bool split = false;
  index_t channels = 0;
  std::optional<tensor_desc> in, out, terms; // terms: float64, the halo the backward sums read
  std::unique_ptr<halo_plan> x_halo, t_halo;
  local_kernels<T> k;
  std::vector<double> t_buf;
  box own_c, fwd_interior, bwd_interior; // channel ranges of this rank
  std::vector<box> fwd_boundary, bwd_boundary;
  int polls = 1;
  detail::overlap_tuner fwd_tune, bwd_tune; // split channels: split or whole, per direction
  communicator tune_comm;
  dist_timings t;

  impl(tensor_desc const& x, lrn_params const& pp, dist_options const& o)
      : p(pp), opt(o), k(validated(x, pp, o)) {
    distribution const& xd = x.dist();
    channels = xd.shape()[1];
    split = xd.parts()[1] > 1;
    auto opts = same_blocks(xd);
    out.emplace(x.grid(), xd.shape(), xd.type(), opts);
    if (!split) {
      in.emplace(*out);
      return;
    }
    opts[1].halo_lo = lrn_reach_lo(p);
    opts[1].halo_hi = lrn_reach_hi(p);
    in.emplace(x.grid(), xd.shape(), xd.type(), opts);
    opts[1].halo_lo = lrn_reach_hi(p);
    opts[1].halo_hi = lrn_reach_lo(p);
    terms.emplace(x.grid(), xd.shape(), dtype::float64, opts);
    halo_options ho;
    ho.method = o.method;
    ho.boundary = boundary_fill::untouched;
    ho.tune = o.tune;
    x_halo = std::make_unique<halo_plan>(*in, ho);
    t_halo = std::make_unique<halo_plan>(*terms, ho);
    polls = detail::progress_pieces(o, x_halo->bytes_sent() + x_halo->bytes_received(),
                                    x_halo->num_peers());

    box const own = out->owned_box();
    index_t const c0 = own.empty() ? 0 : own.lo[1], c1 = own.empty() ? 0 : own.hi[1];
    own_c = channel_box(c0, c1);
    // Channels whose window (forward) or reverse window (backward) lies in the owned block,
    // the global boundary counting as owned.
    auto interior = [&](int below, int above) {
      return channel_box(c0 == 0 ? 0 : c0 + below, c1 == channels ? channels : c1 - above);
    };
    fwd_interior = interior(lrn_reach_lo(p), lrn_reach_hi(p));
    bwd_interior = interior(lrn_reach_hi(p), lrn_reach_lo(p));
    auto clip = [&](box& b) {
      b.lo[0] = std::max(b.lo[0], c0);
      b.hi[0] = std::max(b.lo[0], std::min(b.hi[0], c1));
    };
    clip(fwd_interior);
    clip(bwd_interior);
    fwd_boundary = detail::boundary_boxes(own_c, fwd_interior);
    bwd_boundary = detail::boundary_boxes(own_c, bwd_interior);
    t_buf.assign(static_cast<std::size_t>(terms->local_elements()), 0.0);
    if (detail::measures_overlap(o, x.grid().comm())) { // the same on every rank
      fwd_tune = detail::overlap_tuner(o.overlap_trials);
      bwd_tune = detail::overlap_tuner(o.overlap_trials);
      tune_comm = detail::dup_comm(x.grid().comm());
    }
  }

  static local_kernels<T> validated(tensor_desc const& x, lrn_params const& pp,
                                    dist_options const& o) {
    check_collectively(
        x.grid().comm(), "dist_lrn",
        [&] {
          HALOX_REQUIRE(x.type() == dtype_of<T>(), bad,
                        std::string("dist_lrn<") + to_string(dtype_of<T>()) +
                            ">: the input has dtype " + to_string(x.type()) +
                            "; instantiate it with the matching type");
          HALOX_REQUIRE(x.ndim() >= 2, bad,
                        "dist_lrn: the input " + x.dist().str() +
                            " has no channel dimension; expected [N, C, ...]");
          check_lrn_params(pp, "dist_lrn");
          HALOX_REQUIRE(!x.dist().options(1).periodic, bad,
                        "dist_lrn: the channel dimension of the input " + x.dist().str() +
                            " is periodic; LRN pads the channels with zeros, build the "
                            "descriptor with periodic = false along dimension 1");
          detail::check_overlap_trials("dist_lrn", o);
          (void)detail::check_provider("dist_lrn", o, x.type());
          compute_provider const r = resolve_provider(o.provider, x.type());
          HALOX_REQUIRE(r != compute_provider::cudnn, bad,
                        "dist_lrn: LRN is not supported by the cudnn provider; use provider "
                        "reference or onednn");
        },
        [&] {
          std::uint64_t h = 0x9e3779b97f4a7c15ull;
          auto mix = [&](double v) {
            h = (h ^ static_cast<std::uint64_t>(v * 1e12)) * 1099511628211ull;
          };
          for (double v : {double(pp.size), pp.alpha, pp.beta, pp.k, double(o.provider),
                           double(o.method), double(o.overlap), double(o.overlap_trials)})
            mix(v);
          return h;
        },
        [&] {
          std::ostringstream s;
          s << "size=" << pp.size << "; alpha=" << pp.alpha << "; beta=" << pp.beta
            << "; k=" << pp.k << "; provider=" << to_string(o.provider)
            << "; backend=" << to_string(o.method) << "; overlap=" << (o.overlap ? "on" : "off")
            << "; overlap_trials=" << o.overlap_trials;
          return s.str();
        });
    return local_kernels<T>(o.provider, o.threads);
  }
};

template <class T>
dist_lrn<T>::dist_lrn(tensor_desc const& x, lrn_params const& p, dist_options const& o)
    : impl_(std::make_unique<impl>(x, p, o)) {}
template <class T> dist_lrn<T>::~dist_lrn() = default;
template <class T> dist_lrn<T>::dist_lrn(dist_lrn&&) noexcept = default;
template <class T> dist_lrn<T>& dist_lrn<T>::operator=(dist_lrn&&) noexcept = default;

template <class T> lrn_params const& dist_lrn<T>::params() const noexcept { return impl_->p; }
template <class T> bool dist_lrn<T>::splits_channels() const noexcept { return impl_->split; }
template <class T> tensor_desc const& dist_lrn<T>::input_desc() const noexcept {
  return *impl_->in;
}
template <class T> tensor_desc const& dist_lrn<T>::output_desc() const noexcept {
  return *impl_->out;
}
template <class T> dist_timings const& dist_lrn<T>::timings() const noexcept { return impl_->t; }
template <class T> std::size_t dist_lrn<T>::bytes_sent() const noexcept {
  return impl_->split ? impl_->x_halo->bytes_sent() + impl_->t_halo->bytes_sent() : 0;
}

template <class T> std::string dist_lrn<T>::describe() const {
  impl const& I = *impl_;
  std::ostringstream os;
  os << "dist_lrn on rank " << I.out->grid().rank() << ": size " << I.p.size << ", alpha "
     << I.p.alpha << ", beta " << I.p.beta << ", k " << I.p.k << "\n  input  " << I.in->dist().str()
     << "\n  output " << I.out->dist().str() << "\n";
  if (I.split) {
    os << "  owned channels " << detail::box_str(I.own_c) << "; forward interior "
       << detail::box_str(I.fwd_interior) << ", x " << I.x_halo->describe()
       << "\n  backward interior " << detail::box_str(I.bwd_interior) << ", terms "
       << I.t_halo->describe() << "\n  compute: reference channel-block kernels\n";
    if (I.tune_comm.get() != MPI_COMM_NULL)
      os << "  overlap measured: forward " << I.fwd_tune.describe() << "; backward "
         << I.bwd_tune.describe() << "\n";
  } else {
    os << "  channels not split: no communication; compute provider " << to_string(I.k.provider())
       << ", " << I.k.threads_description() << "\n"
       << I.k.describe();
  }
  return os.str();
}

template <class T> void dist_lrn<T>::forward(tensor_view const& x, tensor_view const& y) {
  impl& I = *impl_;
  dist_timings& t = I.t;
  t = {};
  double const t0 = MPI_Wtime();
  detail::check_partition(y, *I.out, "dist_lrn::forward: y");
  if (!I.split) {
    detail::check_partition(x, *I.in, "dist_lrn::forward: x");
    if (!I.out->empty()) I.k.lrn_forward(owned_ref<T const>(x), owned_ref<T>(y), I.p);
    t.total = t.compute = MPI_Wtime() - t0;
    return;
  }
  detail::check_layout(x, *I.in, "dist_lrn::forward: x");
  bool const mine = !I.out->empty();
  index_t xc0 = 0;
  const_tensor_ref<T> const xv = mine ? channel_view<T const>(x, xc0) : const_tensor_ref<T>{};
  tensor_ref<T> const y_own = owned_ref<T>(y);
  index_t const c0 = I.own_c.lo[0], c1 = I.own_c.hi[0];
  detail::run_tuned(
      I.opt, I.fwd_tune, I.tune_comm.get(), I.polls, I.in->grid().comm(),
      [&] { I.x_halo->start(x); }, [&] { I.x_halo->wait(); }, I.fwd_interior, I.fwd_boundary,
      I.own_c,
      [&](box const& b, bool after) {
        if (!mine || b.empty()) return;
        // Before the exchange completes only the owned channels may be read.
        lrn_forward_channels<T>(after ? xv : channels(xv, xc0, c0, c1), after ? xc0 : c0,
                                I.channels, channels(y_own, c0, b.lo[0], b.hi[0]), b.lo[0], I.p);
      },
      t);
  t.total = MPI_Wtime() - t0;
}

template <class T>
void dist_lrn<T>::backward(tensor_view const& x, tensor_view const& dy, tensor_view const& dx) {
  impl& I = *impl_;
  dist_timings& t = I.t;
  t = {};
  double const t0 = MPI_Wtime();
  detail::check_partition(dy, *I.out, "dist_lrn::backward: dy");
  detail::check_partition(dx, *I.out, "dist_lrn::backward: dx");
  if (!I.split) {
    detail::check_partition(x, *I.in, "dist_lrn::backward: x");
    if (!I.out->empty())
      I.k.lrn_backward(owned_ref<T const>(x), owned_ref<T const>(dy), owned_ref<T>(dx), I.p);
    t.total = t.compute = MPI_Wtime() - t0;
    return;
  }
  detail::check_layout(x, *I.in, "dist_lrn::backward: x");
  bool const mine = !I.out->empty();
  index_t xc0 = 0, tc0 = 0;
  const_tensor_ref<T> const xv = mine ? channel_view<T const>(x, xc0) : const_tensor_ref<T>{};
  const_tensor_ref<T> const dy_own = owned_ref<T const>(dy);
  tensor_ref<T> const dx_own = owned_ref<T>(dx);
  tensor_view const tv(*I.terms, I.t_buf);
  tensor_ref<double> const t_own = owned_ref<double>(tv);
  const_tensor_ref<double> const t_all =
      mine ? channel_view<double const>(tv, tc0) : const_tensor_ref<double>{};
  index_t const c0 = I.own_c.lo[0], c1 = I.own_c.hi[0];
  double const s = MPI_Wtime();
  if (mine) lrn_backward_terms<T>(xv, xc0, I.channels, dy_own, t_own, c0, I.p);
  t.compute += MPI_Wtime() - s;
  detail::run_tuned(
      I.opt, I.bwd_tune, I.tune_comm.get(), I.polls, I.in->grid().comm(),
      [&] { I.t_halo->start(tv); }, [&] { I.t_halo->wait(); }, I.bwd_interior, I.bwd_boundary,
      I.own_c,
      [&](box const& b, bool after) {
        if (!mine || b.empty()) return;
        // Before the exchange completes only the owned terms may be read.
        const_tensor_ref<double> const tr = after ? t_all : channels(t_all, tc0, c0, c1);
        lrn_backward_apply<T>(xv, xc0, I.channels, channels(dy_own, c0, b.lo[0], b.hi[0]), tr,
                              after ? tc0 : c0, channels(dx_own, c0, b.lo[0], b.hi[0]), b.lo[0],
                              I.p);
      },
      t);
  t.total = MPI_Wtime() - t0;
}

template <class T> memory_use dist_lrn<T>::memory() const {
  impl const& I = *impl_;
  memory_use m = I.k.memory();
  if (I.x_halo) m += detail::held(I.x_halo->workspace_bytes());
  if (I.t_halo) m += detail::held(I.t_halo->workspace_bytes());
  m.held_host += I.t_buf.capacity() * sizeof(double);
  return m;
}

template class dist_lrn<float>;
template class dist_lrn<double>;

} // namespace halox::ops
