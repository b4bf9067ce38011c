#include "oracle.hpp"

#include "common/dtype_dispatch.hpp"
#include "common/half.hpp"

#include <cstring>
#include <map>
#include <sstream>

namespace halox::verify {

namespace {

std::uint64_t splitmix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

index_t wrap(index_t g, index_t n) { return ((g % n) + n) % n; }

std::uint64_t key_of(std::vector<index_t> const& g, int tensor, std::uint64_t salt) {
  std::uint64_t h = splitmix(static_cast<std::uint64_t>(tensor) ^ salt);
  for (index_t x : g) h = splitmix(h ^ static_cast<std::uint64_t>(x));
  return h;
}

// Reads one element as double (for combining expectations).
double as_double(dtype t, std::byte const* p) {
  return detail::visit_dtype(t, [&](auto tag) {
    typename decltype(tag)::storage v;
    std::memcpy(&v, p, sizeof v);
    return tag.to_double(v);
  });
}

void from_double(dtype t, double v, std::byte* p) {
  detail::visit_dtype(t, [&](auto tag) {
    auto const x = tag.from_double(v);
    std::memcpy(p, &x, sizeof x);
  });
}

bool is_16bit_float(dtype t) { return t == dtype::float16 || t == dtype::bfloat16; }

// Allocates a distributed tensor of the case (descriptor + buffer) on this rank.
struct local_tensor {
  tensor_desc desc;
  std::vector<std::byte> data;
};

std::vector<index_t> padded_strides(distribution const& dist, int rank, int pad) {
  auto const shape = dist.local_shape(rank);
  std::vector<index_t> st(shape.size());
  index_t acc = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= std::max<index_t>(shape[d], 1) + (d == static_cast<int>(shape.size()) - 1 ? pad : 0);
  }
  return st;
}

std::vector<local_tensor> make_tensors(halo_case const& c, MPI_Comm comm) {
  process_grid grid(comm, c.dims);
  std::vector<local_tensor> out;
  for (std::size_t t = 0; t < c.types.size(); ++t) {
    distribution const dist(c.shape, c.types[t], c.dims, c.options);
    auto st =
        c.padding[t] > 0 ? padded_strides(dist, grid.rank(), c.padding[t]) : std::vector<index_t>{};
    tensor_desc d(grid, c.shape, c.types[t], c.options, st);
    std::vector<std::byte> buf(d.local_bytes());
    out.push_back({std::move(d), std::move(buf)});
  }
  return out;
}

bool owned(box const& o, std::vector<index_t> const& g) {
  for (int d = 0; d < o.nd; ++d)
    if (g[d] < o.lo[d] || g[d] >= o.hi[d]) return false;
  return true;
}

// Wraps a global index; returns false when it lies beyond a non-periodic boundary.
bool wrapped(distribution const& dist, std::vector<index_t> const& g, std::vector<index_t>& w) {
  w.resize(g.size());
  for (int d = 0; d < dist.ndim(); ++d) {
    index_t const n = dist.shape()[d];
    if ((g[d] < 0 || g[d] >= n) && !dist.options(d).periodic) return false;
    w[d] = wrap(g[d], n);
  }
  return true;
}

std::string index_str(std::vector<index_t> const& g) {
  std::ostringstream os;
  os << "(";
  for (std::size_t i = 0; i < g.size(); ++i) os << (i ? "," : "") << g[i];
  os << ")";
  return os.str();
}

void note(case_result& r, std::string const& msg) {
  ++r.mismatches;
  if (r.first_error.empty()) r.first_error = msg;
}

} // namespace

void element_value(dtype t, std::uint64_t seed, bool small, std::byte* out) {
  std::uint64_t const h = splitmix(seed);
  if (!small) {
    // Any bit pattern: forward mode moves bytes, and bytes are compared.
    std::memcpy(out, &h, size_of(t));
    return;
  }
  // Small integers whose sums and extrema are exact in every dtype (16-bit floats are only
  // used with max/min, see random_halo_case).
  from_double(t, static_cast<double>(h % (t == dtype::uint8 ? 4 : 50)), out);
}

void for_each_allocated(tensor_desc const& d, std::vector<index_t>& g,
                        std::function<void(std::vector<index_t> const&, index_t)> const& f) {
  box const a = d.dist().allocated_box(d.grid().rank());
  if (a.empty()) return;
  int const nd = d.ndim();
  g.assign(a.lo, a.lo + nd);
  auto const& st = d.strides();
  while (true) {
    index_t off = 0;
    for (int k = 0; k < nd; ++k) off += (g[k] - a.lo[k]) * st[k];
    f(g, off);
    int k = nd - 1;
    while (k >= 0 && ++g[k] == a.hi[k]) {
      g[k] = a.lo[k];
      --k;
    }
    if (k < 0) return;
  }
}

std::string halo_case::str() const {
  std::ostringstream os;
  os << "shape ";
  for (std::size_t d = 0; d < shape.size(); ++d) os << (d ? "x" : "") << shape[d];
  os << " grid ";
  for (std::size_t d = 0; d < dims.size(); ++d) os << (d ? "x" : "") << dims[d];
  os << " halo ";
  for (std::size_t d = 0; d < options.size(); ++d) {
    os << (d ? "|" : "") << options[d].halo_lo << "," << options[d].halo_hi
       << (options[d].periodic ? "p" : "");
    if (!options[d].sizes.empty()) os << "*";
  }
  os << " types";
  for (std::size_t t = 0; t < types.size(); ++t)
    os << " " << to_string(types[t]) << (padding[t] ? "+pad" : "");
  os << (fill ? " fill" : "") << " op "
     << (op == reduce_op::sum   ? "sum"
         : op == reduce_op::max ? "max"
                                : "min");
  return os.str();
}

halo_case random_halo_case(std::mt19937_64& rng, int nprocs, index_t max_elements) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  halo_case c;
  int const nd = pick(1, 5);
  c.dims.assign(nd, 1);
  // Spread the prime factors of nprocs over random dimensions.
  int p = nprocs;
  for (int f = 2; p > 1; ++f)
    while (p % f == 0) {
      c.dims[pick(0, nd - 1)] *= f;
      p /= f;
    }
  c.shape.assign(nd, 1);
  c.options.assign(nd, dim_options{});
  index_t volume = 1;
  for (int d = 0; d < nd; ++d) {
    // Mostly at least one element per part, sometimes fewer (empty ranks).
    int const lo = pick(0, 5) == 0 ? 1 : c.dims[d];
    index_t const budget = std::max<index_t>(1, max_elements / volume);
    index_t const hi =
        std::max<index_t>(lo, std::min<index_t>(budget, c.dims[d] * (nd <= 2 ? 9 : 4)));
    c.shape[d] = std::min<index_t>(budget, pick(lo, static_cast<int>(hi)));
    volume *= c.shape[d];
  }
  for (int d = 0; d < nd; ++d) {
    auto& o = c.options[d];
    index_t const n = c.shape[d];
    index_t const block = std::max<index_t>(1, n / c.dims[d]);
    auto width = [&] {
      int const k = pick(0, 9);
      if (k < 4) return 0;
      if (k < 8) return pick(1, 2);
      return static_cast<int>(std::min<index_t>(n, block + pick(1, 2))); // wider than a block
    };
    o.halo_lo = static_cast<int>(std::min<index_t>(width(), n));
    o.halo_hi = static_cast<int>(std::min<index_t>(width(), n));
    o.periodic = pick(0, 2) == 0;
    if (pick(0, 6) == 0) {
      o.sizes.assign(c.dims[d], 0);
      for (index_t i = 0; i < n; ++i) o.sizes[pick(0, c.dims[d] - 1)] += 1;
    }
  }
  dtype const all[] = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16,
                       dtype::int32,   dtype::int64,   dtype::uint8};
  int const nt = pick(1, 3);
  for (int t = 0; t < nt; ++t) {
    c.types.push_back(all[pick(0, 6)]);
    c.padding.push_back(pick(0, 3) == 0 ? pick(1, 3) : 0);
  }
  c.fill = pick(0, 1) == 1;
  bool const has16 = std::any_of(c.types.begin(), c.types.end(), is_16bit_float);
  int const opk = pick(has16 ? 1 : 0, 2);
  c.op = opk == 0 ? reduce_op::sum : opk == 1 ? reduce_op::max : reduce_op::min;
  return c;
}

namespace {
case_result check_forward(halo_case const& c, std::vector<local_tensor>& ts, halo_plan& plan) {
  int const rank = ts[0].desc.grid().rank();
  std::vector<index_t> g, w;
  std::vector<tensor_view> views;
  for (std::size_t t = 0; t < ts.size(); ++t) {
    auto& lt = ts[t];
    std::size_t const es = size_of(lt.desc.type());
    box const o = lt.desc.owned_box();
    for_each_allocated(lt.desc, g, [&](std::vector<index_t> const& gi, index_t off) {
      std::uint64_t const k = owned(o, gi) ? key_of(gi, static_cast<int>(t), 0)
                                           : key_of(gi, static_cast<int>(t), 1000 + rank);
      element_value(lt.desc.type(), k, false, lt.data.data() + off * es);
    });
  }
  for (auto& lt : ts) views.emplace_back(lt.desc, lt.data);
  plan.execute(views);
  // A second execution must give the same result (plans are reused).
  plan.execute(views);

  case_result r;
  std::byte expect[8];
  for (std::size_t t = 0; t < ts.size(); ++t) {
    auto& lt = ts[t];
    dtype const ty = lt.desc.type();
    std::size_t const es = size_of(ty);
    box const o = lt.desc.owned_box();
    for_each_allocated(lt.desc, g, [&](std::vector<index_t> const& gi, index_t off) {
      if (owned(o, gi)) return;
      ++r.checked;
      if (wrapped(lt.desc.dist(), gi, w))
        element_value(ty, key_of(w, static_cast<int>(t), 0), false, expect);
      else if (c.fill)
        from_double(ty, 3.0, expect);
      else
        element_value(ty, key_of(gi, static_cast<int>(t), 1000 + rank), false, expect);
      if (std::memcmp(expect, lt.data.data() + off * es, es) != 0)
        note(r, "tensor " + std::to_string(t) + " halo cell " + index_str(gi) + " holds " +
                    std::to_string(as_double(ty, lt.data.data() + off * es)) + ", expected " +
                    std::to_string(as_double(ty, expect)));
    });
  }
  return r;
}

case_result check_reverse(halo_case const& c, std::vector<local_tensor>& ts, halo_plan& plan) {
  int const rank = ts[0].desc.grid().rank();
  int const nranks = ts[0].desc.grid().size();
  std::vector<index_t> g, w;
  std::byte tmp[8];
  auto small_value = [&](dtype ty, std::uint64_t k) {
    element_value(ty, k, true, tmp);
    return as_double(ty, tmp);
  };
  for (std::size_t t = 0; t < ts.size(); ++t) {
    auto& lt = ts[t];
    std::size_t const es = size_of(lt.desc.type());
    box const o = lt.desc.owned_box();
    for_each_allocated(lt.desc, g, [&](std::vector<index_t> const& gi, index_t off) {
      std::uint64_t const k = owned(o, gi) ? key_of(gi, static_cast<int>(t), 0)
                                           : key_of(gi, static_cast<int>(t), 1000 + rank);
      element_value(lt.desc.type(), k, true, lt.data.data() + off * es);
    });
  }
  std::vector<tensor_view> views;
  for (auto& lt : ts) views.emplace_back(lt.desc, lt.data);
  plan.execute_reverse(views, c.op);

  case_result r;
  for (std::size_t t = 0; t < ts.size(); ++t) {
    auto& lt = ts[t];
    dtype const ty = lt.desc.type();
    distribution const& dist = lt.desc.dist();
    box const mine = lt.desc.owned_box();
    // Expected: own value combined with every halo copy of the cell, on every rank.
    std::map<std::vector<index_t>, double> expect;
    for (int q = 0; q < nranks; ++q) {
      box const a = dist.allocated_box(q);
      if (a.empty()) continue;
      box const oq = dist.owned_box(q);
      int const nd = dist.ndim();
      std::vector<index_t> gi(a.lo, a.lo + nd);
      while (true) {
        if (!owned(oq, gi) && wrapped(dist, gi, w) && owned(mine, w)) {
          double const v = small_value(ty, key_of(gi, static_cast<int>(t), 1000 + q));
          auto it = expect.find(w);
          if (it == expect.end())
            expect[w] = v;
          else if (c.op == reduce_op::sum)
            it->second += v;
          else if (c.op == reduce_op::max)
            it->second = std::max(it->second, v);
          else
            it->second = std::min(it->second, v);
        }
        int k = nd - 1;
        while (k >= 0 && ++gi[k] == a.hi[k]) {
          gi[k] = a.lo[k];
          --k;
        }
        if (k < 0) break;
      }
    }
    std::size_t const es = size_of(ty);
    for_each_allocated(lt.desc, g, [&](std::vector<index_t> const& gi, index_t off) {
      if (!owned(mine, gi)) return;
      ++r.checked;
      double e = small_value(ty, key_of(gi, static_cast<int>(t), 0));
      if (auto it = expect.find(gi); it != expect.end()) {
        if (c.op == reduce_op::sum)
          e += it->second;
        else if (c.op == reduce_op::max)
          e = std::max(e, it->second);
        else
          e = std::min(e, it->second);
      }
      std::byte want[8];
      from_double(ty, e, want);
      if (std::memcmp(want, lt.data.data() + off * es, es) != 0)
        note(r, "tensor " + std::to_string(t) + " owned cell " + index_str(gi) + " holds " +
                    std::to_string(as_double(ty, lt.data.data() + off * es)) + ", expected " +
                    std::to_string(as_double(ty, want)) + " after reverse exchange");
    });
  }
  return r;
}

} // namespace

halo_result run_halo_case(halo_case const& c, backend b, MPI_Comm comm) {
  auto ts = make_tensors(c, comm);
  std::vector<tensor_desc> descs;
  for (auto const& lt : ts) descs.push_back(lt.desc);
  halo_options ho;
  ho.method = b;
  ho.boundary = c.fill ? boundary_fill::constant : boundary_fill::untouched;
  ho.fill_value = 3.0;
  halo_plan plan(descs, ho);
  halo_result r;
  r.forward = check_forward(c, ts, plan);
  r.reverse = check_reverse(c, ts, plan);
  return r;
}

} // namespace halox::verify
