#pragma once
// What the CUDA runtime says about the visible devices, for `halox::choose_device`. Declared
// here, outside the backend folders, so that the API layer reaches it without including one;
// defined in cuda/device_probe.cpp, compiled only in CUDA builds. Includes no CUDA header, so the
// core declares its use behind HALOX_HAS_CUDA.

#include <string>
#include <vector>

namespace halox::detail {

/// PCI bus ids ("0000:41:00.0") of the visible devices, by device index. Empty, with `problem`
/// saying why, when no device is visible or the runtime fails.
[[nodiscard]] std::vector<std::string> cuda_device_bus_ids(std::string& problem);

/// cudaSetDevice(device); throws `halox::error` naming the device on failure.
void set_current_device(int device);

} // namespace halox::detail
