// Halo-exchange scenarios of halox-bench.
//
//  halo/nchw_f32/split_h/w{1,3}    float 32x64x128x128 (NCHW), split along H, halo on H
//  halo/nchw_f32/split_hw/w{1,3}   the same split along H and W, halo on H and W
//  halo/dmda_f64_256/{box,star}_w1/split_{z,x}  double 256^3, one value per point, split over
//                                  all ranks along z (slowest axis) or x (fastest), stencil width
//                                  1, halo on the split axis only: PETSc DMDA's ghost update
//                                  with DM_BOUNDARY_NONE (halox-bench-peers times PETSc on it)
//  halo/dmda_f64_32_dof256/{box,star}_w1/split_{z,x}  the same on 32^3 points of 256 doubles
//  halo/comb_f64_{100,180}pr/w1_3var  double n^3 *per rank* on a 3-D grid, width 1, three
//                                  variables exchanged in one plan (Comb / TEMPI halo style)
//  halo/comb_f64_{100,180}pr/w3    the same, one variable, width 3
//  halo/slab_f64_256/w1            double 256^3 split along dim 0 only, halo on dim 0: every
//                                  face is one contiguous block (the "contiguous faces" case)
//  halo/upwind_f64_256/w2/split_x  double 256^3 split along x (fastest axis), a halo of width 2
//                                  after the owned block only (an upwind stencil): each rank
//                                  sends one strided 1 MiB face to the rank before it and
//                                  receives one from the rank after it, so with 2 ranks data
//                                  flows one way (what pipelined packing overlaps)
//
// None is periodic, so the schedule has no local copies and the limits cover all the work.
// Extents are multiplied by HALOX_BENCH_SCALE.
#include "cases.hpp"
#include "common/scenario.hpp"

#include "plan/halo_planner.hpp"

#include <halox/halo.hpp>
#include <halox/tensor_desc.hpp>

#include <cstring>

namespace halox::bench {

namespace {

struct halo_case {
  std::string name;
  dtype type = dtype::float32;
  std::vector<index_t> shape;
  std::vector<int> dims;  // the full process grid
  std::vector<int> width; // halo width per dimension (both sides, or the high side only)
  int ntensors = 1;
  bool one_sided = false; // halos after the owned block only: data flows one way
};

std::vector<dim_options> options_of(halo_case const& c) {
  std::vector<dim_options> o;
  for (int w : c.width) {
    o.push_back(dim_options::halo(w));
    if (c.one_sided) o.back().halo_lo = 0;
  }
  return o;
}

class halo_scenario : public scenario {
public:
  struct parts {
    process_grid grid;
    std::vector<tensor_desc> descs;
    std::vector<std::vector<std::byte>> data;
    detail::schedule sched;
    std::vector<void*> slots;
  };

  explicit halo_scenario(parts p)
      : scenario(p.grid.comm(), std::move(p.sched), std::move(p.slots)), p_(std::move(p)) {}

  static std::unique_ptr<scenario> build(halo_case const& c) {
    parts p{process_grid(MPI_COMM_WORLD, c.dims), {}, {}, {}, {}};
    for (int i = 0; i < c.ntensors; ++i) {
      p.descs.emplace_back(p.grid, c.shape, c.type, options_of(c));
      auto& d = p.descs.back();
      std::vector<std::byte> buf(d.local_bytes());
      std::memset(buf.data(), 0x3c + i, buf.size());
      p.data.push_back(std::move(buf));
      p.sched.merge(detail::plan_halo(d.dist(), p.grid.rank(), d.strides(), false));
    }
    for (auto& d : p.data) p.slots.push_back(d.data());
    return std::make_unique<halo_scenario>(std::move(p));
  }

  runner make_runner(backend b) override {
    halo_options o;
    o.method = b;
    auto plan = std::make_shared<halo_plan>(p_.descs, o);
    std::vector<tensor_view> views;
    for (std::size_t i = 0; i < p_.descs.size(); ++i)
      views.emplace_back(p_.descs[i], p_.data[i].data(), p_.data[i].size());
    runner r;
    r.op = [plan, views] { plan->execute(views); };
    if (b == backend::automatic) {
      r.label = std::string("selected=") + to_string(plan->selected_backend());
      r.final_label = [plan] {
        return std::string("selected=") + to_string(plan->selected_backend());
      };
      r.describe = [plan] { return plan->describe(); };
    }
    r.keep = plan;
    return r;
  }

private:
  parts p_;
};

// Iterations from the busiest rank's bytes, computed by the (pure) planner for every rank, so
// that every rank derives the same count without communicating.
int halo_iterations(halo_case const& c) {
  distribution const dist(c.shape, c.type, c.dims, options_of(c));
  double most = 0, peers = 0;
  for (int r = 0; r < dist.nranks(); ++r) {
    auto const s = detail::plan_halo(dist, r, {}, false);
    most = std::max(most, static_cast<double>(s.send_bytes()) * c.ntensors);
    peers = std::max(peers, static_cast<double>(s.sends.size()));
  }
  return iterations_for(2 * most / 2e9 + 30e-6 + 3e-6 * peers);
}

scenario_spec spec_of(halo_case const& c) {
  scenario_spec spec;
  spec.name = c.name;
  spec.iterations = halo_iterations(c);
  spec.make = [c] { return halo_scenario::build(c); };
  return spec;
}

void add_case(halo_case const& c) { register_scenario(spec_of(c)); }

// A DMDA case as a halox tensor: (z, y, x) or (z, y, x, dof), the split axis over every rank,
// a halo of the stencil width on that axis only.
halo_case halo_of(dmda_case const& c) {
  halo_case h;
  h.name = c.name;
  h.type = dtype::float64;
  h.shape = {c.n, c.n, c.n};
  h.dims = {1, 1, 1};
  h.width = {0, 0, 0};
  if (c.dof > 1) {
    h.shape.push_back(c.dof);
    h.dims.push_back(1);
    h.width.push_back(0);
  }
  h.dims[c.split] = world_size();
  h.width[c.split] = c.width;
  return h;
}

std::vector<int> dims_create(int p, int nd) {
  std::vector<int> d(nd, 0);
  MPI_Dims_create(p, nd, d.data());
  return d;
}

} // namespace

std::vector<dmda_case> dmda_cases() {
  std::vector<dmda_case> v;
  struct grid {
    char const* tag;
    index_t n;
    int dof;
  };
  for (grid g : {grid{"dmda_f64_256", 256, 1}, grid{"dmda_f64_32_dof256", 32, 256}})
    for (bool box : {true, false})
      for (int split : {0, 2}) {
        dmda_case c;
        c.box = box;
        c.n = scaled(g.n);
        c.dof = g.dof;
        c.width = 1;
        c.split = split;
        c.name = std::string("halo/") + g.tag + (box ? "/box_w1" : "/star_w1") +
                 (split == 0 ? "/split_z" : "/split_x");
        v.push_back(c);
      }
  return v;
}

scenario_spec dmda_spec(dmda_case const& c) { return spec_of(halo_of(c)); }

void register_halo_cases() {
  int const p = world_size();
  std::vector<index_t> const nchw{scaled(32), scaled(64), scaled(128), scaled(128)};
  auto const hw = dims_create(p, 2);
  for (int w : {1, 3}) {
    add_case({"halo/nchw_f32/split_h/w" + std::to_string(w),
              dtype::float32,
              nchw,
              {1, 1, p, 1},
              {0, 0, w, 0}});
    add_case({"halo/nchw_f32/split_hw/w" + std::to_string(w),
              dtype::float32,
              nchw,
              {1, 1, hw[0], hw[1]},
              {0, 0, w, w}});
  }

  auto const g3 = dims_create(p, 3);
  index_t const n256 = scaled(256);
  for (auto const& c : dmda_cases()) add_case(halo_of(c));

  for (index_t per : {index_t{100}, index_t{180}}) {
    index_t const n = scaled(per);
    std::vector<index_t> const shape{n * g3[0], n * g3[1], n * g3[2]};
    std::string const base = "halo/comb_f64_" + std::to_string(per) + "pr/";
    add_case({base + "w1_3var", dtype::float64, shape, g3, {1, 1, 1}, 3});
    add_case({base + "w3", dtype::float64, shape, g3, {3, 3, 3}});
  }

  add_case({"halo/slab_f64_256/w1", dtype::float64, {n256, n256, n256}, {p, 1, 1}, {1, 0, 0}});
  add_case({"halo/upwind_f64_256/w2/split_x",
            dtype::float64,
            {n256, n256, n256},
            {1, 1, p},
            {0, 0, 2},
            1,
            true});
}

} // namespace halox::bench
