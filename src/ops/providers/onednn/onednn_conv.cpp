// The oneDNN convolutions: primitive descriptors per problem and layout, the layout measurement
// (blocked, plain, channels-last), kept reorders and the user-managed scratchpads. One file of
// about 500 lines because the measurement, the primitives it builds and the reorders they need
// share one cache of problems; onednn_conv.hpp is its interface.
#include "ops/providers/onednn/onednn_conv.hpp"

#include "common/environment.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace halox::ops::detail::onednn {
namespace {

enum class layout { blocked, plain, channels_last };
constexpr layout all_layouts[] = {layout::blocked, layout::plain, layout::channels_last};

char const* name_of(layout l) {
  switch (l) {
  case layout::blocked: return "blocked";
  case layout::plain: return "plain";
  case layout::channels_last: return "channels_last";
  }
  return "?";
}

char const* name_of(conv_kind k) {
  switch (k) {
  case conv_kind::forward: return "fwd";
  case conv_kind::backward_data: return "bwd_data";
  case conv_kind::backward_weights: return "bwd_weights";
  }
  return "?";
}

memory::desc act_md(memory::dims const& d, layout l, int nsp) {
  switch (l) {
  case layout::blocked: return memory::desc(d, dt::f32, tag::any);
  case layout::plain: return memory::desc(d, dt::f32, plain_tag(nsp));
  case layout::channels_last: return memory::desc(d, dt::f32, channels_last_tag(nsp));
  }
  return {};
}

std::string strides_str(memory::desc const& md) {
  memory::dims s(md.data.format_desc.blocking.strides,
                 md.data.format_desc.blocking.strides + md.data.ndims);
  return dims_str(s);
}

int omp_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

std::string key_of(conv_job const& j) {
  std::ostringstream os;
  os << name_of(j.kind) << ",src=" << dims_str(j.src) << ",wei=" << dims_str(j.wei)
     << ",dst=" << dims_str(j.dst) << ",s=" << dims_str(j.stride) << ",d=" << dims_str(j.dil)
     << ",pl=" << dims_str(j.pl) << ",pr=" << dims_str(j.pr) << ",bias=" << j.bias
     << ",relu=" << j.relu << ",xs=" << strides_str(j.usr_src) << ",ws=" << strides_str(j.usr_wei)
     << ",ys=" << strides_str(j.usr_dst) << ",yd=" << dims_str(j.usr_dst.dims())
     << ",t=" << omp_threads();
  return os.str();
}

} // namespace

// One candidate, built: the primitive, its internal memories and the reorders that connect them
// to the caller's views (absent where the caller's view already is the primitive's layout).
struct conv_engine::exec {
  std::string impl;
  layout lay; // of the activations the primitive reads and writes
  memory usr_src, usr_wei, usr_dst, usr_bias;
  memory src_m, wei_m, dst_m; // what the primitive reads and writes
  memory dst_sub;             // the caller's part of a zero-extended dst (backward-data dy)
  bool extend = false;
  // The reorders between the caller's views and the primitive's layouts (empty where the
  // caller's view already is that layout) and the primitive, each with its arguments bound.
  bound r_src, r_wei, r_dst;
  memory plain_dw; // backward-weights: the gradient in [O, I, k...]
  bound r_dw;
  bound prim;
  // The primitive reading an input that another exec already reordered (see conv_engine::run):
  // x for backward-weights, dy for backward-data. Empty where this exec reorders no such input.
  memory kept_in;
  bound prim_kept;
  memory pad_m; // the primitive's scratchpad, bound to the arena's pad role at each call
  std::size_t pad_bytes = 0;
  // Bytes of src_m, dst_m and wei_m: none is allocated here. Each call binds them to buffers
  // the engine hands it (the thread's shared scratch, or the engine's kept copy of x).
  std::size_t src_bytes = 0, dst_bytes = 0, wei_bytes = 0;

  exec(conv_job const& j, layout l) : lay(l) {
    auto& c = ctx();
    using namespace dnnl;
    int const nsp = j.nsp;
    memory::desc const wany(j.wei, dt::f32, tag::any);
    memory::desc const src_md = act_md(j.src, l, nsp), dst_md = act_md(j.dst, l, nsp);
    auto fwd_desc =
        j.bias
            ? convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                        src_md, wany, memory::desc({j.wei[0]}, dt::f32, tag::a),
                                        dst_md, j.stride, j.dil, j.pl, j.pr)
            : convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                                        src_md, wany, dst_md, j.stride, j.dil, j.pl, j.pr);
    primitive_attr attr;
    if (j.kind == conv_kind::forward && j.relu) { // y = max(conv + bias, 0) in one pass
      post_ops po;
      po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
      attr.set_post_ops(po);
    }
    // Each primitive's scratchpad (im2col buffers, per-thread reductions) comes from the shared
    // arena: oneDNN's own would be one more buffer per primitive, outside any account.
    attr.set_scratchpad_mode(scratchpad_mode::user);
    primitive_attr pad_attr;
    pad_attr.set_scratchpad_mode(scratchpad_mode::user);
    convolution_forward::primitive_desc fwd_pd(fwd_desc, attr, c.eng);
    memory::desc pad_md;
    memory::desc isrc, iwei, idst;
    dnnl::primitive p;
    if (j.kind == conv_kind::forward) {
      p = convolution_forward(fwd_pd);
      impl = fwd_pd.impl_info_str();
      isrc = fwd_pd.src_desc();
      iwei = fwd_pd.weights_desc();
      idst = fwd_pd.dst_desc();
      pad_md = fwd_pd.scratchpad_desc();
    } else if (j.kind == conv_kind::backward_data) {
      convolution_backward_data::primitive_desc pd(
          convolution_backward_data::desc(algorithm::convolution_direct, src_md, wany, dst_md,
                                          j.stride, j.dil, j.pl, j.pr),
          pad_attr, c.eng, fwd_pd);
      p = convolution_backward_data(pd);
      pad_md = pd.scratchpad_desc();
      impl = pd.impl_info_str();
      isrc = pd.diff_src_desc();
      iwei = pd.weights_desc();
      idst = pd.diff_dst_desc();
    } else {
      convolution_backward_weights::primitive_desc pd(
          convolution_backward_weights::desc(algorithm::convolution_direct, src_md, wany, dst_md,
                                             j.stride, j.dil, j.pl, j.pr),
          pad_attr, c.eng, fwd_pd);
      p = convolution_backward_weights(pd);
      pad_md = pd.scratchpad_desc();
      impl = pd.impl_info_str();
      isrc = pd.src_desc();
      iwei = pd.diff_weights_desc();
      idst = pd.diff_dst_desc();
    }
    usr_src = memory(j.usr_src, c.eng, DNNL_MEMORY_NONE);
    usr_dst = memory(j.usr_dst, c.eng, DNNL_MEMORY_NONE);
    if (j.bias)
      usr_bias = memory(memory::desc({j.wei[0]}, dt::f32, tag::a), c.eng, DNNL_MEMORY_NONE);
    bool const src_in = j.kind != conv_kind::backward_data;
    bool const dst_in = j.kind != conv_kind::forward;
    // source side
    if (isrc != j.usr_src) {
      src_m = memory(isrc, c.eng, DNNL_MEMORY_NONE);
      src_bytes = isrc.get_size();
      r_src = src_in ? bound::reorder(usr_src, src_m) : bound::reorder(src_m, usr_src);
    }
    // destination side; backward-data may read a zero-extended dy
    extend = !j.dst_offset.empty();
    if (extend || idst != j.usr_dst) {
      dst_m = memory(idst, c.eng, DNNL_MEMORY_NONE);
      dst_bytes = idst.get_size();
      if (extend) {
        dst_sub =
            memory(idst.submemory_desc(j.usr_dst.dims(), j.dst_offset), c.eng, DNNL_MEMORY_NONE);
        r_dst = bound::reorder(usr_dst, dst_sub);
      } else {
        r_dst = dst_in ? bound::reorder(usr_dst, dst_m) : bound::reorder(dst_m, usr_dst);
      }
    }
    // weights
    if (j.kind == conv_kind::backward_weights) {
      wei_m = memory(iwei, c.eng, DNNL_MEMORY_NONE);
      wei_bytes = iwei.get_size();
      plain_dw = memory(memory::desc(j.wei, dt::f32, weights_tag(nsp)), c.eng, DNNL_MEMORY_NONE);
      r_dw = bound::reorder(wei_m, plain_dw);
    } else {
      usr_wei = memory(j.usr_wei, c.eng, DNNL_MEMORY_NONE);
      if (iwei != j.usr_wei) {
        wei_m = memory(iwei, c.eng, DNNL_MEMORY_NONE);
        wei_bytes = iwei.get_size();
        r_wei = bound::reorder(usr_wei, wei_m);
      }
    }
    memory const& src = r_src ? src_m : usr_src;
    memory const& dst = r_dst ? dst_m : usr_dst;
    memory const& wei = r_wei ? wei_m : usr_wei;
    if (j.kind == conv_kind::forward) {
      prim = bound(p, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}});
      if (j.bias) prim.add(DNNL_ARG_BIAS, usr_bias);
    } else if (j.kind == conv_kind::backward_data) {
      prim =
          bound(p, {{DNNL_ARG_DIFF_DST, dst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, src}});
    } else {
      prim =
          bound(p, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, dst}, {DNNL_ARG_DIFF_WEIGHTS, wei_m}});
    }
    pad_bytes = pad_md.get_size();
    if (pad_bytes) {
      pad_m = memory(pad_md, c.eng, DNNL_MEMORY_NONE);
      prim.add(DNNL_ARG_SCRATCHPAD, pad_m);
    }
    if (j.kind == conv_kind::backward_weights && r_src) {
      kept_in = memory(isrc, c.eng, DNNL_MEMORY_NONE);
      prim_kept = bound(
          p, {{DNNL_ARG_SRC, kept_in}, {DNNL_ARG_DIFF_DST, dst}, {DNNL_ARG_DIFF_WEIGHTS, wei_m}});
    } else if (j.kind == conv_kind::backward_data && r_dst && !extend) {
      kept_in = memory(idst, c.eng, DNNL_MEMORY_NONE);
      prim_kept = bound(
          p, {{DNNL_ARG_DIFF_DST, kept_in}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, src}});
    }
    if (pad_bytes && prim_kept) prim_kept.add(DNNL_ARG_SCRATCHPAD, pad_m);
  }

  // Whether `from`'s reordered input `from_m` can stand for the input this exec reorders from
  // `usr` (x for backward-weights, dy for backward-data): the same caller view, reordered into
  // the same layout. The caller checks that it was the same memory, unchanged since.
  [[nodiscard]] bool can_read(memory const& from_usr, memory const& from_m,
                              memory const& usr) const {
    return prim_kept && from_m && from_m.get_desc() == kept_in.get_desc() &&
           from_usr.get_desc() == usr.get_desc();
  }

  // `kept`: the reordered input another exec left (see kept_in), or null to reorder it here.
  // `b`: where src_m, dst_m and wei_m live during this call (see buffers_for).
  void run(conv_job const& j, float* dw_plain, void* kept, buffers const& b) {
    auto& c = ctx();
    usr_src.set_data_handle(j.src_ptr);
    usr_dst.set_data_handle(j.dst_ptr);
    if (src_m) src_m.set_data_handle(b.src);
    if (dst_m) dst_m.set_data_handle(b.dst);
    if (dst_sub) dst_sub.set_data_handle(b.dst);
    if (wei_m) wei_m.set_data_handle(b.wei);
    if (pad_bytes) pad_m.set_data_handle(arena().get(role::pad, pad_bytes));
    if (j.kind == conv_kind::forward) {
      usr_wei.set_data_handle(j.wei_ptr);
      if (r_src) r_src.execute(c.strm);
      if (r_wei) r_wei.execute(c.strm);
      if (j.bias) usr_bias.set_data_handle(j.bias_ptr);
      prim.execute(c.strm);
      if (r_dst) r_dst.execute(c.strm);
    } else {
      if (extend) {
        c.strm.wait();
        std::memset(b.dst, 0, dst_bytes);
      }
      if (kept) kept_in.set_data_handle(kept);
      bool const dy_kept = kept && j.kind == conv_kind::backward_data;
      if (r_dst && !dy_kept) r_dst.execute(c.strm);
      bound const& p = kept ? prim_kept : prim;
      if (j.kind == conv_kind::backward_data) {
        usr_wei.set_data_handle(j.wei_ptr);
        if (r_wei) r_wei.execute(c.strm);
        p.execute(c.strm);
        if (r_src) r_src.execute(c.strm);
      } else {
        if (r_src && !kept) r_src.execute(c.strm);
        p.execute(c.strm);
        plain_dw.set_data_handle(dw_plain);
        r_dw.execute(c.strm);
      }
    }
    c.strm.wait();
  }
};

struct conv_engine::plan {
  measured_choice choice;
  std::unique_ptr<exec> ex;
};

conv_engine::conv_engine() = default;
conv_engine::~conv_engine() = default;

void conv_engine::fingerprint_of(conv_job const& j, fingerprint& f) {
  f.clear();
  f.push_back(static_cast<std::int64_t>(j.kind));
  f.push_back(j.nsp);
  for (auto const* d : {&j.src, &j.wei, &j.dst, &j.stride, &j.dil, &j.pl, &j.pr, &j.dst_offset})
    put_dims(f, *d);
  f.push_back(j.bias);
  f.push_back(j.relu);
  put_md(f, j.usr_src);
  put_md(f, j.usr_wei);
  put_md(f, j.usr_dst);
  f.push_back(omp_threads());
}

void conv_engine::run(char const* op, conv_job const& job, float* dw_plain, bool input_kept) {
  try {
    fingerprint_of(job, scratch_);
    if (auto const hit = by_fingerprint_.find(scratch_); hit != by_fingerprint_.end()) {
      run_exec(*hit->second->ex, job, dw_plain, input_kept);
      return;
    }
    // A candidate that can read an input an earlier call reordered is timed doing so, as it
    // will run: a layout that saves that reorder wins where it should.
    held const* const h = held_for(job, input_kept);
    std::string const key = key_of(job) + (h ? std::string(",kept=") + name_of(h->ex->lay) : "");
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      auto pl = std::make_unique<plan>();
      if (auto const fixed = halox::detail::settings::onednn_layout()) { // not measured
        for (layout l : all_layouts)
          if (*fixed == name_of(l)) {
            try {
              pl->ex = std::make_unique<exec>(job, l);
            } catch (dnnl::error const&) {
              throw halox::error(errc::invalid_argument,
                                 std::string(op) + ": oneDNN has no " + *fixed +
                                     " implementation for " + key +
                                     "; unset HALOX_ONEDNN_LAYOUT (or set it to measure)");
            }
          }
        pl->choice.choice = *fixed + " (HALOX_ONEDNN_LAYOUT)";
      } else if (find_choice("onednn", key, pl->choice)) {
        for (layout l : all_layouts) {
          if (pl->choice.choice != name_of(l)) continue;
          try {
            pl->ex = std::make_unique<exec>(job, l);
          } catch (dnnl::error const&) { // a cache file from another machine: measure again
          }
        }
      }
      if (!pl->ex) { // measure every layout on the caller's data
        measured_choice mc;
        std::vector<float> scratch_dw;
        if (job.kind == conv_kind::backward_weights)
          scratch_dw.resize(static_cast<std::size_t>(
              memory::desc(job.wei, dt::f32, weights_tag(job.nsp)).get_size() / sizeof(float)));
        std::vector<std::unique_ptr<exec>> cands;
        for (layout l : all_layouts) {
          try {
            cands.push_back(std::make_unique<exec>(job, l));
          } catch (dnnl::error const&) {
            cands.emplace_back();
          }
        }
        // A layout whose scratch is much larger than the caller's x and y (blocked with a
        // channel count below its block pads every pixel; a matrix-product implementation
        // unrolls every window into its scratchpad) costs that memory in every call: where
        // the excess is large (over a quarter of x and y, and over 4 MiB) and another
        // layout's is not, it is not even tried (trying it would leave those pages in the
        // process's peak). Small maps, where speed matters and the bytes do not, try all.
        double const plain_bytes =
            static_cast<double>(job.usr_src.get_size() + job.usr_dst.get_size());
        auto pads = [&](exec const& e) {
          double const excess =
              static_cast<double>(e.src_bytes + e.dst_bytes + e.pad_bytes) - plain_bytes;
          return excess > 0.25 * plain_bytes && excess > 4.0 * 1024 * 1024;
        };
        bool lean = false;
        for (auto const& e : cands) lean = lean || (e && !pads(*e));
        // Candidates run on the shared scratch only: the kept copy of x is this engine's record
        // of its last forward, which a candidate must not overwrite. Beside a kept dy (in the
        // dst role), those that read it are timed first, then the others, which reorder their
        // own dy into that role: no candidate needs a second dy-sized buffer.
        bool const beside = h && job.kind == conv_kind::backward_data;
        std::vector<std::size_t> timed;
        std::vector<std::function<void()>> phase[2];
        for (int ph = 0; ph < 2; ++ph)
          for (std::size_t i = 0; i < cands.size(); ++i) {
            if (!cands[i] || (lean && pads(*cands[i]))) continue;
            void* const k = kept_input(*cands[i], job, h);
            if ((k != nullptr) != (ph == 0)) continue;
            timed.push_back(i);
            phase[ph].emplace_back([this, k, beside, &job, &scratch_dw, e = cands[i].get()] {
              e->run(job, scratch_dw.data(), k, buffers_for(*e, job, false, beside && k));
            });
          }
        scratch_arena::recorded const before = arena().record();
        std::vector<double> secs = time_interleaved(phase[0]);
        for (double v : time_interleaved(phase[1])) secs.push_back(v);
        arena().restore(before); // the chosen layout's calls say what they ask
        // The candidates sized the shared buffers for every layout tried; the chosen one's
        // calls size them again for what they need.
        arena().release();
        double best = 1e300;
        for (std::size_t i = 0; i < cands.size(); ++i) {
          char const* const name = name_of(all_layouts[i]);
          auto const t = std::find(timed.begin(), timed.end(), i);
          if (t == timed.end()) {
            mc.costs.emplace_back(name, cands[i] ? padded_cost : -1.0);
            continue;
          }
          double const sec = secs[static_cast<std::size_t>(t - timed.begin())];
          mc.costs.emplace_back(name, sec);
          if (sec < best) {
            best = sec;
            mc.choice = name;
            pl->ex = std::move(cands[i]);
          }
        }
        HALOX_REQUIRE(pl->ex != nullptr, errc::internal,
                      std::string(op) + ": oneDNN has no implementation for " + key +
                          "; use provider reference for this layer");
        store_choice("onednn", key, mc);
        pl->choice = mc;
      }
      it = plans_.emplace(key, std::move(pl)).first;
    }
    by_fingerprint_.emplace(scratch_, it->second.get());
    run_exec(*it->second->ex, job, dw_plain, input_kept);
  } catch (dnnl::error const& e) {
    rethrow(op, e);
  }
}

conv_engine::held const* conv_engine::held_for(conv_job const& job, bool input_kept) const {
  if (!input_kept || job.kind == conv_kind::forward) return nullptr;
  bool const x = job.kind == conv_kind::backward_weights;
  held const& h = x ? held_x_ : held_dy_;
  // dy lives in shared scratch: another engine's call since may have overwritten it.
  bool const intact = x || h.stamp == arena().stamp(role::dst);
  return h.ex && intact && h.ptr == (x ? job.src_ptr : job.dst_ptr) ? &h : nullptr;
}

void* conv_engine::kept_input(exec const& ex, conv_job const& job, held const* h) {
  if (!h) return nullptr;
  bool const x = job.kind == conv_kind::backward_weights;
  memory const& m = x ? h->ex->src_m : h->ex->dst_m;
  return ex.can_read(x ? h->ex->usr_src : h->ex->usr_dst, m, x ? ex.usr_src : ex.usr_dst) ? h->data
                                                                                          : nullptr;
}

conv_engine::buffers conv_engine::buffers_for(exec const& ex, conv_job const& job, bool keep_x,
                                              bool dy_read_kept) {
  scratch_arena& a = arena();
  buffers b;
  if (ex.src_bytes) {
    if (keep_x && job.kind == conv_kind::forward) {
      if (ex.src_bytes > kept_x_bytes_) {
        kept_x_.reset();
        kept_x_bytes_ = 0;
        void* p = std::aligned_alloc(64, (ex.src_bytes + 63) / 64 * 64);
        HALOX_REQUIRE(p != nullptr, errc::out_of_memory,
                      "conv_forward_box (onednn): could not allocate " +
                          std::to_string(ex.src_bytes) +
                          " bytes to keep x for backward; turn kept reorders off");
        kept_x_.reset(p);
        kept_x_bytes_ = (ex.src_bytes + 63) / 64 * 64;
      }
      b.src = kept_x_.get();
    } else {
      b.src = a.get(role::src, ex.src_bytes);
    }
  }
  // A backward-weights call's reordered dy stays in the dst role for the backward-data call
  // after it, which then reads it there and takes no dst of its own (`dy_read_kept`); any other
  // call taking the role ends what was kept (its stamp tells).
  if (ex.dst_bytes && !dy_read_kept) b.dst = a.get(role::dst, ex.dst_bytes);
  if (ex.wei_bytes) b.wei = a.get(role::wei, ex.wei_bytes);
  return b;
}

std::size_t conv_engine::held_bytes() const noexcept { return kept_x_bytes_; }

void conv_engine::keep_inputs(bool keep) noexcept {
  keep_x_ = keep;
  if (!keep) {
    held_x_ = {};
    kept_x_.reset();
    kept_x_bytes_ = 0;
  }
}

void conv_engine::forget(conv_kind kind) {
  if (kind == conv_kind::forward) held_x_ = {};
  if (kind == conv_kind::backward_weights) held_dy_ = {};
}

void conv_engine::run_exec(exec& ex, conv_job const& job, float* dw_plain, bool input_kept) {
  void* const kept = kept_input(ex, job, held_for(job, input_kept));
  buffers const b =
      buffers_for(ex, job, keep_x_, kept != nullptr && job.kind == conv_kind::backward_data);
  ex.run(job, dw_plain, kept, b);
  if (kept) ++reused_;
  // What this call left reordered for the next backward call to read (a forward's x in this
  // engine's kept copy, a backward-weights' dy in the shared dst role, valid while that role's
  // stamp is unchanged); any other call of the same kind replaces it.
  if (job.kind == conv_kind::forward && ex.r_src)
    want_x_bytes_ = std::max(want_x_bytes_, (ex.src_bytes + 63) / 64 * 64);
  if (job.kind == conv_kind::forward)
    held_x_ = ex.r_src && keep_x_ ? held{&ex, job.src_ptr, b.src, 0} : held{};
  else if (job.kind == conv_kind::backward_weights)
    held_dy_ =
        ex.r_dst && !ex.extend ? held{&ex, job.dst_ptr, b.dst, arena().stamp(role::dst)} : held{};
}

std::string conv_engine::describe() const {
  std::ostringstream os;
  for (auto const& [key, pl] : plans_)
    os << "onednn conv " << key << ": " << pl->choice.choice << " (" << pl->ex->impl << ");"
       << format_costs(pl->choice) << "\n";
  if (reused_ > 0)
    os << "onednn conv: " << reused_
       << " backward calls read the input an earlier call had reordered\n";
  return os.str();
}

} // namespace halox::ops::detail::onednn
