#!/usr/bin/env python3
"""Hybrid parallel training: torch's DistributedDataParallel over the sample dimension and
halox.torch over space.

The job's processes form replicas of --spatial processes each. Within a replica the processes
split every image's height (halox.torch.parallelize on a SpatialGrid); the replicas take
different slices of the mini-batch, and DDP averages their gradients. The replica's layers run
their reductions (batch-norm statistics, global pooling, sync_grads) on a torch.distributed
group of the replica's processes, so all collectives go through torch.distributed (gloo here,
NCCL for CUDA tensors) except the halo exchanges, which are halox plans.

    mpiexec -n 4 python3 examples/python/hybrid_ddp.py --spatial 2      # 2 replicas x 2
    mpiexec -n 4 python3 examples/python/hybrid_ddp.py --spatial 2 --check

--check runs one step on a fixed mini-batch and compares every parameter after it with the
same step of the serial model (exit status 1 when they differ): the replicas' gradients
averaged, each from its own samples, batch norm normalising over each replica's samples as
DDP does without SyncBatchNorm.
"""

import argparse
import copy
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import halox
import halox.torch as ht


def build_model(classes=4, width=8):
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, classes))


def init_torch_distributed(comm):
    """torch.distributed (gloo) over the MPI job's processes, with the same ranks: rank 0
    picks a free port on this host and broadcasts it (single-host jobs; on a cluster set
    MASTER_ADDR/MASTER_PORT as the launcher documents)."""
    if "MASTER_PORT" not in os.environ:
        port = None
        if comm.rank == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        os.environ["MASTER_PORT"] = str(comm.bcast(port))
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", rank=comm.rank, world_size=comm.size)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--spatial", type=int, default=2, help="processes per replica (split H)")
    p.add_argument("--size", type=int, default=16, help="image height and width")
    p.add_argument("--batch", type=int, default=8, help="global mini-batch")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--check", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    comm = halox.comm_world()
    if comm.size % args.spatial:
        ht.print(f"hybrid_ddp: {comm.size} processes do not make replicas of {args.spatial}")
        sys.exit(2)
    init_torch_distributed(comm)
    replicas = comm.size // args.spatial
    replica, part = divmod(comm.rank, args.spatial)
    # Every process creates every group, in the same order (torch.distributed requires it).
    spatial_groups = [dist.new_group(list(range(r * args.spatial, (r + 1) * args.spatial)))
                      for r in range(replicas)]
    replica_groups = [dist.new_group(list(range(s, comm.size, args.spatial)))
                      for s in range(args.spatial)]
    spatial_comm = comm.split(replica, part)
    grid = ht.SpatialGrid(spatial_comm, (args.spatial, 1),
                          process_group=spatial_groups[replica])
    size = (args.size, args.size)

    torch.manual_seed(0)
    serial = build_model().double()
    reference = copy.deepcopy(serial)
    model = ht.parallelize(serial, grid, size)
    ddp = nn.parallel.DistributedDataParallel(model, process_group=replica_groups[part])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)

    per_replica = args.batch // replicas
    rows = slice(replica * per_replica, (replica + 1) * per_replica)
    gen = torch.Generator().manual_seed(1)
    for step in range(1 if args.check else args.steps):
        x = torch.randn(args.batch, 1, *size, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 4, (args.batch,), generator=gen)
        xr, yr = x[rows], y[rows]
        out = ddp(xr[grid.local_slices(size)])
        mine = yr[model.shuffle.samples(per_replica)]
        # The replica's processes' losses add up to its mean loss; DDP averages the replicas.
        loss = F.cross_entropy(out, mine, reduction="sum") / per_replica
        opt.zero_grad()
        loss.backward()
        ht.sync_grads(model, grid)  # the spatial parts of every gradient, on the replica group
        opt.step()
        total = ht.all_reduce_sum(loss.detach(), grid)
        ht.print(f"step {step + 1}: replica 0 loss {total.item():.4f}", comm=comm)
    if not args.check:
        return
    # The serial step with DDP's meaning: batch norm normalises over each replica's samples
    # (as with DDP on one process per replica), and the replicas' gradients are averaged.
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    for r in range(replicas):
        part_rows = slice(r * per_replica, (r + 1) * per_replica)
        (F.cross_entropy(reference(x[part_rows]), y[part_rows]) / replicas).backward()
    ref_opt.step()
    worst = max((a - b).abs().max().item()
                for a, b in zip(model.parameters(), reference.parameters()))
    ok = comm.allreduce(1 if worst < 1e-10 else 0, op="min") == 1
    ht.print(f"hybrid_ddp: {replicas} replicas x {args.spatial} spatial processes; "
             f"largest parameter difference to the serial step {worst:.2e}: "
             f"{'match' if ok else 'MISMATCH'}", comm=comm, rank="all")
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
