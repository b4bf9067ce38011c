#pragma once
/// \file backend.hpp
/// Communication backends and the options shared by every plan.

#include <string>
#include <vector>

namespace halox {

/// How a plan moves its data. Every backend can execute every plan (halo exchange,
/// reverse exchange, redistribution); they differ in speed, which depends on the MPI library,
/// the network and the shapes, hence `automatic`, which measures.
enum class backend {
  automatic,           ///< measure the applicable candidates at plan time and keep the fastest
  mpi_datatype,        ///< MPI derived datatypes + MPI_Isend/MPI_Irecv; halox packs nothing
  mpi_pack,            ///< halox packs into one buffer per peer + Isend/Irecv ("p2p"); contiguous
                       ///< single-region messages are sent and received in place (zero copy)
  mpi_persistent,      ///< like mpi_pack, with persistent requests (MPI_Send_init/MPI_Recv_init)
  mpi_neighbor,        ///< pack + MPI_Ineighbor_alltoallv on a distributed-graph topology
  alltoallv,           ///< pack + one MPI_Ialltoallv over the whole communicator
  alltoallw,           ///< derived datatypes + one MPI_Ialltoallw over the whole communicator
  cuda_aware_mpi,      ///< device buffers: CUDA pack kernels, device pointers handed to MPI
  staged_mpi,          ///< device buffers: CUDA pack, copy to pinned host memory, MPI, copy back
  nccl,                ///< device buffers: CUDA pack + ncclSend/ncclRecv on the stream
  device_mpi_datatype, ///< device buffers given to MPI with derived datatypes (to expose how an
                       ///< MPI's datatype engine handles GPU memory)
  ucx,     ///< host buffers, UCX (UCP tag messages) without MPI: halox packs each peer's regions
           ///< into one message; single contiguous regions go in place (builds with UCX)
  ucx_iov, ///< like ucx, but multi-region messages go as UCP iov lists straight from/to the
           ///< tensor, no packing (a combining reverse exchange still unpacks what it receives)
  cma, ///< host buffers of processes on one node (Linux): each receiver reads its message straight
       ///< from the sender's tensor into its own with process_vm_readv (iov lists on both sides,
       ///< one copy, no packing); MPI carries only the buffer addresses and a "read" notice
  mpi_pipeline ///< like mpi_pack, but a long message travels in fragments: the sender packs and
               ///< sends one fragment after the other, the receiver unpacks each as it lands, so
               ///< packing, transfer and unpacking overlap (see context_options::
               ///< pipeline_fragment_bytes); short messages go whole, as with mpi_pack
};

/// Name of a backend ("mpi_pack", ...).
[[nodiscard]] char const* to_string(backend b) noexcept;
/// Parses a backend name (also accepts "auto" and "p2p" = mpi_pack); throws `halox::error`
/// listing the accepted names.
[[nodiscard]] backend backend_from_string(std::string const& name);
/// The backends that run on host memory, in a stable order.
[[nodiscard]] std::vector<backend> host_backends();
/// The backends that run on device memory (empty when halox was built without CUDA).
[[nodiscard]] std::vector<backend> device_backends();

/// Where a plan's buffers live.
enum class memory_space {
  host,  ///< ordinary CPU memory
  device ///< CUDA device memory (needs a CUDA build)
};

/// Reduction used by the reverse (accumulating) exchange.
enum class reduce_op {
  sum, ///< the owner's value plus every halo copy's (gradients)
  max, ///< the largest of the owner's value and its halo copies'
  min  ///< the smallest of the owner's value and its halo copies'
};

} // namespace halox
