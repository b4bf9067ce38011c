#!/usr/bin/env python3
"""Time and memory of one training step (forward, backward, gradient sum, SGD step) of a CNN,
spatially parallel with halox.torch on every process of the job, or (--serial) plain torch on
one process with --threads threads. Prints one JSON line (rank 0): the median over --steps
steps of the slowest process's time after --warmup untimed steps (the first step builds the
plans), and the growth of the peak resident memory per process from just before the first
step (model, optimiser and data already built) to the end: the step's own memory
(activations, gradients, halo buffers, workspaces), without the interpreter's, torch's or
MPI's fixed costs.

    mpiexec -n 2 python3 bench/python/train_step.py --size 128 --batch 8
    python3 bench/python/train_step.py --serial --threads 2 --size 128 --batch 8

bench/python/run-train-step interleaves these runs and prints the ratios.
"""

import argparse
import json
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "examples", "python"))


def cnn5(width=16, classes=10):
    """5 conv + batch norm + ReLU, 2 max pools, a global average pool and a linear layer."""
    w = width
    blocks = []
    for cin, cout in [(1, w), (w, w), (w, 2 * w), (2 * w, 2 * w), (2 * w, 4 * w)]:
        blocks += [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]
    layers = blocks[:6] + [nn.MaxPool2d(2)] + blocks[6:12] + [nn.MaxPool2d(2)] + blocks[12:]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, classes))


def peak_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--serial", action="store_true", help="plain torch on this process only")
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--model", choices=["cnn5", "example"], default="cnn5",
                   help="cnn5: 5 conv+BN+ReLU blocks (default); example: "
                        "examples/python/train_spatial.py's model")
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--width", type=int, default=16, help="channels of the first conv")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--backend", default="mpi_pack")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import halox
    import halox.torch as ht
    comm = halox.comm_world()
    size = (args.size, args.size)
    torch.manual_seed(0)
    x = torch.randn(args.batch, 1, *size)
    y = torch.randint(0, 10, (args.batch,))
    if args.model == "cnn5":
        model = cnn5(args.width)
    else:
        from train_spatial import build_model
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
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    base = peak_bytes()
    for step in range(args.warmup + args.steps):
        comm.barrier()
        t0 = time.perf_counter()
        out = model(xin)
        loss = F.cross_entropy(out, ysel, reduction="sum") / args.batch
        opt.zero_grad()
        loss.backward()
        if grid is not None:
            ht.sync_grads(model, grid)
        opt.step()
        dt = comm.allreduce(time.perf_counter() - t0, op="max")
        if step >= args.warmup:
            times.append(dt)
        del out, loss
    grown = comm.allreduce(peak_bytes() - base, op="max")
    if comm.rank == 0:
        print(json.dumps({
            "run": "torch" if args.serial else "halox.torch", "processes": comm.size,
            "threads": args.threads, "model": args.model, "batch": args.batch,
            "size": args.size, "split": "1x1" if grid is None else
            f"{grid.parts[0]}x{grid.parts[1]}", "median_ms": 1e3 * float(np.median(times)),
            "p90_ms": 1e3 * float(np.percentile(times, 90)), "peak_growth_bytes": int(grown)}),
            flush=True)


if __name__ == "__main__":
    main()
