#include "grad_reducer.hpp"

#include "simd_clones.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <climits>
#include <cstring>
#include <new>
#include <string>
#include <thread>

namespace trainer {
namespace {

std::string size_text(std::size_t bytes) {
  return bytes ? std::to_string(bytes / 1024) + " KiB buckets" : std::string("one bucket");
}

// Whether the MPI library is MPICH (or one built on it that names it in its version string).
bool library_is_mpich() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  return std::string(v, static_cast<std::size_t>(len)).find("MPICH") != std::string::npos;
}

std::size_t default_bucket_bytes() { return library_is_mpich() ? 16 * 1024 : 0; }

} // namespace

std::string grad_reducer::describe() const {
  if (ranks_ == 1)
    return "gradient all-reduce: " + size_text(bucket_bytes_) + " (one rank: nothing to sum)";
  if (shared()) return "gradient all-reduce: in shared memory (every rank on one node)";
  return "gradient all-reduce: MPI, " + size_text(bucket_bytes_);
}

grad_reducer::grad_reducer(MPI_Comm comm, MPI_Datatype t, std::size_t t_size, std::size_t t_values,
                           std::size_t f64_values, std::size_t side_values,
                           std::size_t bucket_bytes, reduce_path path)
    : bucket_bytes_(bucket_bytes), side_(side_values) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_size(comm_, &ranks_);
  MPI_Comm_rank(comm_, &rank_);
  t_.type = t;
  t_.size = t_size;
  t_.total = t_values;
  f64_.type = MPI_DOUBLE;
  f64_.size = sizeof(double);
  f64_.total = f64_values;
  if (ranks_ == 1) { // nothing to sum: no buffers
    bucket_bytes_ = 0;
    return;
  }
  if (path != reduce_path::mpi) {
    // Every rank on one node: its shared-memory communicator is the whole of comm_ (the same
    // answer on every rank, so every rank takes the same path or throws the same error).
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int node_ranks = 0;
    MPI_Comm_size(node, &node_ranks);
    MPI_Comm_free(&node);
    bool const sums_as = t_size == sizeof(float) || t_size == sizeof(double);
    HALOX_REQUIRE(path == reduce_path::automatic || node_ranks == ranks_,
                  halox::errc::invalid_argument,
                  "--grad-reduce shared: the " + std::to_string(ranks_) +
                      " ranks do not all run on one node (this node has " +
                      std::to_string(node_ranks) + "); use --grad-reduce auto or mpi");
    if (node_ranks == ranks_ && sums_as) {
      // With a core for every rank, an await spins until the flag turns (a sched_yield is a
      // system call of about 1 us on a virtual machine, and the waits are a few us); with
      // more ranks than cores it soon gives its core to the rank it waits for.
      unsigned const cores = std::thread::hardware_concurrency();
      if (cores && static_cast<unsigned>(ranks_) <= cores) spins_ = 1 << 14;
      open_shared();
      return;
    }
  }
  if (bucket_bytes_ == auto_bucket) bucket_bytes_ = default_bucket_bytes();
  for (stream* s : {&t_, &f64_}) {
    s->own.resize((s->total * s->size + sizeof(double) - 1) / sizeof(double));
    bytes_ += s->own.size() * sizeof(double);
    s->data = reinterpret_cast<char*>(s->own.data());
  }
  std::size_t requests = 3;
  for (stream const* s : {&t_, &f64_})
    if (bucket_bytes_) requests += s->own.size() * sizeof(double) / bucket_bytes_ + 1;
  pending_.reserve(requests); // a step then allocates nothing here
}

void grad_reducer::open_shared() {
  // This rank's segment: its flags, then its slot of each stream, each on its own cache lines.
  auto const lines = [](std::size_t bytes) { return (bytes + 63) / 64 * 64; };
  std::size_t const t_at = lines(sizeof(flags));
  std::size_t const f64_at = t_at + lines(t_.total * t_.size);
  std::size_t const side_at = f64_at + lines(f64_.total * f64_.size);
  std::size_t const bytes = side_at + lines(side_ * sizeof(double));
  MPI_Info info = MPI_INFO_NULL;
  MPI_Info_create(&info);
  MPI_Info_set(info, "alloc_shared_noncontig", "true"); // each segment in its rank's memory
  void* mine = nullptr;
  MPI_Win_allocate_shared(static_cast<MPI_Aint>(bytes), 1, info, comm_, &mine, &win_);
  bytes_ += bytes;
  MPI_Info_free(&info);
  auto* own = new (mine) flags;
  for (flag* f : {&own->filled, &own->summed, &own->read}) // no reduction has reached any step
    f->v.store(0, std::memory_order_relaxed);
  flags_.resize(static_cast<std::size_t>(ranks_));
  t_.slot.resize(flags_.size());
  f64_.slot.resize(flags_.size());
  side_at_.resize(flags_.size());
  for (int q = 0; q < ranks_; ++q) {
    MPI_Aint size = 0;
    int unit = 0;
    void* base = nullptr;
    MPI_Win_shared_query(win_, q, &size, &unit, &base);
    auto* b = static_cast<char*>(base);
    flags_[static_cast<std::size_t>(q)] = reinterpret_cast<flags*>(b);
    t_.slot[static_cast<std::size_t>(q)] = b + t_at;
    f64_.slot[static_cast<std::size_t>(q)] = b + f64_at;
    side_at_[static_cast<std::size_t>(q)] = b + side_at;
  }
  t_.data = t_.slot[static_cast<std::size_t>(rank_)];
  f64_.data = f64_.slot[static_cast<std::size_t>(rank_)];
  // Loads and stores for the rest of the window's life; the flags' atomics order them.
  MPI_Win_lock_all(MPI_MODE_NOCHECK, win_);
  MPI_Barrier(comm_); // every rank's flags are initialised before any rank reads them
}

grad_reducer::~grad_reducer() {
  // After an error mid-step the job is aborted; a clean end has no request left.
  if (win_ != MPI_WIN_NULL) {
    MPI_Win_unlock_all(win_);
    MPI_Win_free(&win_);
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void grad_reducer::add(grad_part const& g) {
  if (ranks_ == 1 || g.count == 0) return;
  stream& s = of(g.in_double);
  HALOX_REQUIRE(s.filled + g.count <= s.total, halox::errc::internal,
                "halox-train: the gradient buckets hold " + std::to_string(s.total) +
                    " values of " + std::to_string(s.size) + " bytes but the layers listed more");
  if (shared()) claim_slot();
  std::memcpy(s.data + s.filled * s.size, g.data, g.count * s.size);
  s.filled += g.count;
  s.parts.push_back(g);
  if (shared()) return;
  std::size_t const per = bucket_bytes_ / s.size; // values per full bucket
  while (per && s.filled - s.started >= per) start(s, per);
}

void grad_reducer::start(stream& s, std::size_t n) {
  HALOX_REQUIRE(n <= static_cast<std::size_t>(INT_MAX), halox::errc::internal,
                "halox-train: a gradient bucket of " + std::to_string(n) +
                    " values exceeds MPI's int count; pass a smaller --bucket-kb");
  pending_.emplace_back();
  MPI_Iallreduce(MPI_IN_PLACE, s.data + s.started * s.size, static_cast<int>(n), s.type, MPI_SUM,
                 comm_, &pending_.back());
  s.started += n;
  kicked_ = false;
}

void grad_reducer::progress(double& seconds) {
  if (kicked_ || pending_.empty()) return;
  kicked_ = true;
  double const t0 = MPI_Wtime();
  int done = 0;
  MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE);
  if (done) pending_.clear();
  seconds += MPI_Wtime() - t0;
}

void grad_reducer::wait(double* side) {
  if (ranks_ == 1) return; // nothing was listed, the side values are the sums
  if (shared()) return wait_shared(side);
  for (stream* s : {&t_, &f64_})
    if (s->filled > s->started) start(*s, s->filled - s->started);
  if (side_) {
    pending_.emplace_back();
    MPI_Iallreduce(MPI_IN_PLACE, side, static_cast<int>(side_), MPI_DOUBLE, MPI_SUM, comm_,
                   &pending_.back());
  }
  MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
  pending_.clear();
  for (stream* s : {&t_, &f64_}) {
    char const* p = s->data;
    for (grad_part const& g : s->parts) {
      std::memcpy(g.data, p, g.count * s->size);
      p += g.count * s->size;
    }
    s->parts.clear();
    s->filled = s->started = 0;
  }
}

namespace {

// acc[i] = the sum of slot[q][i] over q in rank order, for i in [lo, hi).
template <class V>
void sum_part(std::vector<char*> const& slot, std::size_t lo, std::size_t hi, char* out) {
  auto* o = reinterpret_cast<V*>(out);
  auto const* first = reinterpret_cast<V const*>(slot[0]);
  for (std::size_t i = lo; i < hi; ++i) {
    V acc = first[i];
    for (std::size_t q = 1; q < slot.size(); ++q) acc += reinterpret_cast<V const*>(slot[q])[i];
    o[i] = acc;
  }
}

// out[i] = a[i] + b[i]: the sums of 2 ranks' slots, straight into a member. Only additions,
// so every clone gives the same bits.
template <class V> TRAINER_SIMD_CLONES void add_slots(std::size_t n, V const* __restrict a,
                                                      V const* __restrict b, V* __restrict out) {
#pragma omp simd
  for (std::size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

} // namespace

std::size_t grad_reducer::part_lo(std::size_t n, int q) const {
  if (q >= ranks_) return n;
  // Parts of whole cache lines of floats (16 values), the last one taking the rest.
  return std::min(n, n * static_cast<std::size_t>(q) / static_cast<std::size_t>(ranks_) / 16 * 16);
}

void grad_reducer::await(flag flags::*which, std::uint64_t k) const {
  for (flags* f : flags_) {
    std::atomic<std::uint64_t> const& v = (f->*which).v;
    // Spin a while, then give the core away: with more ranks than cores, the rank waited for
    // may need this one's core.
    for (int spins = 0; v.load(std::memory_order_acquire) < k; ++spins) {
      if (spins >= spins_) std::this_thread::yield();
#if defined(__x86_64__)
      else
        __builtin_ia32_pause(); // lets the core's other hardware thread run meanwhile
#endif
    }
  }
}

void grad_reducer::claim_slot() {
  if (packing_) return;
  // This slot is overwritten from here on: every rank must have read its sums of the last
  // reduction from it (at once in practice: a whole forward pass has run since).
  await(&flags::read, done_);
  packing_ = true;
}

void grad_reducer::wait_shared(double* side) {
  std::uint64_t const k = done_ + 1;
  flags& me = *flags_[static_cast<std::size_t>(rank_)];
  claim_slot(); // a step without members still takes its turn
  if (side_) std::memcpy(side_at_[static_cast<std::size_t>(rank_)], side, side_ * sizeof(double));
  me.filled.v.store(k, std::memory_order_release);
  await(&flags::filled, k);
  if (ranks_ == 2)
    sum_all();
  else
    sum_parts(k);
  // Every rank sums the few side values itself, in rank order.
  sum_part<double>(side_at_, 0, side_, reinterpret_cast<char*>(side));
  for (stream* s : {&t_, &f64_}) {
    s->parts.clear();
    s->filled = s->started = 0;
  }
  me.read.v.store(k, std::memory_order_release);
  done_ = k;
  packing_ = false;
}

void grad_reducer::sum_all() {
  for (stream* s : {&t_, &f64_}) {
    std::size_t at = 0; // bytes into the slots
    for (grad_part const& g : s->parts) {
      char const* a = s->slot[0] + at;
      char const* b = s->slot[1] + at;
      if (s->size == sizeof(double))
        add_slots(g.count, reinterpret_cast<double const*>(a), reinterpret_cast<double const*>(b),
                  static_cast<double*>(g.data));
      else
        add_slots(g.count, reinterpret_cast<float const*>(a), reinterpret_cast<float const*>(b),
                  static_cast<float*>(g.data));
      at += g.count * s->size;
    }
  }
}

void grad_reducer::sum_parts(std::uint64_t k) {
  for (stream* s : {&t_, &f64_}) { // part rank_ of the sums, into this rank's slot
    std::size_t const lo = part_lo(s->filled, rank_), hi = part_lo(s->filled, rank_ + 1);
    if (s->size == sizeof(double))
      sum_part<double>(s->slot, lo, hi, s->data);
    else
      sum_part<float>(s->slot, lo, hi, s->data);
  }
  flags_[static_cast<std::size_t>(rank_)]->summed.v.store(k, std::memory_order_release);
  await(&flags::summed, k);
  for (stream* s : {&t_, &f64_}) {
    // Value i of the stream is summed in the slot of the rank whose part holds it.
    std::size_t at = 0;
    int q = 0;
    for (grad_part const& g : s->parts) {
      auto* dst = static_cast<char*>(g.data);
      for (std::size_t done = 0; done < g.count;) {
        while (at + done >= part_lo(s->filled, q + 1)) ++q;
        std::size_t const n = std::min(g.count - done, part_lo(s->filled, q + 1) - (at + done));
        std::memcpy(dst + done * s->size,
                    s->slot[static_cast<std::size_t>(q)] + (at + done) * s->size, n * s->size);
        done += n;
      }
      at += g.count;
    }
  }
}

} // namespace trainer
