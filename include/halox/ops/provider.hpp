#pragma once
/// \file provider.hpp
/// Compute providers: which library runs the local kernels of the operators.
///
/// The distributed operators split their local work into boxes (interior while the halo
/// exchange runs, boundary afterwards); a provider computes those boxes. `reference` is the
/// portable implementation in `src/ops/` and the oracle of the tests; `onednn` runs the
/// convolutions and pooling through oneDNN primitives on host memory (float only); `cudnn` runs
/// them through cuDNN on device memory (CUDA builds). See docs/providers.md.

#include <halox/backend.hpp>
#include <halox/context.hpp>
#include <halox/dtype.hpp>
#include <halox/ops/batch_norm.hpp>
#include <halox/ops/lrn.hpp>
#include <halox/ops/tensor_ref.hpp>
#include <halox/ops/window.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace halox::ops {

/// The library that computes the local kernels.
enum class compute_provider {
  automatic, ///< the fastest provider built in for the element type and host memory
  reference, ///< halox's own kernels (float, double; host memory): the oracle
  onednn,    ///< oneDNN primitives (float; host memory); needs HALOX_ENABLE_ONEDNN
  cudnn      ///< cuDNN (float, double; device memory); needs HALOX_ENABLE_CUDNN and a GPU
};

/// "automatic", "reference", "onednn" or "cudnn".
[[nodiscard]] std::string to_string(compute_provider p);
/// Parses the names of `to_string`; throws `halox::error` naming the valid ones otherwise.
[[nodiscard]] compute_provider provider_from_string(std::string const& name);
/// Whether this build contains the provider (`automatic` and `reference` always are). Being
/// built does not mean usable: `cudnn` also needs a GPU at run time.
[[nodiscard]] bool provider_built(compute_provider p) noexcept;
/// The provider `requested` stands for with element type `t` on host memory: `automatic`
/// becomes `onednn` for float32 when built, else `reference`. Throws `halox::error` when an
/// explicit provider is not built or does not support `t` (oneDNN has no float64 convolution).
[[nodiscard]] compute_provider resolve_provider(compute_provider requested, dtype t);

/// Where provider `p` computes: device memory for `cudnn`, host memory for the others
/// (`automatic` resolves to a host provider).
[[nodiscard]] memory_space provider_memory(compute_provider p) noexcept;

/// The OpenMP threads a rank runs its kernels with when the caller did not choose
/// (`threads = 0`): see `default_threads()`.
struct thread_default {
  /// Threads per kernel call; 0 when OpenMP's own default fits (OMP_NUM_THREADS is set, the
  /// launcher bound the process to fewer CPUs than the node has, or it runs alone on the node).
  int threads = 0;
  /// CPUs this process may run on (its affinity mask; 0 when unknown): OpenMP's default count.
  int cpus = 0;
  /// Why, in words: "2 CPUs shared by 2 ranks on this node", "OMP_NUM_THREADS=4", "bound to 1
  /// CPU", "the only rank on this node", "the program set 3 OpenMP threads".
  std::string reason;
};

/// The thread count this process should give its kernels when nobody said. OpenMP starts one
/// thread per CPU the process may run on; a launcher that does not bind its ranks (MPICH's
/// Hydra by default, Open MPI when oversubscribing) lets every rank on a node run on all of its
/// CPUs, so ranks x threads would oversubscribe the cores and OpenMP's spin-waiting threads make
/// every call many times slower. In that case (several ranks on the node, from the launcher's
/// `MPI_LOCALNRANKS`, `OMPI_COMM_WORLD_LOCAL_SIZE` or `SLURM_NTASKS_PER_NODE`, no
/// `OMP_NUM_THREADS` and no `omp_set_num_threads` in effect, an affinity mask of the whole
/// node) it is the CPUs divided among those ranks, at least 1. Needs no MPI (callable before
/// `MPI_Init`).
[[nodiscard]] thread_default default_threads();

/// Bytes an operator uses on the calling rank, by how long and where. Sizes follow the calls
/// made so far: a provider sizes its buffers at the first call of each problem, so ask after
/// one forward and one backward.
struct memory_use {
  /// Kept from one call to the next (a convolution's reordered x, max pooling's winners, the
  /// batch-norm moments, plan buffers), host memory.
  std::size_t held_host = 0;
  /// The same in device memory.
  std::size_t held_device = 0;
  /// Needed during a call only, in this operator's own buffers (provider scratch, partial
  /// weight gradients), host memory. The scratch the operators of a thread share is counted
  /// once, by `shared_scratch_bytes()`, not here.
  std::size_t call_host = 0;
  /// The same in device memory.
  std::size_t call_device = 0;
  /// Of the held bytes, host or device: reordered copies kept from forward to backward, which
  /// `keep_reorders(false)` frees (at the cost of reordering again in backward).
  std::size_t kept_reorders = 0;
  /// What `kept_reorders` is with keep_reorders on (the same number then): what turning it on
  /// would cost. Not part of `total()`.
  std::size_t keepable_reorders = 0;

  /// Everything, host and device.
  [[nodiscard]] std::size_t total() const noexcept {
    return held_host + held_device + call_host + call_device;
  }
  /// Adds `o` field by field.
  memory_use& operator+=(memory_use const& o) noexcept {
    held_host += o.held_host;
    held_device += o.held_device;
    call_host += o.call_host;
    call_device += o.call_device;
    kept_reorders += o.kept_reorders;
    keepable_reorders += o.keepable_reorders;
    return *this;
  }
};

/// Bytes of the scratch every operator on the calling thread shares, in host and device memory:
/// the provider's reordered copies of a call's operands (oneDNN) and the workspace a backward
/// call gathers dy into. Each buffer is as large as the largest call that needed it, and is
/// used by one call at a time, so a network of many layers holds a few activations' worth,
/// not a few per layer.
struct shared_scratch {
  std::size_t host = 0;   ///< host memory
  std::size_t device = 0; ///< device memory
  /// The most host plus device memory it held at once so far: a problem's first calls measure
  /// candidate layouts whose buffers may be larger than the chosen one's, and release them.
  std::size_t peak = 0;
};
/// The calling thread's shared scratch now.
[[nodiscard]] shared_scratch shared_scratch_bytes() noexcept;
/// Frees the calling thread's shared scratch (it grows again at the next call that needs it):
/// for a caller about to allocate a large buffer of its own between training phases.
void release_shared_scratch() noexcept;
/// What a stretch of calls asked of the calling thread's shared scratch: the bytes of each of
/// its buffers (a provider's copies of x and y, its scratchpads; `bytes` in all). Opaque but for
/// `bytes`: record it with `scratch_mark` / `scratch_asked`, hand it back to `lend_scratch`.
struct scratch_need {
  std::size_t bytes = 0;    ///< in all, 64-byte multiples
  std::size_t part[8] = {}; ///< per buffer of the provider's
};
/// Starts recording what the calls that follow ask of the calling thread's shared scratch.
void scratch_mark() noexcept;
/// What the calls since `scratch_mark` asked (a layout measurement's candidates not counted).
[[nodiscard]] scratch_need scratch_asked() noexcept;
/// Lends the calls that follow `[p, p + need.bytes)` (64-byte aligned, caller-owned) as their
/// shared scratch, laid out as `need` says, until lent again; `p` null gives them their own
/// buffers again. A caller that places its memory by lifetime records what each call asks once
/// and lends it bytes dead at that moment, so that the scratch adds nothing to the step's peak
/// of live buffers. A call asking more than `need` uses the operators' own buffers for it.
void lend_scratch(void* p, scratch_need const& need) noexcept;
/// Makes the calling thread's shared scratch come from `a` (host scratch as
/// `memory_kind::host`, device scratch as `memory_kind::device`), so that a framework's caching
/// allocator or memory planner owns it, as plans' workspaces come from a context's allocator.
/// What the scratch holds is released first (through the allocator that gave it); an empty
/// allocator returns to halox's own (mmap for large host buffers, cudaMalloc). Both functions
/// are called between operator calls only, when a buffer must grow, never during a call.
void set_scratch_allocator(allocator const& a);

namespace detail {
template <class T> class compute_kernels;
} // namespace detail

/// The local kernels of one provider, with the `*_box` signatures of the reference functions
/// (conv.hpp, pool.hpp, relu.hpp, batch_norm.hpp, lrn.hpp): each call computes one box of a result
/// from buffers placed in global coordinates, so an operator can split its work into interior
/// and boundary boxes whatever the provider. For `cudnn` every pointer is device memory.
///
/// Fast providers choose an implementation per problem shape the first time they see it (for
/// oneDNN: a blocked internal layout with reorders, plain NCHW, or channels-last; for cuDNN: the
/// algorithm `cudnnFind*AlgorithmEx` measures fastest), remember the choice for the process,
/// and report it with `describe()`. Not thread-safe: one object per thread.
template <class T> class local_kernels {
public:
  /// Resolves `p` (see `resolve_provider`); `threads` > 0 sets the OpenMP threads of every
  /// call; 0: `default_threads()`, which is OpenMP's default (OMP_NUM_THREADS) unless several
  /// unbound ranks share the node.
  explicit local_kernels(compute_provider p = compute_provider::automatic, int threads = 0);
  /// Releases the kernels and the memory they hold.
  ~local_kernels();
  /// Moves the kernels.
  local_kernels(local_kernels&&) noexcept;
  /// Move-assigns.
  local_kernels& operator=(local_kernels&&) noexcept;

  /// The provider in use (never `automatic`).
  [[nodiscard]] compute_provider provider() const noexcept;
  /// Threads per call as constructed (0: `default_threads()`).
  [[nodiscard]] int threads() const noexcept;
  /// The threads each call runs with, and why: "4 threads (chosen by the caller)", "1 thread
  /// (default: 2 CPUs shared by 2 ranks on this node)", "OpenMP's default threads (bound to 2
  /// CPUs)". The distributed operators' `describe()` includes it.
  [[nodiscard]] std::string threads_description() const;

  /// As `conv_forward_box`.
  void conv_forward_box(const_block_ref<T> x, dims const& in_extent, const_tensor_ref<T> w,
                        T const* bias, block_ref<T> y, box const& out_box, conv_params const& p);
  /// As `conv_forward_box` followed by `relu_forward` on the box it wrote (one pass where the
  /// provider fuses them: oneDNN's ReLU post-op).
  void conv_forward_relu_box(const_block_ref<T> x, dims const& in_extent, const_tensor_ref<T> w,
                             T const* bias, block_ref<T> y, box const& out_box,
                             conv_params const& p);
  /// As `conv_backward_data_box`. `dy_kept`: the caller vouches that `dy` (its data and
  /// layout) is unchanged since this object's last `conv_backward_weights_box` call; if that
  /// call left the same view of dy in the layout this one reads (oneDNN: reordered into the
  /// primitive's layout), it is read instead of being reordered again.
  void conv_backward_data_box(const_block_ref<T> dy, dims const& in_extent, const_tensor_ref<T> w,
                              block_ref<T> dx, box const& in_box, conv_params const& p,
                              bool dy_kept = false);
  /// As `conv_backward_weights_box` (accumulates into dw). `x_kept`: the caller vouches that
  /// `x` is unchanged since this object's last `conv_forward_box` (or `_relu_box`) call, whose
  /// copy of the same view of x in the primitive's layout (oneDNN) is then read instead of
  /// reordering x again. As for `pool_backward_box`, any other call reorders, so the flags
  /// never change a result while the promise holds.
  void conv_backward_weights_box(const_block_ref<T> x, dims const& in_extent, const_block_ref<T> dy,
                                 tensor_ref<T> dw, box const& out_box, conv_params const& p,
                                 bool x_kept = false);
  /// As `conv_backward_bias_box` (accumulates into db).
  void conv_backward_bias_box(const_block_ref<T> dy, box const& out_box, T* db);
  /// As `pool_forward_box`. `keep`: the provider may keep what the backward pass of these
  /// outputs needs (oneDNN: the winners of max pooling, as PyTorch keeps its indices) for a
  /// `pool_backward_box` call with `x_kept`.
  void pool_forward_box(const_block_ref<T> x, dims const& in_extent, block_ref<T> y,
                        box const& out_box, pool_params const& p, bool keep = false);
  /// As `pool_backward_box`. `x_kept`: the caller vouches that `x` (its data and layout) is
  /// unchanged since this object's last pool forward call; if that call kept the winners of
  /// the outputs this box reads, max pooling uses them instead of finding them again. Any other
  /// call (another box, another buffer) finds them again, so the flag never changes a result
  /// while the promise holds.
  void pool_backward_box(const_block_ref<T> x, const_block_ref<T> dy, dims const& in_extent,
                         block_ref<T> dx, box const& in_box, pool_params const& p,
                         bool x_kept = false);
  /// As `relu_forward`.
  void relu_forward(const_tensor_ref<T> x, tensor_ref<T> y);
  /// As `relu_backward`.
  void relu_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx);
  /// As `bn_partial_stats`.
  [[nodiscard]] bn_stats bn_partial_stats(const_tensor_ref<T> x);
  /// As `bn_partial_stats_into`: reuses `out`'s storage.
  void bn_partial_stats(const_tensor_ref<T> x, bn_stats& out);
  /// As `bn_backward_partial`.
  [[nodiscard]] bn_grad_sums bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy,
                                                 bn_moments const& m);
  /// As `bn_backward_partial_into`: reuses `out`'s storage.
  void bn_backward_partial(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                           bn_grad_sums& out);
  /// As `bn_apply`.
  void bn_apply(const_tensor_ref<T> x, bn_moments const& m, T const* gamma, T const* beta,
                tensor_ref<T> y);
  /// As `bn_apply` followed by `relu_forward` on y (one pass where the provider fuses them).
  void bn_apply_relu(const_tensor_ref<T> x, bn_moments const& m, T const* gamma, T const* beta,
                     tensor_ref<T> y);
  /// As `bn_backward_apply`.
  void bn_backward_apply(const_tensor_ref<T> x, const_tensor_ref<T> dy, bn_moments const& m,
                         T const* gamma, bn_grad_sums const& total, bool training,
                         tensor_ref<T> dx);
  /// As `lrn_forward`. The reference and oneDNN providers have it; cuDNN throws
  /// `halox::error`.
  void lrn_forward(const_tensor_ref<T> x, tensor_ref<T> y, lrn_params const& p);
  /// As `lrn_backward`; the providers as for `lrn_forward`.
  void lrn_backward(const_tensor_ref<T> x, const_tensor_ref<T> dy, tensor_ref<T> dx,
                    lrn_params const& p);

  /// One line per problem shape seen: the implementation chosen and the measured cost of each
  /// candidate.
  [[nodiscard]] std::string describe() const;
  /// What these kernels hold between calls and in scratch of their own (the thread's shared
  /// scratch is counted by `shared_scratch_bytes()`).
  [[nodiscard]] memory_use memory() const;
  /// Whether a convolution forward keeps its reordered x for the backward-weights call (see
  /// `dist_options::keep_reorders`); false frees what is kept now.
  void keep_reorders(bool keep);

private:
  std::unique_ptr<detail::compute_kernels<T>> impl_;
  int threads_ = 0;     // as constructed
  int run_threads_ = 0; // what each call sets (0: leave OpenMP's count alone)
  std::string threads_why_;
};

} // namespace halox::ops
