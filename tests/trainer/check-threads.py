#!/usr/bin/env python3
"""check-threads.py RANKS COMMAND...: runs COMMAND (an mpiexec line starting RANKS ranks of
halox-train) with neither OMP_NUM_THREADS nor --threads, and checks that the OpenMP threads the
header reports per rank do not oversubscribe the CPUs this test may use: RANKS x threads <=
max(CPUs, RANKS). Without a default of its own the trainer would start one thread per CPU in
every unbound rank.
"""
import os
import re
import subprocess
import sys


def fail(msg):
    print("check-threads: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    ranks = int(sys.argv[1])
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "HALOX_TRAIN_THREADS_DEFAULT")}
    out = subprocess.run(sys.argv[2:], capture_output=True, text=True, check=False, env=env)
    text = out.stdout + out.stderr
    print(text)
    if out.returncode != 0:
        fail(f"halox-train exited with status {out.returncode}")
    header = next((l for l in text.splitlines() if "halox-train: model" in l), None)
    if header is None:
        fail("no header line")
    m = re.search(r"OMP_NUM_THREADS=(\d+)", header) or re.search(
        r"OMP_NUM_THREADS=unset \(OpenMP's default: one thread per CPU this rank may use, (\d+)[;)]",
        header)
    if not m:
        fail("the header names no thread count: " + header)
    threads = int(m.group(1))
    cpus = len(os.sched_getaffinity(0))
    if threads < 1 or ranks * threads > max(cpus, ranks):
        fail(f"{ranks} ranks x {threads} threads oversubscribe {cpus} CPUs: {header}")
    print(f"check-threads: {ranks} ranks x {threads} threads on {cpus} CPUs")


main()
