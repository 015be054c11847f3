#!/usr/bin/env python3
"""Tables (markdown, to stdout) and plots (PNG) of the issue-3 experiments.

    report.py DATA_DIR OUT_BASE HB_LOOPS

DATA_DIR holds exp1.csv .. exp4.csv written by experiments.sh; the plots go
to OUT_BASE-exp1.png .. -exp4.png (needs python3-matplotlib; without it the
tables are still written and a note says so). Every cell is a median over
the repetitions; the raw samples follow the tables.
"""
import csv
import os
import statistics
import sys
from collections import defaultdict

data_dir, out_base, hb_loops = sys.argv[1], sys.argv[2], sys.argv[3]

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except Exception as e:  # pragma: no cover - depends on the machine
    plt = None
    plot_note = f"(no plots: matplotlib unavailable: {e})"
else:
    plot_note = ""


def rows(name):
    path = os.path.join(data_dir, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def med(xs):
    xs = [float(x) for x in xs if x not in ("", None)]
    return statistics.median(xs) if xs else float("nan")


def pct(before, after):
    return 100.0 * (after - before) / before if before else float("nan")


def png(fig, n):
    path = f"{out_base}-exp{n}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"![experiment {n}]({os.path.basename(path)})")
    print()


out = print

# ---------------------------------------------------------------- 1
r1 = rows("exp1.csv")
if r1:
    out("## 1. Per-CPU partial lists: uhackbench, cpu_partial=0 (before) vs default (after)")
    out()
    out(f"Threads, 20 senders + 20 receivers per group, {hb_loops} loops, 100-byte messages from one cache "
        "(`uhackbench-msg`); before = `USLAB_OPTIONS=\"uhackbench-msg:cpu_partial=0\"`, after = the default "
        "cpu_partial. Ops = allocations + frees = 2 x groups x 20 x 20 x loops. NL/Mop = node-lock "
        "acquisitions per million operations. Medians; % = (after - before) / before.")
    out()
    out("| transport | groups | before: time (s) | after: time (s) | time % | before: NL/Mop | after: NL/Mop | "
        "NL ratio before/after | before: ALLOC_SLAB | after: ALLOC_SLAB | after: CPU_PARTIAL_FREE |")
    out("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    g1 = defaultdict(list)
    for r in r1:
        g1[(r["transport"], int(r["groups"]), r["mode"])].append(r)
    keys = sorted({(t, g) for (t, g, _m) in g1}, key=lambda k: (k[0] != "ring", k[1]))
    plot1 = []
    for t, g in keys:
        b, a = g1.get((t, g, "off"), []), g1.get((t, g, "default"), [])
        if not a or not b:
            continue
        tb, ta = med(x["time_s"] for x in b), med(x["time_s"] for x in a)
        nlb = med(float(x["node_lock"]) / float(x["ops"]) * 1e6 for x in b)
        nla = med(float(x["node_lock"]) / float(x["ops"]) * 1e6 for x in a)
        asb, asa = med(x["alloc_slab"] for x in b), med(x["alloc_slab"] for x in a)
        cpf = med(x["cpu_partial_free"] for x in a)
        ratio = nlb / nla if nla else float("inf")
        out(f"| {t} | {g} | {tb:.3f} | {ta:.3f} | {pct(tb, ta):+.1f} % | {nlb:.0f} | {nla:.0f} | {ratio:.2f}x | "
            f"{asb:.0f} | {asa:.0f} | {cpf:.0f} |")
        if t == "ring":
            plot1.append((g, tb, ta, nlb, nla))
    out()
    out("In the 2011 thread's form (ring transport, median time in seconds):")
    out()
    out("```")
    out(f"{'':24s} {'Before':>8s} {'After':>8s}")
    for g, tb, ta, _nb, _na in plot1:
        out(f"./uhackbench {g:<2d} thread {hb_loops}")
        out(f"{'Time:':24s} {tb:8.3f} {ta:8.3f}")
    out("```")
    out()
    if plt and plot1:
        fig, ax = plt.subplots(1, 2, figsize=(10, 4))
        gs = [p[0] for p in plot1]
        x = range(len(gs))
        w = 0.38
        ax[0].bar([i - w / 2 for i in x], [p[1] for p in plot1], w, label="cpu_partial=0 (before)")
        ax[0].bar([i + w / 2 for i in x], [p[2] for p in plot1], w, label="default (after)")
        ax[0].set_xticks(list(x), [str(g) for g in gs])
        ax[0].set_xlabel("groups")
        ax[0].set_ylabel("time (s), median")
        ax[0].set_title("uhackbench (ring) time")
        ax[0].legend()
        ax[1].bar([i - w / 2 for i in x], [p[3] for p in plot1], w, label="cpu_partial=0 (before)")
        ax[1].bar([i + w / 2 for i in x], [p[4] for p in plot1], w, label="default (after)")
        ax[1].set_xticks(list(x), [str(g) for g in gs])
        ax[1].set_xlabel("groups")
        ax[1].set_ylabel("node-lock acquisitions per Mop")
        ax[1].set_title("node lock")
        ax[1].legend()
        png(fig, 1)

# ---------------------------------------------------------------- 2
r2 = rows("exp2.csv")
if r2:
    out("## 2. Bulk alloc+free vs single alloc/free (slab_bulk_test01 style)")
    out()
    out("256-byte objects, one thread, ns per object (one alloc + one free). single = N x "
        "uslab_cache_alloc then N x uslab_cache_free; bulk = uslab_cache_alloc_bulk(N) + "
        "uslab_cache_free_bulk(N); reuse = alloc+free of one object (the fast-path baseline). "
        "tuned = `bulk-test:cpu_partial=256 bulk-test:min_partial=9`. Target: bulk/single <= 0.5 for N >= 32.")
    out()
    d2 = defaultdict(dict)
    for r in r2:
        d2[r["config"]][int(r["n"])] = (float(r["reuse_ns"]), float(r["single_ns"]), float(r["bulk_ns"]))
    ns = sorted(set(n for c in d2.values() for n in c))
    out("| N | default: reuse | default: single | default: bulk | bulk/single | tuned: single | tuned: bulk | "
        "bulk/single (tuned) |")
    out("|--:|--:|--:|--:|--:|--:|--:|--:|")
    for n in ns:
        d = d2.get("default", {}).get(n)
        t = d2.get("tuned", {}).get(n)
        cells = [str(n)]
        cells += [f"{d[0]:.2f}", f"{d[1]:.2f}", f"{d[2]:.2f}", f"{d[2] / d[1]:.3f}"] if d else ["?"] * 4
        cells += [f"{t[1]:.2f}", f"{t[2]:.2f}", f"{t[2] / t[1]:.3f}"] if t else ["?"] * 3
        out("| " + " | ".join(cells) + " |")
    out()
    st = os.path.join(data_dir, "exp2.stats")
    if os.path.exists(st):
        out("Cache events over each whole run:")
        out()
        out("```")
        out(open(st).read().rstrip())
        out("```")
        out()
    if plt:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for cfg, style in (("default", "-"), ("tuned", "--")):
            c = d2.get(cfg, {})
            xs = sorted(c)
            if not xs:
                continue
            ax.plot(xs, [c[n][1] for n in xs], style, marker="o", label=f"single loop ({cfg})")
            ax.plot(xs, [c[n][2] for n in xs], style, marker="s", label=f"bulk ({cfg})")
        c = d2.get("default", {})
        if c:
            xs = sorted(c)
            ax.plot(xs, [c[n][0] for n in xs], ":", color="gray", label="reuse (one object)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("objects per bulk (N)")
        ax.set_ylabel("ns per object (alloc + free)")
        ax.set_title("bulk vs single alloc/free, 256-byte objects")
        ax.legend(fontsize=8)
        png(fig, 2)

# ---------------------------------------------------------------- 3
r3 = rows("exp3.csv")
if r3:
    out("## 3. Merging vs slab_nomerge vs tuning (2015 thread)")
    out()
    out("rx thread allocates 256-byte skbs (`skbuff_head_cache`), tx thread frees them (bulks of 32, or one "
        "by one), a third thread churns `other-256` (merged into skbuff_head_cache unless slab_nomerge), "
        "paced to one operation per skb. ns per skb = wall time / skbs; Mops/s counts skb allocs + frees + "
        "churn operations. tuned = merged + `skbuff_head_cache:cpu_partial=256 skbuff_head_cache:min_partial=9`. "
        "Medians; diff is against merged with the same free mode.")
    out()
    out("| tx frees | config | ns per skb | diff ns | Mops/s | NODE_LOCK per skb | new slabs per 1000 skbs |")
    out("|---|---|--:|--:|--:|--:|--:|")
    g3 = defaultdict(list)
    for r in r3:
        g3[(int(r["bulk"]), r["config"])].append(r)
    plot3 = {}
    for b in sorted({k[0] for k in g3}):
        base_ns = med(x["ns_per_skb"] for x in g3.get((b, "merged"), []))
        for cfg in ("merged", "nomerge", "tuned"):
            xs = g3.get((b, cfg))
            if not xs:
                continue
            nsk = med(x["ns_per_skb"] for x in xs)
            mops = med(x["mops"] for x in xs)
            nskb = float(xs[0]["skbs"])
            nl = med(x["node_lock"] for x in xs)
            slabs = med(x["alloc_slab"] for x in xs)
            plot3[(b, cfg)] = nsk
            label = "bulk 32" if b == 32 else "single"
            out(f"| {label} | {cfg} | {nsk:.1f} | {nsk - base_ns:+.1f} | {mops:.2f} | {nl / nskb:.3f} | "
                f"{slabs / nskb * 1000:.2f} |")
    out()
    if plt and plot3:
        fig, ax = plt.subplots(figsize=(7, 4))
        cfgs = ["merged", "nomerge", "tuned"]
        w = 0.38
        for j, b in enumerate(sorted({k[0] for k in plot3})):
            ax.bar([i + (j - 0.5) * w for i in range(3)], [plot3.get((b, c), 0) for c in cfgs], w,
                   label="bulk free 32" if b == 32 else "single free")
        ax.set_xticks(range(3), cfgs)
        ax.set_ylabel("ns per skb (median)")
        ax.set_title("skb producer/consumer with a churning 256-byte cache")
        ax.legend()
        png(fig, 3)

# ---------------------------------------------------------------- 4
r4 = rows("exp4.csv")
if r4:
    out("## 4. Slab order under fragmentation and a memory limit (2009 thread)")
    out()
    out("24 caches (24..6000 bytes), generations of 48 MiB from a random third of the caches, each "
        "generation freed but for 3 % survivors that pin their slabs. limit = RLIMIT_AS this many MiB above "
        "the address space at start (0 = none). NULLs: allocations that failed (the workload skips them; "
        "a generation ends after 100 in a row, so the count also reflects that policy). Medians.")
    out()
    out("| limit (MiB) | slub_max_order | time (s) | peak RSS (MiB) | peak mapped (MiB) | slabs at end | "
        "allocations | NULLs | ORDER_FALLBACK |")
    out("|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    g4 = defaultdict(list)
    for r in r4:
        g4[(int(r["limit_mib"]), int(r["max_order"]))].append(r)
    for lim, o in sorted(g4):
        xs = g4[(lim, o)]
        out(f"| {lim or 'none'} | {o} | {med(x['time_s'] for x in xs):.3f} | "
            f"{med(x['peak_rss_kib'] for x in xs) / 1024:.1f} | {med(x['peak_mapped_kib'] for x in xs) / 1024:.1f} | "
            f"{med(x['slabs'] for x in xs):.0f} | {med(x['allocs'] for x in xs):.0f} | "
            f"{med(x['nulls'] for x in xs):.0f} | {med(x['order_fallback'] for x in xs):.0f} |")
    out()
    if plt:
        fig, ax = plt.subplots(1, 3, figsize=(12, 3.8))
        lims = sorted({k[0] for k in g4})
        orders = sorted({k[1] for k in g4})
        w = 0.38
        for j, lim in enumerate(lims):
            lab = "no limit" if lim == 0 else f"RLIMIT_AS +{lim} MiB"
            xs = [i + (j - 0.5) * w for i in range(len(orders))]
            ax[0].bar(xs, [med(x["peak_rss_kib"] for x in g4[(lim, o)]) / 1024 for o in orders], w, label=lab)
            ax[1].bar(xs, [med(x["time_s"] for x in g4[(lim, o)]) for o in orders], w, label=lab)
            ax[2].bar(xs, [med(x["nulls"] for x in g4[(lim, o)]) for o in orders], w, label=lab + " NULLs")
        for a, t in zip(ax, ("peak RSS (MiB)", "time (s)", "failed allocations")):
            a.set_xticks(range(len(orders)), [f"max_order={o}" for o in orders])
            a.set_title(t)
            a.legend(fontsize=7)
        png(fig, 4)

if plot_note:
    out(plot_note)
    out()

out("## Raw samples")
out()
for name in ("exp1.csv", "exp2.csv", "exp3.csv", "exp4.csv"):
    path = os.path.join(data_dir, name)
    if os.path.exists(path):
        out(f"<details><summary>{name}</summary>")
        out()
        out("```")
        out(open(path).read().rstrip())
        out("```")
        out()
        out("</details>")
        out()
