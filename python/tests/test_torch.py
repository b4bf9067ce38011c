"""halox.torch: a spatially parallel model against the same model on one process.

Every rank builds the same serial model and data (same seeds); the parallel copy runs on this
rank's spatial block, and its outputs, input gradients, parameter gradients (after
sync_grads) and batch-norm statistics must equal the serial ones."""

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import halox  # noqa: E402
import halox.torch as ht  # noqa: E402
from helpers import COMM, agree, agree_close  # noqa: E402

torch.set_num_threads(1)
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}


def model_2d(classes=5):
    # 32x24 -> conv 32x24 -> maxpool(3, 2, 1) 16x12 -> dilated strided conv 8x6 -> avgpool 4x3
    return nn.Sequential(
        nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
        nn.Conv2d(4, 3, 3, stride=2, padding=2, dilation=2), nn.AvgPool2d(2), nn.Flatten(),
        nn.Linear(3 * 4 * 3, classes))


def model_3d(classes=4):
    # 8x6x6 -> conv 8x6x6 -> maxpool 4x3x3 -> conv(k=3, pad=1) 4x3x3
    return nn.Sequential(
        nn.Conv3d(2, 3, 3, padding=1), nn.BatchNorm3d(3), nn.ReLU(), nn.MaxPool3d(2),
        nn.Conv3d(3, 2, 3, padding=1, bias=False), nn.Flatten(), nn.Linear(2 * 4 * 3 * 3, classes))


def compare(serial, size, batches, dtype, parts):
    """Runs each (N) mini-batch through the serial model and its parallel copy, one SGD step
    after each, checking forward, gradients and running statistics every time."""
    tol = TOL[dtype]
    serial = serial.to(dtype)
    grid = ht.SpatialGrid(COMM, parts)
    ref = copy.deepcopy(serial)
    par = ht.parallelize(serial, grid, size, backend="mpi_pack")
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_par = torch.optim.SGD(par.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(5)
    classes = ref[-1].out_features
    for n in batches:
        X = torch.randn(n, 2, *size, generator=gen, dtype=dtype)
        y = torch.randint(0, classes, (n,), generator=gen)
        Xs = X.clone().requires_grad_(True)
        out_ref = ref(Xs)
        F.cross_entropy(out_ref, y).backward()

        # A non-contiguous view of a leaf: the layers take it as it is.
        Xl = X.clone().requires_grad_(True)
        xl = Xl[grid.local_slices(size)]
        out = par(xl)
        rows = par.shuffle.samples(n)
        # Per-rank losses add up to the serial mean loss.
        (F.cross_entropy(out, y[rows], reduction="sum") / n).backward()
        ht.sync_grads(par, COMM)

        scale = out_ref.abs().max().item()
        agree_close(out.detach(), out_ref.detach()[rows], rtol=tol, atol=tol * scale,
                    what=f"output N={n}")
        gx = Xs.grad[grid.local_slices(size)]
        agree_close(Xl.grad[grid.local_slices(size)], gx, rtol=tol,
                    atol=tol * gx.abs().max().item(), what=f"input grad N={n}")
        # Relative to the largest gradient: some (a bias before batch norm) are zero up to
        # rounding, where an element-wise relative error means nothing.
        gscale = max(q.grad.abs().max().item() for q in ref.parameters())
        for (name, p), q in zip(par.named_parameters(), ref.parameters()):
            agree_close(p.grad, q.grad, rtol=tol, atol=tol * gscale, what=f"grad of {name} N={n}")
        for (name, b), c in zip(par.named_buffers(), ref.buffers()):
            if b.dtype.is_floating_point:
                agree_close(b, c, rtol=tol, atol=tol, what=f"buffer {name} N={n}")
        opt_ref.step()
        opt_par.step()
        opt_ref.zero_grad()
        opt_par.zero_grad()
    return par, ref, grid


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_nchw_model_matches_serial(dtype):
    # The last mini-batch (1 sample) is smaller than the rank count at 2 and 4 ranks: after the
    # shuffle some ranks hold no sample.
    torch.manual_seed(0)
    par, ref, grid = compare(model_2d(), (32, 24), [3, 1], dtype, (0, 0))
    # Evaluation mode uses the running statistics, on every rank alike.
    par.eval()
    ref.eval()
    X = torch.randn(2, 2, 32, 24, dtype=dtype)
    with torch.no_grad():
        out = par(X[grid.local_slices((32, 24))])
        agree_close(out, ref(X)[par.shuffle.samples(2)], rtol=TOL[dtype],
                    atol=TOL[dtype] * 10, what="eval")


def test_ncdhw_model_matches_serial():
    torch.manual_seed(1)
    compare(model_3d(), (8, 6, 6), [2, 1], torch.float64, (0, 0, 0))


def test_pool_window_spanning_non_adjacent_ranks():
    # 7x7 max/avg windows on a 7x5 image split up to 4 ways along H: blocks of 2 rows, so a
    # window reaches ranks two hops away.
    n = COMM.size
    grid = ht.SpatialGrid(COMM, (n, 1))
    torch.manual_seed(2)
    X = torch.randn(2, 3, 7, 5, dtype=torch.float64)
    for dist, ser in [(ht.DistMaxPool2d(7, 1, 3, grid=grid, input_size=(7, 5)),
                       nn.MaxPool2d(7, 1, 3)),
                      (ht.DistAvgPool2d(7, 1, 3, grid=grid, input_size=(7, 5)),
                       nn.AvgPool2d(7, 1, 3))]:
        Xs = X.clone().requires_grad_(True)
        ref = ser(Xs)
        w = torch.linspace(-1, 1, ref.numel(), dtype=torch.float64).reshape(ref.shape)
        (ref * w).sum().backward()
        xl = X[grid.local_slices((7, 5))].clone().requires_grad_(True)
        out = dist(xl)
        (out * w[grid.local_slices(dist.output_size)]).sum().backward()
        agree_close(out.detach(), ref.detach()[grid.local_slices(dist.output_size)], atol=1e-12,
                    what=type(dist).__name__)
        agree_close(xl.grad, Xs.grad[grid.local_slices((7, 5))], atol=1e-12,
                    what=f"{type(dist).__name__} grad")
        if n == 4:
            plan = dist.halo_plan(2, 3, torch.float64)
            agree(plan.descs[0].dist.options(2).halo_lo == 3, "halo wider than a block")


def test_circular_conv_uses_periodic_halos():
    n = COMM.size
    grid = ht.SpatialGrid(COMM, (1, n))
    torch.manual_seed(3)
    conv = nn.Conv2d(2, 2, 3, padding=1, padding_mode="circular").double()
    dist = ht.DistConv2d.from_module(conv, grid, (5, 8))
    X = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    out = dist(X[grid.local_slices((5, 8))])
    agree_close(out.detach(), conv(X).detach()[grid.local_slices((5, 8))], atol=1e-12,
                what="circular conv")


def adjoint_gap(fn, x_shape, seed):
    """|sum over ranks <fn(x), w> - sum over ranks <x, grad>| for random x and w, where grad is
    the backward of <fn(x), w>: zero (to rounding) exactly when backward is the adjoint of the
    linear map fn across all ranks."""
    gen = torch.Generator().manual_seed(seed + 97 * COMM.rank)
    x = torch.randn(*x_shape, generator=gen, dtype=torch.float64, requires_grad=True)
    y = fn(x)
    w = torch.randn(*y.shape, generator=gen, dtype=torch.float64)
    (y * w).sum().backward()
    lhs = COMM.allreduce((y.detach() * w).sum().item())
    rhs = COMM.allreduce((x.detach() * x.grad).sum().item())
    return abs(lhs - rhs) / max(1.0, abs(lhs))


def test_halo_exchange_and_redistribute_backward_are_adjoints():
    n = COMM.size
    grid = halox.ProcessGrid(COMM, [n, 1])
    desc = halox.TensorDesc(grid, [2 * n + 1, 3], "float64",
                            [halox.DimOptions(1, 2, True), halox.DimOptions.halo(1)])
    for boundary in ["untouched", "constant"]:
        plan = halox.HaloPlan(desc, backend="mpi_pack", boundary=boundary)
        gap = adjoint_gap(lambda t: ht.halo_exchange(t, plan), desc.local_shape, 4)
        agree(gap < 1e-12, f"halo_exchange ({boundary}) adjoint gap {gap}")
    dst = halox.TensorDesc(halox.ProcessGrid(COMM, [1, n]), desc.shape, "float64",
                           [None, halox.DimOptions(1, 0)])
    rp = halox.RedistributePlan(desc, dst, backend="mpi_pack")
    gap = adjoint_gap(lambda t: ht.redistribute(t, rp), desc.local_shape, 5)
    agree(gap < 1e-12, f"redistribute adjoint gap {gap}")
    # On one rank the maps are local, and torch's own gradcheck applies.
    if n == 1:
        x = torch.randn(*desc.local_shape, dtype=torch.float64, requires_grad=True)
        agree(torch.autograd.gradcheck(lambda t: ht.halo_exchange(t, plan), (x,)), "gradcheck")


def test_halo_exchange_of_a_non_contiguous_tensor():
    n = COMM.size
    grid = halox.ProcessGrid(COMM, [n, 1])
    desc = halox.TensorDesc(grid, [3 * n, 4], "float64", [halox.DimOptions.halo(1), None])
    plan = halox.HaloPlan(desc, backend="mpi_pack", boundary="constant")
    rows, cols = desc.local_shape
    base = torch.arange(rows * cols * 2, dtype=torch.float64).reshape(rows, cols * 2)
    x = base[:, ::2]  # strides (2*cols, 2): copied into a buffer of the descriptor's layout
    y = ht.halo_exchange(x, plan)
    expect = x.contiguous().numpy().copy()
    plan.execute(expect)
    agree_close(y.numpy(), expect, what="non-contiguous input")


def test_wrong_block_on_one_rank_fails_everywhere():
    n = COMM.size
    grid = ht.SpatialGrid(COMM, (n, 1))
    conv = ht.DistConv2d(1, 1, 3, padding=1, grid=grid, input_size=(4 * n, 4))
    x = torch.zeros(1, 1, 4, 4)
    if COMM.rank == 0:
        x = torch.zeros(1, 1, 5, 4)
    try:
        conv(x)
        msg = None
    except halox.Error as e:
        msg = str(e)
    agree(msg is not None and ("(5, 4)" in msg or "rank 0" in msg), msg)
    # Different dtypes on different ranks: also an error everywhere, not a hang.
    if n == 1:
        return
    x = torch.zeros(1, 1, 4, 4, dtype=torch.float64 if COMM.rank == 0 else torch.float32)
    try:
        conv(x)
        msg = None
    except halox.Error as e:
        msg = str(e)
    agree(msg is not None and "different" in msg, msg)
    # And the layer still works after the errors.
    out = conv(torch.ones(2, 1, 4, 4))
    agree(tuple(out.shape) == (2, 1, 4, 4), "layer usable after errors")


def test_layer_geometry_errors():
    n = COMM.size
    grid = ht.SpatialGrid(COMM, (n, 1))
    with pytest.raises(halox.Error, match="ceil_mode"):
        ht.DistMaxPool2d(2, ceil_mode=True, grid=grid, input_size=(8, 8))
    with pytest.raises(halox.Error, match="padding_mode"):
        ht.DistConv2d(1, 1, 3, padding=1, padding_mode="reflect", grid=grid, input_size=(8, 8))
    if n > 1:
        with pytest.raises(halox.Error, match="leave a process without cells"):
            ht.DistAvgPool2d(4, grid=grid, input_size=(4, 4))
    agree(True)


def test_sync_params_and_rank_aware_print(capsys):
    torch.manual_seed(10 + COMM.rank)
    m = nn.Linear(3, 2)
    ht.sync_params(m, COMM, root=0)
    w = COMM.allgather(m.weight.detach().numpy().copy())
    agree(all(np.array_equal(w[0], v) for v in w), "parameters broadcast")
    ht.print("hello", rank="all")
    ht.print("only zero")
    out = capsys.readouterr().out
    me = COMM.rank
    agree(f"[rank {me}] hello" in out and (("only zero" in out) == (me == 0)), out)
    m.weight.grad = torch.full_like(m.weight, float(me))
    ht.sync_grads(m, COMM, op="mean")
    size = COMM.size
    agree(math.isclose(m.weight.grad[0, 0].item(), (size - 1) / 2) and
          m.bias.grad is not None and m.bias.grad.abs().sum().item() == 0, "sync_grads mean")


def resnet_head_2d(pool, classes=3):
    # 16x12 -> conv 16x12 -> ReLU -> global pool (1x1 per channel) -> Flatten -> Linear
    return nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), pool,
                         nn.Flatten(), nn.Linear(4, classes))


@pytest.mark.parametrize("pool", ["adaptive_avg", "adaptive_max", "avg_whole", "max_whole",
                                  "avg_corner"])
def test_global_pooling_head_matches_serial(pool):
    # The ReLU before the max leaves ties at zero: the winner must be the serial model's.
    layer = {"adaptive_avg": nn.AdaptiveAvgPool2d(1), "adaptive_max": nn.AdaptiveMaxPool2d((1, 1)),
             "avg_whole": nn.AvgPool2d((16, 12)), "max_whole": nn.MaxPool2d((16, 12)),
             # One window of 10x7 at the top-left corner: cells past it are ignored.
             "avg_corner": nn.AvgPool2d((10, 7), stride=(7, 6))}[pool]
    torch.manual_seed(3)
    par, ref, grid = compare(resnet_head_2d(layer), (16, 12), [3, 1], torch.float64, (0, 0))
    agree(isinstance(par.shuffle, ht.GlobalPoolToSample), f"{pool}: {type(par.shuffle)}")


def test_global_pooling_3d_matches_serial():
    serial = nn.Sequential(nn.Conv3d(2, 3, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool3d(1),
                           nn.Flatten(), nn.Linear(3, 4))
    torch.manual_seed(4)
    par, _, _ = compare(serial, (6, 4, 4), [2], torch.float64, (0, 0, 0))
    agree(isinstance(par.shuffle, ht.GlobalPoolToSample), "3-d global pool")


def test_max_ties_go_to_the_first_cell():
    # Constant maps: every cell ties; torch's serial max pooling routes the gradient to cell 0.
    n = COMM.size
    grid = ht.SpatialGrid(COMM, (n, 1))
    g = ht.GlobalPoolToSample(grid, (2 * n, 3), "max")
    x = torch.ones(2, 1, 2 * n, 3, dtype=torch.float64)
    xs = x.clone().requires_grad_(True)
    nn.AdaptiveMaxPool2d(1)(xs).sum().backward()
    xl = x[grid.local_slices((2 * n, 3))].clone().requires_grad_(True)
    g(xl).sum().backward()
    agree_close(xl.grad, xs.grad[grid.local_slices((2 * n, 3))], what="tie gradient")


def test_window_pool_over_the_whole_map_points_to_the_global_pool():
    n = COMM.size
    if n < 2:
        pytest.skip("needs two parts along a dimension")
    grid = ht.SpatialGrid(COMM, (n, 1))
    with pytest.raises(halox.Error, match="output extent 1.*GlobalPoolToSample"):
        ht.DistAvgPool2d(8, grid=grid, input_size=(8, 8))


def test_global_pool_rejects_a_window_past_the_map():
    grid = ht.SpatialGrid(COMM, (COMM.size, 1))
    with pytest.raises(halox.Error, match=r"window \(9, 3\) reaches past input_size \(8, 3\)"):
        ht.GlobalPoolToSample(grid, (8, 3), "avg", window=(9, 3))
