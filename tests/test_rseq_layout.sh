#!/usr/bin/env bash
# test_rseq_layout.sh LIB...: the restartable sequences of each library, as
# the assembler and linker laid them out, are what the kernel needs.
#
# Each sequence (src/cpu/rseq_x86_64.h) is described by a struct rseq_cs in
# the __rseq_cs section: start, post_commit_offset (the length up to and
# including the commit store) and abort_ip. The kernel restarts a thread
# preempted anywhere in [start, start + post_commit_offset): so the last
# instruction of that range must be the commit itself (an instruction after
# it, even a NOP of padding, would let a restart commit twice), and the
# four bytes before abort_ip must be the signature (RSEQ_SIG) or the kernel
# kills the process. The assembler may pad code: -Wa,-mbranches-within-
# 32B-boundaries (CMakeLists.txt, for Intel's JCC erratum) inserts NOPs
# before branches and prefixes on instructions, so this checks the built
# libraries, not the source.
#
# Checked per descriptor: start and start + post_commit_offset are
# instruction boundaries in objdump's disassembly, the last instruction of
# the range is a mov to memory (the commit: a store of the word or, in the
# close sequence, of its cleared value), and the signature precedes
# abort_ip. Exits 77 (skipped) off x86-64 or without objdump and readelf,
# 1 on any mismatch, 0 otherwise.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 LIB..." >&2; exit 2; }
command -v objdump >/dev/null && command -v readelf >/dev/null || { echo "SKIPPED: no objdump/readelf"; exit 77; }
[ "$(uname -m)" = x86_64 ] || { echo "SKIPPED: the sequences are x86-64's"; exit 77; }

# hex(s) for awk programs: mawk, Debian's default awk, has no strtonum
AWK_HEX='function hex(s,  i, c, v) { v = 0; s = tolower(s); for (i = 1; i <= length(s); i++) { c = index("0123456789abcdef", substr(s, i, 1)); if (!c) break; v = v * 16 + c - 1 } return v }'

# sections LIB: one line per section, "name type address offset size" (hex),
# whatever width readelf gives the index column ("[ 9]" or "[25]")
sections() {
	readelf -SW "$1" | sed -n 's/^ *\[ *[0-9]*\] *//p'
}

# descriptors LIB: one line per struct rseq_cs of LIB's __rseq_cs section,
# "start post_commit_offset abort_ip" (hex); nothing without the section.
# The records are 32 bytes: version/flags, start_ip, post_commit_offset,
# abort_ip; start_ip and abort_ip come from their R_X86_64_RELATIVE
# relocations, which a RELA linker may leave 0 in the section's bytes.
descriptors() {
	local lib=$1 sec addr size
	sec=$(sections "$lib" | awk '$1 == "__rseq_cs" { print $3, $5 }')
	[ -n "$sec" ] || return 0
	read -r addr size <<<"$sec"
	{
		readelf -rW "$lib" | awk '$3 == "R_X86_64_RELATIVE" { print "R", $1, $4 }'
		objdump -s -j __rseq_cs "$lib" | awk '/^ [0-9a-f]+ / { print "D", $0 }'
	} | awk -v base="$addr" -v size="$size" "$AWK_HEX"'
		function le32(w,  s) { s = substr(w, 7, 2) substr(w, 5, 2) substr(w, 3, 2) substr(w, 1, 2); return hex(s) }
		BEGIN { b = hex(base); n = hex(size) }
		$1 == "R" { rel[hex($2)] = hex($3); next }
		$1 == "D" {
			a = hex($2)
			for (i = 0; i < 4; i++) if (length($(3 + i)) == 8 && $(3 + i) ~ /^[0-9a-f]+$/) word[a + 4 * i] = le32($(3 + i))
		}
		END {
			for (d = b; d < b + n; d += 32) {
				st = (d + 8) in rel ? rel[d + 8] : word[d + 8] + word[d + 12] * 4294967296
				pco = word[d + 16] + word[d + 20] * 4294967296
				ab = (d + 24) in rel ? rel[d + 24] : word[d + 24] + word[d + 28] * 4294967296
				printf "%x %x %x\n", st, pco, ab
			}
		}'
}

# check_lib LIB: 0 if every sequence of LIB is laid out as it must be.
check_lib() {
	local lib=$1 fail=0 desc dis nseq st pco ab end res atstart atend last sig ok
	desc=$(descriptors "$lib")
	if [ -z "$desc" ]; then
		echo "$lib: no __rseq_cs section (the per-CPU backend needs one)"
		return 1
	fi
	dis=$(objdump -d --no-show-raw-insn "$lib" | awk -F'\t' '/^ *[0-9a-f]+:\t/ { a = $1; sub(/^ */, "", a); sub(/:$/, "", a); print a "\t" $2 }')
	nseq=0
	while read -r st pco ab; do
		nseq=$((nseq + 1))
		end=$(printf '%x' $((0x$st + 0x$pco)))
		# the instruction that ends at `end`, and whether start and end are boundaries
		res=$(awk -F'\t' -v st="$st" -v end="$end" "$AWK_HEX"'
			BEGIN { S = hex(st); E = hex(end) }
			{ a = hex($1) }
			prev != "" && a == E { last = prevtxt; atend = 1 }
			a == S { atstart = 1 }
			{ prev = a; prevtxt = $2 }
			END { printf "%d|%d|%s\n", atstart, atend, last }' <<<"$dis")
		IFS='|' read -r atstart atend last <<<"$res"
		sig=$(objdump -s --start-address=$((0x$ab - 4)) --stop-address=$((0x$ab)) "$lib" | awk '/^ [0-9a-f]+ / { s = ""; for (i = 2; i <= NF && length(s) < 8 && $i ~ /^[0-9a-f]+$/; i++) s = s $i; print s; exit }')
		ok=1
		[ "$atstart" = 1 ] || { echo "$lib: sequence at 0x$st: its start is not an instruction boundary"; ok=0; }
		[ "$atend" = 1 ] || { echo "$lib: sequence at 0x$st: its end 0x$end is not an instruction boundary"; ok=0; }
		case $last in
		mov*%*,*\(*\)*) ;;
		*) echo "$lib: sequence at 0x$st: the last instruction before 0x$end is '$last', not the commit store"; ok=0 ;;
		esac
		[ "$sig" = 53300553 ] || { echo "$lib: sequence at 0x$st: 0x$(printf %x $((0x$ab - 4))) holds '$sig', not the signature 0x53053053"; ok=0; }
		[ $ok = 1 ] || fail=1
	done <<<"$desc"
	echo "$lib: $nseq sequences checked"
	return $fail
}

fail=0
for lib in "$@"; do
	readelf -h "$lib" | grep -q 'X86-64' || { echo "SKIPPED: $lib is not x86-64"; exit 77; }
	check_lib "$lib" || fail=1
done

# The check itself must see a bad layout: a copy of the first library whose
# first descriptor ends one byte late (inside or after its commit), and
# whose first abort handler lost a byte of its signature, must fail, with a
# finding for each.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$1" "$tmp/bad.so"
# bump_byte FILE POS: add 1 to the byte at file offset POS
bump_byte() {
	local b
	b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
	printf "$(printf '\\%03o' $(((b + 1) & 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}
read -r cs_addr cs_off < <(sections "$1" | awk '$1 == "__rseq_cs" { print $3, $4 }')
bump_byte "$tmp/bad.so" $((0x$cs_off + 16))   # post_commit_offset (a constant: no relocation)
read -r _ _ ab < <(descriptors "$1")   # the first sequence's abort_ip
if [ -n "${ab:-}" ] && [ "$ab" != 0 ]; then
	read -r tx_addr tx_off < <(sections "$1" | awk -v a=$((0x$ab)) "$AWK_HEX"'
		$1 ~ /^\./ && $2 == "PROGBITS" && hex($3) <= a && a < hex($3) + hex($5) { print $3, $4 }')
	[ -n "${tx_addr:-}" ] && bump_byte "$tmp/bad.so" $((0x$ab - 2 - 0x$tx_addr + 0x$tx_off))   # a signature byte
fi
check_lib "$tmp/bad.so" >"$tmp/out" 2>&1 || true
if grep -q "not the commit store" "$tmp/out" && grep -q "not the signature" "$tmp/out"; then
	echo "control: a copy with its first sequence broken fails:"
	grep "sequence at" "$tmp/out"
else
	echo "the check missed a broken sequence in a copy (its end moved a byte, a signature byte changed):"
	cat "$tmp/out"
	fail=1
fi
exit $fail
