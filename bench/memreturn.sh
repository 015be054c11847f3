#!/usr/bin/env bash
# bench/memreturn.sh: memory back to the OS after a burst, while the process
# idles (issue 11). Runs bench/memreturn.c's two scenarios under each
# allocator, one run at a time:
#
#   burst    2 threads allocate 512 MiB of 16..1024 B objects, each frees half
#            of its own and half of the other's, both block; 6 s idle with
#            one malloc(64)/free in the middle
#   blocked  64 threads each allocate 8 MiB the same way, free it all and
#            block while the main thread measures 6 s of idleness
#
# and prints, per scenario, a table of RSS (MiB) at the start, the peak,
# right after the frees, 1 s, 3 s and 6 s into the idle time, and after
# malloc_trim(0) where the allocator has one (glibc, uslab); with the
# issue's target for uslab (after the burst is freed, RSS 1 s into the idle
# time at most 1.2x jemalloc's and at most 32 MiB above the start). Writes
# the tables to bench/results/<date>-memreturn.md and a chart of RSS over
# time (every 100 ms) beside it (python3-matplotlib; skipped with a message
# if missing).
#
#   bench/memreturn.sh [--quick] [--mib N] [--idle S] [--threads N]
#                      [--allocators "uslab uslab-nobg uslab-bg glibc jemalloc mimalloc"]
#                      [--scenarios "burst blocked"] [--no-save] [--out DIR]
#
#   uslab      libuslab-malloc.so with its defaults (since 2026-11-27 the
#              background thread runs once the program has threads)
#   uslab-nobg libuslab-malloc.so, USLAB_OPTIONS=background_thread=0
#   uslab-bg   libuslab-malloc.so, USLAB_OPTIONS=background_thread=1
#   uslab-tls  uslab with cpu_backend=tls (sheaves on parts of threads)
#   uslab-home uslab with slub_cpu_mode=home
#   glibc      no LD_PRELOAD
#   jemalloc, mimalloc   /usr/lib/<multiarch>/libjemalloc.so.2, libmimalloc.so.2
#                        (skipped with a message when missing)
#
# USLAB_OPTIONS in the environment reaches uslab's runs (before the
# background_thread token). --quick: 32 MiB, 1 s idle, not saved unless
# --out is given (a smoke test of the script). A full run takes about a
# minute per allocator; run it alone on the machine. The build directory is
# build-bench (USLAB_BENCH_BUILD=dir to change).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || true)
LIBDIR=/usr/lib/${MULTIARCH:-x86_64-linux-gnu}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

mib=512
idle=6
threads=64
allocators="uslab uslab-nobg uslab-bg glibc jemalloc mimalloc"
scenarios="burst blocked"
save=1
quick=0
out=""
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1; mib=32; idle=1 ;;
	--mib) mib=$2; shift ;;
	--idle) idle=$2; shift ;;
	--threads) threads=$2; shift ;;
	--allocators) allocators=$2; shift ;;
	--scenarios) scenarios=$2; shift ;;
	--no-save) save=0 ;;
	--out) out=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "memreturn.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
[ $quick = 1 ] && [ -z "$out" ] && save=0
[ -n "$out" ] || out=$ROOT/bench/results

# ---- build ----------------------------------------------------------------------------
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
		-DBUILD_TESTING=OFF >/dev/null
fi
cmake --build "$BUILD" --target uslab_malloc >/dev/null
EXE=$BUILD/memreturn
if [ ! -x "$EXE" ] || [ "$HERE/memreturn.c" -nt "$EXE" ]; then
	cc -O2 -Wall -pthread -o "$EXE" "$HERE/memreturn.c" -ldl
fi

# ---- allocators ---------------------------------------------------------------------------
declare -A LIB OPT
LIB[uslab]=$BUILD/libuslab-malloc.so;    OPT[uslab]=""
LIB[uslab-nobg]=$BUILD/libuslab-malloc.so; OPT[uslab-nobg]="background_thread=0"
LIB[uslab-bg]=$BUILD/libuslab-malloc.so; OPT[uslab-bg]="background_thread=1"
# the per-CPU backend's fallback and the thread-owned mode, for comparison
LIB[uslab-tls]=$BUILD/libuslab-malloc.so; OPT[uslab-tls]="background_thread=0 cpu_backend=tls"
LIB[uslab-home]=$BUILD/libuslab-malloc.so; OPT[uslab-home]="background_thread=0 slub_cpu_mode=home"
LIB[glibc]=""
LIB[jemalloc]=$LIBDIR/libjemalloc.so.2
LIB[mimalloc]=$LIBDIR/libmimalloc.so.2
want=()
for a in $allocators; do
	[ -n "${LIB[$a]+x}" ] || { echo "memreturn.sh: unknown allocator '$a'" >&2; exit 2; }
	if [ -n "${LIB[$a]}" ] && [ ! -e "${LIB[$a]}" ]; then
		echo "skipping $a: ${LIB[$a]} not found"
		continue
	fi
	want+=("$a")
done

# ---- runs -----------------------------------------------------------------------------------
RAW=$(mktemp -d /tmp/uslab-memreturn.XXXXXX)
trap 'rm -rf "$RAW"' EXIT
echo "memreturn: ${want[*]}; scenarios: $scenarios; $mib MiB, $idle s idle$([ $quick = 1 ] && echo ', quick')"
for s in $scenarios; do
	for a in "${want[@]}"; do
		args=("$s" --mib "$mib" --idle "$idle")
		[ "$s" = blocked ] && args+=(--threads "$threads")
		env=(env -u LD_PRELOAD)
		[ -n "${LIB[$a]}" ] && env=(env LD_PRELOAD="${LIB[$a]}")
		[ -n "${OPT[$a]:-}" ] && env+=(USLAB_OPTIONS="${USLAB_OPTIONS:-}${USLAB_OPTIONS:+ }${OPT[$a]}")
		if ! "${env[@]}" "$EXE" "${args[@]}" >"$RAW/$s.$a" 2>"$RAW/$s.$a.err"; then
			echo "  $s under $a failed:"; tail -3 "$RAW/$s.$a.err"
			rm -f "$RAW/$s.$a"
			continue
		fi
		awk -v s="$s" -v a="$a" '$1 == "point" { v[$2] = $4 / 1024; if ($2 ~ /^idle/) idl[++ni] = $2 }
			$1 == "trim" { v["trim"] = -1 }
			END { printf "  %-8s %-9s start %6.1f  peak %6.1f  freed %6.1f", s, a, v["start"], v["peak"], v["freed"]
			      for (i = 1; i <= ni; i++) printf "  %s s %6.1f", idl[i], v[idl[i]]
			      if (v["trim"] >= 0) printf "  trim %6.1f", v["trim"]; printf " MiB\n" }' "$RAW/$s.$a"
	done
done

# ---- tables ---------------------------------------------------------------------------------
TABLES=$("$PY" - "$RAW" "$scenarios" "${want[*]}" "$idle" <<'PY'
import os, sys
raw, scenarios, allocs, idle = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), float(sys.argv[4])
def load(path):
    pts, head = {}, ""
    for line in open(path):
        f = line.split()
        if f[0] == "point":
            pts[f[1]] = int(f[3]) / 1024.0
        elif f[0] == "scenario":
            head = line.strip()
    return pts, head
secs = [m * idle / 6 for m in (1, 3, 6)]
marks = ["idle%.3g" % x for x in secs]
# the issue's target is RSS 1 s into the idle time: the first mark at or after it
t1 = next((i for i, x in enumerate(secs) if x >= min(1.0, idle) - 1e-9), 0)
at = secs[t1]
out = []
for s in scenarios:
    rows = {a: load(os.path.join(raw, "%s.%s" % (s, a))) for a in allocs if os.path.exists(os.path.join(raw, "%s.%s" % (s, a)))}
    if not rows:
        continue
    head = next(iter(rows.values()))[1]
    out.append("### %s (%s)\n" % (s, head.replace("scenario ", "")))
    out.append("| allocator | start | peak | after the frees | %s | %s | %s | after malloc_trim(0) | %.3g s idle - start | %.3g s idle / jemalloc's |"
               % (tuple("%.3g s idle" % x for x in secs) + (at, at)))
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    je = rows.get("jemalloc", ({}, ""))[0].get(marks[t1])
    for a, (p, _) in rows.items():
        v = lambda k: "%.1f" % p[k] if k in p else "-"
        d = p[marks[t1]] - p["start"]
        ratio = "%.2f" % (p[marks[t1]] / je) if je else "-"
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %+.1f | %s |" % (a, v("start"), v("peak"), v("freed"),
                   v(marks[0]), v(marks[1]), v(marks[2]), v("trim") if "trim" in p else "n/a", d, ratio))
    if s == "burst" and je:
        for a in ("uslab", "uslab-nobg", "uslab-bg"):
            if a in rows:
                p = rows[a][0]
                ok1 = p[marks[t1]] <= 1.2 * je
                ok2 = p[marks[t1]] - p["start"] <= 32
                out.append("")
                out.append("Target (%s): RSS %.3g s into the idle time %.1f MiB <= 1.2 x jemalloc's %.1f MiB: %s; "
                           "at most 32 MiB above the start (%+.1f MiB): %s." % (a, at, p[marks[t1]], 1.2 * je,
                           "met" if ok1 else "NOT met", p[marks[t1]] - p["start"], "met" if ok2 else "NOT met"))
    out.append("")
print("\n".join(out))
PY
)
echo
echo "RSS in MiB:"
echo "$TABLES"

[ $save = 1 ] || exit 0
mkdir -p "$out"
date=$(date +%Y-%m-%d)
md=$out/$date-memreturn.md
png=$out/$date-memreturn.png
{
	echo "# Memory return after a burst ($date)"
	echo
	echo "\`bash bench/memreturn.sh --mib $mib --idle $idle --threads $threads\` on $(nproc) CPUs ($(uname -sr));"
	echo "RSS from /proc/self/statm, sampled by the program itself; uslab's USLAB_OPTIONS: ${USLAB_OPTIONS:-(none)}"
	echo "plus nothing (uslab: the defaults), background_thread=0 (uslab-nobg) or =1 (uslab-bg). See bench/memreturn.c for the scenarios."
	echo
	echo "$TABLES"
	echo "![RSS over time]($(basename "$png"))"
	echo
	echo "## Raw points"
	echo
	echo '```'
	for f in "$RAW"/*; do
		case $f in *.err) continue ;; esac
		echo "== $(basename "$f")"
		grep -v '^sample' "$f"
	done
	echo '```'
} >"$md"
echo "wrote $md"
if "$PY" -c 'import matplotlib' 2>/dev/null; then
	"$PY" - "$RAW" "$scenarios" "${want[*]}" "$png" <<'PY'
import os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
raw, scenarios, allocs, png = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4]
fig, axes = plt.subplots(1, len(scenarios), figsize=(6.5 * len(scenarios), 4.5), squeeze=False)
for ax, s in zip(axes[0], scenarios):
    for a in allocs:
        path = os.path.join(raw, "%s.%s" % (s, a))
        if not os.path.exists(path):
            continue
        t, r, freed = [], [], None
        for line in open(path):
            f = line.split()
            if f[0] == "sample":
                t.append(float(f[1])); r.append(int(f[2]) / 1024.0)
            elif f[0] == "point" and f[1] == "freed":
                freed = float(f[2])
        ax.plot(t, r, label=a)
        if freed is not None and a == allocs[0]:
            ax.axvline(freed, color="grey", linestyle=":", linewidth=1)
    ax.set_title("%s: RSS over time (frees end at the dotted line)" % s)
    ax.set_xlabel("seconds")
    ax.set_ylabel("RSS (MiB)")
    ax.grid(alpha=0.3)
    ax.legend()
fig.tight_layout()
fig.savefig(png, dpi=110)
PY
	echo "wrote $png"
else
	echo "no chart: python3-matplotlib is not installed"
fi
