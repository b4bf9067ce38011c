#!/usr/bin/env python3
"""How close automatic selection comes to the best backend, from halox-bench JSON output.

Usage: bench/auto_ratio.py RUN.json [RUN.json ...] [--markdown] [--stat=median_us|min_us|p90_us]
                            [--median-of-runs] [--separate]

Where the run has `<scenario>/auto_vs_best` entries (halox-bench times a fresh `auto` plan and
every backend in one loop there, one execution each per round in a shuffled order, so a load
change lands on all of them alike), their auto / best is used: the honest ratio on a machine
whose speed moves. `--separate` (or a `--stat` other than median_us) compares the separate
entries instead, as described next.

Every halox-bench scenario runs each host backend and `auto` as separate entries
(`<scenario>/<backend>`), each with its `median_us` over iterations. For each scenario this
prints auto's median, the best backend's median measured in the same run and their ratio
(auto / best: 1.00 means auto is as fast as the best backend; below 1 happens when noise
favours auto). With `--benchmark_repetitions`, each entry's median_us is the median over the
repetitions. Several files (e.g. one per repetition or per MPI) are reported one after the
other, each against its own best. The last line is `worst auto/best ratio: X` over every
scenario of every file. With `--median-of-runs` (files that are repeated runs of the same
configuration), a last table gives per scenario the median over the files of the ratio (each
ratio still taken within one run), and the worst ratio is taken over those medians: a whole run
repeated spreads a load change on a shared machine over all backends, where
`--benchmark_repetitions` repeats each entry back to back.

Entries that are not backends (`limit_*`, `phase_*`) are ignored; the backend list is whatever
the JSON holds, so new backends are picked up without changing this script. `--stat` picks the
per-entry statistic compared (default median_us; min_us shows what each backend can do when the
machine leaves it alone, useful on a loaded machine).
"""

import json
import statistics
import sys


def entries(doc):
    """(scenario, entry, benchmark) for every measured iteration entry of a halox-bench run."""
    for b in doc.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = b.get("run_name") or b["name"]
        parts = [p for p in name.split("/") if not p.startswith(("iterations:", "manual_time",
                                                                  "repeats:"))]
        if len(parts) >= 2:
            yield "/".join(parts[:-1]), parts[-1], b


def interleaved_entries(doc):
    """{scenario: [(auto_us, best_us, auto's backend, best backend) per repetition]} from the
    <scenario>/auto_vs_best entries (auto and every backend timed in one shuffled loop)."""
    rows = {}
    for scenario, entry, b in entries(doc):
        if entry != "auto_vs_best" or "auto_us" not in b:
            continue
        words = dict(w.split("=", 1) for w in b.get("label", "").split() if "=" in w)
        rows.setdefault(scenario, []).append(
            (float(b["auto_us"]), float(b["best_us"]), words.get("selected", "?"),
             words.get("best", "?")))
    return rows


def backend_entries(doc, stat):
    """{scenario: {backend: [median_us per repetition]}} and {scenario: label of auto}."""
    runs, labels = {}, {}
    for scenario, entry, b in entries(doc):
        if entry.startswith(("limit_", "phase_")) or entry == "auto_vs_best" or stat not in b:
            continue
        runs.setdefault(scenario, {}).setdefault(entry, []).append(float(b[stat]))
        if entry == "auto" and b.get("label"):
            labels.setdefault(scenario, []).append(b["label"].replace("selected=", ""))
    return runs, labels


def report(path, doc, markdown, stat, separate):
    runs, labels = backend_entries(doc, stat)
    ctx = doc.get("context", {})
    mpi = (ctx.get("mpi_library") or "?").splitlines()[0]
    ranks = ctx.get("mpi_ranks", "?")
    load = " ".join(f"{x:.2f}" for x in ctx.get("load_avg", []))
    ratios = []
    title = (f"{path}: {' '.join(mpi.split())}, {ranks} ranks, load average at start "
             f"{load or '?'}, statistic {stat}")
    rows = []
    inter = {} if separate or stat != "median_us" else interleaved_entries(doc)
    for scenario in sorted(inter):
        reps = inter[scenario]
        a = statistics.median(r[0] for r in reps)
        best_us = statistics.median(r[1] for r in reps)
        ratio = a / best_us if best_us > 0 else float("nan")
        ratios.append((scenario, ratio))
        rows.append((scenario, ",".join(sorted({r[2] for r in reps})), a,
                     ",".join(sorted({r[3] for r in reps})) + " (interleaved)", best_us, ratio))
    for scenario in sorted(runs):
        if scenario in inter:
            continue
        entries = {k: statistics.median(v) for k, v in runs[scenario].items()}
        if "auto" not in entries:
            continue
        others = {k: v for k, v in entries.items() if k != "auto"}
        if not others:
            continue
        best = min(others, key=others.get)
        ratio = entries["auto"] / others[best] if others[best] > 0 else float("nan")
        ratios.append((scenario, ratio))
        chosen = ",".join(sorted(set(labels.get(scenario, ["?"]))))
        rows.append((scenario, chosen, entries["auto"], best, others[best], ratio))
    if markdown:
        print(f"\n**{title}**\n")
        print("| scenario | auto chose | auto us | best backend | best us | auto/best |")
        print("|---|---|---:|---|---:|---:|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]} | {r[4]:.1f} | {r[5]:.2f} |")
    else:
        print(title)
        print(f"{'scenario':40s} {'auto chose':16s} {'auto us':>10s} {'best':29s} "
              f"{'best us':>10s} {'auto/best':>9s}")
        for r in rows:
            print(f"{r[0]:40s} {r[1]:16s} {r[2]:10.1f} {r[3]:29s} {r[4]:10.1f} {r[5]:9.2f}")
    return ratios


def main(argv):
    markdown = "--markdown" in argv
    stat = "median_us"
    for a in argv:
        if a.startswith("--stat="):
            stat = a.split("=", 1)[1]
    paths = [a for a in argv if not a.startswith("--")]
    if not paths:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    worst = []
    per_scenario = {}
    for path in paths:
        with open(path) as f:
            text = f.read()
        # halox-bench writes the JSON on rank 0; anything printed before it (MPI banners) is
        # skipped.
        doc = json.loads(text[text.index("{"):])
        for scenario, ratio in report(path, doc, markdown, stat, "--separate" in argv):
            worst.append(ratio)
            per_scenario.setdefault(scenario, []).append(ratio)
    if not worst:
        print("no scenario has both auto and another backend", file=sys.stderr)
        return 1
    if "--median-of-runs" in argv:
        worst = []
        if markdown:
            print(f"\n**median over {len(paths)} runs**\n")
            print("| scenario | auto/best per run | median |")
            print("|---|---|---:|")
        else:
            print(f"median over {len(paths)} runs")
        for scenario in sorted(per_scenario):
            r = per_scenario[scenario]
            m = statistics.median(r)
            worst.append(m)
            runs = " ".join(f"{x:.2f}" for x in r)
            if markdown:
                print(f"| {scenario} | {runs} | {m:.2f} |")
            else:
                print(f"{scenario:40s} {runs:30s} {m:9.2f}")
    print(f"worst auto/best ratio: {max(worst):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
