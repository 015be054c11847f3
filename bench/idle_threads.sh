#!/usr/bin/env bash
# bench/idle_threads.sh: memory per idle thread (issue 18). bench/idle_threads
# (idle_threads.c says what it does) under glibc's malloc and, through
# LD_PRELOAD, jemalloc, tcmalloc, mimalloc and uslab (libuslab-malloc.so):
# uslab with its defaults, and in each per-CPU mode
# (USLAB_OPTIONS=slub_cpu_mode=classic|sheaves|home|slqb, and slab when the
# build accepts that name: detected, a mode it ignores is left out with a
# message).
#
#   bench/idle_threads.sh [--quick] [--reps N] [--threads "16 64"] [--wait-ms MS]
#                         [--objects N] [--rounds R] [--keep K]
#                         [--peers "glibc jemalloc tcmalloc mimalloc uslab uslab-tls uslab-classic uslab+OPT ..."]
#                         [--no-chart] [--no-save]
#
# T threads (--threads, each count its own runs) each allocate --objects (200)
# objects of each of 12 classes (16 .. 2048 B), write them and free them in a
# random order, --rounds (2) times, keeping --keep (2) per class; then all
# block on a condition variable. The main thread reads RSS (/proc/self/statm)
# before the threads start (base), after --wait-ms (1500 ms) of idleness
# (idle) and right after it calls the allocator's release call (released:
# malloc_trim(0) for glibc and uslab, mi_collect(true), tcmalloc's
# MallocExtension_ReleaseFreeMemory(), jemalloc's arena.<all>.purge).
# KiB per idle thread = (RSS - base) / T. The "of which stacks" column is
# (RSS with the T threads started but not yet allocating - base) / T: what
# every allocator pays for a thread's stack and TLS.
#
# Each repetition runs every thread count under every allocator, in an order
# that rotates from one repetition to the next; every cell is the median of
# --reps runs (RSS is nearly deterministic: the spread is in the raw
# samples). Ratios are to glibc's median at the same thread count.
# Prints the table; writes it, the machine (CPU, cores, kernel, glibc, date,
# commit) and the raw samples to bench/results/<date>-<host>-idle-threads.md
# and a PNG chart beside it (python3-matplotlib; skipped with a message if
# missing).
#
# Full run (5 repetitions, 1500 ms wait, 16 and 64 threads, 10 allocators):
# about 3 minutes on a 2-vCPU machine. --quick: 1 repetition, 300 ms wait
# (a smoke test: uslab's and jemalloc's decay need longer), about 15 s.
# The build directory is build-bench (USLAB_BENCH_BUILD=dir to change).
# USLAB_OPTIONS in the environment reaches every uslab run (the modes' runs
# add slub_cpu_mode=NAME after it).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
BUILD=${USLAB_BENCH_BUILD:-$ROOT/build-bench}
PY=python3
for p in python3 /usr/bin/python3; do
	if "$p" -c 'import matplotlib' 2>/dev/null; then PY=$p; break; fi
done

cmdline="bench/idle_threads.sh${*:+ $*}"
quick=0
reps=""
threads="16 64"
wait_ms=""
objects=200
rounds=2
keep=2
peers="glibc jemalloc tcmalloc mimalloc uslab uslab-classic uslab-sheaves uslab-home uslab-slqb uslab-slab"
chart=1
save=1
usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"; }
need_arg() { [ $# -ge 2 ] || { echo "idle_threads.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--reps) need_arg "$@"; reps=$2; shift ;;
	--threads) need_arg "$@"; threads=$2; shift ;;
	--wait-ms) need_arg "$@"; wait_ms=$2; shift ;;
	--objects) need_arg "$@"; objects=$2; shift ;;
	--rounds) need_arg "$@"; rounds=$2; shift ;;
	--keep) need_arg "$@"; keep=$2; shift ;;
	--peers) need_arg "$@"; peers=$2; shift ;;
	--no-chart) chart=0 ;;
	--no-save) save=0 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "idle_threads.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
[ -n "$reps" ] || reps=$([ $quick = 1 ] && echo 1 || echo 5)
[ -n "$wait_ms" ] || wait_ms=$([ $quick = 1 ] && echo 300 || echo 1500)
for v in "$reps" $threads "$objects" "$rounds"; do
	case $v in '' | *[!0-9]* | 0) echo "idle_threads.sh: '$v' is not a positive integer" >&2; exit 2 ;; esac
done
for v in "$wait_ms" "$keep"; do
	case $v in '' | *[!0-9]*) echo "idle_threads.sh: '$v' is not a non-negative integer" >&2; exit 2 ;; esac
done
log() { printf '%s\n' "$*" >&2; }

# ---- build ----------------------------------------------------------------------
if [ ! -f "$BUILD/CMakeCache.txt" ]; then
	GEN=()
	command -v ninja >/dev/null && GEN=(-G Ninja)
	log "== configuring $BUILD (Release, -O2)"
	cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
		-DBUILD_TESTING=OFF >/dev/null
fi
if grep -q '^USLAB_SANITIZE:STRING=.\+' "$BUILD/CMakeCache.txt"; then
	log "idle_threads.sh: $BUILD is a sanitizer build; use another USLAB_BENCH_BUILD"; exit 1
fi
cmake --build "$BUILD" --target uslab_malloc idle_threads >"$BUILD/idle-threads-build.log" 2>&1 ||
	{ cat "$BUILD/idle-threads-build.log" >&2; exit 1; }
EXE=$BUILD/bench/idle_threads
USLAB_LIB=$BUILD/libuslab-malloc.so

# ---- allocators ------------------------------------------------------------------
. "$HERE/peerlibs.sh"   # LIB, PKG
declare -A OPTS
# mode_taken NAME: does this build's libuslab-malloc take slub_cpu_mode=NAME
# (no "ignoring" warning)?
mode_taken() {
	local err
	err=$(env USLAB_OPTIONS="slub_cpu_mode=$1" LD_PRELOAD="$USLAB_LIB" "$EXE" --threads 1 --objects 1 \
		--rounds 1 --wait-ms 0 2>&1 >/dev/null) || return 1
	! grep -q 'USLAB_OPTIONS: ignoring' <<<"$err"
}
want=()
skipped=""
for p in $peers; do
	case $p in
	glibc) LIB[$p]="" ;;
	uslab) LIB[$p]=$USLAB_LIB; OPTS[$p]="" ;;
	uslab-tls) LIB[$p]=$USLAB_LIB; OPTS[$p]="cpu_backend=tls" ;;   # sheaves on parts of threads
	uslab+?*) LIB[$p]=$USLAB_LIB; OPTS[$p]=${p#uslab+} ;;   # the defaults and one option, as in peers.sh
	uslab-?*)
		LIB[$p]=$USLAB_LIB; OPTS[$p]="slub_cpu_mode=${p#uslab-}"
		if ! mode_taken "${p#uslab-}"; then
			log "== $p left out: this build ignores slub_cpu_mode=${p#uslab-}"
			skipped="$skipped $p (mode not in this build)"
			continue
		fi ;;
	jemalloc | tcmalloc | mimalloc) ;;
	*) echo "idle_threads.sh: unknown allocator '$p'" >&2; exit 2 ;;
	esac
	if [ -n "${LIB[$p]}" ] && [ ! -e "${LIB[$p]}" ]; then
		log "== $p left out: ${LIB[$p]} not found (Debian package ${PKG[$p]:-?})"
		skipped="$skipped $p (not installed)"
		continue
	fi
	want+=("$p")
done
[ ${#want[@]} -gt 0 ] || { log "idle_threads.sh: no allocator to run"; exit 1; }
base=glibc
case " ${want[*]} " in *" glibc "*) ;; *) base=${want[0]}; log "== glibc not run: ratios are to $base" ;; esac

# ---- runs -----------------------------------------------------------------------
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
RAW=$TMP/raw   # lines: allocator threads rep per_idle per_trim stacks alloc_idle alloc_trim base_kib idle_kib trim_kib release
: >"$RAW"
np=${#want[@]}
start_epoch=$(date +%s)
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
log "== allocators: ${want[*]}; threads [$threads]; $objects objects x 12 classes x $rounds rounds, keep $keep; wait ${wait_ms} ms; $reps repetition(s)"
for ((r = 0; r < reps; r++)); do
	for t in $threads; do
		printf ' rep %d/%d, %d threads (KiB per idle thread, released):' $((r + 1)) "$reps" "$t" >&2
		for ((k = 0; k < np; k++)); do
			p=${want[$(((k + r) % np))]}
			envs=(env -u LD_PRELOAD)
			[ -n "${LIB[$p]}" ] && envs+=(LD_PRELOAD="${LIB[$p]}")
			[ -n "${OPTS[$p]:-}" ] && envs+=(USLAB_OPTIONS="${USLAB_OPTIONS:+$USLAB_OPTIONS }${OPTS[$p]}")
			if ! out=$(timeout 300 "${envs[@]}" "$EXE" --threads "$t" --objects "$objects" --rounds "$rounds" \
				--keep "$keep" --wait-ms "$wait_ms" 2>&1); then
				log ""; log "idle_threads.sh: $p, $t threads failed:"; log "$out"; exit 1
			fi
			if grep -q 'USLAB_OPTIONS: ignoring' <<<"$out"; then
				log ""; log "idle_threads.sh: $p: uslab ignored an option:"; log "$out"; exit 1
			fi
			line=$(grep '^RESULT ' <<<"$out") || { log ""; log "no RESULT from $p:"; log "$out"; exit 1; }
			v() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
			stacks=$(awk -v s="$(v spawned_kib)" -v b="$(v base_kib)" -v t="$t" 'BEGIN { printf "%.1f", (s - b) / t }')
			mobj=$(sed -n 's/^malloc: \([^;]*\);.*/\1/p' <<<"$out")
			want_obj=$([ -n "${LIB[$p]}" ] && basename "${LIB[$p]}" || echo libc.so.6)
			[ "$mobj" = "$want_obj" ] || log " (warning: under $p malloc came from '$mobj')"
			echo "$p $t $r $(v per_thread_idle_kib) $(v per_thread_trim_kib) $stacks $(v alloc_per_thread_idle_kib) $(v alloc_per_thread_trim_kib) $(v base_kib) $(v idle_kib) $(v trim_kib) $(v release)" >>"$RAW"
			printf ' %s %s/%s' "$p" "$(v per_thread_idle_kib)" "$(v per_thread_trim_kib)" >&2
		done
		printf '\n' >&2
	done
done
elapsed=$(($(date +%s) - start_epoch))

# ---- table ----------------------------------------------------------------------
TABLE=$TMP/table
awk -v peers="${want[*]}" -v threads="$threads" -v base="$base" '
function median(arr, n,   i, j, t) {
	for (i = 2; i <= n; i++) for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) { t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t }
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
{ k = $1 SUBSEP $2; c = ++n[k]; I[k, c] = $4; R[k, c] = $5; S[k, c] = $6; rel[$1] = $12 }
END {
	np = split(peers, P, " "); nt = split(threads, T, " ")
	for (p = 1; p <= np; p++) for (t = 1; t <= nt; t++) {
		k = P[p] SUBSEP T[t]; c = n[k]; if (!c) continue
		delete a; for (i = 1; i <= c; i++) a[i] = I[k, i]; mi[k] = median(a, c)
		delete a; for (i = 1; i <= c; i++) a[i] = R[k, i]; mr[k] = median(a, c)
		delete a; for (i = 1; i <= c; i++) a[i] = S[k, i]; ms[k] = median(a, c)
	}
	printf "| allocator |"
	for (t = 1; t <= nt; t++) printf " %s thr: idle | x%s | released | x%s | of which stacks |", T[t], base, base
	printf " release call |\n|---|"
	for (t = 1; t <= nt; t++) printf "--:|--:|--:|--:|--:|"
	printf "---|\n"
	for (p = 1; p <= np; p++) {
		printf "| %s |", P[p]
		for (t = 1; t <= nt; t++) {
			k = P[p] SUBSEP T[t]; b = base SUBSEP T[t]
			if (!(k in mi)) { printf " - | - | - | - | - |"; continue }
			ri = (b in mi) && mi[b] > 0 ? sprintf("%.2f", mi[k] / mi[b]) : "-"
			rr = (b in mr) && mr[b] > 0 ? sprintf("%.2f", mr[k] / mr[b]) : "-"
			printf " %.1f | %s | %.1f | %s | %.1f |", mi[k], ri, mr[k], rr, ms[k]
		}
		printf " %s |\n", rel[P[p]]
	}
	for (t = 1; t <= nt; t++) {
		k = "uslab" SUBSEP T[t]; b = base SUBSEP T[t]
		if ((k in mi) && (b in mi) && base != "uslab")
			printf "\ntarget (uslab <= %s per idle thread), %s threads: idle %.1f vs %.1f KiB: %s; released %.1f vs %.1f KiB: %s", \
				base, T[t], mi[k], mi[b], mi[k] <= mi[b] ? "met" : "NOT met", mr[k], mr[b], mr[k] <= mr[b] ? "met" : "NOT met"
	}
	printf "\n"
}' "$RAW" >"$TABLE"

echo
echo "KiB per idle thread = (RSS - RSS before the threads) / threads; medians of $reps run(s); x$base = ratio to $base's median."
echo "idle: after ${wait_ms} ms idle; released: right after the release call (made by the main thread)."
cat "$TABLE"
[ -z "$skipped" ] || echo "left out:$skipped"
echo "runs: $reps repetition(s), ${elapsed}s"

[ "$save" = 1 ] || exit 0

# ---- save and chart -----------------------------------------------------------------
host=$(hostname -s 2>/dev/null || hostname)
day=$(date +%F)
mkdir -p "$ROOT/bench/results"
stem=$ROOT/bench/results/$day-$host-idle-threads$(if [ $quick = 1 ]; then echo -quick; fi)
out=$stem
i=2
while [ -e "$out.md" ]; do out=$stem-$i; i=$((i + 1)); done
cpu=$(lscpu 2>/dev/null | awk '/^Model name:/ && !n++ { sub(/^Model name:[[:space:]]*/, ""); print }' || true)
[ -n "$cpu" ] || cpu=$(awk -F': ' '/^model name/ && !n++ { print $2 }' /proc/cpuinfo)
rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
if [ -n "$(git -C "$ROOT" status --porcelain -- src include bench/idle_threads.c 2>/dev/null)" ]; then rev="$rev (modified)"; fi
glibc_v=$(getconf GNU_LIBC_VERSION 2>/dev/null || true)
peer_versions=""
for p in "${want[@]}"; do
	[ -n "${PKG[$p]:-}" ] || continue
	peer_versions="$peer_versions${peer_versions:+, }$p $(dpkg-query -W -f='${Version}' "${PKG[$p]}" 2>/dev/null || echo '?')"
done
{
	echo "# Memory per idle thread (bench/idle_threads.sh), $day, $host"
	echo
	echo "- CPU: ${cpu:-unknown}, $(nproc) CPUs online; memory $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
	echo "- Kernel: $(uname -srm); ${glibc_v:-glibc ?}; peers: ${peer_versions:-none}"
	echo "- uslab: $rev; $(basename "$BUILD") ($(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")), libuslab-malloc.so by LD_PRELOAD; USLAB_OPTIONS=\"${USLAB_OPTIONS:-}\" (+ slub_cpu_mode=NAME for uslab-NAME)"
	echo "- Date: $(date -u +%Y-%m-%dT%H:%MZ); load average at start: $load_at_start; total run ${elapsed}s"
	echo "- Command: \`$cmdline\`$([ $quick = 1 ] && echo ' (quick: a smoke test, not a measurement)')"
	echo "- Workload: threads [$threads]; each: $objects objects of each of 12 classes (16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048 B), written, freed in random order, x $rounds rounds, $keep per class kept; then idle on a condition variable; RSS from /proc/self/statm after ${wait_ms} ms idle, and after the release call"
	echo
	echo "KiB per idle thread = (RSS - RSS before the threads started) / threads. Medians of $reps run(s); x$base = ratio to $base's median at the same thread count. \"of which stacks\": (RSS with the threads started, before they allocate - base) / threads, the same for every allocator. uslab = libuslab-malloc.so with its defaults (sheaves mode, on parts of CPUs where rseq runs); uslab-NAME = USLAB_OPTIONS=slub_cpu_mode=NAME; uslab-tls = USLAB_OPTIONS=cpu_backend=tls (sheaves on parts of threads); uslab+OPT = USLAB_OPTIONS=OPT."
	echo
	cat "$TABLE"
	[ -z "$skipped" ] || { echo; echo "Left out:$skipped"; }
	echo
	echo "![memory per idle thread]($(basename "$out").png)"
	echo
	echo "Raw samples (allocator threads rep per_thread_idle per_thread_released stacks_per_thread alloc_per_thread_idle alloc_per_thread_released base_kib idle_kib released_kib release_call):"
	echo
	echo '```'
	cat "$RAW"
	echo '```'
} >"$out.md"
echo "saved ${out#"$ROOT"/}.md"
if [ $chart = 1 ]; then
	if "$PY" -c 'import matplotlib' 2>/dev/null; then
		"$PY" - "$RAW" "$out.png" "${want[*]}" "$threads" "$base" "$wait_ms" <<'EOF'
import sys, statistics
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
raw, png, peers, threads, base, wait = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4].split(), sys.argv[5], sys.argv[6]
idle, rel = {}, {}
for line in open(raw):
    f = line.split()
    idle.setdefault((f[0], f[1]), []).append(float(f[3]))
    rel.setdefault((f[0], f[1]), []).append(float(f[4]))
fig, axes = plt.subplots(1, len(threads), figsize=(max(9, 5.5 * len(threads)), 4.8), squeeze=False)
w = 0.4
for ax, t in zip(axes[0], threads):
    xs = range(len(peers))
    ax.bar([x - w / 2 for x in xs], [statistics.median(idle.get((p, t), [0])) for p in peers], w,
           label=f"idle ({wait} ms)")
    ax.bar([x + w / 2 for x in xs], [statistics.median(rel.get((p, t), [0])) for p in peers], w,
           label="after the release call")
    if (base, t) in idle:
        ax.axhline(statistics.median(idle[(base, t)]), color="black", linewidth=0.8, linestyle="--",
                   label=f"{base}, idle")
    ax.set_xticks(list(xs), peers, rotation=30, ha="right")
    ax.set_ylabel("KiB per idle thread (median)")
    ax.set_title(f"{t} idle threads")
    ax.legend(fontsize=8)
fig.suptitle("Memory per idle thread: (RSS - RSS before the threads) / threads, lower is better")
fig.tight_layout()
fig.savefig(png, dpi=100)
EOF
		echo "chart: ${out#"$ROOT"/}.png"
	else
		echo "no chart: $PY has no matplotlib (Debian package python3-matplotlib)"
	fi
fi
