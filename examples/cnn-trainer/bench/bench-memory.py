#!/usr/bin/env python3
"""Memory of halox-train next to the same network in PyTorch: per sample, and the largest 3-D
sample that fits a fixed budget per process at 1, 2 and 4 ranks.

  examples/cnn-trainer/bench/bench-memory.py --train build/mpich/examples/cnn-trainer/halox-train

Both sides train the same model file (SGD with momentum, one thread per process). Memory is the
growth of the resident memory's high-water mark from just before the network is made to the
end of a few training steps (halox-train: --log-json's memory_peak_bytes on rank 0; PyTorch:
the same read from /proc in a child process that trains its network, torch_memory.py), so the
libraries' own start-up cancels out. halox-train trains on one batch of synthetic samples
(--train-size = batch), which its loader keeps, as PyTorch keeps its one input batch.

Per sample: the growth between two batch sizes divided by the samples added (each the median
of --repeat runs), for the built-in
models (resnet, alexnet, conv3d) and the two shipped here, a 2-D net on 3x256x256 images
(img256.model) and a CosmoFlow-style 3-D net on 1x64^3 volumes (cosmo64.model). The worst ratio
over the models is M.

Largest cube: the CosmoFlow-style net at batch 1 on volumes of side N (a multiple of 8), each
side searched for the largest that keeps every process's growth under --budget: PyTorch on one
process, halox-train on 1, 2 and 4 ranks split over space (as many as --ranks names). 2 and 4
ranks on a 2-core machine share the cores: the sizes are right, the times are not.

The last lines are the yardstick:

  halox/torch memory per sample (1 rank): M                         goal M <= 1.0
  largest cube side under B per process: torch N0, halox 1 rank N1, 2 ranks N2, 4 ranks N4
                                          goals N1 >= N0, N4 >= 0.9 * 4^(1/3) * N1
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "models")


def cube_model(side, path):
    """The CosmoFlow-style net (cosmo64.model's layers) on 1 x side^3 volumes."""
    with open(os.path.join(HERE, "cosmo64.model")) as f:
        text = f.read()
    text = text.replace("input 1 64 64 64", f"input 1 {side} {side} {side}")
    text = text.replace("avgpool k=16", f"avgpool k={side // 4}")
    with open(path, "w") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="the halox-train executable")
    ap.add_argument("--mpiexec", default="mpiexec.mpich")
    ap.add_argument("--python", default="/usr/bin/python3", help="the interpreter with torch")
    ap.add_argument("--budget", default="512M", help="per process, for the largest cube [512M]")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per measurement, the median kept (PyTorch's peak varies from run "
                         "to run with where its allocator's threshold stands)")
    ap.add_argument("--no-cube", action="store_true", help="per-sample figures only")
    ap.add_argument("--out", default="bench-memory", help="JSON file name (without .json)")
    a = ap.parse_args()
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    budget = int(float(a.budget[:-1]) * units[a.budget[-1]]) if a.budget[-1] in units \
        else int(a.budget)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    load = os.getloadavg()[0]

    def halox_peak(model, batch, ranks=1, strategy=None):
        with tempfile.NamedTemporaryFile(suffix=".json") as log:
            cmd = [a.mpiexec, "-n", str(ranks), a.train, "--model", model, "--batch", str(batch),
                   "--steps", str(a.steps), "--train-size", str(batch), "--no-eval",
                   "--threads", "1", "--print-every", "1000", "--log-json", log.name]
            subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
            return [json.loads(l) for l in open(log.name)][-1]["memory_peak_bytes"]

    def torch_peak(model, batch):
        out = subprocess.run([a.python, os.path.join(HERE, "torch_memory.py"), model,
                              str(batch), str(a.steps)], check=True, env=env,
                             stdout=subprocess.PIPE, text=True).stdout
        return json.loads(out.strip().splitlines()[-1])["peak_bytes"]

    def median_of(f, *args):
        return statistics.median(f(*args) for _ in range(a.repeat))

    models = [(os.path.join(MODELS, f"{m}-sample.model"), 64, 256)
              for m in ("resnet", "alexnet", "conv3d")]
    models += [(os.path.join(HERE, "img256.model"), 8, 16), (os.path.join(HERE, "cosmo64.model"), 2, 4)]
    rows, ratios = [], []
    print("| model | batches | PyTorch per sample | halox-train per sample | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for model, b1, b2 in models:
        t = (median_of(torch_peak, model, b2) - median_of(torch_peak, model, b1)) / (b2 - b1)
        h = (median_of(halox_peak, model, b2) - median_of(halox_peak, model, b1)) / (b2 - b1)
        ratio = h / t if t > 0 else float("inf")
        ratios.append(ratio)
        name = os.path.basename(model).replace(".model", "")
        rows.append({"model": name, "batches": [b1, b2], "torch_per_sample": t,
                     "halox_per_sample": h, "ratio": ratio})
        print(f"| {name} | {b1} -> {b2} | {t / 1e6:.2f} MB | {h / 1e6:.2f} MB | {ratio:.2f} |",
              flush=True)

    sides = {}
    if not a.no_cube:
        tmp = tempfile.mkdtemp()

        def largest(fits):  # the largest multiple of 8 for which fits(side) holds
            lo, hi = 8, 16
            while fits(hi):
                lo, hi = hi, hi * 2
            while hi - lo > 8:  # fits(lo), not fits(hi)
                mid = (lo + hi) // 16 * 8
                lo, hi = (mid, hi) if fits(mid) else (lo, mid)
            return lo

        def model_of(side):
            path = os.path.join(tmp, f"cube{side}.model")
            cube_model(side, path)
            return path

        sides["torch"] = largest(lambda s: torch_peak(model_of(s), 1) <= budget)
        print(f"torch: largest side {sides['torch']}", flush=True)
        for n in a.ranks:
            sides[n] = largest(lambda s: halox_peak(model_of(s), 1, n) <= budget)
            print(f"halox {n} rank(s): largest side {sides[n]}", flush=True)

    result = {"per_sample": rows, "memory_ratio": max(ratios), "budget_bytes": budget,
              "largest_side": {str(k): v for k, v in sides.items()},
              "load_at_start": load, "load_at_end": os.getloadavg()[0]}
    with open(a.out + ".json", "w") as f:
        json.dump(result, f, indent=2)
    print(f"load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    print(f"halox/torch memory per sample (1 rank): {max(ratios):.2f}")
    if sides:
        parts = ", ".join(f"{n} rank{'s' if n > 1 else ''} {sides[n]}" for n in a.ranks)
        print(f"largest cube side under {a.budget} per process: torch {sides['torch']}, "
              f"halox {parts}")


if __name__ == "__main__":
    sys.exit(main())
