// Redistribution scenarios of halox-bench (built when include/halox/redistribute.hpp exists).
//
//  redist/nchw_f32/sample_to_spatial   float 32x64x128x128, grid (P,1,1,1) -> (1,1,a,b)
//  redist/nchw_f32/spatial_to_sample   and back
//  redist/transpose_f64_4096/rows_to_cols  double 4096x4096, (P,1) -> (1,P): the communication
//                                      of FFTW-MPI's transpose
//
// Each also reports limit_alltoall: MPI_Alltoall on pre-packed buffers of the same bytes (the
// self block included), the baseline the redistribution target is stated against.
#include "cases.hpp"

namespace halox::bench {
transpose_case transpose_of() { return {"redist/transpose_f64_4096/rows_to_cols", scaled(4096)}; }
} // namespace halox::bench

#if __has_include(<halox/redistribute.hpp>)
#include "common/scenario.hpp"

#include "plan/redist_planner.hpp"

#include <halox/redistribute.hpp>

#include <cstring>

namespace halox::bench {

namespace {

struct redist_case {
  std::string name;
  dtype type = dtype::float32;
  std::vector<index_t> shape;
  std::vector<int> src_dims, dst_dims;
};

class redist_scenario : public scenario {
public:
  struct parts {
    process_grid src_grid, dst_grid;
    tensor_desc src, dst;
    std::vector<std::byte> src_data, dst_data;
    detail::schedule sched;
  };

  explicit redist_scenario(parts p)
      : scenario(p.src_grid.comm(), std::move(p.sched), {p.src_data.data(), p.dst_data.data()}),
        p_(std::move(p)) {}

  static std::unique_ptr<scenario> build(redist_case const& c) {
    process_grid sg(MPI_COMM_WORLD, c.src_dims), dg(MPI_COMM_WORLD, c.dst_dims);
    tensor_desc s(sg, c.shape, c.type), d(dg, c.shape, c.type);
    std::vector<std::byte> sd(s.local_bytes()), dd(d.local_bytes());
    std::memset(sd.data(), 0x11, sd.size());
    std::memset(dd.data(), 0x22, dd.size());
    // The grids are built from the same communicator, so grid ranks are plan ranks.
    detail::redist_side rs{&s.dist(), sg.rank(), {}, s.strides()};
    detail::redist_side rd{&d.dist(), dg.rank(), {}, d.strides()};
    auto sched = detail::plan_redistribution(rs, rd);
    return std::make_unique<redist_scenario>(
        parts{sg, dg, s, d, std::move(sd), std::move(dd), std::move(sched)});
  }

  runner make_runner(backend b) override {
    redistribute_options o;
    o.method = b;
    auto plan = std::make_shared<redistribute_plan>(p_.src, p_.dst, o);
    tensor_view const sv(p_.src, p_.src_data.data(), p_.src_data.size());
    tensor_view const dv(p_.dst, p_.dst_data.data(), p_.dst_data.size());
    runner r;
    r.op = [plan, sv, dv] { plan->execute(sv, dv); };
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

scenario_spec spec_of(redist_case const& c) {
  double bytes = static_cast<double>(size_of(c.type));
  for (auto e : c.shape) bytes *= static_cast<double>(e);
  bytes /= world_size();
  scenario_spec spec;
  spec.name = c.name;
  spec.iterations = iterations_for(2 * bytes / 1.5e9 + 50e-6);
  spec.alltoall = true;
  spec.make = [c] { return redist_scenario::build(c); };
  return spec;
}

void add_case(redist_case const& c) { register_scenario(spec_of(c)); }

redist_case transpose_redist() {
  int const p = world_size();
  auto const t = transpose_of();
  return {t.name, dtype::float64, {t.n, t.n}, {p, 1}, {1, p}};
}

} // namespace

bool has_redistribute() noexcept { return true; }

scenario_spec transpose_spec() { return spec_of(transpose_redist()); }

void register_redist_cases() {
  int const p = world_size();
  std::vector<int> ab(2, 0);
  MPI_Dims_create(p, 2, ab.data());
  std::vector<index_t> const nchw{scaled(32), scaled(64), scaled(128), scaled(128)};
  std::vector<int> const sample{p, 1, 1, 1}, spatial{1, 1, ab[0], ab[1]};
  add_case({"redist/nchw_f32/sample_to_spatial", dtype::float32, nchw, sample, spatial});
  add_case({"redist/nchw_f32/spatial_to_sample", dtype::float32, nchw, spatial, sample});
  add_case(transpose_redist());
}

} // namespace halox::bench

#else

#include <halox/error.hpp>

namespace halox::bench {
void register_redist_cases() {}
bool has_redistribute() noexcept { return false; }
scenario_spec transpose_spec() {
  HALOX_REQUIRE(false, errc::unsupported, "this halox has no redistribution (redistribute.hpp)");
  return {};
}
} // namespace halox::bench

#endif
