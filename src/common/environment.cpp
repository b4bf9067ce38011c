#include "common/environment.hpp"

#include <halox/error.hpp>
#include <halox/settings.hpp>

#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>

namespace halox {
namespace detail::settings {
namespace {

// The kinds of value, one parser each.
enum class kind { flag, seconds, bytes, count, word, text };

struct entry {
  char const* name;
  kind type;
  char const* accepts; // what the parser takes, as the error and the table say it
  char const* example; // a valid value for the error's "set e.g."
  char const* unset;
  char const* option;
  char const* meaning;
};

// The table: the "Environment variables" table of docs/building.md lists the same rows (a unit
// test keeps them equal). Errors quote `accepts`, `example` and `unset`.
constexpr std::array<entry, 19> table{{
    {"HALOX_TIMEOUT", kind::seconds, "a number of seconds >= 0 (0: no bound)", "30",
     "300 s (`halox::default_timeout_seconds`)",
     "`context_options::timeout_seconds` (plans: `halo_options`/`redistribute_options`)",
     "Bound on every wait of a plan; a wait that lasts longer throws `errc::timeout` naming the "
     "missing peers."},
    {"HALOX_CHECK", kind::flag, "0, 1, off or on", "1", "off", "`context_options::check_execute`",
     "Every execution first agrees with all ranks on plan, direction and buffers (one small "
     "all-reduce)."},
    {"HALOX_SELECT_DEVICE", kind::flag, "0, 1, off or on", "1", "off",
     "`context_options::select_device`",
     "Each context makes the rank's own GPU of its node current."},
    {"HALOX_PIPELINE_FRAGMENT", kind::bytes, "a number of bytes (0: automatic)", "262144",
     "automatic", "`context_options::pipeline_fragment_bytes`",
     "Fragment size of the `mpi_pipeline` backend; every rank must agree."},
    {"HALOX_HUGE_PAGES", kind::flag, "0, 1, off or on", "off", "on",
     "contexts without an allocator",
     "Host workspaces of 2 MiB and more are advised onto transparent huge pages."},
    {"HALOX_CUDA_AWARE_MPI", kind::flag, "0, 1, off or on", "1",
     "what the MPI library says (MPIX queries)",
     "device backends `cuda_aware_mpi`, "
     "`device_mpi_datatype`",
     "Whether MPI accepts device pointers, where the library cannot tell."},
    {"HALOX_BACKEND", kind::word, "a backend name (`halox::to_string(backend)`) or auto",
     "mpi_pack", "automatic selection",
     "`halo_options::method` / `redistribute_options::method` "
     "= automatic",
     "Forces the backend of every plan that asks for automatic selection."},
    {"HALOX_TUNE_BUDGET", kind::seconds, "a number of seconds >= 0", "0.5",
     "`tune_options::budget_seconds` (2 s)", "`tune_options::budget_seconds`",
     "Time the autotuner's race may take for one plan."},
    {"HALOX_TUNE_MAX_ROUNDS", kind::count, "a whole number in [`tune_options::trials`, 100000]",
     "64", "`tune_options::max_rounds` (64)", "`tune_options::max_rounds`",
     "Rounds after which the best median wins although intervals still overlap."},
    {"HALOX_TUNE_RECHECK", kind::word, "off, on, always, switch, 0 or 1", "on",
     "`tune_options::recheck` (on)", "`tune_options::recheck`",
     "Re-check of a close decision in the plan's first executions; `always` re-checks every "
     "decision, `switch` also forces a switch (tests)."},
    {"HALOX_TUNE_WATCH", kind::flag, "0, 1, off or on", "on", "`tune_options::watch` (on)",
     "`tune_options::watch`",
     "Keeps timing a tuned plan and re-checks when its choice grows clearly slower."},
    {"HALOX_VERBOSE", kind::flag, "0, 1, off or on", "1", "off", "automatic selection",
     "One line per tuning decision, on rank 0 of the plan."},
    {"HALOX_PLAN_CACHE", kind::text, "a file path", "/scratch/halox-plans.cache",
     "decisions kept in memory only", "`tune_options::cache_file`",
     "File where autotuning decisions persist between runs (one per MPI library and halox "
     "version)."},
    {"HALOX_OPS_PLAN_CACHE", kind::text, "a file path", "/scratch/halox-ops.cache",
     "choices kept in memory only", "`halox::ops` providers",
     "File where the operators' measured algorithm choices persist between runs."},
    {"HALOX_ONEDNN_LAYOUT", kind::word, "measure, blocked, plain or channels_last", "blocked",
     "measure", "`halox::ops` oneDNN provider",
     "Activation layout of the oneDNN convolutions: measured per problem, or this one for all "
     "(reproducible runs, comparisons)."},
    {"HALOX_FAKE_NODES", kind::count, "a whole number in [1, number of processes]", "2",
     "the real nodes", "`grid_options::fake_nodes`",
     "Emulates that many nodes of consecutive ranks for topology-aware grids."},
    {"HALOX_UCX_TLS", kind::text, "UCX's `UCX_TLS` syntax", "sm,self", "`UCX_TLS`, or UCX's choice",
     "`ucx`, `ucx_iov` backends",
     "Transports of halox's own UCX worker (the MPI library's UCX keeps its own)."},
    {"HALOX_UCX_NET_DEVICES", kind::text, "UCX's `UCX_NET_DEVICES` syntax", "mlx5_0:1",
     "`UCX_NET_DEVICES`, or UCX's choice", "`ucx`, `ucx_iov` backends",
     "Devices of halox's own UCX worker."},
    {"HALOX_UCX_RNDV_THRESH", kind::text, "UCX's `UCX_RNDV_THRESH` syntax", "8k",
     "64 KiB within one node, UCX's choice across nodes", "`ucx`, `ucx_iov` backends",
     "Message size from which halox's UCX worker uses rendezvous."},
}};

entry const& find(char const* name) {
  for (auto const& e : table)
    if (std::string(e.name) == name) return e;
  throw error(errc::internal, std::string("settings: no table entry for ") + name);
}

// Numbers are written as numbers: no leading blank or sign that strto* would skip or accept.
bool starts_like_number(std::string const& v) {
  return !v.empty() && (std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '.');
}

// The value of `e`, or nothing when unset or empty.
std::optional<std::string> raw(entry const& e) {
  char const* v = std::getenv(e.name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

[[noreturn]] void reject(entry const& e, std::string const& v, std::string const& accepts) {
  throw error(errc::invalid_argument, std::string(e.name) + "=\"" + v + "\" is not " + accepts +
                                          "; set e.g. " + e.name + "=" + e.example +
                                          ", or unset it (unset: " + e.unset + ")");
}

bool parse_flag(entry const& e, std::string const& v) {
  if (v == "1" || v == "on") return true;
  if (v == "0" || v == "off") return false;
  reject(e, v, e.accepts);
}

double parse_seconds(entry const& e, std::string const& v) {
  char* end = nullptr;
  double const x = std::strtod(v.c_str(), &end);
  if (!starts_like_number(v) || *end != '\0' || !std::isfinite(x) || x < 0 || x >= 1e9)
    reject(e, v, e.accepts);
  return x;
}

std::size_t parse_bytes(entry const& e, std::string const& v) {
  char* end = nullptr;
  errno = 0;
  unsigned long long const x = std::strtoull(v.c_str(), &end, 10);
  if (!starts_like_number(v) || *end != '\0' || errno != 0 || x >= (1ull << 40))
    reject(e, v, e.accepts);
  return static_cast<std::size_t>(x);
}

int parse_count(entry const& e, std::string const& v, long lo, long hi, std::string const& lo_is) {
  char* end = nullptr;
  errno = 0;
  long const x = std::strtol(v.c_str(), &end, 10);
  if (!starts_like_number(v) || *end != '\0' || errno != 0 || x < lo || x > hi)
    reject(e, v,
           "a whole number in [" + std::to_string(lo) + lo_is + ", " + std::to_string(hi) + "]");
  return static_cast<int>(x);
}

std::optional<bool> flag(char const* name) {
  auto const& e = find(name);
  auto const v = raw(e);
  if (!v) return std::nullopt;
  return parse_flag(e, *v);
}

std::optional<double> seconds(char const* name) {
  auto const& e = find(name);
  auto const v = raw(e);
  if (!v) return std::nullopt;
  return parse_seconds(e, *v);
}

std::optional<std::string> text(char const* name) { return raw(find(name)); }

// Whether `v` parses as a value of `e`; the reason when it does not. Ranges that depend on the
// call (trials, process count) are checked only for their widest bounds here.
std::string problem(entry const& e, std::string const& v) {
  try {
    switch (e.type) {
    case kind::flag: (void)parse_flag(e, v); break;
    case kind::seconds: (void)parse_seconds(e, v); break;
    case kind::bytes: (void)parse_bytes(e, v); break;
    case kind::count: (void)parse_count(e, v, 1, 1000000, ""); break;
    case kind::word:
      if (std::string(e.name) == "HALOX_TUNE_RECHECK") (void)tune_recheck();
      if (std::string(e.name) == "HALOX_ONEDNN_LAYOUT") (void)onednn_layout();
      break;
    case kind::text: break;
    }
  } catch (error const& x) {
    return x.message();
  }
  return {};
}

} // namespace

std::vector<set_variable> set_variables() {
  std::vector<set_variable> out;
  for (auto const& e : table)
    if (auto const v = raw(e)) out.push_back({e.name, *v, problem(e, *v)});
  return out;
}

std::optional<double> timeout_seconds() { return seconds("HALOX_TIMEOUT"); }
std::optional<bool> check_execute() { return flag("HALOX_CHECK"); }
std::optional<bool> select_device() { return flag("HALOX_SELECT_DEVICE"); }
std::optional<bool> huge_pages() { return flag("HALOX_HUGE_PAGES"); }
std::optional<bool> cuda_aware_mpi() { return flag("HALOX_CUDA_AWARE_MPI"); }
std::optional<bool> tune_watch() { return flag("HALOX_TUNE_WATCH"); }
std::optional<bool> verbose() { return flag("HALOX_VERBOSE"); }
std::optional<double> tune_budget_seconds() { return seconds("HALOX_TUNE_BUDGET"); }
std::optional<std::string> backend() { return text("HALOX_BACKEND"); }
std::optional<std::string> plan_cache() { return text("HALOX_PLAN_CACHE"); }
std::optional<std::string> ops_plan_cache() { return text("HALOX_OPS_PLAN_CACHE"); }
std::optional<std::string> ucx_tls() { return text("HALOX_UCX_TLS"); }
std::optional<std::string> ucx_net_devices() { return text("HALOX_UCX_NET_DEVICES"); }
std::optional<std::string> ucx_rndv_thresh() { return text("HALOX_UCX_RNDV_THRESH"); }

std::optional<std::size_t> pipeline_fragment_bytes() {
  auto const& e = find("HALOX_PIPELINE_FRAGMENT");
  auto const v = raw(e);
  if (!v) return std::nullopt;
  return parse_bytes(e, *v);
}

std::optional<int> tune_max_rounds(int trials) {
  auto const& e = find("HALOX_TUNE_MAX_ROUNDS");
  auto const v = raw(e);
  if (!v) return std::nullopt;
  return parse_count(e, *v, trials, 100000, " (tune_options::trials)");
}

std::optional<int> fake_nodes(int ranks) {
  auto const& e = find("HALOX_FAKE_NODES");
  auto const v = raw(e);
  if (!v) return std::nullopt;
  return parse_count(e, *v, 1, ranks, "");
}

std::optional<std::string> onednn_layout() {
  auto const& e = find("HALOX_ONEDNN_LAYOUT");
  auto const v = raw(e);
  if (!v || *v == "measure") return std::nullopt;
  if (*v == "blocked" || *v == "plain" || *v == "channels_last") return *v;
  reject(e, *v, std::string("one of ") + e.accepts);
}

std::optional<recheck> tune_recheck() {
  auto const& e = find("HALOX_TUNE_RECHECK");
  auto const v = raw(e);
  if (!v) return std::nullopt;
  if (*v == "0" || *v == "off") return recheck::off;
  if (*v == "1" || *v == "on") return recheck::on;
  if (*v == "always") return recheck::always;
  if (*v == "switch") return recheck::force_switch;
  reject(e, *v, std::string("one of ") + e.accepts);
}

} // namespace detail::settings

std::vector<setting_info> const& environment_settings() {
  static std::vector<setting_info> const all = [] {
    std::vector<setting_info> out;
    for (auto const& e : detail::settings::table)
      out.push_back({e.name, e.accepts, e.unset, e.option, e.meaning});
    return out;
  }();
  return all;
}

} // namespace halox
