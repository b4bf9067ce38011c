#include "network.hpp"

#include "balance.hpp"

#include "grad_reducer.hpp"

#include <halox/error.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/ops/window.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

namespace trainer {
using halox::index_t;
using halox::tensor_desc;
using halox::tensor_view;

namespace {

[[noreturn]] void layer_error(model_spec const& m, layer_spec const& l, std::string const& what) {
  throw halox::error(halox::errc::invalid_argument,
                     m.source + (l.line ? ":" + std::to_string(l.line) : "") + ": layer '" +
                         l.kind + "': " + what);
}

std::string shape_str(std::vector<index_t> const& s) {
  std::string r;
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? "x" : "") + std::to_string(s[i]);
  return r;
}

// He-uniform initialisation: U(-a, a) with a = sqrt(6 / fan_in), each value a hash of the
// seed, the parameter and the element.
template <class T>
std::vector<T> he_uniform(std::size_t n, index_t fan_in, std::uint64_t seed, std::uint64_t id) {
  std::vector<T> v(n);
  double const a = std::sqrt(6.0 / static_cast<double>(fan_in));
  for (std::size_t i = 0; i < n; ++i) v[i] = T((2 * uniform01(mix(seed, id, i, 7)) - 1) * a);
  return v;
}

} // namespace

template <class T>
std::vector<layer_params> make_params(model_spec const& m, std::uint64_t seed, param_store<T>& ps) {
  std::vector<layer_params> out(m.layers.size());
  std::vector<index_t> shape{1}; // [1, C, spatial...]: one sample
  for (index_t e : m.input) shape.push_back(e);
  std::map<std::string, std::vector<index_t>> labelled;
  for (std::size_t i = 0; i < m.layers.size(); ++i) {
    layer_spec const& l = m.layers[i];
    std::string const pre = std::to_string(i) + "." + l.kind + ".";
    auto id = [&] { return static_cast<std::uint64_t>(ps.params.size()); };
    try {
      if (l.kind == "conv") {
        std::vector<index_t> w{l.out, shape[1]};
        for (index_t k : l.kernel) w.push_back(k);
        halox::ops::conv_params p{l.stride, l.pad, l.pad, l.dilation};
        shape = halox::ops::conv_output_shape(shape, w, p);
        index_t fan_in = 1;
        for (std::size_t d = 1; d < w.size(); ++d) fan_in *= w[d];
        out[i].weight =
            ps.add(pre + "weight", w,
                   he_uniform<T>(halox::ops::element_count(w), fan_in, seed, id()), true, true);
        if (l.bias)
          out[i].bias = ps.add(pre + "bias", {l.out}, std::vector<T>(l.out, T(0)), true, false);
      } else if (l.kind == "maxpool" || l.kind == "avgpool") {
        halox::ops::pool_params p;
        p.kernel = l.kernel;
        p.stride = l.stride;
        p.pad_lo = p.pad_hi = l.pad;
        p.dilation = l.dilation;
        shape = halox::ops::pool_output_shape(shape, p);
      } else if (l.kind == "bn") {
        index_t const c = shape[1];
        out[i].gamma = ps.add(pre + "gamma", {c}, std::vector<T>(c, T(1)), true, false);
        out[i].beta = ps.add(pre + "beta", {c}, std::vector<T>(c, T(0)), true, false);
        out[i].running_mean =
            ps.add(pre + "running_mean", {c}, std::vector<T>(c, T(0)), false, false);
        out[i].running_var =
            ps.add(pre + "running_var", {c}, std::vector<T>(c, T(1)), false, false);
      } else if (l.kind == "add") {
        if (labelled.at(l.from) != shape)
          layer_error(m, l,
                      "adds layer '" + l.from + "' of shape " +
                          shape_str({labelled.at(l.from).begin() + 1, labelled.at(l.from).end()}) +
                          " to an input of shape " + shape_str({shape.begin() + 1, shape.end()}) +
                          "; residual inputs must have the same channels and size");
      } else if (l.kind == "flatten") {
        shape = {1, halox::ops::element_count(shape)};
      } else if (l.kind == "fc") {
        std::vector<index_t> w{l.out, shape[1]};
        out[i].weight =
            ps.add(pre + "weight", w,
                   he_uniform<T>(halox::ops::element_count(w), shape[1], seed, id()), true, true);
        if (l.bias)
          out[i].bias = ps.add(pre + "bias", {l.out}, std::vector<T>(l.out, T(0)), true, false);
        shape = {1, l.out};
      }
    } catch (halox::error const& e) {
      if (e.code() != halox::errc::invalid_argument ||
          e.message().find(m.source) != std::string::npos)
        throw;
      layer_error(m, l,
                  e.message() + " (input " + shape_str({shape.begin() + 1, shape.end()}) + ")");
    }
    if (!l.label.empty()) labelled[l.label] = shape;
  }
  return out;
}

template <class T>
network<T>::network(model_spec const& m, index_t batch, param_store<T>& ps,
                    std::vector<layer_params> const& lp, grid_cache& grids, build_options const& bo,
                    std::vector<double> const& rank_weight)
    : batch_(batch) {
  int nprocs = 0;
  MPI_Comm_size(grids.comm(), &nprocs);
  std::size_t const L = m.layers.size();
  x_.resize(L);
  y_.resize(L);
  dx_.resize(L);
  dy_.resize(L);
  skip_grad_.resize(L);
  skip_desc_.assign(L, nullptr);
  is_skip_source_.assign(L, false);
  local_.assign(L, false);
  moves_.resize(L);
  std::map<std::string, std::size_t> label_index;
  std::map<std::string, std::vector<int>> strategy_dims; // resolved once per strategy
  halox::dtype const type = halox::dtype_of<T>();
  std::vector<index_t> shape{batch};
  for (index_t e : m.input) shape.push_back(e);
  tensor_desc const* prev = nullptr;
  bool flat = false;
  for (std::size_t i = 0; i < L; ++i) {
    layer_spec const& l = m.layers[i];
    std::vector<int> dims;
    if (l.kind == "flatten") {
      dims.assign(shape.size(), 1);
      dims[0] = nprocs;
    } else if (flat) {
      dims = {nprocs, 1}; // after flatten everything runs sample-parallel
    } else {
      std::string const s = l.strategy.empty() ? m.strategy : l.strategy;
      auto it = strategy_dims.find(s);
      if (it == strategy_dims.end())
        it = strategy_dims.emplace(s, strategy_grid(s, nprocs, shape)).first;
      dims = it->second;
    }
    // Keep the previous layer's blocks when the grid is the same (its output parts may be
    // uneven, and chaining them avoids a redistribution); start balanced blocks otherwise.
    std::unique_ptr<tensor_desc> fresh;
    if (!prev || prev->grid().dims() != dims) {
      std::vector<halox::dim_options> opt;
      if (!rank_weight.empty()) { // samples and space split by --balance
        opt.resize(shape.size());
        for (std::size_t d = 0; d < shape.size(); ++d)
          if (dims[d] > 1)
            opt[d].sizes =
                weighted_blocks(grids.get(dims), static_cast<int>(d), shape[d], rank_weight);
      }
      fresh = std::make_unique<tensor_desc>(grids.get(dims), shape, type, std::move(opt));
    }
    tensor_desc const& in = fresh ? *fresh : *prev;
    skip_source<T> skip;
    if (l.kind == "add") {
      // The earlier layer's output lives in the next layer's input buffer when the two share
      // blocks (the buffers are chained), else in its own output buffer.
      std::size_t const k = label_index.at(l.from);
      is_skip_source_[k] = true;
      bool const chained = k + 1 < i ? local_[k + 1] : !fresh;
      skip_desc_[k] =
          chained ? (k + 1 < i ? &layers_[k + 1]->in_desc() : &in) : &layers_[k]->out_desc();
      skip = {skip_desc_[k], chained ? &x_[k + 1] : &y_[k], &skip_grad_[k]};
    }
    layers_.push_back(make_layer<T>(l, static_cast<int>(i), in, ps, lp[i], grids, skip, bo));
    layer<T>& ly = *layers_.back();
    if (prev) {
      local_[i] = same_blocks(*prev, ly.in_desc());
      if (!local_[i]) moves_[i] = std::make_unique<transfer<T>>(*prev, ly.in_desc(), bo.exchange);
    }
    if (!l.label.empty()) label_index[l.label] = i;
    if (l.kind == "flatten") flat = true;
    kinds_.push_back(l.kind);
    prev = &ly.out_desc();
    shape = prev->shape();
  }
  plan_buffers();
}

// Where consecutive layers share blocks, a layer writes its output straight into the next
// layer's input buffer (in the next layer's layout, halos included) and the next layer writes
// its dx straight into this layer's dy buffer: nothing is copied between them. Pointwise layers
// (ReLU, dropout, residual add) run in place on the buffer they pass on, and a ReLU runs inside
// a layer before it that can fuse it (batch norm, convolution). Every buffer is allocated here,
// once per batch size.
template <class T> void network<T>::plan_buffers() {
  std::size_t const L = layers_.size();
  in_place_.assign(L, false);
  fused_away_.assign(L, false);
  for (std::size_t i = 1; i + 1 < L; ++i) {
    std::string const& k = kinds_[i];
    // In place needs both neighbours chained, an input nobody else reads later (not a skip
    // source), and no in-place ReLU before it: that ReLU's backward reads the shared buffer as
    // its own output, which this layer would overwrite.
    in_place_[i] = (k == "relu" || k == "dropout" || k == "add") && local_[i] && local_[i + 1] &&
                   !is_skip_source_[i - 1] && !(in_place_[i - 1] && kinds_[i - 1] == "relu");
    if (in_place_[i] && k == "relu" && layers_[i - 1]->fuse_relu()) fused_away_[i] = true;
  }
  in_.assign(L, {});
  out_.assign(L, {});
  din_.assign(L, {});
  dout_.assign(L, {});
  for (std::size_t i = L; i-- > 0;) {
    layer<T>& ly = *layers_[i];
    out_[i] = i + 1 < L && local_[i + 1] ? in_[i + 1] : slot{&y_[i], &ly.out_desc()};
    in_[i] = in_place_[i] ? out_[i] : slot{&x_[i], &ly.in_desc()};
  }
  for (std::size_t i = 0; i < L; ++i) {
    layer<T>& ly = *layers_[i];
    if (i > 0) din_[i] = local_[i] ? dout_[i - 1] : slot{&dx_[i], &ly.in_desc()};
    dout_[i] = in_place_[i] ? din_[i] : slot{&dy_[i], &ly.out_desc()};
  }
  auto alloc = [](slot& s) {
    if (s.buf && s.buf->empty())
      s.buf->assign(static_cast<std::size_t>(s.desc->local_elements()), T(0));
    if (s.buf) s.data = s.buf->data();
  };
  for (std::size_t i = 0; i < L; ++i) {
    alloc(in_[i]);
    alloc(out_[i]);
    if (is_skip_source_[i])
      skip_grad_[i].assign(static_cast<std::size_t>(skip_desc_[i]->local_elements()), T(0));
  }
  plan_gradients();
}

// The gradients are placed in one arena by lifetime, as a compiler assigns registers. Backward
// runs layer L-1 down to 0; a gradient buffer is live from the step that writes it (the loss,
// the layer after it, or the move between them) to the last step that reads it, and two
// buffers whose lifetimes do not meet may share bytes. Placed largest first, each at the lowest
// offset clear of every placed buffer it is live with: a chain of layers needs about two
// activations' worth of gradients, where a buffer per layer needs all of them.
template <class T> void network<T>::plan_gradients() {
  std::size_t const L = layers_.size();
  struct life {
    std::vector<T>* buf;
    std::size_t n;
    long first, last;
    std::size_t at = 0;
  };
  std::vector<life> lives;
  auto use = [&](slot const& s, long t) {
    if (!s.buf) return;
    for (life& l : lives)
      if (l.buf == s.buf) {
        l.first = std::min(l.first, t);
        l.last = std::max(l.last, t);
        return;
      }
    lives.push_back({s.buf, static_cast<std::size_t>(s.desc->local_elements()), t, t});
  };
  // Times: the loss at -1, layer i's backward at 2 (L-1-i), the move into layer i just after.
  use(dout_[L - 1], -1);
  for (std::size_t i = L; i-- > 0;) {
    long const t = 2 * static_cast<long>(L - 1 - i);
    use(dout_[i], t);
    use(din_[i], t);
    if (i > 0 && !local_[i]) {
      use(din_[i], t + 1);
      use(dout_[i - 1], t + 1);
    }
  }
  std::vector<std::size_t> order(lives.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return lives[a].n > lives[b].n; });
  std::size_t const align = 64 / sizeof(T); // each buffer on its own cache line
  auto round_up = [&](std::size_t n) { return (n + align - 1) / align * align; };
  std::size_t total = 0;
  grad_naive_ = 0;
  std::vector<std::size_t> placed;
  for (std::size_t k : order) {
    life& l = lives[k];
    grad_naive_ += l.n;
    // Lowest offset clear of the placed buffers live at the same time.
    std::vector<std::pair<std::size_t, std::size_t>> busy;
    for (std::size_t p : placed) {
      life const& o = lives[p];
      if (o.first <= l.last && l.first <= o.last) busy.emplace_back(o.at, o.at + round_up(o.n));
    }
    std::sort(busy.begin(), busy.end());
    std::size_t at = 0;
    for (auto const& [lo, hi] : busy) {
      if (at + round_up(l.n) <= lo) break;
      at = std::max(at, hi);
    }
    l.at = at;
    total = std::max(total, at + round_up(l.n));
    placed.push_back(k);
  }
  grad_arena_.assign(total, T(0));
  auto bind = [&](slot& s) {
    if (!s.buf) return;
    for (life const& l : lives)
      if (l.buf == s.buf) s.data = grad_arena_.data() + l.at;
  };
  for (std::size_t i = 0; i < L; ++i) {
    bind(din_[i]);
    bind(dout_[i]);
  }
}

namespace {
double comm_time(phase_times const& t) { return t.halo + t.shuffle + t.allreduce; }

// Adds the time since `t0` (and the communication time since `c0`) to layer i's entries.
void tick(step_context const& c, std::size_t i, double t0, double c0, bool fwd) {
  layer_clock& k = *c.clock;
  std::vector<double>& wall = fwd ? k.fwd : k.bwd;
  std::vector<double>& comm = fwd ? k.fwd_comm : k.bwd_comm;
  if (wall.size() <= i) wall.resize(i + 1), comm.resize(i + 1);
  wall[i] += now() - t0;
  comm[i] += comm_time(*c.times) - c0;
}
} // namespace

template <class T> void network<T>::forward(step_context const& c) {
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    double const t0 = c.clock ? now() : 0, c0 = c.clock ? comm_time(*c.times) : 0;
    if (i > 0 && !local_[i]) moves_[i]->forward(out_[i - 1].data, in_[i].data, *c.times);
    double const s0 = c.times->compute;
    if (!fused_away_[i]) layers_[i]->forward(in_[i].view(), out_[i].view(), c);
    c.times->split += c.times->compute - s0;
    if (c.clock) tick(c, i, t0, c0, true);
  }
}

template <class T>
loss_sums network<T>::loss(std::vector<int> const& labels, step_context const& c) {
  double const t0 = now();
  tensor_desc const& d = logits_desc();
  index_t const rows = d.owned_box().extent(0), K = d.shape()[1];
  HALOX_REQUIRE(static_cast<index_t>(labels.size()) == rows, halox::errc::internal,
                "loss: " + std::to_string(labels.size()) + " labels for " + std::to_string(rows) +
                    " samples");
  T const* z = out_.back().data;
  T* g = dout_.back().data;
  loss_sums s;
  for (index_t n = 0; n < rows; ++n) {
    T const* zr = z + n * K;
    double mx = zr[0];
    index_t arg = 0;
    for (index_t k = 1; k < K; ++k)
      if (zr[k] > mx) mx = zr[k], arg = k;
    double sum = 0;
    for (index_t k = 0; k < K; ++k) sum += std::exp(double(zr[k]) - mx);
    int const y = labels[static_cast<std::size_t>(n)];
    s.loss += std::log(sum) - (double(zr[y]) - mx);
    s.correct += arg == y ? 1 : 0;
    for (index_t k = 0; k < K; ++k) {
      double const p = std::exp(double(zr[k]) - mx) / sum;
      g[n * K + k] = T((p - (k == y ? 1.0 : 0.0)) / static_cast<double>(batch_));
    }
  }
  c.times->compute += now() - t0;
  return s;
}

template <class T> void network<T>::backward(step_context const& c) {
  for (auto& g : skip_grad_) std::fill(g.begin(), g.end(), T(0));
  for (std::size_t i = layers_.size(); i-- > 0;) {
    double const l0 = c.clock ? now() : 0, c0 = c.clock ? comm_time(*c.times) : 0;
    if (is_skip_source_[i]) {
      double const t0 = now();
      add_owned(*skip_desc_[i], skip_grad_[i].data(), *dout_[i].desc, dout_[i].data);
      c.times->compute += now() - t0;
    }
    double const s0 = c.times->compute;
    if (!fused_away_[i])
      layers_[i]->backward(in_[i].view(), out_[i].view(), dout_[i].view(), din_[i].view(), c);
    c.times->split += c.times->compute - s0;
    if (i > 0 && !local_[i]) moves_[i]->backward(din_[i].data, dout_[i - 1].data, *c.times);
    // The gradient buckets started so far move while the layers below compute.
    if (c.grads) c.grads->progress(c.times->allreduce);
    if (c.clock) tick(c, i, l0, c0, false);
  }
}

template <class T> std::string network<T>::describe_tuned() const {
  std::ostringstream os;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    std::string const t = layers_[i]->tuned();
    if (!t.empty()) os << "layer " << i << " " << kinds_[i] << ": " << t;
  }
  return os.str();
}

template <class T> std::string network<T>::describe() const {
  std::ostringstream os;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto const& l = *layers_[i];
    std::string grid;
    for (int d : l.in_desc().grid().dims()) grid += (grid.empty() ? "" : "x") + std::to_string(d);
    os << "  " << i << " " << kinds_[i] << "  grid " << grid << "  in "
       << shape_str(l.in_desc().shape()) << "  out " << shape_str(l.out_desc().shape());
    halox::distribution const& d = l.in_desc().dist();
    for (int k = 0; k < d.ndim(); ++k) {
      int const np = d.parts()[static_cast<std::size_t>(k)];
      index_t const e = d.shape()[static_cast<std::size_t>(k)];
      bool balanced = true; // halox's balanced blocks, or a split chosen by --balance
      for (int p = 0; p < np; ++p)
        balanced = balanced && d.part_size(k, p) == e / np + (p < e % np);
      if (balanced) continue;
      os << (k == 0 ? "  samples per part" : "  dim " + std::to_string(k) + " per part");
      for (int p = 0; p < np; ++p) os << ' ' << d.part_size(k, p);
    }
    if (i > 0 && !local_[i]) os << "  (redistributed from the previous layer)";
    if (fused_away_[i])
      os << "  (fused into the previous layer)";
    else if (in_place_[i])
      os << "  (in place)";
    os << "\n";
  }
  return os.str();
}

template std::vector<layer_params> make_params(model_spec const&, std::uint64_t,
                                               param_store<float>&);
template std::vector<layer_params> make_params(model_spec const&, std::uint64_t,
                                               param_store<double>&);
template class network<float>;
template class network<double>;

} // namespace trainer
