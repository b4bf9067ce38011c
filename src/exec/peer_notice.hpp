#pragma once
// Failure notices between the ranks of one plan. A rank whose own checks refuse an execution
// (a buffer too small, a null pointer, another tensor's buffer, a start while in flight) sends
// nothing of that execution, so its peers would wait for it forever. Before throwing, it tells
// each of them on a side channel: one small message per peer, on a private duplicate of the
// context's communicator, with the plan's tag. Each plan keeps one receive posted there, and
// every wait loop of every executor tests it while its messages are still outstanding, so the
// peers raise errc::peer_failed naming that rank and its reason at once. Nothing is sent and
// nothing collective happens when executions succeed.

#include <halox/detail/mpi_handle.hpp>

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace halox::detail {

/// Receives and drops every message already queued on `comm` for no posted receive (the
/// messages of exchanges abandoned after a failure), each within a short bound; for
/// communicators no plan uses any more. Never throws.
void drain_unexpected(MPI_Comm comm) noexcept;

/// `notice_message::direction` of a departure: the sender left the plan (destroyed it, or
/// finalised MPI) and will take part in no execution from `execution` on.
inline constexpr int departure = 2;

/// A notice on the wire: fixed size, so that one posted receive takes any notice.
struct notice_message {
  /// Which plan: its context's number and its own within the context, the same on every rank.
  /// Tags repeat across contexts (MPI's tag range is small), and a notice still in flight when
  /// its plan's communicator was freed may reach a later plan with the same tag: it is dropped.
  std::int64_t plan = 0;
  std::int64_t execution = 0; ///< the sender's index of the execution it will not take part in
  std::int16_t direction = 0; ///< 0 forward, 1 reverse/inverse, `departure`
  std::int16_t ahead = 0;     ///< 1: an answer, "I went ahead with it and cancelled my part"
  std::int32_t length = 0;    ///< characters of `reason` used
  char reason[488] = {};      ///< the sender's error message (truncated)
};

/// The context's side channel: its communicator (collective to open) and the notices this rank
/// sent, kept until MPI is done with their buffers.
class notice_channel {
public:
  notice_channel() = default;
  /// Gives pending notices a moment to leave, cancels what could not, then frees.
  ~notice_channel();
  notice_channel(notice_channel const&) = delete;
  notice_channel& operator=(notice_channel const&) = delete;

  /// Duplicates `comm` for the notices; collective over `comm`.
  void open(MPI_Comm comm);
  /// The notices' communicator (MPI_COMM_NULL until opened).
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_.get(); }
  /// Tells each of `peers` (ranks of the communicator) that this rank will not take part in
  /// execution `execution` of the plan with `tag`, because of `reason`. Never throws: it runs
  /// while the caller's own error is on its way out.
  void send(int tag, std::int64_t plan, std::vector<int> const& peers, std::int64_t execution,
            int direction, std::string const& reason, bool ahead = false) noexcept;

  /// Keeps `n` receives of notices with `tag` posted for a plan that is gone, so that the
  /// departure notices its peers send when they destroy their copies are taken, not left
  /// unmatched in the MPI library. They use slots allocated once with the channel (a plan's end
  /// allocates nothing); when every slot is busy, the oldest receive is cancelled for a new one.
  void keep_receiving(int tag, int n) noexcept;
  /// Waits at most `seconds` for the receives keep_receiving left, then cancels what is left
  /// (for MPI_Finalize, where no receive may stay posted).
  void finish_orphans(double seconds) noexcept;

private:
  struct orphan {
    notice_message msg;
    MPI_Request req = MPI_REQUEST_NULL;
  };
  struct outgoing {
    notice_message msg;
    std::vector<MPI_Request> reqs;
  };
  unique_comm comm_;
  std::vector<std::unique_ptr<outgoing>> out_;
  // Fixed at open(); a heap array MPI writes into, released (kept) if a receive cannot end.
  std::unique_ptr<orphan[]> orphans_;
  std::size_t next_orphan_ = 0; // the slot to take when all are busy (the oldest)
};

/// One plan's watch for notices: its posted receive, and the notices that arrived for
/// executions this rank has not finished yet.
class peer_watch {
public:
  peer_watch() = default;
  /// Cancels the posted receive.
  ~peer_watch();
  peer_watch(peer_watch const&) = delete;
  peer_watch& operator=(peer_watch const&) = delete;

  /// Posts the receive of the plan with `tag` on `channel` (the context's); `label` names the
  /// plan in errors ("halo_plan", ...).
  void arm(notice_channel& channel, int tag, std::int64_t plan, char const* label);
  /// The executors now wait in this rank's execution `execution` (-1: none, e.g. at plan time).
  void watch(std::int64_t execution) noexcept { current_ = execution; }
  /// Takes any notice that arrived (one MPI_Test when none did) and throws `halox::error`
  /// (errc::peer_failed) when a peer will not take part in the current execution, after
  /// answering it that this rank went ahead. For the wait loops, while messages are
  /// outstanding; `backend` names the executor in the error.
  void poll(char const* backend);
  /// Takes every notice that arrived.
  void collect();
  /// Whether each of `peers` answered for execution `execution`: `answered` when every one
  /// sent a notice of it, `all_refused` when, besides, none of them went ahead with it.
  struct answers {
    bool answered = false;
    bool all_refused = false;
  };
  [[nodiscard]] answers answers_for(std::int64_t execution, std::vector<int> const& peers) const;
  /// Forgets the notices of executions before `execution` (a departure stays: it holds for
  /// every later execution).
  void forget_before(std::int64_t execution);
  /// The plan is being destroyed: takes the notices that arrived, ends its posted receive, and
  /// leaves one receive per peer of `peers` (the plan's) whose departure has not arrived to the
  /// channel (notice_channel::keep_receiving).
  void retire(std::vector<int> const& peers) noexcept;

  /// Room for `n` notices, so that taking them while executing allocates nothing (one per peer's
  /// departure, plus a few).
  void reserve(std::size_t n) { box_.reserve(n); }

  /// The rank named by the latest peer_failed error (-1: none).
  [[nodiscard]] int failed_rank() const noexcept { return failed_; }

private:
  // Held inline, not in a std::string: a peer's departure may arrive while this rank still
  // waits in its last execution, which must not allocate.
  struct received {
    std::int64_t execution = 0;
    int direction = 0;
    bool ahead = false;
    int from = -1;
    int length = 0;
    char reason[sizeof(notice_message::reason)] = {};
    [[nodiscard]] std::string text() const { return std::string(reason, std::size_t(length)); }
  };
  void post(); // (re)posts the notice receive into `in_`
  notice_channel* channel_ = nullptr;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ = 0;
  std::int64_t plan_ = 0;
  char const* label_ = "plan";
  MPI_Request req_ = MPI_REQUEST_NULL;
  notice_message in_;         // the posted receive's buffer
  std::vector<received> box_; // notices taken, of executions not yet over here
  std::int64_t current_ = -1;
  int failed_ = -1;
};

} // namespace halox::detail
