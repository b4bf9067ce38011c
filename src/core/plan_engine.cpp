#include "core/plan_engine.hpp"

#include "common/agreement.hpp"
#include "tune/plan_cache.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <sstream>
#include <utility>

namespace halox::detail {

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

// The re-check's clock: the tuner's (tests may replace it), MPI_Wtime otherwise.
double recheck_clock() {
  auto const& hooks = test_hooks();
  return hooks.clock ? hooks.clock() : MPI_Wtime();
}

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
  watch_.arm(cfg_.ctx->notices, cfg_.tag, o.label);
  cfg_.watch = &watch_;
  selection sel = select_backend(o.method, forward_, cfg_, o.tune, key);
  selected_ = sel.chosen;
  report_ = std::move(sel.report);
  // Both directions are built now, not on the first reverse exchange: building may be
  // collective (a topology, an NCCL communicator), which must never happen inside start/wait.
  // A rank that cannot build them (a count over MPI's int range, memory) must not leave the
  // others waiting: all agree first. An automatic choice hands over the forward executor it
  // timed.
  collective_check(
      cfg_.comm, std::string(o.label) + ": the " + to_string(selected_) + " executor",
      [&] {
        fwd_ =
            sel.chosen_exec ? std::move(sel.chosen_exec) : make_executor(selected_, forward_, cfg_);
        rev_ = make_executor(selected_, forward_.reversed(), cfg_);
      },
      [] { return std::uint64_t{0}; });
  // Every rank built both: the transports may now connect and warm up with the peers.
  fwd_->warm_up();
  rev_->warm_up();
  rc_.reason = std::move(sel.recheck_reason);
  rc_.watch_reason = std::move(sel.watch_reason);
  if (sel.runner_up != backend::automatic) {
    // The runner-up's executors for the re-check (first, or when the watch asks). Failing to
    // build them only cancels both, on every rank alike.
    std::unique_ptr<executor> af = std::move(sel.runner_exec), ar;
    int bad = 0;
    try {
      if (!af) af = make_executor(sel.runner_up, forward_, cfg_);
      ar = make_executor(sel.runner_up, forward_.reversed(), cfg_);
    } catch (std::exception const&) {
      bad = 1;
    }
    HALOX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, cfg_.comm));
    if (bad) {
      rc_.reason = std::string("cancelled, the runner-up ") + to_string(sel.runner_up) +
                   " could not be built on every rank";
      rc_.watch_reason.clear();
    } else {
      alt_fwd_ = std::move(af);
      alt_rev_ = std::move(ar);
      alt_fwd_->warm_up();
      alt_rev_->warm_up();
      rc_.other = sel.runner_up;
      rc_.force = sel.force_switch;
      rc_.watch = sel.watch;
      rc_.runner_ref = sel.runner_median;
      rc_.state =
          sel.recheck_first ? recheck_state::phase::pending : recheck_state::phase::watching;
    }
  }
  if (!external_) {
    auto const ws = workspace_bytes();
    own_.reserve(cfg_.ctx, {ws.host, ws.pinned_host, ws.device});
    for (auto* e : {fwd_.get(), rev_.get(), alt_fwd_.get(), alt_rev_.get()})
      if (e) e->bind_workspace(own_.bases());
  }
}

plan_engine::~plan_engine() { (void)abandon(); }

bool plan_engine::abandon() noexcept {
  if (!active_) return true;
  executor* e = std::exchange(active_, nullptr);
  if (e->abandon()) return true;
  own_.orphan();
  return false;
}

workspace_size plan_engine::workspace_bytes() const noexcept {
  std::array<std::size_t, 3> n{};
  for (auto* e : {fwd_.get(), rev_.get(), alt_fwd_.get(), alt_rev_.get()})
    if (e)
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
  for (auto* e : {fwd_.get(), rev_.get(), alt_fwd_.get(), alt_rev_.get()})
    if (e) e->bind_workspace(b);
}

void plan_engine::start(void* const* bufs, bool reverse, combine_op op, void* stream) {
  HALOX_REQUIRE(mpi_alive(), errc::invalid_state,
                "the plan was used after MPI_Finalize (or before MPI_Init); execute plans while "
                "MPI is initialised and destroy them before finalising");
  HALOX_REQUIRE(active_ == nullptr, errc::invalid_state,
                "start called while an exchange of this plan is still in flight; call wait() "
                "first");
  executor* e = reverse ? rev_.get() : fwd_.get();
  // Every rank executes the same sequence (execution is collective), so counting forward
  // exchanges picks the same executor everywhere.
  bool const timed = !reverse && rc_.state != recheck_state::phase::none;
  double t = 0.0;
  if (timed) {
    if (rc_.state == recheck_state::phase::pending && rc_.done % 2 == 1) e = alt_fwd_.get();
    t = recheck_clock();
  }
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
  if (timed) {
    rc_.spent = recheck_clock() - t;
    rc_.timing = true;
  }
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
  if (failed_at_ < 0) return;
  std::int64_t const n = std::exchange(failed_at_, -1);
  // Every peer answers within moments: it refused the execution too, or it waited for this rank
  // and was told (peer_failed). One that ran ahead without waiting never answers.
  auto const until = deadline_after(2.0);
  peer_watch::answers a;
  do {
    watch_.collect();
    a = watch_.answers_for(n, failed_peers_);
  } while (!a.answered && clock_type::now() < until);
  if (!a.all_refused && broken_.empty())
    broken_ = "execution " + std::to_string(n) + " failed on this rank (" + failed_why_ +
              ") while a peer went ahead with it";
  watch_.forget_before(n + 1);
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
    // The peers of this execution: every rank for a collective backend (all must call it), the
    // schedule's otherwise.
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
    if (peers.empty()) return; // nobody waits for this rank: nothing is out of step
    cfg_.ctx->notices.send(cfg_.tag, peers, n, direction, reason);
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
  executor* e = active_;
  active_ = nullptr;
  if (!rc_.timing) {
    finish(e, stream);
    return;
  }
  rc_.timing = false;
  double const t = recheck_clock();
  finish(e, stream);
  double const took = rc_.spent + (recheck_clock() - t);
  auto const& hooks = test_hooks();
  bool const rechecking = rc_.state == recheck_state::phase::pending;
  double const skew = rechecking && hooks.skew ? hooks.skew(e->kind(), rc_.done) : 0.0;
  double const x = took + exec_skew(e->kind(), skew);
  long long const n = rc_.executions++;
  if (rechecking) {
    rc_.times[static_cast<std::size_t>(rc_.done)] = x;
    if (++rc_.done == recheck_executions) recheck_decide();
    return;
  }
  rc_.recent[static_cast<std::size_t>(n % watch_window)] = x;
  rc_.filled = std::min(rc_.filled + 1, watch_window);
  if (++rc_.since >= rc_.period && rc_.filled == watch_window) watch_decide();
}

double plan_engine::exec_skew(backend b, double fallback_skew) const {
  auto const& hooks = test_hooks();
  return hooks.exec_skew ? hooks.exec_skew(b, rc_.executions) : fallback_skew;
}

void plan_engine::recheck_decide() {
  allreduce_bounded(MPI_IN_PLACE, rc_.times.data(), recheck_executions, MPI_DOUBLE, MPI_MAX,
                    cfg_.comm, cfg_.timeout, "the re-check of an automatic backend choice");
  // The first pair is a warm-up; then even exchanges ran the choice, odd ones the runner-up.
  constexpr int half = (recheck_executions - 2) / 2;
  double chosen[half], runner[half];
  for (int i = 0; i < half; ++i) {
    chosen[i] = rc_.times[static_cast<std::size_t>(2 + 2 * i)];
    runner[i] = rc_.times[static_cast<std::size_t>(3 + 2 * i)];
  }
  bool const faster = recheck_switch(chosen, half, runner, half, recheck_margin, rc_.medians);
  bool const switched = faster || rc_.force;
  if (switched) {
    std::swap(fwd_, alt_fwd_);
    std::swap(rev_, alt_rev_);
    std::swap(selected_, rc_.other);
  }
  rc_.last = switched ? recheck_state::outcome::switched : recheck_state::outcome::confirmed;
  rc_.force = false; // a forced switch is the first re-check's only
  if (!rc_.watch) {
    rc_.state = recheck_state::phase::none;
    return;
  }
  // Watch on, against the backend not chosen now, with its time measured just now.
  rc_.state = recheck_state::phase::watching;
  rc_.runner_ref = switched ? rc_.medians[0] : rc_.medians[1];
  rc_.filled = 0;
  rc_.since = 0;
  rc_.period = watch_window;
}

void plan_engine::watch_decide() {
  // This rank's median of the latest forward executions; the slowest rank's counts (every rank
  // then takes the same path).
  std::array<double, watch_window> v = rc_.recent;
  auto const mid = v.begin() + watch_window / 2;
  std::nth_element(v.begin(), mid, v.end());
  double med = *mid;
  allreduce_bounded(MPI_IN_PLACE, &med, 1, MPI_DOUBLE, MPI_MAX, cfg_.comm, cfg_.timeout,
                    "the watch of an automatic backend choice");
  ++rc_.checks;
  rc_.since = 0;
  if (med > rc_.runner_ref * (1.0 + watch_margin)) {
    // The choice now takes clearly longer than the runner-up did: race them again on the
    // caller's buffers, as in the first re-check.
    ++rc_.drifts;
    rc_.drift_median = med;
    rc_.drift_ref = rc_.runner_ref;
    rc_.by_watch = true;
    rc_.state = recheck_state::phase::pending;
    rc_.done = 0;
    return;
  }
  rc_.period = std::min(2 * rc_.period, watch_max_period);
}

std::string plan_engine::recheck_summary() const {
  using phase = recheck_state::phase;
  using outcome = recheck_state::outcome;
  constexpr int half = (recheck_executions - 2) / 2;
  std::string const why =
      rc_.by_watch
          ? "the watch saw the choice drift: median " + format_seconds(rc_.drift_median) +
                " over its last " + std::to_string(watch_window) +
                " forward executions, above the runner-up's " + format_seconds(rc_.drift_ref)
          : rc_.reason;
  std::string out;
  if (rc_.state == phase::pending) {
    out = "; re-check against " + std::string(to_string(rc_.other)) + " (" + why +
          "): " + std::to_string(rc_.done) + " of " + std::to_string(recheck_executions) +
          " forward executions done";
  } else if (rc_.last == outcome::none) {
    if (!rc_.reason.empty()) out = "; re-check: " + rc_.reason;
  } else {
    out =
        std::string("; re-check ") +
        (rc_.last == outcome::switched
             ? "switched from " + std::string(to_string(rc_.other)) + " to " + to_string(selected_)
             : "confirmed " + std::string(to_string(selected_)) + " over " + to_string(rc_.other)) +
        " (" + why + "): median " + format_seconds(rc_.medians[0]) + " vs " +
        format_seconds(rc_.medians[1]) + " over " + std::to_string(half) + "+" +
        std::to_string(half) + " executions";
  }
  if (rc_.state == phase::watching) {
    out += "; watching against " + std::string(to_string(rc_.other)) + " (re-check when a " +
           std::to_string(watch_window) + "-execution median exceeds " +
           format_seconds(rc_.runner_ref * (1.0 + watch_margin)) +
           "): " + std::to_string(rc_.checks) + " check(s), " + std::to_string(rc_.drifts) +
           " drift(s), next check after " +
           std::to_string(std::max(rc_.period - rc_.since, watch_window - rc_.filled)) +
           " forward execution(s)";
  } else if (rc_.state == phase::none && !rc_.watch_reason.empty()) {
    out += "; watch: " + rc_.watch_reason;
  }
  return out;
}

std::string plan_engine::summary() const {
  std::ostringstream os;
  std::size_t regions = 0;
  for (auto const& m : forward_.sends) regions += m.regions.size();
  auto const ws = workspace_bytes();
  os << "backend " << to_string(selected_) << " (" << report_ << ")" << recheck_summary() << "; "
     << forward_.sends.size() << " send peer(s), " << forward_.recvs.size() << " receive peer(s), "
     << forward_.send_bytes() << " B out / " << forward_.recv_bytes() << " B in per exchange, "
     << regions << " send region(s), " << forward_.copies.size() << " local copy(ies); message tag "
     << cfg_.tag;
  if (fwd_) {
    if (auto const w = fwd_->wire_summary(); !w.empty()) os << "; " << w;
  }
  os << "; workspace " << ws.host << " B host";
  if (ws.pinned_host) os << " + " << ws.pinned_host << " B pinned";
  if (ws.device) os << " + " << ws.device << " B device";
  os << (external_ ? " (caller's)" : " (from the context)");
  return os.str();
}

} // namespace halox::detail
