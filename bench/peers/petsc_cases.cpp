// PETSc DMDA's ghost update on halox-bench's DMDA cases (cases.hpp: dmda_cases):
//
//   <case>/petsc_g2l  DMGlobalToLocalBegin + DMGlobalToLocalEnd (INSERT_VALUES): the global
//                     vector into the ghosted local vector
//   <case>/petsc_l2l  DMLocalToLocalBegin + DMLocalToLocalEnd (INSERT_VALUES): one ghosted local
//                     vector into another, ghosts filled
//
// The DMDA is DMDACreate3d with DM_BOUNDARY_NONE on every axis, the case's stencil type, width
// and dof, all ranks along the split axis (m = P for x, p = P for z), default part sizes (equal
// to halox's balanced blocks: the first M % P parts one larger). PETSc's rank order (x fastest)
// matches halox's grid (last dimension fastest), so the same pairs of ranks exchange the same
// bytes. Both operations also copy the rank's owned block into the local vector, which halox
// (in-place ghost cells) never does: the entries report a memcpy of that block as
// `owned_copy_us`.
#include "peers/peer.hpp"

#include <petscdmda.h>

#include <stdexcept>
#include <string>

namespace halox::bench::peers {

namespace {

// PETSc reports errors through return codes (PetscReturnErrorHandler is pushed in main): turn
// one into an exception that names the call and PETSc's text.
void check(PetscErrorCode rc, char const* call) {
  if (rc == 0) return;
  char const* text = nullptr;
  PetscErrorMessage(rc, &text, nullptr);
  throw std::runtime_error(std::string(call) + " failed with PETSc error " + std::to_string(rc) +
                           (text ? std::string(" (") + text + ")" : std::string()));
}
#define PEERS_PETSC(call) check((call), #call)

// A DMDA with its global and two local vectors; destroyed in reverse order of creation.
struct dmda {
  DM da = nullptr;
  Vec global = nullptr, local = nullptr, local2 = nullptr;
  dmda() = default;
  dmda(dmda const&) = delete;
  dmda& operator=(dmda const&) = delete;
  ~dmda() {
    if (local2) VecDestroy(&local2);
    if (local) VecDestroy(&local);
    if (global) VecDestroy(&global);
    if (da) DMDestroy(&da);
  }
};

std::shared_ptr<dmda> create(dmda_case const& c) {
  auto d = std::make_shared<dmda>();
  int const p = world_size();
  auto const n = static_cast<PetscInt>(c.n);
  PetscInt const px = c.split == 2 ? p : 1, pz = c.split == 0 ? p : 1;
  PEERS_PETSC(DMDACreate3d(PETSC_COMM_WORLD, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE, DM_BOUNDARY_NONE,
                           c.box ? DMDA_STENCIL_BOX : DMDA_STENCIL_STAR, n, n, n, px, 1, pz, c.dof,
                           c.width, nullptr, nullptr, nullptr, &d->da));
  PEERS_PETSC(DMSetUp(d->da));
  PEERS_PETSC(DMCreateGlobalVector(d->da, &d->global));
  PEERS_PETSC(DMCreateLocalVector(d->da, &d->local));
  PEERS_PETSC(VecDuplicate(d->local, &d->local2));
  return d;
}

// The value of global point (k, j, i), component `c`: its index in the natural ordering
// (exact in a double up to 2^53).
double value_at(dmda_case const& cs, PetscInt k, PetscInt j, PetscInt i, PetscInt c) {
  auto const n = static_cast<double>(cs.n);
  return ((static_cast<double>(k) * n + static_cast<double>(j)) * n + static_cast<double>(i)) *
             cs.dof +
         static_cast<double>(c);
}

struct box3 {
  PetscInt x, y, z, xm, ym, zm;
  bool has(PetscInt k, PetscInt j, PetscInt i) const {
    return i >= x && i < x + xm && j >= y && j < y + ym && k >= z && k < z + zm;
  }
};

box3 owned_box(DM da) {
  box3 b{};
  PEERS_PETSC(DMDAGetCorners(da, &b.x, &b.y, &b.z, &b.xm, &b.ym, &b.zm));
  return b;
}

box3 ghost_box(DM da) {
  box3 b{};
  PEERS_PETSC(DMDAGetGhostCorners(da, &b.x, &b.y, &b.z, &b.xm, &b.ym, &b.zm));
  return b;
}

// Writes value_at into `v` (a global or local vector of `da`) over the owned box, and `other`
// everywhere else.
void fill_owned(dmda_case const& cs, DM da, Vec v, double other) {
  PEERS_PETSC(VecSet(v, other));
  box3 const o = owned_box(da);
  PetscScalar**** a = nullptr;
  PEERS_PETSC(DMDAVecGetArrayDOF(da, v, &a));
  for (PetscInt k = o.z; k < o.z + o.zm; ++k)
    for (PetscInt j = o.y; j < o.y + o.ym; ++j)
      for (PetscInt i = o.x; i < o.x + o.xm; ++i)
        for (PetscInt c = 0; c < cs.dof; ++c) a[k][j][i][c] = value_at(cs, k, j, i, c);
  PEERS_PETSC(DMDAVecRestoreArrayDOF(da, v, &a));
}

// Checks every point of the ghost box of local vector `v` that the stencil reaches (a star
// stencil leaves points off the axes through the owned box alone). Returns "" or the first
// mismatch.
std::string check_ghosted(dmda_case const& cs, DM da, Vec v) {
  box3 const o = owned_box(da), g = ghost_box(da);
  PetscScalar const**** a = nullptr;
  PEERS_PETSC(DMDAVecGetArrayDOFRead(da, v, &a));
  std::string bad;
  long long wrong = 0;
  for (PetscInt k = g.z; k < g.z + g.zm; ++k)
    for (PetscInt j = g.y; j < g.y + g.ym; ++j)
      for (PetscInt i = g.x; i < g.x + g.xm; ++i) {
        int const outside = (k < o.z || k >= o.z + o.zm) + (j < o.y || j >= o.y + o.ym) +
                            (i < o.x || i >= o.x + o.xm);
        if (!cs.box && outside > 1) continue;
        for (PetscInt c = 0; c < cs.dof; ++c) {
          double const want = value_at(cs, k, j, i, c), got = a[k][j][i][c];
          if (got == want) continue;
          if (wrong++ == 0)
            bad = "point (z=" + std::to_string(k) + ", y=" + std::to_string(j) +
                  ", x=" + std::to_string(i) + ") component " + std::to_string(c) + " holds " +
                  std::to_string(got) + ", expected " + std::to_string(want);
        }
      }
  PEERS_PETSC(DMDAVecRestoreArrayDOFRead(da, v, &a));
  if (wrong) bad = std::to_string(wrong) + " wrong value(s); first: " + bad;
  return bad;
}

double owned_bytes(DM da, dmda_case const& c) {
  box3 const o = owned_box(da);
  return static_cast<double>(o.xm) * static_cast<double>(o.ym) * static_cast<double>(o.zm) * c.dof *
         sizeof(PetscScalar);
}

std::string label_of(dmda_case const& c) {
  return std::string("DMDA ") + (c.box ? "box" : "star") + " s=" + std::to_string(c.width) +
         " dof=" + std::to_string(c.dof);
}

peer_op global_to_local(dmda_case const& c) {
  auto d = create(c);
  peer_op p;
  p.run = [d] {
    PEERS_PETSC(DMGlobalToLocalBegin(d->da, d->global, INSERT_VALUES, d->local));
    PEERS_PETSC(DMGlobalToLocalEnd(d->da, d->global, INSERT_VALUES, d->local));
  };
  p.verify = [d, c, run = p.run] {
    fill_owned(c, d->da, d->global, -1);
    PEERS_PETSC(VecSet(d->local, -2));
    run();
    return check_ghosted(c, d->da, d->local);
  };
  p.owned_copy_bytes = owned_bytes(d->da, c);
  p.label = label_of(c);
  p.keep = d;
  return p;
}

peer_op local_to_local(dmda_case const& c) {
  auto d = create(c);
  peer_op p;
  p.run = [d] {
    PEERS_PETSC(DMLocalToLocalBegin(d->da, d->local, INSERT_VALUES, d->local2));
    PEERS_PETSC(DMLocalToLocalEnd(d->da, d->local, INSERT_VALUES, d->local2));
  };
  p.verify = [d, c, run = p.run] {
    // Only the source's owned points hold values: the ghosts of the destination must come from
    // the neighbours' owned points, not from the source's own (stale) ghosts.
    fill_owned(c, d->da, d->local, -1);
    PEERS_PETSC(VecSet(d->local2, -2));
    run();
    return check_ghosted(c, d->da, d->local2);
  };
  p.owned_copy_bytes = owned_bytes(d->da, c);
  p.label = label_of(c);
  p.keep = d;
  return p;
}

} // namespace

void register_petsc_cases() {
  for (auto const& c : dmda_cases()) {
    auto const twin = dmda_spec(c);
    register_peer(twin, "petsc_g2l", [c] { return global_to_local(c); });
    register_peer(twin, "petsc_l2l", [c] { return local_to_local(c); });
  }
}

} // namespace halox::bench::peers
