#!/usr/bin/env bash
# bench/experiments/compare2009.sh: Gorman's 2009 SLUB/SLAB/SLQB comparison
# (linux-mm, "Performance comparison of SLUB, SLAB and SLQB"), rerun in user
# space on one binary: every uslab per-CPU mode through USLAB_OPTIONS, glibc
# and mimalloc as outside references.
#
#   bench/experiments/compare2009.sh [--quick] [--reps N] [--no-save] [--no-pg] [--no-cachegrind]
#
# Configurations (the columns):
#   slab      slub_cpu_mode=slab      the kernel's SLAB (arrays, shared array, three lists)
#   slub      slub_cpu_mode=classic   SLUB with CPU partial lists, as today
#   slub-min  slub_cpu_mode=classic slub_max_order=1 slub_min_objects=1
#                                     (the 2009 thread's low-order SLUB)
#   slqb      slub_cpu_mode=slqb      SLQB
#   sheaves   slub_cpu_mode=sheaves   SLUB with sheaves (Linux 7.0)
#   home      slub_cpu_mode=home      uslab's default
#   glibc     no preload              reference
#   mimalloc  LD_PRELOAD=libmimalloc  reference (skipped if not installed)
# uslab runs under LD_PRELOAD of libuslab-malloc.so (the malloc family).
#
# Groups (the rows):
#   micro     uhackbench (malloc mode, ring transport) at 1, 4 and 16 groups;
#             exp_cold (free and reallocation of cache-cold objects, ns per
#             operation of the three phases summed); bench/prodcons (producer
#             -> consumer pairs, malloc's ns per message)
#   peers     bench/peers.sh's malloc patterns (bench/mbench), sized here to
#             about half a second each: larson, cache_scratch, cache_thrash,
#             prodcons, strbuild, churn, xfree, mthread, smallloop,
#             sh6bench2, sh6bench8, sh8bench2, sh8bench8 (MicroQuill's
#             SmartHeap patterns, mbench/shbench.c), xmalloc2, xmalloc8
#             (Lever and Boreham's producer/consumer), simple (glibc's
#             bench-malloc-simple), handoff
#   control   CPU-bound programs, Gorman's SPEC columns: gcc -O2 compiling
#             four of uslab's sources, a CPython workload (dicts, strings,
#             lists), xz -6 of a generated 24 MiB file, sqlite3 building and
#             querying a 300,000-row table in memory
#   db        PostgreSQL 15 (Debian's postgresql package) started by this
#             script in a temporary data directory, Unix socket only, run as
#             nobody, under each configuration's LD_PRELOAD; pgbench read-only
#             (-S) and read-write (TPC-B), 1 and 4 clients, fixed time:
#             transactions per second (two repetitions at most, 4 s runs),
#             and the server's peak memory: the
#             largest sum, over the postmaster and all its children, of
#             their proportional set size (Pss: shared memory counted once),
#             sampled every 0.2 s. Skipped, with the install command, where
#             PostgreSQL is missing.
#   cachegrind  valgrind --tool=cachegrind --cache-sim=yes on small runs of
#             the micro group: simulated D1 and LL misses and instructions per
#             operation (in place of Gorman's oprofile cache-miss counts).
#
# Every repetition runs every configuration once per benchmark, in an order
# that rotates; tables show medians, ratios to slab (lower is better for
# times, higher for tps), geometric means per group, and each
# configuration's run-to-run spread ((max - min) / median over the
# repetitions) so that a difference can be told from noise. Results:
# bench/results/<date>-compare2009.md (tables, raw samples) and
# -compare2009.png (geometric means per group). Build: USLAB_BENCH_BUILD
# (default build-bench beside the sources; configured Release -O2 if new).
# About 13 minutes on a 2-CPU machine (747 s on 2026-11-24; --quick: about 2, tiny sizes,
# one repetition: a smoke test).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || true)
LIBDIR=/usr/lib/${MULTIARCH:-x86_64-linux-gnu}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}

quick=0 reps=3 save=1 do_pg=1 do_cg=1
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1; reps=1 ;;
	--reps) reps=$2; shift ;;
	--no-save) save=0 ;;
	--no-pg) do_pg=0 ;;
	--no-cachegrind) do_cg=0 ;;
	-h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; exit 0 ;;
	*) echo "compare2009.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
log() { printf '%s\n' "$*" >&2; }
T0=$SECONDS

# ---- build --------------------------------------------------------------------------
gen=(); command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	cmake -S "$ROOT" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
		-DBUILD_TESTING=OFF >/dev/null
fi
log "== building in $BUILD"
cmake --build "$BUILD" -j 2 --target uslab_malloc uhackbench exp_cold prodcons >/dev/null
MB=$BUILD/mbench
mkdir -p "$MB"
for src in "$ROOT"/bench/mbench/*.c; do
	exe=$MB/$(basename "$src" .c)
	if [ ! -x "$exe" ] || [ "$src" -nt "$exe" ] || [ "$ROOT/bench/mbench/common.h" -nt "$exe" ]; then
		cc -O2 -Wall -pthread -o "$exe" "$src"
	fi
done
USLAB_LIB=$BUILD/libuslab-malloc.so
MIMALLOC=$LIBDIR/libmimalloc.so.2

# ---- configurations ------------------------------------------------------------------
declare -A OPT LIB
CONFIGS=(slab slub slub-min slqb sheaves home glibc)
OPT[slab]="slub_cpu_mode=slab"
OPT[slub]="slub_cpu_mode=classic"
OPT[slub-min]="slub_cpu_mode=classic slub_max_order=1 slub_min_objects=1"
OPT[slqb]="slub_cpu_mode=slqb"
OPT[sheaves]="slub_cpu_mode=sheaves"
OPT[home]="slub_cpu_mode=home"
for c in slab slub slub-min slqb sheaves home; do LIB[$c]=$USLAB_LIB; done
OPT[glibc]=""; LIB[glibc]=""
if [ -e "$MIMALLOC" ]; then
	CONFIGS+=(mimalloc); OPT[mimalloc]=""; LIB[mimalloc]=$MIMALLOC
else
	log "mimalloc not found ($MIMALLOC; Debian package libmimalloc2.0): its column is left out"
fi
NC=${#CONFIGS[@]}

# run CONFIG CMD...: the command under the configuration's preload and
# options, stdout to $OUT, stderr to $ERR; returns its status
OUT=$(mktemp /tmp/cmp2009.XXXXXX)
ERR=$OUT.err
RAW=$OUT.raw
WORK=$(mktemp -d /tmp/cmp2009w.XXXXXX)
PGDIR=""
cleanup() {
	if [ -n "$PGDIR" ] && [ -d "$PGDIR" ]; then pg_stop || true; rm -rf "$PGDIR"; fi
	rm -rf "$WORK"
	rm -f "$OUT" "$ERR" "$RAW"
}
trap cleanup EXIT
: >"$RAW"
run() {
	local c=$1
	shift
	env ${LIB[$c]:+LD_PRELOAD=${LIB[$c]}} ${OPT[$c]:+USLAB_OPTIONS="${OPT[$c]}"} "$@" >"$OUT" 2>"$ERR"
}
now() { date +%s.%N; }
# record GROUP BENCH CONFIG VALUE UNIT [RSS_KIB]
record() { echo "$1 $2 $3 $4 $5 ${6:--}" >>"$RAW"; }

# ---- sizes ------------------------------------------------------------------------------
if [ $quick = 1 ]; then
	HB="1:20 4:5 16:1"; COLD_N=50000; PC_MSG=20000
	SC=0.05; PG_T=2; XZ_MB=2; SQL_ROWS=20000; PY_N=20000
else
	HB="1:1500 4:300 16:60"; COLD_N=400000; PC_MSG=400000
	SC=1; PG_T=4; XZ_MB=24; SQL_ROWS=300000; PY_N=300000
fi
# peers patterns: NAME "ARGS" at full size; --quick scales the count at
# index PEER_K[NAME] (default 2: the second number) by SC
declare -A PEER PEER_K
PEER[larson]="larson 2 3 60000 4000 1000"
PEER[cache_scratch]="cache_scratch 2 400 8 4000"
PEER[cache_thrash]="cache_thrash 2 400 8 4000"
PEER[prodcons]="prodcons 1 600000 4096 1024"
PEER[strbuild]="strbuild 3 200 1048576"
PEER[churn]="churn 2 600000 100000 32768"
PEER[xfree]="xfree 2 200000 4 50000 256 1024"
PEER[mthread]="mthread 2 3000000 1024 4096"
PEER[smallloop]="smallloop 300000 16";               PEER_K[smallloop]=1
PEER[sh6bench2]="shbench sh6 2 10000 2000";         PEER_K[sh6bench2]=4
PEER[sh6bench8]="shbench sh6 8 10000 2000";         PEER_K[sh6bench8]=4
PEER[sh8bench2]="shbench sh8 2 70000 1000000 1000000"; PEER_K[sh8bench2]=3
PEER[sh8bench8]="shbench sh8 8 70000 1000000 1000000"; PEER_K[sh8bench8]=3
PEER[xmalloc2]="xmalloc 1 1500 64"
PEER[xmalloc8]="xmalloc 4 2000 64"
PEER[simple]="simple 300000 16";                    PEER_K[simple]=1
PEER[handoff]="handoff 8 40 4000"
PEERS=(larson cache_scratch cache_thrash prodcons strbuild churn xfree mthread smallloop sh6bench2 sh6bench8 sh8bench2 sh8bench8 xmalloc2 xmalloc8 simple handoff)
# scale the iteration count of a peers command (--quick)
peer_cmd() {
	local w=$1
	read -r -a a <<<"${PEER[$w]}"
	if [ $quick = 1 ] && [ ${#a[@]} -ge 3 ]; then
		local k=${PEER_K[$w]:-2}
		a[$k]=$(awk -v n="${a[$k]}" -v s="$SC" 'BEGIN { v = int(n * s); print v < 1 ? 1 : v }')
		[ "$w" != simple ] || [ "${a[1]}" -ge 1600 ] || a[1]=1600   # (simple's shortest)
	fi
	echo "$MB/${a[0]} ${a[*]:1}"
}

# ---- the control programs' inputs ----------------------------------------------------------
awk -v mb="$XZ_MB" 'BEGIN { srand(7); n = mb * 1024 * 1024 / 64
	for (i = 0; i < n; i++) { s = ""; for (j = 0; j < 7; j++) s = s sprintf("%08x", int(rand() * 2^31) % (i % 97 + 3) * 2654435761 % 4294967296); print s } }' \
	>"$WORK/xz.in"
cat >"$WORK/work.py" <<EOF
import random
random.seed(1)
d = {}
for i in range($PY_N):
    k = "k%d" % random.randrange($PY_N)
    d.setdefault(k, []).append("v" * (i % 37) + str(i))
s = 0
for k, v in sorted(d.items()):
    s += len(" ".join(v))
words = [w.upper() for v in d.values() for w in v[:3]]
print(s, len(words), len(set(words)))
EOF
cat >"$WORK/work.sql" <<EOF
CREATE TABLE t(id INTEGER PRIMARY KEY, k INTEGER, s TEXT);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < $SQL_ROWS)
INSERT INTO t SELECT i, (i * 2654435761) % 1000, printf('row %d %x', i, i * 7919) FROM c;
CREATE INDEX tk ON t(k);
SELECT k, count(*), max(length(s)) FROM t GROUP BY k ORDER BY 2 DESC LIMIT 3;
SELECT count(*) FROM t a JOIN t b ON a.k = b.k AND b.id = a.id + 1000;
UPDATE t SET s = s || '!' WHERE k % 7 = 0;
SELECT sum(length(s)) FROM t;
EOF
CC_SRCS=(src/core/slab.c src/core/cache.c src/cpu/sheaf.c src/cpu/array.c)
CC_INC="-I$ROOT/include -I$ROOT/src -I$ROOT/src/core -I$ROOT/src/cpu -I$ROOT/src/debug -I$ROOT/src/observe -I$ROOT/src/malloc"
CC_LOOP="for f in \"\$@\"; do gcc -O2 -w $CC_INC -c \"\$f\" -o /dev/null || exit 1; done"
sh -c "$CC_LOOP" sh "${CC_SRCS[@]/#/$ROOT/}" || { log "compare2009.sh: the gcc control does not compile"; exit 1; }

# ---- timing runs -------------------------------------------------------------------------------
# timed GROUP BENCH CMD...: every configuration (rotating), the wall time
# and peak RSS by memtime
timed() {
	local g=$1 b=$2 r=$3
	shift 3
	for ((k = 0; k < NC; k++)); do
		local c=${CONFIGS[$(((k + r) % NC))]} res sec kib code vcs
		res=$(env ${OPT[$c]:+USLAB_OPTIONS="${OPT[$c]}"} "$MB/memtime" --preload "${LIB[$c]}" -- "$@" 3>&1 >/dev/null 2>"$ERR") || true
		read -r sec kib code vcs _ <<<"$res"
		if [ "${code:-1}" != 0 ]; then
			log "  $b under $c failed (status ${code:-?}): $(tail -c 300 "$ERR")"
			continue
		fi
		record "$g" "$b" "$c" "$sec" s "$kib"
	done
}

# a program that reports its own result: its RESULT line's field
self_timed() {
	local g=$1 b=$2 r=$3 field=$4 unit=$5
	shift 5
	for ((k = 0; k < NC; k++)); do
		local c=${CONFIGS[$(((k + r) % NC))]} v
		if ! run "$c" "$@"; then
			log "  $b under $c failed: $(tail -c 300 "$ERR")"
			continue
		fi
		v=$(awk -v f="$field" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == f) v = kv[2] } } END { print v }' "$OUT")
		if [ -z "$v" ]; then
			log "  $b under $c: no $field in its output"
			continue
		fi
		record "$g" "$b" "$c" "$v" "$unit"
	done
}

cold_sum() {   # exp_cold: the three phases' ns per operation, summed
	local g=$1 r=$2
	for ((k = 0; k < NC; k++)); do
		local c=${CONFIGS[$(((k + r) % NC))]}
		if ! run "$c" "$BUILD/bench/exp_cold" --objects "$COLD_N"; then
			log "  exp_cold under $c failed: $(tail -c 300 "$ERR")"
			continue
		fi
		local v kib
		v=$(awk '/^RESULT/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] ~ /_ns$/) s += kv[2]; if (kv[1] == "maxrss_kib") m = kv[2] } print s, m }' "$OUT")
		read -r v kib <<<"$v"
		record "$g" cold "$c" "$v" ns "$kib"
	done
}

log "== configurations: ${CONFIGS[*]}; $reps repetition(s)$([ $quick = 1 ] && echo ', quick sizes')"
for ((r = 0; r < reps; r++)); do
	log "== repetition $((r + 1)) of $reps: micro, peers, control"
	for gl in $HB; do
		timed micro "uhackbench-${gl%%:*}" "$r" "$BUILD/bench/uhackbench" --mode malloc --transport ring "${gl%%:*}" "${gl##*:}"
	done
	cold_sum micro "$r"
	self_timed micro prodcons "$r" malloc ns "$BUILD/bench/prodcons" --pairs 2 --messages "$PC_MSG" --rounds 3
	for w in "${PEERS[@]}"; do
		# shellcheck disable=SC2046
		timed peers "$w" "$r" $(peer_cmd "$w")
	done
	timed control gcc "$r" sh -c "$CC_LOOP" sh "${CC_SRCS[@]/#/$ROOT/}"
	timed control python "$r" "$PY" "$WORK/work.py"
	timed control xz "$r" xz -6 -T1 -c -k "$WORK/xz.in"
	timed control sqlite "$r" sh -c "sqlite3 :memory: <'$WORK/work.sql'"
done

# ---- PostgreSQL ------------------------------------------------------------------------------------
pg_as() {   # run a PostgreSQL program as the server's user (postgres refuses root)
	if [ "$(id -u)" = 0 ]; then
		setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"
	else
		"$@"
	fi
}
pg_stop() { pg_as "$PGBIN/pg_ctl" -D "$PGDIR/data" -m fast -w stop >/dev/null 2>&1; }
pg_mem_sampler() {   # peak sum of Pss (KiB) over the postmaster's process tree, every 0.2 s, until $1 exists
	local stop=$1 pid=$2 peak=0
	while [ ! -e "$stop" ]; do
		local pids sum=0 p v
		pids="$pid $(ps -o pid= --ppid "$pid" 2>/dev/null | tr '\n' ' ')"
		for p in $pids; do
			v=$(awk '/^Pss:/ { print $2; exit }' "/proc/$p/smaps_rollup" 2>/dev/null || true)
			sum=$((sum + ${v:-0}))
		done
		[ $sum -gt $peak ] && peak=$sum
		sleep 0.2
	done
	echo $peak
}
PG_NOTE=""
if [ $do_pg = 1 ]; then
	if [ ! -x "$PGBIN/postgres" ] || [ ! -x "$PGBIN/pgbench" ] || [ ! -x "$PGBIN/initdb" ]; then
		PG_NOTE="PostgreSQL skipped: $PGBIN/{postgres,initdb,pgbench} not found; install Debian's PostgreSQL 15 with: apt-get install postgresql"
		log "== $PG_NOTE"
	else
		log "== PostgreSQL $("$PGBIN/postgres" --version | awk '{ print $NF }'): pgbench ${PG_T} s per run"
		PGDIR=$(mktemp -d /tmp/cmp2009pg.XXXXXX)
		mkdir -p "$PGDIR/sock"
		[ "$(id -u)" = 0 ] && chown -R nobody:nogroup "$PGDIR"
		chmod 755 "$PGDIR"
		pg_as "$PGBIN/initdb" -D "$PGDIR/data" -A trust -U bench --no-sync >"$PGDIR/initdb.log" 2>&1
		PGOPTS="-c listen_addresses='' -k $PGDIR/sock -c shared_buffers=64MB -c fsync=off -c synchronous_commit=off -c max_connections=20"
		pg_as "$PGBIN/pg_ctl" -D "$PGDIR/data" -o "$PGOPTS" -l "$PGDIR/server.log" -w start >/dev/null
		pg_as "$PGBIN/pgbench" -h "$PGDIR/sock" -U bench -i -s 5 -q postgres >"$PGDIR/init.log" 2>&1
		pg_stop
		# at most 2 repetitions here: a server start and 4 pgbench runs per
		# configuration and repetition are the run's longest part
		pg_reps=$((reps < 2 ? reps : 2))
		for ((r = 0; r < pg_reps; r++)); do
			for ((k = 0; k < NC; k++)); do
				c=${CONFIGS[$(((k + r) % NC))]}
				if ! env ${LIB[$c]:+LD_PRELOAD=${LIB[$c]}} ${OPT[$c]:+USLAB_OPTIONS="${OPT[$c]}"} \
					setpriv --reuid=nobody --regid=nogroup --clear-groups \
					"$PGBIN/pg_ctl" -D "$PGDIR/data" -o "$PGOPTS" -l "$PGDIR/server.log" -w start >/dev/null 2>&1; then
					log "  postgres under $c did not start: $(tail -3 "$PGDIR/server.log")"
					continue
				fi
				pm=$(head -1 "$PGDIR/data/postmaster.pid")
				# the preload must have taken (ld.so only warns when it cannot)
				if [ -n "${LIB[$c]}" ] && ! grep -q "$(basename "${LIB[$c]}")" "/proc/$pm/maps"; then
					log "  postgres under $c runs without ${LIB[$c]}: skipped"
					pg_stop || true
					continue
				fi
				stopf=$PGDIR/stop.$c.$r
				pg_mem_sampler "$stopf" "$pm" >"$PGDIR/mem.$c.$r" &
				sampler=$!
				for mode in ro rw; do
					for cl in 1 4; do
						args=(-h "$PGDIR/sock" -U bench -n -T "$PG_T" -c "$cl" -j "$cl")
						[ $mode = ro ] && args+=(-S)
						if pg_as "$PGBIN/pgbench" "${args[@]}" postgres >"$OUT" 2>"$ERR"; then
							tps=$(awk '/^tps = / { print $3; exit }' "$OUT")
							record db "pgbench-$mode-$cl" "$c" "$tps" tps
						else
							log "  pgbench $mode $cl under $c failed: $(tail -c 300 "$ERR")"
						fi
					done
				done
				touch "$stopf"
				wait "$sampler" || true
				record db "server-pss" "$c" "$(cat "$PGDIR/mem.$c.$r")" KiB
				pg_stop || log "  postgres under $c did not stop cleanly"
			done
		done
	fi
fi

# ---- cachegrind ----------------------------------------------------------------------------------
CG_NOTE=""
if [ $do_cg = 1 ]; then
	if ! command -v valgrind >/dev/null 2>&1; then
		CG_NOTE="cachegrind skipped: valgrind not found (apt-get install valgrind)"
		log "== $CG_NOTE"
	else
		log "== cachegrind (simulated caches) on the micro group"
		if [ $quick = 1 ]; then CG_HB="2 5" CG_COLD=20000 CG_PC=5000; else CG_HB="2 40" CG_COLD=100000 CG_PC=40000; fi
		# operations (allocations + frees) each run makes
		hb_g=${CG_HB%% *} hb_l=${CG_HB##* }
		declare -A CG_OPS
		CG_OPS[uhackbench]=$((hb_g * 20 * 20 * hb_l * 2))
		CG_OPS[cold]=$((CG_COLD * 3))
		for c in "${CONFIGS[@]}"; do
			for b in uhackbench cold prodcons; do
				case $b in
				uhackbench) cmd=("$BUILD/bench/uhackbench" --mode malloc --transport ring $CG_HB) ;;
				cold) cmd=("$BUILD/bench/exp_cold" --objects "$CG_COLD") ;;
				prodcons) cmd=("$MB/prodcons" 1 "$CG_PC" 4096 256) ;;
				esac
				# valgrind runs the preload itself (its own LD_PRELOAD is kept)
				if ! env ${LIB[$c]:+LD_PRELOAD=${LIB[$c]}} ${OPT[$c]:+USLAB_OPTIONS="${OPT[$c]}"} \
					valgrind --tool=cachegrind --cache-sim=yes --cachegrind-out-file=/dev/null "${cmd[@]}" \
					>/dev/null 2>"$ERR"; then
					log "  cachegrind $b under $c failed: $(tail -c 300 "$ERR")"
					continue
				fi
				ops=${CG_OPS[$b]:-$((CG_PC * 2))}
				awk -v ops="$ops" -v c="$c" -v b="$b" '
					function num(s) { gsub(/,/, "", s); return s + 0 }
					/ I *refs:/ { ir = num($4) }
					/ D1  misses:/ { d1 = num($4) }
					/ LLd misses:/ { lld = num($4) }
					END { printf "cachegrind %s %s %.1f Ir/op\ncachegrind %s %s %.3f D1miss/op\ncachegrind %s %s %.3f LLmiss/op\n",
						b, c, ir / ops, b, c, d1 / ops, b, c, lld / ops }' "$ERR" |
					while read -r g bb cc v u; do record "$g" "$bb-$u" "$cc" "$v" "$u"; done
			done
		done
	fi
fi
ELAPSED=$((SECONDS - T0))
log "== done in $ELAPSED s"

# ---- tables and chart ------------------------------------------------------------------------------
STEM=$ROOT/bench/results/$(date +%Y-%m-%d)-compare2009$([ $quick = 1 ] && echo -quick || true)
"$PY" "$HERE/compare2009_report.py" "$RAW" "$STEM" "${CONFIGS[*]}" "$reps" "$ELAPSED" "$save" \
	"bench/experiments/compare2009.sh$([ $quick = 1 ] && echo ' --quick' || true) --reps $reps" \
	"${PG_NOTE:-}" "${CG_NOTE:-}"
