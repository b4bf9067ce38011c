#pragma once
// An in-memory "cluster": runs every rank's schedule in one process, without MPI, so planners
// and pack/unpack can be checked against a brute-force oracle on grids of any size.

#include "exec/cpu/pack.hpp"
#include "plan/schedule.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace halox::test {

/// Delivers every message of `schedules` (one per rank) and runs local copies and fills.
/// `bufs[r]` holds rank r's slot buffers. Checks that each send has a matching receive of the
/// same size. `op` combines on receive.
inline void simulate(std::vector<detail::schedule> const& schedules,
                     std::vector<std::vector<void*>> const& bufs, detail::combine_op op,
                     double fill_value = 0.0) {
  int const n = static_cast<int>(schedules.size());
  std::vector<std::byte> wire, scratch;
  for (int r = 0; r < n; ++r) {
    for (auto const& m : schedules[r].sends) {
      ASSERT_GE(m.peer, 0);
      ASSERT_LT(m.peer, n);
      wire.assign(m.bytes, std::byte{0});
      detail::pack_message(schedules[r], m, bufs[r].data(), wire.data());
      auto const& rs = schedules[m.peer].recvs;
      auto it = std::find_if(rs.begin(), rs.end(), [&](auto const& x) { return x.peer == r; });
      ASSERT_NE(it, rs.end()) << "rank " << m.peer << " expects nothing from " << r;
      ASSERT_EQ(it->bytes, m.bytes) << "size mismatch " << r << " -> " << m.peer;
      detail::unpack_message(schedules[m.peer], *it, bufs[m.peer].data(), wire.data(), op);
    }
  }
  for (int r = 0; r < n; ++r) {
    for (auto const& m : schedules[r].recvs) {
      auto const& ss = schedules[m.peer].sends;
      ASSERT_TRUE(std::any_of(ss.begin(), ss.end(), [&](auto const& x) { return x.peer == r; }))
          << "rank " << r << " waits for " << m.peer << " which sends nothing";
    }
    scratch.resize(detail::max_copy_bytes(schedules[r]));
    detail::run_local_copies(schedules[r], bufs[r].data(), op, scratch.data());
    detail::run_fills(schedules[r], bufs[r].data(), fill_value);
  }
}

} // namespace halox::test
