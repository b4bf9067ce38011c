#pragma once
// The one place halox reads its environment (halox/settings.hpp lists the variables). Each
// reader parses one variable with the parser of its kind of value (switch, seconds, bytes, whole
// number in a range, one of a list of words, text) and returns nothing when the variable is
// unset or empty. A value it cannot parse throws halox::error (invalid_argument):
//   HALOX_TIMEOUT="soon" is not a number of seconds >= 0; set e.g. HALOX_TIMEOUT=30, or unset
//   it (unset: 300 s)
// Callers read inside a collective check (context construction, tuning-settings agreement, grid
// construction), so a bad value is an error on every rank rather than a hang.

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace halox::detail::settings {

/// HALOX_TIMEOUT: seconds, 0 for no bound.
[[nodiscard]] std::optional<double> timeout_seconds();
/// HALOX_CHECK: execute-time agreement.
[[nodiscard]] std::optional<bool> check_execute();
/// HALOX_SELECT_DEVICE: contexts pick the rank's GPU.
[[nodiscard]] std::optional<bool> select_device();
/// HALOX_PIPELINE_FRAGMENT: bytes per fragment of the pipelined backend, 0 automatic.
[[nodiscard]] std::optional<std::size_t> pipeline_fragment_bytes();
/// HALOX_HUGE_PAGES: large host workspaces advised onto transparent huge pages.
[[nodiscard]] std::optional<bool> huge_pages();
/// HALOX_CUDA_AWARE_MPI: overrides what the MPI library says of device pointers.
[[nodiscard]] std::optional<bool> cuda_aware_mpi();

/// HALOX_BACKEND: the name as given (the tuning layer checks it against the backends it has).
[[nodiscard]] std::optional<std::string> backend();
/// HALOX_TUNE_BUDGET: seconds.
[[nodiscard]] std::optional<double> tune_budget_seconds();
/// HALOX_TUNE_MAX_ROUNDS: a whole number in [trials, 100000]; `trials` is tune_options::trials.
[[nodiscard]] std::optional<int> tune_max_rounds(int trials);
/// HALOX_TUNE_RECHECK's four settings.
enum class recheck { off, on, always, force_switch };
[[nodiscard]] std::optional<recheck> tune_recheck();
/// HALOX_TUNE_WATCH.
[[nodiscard]] std::optional<bool> tune_watch();
/// HALOX_VERBOSE: one line per tuning decision on rank 0.
[[nodiscard]] std::optional<bool> verbose();
/// HALOX_PLAN_CACHE: the autotuner's cache file.
[[nodiscard]] std::optional<std::string> plan_cache();
/// HALOX_OPS_PLAN_CACHE: the operators' choice cache file.
[[nodiscard]] std::optional<std::string> ops_plan_cache();
/// HALOX_ONEDNN_LAYOUT: the oneDNN convolutions' fixed layout ("blocked", "plain",
/// "channels_last"); none when unset or "measure".
[[nodiscard]] std::optional<std::string> onednn_layout();
/// HALOX_FAKE_NODES: a whole number in [1, ranks].
[[nodiscard]] std::optional<int> fake_nodes(int ranks);

/// HALOX_UCX_TLS, HALOX_UCX_NET_DEVICES, HALOX_UCX_RNDV_THRESH: UCX reads these itself (halox
/// opens its UCX configuration with the prefix HALOX_); halox only names them in reports.
[[nodiscard]] std::optional<std::string> ucx_tls();
[[nodiscard]] std::optional<std::string> ucx_net_devices();
[[nodiscard]] std::optional<std::string> ucx_rndv_thresh();

/// One HALOX_* variable set in this process: its value, and why the value is rejected ("" when
/// it is accepted). HALOX_BACKEND's names are not checked here: the backend table they come
/// from lives in a higher layer, which checks them itself (halox::describe_environment).
struct set_variable {
  std::string name, value, problem;
};
/// The HALOX_* variables of the settings table that are set, in table order.
[[nodiscard]] std::vector<set_variable> set_variables();

} // namespace halox::detail::settings
