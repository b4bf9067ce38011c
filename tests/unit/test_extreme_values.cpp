// Extreme inputs are errors, not crashes: part counts near 2^31, extents near 2^63, strides
// and products that overflow 64 bits, malformed encodings of another rank's description.
#include <halox/distribution.hpp>
#include <halox/error.hpp>
#include <halox/grid.hpp>

#include <gtest/gtest.h>

#include "plan/redist_planner.hpp"

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

using namespace halox;

namespace {

constexpr index_t two_62 = index_t{1} << 62;
constexpr index_t index_max = INT64_MAX;

// Expects `f` to throw halox::error (with code `code`) whose message contains every needle.
template <class F> void expect_error(F&& f, std::vector<std::string> const& needles,
                                     errc code = errc::invalid_argument) {
  try {
    f();
    ADD_FAILURE() << "expected halox::error containing '" << needles.front() << "'";
  } catch (error const& e) {
    for (auto const& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos)
          << "'" << n << "' in: " << e.what();
    EXPECT_EQ(e.code(), code);
  }
}

} // namespace

TEST(ExtremeValues, HugePartCountsAreRejectedBeforeAllocating) {
  // 2^31 - 1 parts: more than the 2^30 ranks halox supports, rejected by value.
  expect_error([] { distribution({10}, dtype::float32, {INT_MAX}); },
               {"process count 2147483647 on dim 0", "2^30"});
  // Each count fine alone, their product too large.
  expect_error(
      [] {
        distribution({8, 8}, dtype::float32, {1 << 16, 1 << 16});
      },
      {"process count 65536 on dim 1", "1073741824"});
  // Explicit sizes are checked against the count before they are summed.
  dim_options o;
  o.sizes = {1, 2};
  expect_error([&] { distribution({3}, dtype::float32, {INT_MAX}, {o}); },
               {"process count 2147483647"});
}

TEST(ExtremeValues, BalancedPartsCostNoMemoryPerPart) {
  // 2^30 balanced parts over 10 elements is a valid (if odd) description: it must be answered
  // arithmetically; a vector of starts would take 8 GiB.
  distribution const d({10}, dtype::float32, {1 << 30});
  EXPECT_EQ(d.nranks(), 1 << 30);
  EXPECT_EQ(d.part_size(0, 9), 1);
  EXPECT_EQ(d.part_size(0, 10), 0);
  EXPECT_EQ(d.part_start(0, (1 << 30) - 1), 10);
  EXPECT_EQ(d.part_of(0, 9), 9);
  EXPECT_TRUE(d.empty((1 << 30) - 1));
  EXPECT_EQ(d.owned_box(3).lo[0], 3);
  // Balanced starts computed arithmetically match the definition (first n % p parts larger).
  distribution const e({1000003}, dtype::float64, {7});
  index_t start = 0;
  for (int p = 0; p < 7; ++p) {
    EXPECT_EQ(e.part_start(0, p), start);
    index_t const size = 1000003 / 7 + (p < 1000003 % 7 ? 1 : 0);
    EXPECT_EQ(e.part_size(0, p), size);
    EXPECT_EQ(e.part_of(0, start), p);
    EXPECT_EQ(e.part_of(0, start + size - 1), p);
    start += size;
  }
}

TEST(ExtremeValues, ExtentsNearTheIndexLimit) {
  // 2^62 float32 elements: 2^64 bytes.
  expect_error([] { distribution({two_62}, dtype::float32, {1}); },
               {"4611686018427387904 elements", "4 bytes", "2^63-1"});
  // 2^62 x 4 elements overflow the element count itself.
  expect_error(
      [] {
        distribution({two_62, 4}, dtype::uint8, {1, 1});
      },
      {"4611686018427387904x4", "2^63-1"});
  // The largest extent plus a halo overflows the allocated coordinates.
  expect_error([] { distribution({index_max}, dtype::uint8, {1}, {dim_options::halo(1)}); },
               {"extent 9223372036854775807 plus the halos (1, 1)", "2^63-1"});
  // A periodic halo may exceed the extent, but the allocation must still be countable.
  expect_error(
      [] {
        distribution({index_t{1} << 40, 2}, dtype::uint8, {1, 1},
                     {dim_options{}, dim_options::halo(INT_MAX, true)});
      },
      {"allocated element count", "2^63-1"});
  // Just inside the limits works.
  EXPECT_NO_THROW(distribution({two_62}, dtype::uint8, {4}));
}

TEST(ExtremeValues, ExplicitSizesThatOverflowTheirSum) {
  dim_options o;
  o.sizes = {two_62, two_62, two_62};
  expect_error([&] { distribution({two_62}, dtype::uint8, {3}, {o}); },
               {"pass the extent 4611686018427387904 at part 1"});
  o.sizes = {index_max, 1};
  expect_error([&] { distribution({index_max}, dtype::uint8, {2}, {o}); },
               {"at part 1", "must sum to the extent"});
}

TEST(ExtremeValues, StridesWhoseOffsetsOverflow) {
  // 3 * 2^62 as the largest offset.
  expect_error(
      [] {
        validate_strides({4, 4}, {two_62, 1});
      },
      {"stride 4611686018427387904 on dim 0", "2^63-1"});
  expect_error(
      [] {
        (void)required_elements({2, 2}, {index_max, 1});
      },
      {"stride 9223372036854775807 on dim 0", "2^63-1"});
  // A slower dimension cannot step over a span past the limit.
  expect_error(
      [] {
        validate_strides({2, 4}, {two_62 + 1, two_62});
      },
      {"stride 4611686018427387905 on dim 0 is smaller than the 9223372036854775807"});
  // The largest representable layout is fine.
  EXPECT_NO_THROW(validate_strides({2}, {index_max - 1}));
  EXPECT_EQ(required_elements({2}, {index_max - 1}), index_max);
}

TEST(ExtremeValues, ChooseGridRejectsHugeCounts) {
  expect_error(
      [] {
        (void)choose_grid(4, {INT_MAX, 0}, {8, 8}, {}, {});
      },
      {"multiply to 2147483647", "does not divide the 4 processes"});
  // Fixed counts whose product overflows 64 bits.
  expect_error(
      [] {
        (void)choose_grid(4, {INT_MAX, INT_MAX, INT_MAX, 0}, {8, 8, 8, 8}, {}, {});
      },
      {"multiply to more than 2^63-1"});
  expect_error([] { (void)choose_grid(INT_MAX, {0}, {8}, {}, {}); },
               {"2147483647 processes", "2^30"});
  expect_error([] { (void)choose_grid(2, {0}, {index_max}, {1}, {1}); },
               {"extent 9223372036854775807 on dim 0"});
}

TEST(ExtremeValues, DecodingValidatesBeforeAllocating) {
  auto const ok = detail::encode_distribution(distribution({5, 6}, dtype::float32, {2, 1}));
  // Layout: ndim, dtype, then per dim: extent, parts, halo_lo, halo_hi, periodic, has_sizes.
  auto with = [&](std::size_t at, std::int64_t v) {
    auto e = ok;
    e[at] = v;
    return e;
  };
  auto decode = [](std::vector<std::int64_t> const& e) {
    (void)detail::decode_distribution(e.data(), e.size());
  };
  expect_error([&] { decode(with(3, INT_MAX)); }, {"part count 2147483647"}, errc::internal);
  expect_error([&] { decode(with(3, std::int64_t{1} << 40)); }, {"part count 1099511627776"},
               errc::internal);
  expect_error([&] { decode(with(4, -1)); }, {"halo width -1"}, errc::internal);
  expect_error([&] { decode(with(0, 1000)); }, {"rank 1000"}, errc::internal);
  // Explicit sizes claimed for 2^30 parts in a short buffer: rejected by length, not by
  // running out of memory.
  auto e = with(3, 1 << 30);
  e[7] = 1;
  expect_error([&] { decode(e); }, {"truncated"}, errc::internal);
  // A huge extent decodes into the distribution's own error.
  expect_error([&] { decode(with(2, index_max)); }, {"9223372036854775807"});
}

TEST(ExtremeValues, BoxExtentAndVolumeSaturate) {
  box b;
  b.nd = 2;
  b.lo[0] = -two_62;
  b.hi[0] = two_62; // a span of 2^63: one past the limit
  b.hi[1] = 4;
  EXPECT_EQ(b.extent(0), index_max);
  EXPECT_EQ(b.extent(1), 4);
  EXPECT_EQ(b.volume(), index_max);
  EXPECT_FALSE(b.empty());
  EXPECT_EQ((index_range{-two_62, two_62}.size()), index_max);
  // 2^32 x 2^32 cells: the product overflows; 2^31 x 2^31 + 1 does not.
  box c;
  c.nd = 2;
  c.hi[0] = c.hi[1] = index_t{1} << 32;
  EXPECT_EQ(c.volume(), index_max);
  c.hi[0] = c.hi[1] = index_t{1} << 31;
  EXPECT_EQ(c.volume(), index_t{1} << 62);
  c.hi[1] = 0;
  EXPECT_EQ(c.volume(), 0);
  EXPECT_TRUE(c.empty());
}
