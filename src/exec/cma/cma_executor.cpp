#include "exec/cma/cma_executor.hpp"

#include "exec/cpu/pack.hpp"
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
// Messages whose runs average fewer bytes go through a contiguous area on that side: the kernel
// pins the remote side's pages once per iovec (about 0.3 us here, the copy of 1-2 KiB) and walks
// a local iovec in about 30 ns, while packing such runs costs less than the iovecs would.
constexpr std::size_t short_run = 1024;

bool short_runs(std::size_t bytes, std::size_t runs) {
  return runs > 1 && bytes < short_run * runs;
}

// Words of the construction header: magic, pid, node, probe address, probe value, slots, runs,
// bytes.
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

// One process_vm_readv: local pieces [lfirst, lfirst + ln) and remote pieces [rfirst, rfirst +
// rn), the same `bytes`, which start `before` bytes into the message.
struct read_call {
  std::size_t lfirst = 0, ln = 0, rfirst = 0, rn = 0;
  std::size_t before = 0, bytes = 0;
};

// Splits one message, runs `l` on the receiving side and `r` on the sending side (equal byte
// totals, in message order), into calls of at most max_iov iovecs per side.
void split_calls(run_ref const* l, std::size_t nl, run_ref const* r, std::size_t nr,
                 std::vector<run_ref>& lp, std::vector<run_ref>& rp,
                 std::vector<read_call>& calls) {
  std::size_t i = 0, io = 0, j = 0, jo = 0, before = 0;
  auto const add = [](std::vector<run_ref>& to, std::size_t& n, run_ref const& run, std::size_t at,
                      std::size_t len) {
    if (n > 0 && to.back().slot == run.slot &&
        to.back().offset + to.back().bytes == run.offset + at) {
      to.back().bytes += len;
      return;
    }
    to.push_back({run.slot, run.offset + at, len});
    ++n;
  };
  while (i < nr && j < nl) {
    read_call c;
    c.lfirst = lp.size();
    c.rfirst = rp.size();
    c.before = before;
    while (i < nr && j < nl && c.ln < max_iov && c.rn < max_iov) {
      std::size_t const len = std::min(r[i].bytes - io, l[j].bytes - jo);
      add(rp, c.rn, r[i], io, len);
      add(lp, c.ln, l[j], jo, len);
      c.bytes += len;
      io += len;
      jo += len;
      if (io == r[i].bytes) ++i, io = 0;
      if (jo == l[j].bytes) ++j, jo = 0;
    }
    before += c.bytes;
    calls.push_back(c);
  }
}

// What a receiver knows of one incoming message.
struct recv_plan {
  int peer = -1;
  long pid = 0;
  std::size_t slots = 0;     // the sender's slots + 1 (its workspace): address words after magic
  std::size_t addr_area = 0; // workspace offset where the sender's addresses land
  std::size_t landing = 0;   // workspace offset of the landing area (combining, or short runs)
  std::size_t first_call = 0, calls = 0;
  bool land = false; // always through the landing area (short runs here)
};

class cma_executor final : public host_executor {
public:
  cma_executor(schedule s, exec_config const& cfg) : host_executor(std::move(s), cfg) {
    HALOX_MPI_CHECK(MPI_Comm_rank(cfg_.comm, &rank_));
    bool const refuse = refuse_rank.exchange(-1) == rank_;
    std::size_t const nr = sched_.recvs.size(), ns = sched_.sends.size();
    std::string fail; // why this rank cannot take part; agreed on below

    // What every receiver of ours needs once: our pid, node, a word to test-read, and the runs of
    // its message in our buffers (offsets from our slot bases, which travel per execution).
    probe_ = mix(mix(static_cast<std::uint64_t>(getpid()),
                     static_cast<std::uint64_t>(clock_type::now().time_since_epoch().count())),
                 reinterpret_cast<std::uintptr_t>(this)) |
             1u;
    std::uint64_t const node = node_id();
    std::vector<std::vector<std::uint64_t>> out_runs(ns);
    std::vector<std::array<std::uint64_t, header_words>> out_head(ns);
    // A message of short runs is packed into a workspace area, which its receiver reads as one
    // run of an extra slot: the workspace, whose base travels after the tensors' bases.
    std::size_t const slots = sched_.slots.size();
    for (std::size_t i = 0; i < ns; ++i) {
      std::vector<run_ref> runs;
      append_runs(sched_, sched_.sends[i], runs);
      std::size_t const bytes = sched_.sends[i].bytes;
      if (short_runs(bytes, runs.size())) {
        std::size_t const area = reserve(memory_kind::host, bytes);
        packed_.push_back(i);
        pack_area_.push_back(area);
        runs.assign(1, run_ref{static_cast<int>(slots), area, bytes});
      }
      for (auto const& r : runs)
        out_runs[i].insert(out_runs[i].end(),
                           {static_cast<std::uint64_t>(r.slot), r.offset, r.bytes});
      out_head[i] = {magic,       static_cast<std::uint64_t>(getpid()),
                     node,        reinterpret_cast<std::uintptr_t>(&probe_),
                     probe_,      slots + 1,
                     runs.size(), sched_.sends[i].bytes};
    }

    // The exchange: every header and run list is posted before anything is waited for, and
    // every posted message is received whatever it holds, so that no rank is left waiting and no
    // message is left over to match a later receive.
    std::vector<MPI_Request> sreq(2 * ns, MPI_REQUEST_NULL), rreq(nr, MPI_REQUEST_NULL);
    std::vector<std::array<std::uint64_t, header_words>> in_head(nr);
    for (std::size_t i = 0; i < nr; ++i)
      HALOX_MPI_CHECK(MPI_Irecv(in_head[i].data(), header_words, MPI_UINT64_T, sched_.recvs[i].peer,
                                cfg_.tag, cfg_.comm, &rreq[i]));
    for (std::size_t i = 0; i < ns; ++i) {
      HALOX_MPI_CHECK(MPI_Isend(out_head[i].data(), header_words, MPI_UINT64_T,
                                sched_.sends[i].peer, cfg_.tag, cfg_.comm, &sreq[2 * i]));
      HALOX_MPI_CHECK(MPI_Isend(out_runs[i].data(), static_cast<int>(out_runs[i].size()),
                                MPI_UINT64_T, sched_.sends[i].peer, cfg_.tag, cfg_.comm,
                                &sreq[2 * i + 1]));
    }
    char const* const what = "building the cma backend (a peer's pid and run list)";
    std::vector<std::vector<std::uint64_t>> in_runs(nr);
    for (std::size_t i = 0; i < nr; ++i) {
      int const peer = sched_.recvs[i].peer;
      if (!complete_bounded(rreq[i], cfg_.timeout, fail, what)) continue;
      // The run list's length is whatever the peer sent: probe for it.
      MPI_Status st;
      auto const until = deadline_after(cfg_.timeout);
      int found = 0;
      while (!found) {
        HALOX_MPI_CHECK(MPI_Iprobe(peer, cfg_.tag, cfg_.comm, &found, &st));
        if (!found && cfg_.timeout > 0 && clock_type::now() > until) break;
      }
      if (!found) {
        if (fail.empty())
          fail = "rank " + std::to_string(peer) + " sent no run list within " +
                 std::to_string(cfg_.timeout) + " s";
        continue;
      }
      int count = 0;
      HALOX_MPI_CHECK(MPI_Get_count(&st, MPI_UINT64_T, &count));
      in_runs[i].resize(static_cast<std::size_t>(count));
      HALOX_MPI_CHECK(MPI_Recv(in_runs[i].data(), count, MPI_UINT64_T, peer, cfg_.tag, cfg_.comm,
                               MPI_STATUS_IGNORE));
    }
    for (auto& r : sreq) complete_bounded(r, cfg_.timeout, fail, what);

    // Each sender test-read: same node, a process we may read, and the right process.
    std::vector<run_ref> local;
    for (std::size_t i = 0; i < nr && fail.empty(); ++i) {
      auto const& h = in_head[i];
      int const peer = sched_.recvs[i].peer;
      std::string const who = "rank " + std::to_string(rank_) + " cannot read the memory of rank " +
                              std::to_string(peer) + " (pid " + std::to_string(h[1]) + ")";
      if (h[0] != magic || in_runs[i].size() != 3 * h[6] || h[7] != sched_.recvs[i].bytes) {
        fail = who + ": its description of the message does not match (" + std::to_string(h[7]) +
               " B where " + std::to_string(sched_.recvs[i].bytes) +
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
      ssize_t const n = refuse ? (errno = EPERM, ssize_t{-1})
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
      recv_plan p;
      p.peer = peer;
      p.pid = static_cast<long>(h[1]);
      p.slots = h[5];
      std::vector<run_ref> remote(h[6]);
      for (std::size_t k = 0; k < remote.size(); ++k) {
        remote[k].slot = static_cast<int>(in_runs[i][3 * k]);
        remote[k].offset = in_runs[i][3 * k + 1];
        remote[k].bytes = in_runs[i][3 * k + 2];
        if (in_runs[i][3 * k] >= p.slots) fail = who + ": its run list names a slot it lacks";
      }
      local.clear();
      append_runs(sched_, sched_.recvs[i], local);
      // Short runs on this side: read into the landing area and unpack from there.
      p.land = short_runs(sched_.recvs[i].bytes, local.size());
      if (p.land) local.assign(1, run_ref{0, 0, sched_.recvs[i].bytes});
      p.first_call = calls_.size();
      split_calls(local.data(), local.size(), remote.data(), remote.size(), lpieces_, rpieces_,
                  calls_);
      p.calls = calls_.size() - p.first_call;
      recvs_.push_back(p);
    }
    agree(fail);

    // Workspace: our own addresses, each sender's, the iovec arrays of the largest call and the
    // landing areas of a combining exchange.
    mine_area_ = reserve(memory_kind::host, (2 + slots) * sizeof(std::uint64_t));
    std::size_t most_l = 1, most_r = 1;
    for (auto const& c : calls_) {
      most_l = std::max(most_l, c.ln);
      most_r = std::max(most_r, c.rn);
    }
    liov_area_ = reserve(memory_kind::host, most_l * sizeof(iovec));
    riov_area_ = reserve(memory_kind::host, most_r * sizeof(iovec));
    for (std::size_t i = 0; i < nr; ++i) {
      recvs_[i].addr_area =
          reserve(memory_kind::host, (1 + recvs_[i].slots) * sizeof(std::uint64_t));
      recvs_[i].landing = reserve(memory_kind::host, sched_.recvs[i].bytes);
    }
    // Requests: address receives, "read" receives (one per send), address sends, "read" sends.
    reqs_.assign(2 * nr + 2 * ns, MPI_REQUEST_NULL);
    for (auto const& m : sched_.recvs) info_.push_back({m.peer, m.bytes, true});
    // A sender's exchange completes when its receiver has read: a missing "read" is a send that
    // has not completed.
    for (auto const& m : sched_.sends) info_.push_back({m.peer, m.bytes, false});
    for (auto const& m : sched_.sends) info_.push_back({m.peer, 0, false});
    for (auto const& m : sched_.recvs) info_.push_back({m.peer, 0, false});
  }

  [[nodiscard]] backend kind() const noexcept override { return backend::cma; }

protected:
  void post(void*) override {
    std::size_t const nr = recvs_.size(), ns = sched_.sends.size();
    auto* mine = reinterpret_cast<std::uint64_t*>(ws(memory_kind::host, mine_area_));
    mine[0] = magic;
    std::size_t const slots = sched_.slots.size();
    for (std::size_t k = 0; k < slots; ++k)
      mine[1 + k] = reinterpret_cast<std::uintptr_t>(bufs_[k]);
    mine[1 + slots] = reinterpret_cast<std::uintptr_t>(ws(memory_kind::host, 0));
    int const words = static_cast<int>(2 + slots);
    // Messages of short runs are packed before their receivers learn where to read.
    for (std::size_t k = 0; k < packed_.size(); ++k)
      pack_message(sched_, sched_.sends[packed_[k]], bufs_, ws(memory_kind::host, pack_area_[k]));
    // Per peer, messages arrive in the order they were sent and match receives in the order
    // they were posted: its addresses (sent in its post) before its "read" (sent once it has
    // read ours), and this exchange's before the next one's.
    for (std::size_t i = 0; i < nr; ++i)
      HALOX_MPI_CHECK(MPI_Irecv(ws(memory_kind::host, recvs_[i].addr_area),
                                static_cast<int>(1 + recvs_[i].slots), MPI_UINT64_T, recvs_[i].peer,
                                cfg_.tag, cfg_.comm, &reqs_[i]));
    for (std::size_t i = 0; i < ns; ++i)
      HALOX_MPI_CHECK(MPI_Irecv(nullptr, 0, MPI_BYTE, sched_.sends[i].peer, cfg_.tag, cfg_.comm,
                                &reqs_[nr + i]));
    for (std::size_t i = 0; i < ns; ++i)
      HALOX_MPI_CHECK(MPI_Isend(mine, words, MPI_UINT64_T, sched_.sends[i].peer, cfg_.tag,
                                cfg_.comm, &reqs_[nr + ns + i]));
  }

  void receive() override {
    std::size_t const nr = recvs_.size(), ns = sched_.sends.size();
    for (;;) {
      int const i = wait_any(0, nr);
      if (i == MPI_UNDEFINED) break;
      read(static_cast<std::size_t>(i));
      HALOX_MPI_CHECK(MPI_Isend(nullptr, 0, MPI_BYTE, recvs_[i].peer, cfg_.tag, cfg_.comm,
                                &reqs_[nr + 2 * ns + i]));
    }
    wait_all(nr, 2 * ns + nr);
  }

private:
  // Reads incoming message `i` from its sender's buffers into ours (or its landing area, then
  // combines).
  void read(std::size_t i) {
    auto const& p = recvs_[i];
    auto const* addr = reinterpret_cast<std::uint64_t const*>(ws(memory_kind::host, p.addr_area));
    HALOX_REQUIRE(addr[0] == magic, errc::internal,
                  std::string(cfg_.label) + " (backend cma): the message from rank " +
                      std::to_string(p.peer) + " with tag " + std::to_string(cfg_.tag) +
                      " is not its buffer addresses");
    bool const land = p.land || op_ != combine_op::replace;
    std::byte* const landing = ws(memory_kind::host, p.landing);
    auto* lv = reinterpret_cast<iovec*>(ws(memory_kind::host, liov_area_));
    auto* rv = reinterpret_cast<iovec*>(ws(memory_kind::host, riov_area_));
    for (std::size_t c = p.first_call; c < p.first_call + p.calls; ++c) {
      read_call const& call = calls_[c];
      for (std::size_t k = 0; k < call.rn; ++k) {
        run_ref const& r = rpieces_[call.rfirst + k];
        rv[k] = {reinterpret_cast<void*>(static_cast<std::uintptr_t>(addr[1 + r.slot] + r.offset)),
                 r.bytes};
      }
      std::size_t ln = call.ln;
      if (land) {
        lv[0] = {landing + call.before, call.bytes};
        ln = 1;
      } else {
        for (std::size_t k = 0; k < ln; ++k) {
          run_ref const& r = lpieces_[call.lfirst + k];
          lv[k] = {static_cast<std::byte*>(bufs_[r.slot]) + r.offset, r.bytes};
        }
      }
      ssize_t const n = process_vm_readv(static_cast<pid_t>(p.pid), lv, ln, rv, call.rn, 0);
      if (n != static_cast<ssize_t>(call.bytes))
        throw error(errc::invalid_argument,
                    std::string(cfg_.label) + " (backend cma): reading " +
                        std::to_string(call.bytes) + " B of rank " + std::to_string(p.peer) +
                        "'s buffers (pid " + std::to_string(p.pid) + ") failed" +
                        (n < 0 ? ": " + read_failure(errno, p.pid) : std::string(" part way")) +
                        "; a buffer passed to start/execute there is smaller than the plan's "
                        "layout, or was freed or reused before wait returned");
    }
    if (land) unpack_message(sched_, sched_.recvs[i], bufs_, landing, op_);
  }

  // Every rank learns whether all could take part; when one could not, all throw its reason.
  void agree(std::string const& fail) const {
    auto const [root, text] = lowest_problem(
        fail, cfg_.comm, cfg_.timeout, "building the cma backend (agreeing on the test reads)");
    if (root >= 0)
      throw error(errc::unsupported, "backend cma cannot run here: " + text +
                                         "; use another backend (auto passes over cma)");
  }

  int rank_ = 0;
  std::uint64_t probe_ = 0; // what receivers test-read from this process
  std::vector<recv_plan> recvs_;
  std::vector<read_call> calls_;
  std::vector<run_ref> lpieces_, rpieces_; // the calls' local and remote iovecs, relative
  std::size_t mine_area_ = 0, liov_area_ = 0, riov_area_ = 0;
  std::vector<std::size_t> packed_, pack_area_; // sends packed on this side, their areas
};

} // namespace

std::unique_ptr<executor> make_cma_executor(schedule const& s, exec_config const& cfg) {
  return std::make_unique<cma_executor>(s, cfg);
}

void cma_refuse_reads_once(int rank) noexcept { refuse_rank.store(rank); }

} // namespace halox::detail
