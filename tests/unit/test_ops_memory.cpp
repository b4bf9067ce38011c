// The operators' memory seam (src/ops/memory.hpp) on host memory: copies into strided views
// run by run, grow-only buffers, host copies; and device memory refused with the reason when
// there is none.
#include "ops/providers/memory.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

namespace {

namespace od = halox::ops::detail;
using halox::index_t;

TEST(OpsMemory, CopyIntoStridedViewsWritesEveryElementOnce) {
  od::space_ops const host;
  // A 3 x 4 x 5 array placed in a padded 3 x 6 x 7 buffer (rows and planes padded), and one whose
  // last dimension is not contiguous (stride 2).
  std::vector<double> src(60);
  std::iota(src.begin(), src.end(), 1.0);
  std::vector<double> padded(3 * 6 * 7, -1.0);
  halox::ops::tensor_ref<double> const p(padded.data(), {3, 4, 5}, {42, 7, 1});
  od::copy_into<double>(host, src.data(), p);
  std::vector<double> sparse(2 * 3 * 2 * 2, -1.0);
  halox::ops::tensor_ref<double> const s(sparse.data(), {2, 3, 2}, {12, 4, 2});
  od::copy_into<double>(host, src.data(), s);
  index_t k = 0;
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j)
      for (index_t l = 0; l < 5; ++l) EXPECT_EQ(padded[i * 42 + j * 7 + l], src[k++]);
  EXPECT_EQ(std::count(padded.begin(), padded.end(), -1.0), 3 * 6 * 7 - 60);
  k = 0;
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j)
      for (index_t l = 0; l < 2; ++l) EXPECT_EQ(sparse[i * 12 + j * 4 + l * 2], src[k++]);
  EXPECT_EQ(std::count(sparse.begin(), sparse.end(), -1.0), 24 - 12);
  // An empty view copies nothing.
  od::copy_into<double>(host, src.data(), halox::ops::tensor_ref<double>(padded.data(), {0, 4}));
}

TEST(OpsMemory, BuffersGrowAndHostCopiesRoundTrip) {
  od::space_buffer<float> b;
  EXPECT_EQ(b.reserve(0), nullptr);
  float* const p = b.reserve(16);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(b.reserve(8), p); // never shrinks
  std::vector<float> const v{1, 2, 3, 4};
  b.ops().from_host(p, v.data(), v.size() * sizeof(float));
  EXPECT_EQ(od::host_copy<float>(b.ops(), p, 4), v);
  b.ops().zero(p, 2 * sizeof(float));
  EXPECT_EQ(od::host_copy<float>(b.ops(), p, 4), (std::vector<float>{0, 0, 3, 4}));
  EXPECT_TRUE(od::host_copy<float>(b.ops(), nullptr, 4).empty());
  od::space_buffer<float> moved(std::move(b));
  EXPECT_EQ(moved.data(), p);
}

TEST(OpsMemory, DeviceUsableSaysWhyNot) {
  std::string why;
  if (od::device_usable(why)) GTEST_SKIP() << "a CUDA device is visible here";
  EXPECT_FALSE(why.empty());
  EXPECT_TRUE(why.find("CUDA") != std::string::npos || why.find("cuDNN") != std::string::npos)
      << why;
}

} // namespace
