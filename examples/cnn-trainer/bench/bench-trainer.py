#!/usr/bin/env python3
"""Images/s of halox-train per strategy and rank count, next to the same model in PyTorch on one
process with the same threads (the local-speed reference). Writes a markdown table and JSON.

  examples/cnn-trainer/bench/bench-trainer.py --train build/mpich/examples/cnn-trainer/halox-train \
      --model resnet --ranks 1 2 --threads 1 --steps 30 --repeat 3 --out bench-trainer

Both sides train the same network from the same model file (models/<model>-sample.model; the
strategy variants are the same network split differently) with SGD with momentum, the same
batch and the same threads per process. The median images/s over the steps after the first two
(warm-up) is taken from each run's --log-json, and the median over --repeat runs is reported.
PyTorch trains on one fixed random batch; halox-train gets two batches of synthetic samples
(--train-size), which it generates in the warm-up steps and then reads from its cache, so that
neither side's timed steps include making data. The runs of all configurations are
interleaved, so a change of machine load touches them alike. The time breakdown is the mean per
step on rank 0.

With 2 in --ranks it also measures what the machine itself allows: in every round, two
independent 1-rank runs of the sample variant at once (two mpiexec launches, nothing shared).
Their images/s added up, over one such run alone, is the speed-up the cores and memory give two
processes that never communicate or wait for each other; a 2-rank speed-up cannot be expected
above it. It is printed before the yardstick as

  capacity: 2 independent 1-rank runs together: C

and Y / C, Z / C are the parallel efficiencies of the two splits on this machine.

The last lines are the yardstick:

  halox/torch time per image (1 rank, 1 thread): X     torch images/s / halox images/s, 1 rank
  speed-up 2 ranks sample: Y                           halox sample, 2 ranks over 1 rank
  speed-up 2 ranks spatial: Z                          halox spatial, 2 ranks over 1 rank
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_model import Net  # noqa: E402


def torch_images_per_s(model_file, batch, steps, threads):
    import torch
    import torch.nn as nn

    torch.set_num_threads(threads)
    net = Net(model_file)
    opt = torch.optim.SGD(net.modules.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(batch, *net.input)
    y = torch.randint(0, net.classes, (batch,))
    rates = []
    for s in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(net.forward(x), y)
        loss.backward()
        opt.step()
        rates.append(batch / (time.perf_counter() - t0))
    return statistics.median(rates[2:])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", required=True, help="the halox-train executable")
    ap.add_argument("--mpiexec", default="mpiexec.mpich")
    ap.add_argument("--model", default="resnet", help="model family (resnet, alexnet, conv3d)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--strategies", nargs="+", default=["sample", "spatial"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--train-size", type=int, default=None,
                    help="synthetic training samples (default: two batches, so that the timed "
                         "steps after the two warm-up steps read samples halox-train generated "
                         "and cached in the warm-up, as PyTorch here trains on one fixed batch; "
                         "pass more to time the generation of new samples too)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration (median)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="bench-trainer")
    ap.add_argument("--no-capacity", action="store_true",
                    help="skip the two independent 1-rank runs (see above)")
    a = ap.parse_args()
    if a.train_size is None:
        a.train_size = 2 * a.batch
    here = os.path.dirname(os.path.abspath(__file__))
    load_at_start = os.getloadavg()[0]
    rows = []
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    model_file = os.path.join(here, "..", "models", f"{a.model}-sample.model")
    configs = [(st, n) for st in a.strategies for n in a.ranks]
    runs = {c: [] for c in configs}
    torch_runs = []
    capacity = not a.no_capacity and 2 in a.ranks
    pair_runs = []  # per round: the summed images/s of two independent 1-rank runs

    def command(strategy, n, log):
        return [a.mpiexec, "-n", str(n), a.train, "--model", f"{a.model}-{strategy}",
                "--batch", str(a.batch), "--steps", str(a.steps), "--no-eval",
                "--train-size", str(a.train_size),
                "--threads", str(a.threads), "--print-every", "1000", "--log-json", log]

    def timed_steps(log):  # the steps after the two warm-up steps
        return [json.loads(l) for l in open(log)][2:]

    for _ in range(a.repeat):  # interleaved: every configuration once per round
        for strategy, n in configs:
            with tempfile.NamedTemporaryFile(suffix=".json") as log:
                subprocess.run(command(strategy, n, log.name), check=True, env=env,
                               stdout=subprocess.DEVNULL)
                runs[(strategy, n)].append(timed_steps(log.name))
        if capacity:
            with tempfile.NamedTemporaryFile(suffix=".json") as l1, \
                    tempfile.NamedTemporaryFile(suffix=".json") as l2:
                procs = [subprocess.Popen(command("sample", 1, l.name), env=env,
                                          stdout=subprocess.DEVNULL) for l in (l1, l2)]
                for p in procs:
                    if p.wait() != 0:
                        sys.exit(f"bench-trainer: an independent 1-rank run failed ({p.returncode})")
                pair_runs.append(sum(statistics.median(s["images_per_s"] for s in timed_steps(l.name))
                                     for l in (l1, l2)))
        torch_runs.append(torch_images_per_s(model_file, a.batch, a.steps, a.threads))
    rate = {}
    for (strategy, n), rs in runs.items():
        per_run = [statistics.median(s["images_per_s"] for s in steps) for steps in rs]
        best = rs[per_run.index(statistics.median_low(per_run))]
        row = {"impl": "halox-train", "strategy": strategy, "ranks": n,
               "images_per_s": statistics.median(per_run), "runs": per_run}
        for k in ("time_s", "compute_s", "halo_s", "shuffle_s", "allreduce_s"):
            row[k] = statistics.mean(s[k] for s in best)
        rate[(strategy, n)] = row["images_per_s"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    rows.append({"impl": "pytorch " + __import__("torch").__version__, "strategy": "-", "ranks": 1,
                 "images_per_s": statistics.median(torch_runs), "runs": torch_runs})
    print(json.dumps(rows[-1]), flush=True)
    if pair_runs:
        rows.append({"impl": "2 independent 1-rank halox-train runs at once (summed)",
                     "strategy": "sample", "ranks": 1, "images_per_s": statistics.median(pair_runs),
                     "runs": pair_runs})
        print(json.dumps(rows[-1]), flush=True)
    meta = {"model": a.model, "batch": a.batch, "steps": a.steps, "train_size": a.train_size,
            "threads": a.threads,
            "repeat": a.repeat, "load_at_start": load_at_start,
            "mpiexec": a.mpiexec, "cores": os.cpu_count(), "command": " ".join(sys.argv)}
    json.dump({"meta": meta, "results": rows}, open(a.out + ".json", "w"), indent=1)
    with open(a.out + ".md", "w") as f:
        f.write(f"| implementation | strategy | ranks | images/s | step (ms) | compute | halo | shuffle | allreduce |\n")
        f.write("|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            if "time_s" in r:
                f.write(f"| {r['impl']} | {r['strategy']} | {r['ranks']} | {r['images_per_s']:.0f} | "
                        f"{1000 * r['time_s']:.1f} | {1000 * r['compute_s']:.1f} | {1000 * r['halo_s']:.1f} | "
                        f"{1000 * r['shuffle_s']:.1f} | {1000 * r['allreduce_s']:.1f} |\n")
            else:
                f.write(f"| {r['impl']} | {r['strategy']} | 1 | {r['images_per_s']:.0f} | | | | | |\n")
    print(open(a.out + ".md").read())
    torch_rate = next(r["images_per_s"] for r in rows if r["impl"].startswith("pytorch"))
    one = rate.get(("sample", 1)) or next((v for (st, n), v in rate.items() if n == 1), None)
    if pair_runs and ("sample", 1) in rate:
        print(f"capacity: 2 independent 1-rank runs together: "
              f"{statistics.median(pair_runs) / rate[('sample', 1)]:.2f}")
    if one:
        print(f"halox/torch time per image (1 rank, {a.threads} thread{'s' if a.threads > 1 else ''}): "
              f"{torch_rate / one:.2f}")
    for strategy in ("sample", "spatial"):
        if (strategy, 1) in rate and (strategy, 2) in rate:
            print(f"speed-up 2 ranks {strategy}: {rate[(strategy, 2)] / rate[(strategy, 1)]:.2f}")


if __name__ == "__main__":
    main()
