#!/usr/bin/env bash
# bench/instr.sh: instructions and simulated cache misses per malloc+free,
# counted exactly by valgrind --tool=cachegrind, for uslab and the peers in
# one harness (bench/instr.c under LD_PRELOAD). Exact counts repeat from run
# to run, so they compare fast paths on a noisy machine.
#
#   bench/instr.sh [--modes "mix pair batch"] [--peers "glibc jemalloc tcmalloc mimalloc uslab uslab+OPTS"]
#                  [--steps N] [--no-save]
#
# Each allocator runs each mode at N/5 and N steps (default N = 1,000,000);
# the difference in counts over the difference in steps is the cost of one
# step (one free and one malloc), the start-up and the initial fill
# cancelled out. "loop" is the same loop without the allocator calls (the
# random numbers and the slot traffic), included in every other row.
# uslab+OPTS: uslab with OPTS (commas become spaces) in USLAB_OPTIONS.
# Writes bench/results/<date>-instr.md (unless --no-save). Needs valgrind.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}

modes="mix pair batch"
peers="glibc jemalloc tcmalloc mimalloc uslab"
steps=1000000
save=1
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
	case $1 in
	--modes) modes=$2; shift ;;
	--peers) peers=$2; shift ;;
	--steps) steps=$2; shift ;;
	--no-save) save=0 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "instr.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
command -v valgrind >/dev/null || { echo "instr.sh: needs valgrind (apt-get install valgrind)" >&2; exit 2; }

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
		-DBUILD_TESTING=OFF >/dev/null
fi
cmake --build "$BUILD" --target uslab_malloc >/dev/null
EXE=$BUILD/mbench/instr
mkdir -p "$BUILD/mbench"
if [ ! -x "$EXE" ] || [ "$HERE/instr.c" -nt "$EXE" ]; then
	cc -O2 -Wall -o "$EXE" "$HERE/instr.c"
fi

. "$HERE/peerlibs.sh"   # LIB
LIB[uslab]=$BUILD/libuslab-malloc.so

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# count ALLOC MODE STEPS [extra args]: prints "Ir D1mr D1mw LLmr LLmw Dr Dw" of the whole run
count() {
	local who=$1 mode=$2 n=$3; shift 3
	local lib=${LIB[${who%%+*}]} opts=""
	case $who in uslab+?*) opts=$(tr ',' ' ' <<<"${who#uslab+}") ;; esac
	local out=$TMP/cg.out
	env ${lib:+LD_PRELOAD=$lib} USLAB_OPTIONS="${USLAB_OPTIONS:-}${opts:+ $opts}" \
		valgrind --tool=cachegrind --cache-sim=yes --cachegrind-out-file="$out" \
		"$EXE" --mode "$mode" --steps "$n" "$@" >/dev/null 2>"$TMP/vg.err" ||
		{ cat "$TMP/vg.err" >&2; exit 1; }
	awk '/^summary:/ { print $2, $6, $9, $7, $10, $5, $8 }' "$out"
}

lo_steps=$((steps / 5))
RES=$TMP/res
: >"$RES"
for mode in $modes; do
	for who in loop $peers; do
		if [ "$who" = loop ]; then
			a=$(count glibc "$mode" "$lo_steps" --loop-only); b=$(count glibc "$mode" "$steps" --loop-only)
		else
			if [ -n "${LIB[${who%%+*}]+x}" ] && [ -n "${LIB[${who%%+*}]}" ] && [ ! -e "${LIB[${who%%+*}]}" ]; then
				echo "instr.sh: skipping $who (${LIB[${who%%+*}]} not installed)" >&2
				continue
			fi
			a=$(count "$who" "$mode" "$lo_steps"); b=$(count "$who" "$mode" "$steps")
		fi
		awk -v m="$mode" -v w="$who" -v d=$((steps - lo_steps)) -v a="$a" -v b="$b" 'BEGIN {
			split(a, A, " "); split(b, B, " ")
			printf "%s %s %.1f %.1f %.3f %.3f %.3f\n", m, w, (B[1] - A[1]) / d, (B[6] + B[7] - A[6] - A[7]) / d,
				(B[2] - A[2]) / d, (B[3] - A[3]) / d, (B[4] + B[5] - A[4] - A[5]) / d
		}' >>"$RES"
		echo "  $mode $who: $(tail -n 1 "$RES" | cut -d' ' -f3-)" >&2
	done
done

TABLE=$TMP/table
{
	echo "| mode | allocator | instructions / step | data accesses / step | D1 read misses / step | D1 write misses / step | LL misses / step |"
	echo "| --- | --- | --: | --: | --: | --: | --: |"
	awk '{ printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7 }' "$RES"
} >"$TABLE"
cat "$TABLE"
[ "$save" = 1 ] || exit 0
day=$(date +%F)
out=$HERE/results/$day-instr.md
n=2
while [ -e "$out" ]; do out=$HERE/results/$day-instr-$n.md; n=$((n + 1)); done
rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "?")
[ -z "$(git -C "$ROOT" status --porcelain -- src include 2>/dev/null)" ] || rev="$rev (src/include modified)"
{
	echo "# Instructions per malloc+free, $day"
	echo
	echo "- Machine: $(sed -n 's/^model name[[:space:]]*:[[:space:]]*//p' /proc/cpuinfo | head -n 1), $(nproc) CPUs; $(uname -sr)"
	echo "- $(valgrind --version), cachegrind's default simulated caches; uslab $rev (build-bench, Release -O2)"
	echo "- Command: \`bench/instr.sh --modes \"$modes\" --peers \"$peers\" --steps $steps\`${USLAB_OPTIONS:+, USLAB_OPTIONS=$USLAB_OPTIONS}"
	echo "- One step = one free and one malloc (bench/instr.c): mix = random slot of 4096, random size 16..512;"
	echo "  pair = malloc(16) and free at once; batch = 4096 mallocs then shuffled frees. Per step ="
	echo "  (count at $steps steps - count at $lo_steps steps) / $((steps - lo_steps)). \"loop\" = the loop alone, included in every row."
	echo
	cat "$TABLE"
} >"$out"
echo "written: ${out#"$ROOT"/}"
