// halox-ddtbench: MPI derived datatypes against halox's pack path (TEMPI / ddtbench style).
//
// Objects: 1 KiB, 1 MiB and 4 MiB of payload in blocks of 1..512 bytes (powers of two), 512 bytes
// apart. Each object is described three ways (MPI_Type_vector, MPI_Type_create_hvector,
// MPI_Type_create_subarray) and once to halox. Entries, per object:
//
//   ddt/<size>/b<block>/pack/<vector|hvector|subarray>     MPI_Pack of the object
//   ddt/<size>/b<block>/pack/halox                         halox's CPU pack (same bytes)
//   ddt/<size>/b<block>/pack/hand_memcpy                   a hand-written pack: one memcpy per
//                                                          block (the baseline halox must beat)
//   ddt/<size>/b<block>/unpack/<...>                       MPI_Unpack / halox's unpack
//   ddt/<size>/b<block>/pingpong/<vector|hvector|subarray> rank 0 <-> 1 round trip, derived type
//                                                          on both sides
//   ddt/<size>/b<block>/pingpong/halox_pack                halox pack + contiguous send + unpack
//   ddt/<size>/b<block>/pingpong/hand_pack                 the same with the hand-written pack
//   ddt/<size>/b<block>/pingpong/contiguous                the same bytes already contiguous
//   (limit)
//
// Only ranks 0 and 1 work; other ranks just keep the barrier company. An MPI that handles the
// three constructions of the same bytes alike shows equal times across the three columns; halox
// sees one box whatever the construction, by construction.
#include "common/mpi_bench.hpp"
#include "ddt/ddt_objects.hpp"

#include <cstdio>
#include <memory>
#include <string>

namespace halox::bench {
namespace {

constexpr std::size_t stride_bytes = 512;

struct object_key {
  std::size_t total = 0, block = 0;
  bool operator==(object_key const& o) const { return total == o.total && block == o.block; }
};

object_key g_key;
std::unique_ptr<strided_object> g_obj;

bool active() { return world_rank() < 2; }

// Collective. The object for `k` on ranks 0 and 1 (nullptr elsewhere); false when it could not
// be built (on every rank alike).
bool ensure(object_key k, benchmark::State& st) {
  double const extent = static_cast<double>(k.total / k.block * stride_bytes);
  if (extent > config().ddt_max_extent) {
    char msg[160];
    std::snprintf(msg, sizeof msg, "object spans %.0f MiB > HALOX_DDT_MAX_EXTENT",
                  extent / 1048576);
    st.SkipWithError(msg);
    return false;
  }
  if (g_key == k && (g_obj || !active())) return true;
  g_obj.reset();
  std::string err;
  if (active()) try {
      g_obj = std::make_unique<strided_object>(k.total, k.block, stride_bytes);
    } catch (std::exception const& e) {
      err = e.what();
    }
  if (!all_ok(MPI_COMM_WORLD, err.empty())) {
    g_obj.reset();
    st.SkipWithError(err.empty() ? "set-up failed on another rank" : err.c_str());
    return false;
  }
  g_key = k;
  return true;
}

void describe(benchmark::State& st, object_key k) {
  st.counters["object_bytes"] = static_cast<double>(k.total);
  st.counters["block_bytes"] = static_cast<double>(k.block);
  st.counters["blocks"] = static_cast<double>(k.total / k.block);
}

void entry(std::string const& name, int iters, object_key k, double bytes,
           std::function<void(strided_object&)> op) {
  add(name, iters, [k, bytes, op](benchmark::State& st) {
    if (!ensure(k, st)) return;
    strided_object* o = g_obj.get();
    timed_loop(
        st, MPI_COMM_WORLD,
        [o, &op] {
          if (o) op(*o);
        },
        bytes);
    describe(st, k);
  });
}

// Round trip between ranks 0 and 1. `send` and `recv` move the object on one side.
void pingpong(strided_object& o, std::function<void(strided_object&, int)> const& send,
              std::function<void(strided_object&, int)> const& recv) {
  if (world_rank() == 0) {
    send(o, 1);
    recv(o, 1);
  } else if (world_rank() == 1) {
    recv(o, 0);
    send(o, 0);
  }
}

std::string size_name(std::size_t b) {
  return b >= 1048576 ? std::to_string(b / 1048576) + "MiB" : std::to_string(b / 1024) + "KiB";
}

void register_all() {
  constexpr int tag = 11;
  construction const cons[] = {construction::vector, construction::hvector, construction::subarray};
  for (std::size_t total : {std::size_t{1024}, std::size_t{1} << 20, std::size_t{4} << 20}) {
    for (std::size_t block = 1; block <= 512; block *= 2) {
      object_key const k{total, block};
      std::string const base = "ddt/" + size_name(total) + "/b" + std::to_string(block) + "/";
      double const blocks = static_cast<double>(total / block);
      double const pack_est = blocks * 3e-9 + static_cast<double>(total) / 4e9 + 1e-6;
      int const pack_iters = iterations_for(pack_est);
      int const pp_iters =
          iterations_for(4 * pack_est + 2 * static_cast<double>(total) / 3e9 + 10e-6);
      double const t = static_cast<double>(total);

      for (auto c : cons)
        entry(base + "pack/" + to_string(c), pack_iters, k, t,
              [c](strided_object& o) { o.mpi_pack(c); });
      entry(base + "pack/halox", pack_iters, k, t, [](strided_object& o) { o.halox_pack(); });
      entry(base + "pack/hand_memcpy", pack_iters, k, t, [](strided_object& o) { o.hand_pack(); });
      for (auto c : cons)
        entry(base + "unpack/" + to_string(c), pack_iters, k, t,
              [c](strided_object& o) { o.mpi_unpack(c); });
      entry(base + "unpack/halox", pack_iters, k, t, [](strided_object& o) { o.halox_unpack(); });
      entry(base + "unpack/hand_memcpy", pack_iters, k, t,
            [](strided_object& o) { o.hand_unpack(); });

      if (world_size() < 2) continue;
      for (auto c : cons)
        entry(base + "pingpong/" + to_string(c), pp_iters, k, 2 * t, [c](strided_object& o) {
          pingpong(
              o,
              [c](strided_object& x, int peer) {
                MPI_Send(x.strided(), 1, x.type(c), peer, tag, MPI_COMM_WORLD);
              },
              [c](strided_object& x, int peer) {
                MPI_Recv(x.strided(), 1, x.type(c), peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
              });
        });
      int const n = static_cast<int>(total);
      // The object packed by `pack` (nothing: the contiguous limit), sent as contiguous bytes and
      // unpacked by `unpack` on the other side.
      using object_op = void (*)(strided_object&);
      auto packed_pingpong = [&](char const* name, object_op pack, object_op unpack) {
        entry(base + "pingpong/" + name, pp_iters, k, 2 * t, [n, pack, unpack](strided_object& o) {
          pingpong(
              o,
              [n, pack](strided_object& x, int peer) {
                pack(x);
                MPI_Send(x.packed(), n, MPI_BYTE, peer, tag, MPI_COMM_WORLD);
              },
              [n, unpack](strided_object& x, int peer) {
                MPI_Recv(x.packed(), n, MPI_BYTE, peer, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                unpack(x);
              });
        });
      };
      packed_pingpong(
          "halox_pack", [](strided_object& x) { x.halox_pack(); },
          [](strided_object& x) { x.halox_unpack(); });
      packed_pingpong(
          "hand_pack", [](strided_object& x) { x.hand_pack(); },
          [](strided_object& x) { x.hand_unpack(); });
      packed_pingpong(
          "contiguous", [](strided_object&) {}, [](strided_object&) {});
    }
  }
}

} // namespace
} // namespace halox::bench

int main(int argc, char** argv) {
  halox::bench::init(&argc, &argv);
  halox::bench::register_all();
  return halox::bench::run_and_finalize(argc, argv);
}
