#pragma once
// The plan cache's key, its text file format (pure: no MPI) and the guarded reads and appends
// of the file itself.
//
// A file is line-based:
//
//   # comment lines and blank lines are ignored anywhere
//   halox-plan-cache 2                      <- format version (1 is still read)
//   mpi MPICH Version: 4.2.0 ...            <- MPI_Get_library_version, first line
//   halox 0.1.0                             <- halox version
//   geom=... sched=... ranks=2 slots=1 msgs=4 bytes=512 mem=host dev=host -> mpi_pack
//   mpi_pack=1.2e-05/1.1e-05/1.3e-05/20 ...
//
// Each entry is the key, " -> ", the chosen backend, then `name=median/lo/hi/rounds` (seconds,
// the median's confidence interval, rounds timed; version 1 wrote `name=median` alone, still
// read) or `name=unavailable` / `name=skipped` for every candidate. A later entry for the same key
// wins.

#include "tune/decision.hpp"

#include <halox/backend.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace halox::detail {

/// Version of the file format written by this halox.
inline constexpr int cache_format_version = 2;
/// Larger files are refused unread (a plan cache holds a few lines per plan).
inline constexpr std::size_t max_cache_file_bytes = std::size_t{64} << 20;

/// Everything, besides the MPI library and the halox version (carried by the file header), that
/// determines the outcome of a selection. Identical on every rank of the plan.
struct cache_key {
  std::uint64_t geometry = 0; ///< the plan's geometry hash (descriptors, options)
  std::uint64_t schedule = 0; ///< digest of every rank's schedule shape (slots, peers, regions)
  int ranks = 0;              ///< communicator size
  int slots = 0;              ///< buffers per exchange
  std::uint64_t messages = 0; ///< messages per exchange, summed over ranks
  std::uint64_t bytes = 0;    ///< bytes per exchange, summed over ranks
  memory_space memory = memory_space::host;
  std::string device = "host"; ///< CUDA device name for device plans
};

/// A decision worth remembering.
struct cache_entry {
  backend chosen = backend::mpi_pack;
  std::vector<candidate_result> candidates; ///< as measured when the decision was made
};

/// `s` with whitespace, '=' and control characters replaced by '_' (so it is one key token).
[[nodiscard]] std::string key_token(std::string const& s);
/// "geom=<16 hex> sched=<16 hex> ranks=N slots=N msgs=N bytes=N mem=host|device dev=<token>".
[[nodiscard]] std::string format_key(cache_key const& k);
/// The in-memory cache key: `format_key(k)` plus the MPI library and the halox version.
[[nodiscard]] std::string full_key(cache_key const& k, std::string const& mpi_library,
                                   std::string const& halox_version);

/// The header lines (each ending in '\n') of a cache file written by this process.
[[nodiscard]] std::string cache_file_header(std::string const& mpi_library,
                                            std::string const& halox_version);
/// One entry line (ending in '\n').
[[nodiscard]] std::string format_entry(std::string const& key_text, cache_entry const& e);

/// What a cache file held.
struct cache_file_contents {
  enum class verdict {
    ok,      ///< header matches this process; `entries` are usable
    empty,   ///< no header at all (a new or empty file): nothing to use, safe to write
    foreign, ///< another format version, MPI library or halox version: not trusted
    corrupt  ///< unreadable header or entry: not trusted
  };
  verdict status = verdict::empty;
  std::string problem; ///< why it is not trusted (for the warning), "" when ok/empty
  std::vector<std::pair<std::string, cache_entry>> entries; ///< key text, decision (ok only)
};

/// Parses the text of a cache file against this process's MPI library and halox version. A
/// single malformed line makes the whole file `corrupt`: a file damaged in one place is not
/// trusted anywhere.
[[nodiscard]] cache_file_contents parse_cache_file(std::string const& text,
                                                   std::string const& mpi_library,
                                                   std::string const& halox_version);

/// What reading a cache file's path found.
struct cache_file_read {
  enum class outcome {
    absent,     ///< no such file: it is created on the first store
    ok,         ///< a regular file, read whole into `text`
    unsuitable, ///< not a regular file (a FIFO, a directory, a device) or unreadable
  };
  outcome status = outcome::absent;
  std::string text;    ///< the file's contents (ok only)
  std::string problem; ///< why it is unsuitable, for the warning
};

/// Reads `path` without ever blocking: the file is opened non-blocking and used only when it is
/// a regular file, so a FIFO or device named as the cache cannot hang the process. Never throws.
[[nodiscard]] cache_file_read read_cache_file(std::string const& path);

/// Appends `text` to `path` (created, mode 0666 less the umask, when absent) in one write, only
/// when it is a regular file; false when it is not, or when the write fails. Never blocks on a
/// FIFO, never throws.
[[nodiscard]] bool append_cache_file(std::string const& path, std::string const& text);

} // namespace halox::detail
