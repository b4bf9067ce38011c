// halox-verify's redistribution section: random pairs of distributions (1-5 dims, any grids,
// uneven and empty blocks, halos and padded strides on either side, and a source held by a
// subset of the ranks), every destination cell compared with the global tensor, then the round
// trip src -> dst -> src compared with the original.
#include "oracle.hpp"
#include "sections.hpp"

#include <halox/redistribute.hpp>

#include <cstdio>
#include <cstring>
#include <optional>

namespace halox::verify {

namespace {

struct side {
  std::vector<int> dims;
  std::vector<dim_options> options;
  int pad = 0;
};

side random_side(std::mt19937_64& rng, int nprocs, std::vector<index_t> const& shape) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int const nd = static_cast<int>(shape.size());
  side s;
  s.dims.assign(nd, 1);
  int p = nprocs;
  for (int f = 2; p > 1; ++f)
    while (p % f == 0) {
      s.dims[pick(0, nd - 1)] *= f;
      p /= f;
    }
  s.options.assign(nd, dim_options{});
  for (int d = 0; d < nd; ++d) {
    auto& o = s.options[d];
    if (pick(0, 2) == 0) {
      o.halo_lo = static_cast<int>(std::min<index_t>(shape[d], pick(0, 2)));
      o.halo_hi = static_cast<int>(std::min<index_t>(shape[d], pick(0, 2)));
    }
    if (pick(0, 4) == 0) {
      o.sizes.assign(s.dims[d], 0);
      for (index_t i = 0; i < shape[d]; ++i) o.sizes[pick(0, s.dims[d] - 1)] += 1;
    }
  }
  s.pad = pick(0, 3) == 0 ? pick(1, 3) : 0;
  return s;
}

std::vector<index_t> padded(distribution const& dist, int rank, int pad) {
  if (pad == 0) return {};
  auto const shape = dist.local_shape(rank);
  std::vector<index_t> st(shape.size());
  index_t acc = 1;
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    st[d] = acc;
    acc *= std::max<index_t>(shape[d], 1) + (d + 1 == static_cast<int>(shape.size()) ? pad : 0);
  }
  return st;
}

std::uint64_t key(std::vector<index_t> const& g, std::uint64_t salt) {
  std::uint64_t h = salt * 0x9e3779b97f4a7c15ull + 1;
  for (index_t x : g) h = (h ^ static_cast<std::uint64_t>(x)) * 0x100000001b3ull;
  return h;
}

bool in_box(box const& b, std::vector<index_t> const& g) {
  for (int d = 0; d < b.nd; ++d)
    if (g[d] < b.lo[d] || g[d] >= b.hi[d]) return false;
  return true;
}

// Fills owned cells with the global tensor's values and everything else with a per-rank
// pattern; returns nothing. `salt` 0 is the global tensor.
void fill(tensor_desc const& d, std::vector<std::byte>& buf, int rank) {
  std::size_t const es = size_of(d.type());
  box const o = d.owned_box();
  std::vector<index_t> g;
  for_each_allocated(d, g, [&](std::vector<index_t> const& gi, index_t off) {
    element_value(d.type(), key(gi, in_box(o, gi) ? 0 : 77 + rank), false, buf.data() + off * es);
  });
}

// Counts cells that differ from what `fill` would have put there with the given owned values.
case_result check(tensor_desc const& d, std::vector<std::byte> const& buf, int rank,
                  char const* what) {
  case_result r;
  std::size_t const es = size_of(d.type());
  box const o = d.owned_box();
  std::vector<index_t> g;
  std::byte want[8];
  for_each_allocated(d, g, [&](std::vector<index_t> const& gi, index_t off) {
    ++r.checked;
    element_value(d.type(), key(gi, in_box(o, gi) ? 0 : 77 + rank), false, want);
    if (std::memcmp(want, buf.data() + off * es, es) != 0) {
      ++r.mismatches;
      if (r.first_error.empty())
        r.first_error = std::string(what) + ": cell " + std::to_string(off) +
                        (in_box(o, gi) ? " (owned) has the wrong value" : " (halo) was written");
    }
  });
  return r;
}

} // namespace

totals run_redistribute_section(backend b, std::uint64_t seed, long cases, index_t max_elements,
                                bool quiet) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  totals t;
  for (long i = 0; i < cases; ++i) {
    std::mt19937_64 rng(seed * 7919ull + static_cast<std::uint64_t>(i) + 0x5eedull);
    halo_case const shape_case = random_halo_case(rng, size, max_elements);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    dtype const type = shape_case.types[0];
    // The source lives on the first `nsrc` ranks (all of them most of the time).
    int const nsrc = pick(0, 2) == 0 ? pick(1, size) : size;
    side const s = random_side(rng, nsrc, shape_case.shape);
    side const d = random_side(rng, size, shape_case.shape);

    case_result fwd, back;
    try {
      MPI_Comm src_comm = MPI_COMM_NULL;
      MPI_Comm_split(MPI_COMM_WORLD, rank < nsrc ? 0 : MPI_UNDEFINED, rank, &src_comm);
      std::optional<tensor_desc> sd;
      std::vector<std::byte> sbuf, sback;
      if (src_comm != MPI_COMM_NULL) {
        process_grid sg(src_comm, s.dims);
        distribution const dist(shape_case.shape, type, s.dims, s.options);
        sd.emplace(sg, shape_case.shape, type, s.options, padded(dist, sg.rank(), s.pad));
        sbuf.resize(sd->local_bytes());
        fill(*sd, sbuf, rank);
        MPI_Comm_free(&src_comm);
      }
      process_grid dg(MPI_COMM_WORLD, d.dims);
      distribution const ddist(shape_case.shape, type, d.dims, d.options);
      tensor_desc dd(dg, shape_case.shape, type, d.options, padded(ddist, rank, d.pad));
      std::vector<std::byte> dbuf(dd.local_bytes());
      // Destination starts with the pattern of non-owned cells everywhere: owned cells must be
      // overwritten by the redistribution, halo cells must be left alone.
      std::vector<index_t> g;
      std::size_t const es = size_of(type);
      for_each_allocated(dd, g, [&](std::vector<index_t> const& gi, index_t off) {
        element_value(type, key(gi, in_box(dd.owned_box(), gi) ? 99 : 77 + rank), false,
                      dbuf.data() + off * es);
      });
      redistribute_options ro;
      ro.method = b;
      redistribute_plan plan(MPI_COMM_WORLD, sd ? &*sd : nullptr, &dd, ro);
      tensor_view const sv = sd ? tensor_view(*sd, sbuf) : tensor_view{};
      plan.execute(sv, tensor_view(dd, dbuf));
      fwd = check(dd, dbuf, rank, "forward");
      if (sd) {
        sback.assign(sbuf.size(), std::byte{0});
        // Non-owned cells of the round-trip buffer carry the pattern; owned ones must return.
        for_each_allocated(*sd, g, [&](std::vector<index_t> const& gi, index_t off) {
          element_value(type, key(gi, in_box(sd->owned_box(), gi) ? 98 : 77 + rank), false,
                        sback.data() + off * es);
        });
      }
      plan.execute_inverse(tensor_view(dd, dbuf), sd ? tensor_view(*sd, sback) : tensor_view{});
      if (sd) back = check(*sd, sback, rank, "round trip");
    } catch (error const& e) {
      fwd.mismatches = back.mismatches = 1;
      fwd.first_error = back.first_error = std::string("exception: ") + e.what();
    }
    unsigned long long local[2] = {fwd.mismatches, back.mismatches}, global[2] = {0, 0};
    MPI_Allreduce(local, global, 2, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    for (int k = 0; k < 2; ++k) {
      (global[k] == 0 ? t.passed : t.failed) += 1;
      case_result const& r = k == 0 ? fwd : back;
      if (global[k] != 0 && local[k] != 0 && !quiet)
        std::fprintf(stderr,
                     "[rank %d] FAILED redistribute %s case %ld (%s, source on %d rank(s)): %s\n",
                     rank, to_string(b), i, shape_case.str().c_str(), nsrc, r.first_error.c_str());
    }
  }
  return t;
}

} // namespace halox::verify
