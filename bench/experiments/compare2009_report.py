#!/usr/bin/env python3
"""compare2009.sh's tables and chart, laid out like Gorman's 2009 tables.

    compare2009_report.py RAW STEM "CONFIGS" REPS ELAPSED SAVE COMMAND [PG_NOTE] [CG_NOTE]

RAW holds one sample a line: "group bench config value unit rss_kib" (rss
"-" when not measured). Every ratio is a cost relative to slab, lower is
better: time / slab's time, or for tps slab's tps / this tps. Each cell
also shows that configuration's run-to-run spread, (max - min) / median of
its repetitions. Writes STEM.md and STEM.png (matplotlib, when present)
when SAVE is 1; prints the tables either way.
"""
import math
import os
import platform
import subprocess
import sys
from collections import defaultdict

raw, stem, configs, reps, elapsed, save, command = sys.argv[1:8]
notes = [n for n in sys.argv[8:] if n]
configs = configs.split()
base = "slab"

samples = defaultdict(list)   # (group, bench, config) -> [value]
rss = defaultdict(list)       # (group, bench, config) -> [kib]
units = {}
order = []                    # (group, bench) in first-seen order
lines = open(raw).read().split("\n")
for ln in lines:
    f = ln.split()
    if len(f) < 5:
        continue
    g, b, c, v, u = f[:5]
    try:
        val = float(v)
    except ValueError:
        continue
    key = (g, b, c)
    samples[key].append(val)
    units[(g, b)] = u
    if (g, b) not in order:
        order.append((g, b))
    if len(f) > 5 and f[5] != "-":
        try:
            rss[key].append(float(f[5]))
        except ValueError:
            pass


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def spread(xs):
    m = median(xs)
    return (max(xs) - min(xs)) / m * 100 if len(xs) > 1 and m else 0.0


def cost_ratio(unit, v, b):
    if not b or not v:
        return None
    return b / v if unit == "tps" else v / b


def fmt_abs(v, unit):
    if unit == "s":
        return "%.3f s" % v
    if unit == "ns":
        return "%.1f ns" % v
    if unit == "tps":
        return "%.0f tps" % v
    if unit == "KiB":
        return "%.1f MiB" % (v / 1024)
    return "%.3g %s" % (v, unit)


def table(group, title, use_rss=False):
    """Rows: the group's benchmarks; columns: configurations. Returns the
    markdown and the geometric mean of each configuration's ratios."""
    rows = [b for (g, b) in order if g == group and (units[(g, b)] == "KiB") == (use_rss and group == "db")]
    if use_rss and group == "db":   # the server's memory is a sample of its own, not a per-run RSS
        use_rss = False
    if not rows:
        return "", {}
    src = rss if use_rss else samples
    out = ["#### " + title, "",
           "| benchmark | " + " | ".join(configs) + " |",
           "|---|" + "---:|" * len(configs)]
    logs = defaultdict(list)
    for b in rows:
        unit = "KiB" if use_rss else units[(group, b)]
        bs = src.get((group, b, base))
        if not bs:
            continue
        bm = median(bs)
        cells = []
        for c in configs:
            xs = src.get((group, b, c))
            if not xs:
                cells.append("-")
                continue
            m = median(xs)
            sp = spread(xs)
            if c == base:
                cells.append("%s ±%.0f%%" % (fmt_abs(m, unit), sp))
                logs[c].append(0.0)
                continue
            r = cost_ratio(unit, m, bm)
            if r is None:
                cells.append("-")
                continue
            logs[c].append(math.log(r))
            cells.append("%.2f ±%.0f%%" % (r, sp))
        out.append("| %s | %s |" % (b, " | ".join(cells)))
    gm = {c: math.exp(sum(v) / len(v)) for c, v in logs.items() if v}
    out.append("| **geometric mean** | " + " | ".join("**%.2f**" % gm[c] if c in gm else "-" for c in configs) + " |")
    out.append("")
    return "\n".join(out), gm


def cachegrind_table():
    rows = [b for (g, b) in order if g == "cachegrind"]
    if not rows:
        return ""
    out = ["#### Simulated cache behaviour (cachegrind), per allocation or free", "",
           "| benchmark | " + " | ".join(configs) + " |", "|---|" + "---:|" * len(configs)]
    for b in rows:
        cells = []
        for c in configs:
            xs = samples.get(("cachegrind", b, c))
            cells.append(("%.3f" % median(xs)) if xs else "-")
        out.append("| %s | %s |" % (b, " | ".join(cells)))
    out.append("")
    return "\n".join(out)


groups = [("micro", "Allocation-heavy microbenchmarks (time; ratio to slab)"),
          ("peers", "peers.sh patterns (time; ratio to slab)"),
          ("control", "CPU-bound programs, Gorman's SPEC columns (time; ratio to slab)"),
          ("db", "PostgreSQL 15, pgbench (cost = slab's tps / tps)")]
parts = []
headline = {}
for g, title in groups:
    md, gm = table(g, title)
    if md:
        parts.append(md)
        headline[g] = gm
mem_parts = []
md, gm = table("db", "PostgreSQL 15: the server's peak memory (Pss summed over its processes; ratio to slab)", use_rss=True)
if md:
    mem_parts.append(md)
    headline["db memory"] = gm
for g, title in groups[:3]:
    md, gm = table(g, title.split(" (")[0] + ": peak RSS (ratio to slab)", use_rss=True)
    if md:
        mem_parts.append(md)
        headline[g + " RSS"] = gm
cg = cachegrind_table()

head = ["| group | " + " | ".join(configs) + " |", "|---|" + "---:|" * len(configs)]
for g, gm in headline.items():
    head.append("| %s | %s |" % (g, " | ".join("%.2f" % gm[c] if c in gm else "-" for c in configs)))
headline_md = "\n".join(head)

try:
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
except (OSError, IndexError):
    cpu = platform.processor()
text = ["# The 2009 SLUB/SLAB/SLQB comparison, rerun (compare2009.sh)", "",
        "Machine: %d CPUs, %s, Linux %s. Command: `%s`; %s repetition(s); run time %s s." %
        (os.cpu_count(), cpu, platform.release(), command, reps, elapsed), "",
        "Every number is a cost relative to slab (the kernel's SLAB as uslab's slab mode): a "
        "time divided by slab's, or slab's transactions per second divided by the "
        "configuration's; lower is better. slab's own cells give the absolute median. "
        "±N%: that configuration's run-to-run spread, (max - min) / median over the "
        "repetitions: a ratio closer to 1 than the spreads is noise.", ""]
for n in notes:
    text += ["**" + n + "**", ""]
text += ["### Geometric means per group", "", headline_md, ""]
text += parts + ["### Memory", ""] + mem_parts
if cg:
    text += [cg]
text += ["### Raw samples (group benchmark configuration value unit rss_kib)", "", "```"] + [l for l in lines if l] + ["```", ""]
doc = "\n".join(text)
print(doc)
if save == "1":
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    with open(stem + ".md", "w") as f:
        f.write(doc)
    print("saved " + stem + ".md", file=sys.stderr)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        gs = [g for g in headline if headline[g]]
        fig, ax = plt.subplots(figsize=(10, 4.5))
        w = 0.8 / len(configs)
        for i, c in enumerate(configs):
            ys = [headline[g].get(c, float("nan")) for g in gs]
            ax.bar([k + i * w for k in range(len(gs))], ys, w, label=c)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks([k + w * (len(configs) - 1) / 2 for k in range(len(gs))])
        ax.set_xticklabels(gs)
        ax.set_ylabel("cost relative to slab (geometric mean; lower is better)")
        ax.set_title("The 2009 comparison, rerun in user space")
        ax.legend(ncol=4, fontsize=8)
        fig.tight_layout()
        fig.savefig(stem + ".png", dpi=110)
        print("saved " + stem + ".png", file=sys.stderr)
    except ImportError:
        print("no chart: python3-matplotlib is not installed", file=sys.stderr)
