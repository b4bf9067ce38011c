#include "exec/ucx/ucx_resources.hpp"

#include "common/agreement.hpp"
#include "common/environment.hpp"
#include "exec/node_id.hpp"

#include <halox/error.hpp>

#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <new>
#include <optional>
#include <string>
#include <utility>

namespace halox::detail {

namespace {

std::string env_note() {
  std::string out;
  auto const add = [&](char const* name, std::optional<std::string> const& v) {
    if (v) out += std::string(out.empty() ? " (" : ", ") + name + "=" + *v;
  };
  for (char const* name : {"UCX_TLS", "UCX_NET_DEVICES"}) // UCX's own, not halox's settings
    if (char const* v = std::getenv(name); v && *v) add(name, std::string(v));
  add("HALOX_UCX_TLS", settings::ucx_tls());
  add("HALOX_UCX_NET_DEVICES", settings::ucx_net_devices());
  return out.empty() ? out : out + ")";
}

} // namespace

void progress_or_yield(ucp_worker_h worker, int& idle) noexcept {
  if (ucp_worker_progress(worker) != 0) {
    idle = 0;
  } else if (++idle >= yield_after_idle) {
    idle = 0;
    sched_yield();
  }
}

namespace {

// Progresses `worker` until `req` (a status pointer returned by a UCP call) completes, for at
// most `seconds`; releases it. False when it did not complete in time.
bool progress_until(ucp_worker_h worker, ucs_status_ptr_t req, double seconds) noexcept {
  if (req == nullptr || UCS_PTR_IS_ERR(req)) return true;
  unique_ucp_request owned(req);
  auto const until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(seconds));
  int idle = 0;
  while (ucp_request_check_status(req) == UCS_INPROGRESS) {
    progress_or_yield(worker, idle);
    if (std::chrono::steady_clock::now() > until) return false;
  }
  return true;
}

// Receives, and drops, the messages that arrived for no posted receive: those of exchanges a
// peer failure or a timeout abandoned. Left in the worker, UCX warns about each at exit.
void drain_unexpected(ucp_worker_h worker) noexcept {
  for (int n = 0; n < 4096; ++n) {
    ucp_worker_progress(worker);
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h const msg = ucp_tag_probe_nb(worker, 0, 0, 1, &info);
    if (msg == nullptr) return;
    auto* sink = new (std::nothrow) char[info.length > 0 ? info.length : 1];
    if (sink == nullptr) return;
    ucp_request_param_t prm{};
    ucs_status_ptr_t const r = ucp_tag_msg_recv_nbx(worker, sink, info.length, msg, &prm);
    // A receive that does not finish in time (its sender is gone) may still write: keep the sink.
    if (progress_until(worker, r, 0.5)) delete[] sink;
  }
}

} // namespace

void throw_ucx_error(ucs_status_t status, char const* call, std::string const& what) {
  throw error(
      errc::ucx_error,
      std::string("UCX: ") + call + " failed with '" + ucs_status_string(status) + "' while " +
          what + env_note() +
          "; check UCX_TLS/UCX_NET_DEVICES (or HALOX_UCX_TLS/HALOX_UCX_NET_DEVICES, which apply "
          "to halox's UCX only) or use another backend (e.g. mpi_pack)",
      call, __FILE__, __LINE__);
}

unique_ucp_ep::unique_ucp_ep(unique_ucp_ep&& o) noexcept
    : worker_(std::exchange(o.worker_, nullptr)), ep_(std::exchange(o.ep_, nullptr)) {}

unique_ucp_ep& unique_ucp_ep::operator=(unique_ucp_ep&& o) noexcept {
  if (this != &o) {
    reset();
    worker_ = std::exchange(o.worker_, nullptr);
    ep_ = std::exchange(o.ep_, nullptr);
  }
  return *this;
}

ucs_status_ptr_t unique_ucp_ep::start_close() noexcept {
  if (ep_ == nullptr) return nullptr;
  ucp_request_param_t prm{};
  prm.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  prm.flags = 0; // flush what is still outgoing, then close
  return ucp_ep_close_nbx(std::exchange(ep_, nullptr), &prm);
}

void unique_ucp_ep::reset() noexcept {
  // A close that does not finish in time (the peer stopped progressing or is gone) is left to
  // the worker's destruction: nothing here may wait for a peer.
  (void)progress_until(worker_, start_close(), 1.0);
}

ucx_resources::ucx_resources(bool one_node) {
  ucp_config_t* config = nullptr;
  // With the prefix, UCX reads UCX_* and then HALOX_UCX_*, which override them for halox's own
  // worker only: the MPI library's UCX keeps its settings.
  ucs_status_t st = ucp_config_read("HALOX", nullptr, &config);
  if (st != UCS_OK) throw_ucx_error(st, "ucp_config_read", "reading the UCX configuration");
  // Within one node a halo face of tens of KiB goes faster eagerly (two copies through shared
  // memory) than by rendezvous (a handshake, then one copy by cross-memory attach). Between
  // nodes UCX's own choice stands: the network's trade-off is not the node's.
  if (one_node && std::getenv("UCX_RNDV_THRESH") == nullptr && !settings::ucx_rndv_thresh()) {
    st = ucp_config_modify(config, "RNDV_THRESH", node_rndv_thresh);
    if (st != UCS_OK) {
      ucp_config_release(config);
      throw_ucx_error(st, "ucp_config_modify", "setting the rendezvous threshold");
    }
    rndv_set_ = true;
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG;
  params.name = "halox";
  st = ucp_init(&params, config, context_.out());
  ucp_config_release(config);
  if (st != UCS_OK) throw_ucx_error(st, "ucp_init", "creating the UCP context");

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(context_.get(), &wp, worker_.out());
  if (st != UCS_OK) throw_ucx_error(st, "ucp_worker_create", "creating the UCP worker");

  ucp_context_attr_t attr{};
  attr.field_mask = UCP_ATTR_FIELD_REQUEST_SIZE | UCP_ATTR_FIELD_MEMORY_TYPES;
  st = ucp_context_query(context_.get(), &attr);
  if (st != UCS_OK) throw_ucx_error(st, "ucp_context_query", "querying the UCP context");
  request_size_ = attr.request_size;
  cuda_ = (attr.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;

  ucp_address_t* addr = nullptr;
  std::size_t len = 0;
  st = ucp_worker_get_address(worker_.get(), &addr, &len);
  if (st != UCS_OK) throw_ucx_error(st, "ucp_worker_get_address", "publishing the worker");
  auto const* p = reinterpret_cast<char const*>(addr);
  address_.assign(p, p + len);
  ucp_worker_release_address(worker_.get(), addr);
}

ucx_resources::~ucx_resources() {
  drain_unexpected(worker_.get());
  // All endpoints close together, within one bounded wait (not a second per peer), while the
  // worker still exists to progress them.
  std::vector<void*> closing;
  try {
    closing.reserve(eps_.size());
  } catch (...) {
    eps_.clear(); // one by one, then
    return;
  }
  for (auto& ep : eps_)
    if (ucs_status_ptr_t const r = ep.start_close(); r != nullptr && !UCS_PTR_IS_ERR(r))
      closing.push_back(r);
  auto const until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  int idle = 0;
  for (bool busy = !closing.empty(); busy && std::chrono::steady_clock::now() < until;) {
    progress_or_yield(worker_.get(), idle);
    busy = false;
    for (void* r : closing) busy = busy || ucp_request_check_status(r) == UCS_INPROGRESS;
  }
  for (void* r : closing) ucp_request_free(r);
  eps_.clear();
}

void ucx_resources::set_peers(std::vector<std::vector<char>> addresses) {
  peers_ = std::move(addresses);
  eps_.clear();
  eps_.resize(peers_.size());
}

ucp_ep_h ucx_resources::endpoint(int peer) {
  HALOX_REQUIRE(peer >= 0 && static_cast<std::size_t>(peer) < peers_.size(), errc::internal,
                "UCX endpoint to rank " + std::to_string(peer) + " of a communicator of " +
                    std::to_string(peers_.size()));
  auto& slot = eps_[static_cast<std::size_t>(peer)];
  if (slot.get() != nullptr) return slot.get();
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address =
      reinterpret_cast<ucp_address_t const*>(peers_[static_cast<std::size_t>(peer)].data());
  ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  ucp_ep_h h = nullptr;
  ucs_status_t const st = ucp_ep_create(worker_.get(), &ep, &h);
  if (st != UCS_OK)
    throw_ucx_error(st, "ucp_ep_create",
                    "connecting to rank " + std::to_string(peer) + " of the plan's communicator");
  slot = unique_ucp_ep(worker_.get(), h);
  return h;
}

std::shared_ptr<ucx_resources> ucx_resources_of(context_state& ctx, double timeout) {
  if (auto t = ctx.transports.find<ucx_resources>("ucx")) return t;
  if (auto why = ctx.transports.failure("ucx"); !why.empty()) throw error(errc::ucx_error, why);
  MPI_Comm const comm = ctx.comm.get();

  // Whether every rank runs on this node (the same node id everywhere): it sets the default
  // rendezvous threshold, and every rank must reach the same answer.
  char const* const what = "bootstrapping UCX (all-gathering the worker addresses)";
  unsigned long long ids[2] = {node_id(), ~node_id()};
  allreduce_bounded(MPI_IN_PLACE, ids, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm, timeout, what);
  bool const one_node = ids[0] == ~ids[1];

  // Every rank starts UCX on its own, then all learn who failed: a rank whose UCX cannot start
  // still takes part in the exchange, so nobody waits for it.
  std::shared_ptr<ucx_resources> t;
  std::string local;
  try {
    t = std::make_shared<ucx_resources>(one_node);
  } catch (error const& e) {
    local = e.message();
  } catch (std::exception const& e) {
    local = std::string("UCX could not start: ") + e.what();
  }
  int const len = t ? static_cast<int>(t->address().size()) : -1;
  std::vector<int> lens(static_cast<std::size_t>(ctx.size));
  // Nonblocking collectives completed within the context's timeout: a rank that never comes
  // (it builds plans in another order) is an error, not a hang.
  MPI_Request req = MPI_REQUEST_NULL;
  HALOX_MPI_CHECK(MPI_Iallgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm, &req));
  wait_bounded(req, timeout, what);
  int failed = -1;
  for (int r = 0; r < ctx.size && failed < 0; ++r)
    if (lens[static_cast<std::size_t>(r)] < 0) failed = r;
  if (failed >= 0) {
    // The lowest failing rank's reason goes to everyone, so every rank's error explains it.
    std::string const why = broadcast_text(local, failed, comm, timeout, what);
    std::string reason = !local.empty() ? local
                                        : "UCX could not start on rank " + std::to_string(failed) +
                                              " of the communicator: " + why;
    ctx.transports.fail("ucx", reason);
    throw error(errc::ucx_error, reason);
  }
  std::vector<int> displs(lens.size(), 0);
  for (std::size_t r = 1; r < lens.size(); ++r) displs[r] = displs[r - 1] + lens[r - 1];
  std::vector<char> all(static_cast<std::size_t>(displs.back() + lens.back()));
  HALOX_MPI_CHECK(MPI_Iallgatherv(t->address().data(), len, MPI_BYTE, all.data(), lens.data(),
                                  displs.data(), MPI_BYTE, comm, &req));
  wait_bounded(req, timeout, what);
  std::vector<std::vector<char>> peers(lens.size());
  for (std::size_t r = 0; r < lens.size(); ++r)
    peers[r].assign(all.begin() + displs[r], all.begin() + displs[r] + lens[r]);
  t->set_peers(std::move(peers));
  ctx.transports.keep("ucx", t);
  return t;
}

} // namespace halox::detail
