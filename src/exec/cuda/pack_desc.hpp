#pragma once
// The batched region descriptors of the CUDA pack/unpack kernels and the index arithmetic the
// kernels run on them. Plain C++ with HALOX_HD functions: kernels/pack.cu compiles it for the
// device, the executors and tests/unit/test_pack_descriptors.cpp for the host, where a host
// emulation of the kernels checks it byte for byte against src/exec/cpu/pack.cpp.
//
// One launch moves many regions. The packed bytes of each region are cut into chunks of
// `chunk_bytes`; thread block b of a launch handles chunk b of the launch, finds its region by a
// binary search over the regions' `block_begin` prefix sums, and its threads stride over the
// chunk in words of W bytes (16, 8, 4, 2 or 1: the widest that the region's runs, strides,
// offsets, stream position and the buffer's base address allow). Consecutive threads touch
// consecutive words of the packed stream, and of the buffer within a run, so accesses coalesce.

#include "common/strided_region.hpp"

#include <cstdint>

namespace halox::detail::gpu {

/// Packed bytes one thread block moves (a multiple of the widest word).
inline constexpr index_t chunk_bytes = 8192;
/// Threads per block of the pack/unpack kernels.
inline constexpr int block_threads = 256;
/// Most buffer slots one plan can have (slot pointers travel by value in the kernel arguments).
inline constexpr int max_slots = 64;
/// Widest vector access, in bytes.
inline constexpr int max_word = 16;

/// What a descriptor does on unpack (packing only ever copies).
enum class region_kind : std::uint8_t {
  copy, ///< move bytes between the buffer and the packed stream (combining on reverse unpack)
  fill  ///< set the region to the constant `fill` (boundary halo cells)
};

/// One region of a batch. Plain data, copied to the device once at plan time.
struct region_desc {
  strided_region sr;                 ///< the region in its slot buffer (element units)
  index_t stream_offset = 0;         ///< byte offset of its packed bytes from the stream base
  index_t bytes = 0;                 ///< packed bytes
  index_t run_bytes = 0;             ///< bytes per contiguous run
  index_t block_begin = 0;           ///< first block of the region in its batch (prefix sum)
  unsigned char fill[max_word] = {}; ///< fill regions: the element value, repeated (fill words
                                     ///< are never narrower than an element: runs, offsets and
                                     ///< strides are whole elements, bases element-aligned)
  std::int32_t slot = 0;             ///< buffer slot
  std::int32_t elem_size = 1;        ///< bytes per element
  std::uint8_t word = 1;         ///< widest word the layout allows (before the base-pointer cap)
  std::uint8_t stream_align = 1; ///< largest power of two (<= 16) dividing stream_offset
  std::uint8_t type = 0;         ///< dtype, for combining
  std::uint8_t kind = 0;         ///< region_kind
  std::uint8_t narrow = 0;       ///< 1 when `bytes` < 2^32: 32-bit index arithmetic suffices
};

/// Arguments of one kernel launch, passed by value (so a later launch can never see them
/// change): the descriptors of regions [first, last) cover blocks [block_lo, block_hi).
struct launch_args {
  region_desc const* regions = nullptr;    ///< device array of the batch
  int first = 0, last = 0;                 ///< region range of this launch
  index_t block_lo = 0, block_hi = 0;      ///< block range of this launch
  unsigned char* stream = nullptr;         ///< device base of the packed stream
  void* slots[max_slots] = {};             ///< slot buffers of this exchange
  std::uint8_t slot_align[max_slots] = {}; ///< largest power of two (<= 16) dividing each base
  std::uint8_t op = 0;                     ///< combine_op of an unpack
};

/// Largest power of two, at most `max_word`, that divides `v` (`max_word` for 0).
HALOX_HD inline int pow2_divisor(std::uint64_t v) {
  int w = max_word;
  while (w > 1 && v % static_cast<std::uint64_t>(w) != 0) w /= 2;
  return w;
}

/// Number of chunks (blocks) of a region of `bytes` packed bytes.
HALOX_HD inline index_t chunks_of(index_t bytes) { return (bytes + chunk_bytes - 1) / chunk_bytes; }

/// Index of the region of `regions[first, last)` holding block `block`: the last one whose
/// `block_begin` is <= `block` (regions are never empty, so that one owns the block).
HALOX_HD inline int find_region(region_desc const* regions, int first, int last, index_t block) {
  int lo = first, hi = last - 1;
  while (lo < hi) {
    int const mid = lo + (hi - lo + 1) / 2;
    if (regions[mid].block_begin <= block)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Word width used for region `d` when its slot's base address is divisible by `slot_align`.
HALOX_HD inline int effective_word(region_desc const& d, int slot_align) {
  return d.word < slot_align ? d.word : slot_align;
}

/// Element offset of run `run`: the same value and order as `strided_region::run_offset`, with
/// the common shapes (one or no outer loop) and small regions taking cheaper arithmetic.
HALOX_HD inline index_t run_start(strided_region const& sr, index_t run, bool narrow) {
  if (sr.nloops == 0) return sr.offset;
  if (sr.nloops == 1) return sr.offset + run * sr.stride[0];
  if (!narrow) return sr.run_offset(run);
  auto i = static_cast<std::uint32_t>(run);
  index_t off = sr.offset;
  for (int k = sr.nloops - 1; k > 0; --k) {
    auto const c = static_cast<std::uint32_t>(sr.count[k]);
    std::uint32_t const q = i / c;
    off += static_cast<index_t>(i - q * c) * sr.stride[k];
    i = q;
  }
  return off + static_cast<index_t>(i) * sr.stride[0]; // i < count[0]: no division left
}

/// Byte offset, from the slot base, of word `w` (of W bytes) of region `d`'s packed order.
template <int W> HALOX_HD inline index_t word_buffer_offset(region_desc const& d, index_t w) {
  bool const narrow = d.narrow != 0;
  if (d.run_bytes == W) return run_start(d.sr, w, narrow) * d.elem_size;
  index_t run, within;
  if (narrow) {
    auto const wpr = static_cast<std::uint32_t>(d.run_bytes / W);
    auto const ww = static_cast<std::uint32_t>(w);
    std::uint32_t const q = ww / wpr;
    run = q;
    within = ww - q * wpr;
  } else {
    index_t const wpr = d.run_bytes / W;
    run = w / wpr;
    within = w - run * wpr;
  }
  return run_start(d.sr, run, narrow) * d.elem_size + within * W;
}

/// Calls `f(buffer_byte_offset, stream_byte_offset)` for every W-byte word that thread `tid`
/// of `nthreads` handles in block `block` (which lies in region `d`).
template <int W, class F> HALOX_HD inline void for_each_word(region_desc const& d, index_t block,
                                                             int tid, int nthreads, F&& f) {
  index_t const lo = (block - d.block_begin) * chunk_bytes;
  index_t const hi = lo + chunk_bytes < d.bytes ? lo + chunk_bytes : d.bytes;
  for (index_t b = lo + static_cast<index_t>(tid) * W; b < hi;
       b += static_cast<index_t>(nthreads) * W)
    f(word_buffer_offset<W>(d, b / W), d.stream_offset + b);
}

} // namespace halox::detail::gpu
