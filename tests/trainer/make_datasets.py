#!/usr/bin/env python3
"""Writes small MNIST (idx) and CIFAR-10 (binary) files for the trainer's loader tests.

Each image shows a bright square whose position depends on its class, on a noisy background,
so a model trained on them must read images and labels in step to learn them.
"""
import os
import random
import struct
import sys


def image(label, channels, size, rng):
    px = []
    row, col = 2 + (label // 4) * (size // 3), 2 + (label % 4) * (size // 5)
    for c in range(channels):
        for h in range(size):
            for w in range(size):
                on = row <= h < row + 6 and col <= w < col + 5
                v = (200 if on else 30) + rng.randint(-25, 25) + 10 * c
                px.append(max(0, min(255, v)))
    return bytes(px)


def mnist(folder, prefix, n, rng):
    labels = [rng.randrange(10) for _ in range(n)]
    with open(os.path.join(folder, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28))
        for l in labels:
            f.write(image(l, 1, 28, rng))
    with open(os.path.join(folder, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(struct.pack(">II", 0x801, n))
        f.write(bytes(labels))


def cifar(folder, name, n, rng):
    with open(os.path.join(folder, name), "wb") as f:
        for _ in range(n):
            l = rng.randrange(10)
            f.write(bytes([l]) + image(l, 3, 32, rng))


def main():
    root = sys.argv[1]
    rng = random.Random(7)
    os.makedirs(os.path.join(root, "mnist"), exist_ok=True)
    os.makedirs(os.path.join(root, "cifar"), exist_ok=True)
    mnist(os.path.join(root, "mnist"), "train", 200, rng)
    mnist(os.path.join(root, "mnist"), "t10k", 40, rng)
    cifar(os.path.join(root, "cifar"), "data_batch_1.bin", 24, rng)
    cifar(os.path.join(root, "cifar"), "data_batch_2.bin", 16, rng)
    cifar(os.path.join(root, "cifar"), "test_batch.bin", 16, rng)
    # A file that is not a dataset, for the error test.
    with open(os.path.join(root, "not-mnist"), "wb") as f:
        f.write(b"\x1f\x8b" + bytes(30))


if __name__ == "__main__":
    main()
