#!/usr/bin/env bash
# bench/experiments/experiments.sh: the experiments of the SLUB threads on
# linux-mm that uslab follows (docs/design.md, "Where the mechanisms come
# from"), rerun in user space.
#
#   bench/experiments/experiments.sh [--quick] [--no-wait] [--no-save] [--only "1 2 3 4 5 6 7"]
#
# --only takes experiment numbers separated by spaces or commas (--only 5,6,7);
# the default is all seven.
#
# 1. uhackbench (threads, ring transport; pipe transport at 10 groups as a
#    check), per-CPU partial lists off (USLAB_OPTIONS="uhackbench-msg:
#    cpu_partial=0") against the default, at 1, 5, 10 and 20 groups: time
#    and node-lock acquisitions per million operations (2011 thread). Both
#    arms run in classic mode (slub_sheaf_capacity=0): CPU partial lists
#    exist only there.
# 2. exp_bulk: ns per object of alloc_bulk+free_bulk of N against N single
#    allocs and frees, N = 1 .. 250, with defaults and with cpu_partial=256
#    min_partial=9 (slab_bulk_test01 and the 2015 thread's tuning).
# 3. exp_skb: producer/consumer of 256-byte skbs freed in bulks of 32 (and
#    one by one), another 256-byte cache churning in a third thread: merged,
#    slab_nomerge, and merged + tuned (2015 thread).
# 4. exp_order: slub_max_order=0, 1, 3 on a fragmenting workload, without a
#    limit and with RLIMIT_AS 160 MiB above the start (2009 thread).
# 5. The 2010 table: uhackbench (ring transport) in cache mode and in malloc
#    mode (LD_PRELOAD of libuslab-malloc.so), at 1, 10 and 100 groups, in
#    every per-CPU mode (USLAB_OPTIONS=slub_cpu_mode=NAME: classic = SLUB,
#    sheaves = SLUB+Q, slqb, home; slab = SLAB when the build takes that name
#    (uhackbench's "uslab: cpu_mode N (NAME)" line says which mode ran; a mode
#    the build ignores is left out with a message): time, node-lock
#    acquisitions per million operations (malloc mode: of all kmalloc caches,
#    read through `uslabinfo run --json`, which asks the process for a
#    snapshot every 200 ms), peak RSS; laid out as Lameter's SLAB/SLUB/SLUB+Q
#    table. Loops per group count: HB2010_ROWS ("GROUPS:LOOPS ...", default
#    "1:5000 10:500 100:60": each row about 1-3 s on a quiet 2-vCPU machine);
#    HB2010_MODES ("cache malloc") and HB2010_CPU_MODES ("slab classic
#    sheaves slqb home") pick the uhackbench and per-CPU modes.
# 6. exp_cold: 1,000,000 objects of 64..256 B allocated, freed in random
#    order, allocated again: ns per free and per allocation, for uslab in
#    every per-CPU mode the build takes (slab, classic, sheaves, slqb, home;
#    COLD_CPU_MODES to pick), through malloc (LD_PRELOAD of
#    libuslab-malloc.so, USLAB_OPTIONS=slub_cpu_mode=NAME) and through the
#    cache API on a 128-byte cache; glibc and mimalloc (malloc, LD_PRELOAD);
#    allocations writing the object's first 8 bytes (touch 1) and not
#    (touch 0).
# 7. sheaf_capacity sweep: slub_sheaf_capacity=N for N in SWEEP_CAPS
#    (default "0 8 16 32 61 128 256 default"; 0 is classic mode, default the
#    per-cache capacities) on uhackbench (cache mode, 10 groups) and on
#    bench/peers.sh's workloads under uslab (peers.sh --peers uslab --raw,
#    built in the same directory; SWEEP_WORKLOADS to pick some): time and
#    peak RSS per capacity.
#
# Every experiment interleaves its configurations (each repetition runs all
# of them, in an order that alternates or rotates) and reports medians.
# Builds libuslab, libuslab-malloc, uhackbench, uslabinfo and exp_cold(_cache)
# in $USLAB_EXP_BUILD (default build-exp, configured RelWithDebInfo = -O2 -g
# if it does not exist) and compiles the other experiment programs there
# (bench/experiments/*.c against the shared libuslab, as bench/ does). Waits
# up to 10 minutes for the 1-minute load average to drop below 1.0
# (--no-wait: do not), and says in the results if it did not. Results:
# bench/results/<date>-<host>-experiments.md with the machine description,
# the tables and the raw samples, and PNG plots beside it
# (python3-matplotlib; the tables are written without it).
# --quick: small sizes and 1 repetition, for a smoke test (about 30 s for
# all seven on a quiet 2-vCPU machine).
# Full runs on a 2-vCPU machine: 1-4 about 1 min, 5 about 6-10 min (4 per-CPU
# modes x cache and malloc mode x 7; a fifth mode, slab, adds a quarter), 6
# about 3-4 min (10 configurations x touch 1/0 x 7; 12 with slab), 7 about
# 6-8 min (about half of it peers.sh's largealloc under uslab).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${USLAB_EXP_BUILD:-$ROOT/build-exp}
cmdline="bench/experiments/experiments.sh${*:+ $*}"
quick=0
wait_load=1
save=1
only="1 2 3 4 5 6 7"
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--no-wait) wait_load=0 ;;
	--no-save) save=0 ;;
	--only) only=$2; shift ;;
	-h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) echo "experiments.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
only=" ${only//,/ } "
for e in $only; do
	case $e in
	[1-7]) ;;
	*) echo "experiments.sh: --only: unknown experiment '$e' (1 .. 7)" >&2; exit 2 ;;
	esac
done
log() { printf '%s\n' "$*" >&2; }

# ---------------------------------------------------------------- sizes
if [ "$quick" = 1 ]; then
	HB_REPS=1; HB_LOOPS=100; PIPE_REPS=1
	BULK_OBJS=300000; BULK_REPS=1
	SKB_N=300000; SKB_REPS=1
	ORD_REPS=1; ORD_CYCLES=6
	HB10_REPS=1; HB10_ROWS_DEF="1:50 10:10 100:2"
	COLD_REPS=1; COLD_OBJS=100000
	SWEEP_REPS=1; SWEEP_HB_LOOPS=20
else
	HB_REPS=11; HB_LOOPS=500; PIPE_REPS=5   # hackbench times are noisy here: more runs
	BULK_OBJS=2000000; BULK_REPS=5
	SKB_N=2000000; SKB_REPS=5
	ORD_REPS=3; ORD_CYCLES=12
	HB10_REPS=7; HB10_ROWS_DEF="1:5000 10:500 100:60"
	COLD_REPS=7; COLD_OBJS=1000000
	SWEEP_REPS=3; SWEEP_HB_LOOPS=500
fi
HB10_ROWS=${HB2010_ROWS:-$HB10_ROWS_DEF}
HB10_MODES=${HB2010_MODES:-"cache malloc"}
HB10_CPU_MODES=${HB2010_CPU_MODES:-"slab classic sheaves slqb home"}
COLD_CPU_MODES=${COLD_CPU_MODES:-"slab classic sheaves slqb home"}
SWEEP_CAPS=${SWEEP_CAPS:-"0 8 16 32 61 128 256 default"}
SWEEP_WORKLOADS=${SWEEP_WORKLOADS:-}
GROUPS_LIST="1 5 10 20"
ORD_LIMIT=160

# ---------------------------------------------------------------- build
mkdir -p "$BUILD"
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
	log "== configuring $BUILD (RelWithDebInfo: -O2 -g)"
	cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUSLAB_SANITIZE= >"$BUILD/exp-build.log" 2>&1
fi
if grep -q '^USLAB_SANITIZE:STRING=.\+' "$BUILD/CMakeCache.txt"; then
	log "experiments.sh: $BUILD is a sanitizer build; use another USLAB_EXP_BUILD"; exit 1
fi
log "== building libuslab, libuslab-malloc, uhackbench, uslabinfo and exp_cold in $BUILD"
cmake --build "$BUILD" --target uslab uslab_malloc uhackbench uslabinfo exp_cold exp_cold_cache \
	>>"$BUILD/exp-build.log" 2>&1 || { cat "$BUILD/exp-build.log" >&2; exit 1; }
BIN=$BUILD/experiments
mkdir -p "$BIN"
for p in exp_bulk exp_skb exp_order; do
	${CC:-gcc} -O2 -Wall -Wextra -I"$ROOT/include" "$HERE/$p.c" -o "$BIN/$p" \
		-L"$BUILD" -luslab -Wl,-rpath,"$BUILD" -lpthread
done
HB=$BUILD/bench/uhackbench
USLABINFO=$BUILD/uslabinfo
MALLOC_LIB=$BUILD/libuslab-malloc.so
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || true)
MIMALLOC_LIB=/usr/lib/${MULTIARCH:-x86_64-linux-gnu}/libmimalloc.so.2

# ---------------------------------------------------------------- load
load1() { cut -d' ' -f1 /proc/loadavg; }
loaded=""
if [ "$wait_load" = 1 ]; then
	waited=0
	while awk -v l="$(load1)" 'BEGIN { exit !(l >= 1.0) }'; do
		if [ $waited -ge 600 ]; then
			loaded="yes"
			log "== load average still $(load1) after 10 minutes: running anyway"
			break
		fi
		[ $waited = 0 ] && log "== waiting for the 1-minute load average ($(load1)) to drop below 1.0 (up to 10 min)"
		sleep 15
		waited=$((waited + 15))
	done
else
	awk -v l="$(load1)" 'BEGIN { exit !(l >= 1.0) }' && loaded="yes (--no-wait)"
fi
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
start_epoch=$(date +%s)

DATA=$(mktemp -d)
trap 'rm -rf "$DATA"' EXIT
field() { sed -n "s/.*[ ]$1[ =]\([0-9.]*\).*/\1/p" | head -n 1; }

# ---------------------------------------------------------------- 1. uhackbench
if [[ " $only " == *" 1 "* ]]; then
	echo "transport,groups,mode,rep,time_s,ops,node_lock,cpu_partial_alloc,cpu_partial_free,alloc_slab,maxrss_kib" >"$DATA/exp1.csv"
	run_hb() {   # transport groups mode rep
		local tr=$1 g=$2 mode=$3 rep=$4 env=(USLAB_OPTIONS="slub_sheaf_capacity=0") out
		[ "$mode" = off ] && env=(USLAB_OPTIONS="slub_sheaf_capacity=0 uhackbench-msg:cpu_partial=0")
		out=$(env "${env[@]}" "$HB" --transport "$tr" "$g" "$HB_LOOPS" 2>&1) || { log "$out"; exit 1; }
		local t nl cpa cpf as rss ops
		t=$(awk '/^Time:/ {print $2}' <<<"$out")
		rss=$(awk '/^MaxRSS:/ {print $2}' <<<"$out")
		nl=$(field NODE_LOCK <<<"$out"); cpa=$(field CPU_PARTIAL_ALLOC <<<"$out")
		cpf=$(field CPU_PARTIAL_FREE <<<"$out"); as=$(field ALLOC_SLAB <<<"$out")
		ops=$((2 * g * 20 * 20 * HB_LOOPS))
		echo "$tr,$g,$mode,$rep,$t,$ops,$nl,$cpa,$cpf,$as,$rss" >>"$DATA/exp1.csv"
		printf ' %s %ss nl=%s' "$mode" "$t" "$nl" >&2
	}
	log "== 1. uhackbench, classic mode, cpu_partial default vs 0, ring transport, loops $HB_LOOPS x $HB_REPS"
	for ((r = 0; r < HB_REPS; r++)); do
		for g in $GROUPS_LIST; do
			printf ' rep %d groups %d:' "$((r + 1))" "$g" >&2
			if ((r % 2)); then modes="off default"; else modes="default off"; fi
			for m in $modes; do run_hb ring "$g" "$m" "$r"; done
			printf '\n' >&2
		done
	done
	for ((r = 0; r < PIPE_REPS; r++)); do
		printf ' pipe rep %d groups 10:' "$((r + 1))" >&2
		for m in default off; do run_hb pipe 10 "$m" "$r"; done
		printf '\n' >&2
	done
fi

# ---------------------------------------------------------------- 2. bulk
if [[ " $only " == *" 2 "* ]]; then
	echo "config,n,reuse_ns,single_ns,bulk_ns" >"$DATA/exp2.csv"
	log "== 2. exp_bulk, $BULK_OBJS objects per point, median of $BULK_REPS"
	for cfg in default tuned; do
		env=()
		[ "$cfg" = tuned ] && env=(USLAB_OPTIONS="bulk-test:cpu_partial=256 bulk-test:min_partial=9")
		out=$(env "${env[@]}" "$BIN/exp_bulk" --objects "$BULK_OBJS" --reps "$BULK_REPS" --csv 2>&1) || { log "$out"; exit 1; }
		grep -v '^CSV' <<<"$out" | sed "s/^/  [$cfg] /" >&2
		grep '^CSV bulk,' <<<"$out" | sed "s/^CSV bulk,/$cfg,/" >>"$DATA/exp2.csv"
		grep '^stats:' <<<"$out" | sed "s/^/$cfg /" >>"$DATA/exp2.stats"
	done
fi

# ---------------------------------------------------------------- 3. skb
if [[ " $only " == *" 3 "* ]]; then
	echo "config,bulk,rep,skbs,ns_per_skb,mops,churn_ops,node_lock,alloc_slab,free_slab" >"$DATA/exp3.csv"
	log "== 3. exp_skb, $SKB_N skbs x $SKB_REPS"
	for ((r = 0; r < SKB_REPS; r++)); do
		for b in 1 32; do
			for cfg in merged nomerge tuned; do
				case $cfg in
				merged) opts="" ;;
				nomerge) opts="slab_nomerge" ;;
				tuned) opts="skbuff_head_cache:cpu_partial=256 skbuff_head_cache:min_partial=9" ;;
				esac
				out=$(USLAB_OPTIONS="$opts" "$BIN/exp_skb" --skbs "$SKB_N" --bulk "$b" 2>&1) || { log "$out"; exit 1; }
				ns=$(field ns_per_skb <<<"$out"); mops=$(field mops <<<"$out"); co=$(field churn_ops <<<"$out")
				nl=$(field NODE_LOCK <<<"$out"); as=$(field ALLOC_SLAB <<<"$out"); fs=$(field FREE_SLAB <<<"$out")
				echo "$cfg,$b,$r,$SKB_N,$ns,$mops,$co,$nl,$as,$fs" >>"$DATA/exp3.csv"
				log "  rep $((r + 1)) bulk $b $cfg: $ns ns/skb, $mops Mops/s, NODE_LOCK $nl"
			done
		done
	done
fi

# ---------------------------------------------------------------- 4. order
if [[ " $only " == *" 4 "* ]]; then
	echo "max_order,limit_mib,rep,time_s,peak_rss_kib,peak_mapped_kib,nulls,order_fallback,allocs,slabs" >"$DATA/exp4.csv"
	log "== 4. exp_order, $ORD_CYCLES cycles x $ORD_REPS"
	for ((r = 0; r < ORD_REPS; r++)); do
		for lim in 0 "$ORD_LIMIT"; do
			for o in 0 1 3; do
				args=(--cycles "$ORD_CYCLES" --seed $((r + 1)))
				[ "$lim" != 0 ] && args+=(--limit-mib "$lim")
				out=$(USLAB_OPTIONS="slub_max_order=$o" "$BIN/exp_order" "${args[@]}" 2>&1) || { log "$out"; exit 1; }
				line=$(grep '^RESULT' <<<"$out")
				v() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p" <<<"$line"; }
				echo "$o,$lim,$r,$(v time_s),$(v peak_rss_kib),$(v peak_mapped_kib),$(v nulls),$(v order_fallback),$(v allocs),$(v slabs)" >>"$DATA/exp4.csv"
				log "  rep $((r + 1)) limit $lim max_order $o: ${line#RESULT }"
			done
		done
	done
fi
# ---------------------------------------------------------------- 5. the 2010 table
# Sum of events over every cache in a `uslabinfo run --json` report on stdin.
json_events() {
	"$PYJ" -c '
import json, sys
names = sys.argv[1:]
doc = None
for line in sys.stdin:
    if line.startswith("{\"pid\""):
        doc = json.loads(line)
if doc is None:
    sys.exit("no uslabinfo JSON in the output")
tot = dict.fromkeys(names, 0)
for c in doc["caches"]:
    for n in names:
        tot[n] += int(c["events"].get(n, 0))
print(" ".join(f"{n}={tot[n]}" for n in names))
' "$@"
}
PYJ=python3
command -v python3 >/dev/null 2>&1 || PYJ=/usr/bin/python3
# uslab_mode_taken NAME: does this build take USLAB_OPTIONS=slub_cpu_mode=NAME?
# (A cache of uhackbench then says it ran NAME; a name the build does not
# know is ignored with a warning, and the cache runs the default.)
uslab_mode_taken() {
	local out
	out=$(USLAB_OPTIONS="slub_cpu_mode=$1" "$HB" --mode cache 1 1 2>&1) || return 1
	grep -q "^uslab: cpu_mode [0-9]* ($1)\$" <<<"$out"
}
if [[ " $only " == *" 5 "* ]]; then
	echo "mode,groups,loops,config,rep,time_s,ops,node_lock,alloc_slab,free_slab,maxrss_kib" >"$DATA/exp5.csv"
	run_hb10() {   # mode groups loops config rep
		local mode=$1 g=$2 l=$3 cfg=$4 rep=$5 opts="slub_cpu_mode=$4" out t rss nl as fs ev
		if [ "$mode" = cache ]; then
			out=$(USLAB_OPTIONS="$opts" "$HB" --mode cache --transport ring "$g" "$l" 2>&1) || { log "$out"; exit 1; }
			grep -q "^uslab: cpu_mode [0-9]* ($cfg)\$" <<<"$out" || { log "$out"; log "experiments.sh: the cache did not run mode $cfg"; exit 1; }
			nl=$(field NODE_LOCK <<<"$out"); as=$(field ALLOC_SLAB <<<"$out"); fs=$(field FREE_SLAB <<<"$out")
		else
			out=$(USLAB_OPTIONS="$opts" "$USLABINFO" run --json -- env LD_PRELOAD="$MALLOC_LIB" \
				"$HB" --mode malloc --transport ring "$g" "$l" 2>&1) || { log "$out"; exit 1; }
			ev=$(json_events NODE_LOCK ALLOC_SLAB FREE_SLAB <<<"$out") || { log "$out"; exit 1; }
			nl=$(sed -n 's/.*NODE_LOCK=\([0-9]*\).*/\1/p' <<<"$ev")
			as=$(sed -n 's/.*ALLOC_SLAB=\([0-9]*\).*/\1/p' <<<"$ev")
			fs=$(sed -n 's/.*FREE_SLAB=\([0-9]*\).*/\1/p' <<<"$ev")
		fi
		if grep -q 'USLAB_OPTIONS: ignoring' <<<"$out"; then log "$out"; log "experiments.sh: uslab ignored $opts"; exit 1; fi
		t=$(awk '/^Time:/ {print $2}' <<<"$out")
		rss=$(awk '/^MaxRSS:/ {print $2}' <<<"$out")
		echo "$mode,$g,$l,$cfg,$rep,$t,$((2 * g * 20 * 20 * l)),$nl,$as,$fs,$rss" >>"$DATA/exp5.csv"
		printf ' %s %ss nl=%s' "$cfg" "$t" "$nl" >&2
	}
	hb10_cfgs=""
	for m in $HB10_CPU_MODES; do
		if uslab_mode_taken "$m"; then hb10_cfgs="$hb10_cfgs $m"; else log "== 5. cpu_mode $m left out: this build does not take slub_cpu_mode=$m"; fi
	done
	read -r -a hc <<<"$hb10_cfgs"
	[ ${#hc[@]} -gt 0 ] || { log "experiments.sh: 5: no per-CPU mode to run"; exit 1; }
	log "== 5. the 2010 table: uhackbench (ring), ${hc[*]}, uhackbench modes $HB10_MODES, rows (groups:loops) $HB10_ROWS, x $HB10_REPS"
	for ((r = 0; r < HB10_REPS; r++)); do
		for row in $HB10_ROWS; do
			g=${row%%:*} l=${row##*:}
			for mode in $HB10_MODES; do
				printf ' rep %d %s groups %d loops %d:' "$((r + 1))" "$mode" "$g" "$l" >&2
				for ((k = 0; k < ${#hc[@]}; k++)); do   # the order rotates from one repetition to the next
					run_hb10 "$mode" "$g" "$l" "${hc[$(((k + r) % ${#hc[@]}))]}" "$r"
				done
				printf '\n' >&2
			done
		done
	done
fi

# ---------------------------------------------------------------- 6. cold objects
if [[ " $only " == *" 6 "* ]]; then
	echo "config,touch,rep,objects,alloc1_ns,free_ns,alloc2_ns,maxrss_kib,free_node_lock,alloc2_node_lock,free_fast_pct,alloc2_fast_pct" >"$DATA/exp6.csv"
	cold_modes=""
	for m in $COLD_CPU_MODES; do
		if uslab_mode_taken "$m"; then cold_modes="$cold_modes $m"; else log "== 6. cpu_mode $m left out: this build does not take slub_cpu_mode=$m"; fi
	done
	cold_cfgs=""
	for m in $cold_modes; do cold_cfgs="$cold_cfgs malloc-$m"; done
	cold_cfgs="$cold_cfgs glibc"
	if [ -e "$MIMALLOC_LIB" ]; then cold_cfgs="$cold_cfgs mimalloc"; else log "== 6. $MIMALLOC_LIB missing (Debian libmimalloc2.0): no mimalloc column"; fi
	for m in $cold_modes; do cold_cfgs="$cold_cfgs cache-$m"; done
	read -r -a cc <<<"$cold_cfgs"
	log "== 6. exp_cold, $COLD_OBJS objects, ${#cc[@]} configurations (${cc[*]}) x touch 1/0 x $COLD_REPS"
	for ((r = 0; r < COLD_REPS; r++)); do
		for touch in 1 0; do
			printf ' rep %d touch %d (ns per free/alloc again):' "$((r + 1))" "$touch" >&2
			for ((k = 0; k < ${#cc[@]}; k++)); do   # the order rotates from one repetition to the next
				cfg=${cc[$(((k + r) % ${#cc[@]}))]}
				pre="" opts="" exe=$BUILD/bench/exp_cold
				case $cfg in
				malloc-*) pre=$MALLOC_LIB; opts="slub_cpu_mode=${cfg#malloc-}" ;;
				mimalloc) pre=$MIMALLOC_LIB ;;
				cache-*) exe=$BUILD/bench/exp_cold_cache; opts="slub_cpu_mode=${cfg#cache-}" ;;
				esac
				envs=(USLAB_OPTIONS="$opts")
				[ -n "$pre" ] && envs+=(LD_PRELOAD="$pre")
				out=$(env -u LD_PRELOAD "${envs[@]}" "$exe" --objects "$COLD_OBJS" --touch "$touch" 2>&1) ||
					{ log "$out"; exit 1; }
				if grep -q 'USLAB_OPTIONS: ignoring' <<<"$out"; then log "$out"; log "experiments.sh: uslab ignored $opts"; exit 1; fi
				case $cfg in
				cache-*) grep -q "cpu_mode [0-9]* (${cfg#cache-})," <<<"$out" ||
					{ log "$out"; log "experiments.sh: the cache did not run mode ${cfg#cache-}"; exit 1; } ;;
				esac
				line=$(grep '^RESULT' <<<"$out")
				v() { sed -n "s/.*[ ]$1=\([0-9.]*\).*/\1/p" <<<"$line"; }
				fnl=$(sed -n 's/^stats: free .*NODE_LOCK=\([0-9]*\).*/\1/p' <<<"$out")
				anl=$(sed -n 's/^stats: alloc2 .*NODE_LOCK=\([0-9]*\).*/\1/p' <<<"$out")
				ffp=$(awk '/^stats: free / { for (i = 3; i <= NF; i++) { split($i, kv, "="); e[kv[1]] = kv[2] }
					if (e["frees"] > 0) printf "%.1f", 100 * e["frees_fast"] / e["frees"] }' <<<"$out")
				afp=$(awk '/^stats: alloc2 / { for (i = 3; i <= NF; i++) { split($i, kv, "="); e[kv[1]] = kv[2] }
					if (e["allocs"] > 0) printf "%.1f", 100 * e["allocs_fast"] / e["allocs"] }' <<<"$out")
				echo "$cfg,$touch,$r,$COLD_OBJS,$(v alloc1_ns),$(v free_ns),$(v alloc2_ns),$(v maxrss_kib),$fnl,$anl,$ffp,$afp" >>"$DATA/exp6.csv"
				grep '^stats:' <<<"$out" | sed "s/^/$cfg touch=$touch rep=$r /" >>"$DATA/exp6.stats" || true
				printf ' %s %s/%s' "$cfg" "$(v free_ns)" "$(v alloc2_ns)" >&2
			done
			printf '\n' >&2
		done
	done
fi

# ---------------------------------------------------------------- 7. sheaf_capacity sweep
if [[ " $only " == *" 7 "* ]]; then
	echo "capacity,rep,time_s,ops,node_lock,maxrss_kib" >"$DATA/exp7_hb.csv"
	echo "capacity,rep,workload,time_s,maxrss_kib" >"$DATA/exp7_peers.csv"
	read -r -a caps <<<"$SWEEP_CAPS"
	peers_args=(--peers uslab --reps 1 --no-save --no-chart --no-install)
	[ "$quick" = 1 ] && peers_args+=(--quick)
	[ -n "$SWEEP_WORKLOADS" ] && peers_args+=(--workloads "$SWEEP_WORKLOADS")
	log "== 7. sheaf_capacity sweep: $SWEEP_CAPS; uhackbench cache 10 groups x $SWEEP_HB_LOOPS loops, peers.sh workloads$([ "$quick" = 1 ] && echo ' (quick)'); x $SWEEP_REPS"
	for ((r = 0; r < SWEEP_REPS; r++)); do
		for ((k = 0; k < ${#caps[@]}; k++)); do
			cap=${caps[$(((k + r) % ${#caps[@]}))]}
			opts="slub_sheaf_capacity=$cap"
			[ "$cap" = default ] && opts=""
			out=$(USLAB_OPTIONS="$opts" "$HB" --mode cache --transport ring 10 "$SWEEP_HB_LOOPS" 2>&1) || { log "$out"; exit 1; }
			t=$(awk '/^Time:/ {print $2}' <<<"$out"); rss=$(awk '/^MaxRSS:/ {print $2}' <<<"$out")
			nl=$(field NODE_LOCK <<<"$out")
			echo "$cap,$r,$t,$((2 * 10 * 20 * 20 * SWEEP_HB_LOOPS)),$nl,$rss" >>"$DATA/exp7_hb.csv"
			log "  rep $((r + 1)) capacity $cap: uhackbench ${t}s nl=$nl rss=${rss}KiB"
			rm -f "$DATA/peers.raw"
			USLAB_OPTIONS="$opts" USLAB_BENCH_BUILD="$BUILD" bash "$ROOT/bench/peers.sh" "${peers_args[@]}" \
				--raw "$DATA/peers.raw" >"$DATA/peers.out" 2>&1 || { cat "$DATA/peers.out" >&2; exit 1; }
			grep -q . "$DATA/peers.raw" 2>/dev/null || { cat "$DATA/peers.out" >&2; log "peers.sh wrote no samples"; exit 1; }
			grep 'failed' "$DATA/peers.out" >&2 || true
			awk -v c="$cap" -v r="$r" '{ printf "%s,%s,%s,%s,%s\n", c, r, $1, $3, $4 }' "$DATA/peers.raw" >>"$DATA/exp7_peers.csv"
			awk '{ printf "%s %.3fs %dKiB; ", $1, $3, $4 } END { printf "\n" }' "$DATA/peers.raw" | sed 's/^/    /' >&2
		done
	done
fi
elapsed=$(($(date +%s) - start_epoch))

# ---------------------------------------------------------------- report
host=$(hostname -s 2>/dev/null || hostname)
day=$(date +%F)
if [ "$save" = 1 ]; then
	mkdir -p "$ROOT/bench/results"
	base=$ROOT/bench/results/$day-$host-experiments
	n=2
	while [ -e "$base.md" ]; do base=$ROOT/bench/results/$day-$host-experiments-$n; n=$((n + 1)); done
else
	base=$DATA/report
fi
# A python3 that has matplotlib (Debian's python3-matplotlib lives in
# /usr/bin/python3, which a pyenv python3 earlier in PATH does not see).
PY=python3
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import matplotlib' 2>/dev/null; then PY=$p; break; fi
done
cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)
[ -n "$cpu" ] || cpu=$(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1)
rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
if [ -n "$(git -C "$ROOT" status --porcelain -- src include 2>/dev/null)" ]; then rev="$rev (src/include modified)"; fi
{
	echo "# uslab experiments (issues 3, 10 and 18), $day, $host"
	echo
	echo "- CPU: ${cpu:-unknown}, $(nproc) CPUs online; memory $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "- Kernel: $(uname -srm)"
	echo "- Compiler: $(${CC:-gcc} --version 2>/dev/null | head -n 1); $(getconf GNU_LIBC_VERSION 2>/dev/null || echo 'glibc ?')"
	echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ) (end of the run)"
	echo "- uslab: $rev; $(basename "$BUILD") ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")), shared libuslab"
	echo "- Load average at start: $load_at_start${loaded:+ — the machine was loaded (1-minute load >= 1.0): $loaded}; total run ${elapsed}s"
	echo "- Command: \`$cmdline\`"
	echo
	"$PY" "$HERE/report.py" "$DATA" "$base" "$HB_LOOPS" "$SWEEP_HB_LOOPS"
} >"$DATA/report.md"
if [ "$save" = 1 ]; then
	cp "$DATA/report.md" "$base.md"
	log "written: ${base#"$ROOT"/}.md (+ PNGs)"
else
	cat "$DATA/report.md"
fi
