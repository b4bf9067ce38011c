#pragma once
// oneDNN convolutions on boxes of caller buffers: one oneDNN problem per box, whose source is
// the box's footprint in the caller's strided buffer and whose padding is the global zero
// padding that falls inside the box's windows (so interior and boundary boxes of a distributed
// layer are ordinary, smaller convolutions). Per problem shape the fastest of three layouts is
// measured once and remembered: oneDNN's preferred blocked layout (`format_tag::any`, with
// reorders from and to the caller's views), plain NCHW, or channels-last.

#include "ops/providers/onednn/onednn_common.hpp"

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace halox::ops::detail::onednn {

/// Which convolution primitive.
enum class conv_kind { forward, backward_data, backward_weights };

/// A convolution on a local region in oneDNN terms, plus the caller's views.
struct conv_job {
  conv_kind kind = conv_kind::forward;
  int nsp = 0;
  memory::dims src, wei, dst;             ///< problem dims (src = x / dx, dst = y / dy)
  memory::dims stride, dil, pl, pr;       ///< oneDNN conventions (dilation - 1)
  bool bias = false;                      ///< forward with bias
  bool relu = false;                      ///< forward followed by ReLU (a post-op)
  memory::desc usr_src, usr_wei, usr_dst; ///< caller views (usr_dst may be smaller: see ext)
  memory::dims dst_offset;                ///< where usr_dst sits in dst (zero extension), or empty
  void* src_ptr = nullptr;                ///< x / dx
  void* wei_ptr = nullptr;                ///< w (forward, backward-data)
  void* dst_ptr = nullptr;                ///< y / dy
  void* bias_ptr = nullptr;               ///< bias (forward)
};

/// Builds, chooses, caches and runs convolution primitives.
class conv_engine {
public:
  conv_engine();
  ~conv_engine();
  conv_engine(conv_engine const&) = delete;
  conv_engine& operator=(conv_engine const&) = delete;

  /// Runs `job`; for backward_weights the gradient lands in `dw_plain` ([O, I, k...] dense,
  /// overwritten). `input_kept` (backward only): the caller vouches that the input this job
  /// would reorder (x for backward-weights, dy for backward-data) is unchanged since this
  /// engine's last forward (x) or backward-weights (dy) call; if that call left the same view
  /// of the same memory reordered into the layout this job reads, the job reads that copy
  /// instead of reordering again (a conv layer's backward reads the x its forward read, and
  /// its two backward passes read one dy).
  void run(char const* op, conv_job const& job, float* dw_plain = nullptr, bool input_kept = false);
  /// A call of `kind` (forward or backward-weights) that another path computed (the reference
  /// loops, or nothing to compute): what the last such call left reordered no longer follows
  /// the caller's memory.
  void forget(conv_kind kind);
  /// One line per problem seen, and how many backward calls read a kept input.
  [[nodiscard]] std::string describe() const;
  /// Whether a forward keeps its reordered x for the backward-weights call after it (true, the
  /// default: one reorder fewer per backward, and one copy of x held between the calls).
  /// false frees the copy held now.
  void keep_inputs(bool keep) noexcept;
  /// Bytes this engine holds between calls: the kept copy of x (the shared scratch is counted
  /// by `arena()`).
  [[nodiscard]] std::size_t held_bytes() const noexcept;
  /// What `held_bytes()` is (or would be) with kept inputs: the largest reordered x of the
  /// forward calls seen.
  [[nodiscard]] std::size_t keepable_bytes() const noexcept { return want_x_bytes_; }

private:
  struct exec;
  // Where an exec's reordered src, dst and weights live during one call.
  struct buffers {
    void* src = nullptr;
    void* dst = nullptr;
    void* wei = nullptr;
  };
  // `keep_x`: a forward's src goes into the engine's kept copy instead of shared scratch;
  // `dy_read_kept`: a backward-data call reads the dy kept in the dst role.
  buffers buffers_for(exec const& ex, conv_job const& job, bool keep_x, bool dy_read_kept);
  struct plan;
  // Every field of a job that selects its plan (the readable key is built only for a new one).
  static void fingerprint_of(conv_job const& j, fingerprint& f);
  struct held;
  // The input `job` may read as an earlier call left it reordered (see `run`), or null.
  [[nodiscard]] held const* held_for(conv_job const& job, bool input_kept) const;
  // The data of `h`'s reordered input where `ex` reads that layout of the same view, or null.
  [[nodiscard]] static void* kept_input(exec const& ex, conv_job const& job, held const* h);
  void run_exec(exec& ex, conv_job const& job, float* dw_plain, bool input_kept);

  std::map<std::string, std::unique_ptr<plan>> plans_;                      // by readable key
  std::unordered_map<fingerprint, plan*, fingerprint_hash> by_fingerprint_; // the same plans
  fingerprint scratch_; // reused for the lookup, so a known problem allocates no key
  // The input the last forward (x) and the last backward-weights (dy) call reordered: which
  // exec holds the copy, and the caller memory it came from.
  struct held {
    exec const* ex = nullptr;
    void const* ptr = nullptr;
    void* data = nullptr;    // the reordered copy
    std::uint64_t stamp = 0; // dy: the dst role's stamp when it was written
  };
  held held_x_, held_dy_;
  long reused_ = 0; // backward calls that read a kept input
  bool keep_x_ = true;
  std::unique_ptr<void, void (*)(void*)> kept_x_{nullptr, std::free};
  std::size_t kept_x_bytes_ = 0;
  std::size_t want_x_bytes_ = 0; // the kept copy's size, kept or not
};

} // namespace halox::ops::detail::onednn
