"""Model-level helpers: parallelize an nn.Sequential CNN, synchronise parameters and gradients,
and a rank-aware print."""

import builtins

import torch
import halox

from ._common import _as_tuple, _fail
from .batch_norm import DistBatchNorm2d, DistBatchNorm3d
from .grid import SpatialGrid, _collectives
from .layers import (DistAvgPool2d, DistAvgPool3d, DistConv2d, DistConv3d, DistMaxPool2d,
                     DistMaxPool3d)
from .to_sample import SpatialToSample, _global_pool


def _fuse_relu(layers, d):
    """A ReLU right before an exchanging window layer becomes part of it (its output is then
    written straight into the layer's halo buffer); an Identity keeps its place and name."""
    if layers and isinstance(layers[-1][1], torch.nn.ReLU) and d.exchanges:
        layers[-1] = (layers[-1][0], torch.nn.Identity())
        d.fuse_input_relu()


def parallelize(model, grid, input_size, backend=None):
    """A spatially parallel copy of an ``nn.Sequential`` CNN, sharing its parameters.

    Conv, max/avg pooling and batch-norm layers (2-d or 3-d) become their ``Dist*`` versions;
    element-wise layers (ReLU, Dropout, ...) are kept. A global pooling layer (adaptive
    avg/max pooling to one cell, or avg/max pooling whose single window covers the map, as at
    the end of a ResNet) becomes a :class:`GlobalPoolToSample`, which reduces over the
    processes and leaves the output sample-parallel; before any other layer that mixes spatial
    positions (Flatten, Linear, adaptive pooling to more cells, ...) a :class:`SpatialToSample`
    shuffle is inserted. The rest runs sample-parallel. A ReLU followed by a layer that
    exchanges halos is done by that layer, which writes the ReLU's output straight into its halo
    buffer (the ReLU's place holds an Identity), so that activation is held once. The result
    takes this process's spatial block of the input; ``result.shuffle.samples(N)`` says which
    samples its output rows are.
    """
    if not isinstance(model, torch.nn.Sequential):
        _fail("parallelize: expects a torch.nn.Sequential; build Dist* layers by hand otherwise")
    size = _as_tuple(input_size, grid.ndim, "input_size")
    layers = []
    shuffle = None
    pointwise = (torch.nn.ReLU, torch.nn.LeakyReLU, torch.nn.Sigmoid, torch.nn.Tanh,
                 torch.nn.GELU, torch.nn.Dropout, torch.nn.Identity, torch.nn.SiLU)
    conv = {2: (torch.nn.Conv2d, DistConv2d), 3: (torch.nn.Conv3d, DistConv3d)}
    maxp = {2: (torch.nn.MaxPool2d, DistMaxPool2d), 3: (torch.nn.MaxPool3d, DistMaxPool3d)}
    avgp = {2: (torch.nn.AvgPool2d, DistAvgPool2d), 3: (torch.nn.AvgPool3d, DistAvgPool3d)}
    bn = {2: (torch.nn.BatchNorm2d, DistBatchNorm2d), 3: (torch.nn.BatchNorm3d, DistBatchNorm3d)}
    n = grid.ndim
    for name, m in model.named_children():
        if shuffle is not None:
            layers.append((name, m))
            continue
        glob = _global_pool(m, grid, size)
        if glob is not None:
            # Named "shuffle" like SpatialToSample: the model's sample-parallel point, and
            # `result.shuffle` must not register the module a second time.
            shuffle = glob
            layers.append(("shuffle", glob))
        elif n in conv and isinstance(m, conv[n][0]):
            d = conv[n][1].from_module(m, grid, size, backend)
            size = d.output_size
            _fuse_relu(layers, d)
            layers.append((name, d))
        elif n in maxp and isinstance(m, maxp[n][0]):
            d = maxp[n][1](m.kernel_size, m.stride, m.padding, m.dilation, grid=grid,
                           input_size=size, backend=backend, ceil_mode=m.ceil_mode)
            size = d.output_size
            _fuse_relu(layers, d)
            layers.append((name, d))
        elif n in avgp and isinstance(m, avgp[n][0]):
            d = avgp[n][1](m.kernel_size, m.stride, m.padding, ceil_mode=m.ceil_mode,
                           count_include_pad=m.count_include_pad,
                           divisor_override=m.divisor_override, grid=grid, input_size=size,
                           backend=backend)
            size = d.output_size
            _fuse_relu(layers, d)
            layers.append((name, d))
        elif n in bn and isinstance(m, bn[n][0]):
            d = bn[n][1](m.num_features, m.eps, m.momentum, m.affine, m.track_running_stats,
                         grid=grid)
            if m.affine:
                d.weight, d.bias = m.weight, m.bias
            if m.track_running_stats:
                d.running_mean, d.running_var = m.running_mean, m.running_var
                d.num_batches_tracked = m.num_batches_tracked
            layers.append((name, d))
        elif isinstance(m, pointwise):
            layers.append((name, m))
        else:
            shuffle = SpatialToSample(grid, size, backend)
            layers.append(("shuffle", shuffle))
            layers.append((name, m))
    if shuffle is None:
        _fail("parallelize: the model never leaves the spatial split (no Flatten, Linear, ...); "
              "its output would stay split, which parallelize does not produce")
    out = torch.nn.Sequential()
    for name, m in layers:
        out.add_module(name, m)
    out.shuffle = shuffle
    return out


def sync_params(module, comm, root=0):
    """Broadcasts every parameter and buffer of ``module`` from ``root`` (collective), so all
    processes start from the same model."""
    comm = halox.as_comm(comm.comm if isinstance(comm, SpatialGrid) else comm)
    for t in list(module.parameters()) + list(module.buffers()):
        with torch.no_grad():
            h = t.detach().cpu().contiguous().clone()
            comm.bcast_inplace(h, root=root)
            t.copy_(h)


def sync_grads(module, comm, op="sum"):
    """All-reduces the gradients of ``module``'s parameters in one message (collective).

    ``comm``: a :class:`SpatialGrid` (its reductions, on its torch.distributed group when it
    has one) or any communicator halox accepts. ``op='sum'`` (default) is right for a spatially
    parallel model whose per-process losses add up to the global loss: each process then holds
    a part of every gradient. ``op='mean'`` averages, for plain data parallelism where each
    process's loss is a full mean. A parameter without a gradient counts as zero. The sum runs
    in float64 on the parameters' device, in one flat buffer kept between calls."""
    if op not in ("sum", "mean"):
        _fail(f"sync_grads: op='{op}'; use 'sum' or 'mean'")
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return
    coll = _collectives(comm)
    total = sum(p.numel() for p in params)
    device = params[0].device
    flat = getattr(module, "_halox_grad_flat", None)
    if flat is None or flat.numel() != total or flat.device != device:
        flat = torch.empty(total, dtype=torch.float64, device=device)
        try:
            module._halox_grad_flat = flat
        except AttributeError:
            pass
    offset = 0
    for p in params:
        n = p.numel()
        if p.grad is None:
            flat[offset:offset + n].zero_()
        else:
            flat[offset:offset + n].copy_(p.grad.detach().reshape(-1))
        offset += n
    coll.allreduce_(flat)
    if op == "mean":
        flat /= coll.size
    offset = 0
    for p in params:
        n = p.numel()
        g = flat[offset:offset + n].reshape(p.shape)
        if p.grad is None:
            p.grad = g.to(p.dtype).clone()
        else:
            p.grad.copy_(g)
        offset += n


def print(*args, comm=None, rank=0, **kwargs):  # noqa: A001 - deliberately rank-aware print
    """``print`` on one process (``rank``, default 0) of ``comm`` (default COMM_WORLD), or on
    every process with a ``[rank r]`` prefix when ``rank='all'``."""
    me = halox.as_comm(comm if comm is not None else halox.comm_world()).rank
    if rank == "all":
        builtins.print(f"[rank {me}]", *args, **kwargs, flush=True)
    elif me == rank:
        builtins.print(*args, **kwargs, flush=True)
