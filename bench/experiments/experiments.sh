#!/usr/bin/env bash
# bench/experiments/experiments.sh: the reference experiments of issue 3,
# after the threads in shared/reference/.
#
#   bench/experiments/experiments.sh [--quick] [--no-wait] [--no-save] [--only "1 2 3 4"]
#
# 1. uhackbench (threads, ring transport; pipe transport at 10 groups as a
#    check), per-CPU partial lists off (USLAB_OPTIONS="uhackbench-msg:
#    cpu_partial=0") against the default, at 1, 5, 10 and 20 groups: time
#    and node-lock acquisitions per million operations (2011 thread).
# 2. exp_bulk: ns per object of alloc_bulk+free_bulk of N against N single
#    allocs and frees, N = 1 .. 250, with defaults and with cpu_partial=256
#    min_partial=9 (slab_bulk_test01 and the 2015 thread's tuning).
# 3. exp_skb: producer/consumer of 256-byte skbs freed in bulks of 32 (and
#    one by one), another 256-byte cache churning in a third thread: merged,
#    slab_nomerge, and merged + tuned (2015 thread).
# 4. exp_order: slub_max_order=0, 1, 3 on a fragmenting workload, without a
#    limit and with RLIMIT_AS 160 MiB above the start (2009 thread).
#
# Builds libuslab and uhackbench in $USLAB_EXP_BUILD (default build-exp,
# configured RelWithDebInfo = -O2 -g if it does not exist) and compiles the
# experiment programs there (bench/experiments/*.c against the shared
# libuslab, as bench/ does). Waits up to 10 minutes for the 1-minute load
# average to drop below 1.0 (--no-wait: do not), and says in the results if
# it did not. Results: bench/results/<date>-<host>-experiments.md with the
# machine description, the tables and the raw samples, and PNG plots beside
# it (python3-matplotlib; the tables are written without it).
# --quick: small sizes and 1-2 repetitions, for a smoke test (about 20 s).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${USLAB_EXP_BUILD:-$ROOT/build-exp}
cmdline="bench/experiments/experiments.sh${*:+ $*}"
quick=0
wait_load=1
save=1
only="1 2 3 4"
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
log() { printf '%s\n' "$*" >&2; }

# ---------------------------------------------------------------- sizes
if [ "$quick" = 1 ]; then
	HB_REPS=1; HB_LOOPS=100; PIPE_REPS=1
	BULK_OBJS=300000; BULK_REPS=1
	SKB_N=300000; SKB_REPS=1
	ORD_REPS=1; ORD_CYCLES=6
else
	HB_REPS=11; HB_LOOPS=500; PIPE_REPS=5   # hackbench times are noisy here: more runs
	BULK_OBJS=2000000; BULK_REPS=5
	SKB_N=2000000; SKB_REPS=5
	ORD_REPS=3; ORD_CYCLES=12
fi
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
log "== building libuslab and uhackbench in $BUILD"
cmake --build "$BUILD" --target uslab uhackbench >>"$BUILD/exp-build.log" 2>&1 || { cat "$BUILD/exp-build.log" >&2; exit 1; }
BIN=$BUILD/experiments
mkdir -p "$BIN"
for p in exp_bulk exp_skb exp_order; do
	${CC:-gcc} -O2 -Wall -Wextra -I"$ROOT/include" "$HERE/$p.c" -o "$BIN/$p" \
		-L"$BUILD" -luslab -Wl,-rpath,"$BUILD" -lpthread
done
HB=$BUILD/bench/uhackbench

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
		local tr=$1 g=$2 mode=$3 rep=$4 env=() out
		[ "$mode" = off ] && env=(USLAB_OPTIONS="uhackbench-msg:cpu_partial=0")
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
	log "== 1. uhackbench, cpu_partial default vs 0, ring transport, loops $HB_LOOPS x $HB_REPS"
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
	echo "# uslab issue 3 experiments, $day, $host"
	echo
	echo "- CPU: ${cpu:-unknown}, $(nproc) CPUs online; memory $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "- Kernel: $(uname -srm)"
	echo "- Compiler: $(${CC:-gcc} --version 2>/dev/null | head -n 1)"
	echo "- uslab: $rev; $(basename "$BUILD") ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")), shared libuslab"
	echo "- Load average at start: $load_at_start${loaded:+ — the machine was loaded (1-minute load >= 1.0): $loaded}; total run ${elapsed}s"
	echo "- Command: \`$cmdline\`"
	echo
	"$PY" "$HERE/report.py" "$DATA" "$base" "$HB_LOOPS"
} >"$DATA/report.md"
if [ "$save" = 1 ]; then
	cp "$DATA/report.md" "$base.md"
	log "written: ${base#"$ROOT"/}.md (+ PNGs)"
else
	cat "$DATA/report.md"
fi
