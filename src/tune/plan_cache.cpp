#include "tune/plan_cache.hpp"

#include "common/environment.hpp"

#include <halox/config.hpp>
#include <halox/info.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <sstream>

namespace halox::detail {

namespace {

struct memory_entry {
  cache_entry entry;
  cache_source source = cache_source::memory;
};

/// Whether a named cache file may be used and written.
enum class file_state {
  needs_header, ///< absent, empty or comments only: the next store writes the header first
  trusted,      ///< has this process's header
  rejected      ///< foreign, corrupt or unwritable: neither used nor written
};

struct cache_state {
  std::mutex mutex;
  std::map<std::string, memory_entry> entries; // full_key -> decision
  std::map<std::string, file_state> files;     // path -> what reading it found
  std::string mpi_library;                     // fetched once (MPI_Get_library_version)
};

cache_state& state() {
  static cache_state s;
  return s;
}

std::atomic<std::uint64_t> counters[6];

std::string const& mpi_library(cache_state& s) {
  if (s.mpi_library.empty()) s.mpi_library = halox::mpi_library_version();
  return s.mpi_library;
}

// Reads `path` into memory unless it was read before. Caller holds the mutex.
file_state load_file(cache_state& s, std::string const& path) {
  if (auto it = s.files.find(path); it != s.files.end()) return it->second;
  auto const r = read_cache_file(path);
  if (r.status == cache_file_read::outcome::absent)
    return s.files[path] = file_state::needs_header; // created on the first store
  if (r.status == cache_file_read::outcome::unsuitable) {
    tune_log("halox warning: plan cache " + path + " ignored (" + r.problem +
             "); backends will be measured and the file will not be modified; set "
             "HALOX_PLAN_CACHE or tune_options::cache_file to a regular file");
    return s.files[path] = file_state::rejected;
  }
  auto const c = parse_cache_file(r.text, mpi_library(s), halox_version());
  using verdict = cache_file_contents::verdict;
  if (c.status == verdict::foreign || c.status == verdict::corrupt) {
    tune_log("halox warning: plan cache " + path + " ignored (" +
             (c.status == verdict::foreign ? "foreign" : "corrupt") + ": " + c.problem +
             "); backends will be measured and the file will not be modified; delete it or set "
             "HALOX_PLAN_CACHE to another file (one per MPI library and halox version)");
    return s.files[path] = file_state::rejected;
  }
  if (c.status == verdict::empty) return s.files[path] = file_state::needs_header;
  for (auto const& [key, e] : c.entries) {
    std::string const full =
        key + " mpi=" + key_token(mpi_library(s)) + " halox=" + key_token(halox_version());
    // A decision made in this process is at least as fresh as one read from the file.
    if (s.entries.count(full) == 0)
      s.entries[full] = {e, cache_source::file};
    else if (s.entries[full].source == cache_source::file)
      s.entries[full].entry = e;
  }
  return s.files[path] = file_state::trusted;
}

} // namespace

tune_hooks& test_hooks() {
  static tune_hooks h;
  return h;
}

void tune_log(std::string const& line) {
  auto const& h = test_hooks();
  if (h.log)
    h.log(line);
  else
    std::fprintf(stderr, "%s\n", line.c_str());
}

void count(tune_event e) noexcept {
  counters[static_cast<int>(e)].fetch_add(1, std::memory_order_relaxed);
}

std::string halox_version() { return HALOX_VERSION_STRING; }

std::string cache_file_path(std::string const& configured) {
  if (!configured.empty()) return configured;
  return settings::plan_cache().value_or(std::string());
}

std::optional<cache_hit> cache_lookup(cache_key const& key, std::string const& file) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!file.empty()) load_file(s, file);
  auto const it = s.entries.find(full_key(key, mpi_library(s), halox_version()));
  if (it == s.entries.end()) return std::nullopt;
  return cache_hit{it->second.entry, it->second.source};
}

void cache_store(cache_key const& key, cache_entry const& e, std::string const& file,
                 bool write_file) {
  auto& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.entries[full_key(key, mpi_library(s), halox_version())] = {e, cache_source::memory};
  if (!write_file || file.empty()) return;
  file_state const st = load_file(s, file);
  if (st == file_state::rejected) return;
  // One write of whole lines per decision, in append mode, keeps concurrent writers' lines
  // intact; a header written twice by two racing processes is accepted by the parser.
  std::string text = st == file_state::needs_header
                         ? cache_file_header(mpi_library(s), halox_version())
                         : std::string();
  text += format_entry(format_key(key), e);
  if (append_cache_file(file, text)) {
    s.files[file] = file_state::trusted;
  } else {
    tune_log("halox warning: could not write the plan cache " + file +
             "; decisions stay in memory only");
    s.files[file] = file_state::rejected;
  }
}

} // namespace halox::detail

namespace halox {

tune_statistics tune_stats() noexcept {
  using detail::counters;
  tune_statistics t;
  t.measured = counters[0].load();
  t.memory_hits = counters[1].load();
  t.file_hits = counters[2].load();
  t.forced = counters[3].load();
  t.trivial = counters[4].load();
  t.candidates_timed = counters[5].load();
  return t;
}

void clear_plan_cache() {
  auto& s = detail::state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.entries.clear();
  s.files.clear();
}

} // namespace halox
