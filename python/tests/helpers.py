"""Shared helpers of the halox Python tests.

Checks are combined over all ranks before asserting (`agree`), so a result that is wrong on one
rank fails the test on every rank, and no rank runs ahead into the next test's collectives.
"""

import os

import numpy as np

#: Which communicators the suites run on (run_pytest.py --comm): "builtin" (halox.Comm, no
#: mpi4py in the process) or "mpi4py" (mpi4py initialises MPI and its COMM_WORLD is passed).
COMM_PATH = os.environ.get("HALOX_TEST_COMM", "builtin")
if COMM_PATH == "mpi4py":
    from mpi4py import MPI  # before halox, so that mpi4py initialises MPI

    COMM = MPI.COMM_WORLD
else:
    import halox

    COMM = halox.comm_world()
BACKENDS = ["mpi_pack", "mpi_datatype", "alltoallv", "mpi_pipeline"]


def agree(ok, what="check failed"):
    """Asserts on every rank that `ok` held on every rank."""
    msgs = COMM.allgather(None if ok else str(what))
    bad = [(r, m) for r, m in enumerate(msgs) if m is not None]
    assert not bad, "; ".join(f"rank {r}: {m}" for r, m in bad)


def close(a, b, rtol=0.0, atol=0.0):
    """(ok, message) for two arrays."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.shape != b.shape:
        return False, f"shape {a.shape} != {b.shape}"
    if a.size == 0:
        return True, ""
    err = np.max(np.abs(a - b) - rtol * np.abs(b))
    return bool(err <= atol), f"max deviation {err:.3g} over tolerance (atol {atol}, rtol {rtol})"


def agree_close(a, b, rtol=0.0, atol=0.0, what=""):
    ok, msg = close(a, b, rtol, atol)
    agree(ok, f"{what}: {msg}")


def halo_oracle(desc, glob, fill):
    """This rank's local buffer after a forward halo exchange, computed from the global array:
    every allocated cell holds the global cell it stands for (wrapped where periodic), and cells
    beyond a non-periodic boundary hold `fill`."""
    if desc.local_elements == 0:
        return np.zeros(desc.local_shape, glob.dtype)
    alloc = desc.dist.allocated_box(desc.grid.rank)
    idx, valid = [], []
    for d in range(desc.ndim):
        i = np.arange(alloc.lo[d], alloc.hi[d])
        e = desc.shape[d]
        if desc.dist.options(d).periodic:
            v = np.ones(i.shape, bool)
            i = i % e
        else:
            v = (i >= 0) & (i < e)
            i = np.clip(i, 0, e - 1)
        idx.append(i)
        valid.append(v)
    out = glob[np.ix_(*idx)].copy()
    ok = np.ones((), bool)
    for v in valid:
        ok = np.logical_and.outer(ok, v)
    out[~ok] = fill
    return out


def rank_buffer(desc, rank, seed, dtype):
    """A deterministic local buffer of `rank` (any rank can compute any rank's)."""
    shape = desc.dist.local_shape(rank)
    return np.random.default_rng(seed + 7919 * rank).integers(-50, 50, size=shape).astype(dtype)


def reverse_oracle(desc, seed, op, dtype):
    """This rank's local buffer after a reverse exchange of `rank_buffer` buffers with `op`:
    every owned cell combined with every rank's halo cells standing for it; halos unchanged."""
    comb = {"sum": np.add, "max": np.maximum, "min": np.minimum}[op]
    glob_shape = tuple(desc.shape)
    acc = None
    for r in range(desc.grid.size):
        if desc.dist.empty(r):
            continue
        buf = rank_buffer(desc, r, seed, dtype)
        alloc = desc.dist.allocated_box(r)
        owned = desc.dist.owned_box(r)
        gidx, valid, own = [], np.ones((), bool), np.ones((), bool)
        for d in range(desc.ndim):
            i = np.arange(alloc.lo[d], alloc.hi[d])
            e = desc.shape[d]
            o = (i >= owned.lo[d]) & (i < owned.hi[d])
            if desc.dist.options(d).periodic:
                v = np.ones(i.shape, bool)
                i = i % e
            else:
                v = (i >= 0) & (i < e)
                i = np.clip(i, 0, e - 1)
            gidx.append(i)
            valid = np.logical_and.outer(valid, v)
            own = np.logical_and.outer(own, o)
        mesh = np.meshgrid(*gidx, indexing="ij")
        flat = np.ravel_multi_index(mesh, glob_shape)
        sel = valid & ~own
        if acc is None:
            acc = {}
        for f, val in zip(flat[sel], buf[sel]):
            acc[f] = comb(acc[f], val) if f in acc else val
    me = desc.grid.rank
    out = rank_buffer(desc, me, seed, dtype)
    if desc.empty:
        return out
    owned = desc.owned_box()
    off = desc.owned_offset
    for pos in np.ndindex(*owned.shape):
        g = tuple(owned.lo[d] + pos[d] for d in range(desc.ndim))
        f = np.ravel_multi_index(g, glob_shape)
        if acc and f in acc:
            loc = tuple(off[d] + pos[d] for d in range(desc.ndim))
            out[loc] = comb(out[loc], acc[f])
    return out


def global_array(shape, dtype, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def grid_dims(n, ndim):
    """A grid splitting the first dimensions of an `ndim`-d tensor over `n` ranks."""
    import halox

    return halox.dims_create(n, ndim)


def split(comm, color, key=0):
    """comm split by `color` on either communicator path."""
    return comm.Split(color, key) if COMM_PATH == "mpi4py" else comm.split(color, key)


def free(comm):
    """Frees a communicator from split() on either path."""
    comm.Free() if COMM_PATH == "mpi4py" else comm.free()
