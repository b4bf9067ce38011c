// device_mpi_datatype: device buffers handed to MPI with derived datatypes, no halox packing of
// messages. It exists to measure how an MPI library's datatype engine treats GPU memory (many
// fall back to one cudaMemcpy per contiguous run). Local copies and fills still use the pack
// kernels; a reverse exchange receives into a landing area and combines with the unpack kernel.
//
// Each message is an MPI struct of its regions (each an hvector nest of contiguous runs, the
// same row-major run order as the pack kernels), with displacements relative to the buffer of
// its first region. Displacements between different buffers depend on the buffer addresses, so
// the struct types are rebuilt when the addresses change (normally once, on the first start).

#include "exec/cuda/device_backends.hpp"
#include "exec/cuda/device_pack.hpp"
#include "exec/cuda/stream_order.hpp"

#include <halox/detail/mpi_handle.hpp>
#include <halox/error.hpp>

#include <algorithm>
#include <vector>

namespace halox::detail {

namespace {

unique_datatype region_type(strided_region const& sr, std::size_t e) {
  unique_datatype t;
  HALOX_MPI_CHECK(
      MPI_Type_contiguous(mpi_count(static_cast<std::size_t>(sr.run) * e), MPI_BYTE, t.out()));
  for (int k = sr.nloops - 1; k >= 0; --k) {
    unique_datatype outer;
    HALOX_MPI_CHECK(MPI_Type_create_hvector(
        mpi_count(static_cast<std::size_t>(sr.count[k])), 1,
        static_cast<MPI_Aint>(sr.stride[k]) * static_cast<MPI_Aint>(e), t.get(), outer.out()));
    t = std::move(outer);
  }
  return t;
}

// Commits `t` in place (MPI_Type_commit may in principle replace the handle).
void commit(unique_datatype& t) {
  MPI_Datatype h = t.release();
  int const rc = MPI_Type_commit(&h);
  t = unique_datatype(h);
  if (rc != MPI_SUCCESS) throw_mpi_error(rc, "MPI_Type_commit", __FILE__, __LINE__);
}

// One message's regions as datatypes, and the struct built from them for the current buffers.
struct typed_message {
  std::vector<int> slot;
  std::vector<MPI_Aint> offset; // bytes from the slot base
  std::vector<unique_datatype> parts;
  unique_datatype whole;
  void* base = nullptr; // buffer `whole` is relative to

  typed_message(schedule const& s, message const& m) {
    for (auto const& r : m.regions) {
      auto const& sl = s.slots[static_cast<std::size_t>(r.slot)];
      strided_region const sr = make_region(r.b, sl.strides.data());
      if (sr.elements() == 0) continue;
      slot.push_back(r.slot);
      offset.push_back(static_cast<MPI_Aint>(sr.offset) * static_cast<MPI_Aint>(sl.elem_size));
      parts.push_back(region_type(sr, sl.elem_size));
    }
  }

  void bind(void* const* bufs) {
    if (parts.empty()) return;
    auto* const b = static_cast<unsigned char*>(bufs[slot[0]]);
    std::vector<int> lens(parts.size(), 1);
    std::vector<MPI_Aint> displ(parts.size());
    std::vector<MPI_Datatype> types(parts.size());
    for (std::size_t i = 0; i < parts.size(); ++i) {
      displ[i] = static_cast<MPI_Aint>(static_cast<unsigned char*>(bufs[slot[i]]) - b) + offset[i];
      types[i] = parts[i].get();
    }
    unique_datatype t;
    HALOX_MPI_CHECK(MPI_Type_create_struct(static_cast<int>(parts.size()), lens.data(),
                                           displ.data(), types.data(), t.out()));
    commit(t);
    whole = std::move(t);
    base = b;
  }
};

class device_datatype_executor final : public executor {
public:
  device_datatype_executor(schedule s, exec_config const& cfg)
      : executor(std::move(s), cfg), pack_(sched_, {false, true, cfg.fill_value, true}),
        ready_(make_sync_event()) {
    require_cuda_aware_mpi(cfg_.comm, kind());
    for (auto const& m : sched_.sends) sends_.emplace_back(sched_, m);
    for (auto const& m : sched_.recvs) recvs_.emplace_back(sched_, m);
    bound_.assign(sched_.slots.size(), nullptr);
    reqs_.assign(sched_.recvs.size() + sched_.sends.size(), MPI_REQUEST_NULL);
  }

  void start(void* const* bufs, combine_op op, void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    bufs_ = bufs;
    op_ = op;
    std::size_t const nr = sched_.recvs.size(), ns = sched_.sends.size();
    bool const combine = op != combine_op::replace;
    order_.after_previous_unpack(st, nr > 0 && combine);
    if (!std::equal(bound_.begin(), bound_.end(), bufs)) {
      for (auto& m : sends_) m.bind(bufs);
      for (auto& m : recvs_) m.bind(bufs);
      bound_.assign(bufs, bufs + bound_.size());
    }
    pack_.pack(bufs, st); // local-copy sources
    if (nr + ns > 0) {
      // MPI reads and writes the caller's buffers directly: the stream's earlier work first.
      HALOX_CUDA_CHECK(cudaEventRecord(ready_.get(), st));
      HALOX_CUDA_CHECK(cudaEventSynchronize(ready_.get()));
    }
    auto const& l = pack_.layout();
    for (std::size_t i = 0; i < nr; ++i) {
      auto const& m = sched_.recvs[i];
      if (combine)
        HALOX_MPI_CHECK(MPI_Irecv(pack_.stream() + l.recv_offset[i], mpi_count(m.bytes), MPI_BYTE,
                                  m.peer, 0, cfg_.comm, &reqs_[i]));
      else
        post(recvs_[i], m, &reqs_[i], false);
    }
    for (std::size_t i = 0; i < ns; ++i) post(sends_[i], sched_.sends[i], &reqs_[nr + i], true);
    order_.started(st);
  }

  void wait(void* stream) override {
    auto const st = static_cast<cudaStream_t>(stream);
    std::size_t const nr = sched_.recvs.size(), ns = sched_.sends.size();
    order_.join(st);
    if (nr > 0)
      HALOX_MPI_CHECK(MPI_Waitall(static_cast<int>(nr), reqs_.data(), MPI_STATUSES_IGNORE));
    pack_.unpack(bufs_, op_, st, op_ != combine_op::replace);
    order_.unpacked(st);
    if (ns > 0)
      HALOX_MPI_CHECK(MPI_Waitall(static_cast<int>(ns), reqs_.data() + nr, MPI_STATUSES_IGNORE));
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::device_mpi_datatype; }

private:
  void post(typed_message const& t, message const& m, MPI_Request* r, bool send) {
    if (t.parts.empty()) {
      // Nothing to move, but the peer still expects the (empty) message.
      if (send)
        HALOX_MPI_CHECK(MPI_Isend(nullptr, 0, MPI_BYTE, m.peer, 0, cfg_.comm, r));
      else
        HALOX_MPI_CHECK(MPI_Irecv(nullptr, 0, MPI_BYTE, m.peer, 0, cfg_.comm, r));
      return;
    }
    if (send)
      HALOX_MPI_CHECK(MPI_Isend(t.base, 1, t.whole.get(), m.peer, 0, cfg_.comm, r));
    else
      HALOX_MPI_CHECK(MPI_Irecv(t.base, 1, t.whole.get(), m.peer, 0, cfg_.comm, r));
  }

  device_pack pack_;
  unique_event ready_;
  stream_order order_; // after the buffers: its destructor waits for the last unpack
  std::vector<typed_message> sends_, recvs_;
  std::vector<void*> bound_;      // buffer addresses the struct types were built for
  std::vector<MPI_Request> reqs_; // receives first, then sends
  void* const* bufs_ = nullptr;
  combine_op op_ = combine_op::replace;
};

} // namespace

std::unique_ptr<executor> make_device_datatype_executor(schedule const& s, exec_config const& cfg) {
  return std::make_unique<device_datatype_executor>(s, cfg);
}

} // namespace halox::detail
