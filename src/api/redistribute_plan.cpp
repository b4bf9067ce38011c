#include "api/plan_engine.hpp"
#include "common/agreement.hpp"
#include "exec/local_copies.hpp"
#include "model/view_check.hpp"
#include "plan/redist_planner.hpp"

#include <halox/error.hpp>
#include <halox/redistribute.hpp>

#include <cstdint>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

namespace halox {

namespace {
std::uint64_t mix(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 1099511628211ull; }

std::uint64_t options_hash(redistribute_options const& o) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  h = mix(h, static_cast<std::uint64_t>(o.method));
  h = mix(h, static_cast<std::uint64_t>(o.memory));
  h = mix(h, o.halo_after ? 1u : 0u);
  if (o.halo_after) {
    h = mix(h, static_cast<std::uint64_t>(o.halo.method));
    h = mix(h, static_cast<std::uint64_t>(o.halo.boundary));
  }
  return h;
}

// Ranks in `parent` of the processes of `comm`, indexed by their rank in `comm`.
std::vector<int> ranks_in_parent(MPI_Comm comm, MPI_Comm parent, char const* which) {
  detail::unique_group g, pg;
  HALOX_MPI_CHECK(MPI_Comm_group(comm, g.out()));
  HALOX_MPI_CHECK(MPI_Comm_group(parent, pg.out()));
  int n = 0;
  HALOX_MPI_CHECK(MPI_Group_size(g.get(), &n));
  std::vector<int> in(n), out(n);
  std::iota(in.begin(), in.end(), 0);
  HALOX_MPI_CHECK(MPI_Group_translate_ranks(g.get(), n, in.data(), pg.get(), out.data()));
  for (int i = 0; i < n; ++i)
    HALOX_REQUIRE(out[i] != MPI_UNDEFINED, errc::invalid_argument,
                  "rank " + std::to_string(i) + " of the " + which +
                      " grid's communicator is not in the parent communicator; its group must "
                      "be a subset of the parent's: pass a parent that contains every process "
                      "of both grids (e.g. MPI_COMM_WORLD)");
  return out;
}

// What every process of the parent knows about one side after planning.
struct side_info {
  std::optional<distribution> dist;
  std::vector<int> parent_ranks; // grid rank -> parent rank
};

// Learns side `k` (0: source, 1: destination) from `grid_ranks` (each parent rank's rank in
// the source and destination grids, -1 outside): which processes form the grid and, from its
// lowest member, the distribution. When every process is a member nothing is broadcast; the
// later hash check proves they agree.
side_info learn_side(MPI_Comm parent, int me, std::vector<int> const& grid_ranks, int k,
                     tensor_desc const* t, char const* which) {
  int const np = static_cast<int>(grid_ranks.size() / 2);
  int members = 0, root = -1;
  for (int p = 0; p < np; ++p) {
    if (grid_ranks[2 * p + k] < 0) continue;
    if (members == 0) root = p;
    ++members;
  }
  HALOX_REQUIRE(members > 0, errc::invalid_argument,
                std::string("no process passed a ") + which +
                    " descriptor; pass it on every process of the " + which +
                    " grid (nullptr only outside it)");
  side_info out;
  out.parent_ranks.assign(members, -1);
  for (int p = 0; p < np; ++p) {
    int const g = grid_ranks[2 * p + k];
    if (g < 0) continue;
    HALOX_REQUIRE(g < members && out.parent_ranks[g] < 0, errc::invalid_argument,
                  std::to_string(members) + " processes passed a " + which +
                      " descriptor, but they do not form one grid (grid rank " + std::to_string(g) +
                      " is out of range or passed twice); every process of the " + which +
                      " grid must pass it, and no other");
    out.parent_ranks[g] = p;
  }
  if (members == np) {
    out.dist.emplace(t->dist());
    return out;
  }
  std::vector<std::int64_t> buf;
  if (me == root) buf = detail::encode_distribution(t->dist());
  auto n = static_cast<std::int64_t>(buf.size());
  HALOX_MPI_CHECK(MPI_Bcast(&n, 1, MPI_INT64_T, root, parent));
  buf.resize(static_cast<std::size_t>(n));
  HALOX_MPI_CHECK(MPI_Bcast(buf.data(), static_cast<int>(n), MPI_INT64_T, root, parent));
  out.dist.emplace(detail::decode_distribution(buf.data(), buf.size()));
  return out;
}

// A member's own descriptor must be the one its side was learned from.
void check_member(side_info const& s, tensor_desc const* t, std::vector<int> const& group_ranks,
                  char const* which) {
  if (t == nullptr) return;
  auto const n = static_cast<int>(s.parent_ranks.size());
  HALOX_REQUIRE(t->grid().size() == n && group_ranks == s.parent_ranks, errc::invalid_argument,
                std::to_string(n) + " processes passed a " + which +
                    " descriptor but its grid has " + std::to_string(t->grid().size()) +
                    " (or other processes); every process of the " + which +
                    " grid must pass it, and no other");
  HALOX_REQUIRE(t->dist() == *s.dist, errc::invalid_argument,
                std::string("this process's ") + which + " descriptor " + t->dist().str() +
                    " differs from the one of the lowest process passing a " + which +
                    " descriptor (" + s.dist->str() +
                    "); pass descriptors of one tensor and one grid per side");
}
} // namespace

struct redistribute_plan::impl {
  std::optional<tensor_desc> src, dst; // this process's descriptors (members only)
  side_info src_side, dst_side;        // both sides, known on every process
  int parent_rank = 0;
  detail::workspace_memory own; // the workspace when not the caller's (outlives the engine)
  std::unique_ptr<detail::plan_engine> engine;
  std::optional<halo_plan> halo; // destination members, with halo_after
  // No process sends a message and the buffers are on the host: every process runs its local
  // copy itself and the executor is bypassed, which lets an in-place identity be skipped
  // without leaving a collective backend waiting on the others.
  bool local_only = false;
  bool identity = false; // the local copy maps every cell onto the same offset
  detail::schedule inverse_copies;
  std::size_t scratch_bytes = 0; // local-only copies' scratch (host workspace after the engine's)
  std::byte* scratch = nullptr;
  void* bufs[2] = {nullptr, nullptr};
  enum class phase { idle, forward, inverse } in_flight = phase::idle;
  bool skip = false;
  tensor_view pending_dst;

  ~impl() {
    // An exchange abandoned in flight whose messages could not be cancelled keeps its memory.
    if (engine && !engine->abandon()) own.orphan();
  }
  void build(context const& ctx, MPI_Comm parent, tensor_desc const* s, tensor_desc const* d,
             redistribute_options const& o, bool same_processes);
  workspace_size workspace_bytes() const noexcept;
  void set_workspace(workspace const& w);
  void bind(tensor_view const& s, tensor_view const& d, bool inverse);
  void begin(tensor_view const& s, tensor_view const& d, bool inverse, stream_handle stream);
  void finish(stream_handle stream);
};

void redistribute_plan::impl::build(context const& ctx, MPI_Comm parent, tensor_desc const* s,
                                    tensor_desc const* d, redistribute_options const& o,
                                    bool same_processes) {
  HALOX_REQUIRE(parent != MPI_COMM_NULL, errc::invalid_argument,
                "the parent communicator is MPI_COMM_NULL; pass a communicator that contains "
                "every process of both grids");
  HALOX_MPI_CHECK(MPI_Comm_rank(parent, &parent_rank));
  std::vector<int> src_map, dst_map;
  detail::collective_check(
      parent, "redistribute_plan",
      [&] {
        detail::require_context_matches(ctx, parent, "redistribute_plan");
        detail::require_timeout(o.timeout_seconds, "redistribute_options");
        detail::require_timeout(o.halo.timeout_seconds, "redistribute_options::halo");
        auto available = [&](backend b) {
          HALOX_REQUIRE(b == backend::automatic || detail::backend_available(b, o.memory),
                        errc::unsupported,
                        std::string("backend ") + to_string(b) +
                            " is not available for this memory space in this build");
        };
        available(o.method);
        if (o.halo_after) available(o.halo.method);
        if (same_processes) {
          int cmp = MPI_UNEQUAL;
          HALOX_MPI_CHECK(MPI_Comm_compare(s->grid().comm(), d->grid().comm(), &cmp));
          HALOX_REQUIRE(cmp != MPI_UNEQUAL, errc::invalid_argument,
                        "the source and destination grids hold different processes; plan "
                        "across communicators with redistribute_plan(parent, &src, &dst)");
        }
        if (s) src_map = ranks_in_parent(s->grid().comm(), parent, "source");
        if (d) dst_map = ranks_in_parent(d->grid().comm(), parent, "destination");
      },
      [&] { return options_hash(o); },
      [&] {
        std::string text = std::string("backend=") + to_string(o.method) +
                           "; memory=" + (o.memory == memory_space::host ? "host" : "device") +
                           "; halo_after=" + (o.halo_after ? "yes" : "no");
        if (o.halo_after)
          text += std::string("; halo backend=") + to_string(o.halo.method) + "; halo boundary=" +
                  (o.halo.boundary == boundary_fill::constant ? "constant" : "untouched");
        return text;
      });

  // Each process's rank in both grids: who forms each grid, and the rank maps, for everyone.
  int np = 0;
  HALOX_MPI_CHECK(MPI_Comm_size(parent, &np));
  int const mine[2] = {s ? s->grid().rank() : -1, d ? d->grid().rank() : -1};
  std::vector<int> grid_ranks(2 * static_cast<std::size_t>(np));
  HALOX_MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, grid_ranks.data(), 2, MPI_INT, parent));
  src_side = learn_side(parent, parent_rank, grid_ranks, 0, s, "source");
  dst_side = learn_side(parent, parent_rank, grid_ranks, 1, d, "destination");
  detail::collective_check(
      parent, "redistribute_plan",
      [&] {
        detail::check_same_tensor(*src_side.dist, *dst_side.dist);
        check_member(src_side, s, src_map, "source");
        check_member(dst_side, d, dst_map, "destination");
      },
      [&] { return mix(src_side.dist->hash(), dst_side.dist->hash()); });
  if (s) src.emplace(*s);
  if (d) dst.emplace(*d);

  detail::redist_side rs{&*src_side.dist, s ? s->grid().rank() : -1, src_side.parent_ranks,
                         s ? s->strides() : std::vector<index_t>{}};
  detail::redist_side rd{&*dst_side.dist, d ? d->grid().rank() : -1, dst_side.parent_ranks,
                         d ? d->strides() : std::vector<index_t>{}};
  detail::schedule sch = detail::plan_redistribution(rs, rd);

  int const talks = sch.sends.empty() && sch.recvs.empty() ? 0 : 1;
  int any_talks = 0;
  HALOX_MPI_CHECK(MPI_Allreduce(&talks, &any_talks, 1, MPI_INT, MPI_MAX, parent));
  local_only = any_talks == 0 && o.memory == memory_space::host;
  identity = sch.slots[0].strides == sch.slots[1].strides;
  for (auto const& c : sch.copies) identity = identity && c.src.b == c.dst.b;
  if (local_only) {
    inverse_copies = sch.reversed();
    scratch_bytes = detail::max_copy_bytes(sch);
  }

  std::uint64_t key = mix(options_hash(o), mix(src_side.dist->hash(), dst_side.dist->hash()));
  for (int r : src_side.parent_ranks) key = mix(key, static_cast<std::uint64_t>(r));
  for (int r : dst_side.parent_ranks) key = mix(key, static_cast<std::uint64_t>(r));
  detail::engine_options eo;
  eo.method = o.method;
  eo.memory = o.memory;
  eo.tune = o.tune;
  eo.external_workspace = true; // this plan lays out and binds the whole workspace itself
  eo.timeout = o.timeout_seconds;
  eo.check_execute = o.check_execute;
  eo.label = "redistribute_plan";
  engine = std::make_unique<detail::plan_engine>(ctx, std::move(sch), eo, key);
  // Collective over the destination grid only: every member is here (checked above).
  if (o.halo_after && d) {
    halo_options ho = o.halo;
    ho.external_workspace = true;
    if (!ho.timeout_seconds) ho.timeout_seconds = o.timeout_seconds;
    ho.check_execute = ho.check_execute || o.check_execute;
    halo.emplace(*d, ho);
  }
  if (!o.external_workspace) {
    auto const ws = workspace_bytes();
    own.reserve(ctx.shared_state(), {ws.host, ws.pinned_host, ws.device});
    auto const b = own.bases();
    set_workspace({b[0], ws.host, b[1], ws.pinned_host, b[2], ws.device});
  }
}

namespace {
std::size_t up64(std::size_t n) { return (n + 63) / 64 * 64; }
std::byte* at(void* base, std::size_t off) {
  return base ? static_cast<std::byte*>(base) + off : nullptr;
}
} // namespace

// Layout per kind: [engine | local-only scratch (host) | halo_after exchange].
workspace_size redistribute_plan::impl::workspace_bytes() const noexcept {
  workspace_size w = engine->workspace_bytes();
  w.host = up64(w.host) + up64(scratch_bytes);
  w.pinned_host = up64(w.pinned_host);
  w.device = up64(w.device);
  if (halo) {
    auto const h = halo->workspace_bytes();
    w.host += h.host;
    w.pinned_host += h.pinned_host;
    w.device += h.device;
  }
  return w;
}

void redistribute_plan::impl::set_workspace(workspace const& w) {
  HALOX_REQUIRE(in_flight == phase::idle, errc::invalid_state,
                "set_workspace called while a redistribution of this plan is in flight; call "
                "wait() first");
  auto const need = workspace_bytes();
  HALOX_REQUIRE(w.host_bytes >= need.host && w.pinned_host_bytes >= need.pinned_host &&
                    w.device_bytes >= need.device,
                errc::invalid_argument,
                "the workspace holds " + std::to_string(w.host_bytes) + " B host / " +
                    std::to_string(w.pinned_host_bytes) + " B pinned / " +
                    std::to_string(w.device_bytes) + " B device but the plan needs " +
                    std::to_string(need.host) + " / " + std::to_string(need.pinned_host) + " / " +
                    std::to_string(need.device) + "; pass at least workspace_bytes()");
  auto const e = engine->workspace_bytes();
  engine->set_workspace({w.host, e.host, w.pinned_host, e.pinned_host, w.device, e.device});
  std::size_t const host_off = up64(e.host);
  scratch = at(w.host, host_off);
  if (halo) {
    auto const h = halo->workspace_bytes();
    std::size_t const ho = host_off + up64(scratch_bytes);
    halo->set_workspace({at(w.host, ho), h.host, at(w.pinned_host, up64(e.pinned_host)),
                         h.pinned_host, at(w.device, up64(e.device)), h.device});
  }
}

void redistribute_plan::impl::bind(tensor_view const& s, tensor_view const& d, bool inverse) {
  engine->agree_execute(inverse ? 1 : 0, [&] {
    // Checked before binding: the exchange in flight still reads the bound slot pointers.
    HALOX_REQUIRE(in_flight == phase::idle, errc::invalid_state,
                  "start called while a redistribution of this plan is still in flight; call "
                  "wait() first");
    bufs[0] = bufs[1] = nullptr;
    skip = false;
    if (src) {
      detail::check_view(s, *src, "source buffer", -1);
      bufs[0] = s.data;
    }
    if (dst) {
      detail::check_view(d, *dst, "destination buffer", -1);
      bufs[1] = d.data;
    }
    if (!src || !dst) return;
    auto const a = reinterpret_cast<std::uintptr_t>(bufs[0]);
    auto const b = reinterpret_cast<std::uintptr_t>(bufs[1]);
    std::size_t const na = src->local_bytes(), nb = dst->local_bytes();
    if (na == 0 || nb == 0 || a >= b + nb || b >= a + na) return;
    // Overlap is safe only when the copy runs here: it is packed whole before being unpacked.
    HALOX_REQUIRE(local_only, errc::invalid_argument,
                  "the source and destination buffers overlap on this rank, but this "
                  "redistribution exchanges messages and cannot run in place; pass a separate "
                  "destination buffer");
    skip = a == b && identity;
  });
}

void redistribute_plan::impl::begin(tensor_view const& s, tensor_view const& d, bool inverse,
                                    stream_handle stream) {
  bind(s, d, inverse);
  pending_dst = d;
  if (!local_only) engine->start(bufs, inverse, detail::combine_op::replace, stream);
  in_flight = inverse ? phase::inverse : phase::forward;
}

void redistribute_plan::impl::finish(stream_handle stream) {
  HALOX_REQUIRE(in_flight != phase::idle, errc::invalid_state,
                "wait called without a matching start; call start() (or execute()) first");
  bool const forward = in_flight == phase::forward;
  in_flight = phase::idle;
  if (!local_only)
    engine->wait(stream);
  else if (!skip)
    detail::run_local_copies(forward ? engine->forward() : inverse_copies, bufs,
                             detail::combine_op::replace, scratch);
  if (forward && halo) halo->execute(pending_dst, stream);
}

redistribute_plan::redistribute_plan(tensor_desc const& src, tensor_desc const& dst,
                                     redistribute_options const& options)
    : redistribute_plan(context::of(src.grid().comm()), src, dst, options) {}

redistribute_plan::redistribute_plan(MPI_Comm parent, tensor_desc const* src,
                                     tensor_desc const* dst, redistribute_options const& options)
    : impl_(std::make_unique<impl>()) {
  HALOX_REQUIRE(parent != MPI_COMM_NULL, errc::invalid_argument,
                "the parent communicator is MPI_COMM_NULL; pass a communicator that contains "
                "every process of both grids");
  impl_->build(context::of(parent), parent, src, dst, options, false);
}

redistribute_plan::redistribute_plan(context const& ctx, tensor_desc const& src,
                                     tensor_desc const& dst, redistribute_options const& options)
    : impl_(std::make_unique<impl>()) {
  impl_->build(ctx, src.grid().comm(), &src, &dst, options, true);
}

redistribute_plan::redistribute_plan(context const& ctx, tensor_desc const* src,
                                     tensor_desc const* dst, redistribute_options const& options)
    : impl_(std::make_unique<impl>()) {
  impl_->build(ctx, ctx.comm(), src, dst, options, false);
}

redistribute_plan::~redistribute_plan() = default;
redistribute_plan::redistribute_plan(redistribute_plan&&) noexcept = default;
redistribute_plan& redistribute_plan::operator=(redistribute_plan&&) noexcept = default;

void redistribute_plan::execute(tensor_view const& src, tensor_view const& dst,
                                stream_handle stream) {
  start(src, dst, stream);
  wait(stream);
}

void redistribute_plan::start(tensor_view const& src, tensor_view const& dst,
                              stream_handle stream) {
  impl_->begin(src, dst, false, stream);
}

void redistribute_plan::wait(stream_handle stream) { impl_->finish(stream); }

void redistribute_plan::execute_inverse(tensor_view const& dst, tensor_view const& src,
                                        stream_handle stream) {
  start_inverse(dst, src, stream);
  wait(stream);
}

void redistribute_plan::start_inverse(tensor_view const& dst, tensor_view const& src,
                                      stream_handle stream) {
  impl_->begin(src, dst, true, stream);
}

workspace_size redistribute_plan::workspace_bytes() const noexcept {
  return impl_->workspace_bytes();
}
void redistribute_plan::set_workspace(workspace const& w) { impl_->set_workspace(w); }
bool redistribute_plan::skip_execution(std::string const& reason, bool inverse) {
  return impl_->engine->skip(inverse ? 1 : 0, reason);
}

context const& redistribute_plan::get_context() const noexcept { return impl_->engine->ctx(); }

backend redistribute_plan::selected_backend() const noexcept { return impl_->engine->selected(); }
std::size_t redistribute_plan::bytes_sent() const noexcept {
  return impl_->engine->forward().send_bytes();
}
std::size_t redistribute_plan::bytes_received() const noexcept {
  return impl_->engine->forward().recv_bytes();
}
int redistribute_plan::num_peers() const noexcept {
  std::set<int> peers;
  for (auto const& m : impl_->engine->forward().sends) peers.insert(m.peer);
  for (auto const& m : impl_->engine->forward().recvs) peers.insert(m.peer);
  return static_cast<int>(peers.size());
}
bool redistribute_plan::is_source() const noexcept { return impl_->src.has_value(); }
bool redistribute_plan::is_destination() const noexcept { return impl_->dst.has_value(); }

std::string redistribute_plan::describe() const {
  auto const& p = *impl_;
  auto member = [](std::optional<tensor_desc> const& t) {
    return t ? "grid rank " + std::to_string(t->grid().rank()) : std::string("not a member");
  };
  std::ostringstream os;
  os << "redistribute_plan on rank " << p.parent_rank << " of its communicator:"
     << "\n  source      " << p.src_side.dist->str() << " (this rank: " << member(p.src) << ")"
     << "\n  destination " << p.dst_side.dist->str() << " (this rank: " << member(p.dst) << ")"
     << "\n  " << p.engine->summary();
  if (p.local_only) os << "\n  no process exchanges messages: local copies run without MPI";
  if (p.halo)
    os << "\n  then the destination's halo exchange (" << to_string(p.halo->selected_backend())
       << ")";
  os << "\n" << p.engine->forward().str();
  return os.str();
}

} // namespace halox
