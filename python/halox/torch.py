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
import os
import weakref

import numpy as np
import torch
import torch.nn.functional as F
import halox

#: Backend of the plans the layers build when none is given. Layers build their plans lazily,
#: inside the first forward pass of each batch shape, so measuring every candidate there
#: ("auto") would stall that step; point-to-point packing is the dependable default. Set it to
#: "auto" (or pass backend= to a layer) to let halox measure.
DEFAULT_BACKEND = "mpi_pack"

#: How the layers check their inputs across the processes. "shape" (default): collectively
#: once per new input shape (batch, channels, dtype, device) of a layer, when its plan is
#: chosen; after that each process checks its own input, and a process whose input is wrong
#: tells its peers through the plan (they raise halox.Error with code "peer_failed"), so a
#: steady training step runs no collective besides the exchanges and reductions themselves.
#: "always": one collective agreement per layer call (and the plans' own collective buffer
#: checks), for debugging. The environment variable HALOX_TORCH_CHECKS sets the default.
CHECKS = os.environ.get("HALOX_TORCH_CHECKS", "shape")


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


def _checks_always():
    if CHECKS not in ("shape", "always"):
        _fail(f"halox.torch.CHECKS is {CHECKS!r} (or HALOX_TORCH_CHECKS); use 'shape' or "
              "'always'")
    return CHECKS == "always"


def _key_of(x):
    """(batch, channels, dtype name, device type) of an NC... tensor."""
    return (x.shape[0], x.shape[1], str(x.dtype).replace("torch.", ""), x.device.type)


class _InputState:
    """Which input key (batch, channels, dtype, device) a layer runs with across its processes,
    and the plan chosen for it.

    A key is agreed collectively the first time a layer sees it (``_agree``). While every
    process keeps passing that key, only local checks run. A process whose key changes first
    skips the current plan's next execution (``skip_execution``): when every peer skipped it
    too, all changed together (a smaller last batch) and they agree on the new key; when a peer
    went ahead, that peer raises peer_failed and this process raises, naming both keys."""

    def __init__(self, what, comm):
        self.what = what
        self.comm = comm
        self.key = None
        self.plan = None

    def settle(self, key, problem, plans, build):
        """The plan for ``key`` (this process's input), or halox.Error on every process of the
        layer's plan when a process's input is wrong. ``problem``: this process's own finding
        (None when its input is fine); ``plans``: the layer's plans per key; ``build(key)``
        plans a new key (collective)."""
        always = _checks_always()
        if not always and self.plan is not None and key == self.key:
            if problem is not None:
                self.plan.skip_execution(f"{self.what}: {problem}")
                self.failed(plans)
                _fail(f"{self.what}: {problem}")
            return self.plan
        before, current = self.key, self.plan
        self.key, self.plan = None, None
        if not always and current is not None:
            shown = problem if problem is not None else f"(batch, channels, dtype, device) {key}"
            if not current.skip_execution(
                    f"{self.what}: rank {halox.as_comm(self.comm).rank}'s input changed to "
                    f"{shown}; every process must pass the same mini-batch shape"):
                plans.pop(before, None)  # a peer went ahead: the plan cannot run again
                _fail(f"{self.what}: this process's input changed from (batch, channels, dtype, "
                      f"device) {before} to {shown} while other processes went on with the old "
                      "shape; every process of a spatially parallel model must get the same "
                      "mini-batch")
        _agree(self.comm, self.what, None if problem is not None else key, problem)
        plan = plans.get(key)
        if plan is None:
            plan = build(key)
            plans[key] = plan
        plan.checks = always
        self.key, self.plan = key, plan
        return plan

    def failed(self, plans):
        """After an execution of the current plan raised: it cannot run again, so the next call
        agrees on a shape and plans anew (on every process: the peers' executions failed too)."""
        plans.pop(self.key, None)
        self.key, self.plan = None, None


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


class _Redistribute(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, plan):
        src, dst = plan.src, plan.dst
        xb = _as_buffer(x.detach(), src) if src is not None else None
        out = _buffer_like(dst, x) if dst is not None else x.new_zeros(0)
        plan.execute(xb, out if dst is not None else None, stream=_stream_of(x))
        ctx.plan = plan
        ctx.like = x
        return out

    @staticmethod
    def backward(ctx, g):
        plan = ctx.plan
        src, dst = plan.src, plan.dst
        gin = _buffer_like(src, g) if src is not None else g.new_zeros(0)
        gb = _as_buffer(g.contiguous(), dst) if dst is not None else None
        plan.execute_inverse(gb, gin if src is not None else None, stream=_stream_of(g))
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
    out = x.detach().clone(memory_format=torch.contiguous_format)
    _collectives(comm).allreduce_(out)
    return out


def all_reduce_sum(x, comm):
    """Differentiable sum of ``x`` over the processes of ``comm`` (a :class:`SpatialGrid`, whose
    reductions may run on a torch.distributed group, or any communicator halox accepts)."""
    return _AllReduceSum.apply(x, comm)


class _Collectives:
    """The reductions of halox.torch (batch-norm statistics, global pooling, gradient sums)
    on tensors, in place: through a torch.distributed process group when one was given (the
    tensor's own device, NCCL for CUDA tensors), else through halox's communicator (host
    tensors directly; a CUDA tensor goes through host memory)."""

    def __init__(self, comm, group=None):
        self.comm = halox.as_comm(comm)
        self.group = group
        self.size = self.comm.size

    def allreduce_(self, t):
        if t.numel() == 0:
            return t
        if self.group is not None:
            torch.distributed.all_reduce(t, group=self.group)
        elif t.is_cuda:
            h = t.cpu()
            self.comm.allreduce_inplace(h, "sum")
            t.copy_(h)
        else:
            self.comm.allreduce_inplace(t, "sum")
        return t

    def allgather_(self, send, recv):
        """recv[r] = rank r's send (recv: size x send's shape, contiguous)."""
        if self.group is not None:
            torch.distributed.all_gather(list(recv.unbind(0)), send, group=self.group)
        elif send.is_cuda:
            h = recv.cpu()
            self.comm.allgather_into(send.cpu(), h)
            recv.copy_(h)
        else:
            self.comm.allgather_into(send, recv)
        return recv


def _collectives(comm):
    if isinstance(comm, SpatialGrid):
        return comm.collectives
    return _Collectives(comm)


# ---- the grid ------------------------------------------------------------------------------------


class SpatialGrid:
    """Processes splitting the spatial dimensions of NC(D)HW tensors.

    ``parts`` has one entry per spatial dimension (2 for NCHW, 3 for NCDHW); zeros are chosen
    for the communicator's size. Collective over ``comm`` (a :class:`halox.Comm`, an mpi4py
    communicator on halox's MPI, or an integer handle).

    ``process_group``: a ``torch.distributed`` group of the same processes, in the same rank
    order (for example ``torch.distributed.new_group(ranks)`` with the world ranks of this
    grid's processes). When given, the layers' reductions (batch-norm statistics, global
    pooling, :func:`sync_grads` with this grid) run on it, on the tensors' own device (NCCL
    for CUDA tensors); halo exchanges and shuffles stay halox plans.
    """

    def __init__(self, comm, parts, process_group=None):
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
        self.process_group = process_group
        if process_group is not None:
            _check_group(process_group, comm)
        self.collectives = _Collectives(comm, process_group)

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
        """Slices selecting this process's block from a global ``(N, C, *size)`` tensor."""
        return (slice(None), slice(None)) + tuple(slice(lo, hi) for lo, hi in self.split(size))

    def _check_size(self, size):
        if len(size) != self.ndim:
            _fail(
                f"spatial size {tuple(size)} has {len(size)} dimensions but the grid splits "
                f"{self.ndim}"
            )

    def __repr__(self):
        return f"SpatialGrid(parts={self.parts}, rank={self.rank})"


def _check_group(group, comm):
    """The torch.distributed group must hold the communicator's processes in its rank order."""
    import torch.distributed as dist
    comm = halox.as_comm(comm)
    problem = None
    if not dist.is_available() or not dist.is_initialized():
        problem = ("torch.distributed is not initialised; call "
                   "torch.distributed.init_process_group first or leave process_group out")
    else:
        mine = dist.get_rank(group)
        if mine != comm.rank or dist.get_world_size(group) != comm.size:
            problem = (f"it ranks this process {mine} of {dist.get_world_size(group)} but the "
                       f"grid's communicator ranks it {comm.rank} of {comm.size}; build the group "
                       "from the grid's processes in the communicator's rank order")
    _agree(comm, "SpatialGrid(process_group=...)", "group", problem)


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
    all processes, so the widths are the maxima over the parts.

    A dimension in one part (and not periodic) needs no exchange: torch pads it itself
    (``pad``), exactly as the serial model does, and its halo is 0. Only split dimensions are
    padded by the halo exchange's boundary fill."""

    def __init__(self, what, size, parts, coords, k, s, p, d, periodic=False):
        self.in_size = tuple(size)
        self.halo = []
        self.local = []
        self.pad = []
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
            if P == 1 and not periodic:
                self.halo.append((0, 0))
                self.local.append(slice(0, e))
                self.pad.append(pp)
                continue
            self.pad.append(0)
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
        self.pad = tuple(self.pad)
        #: True when no dimension is exchanged (one part, or windows that stay inside every
        #: block, as a 2x2 pooling of even blocks): the layer is torch's operator on the block.
        self.local_only = all(h == (0, 0) for h in self.halo) and not periodic

    def options(self, periodic=False):
        return [None, None] + [halox.DimOptions(lo, hi, periodic) for lo, hi in self.halo]


class _HaloBuffers:
    """A layer's haloed input buffers, kept from call to call (one set per plan): a forward
    writes the owned block into a free one and exchanges its halos there, so a steady step
    allocates nothing for it. A buffer is busy from the forward that filled it until that
    forward's backward has run, or its autograd graph is gone; a layer called again meanwhile
    (shared weights, a second forward before backward) takes another buffer."""

    def __init__(self):
        self._sets = {}

    def take(self, key, make):
        pool = self._sets.setdefault(key, [])
        for entry in pool:
            ctx = entry[1]() if entry[1] is not None else None
            if ctx is None or getattr(ctx, "done", False):
                entry[1] = None
                return entry
        entry = [make(), None]
        pool.append(entry)
        return entry

    def forget(self, key):
        self._sets.pop(key, None)

    def held_bytes(self):
        return sum(e[0].numel() * e[0].element_size() for pool in self._sets.values()
                   for e in pool)


def _stream_of(t):
    """torch's current CUDA stream for a CUDA tensor (as an integer handle), 0 otherwise."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0


class _HaloedWindow(torch.autograd.Function):
    """The cells a layer's local output block reads: the owned block ``x`` written into a kept
    buffer of the plan's descriptor, its halos exchanged, and the window's slice returned (a
    view of that buffer). Backward: the window's gradient in a buffer of the descriptor
    (the incoming one when it already is), the reverse exchange (every halo cell's gradient
    added into its owner), then the owned part. ``token`` (a scalar that requires grad) keeps
    this node in the graph even when ``x`` needs no gradient, so that the buffer is released
    when the graph is.

    A layer that applies a ReLU to its input first (``layer._relu_in``, set by parallelize for
    a ReLU followed by an exchanging layer) writes the ReLU's output straight into the buffer:
    the activation is then held once, in the buffer, and backward masks the gradient with it."""

    @staticmethod
    def forward(ctx, x, token, layer, key):
        plan = layer._state.plan
        desc = plan.descs[0]
        entry = layer._halo_bufs.take(key, lambda: _buffer_like(desc, x, zero=True))
        buf = entry[0]
        entry[1] = weakref.ref(ctx)  # under no_grad the context goes at once, and so the claim
        ctx.done = False
        if layer._relu_in:
            torch.clamp(x.detach(), min=0, out=buf[desc.owned_slices])
        else:
            buf[desc.owned_slices].copy_(x.detach())
        try:
            plan.execute(buf, stream=_stream_of(buf))
        except halox.Error:
            layer._state.failed(layer._plans)
            layer._halo_bufs.forget(key)
            raise
        ctx.layer, ctx.plan, ctx.buf = layer, plan, buf
        return buf[layer._window_slices]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        ctx.done = True
        plan = ctx.plan
        desc = plan.descs[0]
        full = ctx.layer._window_full
        if full and tuple(g.shape) == tuple(desc.local_shape) and all(
                st == e or n <= 1 for st, e, n in zip(g.stride(), desc.strides, g.shape)):
            gb = g  # torch's operator backward made it for this node alone: use it in place
        else:
            gb = _buffer_like(desc, g, zero=not full)
            gb[ctx.layer._window_slices] = g
        plan.execute_reverse(gb, "sum", stream=_stream_of(gb))
        gx = gb[desc.owned_slices]
        if ctx.layer._relu_in:
            # The buffer still holds the ReLU's output: it is busy until this backward. gb is
            # this node's own (made here, or torch's operator backward made it for this node).
            gx.mul_(ctx.buf[desc.owned_slices] > 0)
        return gx, None, None, None


class _HaloedWindowMixin:
    """Shared forward machinery: the owned block into a kept halo buffer, exchange, the cells
    the local output block reads."""

    def _init_dist(self, what, grid, input_size, k, s, p, d, periodic=False, fill=0.0,
                   backend=None):
        if not isinstance(grid, SpatialGrid):
            _fail(f"{what}: grid must be a halox.torch.SpatialGrid, got {type(grid).__name__}")
        input_size = _as_tuple(input_size, grid.ndim, "input_size")
        self.grid = grid
        self.input_size = input_size
        self._what = what
        self._window = _Window(what, input_size, grid.parts, grid.coords, k, s, p, d, periodic)
        self.output_size = self._window.out_size
        self._periodic = periodic
        self._fill = fill
        self._backend = backend
        self._plans = {}
        self._state = _InputState(what, grid.comm)
        self._halo_bufs = _HaloBuffers()
        self._owned = tuple(hi - lo for lo, hi in grid.split(input_size))
        self._window_slices = (slice(None), slice(None)) + tuple(self._window.local)
        # Whether the window is the whole halo buffer (then a gradient of the window is one of
        # the buffer).
        self._window_full = all(
            sl.start == 0 and sl.stop == own + lo + hi
            for sl, own, (lo, hi) in zip(self._window.local, self._owned, self._window.halo))
        self._token = torch.zeros((), requires_grad=True)
        self._relu_in = False

    @property
    def exchanges(self):
        """Whether the layer exchanges halos (False: torch's operator on the block as it is)."""
        return not self._window.local_only

    def fuse_input_relu(self):
        """Makes the layer apply a ReLU to its input, written straight into its halo buffer
        (parallelize does this for a ReLU followed by an exchanging layer): the ReLU's output
        is then held once, in the buffer, instead of once by the ReLU and once in the buffer."""
        self._relu_in = True
        return self

    def _problem(self, x):
        nsp = self.grid.ndim
        if x.dim() != nsp + 2:
            return f"expected an N x C x {nsp}-d spatial block, got a {x.dim()}-d tensor"
        if tuple(x.shape[2:]) != self._owned:
            return (f"its block has spatial shape {tuple(x.shape[2:])} but it owns "
                    f"{self._owned} of input_size {self.input_size}; pass each rank its "
                    "block (SpatialGrid.local_slices)")
        return None

    def _build_plan(self, key):
        desc = halox.TensorDesc(self.grid.grid, [key[0], key[1], *self.input_size], key[2],
                                self._window.options(self._periodic))
        # A new plan per key: buffers of the key's old plan (if any) are dropped with it.
        self._halo_bufs.forget(key)
        return halox.HaloPlan(desc, backend=self._backend or DEFAULT_BACKEND,
                              boundary="untouched" if self._periodic else "constant",
                              fill_value=self._fill,
                              memory="device" if key[3] == "cuda" else "host")

    def _haloed(self, x):
        """The cells this process's output block reads (with the halos), and the padding torch
        adds itself (dimensions in one part)."""
        problem = self._problem(x)
        if self._window.local_only:
            # Nothing to exchange or agree on: torch pads the dimensions in one part like the
            # serial model. A wrong block is this process's error alone here; the next layer
            # that exchanges tells the peers.
            if problem is not None:
                _fail(f"{self._what}: {problem}")
            if self._relu_in:
                x = torch.relu(x)
            # Slicing would add a node to the graph whose backward copies the whole gradient.
            return (x if self._window_full else x[self._window_slices]), self._window.pad
        key = _key_of(x) if x.dim() >= 2 else None
        self._state.settle(key, problem, self._plans, self._build_plan)
        return _HaloedWindow.apply(x, self._token, self, key), self._window.pad

    def halo_plan(self, batch, channels, dtype=torch.float32, device="cpu"):
        """The plan used for inputs of this batch size, channel count, dtype and device type
        (None before the first forward with them, or when no dimension is exchanged)."""
        return self._plans.get((batch, channels, str(dtype).replace("torch.", ""),
                                torch.device(device).type))

    def extra_repr(self):
        """torch's description of the layer, plus ``relu_in=True`` when it applies a fused
        ReLU to its input (:meth:`fuse_input_relu`)."""
        extra = super().extra_repr()
        return extra + (", relu_in=True" if self._relu_in else "")

    def halo_buffer_bytes(self):
        """Bytes of the halo buffers this layer keeps between calls."""
        return self._halo_bufs.held_bytes()


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
        """The convolution of this process's output block. ``x`` is its spatial block of the
        input (``SpatialGrid.local_slices``), N x C x the block's spatial shape; the result is
        its block of the output (``output_size`` globally). Collective over the grid."""
        xs, pad = self._haloed(x)
        return self._conv(xs, self.weight, self.bias, self.stride, pad, self.dilation, self.groups)

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
        """Max pooling of this process's output block from its spatial block ``x`` of the
        input (``SpatialGrid.local_slices``). Collective over the grid."""
        xs, pad = self._haloed(x)
        return self._pool(xs, self._k, self._s, pad, self._d)


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
        """Average pooling of this process's output block from its spatial block ``x`` of the
        input (``SpatialGrid.local_slices``). Collective over the grid."""
        xs, pad = self._haloed(x)
        return self._pool(xs, self._k, self._s, pad, False, True, self.divisor_override)


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


class _SpatialBatchNorm(torch.autograd.Function):
    """Batch-norm training step over the whole spatial split: sums of the values shifted by a
    pivot per channel give this process's per-channel mean and M2, one all-gather of one small float64 tensor (count,
    means, M2s of every process) on the tensor's device brings every process's, and they are
    merged as halox's C++ batch norm merges them (Chan et al.'s pairwise formula, which does
    not cancel when the mean is large against the spread; in closed form: every process's
    deviation from the merged mean). torch's batch_norm then normalises with the merged
    moments. Backward: the two per-channel sums the input gradient needs (of dy, and of
    dy * (x - mean)) are added over the processes in one all-reduce; the weight and bias
    gradients are this process's parts, which sync_grads adds up.

    A process whose input has the wrong channel count still takes part in the all-gather (its
    count is -1), so that every process raises instead of waiting."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer):
        grid = layer.grid
        c = layer.num_features
        send, recv = layer._stats_buffers(x.device)
        problem = layer._channel_problem(x)
        if problem is not None:
            send.zero_()
            send[0] = -1.0
        else:
            n = x.numel() // c if c else 0
            send[0] = float(n)
            if n:
                # Sums of the values shifted by one of them per channel (a pivot within the
                # data's spread, so that the sum of squares does not cancel the way plain
                # sums do when the mean is large against the spread); two plain reductions run
                # about twice as fast as torch.var_mean's Welford pass here.
                dims = [0] + list(range(2, x.dim()))
                pivot = x.detach()[(0, slice(None)) + (0,) * (x.dim() - 2)]
                d = x.detach() - pivot.reshape([1, c] + [1] * (x.dim() - 2))
                s1 = d.sum(dims).double()
                s2 = d.square_().sum(dims).double()
                del d
                send[1:1 + c].copy_(pivot).add_(s1 / n)
                send[1 + c:].copy_(s2).sub_(s1 * s1 / n).clamp_(min=0)
            else:
                send[1:].zero_()
        grid.collectives.allgather_(send, recv)
        counts = recv[:, 0]
        total = counts.sum()
        if problem is not None:
            _fail(f"{type(layer).__name__}: {problem}")
        if recv.is_cuda:
            # Reading the counts on the host would wait for the device; a device-side assert
            # stops the step instead, in stream order.
            torch._assert_async((counts >= 0).all() & (total > 0))
        else:
            bad = [r for r, v in enumerate(counts.tolist()) if v < 0]
            if bad:
                _fail(f"{type(layer).__name__}: rank(s) {bad} passed an input with the wrong "
                      "channel count (see the error there)")
            if float(total) == 0:
                _fail(f"{type(layer).__name__}: no process holds a value to normalise (empty "
                      "mini-batch)")
        w = counts.unsqueeze(1)
        mean = (w * recv[:, 1:1 + c]).sum(0) / total
        dev = recv[:, 1:1 + c] - mean
        m2 = recv[:, 1 + c:].sum(0) + (w * dev * dev).sum(0)
        var = m2 / total
        if layer.track_running_stats:
            with torch.no_grad():
                layer.num_batches_tracked += 1
                m = (1.0 / float(layer.num_batches_tracked) if layer.momentum is None
                     else layer.momentum)
                unbiased = var * (total / torch.clamp(total - 1.0, min=1.0))
                layer.running_mean.mul_(1 - m).add_(mean.to(layer.running_mean.dtype), alpha=m)
                layer.running_var.mul_(1 - m).add_(unbiased.to(layer.running_var.dtype), alpha=m)
        mean_t, var_t = mean.to(x.dtype), var.to(x.dtype)
        y = F.batch_norm(x.detach(), mean_t, var_t, None if weight is None else weight.detach(),
                         None if bias is None else bias.detach(), False, 0.0, layer.eps)
        ctx.save_for_backward(x, weight, mean_t, torch.rsqrt(var_t + layer.eps))
        ctx.layer = layer
        ctx.count = total
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        x, weight, mean, invstd = ctx.saved_tensors
        layer = ctx.layer
        eps = layer.eps
        shape = [1, x.shape[1]] + [1] * (x.dim() - 2)
        # Torch's own backward in evaluation mode, given the global statistics, yields this
        # process's sum(dy) (the bias gradient) and sum(dy * xhat) (the weight gradient) in one
        # fused pass; sum(dy * (x - mean)) is the latter over invstd.
        w = weight if weight is not None else torch.ones_like(invstd)
        _, gw_local, gb_local = torch.ops.aten.native_batch_norm_backward(
            g, x, w, mean, 1.0 / (invstd * invstd) - eps, None, None, False, eps,
            [False, True, True])
        sums = torch.stack([gb_local.double(), gw_local.double() / invstd.double()])
        layer.grid.collectives.allreduce_(sums)
        m = ctx.count
        sum_g = sums[0].to(x.dtype)
        sum_gxmu = sums[1].to(x.dtype)
        scale = invstd if weight is None else weight * invstd
        # dx = w*invstd * (g - sum(g)/M - (x - mean) * invstd^2 * sum(g*(x - mean))/M)
        #    = g * a + x * b + c, per channel
        b = -scale * invstd * invstd * sum_gxmu / m.to(x.dtype)
        shift = -scale * sum_g / m.to(x.dtype) - mean * b
        dx = torch.addcmul(shift.reshape(shape), x, b.reshape(shape))
        dx.addcmul_(g, scale.reshape(shape))
        gw = gw_local if weight is not None else None
        gb = gb_local if ctx.has_bias else None
        return dx, gw, gb, None


class _DistBatchNorm:
    """Batch norm whose training statistics cover the whole spatial split (see
    _SpatialBatchNorm); evaluation with running statistics communicates nothing, and on a grid
    of one process it is torch's own batch norm."""

    def _setup_bn(self, grid):
        if not isinstance(grid, SpatialGrid):
            _fail(f"{type(self).__name__}: grid must be a halox.torch.SpatialGrid")
        self.grid = grid
        self._stats = {}

    def _channel_problem(self, x):
        if x.shape[1] == self.num_features:
            return None
        return (f"its input has {x.shape[1]} channels but the layer normalises "
                f"{self.num_features} (num_features)")

    def _stats_buffers(self, device):
        """The all-gather's send and receive tensors (float64, on ``device``), kept."""
        bufs = self._stats.get(device)
        if bufs is None:
            per = 1 + 2 * self.num_features
            bufs = (torch.zeros(per, dtype=torch.float64, device=device),
                    torch.zeros(self.grid.size, per, dtype=torch.float64, device=device))
            self._stats[device] = bufs
        return bufs

    def forward(self, x):
        """Normalises this process's spatial block ``x``. In training (or without running
        statistics) the mean and variance cover every process's block, gathered in one
        collective; in evaluation with running statistics nothing is communicated."""
        self._check_input_dim(x)
        if self.grid.size == 1 and self._channel_problem(x) is not None:
            _fail(f"{type(self).__name__}: {self._channel_problem(x)}")
        use_batch = self.training or not self.track_running_stats
        if not use_batch or self.grid.size == 1:
            return torch.nn.modules.batchnorm._BatchNorm.forward(self, x)
        # Training, or evaluation without running statistics (then track_running_stats is
        # False and nothing is updated).
        return _SpatialBatchNorm.apply(x, self.weight, self.bias, self)


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
        return halox.RedistributePlan(src, dst, backend=self._backend or DEFAULT_BACKEND,
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
            _agree(self.grid.comm, "GlobalPoolToSample", None if problem else key, problem)
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


# ---- model-level helpers -----------------------------------------------------------------------


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
