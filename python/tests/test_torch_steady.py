"""halox.torch in the steady state: after a layer has agreed on an input shape it runs no
collective check of its own, keeps its halo buffers, and still fails on every process, at
once, when one process passes a wrong input."""

import copy
import time

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import halox  # noqa: E402
import halox.torch as ht  # noqa: E402
from helpers import COMM, agree, agree_close  # noqa: E402

torch.set_num_threads(1)


def small_model():
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Conv2d(4, 3, 3, padding=1),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 2)).double()


@pytest.fixture
def agreements(monkeypatch):
    """Names of the layers that ran a collective agreement, in call order."""
    calls = []
    real = ht._agree

    def counting(comm, what, key, problem=None):
        calls.append(what)
        return real(comm, what, key, problem)

    monkeypatch.setattr(ht, "_agree", counting)
    return calls


def step(par, x, grid, size):
    out = par(x[grid.local_slices(size)])
    out.sum().backward()
    return out


def test_a_steady_step_agrees_nothing(agreements):
    n = COMM.size
    size = (4 * n, 6)
    grid = ht.SpatialGrid(COMM, (n, 1))
    par = ht.parallelize(small_model(), grid, size)
    x = torch.randn(3, 2, *size, dtype=torch.float64)
    step(par, x, grid, size)
    first = len(agreements)
    agree(first > 0, "the first step agrees on the shapes")
    for _ in range(3):
        step(par, x, grid, size)
    agree(len(agreements) == first, f"steady steps agreed again: {agreements[first:]}")
    for m in par.modules():
        plans = getattr(m, "_plans", {})
        agree(all(p.checks is False for p in plans.values()), "plans run without collective "
              "buffer checks")
    # A new batch size on every process is a new shape: agreed once, then steady again.
    x2 = torch.randn(1, 2, *size, dtype=torch.float64)
    step(par, x2, grid, size)
    second = len(agreements)
    agree(second > first, "a new batch size is agreed")
    step(par, x2, grid, size)
    step(par, x, grid, size)  # back to the first shape: its plans are kept, agreed once more
    third = len(agreements)
    step(par, x, grid, size)
    agree(len(agreements) == third, "steady again")


def test_debug_checks_agree_on_every_call(agreements, monkeypatch):
    n = COMM.size
    size = (4 * n, 6)
    grid = ht.SpatialGrid(COMM, (n, 1))
    monkeypatch.setattr(ht, "CHECKS", "always")
    conv = ht.DistConv2d(2, 2, 3, padding=1, grid=grid, input_size=size).double()
    x = torch.randn(2, 2, *size, dtype=torch.float64)[grid.local_slices(size)]
    for _ in range(3):
        conv(x)
    agree(len(agreements) == (3 if n > 1 else 0), f"agreements {agreements}")
    if n > 1:
        agree(conv.halo_plan(2, 2, torch.float64).checks is True, "collective buffer checks")
    if n > 1:
        monkeypatch.setattr(ht, "CHECKS", "sometimes")
        with pytest.raises(halox.Error, match="CHECKS is 'sometimes'"):
            conv(x)


def test_halo_buffers_are_kept_and_never_shared_by_live_graphs():
    n = COMM.size
    if n < 2:
        pytest.skip("one process exchanges nothing")
    size = (4 * n, 5)
    grid = ht.SpatialGrid(COMM, (n, 1))
    torch.manual_seed(1)
    ser = nn.Conv2d(2, 3, 3, padding=1).double()
    conv = ht.DistConv2d.from_module(copy.deepcopy(ser), grid, size)
    x = torch.randn(2, 2, *size, dtype=torch.float64)
    xl = x[grid.local_slices(size)]
    ptrs = set()
    for _ in range(3):
        conv(xl).sum().backward()
        pool = next(iter(conv._halo_bufs._sets.values()))
        ptrs.add(pool[0][0].data_ptr())
        agree(len(pool) == 1, f"{len(pool)} buffers")
    agree(len(ptrs) == 1, "the same buffer every step")
    agree(conv.halo_buffer_bytes() > 0, "halo_buffer_bytes")
    # Two forwards before one backward (the layer used twice): each keeps its own buffer, and
    # the gradients are the serial ones.
    conv.weight.grad = None
    ser.weight.grad = None
    x2 = torch.randn(2, 2, *size, dtype=torch.float64)
    (conv(xl) * 2 + conv(x2[grid.local_slices(size)])).sum().backward()
    (ser(x) * 2 + ser(x2)).sum().backward()
    g = ht.all_reduce_sum(conv.weight.grad, COMM)
    agree_close(g, ser.weight.grad, atol=1e-10, what="weight grad of a layer used twice")
    pool = next(iter(conv._halo_bufs._sets.values()))
    agree(len(pool) == 2, f"{len(pool)} buffers for two live graphs")


def expect_error_everywhere(fn):
    """Runs fn on every rank; returns (message or None, seconds)."""
    t0 = time.perf_counter()
    try:
        fn()
        msg = None
    except halox.Error as e:
        msg = str(e)
    return msg, time.perf_counter() - t0


def blocks(size):
    """A grid whose processes all exchange with each other for a 3x3 window (2x1 or 2x2: faces
    and corners), and this process's block shape."""
    grid = ht.SpatialGrid(COMM, (0, 0))
    return grid, tuple(hi - lo for lo, hi in grid.split(size))


def fails_in_the_steady_state(batch, odd_rank, odd_input, own, peer):
    """A 3x3 convolution runs steadily, then ``odd_rank`` passes ``odd_input(good, block)``:
    that rank's error holds every word of ``own(block)``, every other rank's every word of
    ``peer``, all within 20 s; afterwards the layer plans anew and runs on."""
    if COMM.size < 2:
        pytest.skip("needs peers")
    size = (8, 8)
    grid, block = blocks(size)
    conv = ht.DistConv2d(1, 1, 3, padding=1, grid=grid, input_size=size)
    good = torch.zeros(batch, 1, *block)
    conv(good)
    conv(good)
    x = odd_input(good, block) if COMM.rank == odd_rank else good
    msg, secs = expect_error_everywhere(lambda: conv(x))
    words = own(block) if COMM.rank == odd_rank else peer
    agree(msg is not None and all(w in msg for w in words), msg)
    agree(secs < 20, f"took {secs:.1f} s")
    out = conv(good)
    agree(tuple(out.shape) == (batch, 1, *block), "usable after the error")


def test_wrong_block_in_the_steady_state_fails_everywhere_at_once():
    fails_in_the_steady_state(
        1, 1, lambda good, block: torch.zeros(1, 1, block[0] + 1, block[1]),
        own=lambda block: [str((block[0] + 1, block[1]))], peer=["peer_failed", "rank 1"])


def test_wrong_dtype_in_the_steady_state_fails_everywhere_at_once():
    last = COMM.size - 1
    fails_in_the_steady_state(2, last, lambda good, block: good.double(),
                              own=lambda block: ["changed", "float64"],
                              peer=[f"rank {last}", "changed"])


def test_batch_norm_with_a_wrong_channel_count_fails_everywhere():
    n = COMM.size
    grid = ht.SpatialGrid(COMM, (n, 1))
    bn = ht.DistBatchNorm2d(3, grid=grid)
    x = torch.randn(2, 3 if COMM.rank != 0 else 4, 4, 4)
    msg, _ = expect_error_everywhere(lambda: bn(x))
    if COMM.rank == 0:
        agree(msg is not None and "4 channels" in msg, msg)
    else:
        agree(msg is not None and "rank(s) [0]" in msg, msg)


def test_global_pool_survives_a_new_batch_and_rejects_a_lone_change():
    n = COMM.size
    grid = ht.SpatialGrid(COMM, (n, 1))
    size = (2 * n, 3)
    g = ht.GlobalPoolToSample(grid, size, "avg")
    for batch in (3, 3, 2, 3):
        torch.manual_seed(batch)  # the same x on every process
        x = torch.randn(batch, 2, *size, dtype=torch.float64)
        out = g(x[grid.local_slices(size)])
        ref = x.mean((2, 3), keepdim=True)[g.samples(batch)]
        agree_close(out, ref, atol=1e-12, what=f"global average, batch {batch}")
    if n < 2:
        return
    block = tuple(hi - lo for lo, hi in grid.split(size))
    odd = torch.zeros(4 if COMM.rank == 0 else 3, 2, *block, dtype=torch.float64)
    msg, _ = expect_error_everywhere(lambda: g(odd))
    agree(msg is not None and "different" in msg, msg)


def test_batch_norm_statistics_do_not_cancel_on_a_large_mean():
    # float32 values around 1e4 with unit spread: plain sums of squares would lose the variance.
    n = COMM.size
    size = (4 * n, 4)
    grid = ht.SpatialGrid(COMM, (n, 1))
    bn = ht.DistBatchNorm2d(3, grid=grid)
    ref = nn.BatchNorm2d(3).double()
    torch.manual_seed(7)
    x = 1e4 + torch.randn(2, 3, *size)
    out = bn(x[grid.local_slices(size)])
    expect = ref(x.double()).float()[grid.local_slices(size)]
    agree_close(out.detach(), expect.detach(), atol=2e-3, what="normalised output")
    agree_close(bn.running_var, ref.running_var.float(), rtol=1e-3, what="running variance")


def test_a_relu_before_an_exchange_writes_into_the_halo_buffer():
    n = COMM.size
    size = (4 * n, 6)
    grid = ht.SpatialGrid(COMM, (n, 1))
    torch.manual_seed(3)
    serial = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU(), nn.Conv2d(3, 2, 3, padding=1),
                           nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                           nn.Linear(2 * 2 * n * 3, 2)).double()
    ref = copy.deepcopy(serial)
    par = ht.parallelize(serial, grid, size)
    fused = n > 1  # one process exchanges nothing, so there is nothing to fuse
    agree(isinstance(par[1], nn.Identity) == fused and par[2]._relu_in == fused,
          f"fused: {par}")
    agree(isinstance(par[3], nn.ReLU), "a ReLU before a layer without exchange stays")
    x = torch.randn(2, 2, *size, dtype=torch.float64)
    xs = x.clone().requires_grad_(True)
    ref(xs).sum().backward()
    xl = x[grid.local_slices(size)].clone().requires_grad_(True)
    out = par(xl)
    rows = par.shuffle.samples(2)
    out.sum().backward()
    ht.sync_grads(par, COMM)
    agree_close(out.detach(), ref(x).detach()[rows], atol=1e-12, what="output")
    agree_close(xl.grad, xs.grad[grid.local_slices(size)], atol=1e-12, what="input gradient")
    for p, q in zip(par.parameters(), ref.parameters()):
        agree_close(p.grad, q.grad, atol=1e-12, what="parameter gradient")


def test_a_process_group_without_torch_distributed_is_refused_everywhere():
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        pytest.skip("torch.distributed is initialised in this process")
    with pytest.raises(halox.Error, match="torch.distributed is not initialised"):
        ht.SpatialGrid(COMM, (COMM.size, 1), process_group=object())
    agree(True)
