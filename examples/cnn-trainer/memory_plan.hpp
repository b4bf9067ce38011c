#pragma once
// Placing a training step's buffers by lifetime, the way a compiler assigns registers: every
// buffer the step reads and writes (activations, gradients, residual-gradient sums) gets an
// offset in one arena, and two buffers share bytes when no step between the write of one's
// content and its last read touches the other. Pure arithmetic: no MPI, no allocation of the
// buffers themselves.
#include <cstddef>
#include <vector>

namespace trainer {

/// One access of buffer `buffer` at position `time` of a step's schedule. `writes`: the access
/// overwrites every byte the buffer's later reads look at without reading the old content (the
/// content before it is dead); otherwise it reads (or reads and updates in place) the buffer.
struct buffer_use {
  std::size_t buffer = 0;
  long time = 0;
  bool writes = false;
};

/// Where each buffer lies in the arena, in bytes.
struct placement {
  std::vector<std::size_t> offset; ///< per buffer
  std::size_t bytes = 0;           ///< the arena's size
  std::size_t unplanned = 0;       ///< what a separate allocation per buffer would take
  /// The most bytes live at any one time: no placement can be smaller.
  std::size_t live_peak = 0;
};

/// Places buffers of `sizes` bytes, each used as `uses` say (in any order), on `align`-byte
/// boundaries. A buffer lives over each span from a write to the last read before the next
/// write; two buffers share bytes only where none of their spans meet. A read and a write of
/// one buffer at the same time count as a read (an in-place update). Greedy placement, each
/// buffer at an offset clear of the placed buffers it overlaps in time, in several orders
/// (largest first, as PyTorch's and TFLite's memory planners do; longest-lived first; first
/// written first) and with two rules for the offset (the lowest, the tightest gap): the
/// smallest arena of these is kept.
[[nodiscard]] placement place_buffers(std::vector<std::size_t> const& sizes,
                                      std::vector<buffer_use> const& uses, std::size_t align = 64);

} // namespace trainer
