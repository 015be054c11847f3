/*
 * exp_cold: freeing and allocating cache-cold objects (the 2010 queuing
 * thread: "SLUB+Q can efficiently free and allocate cache cold objects
 * without causing cache misses"; issue 10, experiment "cold objects").
 *
 *   exp_cold [--objects N] [--min BYTES] [--max BYTES] [--seed N] [--touch 0|1] [--size BYTES]
 *
 * Three timed phases, one after the other, in one thread:
 *   alloc1  N allocations of random sizes (uniform in --min .. --max, 64 ..
 *           256 by default; fixed --seed), pointers kept in an array;
 *   free    the array is shuffled (not timed), then the N objects are freed
 *           in that random order; nothing reads an object before its free,
 *           and N objects (about 160 MB by default) are far more than the
 *           caches hold, so every object freed is cold;
 *   alloc2  N allocations again (new random sizes).
 * Each phase is timed with clock_gettime(CLOCK_MONOTONIC) and reported as
 * ns per operation. With --touch 1 (the default) each allocation's first 8
 * bytes are written inside the timed loop, as a program initialising its
 * object would, so an allocator that does not touch the object is not
 * credited with a miss the program takes anyway right after; --touch 0
 * times the allocation calls alone (the objects of alloc1 are then written
 * once after it, untimed, so that the free phase never takes the page
 * faults of memory nobody wrote yet). Sizes and the shuffle are drawn before
 * the timed loops; the pointer and size arrays are mmap()ed, so the
 * allocator measured never sees them.
 *
 * Two builds of this file:
 *   exp_cold        plain malloc/free, no uslab call: run it under
 *                   LD_PRELOAD=libuslab-malloc.so (USLAB_OPTIONS picks the
 *                   mode), libmimalloc.so.2, or nothing (glibc);
 *   exp_cold_cache  (-DCOLD_CACHE, linked with libuslab) uslab_cache_alloc
 *                   and uslab_cache_free on one cache of --size (128) bytes
 *                   ("cold-cache", USLAB_NO_MERGE); --min/--max are then
 *                   ignored. It also prints the cache's events per phase.
 *
 * Output:
 *   RESULT alloc1_ns=.. free_ns=.. alloc2_ns=.. maxrss_kib=..
 *   stats: ... (exp_cold_cache only; per phase: NODE_LOCK, SHEAF_FLUSH, ... and
 *          the mode-independent totals allocs, allocs_fast, frees, frees_fast)
 * exp_cold_cache's first line names the cache's cpu_mode ("cpu_mode 2 (home)"):
 * USLAB_OPTIONS=slub_cpu_mode=NAME picks it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#ifdef COLD_CACHE
#include "uslab.h"
static struct uslab_cache *cache;
#define OBJ_ALLOC(n) uslab_cache_alloc(cache)
#define OBJ_FREE(p) uslab_cache_free(cache, p)
#else
#define OBJ_ALLOC(n) malloc(n)
#define OBJ_FREE(p) free(p)
#endif

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *map(size_t bytes)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "exp_cold: mmap of %zu bytes: %s\n", bytes, strerror(errno));
		exit(1);
	}
	return p;
}

static __attribute__((noreturn)) void oom(unsigned long i)
{
	fprintf(stderr, "exp_cold: allocation %lu failed: %s\n", i, strerror(errno));
	exit(1);
}

static __attribute__((noinline)) void alloc_phase(void **v, const uint16_t *sz, unsigned long n, int touch)
{
	for (unsigned long i = 0; i < n; i++) {
		void *p = OBJ_ALLOC(sz[i]);
		if (__builtin_expect(!p, 0))
			oom(i);
		if (touch)
			*(volatile uint64_t *)p = i;
		v[i] = p;
	}
}

static __attribute__((noinline)) void free_phase(void **v, unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		OBJ_FREE(v[i]);
}

#ifdef COLD_CACHE
enum { EV_NODE_LOCK, EV_SHEAF_FLUSH, EV_SHEAF_REFILL, EV_BARN_PUT, EV_BARN_GET, EV_ALLOC_SLAB, EV_FREE_SLAB,
       EV_FREE_SLOW, EV_ALLOC_SLOW, EV_FREE_REMOTE, EV_FLUSH_FREE_LIST, EV_FLUSH_FREE_LIST_OBJECTS, EV_SLAB_OWN,
       EV_SLAB_DISOWN, EV_CPU_PARTIAL_FREE, EV_CPU_PARTIAL_DRAIN, NEV };
static const char *ev_name[NEV] = { "NODE_LOCK", "SHEAF_FLUSH", "SHEAF_REFILL", "BARN_PUT", "BARN_GET",
				    "ALLOC_SLAB", "FREE_SLAB", "FREE_SLOWPATH", "ALLOC_SLOWPATH", "FREE_REMOTE",
				    "FLUSH_FREE_LIST", "FLUSH_FREE_LIST_OBJECTS", "SLAB_OWN", "SLAB_DISOWN",
				    "CPU_PARTIAL_FREE", "CPU_PARTIAL_DRAIN" };
static const int ev_item[NEV] = { USLAB_STAT_NODE_LOCK, USLAB_STAT_SHEAF_FLUSH, USLAB_STAT_SHEAF_REFILL,
				  USLAB_STAT_BARN_PUT, USLAB_STAT_BARN_GET, USLAB_STAT_ALLOC_SLAB,
				  USLAB_STAT_FREE_SLAB, USLAB_STAT_FREE_SLOWPATH, USLAB_STAT_ALLOC_SLOWPATH,
				  USLAB_STAT_FREE_REMOTE, USLAB_STAT_FLUSH_FREE_LIST,
				  USLAB_STAT_FLUSH_FREE_LIST_OBJECTS, USLAB_STAT_SLAB_OWN, USLAB_STAT_SLAB_DISOWN,
				  USLAB_STAT_CPU_PARTIAL_FREE, USLAB_STAT_CPU_PARTIAL_DRAIN };
/* Then the mode-independent totals of struct uslab_cache_info (version 4):
 * allocs, allocs_fast, frees, frees_fast. */
#define NTOT 4
static const char *tot_name[NTOT] = { "allocs", "allocs_fast", "frees", "frees_fast" };

/* Names of the cpu_mode values (USLAB_CPU_*; 4 is "slab" where the build
 * has SLAB's arrays). */
static const char *cpu_mode_name(unsigned long m)
{
	static const char *const names[] = { "classic", "sheaves", "home", "slqb", "slab" };
	return m < sizeof(names) / sizeof(names[0]) ? names[m] : "?";
}

static void events(uint64_t *out)
{
	struct uslab_cache_info in;
	memset(&in, 0, sizeof in);
	in.version = USLAB_CACHE_INFO_VERSION;
	if (uslab_cache_get_info(cache, &in)) {
		memset(out, 0, (NEV + NTOT) * sizeof *out);
		return;
	}
	for (int e = 0; e < NEV; e++)
		out[e] = in.events[ev_item[e]];
	out[NEV + 0] = in.allocs;
	out[NEV + 1] = in.allocs_fast;
	out[NEV + 2] = in.frees;
	out[NEV + 3] = in.frees_fast;
}
#endif

int main(int argc, char **argv)
{
	unsigned long n = 1000000, lo = 64, hi = 256, seed = 1, size = 128;
	int touch = 1;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (i + 1 < argc && !strcmp(a, "--objects"))
			n = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(a, "--min"))
			lo = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(a, "--max"))
			hi = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(a, "--seed"))
			seed = strtoul(argv[++i], NULL, 10);
		else if (i + 1 < argc && !strcmp(a, "--touch"))
			touch = atoi(argv[++i]) != 0;
		else if (i + 1 < argc && !strcmp(a, "--size"))
			size = strtoul(argv[++i], NULL, 10);
		else {
			fprintf(stderr, "usage: exp_cold [--objects N] [--min BYTES] [--max BYTES] [--seed N] "
					"[--touch 0|1] [--size BYTES]\n");
			return 2;
		}
	}
	if (!n || lo < 8 || hi < lo || hi > 65535 || size < 8 || size > 65535) {
		fprintf(stderr, "exp_cold: need --objects > 0, 8 <= --min <= --max <= 65535, 8 <= --size <= 65535\n");
		return 2;
	}
#ifdef COLD_CACHE
	cache = uslab_cache_create("cold-cache", size, 0, USLAB_NO_MERGE, NULL);
	if (!cache) {
		fprintf(stderr, "exp_cold: uslab_cache_create: %s\n", strerror(errno));
		return 1;
	}
	lo = hi = size;
	unsigned long cap = 0, mode = 0;
	uslab_cache_tune_get(cache, "sheaf_capacity", &cap);
	uslab_cache_tune_get(cache, "cpu_mode", &mode);
	printf("exp_cold: uslab cache API, %lu objects of %lu bytes, cpu_mode %lu (%s), sheaf_capacity %lu, "
	       "touch %d\n", n, size, mode, cpu_mode_name(mode), cap, touch);
#else
	printf("exp_cold: malloc, %lu objects of %lu .. %lu bytes, touch %d\n", n, lo, hi, touch);
#endif
	void **v = map(n * sizeof *v);
	uint16_t *sz1 = map(n * sizeof *sz1), *sz2 = map(n * sizeof *sz2);
	uint64_t s = seed;
	for (unsigned long i = 0; i < n; i++)
		sz1[i] = (uint16_t)(lo + rnd(&s) % (hi - lo + 1));
	for (unsigned long i = 0; i < n; i++)
		sz2[i] = (uint16_t)(lo + rnd(&s) % (hi - lo + 1));

#ifdef COLD_CACHE
	uint64_t e0[NEV + NTOT], e1[NEV + NTOT], e2[NEV + NTOT], e3[NEV + NTOT];
	events(e0);
#endif
	double t0 = now_ns();
	alloc_phase(v, sz1, n, touch);
	double t1 = now_ns();
#ifdef COLD_CACHE
	events(e1);
#endif
	if (!touch)   /* untimed: fault in what alloc1 handed out, as touch 1 did */
		for (unsigned long i = 0; i < n; i++)
			*(volatile uint64_t *)v[i] = i;
	for (unsigned long i = n - 1; i > 0; i--) {   /* Fisher-Yates: random free order */
		unsigned long j = (unsigned long)(rnd(&s) % (i + 1));
		void *x = v[i];
		v[i] = v[j];
		v[j] = x;
	}
	double t2 = now_ns();
	free_phase(v, n);
	double t3 = now_ns();
#ifdef COLD_CACHE
	events(e2);
#endif
	alloc_phase(v, sz2, n, touch);
	double t4 = now_ns();
#ifdef COLD_CACHE
	events(e3);
#endif
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("RESULT alloc1_ns=%.2f free_ns=%.2f alloc2_ns=%.2f maxrss_kib=%ld\n", (t1 - t0) / (double)n,
	       (t3 - t2) / (double)n, (t4 - t3) / (double)n, ru.ru_maxrss);
#ifdef COLD_CACHE
	const uint64_t *from[3] = { e0, e1, e2 }, *to[3] = { e1, e2, e3 };
	const char *phase[3] = { "alloc1", "free", "alloc2" };
	for (int p = 0; p < 3; p++) {
		printf("stats: %s", phase[p]);
		for (int e = 0; e < NEV + NTOT; e++)
			printf(" %s=%llu", e < NEV ? ev_name[e] : tot_name[e - NEV],
			       (unsigned long long)(to[p][e] - from[p][e]));
		printf("\n");
	}
#endif
	free_phase(v, n);
#ifdef COLD_CACHE
	uslab_cache_destroy(cache);
#endif
	return 0;
}
