#include "tune/measure.hpp"

#include "common/environment.hpp"
#include "tune/plan_cache.hpp"
#include "tune/scratch_buffers.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>

namespace halox::detail {

namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 1099511628211ull;
}

std::uint64_t mix_region(std::uint64_t h, region const& r) {
  h = mix(h, static_cast<std::uint64_t>(r.slot));
  h = mix(h, static_cast<std::uint64_t>(r.b.nd));
  for (int d = 0; d < r.b.nd; ++d) {
    h = mix(h, static_cast<std::uint64_t>(r.b.lo[d]));
    h = mix(h, static_cast<std::uint64_t>(r.b.hi[d]));
  }
  return h;
}

// Everything about this rank's schedule that can change which backend is fastest: buffer
// layouts (strides decide contiguity), peers, message sizes and the regions they are made of.
std::uint64_t schedule_hash(schedule const& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (auto const& l : s.slots) {
    h = mix(h, static_cast<std::uint64_t>(l.elements));
    h = mix(h, l.elem_size);
    h = mix(h, static_cast<std::uint64_t>(l.type));
    for (auto st : l.strides) h = mix(h, static_cast<std::uint64_t>(st));
  }
  for (auto const* side : {&s.sends, &s.recvs}) {
    h = mix(h, side->size());
    for (auto const& m : *side) {
      h = mix(mix(h, static_cast<std::uint64_t>(m.peer)), m.bytes);
      for (auto const& r : m.regions) h = mix_region(h, r);
    }
  }
  h = mix(h, s.copies.size());
  for (auto const& c : s.copies) h = mix_region(mix_region(h, c.src), c.dst);
  h = mix(h, s.fills.size());
  for (auto const& f : s.fills) h = mix_region(h, f);
  return h;
}

long long budget_bits(double b) {
  if (b == 0.0) b = 0.0; // -0.0 and 0.0 must compare equal as integers
  long long v = 0;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

std::string available_names(memory_space mem) {
  std::string out;
  for (backend b : mem == memory_space::host ? host_backends() : device_backends())
    out += std::string(out.empty() ? "" : ", ") + to_string(b);
  return out.empty() ? "none" : out;
}

tune_settings local_settings(tune_options const& t, memory_space mem) {
  HALOX_REQUIRE(t.warmup >= 0 && t.warmup <= 1000, errc::invalid_argument,
                "tune_options::warmup = " + std::to_string(t.warmup) +
                    " is outside [0, 1000]; use a few untimed runs, e.g. 2");
  HALOX_REQUIRE(t.trials >= 1 && t.trials <= 1000, errc::invalid_argument,
                "tune_options::trials = " + std::to_string(t.trials) +
                    " is outside [1, 1000]; use a few timed runs, e.g. 5");
  HALOX_REQUIRE(t.budget_seconds >= 0.0, errc::invalid_argument,
                "tune_options::budget_seconds = " + std::to_string(t.budget_seconds) +
                    " must be a number of seconds >= 0");
  HALOX_REQUIRE(t.max_rounds >= t.trials && t.max_rounds <= 100000, errc::invalid_argument,
                "tune_options::max_rounds = " + std::to_string(t.max_rounds) +
                    " is outside [trials = " + std::to_string(t.trials) + ", 100000]; use e.g. 64");
  tune_settings set;
  set.warmup = t.warmup;
  set.trials = t.trials;
  set.max_rounds = t.max_rounds;
  set.budget = t.budget_seconds;
  set.recheck = t.recheck ? recheck_mode::on : recheck_mode::off;
  set.watch = t.watch;
  namespace settings = detail::settings;
  if (auto const v = settings::tune_max_rounds(set.trials)) set.max_rounds = *v;
  if (auto const v = settings::tune_recheck()) {
    switch (*v) {
    case settings::recheck::off: set.recheck = recheck_mode::off; break;
    case settings::recheck::on: set.recheck = recheck_mode::on; break;
    case settings::recheck::always: set.recheck = recheck_mode::always; break;
    case settings::recheck::force_switch: set.recheck = recheck_mode::force; break;
    }
  }
  if (auto const v = settings::tune_watch()) set.watch = *v;
  if (auto const v = settings::tune_budget_seconds()) set.budget = *v;
  set.verbose = settings::verbose().value_or(false);
  if (auto const name = settings::backend()) {
    backend b = backend::automatic;
    try {
      b = backend_from_string(*name);
    } catch (error const& e) {
      throw error(errc::invalid_argument, "HALOX_BACKEND=" + *name + ": " + e.message());
    }
    HALOX_REQUIRE(b == backend::automatic || backend_available(b, mem), errc::unsupported,
                  "HALOX_BACKEND=" + *name + " is not available for " +
                      (mem == memory_space::host ? "host" : "device") +
                      " memory in this build; available: " + available_names(mem));
    set.forced = b;
  }
  return set;
}

} // namespace

tune_settings agree_settings(MPI_Comm comm, tune_options const& t, memory_space mem) {
  tune_settings set;
  std::exception_ptr local;
  try {
    set = local_settings(t, mem);
  } catch (...) {
    local = std::current_exception();
  }
  int rank = 0;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  auto const forced = static_cast<long long>(set.forced);
  auto const recheck = static_cast<long long>(set.recheck);
  long long const watch = set.watch ? 1 : 0;
  constexpr int n = 15;
  long long in[n] = {local ? rank + 1LL : 0LL,
                     forced,
                     -forced,
                     set.warmup,
                     -set.warmup,
                     set.trials,
                     -set.trials,
                     budget_bits(set.budget),
                     -budget_bits(set.budget),
                     set.max_rounds,
                     -set.max_rounds,
                     recheck,
                     -recheck,
                     watch,
                     -watch};
  long long out[n] = {};
  HALOX_MPI_CHECK(MPI_Allreduce(in, out, n, MPI_LONG_LONG, MPI_MAX, comm));
  if (local) std::rethrow_exception(local);
  if (out[0] != 0)
    throw error(errc::invalid_argument,
                "automatic backend selection: rank " + std::to_string(out[0] - 1) +
                    " rejected its tuning settings ($HALOX_BACKEND, $HALOX_TUNE_* or "
                    "tune_options); see the error printed there and fix them on that rank");
  if (out[1] != in[1] || out[2] != in[2])
    throw error(errc::inconsistent_ranks,
                std::string("$HALOX_BACKEND differs between ranks (") +
                    (set.forced == backend::automatic ? "unset" : to_string(set.forced)) +
                    " on this rank); set it to the same value on every rank or on none");
  for (int i = 3; i < n; ++i)
    if (out[i] != in[i])
      throw error(errc::inconsistent_ranks,
                  "tune_options or $HALOX_TUNE_BUDGET differ between ranks (here warmup " +
                      std::to_string(set.warmup) + ", trials " + std::to_string(set.trials) +
                      ", budget " + std::to_string(set.budget) + " s, max_rounds " +
                      std::to_string(set.max_rounds) + ", recheck " +
                      std::to_string(static_cast<int>(set.recheck)) + ", watch " +
                      (set.watch ? "on" : "off") +
                      "; $HALOX_TUNE_MAX_ROUNDS, $HALOX_TUNE_RECHECK and $HALOX_TUNE_WATCH count "
                      "too); pass the same values on every rank");
  return set;
}

cache_key make_cache_key(MPI_Comm comm, schedule const& s, memory_space mem,
                         std::uint64_t geometry) {
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(comm, &size));
  // Wrapping sums: the digest depends on which rank holds which schedule, not on timing.
  unsigned long long in[3] = {mix(schedule_hash(s), static_cast<std::uint64_t>(rank)),
                              s.sends.size(), s.send_bytes()};
  unsigned long long out[3] = {};
  HALOX_MPI_CHECK(MPI_Allreduce(in, out, 3, MPI_UNSIGNED_LONG_LONG, MPI_SUM, comm));
  cache_key k;
  k.geometry = geometry;
  k.schedule = out[0];
  k.ranks = size;
  k.slots = static_cast<int>(s.slots.size());
  k.messages = out[1];
  k.bytes = out[2];
  k.memory = mem;
  k.device = device_kind(mem);
  return k;
}

measurement measure_candidates(std::vector<backend> const& order, schedule const& s,
                               exec_config const& cfg, tune_settings const& set) {
  auto const& hooks = test_hooks();
  auto const now = [&] { return hooks.clock ? hooks.clock() : MPI_Wtime(); };
  // Two distinct sets of scratch buffers with the plan's slot layouts. A rank that cannot
  // allocate them reports every candidate as unavailable rather than leaving the others waiting
  // in a collective.
  std::unique_ptr<scratch_buffers> buf[2];
  try {
    buf[0] = std::make_unique<scratch_buffers>(s, cfg.memory, cfg.ctx);
    buf[1] = std::make_unique<scratch_buffers>(s, cfg.memory, cfg.ctx);
  } catch (std::exception const&) {
    buf[0].reset();
    buf[1].reset();
  }
  // Every rank must agree before building: building an executor can be collective (the UCX
  // worker's address exchange, the NCCL communicator), so a rank without scratch must not skip
  // it while the others enter it.
  {
    int missing = buf[0] ? 0 : 1;
    allreduce_bounded(MPI_IN_PLACE, &missing, 1, MPI_INT, MPI_MAX, cfg.comm, cfg.timeout,
                      "an autotuning round (the tuning scratch buffers)");
    if (missing) {
      buf[0].reset();
      buf[1].reset();
    }
  }
  auto const run = [&](executor& e, int set_index) {
    scratch_buffers& b = *buf[set_index];
    e.start(b.slots(), combine_op::replace, b.stream());
    e.wait(b.stream());
    b.synchronize();
  };
  // Every timed exchange starts with the ranks lined up, as an exchange between two phases of
  // computation does (and as halox-bench times it). Back to back, a rank that finished early
  // starts the next exchange early, so where data flows one way (an upwind halo, a gather) a
  // backend whose sender waits less looks slower than it is: the race then times how the
  // exchanges of two plans overlap, not how long one takes. A bounded barrier (no hang).
  auto const line_up = [&] {
    MPI_Request req = MPI_REQUEST_NULL;
    HALOX_MPI_CHECK(MPI_Ibarrier(cfg.comm, &req));
    wait_bounded(req, cfg.timeout, "an autotuning round (lining the ranks up)");
  };

  measurement m;
  double const t0 = now();
  double elapsed = 0.0; // max over ranks, as of the last reduction
  int built_count = 0;
  // Phase 1: build every candidate (until the budget is used), as the plan would.
  std::vector<std::unique_ptr<executor>> execs;
  for (backend b : order) {
    candidate_result r;
    r.b = b;
    if (budget_used(elapsed, set.budget, built_count)) {
      r.status = candidate_status::skipped;
      m.candidates.push_back(r);
      execs.emplace_back();
      continue;
    }
    std::unique_ptr<executor> e;
    if (buf[0]) {
      try {
        e = make_executor(b, s, cfg);
      } catch (std::exception const&) {
        e.reset();
      }
    }
    double built[2] = {e ? 0.0 : 1.0, now() - t0};
    allreduce_bounded(MPI_IN_PLACE, built, 2, MPI_DOUBLE, MPI_MAX, cfg.comm, cfg.timeout,
                      "an autotuning round (building a candidate)");
    elapsed = built[1];
    if (built[0] != 0.0) {
      r.status = candidate_status::unavailable;
      e.reset();
    } else {
      r.status = candidate_status::measured;
      ++built_count;
    }
    m.candidates.push_back(r);
    execs.push_back(std::move(e));
  }
  if (built_count == 0) {
    m.seconds = elapsed;
    return m;
  }

  // Phase 2: one workspace for all of them (never in flight together), then warm-ups
  // alternating between the buffer sets. A rank whose workspace cannot be allocated must not
  // leave the others in a collective: all agree, and the plan then fails as a whole.
  workspace_memory ws;
  {
    std::array<std::size_t, 3> need{};
    for (auto const& e : execs)
      if (e)
        for (int k = 0; k < 3; ++k) need[k] = std::max(need[k], e->workspace_needs()[k]);
    int bad = 0;
    try {
      ws.reserve(cfg.ctx, need);
    } catch (std::exception const&) {
      bad = 1;
    }
    allreduce_bounded(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, cfg.comm, cfg.timeout,
                      "an autotuning round (the tuning workspace)");
    if (bad) {
      for (auto& c : m.candidates)
        if (c.status == candidate_status::measured) c.status = candidate_status::unavailable;
      m.seconds = elapsed;
      return m;
    }
  }
  std::vector<contestant> race;
  std::vector<int> cand_of; // race index -> candidate index
  for (std::size_t i = 0; i < execs.size(); ++i) {
    if (!execs[i]) continue;
    execs[i]->bind_workspace(ws.bases());
    // The transport's own warm-up (UCX wires endpoints lazily) first, as the plan's executor
    // gets it: the race then times what a user's exchanges take.
    execs[i]->warm_up();
    int const warm = set.warmup;
    backend const b = m.candidates[i].b;
    for (int w = 0; w < warm; ++w) run(*execs[i], w % 2);
    contestant c;
    c.b = b;
    race.push_back(c);
    cand_of.push_back(static_cast<int>(i));
    count(tune_event::candidate_timed);
  }

  // Phase 3: interleaved rounds until the race is decided.
  race_limits lim;
  lim.min_rounds = set.trials;
  lim.max_rounds = set.max_rounds;
  lim.budget = set.budget;
  std::vector<double> round_times;
  std::vector<int> order_now;
  race_verdict v;
  int const n = static_cast<int>(race.size());
  for (int round = 0;; ++round) {
    order_now.clear();
    for (int i = 0; i < n; ++i) {
      int const j = (i + round) % n; // rotate who goes first, so position biases nobody
      if (race[j].active) order_now.push_back(j);
    }
    round_times.assign(static_cast<std::size_t>(n) + 1, 0.0);
    for (int j : order_now) {
      executor& e = *execs[static_cast<std::size_t>(cand_of[j])];
      // The faster of two exchanges, one per buffer set: both pay for the buffers moving, but
      // a round is spoilt by a preempted rank only when both exchanges are.
      line_up();
      double const a = now();
      run(e, 0);
      double const b = now();
      line_up();
      double const b2 = now();
      run(e, 1);
      double const c = now();
      round_times[j] = std::min(b - a, c - b2) + (hooks.skew ? hooks.skew(race[j].b, round) : 0.0);
    }
    round_times[n] = now() - t0;
    allreduce_bounded(MPI_IN_PLACE, round_times.data(), n + 1, MPI_DOUBLE, MPI_MAX, cfg.comm,
                      cfg.timeout, "an autotuning round (the round times)");
    elapsed = round_times[n];
    for (int j : order_now) race[j].times.push_back(round_times[j]);
    m.rounds = round + 1;
    v = judge_race(race, m.rounds, elapsed, lim);
    for (int j : v.drop) race[j].active = false;
    if (v.stop) break;
  }

  for (int j = 0; j < n; ++j) {
    auto const iv = median_ci(race[j].times);
    auto& r = m.candidates[static_cast<std::size_t>(cand_of[j])];
    r.median = iv.median;
    r.lo = iv.lo;
    r.hi = iv.hi;
    r.rounds = static_cast<int>(race[j].times.size());
  }
  m.seconds = elapsed;
  m.separated = v.separated;
  m.winner = cand_of[v.leader];
  m.runner_up = v.runner_up >= 0 ? cand_of[v.runner_up] : -1;
  m.winner_exec = std::move(execs[static_cast<std::size_t>(m.winner)]);
  m.winner_exec->unbind_workspace();
  if (m.runner_up >= 0) {
    m.runner_exec = std::move(execs[static_cast<std::size_t>(m.runner_up)]);
    m.runner_exec->unbind_workspace();
  }
  return m;
}

} // namespace halox::detail
