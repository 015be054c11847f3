#!/usr/bin/env bash
# Package the Rust crates (uslab-sys, uslab) with `cargo package`, which
# builds and tests-compiles each packaged crate as crates.io would see it.
#
#   bindings/rust/package.sh [cargo package options...]
#
# uslab-sys compiles uslab's C sources, which live at the top of this
# repository, outside the crate. A packaged crate must carry them, so this
# script first copies them into uslab-sys/csrc/ (src/ and its layer
# folders but override*, include/uslab.h), packages, and removes the copy again: in the
# repository, build.rs always builds from ../../../src, the live sources.
# Nothing is published. The working tree is usually shared and dirty, so
# --allow-dirty is passed.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CSRC=$HERE/uslab-sys/csrc

vendor() {
	rm -rf "$CSRC"
	mkdir -p "$CSRC/src" "$CSRC/include"
	cp "$ROOT/include/uslab.h" "$CSRC/include/"
	local f
	for f in "$ROOT"/src/*.h "$ROOT"/src/*/*.c "$ROOT"/src/*/*.h; do
		case ${f##*/} in override*) continue ;; esac
		local rel=${f#"$ROOT"/src/}
		mkdir -p "$CSRC/src/$(dirname "$rel")"
		cp "$f" "$CSRC/src/$rel"
	done
}
trap 'rm -rf "$CSRC"' EXIT
vendor

cd "$HERE"
# build.rs warns when it builds from csrc/ inside the repository (a copy
# left behind); here the copy is meant.
export USLAB_SYS_VENDORING=1
# Cargo 1.89 and later package a workspace whose crates depend on each other
# (uslab on uslab-sys) before either is published: --workspace verifies
# uslab against the freshly packaged uslab-sys. Older cargo looks for
# uslab's uslab-sys on crates.io, where it is not: a [patch] given on the
# command line (--config, Cargo 1.63) points it at ./uslab-sys, which
# builds from the same csrc/ copy the packaged uslab-sys carries.
# Cargo extracts the crates of that temporary registry under
# $CARGO_HOME/registry/src/-HASH/ and never extracts the same name and
# version again: a second run would verify uslab against the first run's
# uslab-sys. Those extractions are ours alone (crates.io's directories are
# named index.crates.io-HASH), so drop them first.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/uslab-sys-* "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/uslab-[0-9]*
# The same for what the last run built from them: a registry crate's build
# is fingerprinted by name, version and registry path, not by content.
T=${CARGO_TARGET_DIR:-$HERE/target}
rm -rf "$T/package" "$T"/debug/.fingerprint/uslab-* "$T"/debug/build/uslab-* "$T"/debug/deps/*uslab*
cargo_minor=$(cargo --version | sed -n 's/^cargo 1\.\([0-9]*\)\..*/\1/p')
if [ "${cargo_minor:-0}" -ge 89 ]; then
	cargo package --workspace --allow-dirty "$@"
else
	cargo package -p uslab-sys --allow-dirty "$@"
	cargo package -p uslab --allow-dirty \
		--config "patch.crates-io.uslab-sys.path=\"$HERE/uslab-sys\"" "$@"
fi
