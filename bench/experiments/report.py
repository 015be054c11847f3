#!/usr/bin/env python3
"""Tables (markdown, to stdout) and plots (PNG) of the experiments of issues 3, 10 and 18.

    report.py DATA_DIR OUT_BASE HB_LOOPS [SWEEP_HB_LOOPS]

DATA_DIR holds exp1.csv .. exp4.csv, exp5.csv, exp6.csv, exp7_hb.csv and
exp7_peers.csv written by experiments.sh (any subset); the plots go to
OUT_BASE-exp1.png .. -exp7.png (needs python3-matplotlib; without it the
tables are still written and a note says so). Every cell is a median over
the repetitions; the raw samples follow the tables.
"""
import csv
import math
import os
import statistics
import sys
from collections import defaultdict

data_dir, out_base, hb_loops = sys.argv[1], sys.argv[2], sys.argv[3]
sweep_hb_loops = sys.argv[4] if len(sys.argv) > 4 else "?"

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
        "(`uhackbench-msg`), classic mode (`slub_sheaf_capacity=0`, where CPU partial lists exist) in both arms; "
        "before = `USLAB_OPTIONS=\"slub_sheaf_capacity=0 uhackbench-msg:cpu_partial=0\"`, after = the default "
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

# ---------------------------------------------------------------- 5
# The per-CPU modes in the 2010 table's order (SLAB, SLUB, SLUB+Q), then
# the later ones; the kernel allocator each one follows.
CPU_MODES = ["slab", "classic", "sheaves", "slqb", "home"]
KERNEL_NAME = {"slab": "SLAB", "classic": "SLUB", "sheaves": "SLUB+Q", "slqb": "SLQB", "home": "home"}


def mode_label(c):
    k = KERNEL_NAME.get(c, c)
    return c if k == c else f"{c} ({k})"


def mode_order(names):
    return [c for c in CPU_MODES if c in names] + sorted(set(names) - set(CPU_MODES))


r5 = rows("exp5.csv")
if r5:
    g5 = defaultdict(list)
    for r in r5:
        g5[(r["mode"], int(r["groups"]), int(r["loops"]), r["config"])].append(r)
    cfgs5 = mode_order({k[3] for k in g5})
    ref5 = "slab" if "slab" in cfgs5 else "classic" if "classic" in cfgs5 else cfgs5[0]
    others5 = [c for c in cfgs5 if c != ref5]
    modes = [m for m in ("cache", "malloc") if any(k[0] == m for k in g5)]
    rows5 = sorted({(k[0], k[1], k[2]) for k in g5}, key=lambda k: (modes.index(k[0]), -k[1], k[2]))
    res5 = {}   # (mode, groups, loops) -> cfg -> (time, NL/Mop, peak RSS MiB, runs)
    for m, g, l in rows5:
        for c in cfgs5:
            xs = g5.get((m, g, l, c), [])
            if xs:
                res5.setdefault((m, g, l), {})[c] = (
                    med(x["time_s"] for x in xs),
                    med(float(x["node_lock"]) / float(x["ops"]) * 1e6 for x in xs),
                    med(x["maxrss_kib"] for x in xs) / 1024, len(xs))
    nreps5 = max(v[3] for d in res5.values() for v in d.values())
    out("## 5. The 2010 table: uhackbench in every per-CPU mode")
    out()
    out("Lameter's SLAB/SLUB/SLUB+Q hackbench table (2010 queuing thread) scaled to this machine: threads, "
        "20 senders + 20 receivers per group, 100-byte messages, ring transport, 1/10/100 groups. Each column is "
        "a per-CPU mode, `USLAB_OPTIONS=slub_cpu_mode=NAME`: " +
        ", ".join(mode_label(c) for c in cfgs5) +
        ("" if "slab" in cfgs5 else "; no slab (SLAB) column: this build does not take slub_cpu_mode=slab") + ". "
        "cache mode: one uslab cache (`uhackbench-msg`), node-lock count of that cache as uhackbench prints it; "
        "malloc mode: `LD_PRELOAD=libuslab-malloc.so`, node-lock count summed over every cache, from "
        "`uslabinfo run --json` (which asks the process for a snapshot every 200 ms, in every arm). "
        "Ops = allocations + frees = 2 x groups x 20 x 20 x loops; NL/Mop = node-lock (node list lock) "
        f"acquisitions per million operations. The modes run interleaved, in an order that rotates from one "
        f"repetition to the next; medians of {nreps5} run(s); % = (mode - {ref5}) / {ref5}.")
    out()

    def table5(title, idx, fmt, with_pct):
        out(title)
        out()
        hdr = "| mode | groups | loops | " + " | ".join(mode_label(c) for c in cfgs5)
        if with_pct:
            hdr += " | " + " | ".join(f"{c} %" for c in others5)
        out(hdr + " |")
        out("|---|--:|--:|" + "--:|" * (len(cfgs5) + (len(others5) if with_pct else 0)))
        for (m, g, l), d in res5.items():
            cells = [fmt(d[c][idx]) if c in d else "-" for c in cfgs5]
            if with_pct:
                cells += [f"{pct(d[ref5][idx], d[c][idx]):+.1f} %" if c in d and ref5 in d else "-" for c in others5]
            out(f"| {m} | {g} | {l} | " + " | ".join(cells) + " |")
        out()
    table5("Time (s), smaller is better:", 0, lambda v: f"{v:.3f}", True)
    table5("Node-lock acquisitions per million operations (NL/Mop):", 1, lambda v: f"{v:.1f}", True)
    table5("Peak RSS (MiB, the whole process):", 2, lambda v: f"{v:.1f}", False)
    out(f"In the 2010 thread's form (time in seconds, smaller is better; % against {ref5}):")
    out()
    out("```")
    heads = [c if KERNEL_NAME.get(c, c) == c else KERNEL_NAME[c] + "/" + c for c in cfgs5]
    out(f"{'Groups':>6s} {'NR':>6s} {'Mode':>6s} " + " ".join(f"{h:>15s}" for h in heads) +
        " " + " ".join(f"{'% ' + c:>9s}" for c in others5))
    out("-" * (21 + 16 * len(cfgs5) + 10 * len(others5)))
    for (m, g, l), d in res5.items():
        out(f"{g:6d} {l:6d} {m:>6s} " + " ".join(f"{d[c][0]:15.3f}" if c in d else f"{'-':>15s}" for c in cfgs5) +
            " " + " ".join(f"{pct(d[ref5][0], d[c][0]):+9.0f}" if c in d and ref5 in d else f"{'-':>9s}"
                           for c in others5))
    out("```")
    out()
    if plt and res5:
        fig, ax = plt.subplots(len(modes), 2, figsize=(12, 3.8 * len(modes)), squeeze=False)
        w = 0.8 / len(cfgs5)
        for i, m in enumerate(modes):
            ks = sorted((k for k in res5 if k[0] == m), key=lambda k: k[1])
            x = range(len(ks))
            labels = [f"{k[1]} ({k[2]})" for k in ks]
            for j, (what, idx) in enumerate((("time (s), median, log scale", 0), ("node-lock acquisitions per Mop", 1))):
                axx = ax[i][j]
                for n, c in enumerate(cfgs5):
                    axx.bar([v + (n - (len(cfgs5) - 1) / 2) * w for v in x],
                            [res5[k][c][idx] if c in res5[k] else 0 for k in ks], w,
                            label=mode_label(c))
                axx.set_xticks(list(x), labels)
                axx.set_xlabel("groups (loops)")
                axx.set_ylabel(what)
                if j == 0:
                    axx.set_yscale("log")
                axx.set_title(f"uhackbench {m} mode: {'time' if j == 0 else 'node lock'}")
                axx.legend(fontsize=7)
        png(fig, 5)

# ---------------------------------------------------------------- 6
r6 = rows("exp6.csv")
if r6:
    objs = r6[0]["objects"]
    g6 = defaultdict(list)
    for r in r6:
        g6[(r["config"], int(r["touch"]))].append(r)
    names6 = {k[0] for k in g6}
    modes6 = mode_order({c.split("-", 1)[1] for c in names6 if c.startswith(("malloc-", "cache-"))})
    order6 = [f"malloc-{m}" for m in modes6] + ["glibc", "mimalloc", "jemalloc", "tcmalloc"] + \
        [f"cache-{m}" for m in modes6]
    cfgs6 = [c for c in order6 if c in names6] + sorted(names6 - set(order6))
    ref6 = "glibc" if "glibc" in names6 else None
    nreps6 = max(len(v) for v in g6.values())
    out("## 6. Cold objects: allocate, free in random order, allocate again")
    out()
    out(f"One thread: {int(objs):,} allocations of 64..256 bytes (uniform, fixed seed), then all freed in a "
        "random order (objects never read before their free, far more than the caches hold: every free meets a "
        "cold object), then as many allocations again; each phase timed alone, ns per operation. "
        "touch 1: each allocation's first 8 bytes are written in the timed loop (as a program initialising "
        "it); touch 0: the calls alone (the first allocations' objects are written once, untimed, before the "
        "frees, so no free pays a first page fault). malloc-NAME: uslab through malloc, "
        "`LD_PRELOAD=libuslab-malloc.so` with `USLAB_OPTIONS=slub_cpu_mode=NAME` (" +
        ", ".join(mode_label(m) for m in modes6) + "); glibc: no preload; mimalloc: "
        "`LD_PRELOAD=libmimalloc.so.2`; cache-NAME: uslab's cache API, uslab_cache_alloc/free on one 128-byte "
        "cache in mode NAME (exp_cold_cache). All configurations interleaved, in an order that rotates from one "
        f"repetition to the next; medians of {nreps6} run(s)" +
        (f"; x{ref6} = ratio to {ref6}'s median (touch 1)" if ref6 else "") +
        ". NODE_LOCK and fast % (share of the frees / allocations the mode's fast path did: "
        "allocs_fast / allocs of uslab_cache_info) for the cache API only.")
    out()
    xr = f" x{ref6} |" if ref6 else ""
    out(f"| configuration | free (ns) |{xr} alloc again (ns) |{xr} free, touch 0 run (ns) | "
        "alloc again, no touch (ns) | first alloc (ns) | peak RSS (MiB) | NODE_LOCK in free / alloc again | "
        "fast % free / alloc again |")
    out("|---|--:|" + ("--:|" if ref6 else "") + "--:|" + ("--:|" if ref6 else "") + "--:|--:|--:|--:|--:|--:|")
    plot6 = []

    def m6(xs, f, scale=1.0):
        return med(x[f] for x in xs) / scale if xs else float("nan")
    for c in cfgs6:
        t1, t0 = g6.get((c, 1), []), g6.get((c, 0), [])
        nl = fast = ""
        if t1 and t1[0]["free_node_lock"] != "":
            nl = f"{m6(t1, 'free_node_lock'):.0f} / {m6(t1, 'alloc2_node_lock'):.0f}"
        if t1 and t1[0].get("free_fast_pct", "") != "":
            fast = f"{m6(t1, 'free_fast_pct'):.1f} / {m6(t1, 'alloc2_fast_pct'):.1f}"
        row = (m6(t1, "free_ns"), m6(t1, "alloc2_ns"), m6(t0, "free_ns"), m6(t0, "alloc2_ns"))
        plot6.append((c,) + row)
        rf = ra = ""
        if ref6:
            b = g6.get((ref6, 1), [])
            rf = f" {row[0] / m6(b, 'free_ns'):.2f} |" if b else " - |"
            ra = f" {row[1] / m6(b, 'alloc2_ns'):.2f} |" if b else " - |"
        out(f"| {c} | {row[0]:.1f} |{rf} {row[1]:.1f} |{ra} {row[2]:.1f} | {row[3]:.1f} | {m6(t1, 'alloc1_ns'):.1f} | "
            f"{m6(t1, 'maxrss_kib', 1024):.1f} | {nl} | {fast} |")
    out()
    st = os.path.join(data_dir, "exp6.stats")
    if os.path.exists(st):
        out("<details><summary>uslab cache events per phase (cache-* configurations, every run)</summary>")
        out()
        out("```")
        out(open(st).read().rstrip())
        out("```")
        out()
        out("</details>")
        out()
    if plt and plot6:
        fig, ax = plt.subplots(figsize=(max(8, 1.3 * len(plot6)), 4.5))
        labels = ("free", "alloc again", "free (touch 0 run)", "alloc again (no touch)")
        w = 0.8 / len(labels)
        for j, lab in enumerate(labels):
            ax.bar([i + (j - (len(labels) - 1) / 2) * w for i in range(len(plot6))], [p[1 + j] for p in plot6], w,
                   label=lab)
        ax.set_xticks(range(len(plot6)), [p[0] for p in plot6], rotation=20, ha="right")
        ax.set_ylabel("ns per operation (median)")
        ax.set_title(f"cold objects: {int(objs):,} objects, random-order free, allocate again")
        ax.legend(fontsize=8)
        png(fig, 6)

# ---------------------------------------------------------------- 7
r7h, r7p = rows("exp7_hb.csv"), rows("exp7_peers.csv")
if r7h or r7p:
    def capkey(c):
        return (1, 0) if c == "default" else (0, int(c))

    def caplabel(c):
        return {"0": "0 (classic)", "default": "default"}.get(c, c)
    caps = sorted({r["capacity"] for r in r7h + r7p}, key=capkey)
    ref = "default" if "default" in caps else caps[0]
    out("## 7. sheaf_capacity sweep")
    out()
    out("`USLAB_OPTIONS=slub_sheaf_capacity=N` sets the capacity of every cache (kmalloc classes included); "
        "0 is classic mode; default = no option (each cache's own capacity, smaller for bigger objects). "
        f"Medians; ratios are to {caplabel(ref)}.")
    out()
    series = {}   # workload -> cap -> (time, rss_kib)
    if r7h:
        out(f"uhackbench, cache mode, 10 groups, {sweep_hb_loops} loops (ring transport):")
        out()
        out("| sheaf_capacity | time (s) | NL/Mop | peak RSS (MiB) |")
        out("|---|--:|--:|--:|")
        g7 = defaultdict(list)
        for r in r7h:
            g7[r["capacity"]].append(r)
        for c in caps:
            xs = g7.get(c)
            if not xs:
                continue
            t = med(x["time_s"] for x in xs)
            nl = med(float(x["node_lock"]) / float(x["ops"]) * 1e6 for x in xs)
            rs = med(x["maxrss_kib"] for x in xs)
            series.setdefault("uhackbench-cache", {})[c] = (t, rs)
            out(f"| {caplabel(c)} | {t:.3f} | {nl:.1f} | {rs / 1024:.1f} |")
        out()
    if r7p:
        g7p = defaultdict(list)
        for r in r7p:
            g7p[(r["workload"], r["capacity"])].append(r)
        wls = []
        for r in r7p:
            if r["workload"] not in wls:
                wls.append(r["workload"])
        for w in wls:
            for c in caps:
                xs = g7p.get((w, c))
                if xs:
                    series.setdefault(w, {})[c] = (med(x["time_s"] for x in xs), med(x["maxrss_kib"] for x in xs))
        for what, idx, unit in (("time (s)", 0, 1.0), ("peak RSS (MiB)", 1, 1024.0)):
            out(f"bench/peers.sh workloads under uslab (full or --quick sizes as run), {what}:")
            out()
            out("| workload | " + " | ".join(caplabel(c) for c in caps) + " |")
            out("|---|" + "--:|" * len(caps))
            logs = defaultdict(list)
            for w in wls:
                cells = []
                for c in caps:
                    v = series.get(w, {}).get(c)
                    cells.append(f"{v[idx] / unit:.3f}" if v and idx == 0 else f"{v[idx] / unit:.1f}" if v else "-")
                    b = series.get(w, {}).get(ref)
                    if v and b and b[idx] > 0 and v[idx] > 0:
                        logs[c].append(math.log(v[idx] / b[idx]))
                out(f"| {w} | " + " | ".join(cells) + " |")
            out(f"| **geometric mean / {caplabel(ref)}** | " +
                " | ".join(f"**{math.exp(sum(logs[c]) / len(logs[c])):.3f}**" if logs[c] else "-" for c in caps) + " |")
            out()
    if plt and series:
        fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
        xs = list(range(len(caps)))
        colors = plt.get_cmap("tab20").colors
        markers = "os^vD<>ph*xP"
        for i, (w, d) in enumerate(series.items()):
            b = d.get(ref)
            if not b:
                continue
            for j in (0, 1):
                ax[j].plot([x for x, c in zip(xs, caps) if c in d and b[j] > 0],
                           [d[c][j] / b[j] for c in caps if c in d and b[j] > 0], marker=markers[i % len(markers)],
                           color=colors[i % len(colors)], label=w)
        for j, t in enumerate(("time", "peak RSS")):
            ax[j].axhline(1.0, color="black", linewidth=0.8)
            ax[j].set_xticks(xs, [caplabel(c) for c in caps], rotation=20)
            ax[j].set_xlabel("slub_sheaf_capacity")
            ax[j].set_ylabel(f"{t} / {caplabel(ref)} (log scale)")
            ax[j].set_yscale("log", base=2)
            ax[j].set_title(f"sheaf_capacity sweep: {t}")
        ax[1].legend(fontsize=7, ncol=2)
        png(fig, 7)

if plot_note:
    out(plot_note)
    out()

out("## Raw samples")
out()
for name in ("exp1.csv", "exp2.csv", "exp3.csv", "exp4.csv", "exp5.csv", "exp6.csv", "exp7_hb.csv",
             "exp7_peers.csv"):
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
