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

Each 1-rank run (halox-train's, and PyTorch's) is made twice, pinned once to CPU 0 and once to
CPU 1, and counts as one run at the mean of the two speeds (also printed per CPU): the virtual
cores of a cloud machine can run at different speeds for minutes at a time, so an unpinned
1-rank run measures whichever core it landed on, while a 2-rank run uses both. --no-pin runs
them where the OS puts them.

Runs on several ranks are bound one rank per core (--bind-to core, which MPICH's and Open MPI's
launchers both take) and split each batch's samples by the speed they measure while training
(halox-train --balance auto): a rank on a core that the host runs slower for a while (on this
kind of virtual machine one core was 20-30 % slower than the other for minutes at a time) gets
fewer samples, where an even split would make the other rank wait for it in every step. The
rows list the splits each run chose (balance_splits, e.g. ["14 18"]: one change, to 14 and 18
samples); --balance off and --no-bind measure without either.

With 2 in --ranks it also measures what the machine itself allows: in every round, two
independent 1-rank runs of the sample variant at once (two mpiexec launches, nothing shared;
one pinned to each CPU).
Their images/s added up, over one such run alone, is the speed-up the cores and memory give two
processes that never communicate or wait for each other; a 2-rank speed-up cannot be expected
above it. It is printed before the yardstick as

  capacity: 2 independent 1-rank runs together: C

and Y / C, Z / C are the parallel efficiencies of the two splits on this machine.

The last lines are the yardstick:

  halox/torch time per image (1 rank, 1 thread): X     torch images/s / halox images/s, 1 rank
  speed-up 2 ranks sample: Y                           halox sample, 2 ranks over 1 rank
  speed-up 2 ranks spatial: Z                          halox spatial, 2 ranks over 1 rank

Each of X, Y, Z (and C) is the median over the rounds of the ratio within a round: the runs of
one round follow each other within seconds, while the speed of this kind of virtual machine can
change by 10-30 % from one round to the next, which a ratio of the two medians would mix into
the result. The lines before the yardstick list each round's ratio and the ratio of the
medians; the JSON keeps them under "yardstick".
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


def round_ratios(num, den):
    """num[i] / den[i] per round i: runs of one round share the machine's state of the moment,
    so their ratio leaves out what changed between rounds."""
    return [n / d for n, d in zip(num, den)]


def paired(num, den):
    """The median over the rounds of the ratio within a round (round_ratios)."""
    return statistics.median(round_ratios(num, den))


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
    ap.add_argument("--balance", default="auto",
                    help="halox-train --balance for every run (off, auto, or weights)")
    ap.add_argument("--no-bind", action="store_true",
                    help="launch the runs on several ranks without --bind-to core")
    ap.add_argument("--no-pin", action="store_true",
                    help="run the 1-rank configurations and PyTorch where the OS puts them "
                         "instead of once on each of CPUs 0 and 1 (see above)")
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

    # CPUs for the 1-rank runs: each one of them in turn, or none (the OS's choice).
    cpus = [None] if a.no_pin or not hasattr(os, "sched_setaffinity") else [0, 1]
    if cpus != [None] and not all(c in os.sched_getaffinity(0) for c in cpus):
        sys.exit("bench-trainer: CPUs 0 and 1 are not both available to pin to; pass --no-pin")
    per_cpu = {}  # (strategy, cpu): images/s of every 1-rank run pinned there
    balance_log = {}  # (strategy, ranks): per run, the sample splits --balance auto chose

    def pinned(cpu):  # for Popen: run the child on `cpu` only
        return None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))

    def command(strategy, n, log):
        bind = ["--bind-to", "core"] if n > 1 and not a.no_bind else []
        return [a.mpiexec, *bind, "-n", str(n), a.train, "--model", f"{a.model}-{strategy}",
                "--batch", str(a.batch), "--steps", str(a.steps), "--no-eval",
                "--train-size", str(a.train_size), "--balance", a.balance,
                "--threads", str(a.threads), "--print-every", "1000", "--log-json", log]

    def timed_steps(log):  # the steps after the two warm-up steps
        return [json.loads(l) for l in open(log)][2:]

    def median_rate(steps):
        return statistics.median(s["images_per_s"] for s in steps)

    for _ in range(a.repeat):  # interleaved: every configuration once per round
        for strategy, n in configs:
            # A 1-rank run once on each CPU, counted as one run at their mean speed: the cores
            # of a virtual machine may run at different speeds for minutes, and a 2-rank run
            # uses both.
            results = []
            for cpu in (cpus if n == 1 else [None]):
                with tempfile.NamedTemporaryFile(suffix=".json") as log:
                    out = subprocess.run(command(strategy, n, log.name), check=True, env=env,
                                         stdout=subprocess.PIPE, text=True,
                                         preexec_fn=pinned(cpu)).stdout
                    results.append(timed_steps(log.name))
                # The sample splits --balance chose in this run (the last is the one it kept).
                splits = [l.split("(")[0].split("rank")[1].strip() for l in out.splitlines()
                          if l.startswith("balance: samples per rank")]
                balance_log.setdefault((strategy, n), []).append(splits)
                if n == 1:
                    per_cpu.setdefault((strategy, cpu), []).append(median_rate(results[-1]))
            runs[(strategy, n)].append(results)
        if capacity:
            with tempfile.NamedTemporaryFile(suffix=".json") as l1, \
                    tempfile.NamedTemporaryFile(suffix=".json") as l2:
                procs = [subprocess.Popen(command("sample", 1, l.name), env=env,
                                          stdout=subprocess.DEVNULL, preexec_fn=pinned(cpu))
                         for l, cpu in zip((l1, l2), cpus * 2)]
                for p in procs:
                    if p.wait() != 0:
                        sys.exit(f"bench-trainer: an independent 1-rank run failed ({p.returncode})")
                pair_runs.append(sum(median_rate(timed_steps(l.name)) for l in (l1, l2)))
        rates = []
        for cpu in cpus:  # PyTorch runs in this process: pinned like the 1-rank runs
            if cpu is not None:
                saved = os.sched_getaffinity(0)
                os.sched_setaffinity(0, {cpu})
            try:
                rates.append(torch_images_per_s(model_file, a.batch, a.steps, a.threads))
            finally:
                if cpu is not None:
                    os.sched_setaffinity(0, saved)
        torch_runs.append(statistics.mean(rates))
    rate = {}
    per_round = {}  # (strategy, ranks): images/s of each round's run, in round order
    for (strategy, n), rs in runs.items():
        per_run = [statistics.mean(median_rate(steps) for steps in r) for r in rs]
        per_round[(strategy, n)] = per_run
        best = rs[per_run.index(statistics.median_low(per_run))][0]
        row = {"impl": "halox-train", "strategy": strategy, "ranks": n,
               "images_per_s": statistics.median(per_run), "runs": per_run}
        for k in ("time_s", "compute_s", "halo_s", "shuffle_s", "allreduce_s"):
            row[k] = statistics.mean(s[k] for s in best)
        if n > 1:
            row["balance_splits"] = balance_log.get((strategy, n), [])
        if n == 1 and cpus != [None]:
            row["per_cpu"] = {str(c): statistics.median(per_cpu[(strategy, c)]) for c in cpus}
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
            "balance": a.balance, "bind_to_core": not a.no_bind,
            "threads": a.threads,
            "repeat": a.repeat, "load_at_start": load_at_start,
            "mpiexec": a.mpiexec, "cores": os.cpu_count(), "pinned_1rank_cpus": cpus,
            "command": " ".join(sys.argv)}
    # The yardstick: each ratio is the median over the rounds of that round's ratio (see the
    # docstring); the ratio of the two medians is kept too, for comparison.
    one_key = ("sample", 1) if ("sample", 1) in rate else next(
        ((st, n) for (st, n) in rate if n == 1), None)
    summary = {}
    for strategy in ("sample", "spatial"):
        if (strategy, 1) in rate and (strategy, 2) in rate:
            rounds = round_ratios(per_round[(strategy, 2)], per_round[(strategy, 1)])
            summary[f"speed_up_2_ranks_{strategy}"] = {
                "per_round": rounds, "median": statistics.median(rounds),
                "ratio_of_medians": rate[(strategy, 2)] / rate[(strategy, 1)]}
    if one_key:
        summary["halox_over_torch_time"] = paired(torch_runs, per_round[one_key])
    if pair_runs and ("sample", 1) in rate:
        summary["capacity"] = paired(pair_runs, per_round[("sample", 1)])
    json.dump({"meta": meta, "results": rows, "yardstick": summary}, open(a.out + ".json", "w"),
              indent=1)
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
    for r in rows:
        if "per_cpu" in r:
            print(f"1-rank {r['strategy']} by CPU: " +
                  ", ".join(f"cpu {c} {v:.0f}" for c, v in r["per_cpu"].items()))
    if "capacity" in summary:
        print(f"capacity: 2 independent 1-rank runs together: {summary['capacity']:.2f}")
    for strategy in ("sample", "spatial"):
        y = summary.get(f"speed_up_2_ranks_{strategy}")
        if y:
            print(f"  {strategy}: per round " + " ".join(f"{r:.2f}" for r in y["per_round"]) +
                  f"; ratio of the medians {y['ratio_of_medians']:.2f}")
    if one_key:
        print(f"halox/torch time per image (1 rank, {a.threads} thread{'s' if a.threads > 1 else ''}): "
              f"{summary['halox_over_torch_time']:.2f}")
    for strategy in ("sample", "spatial"):
        y = summary.get(f"speed_up_2_ranks_{strategy}")
        if y:
            print(f"speed-up 2 ranks {strategy}: {y['median']:.2f}")


if __name__ == "__main__":
    main()
