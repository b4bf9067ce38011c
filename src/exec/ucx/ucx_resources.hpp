#pragma once
// The UCX resources of a context: one UCP context and one worker (single-threaded, tag matching)
// per halox context, bootstrapped over the context's communicator by the first ucx transport and
// shared by every ucx plan of that context. Endpoints are made on demand, for the peers plans
// talk to, and kept. Only compiled when halox is built with UCX.

#include "exec/context_state.hpp"

#include <halox/detail/handle.hpp>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace halox::detail {

struct ucp_context_traits {
  static ucp_context_h null() noexcept { return nullptr; }
  static void release(ucp_context_h& c) noexcept { ucp_cleanup(c); }
};
struct ucp_worker_traits {
  static ucp_worker_h null() noexcept { return nullptr; }
  static void release(ucp_worker_h& w) noexcept { ucp_worker_destroy(w); }
};
/// A request UCX allocated itself (endpoint close), returned to UCX on release.
struct ucp_request_traits {
  static void* null() noexcept { return nullptr; }
  static void release(void*& r) noexcept { ucp_request_free(r); }
};

/// Owned UCP context (ucp_cleanup).
using unique_ucp_context = unique_handle<ucp_context_h, ucp_context_traits>;
/// Owned UCP worker (ucp_worker_destroy).
using unique_ucp_worker = unique_handle<ucp_worker_h, ucp_worker_traits>;
/// Owned request allocated by UCX (ucp_request_free).
using unique_ucp_request = unique_handle<void*, ucp_request_traits>;

/// Owned endpoint. Closing needs its worker's progress, so it keeps the worker; the worker must
/// outlive it (ucx_resources declares them in that order).
class unique_ucp_ep {
public:
  unique_ucp_ep() = default;
  unique_ucp_ep(ucp_worker_h worker, ucp_ep_h ep) noexcept : worker_(worker), ep_(ep) {}
  unique_ucp_ep(unique_ucp_ep&& o) noexcept;
  unique_ucp_ep& operator=(unique_ucp_ep&& o) noexcept;
  unique_ucp_ep(unique_ucp_ep const&) = delete;
  unique_ucp_ep& operator=(unique_ucp_ep const&) = delete;
  ~unique_ucp_ep() { reset(); }

  [[nodiscard]] ucp_ep_h get() const noexcept { return ep_; }
  /// Closes the endpoint (flushing what it still sends), progressing the worker for at most
  /// a second: a peer that is gone must not hold the process at exit.
  void reset() noexcept;
  /// Starts closing and gives up the endpoint; returns UCX's status pointer for the close (a
  /// request to progress and free, null when closed at once), for closing many together.
  [[nodiscard]] ucs_status_ptr_t start_close() noexcept;

private:
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};

/// One step of a wait loop on `worker`: progresses it, and after `yield_after_idle` steps in a
/// row that progressed nothing gives the core away (sched_yield). With more ranks than cores a
/// rank spinning on its receive otherwise keeps the peer it waits for off the core for a whole
/// scheduler time slice (4 ms an exchange with 4 ranks on 2 cores, against 40 us with the
/// yield); with a core of its own the yield returns at once. `idle` counts the idle steps.
void progress_or_yield(ucp_worker_h worker, int& idle) noexcept;

/// Idle progress calls before a wait loop yields the core (a few microseconds of spinning).
inline constexpr int yield_after_idle = 128;

/// Throws `halox::error` (errc::ucx_error) for a failed UCX call: names the call, the UCX status
/// string, `what` it was for, and the fix.
[[noreturn]] void throw_ucx_error(ucs_status_t status, char const* call, std::string const& what);

/// UCP context + worker + endpoints of one halox context (kept in its transport_slots as "ucx").
class ucx_resources final : public transport_resources {
public:
  /// Creates the context and the worker (local; throws `halox::error` on failure). `one_node`:
  /// every rank of the context runs on this node, so UCX's rendezvous threshold defaults to
  /// `node_rndv_thresh` unless UCX_RNDV_THRESH or HALOX_UCX_RNDV_THRESH says otherwise.
  explicit ucx_resources(bool one_node);
  ~ucx_resources();
  ucx_resources(ucx_resources const&) = delete;
  ucx_resources& operator=(ucx_resources const&) = delete;

  /// Rendezvous threshold halox sets within one node (bytes). UCX 1.13's automatic one there
  /// sends 16-48 KiB halo faces by rendezvous over cross-memory attach, which on the development
  /// VM took 2-3x as long per exchange (`ucx` backend) as eager sends through shared memory, and
  /// made the next exchange on the same worker stall now and then (60-160 us instead of 10).
  static constexpr char const* node_rndv_thresh = "65536";
  /// Whether halox set the rendezvous threshold (no UCX_RNDV_THRESH/HALOX_UCX_RNDV_THRESH, one
  /// node).
  [[nodiscard]] bool rndv_thresh_set() const noexcept { return rndv_set_; }
  [[nodiscard]] ucp_worker_h worker() const noexcept { return worker_.get(); }
  /// Bytes UCP needs in front of a request handle the caller provides.
  [[nodiscard]] std::size_t request_size() const noexcept { return request_size_; }
  /// True when this UCX can move CUDA device memory.
  [[nodiscard]] bool cuda_memory() const noexcept { return cuda_; }
  /// This worker's address, to publish to the peers.
  [[nodiscard]] std::vector<char> const& address() const noexcept { return address_; }
  /// Records every rank's worker address (index: rank in the context's communicator).
  void set_peers(std::vector<std::vector<char>> addresses);
  /// The endpoint to `peer`, created on first use; throws `halox::error` (ucx_error) when UCX
  /// cannot reach it.
  [[nodiscard]] ucp_ep_h endpoint(int peer);

private:
  // Declaration order is destruction order reversed: endpoints close before the worker goes,
  // the worker before the context.
  unique_ucp_context context_;
  unique_ucp_worker worker_;
  std::size_t request_size_ = 0;
  bool cuda_ = false;
  bool rndv_set_ = false;
  std::vector<char> address_;
  std::vector<std::vector<char>> peers_;
  std::vector<unique_ucp_ep> eps_;
};

/// The transport of `ctx`, made by the first call on that context: collective over `ctx.comm`
/// then (every rank starts UCX locally, then the worker addresses are all-gathered). Every rank
/// gets the same outcome: when UCX cannot start on some rank, every rank throws `halox::error`
/// (ucx_error) with that rank's reason, and later calls throw it again without communicating.
/// The collectives wait at most `timeout` seconds (0: unbounded), then throw errc::timeout.
[[nodiscard]] std::shared_ptr<ucx_resources> ucx_resources_of(context_state& ctx, double timeout);

} // namespace halox::detail
