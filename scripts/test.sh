#!/usr/bin/env bash
# Build and run the whole test suite: a normal build, an AddressSanitizer +
# UBSan build and a ThreadSanitizer build, each under CTest; the normal build
# again with slub_debug on every cache; the operation fuzzer; an ASan
# build in which ASan itself sees uslab's objects; the normal build again in
# classic mode (slub_sheaf_capacity=0: no sheaves, SLUB's CPU slabs and CPU
# partial lists); and the packaging test.
#
#   bash scripts/test.sh [normal|asan|tsan|debug|classic|fuzz|track|package ...]   (default: all eight)
#
#   classic: the normal build's CTest suite with USLAB_OPTIONS=slub_sheaf_capacity=0.
# Tests labelled "slow" (test_fork_many) are left out: ctest -L slow runs them.
# The debug and classic variants run 8 of the preload test's 24 CPython
# modules, and every variant reuses the preload test's glibc results.
#   debug: the normal build's CTest suite with USLAB_OPTIONS=slub_debug=FZPU
#          (every cache debugged); it must pass and no debug report (BUG,
#          FIX, validate lines) may appear in any test's output.
#   fuzz:  tests/fuzz/run.sh for FUZZ_SECONDS (default 60) seconds.
#   track: -DUSLAB_TRACK=asan (objects poisoned while free): test_track.
#   package: tests/packaging/run.sh: install into a prefix, then pkg-config,
#          find_package, add_subdirectory and FetchContent users, exports,
#          man pages, uslab-run, the Rust crates (about 2 minutes).
#
# Build directories: build-test (normal, debug), build-asan, build-tsan,
# build-track, build-fuzz, build-pkg (beside this repo's CMakeLists.txt).
# Needs cmake, ninja (or make) and gcc with its sanitizer runtimes, for fuzz
# clang with libclang-rt-14-dev, for package pkg-config, man-db and cargo
# (Debian 12: build-essential cmake ninja-build clang libclang-rt-14-dev
# pkg-config man-db, and rustup or cargo rustc).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${JOBS:-2}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

# The preload test's glibc runs are the same in every variant: once only.
export USLAB_PRELOAD_BASELINE=${USLAB_PRELOAD_BASELINE:-$ROOT/build-test/preload-baseline}
# The variants that rerun the normal build's suite in another mode (debug,
# classic) run CPython's tests with fewer modules: the modes differ below
# the malloc family, and the normal variant runs all 24.
PRELOAD_SHORT="test_threading test_queue test_list test_dict test_unicode test_re test_json test_pickle"

variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(normal asan tsan debug classic fuzz track package)

run_variant() {
	local name=$1 dir san
	case $name in
	normal) dir=build-test; san="" ;;
	debug)  dir=build-test; san="" ;;
	classic) dir=build-test; san="" ;;
	asan)   dir=build-asan; san=address ;;
	tsan)   dir=build-tsan; san=thread ;;
	track)   # ASan sees uslab's objects as heap blocks (USLAB_TRACK=asan): test_track only,
		 # since the misuse tests expect uslab's own reports, which ASan would preempt
		cmake -S "$ROOT" -B "$ROOT/build-track" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
			-DUSLAB_SANITIZE=address -DUSLAB_TRACK=asan >/dev/null
		cmake --build "$ROOT/build-track" -j "$JOBS" --target test_track
		ctest --test-dir "$ROOT/build-track" --output-on-failure -R '^test_track$'
		return ;;
	fuzz)
		local t0=$SECONDS
		bash "$ROOT/tests/fuzz/run.sh" "${FUZZ_SECONDS:-60}"
		echo "=== fuzz: $((SECONDS - t0)) s ==="
		return ;;
	package)
		local t0=$SECONDS
		echo "=== package (build-pkg) ==="
		bash "$ROOT/tests/packaging/run.sh" "$ROOT/build-pkg"
		echo "=== package: $((SECONDS - t0)) s ==="
		return ;;
	*) echo "test.sh: unknown variant '$name' (normal, asan, tsan, debug, classic, fuzz, track, package)" >&2; exit 2 ;;
	esac
	echo "=== $name build ($dir) ==="
	cmake -S "$ROOT" -B "$ROOT/$dir" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DUSLAB_SANITIZE="$san" >/dev/null
	cmake --build "$ROOT/$dir" -j "$JOBS"
	local pre=()
	# TSan's runtime cannot handle the high mmap randomization of newer
	# kernels ("unexpected memory mapping"): run it without ASLR.
	if [ "$name" = tsan ] && command -v setarch >/dev/null; then
		pre=(setarch "$(uname -m)" -R)
	fi
	local t0=$SECONDS
	if [ "$name" = debug ]; then
		# Every cache debugged: the whole suite, its full output kept to
		# look for reports (a passing test must not have caused any).
		local log=$ROOT/$dir/debug-ctest.log
		if ! USLAB_PRELOAD_PY_TESTS=$PRELOAD_SHORT USLAB_OPTIONS=slub_debug=FZPU \
			ctest --test-dir "$ROOT/$dir" -LE slow --output-on-failure -V -j "$JOBS" \
			>"$log" 2>&1; then
			grep -a -v '^[0-9]*: ' "$log" | tail -n 40
			echo "debug variant: failures (full output: $log)" >&2
			grep -a -E '^[0-9]+: (.*CHECK failed|death test|report test)' "$log" | head -n 40 >&2
			exit 1
		fi
		if grep -a -E '^[0-9]+: uslab: (BUG |FIX |validate: )' "$log" >&2; then
			echo "debug variant: the suite passed but slub_debug reported the lines above ($log)" >&2
			exit 1
		fi
		grep -a -E '^ *[0-9]+/[0-9]+ Test|tests passed' "$log"
	elif [ "$name" = classic ]; then
		# KFENCE sits above the per-CPU layer: its preload part (25 s) is
		# the normal variant's alone
		USLAB_PRELOAD_PY_TESTS=$PRELOAD_SHORT USLAB_PRELOAD_PARTS="interpose sqlite git python" \
			USLAB_OPTIONS=slub_sheaf_capacity=0 \
			ctest --test-dir "$ROOT/$dir" -LE slow --output-on-failure -j "$JOBS"
	else
		"${pre[@]}" ctest --test-dir "$ROOT/$dir" -LE slow --output-on-failure -j "$JOBS"
	fi
	echo "=== $name: $((SECONDS - t0)) s ==="
}

for v in "${variants[@]}"; do
	run_variant "$v"
done
echo "all test variants passed: ${variants[*]}"
