#!/usr/bin/env bash
# uslabinfo against a live child (issue 6).
#
#   test_uslabinfo.sh USLABINFO TEST_STATS_API
#
# The child (test_stats_api child, USLAB_OPTIONS=export) holds a known heap
# and takes allocation slow paths every few ms. Checks: the numbers uslabinfo
# prints agree with what the child allocated (text and JSON); JSON parses;
# the 2.1 text (library and tool) parses with the kernel's column rules;
# --set changes cpu_partial in the child; -v validates in the child; -s
# shrinks; bad input (no such pid, a pid that exports nothing, a stale file,
# a malformed --set, a file of another user, a process with export on that
# never loaded uslab) gives one line and a non-zero exit, quickly; `run --`
# reports a program after it exits (and says that a program that exported
# nothing must load uslab); show_stats prints at exit; a reader of another user (nobody, when we are root) is
# refused; --cpus shows a cache per CPU (each row's pops and pushes what the
# process itself reads with uslab_cache_cpu_stats, the total row the rows'
# sum), or says in one line why it cannot (parts of threads: cpu_backend=tls,
# the tsan build; another mode; slub_debug). Every wait is bounded.
#
# No verdict depends on how fast the machine runs: calls on the live child
# give the tool --timeout 20 (its default, 2 s, is a user's patience, not a
# bound a loaded machine keeps); waits for the child are polled by time up
# to 30 s; "quickly" for bad input means without waiting for an answer:
# those calls get --timeout 60 and fail if they take 30 s.
set -u
TOOL=$1
API=$2
fail() { echo "FAIL: $*" >&2; cleanup; exit 1; }
pass() { echo "  ok: $*"; }
T0=$(date +%s.%N)
WORK=$(mktemp -d)
CHILD=
QUIET= NOUSLAB=
cleanup() {
	for p in $QUIET $NOUSLAB; do kill "$p" 2>/dev/null; done   # (a failed check must not leave them holding CTest's pipe)
	if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
		exec 3>&- 2>/dev/null
		kill -TERM "$CHILD" 2>/dev/null
		wait "$CHILD" 2>/dev/null
	fi
	rm -rf "$WORK"
}
trap cleanup EXIT
# exit 77: CTest's SKIP_RETURN_CODE for this test (shown as Skipped, not Passed)
command -v python3 >/dev/null || { echo "SKIP: python3 needed"; exit 77; }

# ---- the library's printers, in process ----
"$API" print json >"$WORK/lib.json" || fail "print json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); c={x["name"]:x for x in d["caches"]}; assert c["obs_a"]["active_objects"]==1000, c["obs_a"]; assert c["obs_b"]["active_objects"]==200' "$WORK/lib.json" \
	|| fail "library JSON does not parse or disagrees"
pass "library JSON parses, numbers agree"

# The kernel's column rules for /proc/slabinfo 2.1 (as slabtop and
# procps read it): line 1 the version, line 2 the '#' header, then
# whitespace-separated rows of 16 fields: name, 5 numbers, ':', 'tunables',
# 3 numbers, ':', 'slabdata', 3 numbers.
cat >"$WORK/parse21.py" <<'EOF'
import sys
want = {"obs_a": 1000, "obs_b": 200, "obs_slab": 100}
lines = open(sys.argv[1]).read().split("\n")
assert lines[0] == "slabinfo - version: 2.1", lines[0]
assert lines[1] == ("# name            <active_objs> <num_objs> <objsize> <objperslab> <pagesperslab>"
                    " : tunables <limit> <batchcount> <sharedfactor>"
                    " : slabdata <active_slabs> <num_slabs> <sharedavail>"), lines[1]
seen = {}
for l in lines[2:]:
    if not l:
        continue
    f = l.split()
    assert len(f) == 16, l
    assert f[6] == ":" and f[7] == "tunables" and f[11] == ":" and f[12] == "slabdata", l
    nums = [int(x) for x in f[1:6] + f[8:11] + f[13:16]]
    active, num, objsize, perslab, pages = nums[:5]
    assert active <= num and objsize > 0 and perslab > 0 and pages >= 1, l
    if f[0] == "obs_slab":
        # slab mode, as the kernel's SLAB: its tunables, slabs not on the
        # free list active, the shared array's objects
        assert nums[5:8] == [33, 17, 5] and nums[8] <= nums[9] and nums[10] <= 5 * 17, l
    else:
        # SLUB: no tunables, every slab active
        assert nums[5:8] == [0, 0, 0] and nums[8] == nums[9] and nums[10] == 0, l
    # the row format of cache_show(): "%-17s %6lu %6lu %6u %4u %4d"
    head = "%-17s %6d %6d %6d %4d %4d" % (f[0], active, num, objsize, perslab, pages)
    assert l.startswith(head + " : tunables "), (l, head)
    seen[f[0]] = active
for k, v in want.items():
    assert seen.get(k) == v, (k, seen.get(k))
EOF
"$API" print slabinfo >"$WORK/lib.slabinfo" || fail "print slabinfo"
python3 "$WORK/parse21.py" "$WORK/lib.slabinfo" || fail "library slabinfo 2.1 does not parse"
pass "library /proc/slabinfo 2.1 parses with the kernel's rules"

# ---- the live child ----
mkfifo "$WORK/in"
S0=$SECONDS
USLAB_OPTIONS=export "$API" child <"$WORK/in" >"$WORK/child.out" 2>"$WORK/child.err" &
CHILD=$!
exec 3>"$WORK/in"
for i in $(seq 300); do grep -q READY "$WORK/child.out" 2>/dev/null && break; [ $SECONDS -lt $((S0 + 30)) ] || break; sleep 0.1; done
grep -q READY "$WORK/child.out" || fail "child did not start: $(cat "$WORK/child.err")"
read -r _ PID FILE <"$WORK/child.out"
[ "$PID" = "$CHILD" ] || fail "child pid $PID != $CHILD"
[ "$FILE" != "-" ] && [ -f "$FILE" ] || fail "child exports no file ($FILE)"
MODE=$(stat -c %a "$FILE")
[ "$MODE" = 600 ] || fail "export file mode $MODE, want 600"
pass "child $PID exports $FILE (mode 600)"

# listing
"$TOOL" | grep -E "^ *$PID .* running " >/dev/null || fail "listing does not show $PID as running"
pass "listing shows the child"

# default table: Objects column
"$TOOL" -p "$PID" --timeout 20 >"$WORK/table" 2>"$WORK/table.err" || fail "table: $(cat "$WORK/table.err")"
head -2 "$WORK/table" | grep -q "^Name                   Objects Objsize           Space Slabs/Part/Cpu  O/S O %Fr %Ef Flg$" \
	|| fail "table header: $(head -2 "$WORK/table")"
awk '$1=="obs_a" && $2==1000 && $3==200 {a=1} $1=="obs_b" && $2==200 && $3==64 {b=1} END {exit !(a && b)}' "$WORK/table" \
	|| fail "table numbers disagree: $(cat "$WORK/table")"
pass "table agrees with the child's heap"

# -A activity
"$TOOL" -A -p "$PID" --timeout 20 >"$WORK/act" || fail "-A"
grep -q "^Name                   Objects      Alloc       Free   %Fast" "$WORK/act" || fail "-A header"
awk '$1=="obs_a" && $2==1000 && $3==1000 && $4==0 {a=1} $1=="obs_b" && $3==300 && $4==100 {b=1} END {exit !(a && b)}' "$WORK/act" \
	|| fail "-A numbers: $(cat "$WORK/act")"
# most active first: alloc + free never increases down the list
awk 'NR>2 { t=$3+$4; if (NR>3 && t>last) bad=1; last=t } END {exit bad}' "$WORK/act" || fail "-A order: $(cat "$WORK/act")"
pass "-A agrees (alloc 1000/300, free 0/100), most active first"

# JSON
"$TOOL" -p "$PID" --timeout 20 --json >"$WORK/t.json" || fail "--json"
python3 - "$WORK/t.json" "$PID" <<'EOF' || fail "tool JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["pid"] == int(sys.argv[2]) and d["state"] == "running" and d["fresh"], d
c = {x["name"]: x for x in d["caches"]}
assert c["obs_a"]["active_objects"] == 1000 and c["obs_a"]["allocs"] == 1000 and c["obs_a"]["frees"] == 0
assert c["obs_b"]["active_objects"] == 200 and c["obs_b"]["allocs"] == 300 and c["obs_b"]["frees"] == 100
# the fast paths' shares of the totals
for n in ("obs_a", "obs_b"):
    x = c[n]
    assert 0 <= x["alloc_fast_pct"] <= 100 and 0 <= x["free_fast_pct"] <= 100, x
assert c["obs_a"]["events"]["ALLOC_SLOWPATH"] >= 1
al = {x["name"]: x for x in d["aliases"]}
if "obs_m2" in al:
    assert al["obs_m2"]["alias_of"] == "obs_m1" and c["obs_m1"]["active_objects"] == 20
assert d["process"]["mapped_bytes"] > 0
s = c["obs_slab"]
assert s["cpu_mode"] == 4 and (s["limit"], s["batchcount"], s["sharedfactor"]) == (33, 17, 5), s
assert s["active_objects"] == 100 and s["events"]["ALLOC_BULK"] == 100 and s["events"]["FREE_BULK"] == 50, s
EOF
pass "JSON parses and agrees"

# 2.1 from the tool
"$TOOL" -l -p "$PID" --timeout 20 >"$WORK/tool.slabinfo" || fail "-l"
python3 "$WORK/parse21.py" "$WORK/tool.slabinfo" || fail "tool slabinfo 2.1"
pass "uslabinfo -l parses with the kernel's rules"
# a cache in slab mode shows SLAB's tunables (the export's info version 5),
# as the library's own 2.1 text does; SLUB's caches 0 0 0
grep -E "^obs_slab +100 .* : tunables +33 +17 +5 : slabdata " "$WORK/tool.slabinfo" >/dev/null ||
	fail "-l: obs_slab's tunables: $(grep obs_slab "$WORK/tool.slabinfo")"
grep -E "^obs_a +1000 .* : tunables +0 +0 +0 : slabdata " "$WORK/tool.slabinfo" >/dev/null ||
	fail "-l: obs_a's tunables: $(grep obs_a "$WORK/tool.slabinfo")"
"$TOOL" -r -p "$PID" '^obs_slab$' | grep -q "^Tunables: limit 33  batchcount 17  sharedfactor 5 (slab mode)" ||
	fail "-r: obs_slab's tunables: $("$TOOL" -r -p "$PID" '^obs_slab$' | grep -A1 Tunables)"
pass "a slab-mode cache's tunables (limit 33, batchcount 17, sharedfactor 5) in -l and -r"

# -a, -r, -S, -T
"$TOOL" -a -p "$PID" --timeout 20 >"$WORK/al" || fail "-a"
if grep -q obs_m2 "$WORK/lib.json" && python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d["aliases"] else 1)' "$WORK/lib.json"; then
	grep -q "^obs_m1 .*<- obs_m2" "$WORK/al" || fail "-a: $(cat "$WORK/al")"
fi
"$TOOL" -r -p "$PID" --timeout 20 '^obs_a$' >"$WORK/rep" || fail "-r"
grep -q "^Slabcache: obs_a " "$WORK/rep" && grep -q "ALLOC_SLOWPATH" "$WORK/rep" || fail "-r: $(cat "$WORK/rep")"
# Fastpath + Slowpath (slow paths and bulk calls) = Total: 1000 allocations, 0 frees
awk '$1=="Fastpath" {fa=$2; ff=$3} $1=="Slowpath" {sa=$2; sf=$3} $1=="Total" {ta=$2; tf=$3}
	END {exit !(ta==1000 && tf==0 && fa+sa==ta && ff+sf==tf)}' "$WORK/rep" || fail "-r counters: $(cat "$WORK/rep")"
"$TOOL" -S -p "$PID" --timeout 20 >/dev/null && "$TOOL" -T -p "$PID" --timeout 20 | grep -q "^Slabcache Totals" || fail "-S/-T"
pass "-a, -r, -S, -T"

# --set cpu_partial, seen in the child
"$TOOL" -p "$PID" --timeout 20 --set obs_a:cpu_partial=7 >"$WORK/set" 2>&1 || fail "--set: $(cat "$WORK/set")"
grep -q "obs_a: cpu_partial .* -> 7" "$WORK/set" || fail "--set output: $(cat "$WORK/set")"
"$TOOL" -p "$PID" --timeout 20 --json | python3 -c 'import json,sys; c={x["name"]:x for x in json.load(sys.stdin)["caches"]}; assert c["obs_a"]["cpu_partial"]==7, c["obs_a"]["cpu_partial"]' \
	|| fail "cpu_partial not 7 in the child"
pass "--set obs_a:cpu_partial=7 applied by the child"
"$TOOL" -p "$PID" --timeout 20 --set obs_a:cpu_partial=99999999 >"$WORK/set2" 2>&1 && fail "out of range --set succeeded"
grep -q "out of range" "$WORK/set2" || fail "out of range message: $(cat "$WORK/set2")"
"$TOOL" -p "$PID" --timeout 20 --set no_such_cache:cpu_partial=1 >"$WORK/set3" 2>&1 && fail "--set of a missing cache succeeded"
grep -q "no cache named 'no_such_cache'" "$WORK/set3" || fail "missing cache message: $(cat "$WORK/set3")"
pass "--set out of range / unknown cache: refused by the child, non-zero"

# -v validation in the child, -s shrink
"$TOOL" -v -p "$PID" --timeout 20 >"$WORK/val" 2>&1 || fail "-v: $(cat "$WORK/val")"
grep -Eq "validated [0-9]+ caches: 0 problems" "$WORK/val" || fail "-v output: $(cat "$WORK/val")"
"$TOOL" -v -p "$PID" --timeout 20 '^obs_b$' | grep -q "validated 1 cache: 0 problems" || fail "-v NAME"
"$TOOL" -s -p "$PID" --timeout 20 >"$WORK/shr" 2>&1 || fail "-s: $(cat "$WORK/shr")"
grep -q "shrank" "$WORK/shr" || fail "-s output"
pass "-v validates in the child (0 problems), -s shrinks"

# --watch: it refreshes (two tables) and keeps running; polled, up to 30 s
"$TOOL" -p "$PID" --timeout 20 --watch 0.2 >"$WORK/watch" 2>&1 &
WATCH=$!
S0=$SECONDS
for i in $(seq 300); do
	[ "$(grep -c '^obs_a ' "$WORK/watch")" -ge 2 ] && break
	kill -0 $WATCH 2>/dev/null || break
	[ $SECONDS -lt $((S0 + 30)) ] || break
	sleep 0.1
done
kill -0 $WATCH 2>/dev/null || fail "--watch did not keep running: $(cat "$WORK/watch")"
kill -TERM $WATCH; wait $WATCH 2>/dev/null
[ "$(grep -c '^obs_a ' "$WORK/watch")" -ge 2 ] || fail "--watch output: $(cat "$WORK/watch")"
pass "--watch refreshes"

# ---- bad input: one line, non-zero, without waiting for an answer ----
# The tool gets --timeout 60 and is stopped after 30 s: one that waited for
# the process to answer would be, however fast the machine (a time limit
# on the call itself would fail a loaded machine instead).
bad() {  # bad NAME EXPECTED-REGEX CMD...
	local name=$1 re=$2
	shift 2
	local t0 rc
	t0=$(date +%s%N)
	timeout 30 "$@" --timeout 60 >"$WORK/bad.out" 2>"$WORK/bad.err"
	rc=$?
	[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$name: exit $rc (124: it waited)"
	[ "$(wc -l <"$WORK/bad.err")" -eq 1 ] || fail "$name: not one line: $(cat "$WORK/bad.err")"
	grep -Eq "$re" "$WORK/bad.err" || fail "$name: message: $(cat "$WORK/bad.err")"
	BAD_MS="${BAD_MS:+$BAD_MS, }$(( ($(date +%s%N) - t0) / 1000000 ))"
}
bad "no such pid" "no process with pid" "$TOOL" -p 999999999
sleep 300 & QUIET=$!   # (killed below: long enough for a slow machine)
bad "pid without export" "exports no statistics" "$TOOL" -p $QUIET
USLAB_OPTIONS=export sleep 300 & NOUSLAB=$!
bad "export on, uslab not loaded" "runs with USLAB_OPTIONS=export but has no export file: .*must load uslab" "$TOOL" -p $NOUSLAB
# a file no process holds, of another layout, left by a gone process that had
# the same pid (a killed test of another build): stale, removed, and the
# answer is the one for no file
NUSTALE=/dev/shm/uslab-$NOUSLAB.stats
[ -n "${XDG_RUNTIME_DIR:-}" ] && [ -d "${XDG_RUNTIME_DIR}" ] && [ -O "${XDG_RUNTIME_DIR}" ] && NUSTALE=$XDG_RUNTIME_DIR/uslab-$NOUSLAB.stats
head -c 8192 "$FILE" >"$NUSTALE" && chmod 600 "$NUSTALE"
python3 - "$NUSTALE" <<'EOF'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
struct.pack_into("<I", b, 8, 0xffff)   # version: the uint32 after the magic
open(sys.argv[1], "wb").write(b)
EOF
bad "stale file of another layout" "has no export file \(a stale file .* was removed\): .*must load uslab" "$TOOL" -p $NOUSLAB
[ ! -e "$NUSTALE" ] || fail "stale file of another layout not removed"
kill $NOUSLAB 2>/dev/null; wait $NOUSLAB 2>/dev/null
bad "malformed --set" "expected NAME:KEY=VALUE" "$TOOL" -p "$PID" --set obs_a-cpu_partial
bad "malformed --set value" "VALUE must be a decimal" "$TOOL" -p "$PID" --set obs_a:cpu_partial=x1
bad "unknown --set key" "KEY must be" "$TOOL" -p "$PID" --set obs_a:colour=1
bad "bad pid" "expected a process id" "$TOOL" -p 12abc
# a stale file: a file for a live pid that no exporter holds
STALE=/dev/shm/uslab-$QUIET.stats
[ -n "${XDG_RUNTIME_DIR:-}" ] && [ -d "${XDG_RUNTIME_DIR}" ] && [ -O "${XDG_RUNTIME_DIR}" ] && STALE=$XDG_RUNTIME_DIR/uslab-$QUIET.stats
head -c 8192 "$FILE" >"$STALE" && chmod 600 "$STALE"
python3 - "$STALE" "$QUIET" <<'EOF'
import struct, sys
p, pid = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, "rb").read())
# pid is the int32 after magic(8) + 7 uint32 + state(4)
struct.pack_into("<i", b, 8 + 7 * 4 + 4, pid)
open(p, "wb").write(b)
EOF
bad "stale file" "stale export file" "$TOOL" -p $QUIET
[ ! -e "$STALE" ] || fail "stale file not removed"
# a file with group/other permissions
head -c 8192 "$FILE" >"$STALE" && chmod 644 "$STALE"
bad "loose permissions" "other users" "$TOOL" -p $QUIET
rm -f "$STALE"
kill $QUIET 2>/dev/null; wait $QUIET 2>/dev/null
pass "bad input: one line, non-zero exit, no wait for an answer ($BAD_MS ms)"

# ---- another user ----
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
	NOBODY=$(id -u nobody 2>/dev/null || echo 65534)
	cp "$TOOL" "$WORK/uslabinfo" && chmod 755 "$WORK" "$WORK/uslabinfo"
	timeout 10 setpriv --reuid="$NOBODY" --regid="$NOBODY" --clear-groups "$WORK/uslabinfo" -p "$PID" >"$WORK/nobody.out" 2>"$WORK/nobody.err"
	rc=$?
	[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "nobody: exit $rc: $(cat "$WORK/nobody.out")"
	grep -q "belongs to another user" "$WORK/nobody.err" || fail "nobody: $(cat "$WORK/nobody.err")"
	timeout 10 setpriv --reuid="$NOBODY" --regid="$NOBODY" --clear-groups "$WORK/uslabinfo" -p "$PID" --set obs_a:cpu_partial=1 \
		>/dev/null 2>&1 && fail "nobody could --set"
	# and nobody cannot open the file itself
	timeout 10 setpriv --reuid="$NOBODY" --regid="$NOBODY" --clear-groups cat "$FILE" >/dev/null 2>&1 && fail "nobody can read $FILE"
	pass "a reader of another user (nobody) is refused"
else
	echo "  SKIP: another-user check needs root and setpriv (uid $(id -u))"
fi

# ---- normal exit: the file goes away; show_stats ----
exec 3>&-
S0=$SECONDS
for i in $(seq 300); do kill -0 "$CHILD" 2>/dev/null || break; [ $SECONDS -lt $((S0 + 30)) ] || break; sleep 0.1; done
kill -0 "$CHILD" 2>/dev/null && fail "child did not exit when stdin closed"
wait "$CHILD"; rc=$?
[ $rc -eq 0 ] || fail "child exit $rc: $(cat "$WORK/child.err")"
CHILD=
[ ! -e "$FILE" ] || fail "export file left after exit"
bad "exited pid" "no process with pid" "$TOOL" -p "$PID"
pass "export file removed at exit"

USLAB_OPTIONS=show_stats "$API" print table >/dev/null 2>"$WORK/show" || fail "show_stats run"
grep -q "^Name .*Objects" "$WORK/show" && grep -q "^obs_a " "$WORK/show" || fail "show_stats: $(cat "$WORK/show")"
pass "show_stats prints the table at exit"

# ---- run -- CMD ----
timeout 60 "$TOOL" run --json -- "$API" print table >"$WORK/run.out" 2>"$WORK/run.err" || fail "run: $(cat "$WORK/run.err")"
python3 - "$WORK/run.out" <<'EOF' || fail "run report: $(cat "$WORK/run.out")"
import json, sys
text = open(sys.argv[1]).read()
d = json.loads(text[text.index('{"pid"'):])
assert d["state"] == "exited", d["state"]
c = {x["name"]: x for x in d["caches"]}
assert c["obs_a"]["active_objects"] == 1000 and c["obs_b"]["active_objects"] == 200
EOF
timeout 60 "$TOOL" run -A -- "$API" print table >"$WORK/run2.out" 2>&1 || fail "run -A"
grep -q "^obs_a  *1000  *1000 " "$WORK/run2.out" || fail "run -A: $(cat "$WORK/run2.out")"
timeout 20 "$TOOL" run -- sh -c 'exit 3' >"$WORK/run3.out" 2>&1; rc=$?
[ $rc -eq 3 ] || fail "run: exit status $rc, want 3"
grep -q "exported no statistics: it never initialised uslab. The program must load uslab" "$WORK/run3.out" \
	|| fail "run non-uslab: $(cat "$WORK/run3.out")"
timeout 20 "$TOOL" run -- /nonexistent/cmd >"$WORK/run4.out" 2>&1; rc=$?
[ $rc -eq 127 ] && grep -q "cannot run" "$WORK/run4.out" || fail "run missing cmd: $rc $(cat "$WORK/run4.out")"
pass "run -- CMD: final report after exit (JSON, -A), exit status passed on"

# ---- the counts in every per-CPU mode: uslabinfo shows the totals ----
for mode in classic sheaves home slqb; do
	USLAB_OPTIONS="slub_cpu_mode=$mode" timeout 60 "$TOOL" run --json -- "$API" print table >"$WORK/mode.out" 2>&1 \
		|| fail "run in $mode mode: $(cat "$WORK/mode.out")"
	python3 - "$WORK/mode.out" "$mode" <<'EOF' || fail "$mode mode: $(cat "$WORK/mode.out")"
import json, sys
text = open(sys.argv[1]).read()
d = json.loads(text[text.index('{"pid"'):])
c = {x["name"]: x for x in d["caches"]}
for n, al, fr in (("obs_a", 1000, 0), ("obs_b", 300, 100)):
    x = c[n]
    assert (x["allocs"], x["frees"], x["active_objects"]) == (al, fr, al - fr), (sys.argv[2], x)
    assert 0 <= x["alloc_fast_pct"] <= 100 and 0 <= x["free_fast_pct"] <= 100, (sys.argv[2], x)
EOF
done
pass "allocs/frees 1000/0 and 300/100 in classic, sheaves, home and slqb mode"

# ---- per CPU: --cpus ----
# The child (test_stats_api cpu-child) runs with export added to the
# options this script was given (CTest gives it none: tests/CMakeLists.txt;
# run by hand, USLAB_OPTIONS=slub_debug or a mode shows that case's line),
# and in the tsan build on the thread backend (no rseq there): the check
# follows what the child says of itself.
# One thread pinned to each CPU it may run on uses obs_cpu, one after the
# other; then the child prints what uslab_cache_cpu_stats says of each CPU
# and leaves obs_cpu alone. From then on each part's pops and pushes
# (ALLOC_PCS, FREE_PCS) stay as printed whatever else runs (a decay pass or
# a shrink folds them into the part's counters, never changes them), so the
# tool's rows must match them exactly; the other counters and the objects
# held may move (a decay pass drains an idle part), so of those only the
# rows' agreement with the total row (made in the same pass) is checked.
start_cpu_child() {  # start_cpu_child OPTIONS: CHILD, PID; its lines in $WORK/cpu.out
	rm -f "$WORK/cin" "$WORK/cpu.out"
	mkfifo "$WORK/cin"
	USLAB_OPTIONS="$1" "$API" cpu-child <"$WORK/cin" >"$WORK/cpu.out" 2>"$WORK/cpu.err" &
	CHILD=$!
	exec 3>"$WORK/cin"
	S0=$SECONDS
	for i in $(seq 300); do grep -q READY "$WORK/cpu.out" 2>/dev/null && break; [ $SECONDS -lt $((S0 + 30)) ] || break; sleep 0.1; done
	grep -q READY "$WORK/cpu.out" || fail "cpu-child ($1) did not start: $(cat "$WORK/cpu.err")"
	read -r _ PID _ < <(grep '^READY ' "$WORK/cpu.out")
	[ "$PID" = "$CHILD" ] || fail "cpu-child pid $PID != $CHILD"
}
stop_cpu_child() {
	exec 3>&-
	S0=$SECONDS
	for i in $(seq 300); do kill -0 "$CHILD" 2>/dev/null || break; [ $SECONDS -lt $((S0 + 30)) ] || break; sleep 0.1; done
	wait "$CHILD"; local rc=$?
	[ $rc -eq 0 ] || fail "cpu-child exit $rc: $(cat "$WORK/cpu.err")"
	CHILD=
}
# cpus.py JSON TEXT CHILD-LINES: the tool's answer against the child's own reading
cat >"$WORK/cpus.py" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read().split("\n")
backend = percpu = pinned = None
mine = {}
for l in open(sys.argv[3]).read().split("\n"):
    f = l.split()
    if f[:1] == ["BACKEND"]:
        backend, percpu = f[1], f[3] == "1"
    elif f[:1] == ["PINNED"]:
        pinned = int(f[1])
    elif f[:1] == ["CPU"]:
        mine[int(f[1])] = (int(f[3]), int(f[4]))
assert backend in ("rseq", "thread") and pinned is not None, (backend, pinned)
assert d["cache"] == "obs_cpu" and d["cpu_backend"] == backend, d
assert re.match(r"# pid %d \(.*\): cache obs_cpu \(\w+ mode\), CPU backend %s(: \d+ parts? of CPUs)?$"
                % (d["pid"], backend), text[0]), text[0]
if not percpu:
    # parts of threads (or none: slub_debug): the reason in one line, no rows
    assert not mine, mine
    assert d["per_cpu"] is False and d["cpus"] == [] and d["total"] is None, d
    assert d["message"].endswith("; no per-CPU statistics"), d["message"]
    if backend == "thread":
        assert d["reason"] == "backend" and d["message"].startswith("parts are threads', not CPUs'"), d
    assert text[1] == "cache obs_cpu: " + d["message"] and text[2:] == [""], text
    print("no rows (%s): %s" % (d["reason"], d["message"]))
    sys.exit(0)
# parts of CPUs: one row per CPU the child's uslab_cache_cpu_stats knows, in
# CPU order, with its pops and pushes; a row for every CPU a thread ran
# pinned to; the total the rows' sum (no row left out: fewer than 256 CPUs)
assert d["per_cpu"] is True and d["reason"] is None and d["message"] is None, d
rows = d["cpus"]
assert [r["cpu"] for r in rows] == sorted(mine), ([r["cpu"] for r in rows], sorted(mine))
assert len(rows) >= max(pinned, 1) and d["parts"] == len(rows) and d["rows_left_out"] == 0, (pinned, d["parts"])
for r in rows:
    got = (r["events"]["ALLOC_PCS"], r["events"]["FREE_PCS"])
    assert got == mine[r["cpu"]], ("cpu", r["cpu"], "tool", got, "process", mine[r["cpu"]])
    assert r["objects"] >= 0
assert sum(r["events"]["ALLOC_PCS"] for r in rows) > 0
tot = d["total"]
assert tot["objects"] == sum(r["objects"] for r in rows), tot["objects"]
for k, v in tot["events"].items():
    assert v == sum(r["events"][k] for r in rows), k
# the text: the column header, a row per CPU, the total row their sum
cols = text[1].split()
assert cols[:4] == ["CPU", "Objects", "AllocPCS", "FreePCS"], text[1]
trows = [[int(x) for x in l.split()] for l in text[2:] if l and not l.startswith("Total")]
total = [l for l in text if l.startswith("Total ")]
assert len(total) == 1 and len(trows) == len(rows), text
tot_t = [int(x) for x in total[0].split()[1:]]
assert all(len(r) == len(cols) for r in trows) and len(tot_t) == len(cols) - 1, text
assert tot_t == [sum(r[i] for r in trows) for i in range(1, len(cols))], text
for r in trows:
    assert (r[2], r[3]) == mine[r[0]], (r, mine)
print("%d rows, ALLOC_PCS/FREE_PCS as the process reads them (%s)" % (
    len(rows), ", ".join("cpu %d: %d/%d" % (c, a, f) for c, (a, f) in sorted(mine.items()))))
PY
check_cpus() {  # check_cpus NAME: uslabinfo --cpus obs_cpu on $PID, text and JSON
	"$TOOL" -p "$PID" --timeout 20 --cpus obs_cpu --json >"$WORK/cpus.json" 2>"$WORK/cpus.err" ||
		fail "$1: --cpus --json: $(cat "$WORK/cpus.err")"
	"$TOOL" -p "$PID" --timeout 20 --cpus obs_cpu >"$WORK/cpus.txt" 2>"$WORK/cpus.err" ||
		fail "$1: --cpus: $(cat "$WORK/cpus.err")"
	CPUS_SAID=$(python3 "$WORK/cpus.py" "$WORK/cpus.json" "$WORK/cpus.txt" "$WORK/cpu.out") ||
		fail "$1: --cpus: child: $(cat "$WORK/cpu.out"); JSON: $(cat "$WORK/cpus.json"); text: $(cat "$WORK/cpus.txt")"
}
start_cpu_child "${USLAB_OPTIONS:-} export"
check_cpus "this run's options"
pass "--cpus obs_cpu (options '${USLAB_OPTIONS:-}', backend $(awk '$1=="BACKEND" {print $2}' "$WORK/cpu.out")): $CPUS_SAID"
"$TOOL" -p "$PID" --timeout 20 --cpus no_such_cache >"$WORK/cpus.out" 2>"$WORK/cpus.err" && fail "--cpus of a missing cache succeeded"
[ "$(wc -l <"$WORK/cpus.err")" -eq 1 ] && grep -q "no cache named 'no_such_cache'" "$WORK/cpus.err" ||
	fail "--cpus of a missing cache: $(cat "$WORK/cpus.err")"
bad "--cpus with -s" "cpus is a view: not with" "$TOOL" -p "$PID" --cpus obs_cpu -s
bad "--cpus with a regex" "cpus names its cache: no NAME-REGEX" "$TOOL" -p "$PID" --cpus obs_cpu obs
pass "--cpus: a missing cache, with -s, with a regex: one line, non-zero"
stop_cpu_child
# parts of threads: the tool says so in one line instead of an empty table
start_cpu_child "${USLAB_OPTIONS:-} export cpu_backend=tls"
grep -q "^BACKEND thread " "$WORK/cpu.out" || fail "cpu_backend=tls: $(cat "$WORK/cpu.out")"
check_cpus "cpu_backend=tls"
grep -q "^cache obs_cpu: parts are threads', not CPUs': the process runs the \"thread\" backend" "$WORK/cpus.txt" ||
	fail "cpu_backend=tls: $(cat "$WORK/cpus.txt")"
pass "--cpus with cpu_backend=tls: $(sed -n 2p "$WORK/cpus.txt")"
stop_cpu_child

echo "PASS test_uslabinfo ($(python3 -c "import time; print('%.2f' % (time.time() - $T0))") s)"
