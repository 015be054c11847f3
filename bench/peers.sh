#!/usr/bin/env bash
# bench/peers.sh: the malloc family against its peers. Every workload runs
# under glibc's malloc and, through LD_PRELOAD, jemalloc, tcmalloc, mimalloc
# and uslab (libuslab-malloc.so); wall time and peak RSS (ru_maxrss) of each
# run, the median of --reps runs, runs interleaved (each repetition runs
# every workload under every allocator, in an order that rotates).
#
#   bench/peers.sh [--quick] [--reps N] [--peers "glibc jemalloc tcmalloc mimalloc uslab uslab+OPTS uslab@DIR"]
#                  [--workloads "uhackbench larson ..."] [--no-install] [--no-chart] [--no-save]
#                  [--raw FILE] [--base-lib LIB]
#
# Workloads (bench/mbench/*.c, plain malloc/free programs, and uhackbench):
#   uhackbench     bench/uhackbench --mode malloc, 10 groups (messages of 256 B)
#   larson         server simulation: rounds of threads taking over other
#                  threads' blocks, random sizes 8..1000
#   cache_scratch  passive false sharing (Hoard)
#   cache_thrash   active false sharing (Hoard)
#   prodcons       producer -> consumer, 16..4096 B log-uniform, all frees remote
#   strbuild       realloc-heavy string builder, strings up to 1 MiB
#   churn          random replacement over every class, 2 x 100,000 live blocks
#   largealloc     64 KiB .. 64 MiB blocks, every page written
#   xfree          2 threads, a shared live set of 200,000 blocks of 8..1024 B
#                  (log-uniform); rounds of random-order frees of blocks
#                  allocated rounds before, by the same thread or the other,
#                  each replaced by a new block
#   mthread        glibc bench-malloc-thread style: 2 threads, 1024 slots
#                  each, free a random slot and allocate 8..512 B (a tail to
#                  4 KiB) into it, 20 M times per thread
#   smallloop      one thread, 16..64 B: malloc+free pairs and bursts of
#                  8..64 blocks freed LIFO or FIFO
#   sh6bench2, sh6bench8  MicroQuill's sh6bench pattern (mbench/shbench.c):
#                  2 (8) threads, each a ring of 10000/threads blocks of a
#                  fixed schedule of sizes 1..709 B (runs of 50-250 of one
#                  size), freed a ring at a time, four fifths in allocation
#                  order and in reverse; no block crosses threads; 4000
#                  of the original's 10000 passes
#   sh8bench2, sh8bench8  sh8bench's pattern: the same ring with sh8's size
#                  histogram (8 B .. 165 KiB), while the main thread
#                  allocates 2 M 8-byte blocks that the workers free;
#                  a fifth of the original's iterations and foreign blocks
#   xmalloc2, xmalloc8  Lever and Boreham's producer/consumer (xmalloc-test):
#                  1 (4) producers allocate batches of 4096 64-byte blocks
#                  that 1 (4) consumers free, through one stack of at most
#                  100 batches (the threads sleep on it by design)
#   simple         glibc's bench-malloc-simple: one thread at a time, runs
#                  of 25..1600 blocks of 16, 32, 64 B freed in order
#   handoff        8 threads at a time (more than the CPUs) allocate 4000
#                  blocks of 16..512 B each, free what the last generation's
#                  threads left them, leave theirs for the next, and exit
#
# Prints a table: per workload and allocator the median time and peak RSS
# with their ratio to mimalloc, and a geometric-mean row (over workloads) of
# the ratios; and a table of voluntary context switches per second of run
# time (getrusage's ru_nvcsw over the wall time, median: sleeps on a lock,
# a condition variable or I/O); writes it with the raw samples to bench/results/<date>-peers.md
# and a PNG chart beside it (needs python3-matplotlib; skipped with a
# message if it is missing). Missing peers are installed from Debian packages
# (libjemalloc2, libtcmalloc-minimal4, libmimalloc2.0) when apt-get can, and
# skipped with a message otherwise.
#
# Full runs take several minutes on a 2-vCPU machine; --quick (tiny sizes,
# 1 repetition unless --reps) is a smoke test of the script itself. The
# build directory is build-bench (USLAB_BENCH_BUILD=dir to change).
# USLAB_OPTIONS in the environment reaches every run (uslab's runs are the
# ones it changes). --raw FILE also appends each sample, as a line
# "workload allocator seconds maxrss_kib voluntary_switches", to FILE (bench/experiments uses
# it for the sheaf_capacity sweep). --base-lib LIB adds the allocator
# names "base" and "base+OPTS": another build's libuslab-malloc.so (say,
# the commit before a change), for an A/B in one interleaved run.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

quick=0
reps=""
peers="glibc jemalloc tcmalloc mimalloc uslab"
workloads="uhackbench larson cache_scratch cache_thrash prodcons strbuild churn largealloc xfree mthread smallloop sh6bench2 sh6bench8 sh8bench2 sh8bench8 xmalloc2 xmalloc8 simple handoff"
install=1
chart=1
save=1
rawout=""
baselib=""
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--reps) reps=$2; shift ;;
	--peers) peers=$2; shift ;;
	--workloads) workloads=$2; shift ;;
	--no-install) install=0 ;;
	--no-chart) chart=0 ;;
	--no-save) save=0 ;;
	--raw) rawout=$2; shift ;;
	--base-lib) baselib=$2; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "peers.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
[ -n "$reps" ] || reps=$([ $quick = 1 ] && echo 1 || echo 3)

# ---- build ----------------------------------------------------------------------
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
		-DBUILD_TESTING=OFF >/dev/null
fi
cmake --build "$BUILD" --target uslab_malloc uhackbench >/dev/null
MB=$BUILD/mbench
mkdir -p "$MB"
for src in "$HERE"/mbench/*.c; do
	exe=$MB/$(basename "$src" .c)
	if [ ! -x "$exe" ] || [ "$src" -nt "$exe" ] || [ "$HERE/mbench/common.h" -nt "$exe" ]; then
		cc -O2 -Wall -pthread -o "$exe" "$src"
	fi
done

# ---- peers ------------------------------------------------------------------------
. "$HERE/peerlibs.sh"   # LIB, PKG
LIB[uslab]=$BUILD/libuslab-malloc.so
# uslab+OPTS: uslab with OPTS added to USLAB_OPTIONS (commas become spaces),
# e.g. uslab+kfence, uslab+decay_ms=3600000,decay_dirty_max=1048576: an A/B
# of an option in one interleaved run. uslab@DIR: the libuslab-malloc.so of
# another build directory (an A/B of two trees in one interleaved run).
declare -A OPTS
want=()
for p in $peers; do
	case $p in
	uslab+?*) LIB[$p]=${LIB[uslab]}; OPTS[$p]=$(tr ',' ' ' <<<"${p#uslab+}") ;;
	uslab@?*) LIB[$p]=${p#uslab@}/libuslab-malloc.so ;;
	base | base+?*)
		[ -n "$baselib" ] || { echo "peers.sh: '$p' needs --base-lib LIB" >&2; exit 2; }
		LIB[$p]=$baselib
		[ "$p" = base ] || OPTS[$p]=$(tr ',' ' ' <<<"${p#base+}") ;;
	esac
	if [ -z "${LIB[$p]+x}" ]; then
		echo "peers.sh: unknown allocator '$p'" >&2
		exit 2
	fi
	if [ -n "${LIB[$p]}" ] && [ ! -e "${LIB[$p]}" ] && [ -n "${PKG[$p]:-}" ] && [ $install = 1 ] &&
		command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
		echo "installing ${PKG[$p]} for $p"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${PKG[$p]}" >/dev/null 2>&1 ||
			{ apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				--no-install-recommends "${PKG[$p]}" >/dev/null 2>&1; } || true
	fi
	if [ -n "${LIB[$p]}" ] && [ ! -e "${LIB[$p]}" ]; then
		echo "skipping $p: ${LIB[$p]} not found (Debian package ${PKG[$p]:-?})"
		continue
	fi
	want+=("$p")
done
peers="${want[*]}"
base=mimalloc
case " $peers " in *" mimalloc "*) ;; *) base=glibc; echo "mimalloc missing: ratios are to glibc" ;; esac

# ---- workloads: command lines (full, quick) -------------------------------------------
declare -A CMD QCMD
CMD[uhackbench]="$BUILD/bench/uhackbench --mode malloc --transport ring 10 2000"
QCMD[uhackbench]="$BUILD/bench/uhackbench --mode malloc --transport ring 2 50"
CMD[larson]="$MB/larson 2 20 200000 4000 1000";         QCMD[larson]="$MB/larson 2 2 5000 500 1000"
CMD[cache_scratch]="$MB/cache_scratch 2 2000 8 4000";  QCMD[cache_scratch]="$MB/cache_scratch 2 50 8 100"
CMD[cache_thrash]="$MB/cache_thrash 2 2000 8 4000";    QCMD[cache_thrash]="$MB/cache_thrash 2 50 8 100"
CMD[prodcons]="$MB/prodcons 1 2000000 4096 1024";      QCMD[prodcons]="$MB/prodcons 1 20000 4096 256"
CMD[strbuild]="$MB/strbuild 10 200 1048576";           QCMD[strbuild]="$MB/strbuild 1 20 65536"
CMD[churn]="$MB/churn 2 3000000 100000 32768";         QCMD[churn]="$MB/churn 2 20000 5000 32768"
CMD[largealloc]="$MB/largealloc 2000 8";               QCMD[largealloc]="$MB/largealloc 30 4 65536 8388608"
CMD[xfree]="$MB/xfree 2 200000 30 50000 256 1024";     QCMD[xfree]="$MB/xfree 2 20000 3 5000 256 1024"
CMD[mthread]="$MB/mthread 2 20000000 1024 4096";       QCMD[mthread]="$MB/mthread 2 200000 1024 4096"
CMD[smallloop]="$MB/smallloop 1000000 16";             QCMD[smallloop]="$MB/smallloop 20000 16"
CMD[sh6bench2]="$MB/shbench sh6 2 10000 4000";         QCMD[sh6bench2]="$MB/shbench sh6 2 10000 20"
CMD[sh6bench8]="$MB/shbench sh6 8 10000 4000";         QCMD[sh6bench8]="$MB/shbench sh6 8 10000 40"
CMD[sh8bench2]="$MB/shbench sh8 2 140000 1000000 2000000"; QCMD[sh8bench2]="$MB/shbench sh8 2 2000 100000 20000"
CMD[sh8bench8]="$MB/shbench sh8 8 140000 1000000 2000000"; QCMD[sh8bench8]="$MB/shbench sh8 8 2000 100000 64000"
CMD[xmalloc2]="$MB/xmalloc 1 2000 64";                 QCMD[xmalloc2]="$MB/xmalloc 1 20 64"
CMD[xmalloc8]="$MB/xmalloc 4 4000 64";                 QCMD[xmalloc8]="$MB/xmalloc 4 40 64"
CMD[simple]="$MB/simple 500000 16";                    QCMD[simple]="$MB/simple 3200 16"
CMD[handoff]="$MB/handoff 8 200 4000";                 QCMD[handoff]="$MB/handoff 8 5 1000"
wl=()
for w in $workloads; do
	[ -n "${CMD[$w]+x}" ] || { echo "peers.sh: unknown workload '$w'" >&2; exit 2; }
	wl+=("$w")
done

# ---- runs -------------------------------------------------------------------------------
RAW=$(mktemp /tmp/uslab-peers.XXXXXX)
trap 'rm -f "$RAW"' EXIT
read -r -a pl <<<"$peers"
np=${#pl[@]}
echo "peers: $peers; workloads: ${wl[*]}; $reps repetition(s)$([ $quick = 1 ] && echo ', quick sizes')"
for ((r = 0; r < reps; r++)); do
	for w in "${wl[@]}"; do
		cmd=${CMD[$w]}
		[ $quick = 1 ] && cmd=${QCMD[$w]}
		for ((k = 0; k < np; k++)); do
			p=${pl[$(((k + r) % np))]}
			# memtime writes "seconds maxrss_kib status voluntary involuntary" on fd 3
			envs=()
			[ -z "${OPTS[$p]:-}" ] || envs=(env "USLAB_OPTIONS=${USLAB_OPTIONS:+$USLAB_OPTIONS }${OPTS[$p]}")
			res=$("${envs[@]}" "$MB/memtime" --preload "${LIB[$p]}" -- $cmd 3>&1 >/dev/null 2>"$RAW.err") || true
			read -r sec kib code vcs _ <<<"$res"
			if [ "${code:-1}" != 0 ]; then
				echo "  $w under $p failed (status ${code:-?}):"
				tail -3 "$RAW.err"
				continue
			fi
			echo "$w $p $sec $kib $vcs" >>"$RAW"
			[ -z "$rawout" ] || echo "$w $p $sec $kib $vcs" >>"$rawout"
			printf '  rep %d %-14s %-9s %8.3f s %9d KiB %7d vcs\n' $((r + 1)) "$w" "$p" "$sec" "$kib" "$vcs"
		done
	done
done
rm -f "$RAW.err"

# ---- table --------------------------------------------------------------------------------
TABLE=$(awk -v peers="$peers" -v base="$base" -v wls="${wl[*]}" '
function median(arr, n,   i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
{ k = $1 SUBSEP $2; n[k]++; T[k, n[k]] = $3; M[k, n[k]] = $4 }
END {
	np = split(peers, P, " "); nw = split(wls, W, " ")
	for (w = 1; w <= nw; w++) for (p = 1; p <= np; p++) {
		k = W[w] SUBSEP P[p]; c = n[k]; if (!c) continue
		delete a; for (i = 1; i <= c; i++) a[i] = T[k, i]; mt[k] = median(a, c)
		delete a; for (i = 1; i <= c; i++) a[i] = M[k, i]; mm[k] = median(a, c)
	}
	printf "| workload |"; for (p = 1; p <= np; p++) printf " %s time (s) | x%s | %s RSS (MiB) | x%s |", P[p], base, P[p], base; printf "\n"
	printf "|---|"; for (p = 1; p <= np; p++) printf "---:|---:|---:|---:|"; printf "\n"
	for (w = 1; w <= nw; w++) {
		b = W[w] SUBSEP base
		printf "| %s |", W[w]
		for (p = 1; p <= np; p++) {
			k = W[w] SUBSEP P[p]
			if (!(k in mt) || !(b in mt) || mt[b] <= 0 || mm[b] <= 0) { printf " - | - | - | - |"; continue }
			rt = mt[k] / mt[b]; rm = mm[k] / mm[b]
			printf " %.3f | %.2f | %.1f | %.2f |", mt[k], rt, mm[k] / 1024, rm
			lt[P[p]] += log(rt); lm[P[p]] += log(rm); cnt[P[p]]++
		}
		printf "\n"
	}
	printf "| **geometric mean** |"
	for (p = 1; p <= np; p++) {
		if (!cnt[P[p]]) { printf " | - | | - |"; continue }
		printf " | **%.2f** | | **%.2f** |", exp(lt[P[p]] / cnt[P[p]]), exp(lm[P[p]] / cnt[P[p]])
	}
	printf "\n"
}' "$RAW")
# voluntary context switches per second of run time, median per cell
VCS=$(awk -v peers="$peers" -v wls="${wl[*]}" '
function median(arr, n,   i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
NF >= 5 && $3 > 0 { k = $1 SUBSEP $2; n[k]++; V[k, n[k]] = $5 / $3 }
END {
	np = split(peers, P, " "); nw = split(wls, W, " ")
	printf "| workload |"; for (p = 1; p <= np; p++) printf " %s |", P[p]; printf "\n"
	printf "|---|"; for (p = 1; p <= np; p++) printf "---:|"; printf "\n"
	for (w = 1; w <= nw; w++) {
		printf "| %s |", W[w]
		for (p = 1; p <= np; p++) {
			k = W[w] SUBSEP P[p]
			if (!n[k]) { printf " - |"; continue }
			delete a; for (i = 1; i <= n[k]; i++) a[i] = V[k, i]
			v = median(a, n[k]); printf " %.0f |", v
			if (v > mx[P[p]]) { mx[P[p]] = v; mw[P[p]] = W[w] }
		}
		printf "\n"
	}
	printf "| **highest** |"; for (p = 1; p <= np; p++) printf " **%.0f** (%s) |", mx[P[p]], mw[P[p]]; printf "\n"
}' "$RAW")
echo
echo "Medians of $reps run(s); ratios to $base (lower is better)."
echo "$TABLE"
echo
echo "Voluntary context switches per second of run time (medians):"
echo "$VCS"

# ---- save and chart --------------------------------------------------------------------------
if [ $save = 1 ]; then
	mkdir -p "$ROOT/bench/results"
	stem=$ROOT/bench/results/$(date +%Y-%m-%d)-peers$(if [ $quick = 1 ]; then echo -quick; fi)   # (an && list here would fail the assignment under set -e)
	i=2
	out=$stem
	while [ -e "$out.md" ]; do out=$stem-$i; i=$((i + 1)); done
	{
		echo "# bench/peers.sh $(date -u +%Y-%m-%dT%H:%MZ)"
		echo
		echo "Machine: $(nproc) CPUs, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(uname -r)."
		echo "uslab: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$([ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] || echo ' (with uncommitted changes)')$([ -z "$baselib" ] || echo "; base: $baselib")."
		echo "Command: bench/peers.sh $([ $quick = 1 ] && echo --quick) --reps $reps --peers \"$peers\"; USLAB_OPTIONS=\"${USLAB_OPTIONS:-}\"; medians; ratios to $base."
		echo
		echo "$TABLE"
		echo
		echo "Voluntary context switches per second of run time (getrusage ru_nvcsw / wall time; medians):"
		echo
		echo "$VCS"
		echo
		echo "Raw samples (workload allocator seconds maxrss_kib voluntary_switches):"
		echo
		echo '```'
		cat "$RAW"
		echo '```'
	} >"$out.md"
	echo "saved $out.md"
	if [ $chart = 1 ]; then
		if "$PY" -c 'import matplotlib' 2>/dev/null; then
			"$PY" - "$RAW" "$out.png" "$base" "$peers" "${wl[*]}" <<'EOF'
import sys, statistics, math
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
raw, png, base, peers, wls = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5].split()
t, m = {}, {}
for line in open(raw):
    w, p, s, k = line.split()[:4]
    t.setdefault((w, p), []).append(float(s)); m.setdefault((w, p), []).append(float(k))
fig, axes = plt.subplots(2, 1, figsize=(max(8, 1.3 * (len(wls) + 1)), 8), sharex=True)
for ax, data, what in ((axes[0], t, "time"), (axes[1], m, "peak RSS")):
    width = 0.8 / len(peers)
    for i, p in enumerate(peers):
        ys, logs = [], []
        for w in wls:
            if (w, p) in data and (w, base) in data:
                r = statistics.median(data[(w, p)]) / statistics.median(data[(w, base)])
                ys.append(r); logs.append(math.log(r))
            else:
                ys.append(0)
        ys.append(math.exp(sum(logs) / len(logs)) if logs else 0)
        ax.bar([x + i * width for x in range(len(wls) + 1)], ys, width, label=p)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_ylabel(f"{what} / {base}")
    ax.set_yscale("log")
axes[1].set_xticks([x + 0.4 - 0.4 / len(peers) for x in range(len(wls) + 1)])
axes[1].set_xticklabels(wls + ["geomean"], rotation=30, ha="right")
axes[0].legend(ncol=len(peers), fontsize="small")
axes[0].set_title("uslab and peers: median time and peak RSS relative to " + base + " (lower is better)")
fig.tight_layout()
fig.savefig(png, dpi=100)
EOF
			echo "chart: $out.png"
		else
			echo "no chart: $PY has no matplotlib (Debian package python3-matplotlib)"
		fi
	fi
fi
