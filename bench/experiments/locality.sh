#!/usr/bin/env bash
# bench/experiments/locality.sh: does the allocator keep a thread's run of
# allocations together in memory? Lameter's objection to sheaves (2026:
# objects wait in queues instead of going back to their slabs, allocation
# no longer empties one slab before the next), measured on MicroQuill's
# SmartHeap patterns (mbench/shbench.c), where each thread allocates runs
# of one size into a ring and frees the ring in allocation order.
#
#   bench/experiments/locality.sh [--reps N] [--cpus LIST]
#                                 [--configs "classic sheaves home mimalloc ..."]
#
# Per configuration and workload, interleaved over --reps (3) repetitions:
# one timed run (mbench/memtime: seconds), one run with SHBENCH_LOCALITY=1
# (untimed): the share of ring frees whose block lies more than 4 KiB from
# the block freed just before it. A walk over neighbouring blocks runs on
# lines the hardware prefetcher brought; a scattered one misses on most
# frees (free() reads the block's double-free mark, and a refill walks
# the free lists of many slabs). --cpus runs everything under taskset
# (e.g. 0: one CPU, so that no object moves between CPUs). Prints a
# Markdown table of medians; nothing is saved.
#
# Configurations: classic, sheaves, home (USLAB_OPTIONS=slub_cpu_mode=...,
# libuslab-malloc.so from USLAB_BENCH_BUILD, default build-bench), uslab
# (its defaults), and the peers of bench/peerlibs.sh (glibc, jemalloc,
# tcmalloc, mimalloc). Workloads: sh8bench8, sh8bench2 and sh6bench2 as
# bench/peers.sh runs them.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}
reps=3 cpus="" configs="classic sheaves home uslab glibc jemalloc mimalloc"
while [ $# -gt 0 ]; do
	case $1 in
	--reps) reps=$2; shift ;;
	--cpus) cpus=$2; shift ;;
	--configs) configs=$2; shift ;;
	-h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) echo "locality.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done

MB=$BUILD/mbench
mkdir -p "$MB"
for p in shbench memtime; do
	if [ ! -x "$MB/$p" ] || [ "$ROOT/bench/mbench/$p.c" -nt "$MB/$p" ]; then
		cc -O2 -Wall -pthread -o "$MB/$p" "$ROOT/bench/mbench/$p.c"
	fi
done
[ -e "$BUILD/libuslab-malloc.so" ] || { echo "locality.sh: build $BUILD/libuslab-malloc.so first" >&2; exit 1; }
. "$ROOT/bench/peerlibs.sh"   # LIB
declare -A WL=([sh8bench8]="sh8 8 140000 1000000 2000000" [sh8bench2]="sh8 2 140000 1000000 2000000"
	[sh6bench2]="sh6 2 10000 4000")
workloads="sh8bench8 sh8bench2 sh6bench2"

# run time|locality CONFIG: the workload $w under CONFIG's malloc; time
# prints the wall seconds, locality the share of far frees (%)
run() {
	local what=$1 cfg=$2 pre="" opt=""
	case $cfg in
	classic | sheaves | home) pre=$BUILD/libuslab-malloc.so; opt="slub_cpu_mode=$cfg" ;;
	uslab) pre=$BUILD/libuslab-malloc.so ;;
	*) pre=${LIB[$cfg]-}; [ "$cfg" = glibc ] || [ -e "$pre" ] || return 1 ;;
	esac
	local ts=()
	[ -n "$cpus" ] && ts=(taskset -c "$cpus")
	if [ "$what" = time ]; then
		# memtime prints "WALL MAXRSS EXIT VCS IVCS" on stderr (fd 3 closed)
		env USLAB_OPTIONS="$opt" "${ts[@]}" "$MB/memtime" ${pre:+--preload "$pre"} -- "$MB/shbench" ${WL[$w]} \
			2>&1 >/dev/null 3>&- | awk 'NF >= 5 && $1 ~ /^[0-9.]+$/ { print $1 }'
	else
		env USLAB_OPTIONS="$opt" SHBENCH_LOCALITY=1 ${pre:+LD_PRELOAD="$pre"} "${ts[@]}" "$MB/shbench" ${WL[$w]} \
			2>/dev/null | sed -n 's/.*(\([0-9.]*\) % farther).*/\1/p'
	fi
}

declare -A T F
for ((r = 0; r < reps; r++)); do
	for w in $workloads; do
		for cfg in $configs; do
			t=$(run time "$cfg") || continue
			f=$(run locality "$cfg")
			T[$w,$cfg]+="$t "
			F[$w,$cfg]+="$f "
			printf '  rep %d %-10s %-8s %s s, %s %% farther\n' "$r" "$w" "$cfg" "$t" "$f" >&2
		done
	done
done

med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)]; else print "-" }'; }
echo "| workload | config | time (s), median of $reps | ring frees > 4 KiB from the previous (%) |"
echo "|---|---|--:|--:|"
for w in $workloads; do
	for cfg in $configs; do
		[ -n "${T[$w,$cfg]-}" ] || continue
		echo "| $w | $cfg | $(med <<<"${T[$w,$cfg]}") | $(med <<<"${F[$w,$cfg]}") |"
	done
done
