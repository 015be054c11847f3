#!/usr/bin/env bash
# Build and run the whole test suite: a normal build, an AddressSanitizer +
# UBSan build and a ThreadSanitizer build, each under CTest; the normal build
# again with slub_debug on every cache; the operation fuzzer; an ASan
# build in which ASan itself sees uslab's objects; the normal build (whose
# caches run the default per-CPU mode, sheaves, on the per-CPU backend where
# rseq runs) again in each other mode: classic (slub_sheaf_capacity=0:
# SLUB's CPU slabs and CPU partial lists), home, slqb, and slab
# (slub_cpu_mode=slab: the kernel's SLAB for every cache); a build that
# yields the CPU at random at the allocator's race windows; and the
# packaging test. The per-CPU backend's fallback (parts of threads) runs
# the whole suite in the tsan variant (ThreadSanitizer cannot follow a
# restartable sequence) and the per-CPU tests again with cpu_backend=tls
# in the normal variant.
#
#   bash scripts/test.sh [normal|asan|tsan|debug|classic|home|slqb|slab|fuzz|track|sched|package ...]
#   (default: all twelve)
#
# First, scripts/setup-deps.sh checks what the chosen variants need and, as
# root with apt-get (a fresh Debian 12 machine, CI), installs what is
# missing; otherwise it prints the apt-get install line and the run stops
# before building anything.
#
#   classic: the normal build's CTest suite with USLAB_OPTIONS=slub_sheaf_capacity=0,
#          without the preload test's kfence part (USLAB_PRELOAD_PARTS).
#   home, slqb: the same with USLAB_OPTIONS=slub_cpu_mode=home (slqb).
#   slab:  the same with USLAB_OPTIONS=slub_cpu_mode=slab (every cache in slab
#          mode), the same short preload module list.
# Tests labelled "slow" (test_fork_many) are left out: ctest -L slow runs them.
# The bench_run test (label "bench": bench/run.sh --quick and its results
# file) runs in the normal variant only.
# The debug and mode variants (classic, home, slqb, slab) run 5 of the preload test's
# 23 CPython modules, and every variant reuses the preload test's glibc results;
# these reruns give test_mixed 4 s and the fork-from-a-signal tests 2 s, and
# test_slab_reuse runs their own mode alone (the normal variant retunes).
# The preload test runs glibc's side beside uslab's the first time (normal),
# except CPython's, which glibc runs only to judge a failure under uslab.
#   debug: the normal build's CTest suite with USLAB_OPTIONS=slub_debug=FZPU
#          (every cache debugged); it must pass and no debug report (BUG,
#          FIX, validate lines) may appear in any test's output.
#   fuzz:  tests/fuzz/run.sh for FUZZ_SECONDS (default 60) seconds.
#   track: -DUSLAB_TRACK=asan (objects poisoned while free): test_track.
#   sched: -DUSLAB_SCHED_FUZZ=ON (src/core/os.h: a sched_yield() at one
#          race-window point in 16): test_slab_reuse, test_stress and
#          test_home, whose races need a preemption inside a few
#          instructions (the classic deactivation race failed 5 of 5 runs
#          there, about 1 in 6 in a normal build). About 20 s.
#   package: tests/packaging/run.sh: install into a prefix, then pkg-config,
#          find_package, add_subdirectory and FetchContent users, exports,
#          man pages, uslab-run, the Rust crates (about 2 minutes).
#
# Every variant runs, also after one fails: the failures are listed at the
# end and the script exits 1 (each variant runs in a subshell with -e of
# its own, so that its first failing command ends it alone).
#
# A test that skips itself or a part (CTest's SKIP_RETURN_CODE, such as a
# preload part whose program is missing; a SKIPPED line of the packaging
# test) is listed, with its reason, at the end, and on the final line:
#   all test variants passed: normal ...; skipped: VARIANT: TEST, ...
#
# Build directories: build-test (normal, debug and the modes), build-asan,
# build-tsan, build-track, build-sched, build-pkg, build-fuzz beside this repo's
# CMakeLists.txt; USLAB_TEST_BUILD_PREFIX (default "build-"; relative to the
# repo, or absolute) names them otherwise, e.g. "mine/" gives mine/test,
# mine/asan ... (tests/fuzz/run.sh reads it too). JOBS (default 2): build
# and CTest parallelism. What each variant needs: scripts/setup-deps.sh
# (Debian 12: build-essential cmake ninja-build clang libclang-rt-14-dev
# pkg-config man-db sqlite3 git python3 libpython3.11-testsuite, and rustup
# or cargo rustc).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${JOBS:-2}
B=${USLAB_TEST_BUILD_PREFIX:-build-}
case $B in /*) ;; *) B=$ROOT/$B ;; esac

variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(normal asan tsan debug classic home slqb slab fuzz track sched package)
for v in "${variants[@]}"; do
	case $v in
	normal | asan | tsan | debug | classic | home | sheaves | slqb | slab | fuzz | track | sched | package) ;;
	*) echo "test.sh: unknown variant '$v' (normal, asan, tsan, debug, classic, home, sheaves, slqb, slab, fuzz, track, sched, package)" >&2; exit 2 ;;
	esac
done

# What the variants need, before anything is built: installed, or the
# apt-get line printed and the run stopped (exit 2). (The modes need what
# classic needs.)
deps=()
for v in "${variants[@]}"; do
	case $v in home | sheaves | slqb | slab | sched) deps+=(classic) ;; *) deps+=("$v") ;; esac
done
bash "$ROOT/scripts/setup-deps.sh" "${deps[@]}"

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

# The preload test's glibc runs are the same in every variant: once only.
export USLAB_PRELOAD_BASELINE=${USLAB_PRELOAD_BASELINE:-${B}test/preload-baseline}
# The variants that rerun the normal build's suite in another mode (debug,
# and the modes) run CPython's tests with fewer modules: the modes differ below
# the malloc family, and the normal variant runs all 23. Five that allocate
# much and wait little (25 s under slub_debug=FZPU, about 10 in a mode):
# threading and queue (25 s, mostly waiting) are the normal variant's.
PRELOAD_SHORT="test_list test_dict test_unicode test_re test_json"
# The reruns (debug and the modes) also give the two fixed-length tests
# less time: test_mixed 4 s (10 in the normal variant) and the fork-from-
# a-signal tests 2 s (5), each of which still waits for its own floor (a
# quiet point; a signal landed inside the allocator). It keeps the whole
# command under 15 minutes on 2 cores.
RERUN_ENV=(USLAB_STRESS_SECONDS=4 USLAB_SIGNAL_SECONDS=2)

# "variant: what (why)", one a line: written by the variants' subshells
SKIPS_FILE=$(mktemp)
trap 'rm -f "$SKIPS_FILE"' EXIT
add_skip() {
	printf '%s\n' "$1" >>"$SKIPS_FILE"
}

# note_skips VARIANT BUILD-DIR CTEST-OUTPUT: the tests CTest lists as not
# run (Skipped: SKIP_RETURN_CODE) go to skips, each with the "skip ..." or
# "SKIP..." lines of its output (CTest's LastTest.log keeps every test's).
note_skips() {
	local name=$1 dir=$2 out=$3 t st why
	while read -r t st; do
		why=$(awk -v t="$t" '/^[0-9]+\/[0-9]+ Test: / { cur = $3; next }
			cur == t && /^ *(skip |SKIP)/ { sub(/^ *(skip |SKIP:? *)/, ""); r = r (r == "" ? "" : "; ") $0 }
			END { print r }' "$dir/Testing/Temporary/LastTest.log" 2>/dev/null || true)
		[ "$st" = "(Skipped)" ] || why="${st//[()]/}${why:+; $why}"
		add_skip "$name: $t${why:+ ($why)}"
	done < <(awk '/^The following tests did not run:/ { f = 1; next }
		f && /^[ \t]+[0-9]+ - / { st = $0; sub(/^[^(]*/, "", st); print $3, st; next } { f = 0 }' "$out")
}

# run_ctest VARIANT BUILD-DIR ARGS...: ctest --test-dir BUILD-DIR ARGS
# (behind the command in the array ctest_pre, if any), its output shown and
# kept for note_skips
ctest_pre=()
run_ctest() {
	local name=$1 dir=$2 log=$2/ctest-$1.log
	shift 2
	"${ctest_pre[@]}" ctest --test-dir "$dir" "$@" 2>&1 | tee "$log"
	note_skips "$name" "$dir" "$log"
}

run_variant() {
	local name=$1 dir san
	case $name in
	normal) dir=${B}test; san="" ;;
	debug)  dir=${B}test; san="" ;;
	classic) dir=${B}test; san="" ;;
	home | sheaves | slqb | slab) dir=${B}test; san="" ;;
	asan)   dir=${B}asan; san=address ;;
	tsan)   dir=${B}tsan; san=thread ;;
	track)   # ASan sees uslab's objects as heap blocks (USLAB_TRACK=asan): test_track only,
		 # since the misuse tests expect uslab's own reports, which ASan would preempt
		cmake -S "$ROOT" -B "${B}track" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
			-DUSLAB_SANITIZE=address -DUSLAB_TRACK=asan >/dev/null
		cmake --build "${B}track" -j "$JOBS" --target test_track
		run_ctest track "${B}track" --output-on-failure -R '^test_track$'
		return ;;
	sched)   # a yield at one race-window point in 16 (src/core/os.h): the
		 # stress tests of slabs emptied and reused, cross-thread frees
		 # and ownership hand-offs, in the modes they set themselves
		local t0=$SECONDS
		cmake -S "$ROOT" -B "${B}sched" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
			-DUSLAB_SCHED_FUZZ=ON -DUSLAB_BUILD_BENCH=OFF >/dev/null
		cmake --build "${B}sched" -j "$JOBS" --target test_slab_reuse test_stress test_home
		run_ctest sched "${B}sched" --output-on-failure -R '^(test_slab_reuse|test_stress|test_home)$'
		echo "=== sched: $((SECONDS - t0)) s ==="
		return ;;
	fuzz)
		local t0=$SECONDS
		bash "$ROOT/tests/fuzz/run.sh" "${FUZZ_SECONDS:-60}"
		echo "=== fuzz: $((SECONDS - t0)) s ==="
		return ;;
	package)
		local t0=$SECONDS line
		echo "=== package (${B}pkg) ==="
		mkdir -p "${B}pkg"
		bash "$ROOT/tests/packaging/run.sh" "${B}pkg" 2>&1 | tee "${B}pkg/run.log"
		# the steps it skipped print "SKIPPED: why"
		while IFS= read -r line; do
			add_skip "package: ${line#SKIPPED: }"
		done < <(grep '^SKIPPED: ' "${B}pkg/run.log" || true)
		echo "=== package: $((SECONDS - t0)) s ==="
		return ;;
	esac
	echo "=== $name build ($dir) ==="
	cmake -S "$ROOT" -B "$dir" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DUSLAB_SANITIZE="$san" >/dev/null
	cmake --build "$dir" -j "$JOBS"
	ctest_pre=()
	# TSan's runtime cannot handle the high mmap randomization of newer
	# kernels ("unexpected memory mapping"): run it without ASLR.
	if [ "$name" = tsan ] && command -v setarch >/dev/null; then
		ctest_pre=(setarch "$(uname -m)" -R)
	fi
	local t0=$SECONDS
	if [ "$name" = debug ]; then
		# Every cache debugged: the whole suite, its full output kept to
		# look for reports (a passing test must not have caused any).
		local log=$dir/debug-ctest.log
		if ! env "${RERUN_ENV[@]}" USLAB_PRELOAD_PY_TESTS="$PRELOAD_SHORT" USLAB_OPTIONS=slub_debug=FZPU \
			ctest --test-dir "$dir" -LE 'slow|bench' --output-on-failure -V -j "$JOBS" \
			>"$log" 2>&1; then
			grep -a -v '^[0-9]*: ' "$log" | tail -n 40
			echo "debug variant: failures (full output: $log)" >&2
			grep -a -E '^[0-9]+: (.*CHECK failed|death test|report test)' "$log" | awk 'n++ < 40' >&2
			exit 1
		fi
		if grep -a -E '^[0-9]+: uslab: (BUG |FIX |validate: )' "$log" >&2; then
			echo "debug variant: the suite passed but slub_debug reported the lines above ($log)" >&2
			exit 1
		fi
		grep -a -E '^ *[0-9]+/[0-9]+ Test|tests passed|did not run:|^[[:space:]]+[0-9]+ - ' "$log"
		note_skips debug "$dir" "$log"
	elif [ "$name" = classic ]; then
		# KFENCE sits above the per-CPU layer: its preload part (25 s) is
		# the normal variant's alone (preload_kfence shows as skipped)
		ctest_pre=(env "${RERUN_ENV[@]}")
		USLAB_PRELOAD_PY_TESTS=$PRELOAD_SHORT USLAB_PRELOAD_PARTS="interpose sqlite git python" \
			USLAB_OPTIONS=slub_sheaf_capacity=0 \
			run_ctest classic "$dir" -LE 'slow|bench' --output-on-failure -j "$JOBS"
	elif [ "$name" = home ] || [ "$name" = sheaves ] || [ "$name" = slqb ] || [ "$name" = slab ]; then
		# every cache in that mode (slab: the kernel's SLAB); kfence as classic
		ctest_pre=(env "${RERUN_ENV[@]}")
		USLAB_PRELOAD_PY_TESTS=$PRELOAD_SHORT USLAB_PRELOAD_PARTS="interpose sqlite git python" \
			USLAB_OPTIONS=slub_cpu_mode=$name \
			run_ctest "$name" "$dir" -LE 'slow|bench' --output-on-failure -j "$JOBS"
	else
		run_ctest "$name" "$dir" -LE slow --output-on-failure -j "$JOBS"
	fi
	if [ "$name" = normal ]; then
		# the per-CPU backend's fallback, parts of threads, in the
		# default mode: the tests of sheaves, per-CPU parts and threads
		USLAB_OPTIONS=cpu_backend=tls run_ctest normal-tls "$dir" --output-on-failure -j "$JOBS" \
			-R '^(test_pcpu|test_sheaves|test_stress|test_bulk|test_mixed|test_takeback|test_fork|test_totals_sheaves|example_conn_pool_sheaves)$'
	fi
	echo "=== $name: $((SECONDS - t0)) s ==="
}

failed=() passed=()
for v in "${variants[@]}"; do
	set +e
	(
		set -e
		run_variant "$v"
	)
	rc=$?
	set -e
	if [ "$rc" -ne 0 ]; then
		failed+=("$v")
		echo "=== $v: FAILED (exit $rc); going on with the other variants ===" >&2
	else
		passed+=("$v")
	fi
done
skips=()
mapfile -t skips <"$SKIPS_FILE"
if [ ${#skips[@]} -gt 0 ]; then
	echo "skipped (passed without running these):"
	printf '  %s\n' "${skips[@]}"
	list=$(printf '%s\n' "${skips[@]}" | sed 's/ (.*//' | paste -sd, - | sed 's/,/, /g')
fi
if [ ${#failed[@]} -gt 0 ]; then
	echo "test variants FAILED: ${failed[*]}; passed: ${passed[*]:-none}${list:+; skipped: $list}" >&2
	exit 1
fi
if [ ${#skips[@]} -gt 0 ]; then
	echo "all test variants passed: ${variants[*]}; skipped: $list"
else
	echo "all test variants passed: ${variants[*]}; nothing skipped"
fi
