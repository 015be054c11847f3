/*
 * OS seam: map, unmap, decommit. Nothing else in uslab calls mmap or madvise,
 * so this is where faults are injected for tests (os_fault_set, or
 * USLAB_FAIL_NTH=N[:every|:from] in the environment).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Fault injection state. Relaxed atomics: tests set it between phases; the
 * exact interleaving with concurrent maps does not matter. */
static _Atomic uint64_t map_calls;     /* map calls since start */
static _Atomic uint64_t map_injected;  /* of those, failed on purpose */
static _Atomic int fault_mode;
static _Atomic uint64_t fault_base;    /* map_calls when the mode was set */
static _Atomic uint64_t fault_nth;

uint64_t os_fault_set(enum os_fault_mode mode, unsigned long nth)
{
	uint64_t now = atomic_load_explicit(&map_calls, memory_order_relaxed);
	atomic_store_explicit(&fault_nth, nth ? nth : 1, memory_order_relaxed);
	atomic_store_explicit(&fault_base, now, memory_order_relaxed);
	atomic_store_explicit(&fault_mode, mode, memory_order_relaxed);
	return now;
}

uint64_t os_map_calls(void) { return atomic_load_explicit(&map_calls, memory_order_relaxed); }
uint64_t os_map_injected(void) { return atomic_load_explicit(&map_injected, memory_order_relaxed); }

static void fault_from_env(void)
{
	static _Atomic int done;
	if (atomic_load_explicit(&done, memory_order_relaxed))
		return;
	atomic_store_explicit(&done, 1, memory_order_relaxed);
	const char *e = getenv("USLAB_FAIL_NTH");
	if (!e || !*e)
		return;
	unsigned long n = strtoul(e, NULL, 10);
	const char *colon = strchr(e, ':');
	enum os_fault_mode m = OS_FAULT_NTH;
	if (colon && !strcmp(colon + 1, "every"))
		m = OS_FAULT_EVERY;
	else if (colon && !strcmp(colon + 1, "from"))
		m = OS_FAULT_FROM;
	if (n)
		os_fault_set(m, n);
}

static bool fault_inject(void)
{
	fault_from_env();
	uint64_t call = atomic_fetch_add_explicit(&map_calls, 1, memory_order_relaxed) + 1;
	int mode = atomic_load_explicit(&fault_mode, memory_order_relaxed);
	if (mode == OS_FAULT_OFF)
		return false;
	uint64_t k = call - atomic_load_explicit(&fault_base, memory_order_relaxed);
	uint64_t nth = atomic_load_explicit(&fault_nth, memory_order_relaxed);
	bool fail = (mode == OS_FAULT_NTH && k == nth) ||
		    (mode == OS_FAULT_EVERY && k % nth == 0) ||
		    (mode == OS_FAULT_FROM && k >= nth);
	if (fail)
		atomic_fetch_add_explicit(&map_injected, 1, memory_order_relaxed);
	return fail;
}

void *os_reserve(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void *os_map_aligned(size_t size, size_t align)
{
	if (fault_inject()) {
		errno = ENOMEM;
		return NULL;
	}
	/* Ask for size + align and trim both ends: the kernel gives no aligned
	 * mmap. Trimming leaves no holes of ours behind. */
	size_t span = size + align;
	if (span < size) {
		errno = ENOMEM;
		return NULL;
	}
	char *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		errno = ENOMEM;
		return NULL;
	}
	char *a = (char *)ALIGN_UP((uintptr_t)p, align);
	if (a > p)
		munmap(p, (size_t)(a - p));
	char *end = p + span, *aend = a + size;
	if (end > aend)
		munmap(aend, (size_t)(end - aend));
	return a;
}

void os_unmap(void *p, size_t size)
{
	int e = errno;   /* free paths must not change errno */
	munmap(p, size);
	errno = e;
}

void os_decommit(void *p, size_t size)
{
	int e = errno;
	/* DONTNEED, not FREE: RSS drops at once, which is what a caller of
	 * shrink expects to see; the pages come back zeroed when touched. */
	madvise(p, size, MADV_DONTNEED);
	errno = e;
}

size_t os_rss(void)
{
	int e = errno;
	char buf[128];
	size_t rss = 0;
	int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n > 0) {
			buf[n] = 0;
			char *s = strchr(buf, ' ');
			if (s)
				rss = strtoul(s + 1, NULL, 10) * (size_t)sysconf(_SC_PAGESIZE);
		}
	}
	errno = e;
	return rss;
}

/*
 * The online CPU count. glibc's sysconf(_SC_NPROCESSORS_ONLN) opens, reads
 * and closes /sys/devices/system/cpu/online on every call (three system
 * calls), and slab mode's free limit asked it on every batch freed (issue
 * 25: 249,000 of each in one sh6bench run, under the node lock). So it is
 * read once and then again only where it may have changed: CPU hotplug
 * gives user space no cheap notice, so os_ncpus_recheck(), which the
 * periodic paths call (slab mode's node reap, every few seconds), reads it
 * again once OS_NCPUS_RECHECK_MS have passed since the last read.
 * Relaxed atomics: the count is a hint for sizing (orders, limits); a
 * thread that sees the old count a little longer sizes as before.
 */
#define OS_NCPUS_RECHECK_MS 1000
static _Atomic unsigned ncpus_cached;     /* 0: not read yet */
static _Atomic uint64_t ncpus_read_ms;    /* os_real_ms() of the last read */
static _Atomic uint64_t ncpus_reads;      /* reads so far (tests) */

static unsigned ncpus_read(void)
{
	int e = errno;   /* (called on free paths, which must not change errno) */
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	errno = e;
	unsigned v = n > 0 ? (unsigned)n : 1;
	atomic_fetch_add_explicit(&ncpus_reads, 1, memory_order_relaxed);
	atomic_store_explicit(&ncpus_read_ms, os_real_ms(), memory_order_relaxed);
	atomic_store_explicit(&ncpus_cached, v, memory_order_relaxed);
	return v;
}

unsigned os_ncpus(void)
{
	unsigned v = atomic_load_explicit(&ncpus_cached, memory_order_relaxed);
	return likely(v) ? v : ncpus_read();
}

void os_ncpus_recheck(void)
{
	uint64_t last = atomic_load_explicit(&ncpus_read_ms, memory_order_relaxed), now = os_real_ms();
	/* one thread re-reads: whoever moves the stamp on */
	if (now - last >= OS_NCPUS_RECHECK_MS &&
	    atomic_compare_exchange_strong_explicit(&ncpus_read_ms, &last, now, memory_order_relaxed,
						    memory_order_relaxed))
		ncpus_read();
}

uint64_t os_ncpus_reads(void)
{
	return atomic_load_explicit(&ncpus_reads, memory_order_relaxed);
}

#if USLAB_SCHED_FUZZ
void os_sched_point(void)
{
	static __thread uint64_t x;   /* xorshift64, seeded by the thread's own address */
	if (!x)
		x = (uintptr_t)&x | 1;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	if (!(x & 15))
		sched_yield();
}
#endif

uint64_t os_real_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A held clock's value, 0 while it runs. Relaxed: the test that holds it
 * sets it between its own operations; other threads may see the change a
 * little late, as they would see real time pass. */
static _Atomic uint64_t clock_held;

uint64_t os_now_ms(void)
{
	uint64_t h = atomic_load_explicit(&clock_held, memory_order_relaxed);
	return unlikely(h) ? h : os_real_ms();
}

void os_clock_hold(bool on)
{
	atomic_store_explicit(&clock_held, on ? os_real_ms() | 1 : 0, memory_order_relaxed);
}

void os_clock_advance(uint64_t ms)
{
	uint64_t h = atomic_load_explicit(&clock_held, memory_order_relaxed);
	if (h)
		atomic_store_explicit(&clock_held, h + ms, memory_order_relaxed);
}

uint64_t os_random(void)
{
	int e = errno;
	uint64_t r = 0;
	if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uintptr_t)&r ^ ((uint64_t)getpid() << 32);
	}
	errno = e;
	return r;
}
