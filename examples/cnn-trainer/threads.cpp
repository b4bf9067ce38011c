#include "threads.hpp"

#include <halox/ops/provider.hpp>

#include <cstdlib>

namespace trainer {

std::string threads_text() {
  char const* v = std::getenv("OMP_NUM_THREADS");
  if (!v) {
    auto const d = halox::ops::default_threads();
    return "OMP_NUM_THREADS=unset (OpenMP's default: one thread per CPU this rank may use, " +
           std::to_string(d.cpus) + "; " + d.reason + ")";
  }
  std::string text = std::string("OMP_NUM_THREADS=") + v;
  if (char const* n = std::getenv(default_threads_variable)) {
    std::string const note = n;
    auto const bar = note.find('|');
    if (bar != std::string::npos && note.compare(0, bar, v) == 0)
      text += " (default: " + note.substr(bar + 1) + ")";
  }
  return text;
}

} // namespace trainer
