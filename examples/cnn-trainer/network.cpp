#include "network.hpp"

#include "memory_plan.hpp"

#include "balance.hpp"

#include "grad_reducer.hpp"

#include <halox/error.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/ops/window.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
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
                    std::vector<double> const& rank_weight, memory_plan const& plan, bool own_arena)
    : batch_(batch), own_(own_arena) {
  int nprocs = 0;
  MPI_Comm_size(grids.comm(), &nprocs);
  std::size_t const L = m.layers.size();
  // Sized once (skip sources point into it): the storages of plan_slots, then each layer's
  // forward and backward share of the operators' scratch (memory_plan::scratch).
  where_.assign(7 * L, nullptr);
  need_fwd_.assign(L, {});
  need_bwd_.assign(L, {});
  skip_desc_.assign(L, nullptr);
  skip_src_.assign(L, npos);
  skip_first_.assign(L, npos);
  skip_out_.assign(L, -1);
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
      skip = {skip_desc_[k], &where_[chained ? k + 1 : L + k], &where_[4 * L + k]};
      skip_src_[i] = k;
      skip_out_[k] = static_cast<int>(chained ? k + 1 : L + k);
      skip_first_[k] = i; // adds come in order: the last one's backward runs first
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
  plan_slots();
  set_plan(plan);
}

// Where consecutive layers share blocks, a layer writes its output straight into the next
// layer's input buffer (in the next layer's layout, halos included) and the next layer writes
// its dx straight into this layer's dy buffer: nothing is copied between them. Pointwise layers
// (ReLU, dropout, residual add) run in place on the buffer they pass on, and a ReLU runs inside
// a layer before it that can fuse it (batch norm, convolution). Here each slot is given the
// storage behind it; set_plan places the storages.
template <class T> void network<T>::plan_slots() {
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
  auto id = [](std::size_t v) { return static_cast<int>(v); };
  for (std::size_t i = L; i-- > 0;) {
    layer<T>& ly = *layers_[i];
    out_[i] = i + 1 < L && local_[i + 1] ? in_[i + 1] : slot{id(L + i), &ly.out_desc()};
    in_[i] = in_place_[i] ? out_[i] : slot{id(i), &ly.in_desc()};
  }
  for (std::size_t i = 0; i < L; ++i) {
    layer<T>& ly = *layers_[i];
    if (i > 0) din_[i] = local_[i] ? dout_[i - 1] : slot{id(2 * L + i), &ly.in_desc()};
    // Batch norm and ReLU write dx over dy in backward (their operators allow dx == dy): one
    // gradient buffer serves both where the layouts agree.
    bool const grad_in_place = i > 0 && local_[i] && (kinds_[i] == "bn" || kinds_[i] == "relu") &&
                               din_[i].desc->strides() == ly.out_desc().strides() &&
                               same_blocks(*din_[i].desc, ly.out_desc());
    dout_[i] = in_place_[i] || grad_in_place ? din_[i] : slot{id(3 * L + i), &ly.out_desc()};
  }
}

template <class T> std::vector<std::size_t> network<T>::storage_sizes(memory_plan const& p) const {
  std::size_t const L = layers_.size();
  std::vector<std::size_t> n(7 * L, 0);
  auto note = [&](slot const& s) {
    if (s.id >= 0)
      n[static_cast<std::size_t>(s.id)] =
          static_cast<std::size_t>(s.desc->local_elements()) * sizeof(T);
  };
  for (std::size_t i = 0; i < L; ++i) {
    note(in_[i]);
    note(out_[i]);
    note(din_[i]);
    note(dout_[i]);
    if (p.scratch && recorded_) {
      n[5 * L + 2 * i] = lent(need_fwd_[i]);
      n[5 * L + 2 * i + 1] = lent(need_bwd_[i]);
    }
    if (is_skip_source_[i])
      n[4 * L + i] = static_cast<std::size_t>(skip_desc_[i]->local_elements()) * sizeof(T);
  }
  return n;
}

template <class T> std::vector<std::size_t> network<T>::segment_starts() const {
  std::vector<std::size_t> r;
  for (std::size_t i = 1; i < layers_.size(); ++i)
    if (!in_place_[i] && !fused_away_[i] && kinds_[i] != "flatten" && kinds_[i] != "fc")
      r.push_back(i);
  return r;
}

// Forward: load, then each layer (after the move into it); the loss; backward: the segments
// from the last, each one's forward run again first (but the last one's, whose activations
// are still there), then its layers' backward from the top.
template <class T>
std::vector<typename network<T>::action> network<T>::schedule(memory_plan const& p) const {
  std::size_t const L = layers_.size();
  std::vector<action> s;
  s.push_back({act::load, 0});
  for (std::size_t i = 0; i < L; ++i) {
    if (i > 0 && !local_[i]) s.push_back({act::move_fwd, i});
    s.push_back({act::fwd, i});
  }
  s.push_back({act::loss, L - 1});
  std::vector<bool> fresh(5 * L, false); // activations computed again in backward so far
  std::vector<std::size_t> starts{0};
  for (std::size_t a : p.segments) starts.push_back(a);
  for (std::size_t g = starts.size(); g-- > 0;) {
    std::size_t const a = starts[g], b = g + 1 < starts.size() ? starts[g + 1] : L;
    if (b < L)
      for (std::size_t i = a; i < b; ++i) {
        if (i > a && !local_[i]) s.push_back({act::move_fwd, i, true});
        s.push_back({act::fwd, i, true});
      }
    for (std::size_t i = b; i-- > a;) {
      if (is_skip_source_[i]) s.push_back({act::add_skip, i});
      for (std::size_t k = 0; k < L; ++k)
        if (skip_first_[k] == i) s.push_back({act::zero_skip, k});
      if (p.recompute_cheap) regenerate(i, fresh, s);
      s.push_back({act::bwd, i});
      if (i > 0 && !local_[i]) s.push_back({act::move_bwd, i});
    }
  }
  return s;
}

// A cheap layer (batch norm, pooling, an unfused ReLU) whose output the network may drop after
// forward and compute again before backward reads it: its input and output chained to its
// neighbours (no move), and its output read by nothing that runs in place on it or adds it
// to a residual.
template <class T> bool network<T>::cheap(std::size_t j) const {
  std::size_t const L = layers_.size();
  std::string const& k = kinds_[j];
  bool const kind = k == "bn" || k == "maxpool" || k == "avgpool" || k == "relu";
  if (!kind || in_place_[j] || fused_away_[j] || j == 0 || j + 1 >= L) return false;
  if (!local_[j] || !local_[j + 1] || is_skip_source_[j]) return false;
  if (in_place_[j + 1] && !(fused_away_[j + 1] && !is_skip_source_[j + 1])) return false;
  return true;
}

// Before layer i's backward (recompute_cheap): every activation it reads that a cheap layer
// wrote and that was dropped after forward is computed again, its own input first.
template <class T>
void network<T>::regenerate(std::size_t i, std::vector<bool>& fresh, std::vector<action>& s) const {
  std::vector<int> ids;
  if (layers_[i]->backward_reads_input()) ids.push_back(in_[i].id);
  if (layers_[i]->backward_reads_output()) ids.push_back(out_[i].id);
  for (int id : ids) ensure(id, fresh, s);
}

template <class T>
void network<T>::ensure(int id, std::vector<bool>& fresh, std::vector<action>& s) const {
  if (id < 0 || fresh[static_cast<std::size_t>(id)]) return;
  for (std::size_t j = 0; j < layers_.size(); ++j)
    if (cheap(j) && out_[j].id == id) {
      ensure(in_[j].id, fresh, s);
      s.push_back({act::fwd, j, true});
      // The next layer's backward reads the halo its forward exchanged into this buffer.
      std::size_t const next = fused_away_[j + 1] ? j + 2 : j + 1;
      if (next < layers_.size() && in_[next].id == id) s.push_back({act::halo, next, true});
      fresh[static_cast<std::size_t>(id)] = true;
      return;
    }
}

namespace {
// The uses of the storages by the actions of a schedule, for place_buffers.
struct use_list {
  std::vector<buffer_use> v;
  void add(int id, long t, bool writes) {
    if (id >= 0) v.push_back({static_cast<std::size_t>(id), t, writes});
  }
};
} // namespace

template <class T> std::size_t network<T>::arena_bytes(memory_plan const& p) const {
  return place(p, schedule(p)).bytes;
}

template <class T>
placement network<T>::place(memory_plan const& p, std::vector<action> const& s) const {
  std::size_t const L = layers_.size();
  use_list u;
  for (std::size_t t = 0; t < s.size(); ++t) {
    action const& a = s[t];
    long const at = static_cast<long>(t);
    std::size_t const i = a.layer;
    switch (a.what) {
    case act::load: u.add(in_[0].id, at, true); break;
    case act::move_fwd:
      u.add(out_[i - 1].id, at, false);
      u.add(in_[i].id, at, true);
      break;
    case act::fwd:
      if (fused_away_[i]) break;
      if (p.scratch && recorded_ && lent(need_fwd_[i]))
        u.add(static_cast<int>(5 * L + 2 * i), at, true);
      u.add(in_[i].id, at, false);
      u.add(out_[i].id, at, out_[i].id != in_[i].id);
      if (skip_src_[i] != npos) {
        u.add(skip_out_[skip_src_[i]], at, false);
      }
      break;
    case act::loss:
      u.add(out_[L - 1].id, at, false);
      u.add(dout_[L - 1].id, at, true);
      break;
    case act::zero_skip: u.add(static_cast<int>(4 * L + i), at, true); break;
    case act::add_skip:
      u.add(static_cast<int>(4 * L + i), at, false);
      u.add(dout_[i].id, at, false);
      break;
    case act::bwd:
      if (fused_away_[i]) break;
      if (p.scratch && recorded_ && lent(need_bwd_[i]))
        u.add(static_cast<int>(5 * L + 2 * i + 1), at, true);
      u.add(dout_[i].id, at, false);
      if (i > 0) u.add(din_[i].id, at, din_[i].id != dout_[i].id);
      if (layers_[i]->backward_reads_input()) u.add(in_[i].id, at, false);
      if (layers_[i]->backward_reads_output()) u.add(out_[i].id, at, false);
      if (skip_src_[i] != npos) u.add(static_cast<int>(4 * L + skip_src_[i]), at, false);
      break;
    case act::move_bwd:
      u.add(din_[i].id, at, false);
      u.add(dout_[i - 1].id, at, true);
      break;
    case act::halo: u.add(in_[i].id, at, false); break;
    }
  }
  return place_buffers(storage_sizes(p), u.v);
}

template <class T> void network<T>::set_plan(memory_plan const& p) {
  std::vector<std::size_t> const ok = segment_starts();
  for (std::size_t k = 0; k < p.segments.size(); ++k)
    HALOX_REQUIRE(std::find(ok.begin(), ok.end(), p.segments[k]) != ok.end() &&
                      (k == 0 || p.segments[k - 1] < p.segments[k]),
                  halox::errc::internal,
                  "memory plan: layer " + std::to_string(p.segments[k]) +
                      " cannot start a recomputed segment");
  std::vector<action> const s = schedule(p);
  placement const pl = place(p, s);
  std::size_t const bytes = pl.bytes;
  live_peak_ = pl.live_peak;
  plan_ = p;
  auto const mid =
      std::find_if(s.begin(), s.end(), [](action const& a) { return a.what == act::loss; });
  forward_.assign(s.begin(), mid);
  backward_.assign(mid + 1, s.end());
  need_ = bytes;
  offsets_ = pl.offset;
  std::size_t const L = layers_.size();
  std::vector<std::size_t> const n = storage_sizes(p);
  act_bytes_ = grad_bytes_ = 0;
  for (std::size_t k = 0; k < 5 * L; ++k) (k < 2 * L ? act_bytes_ : grad_bytes_) += n[k];
  placed_ = p.scratch && recorded_;
  if (own_) {
    arena_.assign(0, T(0));
    arena_.shrink_to_fit(); // the old arena goes before the new one comes
    arena_.assign(bytes / sizeof(T), T(0));
    bind(arena_.data());
  } else {
    bind(nullptr); // until the owner binds its arena
  }
  for (std::size_t i = 0; i < L; ++i) layers_[i]->keep_reorders(keeps(i, p));
}

template <class T> void network<T>::bind(T* base) {
  for (std::size_t k = 0; k < where_.size(); ++k)
    where_[k] = base ? base + offsets_[k] / sizeof(T) : nullptr;
  for (std::size_t i = 0; i < layers_.size(); ++i)
    for (slot* sl : {&in_[i], &out_[i], &din_[i], &dout_[i]})
      if (sl->id >= 0) sl->data = where_[static_cast<std::size_t>(sl->id)];
}

template <class T> bool network<T>::keeps(std::size_t i, memory_plan const& p) const {
  return static_cast<std::size_t>(layers_[i]->in_desc().local_elements()) * sizeof(T) <=
         p.keep_reorders;
}

template <class T> memory_plan network<T>::segmented(int k, std::size_t keep_reorders) const {
  memory_plan p;
  p.keep_reorders = keep_reorders;
  std::vector<std::size_t> const ok = segment_starts();
  if (k <= 1 || ok.empty()) return p;
  // Activation elements before each layer's input: the outputs so far, of the whole tensor
  // (the same on every rank, which must all recompute the same segments).
  std::size_t const L = layers_.size();
  auto global = [](halox::tensor_desc const& d) {
    double e = 1;
    for (index_t v : d.shape()) e *= static_cast<double>(v);
    return e;
  };
  std::vector<double> before(L + 1, 0);
  for (std::size_t i = 0; i < L; ++i) {
    double b = i == 0 ? global(*in_[0].desc) : 0;
    if (out_[i].id >= 0 && !in_place_[i] && !fused_away_[i]) b += global(*out_[i].desc);
    before[i + 1] = before[i] + b;
  }
  for (int j = 1; j < k; ++j) {
    double const target = before[L] * j / k;
    std::size_t best = 0;
    double gap = 1e300;
    for (std::size_t a : ok)
      if ((p.segments.empty() || a > p.segments.back()) && std::abs(before[a] - target) < gap)
        gap = std::abs(before[a] - target), best = a;
    if (best) p.segments.push_back(best);
  }
  return p;
}

template <class T> std::size_t network<T>::predict(memory_plan const& p0) const {
  memory_plan p = p0;
  p.scratch = plan_.scratch; // the operators' scratch placed as in the plan in force
  step_memory const m = memory();
  std::size_t ops = 0;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    halox::ops::memory_use const u = layers_[i]->memory();
    ops += u.total() - u.kept_reorders + (keeps(i, p) ? u.keepable_reorders : 0);
  }
  return arena_bytes(p) + ops + m.moves + m.shared;
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

template <class T> void network<T>::run(action const& a, step_context const& c) {
  std::size_t const i = a.layer, L = layers_.size();
  switch (a.what) {
  case act::load:
  case act::loss: break;
  case act::move_fwd: moves_[i]->forward(out_[i - 1].data, in_[i].data, *c.times); break;
  case act::fwd: {
    if (fused_away_[i]) break;
    scratch_call(i, false, true);
    double const s0 = c.times->compute;
    layers_[i]->forward(in_[i].view(), out_[i].view(), c);
    c.times->split += c.times->compute - s0;
    scratch_call(i, false, false);
    break;
  }
  case act::zero_skip: {
    T* g = where_[4 * L + i];
    std::fill(g, g + skip_desc_[i]->local_elements(), T(0));
    break;
  }
  case act::add_skip: {
    double const t0 = now();
    add_owned(*skip_desc_[i], where_[4 * L + i], *dout_[i].desc, dout_[i].data);
    c.times->compute += now() - t0;
    break;
  }
  case act::bwd: {
    if (fused_away_[i]) break;
    scratch_call(i, true, true);
    double const s0 = c.times->compute;
    layers_[i]->backward(in_[i].view(), out_[i].view(), dout_[i].view(), din_[i].view(), c);
    c.times->split += c.times->compute - s0;
    scratch_call(i, true, false);
    break;
  }
  case act::move_bwd: moves_[i]->backward(din_[i].data, dout_[i - 1].data, *c.times); break;
  case act::halo: {
    double const t0 = now();
    layers_[i]->exchange_halo(in_[i].view());
    c.times->halo += now() - t0;
    break;
  }
  }
}

template <class T> void network<T>::scratch_call(std::size_t i, bool backward, bool on) {
  halox::ops::scratch_need& need = backward ? need_bwd_[i] : need_fwd_[i];
  if (recording_) {
    if (on) {
      halox::ops::scratch_mark();
    } else { // the most any call of this layer asked, per buffer
      halox::ops::scratch_need const got = halox::ops::scratch_asked();
      need.bytes = 0;
      for (std::size_t k = 0; k < std::size(need.part); ++k) {
        need.part[k] = std::max(need.part[k], got.part[k]);
        need.bytes += need.part[k];
      }
    }
    return;
  }
  if (!placed_ || lent(need) == 0) return;
  std::size_t const slot_id = 5 * layers_.size() + 2 * i + (backward ? 1 : 0);
  halox::ops::lend_scratch(on ? where_[slot_id] : nullptr, need);
}

template <class T> void network<T>::forward(step_context const& c) {
  for (action const& a : forward_) {
    double const t0 = c.clock ? now() : 0, c0 = c.clock ? comm_time(*c.times) : 0;
    run(a, c);
    if (c.clock) tick(c, a.layer, t0, c0, true);
  }
  if (!c.training && recording_) recording_ = false, recorded_ = true;
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
  step_context rc = c; // a segment's forward again
  rc.recompute = true;
  for (action const& a : backward_) {
    double const t0 = c.clock ? now() : 0, c0 = c.clock ? comm_time(*c.times) : 0;
    run(a, a.recompute ? rc : c);
    // The gradient buckets started so far move while the layers below compute.
    if (c.grads && (a.what == act::bwd || a.what == act::move_bwd))
      c.grads->progress(c.times->allreduce);
    if (c.clock) tick(c, a.layer, t0, c0, false);
  }
  if (recording_) recording_ = false, recorded_ = true; // the first step told the scratch
}

template <class T> step_memory network<T>::memory() const {
  step_memory m;
  m.arena = need_;
  m.activations = act_bytes_;
  m.gradients = grad_bytes_;
  for (auto const& ly : layers_) {
    halox::ops::memory_use const u = ly->memory();
    m.operators += u.total();
    m.kept_reorders += u.kept_reorders;
    m.keepable_reorders += u.keepable_reorders;
  }
  for (auto const& mv : moves_)
    if (mv) m.moves += mv->held_bytes();
  halox::ops::shared_scratch const sh = halox::ops::shared_scratch_bytes();
  m.shared = sh.host + sh.device;
  m.shared_peak = sh.peak;
  return m;
}

namespace {
std::string mib(std::size_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return buf;
}
} // namespace

template <class T> std::string network<T>::describe_memory() const {
  std::ostringstream os;
  std::size_t const L = layers_.size();
  std::vector<std::size_t> const n = storage_sizes(plan_);
  for (std::size_t i = 0; i < L; ++i) {
    // A layer's activation: its output where it has a storage of its own (the next layer's
    // input, or its own output buffer); the first layer also its input.
    std::size_t act = 0;
    if (i == 0) act += n[static_cast<std::size_t>(in_[0].id)];
    if (out_[i].id >= 0 && !in_place_[i] && !fused_away_[i])
      act += n[static_cast<std::size_t>(out_[i].id)];
    std::size_t const grad = dout_[i].id >= 0 && !in_place_[i] && !fused_away_[i]
                                 ? n[static_cast<std::size_t>(dout_[i].id)]
                                 : 0;
    halox::ops::memory_use const u = layers_[i]->memory();
    os << "  " << i << " " << kinds_[i] << ": activation " << mib(act) << ", gradient " << mib(grad)
       << ", operator " << mib(u.total());
    if (u.kept_reorders) os << " (kept reorders " << mib(u.kept_reorders) << ")";
    if (i > 0 && moves_[i]) os << ", move " << mib(moves_[i]->held_bytes());
    os << "\n";
  }
  step_memory const m = memory();
  os << "  activations and gradients: " << mib(m.arena) << " placed by lifetime (at most "
     << mib(live_peak_) << " live at once; one buffer each: " << mib(m.activations) << " + "
     << mib(m.gradients) << ")";
  if (!plan_.segments.empty()) {
    os << "; recomputed segments start at layers";
    for (std::size_t a : plan_.segments) os << " " << a;
  }
  os << "\n  operators " << mib(m.operators) << " (kept reorders " << mib(m.kept_reorders)
     << (plan_.keep_reorders == 0 ? ", none kept"
         : plan_.keep_reorders == static_cast<std::size_t>(-1)
             ? ", all kept"
             : ", kept for inputs up to " + mib(plan_.keep_reorders))
     << "), moves " << mib(m.moves) << ", shared scratch " << mib(m.shared) << " (at most "
     << mib(m.shared_peak) << ", while the first calls measured layouts)\n";
  return os.str();
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
