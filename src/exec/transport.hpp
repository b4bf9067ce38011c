#pragma once
// The transport interface: what moves a message's bytes between two ranks. A transport knows
// nothing of schedules, regions or packing. The packing executor (exec/cpu/packing_executor.hpp)
// decides what each message's bytes are and where they live, and hands the transport either one
// contiguous buffer or a list of runs (an iov list); the transport posts it to the peer and
// reports when it completed.
//
// Requests are declared once, at construction, receives first and then sends: their peers,
// sizes and iov list lengths do not change between exchanges, so a transport can make
// endpoints, persistent requests and request storage then, and warm its paths at plan time.
// A transport owns its completion: it keeps its own requests (MPI requests, UCX handles) and
// completes, cancels and abandons them itself. Its waits are bounded by the plan's timeout and
// interrupted by its peers' failure notices, as every other wait of an exchange, through the
// wait context its executor hands it at construction (exec/wait_context.hpp: bounded
// wait_any / wait_all on MPI requests, or its notices and deadline polled by a loop of its
// own). It never calls its executor, nor sees it: this header does not include executor.hpp.
//
// A transport that walks strided layouts itself (MPI's derived datatypes) can also take a
// message as its boxes in the exchange's buffers: the `datatypes` packing then packs nothing and
// hands it those boxes at declaration and the buffers' addresses at each post.
//
// A transport is host-driven (MPI, UCX, CMA: the host posts, progresses and completes each
// message, so the bytes must be in place before a send is posted and are there once `wait_recv`
// returned them) or stream-ordered (NCCL: posting enqueues the messages on the exchange's GPU
// stream, behind the pack kernel and ahead of the unpack, and nothing ever waits on the host).

#include "common/strided_region.hpp"
#include "exec/wait_context.hpp"
#include "exec/workspace_layout.hpp"

#include <cstddef>
#include <limits>
#include <memory>
#include <vector>

namespace halox::detail {

/// One contiguous run of memory a message moves (laid out as `struct iovec` and UCP's iov
/// entry, so that transports with iov lists can pass it on).
struct io_run {
  void* base = nullptr;
  std::size_t bytes = 0;
};

/// One box of a message in one of the exchange's buffers, for transports that walk layouts.
struct wire_box {
  int slot = 0;              ///< which buffer of the exchange (an index into `post`'s array)
  strided_region cells;      ///< its cells (offset and strides in elements of that buffer)
  std::size_t elem_size = 0; ///< bytes per element
};

/// One request of an exchange, as declared to a transport.
struct wire_request {
  int peer = -1;         ///< rank in the plan's communicator
  std::size_t bytes = 0; ///< bytes it moves
  std::size_t runs = 0;  ///< the longest iov list it will be posted with; 0: contiguous only
  /// Its boxes, in the message's byte order, when the transport walks them (`walks_boxes`);
  /// empty otherwise.
  std::vector<wire_box> boxes;
};

/// Moves byte ranges and iov lists to and from peers for one executor (one plan direction).
class transport {
public:
  /// Returned by `wait_recv` when every receive was returned.
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();
  /// `post`'s run count for a request that moves its declared boxes.
  static constexpr std::size_t walked = std::numeric_limits<std::size_t>::max();

  transport() = default;
  virtual ~transport() = default;
  transport(transport const&) = delete;
  transport& operator=(transport const&) = delete;

  /// Its name, for describe() ("mpi", "ucx").
  [[nodiscard]] virtual char const* name() const noexcept = 0;
  /// True when it moves iov lists; otherwise the packing executor declares none.
  [[nodiscard]] virtual bool moves_iov() const noexcept { return false; }
  /// Messages whose runs average fewer bytes than this go packed even under the iov strategy
  /// (on that side: sender and receiver decide each for their own runs). A transport that
  /// pays per run (the kernel pins a page per iovec) packs short runs faster than it moves them.
  [[nodiscard]] virtual std::size_t iov_min_run() const noexcept { return 0; }
  /// True when it walks declared boxes itself (MPI derived datatypes); otherwise the packing
  /// executor declares none.
  [[nodiscard]] virtual bool walks_boxes() const noexcept { return false; }
  /// True when the transport enqueues its messages on the exchange's GPU stream (see above):
  /// `use_stream` names the stream before each exchange's posts, the messages start in
  /// `posted`, `wait_recv` returns every receive at once (its data is ready for work enqueued
  /// later on that stream) and `wait_sends` returns at once.
  [[nodiscard]] virtual bool stream_ordered() const noexcept { return false; }
  /// True when each request's buffer is fixed when the workspace is bound (persistent
  /// requests): the packing executor then sends nothing in place and calls `attach`.
  [[nodiscard]] virtual bool fixed_buffers() const noexcept { return false; }

  /// Sets up the exchange's requests: `recvs` are requests [0, recvs.size()), `sends` follow.
  /// Reserves in `layout` what the transport keeps in the workspace (request storage). Called
  /// once, from the executor's constructor; collective setup (endpoints) happens here.
  virtual void declare(std::vector<wire_request> const& recvs,
                       std::vector<wire_request> const& sends, workspace_layout& layout) = 0;
  /// The requests the transport waits on, in the order of its waits' indices, for the
  /// watchdog's report and `cancel_peer`, given `declared` (one entry per declared request,
  /// receives first). The default is `declared`; a transport that adds control messages lists
  /// them after it, one that moves a request as several messages lists each.
  [[nodiscard]] virtual std::vector<request_info>
  request_table(std::vector<request_info> declared) const {
    return declared;
  }
  /// The workspace is bound at `bases` (at plan time, or when the caller moved it).
  virtual void bind(workspace_bases const& bases) { (void)bases; }
  /// Fixed buffers only: request `i` always moves `buf` (called after `bind`).
  virtual void attach(std::size_t i, std::byte* buf) {
    (void)i;
    (void)buf;
  }

  /// The GPU stream this exchange's posts go on (called before them, every exchange, by device
  /// executors; stream-ordered transports enqueue on it, the others ignore it).
  virtual void use_stream(void* stream) { (void)stream; }
  /// Posts request `i` (a receive or a send, by its index). With `runs` 0, `buf` is its
  /// contiguous buffer of the declared bytes; with `walked` (a request declared with boxes), it
  /// is the exchange's array of buffer addresses (`void* const*`, indexed by `wire_box::slot`)
  /// and the request moves its boxes there; otherwise it is a list of `runs` `io_run`s (at
  /// most the declared number) holding those bytes, which must stay valid until the request
  /// completes. A request declared with boxes may still be posted contiguous (a combining
  /// receive lands packed): its bytes are then the boxes' cells in order.
  virtual void post(std::size_t i, void* buf, std::size_t runs) = 0;
  /// Every request of the exchange is posted (a transport that progresses by polling starts
  /// what it could not start inline).
  virtual void posted() {}
  /// Waits for a receive not returned before in this exchange and returns its index; `none`
  /// when all were returned. Throws errc::timeout / errc::peer_failed.
  virtual std::size_t wait_recv() = 0;
  /// Waits until every send completed and the transport has nothing left to do for this
  /// exchange (its bytes may be reused).
  virtual void wait_sends() = 0;

  /// Cancels the pending receives from `peer` (a failed rank).
  virtual void cancel_peer(int peer) noexcept = 0;
  /// For an exchange that will never be waited for: completes within `grace` seconds or cancels
  /// what is pending; false when something could be neither (its memory must then stay).
  [[nodiscard]] virtual bool abandon(double grace) noexcept = 0;
  /// Connects and warms the paths to the declared peers, collectively with them (see
  /// executor::warm_up). The default does nothing.
  virtual void warm_up() {}
};

/// Makes the transport an executor drives (called from the executor's constructor), on the
/// executor's wait context, which outlives it.
using transport_maker = std::unique_ptr<transport> (*)(wait_context& waits);

} // namespace halox::detail
