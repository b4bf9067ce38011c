#include "tune/select.hpp"

#include "tune/measure.hpp"
#include "tune/plan_cache.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace halox::detail {

namespace {

// Candidate outcomes travel in a broadcast as one double per backend enumerator.
constexpr double code_unavailable = -1.0;
constexpr double code_skipped = -2.0;
constexpr double code_absent = -3.0;

bool verbose(int rank) {
  if (rank != 0) return false;
  char const* v = std::getenv("HALOX_VERBOSE");
  return v && *v && std::strcmp(v, "0") != 0;
}

// The backend automatic selection used to return, measured first (see trial_order).
backend default_backend(std::vector<backend> const& available, memory_space mem) {
  backend const d = mem == memory_space::host ? backend::mpi_pack : backend::staged_mpi;
  return std::find(available.begin(), available.end(), d) != available.end() ? d : available[0];
}

std::vector<double> encode(cache_entry const& e, cache_source src) {
  std::vector<double> msg(2 + backend_count, code_absent);
  msg[0] = src == cache_source::memory ? 1.0 : 2.0;
  msg[1] = static_cast<double>(e.chosen);
  for (auto const& c : e.candidates)
    msg[2 + static_cast<int>(c.b)] = c.status == candidate_status::measured  ? c.median
                                     : c.status == candidate_status::skipped ? code_skipped
                                                                             : code_unavailable;
  return msg;
}

cache_entry decode(std::vector<double> const& msg) {
  cache_entry e;
  e.chosen = static_cast<backend>(static_cast<int>(msg[1]));
  for (int i = 0; i < backend_count; ++i) {
    double const v = msg[2 + i];
    if (v == code_absent) continue;
    candidate_result r;
    r.b = static_cast<backend>(i);
    r.status = v >= 0.0            ? candidate_status::measured
               : v == code_skipped ? candidate_status::skipped
                                   : candidate_status::unavailable;
    r.median = v >= 0.0 ? v : 0.0;
    e.candidates.push_back(r);
  }
  return e;
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
  bool const log = verbose(rank);

  tune_settings const set = agree_settings(cfg.comm, tune, cfg.memory);
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
  std::vector<double> msg(2 + backend_count, code_absent);
  msg[0] = 0.0;
  if (rank == 0)
    if (auto hit = cache_lookup(k, file); hit && backend_available(hit->entry.chosen, cfg.memory))
      msg = encode(hit->entry, hit->source);
  HALOX_MPI_CHECK(MPI_Bcast(msg.data(), static_cast<int>(msg.size()), MPI_DOUBLE, 0, cfg.comm));
  if (msg[0] != 0.0) {
    cache_entry const e = decode(msg);
    bool const from_file = msg[0] == 2.0;
    if (rank != 0) cache_store(k, e, "", false);
    count(from_file ? tune_event::file_hit : tune_event::memory_hit);
    sel.chosen = e.chosen;
    sel.candidates = e.candidates;
    sel.report = std::string("auto: from the plan cache (") + (from_file ? "file" : "memory") +
                 "), as measured then: " + format_candidates(e.candidates, e.chosen);
    if (log)
      tune_log("halox: backend " + std::string(to_string(sel.chosen)) + " for " + key_text +
               " from the plan cache" + (from_file ? " file " + file : std::string(" (memory)")));
    return sel;
  }

  measurement const m = measure_candidates(trial_order(available, fallback), s, cfg, set);
  int const best = pick_fastest(m.candidates);
  HALOX_REQUIRE(best >= 0, errc::unsupported,
                "automatic selection could not build any candidate backend for this plan (" +
                    format_candidates(m.candidates, backend::automatic) +
                    "); request a backend explicitly to see its error");
  sel.chosen = m.candidates[best].b;
  sel.candidates = m.candidates;
  cache_store(k, cache_entry{sel.chosen, m.candidates}, file, rank == 0);
  count(tune_event::measured);
  sel.report = "auto: measured in " + format_seconds(m.seconds) + ", median of " +
               std::to_string(set.trials) + " trial(s) of the max over " + std::to_string(size) +
               " rank(s) after " + std::to_string(set.warmup) +
               " warm-up(s): " + format_candidates(m.candidates, sel.chosen);
  if (log)
    tune_log("halox: backend " + std::string(to_string(sel.chosen)) + " for " + key_text + " (" +
             sel.report + ")");
  return sel;
}

} // namespace halox::detail
