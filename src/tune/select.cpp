#include "tune/select.hpp"

#include "tune/measure.hpp"
#include "tune/plan_cache.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace halox::detail {

namespace {

// The backend automatic selection used to return, measured first (see trial_order).
backend default_backend(std::vector<backend> const& available, memory_space mem) {
  backend const d = mem == memory_space::host ? backend::mpi_pack : backend::staged_mpi;
  return std::find(available.begin(), available.end(), d) != available.end() ? d : available[0];
}

// A cached decision travels as a header {found (0 none, 1 memory, 2 file), chosen, candidates}
// and, when found, six doubles per candidate: backend, status, median, lo, hi, rounds. Nothing
// here depends on how many backends the build has.
constexpr int fields = 6;

std::vector<double> encode(cache_entry const& e) {
  std::vector<double> msg;
  for (auto const& c : e.candidates) {
    msg.push_back(static_cast<double>(c.b));
    msg.push_back(static_cast<double>(c.status));
    msg.push_back(c.median);
    msg.push_back(c.lo);
    msg.push_back(c.hi);
    msg.push_back(static_cast<double>(c.rounds));
  }
  return msg;
}

cache_entry decode(backend chosen, std::vector<double> const& msg) {
  cache_entry e;
  e.chosen = chosen;
  for (std::size_t i = 0; i + fields <= msg.size(); i += fields) {
    candidate_result r;
    r.b = static_cast<backend>(static_cast<int>(msg[i]));
    r.status = static_cast<candidate_status>(static_cast<int>(msg[i + 1]));
    r.median = msg[i + 2];
    r.lo = msg[i + 3];
    r.hi = msg[i + 4];
    r.rounds = static_cast<int>(msg[i + 5]);
    e.candidates.push_back(r);
  }
  return e;
}

// Shortest chosen-backend median the watch times: below it, reading the clock around every
// execution and the all-reduce of each check would cost more than a drift could.
constexpr double watch_min_seconds = 20e-6;

// Runner-up medians within this fraction of the choice's are a close call: re-checked.
constexpr double recheck_close = 0.10;

// The entry of backend `b` in `c`, or null.
candidate_result const* find_candidate(std::vector<candidate_result> const& c, backend b) {
  for (auto const& r : c)
    if (r.b == b) return &r;
  return nullptr;
}

// Whether the plan re-checks `chosen` against the runner-up in its first executions, and
// whether it watches the choice afterwards: only for host memory (both time start/wait on the
// host, which does not cover a device stream's work). The first re-check by mode (`on`: only
// when the intervals overlapped); the watch whenever there is a runner-up, the re-check is not
// off, and the choice takes at least watch_min_seconds.
void plan_recheck(selection& sel, tune_settings const& set, memory_space mem, bool separated,
                  int runner_index) {
  if (runner_index < 0) {
    sel.recheck_reason = "no runner-up";
    return;
  }
  if (set.recheck == recheck_mode::off) {
    sel.recheck_reason = "off";
    return;
  }
  if (mem != memory_space::host) {
    sel.recheck_reason = "off for device memory";
    return;
  }
  candidate_result const& runner = sel.candidates[static_cast<std::size_t>(runner_index)];
  candidate_result const* const chosen = find_candidate(sel.candidates, sel.chosen);
  double const chosen_median = chosen ? chosen->median : 0.0;
  // A close call is re-checked even when the intervals separated: the race ran on scratch
  // buffers right after the executors were built, and two backends within a few percent there
  // can be far apart on the caller's buffers (ucx_iov vs mpi_datatype: 18.5 vs 17.5 us in the
  // race, 11 vs 17.8 us in the loop that followed).
  bool const close = runner.median < chosen_median * (1.0 + recheck_close);
  sel.recheck_first = set.recheck != recheck_mode::on || !separated || close;
  if (!set.watch)
    sel.watch_reason = "off";
  else if (chosen_median < watch_min_seconds)
    sel.watch_reason = "not needed below " + format_seconds(watch_min_seconds);
  else
    sel.watch = true;
  if (!sel.recheck_first) sel.recheck_reason = "not needed, intervals separated";
  if (!sel.recheck_first && !sel.watch) return;
  sel.runner_up = runner.b;
  sel.runner_median = runner.median;
  if (!sel.recheck_first) return;
  sel.force_switch = set.recheck == recheck_mode::force;
  sel.recheck_reason =
      set.recheck != recheck_mode::on
          ? (sel.force_switch ? "HALOX_TUNE_RECHECK=switch forces a switch"
                              : "HALOX_TUNE_RECHECK=always")
      : !separated
          ? "intervals overlapped"
          : "medians within " + std::to_string(static_cast<int>(recheck_close * 100)) + " %";
}

} // namespace

selection select_backend(backend requested, schedule const& s, exec_config const& cfg,
                         tune_options const& tune, std::uint64_t key) {
  selection sel;
  if (requested != backend::automatic) {
    sel.chosen = requested;
    sel.report = "requested";
    return sel;
  }
  int rank = 0, size = 1;
  HALOX_MPI_CHECK(MPI_Comm_rank(cfg.comm, &rank));
  HALOX_MPI_CHECK(MPI_Comm_size(cfg.comm, &size));
  tune_settings const set = agree_settings(cfg.comm, tune, cfg.memory);
  bool const log = rank == 0 && set.verbose;
  if (set.forced != backend::automatic) {
    sel.chosen = set.forced;
    sel.report = std::string("forced by HALOX_BACKEND=") + to_string(set.forced);
    count(tune_event::forced);
    if (log) tune_log("halox: backend " + std::string(to_string(sel.chosen)) + " " + sel.report);
    return sel;
  }

  auto const available = cfg.memory == memory_space::host ? host_backends() : device_backends();
  HALOX_REQUIRE(!available.empty(), errc::unsupported,
                "automatic selection found no backend for device memory in this build; rebuild "
                "halox with -DHALOX_ENABLE_CUDA=ON or plan on host memory");
  backend const fallback = default_backend(available, cfg.memory);

  cache_key const k = make_cache_key(cfg.comm, s, cfg.memory, key);
  std::string const key_text = format_key(k);
  if (k.messages == 0) {
    sel.chosen = fallback;
    sel.report = "auto: no messages to exchange, nothing to measure";
    count(tune_event::trivial);
    if (log)
      tune_log("halox: backend " + std::string(to_string(sel.chosen)) + " for " + key_text + " (" +
               sel.report + ")");
    return sel;
  }

  // Rank 0 alone consults the cache (and its file) and broadcasts what it found, so ranks with
  // different files, environments or process histories can never diverge.
  std::string const file = rank == 0 ? cache_file_path(tune.cache_file) : std::string();
  double head[3] = {0.0, 0.0, 0.0};
  std::vector<double> body;
  if (rank == 0)
    if (auto hit = cache_lookup(k, file); hit && backend_available(hit->entry.chosen, cfg.memory)) {
      body = encode(hit->entry);
      head[0] = hit->source == cache_source::memory ? 1.0 : 2.0;
      head[1] = static_cast<double>(hit->entry.chosen);
      head[2] = static_cast<double>(hit->entry.candidates.size());
    }
  HALOX_MPI_CHECK(MPI_Bcast(head, 3, MPI_DOUBLE, 0, cfg.comm));
  if (head[0] != 0.0) {
    body.resize(static_cast<std::size_t>(head[2]) * fields);
    HALOX_MPI_CHECK(MPI_Bcast(body.data(), static_cast<int>(body.size()), MPI_DOUBLE, 0, cfg.comm));
    cache_entry const e = decode(static_cast<backend>(static_cast<int>(head[1])), body);
    bool const from_file = head[0] == 2.0;
    if (rank != 0) cache_store(k, e, "", false);
    count(from_file ? tune_event::file_hit : tune_event::memory_hit);
    sel.chosen = e.chosen;
    sel.candidates = e.candidates;
    sel.report = std::string("auto: from the plan cache (") + (from_file ? "file" : "memory") +
                 "), as measured then: " + format_candidates(e.candidates, e.chosen);
    // The runner-up must still be available in this build (a file may name others).
    int runner = second_best(e.candidates, e.chosen);
    if (runner >= 0 &&
        !backend_available(e.candidates[static_cast<std::size_t>(runner)].b, cfg.memory))
      runner = -1;
    bool separated = true;
    if (auto const* c = find_candidate(e.candidates, e.chosen); c && runner >= 0)
      separated = intervals_separated(*c, e.candidates[static_cast<std::size_t>(runner)]);
    plan_recheck(sel, set, cfg.memory, separated, runner);
    if (log)
      tune_log("halox: backend " + std::string(to_string(sel.chosen)) + " for " + key_text +
               " from the plan cache" + (from_file ? " file " + file : std::string(" (memory)")));
    return sel;
  }

  measurement m = measure_candidates(trial_order(available, fallback), s, cfg, set);
  HALOX_REQUIRE(m.winner >= 0, errc::unsupported,
                "automatic selection could not build any candidate backend for this plan (" +
                    format_candidates(m.candidates, backend::automatic) +
                    "); request a backend explicitly to see its error");
  sel.chosen = m.candidates[static_cast<std::size_t>(m.winner)].b;
  sel.candidates = m.candidates;
  sel.chosen_exec = std::move(m.winner_exec);
  cache_store(k, cache_entry{sel.chosen, m.candidates}, file, rank == 0);
  count(tune_event::measured);
  sel.report = "auto: measured in " + format_seconds(m.seconds) + ", " + std::to_string(m.rounds) +
               " round(s) of the max over " + std::to_string(size) + " rank(s) after " +
               std::to_string(set.warmup) + " warm-up(s), " +
               (m.runner_up < 0 ? "one candidate"
                : m.separated   ? "95% intervals separated"
                                : "95% intervals overlapping") +
               ": " + format_candidates(m.candidates, sel.chosen);
  plan_recheck(sel, set, cfg.memory, m.separated, m.runner_up);
  if (sel.runner_up != backend::automatic) sel.runner_exec = std::move(m.runner_exec);
  if (log)
    tune_log("halox: backend " + std::string(to_string(sel.chosen)) + " for " + key_text + " (" +
             sel.report + ")");
  return sel;
}

} // namespace halox::detail
