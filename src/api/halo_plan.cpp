#include "api/plan_engine.hpp"
#include "common/agreement.hpp"
#include "model/view_check.hpp"
#include "plan/halo_planner.hpp"

#include <halox/error.hpp>
#include <halox/halo.hpp>

#include <sstream>

namespace halox {

struct halo_plan::impl {
  std::vector<tensor_desc> descs;
  std::unique_ptr<detail::plan_engine> engine;
  std::vector<void*> bufs; // slot pointers of the exchange in flight (sized at plan time)

  // Runs on every execution: no allocation (no vector of views, no message unless it throws).
  void bind(tensor_view const* vs, std::size_t n, bool reverse) {
    engine->agree_execute(reverse ? 1 : 0, [&] {
      HALOX_REQUIRE(!engine->in_flight(), errc::invalid_state,
                    "start called while an exchange of this plan is still in flight; call wait() "
                    "first");
      HALOX_REQUIRE(n == descs.size(), errc::invalid_argument,
                    std::to_string(n) + " buffers passed to a halo plan of " +
                        std::to_string(descs.size()) + " tensors; pass one per planned tensor");
      for (std::size_t i = 0; i < n; ++i) {
        detail::check_view(vs[i], descs[i], "buffer", n == 1 ? -1 : static_cast<int>(i));
        bufs[i] = vs[i].data;
      }
    });
  }
};

namespace {
std::uint64_t options_hash(halo_options const& o) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  auto mix = [&](std::uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  mix(static_cast<std::uint64_t>(o.method));
  mix(static_cast<std::uint64_t>(o.memory));
  mix(static_cast<std::uint64_t>(o.boundary));
  return h;
}
} // namespace

namespace {
std::vector<tensor_desc> const& nonempty(std::vector<tensor_desc> const& tensors) {
  HALOX_REQUIRE(!tensors.empty(), errc::invalid_argument,
                "a halo plan needs at least one tensor descriptor");
  return tensors;
}
} // namespace

halo_plan::halo_plan(tensor_desc const& t, halo_options const& options)
    : halo_plan(std::vector<tensor_desc>{t}, options) {}

halo_plan::halo_plan(std::vector<tensor_desc> const& tensors, halo_options const& options)
    : halo_plan(context::of(nonempty(tensors)[0].grid().comm()), tensors, options) {}

halo_plan::halo_plan(context const& ctx, tensor_desc const& t, halo_options const& options)
    : halo_plan(ctx, std::vector<tensor_desc>{t}, options) {}

halo_plan::halo_plan(context const& ctx, std::vector<tensor_desc> const& tensors,
                     halo_options const& options)
    : impl_(std::make_unique<impl>()) {
  nonempty(tensors);
  MPI_Comm const comm = tensors[0].grid().comm();
  std::uint64_t key = options_hash(options);
  detail::collective_check(
      comm, "halo_plan",
      [&] {
        detail::require_context_matches(ctx, comm, "halo_plan");
        detail::require_timeout(options.timeout_seconds, "halo_options");
        for (std::size_t i = 1; i < tensors.size(); ++i) {
          int cmp = MPI_UNEQUAL;
          HALOX_MPI_CHECK(MPI_Comm_compare(comm, tensors[i].grid().comm(), &cmp));
          HALOX_REQUIRE(cmp == MPI_IDENT || cmp == MPI_CONGRUENT, errc::invalid_argument,
                        "tensor " + std::to_string(i) +
                            " lives on a different communicator than tensor 0; a halo plan "
                            "merges tensors of one process group only");
        }
        HALOX_REQUIRE(options.method == backend::automatic ||
                          detail::backend_available(options.method, options.memory),
                      errc::unsupported,
                      std::string("backend ") + to_string(options.method) +
                          " is not available for this memory space in this build");
      },
      [&] {
        for (auto const& t : tensors) key = (key ^ t.dist().hash()) * 1099511628211ull;
        return key;
      },
      [&] {
        std::string d = std::string("backend=") + to_string(options.method) +
                        "; memory=" + (options.memory == memory_space::host ? "host" : "device") +
                        "; boundary=" +
                        (options.boundary == boundary_fill::constant ? "constant" : "untouched") +
                        "; tensors=" + std::to_string(tensors.size());
        for (std::size_t i = 0; i < tensors.size(); ++i)
          d += "; tensor " + std::to_string(i) + "=" + tensors[i].dist().str();
        return d;
      });
  impl_->descs = tensors;
  impl_->bufs.assign(tensors.size(), nullptr);
  bool const fill = options.boundary == boundary_fill::constant;
  detail::schedule sch;
  for (auto const& t : tensors)
    sch.merge(detail::plan_halo(t.dist(), t.grid().rank(), t.strides(), fill));
  detail::engine_options eo;
  eo.method = options.method;
  eo.memory = options.memory;
  eo.fill_value = options.fill_value;
  eo.tune = options.tune;
  eo.external_workspace = options.external_workspace;
  eo.timeout = options.timeout_seconds;
  eo.check_execute = options.check_execute;
  eo.label = "halo_plan";
  impl_->engine = std::make_unique<detail::plan_engine>(ctx, std::move(sch), eo, key);
}

halo_plan::~halo_plan() = default;
halo_plan::halo_plan(halo_plan&&) noexcept = default;
halo_plan& halo_plan::operator=(halo_plan&&) noexcept = default;

void halo_plan::execute(tensor_view const& v, stream_handle stream) {
  start(v, stream);
  wait(stream);
}
void halo_plan::execute(std::vector<tensor_view> const& vs, stream_handle stream) {
  start(vs, stream);
  wait(stream);
}
void halo_plan::start(tensor_view const& v, stream_handle stream) {
  impl_->bind(&v, 1, false);
  impl_->engine->start(impl_->bufs.data(), false, detail::combine_op::replace, stream);
}
void halo_plan::start(std::vector<tensor_view> const& vs, stream_handle stream) {
  impl_->bind(vs.data(), vs.size(), false);
  impl_->engine->start(impl_->bufs.data(), false, detail::combine_op::replace, stream);
}
void halo_plan::wait(stream_handle stream) { impl_->engine->wait(stream); }

void halo_plan::execute_reverse(tensor_view const& v, reduce_op op, stream_handle stream) {
  impl_->bind(&v, 1, true);
  impl_->engine->start(impl_->bufs.data(), true, detail::to_combine(op), stream);
  wait(stream);
}
void halo_plan::execute_reverse(std::vector<tensor_view> const& vs, reduce_op op,
                                stream_handle stream) {
  start_reverse(vs, op, stream);
  wait(stream);
}
void halo_plan::start_reverse(std::vector<tensor_view> const& vs, reduce_op op,
                              stream_handle stream) {
  impl_->bind(vs.data(), vs.size(), true);
  impl_->engine->start(impl_->bufs.data(), true, detail::to_combine(op), stream);
}

bool halo_plan::skip_execution(std::string const& reason, bool reverse) {
  return impl_->engine->skip(reverse ? 1 : 0, reason);
}

workspace_size halo_plan::workspace_bytes() const noexcept {
  return impl_->engine->workspace_bytes();
}
void halo_plan::set_workspace(workspace const& w) { impl_->engine->set_workspace(w); }
context const& halo_plan::get_context() const noexcept { return impl_->engine->ctx(); }

backend halo_plan::selected_backend() const noexcept { return impl_->engine->selected(); }
int halo_plan::num_tensors() const noexcept { return static_cast<int>(impl_->descs.size()); }
std::size_t halo_plan::bytes_sent() const noexcept { return impl_->engine->forward().send_bytes(); }
std::size_t halo_plan::bytes_received() const noexcept {
  return impl_->engine->forward().recv_bytes();
}
int halo_plan::num_peers() const noexcept {
  return static_cast<int>(impl_->engine->forward().sends.size());
}

std::string halo_plan::describe() const {
  std::ostringstream os;
  os << "halo_plan of " << impl_->descs.size() << " tensor(s) on rank "
     << impl_->descs[0].grid().rank() << ":";
  for (auto const& d : impl_->descs) os << "\n  " << d.dist().str();
  os << "\n  " << impl_->engine->summary() << "\n" << impl_->engine->forward().str();
  return os.str();
}

} // namespace halox
