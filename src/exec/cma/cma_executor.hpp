#pragma once
// cma: single-copy transfers between processes of one node with Linux cross-memory attach.
// Each receiver reads its message's runs straight out of the sender's tensor into its own with
// process_vm_readv (iov lists on both sides), so a strided message is neither packed nor
// unpacked: one copy, where a packing backend makes three (pack, transfer, unpack). MPI carries
// only two small control messages per peer and execution: the sender's buffer addresses, and the
// receiver's "read" that frees the sender's buffer.

#include "exec/executor.hpp"

#include <memory>

namespace halox::detail {

/// Builds the cma executor. Collective over the plan's communicator: peers exchange their pids
/// and run lists and each receiver test-reads every sender's memory; when any rank cannot (a peer
/// on another node, the kernel's ptrace policy, another pid namespace), every rank throws
/// `halox::error` (unsupported) naming the rank, the peer and the reason.
[[nodiscard]] std::unique_ptr<executor> make_cma_executor(schedule const& s,
                                                          exec_config const& cfg);

/// Test hook: the rank of `comm`'s communicator whose next cma construction reports its reads
/// as refused (EPERM), or -1. Resets itself after one construction.
void cma_refuse_reads_once(int rank) noexcept;

} // namespace halox::detail
