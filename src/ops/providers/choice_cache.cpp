#include "ops/providers/choice_cache.hpp"

#include "common/environment.hpp"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

namespace halox::ops::detail {
namespace {

struct cache_state {
  std::mutex m;
  std::map<std::string, measured_choice> entries; // "<provider> <key>"
  bool file_read = false;
};

cache_state& state() {
  static cache_state s;
  return s;
}

std::optional<std::string> cache_path() { return halox::detail::settings::ops_plan_cache(); }

// Reads the cache file once; lines it cannot parse are skipped (the file is only a hint).
void read_file(cache_state& s) {
  if (s.file_read) return;
  s.file_read = true;
  auto const path = cache_path();
  if (!path) return;
  std::ifstream in(*path, std::ios::ate);
  // The file is a hint of a few lines per layer: beyond 64 MiB it is not one, and reading it
  // would only cost memory.
  if (!in || in.tellg() > std::streamoff{64} << 20) return;
  in.seekg(0);
  read_choice_lines(in, s.entries);
}

} // namespace

void read_choice_lines(std::istream& in, std::map<std::string, measured_choice>& out) {
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream is(line);
    std::string provider, key, arrow;
    measured_choice c;
    if (!(is >> provider >> key >> arrow >> c.choice) || arrow != "->") continue;
    std::string item;
    while (is >> item) {
      auto const eq = item.find('=');
      if (eq == std::string::npos) continue;
      std::string const v = item.substr(eq + 1);
      c.costs.emplace_back(item.substr(0, eq), v == "unavailable" ? -1.0 : std::atof(v.c_str()));
    }
    c.from_file = true;
    out[provider + " " + key] = std::move(c);
  }
}

bool find_choice(std::string const& provider, std::string const& key, measured_choice& out) {
  cache_state& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  read_file(s);
  auto it = s.entries.find(provider + " " + key);
  if (it == s.entries.end()) return false;
  out = it->second;
  return true;
}

void store_choice(std::string const& provider, std::string const& key, measured_choice const& c) {
  cache_state& s = state();
  std::lock_guard<std::mutex> lock(s.m);
  read_file(s);
  s.entries[provider + " " + key] = c;
  auto const path = cache_path();
  if (!path) return;
  std::ofstream out(*path, std::ios::app);
  out << provider << ' ' << key << " -> " << c.choice;
  for (auto const& [name, sec] : c.costs) {
    out << ' ' << name << '=';
    if (sec < 0)
      out << "unavailable";
    else
      out << sec;
  }
  out << '\n';
}

std::string format_costs(measured_choice const& c) {
  std::ostringstream os;
  for (auto const& [name, sec] : c.costs) {
    os << ' ' << (name == c.choice ? "*" : "") << name << '=';
    if (sec == padded_cost) {
      os << "not tried (scratch larger than its operands)";
    } else if (sec < 0) {
      os << "unavailable";
    } else {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g ms", sec * 1e3);
      os << buf;
    }
  }
  if (c.from_file) os << " (from HALOX_OPS_PLAN_CACHE)";
  return os.str();
}

} // namespace halox::ops::detail
