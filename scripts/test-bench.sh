#!/usr/bin/env bash
# The benchmark script's own test (CTest: bench_run, label "bench"): runs
# bench/run.sh --quick with one repetition of one group count, results into a
# temporary directory, and checks that it exits 0 and that its results file
# has every section, each non-empty: the machine's description, the table
# (a number for uslab and glibc in every row), the spread and uslab's cache
# statistics. A pipe that dies of SIGPIPE under pipefail, or a section left
# empty, fails it.
#
#   bash scripts/test-bench.sh
#
# The benchmarks are built where USLAB_BENCH_BUILD says (CTest: a directory
# under its own build tree, never the developer's build-bench); the results
# directory is kept, and named, when a check fails. About a minute.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/uslab-bench-test.XXXXXX")
LOG=$OUT/run.log

fail() {
	echo "bench test: FAIL: $*" >&2
	[ -f "$LOG" ] && { echo "--- bench/run.sh's output:" >&2; tail -n 40 "$LOG" >&2; }
	for f in "$OUT"/*.md; do [ -f "$f" ] && { echo "--- $f:" >&2; cat "$f" >&2; }; done
	echo "(kept: $OUT)" >&2
	exit 1
}

rc=0
USLAB_BENCH_RESULTS=$OUT bash "$ROOT/bench/run.sh" --quick --fp-reps 1 --hb-reps 1 \
	--groups 1 --pipe-groups 1 --loops 100 >"$LOG" 2>&1 || rc=$?
[ "$rc" = 0 ] || fail "bench/run.sh --quick exited $rc"
files=("$OUT"/*.md)
[ ${#files[@]} = 1 ] && [ -f "${files[0]}" ] || fail "bench/run.sh wrote no results file into $OUT"
res=${files[0]}
grep -q "^written: .*$(basename "$res")\$" "$LOG" || fail "bench/run.sh did not name the file it wrote"

# section NAME: the lines under "## NAME" (up to the next heading), or, for
# "", the lines before the first "## " heading
section() {
	awk -v want="$1" '/^## / { cur = substr($0, 4); next } { if (want == "" ? cur == "" : index(cur, want) == 1) print }' "$res"
}
head_part=$(section "")
for item in "CPU" "Kernel" "Compiler" "glibc" "uslab" "Load average at start" "Command"; do
	v=$(awk -v k="- $item: " 'index($0, k) == 1 { print substr($0, length(k) + 1) }' <<<"$head_part")
	case $v in
	'' | '?' | '?;'* | 'unknown'*) fail "the description's '$item' line is missing or empty: '$v'" ;;
	esac
done
# the table: a row for every measurement, uslab and glibc measured in each
rows=$(grep -c '^| \(fastpath\|uhackbench\)' <<<"$head_part" || true)
[ "$rows" = 6 ] || fail "the table has $rows rows, not 6 (2 fastpath, 2 uhackbench, 2 uhackbench pipes)"
bad=$(awk -F'|' '/^\| (fastpath|uhackbench)/ && ($3 !~ /[0-9]/ || $4 !~ /[0-9]/)' <<<"$head_part")
[ -z "$bad" ] || fail "rows without a uslab or glibc number: $bad"

spread=$(section "Spread" | grep -c '^[a-z0-9_]* [a-z]* [0-9.e+-]* ' || true)
[ "$spread" -ge 12 ] || fail "the spread section has $spread lines (at least 12: 6 keys, uslab and glibc)"

stats=$(section "uslab cache statistics")
for key in "groups=1 transport=ring" "groups=1 transport=pipe"; do
	grep -q "^$key: uslab: cache " <<<"$stats" || fail "no uslab cache statistics for $key"
done

echo "bench test: bench/run.sh --quick exited 0; $(basename "$res"): description, table ($rows rows), spread ($spread lines), cache statistics for ring and pipe"
rm -rf "$OUT"
