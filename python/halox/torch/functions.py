"""The autograd functions of halox.torch: halo exchange, redistribution, the sum over
processes, and the haloed window of the layers (the owned block written into a kept halo
buffer, exchanged, and the cells a layer's output block reads)."""

import weakref

import torch
import halox

from ._common import _as_buffer, _buffer_like, _fail, _halo_grad_mask, _stream_of
from .grid import _collectives


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
