#include "api/plan_engine.hpp"
#include "common/agreement.hpp"
#include "model/view_check.hpp"
#include "plan/box_gather_planner.hpp"

#include <halox/box_gather.hpp>
#include <halox/error.hpp>

#include <sstream>

namespace halox {

struct box_gather_plan::impl {
  tensor_desc desc;
  std::unique_ptr<detail::plan_engine> engine;
  box mine;
  std::vector<index_t> shape, origin;
  void* bufs[2] = {nullptr, nullptr}; // slots of the gather in flight: the executor keeps them
};

namespace {
// Hash of everything every rank must pass alike; also the plan-cache key of the geometry.
std::uint64_t geometry_key(distribution const& dist, detail::need_ranges const& need,
                           box_gather_options const& o) {
  std::uint64_t h = dist.hash() ^ 0x6f7073u; // distinct from the halo plans of the same tensor
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (auto const& dim : need)
    for (auto const& r : dim) {
      mix(static_cast<std::uint64_t>(r.lo));
      mix(static_cast<std::uint64_t>(r.hi));
    }
  mix(static_cast<std::uint64_t>(o.method));
  mix(static_cast<std::uint64_t>(o.memory));
  return h;
}

std::string box_text(box const& b) {
  std::ostringstream os;
  for (int d = 0; d < b.nd; ++d) os << (d ? " x " : "") << "[" << b.lo[d] << ", " << b.hi[d] << ")";
  return os.str();
}
} // namespace

box_gather_plan::box_gather_plan(tensor_desc const& src,
                                 std::vector<std::vector<index_range>> const& need,
                                 box_gather_options const& options)
    : impl_(std::make_unique<impl>(impl{src, nullptr, {}, {}, {}})) {
  distribution const& dist = src.dist();
  MPI_Comm const comm = src.grid().comm();
  int const me = src.grid().rank();
  std::uint64_t key = 0;
  detail::collective_check(
      comm, "box_gather_plan",
      [&] {
        detail::check_need(dist, need);
        bool const host = options.memory == memory_space::host;
        HALOX_REQUIRE(options.method == backend::automatic ||
                          detail::backend_available(options.method, options.memory),
                      errc::unsupported,
                      std::string("box_gather_plan: backend ") + to_string(options.method) +
                          " is not available for " + (host ? "host" : "device") +
                          " memory in this build; choose " +
                          (host ? "a host backend (mpi_pack, ...)"
                                : "a device backend (staged_mpi, cuda_aware_mpi, nccl)") +
                          " or backend::automatic");
      },
      [&] { return key = geometry_key(dist, need, options); });
  impl_->mine = detail::needed_box(dist, me, need);
  coords_t const c = dist.coords_of(me);
  for (int d = 0; d < dist.ndim(); ++d) {
    impl_->shape.push_back(need[d][c[d]].size());
    impl_->origin.push_back(need[d][c[d]].lo);
  }
  detail::schedule sch = detail::plan_box_gather(
      dist, me, src.strides(), need, options.own_copy_boxes ? &*options.own_copy_boxes : nullptr);
  detail::engine_options eo;
  eo.method = options.method;
  eo.memory = options.memory;
  eo.tune = options.tune;
  eo.label = "box_gather_plan";
  impl_->engine = std::make_unique<detail::plan_engine>(context::of(comm), std::move(sch), eo, key);
}

box_gather_plan::~box_gather_plan() = default;
box_gather_plan::box_gather_plan(box_gather_plan&&) noexcept = default;
box_gather_plan& box_gather_plan::operator=(box_gather_plan&&) noexcept = default;

void box_gather_plan::execute(tensor_view const& src, void* workspace, stream_handle stream) {
  start(src, workspace, stream);
  wait(stream);
}

void box_gather_plan::start(tensor_view const& src, void* workspace, stream_handle stream) {
  impl_->engine->agree_execute(0, [&] {
    HALOX_REQUIRE(!impl_->engine->in_flight(), errc::invalid_state,
                  "box_gather_plan: start called while a gather is in flight; call wait() first");
    detail::check_view(src, impl_->desc, "box_gather_plan: source buffer", -1);
    HALOX_REQUIRE(workspace != nullptr || impl_->mine.empty(), errc::invalid_argument,
                  "box_gather_plan: the workspace is a null pointer but this rank receives " +
                      std::to_string(workspace_bytes()) +
                      " bytes; allocate workspace_bytes() and pass it");
  });
  // The engine's slots are mutable because the same executors also write (reverse exchanges);
  // a gather only reads slot 0.
  impl_->bufs[0] = src.data;
  impl_->bufs[1] = workspace;
  impl_->engine->start(impl_->bufs, false, detail::combine_op::replace, stream);
}

void box_gather_plan::wait(stream_handle stream) { impl_->engine->wait(stream); }

box const& box_gather_plan::my_box() const noexcept { return impl_->mine; }
std::vector<index_t> const& box_gather_plan::shape() const noexcept { return impl_->shape; }
std::vector<index_t> const& box_gather_plan::origin() const noexcept { return impl_->origin; }
index_t box_gather_plan::elements() const noexcept { return impl_->mine.volume(); }
std::size_t box_gather_plan::workspace_bytes() const noexcept {
  return static_cast<std::size_t>(elements()) * size_of(impl_->desc.type());
}
std::size_t box_gather_plan::bytes_sent() const noexcept {
  return impl_->engine->forward().send_bytes();
}
std::size_t box_gather_plan::bytes_received() const noexcept {
  return impl_->engine->forward().recv_bytes();
}
backend box_gather_plan::selected_backend() const noexcept { return impl_->engine->selected(); }

std::string box_gather_plan::describe() const {
  std::ostringstream os;
  os << "box_gather_plan of " << impl_->desc.dist().str() << " on rank "
     << impl_->desc.grid().rank() << ": receives "
     << (impl_->mine.empty() ? std::string("nothing") : box_text(impl_->mine)) << "\n  "
     << impl_->engine->summary() << "\n"
     << impl_->engine->forward().str();
  return os.str();
}

} // namespace halox
