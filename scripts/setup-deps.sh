#!/usr/bin/env bash
# What scripts/test.sh's variants need, checked first and installed on
# Debian 12 where that is possible:
#
#   bash scripts/setup-deps.sh [normal|asan|tsan|debug|classic|fuzz|track|package ...]
#                                                     (default: all eight)
#
# Each variant's needs are checked by what it runs (a command, a sanitizer
# runtime by a test link, CPython's test package by an import), not by
# package names, so a machine that has them some other way passes. Missing
# pieces are installed with apt-get when running as root on a system with
# apt-get (non-interactive; USLAB_TEST_INSTALL=0 turns that off); otherwise
# this prints the one apt-get install line that would install them and
# exits 2, before anything is built. Exit 0: everything is there.
#
#   every variant   cmake, ninja, gcc/g++/make (build-essential)
#   normal debug classic
#                   the preload test's programs: sqlite3, git, python3 and
#                   CPython's test package (libpython3.X-testsuite)
#   asan track      gcc's ASan and UBSan runtimes (libasan8, libubsan1)
#   tsan            gcc's TSan runtime (libtsan2), setarch (util-linux)
#   fuzz            clang with libFuzzer (clang, libclang-rt-14-dev)
#   package         pkg-config, man-db, binutils, cargo and rustc (rustup's
#                   in ~/.cargo/bin counts; not with USLAB_PKG_SKIP_RUST=1);
#                   clippy is added with rustup where rustup exists (the
#                   packaging test skips that one step without it, and
#                   scripts/test.sh reports the skip)
set -euo pipefail
ALL="normal asan tsan debug classic fuzz track package"
variants=("$@")
[ ${#variants[@]} -gt 0 ] || read -r -a variants <<<"$ALL"
for v in "${variants[@]}"; do
	case " $ALL " in *" $v "*) ;; *) echo "setup-deps.sh: unknown variant '$v' ($ALL)" >&2; exit 2 ;; esac
done
has_variant() { local v; for v in "${variants[@]}"; do [ "$v" = "$1" ] && return 0; done; return 1; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PY=/usr/bin/python3   # the preload test's (Debian's, whose tests are a package)

# links COMPILER FLAGS...: a trivial program compiles and links with them
links() {
	local cc=$1
	shift
	printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\nint main(void) { return 0; }\n' >"$TMP/t.c"
	case " $* " in *fuzzer*) sed -i '/main/d' "$TMP/t.c" ;; esac
	"$cc" "$@" -o "$TMP/t" "$TMP/t.c" >/dev/null 2>&1
}
have() { command -v "$1" >/dev/null 2>&1; }

# check: fills pkgs (Debian 12 package names, each once) and why
# ("package: what needs it" lines) from what is missing now.
check() {
	pkgs=() why=()
	local cc_ok=1
	need() {   # need "pkg ..." reason
		local p
		for p in $1; do
			case " ${pkgs[*]} " in *" $p "*) continue ;; esac
			pkgs+=("$p")
			why+=("$p: $2")
		done
	}
	have cmake || need cmake "building (every variant)"
	have ninja || need ninja-build "building (every variant)"
	if ! have gcc || ! have g++ || ! have make || ! have cc; then
		need build-essential "building (every variant)"
		cc_ok=0
	fi
	if has_variant normal || has_variant debug || has_variant classic; then
		have sqlite3 || need sqlite3 "the preload test's sqlite part (normal, debug, classic)"
		have git || need git "the preload test's git part (normal, debug, classic)"
		if [ ! -x "$PY" ]; then
			need "python3 libpython3.11-testsuite" "the preload test's python and kfence parts (normal, debug, classic)"
		elif ! "$PY" -c 'import test.libregrtest, test.test_list' >/dev/null 2>&1; then
			local pyver
			pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
			need "libpython$pyver-testsuite" "CPython's test package, for the preload test's python and kfence parts (normal, debug, classic)"
		fi
	fi
	if [ $cc_ok = 1 ] && { has_variant asan || has_variant track; } && ! links gcc -fsanitize=address,undefined; then
		need "libasan8 libubsan1" "gcc's AddressSanitizer and UBSan runtimes (asan, track)"
	fi
	if has_variant tsan; then
		if [ $cc_ok = 1 ] && ! links gcc -fsanitize=thread; then
			need libtsan2 "gcc's ThreadSanitizer runtime (tsan)"
		fi
		have setarch || need util-linux "setarch, to run TSan without ASLR (tsan)"
	fi
	if has_variant fuzz; then
		# Debian's clang runtime package carries clang's major version
		local ver=14
		if have clang; then
			ver=$(clang --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p')
			ver=${ver:-14}
		else
			need clang "the libFuzzer build (fuzz)"
		fi
		if ! have clang || ! links clang -fsanitize=fuzzer,address; then
			need "libclang-rt-$ver-dev" "clang's libFuzzer and ASan runtimes (fuzz)"
		fi
	fi
	if has_variant package; then
		have pkg-config || need pkg-config "the packaging test's pkg-config users (package)"
		have man || need man-db "the packaging test's man --warnings (package)"
		{ have readelf && have nm; } || need binutils "the packaging test's readelf and nm (package)"
		if [ "${USLAB_PKG_SKIP_RUST:-0}" != 1 ] && ! have cargo && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
			need "cargo rustc" "the packaging test's Rust crates (package; or rustup)"
		fi
	fi
}

check
if [ ${#pkgs[@]} -gt 0 ]; then
	if [ "$(id -u)" = 0 ] && have apt-get && [ "${USLAB_TEST_INSTALL:-1}" != 0 ]; then
		echo "setup: installing ${pkgs[*]}"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
		check
		if [ ${#pkgs[@]} -gt 0 ]; then
			echo "setup: still missing after apt-get install:" >&2
			printf '  %s\n' "${why[@]}" >&2
			exit 2
		fi
	else
		sudo=""
		[ "$(id -u)" = 0 ] || sudo="sudo "
		{
			echo "scripts/test.sh: missing for the variants ${variants[*]}:"
			printf '  %s\n' "${why[@]}"
			if [ "$(id -u)" != 0 ]; then
				echo "Not root, so nothing was installed. Install them (Debian 12 names), then run again:"
			elif ! have apt-get; then
				echo "No apt-get here; the Debian 12 packages are:"
			else
				echo "USLAB_TEST_INSTALL=0, so nothing was installed. Install them, then run again:"
			fi
			echo "  ${sudo}apt-get install ${pkgs[*]}"
			echo "(or run only some variants, e.g.: bash scripts/test.sh normal asan)"
		} >&2
		exit 2
	fi
fi

# clippy: rustup's component where rustup exists (Debian's cargo has none;
# the packaging test then skips that step and says so)
if has_variant package && [ "${USLAB_PKG_SKIP_RUST:-0}" != 1 ]; then
	if ! have cargo && [ -x "$HOME/.cargo/bin/cargo" ]; then
		export PATH=$HOME/.cargo/bin:$PATH
	fi
	if ! cargo clippy --version >/dev/null 2>&1 && have rustup; then
		rustup component add clippy >/dev/null 2>&1 || echo "setup: could not add clippy (rustup component add clippy)" >&2
	fi
fi
exit 0
