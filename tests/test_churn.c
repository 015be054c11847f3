/*
 * Threads that come and go (docs/testing.md rows 34 and 35).
 *
 * test_thread_churn: thousands of short-lived threads, run in small batches,
 * each allocate from two caches, free some (alloc/free/alloc), and hand the
 * rest to the main thread, which frees them after the next batch, long after
 * their allocating thread exited. RSS and slab counts measured after the
 * first few hundred threads and at the end, in the same state (after a
 * shrink, with the same number of objects held), must stay flat: what a
 * thread caches goes back when it exits.
 *
 * test_thread_exit_race: 2 outer threads spawn and join 4 inner threads each,
 * over and over, for a few seconds and at least 3 rounds each (a loaded
 * machine may give an outer thread little of those seconds: the rounds
 * are waited for, up to CHECK_HANG_S more, not counted on); with a
 * barrier, half of the inner
 * threads allocate before it and half after. Inner threads free objects
 * allocated by the previous round's threads (exited) and swap objects with
 * the other outer thread's inner threads through a shared slot.
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

static uint64_t cookie(const void *p)
{
	uint64_t x = (uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ULL;
	return x ^ (x >> 31);
}

static void *get(struct uslab_cache *c)
{
	uint64_t *p = uslab_cache_alloc(c);
	CHECKF(p != NULL, "errno %d", errno);
	p[0] = cookie(p);
	p[1] = ~cookie(p);
	return p;
}

static void put(struct uslab_cache *c, void *obj)
{
	if (!obj)
		return;
	uint64_t *p = obj;
	CHECKF(p[0] == cookie(p) && p[1] == ~cookie(p), "object %p corrupted", obj);
	p[0] = 0;
	uslab_cache_free(c, obj);
}

/* ---- thread churn ------------------------------------------------------------ */

#define CHURN_THREADS SCALE(5000, 1000)
#define CHURN_WARM    SCALE(400, 200)
#define BATCH         4
#define HAND_A        6     /* objects each thread hands to main */
#define HAND_B        2

static struct uslab_cache *ca, *cb;

struct hand {
	void *a[HAND_A], *b[HAND_B];
};

static void *churn_thread(void *arg)
{
	struct hand *h = arg;
	void *a[24], *b[8];
	for (int i = 0; i < 24; i++)
		a[i] = get(ca);
	for (int i = 0; i < 8; i++)
		b[i] = get(cb);
	/* free some, allocate again (alloc/free/alloc) */
	for (int i = 0; i < 24; i += 2)
		put(ca, a[i]);
	for (int i = 0; i < 8; i += 2)
		put(cb, b[i]);
	for (int i = 0; i < 24; i += 2)
		a[i] = get(ca);
	for (int i = 0; i < 8; i += 2)
		b[i] = get(cb);
	for (int i = HAND_A; i < 24; i++)
		put(ca, a[i]);
	for (int i = HAND_B; i < 8; i++)
		put(cb, b[i]);
	memcpy(h->a, a, sizeof h->a);
	memcpy(h->b, b, sizeof h->b);
	return NULL;
}

static void free_hand(struct hand *h)
{
	for (int i = 0; i < HAND_A; i++)
		put(ca, h->a[i]);
	for (int i = 0; i < HAND_B; i++)
		put(cb, h->b[i]);
	memset(h, 0, sizeof *h);
}

static void test_thread_churn(void)
{
	ca = uslab_cache_create("churn_a", 48, 0, 0, NULL);
	cb = uslab_cache_create("churn_b", 700, 0, 0, NULL);
	CHECK(ca && cb);
	static struct hand hands[2][BATCH];
	size_t rss_early = 0, rss_end = 0;
	uint64_t slabs_early = 0, slabs_end = 0;
	int batches = CHURN_THREADS / BATCH;
	for (int b = 0; b < batches; b++) {
		struct hand *cur = hands[b % 2], *prev = hands[(b + 1) % 2];
		pthread_t t[BATCH];
		for (int i = 0; i < BATCH; i++)
			CHECK(pthread_create(&t[i], NULL, churn_thread, &cur[i]) == 0);
		for (int i = 0; i < BATCH; i++)
			CHECK(pthread_join(t[i], NULL) == 0);
		/* The previous batch's objects: their threads are long gone. */
		for (int i = 0; i < BATCH; i++)
			free_hand(&prev[i]);
		CHECK_EQ(cache_active(ca), BATCH * HAND_A);
		CHECK_EQ(cache_active(cb), BATCH * HAND_B);
		int done = (b + 1) * BATCH;
		if (done == CHURN_WARM || b == batches - 1) {
			uslab_cache_shrink(ca);
			uslab_cache_shrink(cb);
			struct uslab_cache_info ia, ib;
			cache_info(ca, &ia);
			cache_info(cb, &ib);
			/* After shrink, with every other thread gone, each
			 * remaining slab holds a live object. */
			CHECKF(ia.slabs <= ia.active_objects && ib.slabs <= ib.active_objects,
			       "after shrink: %" PRIu64 " slabs for %" PRIu64 " objects, %" PRIu64 " for %" PRIu64,
			       ia.slabs, ia.active_objects, ib.slabs, ib.active_objects);
			size_t rss = test_rss();
			printf("    after %5d threads: RSS %7.2f MiB, slabs %" PRIu64 " + %" PRIu64 "\n", done,
			       (double)rss / MiB, ia.slabs, ib.slabs);
			if (done == CHURN_WARM) {
				rss_early = rss;
				slabs_early = ia.slabs + ib.slabs;
			} else {
				rss_end = rss;
				slabs_end = ia.slabs + ib.slabs;
			}
		}
	}
	for (int i = 0; i < BATCH; i++) {
		free_hand(&hands[0][i]);
		free_hand(&hands[1][i]);
	}
	/* Sanitizer runtimes keep per-thread bookkeeping and quarantines of
	 * their own: only a gross leak can be seen there. */
	size_t bound = rss_early + rss_early / 4 + SCALE(2, 32) * MiB;
	printf("    RSS early %.2f MiB, end %.2f MiB, bound %.2f MiB; slabs early %" PRIu64 ", end %" PRIu64 "\n",
	       (double)rss_early / MiB, (double)rss_end / MiB, (double)bound / MiB, slabs_early, slabs_end);
	CHECKF(rss_end <= bound, "RSS grew with thread churn: %zu -> %zu bytes", rss_early, rss_end);
	CHECK_EQ(cache_active(ca), 0);
	CHECK_EQ(cache_active(cb), 0);
	CHECK(uslab_cache_shrink(ca) == 0);
	CHECK(uslab_cache_shrink(cb) == 0);
	destroy_silently(ca);
	destroy_silently(cb);
}

/* ---- thread-exit races ------------------------------------------------------------ */

#define RACE_SECONDS SCALE(2.0, 1.0)
#define INNER        4
#define RACE_K       16

static struct uslab_cache *rc[2];
static _Atomic(void *) mailbox[8];
static double race_deadline;

struct outer {
	int id;
	unsigned long rounds;
	/* [round parity][inner][k]: written in one round, freed in the next */
	void *pending[2][INNER][RACE_K];
};

struct inner {
	struct outer *o;
	pthread_barrier_t *bar;
	int i;
	unsigned long round;
};

static struct uslab_cache *cache_of(const void *p)
{
	/* word 2 says which cache (set by race_get) */
	return rc[((const uint64_t *)p)[2] & 1];
}

static void *race_get(int which)
{
	uint64_t *p = get(rc[which]);
	p[2] = (uint64_t)which;
	return p;
}

static void race_put(void *p)
{
	if (p)
		put(cache_of(p), p);
}

static void inner_work(struct inner *in)
{
	struct outer *o = in->o;
	int cur = (int)(in->round & 1), prev = cur ^ 1;
	/* objects of an inner thread of the previous round (exited) */
	void **old = o->pending[prev][(in->i + 1) % INNER];
	for (int k = 0; k < RACE_K; k++) {
		race_put(old[k]);
		old[k] = NULL;
	}
	void **mine = o->pending[cur][in->i];
	for (int k = 0; k < RACE_K; k++)
		mine[k] = race_get(k & 1);
	/* one object to whoever comes next, maybe the other outer thread */
	void *x = race_get(in->i & 1);
	race_put(atomic_exchange(&mailbox[(in->i + (int)in->round) % 8], x));
}

static void *inner_thread(void *arg)
{
	struct inner *in = arg;
	if (in->i % 2 == 0) {
		inner_work(in);
		pthread_barrier_wait(in->bar);
	} else {
		pthread_barrier_wait(in->bar);
		inner_work(in);
	}
	return NULL;
}

static void *outer_thread(void *arg)
{
	struct outer *o = arg;
	pthread_barrier_t bar;
	CHECK(pthread_barrier_init(&bar, NULL, INNER) == 0);
	while ((check_now() < race_deadline || o->rounds < 3) && check_now() < race_deadline + CHECK_HANG_S) {
		pthread_t t[INNER];
		struct inner in[INNER];
		for (int i = 0; i < INNER; i++) {
			in[i] = (struct inner){ o, &bar, i, o->rounds };
			CHECK(pthread_create(&t[i], NULL, inner_thread, &in[i]) == 0);
		}
		for (int i = 0; i < INNER; i++)
			CHECK(pthread_join(t[i], NULL) == 0);
		o->rounds++;
	}
	pthread_barrier_destroy(&bar);
	for (int r = 0; r < 2; r++)
		for (int i = 0; i < INNER; i++)
			for (int k = 0; k < RACE_K; k++)
				race_put(o->pending[r][i][k]);
	return NULL;
}

static void test_thread_exit_race(void)
{
	rc[0] = uslab_cache_create("race_a", 40, 0, 0, NULL);
	rc[1] = uslab_cache_create("race_b", 300, 0, 0, NULL);
	CHECK(rc[0] && rc[1]);
	race_deadline = check_now() + RACE_SECONDS;
	static struct outer outers[2];
	pthread_t t[2];
	for (int i = 0; i < 2; i++) {
		outers[i].id = i;
		CHECK(pthread_create(&t[i], NULL, outer_thread, &outers[i]) == 0);
	}
	for (int i = 0; i < 2; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	for (int i = 0; i < 8; i++)
		race_put(atomic_exchange(&mailbox[i], NULL));
	printf("    rounds: %lu + %lu (%lu inner threads)\n", outers[0].rounds, outers[1].rounds,
	       (outers[0].rounds + outers[1].rounds) * INNER);
	CHECK(outers[0].rounds > 2 && outers[1].rounds > 2);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(cache_active(rc[i]), 0);
		CHECK(uslab_cache_shrink(rc[i]) == 0);
		destroy_silently(rc[i]);
	}
}

int main(void)
{
	check_init("test_churn");
	RUN(test_thread_churn);
	RUN(test_thread_exit_race);
	return 0;
}
