#!/usr/bin/env python3
"""halox-train's memory accounting and budget, on one rank.

1. Accounting: on a 3-D model whose activations outweigh the libraries' own memory, the peak
   the accounting predicts (--log-json's memory_predicted_bytes) is within 10 % of the measured
   one (memory_peak_bytes: the resident high-water mark's growth since before the parameters),
   and --describe reports every layer's activation, gradient and operator bytes.
2. Budget: on a deep float64 model, recomputed segments lower the measured peak; a budget half
   way between the peaks with and without them is met only by recomputing (the cheap layers'
   outputs or segments), and the losses are bitwise those of the run without a budget.
"""
import argparse
import json
import os
import re
import subprocess
import sys


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print(p.stdout)
        sys.exit(f"check-memory: {what} failed (exit {p.returncode}): {' '.join(cmd)}")
    return p.stdout


def last_record(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()][-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--mpiexec", required=True, help="launcher and its flags, ';'-separated")
    ap.add_argument("--models", nargs=2, required=True, help="deep.model cube.model")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    launch = [x for x in a.mpiexec.split(";") if x] + ["-n", "1", a.train]
    deep, cube = a.models
    failures = []

    # 1. Accounting against the measured peak.
    log = os.path.join(a.out, "cube.json")
    out = run(launch + ["--model", cube, "--batch", "16", "--steps", "2", "--train-size", "32",
                        "--no-eval", "--threads", "1", "--describe", "--log-json", log],
              "the accounting run")
    r = last_record(log)
    pred, peak = r["memory_predicted_bytes"], r["memory_peak_bytes"]
    err = abs(pred - peak) / peak
    print(f"cube: predicted {pred / 2**20:.1f} MiB, measured {peak / 2**20:.1f} MiB "
          f"({100 * err:.1f} % apart)")
    if err > 0.10:
        failures.append(f"predicted peak {pred} is {100 * err:.1f} % from the measured {peak}")
    rows = re.findall(r"^  \d+ \w+: activation [0-9.]+ MiB, gradient [0-9.]+ MiB, operator",
                      out, re.M)
    if len(rows) != 14:  # the layers of cube.model
        failures.append(f"--describe reported {len(rows)} layers' memory, not 14")

    # 2. A budget only recomputation meets.
    common = launch + ["--model", deep, "--batch", "8", "--steps", "3", "--train-size", "24",
                       "--no-eval", "--deterministic"]
    ref = os.path.join(a.out, "deep-ref.json")
    run(common + ["--keep-reorders", "off", "--log-json", ref], "the run without recomputation")
    seg = os.path.join(a.out, "deep-seg.json")
    run(common + ["--keep-reorders", "off", "--segments", "4", "--log-json", seg],
        "the run with 4 segments")
    m1, m4 = last_record(ref)["memory_peak_bytes"], last_record(seg)["memory_peak_bytes"]
    print(f"deep: measured peak {m1 / 2**20:.1f} MiB without recomputation, "
          f"{m4 / 2**20:.1f} MiB with 4 segments")
    if m4 > 0.85 * m1:
        failures.append(f"4 segments saved too little: {m4} of {m1} bytes")
    budget = (m1 + m4) // 2
    got = os.path.join(a.out, "deep-budget.json")
    out = run(common + ["--max-memory", str(budget), "--describe", "--log-json", got,
                        "--compare-log", ref, "--rtol", "0"], "the run under the budget")
    plans = re.findall(r"^memory plan: .*$", out, re.M)
    print("\n".join(plans))
    if len(plans) < 2 or "recomputed" not in plans[-1]:
        failures.append("the budget did not choose recomputation: " + str(plans))
    if "max relative loss difference 0 " not in out:
        failures.append("the losses under the budget differ from the run without it")
    mb = last_record(got)["memory_peak_bytes"]
    print(f"deep: budget {budget / 2**20:.1f} MiB, measured peak {mb / 2**20:.1f} MiB")
    if mb > budget:
        failures.append(f"the measured peak {mb} exceeds the budget {budget}")

    for f in failures:
        print("check-memory: FAILED:", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
