"""halox.Comm, the package's own communicators, and the two communicator paths (built-in and
mpi4py): the same halox calls on either, and what halox hands back."""

import sys

import numpy as np
import pytest

import halox
from helpers import COMM, COMM_PATH, agree


def test_path_is_the_one_in_use():
    want = "mpi4py" if COMM_PATH == "mpi4py" else "built-in"
    agree(halox.comm_path() == want, f"comm_path() = {halox.comm_path()}, expected {want}")
    agree(("mpi4py.MPI" in sys.modules) == (COMM_PATH == "mpi4py"),
          "the built-in path must not load mpi4py")
    info = halox.build_info()
    agree(f"communicators {want}" in info and "thread level" in info, info)
    by_halox = halox._halox._mpi_initialised_by_halox()
    agree(by_halox == (COMM_PATH != "mpi4py"), f"MPI initialised by halox: {by_halox}")


def test_version_is_the_library_version():
    agree(halox.__version__ == halox._halox.VERSION, f"{halox.__version__} vs {halox._halox.VERSION}")
    agree(halox.build_info().startswith(f"halox {halox.__version__} "), halox.build_info())


def test_world_rank_size_and_collectives():
    w = halox.comm_world()
    n, me = w.size, w.rank
    agree(n == COMM.size and me == COMM.rank, "comm_world matches the suite's communicator")
    agree(w.allreduce(me + 1) == n * (n + 1) // 2, "allreduce of an int")
    agree(w.allreduce(float(me), "max") == float(n - 1), "allreduce max of a float")
    agree(w.allreduce(me == 0) == 1, "allreduce of a bool counts")
    a = np.arange(4.0) * (me + 1)
    s = w.allreduce(a, "sum")
    agree(np.array_equal(s, np.arange(4.0) * n * (n + 1) / 2) and a[1] == me + 1,
          "allreduce of an array returns a new array and leaves the input")
    b = np.full((2, 3), me, np.int32)
    w.allreduce_inplace(b, "min")
    agree((b == 0).all(), "allreduce_inplace min")
    t = np.full(5, float(me))
    w.bcast_inplace(t, root=n - 1)
    agree((t == n - 1).all(), "bcast_inplace from the last rank")
    agree(w.bcast({"k": me}, root=0) == {"k": 0}, "bcast of an object")
    agree(w.allgather(("r", me)) == [("r", r) for r in range(n)], "allgather of objects")
    w.barrier()
    me = halox.comm_self()
    agree(me.size == 1 and me.rank == 0 and me.allgather(w.rank) == [w.rank], "comm_self")


def test_torch_tensors_reduce_in_place():
    torch = pytest.importorskip("torch")
    w = halox.comm_world()
    x = torch.ones(3, dtype=torch.float32)
    w.allreduce_inplace(x)
    y = w.allreduce(torch.full((2,), float(w.rank)), "max")
    agree(bool((x == w.size).all()) and bool((y == w.size - 1).all()), f"{x} {y}")


def test_split_dup_free():
    w = halox.comm_world()
    n, me = w.size, w.rank
    half = w.split(me % 2, key=-me)
    agree(half.owned and half.size == (n + 1 - me % 2) // 2, f"split size {half.size}")
    # key=-rank reverses the order within each colour.
    agree(half.rank == half.size - 1 - me // 2, f"split rank {half.rank}")
    only0 = w.split(0 if me == 0 else None)
    agree((only0 is None) == (me != 0) and (me != 0 or only0.size == 1), "color=None")
    d = w.dup()
    agree(d.size == n and d != w and w == halox.comm_world(), "dup is a new communicator")
    d.free()
    with pytest.raises(halox.Error, match="freed"):
        d.rank  # noqa: B018
    half.free()


def test_bad_arguments_name_the_value():
    w = halox.comm_world()
    with pytest.raises(halox.Error, match="color=-3"):
        w.split(-3)
    with pytest.raises(halox.Error, match="'median'"):
        w.allreduce(1, "median")
    with pytest.raises(halox.Error, match="not contiguous"):
        w.allreduce_inplace(np.zeros((4, 4))[:, ::2])
    with pytest.raises(halox.Error, match="read-only"):
        a = np.zeros(3)
        a.setflags(write=False)
        w.allreduce_inplace(a)
    with pytest.raises(halox.Error, match="float16"):
        w.allreduce_inplace(np.zeros(3, np.float16))
    with pytest.raises(halox.Error, match="py2f"):
        halox.as_comm(1 << 40)


def test_every_kind_of_handle_builds_the_same_grid():
    n = COMM.size
    ref = halox.ProcessGrid(COMM, [n])
    for kind, comm in [("halox.Comm", halox.comm_world()), ("py2f", halox.comm_world().py2f()),
                       ("as_comm", halox.as_comm(COMM))]:
        g = halox.ProcessGrid(comm, [n])
        agree(g.rank == ref.rank and g.size == n, kind)
    # What halox hands back follows the path: mpi4py objects when mpi4py is in use.
    sub = ref.sub_comm([True])
    kind = type(ref.comm).__module__
    want = "mpi4py.MPI" if COMM_PATH == "mpi4py" else "halox._halox"
    agree(kind == want and type(sub).__module__ == want, f"grid.comm is a {kind}")
    g = halox.as_comm(ref.comm)
    agree(g.size == n and g.rank == ref.rank, "the grid's communicator")
    if COMM_PATH == "mpi4py":
        sub.Free()
    else:
        sub.free()


def test_grid_comm_outlives_the_grid():
    if COMM_PATH == "mpi4py":
        pytest.skip("an mpi4py object does not keep the grid alive (as before)")
    c = halox.ProcessGrid(COMM, [COMM.size]).comm
    import gc

    gc.collect()
    agree(c.size == COMM.size and c.allreduce(1) == COMM.size, "borrowed grid communicator")


def test_dims_create():
    agree(halox.dims_create(12, 2) == [4, 3] and halox.dims_create(8, 3) == [2, 2, 2] and
          halox.dims_create(7, 2) == [7, 1] and halox.dims_create(1, 3) == [1, 1, 1] and
          halox.dims_create(36, 2) == [6, 6], "dims_create")
    with pytest.raises(halox.Error, match="nprocs=0"):
        halox.dims_create(0, 2)


def test_allgather_into_a_buffer():
    w = halox.comm_world()
    n, me = w.size, w.rank
    send = np.array([me, 10 * me], np.float64)
    recv = np.full((n, 2), -1.0)
    w.allgather_into(send, recv)
    agree(np.array_equal(recv, np.array([[r, 10 * r] for r in range(n)], np.float64)),
          f"allgather_into gave {recv}")
    # A receive buffer of the wrong size or dtype is refused on the rank that passed it, before
    # any message (every rank passes the same wrong size here, so all refuse).
    with pytest.raises(halox.Error, match=r"recv holds 3 float64 elements but .* send 2 float64"):
        w.allgather_into(send, np.zeros(3))
    with pytest.raises(halox.Error, match="recv of the send's dtype"):
        w.allgather_into(send, np.zeros((n, 2), np.float32))
    with pytest.raises(halox.Error, match="read-only"):
        ro = np.zeros((n, 2))
        ro.setflags(write=False)
        w.allgather_into(send, ro)
