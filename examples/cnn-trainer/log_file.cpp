#include "log_file.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>

namespace trainer {

std::map<long, double> read_log_losses(std::istream& in) {
  std::map<long, double> out;
  for (std::string s; std::getline(in, s);) {
    auto const st = s.find("\"step\": "), lo = s.find("\"loss\": ");
    if (st == std::string::npos || lo == std::string::npos) continue;
    char* end = nullptr;
    errno = 0;
    long const step = std::strtol(s.c_str() + st + 8, &end, 10);
    if (end == s.c_str() + st + 8 || errno != 0) continue;
    double const loss = std::strtod(s.c_str() + lo + 8, &end);
    if (end == s.c_str() + lo + 8 || errno != 0) continue;
    out[step] = loss;
  }
  return out;
}

} // namespace trainer
