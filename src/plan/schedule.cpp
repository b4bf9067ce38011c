#include "plan/schedule.hpp"

#include <algorithm>
#include <map>
#include <sstream>

namespace halox::detail {

std::size_t region_bytes(schedule const& s, region const& r) {
  return static_cast<std::size_t>(r.b.volume()) * s.slots[r.slot].elem_size;
}

std::size_t schedule::send_bytes() const {
  std::size_t n = 0;
  for (auto const& m : sends) n += m.bytes;
  return n;
}

std::size_t schedule::recv_bytes() const {
  std::size_t n = 0;
  for (auto const& m : recvs) n += m.bytes;
  return n;
}

schedule schedule::reversed() const {
  schedule r;
  r.slots = slots;
  r.sends = recvs;
  r.recvs = sends;
  r.copies.reserve(copies.size());
  for (auto const& c : copies) r.copies.push_back({c.dst, c.src});
  return r;
}

namespace {
void merge_messages(std::vector<message>& into, std::vector<message> const& from, int slot_offset) {
  std::map<int, std::size_t> index;
  for (std::size_t i = 0; i < into.size(); ++i) index[into[i].peer] = i;
  for (auto const& m : from) {
    auto it = index.find(m.peer);
    if (it == index.end()) {
      index[m.peer] = into.size();
      into.push_back({m.peer, {}, 0});
      it = index.find(m.peer);
    }
    for (auto r : m.regions) {
      r.slot += slot_offset;
      into[it->second].regions.push_back(r);
    }
  }
}
} // namespace

void schedule::merge(schedule const& other) {
  int const off = static_cast<int>(slots.size());
  slots.insert(slots.end(), other.slots.begin(), other.slots.end());
  merge_messages(sends, other.sends, off);
  merge_messages(recvs, other.recvs, off);
  for (auto c : other.copies) {
    c.src.slot += off;
    c.dst.slot += off;
    copies.push_back(c);
  }
  for (auto f : other.fills) {
    f.slot += off;
    fills.push_back(f);
  }
  finalize();
}

void schedule::finalize() {
  auto fix = [&](std::vector<message>& ms) {
    ms.erase(
        std::remove_if(ms.begin(), ms.end(), [](message const& m) { return m.regions.empty(); }),
        ms.end());
    for (auto& m : ms) {
      m.bytes = 0;
      for (auto const& r : m.regions) m.bytes += region_bytes(*this, r);
    }
    std::stable_sort(ms.begin(), ms.end(),
                     [](message const& a, message const& b) { return a.peer < b.peer; });
  };
  fix(sends);
  fix(recvs);
}

std::string schedule::str() const {
  std::ostringstream os;
  auto box_str = [](box const& b) {
    std::ostringstream o;
    o << "[";
    for (int d = 0; d < b.nd; ++d) o << (d ? "," : "") << b.lo[d] << ":" << b.hi[d];
    o << "]";
    return o.str();
  };
  for (auto const& m : sends) {
    os << "  send to " << m.peer << ": " << m.bytes << " B in " << m.regions.size() << " region(s)";
    for (auto const& r : m.regions) os << " " << box_str(r.b);
    os << "\n";
  }
  for (auto const& m : recvs) {
    os << "  recv from " << m.peer << ": " << m.bytes << " B in " << m.regions.size()
       << " region(s)";
    for (auto const& r : m.regions) os << " " << box_str(r.b);
    os << "\n";
  }
  if (!copies.empty()) os << "  local copies: " << copies.size() << "\n";
  if (!fills.empty()) os << "  boundary fills: " << fills.size() << "\n";
  return os.str();
}

} // namespace halox::detail
