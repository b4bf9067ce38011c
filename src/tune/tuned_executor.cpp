#include "tune/tuned_executor.hpp"

#include "common/agreement.hpp"
#include "tune/decision.hpp"
#include "tune/plan_cache.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <array>
#include <string>
#include <utility>

namespace halox::detail {
namespace {

// The re-check's clock: the tuner's (tests may replace it), MPI_Wtime otherwise.
double recheck_clock() {
  auto const& hooks = test_hooks();
  return hooks.clock ? hooks.clock() : MPI_Wtime();
}

// What the forward and reverse tuned executors of one plan share: both backends' executors and
// the state of the re-check and the watch. Only numbers change once built: deciding allocates
// nothing.
struct tuning {
  enum class phase { none, pending, watching };
  enum class outcome { none, confirmed, switched };

  MPI_Comm comm = MPI_COMM_NULL;
  double timeout = 0.0;
  // [direction: 0 forward, 1 reverse][0: the choice, 1: the runner-up (after a switch: the old
  // choice)]
  std::unique_ptr<executor> exec[2][2];

  phase state = phase::none;
  bool force = false;  ///< the next re-check switches whatever the times say
  bool timing = false; ///< the exchange in flight is timed
  bool watch = false;  ///< watch after the re-check (or instead of one)
  int done = 0;        ///< forward exchanges of the running re-check so far
  long long executions = 0;
  double spent = 0.0; ///< seconds spent in start of the exchange in flight
  std::array<double, recheck_executions> times{};
  outcome last = outcome::none;
  bool by_watch = false;          ///< the latest (or running) re-check was started by the watch
  double medians[2] = {0.0, 0.0}; ///< chosen, runner-up (at the latest re-check's decision)
  std::string reason;             ///< why there is (no) first re-check
  std::string watch_reason;       ///< why there is no watch
  // The watch: the latest forward times (a ring), when to check next, and what it found.
  std::array<double, watch_window> recent{};
  int filled = 0, since = 0, period = watch_window;
  double runner_ref = 0.0;    ///< the runner-up's latest median (tuning, or a re-check)
  int checks = 0, drifts = 0; ///< checks made; re-checks they started
  double drift_median = 0.0;  ///< the choice's median at the check that started a re-check
  double drift_ref = 0.0;     ///< the runner-up's median it was compared with

  [[nodiscard]] backend chosen() const noexcept { return exec[0][0]->kind(); }
  [[nodiscard]] backend other() const noexcept { return exec[0][1]->kind(); }

  // A forward exchange that was timed took `took` seconds on executor `e`.
  void record(executor const& e, double took) {
    auto const& hooks = test_hooks();
    bool const rechecking = state == phase::pending;
    double const skew = rechecking && hooks.skew ? hooks.skew(e.kind(), done) : 0.0;
    double const x = took + (hooks.exec_skew ? hooks.exec_skew(e.kind(), executions) : skew);
    long long const n = executions++;
    if (rechecking) {
      times[static_cast<std::size_t>(done)] = x;
      if (++done == recheck_executions) decide();
      return;
    }
    recent[static_cast<std::size_t>(n % watch_window)] = x;
    filled = std::min(filled + 1, watch_window);
    if (++since >= period && filled == watch_window) check_drift();
  }

  void decide() {
    allreduce_bounded(MPI_IN_PLACE, times.data(), recheck_executions, MPI_DOUBLE, MPI_MAX, comm,
                      timeout, "the re-check of an automatic backend choice");
    // The first pair is a warm-up; then even exchanges ran the choice, odd ones the runner-up.
    constexpr int half = (recheck_executions - 2) / 2;
    double chosen_t[half], runner_t[half];
    for (int i = 0; i < half; ++i) {
      chosen_t[i] = times[static_cast<std::size_t>(2 + 2 * i)];
      runner_t[i] = times[static_cast<std::size_t>(3 + 2 * i)];
    }
    bool const faster = recheck_switch(chosen_t, half, runner_t, half, recheck_margin, medians);
    bool const switched = faster || force;
    if (switched)
      for (auto& direction : exec) std::swap(direction[0], direction[1]);
    last = switched ? outcome::switched : outcome::confirmed;
    force = false; // a forced switch is the first re-check's only
    if (!watch) {
      state = phase::none;
      return;
    }
    // Watch on, against the backend not chosen now, with its time measured just now.
    state = phase::watching;
    runner_ref = switched ? medians[0] : medians[1];
    filled = 0;
    since = 0;
    period = watch_window;
  }

  void check_drift() {
    // This rank's median of the latest forward executions; the slowest rank's counts (every
    // rank then takes the same path).
    std::array<double, watch_window> v = recent;
    auto const mid = v.begin() + watch_window / 2;
    std::nth_element(v.begin(), mid, v.end());
    double med = *mid;
    allreduce_bounded(MPI_IN_PLACE, &med, 1, MPI_DOUBLE, MPI_MAX, comm, timeout,
                      "the watch of an automatic backend choice");
    ++checks;
    since = 0;
    if (med > runner_ref * (1.0 + watch_margin)) {
      // The choice now takes clearly longer than the runner-up did: race them again on the
      // caller's buffers, as in the first re-check.
      ++drifts;
      drift_median = med;
      drift_ref = runner_ref;
      by_watch = true;
      state = phase::pending;
      done = 0;
      return;
    }
    period = std::min(2 * period, watch_max_period);
  }

  [[nodiscard]] std::string summary() const {
    constexpr int half = (recheck_executions - 2) / 2;
    std::string const why =
        by_watch ? "the watch saw the choice drift: median " + format_seconds(drift_median) +
                       " over its last " + std::to_string(watch_window) +
                       " forward executions, above the runner-up's " + format_seconds(drift_ref)
                 : reason;
    std::string out;
    if (state == phase::pending) {
      out = "; re-check against " + std::string(to_string(other())) + " (" + why +
            "): " + std::to_string(done) + " of " + std::to_string(recheck_executions) +
            " forward executions done";
    } else if (last == outcome::none) {
      if (!reason.empty()) out = "; re-check: " + reason;
    } else {
      out =
          std::string("; re-check ") +
          (last == outcome::switched
               ? "switched from " + std::string(to_string(other())) + " to " + to_string(chosen())
               : "confirmed " + std::string(to_string(chosen())) + " over " + to_string(other())) +
          " (" + why + "): median " + format_seconds(medians[0]) + " vs " +
          format_seconds(medians[1]) + " over " + std::to_string(half) + "+" +
          std::to_string(half) + " executions";
    }
    if (state == phase::watching) {
      out += "; watching against " + std::string(to_string(other())) + " (re-check when a " +
             std::to_string(watch_window) + "-execution median exceeds " +
             format_seconds(runner_ref * (1.0 + watch_margin)) + "): " + std::to_string(checks) +
             " check(s), " + std::to_string(drifts) + " drift(s), next check after " +
             std::to_string(std::max(period - since, watch_window - filled)) +
             " forward execution(s)";
    } else if (state == phase::none && !watch_reason.empty()) {
      out += "; watch: " + watch_reason;
    }
    return out;
  }
};

// One direction of an adaptive plan: runs the current choice's executor of that direction; the
// forward one also runs the runner-up's in the re-check's odd exchanges and times them.
class tuned_executor final : public executor {
public:
  // It waits for nothing itself (the executors it runs do), so its wait context names the
  // backend chosen at construction.
  tuned_executor(std::shared_ptr<tuning> t, int direction, schedule s, exec_config cfg)
      : executor(std::move(s), std::move(cfg), t->exec[direction][0]->kind()), t_(std::move(t)),
        dir_(direction) {
    // One area per kind, as large as either backend needs: both run on the same workspace (never
    // at once), as they did while the race timed them.
    for (int k = 0; k < 3; ++k) {
      std::size_t const n = std::max(t_->exec[dir_][0]->workspace_needs()[k],
                                     t_->exec[dir_][1]->workspace_needs()[k]);
      if (n > 0) (void)reserve(static_cast<memory_kind>(k), n);
    }
  }

  [[nodiscard]] backend kind() const noexcept override { return current().kind(); }
  [[nodiscard]] std::string wire_summary() const override { return current().wire_summary(); }
  [[nodiscard]] std::string choice_summary() const override { return t_->summary(); }

protected:
  void post(void* stream) override {
    tuning& t = *t_;
    executor* e = t.exec[dir_][0].get();
    // Every rank executes the same sequence (execution is collective), so counting forward
    // exchanges picks the same executor everywhere.
    bool const timed = dir_ == 0 && t.state != tuning::phase::none;
    double t0 = 0.0;
    if (timed) {
      if (t.state == tuning::phase::pending && t.done % 2 == 1) e = t.exec[0][1].get();
      t0 = recheck_clock();
    }
    active_ = e;
    e->start(bufs_, op_, stream, dir_ == 1);
    if (timed) {
      t.spent = recheck_clock() - t0;
      t.timing = true;
    }
  }

  void complete(void* stream) override {
    tuning& t = *t_;
    executor* e = active_;
    if (!t.timing) {
      e->wait(stream);
      active_ = nullptr;
      return;
    }
    t.timing = false;
    double const t0 = recheck_clock();
    e->wait(stream);
    active_ = nullptr;
    t.record(*e, t.spent + (recheck_clock() - t0));
  }

  void on_bind() override {
    workspace_bases const b = {ws(memory_kind::host, 0), ws(memory_kind::pinned_host, 0),
                               ws(memory_kind::device, 0)};
    for (auto& e : t_->exec[dir_]) e->bind_workspace(b);
  }

  [[nodiscard]] bool collective_requests() const noexcept override {
    return current().whole_communicator();
  }

  // The running executor withdrew its own messages when its start or wait failed; an exchange
  // abandoned in flight (the plan destroyed between start and wait) is its to withdraw.
  [[nodiscard]] bool abandon_requests(double grace) noexcept override {
    executor* e = std::exchange(active_, nullptr);
    return e == nullptr || e->abandon(grace);
  }
  // The running executor's wait cancelled the failed rank's receives itself.
  void cancel_peer(int /*peer*/) noexcept override {}

private:
  [[nodiscard]] executor const& current() const noexcept { return *t_->exec[dir_][0]; }

  std::shared_ptr<tuning> t_;
  int dir_;
  executor* active_ = nullptr; // the executor of the exchange in flight
};

} // namespace

std::string make_adaptive(selection& sel, schedule const& forward, exec_config const& cfg,
                          std::unique_ptr<executor>& fwd, std::unique_ptr<executor>& rev) {
  auto note = [&] {
    std::string out;
    if (!sel.recheck_reason.empty()) out = "; re-check: " + sel.recheck_reason;
    if (!sel.watch_reason.empty()) out += "; watch: " + sel.watch_reason;
    return out;
  };
  if (sel.runner_up == backend::automatic) return note();
  // The runner-up's executors, for the re-check (first, or when the watch asks). Failing to
  // build them only cancels both, on every rank alike.
  std::unique_ptr<executor> af = std::move(sel.runner_exec), ar;
  int bad = 0;
  try {
    if (!af) af = make_executor(sel.runner_up, forward, cfg);
    ar = make_executor(sel.runner_up, forward.reversed(), cfg);
  } catch (std::exception const&) {
    bad = 1;
  }
  HALOX_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, cfg.comm));
  if (bad) {
    sel.recheck_reason = std::string("cancelled, the runner-up ") + to_string(sel.runner_up) +
                         " could not be built on every rank";
    sel.watch_reason.clear();
    return note();
  }
  af->warm_up();
  ar->warm_up();
  auto t = std::make_shared<tuning>();
  t->comm = cfg.comm;
  t->timeout = cfg.timeout;
  t->exec[0][0] = std::move(fwd);
  t->exec[0][1] = std::move(af);
  t->exec[1][0] = std::move(rev);
  t->exec[1][1] = std::move(ar);
  t->reason = std::move(sel.recheck_reason);
  t->watch_reason = std::move(sel.watch_reason);
  t->force = sel.force_switch;
  t->watch = sel.watch;
  t->runner_ref = sel.runner_median;
  t->state = sel.recheck_first ? tuning::phase::pending : tuning::phase::watching;
  fwd = std::make_unique<tuned_executor>(t, 0, forward, cfg);
  rev = std::make_unique<tuned_executor>(t, 1, forward.reversed(), cfg);
  return {};
}

} // namespace halox::detail
