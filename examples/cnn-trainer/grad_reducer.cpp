#include "grad_reducer.hpp"

#include <halox/error.hpp>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>

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
  return "gradient all-reduce: " + size_text(bucket_bytes_) +
         (ranks_ == 1 ? " (one rank: nothing to sum)" : "");
}

grad_reducer::grad_reducer(MPI_Comm comm, MPI_Datatype t, std::size_t t_size, std::size_t t_values,
                           std::size_t f64_values, std::size_t bucket_bytes)
    : bucket_bytes_(bucket_bytes) {
  MPI_Comm_dup(comm, &comm_);
  MPI_Comm_size(comm_, &ranks_);
  t_.type = t;
  t_.size = t_size;
  f64_.type = MPI_DOUBLE;
  f64_.size = sizeof(double);
  if (ranks_ == 1) { // nothing to sum: no buffers
    bucket_bytes_ = 0;
    return;
  }
  if (bucket_bytes_ == auto_bucket) bucket_bytes_ = default_bucket_bytes();
  for (auto [s, n] : {std::pair{&t_, t_values}, std::pair{&f64_, f64_values}})
    s->buf.resize((n * s->size + sizeof(double) - 1) / sizeof(double));
  std::size_t requests = 3;
  for (stream const* s : {&t_, &f64_})
    if (bucket_bytes_) requests += s->buf.size() * sizeof(double) / bucket_bytes_ + 1;
  pending_.reserve(requests); // a step then allocates nothing here
}

grad_reducer::~grad_reducer() {
  // After an error mid-step the job is aborted; a clean end has no request left.
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void grad_reducer::add(grad_part const& g) {
  if (ranks_ == 1 || g.count == 0) return;
  stream& s = of(g.in_double);
  std::size_t const cap = s.buf.size() * sizeof(double) / s.size;
  HALOX_REQUIRE(s.filled + g.count <= cap, halox::errc::internal,
                "halox-train: the gradient buckets hold " + std::to_string(cap) + " values of " +
                    std::to_string(s.size) + " bytes but the layers listed more");
  std::memcpy(reinterpret_cast<char*>(s.buf.data()) + s.filled * s.size, g.data, g.count * s.size);
  s.filled += g.count;
  s.parts.push_back(g);
  std::size_t const per = bucket_bytes_ / s.size; // values per full bucket
  while (per && s.filled - s.started >= per) start(s, per);
}

void grad_reducer::start(stream& s, std::size_t n) {
  HALOX_REQUIRE(n <= static_cast<std::size_t>(INT_MAX), halox::errc::internal,
                "halox-train: a gradient bucket of " + std::to_string(n) +
                    " values exceeds MPI's int count; pass a smaller --bucket-kb");
  pending_.emplace_back();
  MPI_Iallreduce(MPI_IN_PLACE, reinterpret_cast<char*>(s.buf.data()) + s.started * s.size,
                 static_cast<int>(n), s.type, MPI_SUM, comm_, &pending_.back());
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

void grad_reducer::wait(MPI_Request* also) {
  for (stream* s : {&t_, &f64_})
    if (s->filled > s->started) start(*s, s->filled - s->started);
  if (also) pending_.push_back(*also);
  MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
  if (also) *also = MPI_REQUEST_NULL;
  pending_.clear();
  for (stream* s : {&t_, &f64_}) {
    char const* p = reinterpret_cast<char const*>(s->buf.data());
    for (grad_part const& g : s->parts) {
      std::memcpy(g.data, p, g.count * s->size);
      p += g.count * s->size;
    }
    s->parts.clear();
    s->filled = s->started = 0;
  }
}

} // namespace trainer
