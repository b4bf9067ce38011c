#include "api/plan_engine.hpp"

#include "exec/backend_table.hpp"

#include "common/agreement.hpp"
#include "tune/tuned_executor.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <utility>

namespace halox::detail {

namespace {

// The plans alive in this process, so that MPI_Finalize can tell their peers that this rank
// leaves them (see plan_engine::depart). Never destroyed: MPI_Finalize may run at exit.
struct live_engines {
  std::mutex m;
  std::vector<plan_engine*> all;
};
live_engines& live() {
  static auto* l = new live_engines;
  return *l;
}

// An attribute on MPI_COMM_SELF: MPI_Finalize deletes those first, while MPI still works.
int on_finalize(MPI_Comm, int, void*, void*) {
  std::vector<plan_engine*> engines;
  {
    std::lock_guard<std::mutex> lock(live().m);
    engines = live().all;
  }
  // Every rank tells its peers first, then takes theirs: in a job that ends normally they all
  // arrive within moments, and none is left unmatched in the MPI library.
  std::vector<notice_channel*> channels;
  for (auto* e : engines) e->depart("finalised MPI");
  for (auto* e : engines) {
    notice_channel* c = e->retire_at_finalize();
    if (std::find(channels.begin(), channels.end(), c) == channels.end()) channels.push_back(c);
  }
  for (auto* c : channels) c->finish_orphans(2.0);
  return MPI_SUCCESS;
}

void watch_finalize() {
  static bool const armed = [] {
    int k = MPI_KEYVAL_INVALID;
    return MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, on_finalize, &k, nullptr) == MPI_SUCCESS &&
           MPI_Comm_set_attr(MPI_COMM_SELF, k, nullptr) == MPI_SUCCESS;
  }();
  (void)armed;
}

} // namespace

combine_op to_combine(reduce_op op) noexcept {
  switch (op) {
  case reduce_op::sum: return combine_op::sum;
  case reduce_op::max: return combine_op::max;
  case reduce_op::min: return combine_op::min;
  }
  return combine_op::sum;
}

void require_timeout(std::optional<double> const& seconds, char const* options) {
  HALOX_REQUIRE(!seconds || *seconds >= 0, errc::invalid_argument,
                std::string(options) + "::timeout_seconds is " +
                    std::to_string(seconds.value_or(0)) +
                    "; pass a number of seconds, 0 for no bound, or leave it unset for the "
                    "context's");
}

void require_context_matches(context const& ctx, MPI_Comm comm, char const* what) {
  int cmp = MPI_UNEQUAL;
  HALOX_MPI_CHECK(MPI_Comm_compare(ctx.comm(), comm, &cmp));
  HALOX_REQUIRE(cmp == MPI_IDENT || cmp == MPI_CONGRUENT, errc::invalid_argument,
                std::string(what) +
                    ": the context was built on another group of processes (or another rank "
                    "order) than the plan's communicator; build the context from the grid's "
                    "communicator (or the redistribution's parent)");
}

namespace {

// Every rank must hand the plan the same tag, which holds when all build the plans of a context
// in the same order; a rank that did otherwise would exchange messages with the wrong plan.
void agree_on_tag(MPI_Comm comm, int tag) {
  int in[2] = {tag, -tag}, out[2] = {0, 0};
  HALOX_MPI_CHECK(MPI_Allreduce(in, out, 2, MPI_INT, MPI_MAX, comm));
  HALOX_REQUIRE(out[0] == tag && out[1] == -tag, errc::inconsistent_ranks,
                "plan " + std::to_string(tag) +
                    " of its context on this rank is another plan number on other ranks: the "
                    "ranks built the plans of one context in different orders; build them in "
                    "the same order everywhere");
}

} // namespace

plan_engine::plan_engine(context const& ctx, schedule forward, engine_options const& o,
                         std::uint64_t key)
    : ctx_(ctx), forward_(std::move(forward)), external_(o.external_workspace) {
  cfg_.ctx = ctx_.shared_state();
  HALOX_REQUIRE(cfg_.ctx->unusable.empty(), errc::invalid_state,
                std::string(o.label) + ": the context cannot build plans any more: " +
                    cfg_.ctx->unusable + "; build a new context");
  cfg_.comm = ctx_.comm();
  cfg_.tag = cfg_.ctx->next_tag();
  cfg_.memory = o.memory;
  cfg_.fill_value = o.fill_value;
  cfg_.timeout = o.timeout ? *o.timeout : cfg_.ctx->timeout;
  cfg_.label = o.label;
  check_ = o.check_execute || cfg_.ctx->check_execute;
  agree_on_tag(cfg_.comm, cfg_.tag);
  plan_id_ = static_cast<std::int64_t>(cfg_.ctx->index) << 32 |
             static_cast<std::int64_t>(cfg_.ctx->plans & 0xFFFFFFFFu);
  watch_.arm(cfg_.ctx->notices, cfg_.tag, plan_id_, o.label);
  cfg_.watch = &watch_;
  selection sel = select_backend(o.method, forward_, cfg_, o.tune, key);
  report_ = std::move(sel.report);
  // Both directions are built now, not on the first reverse exchange: building may be
  // collective (a topology, an NCCL communicator), which must never happen inside start/wait.
  // A rank that cannot build them (a count over MPI's int range, memory) must not leave the
  // others waiting: all agree first. An automatic choice hands over the forward executor it
  // timed.
  collective_check(
      cfg_.comm, std::string(o.label) + ": the " + to_string(sel.chosen) + " executor",
      [&] {
        fwd_ = sel.chosen_exec ? std::move(sel.chosen_exec)
                               : make_executor(sel.chosen, forward_, cfg_);
        rev_ = make_executor(sel.chosen, forward_.reversed(), cfg_);
      },
      [] { return std::uint64_t{0}; });
  // Every rank built both: the transports may now connect and warm up with the peers.
  fwd_->warm_up();
  rev_->warm_up();
  // An automatic choice keeps being checked on the caller's buffers: the executors become the
  // tuner's, which hold the runner-up's too.
  choice_note_ = make_adaptive(sel, forward_, cfg_, fwd_, rev_);
  if (!external_) {
    auto const ws = workspace_bytes();
    own_.reserve(cfg_.ctx, {ws.host, ws.pinned_host, ws.device});
    for (auto* e : {fwd_.get(), rev_.get()}) e->bind_workspace(own_.bases());
  }
  watch_.reserve(execution_peers().size() + 4);
  watch_finalize();
  std::lock_guard<std::mutex> lock(live().m);
  live().all.push_back(this);
}

plan_engine::~plan_engine() {
  depart("destroyed the plan");
  if (!check_) watch_.retire(execution_peers());
  {
    std::lock_guard<std::mutex> lock(live().m);
    auto& all = live().all;
    all.erase(std::remove(all.begin(), all.end(), this), all.end());
  }
  (void)abandon();
}

void plan_engine::depart(char const* why) noexcept {
  if (departed_ || !mpi_alive()) return;
  departed_ = true;
  // Under execute-time checking a peer waits for a missing rank in the checking all-reduce, not
  // in a loop that reads notices; and there a rank's execution count may differ from its peers'
  // after a refused round (it counts the plan it called), so a count would mislead.
  if (check_) return;
  try {
    // Peers waiting in the execution in flight here, or in any later one, will get none of
    // this rank's messages. A peer that destroys the plan too takes the notice without looking
    // at it (peer_watch::retire leaves a receive for it with the context's side channel).
    std::int64_t const from = active_ != nullptr ? executions_ - 1 : executions_;
    std::vector<int> const peers = execution_peers();
    if (peers.empty()) return;
    cfg_.ctx->notices.send(cfg_.tag, plan_id_, peers, from, departure,
                           std::string(why) + " after " + std::to_string(executions_) +
                               " execution(s)");
  } catch (...) {
  }
}

notice_channel* plan_engine::retire_at_finalize() noexcept {
  if (!check_) watch_.retire(execution_peers());
  return &cfg_.ctx->notices;
}

std::vector<int> plan_engine::execution_peers() const {
  // Every rank for a collective backend (all must call it), the schedule's otherwise.
  std::vector<int> peers;
  int const me = cfg_.ctx->rank;
  executor const* e = fwd_.get();
  if (e != nullptr && e->whole_communicator()) {
    for (int r = 0; r < cfg_.ctx->size; ++r)
      if (r != me) peers.push_back(r);
  } else {
    for (auto const* list : {&forward_.sends, &forward_.recvs})
      for (auto const& m : *list)
        if (m.peer != me && std::find(peers.begin(), peers.end(), m.peer) == peers.end())
          peers.push_back(m.peer);
  }
  return peers;
}

bool plan_engine::abandon() noexcept {
  if (!active_) return true;
  executor* e = std::exchange(active_, nullptr);
  if (e->abandon()) return true;
  own_.orphan();
  return false;
}

workspace_size plan_engine::workspace_bytes() const noexcept {
  std::array<std::size_t, 3> n{};
  for (auto* e : {fwd_.get(), rev_.get()})
    for (int k = 0; k < 3; ++k) n[k] = std::max(n[k], e->workspace_needs()[k]);
  return {n[0], n[1], n[2]};
}

void plan_engine::set_workspace(workspace const& w) {
  HALOX_REQUIRE(active_ == nullptr, errc::invalid_state,
                "set_workspace called while an exchange of this plan is in flight; call wait() "
                "first");
  auto const need = workspace_bytes();
  auto check = [](void* p, std::size_t have, std::size_t want, char const* kind) {
    if (want == 0) return;
    HALOX_REQUIRE(p != nullptr && have >= want, errc::invalid_argument,
                  std::string("the ") + kind + " workspace holds " + std::to_string(have) +
                      " bytes at " + (p ? "a valid address" : "null") + " but the plan needs " +
                      std::to_string(want) + "; pass at least workspace_bytes()." + kind);
    HALOX_REQUIRE(reinterpret_cast<std::uintptr_t>(p) % 64 == 0, errc::invalid_argument,
                  std::string("the ") + kind +
                      " workspace is not 64-byte aligned; align it to 64 bytes");
  };
  check(w.host, w.host_bytes, need.host, "host");
  check(w.pinned_host, w.pinned_host_bytes, need.pinned_host, "pinned_host");
  check(w.device, w.device_bytes, need.device, "device");
  workspace_bases const b = {static_cast<std::byte*>(w.host),
                             static_cast<std::byte*>(w.pinned_host),
                             static_cast<std::byte*>(w.device)};
  for (auto* e : {fwd_.get(), rev_.get()}) e->bind_workspace(b);
}

void plan_engine::start(void* const* bufs, bool reverse, combine_op op, void* stream) {
  HALOX_REQUIRE(mpi_alive(), errc::invalid_state,
                "the plan was used after MPI_Finalize (or before MPI_Init); execute plans while "
                "MPI is initialised and destroy them before finalising");
  HALOX_REQUIRE(active_ == nullptr, errc::invalid_state,
                "start called while an exchange of this plan is still in flight; call wait() "
                "first");
  executor* e = reverse ? rev_.get() : fwd_.get();
  watch_.watch(executions_ - 1);
  try {
    e->start(bufs, reverse ? op : combine_op::replace, stream, reverse);
  } catch (...) {
    // Whatever was posted has been withdrawn: the peers must not wait for the rest.
    watch_.watch(-1);
    tell_peers(executions_ - 1, reverse ? 1 : 0, std::current_exception(), true);
    throw;
  }
  active_ = e;
}

void plan_engine::refuse_if_broken() const {
  HALOX_REQUIRE(cfg_.ctx->unusable.empty(), errc::invalid_state,
                std::string(cfg_.label) + " with message tag " + std::to_string(cfg_.tag) +
                    " cannot run: its context " + cfg_.ctx->unusable +
                    "; build a new context and new plans");
  if (broken_.empty()) return;
  throw error(errc::invalid_state,
              std::string(cfg_.label) + " with message tag " + std::to_string(cfg_.tag) +
                  " cannot run again: " + broken_ +
                  "; messages of that execution may still be queued and would be taken for "
                  "this one's. Build a new plan (the context stays usable), or end the job");
}

void plan_engine::settle_failure() {
  // Every peer answers within moments: it refused the execution too, or it waited for this rank
  // and was told (peer_failed). One that ran ahead without waiting never answers.
  (void)settle_within(2.0);
}

bool plan_engine::settle_within(double seconds) {
  if (failed_at_ < 0) return true;
  std::int64_t const n = std::exchange(failed_at_, -1);
  auto const until = deadline_after(seconds);
  peer_watch::answers a;
  do {
    watch_.collect();
    a = watch_.answers_for(n, failed_peers_);
  } while (!a.answered && (seconds <= 0 || clock_type::now() < until));
  if (!a.all_refused && broken_.empty())
    broken_ = "execution " + std::to_string(n) + " failed on this rank (" + failed_why_ +
              ") while a peer went ahead with it";
  watch_.forget_before(n + 1);
  return a.all_refused;
}

bool plan_engine::skip(int direction, std::string const& reason) {
  HALOX_REQUIRE(!in_flight(), errc::invalid_state,
                std::string(cfg_.label) +
                    ": skip_execution called while an exchange is in flight; call wait() first");
  std::int64_t const n = executions_++;
  if (check_) {
    // The execute-time round of the ranks that run this execution: a skipping rank shows a key
    // no execution uses, so they see "another plan" and throw; the skippers see, in the minimum
    // of that key, whether anyone ran it.
    long long const key = 2LL * cfg_.tag + direction, skipped = key + (1LL << 40);
    long long in[3] = {0, skipped, -skipped}, out[3] = {0, 0, 0};
    allreduce_bounded(in, out, 3, MPI_LONG_LONG, MPI_MAX, cfg_.comm, cfg_.timeout,
                      "the execute-time check (HALOX_CHECK) of a plan");
    return out[2] == -skipped && out[0] == 0;
  }
  settle_failure();
  refuse_if_broken();
  tell_peers(n, direction, std::make_exception_ptr(error(errc::invalid_argument, reason)), false);
  // A peer that skips too announces it when it reaches this execution, and one that runs it
  // answers once it waits for this rank: both may first finish their own work, so wait as long
  // as an execution would.
  return settle_within(cfg_.timeout);
}

void plan_engine::tell_peers(std::int64_t n, int direction, std::exception_ptr const& why,
                             bool posted) noexcept {
  try {
    std::string reason = "an exception";
    try {
      std::rethrow_exception(why);
    } catch (error const& e) {
      reason = std::string("[") + to_string(e.code()) + "] " + e.message();
    } catch (std::exception const& e) {
      reason = e.what();
    } catch (...) {
    }
    std::vector<int> peers = execution_peers();
    executor const* e = fwd_.get();
    if (peers.empty()) return; // nobody waits for this rank: nothing is out of step
    cfg_.ctx->notices.send(cfg_.tag, plan_id_, peers, n, direction, reason);
    if (e != nullptr && e->whole_communicator() && cfg_.ctx->unusable.empty())
      cfg_.ctx->unusable = "holds a collective exchange of plan tag " + std::to_string(cfg_.tag) +
                           " that this rank did not join (it failed at execute)";
    if (!broken_.empty()) return;
    if (posted) {
      broken_ = "execution " + std::to_string(n) + " failed on this rank (" + reason + ")";
    } else {
      failed_at_ = n;
      failed_peers_ = std::move(peers);
      failed_why_ = std::move(reason);
    }
  } catch (...) {
  }
}

void plan_engine::agree_execute_round(int direction, std::exception_ptr const& local) {
  int rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(cfg_.comm, &rank));
  long long const key = 2LL * cfg_.tag + direction;
  long long in[3] = {local ? rank + 1LL : 0LL, key, -key}, out[3] = {0, 0, 0};
  allreduce_bounded(in, out, 3, MPI_LONG_LONG, MPI_MAX, cfg_.comm, cfg_.timeout,
                    "the execute-time check (HALOX_CHECK) of a plan");
  if (local) std::rethrow_exception(local);
  if (out[0] != 0)
    throw error(errc::invalid_argument,
                std::string(cfg_.label) + " execution: rank " + std::to_string(out[0] - 1) +
                    " of the plan's communicator passed invalid buffers (see the error printed "
                    "there); nothing was sent");
  if (out[1] != in[1] || out[2] != in[2])
    throw error(errc::inconsistent_ranks,
                std::string(cfg_.label) + " execution: this rank runs plan tag " +
                    std::to_string(cfg_.tag) + (direction ? " in reverse" : " forward") +
                    " but other ranks run another plan or the other direction; execute the same "
                    "plans in the same order on every rank");
}

void plan_engine::finish(executor* e, void* stream) {
  try {
    e->wait(stream);
  } catch (error const& x) {
    watch_.watch(-1);
    if (e->whole_communicator() && cfg_.ctx->unusable.empty())
      cfg_.ctx->unusable = "holds an unfinished collective exchange of plan tag " +
                           std::to_string(cfg_.tag) + " (" + to_string(x.code()) + ")";
    broken_ = "execution " + std::to_string(executions_ - 1) + " failed (" + to_string(x.code()) +
              (x.code() == errc::peer_failed ? ", rank " + std::to_string(watch_.failed_rank())
                                             : std::string()) +
              ")";
    throw;
  } catch (...) {
    watch_.watch(-1);
    broken_ = "execution " + std::to_string(executions_ - 1) + " failed";
    throw;
  }
  watch_.watch(-1);
}

void plan_engine::wait(void* stream) {
  HALOX_REQUIRE(active_ != nullptr, errc::invalid_state,
                "wait called without a matching start; call start() (or execute()) first");
  finish(std::exchange(active_, nullptr), stream);
}

std::string plan_engine::summary() const {
  std::ostringstream os;
  std::size_t regions = 0;
  for (auto const& m : forward_.sends) regions += m.regions.size();
  auto const ws = workspace_bytes();
  os << "backend " << to_string(selected()) << " (" << report_ << ")" << choice_note_
     << fwd_->choice_summary() << "; " << backend_axes(selected()) << "; " << forward_.sends.size()
     << " send peer(s), " << forward_.recvs.size() << " receive peer(s), " << forward_.send_bytes()
     << " B out / " << forward_.recv_bytes() << " B in per exchange, " << regions
     << " send region(s), " << forward_.copies.size() << " local copy(ies); message tag "
     << cfg_.tag;
  if (auto const w = fwd_->wire_summary(); !w.empty()) os << "; " << w;
  os << "; workspace " << ws.host << " B host";
  if (ws.pinned_host) os << " + " << ws.pinned_host << " B pinned";
  if (ws.device) os << " + " << ws.device << " B device";
  os << (external_ ? " (caller's)" : " (from the context)");
  return os.str();
}

} // namespace halox::detail
