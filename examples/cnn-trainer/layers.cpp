// The layer implementations: convolution, pooling, batch norm and ReLU wrap halox's
// distributed operators; dropout, residual add, flatten and the fully connected layer are the
// trainer's own (pointwise, or sample-parallel).
#include "layers.hpp"

#include "fc_kernels.hpp"
#include "grad_reducer.hpp"
#include "transfer.hpp"

#include <halox/error.hpp>
#include <halox/ops/distributed.hpp>
#include <halox/ops/ops.hpp>

#include <cstring>
#include <type_traits>

namespace trainer {
namespace ops = halox::ops;
using halox::index_t;
using halox::tensor_desc;
using halox::tensor_view;

halox::process_grid const& grid_cache::get(std::vector<int> const& dims) {
  auto& g = grids_[dims];
  if (!g) g = std::make_unique<halox::process_grid>(comm_, dims);
  return *g;
}

namespace {

template <class T> ops::const_tensor_ref<T> cref(param<T> const& p) {
  return ops::const_tensor_ref<T>(p.value.data(), p.shape);
}

ops::dist_options op_options(build_options const& bo) {
  ops::dist_options o;
  o.method = bo.exchange; // a fixed backend: no measuring collectives per layer and batch size
  return o;
}

// Where a layer's all-reduced gradient sums go: `a`, and the tail into `b` when non-null.
template <class T> struct sum_target {
  std::vector<double>* sums = nullptr;
  std::vector<T>* a = nullptr;
  std::vector<T>* b = nullptr;
  void round() const {
    for (std::size_t i = 0; i < a->size(); ++i) (*a)[i] = static_cast<T>((*sums)[i]);
    if (b)
      for (std::size_t i = 0; i < b->size(); ++i) (*b)[i] = static_cast<T>((*sums)[a->size() + i]);
  }
};

// Lists `t.sums` (partial sums in double) in the step's gradient buckets and, once the step has
// summed it, rounds the totals into the target. The layer keeps `t`, so the finisher captures
// one pointer and fits in std::function's inline storage: a step allocates nothing here.
template <class T> void post_sums(sum_target<T> const& t, step_context const& c) {
  c.grads->add({t.sums->data(), t.sums->size(), true});
  sum_target<T> const* tp = &t;
  c.finish->push_back([tp] { tp->round(); });
}

// A copy of `v`'s buffer in double, and the block of it that `haloed_block` would give.
template <class T> ops::block_ref<double> block64(tensor_view const& v, std::vector<double>& copy) {
  auto const b = ops::haloed_block<T>(v);
  T const* src = static_cast<T const*>(v.data);
  std::size_t const n = v.bytes / sizeof(T);
  copy.resize(n);
  for (std::size_t i = 0; i < n; ++i) copy[i] = src[i];
  ops::block_ref<double> r;
  r.origin = b.origin;
  r.ref.shape = b.ref.shape;
  r.ref.strides = b.ref.strides;
  r.ref.data = b.ref.data ? copy.data() + (b.ref.data - src) : nullptr;
  return r;
}

template <class T> class conv_layer final : public layer<T> {
public:
  conv_layer(layer_spec const& s, tensor_desc const& x, param_store<T>& ps, layer_params const& lp,
             build_options const& bo)
      : ps_(ps), lp_(lp), params_(params(s)),
        op_(x, ps.params[lp.weight].shape, params_, options(bo)) {}
  tensor_desc const& in_desc() const override { return op_.input_desc(); }
  tensor_desc const& out_desc() const override { return op_.output_desc(); }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    T const* bias = lp_.bias >= 0 ? ps_.params[lp_.bias].value.data() : nullptr;
    if (relu_)
      op_.forward_relu(x, cref(ps_.params[lp_.weight]), bias, y);
    else
      op_.forward(x, cref(ps_.params[lp_.weight]), bias, y);
    c.times->add(op_.timings());
  }
  bool fuse_relu() override {
    relu_ = true;
    return true;
  }
  void backward(tensor_view const& x, tensor_view const& y, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    auto& w = ps_.params[lp_.weight];
    T* db = lp_.bias >= 0 ? ps_.params[lp_.bias].grad.data() : nullptr;
    // A fused ReLU's backward turns dy into the convolution's output gradient first (in place),
    // so the deterministic weight gradients below read the masked dy.
    auto run = [&](ops::tensor_ref<T> dw, T* b) {
      if (relu_)
        op_.backward_relu(x, y, dy, cref(w), dx, std::move(dw), b);
      else
        op_.backward(x, dy, cref(w), dx, std::move(dw), b);
    };
    if (!c.exact_grads) {
      // The operator leaves dw and db as this rank's partial sums (reduce_gradients = false);
      // the step sums them with the other layers' (the gradient buckets).
      run(ops::tensor_ref<T>(w.grad.data(), w.shape), db);
      c.times->add(op_.timings());
      c.grads->add({w.grad.data(), w.grad.size(), false});
      if (db) c.grads->add({db, ps_.params[lp_.bias].grad.size(), false});
      return;
    }
    run(ops::tensor_ref<T>{}, nullptr); // dx only
    c.times->add(op_.timings());
    double const t0 = now();
    std::size_t const nb = lp_.bias >= 0 ? ps_.params[lp_.bias].value.size() : 0;
    sums_.assign(w.value.size() + nb, 0.0);
    halox::box const own = op_.output_desc().owned_box();
    if (!own.empty()) {
      int const nd = own.nd;
      halox::box out; // the owned outputs, spatial dimensions only
      out.nd = nd - 2;
      for (int d = 2; d < nd; ++d) out.lo[d - 2] = own.lo[d], out.hi[d - 2] = own.hi[d];
      std::vector<index_t> const& s = op_.input_desc().shape();
      std::vector<index_t> const in_extent(s.begin() + 2, s.end());
      auto const xb = block64<T>(x, x64_), dyb = block64<T>(dy, dy64_);
      ops::conv_backward_weights_box<double>(
          xb, in_extent, dyb, ops::tensor_ref<double>(sums_.data(), w.shape), out, params_);
      if (nb) ops::conv_backward_bias_box<double>(dyb, out, sums_.data() + w.value.size());
    }
    c.times->compute += now() - t0;
    target_ = {&sums_, &w.grad, nb ? &ps_.params[lp_.bias].grad : nullptr};
    post_sums(target_, c);
  }
  std::string tuned() const override { return op_.describe(); }
  bool backward_reads_output() const override { return relu_; }
  ops::memory_use memory() const override {
    ops::memory_use m = op_.memory();
    m.held_host += (sums_.capacity() + x64_.capacity() + dy64_.capacity()) * sizeof(double);
    return m;
  }
  void keep_reorders(bool keep) override { op_.keep_reorders(keep); }
  void exchange_halo(tensor_view const& x) override { op_.exchange_halo(x); }

private:
  static ops::dist_options options(build_options const& bo) {
    ops::dist_options o = op_options(bo);
    o.reduce_gradients = false; // summed by the step: the buckets, or exact sums in double
    return o;
  }
  static ops::conv_params params(layer_spec const& s) {
    ops::conv_params p;
    p.stride = s.stride;
    p.pad_lo = p.pad_hi = s.pad;
    p.dilation = s.dilation;
    return p;
  }
  param_store<T>& ps_;
  layer_params lp_;
  ops::conv_params params_;
  ops::dist_conv<T> op_;
  std::vector<double> sums_, x64_, dy64_; // exact_grads: partial sums, double copies
  sum_target<T> target_;
  bool relu_ = false; // a ReLU after this layer runs in its passes
};

template <class T> class pool_layer final : public layer<T> {
public:
  pool_layer(layer_spec const& s, tensor_desc const& x, build_options const& bo)
      : avg_(s.kind == "avgpool"), op_(x, params(s), op_options(bo)) {}
  tensor_desc const& in_desc() const override { return op_.input_desc(); }
  tensor_desc const& out_desc() const override { return op_.output_desc(); }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    op_.forward(x, y);
    c.times->add(op_.timings());
  }
  void backward(tensor_view const& x, tensor_view const&, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    op_.backward(avg_ ? tensor_view{} : x, dy, dx);
    c.times->add(op_.timings());
  }
  std::string tuned() const override { return op_.describe(); }
  bool backward_reads_input() const override { return !avg_; }
  void exchange_halo(tensor_view const& x) override { op_.exchange_halo(x); }
  ops::memory_use memory() const override { return op_.memory(); }

private:
  static ops::pool_params params(layer_spec const& s) {
    ops::pool_params p;
    p.kind = s.kind == "avgpool" ? ops::pool_kind::average : ops::pool_kind::max;
    p.kernel = s.kernel;
    p.stride = s.stride;
    p.pad_lo = p.pad_hi = s.pad;
    p.dilation = s.dilation;
    return p;
  }
  bool avg_;
  ops::dist_pool<T> op_;
};

template <class T> class bn_layer final : public layer<T> {
public:
  bn_layer(layer_spec const& s, tensor_desc const& x, param_store<T>& ps, layer_params const& lp)
      : desc_(x), ps_(ps), lp_(lp),
        op_(x, s.global_stats ? ops::bn_stats_mode::global : ops::bn_stats_mode::local) {}
  tensor_desc const& in_desc() const override { return desc_; }
  tensor_desc const& out_desc() const override { return desc_; }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    op_.set_training(c.training);
    auto& P = ps_.params;
    // A recomputed forward leaves the running statistics as the first one left them.
    T* const rm = c.recompute ? nullptr : P[lp_.running_mean].value.data();
    T* const rv = c.recompute ? nullptr : P[lp_.running_var].value.data();
    if (relu_)
      op_.forward_relu(x, y, P[lp_.gamma].value.data(), P[lp_.beta].value.data(), rm, rv);
    else
      op_.forward(x, y, P[lp_.gamma].value.data(), P[lp_.beta].value.data(), rm, rv);
    c.times->add(op_.timings());
  }
  bool fuse_relu() override {
    relu_ = true;
    return true;
  }
  void backward(tensor_view const& x, tensor_view const& y, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    auto& P = ps_.params;
    // dx is always needed by the dist op's signature; a first-layer BN writes into scratch,
    // reserved once.
    tensor_view d = dx;
    if (!d.data) {
      if (scratch_.empty()) scratch_.resize(static_cast<std::size_t>(desc_.local_elements()));
      d = tensor_view(desc_, scratch_);
    }
    if (relu_)
      op_.backward_relu(x, y, dy, P[lp_.gamma].value.data(), d, P[lp_.gamma].grad.data(),
                        P[lp_.beta].grad.data());
    else
      op_.backward(x, dy, P[lp_.gamma].value.data(), d, P[lp_.gamma].grad.data(),
                   P[lp_.beta].grad.data());
    c.times->add(op_.timings());
  }

  bool backward_reads_output() const override { return relu_; }
  ops::memory_use memory() const override {
    ops::memory_use m = op_.memory();
    m.held_host += scratch_.capacity() * sizeof(T);
    return m;
  }

private:
  tensor_desc desc_;
  param_store<T>& ps_;
  layer_params lp_;
  ops::dist_batch_norm<T> op_;
  std::vector<T> scratch_;
  bool relu_ = false; // a ReLU after this layer runs in its passes
};

template <class T> class relu_layer final : public layer<T> {
public:
  explicit relu_layer(tensor_desc const& x) : desc_(x), op_(x) {}
  tensor_desc const& in_desc() const override { return desc_; }
  tensor_desc const& out_desc() const override { return desc_; }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    double const t0 = now();
    op_.forward(x, y);
    c.times->compute += now() - t0;
  }
  void backward(tensor_view const& x, tensor_view const&, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    if (!dx.data) return;
    double const t0 = now();
    op_.backward(x, dy, dx);
    c.times->compute += now() - t0;
  }

  ops::memory_use memory() const override { return op_.memory(); }

private:
  tensor_desc desc_;
  ops::dist_relu<T> op_;
};

// LRN across channels. The strategies never split the channels, so the operator exchanges
// nothing and the layer keeps its input's layout. Each provider computes every element the same
// way whatever the block's shape, so deterministic runs need no provider of their own here.
template <class T> class lrn_layer final : public layer<T> {
public:
  lrn_layer(layer_spec const& s, tensor_desc const& x, build_options const& bo)
      : op_(x, {s.lrn_size, s.lrn_alpha, s.lrn_beta, s.lrn_k}, op_options(bo)) {}
  tensor_desc const& in_desc() const override { return op_.input_desc(); }
  tensor_desc const& out_desc() const override { return op_.output_desc(); }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    op_.forward(x, y);
    c.times->add(op_.timings());
  }
  void backward(tensor_view const& x, tensor_view const&, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    if (!dx.data) return;
    op_.backward(x, dy, dx);
    c.times->add(op_.timings());
  }
  std::string tuned() const override { return op_.describe(); }
  ops::memory_use memory() const override { return op_.memory(); }

private:
  ops::dist_lrn<T> op_;
};

// Inverted dropout. The mask of an element is a hash of the seed, the step, the layer and the
// element's global index in the batch tensor, so it is the same whatever rank holds it.
template <class T> class dropout_layer final : public layer<T> {
public:
  dropout_layer(layer_spec const& s, int index, tensor_desc const& x)
      : desc_(x), p_(s.p), index_(static_cast<std::uint64_t>(index)) {}
  tensor_desc const& in_desc() const override { return desc_; }
  tensor_desc const& out_desc() const override { return desc_; }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    apply(x, y, c, true);
  }
  void backward(tensor_view const&, tensor_view const&, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    if (dx.data) apply(dy, dx, c, false);
  }

  bool backward_reads_input() const override { return false; } // the mask only
  ops::memory_use memory() const override {
    ops::memory_use m;
    m.held_host = keep_.capacity();
    return m;
  }

private:
  // y[e] = keep[e] ? x[e] * scale : 0 along a run (x and y may be the same). The product is
  // formed for every element and its bits cleared where the element is dropped: vector ANDs,
  // where a branch per element would be mispredicted at random (and the compiler does not
  // turn this select into a blend).
  static void mask_run(T const* x, index_t sx, T* y, index_t sy, std::uint8_t const* keep,
                       index_t n, T scale) {
    using bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    static_assert(sizeof(bits) == sizeof(T));
    if (sx == 1 && sy == 1) {
#pragma omp simd
      for (index_t e = 0; e < n; ++e) {
        T const v = x[e] * scale;
        bits b;
        std::memcpy(&b, &v, sizeof b);
        b &= bits(0) - bits(keep[e]); // all ones where kept, zero where dropped
        std::memcpy(y + e, &b, sizeof b);
      }
    } else {
      for (index_t e = 0; e < n; ++e) y[e * sy] = keep[e] ? x[e * sx] * scale : T(0);
    }
  }
  // The same mask and scale serve forward (x -> y) and backward (dy -> dx): forward draws it
  // (from the seed, the step, the layer and the element's global index) and keeps it for
  // backward, in the order the owned elements are visited.
  void apply(tensor_view const& in, tensor_view const& out, step_context const& c, bool draw) {
    double const t0 = now();
    T const* a = static_cast<T const*>(in.data);
    T* b = static_cast<T*>(out.data);
    if (!c.training || p_ == 0) {
      if (a != b) copy_owned(*in.desc, a, *out.desc, b);
    } else {
      T const scale = T(1 / (1 - p_));
      keep_.resize(static_cast<std::size_t>(desc_.owned_box().volume())); // once
      std::uint8_t* k = keep_.data();
      mixer const h(c.seed, c.step, index_);
      std::uint64_t const least = uniform01_threshold(p_); // keep: uniform01(hash) >= p
      for_each_owned_run(*in.desc, *out.desc,
                         [&](index_t i, index_t o, index_t g, index_t n, index_t si, index_t so) {
                           if (draw)
                             for (index_t e = 0; e < n; ++e)
                               k[e] = (h(static_cast<std::uint64_t>(g + e)) >> 11) >= least;
                           mask_run(a + i, si, b + o, so, k, n, scale);
                           k += n;
                         });
    }
    c.times->compute += now() - t0;
  }
  tensor_desc desc_;
  double p_;
  std::uint64_t index_;
  std::vector<std::uint8_t> keep_; // this step's mask, one byte per owned element
};

// y = x + (the output of an earlier layer). That output may be laid out differently (another
// strategy), so it is moved here by a transfer planned once; its gradient goes back the same
// way and is added to the earlier layer's gradient.
template <class T> class add_layer final : public layer<T> {
public:
  add_layer(tensor_desc const& x, skip_source<T> const& s, build_options const& bo)
      : desc_(x), src_(s), local_(same_blocks(*s.desc, x)) {
    HALOX_REQUIRE(s.desc->shape() == x.shape(), halox::errc::invalid_argument,
                  "residual add of tensors of different shapes; the layer named by 'from' "
                  "must have the shape of the add's input");
    if (!local_) {
      move_ = std::make_unique<transfer<T>>(*s.desc, x, bo.exchange);
      other_.assign(static_cast<std::size_t>(x.local_elements()), T(0));
    }
  }
  tensor_desc const& in_desc() const override { return desc_; }
  tensor_desc const& out_desc() const override { return desc_; }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    // The other output is read where it lies when it has this layer's blocks; otherwise it is
    // redistributed into other_ first.
    T const* o = local_ ? *src_.output : other_.data();
    tensor_desc const& od = local_ ? *src_.desc : desc_;
    if (!local_) move_->forward(*src_.output, other_.data(), *c.times);
    double const t0 = now();
    T const* a = static_cast<T const*>(x.data);
    T* b = static_cast<T*>(y.data);
    for_each_owned_row(*x.desc, od, *y.desc, [&](index_t pa, index_t po, index_t pb, index_t n) {
      T const* xa = a + pa;
      T const* xo = o + po;
      T* yb = b + pb;
#pragma omp simd
      for (index_t k = 0; k < n; ++k) yb[k] = xa[k] + xo[k];
    });
    c.times->compute += now() - t0;
  }
  void backward(tensor_view const&, tensor_view const&, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    double const t0 = now();
    T const* g = static_cast<T const*>(dy.data);
    if (dx.data && dx.data != dy.data) copy_owned(*dy.desc, g, *dx.desc, static_cast<T*>(dx.data));
    if (local_) {
      add_owned(*dy.desc, g, *src_.desc, *src_.grad);
      c.times->compute += now() - t0;
      return;
    }
    copy_owned(*dy.desc, g, desc_, other_.data());
    c.times->compute += now() - t0;
    move_->backward(other_.data(), *src_.grad, *c.times, /*accumulate=*/true);
  }

  bool backward_reads_input() const override { return false; }
  ops::memory_use memory() const override {
    ops::memory_use m;
    m.held_host = other_.capacity() * sizeof(T) + (move_ ? move_->held_bytes() : 0);
    return m;
  }

private:
  tensor_desc desc_;
  skip_source<T> src_;
  bool local_; // the other output has this layer's blocks
  std::unique_ptr<transfer<T>> move_;
  std::vector<T> other_;
};

// [N, C, spatial...] -> [N, F] on the sample-parallel grid. The input is sample-parallel and
// without halos, so the owned block is already the flattened rows: a plain copy.
template <class T> class flatten_layer final : public layer<T> {
public:
  flatten_layer(tensor_desc const& x, grid_cache& grids)
      : in_(x), out_(grids.get({x.grid().size(), 1}), flat_shape(x.shape()), x.type(),
                     sample_blocks_of(x, 2)) {
    HALOX_REQUIRE(in_.local_elements() == out_.local_elements(), halox::errc::internal,
                  "flatten: input and output blocks differ");
  }
  tensor_desc const& in_desc() const override { return in_; }
  tensor_desc const& out_desc() const override { return out_; }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    double const t0 = now();
    std::memcpy(y.data, x.data, static_cast<std::size_t>(in_.local_elements()) * sizeof(T));
    c.times->compute += now() - t0;
  }
  void backward(tensor_view const&, tensor_view const&, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    if (!dx.data) return;
    double const t0 = now();
    std::memcpy(dx.data, dy.data, static_cast<std::size_t>(in_.local_elements()) * sizeof(T));
    c.times->compute += now() - t0;
  }

  bool backward_reads_input() const override { return false; }

private:
  static std::vector<index_t> flat_shape(std::vector<index_t> const& s) {
    index_t f = 1;
    for (std::size_t i = 1; i < s.size(); ++i) f *= s[i];
    return {s[0], f};
  }
  tensor_desc in_, out_;
};

// Fully connected, sample-parallel: each rank multiplies its own samples by the replicated
// weights. The weight and bias gradients are partial sums over the rank's samples (in
// double), rounded to T and summed over the ranks in T in the step's gradient buckets, or with
// exact_grads summed in double there and rounded once.
template <class T> class fc_layer final : public layer<T> {
public:
  fc_layer(tensor_desc const& x, param_store<T>& ps, layer_params const& lp)
      : in_(x), out_(x.grid(), {x.shape()[0], ps.params[lp.weight].shape[0]}, x.type(),
                     sample_blocks_of(x, 2)),
        ps_(ps), lp_(lp) {}
  tensor_desc const& in_desc() const override { return in_; }
  tensor_desc const& out_desc() const override { return out_; }
  void forward(tensor_view const& x, tensor_view const& y, step_context const& c) override {
    double const t0 = now();
    auto const& w = ps_.params[lp_.weight];
    index_t const rows = in_.owned_box().extent(0), F = w.shape[1], O = w.shape[0];
    T const* X = static_cast<T const*>(x.data);
    T* Y = static_cast<T*>(y.data);
    T const* b = lp_.bias >= 0 ? ps_.params[lp_.bias].value.data() : nullptr;
    wt_.resize(static_cast<std::size_t>(fc_forward_scratch(F, O))); // once: shapes stay
    fc_forward(rows, F, O, X, w.value.data(), b, Y, wt_.data());
    c.times->compute += now() - t0;
  }
  void backward(tensor_view const& x, tensor_view const&, tensor_view const& dy,
                tensor_view const& dx, step_context const& c) override {
    double const t0 = now();
    auto& w = ps_.params[lp_.weight];
    index_t const rows = in_.owned_box().extent(0), F = w.shape[1], O = w.shape[0];
    T const* X = static_cast<T const*>(x.data);
    T const* DY = static_cast<T const*>(dy.data);
    // Partial sums in double, all-reduced in double and rounded once: the result then hardly
    // depends on how the samples are split over the ranks.
    std::size_t const nb = lp_.bias >= 0 ? static_cast<std::size_t>(O) : 0;
    sums_.resize(w.value.size() + nb); // once; fc_weight_sums overwrites every sum
    fc_weight_sums(rows, F, O, X, DY, sums_.data(), nb ? sums_.data() + w.value.size() : nullptr);
    target_ = {&sums_, &w.grad, nb ? &ps_.params[lp_.bias].grad : nullptr};
    if (c.exact_grads) {
      c.times->compute += now() - t0;
      post_sums(target_, c);
    } else {
      target_.round(); // this rank's partial sums, summed over the ranks in the buckets
      c.grads->add({w.grad.data(), w.grad.size(), false});
      if (nb) c.grads->add({ps_.params[lp_.bias].grad.data(), nb, false});
      c.times->compute += now() - t0;
    }
    double const t1 = now();
    if (dx.data) fc_backward_data(rows, F, O, DY, w.value.data(), static_cast<T*>(dx.data));
    c.times->compute += now() - t1;
  }

  ops::memory_use memory() const override {
    ops::memory_use m;
    m.held_host = sums_.capacity() * sizeof(double) + wt_.capacity() * sizeof(T);
    return m;
  }

private:
  tensor_desc in_, out_;
  param_store<T>& ps_;
  layer_params lp_;
  std::vector<double> sums_; // partial, then total, gradient sums
  sum_target<T> target_;
  std::vector<T> wt_; // the weights transposed, for forward
};

} // namespace

template <class T> std::unique_ptr<layer<T>> make_layer(layer_spec const& s, int index,
                                                        tensor_desc const& x, param_store<T>& store,
                                                        layer_params const& lp, grid_cache& grids,
                                                        skip_source<T> const& skip,
                                                        build_options const& bo) {
  if (s.kind == "conv") return std::make_unique<conv_layer<T>>(s, x, store, lp, bo);
  if (s.kind == "maxpool" || s.kind == "avgpool") return std::make_unique<pool_layer<T>>(s, x, bo);
  if (s.kind == "bn") return std::make_unique<bn_layer<T>>(s, x, store, lp);
  if (s.kind == "relu") return std::make_unique<relu_layer<T>>(x);
  if (s.kind == "lrn") return std::make_unique<lrn_layer<T>>(s, x, bo);
  if (s.kind == "dropout") return std::make_unique<dropout_layer<T>>(s, index, x);
  if (s.kind == "add") return std::make_unique<add_layer<T>>(x, skip, bo);
  if (s.kind == "flatten") return std::make_unique<flatten_layer<T>>(x, grids);
  if (s.kind == "fc") return std::make_unique<fc_layer<T>>(x, store, lp);
  throw halox::error(halox::errc::internal, "unknown layer kind '" + s.kind + "'");
}

template std::unique_ptr<layer<float>> make_layer(layer_spec const&, int, tensor_desc const&,
                                                  param_store<float>&, layer_params const&,
                                                  grid_cache&, skip_source<float> const&,
                                                  build_options const&);
template std::unique_ptr<layer<double>> make_layer(layer_spec const&, int, tensor_desc const&,
                                                   param_store<double>&, layer_params const&,
                                                   grid_cache&, skip_source<double> const&,
                                                   build_options const&);

} // namespace trainer
