/*
 * OS seam: the only code that calls mmap/munmap/madvise. Also the single
 * place where memory failures are injected for tests.
 */
#ifndef USLAB_OS_H
#define USLAB_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define USLAB_HIDDEN __attribute__((visibility("hidden")))

/* Map `size` bytes aligned to `align` (a power of two >= the OS page size).
 * Returns NULL on failure (errno ENOMEM). */
USLAB_HIDDEN void *os_map_aligned(size_t size, size_t align);
/* Reserve zeroed address space for metadata made once at start (pages
 * are only backed once touched); not counted by fault injection. NULL on
 * failure. */
USLAB_HIDDEN void *os_reserve(size_t size);
/* Give the range back to the OS entirely. */
USLAB_HIDDEN void os_unmap(void *p, size_t size);
/* Drop the contents of a range but keep it mapped: later touches fault in
 * zero pages. Used to return free pages' memory after a delay. */
USLAB_HIDDEN void os_decommit(void *p, size_t size);
/* Resident set size of the process in bytes (from /proc/self/statm), or 0. */
USLAB_HIDDEN size_t os_rss(void);
/* Number of online CPUs (at least 1): read once, then kept (os.c says
 * why); os_ncpus_recheck() reads it again if the last read is a second
 * old, for the periodic paths to call. os_ncpus_reads(): reads so far. */
USLAB_HIDDEN unsigned os_ncpus(void);
USLAB_HIDDEN void os_ncpus_recheck(void);
USLAB_HIDDEN uint64_t os_ncpus_reads(void);
/* A point where another thread's step in between matters (the slab
 * word's CASes, node-lock releases, lock entries, ownership hand-offs).
 * In a -DUSLAB_SCHED_FUZZ=ON build (scripts/test.sh sched) a thread gives
 * up its CPU at one such point in 16, drawn per thread: a preemption in a
 * window of a few instructions, which a stress test meets once in
 * thousands of runs, comes every few microseconds (docs/testing.md, the
 * classic deactivation race). Nothing in other builds. */
#ifndef USLAB_SCHED_FUZZ
#define USLAB_SCHED_FUZZ 0
#endif
#if USLAB_SCHED_FUZZ
USLAB_HIDDEN void os_sched_point(void);
#else
static inline void os_sched_point(void)
{
}
#endif
/* The clock of every time-driven policy (decay of free pages, empty slabs
 * and huge mappings, slab mode's reap, KFENCE's samples): monotonic
 * milliseconds, cheap (coarse clock), unless a test holds it. */
USLAB_HIDDEN uint64_t os_now_ms(void);
/* Monotonic milliseconds that no test holds: timeouts and sleeps (fork's
 * lock waits, the background thread, the export, call-site times). */
USLAB_HIDDEN uint64_t os_real_ms(void);
/* Tests: hold os_now_ms() at its current value (on) or let it run again
 * (off), and move a held clock forward by ms. A program whose outcome must
 * not depend on how fast it runs (the fuzzer: an input replayed alone
 * must do what it did in the run that found it) holds the clock and
 * advances it itself. */
USLAB_HIDDEN void os_clock_hold(bool on);
USLAB_HIDDEN void os_clock_advance(uint64_t ms);

/* 64 random bits (getrandom, else a mix of time and addresses). */
USLAB_HIDDEN uint64_t os_random(void);

/* Fault injection. Modes:
 *   OS_FAULT_OFF      no faults;
 *   OS_FAULT_NTH      the nth map call from now fails, once;
 *   OS_FAULT_EVERY    every nth map call fails;
 *   OS_FAULT_FROM     the nth map call and every one after it fail.
 * Also settable at start with USLAB_FAIL_NTH=N[:every|:from] in the
 * environment. Returns the number of map calls made so far. */
enum os_fault_mode { OS_FAULT_OFF, OS_FAULT_NTH, OS_FAULT_EVERY, OS_FAULT_FROM };
USLAB_HIDDEN uint64_t os_fault_set(enum os_fault_mode mode, unsigned long nth);
/* Map calls made and map calls failed by injection, since start. */
USLAB_HIDDEN uint64_t os_map_calls(void);
USLAB_HIDDEN uint64_t os_map_injected(void);

#endif
