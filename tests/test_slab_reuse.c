/*
 * Slabs that go full, empty and back to the page allocator within a few
 * operations, their records reused at once by slabs of other caches, in
 * every per-CPU mode that freezes or owns slabs (classic, home, slqb) and
 * the variant's own (a variant that sets USLAB_OPTIONS: its own alone).
 *
 * Three caches of very different objects (30,000 B: two a slab; 5,000 B;
 * 200 B), min_partial 0 so that every emptied slab is given back, six
 * threads (more than this machine's CPUs: preemption anywhere) that
 * allocate, hand objects to each other through shared slots by atomic
 * exchange and free what they get, with bulk round trips and shrinks
 * mixed in. Every live object carries its address and cache in its first
 * words, checked before its free: an object handed out twice, or of
 * another cache's slab, shows there if the allocator's own checks miss it.
 * At the end every cache validates and has no object out.
 *
 * The bug it was written for (2026-11-26): classic deactivation read the
 * slab's record after unfreezing a full slab, by which time a free could
 * have emptied it, given it back and another cache made a new slab in its
 * place; the deactivating thread then listed that new slab, another part's
 * CPU slab ("listed twice or listed while frozen", objects handed out
 * twice). It needs a preemption in a window of a few instructions: a run
 * of this test caught it about one time in ten on a 2-CPU machine, so it
 * guards against the class of bug rather than proving its absence;
 * tests/repro/classic_multicache_race.c, the reproducer, says how it was
 * made to fail every time.
 */
#include "check.h"

#include <stdatomic.h>

#define NC      3
#define THREADS 6
#define SLOTS   64
#define PHASE_S SCALE(1.5, 2.0)   /* seconds per mode */

static struct uslab_cache *caches[NC];
static const size_t osz[NC] = { 30000, 5000, 200 };
static _Atomic uintptr_t slots[SLOTS];   /* object | cache index (objects are 8-byte aligned) */
static atomic_bool stop;

/* The cookie: the object's address and its cache, in its first two words. */
static void stamp(void *p, unsigned c)
{
	uintptr_t *w = p;
	w[0] = (uintptr_t)p ^ 0x5ab5ab5ab5ab5ab5ULL;
	w[1] = c;
}

static void check_and_free(uintptr_t v)
{
	unsigned c = (unsigned)(v & 7);
	uintptr_t *w = (uintptr_t *)(v & ~(uintptr_t)7);
	CHECKF(w[0] == ((uintptr_t)w ^ 0x5ab5ab5ab5ab5ab5ULL) && w[1] == c,
	       "object %p of cache %u: cookie %#lx %#lx (handed out twice, or another cache's)", (void *)w, c,
	       (unsigned long)w[0], (unsigned long)w[1]);
	w[0] = 0;   /* a second handout of the same object would find no cookie */
	uslab_cache_free(caches[c], w);
}

static void *worker(void *arg)
{
	uint64_t rs = (uintptr_t)arg;
	void *b[32];
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		uint64_t r = rnd_next(&rs);
		unsigned c = (unsigned)(r % NC);
		if ((r >> 20) % 8 == 0) {   /* a bulk round trip */
			size_t n = 1 + (r >> 24) % 32;
			CHECK(uslab_cache_alloc_bulk(caches[c], n, b) == n);
			for (size_t i = 0; i < n; i++)
				stamp(b[i], c);
			uslab_cache_free_bulk(caches[c], n, b);
			continue;
		}
		if ((r >> 20) % 256 == 1) {
			uslab_cache_shrink(caches[c]);
			continue;
		}
		void *p = uslab_cache_alloc(caches[c]);
		CHECK(p != NULL);
		CHECK(((uintptr_t)p & 7) == 0);
		stamp(p, c);
		uintptr_t old = atomic_exchange(&slots[(r >> 8) % SLOTS], (uintptr_t)p | c);
		if (old)
			check_and_free(old);
	}
	return NULL;
}

/* One phase: every cache tuned by `key` = `val` (or left as the variant
 * runs it: key NULL), the threads for PHASE_S seconds, then everything
 * freed and checked. */
static void phase(const char *key, unsigned long val)
{
	for (unsigned c = 0; c < NC && key; c++) {
		if (uslab_cache_tune_set(caches[c], key, val)) {
			/* debug caches (the debug variant) keep nothing per CPU:
			 * they refuse modes other than classic */
			CHECK(errno == EINVAL && val);
			printf("    %s=%lu refused (debug caches): skipped\n", key, val);
			return;
		}
	}
	atomic_store(&stop, false);
	pthread_t t[THREADS];
	for (uintptr_t i = 0; i < THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, worker, (void *)(i * 7919 + 1)) == 0);
	struct timespec ts = { (time_t)PHASE_S, (long)((PHASE_S - (double)(time_t)PHASE_S) * 1e9) };
	nanosleep(&ts, NULL);
	atomic_store(&stop, true);
	for (unsigned i = 0; i < THREADS; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	for (unsigned k = 0; k < SLOTS; k++) {
		uintptr_t v = atomic_exchange(&slots[k], 0);
		if (v)
			check_and_free(v);
	}
	for (unsigned c = 0; c < NC; c++) {
		CHECK_EQ(uslab_cache_validate(caches[c]), 0);
		struct uslab_cache_info info = { .version = USLAB_CACHE_INFO_VERSION };
		CHECK_EQ(uslab_cache_get_info(caches[c], &info), 0);
		CHECKF(info.active_objects == 0, "cache %s: %llu objects out after every free", info.name,
		       (unsigned long long)info.active_objects);
	}
}

static void test_variant_mode(void)
{
	phase(NULL, 0);
}

static void test_classic(void)
{
	phase("sheaf_capacity", 0);   /* CPU slabs and CPU partial lists */
	phase("cpu_partial", 0);      /* CPU slabs alone */
}

static void test_home(void)
{
	phase("cpu_mode", 2);   /* owned slabs given up through the same deactivation */
}

static void test_slqb(void)
{
	phase("cpu_mode", 3);
}

int main(void)
{
	check_init("test_slab_reuse");
	for (unsigned c = 0; c < NC; c++) {
		char name[32];
		snprintf(name, sizeof name, "reuse%zu", osz[c]);
		caches[c] = uslab_cache_create(name, osz[c], 0, USLAB_NO_MERGE, NULL);
		CHECK(caches[c] != NULL);
		CHECK_EQ(uslab_cache_tune_set(caches[c], "min_partial", 0), 0);
	}
	RUN(test_variant_mode);
	/* The phases that retune every cache run where the suite sets no
	 * USLAB_OPTIONS (the normal, asan and tsan variants); a mode or debug
	 * variant runs its own mode alone (each phase is 1.5 s of six
	 * threads, and these reruns were the same test again). */
	const char *opts = getenv("USLAB_OPTIONS");
	if (!opts || !*opts) {
		RUN(test_classic);
		RUN(test_home);
		RUN(test_slqb);
	} else {
		printf("  USLAB_OPTIONS=%s: the variant's own mode only\n", opts);
	}
	for (unsigned c = 0; c < NC; c++)
		uslab_cache_destroy(caches[c]);
	return 0;
}
