#!/usr/bin/env python3
"""Checks halox's reference operators against torch.nn.functional (and nn.LocalResponseNorm).

For every configuration (and for float64 and float32) this script draws random inputs with a
fixed seed, writes them for halox-ops-ref, runs it, and compares the forward result and every
gradient with PyTorch computed in float64 with autograd. Nothing is stored between runs.

Tolerances, as max|halox - torch| <= tol * max(1, max|torch|) per array:
  float64: 1e-10. Both sides compute in double; they differ only by summation order, which
           moves results by a few ulps times the number of terms (~1e-14 here).
  float32: 1e-4. halox computes in float (eps 1.2e-7) and accumulates up to ~10^3 products per
           output in float (GEMM) before widening; the worst case over every array stays below
           ~1e-5. Inputs are rounded to float first, so both sides see the same values (and
           max pooling picks the same winners).

Usage: compare_torch.py --exe PATH/halox-ops-ref [--filter SUBSTRING] [--keep DIR]
Prints one line per configuration and finally exactly "N passed, M failed"; exits 1 on failure.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

SEED = 20240611
TOL = {"float64": 1e-10, "float32": 1e-4}


# ---- configurations --------------------------------------------------------------------------

def conv(name, n, cin, cout, size, k, s=1, pad=0, pad_hi=None, d=1, bias=True):
    nsp = len(size)
    per = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * nsp
    return dict(op="conv", name=name, x_shape=[n, cin] + list(size), w_shape=[cout, cin] + per(k),
                stride=per(s), pad_lo=per(pad), pad_hi=per(pad if pad_hi is None else pad_hi),
                dilation=per(d), bias=bias)


def pool(name, kind, n, c, size, k, s=None, pad=0, pad_hi=None, d=1, include_pad=True):
    nsp = len(size)
    per = lambda v: list(v) if isinstance(v, (list, tuple)) else [v] * nsp
    return dict(op="pool", name=name, kind=kind, x_shape=[n, c] + list(size), kernel=per(k),
                stride=per(k if s is None else s), pad_lo=per(pad),
                pad_hi=per(pad if pad_hi is None else pad_hi), dilation=per(d),
                count_include_pad=include_pad)


def bn(name, shape, training, momentum=0.1, eps=1e-5):
    return dict(op="bn", name=name, x_shape=list(shape), training=training, momentum=momentum,
                eps=eps)


def lrn(name, shape, size, alpha=1e-4, beta=0.75, k=1.0):
    return dict(op="lrn", name=name, x_shape=list(shape), size=size, alpha=alpha, beta=beta, k=k)


CONFIGS = [
    conv("conv2d_same_3x3", 2, 3, 4, (9, 10), 3, pad=1),
    conv("conv2d_valid_3x3_nobias", 2, 3, 5, (8, 7), 3, bias=False),
    conv("conv2d_stride2_same_3x3", 2, 4, 6, (11, 12), 3, s=2, pad=1),
    conv("conv2d_even_4x4_asym_pad", 2, 3, 4, (9, 8), 4, pad=(1, 2), pad_hi=(2, 1)),
    conv("conv2d_even_2x2_stride2_valid", 1, 3, 5, (8, 9), 2, s=2),
    conv("conv2d_dilation2_same", 2, 3, 4, (12, 11), 3, pad=2, d=2),
    conv("conv2d_dil_stride_asym_nobias", 2, 2, 3, (13, 10), (3, 2), s=(2, 1), pad=(0, 1),
         pad_hi=(2, 0), d=(2, 3), bias=False),
    conv("conv2d_1x1_stride2", 2, 6, 4, (7, 7), 1, s=2),
    conv("conv2d_7x7_stride2_pad3_stem", 1, 3, 8, (20, 18), 7, s=2, pad=3, bias=False),
    conv("conv3d_same_3x3x3", 2, 3, 4, (6, 7, 5), 3, pad=1),
    conv("conv3d_even_stride_asym", 1, 2, 3, (7, 8, 6), (2, 4, 3), s=(2, 1, 2), pad=(0, 1, 1),
         pad_hi=(1, 2, 0)),
    conv("conv3d_dilation2_valid_nobias", 1, 2, 3, (7, 7, 7), 3, d=2, bias=False),
    pool("maxpool2d_2x2_stride2", "max", 2, 3, (8, 9), 2),
    pool("maxpool2d_3x3_stride2_pad1", "max", 2, 3, (11, 12), 3, s=2, pad=1),
    pool("maxpool2d_dilation2", "max", 2, 2, (10, 9), 3, s=1, pad=1, d=2),
    pool("maxpool2d_asym_pad", "max", 2, 2, (9, 8), 3, s=2, pad=(1, 0), pad_hi=(0, 1)),
    pool("maxpool2d_global_7x7", "max", 2, 8, (7, 7), 7),
    pool("avgpool2d_3x3_stride1_pad1_incl", "avg", 2, 3, (8, 7), 3, s=1, pad=1),
    pool("avgpool2d_3x3_stride2_pad1_excl", "avg", 2, 3, (9, 8), 3, s=2, pad=1,
         include_pad=False),
    pool("avgpool2d_global_7x7", "avg", 2, 8, (7, 7), 7),
    pool("avgpool2d_asym_pad_incl", "avg", 2, 2, (9, 8), (3, 2), s=2, pad=(1, 0),
         pad_hi=(0, 1)),
    pool("maxpool3d_3x3x3_stride2_pad1", "max", 2, 2, (7, 8, 6), 3, s=2, pad=1),
    pool("avgpool3d_2x2x2_stride2", "avg", 2, 2, (6, 8, 4), 2),
    pool("avgpool3d_3x3x3_pad1_excl", "avg", 1, 3, (5, 6, 5), 3, s=1, pad=1, include_pad=False),
    bn("batchnorm2d_train", (4, 3, 5, 6), True),
    bn("batchnorm2d_eval", (4, 3, 5, 6), False),
    bn("batchnorm3d_train", (2, 4, 3, 4, 5), True, momentum=0.3, eps=1e-3),
    bn("batchnorm3d_eval", (2, 4, 3, 4, 5), False, eps=1e-3),
    dict(op="relu", name="relu2d", x_shape=[2, 3, 5, 6]),
    dict(op="relu", name="relu3d", x_shape=[2, 2, 3, 4, 5]),
    lrn("lrn2d_size5_alexnet", (2, 7, 5, 6), 5, alpha=1e-4, beta=0.75, k=2.0),
    lrn("lrn2d_size3_strong", (2, 6, 4, 5), 3, alpha=0.9, beta=0.6, k=1.0),
    lrn("lrn2d_size4_even", (2, 7, 4, 3), 4, alpha=0.5, beta=0.75, k=1.5),
    lrn("lrn2d_size1", (1, 3, 4, 4), 1, alpha=2.0, beta=1.0, k=1.0),
    lrn("lrn2d_size_wider_than_c", (2, 3, 3, 4), 8, alpha=0.7, beta=0.75, k=1.0),
    lrn("lrn3d_size5", (2, 6, 3, 4, 5), 5, alpha=0.3, beta=0.75, k=1.0),
    lrn("lrn3d_size2_even", (1, 5, 2, 3, 4), 2, alpha=1.0, beta=0.5, k=2.0),
]


# ---- PyTorch references (float64, autograd) ---------------------------------------------------

def torch_pads(lo, hi):
    """F.pad's order: last dimension first, (low, high) per dimension."""
    out = []
    for a, b in zip(reversed(lo), reversed(hi)):
        out += [a, b]
    return out


def run_torch(cfg, inputs, dy_gen):
    """Forward and backward in float64; dy is drawn once the output shape is known."""
    nsp = len(cfg["x_shape"]) - 2
    x = inputs["x"].clone().requires_grad_()
    leaves = {"dx": x}
    if cfg["op"] == "conv":
        w = inputs["w"].clone().requires_grad_()
        leaves["dw"] = w
        b = None
        if cfg["bias"]:
            b = inputs["b"].clone().requires_grad_()
            leaves["db"] = b
        f = F.conv2d if nsp == 2 else F.conv3d
        y = f(F.pad(x, torch_pads(cfg["pad_lo"], cfg["pad_hi"])), w, b, stride=cfg["stride"],
              dilation=cfg["dilation"])
        extra = {}
    elif cfg["op"] == "pool":
        symmetric = cfg["pad_lo"] == cfg["pad_hi"]
        if cfg["kind"] == "max":
            f = F.max_pool2d if nsp == 2 else F.max_pool3d
            if symmetric:
                y = f(x, cfg["kernel"], cfg["stride"], cfg["pad_lo"], cfg["dilation"])
            else:  # padding never wins a max: pad with -inf explicitly
                xp = F.pad(x, torch_pads(cfg["pad_lo"], cfg["pad_hi"]), value=float("-inf"))
                y = f(xp, cfg["kernel"], cfg["stride"], 0, cfg["dilation"])
        else:
            f = F.avg_pool2d if nsp == 2 else F.avg_pool3d
            if symmetric:
                y = f(x, cfg["kernel"], cfg["stride"], cfg["pad_lo"],
                      count_include_pad=cfg["count_include_pad"])
            else:  # zero padding counted in the divisor: explicit zeros give exactly that
                assert cfg["count_include_pad"]
                xp = F.pad(x, torch_pads(cfg["pad_lo"], cfg["pad_hi"]))
                y = f(xp, cfg["kernel"], cfg["stride"], 0)
        extra = {}
    elif cfg["op"] == "bn":
        gamma = inputs["gamma"].clone().requires_grad_()
        beta = inputs["beta"].clone().requires_grad_()
        leaves["dgamma"], leaves["dbeta"] = gamma, beta
        rm, rv = inputs["running_mean"].clone(), inputs["running_var"].clone()
        y = F.batch_norm(x, rm, rv, gamma, beta, training=cfg["training"],
                         momentum=cfg["momentum"], eps=cfg["eps"])
        extra = {"running_mean_out": rm, "running_var_out": rv}
    elif cfg["op"] == "lrn":
        y = F.local_response_norm(x, cfg["size"], alpha=cfg["alpha"], beta=cfg["beta"],
                                  k=cfg["k"])
        extra = {}
    else:
        y = F.relu(x)
        extra = {}
    dy = dy_gen(tuple(y.shape))
    y.backward(dy)
    out = {"y": y.detach()}
    out.update({k: v.grad.detach() for k, v in leaves.items()})
    out.update(extra)
    return out, dy


# ---- one configuration ------------------------------------------------------------------------

def write_request(path, cfg, dtype):
    lines = [f"op {cfg['op']}", f"dtype {dtype}", "x_shape " + " ".join(map(str, cfg["x_shape"]))]
    if cfg["op"] == "conv":
        lines.append("w_shape " + " ".join(map(str, cfg["w_shape"])))
        lines.append(f"bias {int(cfg['bias'])}")
    if cfg["op"] == "pool":
        lines.append(f"kind {cfg['kind']}")
        lines.append(f"count_include_pad {int(cfg['count_include_pad'])}")
    for key in ("kernel", "stride", "pad_lo", "pad_hi", "dilation"):
        if key in cfg:
            lines.append(f"{key} " + " ".join(map(str, cfg[key])))
    if cfg["op"] == "bn":
        lines += [f"training {int(cfg['training'])}", f"eps {cfg['eps']!r}",
                  f"momentum {cfg['momentum']!r}"]
    if cfg["op"] == "lrn":
        lines += [f"size {cfg['size']}", f"alpha {cfg['alpha']!r}", f"beta {cfg['beta']!r}",
                  f"k {cfg['k']!r}"]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def save(path, t):
    np.ascontiguousarray(t.detach().numpy(), dtype="<f8").tofile(path)


def make_inputs(cfg, gen, dtype):
    def randn(shape, scale=1.0, shift=0.0):
        t = torch.randn(shape, generator=gen, dtype=torch.float64) * scale + shift
        # float32 runs: both sides see the same (rounded) values.
        return t.float().double() if dtype == "float32" else t

    inputs = {"x": randn(cfg["x_shape"])}
    if cfg["op"] == "conv":
        inputs["w"] = randn(cfg["w_shape"], scale=0.3)
        if cfg["bias"]:
            inputs["b"] = randn([cfg["w_shape"][0]])
    elif cfg["op"] == "bn":
        c = cfg["x_shape"][1]
        inputs["x"] = randn(cfg["x_shape"], scale=2.0, shift=3.0)
        inputs["gamma"] = randn([c], scale=0.5, shift=1.0)
        inputs["beta"] = randn([c])
        inputs["running_mean"] = randn([c])
        rv = torch.rand(c, generator=gen, dtype=torch.float64) * 1.5 + 0.5
        inputs["running_var"] = rv.float().double() if dtype == "float32" else rv
    return inputs, lambda shape: randn(list(shape))


def check(cfg, dtype, index, exe, workdir):
    gen = torch.Generator().manual_seed(SEED + 1000 * index + (0 if dtype == "float64" else 1))
    inputs, dy_gen = make_inputs(cfg, gen, dtype)
    ref, dy = run_torch(cfg, inputs, dy_gen)
    d = os.path.join(workdir, f"{index:02d}_{cfg['name']}_{dtype}")
    os.makedirs(d, exist_ok=True)
    write_request(os.path.join(d, "request.txt"), cfg, dtype)
    for k, v in inputs.items():
        save(os.path.join(d, k + ".bin"), v)
    save(os.path.join(d, "dy.bin"), dy)
    proc = subprocess.run([exe, d], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return False, f"halox-ops-ref exited {proc.returncode}: {proc.stderr.strip()}"
    errs = []
    ok = True
    for key, r in ref.items():
        path = os.path.join(d, key + ".bin")
        if not os.path.exists(path):
            return False, f"halox-ops-ref wrote no {key}.bin"
        got = torch.from_numpy(np.fromfile(path, dtype="<f8"))
        if got.numel() != r.numel():
            return False, f"{key}: {got.numel()} values, expected {r.numel()}"
        got = got.reshape(r.shape)
        scale = max(1.0, r.abs().max().item())
        err = (got - r).abs().max().item() / scale
        bad = not (err <= TOL[dtype])
        ok = ok and not bad
        errs.append(f"{key} {err:.1e}" + (" (!)" if bad else ""))
    return ok, ", ".join(errs)


def check_rejection(exe, workdir):
    """halox must refuse a weight tensor whose input channels do not match x."""
    d = os.path.join(workdir, "reject_channel_mismatch")
    os.makedirs(d, exist_ok=True)
    cfg = conv("reject", 1, 3, 2, (5, 5), 3)
    cfg["w_shape"] = [2, 4, 3, 3]
    write_request(os.path.join(d, "request.txt"), cfg, "float64")
    proc = subprocess.run([exe, d], capture_output=True, text=True, timeout=60)
    ok = proc.returncode == 2 and "channels" in proc.stderr and "[Cout, 3, k...]" in proc.stderr
    return ok, (proc.stderr.strip().splitlines() or ["(no message)"])[0][:120]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exe", required=True, help="path to halox-ops-ref")
    ap.add_argument("--filter", default="", help="run only configurations whose name contains this")
    ap.add_argument("--keep", default=None, help="write the request folders here and keep them")
    args = ap.parse_args()
    torch.set_num_threads(1)
    start = time.time()
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="halox-ops-") as tmp:
        workdir = args.keep or tmp
        for i, cfg in enumerate(CONFIGS):
            if args.filter not in cfg["name"]:
                continue
            for dtype in ("float64", "float32"):
                try:
                    ok, detail = check(cfg, dtype, i, args.exe, workdir)
                except Exception as e:  # a crash in one configuration must not hide the others
                    ok, detail = False, f"{type(e).__name__}: {e}"
                print(f"{'PASS' if ok else 'FAIL'} {cfg['name']:<34} {dtype:<8} {detail}",
                      flush=True)
                passed, failed = passed + ok, failed + (not ok)
        if args.filter in "reject_channel_mismatch":
            ok, detail = check_rejection(args.exe, workdir)
            print(f"{'PASS' if ok else 'FAIL'} {'reject_channel_mismatch':<34} {'float64':<8} "
                  f"{detail}", flush=True)
            passed, failed = passed + ok, failed + (not ok)
    print(f"# {time.time() - start:.1f} s; tolerances float64 {TOL['float64']:g}, "
          f"float32 {TOL['float32']:g} (relative to max(1, max|torch|))")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and passed > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
