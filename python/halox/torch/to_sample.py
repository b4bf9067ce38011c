"""From the spatial split to a sample split: the shuffle (SpatialToSample) and global pooling
(GlobalPoolToSample), whose outputs are sample-parallel."""

import math

import torch
import halox

from ._common import _InputState, _as_tuple, _checks_always, _fail, _key_of, _package
from .functions import redistribute


class _ToSample(torch.nn.Module):
    """A layer that takes a spatially split NC(D)HW tensor of global spatial ``input_size`` and
    returns a sample-parallel one: the rows of :meth:`samples` on each process."""

    def __init__(self, grid, input_size):
        super().__init__()
        self.grid = grid
        self.input_size = _as_tuple(input_size, grid.ndim, "input_size")
        self._owned = tuple(hi - lo for lo, hi in grid.split(self.input_size))

    def samples(self, batch):
        """slice of the mini-batch whose output rows this process holds."""
        d = halox.Distribution([batch], "float32", [self.grid.size])
        lo = d.part_start(0, self.grid.rank)
        return slice(lo, lo + d.part_size(0, self.grid.rank))

    def _problem(self, x):
        if x.dim() != self.grid.ndim + 2 or tuple(x.shape[2:]) != self._owned:
            return (f"its block has shape {tuple(x.shape)} but it owns {self._owned} of "
                    f"input_size {self.input_size}")
        return None


class SpatialToSample(_ToSample):
    """Moves NC(D)HW activations from the spatial split (every process: the whole mini-batch,
    one spatial block) to a sample split (every process: whole images of a slice of the
    mini-batch, balanced; with fewer samples than processes the last ones get none). Backward
    moves the gradients back. Use :meth:`samples` to know which samples (and so which targets)
    a process holds."""

    def __init__(self, grid, input_size, backend=None):
        super().__init__(grid, input_size)
        self.output_size = self.input_size
        self._backend = backend
        self._sample_grid = halox.ProcessGrid(grid.comm, [grid.size, 1] + [1] * grid.ndim)
        self._plans = {}
        self._state = _InputState("SpatialToSample", grid.comm)

    def _build(self, key):
        shape = [key[0], key[1], *self.input_size]
        src = halox.TensorDesc(self.grid.grid, shape, key[2])
        dst = halox.TensorDesc(self._sample_grid, shape, key[2])
        return halox.RedistributePlan(src, dst, backend=self._backend or _package().DEFAULT_BACKEND,
                                      memory="device" if key[3] == "cuda" else "host")

    def forward(self, x):
        """This process's samples (:meth:`samples`) as whole images, from its spatial block
        ``x`` of the whole mini-batch: shape ``(rows, C, *input_size)``. Collective over the
        grid."""
        key = _key_of(x) if x.dim() >= 2 else None
        plan = self._state.settle(key, self._problem(x), self._plans, self._build)
        try:
            y = redistribute(x, plan)
        except halox.Error:
            self._state.failed(self._plans)
            raise
        n = self.samples(x.shape[0])
        # A process that receives no sample has an all-zero local shape; give it the
        # (0, C, *size) shape the layers after the shuffle expect.
        return y.reshape(n.stop - n.start, x.shape[1], *self.input_size)


class _GlobalPool(torch.autograd.Function):
    """Output and backward of GlobalPoolToSample from the gathered partial results ``got``
    (one row per process: status, then this process's partial sums, or maxima and their
    window-wide indices). Backward: the rows' gradients are put together in one all-reduce
    (each process needs every sample's gradient for its cells) and go to the cells the forward
    reduced (all of them for avg, the winning cell for max)."""

    @staticmethod
    def forward(ctx, x, layer, got, local_index):
        n, c = x.shape[0], x.shape[1]
        rows = layer.samples(n)
        ctx.layer, ctx.shape, ctx.rows = layer, x.shape, rows
        parts = got[:, 1:]
        if layer.mode == "avg":
            y = parts.sum(0).reshape(n, c)[rows] / layer.divisor
        else:
            vals = parts[:, :n * c].reshape(-1, n, c)
            idxs = parts[:, n * c:].reshape(-1, n, c)
            best = vals.max(0).values
            # The winner is the largest value, ties going to the smallest window-wide index
            # (the first in row-major order, as torch's serial max pooling picks).
            big = float(2 ** 53)
            win = torch.where(vals == best, idxs, torch.full_like(idxs, big)).min(0).values
            me = layer.grid.rank
            ctx.mine = (idxs[me] == win) & (win < big)
            ctx.local_index = local_index
            y = best[rows]
        return y.to(x.dtype).reshape(rows.stop - rows.start, c, *([1] * (x.dim() - 2)))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        layer, shape, rows = ctx.layer, ctx.shape, ctx.rows
        n, c = shape[0], shape[1]
        full = torch.zeros(n, c, dtype=torch.float64, device=g.device)
        full[rows] = g.detach().reshape(rows.stop - rows.start, c)
        layer.grid.collectives.allreduce_(full)
        gt = full.to(g.dtype)
        dx = torch.zeros(shape, dtype=g.dtype, device=g.device)
        window = dx[(slice(None), slice(None)) + layer._local]
        if window.numel() == 0:
            return dx, None, None, None
        if layer.mode == "avg":
            window.copy_((gt / layer.divisor).reshape(n, c, *([1] * (len(shape) - 2)))
                         .expand_as(window))
        else:
            flat = torch.zeros(n, c, window[0, 0].numel(), dtype=g.dtype, device=g.device)
            index = torch.where(ctx.mine, ctx.local_index, torch.zeros_like(ctx.local_index))
            flat.scatter_(2, index.unsqueeze(2), torch.where(ctx.mine, gt, torch.zeros_like(gt))
                          .unsqueeze(2))
            window.copy_(flat.reshape(window.shape))
        return dx, None, None, None


class GlobalPoolToSample(_ToSample):
    """Global average or max pooling of a spatially split NC(D)HW tensor: one output cell per
    sample and channel, the reduction of ``window`` (default: the whole map) over every process.
    Its output is sample-parallel, like :class:`SpatialToSample`'s: this process gets the rows
    :meth:`samples` names, shape (rows, C, 1, ...). Only (N, C) numbers travel, in one
    all-gather of one tensor, instead of the whole map a shuffle would move. :func:`parallelize`
    uses it for ``AdaptiveAvgPool/AdaptiveMaxPool`` with output 1 and for avg/max pooling whose
    window covers the map with one output cell.

    ``window`` (per spatial dim) is the kernel anchored at cell 0, as an unpadded pooling layer
    with a single output reads it; ``divisor`` (avg) defaults to the window's cell count.

    The input shape (batch, channels, dtype, device) is agreed once per new shape; after that
    each process's status rides in its row of the all-gather, so a wrong input on one process
    still raises on every process, and a new shape on all of them is agreed anew."""

    def __init__(self, grid, input_size, mode="avg", window=None, divisor=None):
        if mode not in ("avg", "max"):
            _fail(f"GlobalPoolToSample: mode='{mode}'; use 'avg' or 'max'")
        super().__init__(grid, input_size)
        self.mode = mode
        self.window = self.input_size if window is None else _as_tuple(window, grid.ndim,
                                                                         "window")
        for d, (k, e) in enumerate(zip(self.window, self.input_size)):
            if not 1 <= k <= e:
                _fail(f"GlobalPoolToSample: window {self.window} reaches past input_size "
                      f"{self.input_size} on spatial dim {d}; use 1 <= window <= size")
        self.output_size = (1,) * grid.ndim
        self.divisor = float(divisor if divisor is not None else math.prod(self.window))
        # This process's cells of the window, as local slices, and where they start globally.
        self._lo = []
        local = []
        for (lo, hi), k in zip(grid.split(self.input_size), self.window):
            top = max(lo, min(hi, k))
            local.append(slice(0, top - lo))
            self._lo.append(lo)
        self._local = tuple(local)
        self._local_extent = tuple(sl.stop for sl in local)
        self._key = None
        self._bufs = {}

    def _global_flat(self, local_flat):
        """Window-wide row-major index of local row-major indices into this process's cells."""
        rest = local_flat
        out = torch.zeros_like(local_flat)
        stride = 1
        for e, lo, k in reversed(list(zip(self._local_extent, self._lo, self.window))):
            out += ((rest % e) + lo) * stride
            rest = rest // e
            stride *= k
        return out

    def _to_local_flat(self, global_flat):
        """Local row-major index of window-wide indices (only meaningful for this process's)."""
        rest = torch.clamp(global_flat, max=math.prod(self.window) - 1)
        out = torch.zeros_like(global_flat)
        stride = 1
        for e, lo, k in reversed(list(zip(self._local_extent, self._lo, self.window))):
            out += torch.clamp(rest % k - lo, 0, max(e - 1, 0)) * stride
            rest = rest // k
            stride *= max(e, 1)
        return out

    def _gather_buffers(self, key):
        bufs = self._bufs.get(key)
        if bufs is None:
            per = 1 + (1 if self.mode == "avg" else 2) * key[0] * key[1]
            dev = "cuda" if key[3] == "cuda" else "cpu"
            bufs = (torch.zeros(per, dtype=torch.float64, device=dev),
                    torch.zeros(self.grid.size, per, dtype=torch.float64, device=dev))
            self._bufs = {key: bufs}  # one shape at a time
        return bufs

    def forward(self, x):
        """The pooled rows of this process's samples (:meth:`samples`), shape
        (rows, C, 1, ...), from its spatial block ``x`` of the whole mini-batch. Collective
        over the grid."""
        problem = self._problem(x)
        key = _key_of(x) if x.dim() >= 2 else None
        if _checks_always() or self._key is None:
            self._key = None
            _package()._agree(self.grid.comm, "GlobalPoolToSample", None if problem else key,
                              problem)
            self._key = key
        status = 0.0 if key == self._key and problem is None else (2.0 if problem else 1.0)
        send, recv = self._gather_buffers(self._key)
        n, c = self._key[0], self._key[1]
        send[0] = status
        local_index = None
        with torch.no_grad():
            # This process's cells of the window, per sample and channel.
            xs = x[(slice(None), slice(None)) + self._local].reshape(n, c, -1) if status == 0 \
                else None
            if xs is None:
                send[1:].zero_()
            elif self.mode == "avg":
                if xs.shape[2]:
                    send[1:].copy_(xs.sum(2).reshape(-1))
                else:
                    send[1:].zero_()
            else:
                if xs.shape[2]:
                    v, a = xs.max(2)
                    send[1:1 + n * c].copy_(v.reshape(-1))
                    send[1 + n * c:].copy_(self._global_flat(a).reshape(-1))
                else:
                    send[1:1 + n * c].fill_(-math.inf)
                    send[1 + n * c:].fill_(float(2 ** 53))
        self.grid.collectives.allgather_(send, recv)
        statuses = recv[:, 0].tolist()  # a CUDA tensor's status waits for the device here
        if any(statuses):
            if problem is not None:
                _fail(f"GlobalPoolToSample: {problem}")
            bad = [r for r, v in enumerate(statuses) if v == 2.0]
            if bad:
                _fail(f"GlobalPoolToSample: rank(s) {bad} passed a wrong block (see the error "
                      "there)")
            if all(v == 1.0 for v in statuses):
                self._key = None  # every process has a new shape: agree on it
                return self.forward(x)
            _fail(f"GlobalPoolToSample: the processes passed different (batch, channels, "
                  f"dtype, device): this one {key}, the layer ran with {self._key} (ranks "
                  f"{[r for r, v in enumerate(statuses) if v == 1.0]} changed); every process "
                  "of a spatially parallel model must get the same mini-batch")
        if self.mode == "max":
            got_idx = recv[self.grid.rank, 1 + n * c:].reshape(n, c)
            local_index = self._to_local_flat(got_idx.to(torch.int64))
        return _GlobalPool.apply(x, self, recv, local_index)

    def extra_repr(self):
        """The pooling mode, the global spatial input size and the window."""
        return f"mode={self.mode!r}, input_size={self.input_size}, window={self.window}"


def _global_pool(m, grid, size):
    """A GlobalPoolToSample for ``m`` when it is a global pooling layer over an input of
    spatial ``size``, else None."""
    n = grid.ndim
    adaptive = {2: (torch.nn.AdaptiveAvgPool2d, torch.nn.AdaptiveMaxPool2d),
                3: (torch.nn.AdaptiveAvgPool3d, torch.nn.AdaptiveMaxPool3d)}.get(n)
    pools = {2: (torch.nn.AvgPool2d, torch.nn.MaxPool2d),
             3: (torch.nn.AvgPool3d, torch.nn.MaxPool3d)}.get(n)
    if adaptive is None:
        return None
    if isinstance(m, adaptive):
        out = m.output_size if isinstance(m.output_size, (tuple, list)) else (m.output_size,) * n
        out = tuple(e if o is None else o for o, e in zip(out, size))
        if out != (1,) * n or getattr(m, "return_indices", False):
            return None
        return GlobalPoolToSample(grid, size, "avg" if isinstance(m, adaptive[0]) else "max")
    if not isinstance(m, pools):
        return None
    k = _as_tuple(m.kernel_size, n, "kernel_size")
    s = _as_tuple(m.stride if m.stride else m.kernel_size, n, "stride")
    p = _as_tuple(m.padding, n, "padding")
    d = _as_tuple(getattr(m, "dilation", 1), n, "dilation")
    if any(p) or any(x != 1 for x in d) or getattr(m, "return_indices", False):
        return None
    outs = []
    for e, kk, ss in zip(size, k, s):
        if kk > e:
            return None
        o = (-(-(e - kk) // ss) if m.ceil_mode else (e - kk) // ss) + 1
        if m.ceil_mode and (o - 1) * ss >= e:  # torch drops a last window starting past the end
            o -= 1
        outs.append(o)
    if outs != [1] * n:
        return None
    if isinstance(m, pools[0]):
        return GlobalPoolToSample(grid, size, "avg", k, m.divisor_override)
    return GlobalPoolToSample(grid, size, "max", k)
