// The field-by-field difference that collective mismatch errors print.
#include "common/agreement.hpp"

#include <gtest/gtest.h>

namespace {

TEST(DescribeDifference, NamesEveryDifferingFieldWithBothValues) {
  std::string const d = halox::detail::describe_difference("backend=mpi_pack; halo=1,1; grid=2x2",
                                                           "backend=mpi_pack; halo=2,1; grid=4x1",
                                                           "rank 0", "rank 3");
  EXPECT_EQ(d, "halo: 1,1 on rank 0, 2,1 on rank 3; grid: 2x2 on rank 0, 4x1 on rank 3");
}

TEST(DescribeDifference, FieldsPresentOnOneSideOnly) {
  std::string const d = halox::detail::describe_difference("a=1", "b=2", "x", "y");
  EXPECT_EQ(d, "a: 1 on x, (absent) on y; b: (absent) on x, 2 on y");
}

} // namespace
