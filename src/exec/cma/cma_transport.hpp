#pragma once
// Cross-memory attach as a transport (Linux, processes of one node): the receiver reads each
// message straight out of the sender's memory into its own with process_vm_readv, iov lists on
// both sides, one copy. MPI carries only control messages: per exchange, each sender's iov list
// (its run addresses, or a two-word "unchanged" note when its buffers are where they were last
// time) and each receiver's "read" notice. At construction the ranks check that they may read
// each other (same node, ptrace permission, one pid namespace) and agree on it. The backend
// `cma` is the packing executor's iov strategy over this transport (docs/cma.md).

#include "exec/transport.hpp"

#include <memory>

namespace halox::detail {

/// The cma transport on `waits`. Its construction is collective over the plan's communicator
/// (every rank learns whether all could read their peers); throws `halox::error`
/// (errc::unsupported) naming the first rank that cannot, and why.
[[nodiscard]] std::unique_ptr<transport> make_cma_transport(wait_context& waits);

/// Makes the next cma transport built on `rank` fail its test read as if the kernel refused it
/// (EPERM), for tests of the error path.
void cma_refuse_reads_once(int rank) noexcept;

} // namespace halox::detail
