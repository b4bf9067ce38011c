#include "exec/cma/cma_transport.hpp"

#include "exec/node_id.hpp"

#include <halox/error.hpp>

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace halox::detail {

namespace {

// The most iovecs one process_vm_readv takes per side (the kernel's UIO_MAXIOV).
constexpr std::size_t max_iov = 1024;
// First word of every construction header and address message: a message of another kind
// matched by mistake is an error, not a read of a wrong address.
constexpr std::uint64_t magic = 0x68616c6f78636d61ull; // "haloxcma"
// Messages whose runs average fewer bytes are packed on their side (transport::iov_min_run):
// the kernel pins the remote side's pages once per iovec (about 0.3 us here, the copy of 1-2 KiB)
// and walks a local iovec in about 30 ns, while packing such runs costs less than the iovecs
// would.
constexpr std::size_t short_run = 1024;

// Words of the construction header: magic, pid, node, probe address, probe value, bytes, the
// most runs of its iov lists, and a spare.
constexpr int header_words = 8;

std::atomic<int> refuse_rank{-1};

std::uint64_t mix(std::uint64_t h, std::uint64_t x) { return (h ^ x) * 1099511628211ull; }

std::string ptrace_scope() {
  std::ifstream f("/proc/sys/kernel/yama/ptrace_scope");
  std::string v;
  std::getline(f, v);
  return v;
}

// Why reading another process's memory failed, and what to do about it.
std::string read_failure(int err, long pid) {
  std::string why = std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
  switch (err) {
  case EPERM: {
    std::string const scope = ptrace_scope();
    return why + ": the kernel's ptrace access control forbids it" +
           (scope.empty() ? std::string()
                          : " (/proc/sys/kernel/yama/ptrace_scope = " + scope +
                                "; 0 allows processes of one user, e.g. sysctl "
                                "kernel.yama.ptrace_scope=0)") +
           ", or run with CAP_SYS_PTRACE";
  }
  case ESRCH:
    return why + ": no process " + std::to_string(pid) +
           " is visible here (the ranks run in different pid namespaces, e.g. containers)";
  case ENOSYS: return why + ": this kernel (or its seccomp filter) has no process_vm_readv";
  default: return why;
  }
}

// Completes `req` within `timeout` seconds (0: unbounded), or cancels it and records why not: a
// request left pending would match a later message of the plan's tag.
bool complete_bounded(MPI_Request& req, double timeout, std::string& fail, char const* what) {
  try {
    wait_bounded(req, timeout, what);
    return true;
  } catch (error const& e) {
    if (fail.empty()) fail = e.message();
    if (req != MPI_REQUEST_NULL) {
      MPI_Cancel(&req);
      MPI_Request_free(&req);
    }
    return false;
  }
}

// The second word of an address message whose runs are those of the previous one.
constexpr std::uint64_t unchanged = ~std::uint64_t{0};

// What a receiver knows of one incoming message.
struct incoming {
  long pid = 0;
  std::size_t max_runs = 1;   // the most runs the sender's lists have
  std::size_t area = 0;       // workspace offset where its address message lands
  std::vector<io_run> held;   // the runs of its last full address message
  std::size_t held_runs = 0;  // how many of `held` are valid
  bool holds = false;         // a full message arrived since construction
  void* buf = nullptr;        // this exchange's local buffer or io_run list
  std::size_t local_runs = 0; // 0: `buf` is contiguous
};

// What a sender keeps of one outgoing message.
struct outgoing {
  std::size_t area = 0;     // workspace offset of its address message
  std::vector<io_run> last; // the runs it last sent in full
  std::size_t last_runs = 0;
  bool sent = false; // the receiver holds `last`
};

class cma_transport final : public transport {
public:
  explicit cma_transport(wait_context& waits) : waits_(waits), cfg_(waits.config()) {
    HALOX_MPI_CHECK(MPI_Comm_rank(cfg_.comm, &rank_));
    refuse_ = refuse_rank.exchange(-1) == rank_;
  }

  [[nodiscard]] char const* name() const noexcept override { return "cma"; }
  [[nodiscard]] bool moves_iov() const noexcept override { return true; }
  [[nodiscard]] std::size_t iov_min_run() const noexcept override { return short_run; }

  void declare(std::vector<wire_request> const& recvs, std::vector<wire_request> const& sends,
               workspace_layout& layout) override;

  [[nodiscard]] std::vector<request_info>
  request_table(std::vector<request_info> declared) const override {
    // A sender's exchange completes when its receiver has read: its address message is one
    // more send, and so is each "read" notice a receiver sends back.
    for (std::size_t j = 0; j < sends_.size(); ++j) declared.push_back({sends_[j].peer, 0, false});
    for (std::size_t i = 0; i < recvs_.size(); ++i) declared.push_back({recvs_[i].peer, 0, false});
    return declared;
  }

  void bind(workspace_bases const& bases) override {
    base_ = bases[static_cast<int>(memory_kind::host)];
  }

  void post(std::size_t i, void* buf, std::size_t runs) override {
    std::size_t const nr = recvs_.size(), ns = sends_.size();
    // Per peer, messages arrive in the order they were sent and match receives in the order they
    // were posted: its addresses (sent in its post) before its "read" (sent once it has read
    // ours), and this exchange's before the next one's.
    if (i < nr) {
      incoming& in = in_[i];
      in.buf = buf;
      in.local_runs = runs;
      HALOX_MPI_CHECK(MPI_Irecv(base_ + in.area, words(in.max_runs), MPI_UINT64_T, recvs_[i].peer,
                                cfg_.tag, cfg_.comm, &reqs_[i]));
      return;
    }
    std::size_t const j = i - nr;
    HALOX_MPI_CHECK(
        MPI_Irecv(nullptr, 0, MPI_BYTE, sends_[j].peer, cfg_.tag, cfg_.comm, &reqs_[nr + j]));
    HALOX_MPI_CHECK(MPI_Isend(base_ + out_[j].area, address_message(j, buf, runs), MPI_UINT64_T,
                              sends_[j].peer, cfg_.tag, cfg_.comm, &reqs_[nr + ns + j]));
  }

  std::size_t wait_recv() override {
    std::size_t const nr = recvs_.size(), ns = sends_.size();
    int const idx = waits_.wait_any(reqs_.data(), 0, nr);
    if (idx == MPI_UNDEFINED) return none;
    auto const i = static_cast<std::size_t>(idx);
    read(i);
    HALOX_MPI_CHECK(MPI_Isend(nullptr, 0, MPI_BYTE, recvs_[i].peer, cfg_.tag, cfg_.comm,
                              &reqs_[nr + 2 * ns + i]));
    return i;
  }

  void wait_sends() override {
    std::size_t const nr = recvs_.size(), ns = sends_.size();
    waits_.wait_all(reqs_.data(), nr, 2 * ns + nr);
  }

  void cancel_peer(int peer) noexcept override {
    waits_.cancel_receives(reqs_.data(), reqs_.size(), peer);
  }

  bool abandon(double grace) noexcept override {
    // Whether a receiver got this exchange's address list is unknown now: send it in full next
    // time.
    for (auto& o : out_) o.sent = false;
    return wait_context::abandon_mpi(reqs_, grace, true);
  }

private:
  // Words of an address message with `runs` runs.
  static int words(std::size_t runs) { return static_cast<int>(2 + 2 * runs); }

  // Writes send `j`'s address message for `buf` / `runs` into its area; returns its words.
  int address_message(std::size_t j, void* buf, std::size_t runs) {
    io_run one{buf, sends_[j].bytes};
    io_run const* list = runs == 0 ? &one : static_cast<io_run const*>(buf);
    std::size_t const n = runs == 0 ? 1 : runs;
    outgoing& o = out_[j];
    auto* w = reinterpret_cast<std::uint64_t*>(base_ + o.area);
    w[0] = magic;
    bool same = o.sent && o.last_runs == n;
    for (std::size_t k = 0; k < n && same; ++k)
      same = o.last[k].base == list[k].base && o.last[k].bytes == list[k].bytes;
    if (same) {
      w[1] = unchanged;
      return 2;
    }
    w[1] = n;
    for (std::size_t k = 0; k < n; ++k) {
      w[2 + 2 * k] = reinterpret_cast<std::uintptr_t>(list[k].base);
      w[3 + 2 * k] = list[k].bytes;
      o.last[k] = list[k];
    }
    o.last_runs = n;
    o.sent = true;
    return words(n);
  }

  // Reads incoming message `i` from its sender's memory into this exchange's buffer or list.
  void read(std::size_t i);
  // Every rank learns whether all could take part; when one could not, all throw its reason.
  void agree(std::string const& fail) const;

  wait_context& waits_;
  exec_config const& cfg_;
  int rank_ = 0;
  bool refuse_ = false;
  std::uint64_t probe_ = 0; // what receivers test-read from this process
  std::vector<wire_request> recvs_, sends_;
  std::vector<incoming> in_;
  std::vector<outgoing> out_;
  std::size_t iov_cap_ = 1, liov_area_ = 0, riov_area_ = 0;
  std::byte* base_ = nullptr;
  // Address receives (per receive), "read" receives (per send), address sends (per send),
  // "read" sends (per receive).
  std::vector<MPI_Request> reqs_;
};

void cma_transport::declare(std::vector<wire_request> const& recvs,
                            std::vector<wire_request> const& sends, workspace_layout& layout) {
  recvs_ = recvs;
  sends_ = sends;
  std::size_t const nr = recvs.size(), ns = sends.size();
  std::string fail; // why this rank cannot take part; agreed on below

  // What every receiver of ours needs once: our pid, node, a word to test-read, and how long our
  // address lists get.
  probe_ = mix(mix(static_cast<std::uint64_t>(getpid()),
                   static_cast<std::uint64_t>(clock_type::now().time_since_epoch().count())),
               reinterpret_cast<std::uintptr_t>(this)) |
           1u;
  std::uint64_t const node = node_id();
  std::vector<std::array<std::uint64_t, header_words>> out_head(ns), in_head(nr);
  for (std::size_t j = 0; j < ns; ++j)
    out_head[j] = {magic,
                   static_cast<std::uint64_t>(getpid()),
                   node,
                   reinterpret_cast<std::uintptr_t>(&probe_),
                   probe_,
                   sends[j].bytes,
                   std::max<std::uint64_t>(sends[j].runs, 1),
                   0};

  // Every header is posted before anything is waited for, and every posted message is received
  // whatever it holds, so that no rank is left waiting and no message is left over to match a
  // later receive.
  std::vector<MPI_Request> sreq(ns, MPI_REQUEST_NULL), rreq(nr, MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < nr; ++i)
    HALOX_MPI_CHECK(MPI_Irecv(in_head[i].data(), header_words, MPI_UINT64_T, recvs[i].peer,
                              cfg_.tag, cfg_.comm, &rreq[i]));
  for (std::size_t j = 0; j < ns; ++j)
    HALOX_MPI_CHECK(MPI_Isend(out_head[j].data(), header_words, MPI_UINT64_T, sends[j].peer,
                              cfg_.tag, cfg_.comm, &sreq[j]));
  char const* const what = "building the cma backend (a peer's pid and address lists)";
  std::vector<char> arrived(nr, 0);
  for (std::size_t i = 0; i < nr; ++i)
    arrived[i] = complete_bounded(rreq[i], cfg_.timeout, fail, what);
  for (auto& r : sreq) complete_bounded(r, cfg_.timeout, fail, what);

  // Each sender test-read: same node, a process we may read, and the right process.
  in_.resize(nr);
  for (std::size_t i = 0; i < nr && fail.empty(); ++i) {
    if (!arrived[i]) continue;
    auto const& h = in_head[i];
    int const peer = recvs[i].peer;
    std::string const who = "rank " + std::to_string(rank_) + " cannot read the memory of rank " +
                            std::to_string(peer) + " (pid " + std::to_string(h[1]) + ")";
    if (h[0] != magic || h[5] != recvs[i].bytes || h[6] == 0) {
      fail = who + ": its description of the message does not match (" + std::to_string(h[5]) +
             " B where " + std::to_string(recvs[i].bytes) +
             " B are expected); the ranks built different plans";
      break;
    }
    if (h[2] != node) {
      fail = who + ": it runs on another node; cma moves data only between processes of one "
                   "node (use mpi_pack, or auto, which passes over cma)";
      break;
    }
    std::uint64_t got = 0;
    iovec lv{&got, sizeof got};
    iovec rv{reinterpret_cast<void*>(static_cast<std::uintptr_t>(h[3])), sizeof got};
    ssize_t const n = refuse_ ? (errno = EPERM, ssize_t{-1})
                              : process_vm_readv(static_cast<pid_t>(h[1]), &lv, 1, &rv, 1, 0);
    if (n != static_cast<ssize_t>(sizeof got)) {
      fail = who + " with process_vm_readv: " + read_failure(errno, static_cast<long>(h[1]));
      break;
    }
    if (got != h[4]) {
      fail = who + ": pid " + std::to_string(h[1]) +
             " here is another process (the ranks run in different pid namespaces)";
      break;
    }
    in_[i].pid = static_cast<long>(h[1]);
    in_[i].max_runs = h[6];
  }
  agree(fail);

  // Workspace: each address message, both ways, and the iovec arrays of one read call (at most
  // the kernel's limit per side; a call never needs more entries on a side than that side's
  // runs).
  std::size_t most = 1;
  for (std::size_t i = 0; i < nr; ++i) {
    in_[i].area = layout.reserve(memory_kind::host, words(in_[i].max_runs) * sizeof(std::uint64_t));
    in_[i].held.resize(in_[i].max_runs);
    most = std::max({most, in_[i].max_runs, recvs[i].runs});
  }
  out_.resize(ns);
  for (std::size_t j = 0; j < ns; ++j) {
    std::size_t const runs = std::max<std::size_t>(sends[j].runs, 1);
    out_[j].area = layout.reserve(memory_kind::host, words(runs) * sizeof(std::uint64_t));
    out_[j].last.resize(runs);
  }
  iov_cap_ = std::min(most, max_iov);
  liov_area_ = layout.reserve(memory_kind::host, iov_cap_ * sizeof(iovec));
  riov_area_ = layout.reserve(memory_kind::host, iov_cap_ * sizeof(iovec));
  reqs_.assign(2 * nr + 2 * ns, MPI_REQUEST_NULL);
}

void cma_transport::read(std::size_t i) {
  incoming& in = in_[i];
  int const peer = recvs_[i].peer;
  auto const* w = reinterpret_cast<std::uint64_t const*>(base_ + in.area);
  // Built only for an error: nothing is allocated while executing.
  auto const from = [&] {
    return std::string(cfg_.label) + " (backend cma): the message from rank " +
           std::to_string(peer) + " with tag " + std::to_string(cfg_.tag);
  };
  HALOX_REQUIRE(w[0] == magic, errc::internal, from() + " is not its buffer addresses");
  if (w[1] != unchanged) {
    HALOX_REQUIRE(w[1] >= 1 && w[1] <= in.max_runs, errc::internal,
                  from() + " lists " + std::to_string(w[1]) + " runs where at most " +
                      std::to_string(in.max_runs) + " were announced");
    std::size_t total = 0;
    for (std::size_t k = 0; k < w[1]; ++k) {
      in.held[k] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(w[2 + 2 * k])),
                    static_cast<std::size_t>(w[3 + 2 * k])};
      total += in.held[k].bytes;
    }
    HALOX_REQUIRE(total == recvs_[i].bytes, errc::internal,
                  from() + " lists " + std::to_string(total) + " B where " +
                      std::to_string(recvs_[i].bytes) + " B are expected");
    in.held_runs = w[1];
    in.holds = true;
  }
  HALOX_REQUIRE(in.holds, errc::internal,
                from() + " refers to address lists this rank never received");
  io_run one{in.buf, recvs_[i].bytes};
  io_run const* local = in.local_runs == 0 ? &one : static_cast<io_run const*>(in.buf);
  std::size_t const nl = in.local_runs == 0 ? 1 : in.local_runs;
  io_run const* remote = in.held.data();
  std::size_t const nrm = in.held_runs;
  auto* lv = reinterpret_cast<iovec*>(base_ + liov_area_);
  auto* rv = reinterpret_cast<iovec*>(base_ + riov_area_);
  // Both lists hold the same bytes in message order, cut differently: walk them together, in
  // calls of at most iov_cap_ iovecs per side.
  std::size_t r = 0, ro = 0, l = 0, lo = 0;
  auto const append = [](iovec* v, std::size_t& n, io_run const& run, std::size_t at,
                         std::size_t len) {
    auto* p = static_cast<std::byte*>(run.base) + at;
    if (n > 0 && static_cast<std::byte*>(v[n - 1].iov_base) + v[n - 1].iov_len == p) {
      v[n - 1].iov_len += len;
      return;
    }
    v[n++] = {p, len};
  };
  while (r < nrm && l < nl) {
    std::size_t rn = 0, ln = 0, bytes = 0;
    while (r < nrm && l < nl) {
      std::size_t const len = std::min(remote[r].bytes - ro, local[l].bytes - lo);
      // A piece that starts a new iovec on a full side waits for the next call.
      bool const rjoin =
          rn > 0 && static_cast<std::byte*>(rv[rn - 1].iov_base) + rv[rn - 1].iov_len ==
                        static_cast<std::byte*>(remote[r].base) + ro;
      bool const ljoin =
          ln > 0 && static_cast<std::byte*>(lv[ln - 1].iov_base) + lv[ln - 1].iov_len ==
                        static_cast<std::byte*>(local[l].base) + lo;
      if ((!rjoin && rn == iov_cap_) || (!ljoin && ln == iov_cap_)) break;
      append(rv, rn, remote[r], ro, len);
      append(lv, ln, local[l], lo, len);
      bytes += len;
      ro += len;
      lo += len;
      if (ro == remote[r].bytes) ++r, ro = 0;
      if (lo == local[l].bytes) ++l, lo = 0;
    }
    if (bytes == 0) continue; // empty runs
    ssize_t const n = process_vm_readv(static_cast<pid_t>(in.pid), lv, ln, rv, rn, 0);
    if (n != static_cast<ssize_t>(bytes))
      throw error(errc::invalid_argument,
                  std::string(cfg_.label) + " (backend cma): reading " + std::to_string(bytes) +
                      " B of rank " + std::to_string(peer) + "'s buffers (pid " +
                      std::to_string(in.pid) + ") failed" +
                      (n < 0 ? ": " + read_failure(errno, in.pid) : std::string(" part way")) +
                      "; a buffer passed to start/execute there is smaller than the plan's "
                      "layout, or was freed or reused before wait returned");
  }
}

// Every rank learns whether all could take part; when one could not, all throw its reason.
void cma_transport::agree(std::string const& fail) const {
  auto const [root, text] = lowest_problem(fail, cfg_.comm, cfg_.timeout,
                                           "building the cma backend (agreeing on the test reads)");
  if (root >= 0)
    throw error(errc::unsupported, "backend cma cannot run here: " + text +
                                       "; use another backend (auto passes over cma)");
}

} // namespace

std::unique_ptr<transport> make_cma_transport(wait_context& waits) {
  return std::make_unique<cma_transport>(waits);
}

void cma_refuse_reads_once(int rank) noexcept { refuse_rank.store(rank); }

} // namespace halox::detail
