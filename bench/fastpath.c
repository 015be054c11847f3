/*
 * fastpath: what one allocation and one free cost, uslab against malloc, in
 * the same process.
 *
 * Two patterns, 64-byte objects, single thread:
 *   pair   allocate one object and free it at once, N times: the fast path
 *          of both sides (for uslab: pop and push on the CPU free list).
 *   batch  allocate 10,000 objects, then free them in a fixed random order
 *          (the same permutation for both allocators); cost per object,
 *          alloc + free. Frees land all over the slabs, so this exercises
 *          the free slow path and the partial lists.
 *
 * uslab is reached through uslab_cache_alloc()/uslab_cache_free() of one
 * cache; "malloc" is whatever malloc() the process resolves, so
 *     LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libmimalloc.so.2 ./fastpath
 * measures uslab against mimalloc in one run. The program says which
 * library provides malloc.
 *
 * Rounds alternate (uslab, malloc, uslab, malloc, ...) so that drifts of
 * the machine (frequency, a neighbour's load) hit both sides alike; each
 * side reports the median of its rounds. An empty asm statement that takes
 * the pointer and clobbers memory keeps the compiler from eliding an
 * allocation/free pair.
 *
 * This binary is linked against the shared libuslab on purpose: that is how
 * users link, and it is what the TLS access of the fast path costs there
 * (see docs/design.md, "What the fast path costs on this machine").
 *
 * Output: a small table, then a last line the runner parses:
 *   RESULT pair_uslab=.. pair_malloc=.. batch_uslab=.. batch_malloc=.. ...
 * With --json the table is replaced by one JSON object.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "uslab.h"

#define OBJ_SIZE 64
#define BATCH 10000

/* Make `p` observable: the compiler must assume it is used and that memory
 * may have been read or written. Emits no instruction. */
#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static struct uslab_cache *cache;
static void *slots[BATCH];
static unsigned perm[BATCH];

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "fastpath: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* ---- the measured loops; noinline so each is one clean loop ---- */

static __attribute__((noinline)) void pair_uslab(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) {
		void *p = uslab_cache_alloc(cache);
		KEEP(p);
		uslab_cache_free(cache, p);
	}
}

static __attribute__((noinline)) void pair_malloc(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++) {
		void *p = malloc(OBJ_SIZE);
		KEEP(p);
		free(p);
	}
}

static __attribute__((noinline)) void batch_uslab(unsigned long reps)
{
	for (unsigned long r = 0; r < reps; r++) {
		for (unsigned i = 0; i < BATCH; i++) {
			void *p = uslab_cache_alloc(cache);
			if (__builtin_expect(p == NULL, 0))
				die("uslab_cache_alloc");
			slots[i] = p;
		}
		KEEP(slots);
		for (unsigned i = 0; i < BATCH; i++)
			uslab_cache_free(cache, slots[perm[i]]);
	}
}

static __attribute__((noinline)) void batch_malloc(unsigned long reps)
{
	for (unsigned long r = 0; r < reps; r++) {
		for (unsigned i = 0; i < BATCH; i++) {
			void *p = malloc(OBJ_SIZE);
			if (__builtin_expect(p == NULL, 0))
				die("malloc");
			slots[i] = p;
		}
		KEEP(slots);
		for (unsigned i = 0; i < BATCH; i++)
			free(slots[perm[i]]);
	}
}

/* Bulk against single calls, n objects at a time: the same objects come
 * and go either way (alloc n, free them in the same order). */
static unsigned bulk_n;
static __attribute__((noinline)) void bulk_single(unsigned long reps)
{
	for (unsigned long r = 0; r < reps; r++) {
		for (unsigned i = 0; i < bulk_n; i++)
			slots[i] = uslab_cache_alloc(cache);
		KEEP(slots);
		for (unsigned i = 0; i < bulk_n; i++)
			uslab_cache_free(cache, slots[i]);
	}
}

static __attribute__((noinline)) void bulk_bulk(unsigned long reps)
{
	for (unsigned long r = 0; r < reps; r++) {
		if (__builtin_expect(uslab_cache_alloc_bulk(cache, bulk_n, slots) != bulk_n, 0))
			die("uslab_cache_alloc_bulk");
		KEEP(slots);
		uslab_cache_free_bulk(cache, bulk_n, slots);
	}
}

/*
 * Run a measured loop with the stack moved by `off` bytes. The cost of a
 * pair depends on where the stack sits relative to the allocator's data
 * (stores to the stack and to the free list alias modulo 4 KiB), so a
 * process's environment size alone moved one allocator's pair time by 2x.
 * Each round runs at another offset (the same for both allocators), so the
 * medians are over stack placements, not one lucky or unlucky one.
 */
static __attribute__((noinline)) void at_offset(void (*fn)(unsigned long), unsigned long n, unsigned off)
{
	volatile char *pad = __builtin_alloca(off + 1);
	pad[0] = 0;
	fn(n);
	KEEP(pad);
}

static unsigned round_offset(unsigned r, unsigned rounds)
{
	return (unsigned)(((unsigned long)r * 4096 / rounds) & ~15UL);
}

/* ---- helpers ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

struct summary {
	double median, min, max;
};

static struct summary summarize(double *v, unsigned n)
{
	struct summary s;
	qsort(v, n, sizeof(*v), cmp_double);
	s.min = v[0];
	s.max = v[n - 1];
	s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	return s;
}

/* A fixed permutation of 0..BATCH-1 (xorshift64*, constant seed, Fisher-Yates). */
static void make_perm(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;
	for (unsigned i = 0; i < BATCH; i++)
		perm[i] = i;
	for (unsigned i = BATCH - 1; i > 0; i--) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		uint64_t r = (x * 0x2545f4914f6cdd1dULL) >> 32;
		unsigned j = (unsigned)(r % (i + 1));
		unsigned t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

/* The file that defines the malloc this process calls. */
static const char *malloc_provider(void)
{
	void *sym = dlsym(RTLD_DEFAULT, "malloc");
	Dl_info di;
	if (sym && dladdr(sym, &di) && di.dli_fname && di.dli_fname[0])
		return di.dli_fname;
	return "?";
}

static const char *basename_of(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

static unsigned long parse_ulong(const char *opt, const char *s)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v == 0) {
		fprintf(stderr, "fastpath: %s wants a positive integer, not '%s'\n", opt, s);
		exit(2);
	}
	return v;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: fastpath [--quick] [--rounds N] [--pairs N] [--batch-reps N] [--json] [--trace]\n"
		"  64-byte objects; uslab_cache_alloc/free against malloc/free, rounds interleaved.\n"
		"  --rounds N      rounds per allocator and pattern (default 15; --quick 5)\n"
		"  --pairs N       alloc+free pairs per pair round (default 10000000; --quick 2000000)\n"
		"  --batch-reps N  batches of %d objects per batch round (default 1000; --quick 200)\n"
		"  --json          print one JSON object instead of the table\n"
		"  --trace         also print every round's pair and batch times to stderr (the\n"
		"                  machine's speed can change between rounds: see which rounds)\n"
		"  Compare another malloc with LD_PRELOAD=/path/to/libX.so ./fastpath\n",
		BATCH);
}

int main(int argc, char **argv)
{
	unsigned rounds = 15;
	unsigned long pairs = 10000000UL, batch_reps = 1000;
	int json = 0, trace = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--quick")) {
			rounds = 5;
			pairs = 2000000UL;
			batch_reps = 200;
		} else if (!strcmp(a, "--json")) {
			json = 1;
		} else if (!strcmp(a, "--trace")) {
			trace = 1;
		} else if (!strcmp(a, "--rounds") && i + 1 < argc) {
			rounds = (unsigned)parse_ulong(a, argv[++i]);
		} else if (!strcmp(a, "--pairs") && i + 1 < argc) {
			pairs = parse_ulong(a, argv[++i]);
		} else if (!strcmp(a, "--batch-reps") && i + 1 < argc) {
			batch_reps = parse_ulong(a, argv[++i]);
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (rounds > 1000)
		rounds = 1000;

	const char *provider = malloc_provider();
	if (strstr(basename_of(provider), "uslab"))
		fprintf(stderr, "fastpath: warning: malloc resolves to %s itself; "
				"the comparison is uslab against uslab\n", provider);

	cache = uslab_cache_create("bench-64", OBJ_SIZE, 0, 0, NULL);
	if (!cache)
		die("uslab_cache_create");
	make_perm();

	double *pu = calloc(rounds, sizeof(double)), *pm = calloc(rounds, sizeof(double));
	double *bu = calloc(rounds, sizeof(double)), *bm = calloc(rounds, sizeof(double));
	if (!pu || !pm || !bu || !bm)
		die("calloc");

	/* Warm up both sides: fault in slabs / arenas, train branch predictors. */
	pair_uslab(pairs / 10 + 1);
	pair_malloc(pairs / 10 + 1);
	batch_uslab(batch_reps / 10 + 1);
	batch_malloc(batch_reps / 10 + 1);

	for (unsigned r = 0; r < rounds; r++) {
		unsigned off = round_offset(r, rounds);
		double t0 = now_ns();
		at_offset(pair_uslab, pairs, off);
		double t1 = now_ns();
		at_offset(pair_malloc, pairs, off);
		double t2 = now_ns();
		pu[r] = (t1 - t0) / (double)pairs;
		pm[r] = (t2 - t1) / (double)pairs;
		if (trace)
			fprintf(stderr, "trace pair round %u stack-offset %u uslab %.3f malloc %.3f ratio %.4f\n", r, off,
				pu[r], pm[r], pu[r] / pm[r]);
	}
	for (unsigned r = 0; r < rounds; r++) {
		unsigned off = round_offset(r, rounds);
		double t0 = now_ns();
		at_offset(batch_uslab, batch_reps, off);
		double t1 = now_ns();
		at_offset(batch_malloc, batch_reps, off);
		double t2 = now_ns();
		bu[r] = (t1 - t0) / ((double)batch_reps * BATCH);
		bm[r] = (t2 - t1) / ((double)batch_reps * BATCH);
		if (trace)
			fprintf(stderr, "trace batch round %u stack-offset %u uslab %.3f malloc %.3f ratio %.4f\n", r, off,
				bu[r], bm[r], bu[r] / bm[r]);
	}

	/* bulk against single calls, per object (uslab only) */
	static const unsigned bulk_sizes[] = { 1, 32, 128, 250 };
	enum { NBULK = sizeof bulk_sizes / sizeof bulk_sizes[0] };
	double bulk_ratio[NBULK], bulk_ns[NBULK], single_ns[NBULK];
	double *bs = calloc(rounds, sizeof(double)), *bb = calloc(rounds, sizeof(double));
	double *br = calloc(rounds, sizeof(double));
	if (!bs || !bb || !br)
		die("calloc");
	for (unsigned k = 0; k < NBULK; k++) {
		bulk_n = bulk_sizes[k];
		unsigned long reps = pairs / (4 * bulk_n) + 1;
		bulk_single(reps / 10 + 1);
		bulk_bulk(reps / 10 + 1);
		for (unsigned r = 0; r < rounds; r++) {
			unsigned off = round_offset(r, rounds);
			double t0 = now_ns();
			at_offset(bulk_single, reps, off);
			double t1 = now_ns();
			at_offset(bulk_bulk, reps, off);
			double t2 = now_ns();
			bs[r] = (t1 - t0) / ((double)reps * bulk_n);
			bb[r] = (t2 - t1) / ((double)reps * bulk_n);
			br[r] = bb[r] / bs[r];
		}
		single_ns[k] = summarize(bs, rounds).median;
		bulk_ns[k] = summarize(bb, rounds).median;
		bulk_ratio[k] = summarize(br, rounds).median;   /* the median of in-round ratios */
	}
	free(bs);
	free(bb);
	free(br);

	struct summary spu = summarize(pu, rounds), spm = summarize(pm, rounds);
	struct summary sbu = summarize(bu, rounds), sbm = summarize(bm, rounds);
	double pair_ratio = spu.median / spm.median, batch_ratio = sbu.median / sbm.median;

	struct uslab_cache_info info;
	memset(&info, 0, sizeof(info));
	info.version = USLAB_CACHE_INFO_VERSION;
	int have_info = uslab_cache_get_info(cache, &info) == 0;
	uint64_t *ev = info.events;
	/* "fast": no lock and no atomic: a sheaf, or classic mode's CPU free list */
	uint64_t af = ev[USLAB_STAT_ALLOC_FASTPATH] + ev[USLAB_STAT_ALLOC_PCS], as = ev[USLAB_STAT_ALLOC_SLOWPATH];
	uint64_t ff = ev[USLAB_STAT_FREE_FASTPATH] + ev[USLAB_STAT_FREE_PCS], fs = ev[USLAB_STAT_FREE_SLOWPATH];
	double afast = af + as ? 100.0 * (double)af / (double)(af + as) : 0;
	double ffast = ff + fs ? 100.0 * (double)ff / (double)(ff + fs) : 0;

	if (json) {
		printf("{\"object_size\":%d,\"rounds\":%u,\"pairs\":%lu,\"batch\":%d,\"batch_reps\":%lu,"
		       "\"malloc\":\"%s\","
		       "\"pair_uslab\":%.3f,\"pair_malloc\":%.3f,\"pair_ratio\":%.4f,"
		       "\"batch_uslab\":%.3f,\"batch_malloc\":%.3f,\"batch_ratio\":%.4f,"
		       "\"pair_uslab_min\":%.3f,\"pair_uslab_max\":%.3f,"
		       "\"pair_malloc_min\":%.3f,\"pair_malloc_max\":%.3f,"
		       "\"batch_uslab_min\":%.3f,\"batch_uslab_max\":%.3f,"
		       "\"batch_malloc_min\":%.3f,\"batch_malloc_max\":%.3f",
		       OBJ_SIZE, rounds, pairs, BATCH, batch_reps, provider,
		       spu.median, spm.median, pair_ratio, sbu.median, sbm.median, batch_ratio,
		       spu.min, spu.max, spm.min, spm.max, sbu.min, sbu.max, sbm.min, sbm.max);
		if (have_info)
			printf(",\"uslab_alloc_fast_pct\":%.2f,\"uslab_free_fast_pct\":%.2f,"
			       "\"uslab_node_lock\":%llu",
			       afast, ffast, (unsigned long long)ev[USLAB_STAT_NODE_LOCK]);
		printf("}\n");
	} else {
		printf("fastpath: %d-byte objects, %u interleaved rounds per allocator; "
		       "ns, median (min-max)\n", OBJ_SIZE, rounds);
		printf("malloc: %s\n\n", provider);
		printf("%-34s %22s %22s %13s\n", "pattern", "uslab", "malloc", "uslab/malloc");
		printf("%-34s %8.2f (%5.2f-%5.2f) %8.2f (%5.2f-%5.2f) %13.3f\n",
		       "alloc+free pair, ns/pair", spu.median, spu.min, spu.max,
		       spm.median, spm.min, spm.max, pair_ratio);
		char label[64];
		snprintf(label, sizeof(label), "batch %d, shuffled free, ns/obj", BATCH);
		printf("%-34s %8.2f (%5.2f-%5.2f) %8.2f (%5.2f-%5.2f) %13.3f\n", label,
		       sbu.median, sbu.min, sbu.max, sbm.median, sbm.min, sbm.max, batch_ratio);
		if (have_info)
			printf("\nuslab cache %s: alloc fast path %.2f%%, free fast path %.2f%%, "
			       "NODE_LOCK %llu, slabs %llu, order %u, %u objects/slab\n",
			       info.name, afast, ffast,
			       (unsigned long long)ev[USLAB_STAT_NODE_LOCK],
			       (unsigned long long)info.slabs, info.order, info.objects_per_slab);
		for (unsigned k = 0; k < NBULK; k++)
			printf("bulk of %3u: %.2f ns/object, single calls %.2f ns/object: %.3f of single calls\n",
			       bulk_sizes[k], bulk_ns[k], single_ns[k], bulk_ratio[k]);
		printf("RESULT pair_uslab=%.3f pair_malloc=%.3f batch_uslab=%.3f batch_malloc=%.3f "
		       "pair_ratio=%.4f batch_ratio=%.4f malloc=%s bulk1=%.4f bulk32=%.4f bulk128=%.4f bulk250=%.4f\n",
		       spu.median, spm.median, sbu.median, sbm.median, pair_ratio, batch_ratio,
		       basename_of(provider), bulk_ratio[0], bulk_ratio[1], bulk_ratio[2], bulk_ratio[3]);
	}

	uslab_cache_destroy(cache);
	free(pu);
	free(pm);
	free(bu);
	free(bm);
	return 0;
}
