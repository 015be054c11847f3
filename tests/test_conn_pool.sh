#!/usr/bin/env bash
# examples/conn_pool (issue 19): 4 clients x 200 rounds x 4 connections x
# 8 requests must be reported as 3,200 allocations and frees of "conn" and
# 25,600 of "request", the fast-path parts no larger, whatever the per-CPU
# mode (CTest runs it once per mode: example_conn_pool_MODE).
#
#   test_conn_pool.sh CONN_POOL
set -u
out=$(timeout 50 "$1" 4 200 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || { echo "FAIL: conn_pool exited $rc (USLAB_OPTIONS=${USLAB_OPTIONS:-})" >&2; exit 1; }
printf '%s\n' "$out" | awk '
	/^(conn|request) / {
		for (i = 1; i <= NF; i++) {
			if ($i == "allocations") { a = $(i - 1); af = substr($(i + 1), 2) }
			if ($i == "frees") { f = $(i - 1); ff = substr($(i + 1), 2) }
		}
		want = $1 == "conn" ? 3200 : 25600
		if (a != want || f != want || af + 0 > a + 0 || ff + 0 > f + 0) bad = bad " " $1
		seen++
	}
	END { if (seen != 2 || bad != "") { print "FAIL: counts of" (bad == "" ? " (lines missing)" : bad) > "/dev/stderr"; exit 1 } }' || exit 1
echo "PASS conn_pool counts (USLAB_OPTIONS=${USLAB_OPTIONS:-})"
