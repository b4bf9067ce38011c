// The header's account of the OpenMP threads a rank runs (see apply_threads in main.cpp).
#pragma once

#include <string>

namespace trainer {

/// Environment variable through which the re-executed program learns that OMP_NUM_THREADS is
/// halox::ops::default_threads()'s choice: "<threads>|<reason>".
inline constexpr char const* default_threads_variable = "HALOX_TRAIN_THREADS_DEFAULT";

/// "OMP_NUM_THREADS=1 (default: 2 CPUs shared by 2 ranks on this node)", or what the user set,
/// or "unset" with OpenMP's own default.
std::string threads_text();

} // namespace trainer
