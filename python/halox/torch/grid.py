"""The grid of processes that split the spatial dimensions, and the reductions of halox.torch
on tensors (on halox's communicator or a torch.distributed group)."""

import math

import torch
import halox

from ._common import _fail, _package


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
    _package()._agree(comm, "SpatialGrid(process_group=...)", "group", problem)
