#!/usr/bin/env bash
# Build and run the whole test suite: a normal build, an AddressSanitizer +
# UBSan build and a ThreadSanitizer build, each under CTest.
#
#   bash scripts/test.sh [normal|asan|tsan ...]     (default: all three)
#
# Build directories: build-test, build-asan, build-tsan (beside this repo's
# CMakeLists.txt). Needs cmake, ninja (or make) and gcc with its sanitizer
# runtimes (Debian 12: build-essential cmake ninja-build).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=${JOBS:-2}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(normal asan tsan)

run_variant() {
	local name=$1 dir san
	case $name in
	normal) dir=build-test; san="" ;;
	asan)   dir=build-asan; san=address ;;
	tsan)   dir=build-tsan; san=thread ;;
	*) echo "test.sh: unknown variant '$name' (normal, asan, tsan)" >&2; exit 2 ;;
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
	"${pre[@]}" ctest --test-dir "$ROOT/$dir" --output-on-failure -j "$JOBS"
	echo "=== $name: $((SECONDS - t0)) s ==="
}

for v in "${variants[@]}"; do
	run_variant "$v"
done
echo "all test variants passed: ${variants[*]}"
