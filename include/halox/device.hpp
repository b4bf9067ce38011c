#pragma once
/// \file device.hpp
/// Which CUDA device a process should use: the one closest to the cpus it is bound to, with the
/// processes of a node spread over their closest devices. halox never changes the calling
/// thread's current device unless asked (`context_options::select_device`, or a call of
/// `cudaSetDevice(halox::closest_device(comm))` by the caller).

#include <mpi.h>

#include <string>

namespace halox {

/// The device chosen for the calling process, and why.
struct device_choice {
  /// CUDA device index (as cudaSetDevice takes it, among the devices visible to the process).
  int device = -1;
  /// One line: the device's PCI bus id and how it was chosen (closest to the process's cpus,
  /// or node-local rank modulo the device count, and then why: the process is not bound, or
  /// hwloc does not see the device's PCI locality).
  std::string reason;
};

/// Chooses the CUDA device the calling process should use. Collective over `comm`: every rank
/// calls it; the processes that share a node (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED)
/// exchange what they see.
///
/// Each process reads the cpus it is bound to and, for each visible device, the cpus of the
/// device's PCI locality (hwloc: the nearest non-I/O ancestor of the PCI device whose bus id
/// cudaDeviceGetPCIBusId gives). It then takes, among the devices sharing the most cpus with
/// it, the one that the fewest processes of its node with a lower node-local rank took: the
/// processes bound to one socket go round-robin over that socket's devices, and every device
/// of the node gets its share. A process that is not bound (its binding covers the whole node),
/// or whose devices' locality hwloc cannot see (no hwloc in the build, or no PCI information),
/// takes its node-local rank modulo its device count; `reason` says so.
///
/// Reads only; does not call cudaSetDevice. Throws `halox::error` (errc::unsupported) on every
/// rank when halox was built without CUDA or a rank sees no CUDA device, naming the rank and
/// the cause.
[[nodiscard]] device_choice choose_device(MPI_Comm comm);

/// `choose_device(comm).device`. Collective over `comm`; throws as `choose_device`.
[[nodiscard]] int closest_device(MPI_Comm comm);

} // namespace halox
