// Batched pack/unpack kernels: all regions of one exchange (messages to every peer, local-copy
// scratch, boundary fills) in one launch. Which block handles which bytes, and where those bytes
// live in the buffers, is decided by exec/cuda/pack_desc.hpp, shared with the host emulation in
// tests/unit/test_pack_descriptors.cpp; this file only adds the typed memory accesses.

#include "exec/combine.hpp"
#include "exec/cuda/pack_launch.hpp"

#include "exec/cuda/cuda_handle.hpp"

#include <climits>
#include <cstring>

namespace halox::detail::gpu {
namespace {

static_assert(sizeof(region_desc) % 8 == 0, "region_desc is copied in 8-byte words");
constexpr int desc_words = static_cast<int>(sizeof(region_desc) / 8);

template <int W> struct word_type;
template <> struct word_type<16> { using type = uint4; };
template <> struct word_type<8> { using type = uint2; };
template <> struct word_type<4> { using type = unsigned int; };
template <> struct word_type<2> { using type = unsigned short; };
template <> struct word_type<1> { using type = unsigned char; };

// The block's region, copied once into shared memory: its loop arrays are indexed at run time,
// which in registers would mean a per-thread copy in local memory.
__device__ region_desc const& load_region(launch_args const& a, index_t block,
                                          unsigned long long* smem) {
  int const i = find_region(a.regions, a.first, a.last, block);
  auto const* src = reinterpret_cast<unsigned long long const*>(a.regions + i);
  for (int k = static_cast<int>(threadIdx.x); k < desc_words; k += static_cast<int>(blockDim.x))
    smem[k] = src[k];
  __syncthreads();
  return *reinterpret_cast<region_desc const*>(smem);
}

template <int W, bool Pack> __device__ void copy_words(region_desc const& d, index_t block,
                                                       unsigned char* buf, unsigned char* stream) {
  using V = typename word_type<W>::type;
  for_each_word<W>(d, block, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x),
                   [&](index_t b, index_t s) {
                     auto* pb = reinterpret_cast<V*>(buf + b);
                     auto* ps = reinterpret_cast<V*>(stream + s);
                     if (Pack)
                       *ps = *pb;
                     else
                       *pb = *ps;
                   });
}

template <bool Pack> __device__ void copy_region(int w, region_desc const& d, index_t block,
                                                 unsigned char* buf, unsigned char* stream) {
  switch (w) {
  case 16: copy_words<16, Pack>(d, block, buf, stream); break;
  case 8: copy_words<8, Pack>(d, block, buf, stream); break;
  case 4: copy_words<4, Pack>(d, block, buf, stream); break;
  case 2: copy_words<2, Pack>(d, block, buf, stream); break;
  default: copy_words<1, Pack>(d, block, buf, stream); break;
  }
}

template <int W>
__device__ void fill_words(region_desc const& d, index_t block, unsigned char* buf) {
  using V = typename word_type<W>::type;
  V v; // W >= elem_size here, so every word starts on an element and holds whole copies
  memcpy(&v, d.fill, W);
  for_each_word<W>(d, block, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x),
                   [&](index_t b, index_t) { *reinterpret_cast<V*>(buf + b) = v; });
}

__device__ void fill_region(int w, region_desc const& d, index_t block, unsigned char* buf) {
  switch (w) {
  case 16: fill_words<16>(d, block, buf); break;
  case 8: fill_words<8>(d, block, buf); break;
  case 4: fill_words<4>(d, block, buf); break;
  case 2: fill_words<2>(d, block, buf); break;
  default: fill_words<1>(d, block, buf); break;
  }
}

// Element-wise combine; the stream position of a region may be misaligned for T when a message
// mixes dtypes, the buffer never is (checked on the host before launch).
template <class T, class C> __device__ void combine_words(region_desc const& d, index_t block,
                                                          unsigned char* buf,
                                                          unsigned char const* stream, C combine) {
  bool const aligned = d.stream_align >= sizeof(T);
  for_each_word<sizeof(T)>(d, block, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x),
                           [&](index_t b, index_t s) {
                             T v;
                             if (aligned)
                               v = *reinterpret_cast<T const*>(stream + s);
                             else
                               memcpy(&v, stream + s, sizeof(T));
                             combine(*reinterpret_cast<T*>(buf + b), v);
                           });
}

// Combines one region as its element type (a functor, not a lambda: dispatched from the
// host-and-device visit_dtype, which must not see a constexpr device-only call).
struct combine_region_fn {
  region_desc const& d;
  index_t block;
  unsigned char* buf;
  unsigned char const* stream;
  combine_op op;

  template <class E> __device__ void operator()(E tag) const {
    using T = typename E::storage;
    combine_op const o = op;
    combine_words<T>(d, block, buf, stream, [o](T& x, T v) { combine_elem(E{}, x, v, o); });
  }
};

__device__ void combine_region(region_desc const& d, index_t block, unsigned char* buf,
                               unsigned char const* stream, combine_op op) {
  visit_dtype(static_cast<dtype>(d.type), combine_region_fn{d, block, buf, stream, op});
}

__global__ void __launch_bounds__(block_threads) pack_kernel(launch_args const a) {
  __shared__ unsigned long long smem[desc_words];
  index_t const block = a.block_lo + static_cast<index_t>(blockIdx.x);
  region_desc const& d = load_region(a, block, smem);
  auto* buf = static_cast<unsigned char*>(a.slots[d.slot]);
  copy_region<true>(effective_word(d, a.slot_align[d.slot]), d, block, buf, a.stream);
}

__global__ void __launch_bounds__(block_threads) unpack_kernel(launch_args const a) {
  __shared__ unsigned long long smem[desc_words];
  index_t const block = a.block_lo + static_cast<index_t>(blockIdx.x);
  region_desc const& d = load_region(a, block, smem);
  auto* buf = static_cast<unsigned char*>(a.slots[d.slot]);
  int const w = effective_word(d, a.slot_align[d.slot]);
  auto const op = static_cast<combine_op>(a.op);
  if (d.kind == static_cast<std::uint8_t>(region_kind::fill))
    fill_region(w, d, block, buf);
  else if (op == combine_op::replace)
    copy_region<false>(w, d, block, buf, a.stream);
  else
    combine_region(d, block, buf, a.stream, op);
}

unsigned grid_of(launch_args const& a) {
  index_t const n = a.block_hi - a.block_lo;
  HALOX_REQUIRE(n <= INT_MAX, errc::unsupported,
                std::to_string(n) + " blocks of " + std::to_string(chunk_bytes) +
                    " bytes exceed one launch; split the tensor over more ranks");
  return static_cast<unsigned>(n);
}

} // namespace

void launch_pack(launch_args const& a, cudaStream_t s) {
  if (a.block_hi <= a.block_lo) return;
  pack_kernel<<<grid_of(a), block_threads, 0, s>>>(a);
  HALOX_CUDA_CHECK(cudaGetLastError());
}

void launch_unpack(launch_args const& a, cudaStream_t s) {
  if (a.block_hi <= a.block_lo) return;
  unpack_kernel<<<grid_of(a), block_threads, 0, s>>>(a);
  HALOX_CUDA_CHECK(cudaGetLastError());
}

} // namespace halox::detail::gpu
