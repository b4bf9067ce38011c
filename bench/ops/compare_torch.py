#!/usr/bin/env python3
"""halox's local convolution, batch-norm, ReLU, pooling and LRN kernels against PyTorch's, on the
same shapes.

Runs halox-bench-local (one process per provider) and times the same layers in PyTorch
(torch.nn.functional.conv2d / conv3d, forward then backward through autograd: dx, dw and db),
with the same number of threads. The memory-bound layers (bn*, relu*, maxpool*, avgpool*, lrn*:
F.batch_norm in training mode with gamma and beta, F.relu, F.max_pool / F.avg_pool with window 3,
stride 2, padding 1, F.local_response_norm) get a table of their own with fwd and fwd+bwd ratios
and one line per kind:

    geomean <kind> halox <provider>/torch time: fwd F, fwd+bwd B

Prints markdown tables of times in ms and, as its last line, the geometric mean over the
convolution shapes of halox/torch time for the first provider:

    geomean halox/torch time: X

Usage:
    OMP_NUM_THREADS=1 python3 bench/ops/compare_torch.py --exe build/bench/ops/halox-bench-local \
        --threads 1 [--providers onednn,reference] [--shapes all|2d|3d] [--iters 3]
"""
import argparse
import math
import os
import statistics
import subprocess
import sys
import time


def parse_name(name):
    # e.g. 2d_3x3s2_64-128_56 -> dims 2, kernel 3, stride 2, cin 64, cout 128, extent "56"
    parts = name.split("_")
    nsp = int(parts[0][0])
    win = parts[-3]
    stride = 1
    if "s" in win:
        win, s = win.split("s")
        stride = int(s)
    k = int(win.split("x")[0])
    cin, cout = (int(v) for v in parts[-2].split("-"))
    ext = [int(v) for v in parts[-1].split("x")]
    if len(ext) == 1:
        ext = ext * nsp
    return nsp, k, stride, cin, cout, ext


def time_fwd_bwd(run, params, g, iters, warmup):
    """Median ms of run() (the forward) and of run() then backward of a random dy (forward +
    backward through autograd), with the gradients of `params` cleared before each round."""
    import torch

    with torch.no_grad():
        y = run()
    dy = torch.rand(y.shape, generator=g) * 2 - 1
    fwd, tot = [], []
    for it in range(warmup + iters):
        for p in params:
            p.grad = None
        t0 = time.perf_counter()
        y = run()
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        if it >= warmup:
            fwd.append((t1 - t0) * 1e3)
            tot.append((t2 - t0) * 1e3)
    return statistics.median(fwd), statistics.median(tot)


def torch_times(name, batch, iters, warmup):
    import torch
    import torch.nn.functional as F

    nsp, k, stride, cin, cout, ext = parse_name(name)
    pad = k // 2
    conv = F.conv2d if nsp == 2 else F.conv3d
    g = torch.Generator().manual_seed(0)
    x = (torch.rand([batch, cin] + ext, generator=g) * 2 - 1).requires_grad_(True)
    w = (torch.rand([cout, cin] + [k] * nsp, generator=g) * 2 - 1).requires_grad_(True)
    b = (torch.rand([cout], generator=g) * 2 - 1).requires_grad_(True)
    return time_fwd_bwd(lambda: conv(x, w, b, stride, pad), (x, w, b), g, iters, warmup)


KINDS = ("lrn", "bn", "relu", "maxpool", "avgpool")


def kind_of(name):
    """The layer kind of a memory-bound shape name (bn2d_1_64_56 -> bn), or None for a conv."""
    for k in KINDS:
        if name.startswith(k) and name[len(k)].isdigit():
            return k
    return None


def parse_layer(name):
    # e.g. maxpool2d_3s2_64_112 -> kind, dims 2, window "3s2", channels 64, extent [112, 112]
    kind = kind_of(name)
    head, win, c, ext = name.split("_")
    nsp = int(head[len(kind)])
    ext = [int(v) for v in ext.split("x")]
    return kind, nsp, win, int(c), ext * nsp if len(ext) == 1 else ext


def torch_layer_times(name, batch, iters, warmup):
    """BN (training mode, with affine parameters), ReLU, 3-wide stride-2 pooling with padding 1,
    or LRN (AlexNet's alpha 1e-4, beta 0.75, k 2; window size from the name), as
    halox-bench-local runs them."""
    import torch
    import torch.nn.functional as F

    kind, nsp, win, c, ext = parse_layer(name)
    g = torch.Generator().manual_seed(0)
    x = (torch.rand([batch, c] + ext, generator=g) * 2 - 1).requires_grad_(True)
    gamma = torch.full([c], 1.5, requires_grad=True)
    beta = torch.full([c], 0.25, requires_grad=True)
    rm, rv = torch.zeros(c), torch.ones(c)
    maxp = F.max_pool2d if nsp == 2 else F.max_pool3d
    avgp = F.avg_pool2d if nsp == 2 else F.avg_pool3d

    def run():
        if kind == "lrn":
            return F.local_response_norm(x, int(win), alpha=1e-4, beta=0.75, k=2.0)
        if kind == "bn":
            return F.batch_norm(x, rm, rv, gamma, beta, training=True, momentum=0.1, eps=1e-5)
        if kind == "relu":
            return F.relu(x)
        return (maxp if kind == "maxpool" else avgp)(x, 3, 2, 1)

    return time_fwd_bwd(run, (x, gamma, beta), g, iters, warmup)


def halox_times(exe, provider, shapes, iters, warmup, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([exe, "--provider", provider, "--shapes", shapes, "--iters", str(iters),
                          "--warmup", str(warmup)], env=env, check=True, capture_output=True,
                         text=True).stdout
    r = {}
    for line in out.splitlines():
        f = line.split()
        if f and f[0] == "shape":
            vals = dict(zip(f[2::2], (float(v) for v in f[3::2])))
            r[f[1]] = vals
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--exe", required=True, help="path of halox-bench-local")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    ap.add_argument("--providers", default="onednn", help="comma-separated; the first is summarised")
    ap.add_argument("--shapes", default="all")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    a = ap.parse_args()

    import torch
    torch.set_num_threads(a.threads)
    provs = a.providers.split(",")
    # The shape list comes from the tool; each shape is then timed in halox and in torch right
    # after each other, so that both see the same load on a shared machine.
    all_names = list(halox_times(a.exe, provs[0], a.shapes, 0, 0, a.threads).keys())
    names = [n for n in all_names if kind_of(n) is None]
    lrn_names = [n for n in all_names if kind_of(n) is not None]
    print(f"threads {a.threads}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
          f"median of {a.iters} after {a.warmup} warm-up; times in ms, fwd+bwd = forward + "
          "dx + dw + db")
    print()
    head = "| shape | torch fwd | torch fwd+bwd |"
    sep = "|---|---|---|"
    for p in provs:
        head += f" halox {p} fwd | halox {p} fwd+bwd | {p}/torch |"
        sep += "---|---|---|"
    if names:
        print(head)
        print(sep)
    ratios = {p: [] for p in provs}
    for n in names:
        batch = 4 if n.startswith("2d") else 2
        hal = {p: halox_times(a.exe, p, n, a.iters, a.warmup, a.threads)[n] for p in provs}
        tf, tt = torch_times(n, batch, a.iters, a.warmup)
        row = f"| {n} | {tf:.2f} | {tt:.2f} |"
        for p in provs:
            h = hal[p]
            ratios[p].append(h["total"] / tt)
            row += f" {h['fwd']:.2f} | {h['total']:.2f} | {h['total'] / tt:.2f} |"
        print(row, flush=True)
    if lrn_names:
        print()
        head = "| layer shape | torch fwd | torch fwd+bwd |"
        sep = "|---|---|---|"
        for p in provs:
            head += f" halox {p} fwd | halox {p} fwd+bwd | {p}/torch fwd | {p}/torch fwd+bwd |"
            sep += "---|---|---|---|"
        print(head)
        print(sep)
        lrn_ratios = {(p, k): ([], []) for p in provs for k in KINDS}
        for n in lrn_names:
            batch = 4 if parse_layer(n)[1] == 2 else 2
            hal = {p: halox_times(a.exe, p, n, a.iters, a.warmup, a.threads)[n] for p in provs}
            tf, tt = torch_layer_times(n, batch, a.iters, a.warmup)
            row = f"| {n} | {tf:.2f} | {tt:.2f} |"
            for p in provs:
                h = hal[p]
                lrn_ratios[(p, kind_of(n))][0].append(h["fwd"] / tf)
                lrn_ratios[(p, kind_of(n))][1].append(h["total"] / tt)
                row += (f" {h['fwd']:.2f} | {h['total']:.2f} | {h['fwd'] / tf:.2f} |"
                        f" {h['total'] / tt:.2f} |")
            print(row, flush=True)
        print()
        gm = lambda v: math.exp(sum(map(math.log, v)) / len(v))
        for p in provs:
            for k in KINDS:
                f, t = lrn_ratios[(p, k)]
                if f:
                    print(f"geomean {k} halox {p}/torch time: fwd {gm(f):.3f}, fwd+bwd {gm(t):.3f}")
    if not names:
        return 0
    print()
    for p in provs[1:]:
        print(f"geomean halox {p}/torch time: "
              f"{math.exp(sum(map(math.log, ratios[p])) / len(ratios[p])):.3f}")
    p = provs[0]
    print(f"geomean halox/torch time: {math.exp(sum(map(math.log, ratios[p])) / len(ratios[p])):.3f}")


if __name__ == "__main__":
    sys.exit(main())
