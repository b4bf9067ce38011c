#!/usr/bin/env python3
"""halox-train against PyTorch: from the same weights, momentum and batch, the same losses.

  check-torch.py --train EXE --model FILE [--dtype float32|float64] [--rtol R] [--steps S]
                 -- MPIEXEC -n P [launcher options]

1. Writes 32 MNIST-format training images (make_datasets.py's).
2. halox-train trains one step on them (one batch of all 32) and checkpoints: the weights and
   momentum after that step, drawn from its seed.
3. halox-train resumes from the checkpoint for S more steps, logging each step's loss.
4. The same network in PyTorch (examples/cnn-trainer/bench/torch_model.py) loads the
   checkpoint's weights and momentum and trains the same batch S steps with the same SGD
   (momentum, weight decay on the conv and fc weights only).
5. Every step's loss must agree within rtol; so each step's forward, backward and optimizer
   update are checked, not only the first loss.

PyTorch draws other dropout masks, so a model with dropout runs with --without-dropout: both
sides then train a copy of the model file without its dropout layers. Exit status 0 when the
losses agree.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "examples", "cnn-trainer", "bench"))
import make_datasets  # noqa: E402
from torch_model import Net  # noqa: E402

MEAN, STD = 0.1307, 0.3081  # halox-train's MNIST normalisation
LR, MOMENTUM, DECAY = 0.05, 0.9, 5e-4
BATCH = 32


def read_checkpoint(path):
    """{name: (shape, values, velocity or None)} of a halox-train checkpoint."""
    import numpy as np

    b = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, b, pos)
        pos += struct.calcsize(fmt)
        return v

    def text():
        (n,) = take("<I")
        nonlocal pos
        pos += n
        return b[pos - n:pos].decode()

    # Format 2 (docs/files.md): magic, version, payload length, CRC-32C, then the payload that
    # format 1 had right after its magic.
    assert b[:8] in (b"HXTRAIN\0", b"HXTRAIN1"), f"{path} is not a halox-train checkpoint"
    pos = 8
    if b[:8] == b"HXTRAIN\0":
        version, length, _crc = take("<IQI")
        assert version == 2 and length == len(b) - 24, f"{path}: format {version}, {length} bytes"
    text()  # model family
    (size,) = take("<I")
    dt = np.float32 if size == 4 else np.float64
    take("<q")  # step
    (count,) = take("<I")
    out = {}
    for _ in range(count):
        name = text()
        (nd,) = take("<I")
        shape = take(f"<{nd}q")
        n = int(np.prod(shape)) if nd else 1
        values = np.frombuffer(b, dt, n, pos).reshape(shape)
        pos += n * size
        (trainable,) = take("<B")
        velocity = None
        if trainable:
            velocity = np.frombuffer(b, dt, n, pos).reshape(shape)
            pos += n * size
        out[name] = (shape, values, velocity)
    return out


def mnist_batch(folder, dtype):
    """The training images and labels as halox-train reads them."""
    import numpy as np

    raw = open(os.path.join(folder, "train-images-idx3-ubyte"), "rb").read()
    n, rows, cols = struct.unpack_from(">III", raw, 4)
    px = np.frombuffer(raw, np.uint8, n * rows * cols, 16).reshape(n, 1, rows, cols)
    # halox-train converts through a table of float values, also for float64 models.
    x = ((px.astype(np.float64) / 255.0 - MEAN) / STD).astype(np.float32).astype(dtype)
    lab = open(os.path.join(folder, "train-labels-idx1-ubyte"), "rb").read()
    y = np.frombuffer(lab, np.uint8, n, 8).astype(np.int64)
    return x, y


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="the halox-train executable")
    ap.add_argument("--model", required=True, help="a model file")
    ap.add_argument("--without-dropout", action="store_true",
                    help="leave the model's dropout layers out (on both sides)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("launcher", nargs="+", help="the MPI launcher and its options, after --")
    a = ap.parse_args()

    import numpy as np
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = a.model
        if a.without_dropout:
            model = os.path.join(tmp, os.path.basename(a.model))
            with open(model, "w") as f:
                f.writelines(l for l in open(a.model) if l.split("#")[0].split()[:1] != ["dropout"])
        data = os.path.join(tmp, "mnist")
        os.mkdir(data)
        rng = random.Random(7)
        make_datasets.mnist(data, "train", BATCH, rng)
        make_datasets.mnist(data, "t10k", 8, rng)
        ckpt, log = os.path.join(tmp, "step1.ckpt"), os.path.join(tmp, "log.json")
        common = [a.train, "--model", model, "--dtype", a.dtype, "--dataset", "mnist:" + data,
                  "--train-size", str(BATCH), "--batch", str(BATCH), "--no-eval",
                  "--lr", str(LR), "--momentum", str(MOMENTUM), "--weight-decay", str(DECAY),
                  "--print-every", "1000"]
        for extra in (["--steps", "1", "--checkpoint", ckpt],
                      ["--steps", str(1 + a.steps), "--resume", ckpt, "--log-json", log]):
            r = subprocess.run(a.launcher + common + extra, capture_output=True, text=True,
                               timeout=240)
            if r.returncode != 0:
                print(r.stdout, r.stderr, sep="\n")
                print(f"halox-train failed (exit status {r.returncode})")
                return 1
        halox = [json.loads(line)["loss"] for line in open(log)]
        params = read_checkpoint(ckpt)
        dtype = np.float32 if a.dtype == "float32" else np.float64
        x, y = mnist_batch(data, dtype)
        tdtype = torch.float32 if a.dtype == "float32" else torch.float64
        net = Net(model, tdtype)

    missing = sorted(set(net.params) ^ set(params))
    if missing:
        print(f"parameters not on both sides: {missing}")
        return 1
    opt = torch.optim.SGD([{"params": net.decayed, "weight_decay": DECAY},
                           {"params": net.undecayed, "weight_decay": 0.0}],
                          lr=LR, momentum=MOMENTUM)
    with torch.no_grad():
        for name, t in net.params.items():
            t.copy_(torch.from_numpy(params[name][1].copy()))
            v = params[name][2]
            if v is not None:
                opt.state[t]["momentum_buffer"] = torch.from_numpy(v.copy())
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    torch_losses = []
    for _ in range(a.steps):
        opt.zero_grad()
        loss = F.cross_entropy(net.forward(xt), yt)
        loss.backward()
        opt.step()
        torch_losses.append(loss.item())

    worst = 0.0
    print("step  halox-train        PyTorch            relative difference")
    for s, (h, t) in enumerate(zip(halox, torch_losses), start=2):
        d = abs(h - t) / abs(t)
        worst = max(worst, d)
        print(f"{s:4d}  {h:.15g}  {t:.15g}  {d:.2e}")
    if len(halox) != a.steps:
        print(f"halox-train logged {len(halox)} steps, expected {a.steps}")
        return 1
    ok = worst <= a.rtol
    print(f"max relative difference {worst:.2e} (rtol {a.rtol:g}): {'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
