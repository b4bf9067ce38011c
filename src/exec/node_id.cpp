#include "exec/node_id.hpp"

#include <unistd.h>

#include <fstream>
#include <string>

namespace halox::detail {

std::uint64_t node_id() {
  static std::uint64_t const id = [] {
    char host[256] = {};
    (void)gethostname(host, sizeof host - 1);
    std::string name = host;
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string boot;
    std::getline(f, boot);
    name += '/' + boot;
    std::uint64_t h = 1469598103934665603ull; // FNV-1a
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
    return h;
  }();
  return id;
}

} // namespace halox::detail
