"""PyTorch on halox: autograd functions and spatially parallel layers.

A spatially parallel model splits the spatial dimensions (H, W or D, H, W) of NCHW / NCDHW
activations over a :class:`SpatialGrid` of processes; every process holds the whole mini-batch
and all channels of its spatial block. Window layers (:class:`DistConv2d`,
:class:`DistMaxPool2d`, ...) fetch the neighbour cells their windows reach with a halo exchange
and then run torch's own operator on the haloed block, so the local math is PyTorch's.
Batch norm (:class:`DistBatchNorm2d`, ...) takes its statistics over the whole spatial split.
:class:`SpatialToSample` moves activations to a sample-parallel layout (each process a slice of
the mini-batch, whole images) for the rest of a model.

Parameters stay ordinary ``torch.nn.Parameter`` objects (the layers subclass ``torch.nn.Conv2d``
and friends, so their ``state_dict`` keys match the serial model's). Every process computes its
own part of the gradients: call :func:`sync_grads` after ``backward()`` and before the optimiser
step, and :func:`sync_params` once after building the model.

Everything here is collective over the grid's communicator: every process must run the same
layers in the same order, forward and backward.
"""

import builtins
import math

import numpy as np
import torch
import torch.nn.functional as F
import halox

#: Backend of the plans the layers build when none is given. Layers build their plans lazily,
#: inside the first forward pass of each batch shape, so measuring every candidate there
#: ("auto") would stall that step; point-to-point packing is the dependable default. Set it to
#: "auto" (or pass backend= to a layer) to let halox measure.
DEFAULT_BACKEND = "mpi_pack"


# ---- helpers -------------------------------------------------------------------------------------


def _fail(msg):
    raise halox.Error(msg)


def _agree(comm, what, key, problem=None):
    """One collective call in which every rank shows its ``key`` (batch, channels, dtype) and
    its local ``problem`` (None if its input is fine): every rank raises the same halox.Error
    unless all keys match and no rank has a problem. Layers check this before choosing a plan,
    so that ranks never build or run different plans (which would leave them waiting for
    each other)."""
    comm = halox.as_comm(comm)
    got = comm.allgather((key, problem))
    me = comm.rank
    for r, (_, p) in enumerate(got):
        if p is not None:
            if r == me:
                _fail(f"{what}: {p}")
            _fail(f"{what}: rank {r} rejected its input: {p}")
    if any(k != got[0][0] for k, _ in got):
        seen = ", ".join(f"rank {r}: {k}" for r, (k, _) in enumerate(got))
        _fail(f"{what}: the ranks passed different (batch, channels, dtype): {seen}; every rank "
              "of a spatially parallel model must get the same mini-batch")


def _buffer_like(desc, like, zero=True):
    """A tensor laid out like ``desc``'s local buffer (its strides), on ``like``'s device."""
    make = torch.zeros if zero else torch.empty
    t = make(desc.local_elements if desc.local_elements else 0, dtype=like.dtype, device=like.device)
    if desc.local_elements == 0:
        return t.reshape(desc.local_shape)
    return t.as_strided(desc.local_shape, desc.strides)


def _as_buffer(x, desc):
    """``x`` if its layout already matches ``desc``, else a copy that does. Shape and dtype are
    not fixed here: a wrong one is reported by the plan, on every rank."""
    if tuple(x.shape) == tuple(desc.local_shape) and x.dtype == _torch_dtype(desc.dtype):
        if desc.local_elements == 0 or all(
            s == e or n <= 1 for s, e, n in zip(x.stride(), desc.strides, x.shape)
        ):
            return x
        out = _buffer_like(desc, x, zero=False)
        out.copy_(x)
        return out
    return x.contiguous()


_TORCH_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
}


def _torch_dtype(dt):
    return _TORCH_DTYPES[dt.name]


def _halo_grad_mask(desc, boundary):
    """1 where a halo exchange's output cell came from the input cell at the same place (owned
    cells, and boundary cells an 'untouched' exchange leaves alone), 0 where it was overwritten
    (cells received from a neighbour, boundary cells set to a constant)."""
    if desc.local_elements == 0:
        return np.zeros(desc.local_shape, dtype=bool)
    rank = desc.grid.rank
    alloc = desc.dist.allocated_box(rank)
    owned = desc.owned_box()
    own = np.ones((), dtype=bool)
    inside = np.ones((), dtype=bool)
    for d in range(desc.ndim):
        idx = np.arange(alloc.lo[d], alloc.hi[d])
        o = (idx >= owned.lo[d]) & (idx < owned.hi[d])
        i = np.ones_like(o) if desc.dist.options(d).periodic else (idx >= 0) & (idx < desc.shape[d])
        own = np.logical_and.outer(own, o)
        inside = np.logical_and.outer(inside, i)
    keep = own
    if boundary == halox.BoundaryFill.untouched:
        keep = own | ~inside
    return keep


# ---- autograd functions --------------------------------------------------------------------------


class _HaloExchange(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, plan):
        desc = plan.descs[0]
        if tuple(x.shape) == tuple(desc.local_shape):
            y = _buffer_like(desc, x, zero=False)
            y.copy_(x.detach())
        else:
            y = x.detach().clone()  # a wrong shape: the plan reports it on every rank
        plan.execute(y)
        ctx.plan = plan
        return y

    @staticmethod
    def backward(ctx, g):
        plan = ctx.plan
        desc = plan.descs[0]
        gb = _buffer_like(desc, g, zero=False)
        gb.copy_(g)
        # Every halo cell's gradient goes back to the cell it was copied from.
        plan.execute_reverse(gb, "sum")
        mask = torch.from_numpy(_halo_grad_mask(desc, plan.boundary)).to(gb.device)
        return gb * mask.to(gb.dtype), None


def halo_exchange(x, plan):
    """Differentiable halo exchange: a copy of ``x`` (this rank's local buffer of the plan's
    descriptor, owned block + halos) whose halo cells hold the neighbours' owned cells.
    Backward sends every halo cell's gradient to its owner and adds it there (a reverse
    exchange with sum). Collective."""
    if plan.num_tensors != 1:
        _fail(
            f"halo_exchange: the plan exchanges {plan.num_tensors} tensors; build one HaloPlan per "
            "tensor for autograd"
        )
    return _HaloExchange.apply(x, plan)


class _OwnedToHaloed(torch.autograd.Function):
    """The owned block ``x`` placed in a new local buffer of the plan's descriptor whose halos
    are then exchanged: F.pad followed by halo_exchange, in one copy. Backward: the reverse
    exchange, then the owned part (every halo cell's gradient has gone to its owner)."""

    @staticmethod
    def forward(ctx, x, plan):
        desc = plan.descs[0]
        y = _buffer_like(desc, x, zero=not _all_halos_written(plan))
        y[desc.owned_slices] = x.detach()
        plan.execute(y)
        ctx.plan = plan
        return y

    @staticmethod
    def backward(ctx, g):
        plan = ctx.plan
        desc = plan.descs[0]
        gb = _buffer_like(desc, g, zero=False)
        gb.copy_(g)
        plan.execute_reverse(gb, "sum")
        return gb[desc.owned_slices], None


def _all_halos_written(plan):
    """True when a forward exchange writes every halo cell (received, or set at a boundary), so
    a fresh buffer need not be zeroed first."""
    desc = plan.descs[0]
    opts = [desc.dist.options(d) for d in range(desc.ndim)]
    return plan.boundary == halox.BoundaryFill.constant or all(
        o.periodic or o.halo_lo == o.halo_hi == 0 for o in opts)


class _Redistribute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, plan):
        src, dst = plan.src, plan.dst
        xb = _as_buffer(x.detach(), src) if src is not None else None
        out = _buffer_like(dst, x) if dst is not None else x.new_zeros(0)
        plan.execute(xb, out if dst is not None else None)
        ctx.plan = plan
        ctx.like = x
        return out

    @staticmethod
    def backward(ctx, g):
        plan = ctx.plan
        src, dst = plan.src, plan.dst
        gin = _buffer_like(src, g) if src is not None else g.new_zeros(0)
        gb = _as_buffer(g.contiguous(), dst) if dst is not None else None
        plan.execute_inverse(gb, gin if src is not None else None)
        return gin, None


def redistribute(x, plan):
    """Differentiable redistribution: ``x`` (this rank's buffer of ``plan.src``) moved to a new
    tensor laid out as ``plan.dst`` (its halo cells zero). Backward runs the inverse
    redistribution. Collective."""
    if plan.halo_after:
        _fail(
            "redistribute: the plan was built with halo_after=True, whose halo exchange has no "
            "inverse here; build it without and follow it with halo_exchange()"
        )
    return _Redistribute.apply(x, plan)


class _AllReduceSum(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return _allreduce(x, comm)

    @staticmethod
    def backward(ctx, g):
        # Each rank's output is the sum of every rank's input, so the gradient of an input is
        # the sum of every rank's output gradient.
        return _allreduce(g, ctx.comm), None


def _allreduce(x, comm):
    a = np.array(x.detach().cpu().numpy(), order="C")
    halox.as_comm(comm).allreduce_inplace(a, "sum")
    return torch.from_numpy(a).to(x.device)


def all_reduce_sum(x, comm):
    """Differentiable sum of ``x`` over the processes of ``comm`` (any communicator halox
    accepts)."""
    return _AllReduceSum.apply(x, comm)


# ---- the grid ------------------------------------------------------------------------------------


class SpatialGrid:
    """Processes splitting the spatial dimensions of NC(D)HW tensors.

    ``parts`` has one entry per spatial dimension (2 for NCHW, 3 for NCDHW); zeros are chosen
    for the communicator's size. Collective over ``comm`` (a :class:`halox.Comm`, an mpi4py
    communicator on halox's MPI, or an integer handle).
    """

    def __init__(self, comm, parts):
        parts = [int(p) for p in parts]
        if len(parts) not in (1, 2, 3):
            _fail(f"SpatialGrid: {len(parts)} spatial dimensions; use 1, 2 or 3 (NCW, NCHW, NCDHW)")
        if 0 in parts:
            fixed = [p for p in parts if p > 0]
            free = halox.dims_create(halox.as_comm(comm).size // max(1, math.prod(fixed)),
                                parts.count(0))
            parts = [p if p > 0 else free.pop(0) for p in parts]
        self.comm = comm
        self.parts = tuple(parts)
        self.grid = halox.ProcessGrid(comm, [1, 1, *parts])
        self.rank = self.grid.rank
        self.size = self.grid.size
        self.coords = tuple(self.grid.coords()[2:])

    @property
    def ndim(self):
        """Number of spatial dimensions."""
        return len(self.parts)

    def split(self, size):
        """(lo, hi) of this process's block of a spatial ``size`` (global), per dimension."""
        self._check_size(size)
        out = []
        for d, (e, p) in enumerate(zip(size, self.parts)):
            dist = halox.Distribution([e], "float32", [p])
            lo = dist.part_start(0, self.coords[d])
            out.append((lo, lo + dist.part_size(0, self.coords[d])))
        return tuple(out)

    def local_slices(self, size):
        """Slices selecting this process's block from a global (N, C, *size) tensor."""
        return (slice(None), slice(None)) + tuple(slice(lo, hi) for lo, hi in self.split(size))

    def _check_size(self, size):
        if len(size) != self.ndim:
            _fail(
                f"spatial size {tuple(size)} has {len(size)} dimensions but the grid splits "
                f"{self.ndim}"
            )

    def __repr__(self):
        return f"SpatialGrid(parts={self.parts}, rank={self.rank})"


def _as_tuple(v, n, name):
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(i) for i in v)
    if len(v) != n:
        _fail(f"{name}={v} needs {n} entries (one per spatial dimension) or one integer")
    return v


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


class _Window:
    """Halo widths and local slices of a windowed operator (kernel k, stride s, padding p,
    dilation d) whose input is split over ``parts`` with balanced blocks, and so is its output.
    The window rule is halox's own (``halox.window_output_shape``, ``halox.window_input_span``,
    the geometry of halox::ops): a process's halo must reach every input cell, padding
    included, that its output block reads, and halox descriptors carry one width per side for
    all processes, so the widths are the maxima over the parts."""

    def __init__(self, what, size, parts, coords, k, s, p, d):
        self.in_size = tuple(size)
        self.halo = []
        self.local = []
        out = []
        for dim, (e, P, kk, ss, pp, dd) in enumerate(zip(size, parts, k, s, p, d)):
            win = ([kk], [ss], [pp], [pp], [dd])
            try:
                (o,) = halox.window_output_shape([e], *win)
            except halox.Error as err:
                _fail(f"{what}: spatial size {e} on dim {dim} is too small for kernel {kk} with "
                      f"padding {pp}, dilation {dd}; enlarge the input or the padding "
                      f"({err.message})")
            out.append(o)
            din = halox.Distribution([e], "float32", [P])
            dout = halox.Distribution([o], "float32", [P])
            lo_w = hi_w = 0
            needs = []
            for q in range(P):
                ilo, isz = din.part_start(0, q), din.part_size(0, q)
                olo, osz = dout.part_start(0, q), dout.part_size(0, q)
                if isz == 0 or osz == 0:
                    hint = ("; a pooling window over the whole map is a global pooling: use "
                            "GlobalPoolToSample (parallelize does)") if o == 1 else ""
                    _fail(f"{what}: {P} parts along spatial dim {dim} leave a process without "
                          f"cells (input extent {e}, output extent {o}); use at most "
                          f"{min(e, o)} parts there{hint}")
                (need_lo,), (need_hi,) = halox.window_input_span([olo], [olo + osz], [e], *win)
                lo_w = max(lo_w, ilo - need_lo)
                hi_w = max(hi_w, need_hi - (ilo + isz))
                needs.append((ilo, need_lo, need_hi))
            self.halo.append((lo_w, hi_w))
            ilo, need_lo, need_hi = needs[coords[dim]]
            origin = ilo - lo_w  # global index of local buffer position 0
            self.local.append(slice(need_lo - origin, need_hi - origin))
        self.out_size = tuple(out)

    def options(self, periodic=False):
        return [None, None] + [halox.DimOptions(lo, hi, periodic) for lo, hi in self.halo]


class _HaloedWindowMixin:
    """Shared forward machinery: pad the owned block into the halo buffer, exchange, slice the
    cells the local output block reads."""

    def _init_dist(self, what, grid, input_size, k, s, p, d, periodic=False, fill=0.0,
                   backend=None):
        if not isinstance(grid, SpatialGrid):
            _fail(f"{what}: grid must be a halox.torch.SpatialGrid, got {type(grid).__name__}")
        input_size = _as_tuple(input_size, grid.ndim, "input_size")
        self.grid = grid
        self.input_size = input_size
        self._what = what
        self._window = _Window(what, input_size, grid.parts, grid.coords, k, s, p, d)
        self.output_size = self._window.out_size
        self._periodic = periodic
        self._fill = fill
        self._backend = backend
        self._plans = {}
        self._owned = tuple(hi - lo for lo, hi in grid.split(input_size))

    def _haloed(self, x):
        nsp = self.grid.ndim
        problem = None
        if x.dim() != nsp + 2:
            problem = f"expected an N x C x {nsp}-d spatial block, got a {x.dim()}-d tensor"
        elif tuple(x.shape[2:]) != self._owned:
            problem = (f"its block has spatial shape {tuple(x.shape[2:])} but it owns "
                       f"{self._owned} of input_size {self.input_size}; pass each rank its "
                       "block (SpatialGrid.local_slices)")
        if problem is not None:
            key = None
        else:
            key = (x.shape[0], x.shape[1], str(x.dtype).replace("torch.", ""))
        _agree(self.grid.comm, self._what, key, problem)
        plan = self._plans.get(key)
        if plan is None:
            desc = halox.TensorDesc(self.grid.grid, [x.shape[0], x.shape[1], *self.input_size],
                                    key[2], self._window.options(self._periodic))
            plan = halox.HaloPlan(desc, backend=self._backend or DEFAULT_BACKEND,
                                  boundary="untouched" if self._periodic else "constant",
                                  fill_value=self._fill)
            plan.checks = False  # _agree has just checked the buffer collectively
            self._plans[key] = plan
        xh = _OwnedToHaloed.apply(x, plan)
        return xh[(slice(None), slice(None)) + tuple(self._window.local)]

    def halo_plan(self, batch, channels, dtype=torch.float32):
        """The plan used for inputs of this batch size, channel count and dtype (None before the
        first forward with them)."""
        return self._plans.get((batch, channels, str(dtype).replace("torch.", "")))


# ---- layers ----------------------------------------------------------------------------------------


class _DistConvNd(_HaloedWindowMixin):
    _conv = None

    def _setup(self, grid, input_size, backend):
        if isinstance(self.padding, str):
            _fail(f"{type(self).__name__}: padding='{self.padding}' is not supported; give the "
                  "padding as integers")
        if self.padding_mode not in ("zeros", "circular"):
            _fail(f"{type(self).__name__}: padding_mode='{self.padding_mode}' is not supported; "
                  "use 'zeros' or 'circular'")
        circular = self.padding_mode == "circular"
        if circular and any(p != (k - 1) * d // 2 or s != 1 for p, k, d, s in
                            zip(self.padding, self.kernel_size, self.dilation, self.stride)):
            _fail(f"{type(self).__name__}: circular padding is supported for stride 1 and "
                  "'same' padding ((kernel-1)*dilation/2) only")
        self._init_dist(type(self).__name__, grid, input_size, self.kernel_size, self.stride,
                        self.padding, self.dilation, periodic=circular, backend=backend)

    def forward(self, x):
        xs = self._haloed(x)
        return self._conv(xs, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)

    @classmethod
    def from_module(cls, conv, grid, input_size, backend=None):
        """A distributed layer sharing ``conv``'s parameters (the same Parameter objects)."""
        m = cls(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride,
                padding=conv.padding, dilation=conv.dilation, groups=conv.groups,
                bias=conv.bias is not None, padding_mode=conv.padding_mode, grid=grid,
                input_size=input_size, backend=backend, device=conv.weight.device,
                dtype=conv.weight.dtype)
        m.weight = conv.weight
        m.bias = conv.bias
        return m


class DistConv2d(_DistConvNd, torch.nn.Conv2d):
    """``torch.nn.Conv2d`` on an NCHW tensor split over a :class:`SpatialGrid`: input and output
    are this process's spatial blocks (balanced blocks of ``input_size`` and ``output_size``).
    Halo widths follow from kernel, stride, padding and dilation; padding is zeros (a constant
    halo fill) or circular (periodic halos)."""

    _conv = staticmethod(F.conv2d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.Conv2d.__init__(self, *args, **kw)
        self._setup(grid, input_size, backend)


class DistConv3d(_DistConvNd, torch.nn.Conv3d):
    """``torch.nn.Conv3d`` on an NCDHW tensor split over a :class:`SpatialGrid` (see
    :class:`DistConv2d`)."""

    _conv = staticmethod(F.conv3d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.Conv3d.__init__(self, *args, **kw)
        self._setup(grid, input_size, backend)


class _DistPoolNd(_HaloedWindowMixin):
    def _setup_pool(self, n, grid, input_size, backend, fill):
        if getattr(self, "ceil_mode", False):
            _fail(f"{type(self).__name__}: ceil_mode=True is not supported; pad the input instead")
        if getattr(self, "return_indices", False):
            _fail(f"{type(self).__name__}: return_indices=True is not supported")
        k = _as_tuple(self.kernel_size, n, "kernel_size")
        s = _as_tuple(self.stride if self.stride is not None else self.kernel_size, n, "stride")
        p = _as_tuple(self.padding, n, "padding")
        d = _as_tuple(getattr(self, "dilation", 1), n, "dilation")
        self._k, self._s, self._d = k, s, d
        self._init_dist(type(self).__name__, grid, input_size, k, s, p, d, fill=fill,
                        backend=backend)


class _DistMaxPoolNd(_DistPoolNd):
    # Max pooling pads with -inf: a padded cell never wins.
    def forward(self, x):
        return self._pool(self._haloed(x), self._k, self._s, 0, self._d)


class DistMaxPool2d(_DistMaxPoolNd, torch.nn.MaxPool2d):
    """``torch.nn.MaxPool2d`` on a spatially split NCHW tensor; windows may reach cells several
    processes away."""

    _pool = staticmethod(F.max_pool2d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.MaxPool2d.__init__(self, *args, **kw)
        self._setup_pool(2, grid, input_size, backend, -math.inf)


class DistMaxPool3d(_DistMaxPoolNd, torch.nn.MaxPool3d):
    """``torch.nn.MaxPool3d`` on a spatially split NCDHW tensor."""

    _pool = staticmethod(F.max_pool3d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.MaxPool3d.__init__(self, *args, **kw)
        self._setup_pool(3, grid, input_size, backend, -math.inf)


class _DistAvgPoolNd(_DistPoolNd):
    def _check_avg(self):
        if not self.count_include_pad and any(v > 0 for v in _as_tuple(self.padding, self.grid.ndim,
                                                                         "padding")):
            _fail(f"{type(self).__name__}: count_include_pad=False with padding is not supported; "
                  "use count_include_pad=True or no padding")

    def forward(self, x):
        return self._pool(self._haloed(x), self._k, self._s, 0, False, True,
                          self.divisor_override)


class DistAvgPool2d(_DistAvgPoolNd, torch.nn.AvgPool2d):
    """``torch.nn.AvgPool2d`` on a spatially split NCHW tensor (zero padding counted, as with
    count_include_pad=True)."""

    _pool = staticmethod(F.avg_pool2d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.AvgPool2d.__init__(self, *args, **kw)
        self._setup_pool(2, grid, input_size, backend, 0.0)
        self._check_avg()


class DistAvgPool3d(_DistAvgPoolNd, torch.nn.AvgPool3d):
    """``torch.nn.AvgPool3d`` on a spatially split NCDHW tensor."""

    _pool = staticmethod(F.avg_pool3d)

    def __init__(self, *args, grid, input_size, backend=None, **kw):
        torch.nn.AvgPool3d.__init__(self, *args, **kw)
        self._setup_pool(3, grid, input_size, backend, 0.0)
        self._check_avg()


def _global_stats(x, comm):
    """Per-channel mean and (biased) variance of ``x`` over dims N and space of all processes
    of ``comm``, as float64 NumPy arrays, and the total count. Each process's count, mean and
    sum of squared deviations (from torch.var_mean) are gathered in one call and merged by
    halox.bn_merge_stats, the merge of halox's C++ distributed batch norm (pairwise, accurate
    when the mean is large against the spread)."""
    c = x.shape[1]
    dims = [0] + list(range(2, x.dim()))
    n = x.numel() // c if c else 0
    mean, m2 = np.zeros(c), np.zeros(c)
    if n:
        var, m = torch.var_mean(x.detach(), dims, unbiased=False)
        mean = m.double().cpu().numpy()
        m2 = var.double().cpu().numpy() * n
    parts = halox.as_comm(comm).allgather((n, mean, m2))
    total, gmean, gm2 = halox.bn_merge_stats(parts)
    if total == 0:
        return np.zeros(c), np.zeros(c), 0.0
    return gmean, gm2 / total, float(total)


class _SpatialBatchNorm(torch.autograd.Function):
    """Batch-norm training step with the global statistics ``mean``, ``var`` (over ``count``
    cells on all processes of ``comm``): torch's own fused batch_norm normalises. Backward: the
    two per-channel sums the input gradient needs (of dy, and of dy * (x - mean)) are added
    over the processes in one all-reduce; the weight and bias gradients are this process's
    parts, which sync_grads adds up."""

    @staticmethod
    def forward(ctx, x, weight, bias, mean, var, count, comm, eps):
        y = F.batch_norm(x.detach(), mean, var, None if weight is None else weight.detach(),
                         None if bias is None else bias.detach(), False, 0.0, eps)
        ctx.save_for_backward(x, weight, mean, torch.rsqrt(var + eps))
        ctx.comm = comm
        ctx.count = count
        ctx.eps = eps
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, weight, mean, invstd = ctx.saved_tensors
        shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
        # Torch's own backward in evaluation mode, given the global statistics, yields this
        # process's sum(dy) (the bias gradient) and sum(dy * xhat) (the weight gradient) in one
        # fused pass; sum(dy * (x - mean)) is the latter over invstd.
        w = weight if weight is not None else torch.ones_like(invstd)
        _, gw_local, gb_local = torch.ops.aten.native_batch_norm_backward(
            g, x, w, mean, 1.0 / (invstd * invstd) - ctx.eps, None, None, False, ctx.eps,
            [False, True, True])
        local = np.stack([gb_local.double().cpu().numpy(),
                          (gw_local.double() / invstd.double()).cpu().numpy()])
        summed = local.copy()
        halox.as_comm(ctx.comm).allreduce_inplace(summed, "sum")
        m = ctx.count
        sum_g = torch.from_numpy(summed[0]).to(x.dtype).to(x.device)
        sum_gxmu = torch.from_numpy(summed[1]).to(x.dtype).to(x.device)
        scale = invstd if weight is None else weight * invstd
        # dx = w*invstd * (g - sum(g)/M - (x - mean) * invstd^2 * sum(g*(x - mean))/M)
        #    = g * a + x * b + c, per channel
        b = -scale * invstd * invstd * sum_gxmu / m
        shift = -scale * sum_g / m - mean * b
        dx = x * b.reshape(shape)
        dx.add_(shift.reshape(shape)).addcmul_(g, scale.reshape(shape))
        gw = gw_local if weight is not None else None
        gb = gb_local if ctx.has_bias else None
        return dx, gw, gb, None, None, None, None, None


class _DistBatchNorm:
    """Batch norm whose training statistics cover the whole spatial split (see
    _SpatialBatchNorm); evaluation with running statistics communicates nothing."""

    def _setup_bn(self, grid):
        if not isinstance(grid, SpatialGrid):
            _fail(f"{type(self).__name__}: grid must be a halox.torch.SpatialGrid")
        self.grid = grid

    def forward(self, x):
        self._check_input_dim(x)
        use_batch = self.training or not self.track_running_stats
        if not use_batch:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                False, 0.0, self.eps)
        # The gather below needs the same channel count everywhere.
        _agree(self.grid.comm, type(self).__name__, (x.shape[1], str(x.dtype)))
        mean, var, n = _global_stats(x, self.grid.comm)
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                m = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                     else self.momentum)
                unbiased = torch.from_numpy(var * (n / max(n - 1.0, 1.0)))
                self.running_mean.mul_(1 - m).add_(torch.from_numpy(mean).to(self.running_mean),
                                                   alpha=m)
                self.running_var.mul_(1 - m).add_(unbiased.to(self.running_var), alpha=m)
        mean_t = torch.from_numpy(mean).to(dtype=x.dtype, device=x.device)
        var_t = torch.from_numpy(var).to(dtype=x.dtype, device=x.device)
        return _SpatialBatchNorm.apply(x, self.weight, self.bias, mean_t, var_t, n,
                                       self.grid.comm, self.eps)


class DistBatchNorm2d(_DistBatchNorm, torch.nn.BatchNorm2d):
    """``torch.nn.BatchNorm2d`` with statistics over N, H and W of the whole spatial split."""

    def __init__(self, *args, grid, **kw):
        torch.nn.BatchNorm2d.__init__(self, *args, **kw)
        self._setup_bn(grid)


class DistBatchNorm3d(_DistBatchNorm, torch.nn.BatchNorm3d):
    """``torch.nn.BatchNorm3d`` with statistics over N, D, H and W of the whole spatial split."""

    def __init__(self, *args, grid, **kw):
        torch.nn.BatchNorm3d.__init__(self, *args, **kw)
        self._setup_bn(grid)


class _ToSample(torch.nn.Module):
    """A layer that takes a spatially split NC(D)HW tensor of global spatial ``input_size`` and
    returns a sample-parallel one: the rows of :meth:`samples` on each process."""

    def __init__(self, grid, input_size):
        super().__init__()
        self.grid = grid
        self.input_size = _as_tuple(input_size, grid.ndim, "input_size")

    def samples(self, batch):
        """slice of the mini-batch whose output rows this process holds."""
        d = halox.Distribution([batch], "float32", [self.grid.size])
        lo = d.part_start(0, self.grid.rank)
        return slice(lo, lo + d.part_size(0, self.grid.rank))

    def _agree_on_input(self, x, what):
        """Every rank checks its block's shape and shows (batch, channels, dtype name) in one
        collective (see _agree); returns that key."""
        owned = tuple(hi - lo for lo, hi in self.grid.split(self.input_size))
        problem = None
        if x.dim() != self.grid.ndim + 2 or tuple(x.shape[2:]) != owned:
            problem = (f"its block has shape {tuple(x.shape)} but it owns {owned} of "
                       f"input_size {self.input_size}")
        key = None if problem else (x.shape[0], x.shape[1], str(x.dtype).replace("torch.", ""))
        _agree(self.grid.comm, what, key, problem)
        return key


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

    def _plan(self, x):
        key = self._agree_on_input(x, "SpatialToSample")
        plan = self._plans.get(key)
        if plan is None:
            shape = [x.shape[0], x.shape[1], *self.input_size]
            src = halox.TensorDesc(self.grid.grid, shape, key[2])
            dst = halox.TensorDesc(self._sample_grid, shape, key[2])
            plan = halox.RedistributePlan(src, dst, backend=self._backend or DEFAULT_BACKEND)
            plan.checks = False  # _agree has just checked the buffer collectively
            self._plans[key] = plan
        return plan

    def forward(self, x):
        y = redistribute(x, self._plan(x))
        n = self.samples(x.shape[0])
        # A process that receives no sample has an all-zero local shape; give it the
        # (0, C, *size) shape the layers after the shuffle expect.
        return y.reshape(n.stop - n.start, x.shape[1], *self.input_size)


class _GlobalPool(torch.autograd.Function):
    """Forward: every process reduces its cells of the window, one collective combines them and
    each process keeps the rows of its samples. Backward: the rows' gradients are put together
    in one all-reduce (each process needs every sample's gradient for its cells) and go to the
    cells the forward reduced (all of them for avg, the winning cell for max)."""

    @staticmethod
    def forward(ctx, x, layer):
        n, c = x.shape[0], x.shape[1]
        rows = layer.samples(n)
        xs = x.detach()[(slice(None), slice(None)) + layer._local].reshape(n, c, -1)
        comm = halox.as_comm(layer.grid.comm)
        ctx.layer, ctx.shape, ctx.rows = layer, x.shape, rows
        if layer.mode == "avg":
            total = xs.sum(2).double().cpu().numpy() if xs.shape[2] else np.zeros((n, c))
            comm.allreduce_inplace(total, "sum")
            y = torch.from_numpy(total[rows] / layer.divisor)
        else:
            # Each process's maximum and the window-wide flat index of its first occurrence;
            # the global winner is the largest value, ties going to the smallest index (the
            # first in row-major order, as torch's serial max pooling picks).
            val = np.full((n, c), -np.inf)
            idx = np.full((n, c), np.iinfo(np.int64).max, dtype=np.int64)
            if xs.shape[2]:
                v, a = xs.max(2)
                val = v.double().cpu().numpy()
                idx = layer._global_flat(a.cpu().numpy())
            got = comm.allgather((val, idx))
            vals = np.stack([g[0] for g in got])
            idxs = np.stack([g[1] for g in got])
            best = vals.max(0)
            idxs = np.where(vals == best, idxs, np.iinfo(np.int64).max)
            win = idxs.min(0)
            # Cells are disjoint, so exactly one process holds each winning index.
            ctx.mine = (idxs[comm.rank] == win) & (win != np.iinfo(np.int64).max)
            ctx.local_index = layer._local_flat(win)
            y = torch.from_numpy(best[rows])
        return y.to(x.dtype).to(x.device).reshape(rows.stop - rows.start, c,
                                                  *([1] * (x.dim() - 2)))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        layer, shape, rows = ctx.layer, ctx.shape, ctx.rows
        n, c = shape[0], shape[1]
        full = np.zeros((n, c))
        full[rows] = g.detach().reshape(rows.stop - rows.start, c).double().cpu().numpy()
        halox.as_comm(layer.grid.comm).allreduce_inplace(full, "sum")
        gt = torch.from_numpy(full).to(g.dtype).to(g.device)
        dx = torch.zeros(shape, dtype=g.dtype, device=g.device)
        window = dx[(slice(None), slice(None)) + layer._local]
        if window.numel() == 0:
            return dx, None
        if layer.mode == "avg":
            window.copy_((gt / layer.divisor).reshape(n, c, *([1] * (len(shape) - 2)))
                         .expand_as(window))
        else:
            flat = torch.zeros(n, c, window[0, 0].numel(), dtype=g.dtype, device=g.device)
            mine = torch.from_numpy(ctx.mine).to(g.device)
            index = torch.from_numpy(np.where(ctx.mine, ctx.local_index, 0)).to(g.device)
            flat.scatter_(2, index.unsqueeze(2), torch.where(mine, gt, torch.zeros_like(gt))
                          .unsqueeze(2))
            window.copy_(flat.reshape(window.shape))
        return dx, None


class GlobalPoolToSample(_ToSample):
    """Global average or max pooling of a spatially split NC(D)HW tensor: one output cell per
    sample and channel, the reduction of ``window`` (default: the whole map) over every process.
    Its output is sample-parallel, like :class:`SpatialToSample`'s: this process gets the rows
    :meth:`samples` names, shape (rows, C, 1, ...). Only (N, C) numbers travel, in one
    collective, instead of the whole map a shuffle would move. :func:`parallelize` uses it for
    ``AdaptiveAvgPool/AdaptiveMaxPool`` with output 1 and for avg/max pooling whose window
    covers the map with one output cell.

    ``window`` (per spatial dim) is the kernel anchored at cell 0, as an unpadded pooling layer
    with a single output reads it; ``divisor`` (avg) defaults to the window's cell count."""

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

    def _global_flat(self, local_flat):
        """Window-wide row-major index of local row-major indices into this process's cells."""
        coords = np.unravel_index(local_flat, self._local_extent)
        return np.ravel_multi_index(tuple(c + lo for c, lo in zip(coords, self._lo)),
                                    self.window).astype(np.int64)

    def _local_flat(self, global_flat):
        """Local row-major index of window-wide indices (only meaningful for this process's)."""
        coords = np.unravel_index(np.minimum(global_flat, math.prod(self.window) - 1),
                                  self.window)
        local = tuple(np.clip(c - lo, 0, max(e - 1, 0))
                      for c, lo, e in zip(coords, self._lo, self._local_extent))
        return np.ravel_multi_index(local, [max(e, 1) for e in self._local_extent])

    def forward(self, x):
        self._agree_on_input(x, "GlobalPoolToSample")
        return _GlobalPool.apply(x, self)

    def extra_repr(self):
        return f"mode={self.mode!r}, input_size={self.input_size}, window={self.window}"


# ---- model-level helpers -----------------------------------------------------------------------


def parallelize(model, grid, input_size, backend=None):
    """A spatially parallel copy of an ``nn.Sequential`` CNN, sharing its parameters.

    Conv, max/avg pooling and batch-norm layers (2-d or 3-d) become their Dist* versions;
    element-wise layers (ReLU, Dropout, ...) are kept. A global pooling layer (adaptive
    avg/max pooling to one cell, or avg/max pooling whose single window covers the map, as at
    the end of a ResNet) becomes a :class:`GlobalPoolToSample`, which reduces over the
    processes and leaves the output sample-parallel; before any other layer that mixes spatial
    positions (Flatten, Linear, adaptive pooling to more cells, ...) a :class:`SpatialToSample`
    shuffle is inserted. The rest runs sample-parallel. The result
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
            layers.append((name, d))
        elif n in maxp and isinstance(m, maxp[n][0]):
            d = maxp[n][1](m.kernel_size, m.stride, m.padding, m.dilation, grid=grid,
                           input_size=size, backend=backend, ceil_mode=m.ceil_mode)
            size = d.output_size
            layers.append((name, d))
        elif n in avgp and isinstance(m, avgp[n][0]):
            d = avgp[n][1](m.kernel_size, m.stride, m.padding, ceil_mode=m.ceil_mode,
                           count_include_pad=m.count_include_pad,
                           divisor_override=m.divisor_override, grid=grid, input_size=size,
                           backend=backend)
            size = d.output_size
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
    comm = halox.as_comm(comm)
    for t in list(module.parameters()) + list(module.buffers()):
        with torch.no_grad():
            a = t.detach().cpu().contiguous().numpy().copy()
            comm.bcast_inplace(a, root=root)
            t.copy_(torch.from_numpy(a))


def sync_grads(module, comm, op="sum"):
    """All-reduces the gradients of ``module``'s parameters in one message (collective).

    ``op='sum'`` (default) is right for a spatially parallel model whose per-process losses add
    up to the global loss: each process then holds a part of every gradient. ``op='mean'``
    averages, for plain data parallelism where each process's loss is a full mean. A parameter
    without a gradient counts as zero."""
    if op not in ("sum", "mean"):
        _fail(f"sync_grads: op='{op}'; use 'sum' or 'mean'")
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1)
                      .double().cpu() for p in params]).numpy()
    comm = halox.as_comm(comm)
    comm.allreduce_inplace(flat, "sum")
    if op == "mean":
        flat /= comm.size
    offset = 0
    for p in params:
        n = p.numel()
        g = torch.from_numpy(flat[offset:offset + n]).reshape(p.shape).to(p.dtype).to(p.device)
        if p.grad is None:
            p.grad = g
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
