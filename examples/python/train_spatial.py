#!/usr/bin/env python3
"""Spatially parallel training of a small CNN with halox.torch.

Every process holds the whole mini-batch but only its block of each image (the image is split
over a grid of processes); convolutions, pooling and batch norm exchange the cells their
windows need with halox halo plans, and the classifier head runs sample-parallel after a
halox redistribution. The parallel model computes what the same model would on one process.

    mpiexec -n 4 python3 examples/python/train_spatial.py                  # synthetic data
    mpiexec -n 4 python3 examples/python/train_spatial.py --data ~/mnist   # MNIST idx files

With --data, the folder holds MNIST's train-images-idx3-ubyte and train-labels-idx1-ubyte
(optionally gzipped, as downloaded); the last 10,000 images are held out for evaluation.
Without it, the script makes a learnable synthetic set: each class is a bright blob at its own
place in the image, with noise. halox must be importable: `pip install .` from the
repository, or PYTHONPATH=<build>/python. It runs on any MPI halox was built for; mpi4py is not
needed.
"""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import halox
import halox.torch as ht


def build_model(size, classes=10, channels=1, width=8):
    """The serial model; halox.torch.parallelize makes the spatially parallel copy."""
    h, w = size
    return nn.Sequential(
        nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * (h // 4) * (w // 4), classes))


def synthetic(n, size, classes, seed):
    """n images of `size`: class c is a Gaussian blob centred at its own place, plus noise."""
    rng = np.random.default_rng(seed)
    h, w = size
    labels = rng.integers(0, classes, n)
    yy, xx = np.mgrid[0:h, 0:w]
    angle = 2 * np.pi * np.arange(classes) / classes
    cy = h / 2 + 0.3 * h * np.sin(angle)
    cx = w / 2 + 0.3 * w * np.cos(angle)
    sigma = max(h, w) / 10
    blobs = np.exp(-((yy[None] - cy[:, None, None]) ** 2 + (xx[None] - cx[:, None, None]) ** 2)
                   / (2 * sigma ** 2))
    images = blobs[labels] + 0.8 * rng.standard_normal((n, h, w))
    return images[:, None].astype(np.float32), labels.astype(np.int64)


def read_idx(path):
    """An MNIST idx file (plain or gzipped) as a NumPy array."""
    for p in (path, path + ".gz"):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                data = f.read()
            break
    else:
        raise FileNotFoundError(f"{path} (or {path}.gz) not found; download MNIST's idx files "
                                "into the --data folder")
    zero, kind, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or kind != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte idx file")
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load(args):
    if args.data:
        images = read_idx(os.path.join(args.data, "train-images-idx3-ubyte"))
        labels = read_idx(os.path.join(args.data, "train-labels-idx1-ubyte")).astype(np.int64)
        x = ((images.astype(np.float32) / 255.0 - 0.1307) / 0.3081)[:, None]
        n_train = min(args.train, len(x) - 10000)
        return (x[:n_train], labels[:n_train]), (x[-10000:][:args.test], labels[-10000:][:args.test])
    size = (args.size, args.size)
    return (synthetic(args.train, size, 10, args.seed),
            synthetic(args.test, size, 10, args.seed + 1))


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="folder with MNIST idx files (default: synthetic data)")
    p.add_argument("--parts", default="0,0",
                   help="processes along H,W (0: chosen from the process count)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--train", type=int, default=1000, help="training images")
    p.add_argument("--test", type=int, default=500, help="evaluation images")
    p.add_argument("--size", type=int, default=32, help="synthetic image size")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    return p.parse_args()


def run_epoch(model, grid, size, x, y, batch, opt=None):
    """One pass over (x, y); trains when `opt` is given. Returns (mean loss, accuracy)."""
    comm = grid.comm
    total_loss = 0.0
    correct = 0
    for start in range(0, len(x), batch):
        xb = torch.from_numpy(x[start:start + batch])
        yb = torch.from_numpy(y[start:start + batch])
        n = len(xb)  # the last mini-batch may be smaller, even smaller than the process count
        out = model(xb[grid.local_slices(size)])
        rows = model.shuffle.samples(n)
        # This process's share of the mini-batch's mean loss: the shares add up to it.
        loss = F.cross_entropy(out, yb[rows], reduction="sum") / n
        if opt is not None:
            opt.zero_grad()
            loss.backward()
            ht.sync_grads(model, comm)
            opt.step()
        total_loss += loss.item() * n
        correct += int((out.argmax(1) == yb[rows]).sum())
    total_loss = comm.allreduce(total_loss)
    correct = comm.allreduce(correct)
    return total_loss / len(x), correct / len(x)


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    comm = halox.comm_world()  # or mpi4py's MPI.COMM_WORLD, where mpi4py runs on halox's MPI
    (xtr, ytr), (xte, yte) = load(args)
    size = tuple(xtr.shape[2:])
    grid = ht.SpatialGrid(comm, [int(v) for v in args.parts.split(",")])
    torch.manual_seed(args.seed)
    model = ht.parallelize(build_model(size), grid, size)
    ht.sync_params(model, comm)  # one starting point everywhere, whatever the seeds did
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ht.print(f"{comm.size} process(es), image {size[0]}x{size[1]} split "
             f"{grid.parts[0]}x{grid.parts[1]}, {len(xtr)} training / {len(xte)} evaluation "
             f"images ({'MNIST' if args.data else 'synthetic'}), batch {args.batch}")
    for epoch in range(args.epochs):
        model.train()
        t0 = time.perf_counter()
        loss, acc = run_epoch(model, grid, size, xtr, ytr, args.batch, opt)
        dt = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            _, test_acc = run_epoch(model, grid, size, xte, yte, args.batch)
        ht.print(f"epoch {epoch + 1}: loss {loss:.4f}, train accuracy {acc:.3f}, "
                 f"evaluation accuracy {test_acc:.3f}, {dt:.1f} s")


if __name__ == "__main__":
    try:
        main()
    except halox.Error as e:
        # One rank's failure can leave others waiting for it in a later collective step (see
        # "After an error" in the README): report it here, give the peers a moment to report
        # theirs (peer_failed, naming this rank), then end the whole job.
        print(f"[rank {halox.comm_world().rank}] train_spatial.py: {e}", file=sys.stderr, flush=True)
        time.sleep(1.0)
        halox.comm_world().abort(1)
