#!/usr/bin/env python3
"""check-profile.py STEPS COMMAND...: runs COMMAND (an mpiexec line running halox-train with
--profile --describe --debug-print and --steps STEPS) and checks the --profile report.

Every rank's own table has one row per layer of --describe; communication never exceeds the
time it is part of; a rank's layers never add up to more than its whole step; and rank 0's
summary gives, per layer, the fastest and the slowest of those per-rank times, over STEPS - 5
timed steps. After training, --describe reports on rank 0 (only) what each convolution,
pooling and LRN layer's operator measured and chose ("layer I KIND: ..."; with a split over
ranks, the overlap modes).
"""
import re
import subprocess
import sys

TOL = 0.0015  # the report prints milliseconds to 3 decimals
# One side of a summary row: fastest, slowest, the slowest rank, its communication.
CELL = r"([\d.]+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)"


def fail(msg):
    print("check-profile: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    steps = int(sys.argv[1])
    out = subprocess.run(sys.argv[2:], capture_output=True, text=True, check=False)
    text = out.stdout + out.stderr
    print(text)
    if out.returncode != 0:
        fail(f"halox-train exited with status {out.returncode}")
    size = None
    layers = set()
    kinds = {}  # layer -> kind, from --describe
    tuned = {}  # rank -> {layer: kind} from the report after training (rank 0 only)
    own = {}   # rank -> {layer: (fwd, fwd_comm, bwd, bwd_comm)}
    step = {}  # rank -> whole step
    summary = {}
    header = None
    for line in text.splitlines():
        m = re.match(r"\[(\d+)/(\d+)\] (.*)$", line)
        if not m:
            continue
        rank, size, body = int(m.group(1)), int(m.group(2)), m.group(3)
        d = re.match(r"\s+(\d+) (\w+)\s+grid ", body)
        if d:
            layers.add(int(d.group(1)))
            kinds[int(d.group(1))] = d.group(2)
            continue
        u = re.match(r"layer (\d+) (\w+): ", body)
        if u:
            tuned.setdefault(rank, {})[int(u.group(1))] = u.group(2)
            continue
        r = re.match(r"(\d+)\s+(\w+)\s+([\d.]+) \(([\d.]+)\)\s+([\d.]+) \(([\d.]+)\)$", body)
        if r:
            own.setdefault(rank, {})[int(r.group(1))] = tuple(float(r.group(i)) for i in range(3, 7))
            continue
        s = re.match(r"step ([\d.]+)$", body)
        if s:
            step[rank] = float(s.group(1))
            continue
        h = re.match(r"profile: ms per step over (\d+) steps", body)
        if h and rank == 0:
            header = int(h.group(1))
            continue
        t = re.match(r"(\d+)\s+(\w+)\s+" + r"\s+".join([CELL, CELL]) + "$", body)
        if t and rank == 0:
            g = t.groups()
            summary[int(g[0])] = [float(x) for x in g[2:]]
    if size is None or not layers:
        fail("no --describe output with [rank/size] prefixes")
    if header != steps - 5:
        fail(f"summary says {header} timed steps; expected {steps - 5}")
    want = sorted(layers)
    for rank in range(size):
        rows = own.get(rank, {})
        if sorted(rows) != want:
            fail(f"rank {rank} reported layers {sorted(rows)}; the network has {want}")
        if rank not in step:
            fail(f"rank {rank} reported no whole-step time")
        for i, (f, fc, b, bc) in rows.items():
            if fc > f + TOL or bc > b + TOL:
                fail(f"rank {rank} layer {i}: communication above the layer's time: {rows[i]}")
        total = sum(f + b for f, _, b, _ in rows.values())
        if total > step[rank] + TOL * len(rows):
            fail(f"rank {rank}: layers add up to {total:.3f} ms, more than the step's {step[rank]}")
    choosers = {i: k for i, k in kinds.items() if k in ("conv", "maxpool", "avgpool", "lrn")}
    if tuned.get(0, {}) != choosers or len(tuned) != 1:
        fail(f"reports of what the layers chose, by rank: {tuned}; expected rank 0's only, on "
             f"each of {choosers}")
    if size > 1 and "overlap measured: forward " not in text:
        fail("no layer reported its measured overlap modes")
    if sorted(summary) != want:
        fail(f"summary rows {sorted(summary)}; the network has {want}")
    for i, (fmin, fmax, frank, _, bmin, bmax, brank, _) in summary.items():
        fw = [own[r][i][0] for r in range(size)]
        bw = [own[r][i][2] for r in range(size)]
        for name, lo, hi, at, vals in (("forward", fmin, fmax, frank, fw),
                                       ("backward", bmin, bmax, brank, bw)):
            if abs(lo - min(vals)) > TOL or abs(hi - max(vals)) > TOL:
                fail(f"layer {i} {name}: summary {lo}..{hi}, ranks reported {vals}")
            if abs(vals[int(at)] - hi) > TOL:
                fail(f"layer {i} {name}: the slowest rank is given as {int(at)}, which reported "
                     f"{vals[int(at)]}")
    print(f"check-profile: {len(want)} layers on {size} ranks over {header} steps, consistent")


if __name__ == "__main__":
    main()
