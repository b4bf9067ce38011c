// CRC-32C against the standard check value and other published vectors, and continuation.
#include <halox/checksum.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(halox::crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(halox::crc32c("", 0), 0u);
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[static_cast<std::size_t>(i)] = static_cast<unsigned char>(i);
  // RFC 3720 (iSCSI), appendix B.4.
  EXPECT_EQ(halox::crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(halox::crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  EXPECT_EQ(halox::crc32c(inc.data(), inc.size()), 0x46DD794Eu);
}

TEST(Crc32c, ContinuesAndSeesEveryByte) {
  std::string const s = "halox checkpoints carry a checksum over their payload";
  for (std::size_t cut = 0; cut <= s.size(); ++cut)
    EXPECT_EQ(halox::crc32c(s.data() + cut, s.size() - cut, halox::crc32c(s.data(), cut)),
              halox::crc32c(s.data(), s.size()));
  std::string t = s;
  for (std::size_t i = 0; i < t.size(); ++i) {
    t[i] ^= 0x10;
    EXPECT_NE(halox::crc32c(t.data(), t.size()), halox::crc32c(s.data(), s.size())) << i;
    t[i] ^= 0x10;
  }
}
