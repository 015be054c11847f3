#!/usr/bin/env bash
# bench/experiments/exp2026.sh: the 2026 sheaves debate, measured. Linux 7.0
# replaced SLUB's CPU slab and CPU partial lists with sheaves for every
# cache ("slab: replace cpu (partial) slabs with sheaves", v4, February
# 2026). Christoph Lameter objected that sheaves give up the spatial
# optimisation of per-CPU partial lists: objects wait in queues instead of
# going back to their slabs, allocation no longer empties one partial slab
# before taking the next, so partial slabs (fragmentation) and TLB
# pressure should rise; Vlastimil Babka's benchmarks found performance
# "roughly the same"; in March 2026 6-11 % regressions of `perf bench
# syscall fork/execve` were bisected to the series, and the default sheaf
# capacity (memory against speed) was discussed, the kernel unable to
# change it at run time. uslab runs both designs, and home, in one binary,
# and changes sheaf_capacity at run time.
#
#   bench/experiments/exp2026.sh [--quick] [--reps N] [--no-save] [--no-sweep]
#
# Configurations: classic (slub_cpu_mode=classic: CPU slab and CPU partial
# lists, SLUB as 2011-2025), sheaves (slub_cpu_mode=sheaves, default
# capacities), home (uslab's default); every uslab run through LD_PRELOAD
# of libuslab-malloc.so, uhackbench on the cache API.
#
# Workloads: uhackbench (cache mode, ring transport, 10 groups); cold
# (exp_cold: 400,000 objects of 64..256 B allocated, freed cold in random
# order, allocated again); larson and churn (bench/peers.sh's server and
# random-replacement patterns); fork and exec (mbench/forkexec: a 100,000
# block heap, each iteration 100 replacements and a request's 2,000
# temporaries, then fork, the child exits or execs /bin/true: `perf bench
# syscall fork/execve` with a heap).
#
# Per workload and configuration:
#   time, peak RSS   medians of --reps runs (memtime), interleaved, the
#                    order rotating; and voluntary context switches per
#                    second (sleeps on locks: uhackbench's threads also
#                    sleep on its rings by design);
#   minor faults     forkexec's parent, per fork (copies of pages written
#                    since the last fork);
#   census           one more run under bench/alloctrace.so (not timed),
#                    sampled every 65,536 allocations over the whole run
#                    (medians): partial slabs (slabs holding live blocks and
#                    free slots) per cache in use, their fill (live blocks
#                    over slots), slabs held by uslab against slabs holding
#                    live blocks, and distinct slabs and 4 KiB pages the
#                    allocations of each window of 1,000 land on (a TLB
#                    proxy). Objects in sheaves count as free here: that is
#                    the point in dispute.
# The sweep (--no-sweep to skip): slub_sheaf_capacity=N for N in
# SWEEP_CAPS (default "4 8 16 32 64 128 256", and the default capacities
# and classic as references) on uhackbench, larson, churn and fork: time
# against peak RSS, one line per workload.
#
# Results: bench/results/<date>-exp2026.md (machine, commit, tables, raw
# samples), -exp2026.png (the metrics by mode) and -exp2026-sweep.png (time
# against memory). Build: USLAB_BENCH_BUILD (default build-bench,
# configured Release -O2 if new). About 12 minutes on a 2-CPU machine
# (--quick: about 1, a smoke test). Wrap it in flock when others benchmark
# on the same machine.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}
cmdline="bench/experiments/exp2026.sh${*:+ $*}"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

quick=0 reps=3 save=1 sweep=1
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1; reps=1 ;;
	--reps) reps=$2; shift ;;
	--no-save) save=0 ;;
	--no-sweep) sweep=0 ;;
	-h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) echo "exp2026.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
log() { printf '%s\n' "$*" >&2; }
T0=$SECONDS

# ---- build ------------------------------------------------------------------------------
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
		-DBUILD_TESTING=OFF >/dev/null
fi
log "== building in $BUILD"
cmake --build "$BUILD" -j 2 --target uslab_malloc uhackbench exp_cold >/dev/null
MB=$BUILD/mbench
mkdir -p "$MB"
for src in "$ROOT"/bench/mbench/*.c; do
	exe=$MB/$(basename "$src" .c)
	if [ ! -x "$exe" ] || [ "$src" -nt "$exe" ] || [ "$ROOT/bench/mbench/common.h" -nt "$exe" ]; then
		cc -O2 -Wall -pthread -o "$exe" "$src"
	fi
done
TRACE=$BUILD/alloctrace.so
if [ ! -e "$TRACE" ] || [ "$ROOT/bench/alloctrace.c" -nt "$TRACE" ] || [ "$ROOT/include/uslab.h" -nt "$TRACE" ]; then
	cc -O2 -Wall -shared -fPIC -I"$ROOT/include" -o "$TRACE" "$ROOT/bench/alloctrace.c" -ldl -pthread
fi
LIB=$BUILD/libuslab-malloc.so

# ---- configurations and workloads ------------------------------------------------------------
CONFIGS=(classic sheaves home)
declare -A OPT=([classic]="slub_cpu_mode=classic" [sheaves]="slub_cpu_mode=sheaves" [home]="slub_cpu_mode=home")
declare -A CMD
if [ $quick = 1 ]; then
	CMD[uhackbench]="$BUILD/bench/uhackbench --mode cache --transport ring 2 50"
	CMD[cold]="$BUILD/bench/exp_cold --objects 40000"
	CMD[larson]="$MB/larson 2 2 5000 500 1000"
	CMD[churn]="$MB/churn 2 20000 5000 32768"
	CMD[fork]="$MB/forkexec 40 20000 100 2000 fork"
	CMD[exec]="$MB/forkexec 20 20000 100 2000 exec"
else
	CMD[uhackbench]="$BUILD/bench/uhackbench --mode cache --transport ring 10 500"
	CMD[cold]="$BUILD/bench/exp_cold --objects 400000"
	CMD[larson]="$MB/larson 2 10 200000 4000 1000"
	CMD[churn]="$MB/churn 2 1500000 100000 32768"
	CMD[fork]="$MB/forkexec 500 100000 100 2000 fork"
	CMD[exec]="$MB/forkexec 300 100000 100 2000 exec"
fi
WORKLOADS=(uhackbench cold larson churn fork exec)
SWEEP_WL=(uhackbench larson churn fork)
CAPS=${SWEEP_CAPS:-"4 8 16 32 64 128 256"}

RAW=$(mktemp /tmp/exp2026.XXXXXX)
ERR=$RAW.err
OUTF=$RAW.out
trap 'rm -f "$RAW" "$ERR" "$OUTF"' EXIT
# raw lines: "kind workload config key value"
rec() { echo "$*" >>"$RAW"; }

# timed WORKLOAD CONFIG OPTIONS: one memtime run (time, peak RSS, and for
# forkexec the faults per fork it prints)
timed() {
	local w=$1 c=$2 opts=$3 res sec kib code vcs
	res=$(env USLAB_OPTIONS="$opts" "$MB/memtime" --preload "$LIB" -- ${CMD[$w]} 3>&1 >"$OUTF" 2>"$ERR") || true
	read -r sec kib code vcs _ <<<"$res"
	if [ "${code:-1}" != 0 ]; then
		log "  $w under $c failed (status ${code:-?}): $(tail -c 300 "$ERR")"
		return
	fi
	rec time "$w" "$c" s "$sec"
	rec time "$w" "$c" rss_kib "$kib"
	rec time "$w" "$c" vcs_per_s "$(awk -v v="${vcs:-0}" -v s="$sec" 'BEGIN { printf "%.0f", (s > 0 ? v / s : 0) }')"   # (parenthesised: a bare > is a redirection in awk)
	local f
	f=$(awk '/minor faults per fork/ { print $NF }' "$OUTF")
	[ -z "$f" ] || rec time "$w" "$c" faults_per_fork "$f"
	if [ "$w" = uhackbench ] && [ -n "${OPT[$c]:-}" ]; then   # the cache ran the mode asked for
		grep -q "cpu_mode [0-9] ($c)" "$OUTF" 2>/dev/null ||
			log "  uhackbench under $c ran $(grep -o 'cpu_mode [0-9] ([a-z]*)' "$OUTF")"
	fi
}

log "== configurations: ${CONFIGS[*]}; workloads: ${WORKLOADS[*]}; $reps repetition(s)"
NC=${#CONFIGS[@]}
for ((r = 0; r < reps; r++)); do
	log "== repetition $((r + 1)) of $reps"
	for w in "${WORKLOADS[@]}"; do
		for ((k = 0; k < NC; k++)); do
			c=${CONFIGS[$(((k + r) % NC))]}
			timed "$w" "$c" "${OPT[$c]}"
		done
	done
done

log "== census runs (bench/alloctrace.so; not timed)"
for w in "${WORKLOADS[@]}"; do
	for c in "${CONFIGS[@]}"; do
		rm -f "$OUTF.trace"
		if ! env USLAB_OPTIONS="${OPT[$c]}" ALLOCTRACE_OUT="$OUTF.trace" LD_PRELOAD="$TRACE $LIB" ${CMD[$w]} \
			>/dev/null 2>"$ERR"; then
			log "  census of $w under $c failed: $(tail -c 300 "$ERR")"
			continue
		fi
		line=$(tail -1 "$OUTF.trace" 2>/dev/null || true)
		[ -n "$line" ] || { log "  census of $w under $c: no line"; continue; }
		# "alloctrace: key value key value ..."
		set -- ${line#alloctrace: }
		while [ $# -ge 2 ]; do
			rec census "$w" "$c" "$1" "$2"
			shift 2
		done
		log "  $w $c: ${line#alloctrace: }"
	done
done
rm -f "$OUTF.trace"

if [ $sweep = 1 ]; then
	log "== sheaf_capacity sweep: $CAPS, default, classic"
	SC=()
	for cap in $CAPS; do SC+=("cap$cap"); done
	SC+=(capdefault classic)
	NS=${#SC[@]}
	for ((r = 0; r < reps; r++)); do
		for w in "${SWEEP_WL[@]}"; do
			for ((k = 0; k < NS; k++)); do
				c=${SC[$(((k + r) % NS))]}
				case $c in
				capdefault) opts="slub_cpu_mode=sheaves" ;;
				classic) opts="slub_cpu_mode=classic" ;;
				*) opts="slub_sheaf_capacity=${c#cap}" ;;
				esac
				timed "$w" "sweep-$c" "$opts"
			done
		done
	done
fi
ELAPSED=$((SECONDS - T0))
log "== done in $ELAPSED s"

STEM=$ROOT/bench/results/$(date +%Y-%m-%d)-exp2026$([ $quick = 1 ] && echo -quick || true)
"$PY" - "$RAW" "$STEM" "$save" "$reps" "$ELAPSED" "$cmdline" "$ROOT" <<'PYEOF'
import math, os, subprocess, sys
from collections import defaultdict

raw, stem, save, reps, elapsed, command, root = sys.argv[1:8]
save = save == "1"
T = defaultdict(list)     # (workload, config, key) -> [values]
C = {}                    # (workload, config, key) -> value (census)
order_w = []
for ln in open(raw):
    f = ln.split()
    if len(f) != 5:
        continue
    kind, w, c, k, v = f
    try:
        v = float(v)
    except ValueError:
        continue
    if w not in order_w:
        order_w.append(w)
    if kind == "time":
        T[(w, c, k)].append(v)
    else:
        C[(w, c, k)] = v

def med(xs):
    s = sorted(xs)
    n = len(s)
    return None if not n else (s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2)

def spread(xs):
    m = med(xs)
    return (max(xs) - min(xs)) / m * 100 if xs and len(xs) > 1 and m else 0.0

modes = ["classic", "sheaves", "home"]
def lab(c):   # a sweep configuration's label: its capacity, "default" or "classic"
    return c[9:] if c.startswith("sweep-cap") else c[6:]
out = []
def p(s=""):
    out.append(s)
    print(s)

def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, cwd=root).stdout.strip()
    except OSError:
        return "?"

p("# The 2026 sheaves debate, measured (bench/experiments/exp2026.sh)")
p()
p("Machine: %s; %s, %s CPUs; kernel %s." % (sh("hostname"), sh("lscpu | awk -F': *' '/Model name/ { print $2; exit }'"),
                                             sh("nproc"), sh("uname -r")))
p("uslab commit %s%s. Command: `%s`; %s repetition(s); %s s." % (sh("git rev-parse --short HEAD"),
  " (with uncommitted changes)" if sh("git status --porcelain --untracked-files=no") else "", command.strip(), reps, elapsed))
p("Load average at the end: %s." % sh("cut -d' ' -f1-3 /proc/loadavg"))
p()
p("Time and peak RSS: medians (spread = (max - min) / median over the repetitions). "
  "Census: one run under bench/alloctrace.so, medians of samples taken every 65,536 allocations; "
  "partial slabs hold live blocks and free slots (objects in sheaves count as free); "
  "fill = live blocks / slots of the partial slabs; held = slabs uslab has, live = slabs holding a live block; "
  "slabs/pages per 1000 = distinct slabs / 4 KiB pages that each window of 1,000 allocations lands on.")
p()
hdr = ("| workload | mode | time (s) | spread | peak RSS (MiB) | vol. switches /s | faults/fork | partial slabs | per cache "
       "| fill | slabs held | slabs live | slabs /1000 allocs | pages /1000 allocs |")
p(hdr)
p("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
def fmt(v, f="%.3f"):
    return "-" if v is None else f % v
for w in order_w:
    for c in modes:
        t = T.get((w, c, "s"), [])
        if not t and (w, c, "partial_slabs") not in C:
            continue
        rss = med(T.get((w, c, "rss_kib"), []))
        ff = med(T.get((w, c, "faults_per_fork"), []))
        g = lambda k: C.get((w, c, k))
        p("| %s | %s | %s | %.0f %% | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            w, c, fmt(med(t)), spread(t), fmt(rss / 1024 if rss else None, "%.1f"),
            fmt(med(T.get((w, c, "vcs_per_s"), [])), "%.0f"), fmt(ff, "%.0f"),
            fmt(g("partial_slabs"), "%.0f"), fmt(g("partial_per_class"), "%.1f"), fmt(g("partial_fill"), "%.2f"),
            fmt(g("slabs_held"), "%.0f"), fmt(g("slabs_live"), "%.0f"), fmt(g("slabs_per_1000"), "%.1f"),
            fmt(g("pages_per_1000"), "%.1f")))
p()
# sheaves against classic, per workload
p("Sheaves against classic (ratio of medians; > 1: sheaves more):")
p()
p("| workload | time | peak RSS | faults/fork | partial slabs | fill | slabs held | slabs /1000 | pages /1000 |")
p("|---|--:|--:|--:|--:|--:|--:|--:|--:|")
def ratio(a, b):
    return "-" if a is None or b is None or not b else "%.2f" % (a / b)
for w in order_w:
    r = [ratio(med(T.get((w, "sheaves", k), [])), med(T.get((w, "classic", k), []))) for k in ("s", "rss_kib", "faults_per_fork")]
    r += [ratio(C.get((w, "sheaves", k)), C.get((w, "classic", k)))
          for k in ("partial_slabs", "partial_fill", "slabs_held", "slabs_per_1000", "pages_per_1000")]
    p("| %s | %s |" % (w, " | ".join(r)))
p()
sweep = sorted({c for (w, c, k) in T if c.startswith("sweep-")},
               key=lambda c: (0, int(c[9:])) if c[9:].isdigit() else (1, c))
if sweep:
    p("sheaf_capacity sweep (slub_sheaf_capacity=N: every cache in sheaves mode with N objects per sheaf; "
      "capdefault: the per-size defaults, 60 up to 128 B .. 2 above 2 KiB; classic: CPU partial lists). Medians:")
    p()
    sw = [w for w in order_w if any((w, c, "s") in T for c in sweep)]
    p("| capacity | " + " | ".join("%s time (s) | %s RSS (MiB)" % (w, w) for w in sw) + " |")
    p("|---|" + "--:|--:|" * len(sw))
    for c in sweep:
        cells = []
        for w in sw:
            t, m = med(T.get((w, c, "s"), [])), med(T.get((w, c, "rss_kib"), []))
            cells += [fmt(t), fmt(m / 1024 if m else None, "%.1f")]
        p("| %s | %s |" % (lab(c), " | ".join(cells)))
    p()
p("Raw samples (kind workload config key value):")
p()
p("```")
for ln in open(raw):
    p(ln.rstrip("\n"))
p("```")
if save:
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    with open(stem + ".md", "w") as f:
        f.write("\n".join(out) + "\n")
    print("saved " + stem + ".md")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no chart: python3-matplotlib missing")
        sys.exit(0)
    metrics = [("time", "s", True), ("peak RSS", "rss_kib", True), ("partial slabs", "partial_slabs", False),
               ("fill of partial slabs", "partial_fill", False), ("slabs per 1000 allocations", "slabs_per_1000", False),
               ("pages per 1000 allocations", "pages_per_1000", False)]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (title, key, timed) in zip(axes.flat, metrics):
        width = 0.8 / len(modes)
        for i, c in enumerate(modes):
            ys = []
            for w in order_w:
                v = med(T.get((w, c, key), [])) if timed else C.get((w, c, key))
                base = med(T.get((w, "classic", key), [])) if timed else C.get((w, "classic", key))
                ys.append(v / base if v is not None and base else 0)
            ax.bar([x + i * width for x in range(len(order_w))], ys, width, label=c)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_title(title + " / classic")
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(order_w))])
        ax.set_xticklabels(order_w, rotation=30, ha="right")
    axes[0][0].legend()
    fig.suptitle("classic (CPU partial lists) vs sheaves vs home: ratio to classic (exp2026.sh)")
    fig.tight_layout()
    fig.savefig(stem + ".png", dpi=90)
    print("chart: " + stem + ".png")
    if sweep:
        fig, ax = plt.subplots(figsize=(9, 6))
        sw = [w for w in order_w if any((w, c, "s") in T for c in sweep)]
        for w in sw:
            pts = [(med(T.get((w, c, "rss_kib"), [])), med(T.get((w, c, "s"), [])), lab(c)) for c in sweep]
            pts = [(m, t, l) for m, t, l in pts if m and t]
            if not pts:
                continue
            bm, bt = [(m, t) for m, t, l in pts if l == "classic"][0] if any(l == "classic" for m, t, l in pts) else pts[0][:2]
            xs = [m / bm for m, t, l in pts if l[0].isdigit()]
            ys = [t / bt for m, t, l in pts if l[0].isdigit()]
            line, = ax.plot(xs, ys, marker="o", label=w)
            for m, t, l in pts:
                ax.annotate(l, (m / bm, t / bt), fontsize=7, color=line.get_color())
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axvline(1.0, color="black", linewidth=0.8)
        ax.set_xlabel("peak RSS / classic's")
        ax.set_ylabel("time / classic's")
        ax.set_title("sheaf_capacity 4..256: time against memory (labels: capacity)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(stem + "-sweep.png", dpi=90)
        print("chart: " + stem + "-sweep.png")
PYEOF
