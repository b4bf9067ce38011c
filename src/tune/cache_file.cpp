#include "tune/cache_file.hpp"

#include <halox/error.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace halox::detail {

namespace {

std::string trim(std::string const& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::vector<std::string> split_ws(std::string const& s) {
  std::istringstream is(s);
  std::vector<std::string> out;
  for (std::string t; is >> t;) out.push_back(t);
  return out;
}

// The key's field names, in the order format_key writes them.
constexpr char const* key_fields[] = {"geom", "sched", "ranks", "slots",
                                      "msgs", "bytes", "mem",   "dev"};

bool valid_key(std::string const& key) {
  auto const tokens = split_ws(key);
  if (tokens.size() != std::size(key_fields)) return false;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::string const prefix = std::string(key_fields[i]) + "=";
    if (tokens[i].compare(0, prefix.size(), prefix) != 0 || tokens[i].size() == prefix.size())
      return false;
  }
  return true;
}

// Parses "-> chosen name=value ..." (everything after the key); false when malformed.
bool parse_decision(std::string const& text, cache_entry& e) {
  auto const tokens = split_ws(text);
  if (tokens.size() < 2) return false;
  try {
    e.chosen = backend_from_string(tokens[0]);
  } catch (error const&) {
    return false;
  }
  if (e.chosen == backend::automatic) return false;
  bool chosen_measured = false;
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    auto const eq = tokens[i].find('=');
    if (eq == std::string::npos || eq == 0) return false;
    candidate_result r;
    try {
      r.b = backend_from_string(tokens[i].substr(0, eq));
    } catch (error const&) {
      return false;
    }
    if (r.b == backend::automatic) return false;
    std::string const v = tokens[i].substr(eq + 1);
    if (v == "unavailable") {
      r.status = candidate_status::unavailable;
    } else if (v == "skipped") {
      r.status = candidate_status::skipped;
    } else {
      // "median" (version 1) or "median/lo/hi/rounds" (version 2).
      char const* p = v.c_str();
      char* end = nullptr;
      r.median = std::strtod(p, &end);
      if (v.empty() || end == p || !std::isfinite(r.median) || r.median < 0) return false;
      if (*end == '/') {
        p = end + 1;
        r.lo = std::strtod(p, &end);
        if (end == p || *end != '/' || !std::isfinite(r.lo) || r.lo < 0) return false;
        p = end + 1;
        r.hi = std::strtod(p, &end);
        if (end == p || *end != '/' || !std::isfinite(r.hi) || r.hi < r.lo) return false;
        p = end + 1;
        long const n = std::strtol(p, &end, 10);
        if (end == p || n < 1 || n > 100000) return false;
        r.rounds = static_cast<int>(n);
      } else {
        r.lo = r.hi = r.median;
      }
      if (end != v.c_str() + v.size()) return false;
      r.status = candidate_status::measured;
      if (r.b == e.chosen) chosen_measured = true;
    }
    e.candidates.push_back(r);
  }
  return chosen_measured;
}

// Closes a descriptor on every path out of the readers below.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens `path` without blocking (a FIFO without a writer, or without a reader for O_WRONLY,
// would otherwise block forever or fail later) and keeps it only if it is a regular file.
// Returns the descriptor, or -1 with `problem` set (errno ENOENT left for the caller).
int open_regular(std::string const& path, int flags, std::string& problem) {
  int const fd = ::open(path.c_str(), flags | O_NONBLOCK | O_CLOEXEC, 0666);
  if (fd < 0) {
    problem = std::string("cannot open it: ") + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    problem = "it is not a regular file (a FIFO, directory or device cannot hold a plan cache)";
    errno = 0;
    return -1;
  }
  // Regular files ignore O_NONBLOCK, but clear it so that reads and writes behave plainly.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

} // namespace

cache_file_read read_cache_file(std::string const& path) {
  cache_file_read out;
  fd_guard f;
  f.fd = open_regular(path, O_RDONLY, out.problem);
  if (f.fd < 0) {
    out.status =
        errno == ENOENT ? cache_file_read::outcome::absent : cache_file_read::outcome::unsuitable;
    if (out.status == cache_file_read::outcome::absent) out.problem.clear();
    return out;
  }
  char buf[65536];
  for (;;) {
    ssize_t const n = ::read(f.fd, buf, sizeof buf);
    if (n > 0 && out.text.size() + static_cast<std::size_t>(n) > max_cache_file_bytes) {
      // A cache of real plans is kilobytes; anything this large is not one.
      out.status = cache_file_read::outcome::unsuitable;
      out.problem = "it is larger than " + std::to_string(max_cache_file_bytes >> 20) +
                    " MiB, which no plan cache reaches";
      out.text.clear();
      return out;
    }
    if (n > 0) {
      out.text.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      out.status = cache_file_read::outcome::unsuitable;
      out.problem = std::string("cannot read it: ") + std::strerror(errno);
      out.text.clear();
      return out;
    }
  }
  out.status = cache_file_read::outcome::ok;
  return out;
}

bool append_cache_file(std::string const& path, std::string const& text) {
  std::string problem;
  fd_guard f;
  f.fd = open_regular(path, O_WRONLY | O_APPEND | O_CREAT, problem);
  if (f.fd < 0) return false;
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t const n = ::write(f.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

std::string key_token(std::string const& s) {
  std::string out = trim(s);
  for (char& c : out)
    if (std::isspace(static_cast<unsigned char>(c)) ||
        std::iscntrl(static_cast<unsigned char>(c)) || c == '=')
      c = '_';
  return out.empty() ? "_" : out;
}

std::string format_key(cache_key const& k) {
  std::ostringstream os;
  os << "geom=" << hex16(k.geometry) << " sched=" << hex16(k.schedule) << " ranks=" << k.ranks
     << " slots=" << k.slots << " msgs=" << k.messages << " bytes=" << k.bytes
     << " mem=" << (k.memory == memory_space::host ? "host" : "device")
     << " dev=" << key_token(k.device);
  return os.str();
}

std::string full_key(cache_key const& k, std::string const& mpi_library,
                     std::string const& halox_version) {
  return format_key(k) + " mpi=" + key_token(mpi_library) + " halox=" + key_token(halox_version);
}

std::string cache_file_header(std::string const& mpi_library, std::string const& halox_version) {
  return "# halox plan cache: automatic backend decisions (see docs/autotune.md)\n"
         "halox-plan-cache " +
         std::to_string(cache_format_version) + "\nmpi " + trim(mpi_library) + "\nhalox " +
         trim(halox_version) + "\n";
}

std::string format_entry(std::string const& key_text, cache_entry const& e) {
  std::string line = key_text + " -> " + to_string(e.chosen);
  for (auto const& c : e.candidates) {
    line += std::string(" ") + to_string(c.b) + "=";
    switch (c.status) {
    case candidate_status::measured: {
      char buf[96];
      if (c.rounds > 0)
        std::snprintf(buf, sizeof buf, "%.6g/%.6g/%.6g/%d", c.median, c.lo, c.hi, c.rounds);
      else
        std::snprintf(buf, sizeof buf, "%.6g", c.median);
      line += buf;
      break;
    }
    case candidate_status::unavailable: line += "unavailable"; break;
    case candidate_status::skipped: line += "skipped"; break;
    }
  }
  return line + "\n";
}

cache_file_contents parse_cache_file(std::string const& text, std::string const& mpi_library,
                                     std::string const& halox_version) {
  using verdict = cache_file_contents::verdict;
  cache_file_contents out;
  std::istringstream is(text);
  int header = 0; // header lines seen
  int lineno = 0;
  auto fail = [&](verdict v, std::string why) {
    cache_file_contents bad;
    bad.status = v;
    bad.problem = std::move(why);
    return bad;
  };
  for (std::string raw; std::getline(is, raw);) {
    ++lineno;
    std::string const line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    std::string const where = "line " + std::to_string(lineno);
    // A header after entries (two files concatenated, or two processes that both created the
    // file) is checked again like the first one.
    if (header == 3 && line.compare(0, 17, "halox-plan-cache ") == 0) header = 0;
    if (header == 0) {
      auto const t = split_ws(line);
      if (t.size() != 2 || t[0] != "halox-plan-cache")
        return fail(verdict::corrupt, where + " is not a halox plan cache header "
                                              "('halox-plan-cache <version>' expected)");
      // Version 1 entries (a median per candidate, no interval) are still read.
      if (t[1] != std::to_string(cache_format_version) && t[1] != "1")
        return fail(verdict::foreign, "format version " + t[1] +
                                          ", this halox reads versions 1 to " +
                                          std::to_string(cache_format_version));
      ++header;
    } else if (header == 1) {
      if (line.compare(0, 4, "mpi ") != 0)
        return fail(verdict::corrupt, where + ": 'mpi <library version>' expected");
      std::string const lib = trim(line.substr(4));
      if (lib != trim(mpi_library))
        return fail(verdict::foreign, "written with MPI library '" + lib +
                                          "', this process runs '" + trim(mpi_library) + "'");
      ++header;
    } else if (header == 2) {
      if (line.compare(0, 6, "halox ") != 0)
        return fail(verdict::corrupt, where + ": 'halox <version>' expected");
      std::string const v = trim(line.substr(6));
      if (v != trim(halox_version))
        return fail(verdict::foreign,
                    "written by halox " + v + ", this is halox " + trim(halox_version));
      ++header;
    } else {
      auto const arrow = line.find(" -> ");
      cache_entry e;
      if (arrow == std::string::npos || !valid_key(line.substr(0, arrow)) ||
          !parse_decision(line.substr(arrow + 4), e))
        return fail(verdict::corrupt, where + " is not a valid entry");
      out.entries.emplace_back(trim(line.substr(0, arrow)), std::move(e));
    }
  }
  if (header == 0) return out; // empty (or comments only)
  if (header < 3) return fail(verdict::corrupt, "the header is incomplete");
  out.status = verdict::ok;
  return out;
}

} // namespace halox::detail
