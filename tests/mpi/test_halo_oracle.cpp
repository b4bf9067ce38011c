// The randomized halo property test: the halox-verify oracle run for every host backend on
// MPI_COMM_WORLD (whatever its size), a few cases each.
#include "oracle.hpp"

#include <gtest/gtest.h>

using namespace halox;

namespace {
class HaloOracle : public testing::TestWithParam<backend> {};

TEST_P(HaloOracle, RandomCasesMatchSerialDefinition) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int i = 0; i < 8; ++i) {
    std::mt19937_64 rng(977ull * static_cast<unsigned>(i) + static_cast<unsigned>(size));
    auto const c = verify::random_halo_case(rng, size, 600);
    auto const r = verify::run_halo_case(c, GetParam(), MPI_COMM_WORLD);
    EXPECT_EQ(r.forward.mismatches, 0u) << c.str() << ": " << r.forward.first_error;
    EXPECT_EQ(r.reverse.mismatches, 0u) << c.str() << ": " << r.reverse.first_error;
  }
}

INSTANTIATE_TEST_SUITE_P(AllHostBackends, HaloOracle, testing::ValuesIn(host_backends()),
                         [](auto const& info) { return std::string(to_string(info.param)); });
} // namespace
