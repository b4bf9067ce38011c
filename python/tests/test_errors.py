"""Wrong inputs raise halox.Error with a message naming the bad value and the fix, on every rank
(collective calls never leave the other ranks waiting)."""

import numpy as np
import pytest

import halox
from helpers import COMM, agree


def raises_everywhere(fn, *needles):
    """Runs fn on every rank; every rank must raise halox.Error, and the rank that holds the
    details (its own message) must mention every needle. Returns this rank's message."""
    try:
        fn()
        msg = None
    except halox.Error as e:
        msg = str(e)
    agree(msg is not None, "no halox.Error raised")
    return msg


def desc_1d(dtype="float64", halo=1):
    n = COMM.size
    grid = halox.ProcessGrid(COMM, [n, 1])
    return halox.TensorDesc(grid, [4 * n, 3], dtype, [halox.DimOptions.halo(halo), None])


def test_error_carries_the_cpp_message_and_category():
    n = COMM.size
    grid = halox.ProcessGrid(COMM, [n, 1])
    with pytest.raises(halox.Error) as info:
        halox.TensorDesc(grid, [8, 3], "float32", [halox.DimOptions.halo(9), None])
    e = info.value
    agree(isinstance(e, RuntimeError) and e.code == "invalid_argument", f"category {e.code}")
    agree("halo width 9" in e.message and "on rank" in str(e), str(e))


@pytest.mark.parametrize("bad_rank", [0, -1])
def test_wrong_dtype_on_one_rank_fails_everywhere(bad_rank):
    d = desc_1d()
    bad = COMM.rank == bad_rank % COMM.size
    x = d.zeros().astype(np.float32) if bad else d.zeros()
    plan = halox.HaloPlan(d, backend="mpi_pack")
    msg = raises_everywhere(lambda: plan.execute(x))
    if bad:
        agree("dtype float32" in msg and "float64" in msg and "convert" in msg, msg)
    else:
        agree("rank" in msg, msg)
    # The plan still works afterwards: nothing was left half-done.
    y = d.zeros()
    plan.execute(y)
    agree(True)


def test_wrong_shape_and_another_descriptors_tensor():
    d = desc_1d()
    other = desc_1d(halo=2)  # same tensor, other halos: another local shape
    plan = halox.HaloPlan(d, backend="mpi_pack")
    msg = raises_everywhere(lambda: plan.execute(other.zeros()))
    agree("shape" in msg and "owned block + halos" in msg, msg)
    msg = raises_everywhere(lambda: plan.execute(np.zeros(5)))
    agree("shape (5,)" in msg, msg)


def test_torch_dtype_and_foreign_objects():
    torch = pytest.importorskip("torch")
    d = desc_1d()
    plan = halox.HaloPlan(d, backend="mpi_pack")
    t = torch.zeros(d.local_shape, dtype=torch.float32)
    msg = raises_everywhere(lambda: plan.execute(t))
    agree("float32" in msg, msg)
    msg = raises_everywhere(lambda: plan.execute([1, 2, 3]))
    agree("tensor(s)" in msg or "NumPy array" in msg, msg)
    msg = raises_everywhere(lambda: plan.execute("not a tensor"))
    agree("NumPy array or a torch tensor" in msg, msg)


def test_non_contiguous_view_refused_with_the_fix():
    d = desc_1d()
    plan = halox.HaloPlan(d, backend="mpi_pack")
    big = np.zeros((d.local_shape[0], d.local_shape[1] * 2))
    view = big[:, ::2]  # right shape and dtype, strides (6, 2) instead of (3, 1)
    msg = raises_everywhere(lambda: plan.execute(view))
    agree("strides" in msg and "ascontiguousarray" in msg and "strides=" in msg, msg)


def test_read_only_array_refused():
    d = desc_1d()
    x = d.zeros()
    x.setflags(write=False)
    plan = halox.HaloPlan(d, backend="mpi_pack")
    msg = raises_everywhere(lambda: plan.execute(x))
    agree("read-only" in msg, msg)


def test_bad_arguments_name_the_value():
    msg = raises_everywhere(lambda: halox.ProcessGrid(object(), [1]))
    agree("mpi4py" in msg, msg)
    msg = raises_everywhere(lambda: halox.backend_from_string("carrier_pigeon"))
    agree("carrier_pigeon" in msg, msg)
    d = desc_1d()
    msg = raises_everywhere(lambda: halox.HaloPlan(d, backend="mpi_pack").execute_reverse(
        d.zeros(), "median"))
    agree("median" in msg and "'sum'" in msg, msg)
    msg = raises_everywhere(lambda: halox.HaloPlan(d, tune={"watch_often": True}))
    agree("watch_often" in msg and "watch" in msg, msg)
    msg = raises_everywhere(lambda: halox.TensorDesc(d.grid, [4, 3], "complex64"))
    agree("complex64" in msg, msg)


def test_inconsistent_descriptions_fail_on_every_rank():
    n = COMM.size
    if n == 1:
        pytest.skip("needs two ranks to disagree")
    grid = halox.ProcessGrid(COMM, [n, 1])
    shape = [8, 3] if COMM.rank else [8, 4]
    try:
        halox.TensorDesc(grid, shape, "float64")
        code = None
    except halox.Error as e:
        code = e.code
    agree(code == "inconsistent_ranks", f"code {code}")


def test_redistribute_wrong_buffers():
    n = COMM.size
    src = desc_1d()
    dst = halox.TensorDesc(halox.ProcessGrid(COMM, [1, n]), src.shape, "float64")
    plan = halox.RedistributePlan(src, dst, backend="mpi_pack")
    msg = raises_everywhere(lambda: plan.execute(src.zeros(), None))
    agree("None" in msg or "rank" in msg, msg)
    msg = raises_everywhere(lambda: plan.execute(dst.zeros(), src.zeros()))
    agree("shape" in msg or "rank" in msg, msg)


def test_peer_that_fails_at_start_is_named_by_its_peer():
    """A rank that refuses an execution of its own (here: start while its exchange is in flight)
    tells its peers, which raise halox.Error with code "peer_failed" naming it, at once."""
    if COMM.size < 2:
        pytest.skip("needs two ranks")
    d = desc_1d()  # a chain: rank 0 exchanges with rank 1 only
    plan = halox.HaloPlan(d, backend="mpi_pack")
    x = d.zeros()
    code = None
    msg = ""
    if COMM.rank == 0:
        plan.start(x)
        try:
            plan.start(x)
        except halox.Error as e:
            code, msg = e.code, str(e)
        plan.wait()
        agree(code == "invalid_state" and "in flight" in msg, msg)
    else:
        plan.execute(x)
        try:
            plan.execute(x)
        except halox.Error as e:
            code, msg = e.code, str(e)
        if COMM.rank == 1:
            agree(code == "peer_failed" and "rank 0 of its communicator failed" in msg
                  and "in flight" in msg, f"{code}: {msg}")
        else:
            agree(code is None, f"rank {COMM.rank} is no peer of rank 0 but raised {code}: {msg}")
    COMM.barrier()
