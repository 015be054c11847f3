/*
 * Cross-thread stress with content cookies, after mimalloc's test-stress
 * (docs/testing.md rows 31 and 33): generations of THREADS threads allocate
 * from several caches, free some of their own objects, swap objects through a
 * shared transfer array of 1000 slots with atomic exchange (so objects are
 * freed by other threads, often after their allocating thread exited), and
 * keep some across the generation. Half of the transfer slots survive into
 * the next generation. Every object carries a cookie derived from its
 * address and cache plus a pattern over its whole size, checked before it
 * is freed. Now and then a thread shrinks a cache while others allocate.
 *
 * At the end everything is freed: every cache has active_objects == 0, the
 * event counters add up to the allocations and frees made, shrink gives
 * every slab back (all worker threads exited) and destroy says nothing.
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#define THREADS     8
#define TRANSFERS   1000
#define GENERATIONS SCALE(50, 20)
#define BASE_ALLOCS SCALE(4000, 1000)    /* per thread and generation, x (tid % 8 + 1) */
#define TIME_BUDGET SCALE(3.0, 8.0)      /* seconds; at least 2 generations run */

struct kind {
	size_t size, align;
	unsigned long flags;
	unsigned weight;                 /* percent */
};

static const struct kind kinds[] = {
	{ 16, 0, 0, 25 },
	{ 24, 0, 0, 15 },
	{ 64, 0, USLAB_HWCACHE_ALIGN, 20 },
	{ 200, 0, 0, 15 },
	{ 1000, 0, 0, 10 },
	{ 4000, 0, 0, 8 },
	{ 120, 128, 0, 5 },
	{ 20000, 0, 0, 2 },
};
#define NKINDS (sizeof kinds / sizeof kinds[0])

static struct uslab_cache *caches[NKINDS];
static _Atomic(void *) transfer[TRANSFERS];
static atomic_uint_fast64_t n_alloc[NKINDS], n_free[NKINDS];
static double deadline;

/* ---- objects with cookies -------------------------------------------------- */

static uint64_t cookie(const void *p, unsigned k)
{
	uint64_t x = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL;
	return (x ^ (x >> 29) ^ kinds[k].size) + k;
}

/* Word 0: cookie; word 1: kind | ~cookie << 8; then cookie ^ i over the
 * rest (every word for small objects, a sample plus the tail for big ones). */
static size_t word_step(size_t nwords)
{
	return nwords <= 64 ? 1 : 7;
}

static void *alloc_item(uint64_t *r, uint64_t *counts)
{
	unsigned pick = (unsigned)(rnd_next(r) % 100), k = 0, acc = 0;
	for (k = 0; k < NKINDS - 1; k++) {
		acc += kinds[k].weight;
		if (pick < acc)
			break;
	}
	uint64_t *w = uslab_cache_alloc(caches[k]);
	CHECKF(w != NULL, "alloc from cache %u (size %zu) failed, errno %d", k, kinds[k].size, errno);
	size_t want = kinds[k].align ? kinds[k].align : kinds[k].size < 16 ? 8 : 16;
	CHECKF((uintptr_t)w % want == 0, "object %p of cache %u misaligned", (void *)w, k);
	uint64_t c = cookie(w, k);
	size_t nw = kinds[k].size / 8, step = word_step(nw);
	w[0] = c;
	w[1] = k | (~c << 8);
	for (size_t i = 2; i < nw; i += step)
		w[i] = c ^ i;
	if (nw > 2)
		w[nw - 1] = c ^ (nw - 1);
	counts[k]++;
	return w;
}

static void free_item(void *p, uint64_t *counts)
{
	if (!p)
		return;
	uint64_t *w = p;
	unsigned k = (unsigned)(w[1] & 0xff);
	CHECKF(k < NKINDS, "object %p: bad kind word %#" PRIx64, p, w[1]);
	uint64_t c = cookie(w, k);
	CHECKF(w[0] == c && w[1] == (k | (~c << 8)), "object %p (cache %u): cookie %#" PRIx64 " != %#" PRIx64, p,
	       k, w[0], c);
	size_t nw = kinds[k].size / 8, step = word_step(nw);
	for (size_t i = 2; i < nw; i += step)
		CHECKF(w[i] == (c ^ i), "object %p (cache %u, size %zu): word %zu overwritten", p, k, kinds[k].size,
		       i);
	CHECKF(nw <= 2 || w[nw - 1] == (c ^ (nw - 1)), "object %p: last word overwritten", p);
	w[0] = 0;     /* a second free through our own bookkeeping would show */
	uslab_cache_free(caches[k], p);
	counts[k]++;
}

/* ---- one thread of one generation -------------------------------------------- */

static void *stress(void *arg)
{
	uintptr_t tid = (uintptr_t)arg;
	uint64_t r = (tid + 1) * 43, allocs_done[NKINDS] = { 0 }, frees_done[NKINDS] = { 0 };
	size_t allocs = (size_t)BASE_ALLOCS * (tid % 8 + 1);
	size_t retain = allocs / 2;
	size_t data_size = 0, data_top = 0, retain_top = 0;
	void **data = NULL;
	void **retained = calloc(retain + 1, sizeof *retained);
	CHECK(retained != NULL);

	while (allocs > 0 || retain > 0) {
		/* Out of time (never in the first generation). */
		if (tid >= THREADS && (allocs & 1023) == 0 && check_now() > deadline) {
			allocs = 0;
			retain = 0;
			break;
		}
		if (retain == 0 || (rnd_chance(&r, 50) && allocs > 0)) {
			/* 50%+: allocate a short-lived object */
			allocs--;
			if (data_top >= data_size) {
				data_size += 1000 * 8;
				data = realloc(data, data_size * sizeof *data);
				CHECK(data != NULL);
			}
			data[data_top++] = alloc_item(&r, allocs_done);
		} else {
			/* 25%: retain an object until the thread ends */
			retained[retain_top++] = alloc_item(&r, allocs_done);
			retain--;
		}
		if (rnd_chance(&r, 66) && data_top > 0) {
			/* 66%: free an earlier object (maybe from another thread) */
			size_t idx = rnd_next(&r) % data_top;
			free_item(data[idx], frees_done);
			data[idx] = NULL;
		}
		if (rnd_chance(&r, 25) && data_top > 0) {
			/* 25%: exchange a local pointer with the shared transfer array */
			size_t di = rnd_next(&r) % data_top, ti = rnd_next(&r) % TRANSFERS;
			data[di] = atomic_exchange_explicit(&transfer[ti], data[di], memory_order_acq_rel);
		}
		if (rnd_next(&r) % 20000 == 0)
			(void)uslab_cache_shrink(caches[rnd_next(&r) % NKINDS]);
	}
	for (size_t i = 0; i < retain_top; i++)
		free_item(retained[i], frees_done);
	for (size_t i = 0; i < data_top; i++)
		free_item(data[i], frees_done);
	free(retained);
	free(data);
	for (unsigned k = 0; k < NKINDS; k++) {
		atomic_fetch_add(&n_alloc[k], allocs_done[k]);
		atomic_fetch_add(&n_free[k], frees_done[k]);
	}
	return NULL;
}

/* Frees by main go into their own counters. */
static uint64_t main_frees[NKINDS];

static void test_stress(void)
{
	for (unsigned k = 0; k < NKINDS; k++) {
		char name[32];
		snprintf(name, sizeof name, "stress_%zu", kinds[k].size);
		caches[k] = uslab_cache_create(name, kinds[k].size, kinds[k].align, kinds[k].flags, NULL);
		CHECK(caches[k] != NULL);
	}
	double t0 = check_now();
	deadline = t0 + TIME_BUDGET;
	uint64_t r = 42;
	int gen;
	for (gen = 0; gen < GENERATIONS; gen++) {
		pthread_t th[THREADS];
		for (uintptr_t i = 0; i < THREADS; i++)
			CHECK(pthread_create(&th[i], NULL, stress, (void *)(i + (uintptr_t)gen * THREADS)) == 0);
		for (int i = 0; i < THREADS; i++)
			CHECK(pthread_join(th[i], NULL) == 0);
		/* Half of the transfer slots survive into the next generation. */
		for (size_t i = 0; i < TRANSFERS; i++) {
			if (rnd_chance(&r, 50)) {
				void *p = atomic_exchange(&transfer[i], NULL);
				free_item(p, main_frees);
			}
		}
		if (gen >= 1 && check_now() > deadline)
			break;
	}
	int gens_done = gen < GENERATIONS ? gen + 1 : gen;
	for (size_t i = 0; i < TRANSFERS; i++)
		free_item(atomic_exchange(&transfer[i], NULL), main_frees);

	uint64_t total = 0;
	for (unsigned k = 0; k < NKINDS; k++) {
		struct uslab_cache_info info;
		cache_info(caches[k], &info);
		uint64_t a = atomic_load(&n_alloc[k]), f = atomic_load(&n_free[k]) + main_frees[k];
		total += a;
		printf("    cache %-12s %9" PRIu64 " allocs, slow %5.2f%%, slow frees %5.2f%%, %" PRIu64
		       " slabs now\n",
		       info.name, a, a ? 100.0 * (double)info.events[USLAB_STAT_ALLOC_SLOWPATH] / (double)a : 0.0,
		       a ? 100.0 * (double)info.events[USLAB_STAT_FREE_SLOWPATH] / (double)a : 0.0, info.slabs);
		CHECK_EQ(a, f);
		CHECKF(info.active_objects == 0, "cache %s: %" PRIu64 " objects still active", info.name,
		       info.active_objects);
		/* Counters of exited threads are kept. */
		CHECK_EQ(ev_allocs(&info), a);
		CHECK_EQ(ev_frees(&info), f);
		CHECK_EQ(info.events[USLAB_STAT_ALLOC_FAILED], 0);
		CHECK(a > 0);
		/* Every thread that held a slab has exited. */
		CHECKF(uslab_cache_shrink(caches[k]) == 0, "cache %s still holds slabs", info.name);
		cache_info(caches[k], &info);
		CHECK_EQ(info.slabs, 0);
		destroy_silently(caches[k]);
	}
	printf("    %d generations x %d threads, %" PRIu64 " allocations in %.2f s\n", gens_done, THREADS, total,
	       check_now() - t0);
	CHECK(gens_done >= 2);
}

int main(void)
{
	check_init("test_stress");
	RUN(test_stress);
	return 0;
}
