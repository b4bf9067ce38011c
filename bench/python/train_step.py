#!/usr/bin/env python3
"""Time of one training step (forward, backward, gradient all-reduce, SGD step) of the
examples/python/train_spatial.py model, spatially parallel with halox.torch on every process
of the job, or (--serial) plain torch on one process. Prints one markdown table row: the median
over --steps steps of the slowest process's time, after --warmup untimed steps (the first step
builds the halo and redistribution plans).

    mpiexec -n 4 python3 bench/python/train_step.py --size 64 --batch 32
    python3 bench/python/train_step.py --serial --size 64 --batch 32
"""

import argparse
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "python"))
from train_spatial import build_model  # noqa: E402

import halox  # noqa: E402
import halox.torch as ht  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--serial", action="store_true", help="plain torch on this process only")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--width", type=int, default=16, help="channels of the first conv")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--backend", default="mpi_pack")
    args = p.parse_args()
    torch.set_num_threads(1)
    comm = halox.comm_world()
    size = (args.size, args.size)
    torch.manual_seed(0)
    x = torch.randn(args.batch, 1, *size)
    y = torch.randint(0, 10, (args.batch,))
    model = build_model(size, width=args.width)
    if args.serial:
        if comm.size != 1:
            raise SystemExit("--serial runs on one process")
        grid = None
        xin, ysel = x, y
    else:
        grid = ht.SpatialGrid(comm, (0, 0))
        model = ht.parallelize(model, grid, size, backend=args.backend)
        xin = x[grid.local_slices(size)].contiguous()
        ysel = y[model.shuffle.samples(args.batch)]
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for step in range(args.warmup + args.steps):
        comm.barrier()
        t0 = time.perf_counter()
        out = model(xin)
        loss = F.cross_entropy(out, ysel, reduction="sum") / args.batch
        opt.zero_grad()
        loss.backward()
        if grid is not None:
            ht.sync_grads(model, comm)
        opt.step()
        dt = comm.allreduce(time.perf_counter() - t0, op="max")
        if step >= args.warmup:
            times.append(dt)
    if comm.rank == 0:
        what = "torch alone" if args.serial else "halox + torch"
        split = "1x1" if grid is None else f"{grid.parts[0]}x{grid.parts[1]}"
        print(f"| {what} | {comm.size} | {split} | {args.batch} | {args.size}x{args.size} | "
              f"{1e3 * np.median(times):.1f} | {1e3 * np.percentile(times, 90):.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
