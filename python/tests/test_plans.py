"""halox plans on NumPy arrays and torch tensors against NumPy oracles."""

import os

import numpy as np
import pytest

import halox
from helpers import (BACKENDS, COMM, agree, agree_close, global_array, grid_dims, halo_oracle,
                     free, rank_buffer, reverse_oracle, split)


def make_desc(shape, dims, opts, dtype="float64", strides=None):
    grid = halox.ProcessGrid(COMM, dims)
    return halox.TensorDesc(grid, shape, dtype, opts, strides)


def test_descriptor_queries_match_the_distribution():
    n = COMM.size
    d = make_desc([10, 7], [n, 1], [halox.DimOptions.halo(2), halox.DimOptions(1, 0, True)])
    me = COMM.rank
    box = d.owned_box()
    # Balanced blocks: the first 10 % n parts get one extra row.
    base, extra = divmod(10, n)
    lo = me * base + min(me, extra)
    hi = lo + base + (1 if me < extra else 0)
    ok = (box.lo == (lo, 0) and box.hi == (hi, 7) and d.local_shape == [hi - lo + 4, 8]
          and d.owned_offset == [2, 1] and d.local_bytes == (hi - lo + 4) * 8 * 8
          and d.owner([lo, 3]) == me and d.owner([9, 0]) == n - 1
          and d.local_offset([lo, 0]) == 2 * 8 + 1 and not d.empty
          and d.dtype == halox.dtype.float64 and d.grid.dims == [n, 1])
    agree(ok, f"queries of {d}: box {box}, local {d.local_shape}")


def test_process_grid_create_chooses_dims():
    n = COMM.size
    g = halox.ProcessGrid.create(COMM, [0, 0, 0, 0], [8, 3, 64, 64], [0, 0, 1, 1], [0, 0, 1, 1])
    # Sample-parallel first when it can: no halo traffic at all.
    agree(g.dims == [n, 1, 1, 1] and g.size == n and g.coords() == [g.rank, 0, 0, 0],
          f"dims {g.dims}")
    agree(halox.choose_grid(4, [0, 1], [100, 3], [1, 0], [1, 0]) == [4, 1], "choose_grid")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("periodic", [False, True])
def test_halo_exchange_2d_vs_numpy(backend, periodic):
    n = COMM.size
    dims = grid_dims(n, 2)
    shape = [9, 8]
    d = make_desc(shape, dims, [halox.DimOptions(1, 2, periodic), halox.DimOptions.halo(1, periodic)])
    glob = global_array(shape, np.float64)
    x = np.full(d.local_shape, -7.0)
    x[d.owned_slices] = glob[d.global_slices]
    plan = halox.HaloPlan(d, backend=backend, boundary="constant", fill_value=-1.5)
    plan.execute(x)
    agree_close(x, halo_oracle(d, glob, -1.5), what=f"halo {backend} periodic={periodic}")
    agree(plan.selected_backend == halox.backend_from_string(backend), "selected backend")
    agree(backend in plan.describe(), "describe names the backend")


def test_multi_hop_halo_wider_than_a_neighbours_block():
    # A 7-wide halo window on 7 cells split up to 4 ways reaches ranks two hops away.
    n = COMM.size
    d = make_desc([7, 3], [n, 1], [halox.DimOptions.halo(3), None], "float32")
    glob = global_array([7, 3], np.float32)
    x = d.zeros()
    x[d.owned_slices] = glob[d.global_slices]
    halox.HaloPlan(d, backend="mpi_pack", boundary="constant").execute(x)
    agree_close(x, halo_oracle(d, glob, 0.0), what="multi-hop halo")


def test_start_wait_and_3d_torch_tensor():
    torch = pytest.importorskip("torch")
    n = COMM.size
    shape = [6, 5, 4]
    d = make_desc(shape, grid_dims(n, 3), [halox.DimOptions.halo(1, True)] * 3, "float32")
    glob = global_array(shape, np.float32)
    x = torch.zeros(d.local_shape, dtype=torch.float32)
    x[d.owned_slices] = torch.from_numpy(glob[d.global_slices])
    plan = halox.HaloPlan(d, backend="mpi_datatype")
    plan.start(x)
    plan.wait()
    agree_close(x.numpy(), halo_oracle(d, glob, 0.0), what="3-d periodic with torch")


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_reverse_exchange_vs_numpy(op):
    n = COMM.size
    shape = [7, 6]
    d = make_desc(shape, grid_dims(n, 2), [halox.DimOptions(2, 1), halox.DimOptions.halo(1, True)])
    x = rank_buffer(d, COMM.rank, 11, np.float64)
    plan = halox.HaloPlan(d, backend="mpi_pack")
    plan.execute_reverse(x, op)
    agree_close(x, reverse_oracle(d, 11, op, np.float64), what=f"reverse {op}")


def test_two_tensors_in_one_plan():
    n = COMM.size
    a = make_desc([8, 4], [n, 1], [halox.DimOptions.halo(1), None], "float64")
    b = make_desc([5, 3], [n, 1], [halox.DimOptions.halo(2, True), None], "int32")
    ga = global_array([8, 4], np.float64)
    gb = (global_array([5, 3], np.float64) * 100).astype(np.int32)
    xa, xb = a.zeros(), b.zeros()
    xa[a.owned_slices] = ga[a.global_slices]
    xb[b.owned_slices] = gb[b.global_slices]
    plan = halox.HaloPlan([a, b], backend="mpi_pack")
    plan.execute([xa, xb])
    agree(plan.num_tensors == 2, "num_tensors")
    # Boundary halo cells are left untouched (0), like the oracle's fill.
    agree_close(xa, halo_oracle(a, ga, 0.0), what="tensor a")
    agree_close(xb, halo_oracle(b, gb, 0), what="tensor b")


@pytest.mark.parametrize("backend", BACKENDS)
def test_redistribute_forward_and_inverse(backend):
    n = COMM.size
    shape = [6, 10]
    src = make_desc(shape, [n, 1], [halox.DimOptions.halo(1), None])
    dst = make_desc(shape, [1, n], [None, halox.DimOptions(2, 0)])
    glob = global_array(shape, np.float64)
    x = src.zeros()
    x[src.owned_slices] = glob[src.global_slices]
    y = np.full(dst.local_shape, 3.25)
    plan = halox.RedistributePlan(src, dst, backend=backend)
    plan.execute(x, y)
    expect = np.full(dst.local_shape, 3.25)  # halo cells are not written
    expect[dst.owned_slices] = glob[dst.global_slices]
    agree_close(y, expect, what=f"forward {backend}")
    back = src.zeros()
    plan.execute_inverse(y, back)
    agree_close(back[src.owned_slices], glob[src.global_slices], what="inverse")
    agree(plan.is_source and plan.is_destination, "membership")


def test_redistribute_across_communicators():
    # Source on the first half of the ranks, destination on all of them.
    n, me = COMM.size, COMM.rank
    k = max(1, n // 2)
    sub = split(COMM, 0 if me < k else 1, me)
    shape = [5, 4]
    glob = global_array(shape, np.float32)
    src = None
    if me < k:
        src = halox.TensorDesc(halox.ProcessGrid(sub, [k, 1]), shape, "float32")
    dst = make_desc(shape, [1, n], None, "float32")
    plan = halox.RedistributePlan(src, dst, parent=COMM, backend="mpi_pack")
    x = None
    if src is not None:
        x = src.zeros()
        x[src.owned_slices] = glob[src.global_slices]
    y = dst.zeros()
    plan.execute(x, y)
    agree_close(y[dst.owned_slices], glob[dst.global_slices], what="across communicators")
    agree(plan.is_source == (me < k), "is_source")
    free(sub)


def test_gather_scatter_and_whole_on_rank():
    n = COMM.size
    shape = [7, 3]
    d = make_desc(shape, [n, 1], [halox.DimOptions.halo(1), None])
    glob = global_array(shape, np.float64)
    x = d.zeros()
    halox.scatter(glob if COMM.rank == n - 1 else None, d, x, root=n - 1, halo_after=True)
    agree_close(x, halo_oracle(d, glob, 0.0), what="scatter with halos")
    g = halox.gather(d, x, root=0)
    agree((g is None) == (COMM.rank != 0), "gather returns on root only")
    if g is not None:
        agree_close(g, glob, what="gather")
    else:
        agree(True)
    whole = halox.whole_on_rank(d, 0)
    agree(whole.local_shape == (shape if COMM.rank == 0 else [0, 0]), "whole_on_rank")


def test_box_gather_vs_numpy():
    n = COMM.size
    shape = [8, 5]
    d = make_desc(shape, [n, 1], None, "float64")
    glob = global_array(shape, np.float64)
    x = d.zeros()
    x[d.owned_slices] = glob[d.global_slices]
    # Rank p gets rows [p, 8) (reaching into every later rank's block) and columns 1..3.
    need = [[(p, 8) for p in range(n)], [(1, 4)]]
    plan = halox.BoxGatherPlan(d, need, backend="mpi_pack")
    out = plan.execute(x)
    me = COMM.rank
    agree(tuple(plan.shape) == (8 - me, 3) and tuple(plan.origin) == (me, 1), "shape/origin")
    agree_close(out, glob[me:8, 1:4], what="box gather")


def test_non_contiguous_views_with_matching_strides():
    torch = pytest.importorskip("torch")
    n = COMM.size
    shape = [6, 4]
    # A column-major local buffer: describe its strides and halox uses it in place.
    grid = halox.ProcessGrid(COMM, [n, 1])
    probe = halox.TensorDesc(grid, shape, "float64", [halox.DimOptions.halo(1), None])
    rows, cols = probe.local_shape
    t = torch.zeros(cols, rows, dtype=torch.float64).t()  # strides (1, rows)
    d = halox.TensorDesc(grid, shape, "float64", [halox.DimOptions.halo(1), None],
                         strides=list(t.stride()))
    glob = global_array(shape, np.float64)
    t[d.owned_slices] = torch.from_numpy(glob[d.global_slices])
    halox.HaloPlan(d, backend="mpi_pack", boundary="constant").execute(t)
    agree_close(t.numpy(), halo_oracle(d, glob, 0.0), what="column-major buffer")


def test_backends_build_info_and_context():
    agree(halox.Backend.mpi_pack in halox.host_backends(), "host backends")
    agree(halox.HAS_CUDA or halox.device_backends() == [], "device backends without CUDA")
    agree("MPI" in halox.describe(), "describe")
    ctx = halox.Context(COMM)
    d = make_desc([4 * COMM.size, 2], [COMM.size, 1], [halox.DimOptions.halo(1), None])
    p = halox.HaloPlan(d, context=ctx, backend="mpi_pack")
    agree(p.context == ctx and ctx.plans_built >= 1 and ctx.size == COMM.size, "context")
    agree("plan(s) built" in ctx.describe(), ctx.describe())


def test_tune_options_reach_automatic_selection():
    d = make_desc([4 * COMM.size, 2], [COMM.size, 1], [halox.DimOptions.halo(1), None])
    p = halox.HaloPlan(d, tune={"trials": 3, "recheck": False, "watch": False})
    text = p.describe()
    if COMM.size > 1:
        agree("re-check: off" in text and "watching" not in text, text)
    t = d.zeros()
    p.execute(t)


def test_pipelined_backend_cuts_messages_into_fragments():
    # The fragment size comes from the context (here from the environment, read when the
    # context is built); every message of this exchange is cut into 16-byte fragments.
    os.environ["HALOX_PIPELINE_FRAGMENT"] = "16"
    try:
        ctx = halox.Context(COMM)
    finally:
        del os.environ["HALOX_PIPELINE_FRAGMENT"]
    n = COMM.size
    shape = [9, 8]
    d = make_desc(shape, grid_dims(n, 2), [halox.DimOptions.halo(2, True), halox.DimOptions.halo(1, True)])
    glob = global_array(shape, np.float64)
    x = np.full(d.local_shape, -7.0)
    x[d.owned_slices] = glob[d.global_slices]
    plan = halox.HaloPlan(d, context=ctx, backend="mpi_pipeline")
    plan.execute(x)
    agree_close(x, halo_oracle(d, glob, 0.0), what="mpi_pipeline with 16-byte fragments")
    if n > 1:
        agree("fragment size 16 B" in plan.describe() and " 0 of " not in plan.describe(),
              plan.describe())
