#include "exec/peer_notice.hpp"

#include "common/agreement.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace halox::detail {

namespace {
// Receives of departures kept per context for plans this rank ended before their peers did.
constexpr std::size_t orphan_slots = 128;
} // namespace

void drain_unexpected(MPI_Comm comm) noexcept {
  if (comm == MPI_COMM_NULL || !mpi_alive()) return;
  for (int n = 0; n < 4096; ++n) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &flag, &st) != MPI_SUCCESS || !flag) return;
    int bytes = 0;
    if (MPI_Get_count(&st, MPI_BYTE, &bytes) != MPI_SUCCESS || bytes == MPI_UNDEFINED) return;
    auto* sink = new (std::nothrow) char[bytes > 0 ? static_cast<std::size_t>(bytes) : 1];
    if (sink == nullptr) return;
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Irecv(sink, bytes, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, comm, &req) != MPI_SUCCESS) {
      delete[] sink;
      return;
    }
    // A long message needs its sender; one that is gone leaves the receive pending: give up.
    auto const until = deadline_after(0.5);
    int done = 0;
    while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
           clock_type::now() < until) {
    }
    if (!done) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
      return; // the sink stays: MPI may still write it
    }
    delete[] sink;
  }
}

namespace {

// Tests `reqs` until all completed, for at most `seconds`; true when they did.
bool testall_within(std::vector<MPI_Request>& reqs, double seconds) noexcept {
  auto const until = deadline_after(seconds);
  int done = 0;
  while (MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE) ==
             MPI_SUCCESS &&
         !done && clock_type::now() < until) {
  }
  return done != 0;
}

} // namespace

void notice_channel::open(MPI_Comm comm) {
  orphans_ = std::make_unique<orphan[]>(orphan_slots);
  HALOX_MPI_CHECK(MPI_Comm_dup(comm, comm_.out()));
  HALOX_MPI_CHECK(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN));
}

void notice_channel::finish_orphans(double seconds) noexcept {
  if (!orphans_ || !mpi_alive()) return;
  std::vector<MPI_Request> reqs;
  for (std::size_t i = 0; i < orphan_slots; ++i)
    if (orphans_[i].req != MPI_REQUEST_NULL) reqs.push_back(orphans_[i].req);
  for (std::size_t i = 0; i < orphan_slots; ++i) orphans_[i].req = MPI_REQUEST_NULL;
  if (reqs.empty() || testall_within(reqs, seconds)) return;
  for (auto& r : reqs)
    if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
  if (!testall_within(reqs, 0.2)) (void)orphans_.release(); // MPI may still write them
}

notice_channel::~notice_channel() {
  if (!mpi_alive()) return;
  // The peers' departures from plans this rank destroyed first arrive when they destroy theirs,
  // moments apart in a program whose ranks end their plans together.
  finish_orphans(2.0);
  drain_unexpected(comm_.get());
  for (auto& o : out_) {
    // Notices are small (eager): they are gone long before the context is destroyed.
    if (testall_within(o->reqs, 1.0)) continue;
    for (auto& r : o->reqs)
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    // MPI may still read a notice it could neither deliver nor cancel: keep its buffer.
    if (!testall_within(o->reqs, 0.2)) (void)o.release();
  }
}

void notice_channel::send(int tag, std::int64_t plan, std::vector<int> const& peers,
                          std::int64_t execution, int direction, std::string const& reason,
                          bool ahead) noexcept {
  if (comm_.get() == MPI_COMM_NULL || peers.empty() || !mpi_alive()) return;
  try {
    // Notices whose sends completed are dropped here, so the list stays short.
    out_.erase(std::remove_if(out_.begin(), out_.end(),
                              [](auto const& o) {
                                int done = 0;
                                return MPI_Testall(static_cast<int>(o->reqs.size()), o->reqs.data(),
                                                   &done, MPI_STATUSES_IGNORE) == MPI_SUCCESS &&
                                       done;
                              }),
               out_.end());
    auto o = std::make_unique<outgoing>();
    o->msg.plan = plan;
    o->msg.execution = execution;
    o->msg.direction = static_cast<std::int16_t>(direction);
    o->msg.ahead = ahead ? 1 : 0;
    std::size_t const n = std::min(reason.size(), sizeof(o->msg.reason));
    std::memcpy(o->msg.reason, reason.data(), n);
    o->msg.length = static_cast<std::int32_t>(n);
    o->reqs.assign(peers.size(), MPI_REQUEST_NULL);
    for (std::size_t i = 0; i < peers.size(); ++i)
      MPI_Isend(&o->msg, static_cast<int>(sizeof(notice_message)), MPI_BYTE, peers[i], tag,
                comm_.get(), &o->reqs[i]);
    out_.push_back(std::move(o));
  } catch (...) {
    // Out of memory while failing: the peers fall back on the watchdog.
  }
}

void notice_channel::keep_receiving(int tag, int n) noexcept {
  if (!orphans_) return;
  for (; n > 0; --n) {
    // A free slot (its receive done), else the oldest, whose receive is cancelled.
    std::size_t slot = orphan_slots;
    for (std::size_t i = 0; i < orphan_slots && slot == orphan_slots; ++i) {
      int done = 0;
      MPI_Request& r = orphans_[i].req;
      if (r == MPI_REQUEST_NULL || (MPI_Test(&r, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done))
        slot = i;
    }
    if (slot == orphan_slots) {
      slot = next_orphan_;
      next_orphan_ = (next_orphan_ + 1) % orphan_slots;
      MPI_Request& r = orphans_[slot].req;
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    orphan& o = orphans_[slot];
    if (MPI_Irecv(&o.msg, static_cast<int>(sizeof(notice_message)), MPI_BYTE, MPI_ANY_SOURCE, tag,
                  comm_.get(), &o.req) != MPI_SUCCESS)
      return;
  }
}

void peer_watch::arm(notice_channel& channel, int tag, std::int64_t plan, char const* label) {
  channel_ = &channel;
  comm_ = channel.comm();
  tag_ = tag;
  plan_ = plan;
  label_ = label;
  if (comm_ == MPI_COMM_NULL) return;
  post();
}

void peer_watch::post() {
  HALOX_MPI_CHECK(MPI_Irecv(&in_, static_cast<int>(sizeof(notice_message)), MPI_BYTE,
                            MPI_ANY_SOURCE, tag_, comm_, &req_));
}

peer_watch::~peer_watch() {
  if (req_ == MPI_REQUEST_NULL || !mpi_alive()) return;
  MPI_Cancel(&req_);
  MPI_Wait(&req_, MPI_STATUS_IGNORE);
}

void peer_watch::retire(std::vector<int> const& peers) noexcept {
  if (req_ == MPI_REQUEST_NULL || channel_ == nullptr || !mpi_alive()) return;
  try {
    collect();
    // The posted receive ends here; a notice that lands in it meanwhile is taken like the rest.
    MPI_Status st;
    MPI_Cancel(&req_);
    MPI_Wait(&req_, &st);
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
    if (!cancelled && in_.plan == plan_ && in_.direction == departure) {
      received r;
      r.execution = in_.execution;
      r.direction = departure;
      r.from = st.MPI_SOURCE;
      box_.push_back(r);
    }
    int missing = 0;
    for (int p : peers)
      if (std::none_of(box_.begin(), box_.end(),
                       [&](received const& r) { return r.from == p && r.direction == departure; }))
        ++missing;
    channel_->keep_receiving(tag_, missing);
  } catch (...) {
  }
}

void peer_watch::collect() {
  while (req_ != MPI_REQUEST_NULL) {
    int flag = 0;
    MPI_Status st;
    HALOX_MPI_CHECK(MPI_Test(&req_, &flag, &st));
    if (!flag) return;
    if (in_.plan != plan_) {
      post(); // another plan's, left over from a freed communicator: dropped
      continue;
    }
    received r;
    r.execution = in_.execution;
    r.direction = in_.direction;
    r.ahead = in_.ahead != 0;
    r.from = st.MPI_SOURCE;
    r.length =
        std::clamp<std::int32_t>(in_.length, 0, static_cast<std::int32_t>(sizeof(in_.reason)));
    std::memcpy(r.reason, in_.reason, static_cast<std::size_t>(r.length));
    box_.push_back(std::move(r));
    post();
  }
}

peer_watch::answers peer_watch::answers_for(std::int64_t execution,
                                            std::vector<int> const& peers) const {
  answers a{true, true};
  for (int p : peers) {
    auto const it = std::find_if(box_.begin(), box_.end(), [&](received const& r) {
      return r.from == p &&
             (r.execution == execution || (r.direction == departure && r.execution <= execution));
    });
    if (it == box_.end()) return {};
    a.all_refused = a.all_refused && !it->ahead;
  }
  return a;
}

void peer_watch::forget_before(std::int64_t execution) {
  box_.erase(std::remove_if(box_.begin(), box_.end(),
                            [&](received const& r) {
                              return r.execution < execution && r.direction != departure;
                            }),
             box_.end());
}

void peer_watch::poll(char const* backend) {
  collect();
  if (box_.empty() || current_ < 0) return;
  forget_before(current_);
  auto const it = std::find_if(box_.begin(), box_.end(), [&](received const& r) {
    return (r.execution == current_ && !r.ahead) ||
           (r.direction == departure && r.execution <= current_);
  });
  if (it == box_.end()) return;
  received const r = *it;
  forget_before(current_ + 1);
  failed_ = r.from;
  int rank = 0;
  MPI_Comm_rank(comm_, &rank);
  if (r.direction == departure)
    throw error(errc::peer_failed,
                std::string(label_) + " with message tag " + std::to_string(tag_) + " (backend " +
                    backend + "): rank " + std::to_string(r.from) +
                    " of its communicator left this plan and will not take part in this or any "
                    "later execution: it " +
                    r.text() + ". Rank " + std::to_string(rank) +
                    " cancelled its part; the plan cannot run again: every rank must execute the "
                    "same plans the same number of times before destroying them or finalising");
  // The failed rank learns at its next execution of this plan that this one went ahead (and so
  // may have sent it messages of this execution), without waiting.
  if (channel_ != nullptr)
    channel_->send(tag_, plan_, {r.from}, r.execution, r.direction, std::string(), true);
  throw error(
      errc::peer_failed,
      std::string(label_) + (r.direction ? " (reverse/inverse)" : "") + " with message tag " +
          std::to_string(tag_) + " (backend " + backend + "): rank " + std::to_string(r.from) +
          " of its communicator failed at this execution and will not take part: " + r.text() +
          ". Rank " + std::to_string(rank) +
          " cancelled its part; the plan cannot run again (messages of this execution "
          "may still be queued), so build a new plan from the same context, or end the "
          "job from the error handler (MPI_Abort)");
}

} // namespace halox::detail
