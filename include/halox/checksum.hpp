#pragma once
/// \file checksum.hpp
/// CRC-32C (Castagnoli), the checksum halox puts in the files it writes for itself and its
/// tools (halox-train's checkpoints), so that a reader can tell a damaged file from a good one
/// before it uses any value of it.

#include <cstddef>
#include <cstdint>

namespace halox {

/// CRC-32C of `bytes` bytes at `data` (the iSCSI / ext4 / SSE4.2 `crc32` polynomial
/// 0x1EDC6F41, reflected; "123456789" gives 0xE3069283). `seed` continues an earlier value:
/// `crc32c(b, m, crc32c(a, n))` is the checksum of a's n bytes followed by b's m bytes.
[[nodiscard]] std::uint32_t crc32c(void const* data, std::size_t bytes,
                                   std::uint32_t seed = 0) noexcept;

} // namespace halox
