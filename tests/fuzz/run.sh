#!/usr/bin/env bash
# Build the operation-sequence fuzzer (tests/fuzz/fuzz_ops.c) with clang's
# libFuzzer and AddressSanitizer, and run it.
#
#   bash tests/fuzz/run.sh [SECONDS]        (default 60)
#
# Build directory: build-fuzz (beside CMakeLists.txt), or the prefix
# USLAB_TEST_BUILD_PREFIX (default "build-"; relative to the repo, or
# absolute) followed by "fuzz", as scripts/test.sh names its build
# directories; the corpus grows in build-fuzz/corpus across runs; a crash or
# model mismatch leaves its input in build-fuzz/artifacts/ (replay:
# build-fuzz/tests/fuzz/fuzz_ops FILE).
# FUZZ_USLAB_OPTIONS: USLAB_OPTIONS for the fuzzer (e.g. slub_cpu_mode=slab
# to fuzz another per-CPU mode); the caller's own USLAB_OPTIONS is ignored.
# Needs clang and libclang-rt-14-dev (Debian 12). Prints executions per
# second and total executions; exits non-zero if the fuzzer found anything.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SECS=${1:-60}
B=${USLAB_TEST_BUILD_PREFIX:-build-}
case $B in /*) ;; *) B=$ROOT/$B ;; esac
DIR=${B}fuzz
JOBS=${JOBS:-2}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
command -v clang >/dev/null || { echo "fuzz: clang not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 2; }

CC=clang CXX=clang++ cmake -S "$ROOT" -B "$DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DUSLAB_FUZZ=ON -DBUILD_TESTING=OFF >/dev/null
cmake --build "$DIR" --target fuzz_ops -j "$JOBS"

mkdir -p "$DIR/corpus" "$DIR/artifacts"
LOG=$DIR/fuzz.log
echo "=== fuzz_ops: $SECS s (log: $LOG) ==="
rc=0
# A single USLAB_OPTIONS from the caller would change every cache; the
# fuzzer picks its own debug caches.
env -u USLAB_OPTIONS ${FUZZ_USLAB_OPTIONS:+USLAB_OPTIONS="$FUZZ_USLAB_OPTIONS"} ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1} \
	"$DIR/tests/fuzz/fuzz_ops" -max_total_time="$SECS" -max_len=4096 -timeout=30 -rss_limit_mb=2048 \
	-print_final_stats=1 -artifact_prefix="$DIR/artifacts/" "$DIR/corpus" >"$LOG" 2>&1 || rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$LOG" | tail -1)
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$LOG" | tail -1)
echo "fuzz_ops: ${execs:-?} executions in $SECS s, ${rate:-?} exec/s, corpus $(ls "$DIR/corpus" | wc -l) inputs"
if [ "$rc" -ne 0 ]; then
	echo "fuzz_ops FAILED (exit $rc); the end of its log:" >&2
	tail -n 60 "$LOG" >&2
	ls -1 "$DIR/artifacts" >&2 || true
	exit 1
fi
