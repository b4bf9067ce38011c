#!/usr/bin/python3
"""Turns the JSON files of halox-bench / halox-ddtbench / halox-bench-peers runs into results.md
and PNG plots.

Input files are named <mpi>-np<ranks>-<bench|peers|ddt>.json (as bench/compare-mpi writes them).
Usage: compare_mpi_report.py --out DIR [--elapsed S] [--command CMD] [--quick 0|1] FILE.json...
"""

import argparse
import collections
import datetime
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

FILE_RE = re.compile(r"^(?P<mpi>.+)-np(?P<ranks>\d+)-(?P<tag>bench|ddt|peers)\.json$")
SUFFIX_RE = re.compile(r"(/iterations:\d+|/repeats:\d+|/manual_time|/real_time)+$")
LIMITS = ["limit_transport", "limit_copy_transport", "limit_memcpy", "limit_alltoall", "phase_pack",
          "phase_unpack"]
CONS = ["vector", "hvector", "subarray"]
CLIP = 1.6  # efficiency plots are cut here; taller bars carry their value
PEER_NAMES = {"petsc_g2l": "PETSc DMGlobalToLocal", "petsc_l2l": "PETSc DMLocalToLocal",
              "fftw_transpose": "FFTW-MPI transpose"}
PEER_RATIO_TARGET = 0.2  # halox / PETSc where PETSc packs (strided faces)
PEER_EFF_TARGET = 0.8    # halox's eff. transport where faces are contiguous


def load(paths):
    """Returns (runs, contexts): runs[(tag, mpi, ranks, name)] = dict of values."""
    runs, contexts = {}, {}
    for path in paths:
        m = FILE_RE.match(os.path.basename(path))
        if not m:
            print(f"report: skipping {path} (name is not <mpi>-np<R>-<tag>.json)", file=sys.stderr)
            continue
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print(f"report: skipping {path}: {e}", file=sys.stderr)
            continue
        mpi, ranks, tag = m["mpi"], int(m["ranks"]), m["tag"]
        contexts[(tag, mpi, ranks)] = data.get("context", {})
        reps = collections.defaultdict(list)
        for b in data.get("benchmarks", []):
            if b.get("run_type", "iteration") != "iteration":
                continue
            name = SUFFIX_RE.sub("", b.get("run_name", b["name"]))
            reps[name].append(b)
        for name, bs in reps.items():
            err = next((b.get("error_message", "error") for b in bs if b.get("error_occurred")), None)
            ok = [b for b in bs if not b.get("error_occurred")]
            row = {"error": err if not ok else None}
            if ok:
                for key in ok[0]:
                    vals = [b[key] for b in ok if isinstance(b.get(key), (int, float))]
                    if vals and not isinstance(ok[0][key], bool):
                        row[key] = statistics.median(vals)
                row["label"] = ok[0].get("label", "")
            runs[(tag, mpi, ranks, name)] = row
    return runs, contexts


def fmt_us(v):
    if v is None:
        return "—"
    if v >= 1e5:
        return f"{v / 1e3:.0f} ms"
    if v >= 1e4:
        return f"{v / 1e3:.1f} ms"
    if v >= 100:
        return f"{v:.0f}"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt_ratio(v):
    return "—" if v is None else f"{v:.2f}"


def split_name(name):
    """'halo/nchw_f32/split_h/w1/mpi_pack' -> ('halo/nchw_f32/split_h/w1', 'mpi_pack')."""
    head, _, entry = name.rpartition("/")
    return head, entry


def entry_order(entry, backends):
    if entry in LIMITS:
        return (0, LIMITS.index(entry))
    return (1, backends.index(entry) if entry in backends else 99, entry)


def scenario_table(runs, family, mpis, ranks_list, show_alltoall):
    """Markdown table of one family (halo or redist): rows scenario x ranks x entry."""
    names = sorted({k[3] for k in runs if k[0] == "bench" and k[3].startswith(family + "/")})
    scenarios = []
    for n in names:
        s, _ = split_name(n)
        if s not in scenarios:
            scenarios.append(s)
    backends = []
    for n in names:
        _, e = split_name(n)
        if e not in LIMITS and e not in backends:
            backends.append(e)
    backends.sort(key=lambda b: (b == "auto", b))
    head = "| scenario | ranks | entry |"
    sep = "|---|---:|---|"
    for m in mpis:
        head += f" {m} median µs | p90 µs | eff. transport | eff. copy+transport |"
        sep += "---:|---:|---:|---:|"
        if show_alltoall:
            head += " eff. alltoall |"
            sep += "---:|"
    lines = [head, sep]
    for s in scenarios:
        for r in ranks_list:
            entries = sorted({split_name(k[3])[1] for k in runs
                              if k[0] == "bench" and k[2] == r and split_name(k[3])[0] == s},
                             key=lambda e: entry_order(e, backends))
            for e in entries:
                line = f"| `{s}` | {r} | {e} |"
                for m in mpis:
                    row = runs.get(("bench", m, r, f"{s}/{e}"))
                    if row is None:
                        line += " — | — | — | — |" + (" — |" if show_alltoall else "")
                        continue
                    if row.get("error"):
                        line += f" skipped: {row['error'][:40]} | | | |" + (" |" if show_alltoall else "")
                        continue
                    eff = row.get("eff_transport")
                    if e == "limit_transport":
                        eff = 1.0
                    label = row.get("label", "")
                    med = fmt_us(row.get("median_us"))
                    if label:
                        med += f" ({label.replace('selected=', '→')})"
                    effc = row.get("eff_copy_transport")
                    if e == "limit_copy_transport":
                        effc = 1.0
                    line += (f" {med} | {fmt_us(row.get('p90_us'))} | {fmt_ratio(eff)} |"
                             f" {fmt_ratio(effc)} |")
                    if show_alltoall:
                        ea = row.get("eff_alltoall")
                        if e == "limit_alltoall":
                            ea = 1.0
                        line += f" {fmt_ratio(ea)} |"
                lines.append(line)
    return "\n".join(lines), scenarios, backends


def targets_table(runs, mpis, ranks_list):
    """Each halo scenario's mpi_pack against the goals, and each redistribution's best."""
    lines = ["| scenario | ranks | MPI | faces | mpi_pack eff. | target | met | best backend (eff.) "
             "| mpi_pack eff. vs copy+transport | transport / copy+transport |",
             "|---|---:|---|---|---:|---:|---|---|---:|---:|"]
    misses = []
    halo = sorted({split_name(k[3])[0] for k in runs if k[0] == "bench" and k[3].startswith("halo/")})
    for s in halo:
        for r in ranks_list:
            for m in mpis:
                row = runs.get(("bench", m, r, f"{s}/mpi_pack"))
                if not row or row.get("error"):
                    continue
                contiguous = row.get("contiguous", 0) >= 1
                target = 0.8 if contiguous else 0.5
                eff = row.get("eff_transport")
                best = best_backend(runs, m, r, s, "eff_transport")
                met = eff is not None and eff >= target
                if not met:
                    misses.append((s, r, m, eff, target))
                ceiling = None
                if row.get("copy_transport_us"):
                    ceiling = row.get("transport_us", 0) / row["copy_transport_us"]
                lines.append(f"| `{s}` | {r} | {m} | {'contiguous' if contiguous else 'strided'} | "
                             f"{fmt_ratio(eff)} | {target} | {'yes' if met else '**no**'} | {best} | "
                             f"{fmt_ratio(row.get('eff_copy_transport'))} | {fmt_ratio(ceiling)} |")
    lines.append("")
    lines.append("| redistribution | ranks | MPI | mpi_pack × alltoall time | best backend × alltoall "
                 "time | target | met (best) |")
    lines.append("|---|---:|---|---:|---|---:|---|")
    redist = sorted({split_name(k[3])[0] for k in runs
                     if k[0] == "bench" and k[3].startswith("redist/")})
    for s in redist:
        for r in ranks_list:
            for m in mpis:
                row = runs.get(("bench", m, r, f"{s}/mpi_pack"))
                if not row or row.get("error"):
                    continue
                ea = row.get("eff_alltoall")
                b_name, b_eff = best_pair(runs, m, r, s, "eff_alltoall")
                met = b_eff is not None and b_eff >= 0.8
                if not met:
                    misses.append((s, r, m, b_eff, 0.8))
                x = (lambda e: "—" if not e else f"{1 / e:.2f}×")
                lines.append(f"| `{s}` | {r} | {m} | {x(ea)} | {b_name} {x(b_eff)} | ≤ 1.25× | "
                             f"{'yes' if met else '**no**'} |")
    return "\n".join(lines), misses


def best_pair(runs, m, r, s, key):
    best = (None, None)
    for k, row in runs.items():
        if k[0] != "bench" or k[1] != m or k[2] != r or split_name(k[3])[0] != s:
            continue
        e = split_name(k[3])[1]
        if e in LIMITS or row.get("error") or row.get(key) is None:
            continue
        if best[1] is None or row[key] > best[1]:
            best = (e, row[key])
    return best


def best_backend(runs, m, r, s, key):
    name, eff = best_pair(runs, m, r, s, key)
    return "—" if name is None else f"{name} ({eff:.2f})"


def peer_rows(runs, mpis, ranks_list):
    """(scenario, ranks, mpi, peer entry, row) of every peer entry that ran, in a stable order."""
    out = []
    keys = sorted({(k[3], k[2], k[1]) for k in runs if k[0] == "peers"})
    for name, r, m in keys:
        s, e = split_name(name)
        out.append((s, r, m, e, runs[("peers", m, r, name)]))
    return out


def peers_table(runs, mpis, ranks_list):
    """halox / peer for every peer entry, from the interleaved counters of halox-bench-peers."""
    lines = ["| scenario | ranks | MPI | peer | faces | peer median µs | halox µs (backend) | "
             "**halox / peer** | fastest: halox / peer | transport µs | halox eff. transport | "
             "peer eff. transport | peer's owned-block copy µs | target | met |",
             "|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    misses = []
    for s, r, m, e, row in peer_rows(runs, mpis, ranks_list):
        peer = PEER_NAMES.get(e, e)
        if row.get("error"):
            lines.append(f"| `{s}` | {r} | {m} | {peer} | | skipped: {row['error'][:60]} "
                         "| | | | | | | | | |")
            continue
        contiguous = row.get("contiguous", 0) >= 1
        ratio = row.get("ratio_halox")
        heff = row.get("halox_eff_transport")
        label = row.get("label", "")
        backend = ""
        mm = re.search(r"selected=(\w+)", label)
        if mm:
            backend = f" ({mm[1]})"
        if e.startswith("petsc"):
            # PETSc packs strided faces; a contiguous face it sends in place, and there the
            # transport limit is the yardstick for both.
            if contiguous:
                target, met = f"halox eff. ≥ {PEER_EFF_TARGET}", heff is not None and heff >= PEER_EFF_TARGET
            else:
                target, met = f"≤ {PEER_RATIO_TARGET}", ratio is not None and ratio <= PEER_RATIO_TARGET
            if not met:
                misses.append((s, r, m, e))
            met_s = "yes" if met else "**no**"
        else:
            target, met_s = "—", "—"
        faces = ("contiguous" if contiguous else "strided") if s.startswith("halo/") else "—"
        owned = row.get("owned_copy_us")
        lines.append(f"| `{s}` | {r} | {m} | {peer} | {faces} | {fmt_us(row.get('median_us'))} | "
                     f"{fmt_us(row.get('halox_us'))}{backend} | **{fmt_ratio(ratio)}** | "
                     f"{fmt_ratio(row.get('ratio_halox_min'))} | "
                     f"{fmt_us(row.get('transport_us'))} | {fmt_ratio(heff)} | "
                     f"{fmt_ratio(row.get('eff_transport'))} | {fmt_us(owned) if owned else '—'} | "
                     f"{target} | {met_s} |")
    return "\n".join(lines), misses


def plot_peers(runs, mpis, ranks_list, path):
    rows = [x for x in peer_rows(runs, mpis, ranks_list) if not x[4].get("error")]
    if not rows:
        return False
    fig, ax = plt.subplots(figsize=(max(8, 0.45 * len(rows) + 3), 6))
    labels, vals, colors = [], [], []
    cmap = plt.get_cmap("tab10")
    kinds = sorted({e for _, _, _, e, _ in rows})
    combos = {(m, r) for _, r, m, _, _ in rows}
    for s, r, m, e, row in rows:
        label = f"{s.split('/', 1)[1]}/{e}"
        if len(combos) > 1:
            label += f" ({m}, {r})"
        labels.append(label)
        vals.append(row.get("ratio_halox", np.nan))
        colors.append(cmap(kinds.index(e) % 10))
    x = np.arange(len(rows))
    ax.bar(x, vals, 0.7, color=colors)
    ax.set_yscale("log")
    finite = [v for v in vals if np.isfinite(v) and v > 0]
    if finite:
        ax.set_ylim(min(min(finite), PEER_RATIO_TARGET) / 2, max(max(finite), 1.0) * 2)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.axhline(PEER_RATIO_TARGET, color="k", linestyle="--", linewidth=0.8)
    ax.text(len(rows) - 0.5, PEER_RATIO_TARGET, f" {PEER_RATIO_TARGET} (target where PETSc packs)",
            va="bottom", ha="right", fontsize=7)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=6)
    ax.set_ylabel("halox time / peer time\n(log; < 1: halox faster)")
    ax.grid(axis="y", alpha=0.3, which="both")
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(i % 10)) for i in range(len(kinds))]
    ax.legend(handles, [PEER_NAMES.get(k, k) for k in kinds], fontsize=7)
    ax.set_title("halox vs peer libraries on the same geometry (interleaved, same run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def ddt_tables(runs, mpis):
    keys = sorted({k[3] for k in runs if k[0] == "ddt"})
    objs = []
    for k in keys:
        mm = re.match(r"ddt/(\w+)/b(\d+)/", k)
        if mm and (mm[1], int(mm[2])) not in objs:
            objs.append((mm[1], int(mm[2])))
    order = {"1KiB": 0, "1MiB": 1, "4MiB": 2}
    objs.sort(key=lambda o: (order.get(o[0], 9), o[1]))

    def med(m, size, block, what):
        row = runs.get(("ddt", m, 2, f"ddt/{size}/b{block}/{what}"))
        if row is None:
            row = next((v for k, v in runs.items()
                        if k[0] == "ddt" and k[1] == m and k[3] == f"ddt/{size}/b{block}/{what}"), None)
        if row is None or row.get("error"):
            return None
        return row.get("median_us")

    out = []
    for kind, cols in (("pack", CONS + ["halox"]),
                       ("unpack", CONS + ["halox"]),
                       ("pingpong", CONS + ["halox_pack", "contiguous"])):
        head = "| object | block B |"
        sep = "|---|---:|"
        for m in mpis:
            for c in cols:
                head += f" {m} {c} |"
                sep += "---:|"
            head += f" {m} spread |"
            sep += "---:|"
        lines = [f"**{kind}** (median µs{'; round trip' if kind == 'pingpong' else ''}; spread = "
                 "slowest / fastest of the three MPI constructions of the same bytes)", "",
                 head, sep]
        for size, block in objs:
            line = f"| {size} | {block} |"
            any_val = False
            for m in mpis:
                vals = [med(m, size, block, f"{kind}/{c}") for c in cols]
                any_val = any_val or any(v is not None for v in vals)
                line += "".join(f" {fmt_us(v)} |" for v in vals)
                mpi_vals = [v for v in vals[:3] if v]
                spread = max(mpi_vals) / min(mpi_vals) if len(mpi_vals) == 3 else None
                line += f" {fmt_ratio(spread)} |"
            if any_val:
                lines.append(line)
        out.append("\n".join(lines))
    return "\n\n".join(out), objs


def plot_family(runs, family, key, target_lines, mpis, ranks_list, scenarios, backends, path, title):
    combos = [(m, r) for r in ranks_list for m in mpis
              if any(k[0] == "bench" and k[1] == m and k[2] == r and k[3].startswith(family + "/")
                     for k in runs)]
    if not combos or not scenarios:
        return False
    fig, axes = plt.subplots(len(combos), 1, figsize=(max(8, 1.2 * len(scenarios) + 3), 3.2 * len(combos)),
                             squeeze=False)
    width = 0.8 / max(1, len(backends))
    x = np.arange(len(scenarios))
    colors = plt.get_cmap("tab10")
    for ax, (m, r) in zip(axes[:, 0], combos):
        for i, b in enumerate(backends):
            vals = []
            for s in scenarios:
                row = runs.get(("bench", m, r, f"{s}/{b}"))
                vals.append(row.get(key, np.nan) if row and not row.get("error") else np.nan)
            xs = x + (i - (len(backends) - 1) / 2) * width
            clipped = [min(v, CLIP) if np.isfinite(v) else np.nan for v in vals]
            ax.bar(xs, clipped, width, label=b, color=colors(i % 10))
            for xv, v in zip(xs, vals):
                if np.isfinite(v) and v > CLIP:
                    # An outlier of the limit (or of the backend) on a noisy machine: show its
                    # value instead of letting it flatten every other bar.
                    ax.text(xv, CLIP, f"{v:.1f}", rotation=90, ha="center", va="top", fontsize=6,
                            color="white")
        if key == "eff_transport":
            # The ceiling of any path that writes its send buffers just before sending: transport
            # limit / (memcpy + transport + memcpy) limit, from the mpi_pack entry's counters.
            for xi, sc in enumerate(scenarios):
                row = runs.get(("bench", m, r, f"{sc}/mpi_pack"))
                if row and row.get("copy_transport_us"):
                    c = min(CLIP, row.get("transport_us", 0) / row["copy_transport_us"])
                    ax.hlines(c, xi - 0.45, xi + 0.45, colors="k", linewidth=2,
                              label="copy+transport limit" if xi == 0 else None)
        for y, lab in target_lines:
            ax.axhline(y, color="k", linestyle="--", linewidth=0.8)
            ax.text(len(scenarios) - 0.5, y, f" {lab}", va="bottom", ha="right", fontsize=7)
        ax.set_title(f"{m}, {r} ranks", fontsize=9)
        ax.set_ylabel(key.replace("_", " "))
        ax.set_xticks(x)
        ax.set_xticklabels([s.split("/", 1)[1] for s in scenarios], rotation=20, ha="right", fontsize=7)
        ax.set_ylim(0, CLIP)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.suptitle(title, fontsize=10)
    fig.legend(handles, labels, fontsize=7, ncol=min(8, len(labels)), loc="upper center",
               bbox_to_anchor=(0.5, 1 - 0.35 / fig.get_figheight()))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.6 / fig.get_figheight()))
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def plot_ddt(runs, mpis, objs, kind, cols, path, title):
    sizes = []
    for s, _ in objs:
        if s not in sizes:
            sizes.append(s)
    if not sizes:
        return False
    fig, axes = plt.subplots(len(sizes), len(mpis), figsize=(4.5 * len(mpis), 3.0 * len(sizes)),
                             squeeze=False)
    for i, size in enumerate(sizes):
        blocks = [b for s, b in objs if s == size]
        for j, m in enumerate(mpis):
            ax = axes[i, j]
            plotted = False
            for c in cols:
                ys = []
                for b in blocks:
                    row = next((v for k, v in runs.items()
                                if k[0] == "ddt" and k[1] == m and k[3] == f"ddt/{size}/b{b}/{kind}/{c}"),
                               None)
                    ys.append(row.get("median_us", np.nan) if row and not row.get("error") else np.nan)
                style = "--" if c in ("halox", "halox_pack") else ("-." if c == "contiguous" else "-")
                ax.plot(blocks, ys, style, marker="o", markersize=3, label=c)
                plotted = plotted or any(np.isfinite(y) and y > 0 for y in ys)
            if not plotted:
                ax.set_title(f"{m}: {size} object (no data)", fontsize=9)
                ax.set_axis_off()
                continue
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{m}: {size} object", fontsize=9)
            ax.set_xlabel("block bytes (stride 512 B)", fontsize=8)
            ax.set_ylabel("median µs", fontsize=8)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def machine_line(contexts):
    ctx = next(iter(contexts.values()), {})
    cpus = ctx.get("num_cpus", "?")
    mhz = ctx.get("mhz_per_cpu", "?")
    host = ctx.get("host_name", "?")
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return host, cpus, f"{model}, {cpus} CPU(s) at {mhz} MHz"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", required=True)
    ap.add_argument("--elapsed", type=float, default=None)
    ap.add_argument("--command", default="")
    ap.add_argument("--quick", default="0")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    runs, contexts = load(a.files)
    if not runs:
        print("report: no results to report", file=sys.stderr)
        return 1
    mpis = sorted({k[1] for k in runs})
    ranks_list = sorted({k[2] for k in runs if k[0] == "bench"})
    host, cpus, machine = machine_line(contexts)

    halo_md, halo_s, halo_b = scenario_table(runs, "halo", mpis, ranks_list, False)
    redist_md, red_s, red_b = scenario_table(runs, "redist", mpis, ranks_list, True)
    targets_md, misses = targets_table(runs, mpis, ranks_list)
    peers_md, peer_misses = peers_table(runs, mpis, ranks_list)
    has_peers = any(k[0] == "peers" for k in runs)
    ddt_md, objs = ddt_tables(runs, mpis)

    pngs = []
    if plot_family(runs, "halo", "eff_transport", [(0.8, "0.8 contiguous"), (0.5, "0.5 strided")],
                   mpis, ranks_list, halo_s, halo_b, os.path.join(a.out, "halo.png"),
                   "Halo exchange: transport limit / backend time (1 = at the limit)"):
        pngs.append(("halo.png", "Halo exchange efficiency against the transport limit"))
    if plot_family(runs, "redist", "eff_alltoall", [(0.8, "within 1.25x of alltoall")],
                   mpis, ranks_list, red_s, red_b, os.path.join(a.out, "redist.png"),
                   "Redistribution: MPI_Alltoall baseline / backend time"):
        pngs.append(("redist.png", "Redistribution efficiency against the MPI_Alltoall baseline"))
    if has_peers and plot_peers(runs, mpis, ranks_list, os.path.join(a.out, "peers.png")):
        pngs.append(("peers.png", "halox / peer library time on the same geometry"))
    if plot_ddt(runs, mpis, objs, "pack", CONS + ["halox"], os.path.join(a.out, "ddt_pack.png"),
                "Packing a strided object: MPI_Pack (three constructions) vs halox's pack path"):
        pngs.append(("ddt_pack.png", "MPI_Pack vs halox pack"))
    if plot_ddt(runs, mpis, objs, "pingpong", CONS + ["halox_pack", "contiguous"],
                os.path.join(a.out, "ddt_pingpong.png"),
                "Ping-pong of a strided object between ranks 0 and 1 (round trip)"):
        pngs.append(("ddt_pingpong.png", "Ping-pong: derived type vs halox pack + contiguous send"))

    libs = sorted({f"{k[1]}: {c.get('mpi_library', '?')}" for k, c in contexts.items()})
    settings = sorted({c.get("halox_bench_settings", "?") for c in contexts.values()})
    oversub = [r for r in ranks_list if isinstance(cpus, int) and r > cpus]
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    md = [f"# halox benchmark comparison — {host}, {now}", ""]
    md.append("**An example run, not a claim.** " + (
        f"Machine: {machine}. " if machine else "") + (
        f"Runs at {', '.join(map(str, oversub))} ranks oversubscribe the {cpus} cores (ranks "
        "time-share cores; MPICH's busy polling suffers most; runs that fit are bound one rank "
        "per core), and other jobs shared the machine, so absolute times are noisy: compare "
        "ratios within one run. " if oversub else "") + (
        "`--quick`: extents scaled down (HALOX_BENCH_SCALE) and few iterations." if a.quick == "1"
        else ""))
    md.append("")
    md.append(f"- Command: `{a.command}`" + (f" — took {a.elapsed / 60:.1f} min" if a.elapsed else ""))
    md.append("- MPI: " + "; ".join(libs))
    md.append("- Settings: " + "; ".join(settings))
    md.append("- Times are the median and p90 over iterations of the slowest rank's time "
              "(MPI_Barrier, run, MPI_Allreduce(MAX)). *eff. transport* = time of a pre-packed "
              "contiguous MPI_Isend/Irecv exchange of the same bytes with the same peers / this "
              "time (1.00 = at the transport limit). *eff. copy+transport* = the same exchange with "
              "the send buffers written by memcpy just before sending and the receive buffers "
              "copied out after (a pack backend whose pack and unpack run at memcpy speed) / "
              "this time. *eff. alltoall* = MPI_Alltoall of the same bytes on pre-packed "
              "buffers / this time. `phase_pack`/`phase_unpack` time halox's "
              "CPU pack path alone on the plan's schedule. See docs/bench.md.")
    md.append("")
    md.append("## Targets")
    md.append("")
    md.append("Goals: `mpi_pack` ≥ 0.8 of the transport limit when faces are contiguous, "
              "≥ 0.5 when strided; a redistribution within 1.25× of the MPI_Alltoall baseline.")
    md.append("")
    md.append("The last two columns: `mpi_pack` against the copy+transport limit, and how much "
              "of the transport limit any path that writes its messages just before sending can "
              "reach on this machine (black bars in the plot).")
    md.append("")
    md.append(targets_md)
    md.append("")
    if misses:
        md.append(f"{len(misses)} combination(s) miss their target on this run (marked **no**).")
        md.append("")
    for png, cap in pngs:
        if png != "peers.png":
            md.append(f"![{cap}]({png})")
            md.append("")
    if has_peers:
        md.append("## Peers")
        md.append("")
        md.append("halox-bench-peers runs PETSc's DMDA ghost update (DMGlobalToLocal, "
                  "DMLocalToLocal; DM_BOUNDARY_NONE) and FFTW-MPI's transpose on the geometry of "
                  "the halox-bench scenario of the same name. Each peer entry times, between its "
                  "own iterations, halox's `auto` plan on that scenario and the transport limit, so "
                  "*halox / peer* compares measurements taken under the same load (< 1: halox is "
                  "faster; *fastest*: the same ratio of the fastest iterations, the least disturbed "
                  "by other load). *owned-block copy*: a memcpy of the rank's owned block, which PETSc's "
                  "ghost update also copies between its global and ghosted local vectors and "
                  "halox (ghost cells updated in place) does not. Targets: halox ≤ "
                  f"{PEER_RATIO_TARGET}× PETSc's time where the faces are strided (PETSc packs), "
                  f"halox ≥ {PEER_EFF_TARGET} of the transport limit where they are contiguous.")
        md.append("")
        md.append(peers_md)
        md.append("")
        if peer_misses:
            md.append(f"{len(peer_misses)} peer comparison(s) miss their target on this run.")
            md.append("")
        if any(p == "peers.png" for p, _ in pngs):
            md.append("![halox / peer library time on the same geometry](peers.png)")
            md.append("")
    md.append("## Halo exchange")
    md.append("")
    md.append(halo_md)
    md.append("")
    md.append("## Redistribution")
    md.append("")
    md.append(redist_md)
    md.append("")
    md.append("## Derived datatypes (halox-ddtbench, ranks 0 and 1)")
    md.append("")
    md.append("Objects of 1 KiB / 1 MiB / 4 MiB in blocks of 1–512 B, stride 512 B. An MPI that "
              "handles the three constructions of the same bytes alike has a spread near 1; "
              "halox sees one box whatever the construction. Missing rows were skipped "
              "(object spans more than HALOX_DDT_MAX_EXTENT).")
    md.append("")
    md.append(ddt_md)
    md.append("")
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(md))
    print(f"report: wrote {os.path.join(a.out, 'results.md')} and {len(pngs)} plot(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
