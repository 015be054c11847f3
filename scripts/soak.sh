#!/usr/bin/env bash
# Soak test (issue 12; not in CI): tests/test_mixed.c's workload (every
# thread, cache, malloc-family, bulk, shrink, tunable and export operation at
# once, with thread churn) for MINUTES minutes, built with -O2 in its own
# build directory, and three checks:
#
#   RSS       no growth after the warm-up: the process's RSS is sampled from
#             /proc every INTERVAL seconds; the median of the last quarter of
#             the run may exceed the median of the second quarter by at most
#             SOAK_RSS_GROWTH_PCT percent (default 10) plus SOAK_RSS_SLACK_MB
#             (default 4 MiB: about what the live set and the tunables the
#             run keeps changing move it by; a whole run stays near 20 MiB).
#             The first quarter is the warm-up.
#   counters  at every quiet point (every USLAB_QUIET_SECONDS, default 10 s:
#             all threads parked, their CPU caches given back) the program
#             compares, per cache (a merged pair together), active_objects
#             with its own count of allocations less frees, and the malloc
#             family's in_use_bytes with the usable bytes of its live blocks;
#             validate must find nothing. A mismatch fails the program. There
#             must be at least one quiet point per quiet interval.
#   reports   nothing on stderr: no "uslab:" line (debug report, validate,
#             fatal), no CHECK failure.
#
# Prints a table and exits non-zero on any failure.
#
#   bash scripts/soak.sh [MINUTES]        (default 30)
#
# Environment: USLAB_OPTIONS (passed on; "export" is added), SOAK_RSS_GROWTH_PCT,
# SOAK_RSS_SLACK_MB, USLAB_QUIET_SECONDS, JOBS. Build directory: build-soak;
# logs in build-soak/soak-*.{out,err,rss}.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MINUTES=${1:-30}
[[ $MINUTES =~ ^[0-9]+([.][0-9]+)?$ ]] || { echo "usage: $0 [MINUTES]" >&2; exit 2; }
DIR=$ROOT/build-soak
JOBS=${JOBS:-2}
GROWTH_PCT=${SOAK_RSS_GROWTH_PCT:-10}
SLACK_MB=${SOAK_RSS_SLACK_MB:-4}
QUIET=${USLAB_QUIET_SECONDS:-10}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

cmake -S "$ROOT" -B "$DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
	-DUSLAB_BUILD_BENCH=OFF >/dev/null
cmake --build "$DIR" -j "$JOBS" --target test_mixed

SECONDS_TOTAL=$(awk -v m="$MINUTES" 'BEGIN { printf "%d", m * 60 }')
[ "$SECONDS_TOTAL" -ge 20 ] || { echo "soak: at least 20 s (1/3 minute) please" >&2; exit 2; }
# about 300 samples whatever the length, at least one a second
INTERVAL=$(( SECONDS_TOTAL / 300 )); [ "$INTERVAL" -ge 1 ] || INTERVAL=1
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$DIR/soak-$STAMP.out ERR=$DIR/soak-$STAMP.err RSSLOG=$DIR/soak-$STAMP.rss

echo "=== soak: $MINUTES min of test_mixed --soak, RSS every $INTERVAL s, quiet points every $QUIET s ==="
echo "    logs: $OUT $ERR $RSSLOG"
USLAB_STRESS_SECONDS=$SECONDS_TOTAL USLAB_QUIET_SECONDS=$QUIET USLAB_OPTIONS="${USLAB_OPTIONS:-} export" \
	"$DIR/tests/test_mixed" --soak >"$OUT" 2>"$ERR" &
PID=$!
T0=$(date +%s.%N)
: >"$RSSLOG"
while kill -0 "$PID" 2>/dev/null; do
	rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$PID/status" 2>/dev/null || true)
	[ -n "$rss" ] && echo "$(awk -v t0="$T0" -v t="$(date +%s.%N)" 'BEGIN { printf "%.1f", t - t0 }') $rss" >>"$RSSLOG"
	sleep "$INTERVAL"
done
rc=0
wait "$PID" || rc=$?

# ---- the checks -------------------------------------------------------------------------
fail=0
row() { printf "  %-34s %-44s %s\n" "$1" "$2" "$3"; }
verdict() { if [ "$1" = ok ]; then echo ok; else echo FAIL; fail=1; fi; }

echo
row "check" "measured" "result"
row "-----" "--------" "------"

# the program itself
res=ok; [ "$rc" -eq 0 ] || res=bad
row "test_mixed --soak exit status" "$rc" "$(verdict $res)"

# RSS: medians of the second and last quarters of the samples
read -r n q2 q4 first peak last < <(awk '
	{ t[NR] = $1; r[NR] = $2 }
	function median(a, b,   i, k, v, tmp) {
		k = 0
		for (i = a; i <= b; i++) v[++k] = r[i]
		for (i = 2; i <= k; i++) { tmp = v[i]; j = i - 1; while (j > 0 && v[j] > tmp) { v[j + 1] = v[j]; j-- } v[j + 1] = tmp }
		return k ? v[int((k + 1) / 2)] : 0
	}
	END {
		n = NR; if (n < 8) { print n, 0, 0, 0, 0, 0; exit }
		peak = 0; for (i = 1; i <= n; i++) if (r[i] > peak) peak = r[i]
		print n, median(int(n / 4) + 1, int(n / 2)), median(int(3 * n / 4) + 1, n), r[1], peak, r[n]
	}' "$RSSLOG")
if [ "$n" -lt 8 ]; then
	row "RSS samples" "$n (too few)" "$(verdict bad)"
else
	limit=$(( q2 + q2 * GROWTH_PCT / 100 + SLACK_MB * 1024 ))
	res=ok; [ "$q4" -le "$limit" ] || res=bad
	growth=$(awk -v a="$q2" -v b="$q4" 'BEGIN { printf "%+.1f%%", (b - a) * 100 / a }')
	row "RSS samples" "$n, every $INTERVAL s" ""
	row "RSS first / peak / last (MiB)" "$((first / 1024)) / $((peak / 1024)) / $((last / 1024))" ""
	row "RSS median, 2nd quarter (MiB)" "$((q2 / 1024))" ""
	row "RSS median, last quarter (MiB)" "$((q4 / 1024)) ($growth; limit $((limit / 1024)))" "$(verdict $res)"
fi

# quiet points: each compared the counters (a mismatch fails the program)
quiet=$(grep -c '^soak: quiet=.* ok$' "$OUT" || true)
want=$(awk -v s="$SECONDS_TOTAL" -v q="$QUIET" 'BEGIN { printf "%d", (q > 0 ? s / q : 0) - 1 }')
[ "$want" -ge 1 ] || want=1
res=ok; [ "$quiet" -ge "$want" ] || res=bad
row "quiet points, counters balanced" "$quiet (at least $want)" "$(verdict $res)"
if [ "$quiet" -gt 0 ]; then
	awk '/^soak: quiet=/ {
		for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
		n++; if (n == 1) { m1 = v["mapped"]; r1 = v["rss"] }
		mx = v["mapped"] > mx ? v["mapped"] : mx; live = v["live_objects"]; act = v["active_objects"]; ops = v["ops"]; thr = v["threads"]
		m = v["mapped"]; r = v["rss"]
	}
	END {
		printf "  %-34s %-44s\n", "uslab mapped, first / max / last", sprintf("%d / %d / %d MiB", m1 / 1048576, mx / 1048576, m / 1048576)
		printf "  %-34s %-44s\n", "RSS at quiet points, first / last", sprintf("%d / %d MiB", r1 / 1048576, r / 1048576)
		printf "  %-34s %-44s\n", "live objects, last quiet point", sprintf("%d (active_objects %d)", live, act)
		printf "  %-34s %-44s\n", "operations / threads, by then", sprintf("%d / %d", ops, thr)
	}' "$OUT"
fi

# reports
reports=$(grep -a -c 'uslab:' "$ERR" || true)
other=$(grep -a -v 'uslab:' "$ERR" | grep -a -c . || true)
res=ok; [ "$reports" -eq 0 ] && [ "$other" -eq 0 ] || res=bad
row "lines on stderr (uslab: / other)" "$reports / $other" "$(verdict $res)"

summary=$(grep -a '^test_mixed: ' "$OUT" || true)
echo
[ -n "$summary" ] && echo "  $summary"
if [ "$fail" -ne 0 ]; then
	echo
	echo "soak FAILED; the end of stderr ($ERR):" >&2
	tail -n 20 "$ERR" >&2
	exit 1
fi
echo "soak passed ($MINUTES min)"
