#!/usr/bin/env bash
# bench/realprog.sh: two real programs under each malloc through LD_PRELOAD,
# patterns bench/peers.sh does not have: CPython building, serialising and
# parsing a dict of 300,000 entries (PYTHONMALLOC=malloc: every object from
# malloc; strings, lists and dicts of many sizes, long-lived and temporary)
# and SQLite building a 400,000-row table in memory with an index, then a
# scan and a GROUP BY (its page cache and B-tree nodes).
#
#   bench/realprog.sh [--reps N] [--peers "glibc jemalloc tcmalloc mimalloc uslab uslab+OPTS"] [--no-save]
#
# Wall time and peak RSS (/usr/bin/time), the median of --reps (5) runs,
# interleaved (each repetition runs every program under every allocator);
# ratios to glibc. uslab is build-bench/libuslab-malloc.so (built if
# missing); uslab+OPTS adds OPTS (commas become spaces) to USLAB_OPTIONS.
# Writes bench/results/<date>-realprog.md unless --no-save. Needs python3,
# sqlite3 and /usr/bin/time (Debian: python3 sqlite3 time).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}
reps=5 save=1
peers="glibc jemalloc tcmalloc mimalloc uslab"
while [ $# -gt 0 ]; do
	case $1 in
	--reps) reps=$2; shift ;;
	--peers) peers=$2; shift ;;
	--no-save) save=0 ;;
	-h | --help) sed -n '2,17p' "$0"; exit 0 ;;
	*) echo "realprog.sh: unknown argument '$1'" >&2; exit 2 ;;
	esac
	shift
done
for t in python3 sqlite3 /usr/bin/time; do
	command -v "$t" >/dev/null || { echo "realprog.sh: needs $t" >&2; exit 2; }
done
if [ ! -f "$BUILD/libuslab-malloc.so" ]; then
	GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
	cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
		-DBUILD_TESTING=OFF >/dev/null
	cmake --build "$BUILD" --target uslab_malloc >/dev/null
fi

. "$HERE/peerlibs.sh"   # LIB
LIB[uslab]=$BUILD/libuslab-malloc.so
run_peers=()
for p in $peers; do
	base=${p%%+*}
	[ -n "${LIB[$base]+x}" ] || { echo "realprog.sh: unknown peer '$p'" >&2; exit 2; }
	if [ -n "${LIB[$base]}" ] && [ ! -f "${LIB[$base]}" ]; then
		echo "realprog.sh: $p: ${LIB[$base]} missing, skipped" >&2
		continue
	fi
	run_peers+=("$p")
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cat >"$TMP/py.py" <<'EOF'
import json
d = {}
for i in range(300000):
    d[str(i)] = [i, str(i * 7), {"a": i, "b": [1, 2, 3]}]
s = json.dumps(d)
for _ in range(3):
    e = json.loads(s)
l = sorted(d.keys(), key=lambda k: hash(k))
t = "".join(x for x in l[:200000])
print(len(s), len(t))
EOF
cat >"$TMP/sq.sql" <<'EOF'
create table t(a integer primary key, b text, c real);
with recursive cnt(x) as (select 1 union all select x + 1 from cnt where x < 400000)
  insert into t select x, hex(randomblob(20)), x * 1.5 from cnt;
create index tb on t(b);
select count(*), sum(length(b)) from t where b like '%AB%';
select substr(b, 1, 3), count(*) from t group by substr(b, 1, 3) order by 2 desc limit 3;
EOF
progs=(python sqlite)
# one run: PROG PEER -> "seconds kib"
one() {
	local prog=$1 peer=$2 lib opts=""
	lib=${LIB[${peer%%+*}]}
	case $peer in uslab+?*) opts=$(tr ',' ' ' <<<"${peer#uslab+}") ;; esac
	local cmd
	case $prog in
	python) cmd=(env PYTHONMALLOC=malloc python3 "$TMP/py.py") ;;
	sqlite) cmd=(sh -c "sqlite3 :memory: < '$TMP/sq.sql'") ;;
	esac
	env ${lib:+LD_PRELOAD=$lib} USLAB_OPTIONS="${USLAB_OPTIONS:-}${opts:+ $opts}" \
		/usr/bin/time -o "$TMP/t" -f "%e %M" "${cmd[@]}" >"$TMP/out" 2>"$TMP/err" ||
		{ echo "realprog.sh: $prog under $peer failed:" >&2; cat "$TMP/err" >&2; exit 1; }
	cat "$TMP/t"
}
declare -A T M
for r in $(seq "$reps"); do
	n=${#run_peers[@]}
	for k in $(seq 0 $((n - 1))); do
		peer=${run_peers[$(((k + r) % n))]}
		for prog in "${progs[@]}"; do
			read -r sec kib < <(one "$prog" "$peer")
			T[$prog,$peer]="${T[$prog,$peer]:-} $sec"
			M[$prog,$peer]="${M[$prog,$peer]:-} $kib"
			printf '  rep %d %-7s %-24s %7.2f s %9d KiB\n' "$r" "$prog" "$peer" "$sec" "$kib"
		done
	done
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
out=$TMP/table
{
	printf '| program | allocator | time (s) | x glibc | peak RSS (MiB) | x glibc | all times (s) |\n'
	printf '| --- | --- | --: | --: | --: | --: | --- |\n'
	for prog in "${progs[@]}"; do
		bt="" bm=""
		if [ -n "${T[$prog,glibc]+x}" ]; then
			bt=$(median <<<"${T[$prog,glibc]}"); bm=$(median <<<"${M[$prog,glibc]}")
		fi
		for peer in "${run_peers[@]}"; do
			t=$(median <<<"${T[$prog,$peer]}"); m=$(median <<<"${M[$prog,$peer]}")
			rt=-; rm=-
			[ -n "$bt" ] && rt=$(awk -v a="$t" -v b="$bt" 'BEGIN {printf "%.2f", a / b}')
			[ -n "$bm" ] && rm=$(awk -v a="$m" -v b="$bm" 'BEGIN {printf "%.2f", a / b}')
			printf '| %s | %s | %.2f | %s | %.1f | %s |%s |\n' "$prog" "$peer" "$t" "$rt" \
				"$(awk -v m="$m" 'BEGIN {print m / 1024}')" "$rm" "${T[$prog,$peer]}"
		done
	done
} >"$out"
echo
cat "$out"
if [ "$save" = 1 ]; then
	f=$ROOT/bench/results/$(date -u +%F)-realprog.md
	i=2
	while [ -e "$f" ]; do f=$ROOT/bench/results/$(date -u +%F)-realprog-$i.md; i=$((i + 1)); done
	{
		echo "# bench/realprog.sh $(date -u +%FT%H:%MZ)"
		echo
		echo "Machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(uname -r)."
		echo "uslab: commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown); python3 $(python3 -c 'import sys; print(sys.version.split()[0])'), sqlite3 $(sqlite3 --version | cut -d' ' -f1)."
		echo "Command: bench/realprog.sh --reps $reps --peers \"$peers\"; medians; ratios to glibc."
		echo
		cat "$out"
	} >"$f"
	echo "saved $f"
fi
