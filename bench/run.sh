#!/usr/bin/env bash
# bench/run.sh: uslab against glibc malloc and the peers that are installed
# (jemalloc, tcmalloc, mimalloc, each through LD_PRELOAD).
#
#   bench/run.sh [--quick] [--fp-reps N] [--hb-reps N] [--groups "1 5 10"] [--pipe-groups "10"]
#                [--loops N] [--peers "jemalloc tcmalloc mimalloc"] [--no-save] [--results DIR]
#
# 1. Configures and builds build-bench/ (Release, -O2, shared libuslab) with
#    cmake and ninja (make if ninja is missing), if needed.
# 2. fastpath: once per malloc (glibc, then each peer via LD_PRELOAD), each
#    process measuring uslab and that malloc in interleaved rounds; repeated
#    --fp-reps times (default 3).
# 3. uhackbench at 1, 5 and 10 groups (ring transport), and at --pipe-groups
#    with hackbench's pipes (one syscall per message, kernel-dominated):
#    uslab cache mode, then malloc mode
#    under glibc and each peer; repeated --hb-reps times (default 5). Within
#    each repetition the allocators run one after the other, in an order that
#    rotates from one repetition to the next.
# 4. Prints one table of medians and writes it, with the machine's
#    description, the spread of every cell and uslab's cache statistics, to
#    bench/results/<date>-<hostname>.md (--results DIR, or the environment
#    variable USLAB_BENCH_RESULTS=DIR, writes into DIR instead).
#
# Defaults take about 3-4 minutes on a 2-vCPU machine; --quick under 1.
# --quick: fastpath --quick, 3 hackbench repetitions of 250 loops.
# The build directory can be changed with USLAB_BENCH_BUILD=dir, the build's
# parallelism with JOBS=N (default: the build tool's). A result file that
# exists already is not overwritten (-2, -3 ... are appended). Exit status 0
# once everything was measured and the file written; no pipe here may end
# early (under pipefail a writer killed by SIGPIPE fails the script):
# scripts/test-bench.sh runs this script in CTest to catch that.
# Needs bash, cmake, a C compiler, coreutils and awk; the peers are optional
# (Debian packages libjemalloc2, libtcmalloc-minimal4, libmimalloc2.0).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}
RESULTS=${USLAB_BENCH_RESULTS:-$HERE/results}
MULTIARCH=$(gcc -print-multiarch 2>/dev/null || true)
LIBDIR=/usr/lib/${MULTIARCH:-x86_64-linux-gnu}

cmdline="bench/run.sh${*:+ $*}"
quick=0
hb_reps_set=0
fp_reps=3
hb_reps=5
groups="1 5 10"
pipe_groups="10"
loops=""
peers_wanted="jemalloc tcmalloc mimalloc"
save=1
run_timeout=600

usage() {
	awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
}

need_arg() { [ $# -ge 2 ] || { echo "run.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--fp-reps) need_arg "$@"; fp_reps=$2; shift ;;
	--hb-reps) need_arg "$@"; hb_reps=$2; hb_reps_set=1; shift ;;
	--groups) need_arg "$@"; groups=$2; shift ;;
	--pipe-groups) need_arg "$@"; pipe_groups=$2; shift ;;
	--loops) need_arg "$@"; loops=$2; shift ;;
	--peers) need_arg "$@"; peers_wanted=$2; shift ;;
	--no-save) save=0 ;;
	--results) need_arg "$@"; RESULTS=$2; shift ;;
	-h|--help) usage; exit 0 ;;
	*) echo "run.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done

fp_args=()
if [ "$quick" = 1 ]; then
	fp_args=(--quick)
	[ "$hb_reps_set" = 1 ] || hb_reps=3
	: "${loops:=250}"
fi
for v in "$fp_reps" "$hb_reps" ${loops:+"$loops"} $groups $pipe_groups; do
	case $v in ''|*[!0-9]*|0) echo "run.sh: '$v' is not a positive integer" >&2; exit 2 ;; esac
done
# uhackbench's own default LOOPS applies when --loops is not given.
hb_loops=${loops:-}

peer_lib() {
	case $1 in
	jemalloc) echo "$LIBDIR/libjemalloc.so.2" ;;
	tcmalloc) echo "$LIBDIR/libtcmalloc_minimal.so.4" ;;
	mimalloc) echo "$LIBDIR/libmimalloc.so.2" ;;
	*) echo "" ;;
	esac
}
peer_pkg() {
	case $1 in
	jemalloc) echo libjemalloc2 ;;
	tcmalloc) echo libtcmalloc-minimal4 ;;
	mimalloc) echo libmimalloc2.0 ;;
	esac
}

ALL_PEERS="jemalloc tcmalloc mimalloc"
peers=""
skipped=""
for p in $peers_wanted; do
	lib=$(peer_lib "$p")
	if [ -z "$lib" ]; then
		echo "run.sh: unknown peer '$p' (known: $ALL_PEERS)" >&2
		exit 2
	fi
	if [ -e "$lib" ]; then
		peers="$peers $p"
	else
		skipped="$skipped $p"
	fi
done
for p in $ALL_PEERS; do
	case " $peers_wanted " in *" $p "*) ;; *) skipped="$skipped $p" ;; esac
done
peers=${peers# }
skipped=${skipped# }
mallocs="glibc${peers:+ $peers}"

log() { printf '%s\n' "$*" >&2; }

# ---------------------------------------------------------------- build
build() {
	local logf=$BUILD/bench-build.log
	mkdir -p "$BUILD"
	local cfg=(-S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release
		"-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG" "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG"
		-DBUILD_TESTING=OFF -DUSLAB_SANITIZE=)
	if [ ! -f "$BUILD/CMakeCache.txt" ]; then
		if command -v ninja >/dev/null 2>&1; then cfg+=(-G Ninja); fi
		log "== configuring $BUILD (Release, -O2)"
		cmake "${cfg[@]}" >"$logf" 2>&1 || { cat "$logf" >&2; exit 1; }
	elif ! grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$BUILD/CMakeCache.txt" ||
	     ! grep -q '^CMAKE_C_FLAGS_RELEASE:STRING=-O2 -DNDEBUG$' "$BUILD/CMakeCache.txt" ||
	     ! grep -q '^USLAB_SANITIZE:STRING=$' "$BUILD/CMakeCache.txt"; then
		log "== reconfiguring $BUILD as Release -O2 without sanitizers"
		cmake "${cfg[@]}" >"$logf" 2>&1 || { cat "$logf" >&2; exit 1; }
	fi
	log "== building fastpath and uhackbench"
	cmake --build "$BUILD" ${JOBS:+-j "$JOBS"} --target fastpath uhackbench >>"$logf" 2>&1 || { cat "$logf" >&2; exit 1; }
}
build
FP=$BUILD/bench/fastpath
HB=$BUILD/bench/uhackbench
for b in "$FP" "$HB"; do
	[ -x "$b" ] || { log "run.sh: $b was not built"; exit 1; }
done

# ---------------------------------------------------------------- running
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
SAMPLES=$TMP/samples    # lines: key allocator value
: >"$SAMPLES"
STATS=$TMP/uslab-stats  # uslab cache stats lines from cache-mode runs

# with_malloc NAME CMD...: run CMD with NAME's malloc (glibc: no preload).
with_malloc() {
	local name=$1; shift
	if [ "$name" = glibc ]; then
		timeout "$run_timeout" env -u LD_PRELOAD "$@"
	else
		timeout "$run_timeout" env LD_PRELOAD="$(peer_lib "$name")" "$@"
	fi
}

# rotate N WORDS...: the words, starting at the (N mod count)th.
rotate() {
	local n=$1; shift
	local a=("$@") k=${#a[@]} i out=()
	for ((i = 0; i < k; i++)); do out+=("${a[(i + n) % k]}"); done
	echo "${out[@]}"
}

sample() { echo "$1 $2 $3" >>"$SAMPLES"; }

run_fastpath() {
	local m=$1 out line kv
	if ! out=$(with_malloc "$m" "$FP" "${fp_args[@]}" 2>&1); then
		log "run.sh: fastpath under $m failed:"; log "$out"; exit 1
	fi
	line=$(awk '/^RESULT / { l = $0 } END { print l }' <<<"$out")
	[ -n "$line" ] || { log "run.sh: no RESULT line from fastpath under $m:"; log "$out"; exit 1; }
	local pu="" pm="" bu="" bm="" pr="" br="" provider=""
	for kv in $line; do
		case $kv in
		pair_uslab=*) pu=${kv#*=} ;;
		pair_malloc=*) pm=${kv#*=} ;;
		batch_uslab=*) bu=${kv#*=} ;;
		batch_malloc=*) bm=${kv#*=} ;;
		pair_ratio=*) pr=${kv#*=} ;;
		batch_ratio=*) br=${kv#*=} ;;
		malloc=*) provider=${kv#*=} ;;
		esac
	done
	if [ "$m" != glibc ] && [ "$provider" != "$(basename "$(peer_lib "$m")")" ]; then
		log "run.sh: warning: under LD_PRELOAD of $m, malloc came from '$provider'"
	fi
	sample fp_pair uslab "$pu"; sample fp_pair "$m" "$pm"; sample fp_pair_ratio "$m" "$pr"
	sample fp_batch uslab "$bu"; sample fp_batch "$m" "$bm"; sample fp_batch_ratio "$m" "$br"
	log "   $(printf '%-9s' "$m") pair uslab $pu ns, $m $pm ns | batch uslab $bu ns, $m $bm ns"
}

run_hackbench() {
	local who=$1 g=$2 tr=${3:-ring} out t rss m mode key
	if [ "$who" = uslab ]; then m=glibc; mode=cache; else m=$who; mode=malloc; fi
	key=hb$g; [ "$tr" = pipe ] && key=hbpipe$g
	if ! out=$(with_malloc "$m" "$HB" --mode "$mode" --transport "$tr" "$g" $hb_loops 2>&1); then
		log "run.sh: uhackbench --mode $mode $g under $m failed:"; log "$out"; exit 1
	fi
	t=$(awk '/^Time:/ {print $2}' <<<"$out" | tail -n 1)
	rss=$(awk '/^MaxRSS:/ {print $2}' <<<"$out" | tail -n 1)
	[ -n "$t" ] && [ -n "$rss" ] || { log "run.sh: unexpected uhackbench output:"; log "$out"; exit 1; }
	sample "${key}_time" "$who" "$t"
	sample "${key}_rss" "$who" "$rss"
	if [ "$who" = uslab ]; then   # the report reads $STATS.hb<g> and $STATS.hbpipe<g>
		awk -v p="groups=$g transport=$tr: " '/^uslab:/ { print p $0 }' <<<"$out" >"$STATS.$key"
	fi
	printf ' %s %ss %sMiB' "$who" "$t" "$((rss / 1024))" >&2
}

start_epoch=$(date +%s)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
log "== mallocs: $mallocs${skipped:+ (skipped, not installed or not asked: $skipped)}"

log "== fastpath ${fp_args[*]:-} x $fp_reps"
for ((r = 0; r < fp_reps; r++)); do
	log " rep $((r + 1))/$fp_reps"
	for m in $(rotate "$r" $mallocs); do
		run_fastpath "$m"
	done
done

log "== uhackbench groups [$groups] loops ${hb_loops:-default} x $hb_reps"
for ((r = 0; r < hb_reps; r++)); do
	for g in $groups; do
		printf ' rep %d/%d, groups=%d:' "$((r + 1))" "$hb_reps" "$g" >&2
		for who in $(rotate "$r" uslab $mallocs); do
			run_hackbench "$who" "$g"
		done
		printf '\n' >&2
	done
	for g in $pipe_groups; do
		printf ' rep %d/%d, pipe transport, groups=%d:' "$((r + 1))" "$hb_reps" "$g" >&2
		for who in $(rotate "$r" uslab $mallocs); do
			run_hackbench "$who" "$g" pipe
		done
		printf '\n' >&2
	done
done
elapsed=$(($(date +%s) - start_epoch))

# ---------------------------------------------------------------- report
# Medians: "key allocator median min max n".
MEDIANS=$TMP/medians
LC_ALL=C sort -k1,1 -k2,2 -k3,3g "$SAMPLES" | awk '
function flush() {
	if (n == 0) return
	med = n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
	printf "%s %s %.6g %.6g %.6g %d\n", pk, pa, med, v[1], v[n], n
	n = 0
}
{ if ($1 != pk || $2 != pa) { flush(); pk = $1; pa = $2 } v[++n] = $3 }
END { flush() }' >"$MEDIANS"

rows="fp_pair fp_batch"
for g in $groups; do rows="$rows hb${g}_time hb${g}_rss"; done
for g in $pipe_groups; do rows="$rows hbpipe${g}_time hbpipe${g}_rss"; done

TABLE=$TMP/table
awk -v rows="$rows" -v cols="uslab glibc $ALL_PEERS" -v have="uslab $mallocs" \
	-v fpreps="$fp_reps" -v hbreps="$hb_reps" '
function label(k,   g, t) {
	if (k == "fp_pair") return "fastpath alloc+free pair (ns)"
	if (k == "fp_batch") return "fastpath batch 10k, shuffled free (ns/obj)"
	g = k; sub(/^hb(pipe)?/, "", g); sub(/_.*/, "", g)
	t = k ~ /^hbpipe/ ? " (pipes)" : ""
	if (k ~ /_time$/) return "uhackbench" t " " g " group" (g == 1 ? "" : "s") " (s)"
	return "uhackbench" t " " g " group" (g == 1 ? "" : "s") " peak RSS (MiB)"
}
function fmt(k, x) {
	if (k ~ /^fp_/) return sprintf("%.2f", x)
	if (k ~ /_time$/) return sprintf("%.3f", x)
	return sprintf("%.1f", x / 1024)
}
function ratio(k, c) {
	if (!(c in present)) return "n/a"
	if (k ~ /^fp_/) {     # median of in-process ratios
		if ((k "_ratio", c) in med) return sprintf("%.3f", med[k "_ratio", c])
		return "n/a"
	}
	if (((k, "uslab") in med) && ((k, c) in med) && med[k, c] > 0)
		return sprintf("%.3f", med[k, "uslab"] / med[k, c])
	return "n/a"
}
{ med[$1, $2] = $3 }
END {
	nr = split(rows, R, " "); nc = split(cols, C, " "); split(have, H, " ")
	for (i in H) present[H[i]] = 1
	hdr = sprintf("| %-44s", "benchmark (median; lower is better)")
	sep = "|" sprintf("%46s", ""); gsub(/ /, "-", sep)
	for (j = 1; j <= nc; j++) { hdr = hdr sprintf(" | %9s", C[j]); sep = sep "|----------:" }
	hdr = hdr sprintf(" | %11s | %14s |", "uslab/glibc", "uslab/mimalloc")
	sep = sep "|------------:|---------------:|"
	print hdr; print sep
	for (i = 1; i <= nr; i++) {
		k = R[i]; line = sprintf("| %-44s", label(k))
		for (j = 1; j <= nc; j++) {
			c = C[j]
			cell = ((k, c) in med) ? fmt(k, med[k, c]) : (c in present ? "?" : "n/a")
			line = line sprintf(" | %9s", cell)
		}
		line = line sprintf(" | %11s | %14s |", ratio(k, "glibc"), ratio(k, "mimalloc"))
		print line
	}
}' "$MEDIANS" >"$TABLE"

echo
cat "$TABLE"
echo
if [ -n "$skipped" ]; then echo "skipped (not installed or not asked): $skipped"; fi
echo "runs: fastpath ${fp_args[*]:-(defaults)} x $fp_reps per malloc; uhackbench loops ${hb_loops:-default} x $hb_reps; ${elapsed}s total"

[ "$save" = 1 ] || exit 0

# ---------------------------------------------------------------- save
# Every pipe below has a last command that reads all its input (sed -n,
# awk), never head: a writer killed by SIGPIPE fails the pipe under
# pipefail (ldd --version | head -n 1 did, after the whole run), and the
# commands that may be missing end in || true.
host=$(hostname -s 2>/dev/null || hostname)
day=$(date +%F)
mkdir -p "$RESULTS"
out=$RESULTS/$day-$host.md
n=2
while [ -e "$out" ]; do out=$RESULTS/$day-$host-$n.md; n=$((n + 1)); done

cpu=$(lscpu 2>/dev/null | awk '/^Model name:/ && !n++ { sub(/^Model name:[[:space:]]*/, ""); print }' || true)
[ -n "$cpu" ] || cpu=$(sed -n '/^model name/ { s/^model name[[:space:]]*:[[:space:]]*//p; q }' /proc/cpuinfo 2>/dev/null || true)
rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
if [ -n "$(git -C "$ROOT" status --porcelain -- src include 2>/dev/null)" ]; then rev="$rev (src/include modified)"; fi
peer_versions=""
for p in $peers; do
	v=$(dpkg-query -W -f='${Version}' "$(peer_pkg "$p")" 2>/dev/null || echo "?")
	peer_versions="$peer_versions${peer_versions:+, }$p $v ($(basename "$(peer_lib "$p")"))"
done
glibc_v=$(getconf GNU_LIBC_VERSION 2>/dev/null || true)   # "glibc 2.36"
glibc_v=${glibc_v#glibc }
compiler=$(gcc --version 2>/dev/null | sed -n 1p || true)

{
	echo "# uslab benchmarks, $day, $host"
	echo
	echo "- CPU: ${cpu:-unknown}, $(nproc) CPUs online"
	echo "- Kernel: $(uname -srm)"
	echo "- Compiler: ${compiler:-?}"
	echo "- glibc: ${glibc_v:-?}; peers: ${peer_versions:-none}${skipped:+; skipped: $skipped}"
	echo "- uslab: $rev; ${BUILD#"$ROOT"/} Release -O2, shared libuslab"
	echo "- Load average at start: $load_at_start; total run ${elapsed}s"
	echo "- Command: \`$cmdline\`; fastpath ${fp_args[*]:-(defaults)} x $fp_reps per malloc; uhackbench groups [$groups], loops ${hb_loops:-default}, 100-byte messages, x $hb_reps"
	echo
	cat "$TABLE"
	echo
	echo "Every cell is a median; lower is better everywhere."
	echo "- fastpath runs once per malloc (glibc, then each peer by LD_PRELOAD) and measures uslab"
	echo "  (uslab_cache_alloc/free of a 64-byte cache) and that malloc in the same process, in"
	echo "  interleaved rounds. The uslab column is the median over all those processes; the ratio"
	echo "  columns are the median of the in-process ratios (same process, same rounds)."
	echo "- uhackbench: uslab = cache mode (one shared uslab cache of message objects); the other"
	echo "  columns = malloc mode under that malloc (no uslab call). Ratios are ratios of medians."
	echo "  Peak RSS is the whole process (getrusage ru_maxrss)."
	echo
	echo "## Spread (key, allocator, median, min, max, runs)"
	echo
	echo '```'
	cat "$MEDIANS"
	echo '```'
	echo
	echo "## uslab cache statistics (last cache-mode run per group count and transport)"
	echo
	echo '```'
	for key in $(for g in $groups; do echo "hb$g"; done; for g in $pipe_groups; do echo "hbpipe$g"; done); do
		if [ -s "$STATS.$key" ]; then
			cat "$STATS.$key"
		else
			echo "$key: no uslab: lines in uhackbench's output"
		fi
	done
	echo '```'
} >"$out"
echo "written: ${out#"$ROOT"/}"
