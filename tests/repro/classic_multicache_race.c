/*
 * Reproducer of a fixed bug (not built by CMake, not part of the suite;
 * test_slab_reuse runs its pattern in the suite).
 *
 * Classic mode (slub_sheaf_capacity=0) corrupted its slab state when
 * several threads freed each other's objects of caches whose slabs go
 * full and empty within a few operations: "listed twice or listed while
 * frozen", "free of a freed block", "double free", "wrong cache". The
 * cause: cpu_slab_deactivate() read the slab's record (its uncarved
 * count) after unfreezing a full slab, by which time another thread could
 * have emptied it, given it back and made a new slab of another cache at
 * the same record; the deactivating thread then listed that new slab.
 * docs/testing.md ("Fixed: classic deactivation race") says how it was
 * found: an event log of every slab-word CAS, and sched_yield() injected
 * between decisions and their CASes, which made every run fail.
 *
 * Measured 2026-11-26 on a 2-vCPU guest, 4 s runs with two busy loops
 * beside them: 3 of 40 runs failed before the fix, 0 of 40 after.
 *
 *   cc -O2 -pthread -Iinclude tests/repro/classic_multicache_race.c -o /tmp/classic_race \
 *      -Lbuild-test -luslab -Wl,-rpath,$PWD/build-test
 *   for i in $(seq 20); do USLAB_OPTIONS=slub_sheaf_capacity=0 /tmp/classic_race 6; done
 *
 *   /tmp/classic_race [SECONDS=10]; switches in the environment, to narrow it down:
 *     NOBULK=1    no alloc_bulk/free_bulk round trips
 *     NOSHRINK=1  no uslab_cache_shrink() calls
 *     NOTUNE=1    the caches keep their default tunables (else min_partial 0
 *                 for the 30,000 B cache and cpu_partial 2 for the 5,000 B one)
 *     CP0=1       cpu_partial 0 on every cache (no CPU partial lists)
 *     ONE=I       only cache I (0, 1 or 2) is used
 * Exit status 0 and "ok" when the run ends and every cache validates.
 */
#define _GNU_SOURCE
#include <uslab.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>
#include <stdbool.h>

#define NC 3
static struct uslab_cache *caches[NC];
static size_t osz[NC] = { 30000, 5000, 200 };
#define XS 64
static _Atomic uintptr_t xobj[XS];
static atomic_bool stop;
static bool nobulk, noshrink, notune;
static int only_cache = -1;   /* ONE=I: every operation on cache I */

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void *worker(void *arg)
{
	uint64_t rs = (uintptr_t)arg;
	void *b[32];
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint64_t r = rnd(&rs);
		int c = only_cache >= 0 ? only_cache : (int)(r % NC);
		unsigned k = (unsigned)(r >> 8) % XS;
		if (!nobulk && (r >> 20) % 4 == 0) {
			size_t n = 1 + (r >> 24) % 32;
			if (uslab_cache_alloc_bulk(caches[c], n, b) != n) abort();
			for (size_t i = 0; i < n; i++) memset(b[i], 0x5a, 16);
			uslab_cache_free_bulk(caches[c], n, b);
			continue;
		}
		if (!noshrink && (r >> 20) % 64 == 1) {
			uslab_cache_shrink(caches[c]);
			continue;
		}
		void *p = uslab_cache_alloc(caches[c]);
		if (!p) abort();
		memset(p, 0x5a, 16);
		uintptr_t old = atomic_exchange(&xobj[k], (uintptr_t)p | (uintptr_t)c);
		if (old)
			uslab_cache_free(caches[old & 7], (void *)(old & ~(uintptr_t)7));
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int secs = argc > 1 ? atoi(argv[1]) : 10;
	for (int c = 0; c < NC; c++) {
		char name[32];
		snprintf(name, sizeof name, "rs%zu", osz[c]);
		caches[c] = uslab_cache_create(name, osz[c], 0, USLAB_NO_MERGE, NULL);
		if (!caches[c]) abort();
	}
	nobulk = getenv("NOBULK") != NULL;
	noshrink = getenv("NOSHRINK") != NULL;
	notune = getenv("NOTUNE") != NULL;
	if (getenv("ONE"))
		only_cache = atoi(getenv("ONE")) % NC;
	if (getenv("CP0"))
		for (int c = 0; c < NC; c++)
			uslab_cache_tune_set(caches[c], "cpu_partial", 0);
	if (!notune) {
		uslab_cache_tune_set(caches[0], "min_partial", 0);
		uslab_cache_tune_set(caches[1], "cpu_partial", 2);
	}
	pthread_t t[6];
	for (uintptr_t i = 0; i < 6; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 7 + (uintptr_t)time(NULL)));
	sleep(secs);
	atomic_store(&stop, true);
	for (int i = 0; i < 6; i++) pthread_join(t[i], NULL);
	for (int k = 0; k < XS; k++) {
		uintptr_t p = atomic_exchange(&xobj[k], 0);
		if (p)
			uslab_cache_free(caches[p & 7], (void *)(p & ~(uintptr_t)7));
	}
	for (int c = 0; c < NC; c++)
		if (uslab_cache_validate(caches[c])) {
			printf("validate failed\n");
			return 1;
		}
	printf("ok\n");
	return 0;
}
