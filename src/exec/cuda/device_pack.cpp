#include "exec/cuda/device_pack.hpp"

#include "exec/cuda/pack_launch.hpp"

#include <halox/error.hpp>

#include <cstdint>

namespace halox::detail {

device_pack::device_pack(schedule const& s, device_pack_options const& o,
                         std::shared_ptr<context_state> const& ctx)
    : layout_(gpu::make_stream_layout(s)), pack_(gpu::make_pack_batch(s, layout_, o.pack_sends)),
      unpack_(gpu::make_unpack_batch(s, layout_, o.unpack_recvs, true, o.fill_value)) {
  if (o.local_variant)
    unpack_local_ = gpu::make_unpack_batch(s, layout_, false, true, o.fill_value);
  for (auto const& sl : s.slots) elem_size_.push_back(sl.elem_size);
  checked_.assign(s.slots.size(), nullptr);
  std::size_t const n[3] = {pack_.regions.size(), unpack_.regions.size(),
                            unpack_local_.regions.size()};
  std::size_t const total = n[0] + n[1] + n[2];
  if (total > 0) descs_ = memory_block(ctx, total * sizeof(gpu::region_desc), memory_kind::device);
  auto* d = reinterpret_cast<gpu::region_desc*>(descs_.data());
  gpu::desc_batch const* batches[3] = {&pack_, &unpack_, &unpack_local_};
  gpu::region_desc const** where[3] = {&pack_descs_, &unpack_descs_, &unpack_local_descs_};
  for (int k = 0; k < 3; ++k) {
    if (n[k] == 0) continue;
    HALOX_CUDA_CHECK(cudaMemcpy(d, batches[k]->regions.data(), n[k] * sizeof(gpu::region_desc),
                                cudaMemcpyHostToDevice));
    *where[k] = d;
    d += n[k];
  }
}

void device_pack::bind(void* const* bufs) {
  for (std::size_t i = 0; i < elem_size_.size(); ++i) {
    void* p = bufs[i];
    auto const addr = reinterpret_cast<std::uintptr_t>(p);
    if (p != checked_[i]) {
      HALOX_REQUIRE(addr % elem_size_[i] == 0, errc::invalid_argument,
                    "buffer " + std::to_string(i) + " is not aligned to its " +
                        std::to_string(elem_size_[i]) + "-byte elements");
      if (p != nullptr) {
        cudaPointerAttributes attr{};
        HALOX_CUDA_CHECK(cudaPointerGetAttributes(&attr, p));
        HALOX_REQUIRE(attr.type != cudaMemoryTypeUnregistered, errc::invalid_argument,
                      "buffer " + std::to_string(i) +
                          " is ordinary host memory but the plan was built for device memory; "
                          "pass a device (or managed / pinned) buffer, or plan with "
                          "memory_space::host");
      }
      checked_[i] = p;
    }
    args_.slots[i] = p;
    args_.slot_align[i] = static_cast<std::uint8_t>(gpu::pow2_divisor(addr));
  }
}

void device_pack::run(gpu::desc_batch const& b, gpu::region_desc const* d, bool pack,
                      cudaStream_t st) {
  args_.regions = d;
  for (auto const& l : b.launches) {
    args_.first = l.first;
    args_.last = l.last;
    args_.block_lo = l.block_lo;
    args_.block_hi = l.block_hi;
    if (pack)
      gpu::launch_pack(args_, st);
    else
      gpu::launch_unpack(args_, st);
  }
}

void device_pack::pack(void* const* bufs, cudaStream_t st) {
  if (pack_.launches.empty()) return;
  bind(bufs);
  args_.op = static_cast<std::uint8_t>(combine_op::replace);
  run(pack_, pack_descs_, true, st);
}

void device_pack::unpack(void* const* bufs, combine_op op, cudaStream_t st, bool with_recvs) {
  gpu::desc_batch const& b = with_recvs ? unpack_ : unpack_local_;
  if (b.launches.empty()) return;
  bind(bufs);
  args_.op = static_cast<std::uint8_t>(op);
  run(b, with_recvs ? unpack_descs_ : unpack_local_descs_, false, st);
}

} // namespace halox::detail
