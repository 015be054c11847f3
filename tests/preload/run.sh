#!/usr/bin/env bash
# Real programs through LD_PRELOAD=libuslab-malloc.so, each compared with a
# run on glibc's malloc (docs/testing.md row 56):
#
#   python  CPython's own test suite (23 modules: threads, containers,
#           strings, regular expressions, I/O, pickling) with
#           PYTHONMALLOC=malloc; every module must pass, or fail on glibc
#           too (glibc's run is made only then, and the pass sets must be
#           the same; a failed case runs once more, regrtest -w, on each
#           side: some of CPython's tests have time limits a loaded
#           machine misses).
#   sqlite  sqlite3 builds a database of 20,000 generated rows (indexes,
#           joins, window functions, updates, deletes, VACUUM, integrity
#           check); the output must be identical.
#   git     git init/add/commit/log/gc/fsck on a generated repository of
#           400 files and 30 commits (fixed author and dates); identical
#           output, so identical object ids.
#   interpose  a small C program (getline of varied line lengths, fork, a
#           thread), as glibc's tst-interpose; identical output.
#   kfence  8 allocation-heavy CPython test modules under KFENCE sampling
#           (kfence=1: every allocation while the pool has room; then
#           kfence: the default rate; added to the caller's USLAB_OPTIONS,
#           skipped under slub_debug, whose caches are never sampled), each
#           passing as the python part's; no report may appear (25 s).
#
#   tests/preload/run.sh LIBUSLAB_MALLOC_SO [python sqlite git interpose ...]
#
# A part whose program is missing is skipped with a "skip PART: why" line
# (scripts/test.sh installs python3 + libpython3.11-testsuite, sqlite3 and
# git first). USLAB_PRELOAD_PARTS (space-separated) narrows the parts: the
# default list, or the parts given, less those not in it (each skipped with
# its line). Any "uslab:" line on stderr fails the part. Exit status: 0 when
# every part that ran matched and at least one ran, 1 when one did not
# match, 77 when every part was skipped (CTest runs one part per test with
# SKIP_RETURN_CODE 77, so that a skip shows in its summary).
set -uo pipefail
LIB=${1:?usage: run.sh path/to/libuslab-malloc.so [parts...]}
shift
LIB=$(readlink -f "$LIB")
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(interpose sqlite git python kfence)
PY=/usr/bin/python3   # Debian's: its test package is libpython3.X-testsuite
WORK=$(mktemp -d /tmp/uslab-preload.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail=0
ran=0       # parts that ran (skip returns before any run_both)

say() { printf '%s\n' "$*"; }
bad() { say "FAIL $*"; fail=1; }

# run_both NAME CMD...: run CMD under glibc (WORK/NAME.glibc.*) and under
# uslab (WORK/NAME.uslab.*), stdout and stderr apart; sets rc_glibc/rc_uslab.
# With USLAB_PRELOAD_BASELINE=DIR, glibc's results are kept in DIR, keyed
# by the command line, and reused by later runs (scripts/test.sh runs this
# test in several variants; glibc's side does not change between them).
run_both() {
	local name=$1
	shift
	glibc_start "$name" "$@"
	run_uslab "$name" "$@"
	glibc_finish "$name"
}

# glibc_start NAME CMD...: glibc's side of run_both: from the cache, or
# started in the background beside uslab's (each in its own directory, its
# own output files; the two do not share state): most of this test's time
# is CPython's and git's, and on 2 cores the side by side run halves it.
# glibc_finish NAME waits for it, sets rc_glibc and fills the cache.
glibc_start() {
	local name=$1
	shift
	local t0=$SECONDS key
	g_cache="" g_pid="" g_time=""
	if [ -n "${USLAB_PRELOAD_BASELINE:-}" ]; then
		# the command line with this run's temporary directory named WORK,
		# and the scripts and inputs written into it, so that the key is
		# the same from run to run and changes with what is run
		key=$( { printf '%s\n' "$name" "$@" | sed "s|$WORK|WORK|g"; cat "$WORK/$name".sh "$WORK/$name".sql "$WORK/$name".c 2>/dev/null; } |
			cksum | cut -d' ' -f1)
		g_cache=$USLAB_PRELOAD_BASELINE/$name.$key
	fi
	if [ -n "$g_cache" ] && [ -f "$g_cache.rc" ]; then
		cp "$g_cache.out" "$WORK/$name.glibc.out"
		cp "$g_cache.err" "$WORK/$name.glibc.err"
		rc_glibc=$(cat "$g_cache.rc")
		g_time="cached"
	else
		(cd "$WORK/$name.glibc.d" && "$@" >"$WORK/$name.glibc.out" 2>"$WORK/$name.glibc.err"; rc=$?
		 echo $((SECONDS - t0)) >"$WORK/$name.glibc.time"; exit $rc) &
		g_pid=$!
	fi
}

glibc_finish() {
	local name=$1
	if [ -n "$g_pid" ]; then
		rc_glibc=0
		wait "$g_pid" || rc_glibc=$?
		g_time="$(cat "$WORK/$name.glibc.time") s"
		if [ -n "$g_cache" ] && mkdir -p "$USLAB_PRELOAD_BASELINE"; then
			cp "$WORK/$name.glibc.out" "$g_cache.out"
			cp "$WORK/$name.glibc.err" "$g_cache.err"
			echo "$rc_glibc" >"$g_cache.rc"
		fi
	fi
	say "  $name: glibc rc $rc_glibc ($g_time)"
}

# run_uslab NAME CMD...: CMD under uslab (WORK/NAME.uslab.*); sets rc_uslab.
# Any "uslab:" line on its stderr fails the part.
run_uslab() {
	local name=$1
	shift
	local t0=$SECONDS
	(cd "$WORK/$name.uslab.d" && LD_PRELOAD="$LIB" "$@") >"$WORK/$name.uslab.out" 2>"$WORK/$name.uslab.err"
	rc_uslab=$?
	ran=$((ran + 1))
	say "  $name: uslab rc $rc_uslab ($((SECONDS - t0)) s)"
	if grep -q "uslab:" "$WORK/$name.uslab.err"; then
		bad "$name: allocator messages:"
		grep "uslab:" "$WORK/$name.uslab.err" | head -20
	fi
}

prepare() { rm -rf "$WORK/$1.glibc.d" "$WORK/$1.uslab.d"; mkdir -p "$WORK/$1.glibc.d" "$WORK/$1.uslab.d"; }

same_output() {
	local name=$1
	if [ "$rc_glibc" != 0 ]; then
		bad "$name: fails under glibc already (rc $rc_glibc):"
		tail -5 "$WORK/$name.glibc.err"
	elif [ "$rc_glibc" != "$rc_uslab" ]; then
		bad "$name: exit status differs (glibc $rc_glibc, uslab $rc_uslab)"
		tail -5 "$WORK/$name.uslab.err"
	elif ! cmp -s "$WORK/$name.glibc.out" "$WORK/$name.uslab.out"; then
		bad "$name: output differs from glibc's:"
		diff "$WORK/$name.glibc.out" "$WORK/$name.uslab.out" | head -20
	else
		say "ok   $name: same output as glibc ($(wc -l <"$WORK/$name.uslab.out") lines)"
	fi
}

# ---- sqlite ------------------------------------------------------------------
part_sqlite() {
	command -v sqlite3 >/dev/null || { say "skip sqlite: sqlite3 not installed"; return; }
	cat >"$WORK/sqlite.sql" <<'EOF'
PRAGMA page_size = 4096;
PRAGMA cache_size = -8000;
CREATE TABLE item(id INTEGER PRIMARY KEY, name TEXT NOT NULL, grp INTEGER, price REAL, note TEXT);
CREATE TABLE grp(id INTEGER PRIMARY KEY, label TEXT);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)
INSERT INTO item SELECT x, 'item-' || x || '-' || substr('abcdefghijklmnopqrstuvwxyz', 1 + x % 26, 1 + x % 7),
       x % 97, round((x * 7919 % 10007) / 3.0, 2), printf('%.*c', 1 + (x * 31) % 300, 'n') FROM c;
WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 96)
INSERT INTO grp SELECT x, 'group ' || x FROM c;
CREATE INDEX item_grp ON item(grp, price);
CREATE INDEX item_name ON item(name);
SELECT count(*), sum(price), max(length(note)) FROM item;
SELECT g.label, count(*), round(avg(i.price), 3), min(i.name) FROM item i JOIN grp g ON g.id = i.grp
 GROUP BY g.id ORDER BY count(*) DESC, g.id LIMIT 15;
SELECT name, price, rank() OVER (PARTITION BY grp ORDER BY price DESC, id) AS r FROM item
 WHERE grp IN (3, 50) ORDER BY grp, r LIMIT 20;
SELECT count(*) FROM item WHERE name LIKE 'item-1%-c%';
UPDATE item SET note = note || note WHERE id % 3 = 0;
DELETE FROM item WHERE id % 5 = 0;
SELECT count(*), sum(length(note)) FROM item;
SELECT group_concat(id, ',') FROM (SELECT id FROM item ORDER BY price DESC, id LIMIT 40);
CREATE TABLE big AS SELECT a.id * 1000 + b.id AS k, a.name || b.label AS v FROM item a, grp b WHERE a.id < 400;
SELECT count(*), count(DISTINCT v), sum(k) FROM big;
VACUUM;
PRAGMA integrity_check;
SELECT json_group_array(json_object('id', id, 'n', name)) FROM (SELECT * FROM item ORDER BY id LIMIT 5);
EOF
	prepare sqlite
	run_both sqlite sh -c "sqlite3 db.sqlite < '$WORK/sqlite.sql' && sqlite3 db.sqlite 'SELECT count(*) FROM item; PRAGMA quick_check;'"
	same_output sqlite
}

# ---- git ---------------------------------------------------------------------
part_git() {
	command -v git >/dev/null || { say "skip git: git not installed"; return; }
	cat >"$WORK/git.sh" <<'EOF'
set -e
export GIT_AUTHOR_NAME=uslab GIT_AUTHOR_EMAIL=uslab@example.invalid
export GIT_COMMITTER_NAME=uslab GIT_COMMITTER_EMAIL=uslab@example.invalid
export GIT_CONFIG_NOSYSTEM=1 HOME=$PWD
git init -q -b main repo
cd repo
git config gc.auto 0
mkdir -p d0 d1 d2 d3 d4 d5 d6
for c in $(seq 1 30); do
	export GIT_AUTHOR_DATE="2020-01-01T00:$(printf %02d $c):00Z" GIT_COMMITTER_DATE="2020-01-01T00:$(printf %02d $c):00Z"
	# one awk per commit writes its files, of at most ~680 lines (a
	# process per file and files of up to 5,200 lines made this part
	# take 17 s on glibc too, half of it in gc's delta search)
	awk -v c=$c 'BEGIN {
		for (f = 1; f <= (c < 2 ? 400 : 15); f++) {
			n = (c * 131 + f * 17) % 400
			out = "d" (n % 7) "/file" n ".txt"
			for (i = n * c; i <= n * c + f % 50 * 13 + c; i++) print "line " c " " f " " i > out
			close(out)
		}
	}'
	git add -A
	git commit -q -m "commit $c" -m "$(seq 1 $c | tr '\n' ' ')"
done
git log --stat --format='%H %s' | head -200
git log --oneline | wc -l
git rev-list --objects --all | wc -l
git diff HEAD~10 HEAD --stat | tail -3
git gc -q --aggressive
git count-objects -v | grep -E '^(count|in-pack|packs)'
git fsck --full --strict 2>&1
git verify-pack -v .git/objects/pack/*.idx | tail -2 | cut -c1-60
git archive HEAD | sha256sum
EOF
	prepare git
	run_both git bash "$WORK/git.sh"
	same_output git
}

# ---- interposition program -----------------------------------------------------
part_interpose() {
	command -v cc >/dev/null || { say "skip interpose: no C compiler"; return; }
	cat >"$WORK/interpose.c" <<'EOF'
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
static void lines(const char *tag)
{
	static const int len[] = { 0, 45, 80, 2, 8201, 0, 17 };
	char path[] = "/tmp/uslab-interpose-XXXXXX";
	int fd = mkstemp(path);
	FILE *f = fdopen(fd, "w+");
	for (unsigned i = 0; i < 7; i++) {
		for (int j = 0; j < len[i]; j++)
			fputc('a' + j % 26, f);
		fputc('\n', f);
	}
	rewind(f);
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	unsigned long sum = 0;
	while ((n = getline(&line, &cap, f)) >= 0)
		sum = sum * 31 + (unsigned long)n;
	free(line);
	fclose(f);
	unlink(path);
	printf("%s: %lu\n", tag, sum);
}
static void *thr(void *a) { lines("thread"); return NULL; }
int main(void)
{
	void *brk0 = sbrk(0);
	lines("main");
	pthread_t t;
	pthread_create(&t, NULL, thr, NULL);
	pthread_join(t, NULL);
	fflush(stdout);
	pid_t p = fork();
	if (p == 0) {
		lines("child");
		exit(0);
	}
	int st;
	waitpid(p, &st, 0);
	char *s = strdup("strdup"), *a = aligned_alloc(64, 100);
	printf("%s %d %d brk %s\n", s, (int)((unsigned long)a % 64), WEXITSTATUS(st),
	       sbrk(0) == brk0 ? "unchanged" : "moved");
	free(s);
	free(a);
	return 0;
}
EOF
	cc -O1 -pthread -o "$WORK/interpose" "$WORK/interpose.c" || { bad "interpose: does not build"; return; }
	prepare interpose
	run_both interpose "$WORK/interpose"
	# glibc's own malloc may move brk; ours must not.
	sed -i 's/ brk moved/ brk unchanged/' "$WORK/interpose.glibc.out"
	same_output interpose
}

# ---- CPython's test suite ---------------------------------------------------------
PY_TESTS="test_threading test_thread test_queue test_list test_dict test_set test_deque
test_collections test_unicode test_bytes test_string test_re test_fileio test_memoryio
test_file test_bufio test_json test_struct test_array test_heapq test_pickle test_itertools
test_sort"
# (test_weakref, 19 s of CPU, left out on 2026-11-27 to keep the suite
# under 15 minutes on 2 cores: the containers' modules churn the same
# objects, and its time went mostly to threaded copies of weak dicts)
# a shorter list for the suite's slower variants (scripts/test.sh)
PY_TESTS=${USLAB_PRELOAD_PY_TESTS:-$PY_TESTS}

# CPython's own tests have time limits of their own (lock_tests'
# assertTimeout: a 0.1 s wait must end within 1 s), which a loaded machine
# can miss, on either side of the comparison. regrtest -w runs a failed
# test's failed cases once more, and only a second failure counts (its
# final summary): a failure that uslab causes every time still shows; the
# tests that needed the second run are printed.
PY_RERUN=-w

# The "N tests failed/skipped..." lists of a regrtest summary (the last one:
# after -w's re-run), one name a line.
py_summary() {
	local last
	last=$(awk '/^== Tests result/ { n = NR } END { print n + 0 }' "$1")
	awk -v last="$last" 'NR < last { next }
	     /^[0-9]+ tests? (failed|skipped|altered|omitted|failed again|run no tests)/ { sect = $0; sub(/^[0-9]+ tests? /, "", sect); sub(/:.*/, "", sect); next }
	     /^All [0-9]+ tests OK/ { print "all ok"; next }
	     /^[0-9]+ tests? OK/ { print "ok count " $1; next }
	     sect != "" && /^    / { for (i = 1; i <= NF; i++) print sect ": " $i; next }
	     { sect = "" }' "$1" | sort
}

# The tests that -w ran again, on one line.
py_reruns() {
	awk '/^[0-9]+ re-run tests?:/ { f = 1; next } f && /^    / { for (i = 1; i <= NF; i++) printf "%s ", $i; next } { f = 0 }' "$1"
}

# py_compare NAME LABEL CMD...: CMD (a regrtest run) under uslab; glibc's
# side runs only when uslab's did not pass (exit status not 0), and then
# the pass sets must agree: a module that fails on glibc too is not
# uslab's doing. (A run that passes needs no baseline: this saves glibc's
# run of the 23 modules, 75 s of CPU, on every passing suite.)
py_compare() {
	local name=$1 label=$2
	shift 2
	run_uslab "$name" "$@"
	py_summary "$WORK/$name.uslab.out" >"$WORK/$name.uslab.sum"
	local rr
	rr=$(py_reruns "$WORK/$name.uslab.out")
	[ -z "$rr" ] || say "  $label: run again after a failure (-w; the summary has the outcome): uslab: $rr"
	if [ "$rc_uslab" = 0 ]; then
		say "ok   $label: passed ($(tr '\n' ';' <"$WORK/$name.uslab.sum")); glibc's side not needed"
		return
	fi
	glibc_start "$name" "$@"
	glibc_finish "$name"
	py_summary "$WORK/$name.glibc.out" >"$WORK/$name.glibc.sum"
	rr=$(py_reruns "$WORK/$name.glibc.out")
	[ -z "$rr" ] || say "  $label: run again after a failure (-w): glibc: $rr"
	if [ "$rc_glibc" != "$rc_uslab" ] || ! cmp -s "$WORK/$name.glibc.sum" "$WORK/$name.uslab.sum"; then
		bad "$label: pass set differs (glibc rc $rc_glibc, uslab rc $rc_uslab)"
		diff "$WORK/$name.glibc.sum" "$WORK/$name.uslab.sum" | head -20
		tail -30 "$WORK/$name.uslab.out"
	else
		say "ok   $label: same pass set as glibc ($(tr '\n' ';' <"$WORK/$name.uslab.sum"))"
	fi
}

part_python() {
	[ -x "$PY" ] || { say "skip python: $PY not installed"; return; }
	"$PY" -c 'import test.libregrtest, test.test_list' 2>/dev/null ||
		{ say "skip python: CPython's test package is missing (Debian: libpython3.11-testsuite)"; return; }
	prepare python
	# -j0 would use every core; the suite runs one module at a time here.
	py_compare python python env PYTHONMALLOC=malloc "$PY" -m test $PY_RERUN --timeout 600 $PY_TESTS
}

# ---- CPython under KFENCE sampling ----------------------------------------------------
PY_KFENCE_TESTS="test_dict test_list test_re test_collections test_struct test_sort test_json test_unicode"

part_kfence() {
	[ -x "$PY" ] || { say "skip kfence: $PY not installed"; return; }
	"$PY" -c 'import test.libregrtest, test.test_list' 2>/dev/null ||
		{ say "skip kfence: CPython's test package is missing (Debian: libpython3.11-testsuite)"; return; }
	local base=${USLAB_OPTIONS:-}
	case " $base" in
	*" slub_debug"* | *" slab_debug"*) say "skip kfence: USLAB_OPTIONS has slub_debug (debug caches are never sampled)"; return ;;
	esac
	# Sampling is on: one short run that prints its counts (show_stats would
	# upset the modules' own checks of their subprocesses' stderr).
	local counts
	counts=$(cd "$WORK" && USLAB_OPTIONS="${base:+$base }kfence=1 show_stats" LD_PRELOAD="$LIB" "$PY" -c \
		'import json; json.loads(json.dumps([str(i) * 3 for i in range(100000)]))' 2>&1 | grep -o 'KFENCE 1 in 1: .*')
	if [ -z "$counts" ]; then
		bad "kfence: no KFENCE line from show_stats with kfence=1"
	else
		say "  kfence: a json round trip: $counts"
	fi
	local k opts name
	for k in kfence=1 kfence; do
		name=${k/=/}   # kfence1, kfence
		opts="${base:+$base }$k"
		prepare "$name"
		py_compare "$name" "$name (USLAB_OPTIONS=$opts)" \
			env PYTHONMALLOC=malloc USLAB_OPTIONS="$opts" "$PY" -m test $PY_RERUN --timeout 600 $PY_KFENCE_TESTS
	done
}

say "preload: $LIB"
for p in "${parts[@]}"; do
	case $p in
	python | sqlite | git | interpose | kfence)
		if [ -n "${USLAB_PRELOAD_PARTS+set}" ] && [[ " $USLAB_PRELOAD_PARTS " != *" $p "* ]]; then
			say "skip $p: not in USLAB_PRELOAD_PARTS ($USLAB_PRELOAD_PARTS)"
		else
			"part_$p"
		fi ;;
	*) say "unknown part '$p' (python sqlite git interpose kfence)"; exit 2 ;;
	esac
done
if [ $fail != 0 ]; then
	say "preload: FAILED"
	exit 1
elif [ $ran = 0 ]; then
	say "preload: every part skipped (${parts[*]})"
	exit 77
fi
say "preload: all parts that ran match glibc"
exit 0
