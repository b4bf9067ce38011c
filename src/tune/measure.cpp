#include "tune/measure.hpp"

#include "tune/plan_cache.hpp"
#include "tune/scratch.hpp"

#include <halox/error.hpp>

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
  tune_settings set;
  set.warmup = t.warmup;
  set.trials = t.trials;
  set.budget = t.budget_seconds;
  if (char const* env = std::getenv("HALOX_TUNE_BUDGET"); env && *env) {
    char* end = nullptr;
    double const v = std::strtod(env, &end);
    HALOX_REQUIRE(end != env && *end == '\0' && v >= 0.0, errc::invalid_argument,
                  std::string("HALOX_TUNE_BUDGET='") + env +
                      "' is not a number of seconds >= 0; set e.g. HALOX_TUNE_BUDGET=0.5");
    set.budget = v;
  }
  if (char const* env = std::getenv("HALOX_BACKEND"); env && *env) {
    backend b = backend::automatic;
    try {
      b = backend_from_string(env);
    } catch (error const& e) {
      throw error(errc::invalid_argument, std::string("HALOX_BACKEND=") + env + ": " + e.message());
    }
    HALOX_REQUIRE(b == backend::automatic || backend_available(b, mem), errc::unsupported,
                  std::string("HALOX_BACKEND=") + env + " is not available for " +
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
  long long in[9] = {local ? rank + 1LL : 0LL,
                     forced,
                     -forced,
                     set.warmup,
                     -set.warmup,
                     set.trials,
                     -set.trials,
                     budget_bits(set.budget),
                     -budget_bits(set.budget)};
  long long out[9] = {};
  HALOX_MPI_CHECK(MPI_Allreduce(in, out, 9, MPI_LONG_LONG, MPI_MAX, comm));
  if (local) std::rethrow_exception(local);
  if (out[0] != 0)
    throw error(errc::invalid_argument,
                "automatic backend selection: rank " + std::to_string(out[0] - 1) +
                    " rejected its tuning settings ($HALOX_BACKEND, $HALOX_TUNE_BUDGET or "
                    "tune_options); see the error printed there and fix them on that rank");
  if (out[1] != in[1] || out[2] != in[2])
    throw error(errc::inconsistent_ranks,
                std::string("$HALOX_BACKEND differs between ranks (") +
                    (set.forced == backend::automatic ? "unset" : to_string(set.forced)) +
                    " on this rank); set it to the same value on every rank or on none");
  for (int i = 3; i < 9; ++i)
    if (out[i] != in[i])
      throw error(errc::inconsistent_ranks,
                  "tune_options or $HALOX_TUNE_BUDGET differ between ranks (here warmup " +
                      std::to_string(set.warmup) + ", trials " + std::to_string(set.trials) +
                      ", budget " + std::to_string(set.budget) +
                      " s); pass the same values on every rank");
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
  // A rank that cannot allocate the scratch reports every candidate as unavailable rather than
  // leaving the others waiting in a collective.
  std::unique_ptr<scratch_buffers> buf;
  try {
    buf = std::make_unique<scratch_buffers>(s, cfg.memory, cfg.ctx);
  } catch (std::exception const&) {
    buf.reset();
  }
  auto const run = [&](executor& e) {
    e.start(buf->slots(), combine_op::replace, buf->stream());
    e.wait(buf->stream());
    buf->synchronize();
  };

  measurement m;
  double const t0 = now();
  double elapsed = 0.0; // max over ranks, as of the last reduction
  int measured = 0;
  std::vector<double> times(static_cast<std::size_t>(set.trials) + 1);
  for (backend b : order) {
    candidate_result r;
    r.b = b;
    if (budget_used(elapsed, set.budget, measured)) {
      r.status = candidate_status::skipped;
      m.candidates.push_back(r);
      continue;
    }
    std::unique_ptr<executor> e;
    workspace_memory ws; // after e's declaration: released after it
    if (buf) {
      try {
        e = make_executor(b, s, cfg);
        ws.reserve(cfg.ctx, e->workspace_needs());
        e->bind_workspace(ws.bases());
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
      m.candidates.push_back(r);
      continue;
    }
    for (int w = 0; w < set.warmup; ++w) run(*e);
    MPI_Request req = MPI_REQUEST_NULL;
    HALOX_MPI_CHECK(MPI_Ibarrier(cfg.comm, &req));
    wait_bounded(req, cfg.timeout, "an autotuning round (the barrier before timing)");
    for (int k = 0; k < set.trials; ++k) {
      double const a = now();
      run(*e);
      times[k] = now() - a + (hooks.skew ? hooks.skew(b, k) : 0.0);
    }
    times[set.trials] = now() - t0;
    allreduce_bounded(MPI_IN_PLACE, times.data(), set.trials + 1, MPI_DOUBLE, MPI_MAX, cfg.comm,
                      cfg.timeout, "an autotuning round (the trial times)");
    elapsed = times[set.trials];
    r.median = median(std::vector<double>(times.begin(), times.begin() + set.trials));
    r.status = candidate_status::measured;
    ++measured;
    count(tune_event::candidate_timed);
    m.candidates.push_back(r);
  }
  m.seconds = elapsed;
  return m;
}

} // namespace halox::detail
