"""Helpers shared by the modules of halox.torch: errors, the collective agreement on input
shapes, the per-layer input state, buffers laid out like a descriptor's."""

import sys

import numpy as np
import torch
import halox


def _package():
    """The ``halox.torch`` package. Its settings (``CHECKS``, ``DEFAULT_BACKEND``) and
    ``_agree`` are looked up there at call time, so that assigning ``halox.torch.CHECKS`` (or
    replacing ``halox.torch._agree``, as the tests do) reaches every module."""
    return sys.modules[__package__]


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
    checks = _package().CHECKS
    if checks not in ("shape", "always"):
        _fail(f"halox.torch.CHECKS is {checks!r} (or HALOX_TORCH_CHECKS); use 'shape' or "
              "'always'")
    return checks == "always"


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
        _package()._agree(self.comm, self.what, None if problem is not None else key, problem)
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


def _as_tuple(v, n, name):
    if isinstance(v, int):
        return (v,) * n
    v = tuple(int(i) for i in v)
    if len(v) != n:
        _fail(f"{name}={v} needs {n} entries (one per spatial dimension) or one integer")
    return v


def _stream_of(t):
    """torch's current CUDA stream for a CUDA tensor (as an integer handle), 0 otherwise."""
    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else 0
