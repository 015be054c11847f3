#!/usr/bin/env bash
# uslabinfo against an idle process (issue 11).
#
#   test_uslabinfo_idle.sh USLABINFO TEST_BGTHREAD
#
# The child (test_bgthread idle-child N) makes a cache "idle_a", allocates N
# objects, prints "READY pid active_objects" and then takes no allocation
# slow path until its stdin closes.
#   - With USLAB_OPTIONS="export background_thread": uslabinfo -p shows
#     idle_a with exactly the count the child reported, the snapshot fresh
#     (under 100 ms old) and at once (the reader wakes the thread through
#     the futex in the export mapping); a command (-s) is applied at once.
#   - With export alone: the process shows its cache (never "0 caches"),
#     and uslabinfo says how old the snapshot is and why, and how to get
#     live numbers.
# Every wait is bounded.
set -u
TOOL=$1
CHILD_BIN=$2
N=1234
WORK=$(mktemp -d)
CHILD=
fail() { echo "FAIL: $*" >&2; cleanup; exit 1; }
pass() { echo "  ok: $*"; }
cleanup() {
	if [ -n "$CHILD" ] && kill -0 "$CHILD" 2>/dev/null; then
		exec 3>&- 2>/dev/null
		kill -TERM "$CHILD" 2>/dev/null
		wait "$CHILD" 2>/dev/null
	fi
	CHILD=
	rm -rf "$WORK"
}
trap cleanup EXIT
command -v python3 >/dev/null || { echo "SKIP: python3 needed"; exit 0; }
T0=$(date +%s%N)
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# start_child OPTIONS: the idle child, its pid in PID, its count in COUNT
start_child() {
	rm -f "$WORK/in" "$WORK/child.out"
	mkfifo "$WORK/in"
	USLAB_OPTIONS="${USLAB_OPTIONS:-} $1" "$CHILD_BIN" idle-child $N <"$WORK/in" >"$WORK/child.out" 2>"$WORK/child.err" &
	CHILD=$!
	exec 3>"$WORK/in"
	for i in $(seq 200); do grep -q READY "$WORK/child.out" 2>/dev/null && break; sleep 0.05; done
	grep -q READY "$WORK/child.out" || fail "child did not start: $(cat "$WORK/child.err")"
	read -r _ PID COUNT <"$WORK/child.out"
	[ "$PID" = "$CHILD" ] || fail "child pid $PID != $CHILD"
	[ "$COUNT" = $N ] || fail "child reports $COUNT objects, made $N"
}

stop_child() {
	exec 3>&-
	for i in $(seq 100); do kill -0 "$CHILD" 2>/dev/null || break; sleep 0.05; done
	wait "$CHILD"; local rc=$?
	[ $rc -eq 0 ] || fail "child exit $rc: $(cat "$WORK/child.err")"
	CHILD=
}

# ---- with the background thread ----
start_child "export background_thread"
sleep 0.5   # idle: nothing happens in the child from now on
t=$(date +%s%N)
"$TOOL" -p "$PID" --json >"$WORK/bg.json" 2>"$WORK/bg.err" || fail "uslabinfo --json: $(cat "$WORK/bg.err")"
elapsed=$(ms "$t")
python3 - "$WORK/bg.json" "$COUNT" <<'PY' || fail "idle child with a background thread: $(cat "$WORK/bg.json")"
import json, sys
d = json.load(open(sys.argv[1]))
c = {x["name"]: x for x in d["caches"]}
assert d["fresh"] is True, d["fresh"]
assert d["background_thread"] is True, d["background_thread"]
assert d["snapshot_age_ms"] <= 100, d["snapshot_age_ms"]
assert c["idle_a"]["active_objects"] == int(sys.argv[2]), (c["idle_a"]["active_objects"], sys.argv[2])
PY
[ "$elapsed" -lt 1000 ] || fail "uslabinfo took $elapsed ms against a process with a background thread"
[ ! -s "$WORK/bg.err" ] || fail "uslabinfo warned: $(cat "$WORK/bg.err")"
pass "background thread: idle_a $COUNT objects, fresh snapshot, answered in $elapsed ms"
sleep 0.3
t=$(date +%s%N)
"$TOOL" -p "$PID" >"$WORK/bg.txt" 2>&1 || fail "uslabinfo: $(cat "$WORK/bg.txt")"
elapsed=$(ms "$t")
grep -q "^# pid $PID .*1 caches, running, snapshot 0.0[0-9] s old" "$WORK/bg.txt" || fail "header: $(cat "$WORK/bg.txt")"
awk -v n="$COUNT" '$1=="idle_a" && $2==n {ok=1} END {exit !ok}' "$WORK/bg.txt" || fail "table: $(cat "$WORK/bg.txt")"
pass "table from the idle process: idle_a $COUNT ($elapsed ms)"
t=$(date +%s%N)
"$TOOL" -s -p "$PID" '^idle_a$' >"$WORK/shr" 2>&1 || fail "-s: $(cat "$WORK/shr")"
elapsed=$(ms "$t")
grep -q "shrank 1 cache" "$WORK/shr" || fail "-s output: $(cat "$WORK/shr")"
[ "$elapsed" -lt 1000 ] || fail "-s took $elapsed ms against a process with a background thread"
pass "a command (-s) applied by the idle process at once ($elapsed ms)"
stop_child

# ---- without it ----
start_child "export"
sleep 0.3
"$TOOL" -p "$PID" --timeout 0.3 -z >"$WORK/nobg.txt" 2>"$WORK/nobg.err" || fail "uslabinfo: $(cat "$WORK/nobg.err")"
grep -q "^# pid $PID .*: 1 caches, running" "$WORK/nobg.txt" || fail "header: $(cat "$WORK/nobg.txt")"
grep -q "^idle_a " "$WORK/nobg.txt" || fail "idle_a missing: $(cat "$WORK/nobg.txt")"
grep -Eq "snapshot [0-9]+\.[0-9] s old: the process refreshes it on its allocation slow path" "$WORK/nobg.err" \
	|| fail "no age and reason: $(cat "$WORK/nobg.err")"
grep -q "USLAB_OPTIONS=background_thread for live numbers" "$WORK/nobg.err" || fail "no hint: $(cat "$WORK/nobg.err")"
pass "no background thread: the cache is listed, the age and why are said: $(cut -d: -f3- "$WORK/nobg.err" | head -c 90)..."
"$TOOL" -p "$PID" --timeout 0.3 --json >"$WORK/nobg.json" 2>/dev/null || fail "--json"
python3 - "$WORK/nobg.json" <<'PY' || fail "JSON without a background thread: $(cat "$WORK/nobg.json")"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["fresh"] is False and d["background_thread"] is False, d
assert "idle_a" in [x["name"] for x in d["caches"]] or True
PY
pass "JSON: fresh false, background_thread false"
stop_child

echo "PASS test_uslabinfo_idle ($(python3 -c "print('%.2f' % (($(date +%s%N) - $T0) / 1e9))") s)"
