#include "common/agreement.hpp"
#include "common/environment.hpp"
#include "exec/context_state.hpp"

#include <halox/config.hpp>
#include <halox/context.hpp>
#include <halox/device.hpp>
#include <halox/error.hpp>

#if HALOX_HAS_CUDA
#include "exec/device_probe.hpp"
#endif

#include <optional>
#include <sstream>

namespace halox {

char const* to_string(memory_kind k) noexcept {
  switch (k) {
  case memory_kind::host: return "host";
  case memory_kind::pinned_host: return "pinned_host";
  case memory_kind::device: return "device";
  }
  return "unknown";
}

namespace {

namespace settings = detail::settings;

std::shared_ptr<detail::context_state> make_state(MPI_Comm comm, context_options const& o) {
  double timeout = 0.0;
  std::size_t fragment = 0;
  bool check = false;
  bool select = false;
  HALOX_REQUIRE(comm != MPI_COMM_NULL, errc::invalid_argument,
                "context built on MPI_COMM_NULL; pass the communicator the plans will use");
  detail::collective_check(
      comm, "context",
      [&] {
        HALOX_REQUIRE(!o.timeout_seconds || *o.timeout_seconds >= 0, errc::invalid_argument,
                      "context_options::timeout_seconds is " +
                          std::to_string(o.timeout_seconds.value_or(0)) +
                          "; pass a number of seconds, 0 for no bound, or leave it unset for "
                          "$HALOX_TIMEOUT or the default");
        timeout = o.timeout_seconds ? *o.timeout_seconds
                                    : settings::timeout_seconds().value_or(default_timeout_seconds);
        check = o.check_execute || settings::check_execute().value_or(false);
        select = o.select_device || settings::select_device().value_or(false);
        fragment = o.pipeline_fragment_bytes > 0 ? o.pipeline_fragment_bytes
                                                 : settings::pipeline_fragment_bytes().value_or(0);
        // Read later, where a throw would reach one rank only: checked here, on every rank.
        (void)settings::huge_pages();
        (void)settings::cuda_aware_mpi();
        HALOX_REQUIRE(static_cast<bool>(o.alloc.allocate) == static_cast<bool>(o.alloc.deallocate),
                      errc::invalid_argument,
                      "context_options::alloc has only one of allocate/deallocate set; set both, "
                      "or neither to use halox's own allocations");
      },
      // The fragment size must agree: it decides how many messages each side posts.
      [&] {
        return (std::uint64_t{o.alloc.allocate ? 1u : 0u} | (select ? 2u : 0u)) ^
               (static_cast<std::uint64_t>(fragment) << 2);
      },
      [&] {
        return std::string("allocator=") + (o.alloc.allocate ? "caller's" : "halox's") +
               "; select_device=" + (select ? "on" : "off") +
               "; pipeline fragment bytes (context_options::pipeline_fragment_bytes or "
               "$HALOX_PIPELINE_FRAGMENT)=" +
               (fragment == 0 ? std::string("automatic") : std::to_string(fragment));
      });
  auto s = std::make_shared<detail::context_state>();
  s->timeout = timeout;
  s->check_execute = check;
  s->pipeline_fragment = fragment;
  HALOX_MPI_CHECK(MPI_Comm_dup(comm, s->comm.out()));
  // An MPI failure on halox's own messages must reach the caller as a halox::error rather than
  // abort the job from inside MPI; communicators created from this one inherit the handler.
  HALOX_MPI_CHECK(MPI_Comm_set_errhandler(s->comm.get(), MPI_ERRORS_RETURN));
  s->notices.open(s->comm.get());
  HALOX_MPI_CHECK(MPI_Comm_rank(s->comm.get(), &s->rank));
  HALOX_MPI_CHECK(MPI_Comm_size(s->comm.get(), &s->size));
  void* ub = nullptr;
  int flag = 0;
  HALOX_MPI_CHECK(MPI_Comm_get_attr(s->comm.get(), MPI_TAG_UB, &ub, &flag));
  if (flag && ub) s->tag_ub = *static_cast<int*>(ub);
  // Successive contexts start their tags far apart. A message a timed-out plan left undelivered
  // would otherwise match the first plan of a later context whose communicator MPI built with the
  // freed one's internal id. Every rank takes the highest count so far, so they agree.
  static long long contexts = 0;
  long long index = contexts;
  HALOX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &index, 1, MPI_LONG_LONG, MPI_MAX, s->comm.get()));
  contexts = index + 1;
  s->index = index;
  s->tag_base = static_cast<std::size_t>(index) * 65536u % static_cast<std::size_t>(s->tag_ub);
  s->alloc = o.alloc;
  if (select) {
    // Before the context (or any plan of it) creates a CUDA resource, which belongs to the
    // device current when it is made. choose_device throws on every rank without CUDA or a device.
    auto const choice = choose_device(s->comm.get());
#if HALOX_HAS_CUDA
    detail::collective_check(
        s->comm.get(), "context_options::select_device",
        [&] { detail::set_current_device(choice.device); }, [] { return std::uint64_t{0}; });
#endif
    s->device = choice.device;
    s->device_reason = choice.reason;
  }
  return s;
}

// The default context of a communicator lives in an attribute of that communicator, so it
// dies with it (a communicator handle value may be reused after MPI_Comm_free; an attribute
// cannot outlive its communicator).
int delete_default(MPI_Comm, int, void* value, void*) {
  delete static_cast<std::shared_ptr<detail::context_state>*>(value);
  return MPI_SUCCESS;
}

int default_keyval() {
  static int const keyval = [] {
    int k = MPI_KEYVAL_INVALID;
    HALOX_MPI_CHECK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_default, &k, nullptr));
    return k;
  }();
  return keyval;
}

} // namespace

context::context(MPI_Comm comm, context_options const& options)
    : state_(make_state(comm, options)) {}

context context::of(MPI_Comm comm) {
  HALOX_REQUIRE(comm != MPI_COMM_NULL, errc::invalid_argument,
                "context::of(MPI_COMM_NULL); pass the communicator the plans will use");
  int const k = default_keyval();
  void* v = nullptr;
  int flag = 0;
  HALOX_MPI_CHECK(MPI_Comm_get_attr(comm, k, &v, &flag));
  if (flag) return context(*static_cast<std::shared_ptr<detail::context_state>*>(v));
  auto owner = std::make_unique<std::shared_ptr<detail::context_state>>(make_state(comm, {}));
  HALOX_MPI_CHECK(MPI_Comm_set_attr(comm, k, owner.get()));
  return context(*owner.release());
}

MPI_Comm context::comm() const noexcept { return state_->comm.get(); }
int context::rank() const noexcept { return state_->rank; }
int context::size() const noexcept { return state_->size; }
std::size_t context::plans_built() const noexcept { return state_->plans; }
double context::timeout_seconds() const noexcept { return state_->timeout; }
bool context::check_execute() const noexcept { return state_->check_execute; }
int context::selected_device() const noexcept { return state_->device; }
bool context::has_nccl() const noexcept { return state_->transports.started("nccl"); }
std::size_t context::bytes_in_use(memory_kind kind) const noexcept {
  return state_->in_use[static_cast<int>(kind)];
}

std::string context::describe() const {
  std::ostringstream os;
  os << "context of " << size() << " process(es), rank " << rank() << ": " << plans_built()
     << " plan(s) built, " << bytes_in_use(memory_kind::host) << " B host / "
     << bytes_in_use(memory_kind::pinned_host) << " B pinned / "
     << bytes_in_use(memory_kind::device) << " B device in use, "
     << (state_->alloc.allocate ? "caller allocator" : "halox allocations") << ", NCCL "
     << (has_nccl() ? "created" : "not created") << ", UCX " << state_->transports.state("ucx");
  if (state_->device >= 0) os << ", selected " << state_->device_reason;
  return os.str();
}

} // namespace halox
