#!/usr/bin/env bash
# The packaging test: uslab as other projects get it.
#
#   tests/packaging/run.sh [build-dir]        (default: build-pkg beside CMakeLists.txt)
#
#  1. configure (prefix <build-dir>/prefix-configured), build, and install
#     uslab into <build-dir>/prefix with cmake --install --prefix, as the
#     README does (-DBUILD_TESTING=OFF, no benchmarks): the steps below
#     check that tree, so nothing in it may depend on the configure-time
#     prefix;
#  2. the installed tree: files, SONAMEs and symlinks, one version everywhere
#     (header, pkg-config, CMake package, crates);
#  3. exports: nm -D of libuslab.so shows uslab_* only, and every function of
#     uslab.h; libuslab-malloc.so adds the libc and C++ names, every one of
#     src/override*'s; no libstdc++ dependency;
#  4. man pages: each page through man --warnings (no output allowed), link
#     pages resolve, every function of uslab.h has a page;
#  5. uslab-run: preloads the library, --stats, --debug, exit status;
#  6. the installed examples, built from the prefix with pkg-config (make
#     PKG_CONFIG_PATH=...; also a -static link) and with find_package
#     (shared and static targets); each runs; ldd shows libuslab.so.0 /
#     libuslab-malloc.so.0 from the prefix; find_package's version checks;
#     pkg-config from every way of installing: the configure-time prefix
#     (plain cmake --install), cmake --install --prefix, DESTDIR staging;
#     programs built through each tree's uslab.pc and uslab-malloc.pc run
#     on that tree's libraries, and no installed file names another tree;
#  7. a project that embeds uslab with add_subdirectory, and one with
#     FetchContent from a local source tarball: they build and run the
#     examples, and embedded uslab builds no tests, benchmarks or tools and
#     installs nothing;
#  8. the Rust crates (bindings/rust): cargo test, cargo clippy -D warnings
#     (skipped, with a message, where clippy is not installed), cargo
#     package (bindings/rust/package.sh).
#
# A step that cannot run prints a "SKIPPED: why" line (scripts/test.sh
# lists them at its end).
#
# Needs cmake, a C and C++ compiler, make, pkg-config, man-db, binutils, and
# cargo (rustup's in ~/.cargo/bin is used when cargo is not on PATH);
# crates.io must be reachable for the cc crate. USLAB_PKG_SKIP_RUST=1 skips
# step 8. Builds are incremental: a second run reuses the build directory.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build-pkg}
mkdir -p "$BUILD"
BUILD=$(cd "$BUILD" && pwd)
PREFIX=$BUILD/prefix
CONF_PREFIX=$BUILD/prefix-configured   # CMAKE_INSTALL_PREFIX, installed into by step 6 only
JOBS=${JOBS:-2}
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
T0=$SECONDS

fail() { echo "packaging test: FAIL: $*" >&2; exit 1; }
step_start=$SECONDS
step() {
	echo "--- [$((SECONDS - T0)) s] $*"
	step_start=$SECONDS
}
# has PATTERN: stdin matches. Unlike grep -q it reads all its input, so the
# writer never dies of SIGPIPE (which pipefail would count as a failure).
has() { grep "$@" >/dev/null; }
# quiet: run a command, show its output only if it fails
quiet() {
	local log
	log=$(mktemp)
	if ! "$@" >"$log" 2>&1; then
		cat "$log" >&2
		rm -f "$log"
		fail "command failed: $*"
	fi
	rm -f "$log"
}

# ---- 1. build and install ---------------------------------------------------
step "build and install into $PREFIX (cmake --install --prefix)"
quiet cmake -S "$ROOT" -B "$BUILD/lib" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DBUILD_TESTING=OFF -DUSLAB_BUILD_BENCH=OFF -DCMAKE_INSTALL_PREFIX="$CONF_PREFIX"
quiet cmake --build "$BUILD/lib" -j "$JOBS"
rm -rf "$PREFIX"
quiet cmake --install "$BUILD/lib" --prefix "$PREFIX"

# ---- 2. the installed tree ----------------------------------------------------
step "installed files, SONAMEs, versions"
so=$(find "$PREFIX" -name libuslab.so.0 -print -quit)
[ -n "$so" ] || fail "no libuslab.so.0 installed"
LIBDIR=$(dirname "$so")
MANDIR=$PREFIX/share/man
hdr_version() { sed -n "s/^#define USLAB_VERSION_$1 \\+\\([0-9]\\+\\)\$/\\1/p" "$ROOT/include/uslab.h"; }
MAJOR=$(hdr_version MAJOR) MINOR=$(hdr_version MINOR) PATCH=$(hdr_version PATCH)
[ -n "$MAJOR" ] && [ -n "$MINOR" ] && [ -n "$PATCH" ] || fail "no USLAB_VERSION_MAJOR/MINOR/PATCH in uslab.h"
VERSION=$MAJOR.$MINOR.$PATCH
for f in include/uslab.h bin/uslabinfo bin/uslab-run share/man/man3/uslab.3 share/man/man3/uslab-malloc.3 \
	share/man/man1/uslabinfo.1 share/man/man1/uslab-run.1 share/man/man7/uslab-options.7 \
	share/doc/uslab/examples/CMakeLists.txt share/doc/uslab/examples/Makefile; do
	[ -e "$PREFIX/$f" ] || fail "not installed: $f"
done
for lib in uslab uslab-malloc; do
	for f in lib$lib.a lib$lib.so lib$lib.so.$MAJOR lib$lib.so.$VERSION "pkgconfig/$lib.pc"; do
		[ -e "$LIBDIR/$f" ] || fail "not installed: $LIBDIR/$f"
	done
	[ "$(readlink "$LIBDIR/lib$lib.so")" = "lib$lib.so.$MAJOR" ] || fail "lib$lib.so is not a link to lib$lib.so.$MAJOR"
	[ "$(readlink "$LIBDIR/lib$lib.so.$MAJOR")" = "lib$lib.so.$VERSION" ] || fail "lib$lib.so.$MAJOR is not a link to lib$lib.so.$VERSION"
	soname=$(readelf -dW "$LIBDIR/lib$lib.so.$VERSION" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
	[ "$soname" = "lib$lib.so.$MAJOR" ] || fail "SONAME of lib$lib.so is '$soname', not lib$lib.so.$MAJOR"
done
for f in uslabConfig.cmake uslabConfigVersion.cmake uslabTargets.cmake; do
	[ -e "$LIBDIR/cmake/uslab/$f" ] || fail "not installed: $LIBDIR/cmake/uslab/$f"
done
export PKG_CONFIG_PATH=$LIBDIR/pkgconfig
for pc in uslab uslab-malloc; do
	v=$(pkg-config --modversion "$pc") || fail "pkg-config cannot read $pc.pc"
	[ "$v" = "$VERSION" ] || fail "pkg-config --modversion $pc: $v, uslab.h says $VERSION"
done
# pc ARGS: pkg-config's output with the -I and -L directories resolved
# (the .pc files find the prefix from their own place: ${pcfiledir}/../..)
pc() {
	local w out=""
	for w in $(pkg-config "$@"); do
		case $w in
		-I* | -L*) w=${w:0:2}$(realpath -m "${w:2}") ;;
		esac
		out="$out${out:+ }$w"
	done
	echo "$out"
}
[ "$(pc --libs uslab)" = "-L$LIBDIR -luslab" ] || fail "pkg-config --libs uslab: $(pc --libs uslab)"
[ "$(pc --libs uslab-malloc)" = "-L$LIBDIR -luslab-malloc" ] || fail "pkg-config --libs uslab-malloc: $(pc --libs uslab-malloc)"
[ "$(pc --cflags uslab)" = "-I$PREFIX/include" ] || fail "pkg-config --cflags uslab: $(pc --cflags uslab)"
[ "$(realpath -m "$(pkg-config --variable=libdir uslab)")" = "$LIBDIR" ] \
	|| fail "pkg-config --variable=libdir uslab: $(pkg-config --variable=libdir uslab)"
pkg-config --static --libs uslab | has -- -pthread || fail "pkg-config --static --libs uslab lacks -pthread"
grep -q "PACKAGE_VERSION \"$VERSION\"" "$LIBDIR/cmake/uslab/uslabConfigVersion.cmake" \
	|| fail "uslabConfigVersion.cmake is not $VERSION"
for toml in "$ROOT"/bindings/rust/uslab-sys/Cargo.toml "$ROOT"/bindings/rust/uslab/Cargo.toml; do
	v=$(sed -n '/^version = "/ { s/^version = "\(.*\)"/\1/p; q }' "$toml")
	[ "$v" = "$VERSION" ] || fail "${toml#$ROOT/} has version $v, uslab.h $VERSION"
done
echo "uslab $VERSION in $PREFIX (libraries in ${LIBDIR#$PREFIX/}); pkg-config --libs uslab: $(pc --libs uslab)"

# ---- 3. exported symbols ------------------------------------------------------
step "exported symbols (nm -D)"
# Every function uslab.h declares.
api=$(sed -n 's/^USLAB_API [^(]*[ *]\(uslab_[a-z0-9_]*\)(.*/\1/p' "$ROOT/include/uslab.h" | sort -u)
[ "$(echo "$api" | wc -l)" -gt 30 ] || fail "could not read the API list from uslab.h"
exports() { nm -D --defined-only "$1" | awk '{print $NF}' | sed 's/@.*//' | sort -u; }
so=$LIBDIR/libuslab.so.$VERSION
extra=$(exports "$so" | grep -v '^uslab_' || true)
[ -z "$extra" ] || fail "libuslab.so exports more than uslab_*: $(echo $extra)"
missing=$(comm -23 <(echo "$api") <(exports "$so"))
[ -z "$missing" ] || fail "libuslab.so does not export: $(echo $missing)"
echo "libuslab.so: $(exports "$so" | wc -l) symbols, all uslab_*, the whole API"

so=$LIBDIR/libuslab-malloc.so.$VERSION
libc_names='malloc|free|calloc|realloc|reallocarray|cfree|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|free_sized|free_aligned_sized|malloc_trim|malloc_stats|malloc_info|mallinfo|mallinfo2|mallopt|__libc_[a-z_]+|__posix_memalign'
extra=$(exports "$so" | grep -v -E "^(uslab_.*|_Z(nw|na|dl|da).*|($libc_names))$" || true)
[ -z "$extra" ] || fail "libuslab-malloc.so exports names that are neither uslab_* nor libc/C++ allocation names: $(echo $extra)"
missing=$(comm -23 <(echo "$api") <(exports "$so"))
[ -z "$missing" ] || fail "libuslab-malloc.so does not export: $(echo $missing)"
# Every name src/override*.c* gives default visibility must get out (the
# version script src/uslab-malloc.map lists them).
override_syms=$(readelf -sW "$LIBDIR/libuslab-malloc.a" | awk '
	/^File: / { f = ($0 ~ /override/) }
	f && ($5 == "GLOBAL" || $5 == "WEAK") && $6 == "DEFAULT" && $7 != "UND" { print $8 }' | sed 's/@.*//' | sort -u)
[ "$(echo "$override_syms" | grep -c -E '^(malloc|free|_Znwm)$')" = 3 ] || fail "could not read the override objects' symbols"
missing=$(comm -23 <(echo "$override_syms") <(exports "$so"))
[ -z "$missing" ] || fail "libuslab-malloc.so hides names src/override* defines (add them to src/uslab-malloc.map): $(echo $missing)"
! readelf -dW "$so" | has 'NEEDED.*libstdc++' || fail "libuslab-malloc.so depends on libstdc++"
echo "libuslab-malloc.so: $(exports "$so" | wc -l) symbols: the API, $(echo "$override_syms" | wc -l) libc and C++ names"

# ---- 4. man pages -----------------------------------------------------------------
step "man pages (man --warnings)"
command -v man >/dev/null || fail "man not found (Debian: apt-get install man-db)"
pages=0 links=0
for page in "$MANDIR"/man*/*; do
	if head -n 1 "$page" | has '^\.so '; then
		target=$(head -n 1 "$page" | cut -d' ' -f2)
		[ -f "$MANDIR/$target" ] || fail "${page#$MANDIR/} links to missing $target"
		links=$((links + 1))
		continue
	fi
	warnings=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$page" 2>&1 >/dev/null) \
		|| fail "man -l ${page#$MANDIR/} failed: $warnings"
	[ -z "$warnings" ] || fail "man --warnings ${page#$MANDIR/}:"$'\n'"$warnings"
	pages=$((pages + 1))
done
for fn in $api; do
	[ -e "$MANDIR/man3/$fn.3" ] || fail "no man page for $fn (add it to a page's list in man/CMakeLists.txt)"
done
# man finds a function documented on a family page
MANPATH=$MANDIR man -w uslab_cache_alloc >/dev/null 2>&1 || fail "man -w uslab_cache_alloc finds no page"
out=$(cd "$MANDIR" && LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l man3/uslab_cache_alloc.3 2>&1) \
	|| fail "man3/uslab_cache_alloc.3 does not render"
echo "$out" | has 'uslab_cache_zalloc' || fail "man3/uslab_cache_alloc.3 does not show the cache page"
echo "$pages pages without warnings, $links link pages, every function of uslab.h has one"

# ---- 5. uslab-run -----------------------------------------------------------------
step "uslab-run"
RUN=$PREFIX/bin/uslab-run
"$RUN" --version | has "$VERSION" || fail "uslab-run --version"
[ "$("$RUN" --library)" = "$LIBDIR/libuslab-malloc.so.$MAJOR" ] || fail "uslab-run --library: $("$RUN" --library)"
"$RUN" sh -c 'grep -q libuslab-malloc /proc/$$/maps' || fail "uslab-run did not preload libuslab-malloc.so"
set +e
err=$("$RUN" --stats bash -c 'exit 3' 2>&1 >/dev/null)
rc=$?
set -e
[ $rc = 3 ] || fail "uslab-run --stats: exit status $rc, not the command's 3"
echo "$err" | has 'kmalloc-' || fail "uslab-run --stats printed no statistics: $err"
err=$("$RUN" --debug=FZPU -o slab_nomerge sh -c 'echo "$USLAB_OPTIONS"' 2>&1) || fail "uslab-run --debug: $err"
[ "$err" = "slub_debug=FZPU slab_nomerge" ] || fail "uslab-run --debug -o: USLAB_OPTIONS is '$err'"
if "$RUN" --no-such-option true 2>/dev/null; then fail "uslab-run accepted --no-such-option"; fi
echo "preloads $("$RUN" --library), --stats, --debug, -o, exit status"

# ---- 6. the examples, from the installed package ------------------------------
step "examples with pkg-config (make)"
ldd_has() {   # program library: the program loads library from the prefix
	ldd "$1" | has "$2 => $LIBDIR/$2" || { ldd "$1" >&2; fail "ldd $1 does not show $2 from $LIBDIR"; }
}
run_examples() {   # dir
	"$1/conn_pool" 2 20 >/dev/null || fail "$1/conn_pool failed"
	"$1/new_delete" >/dev/null || fail "$1/new_delete failed"
	"$1/self_stats" >/dev/null || fail "$1/self_stats failed"
}
rm -rf "$BUILD/ex-make"
cp -r "$PREFIX/share/doc/uslab/examples" "$BUILD/ex-make"
# as its usage line says: PKG_CONFIG_PATH on make's command line only
quiet env -u PKG_CONFIG_PATH make -C "$BUILD/ex-make" PKG_CONFIG_PATH="$LIBDIR/pkgconfig" \
	LDFLAGS="-Wl,-rpath,$LIBDIR" all
run_examples "$BUILD/ex-make"
ldd_has "$BUILD/ex-make/conn_pool" libuslab.so.0
ldd_has "$BUILD/ex-make/self_stats" libuslab.so.0
ldd_has "$BUILD/ex-make/new_delete" libuslab-malloc.so.0
# shellcheck disable=SC2046
quiet cc -static -O2 -o "$BUILD/ex-make/self_stats_static" "$BUILD/ex-make/self_stats.c" \
	$(pkg-config --cflags --static --libs uslab)
"$BUILD/ex-make/self_stats_static" >/dev/null || fail "self_stats linked -static failed"
echo "ldd conn_pool: $(ldd "$BUILD/ex-make/conn_pool" | grep libuslab | sed 's/^[[:space:]]*//;s/ (0x.*//')"

step "examples with find_package (shared and static targets)"
for kind in shared static; do
	dir=$BUILD/ex-cmake-$kind
	quiet cmake -S "$PREFIX/share/doc/uslab/examples" -B "$dir" "${GEN[@]}" -DCMAKE_PREFIX_PATH="$PREFIX" \
		-DUSLAB_EXAMPLES_STATIC=$([ $kind = static ] && echo ON || echo OFF)
	quiet cmake --build "$dir" -j "$JOBS"
	run_examples "$dir"
done
ldd_has "$BUILD/ex-cmake-shared/conn_pool" libuslab.so.0
ldd_has "$BUILD/ex-cmake-shared/new_delete" libuslab-malloc.so.0
! ldd "$BUILD/ex-cmake-static/conn_pool" | has libuslab || fail "uslab::uslab_static linked libuslab.so"
! ldd "$BUILD/ex-cmake-static/new_delete" | has libuslab || fail "uslab::malloc_static linked libuslab-malloc.so"
# find_package's version check: SameMajorVersion
vc() { cmake -S "$ROOT/tests/packaging/version_check" -B "$BUILD/version-check" -DCMAKE_PREFIX_PATH="$PREFIX" -DUSLAB_WANT="$1" >/dev/null 2>&1; }
vc "$MAJOR.$MINOR" || fail "find_package(uslab $MAJOR.$MINOR) failed"
vc "$MAJOR.$((MINOR + 1))" && fail "find_package(uslab $MAJOR.$((MINOR + 1))) accepted $VERSION"
vc "$((MAJOR + 1)).0" && fail "find_package(uslab $((MAJOR + 1)).0) accepted $VERSION"
echo "both built and ran; find_package accepts $MAJOR.$MINOR, refuses $MAJOR.$((MINOR + 1)) and $((MAJOR + 1)).0"

step "pkg-config from each way of installing: configure-time prefix, --prefix, DESTDIR"
# pc_tree LABEL TREE: TREE is an installed prefix (as it is on disk); a C
# program through uslab.pc and a C++ one through uslab-malloc.pc build with
# the README's command line (and the rpath it gives for a prefix of one's
# own), run, and load that tree's libraries; no installed text file names
# a path of this build directory (so none depends on where it was
# installed), but uslab-run, whose fallback after its own directory is the
# configure-time prefix, by design.
pc_tree() {
	local label=$1 tree=$2 dir=$BUILD/pc-$1 lib libdir pkgdir flags rpath leaked p loaded
	lib=$(find "$tree" -name libuslab.so.0 -print -quit)
	[ -n "$lib" ] || fail "$label: no libuslab.so.0 in $tree"
	libdir=$(dirname "$lib")
	pkgdir=$libdir/pkgconfig
	rm -rf "$dir"
	mkdir -p "$dir"
	[ "$(PKG_CONFIG_PATH=$pkgdir pc --cflags uslab)" = "-I$tree/include" ] \
		|| fail "$label: pkg-config --cflags uslab: $(PKG_CONFIG_PATH=$pkgdir pc --cflags uslab), not -I$tree/include"
	flags=$(PKG_CONFIG_PATH=$pkgdir pkg-config --cflags --libs uslab)
	rpath=$(PKG_CONFIG_PATH=$pkgdir pkg-config --variable=libdir uslab)
	# shellcheck disable=SC2086
	quiet cc -O2 -o "$dir/self_stats" "$tree/share/doc/uslab/examples/self_stats.c" $flags -Wl,-rpath,"$rpath"
	flags=$(PKG_CONFIG_PATH=$pkgdir pkg-config --cflags --libs uslab-malloc)
	# shellcheck disable=SC2086
	quiet c++ -std=c++17 -O2 -o "$dir/new_delete" "$tree/share/doc/uslab/examples/new_delete.cc" $flags -Wl,-rpath,"$rpath"
	"$dir/self_stats" >/dev/null || fail "$label: self_stats (pkg-config uslab) failed"
	"$dir/new_delete" >/dev/null || fail "$label: new_delete (pkg-config uslab-malloc) failed"
	for p in self_stats:libuslab.so.0 new_delete:libuslab-malloc.so.0; do
		loaded=$(ldd "$dir/${p%%:*}" | awk -v l="${p#*:}" '$1 == l { print $3 }')
		[ -n "$loaded" ] && [ "$(realpath "$loaded")" = "$(realpath "$libdir/${p#*:}")" ] \
			|| fail "$label: ${p%%:*} loads '${loaded}', not ${p#*:} from $libdir"
	done
	leaked=$(grep -rlI -e "$BUILD/" "$tree" | grep -v '/bin/uslab-run$' || true)
	[ -z "$leaked" ] || fail "$label: installed files name an absolute path under $BUILD: $leaked"
	echo "$label: $(PKG_CONFIG_PATH=$pkgdir pc --cflags --libs uslab); both programs run on $libdir"
}
rm -rf "$CONF_PREFIX" "$BUILD/destdir"
quiet cmake --install "$BUILD/lib"
DESTDIR=$BUILD/destdir quiet cmake --install "$BUILD/lib" --prefix /usr/local
pc_tree configured "$CONF_PREFIX"
pc_tree prefix "$PREFIX"
pc_tree destdir "$BUILD/destdir/usr/local"

# ---- 7. embedded: add_subdirectory and FetchContent ------------------------------
consumer() {   # name cmake-args...
	local name=$1 dir=$BUILD/consumer-$1
	shift
	quiet cmake -S "$ROOT/tests/packaging/consumer" -B "$dir" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
	quiet cmake --build "$dir" -j "$JOBS"
	run_examples "$dir"
	rm -rf "$dir-inst"
	quiet cmake --install "$dir" --prefix "$dir-inst"
	[ -x "$dir-inst/bin/conn_pool" ] || fail "$name: the consumer's own install rule did not run"
	local leaked
	leaked=$(cd "$dir-inst" && find . -name '*uslab*')
	[ -z "$leaked" ] || fail "$name: embedded uslab installed files: $leaked"
	[ ! -e "$dir/uslab/tests" ] && [ ! -e "$dir/_deps/uslab-build/tests" ] || fail "$name: embedded uslab configured its tests"
}
step "add_subdirectory consumer"
consumer subdir -DUSLAB_CONSUME=subdir -DUSLAB_SOURCE="$ROOT"

step "FetchContent consumer (local source tarball)"
tarball=$BUILD/uslab-$VERSION.tar.gz
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
	# what a release tarball would hold: the tracked and the new files of the
	# working tree, nothing that .gitignore ignores (build trees)
	(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard |
		while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done |
		tar --null -T - --transform "s,^,uslab-$VERSION/," -czf "$tarball")
else
	tar -C "$ROOT" --exclude='./build*' --exclude='./bindings/rust/target' --exclude='./.git' \
		--transform "s,^\.,uslab-$VERSION," -czf "$tarball" .
fi
rm -rf "$BUILD/consumer-fetch"
consumer fetch -DUSLAB_CONSUME=fetch -DUSLAB_URL="$tarball"

# ---- 8. the Rust crates -------------------------------------------------------------
if [ "${USLAB_PKG_SKIP_RUST:-0}" = 1 ]; then
	step "Rust crates"
	echo "SKIPPED: the Rust crates (USLAB_PKG_SKIP_RUST=1)"
else
	step "Rust crates (bindings/rust): cargo test"
	if ! command -v cargo >/dev/null && [ -x "$HOME/.cargo/bin/cargo" ]; then
		export PATH=$HOME/.cargo/bin:$PATH
	fi
	command -v cargo >/dev/null || fail "cargo not found (rustup, or Debian: apt-get install cargo rustc)"
	export CARGO_TARGET_DIR=$BUILD/cargo
	cargo_minor=$(cargo --version | sed -n 's/^cargo 1\.\([0-9]*\)\..*/\1/p')
	if [ "${cargo_minor:-0}" -lt 70 ]; then
		# Cargo before 1.70 (Debian 12 has 1.65) reads crates.io's index as a
		# git clone of a very large repository unless the sparse protocol, an
		# unstable feature there, is turned on; RUSTC_BOOTSTRAP lets a stable
		# cargo use it.
		export CARGO_UNSTABLE_SPARSE_REGISTRY=true RUSTC_BOOTSTRAP=1
	fi
	echo "$(cargo --version), $(rustc --version)"
	log=$BUILD/cargo-test.log
	(cd "$ROOT/bindings/rust" && cargo test --workspace --locked) >"$log" 2>&1 || { cat "$log" >&2; fail "cargo test"; }
	grep -E '^test result' "$log" | awk '{p += $4} END {print p " Rust tests passed (unit, integration, multi-threaded, #[global_allocator], doc)"}'

	step "Rust crates: cargo clippy -- -D warnings"
	if ! cargo clippy --version >/dev/null 2>&1 && command -v rustup >/dev/null; then
		rustup component add clippy >/dev/null 2>&1 || true
	fi
	if cargo clippy --version >/dev/null 2>&1; then
		(cd "$ROOT/bindings/rust" && quiet cargo clippy --workspace --all-targets --locked -- -D warnings)
		echo "clean: $(cargo clippy --version)"
	else
		echo "SKIPPED: cargo clippy is not installed (rustup component add clippy); every other step ran"
	fi

	step "Rust crates: cargo package (bindings/rust/package.sh)"
	quiet "$ROOT/bindings/rust/package.sh" --locked
	ls "$CARGO_TARGET_DIR/package/uslab-sys-$VERSION.crate" "$CARGO_TARGET_DIR/package/uslab-$VERSION.crate" >/dev/null \
		|| fail "cargo package made no .crate files"
	echo "packaged and verified: uslab-sys-$VERSION.crate, uslab-$VERSION.crate"
fi

step "packaging test passed"
