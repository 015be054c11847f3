/*
 * Parked slabs and owner-local frees (src/slab.c, "parked slabs"): a CPU
 * that frees its own objects keeps its exhausted slabs frozen, its frees
 * to them take no atomic, and other threads' frees reach it through its
 * delayed list. Each sub-test checks behaviour through the event counters
 * and checks objects' contents; the concurrent ones run under
 * ThreadSanitizer in CI (the tsan variant of scripts/test.sh).
 *
 *   own_frees_local     one thread allocates 20,000 objects and frees them
 *                       shuffled, 5 rounds: after the first round nearly
 *                       every free is a fast one (CPU slab or owner-local
 *                       list), no new slab is made, and the node lock is
 *                       taken at most a few times per round.
 *   remote_notify       a thread that frees its own objects (so it parks)
 *                       hands every other object to a second thread, which
 *                       frees it while the first keeps allocating; the
 *                       slab count stays bounded (the owner takes the
 *                       notified slabs back) and contents survive.
 *   producer_shares     four threads that only allocate, one that frees
 *                       everything: producers do not park (SLUB's sharing),
 *                       so the slabs in use stay near what is in flight.
 *   exit_while_notified owners exit while others still free their objects
 *                       (notifications in flight): nothing is lost, every
 *                       counter adds up, shrink gives every slab back.
 */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#include "uslab.h"

static struct uslab_cache_info info_of(struct uslab_cache *c)
{
	struct uslab_cache_info in = { .version = USLAB_CACHE_INFO_VERSION };
	CHECK_EQ(uslab_cache_get_info(c, &in), 0);
	return in;
}

static uint64_t ev(const struct uslab_cache_info *in, enum uslab_stat_item i) { return in->events[i]; }

static uint64_t frees_of(const struct uslab_cache_info *in)
{
	return ev(in, USLAB_STAT_FREE_FASTPATH) + ev(in, USLAB_STAT_FREE_SLOWPATH) + ev(in, USLAB_STAT_FREE_PCS) +
	       ev(in, USLAB_STAT_FREE_BULK);
}

static uint64_t allocs_of(const struct uslab_cache_info *in)
{
	return ev(in, USLAB_STAT_ALLOC_FASTPATH) + ev(in, USLAB_STAT_ALLOC_SLOWPATH) + ev(in, USLAB_STAT_ALLOC_BULK);
}

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill(void *p, size_t n, uintptr_t tag)
{
	uintptr_t *w = p;
	for (size_t i = 0; i < n / sizeof *w; i++)
		w[i] = tag ^ (uintptr_t)p ^ i;
}

static void check_fill(void *p, size_t n, uintptr_t tag)
{
	uintptr_t *w = p;
	for (size_t i = 0; i < n / sizeof *w; i++)
		CHECKF(w[i] == (tag ^ (uintptr_t)p ^ i), "object %p word %zu overwritten", p, i);
}

/* ---- own_frees_local ------------------------------------------------------- */

#define OWN_N SCALE(20000, 5000)

static void own_frees_local(void)
{
	struct uslab_cache *c = uslab_cache_create("parked_own", 64, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	void **v = malloc(OWN_N * sizeof *v);
	unsigned *perm = malloc(OWN_N * sizeof *perm);
	CHECK(v && perm);
	uint64_t seed = 88172645463325252ULL;
	for (unsigned i = 0; i < OWN_N; i++)
		perm[i] = i;
	for (unsigned i = OWN_N - 1; i > 0; i--) {
		unsigned j = (unsigned)(rnd(&seed) % (i + 1)), t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
	struct uslab_cache_info before = info_of(c);
	for (int round = 0; round < 5; round++) {
		if (round == 1)
			before = info_of(c);
		for (unsigned i = 0; i < OWN_N; i++) {
			v[i] = uslab_cache_alloc(c);
			CHECK(v[i] != NULL);
			fill(v[i], 64, 0xa11ce);
		}
		for (unsigned i = 0; i < OWN_N; i++) {
			check_fill(v[perm[i]], 64, 0xa11ce);
			uslab_cache_free(c, v[perm[i]]);
		}
	}
	struct uslab_cache_info after = info_of(c);
	uint64_t frees = frees_of(&after) - frees_of(&before);
	uint64_t fast = ev(&after, USLAB_STAT_FREE_FASTPATH) - ev(&before, USLAB_STAT_FREE_FASTPATH);
	uint64_t new_slabs = ev(&after, USLAB_STAT_ALLOC_SLAB) - ev(&before, USLAB_STAT_ALLOC_SLAB);
	uint64_t locks = ev(&after, USLAB_STAT_NODE_LOCK) - ev(&before, USLAB_STAT_NODE_LOCK);
	printf("    rounds 2-5: %llu frees, %.1f%% fast, %llu new slabs, %llu node locks; %llu slabs at the end\n",
	       (unsigned long long)frees, 100.0 * (double)fast / (double)frees, (unsigned long long)new_slabs,
	       (unsigned long long)locks, (unsigned long long)after.slabs);
	CHECK_EQ(frees, 4ULL * OWN_N);
	CHECK(fast * 100 >= frees * 95);        /* the first free to each parked slab is slow */
	/* Emptied slabs go back (drains give back empty slabs), so some are
	 * made again next round, but no more than a round needs, and the
	 * node lock stays rare. */
	CHECK(new_slabs <= 4 * (uint64_t)OWN_N / after.objects_per_slab);
	CHECK(after.slabs <= after.min_partial + 4);   /* emptied slabs went back */
	CHECK(locks <= new_slabs + 4 * 16);
	CHECK_EQ(after.active_objects, 0);
	free(v);
	free(perm);
	uslab_cache_destroy(c);
}

/* ---- remote_notify ------------------------------------------------------------ */

#define RING 1024
#define REMOTE_N SCALE(400000, 60000)

struct ring {
	void *_Atomic slot[RING];
	_Atomic unsigned long head, tail;   /* head: next to fill (owner), tail: next to take (freer) */
	_Atomic bool done;
	struct uslab_cache *c;
};

static void *remote_freer(void *arg)
{
	struct ring *r = arg;
	for (;;) {
		unsigned long t = atomic_load(&r->tail);
		if (t == atomic_load(&r->head)) {
			if (atomic_load(&r->done) && t == atomic_load(&r->head))
				break;
			sched_yield();
			continue;
		}
		void *p = atomic_load(&r->slot[t % RING]);
		check_fill(p, 96, 0xfeed);
		uslab_cache_free(r->c, p);
		atomic_store(&r->tail, t + 1);
	}
	return NULL;
}

static void remote_notify(void)
{
	static struct ring r;
	r.c = uslab_cache_create("parked_remote", 96, 0, USLAB_NO_MERGE, NULL);
	CHECK(r.c != NULL);
	atomic_store(&r.head, 0);
	atomic_store(&r.tail, 0);
	atomic_store(&r.done, false);
	pthread_t t;
	CHECK_EQ(pthread_create(&t, NULL, remote_freer, &r), 0);
	uint64_t max_slabs = 0;
	void *mine[64] = { 0 };
	for (unsigned long i = 0; i < REMOTE_N; i++) {
		void *p = uslab_cache_alloc(r.c);
		CHECK(p != NULL);
		if (i & 1) {   /* every other object: our own, freed by us a little later */
			unsigned k = (unsigned)(i / 2) % 64;
			if (mine[k])
				uslab_cache_free(r.c, mine[k]);
			mine[k] = p;
			continue;
		}
		fill(p, 96, 0xfeed);
		unsigned long h = atomic_load(&r.head);
		while (h - atomic_load(&r.tail) >= RING)
			sched_yield();
		atomic_store(&r.slot[h % RING], p);
		atomic_store(&r.head, h + 1);
		if ((i & 4095) == 0) {
			struct uslab_cache_info in = info_of(r.c);
			if (in.slabs > max_slabs)
				max_slabs = in.slabs;
		}
	}
	atomic_store(&r.done, true);
	CHECK_EQ(pthread_join(t, NULL), 0);
	for (unsigned k = 0; k < 64; k++)
		if (mine[k])
			uslab_cache_free(r.c, mine[k]);
	struct uslab_cache_info in = info_of(r.c);
	unsigned per = in.objects_per_slab;
	/* in flight: at most RING objects of the freer, 64 of ours, CPU slabs */
	uint64_t bound = (RING + 64) / per + 64;
	printf("    %lu objects, at most %llu slabs (bound %llu), FREE_FROZEN %llu, ALLOC_SLAB %llu\n",
	       (unsigned long)REMOTE_N, (unsigned long long)max_slabs, (unsigned long long)bound,
	       (unsigned long long)ev(&in, USLAB_STAT_FREE_FROZEN), (unsigned long long)ev(&in, USLAB_STAT_ALLOC_SLAB));
	CHECK(max_slabs <= bound);
	CHECK_EQ(in.active_objects, 0);
	CHECK_EQ(allocs_of(&in), (uint64_t)REMOTE_N);
	CHECK_EQ(frees_of(&in), (uint64_t)REMOTE_N);
	uslab_cache_destroy(r.c);
}

/* ---- producer_shares ----------------------------------------------------------- */

#define PRODUCERS 4
#define PROD_N SCALE(100000, 20000)   /* per producer */

static struct ring prod_ring[PRODUCERS];

static void *producer(void *arg)
{
	struct ring *r = arg;
	for (unsigned long i = 0; i < PROD_N; i++) {
		void *p = uslab_cache_alloc(r->c);
		CHECK(p != NULL);
		fill(p, 96, 0xfeed);
		unsigned long h = atomic_load(&r->head);
		while (h - atomic_load(&r->tail) >= RING)
			sched_yield();
		atomic_store(&r->slot[h % RING], p);
		atomic_store(&r->head, h + 1);
	}
	atomic_store(&r->done, true);
	return NULL;
}

static void *consumer(void *arg)
{
	(void)arg;
	unsigned finished = 0;
	while (finished < PRODUCERS) {
		finished = 0;
		bool any = false;
		for (unsigned k = 0; k < PRODUCERS; k++) {
			struct ring *r = &prod_ring[k];
			unsigned long t = atomic_load(&r->tail);
			bool done = atomic_load(&r->done);
			unsigned long h = atomic_load(&r->head);
			for (; t != h; t++, any = true) {
				void *p = atomic_load(&r->slot[t % RING]);
				check_fill(p, 96, 0xfeed);
				uslab_cache_free(r->c, p);
			}
			atomic_store(&r->tail, t);
			if (done && t == atomic_load(&r->head))
				finished++;
		}
		if (!any)
			sched_yield();
	}
	return NULL;
}

static void producer_shares(void)
{
	struct uslab_cache *c = uslab_cache_create("parked_prod", 96, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	pthread_t p[PRODUCERS], q;
	for (unsigned k = 0; k < PRODUCERS; k++) {
		prod_ring[k].c = c;
		atomic_store(&prod_ring[k].head, 0);
		atomic_store(&prod_ring[k].tail, 0);
		atomic_store(&prod_ring[k].done, false);
	}
	CHECK_EQ(pthread_create(&q, NULL, consumer, NULL), 0);
	for (unsigned k = 0; k < PRODUCERS; k++)
		CHECK_EQ(pthread_create(&p[k], NULL, producer, &prod_ring[k]), 0);
	uint64_t max_slabs = 0;
	for (;;) {
		struct uslab_cache_info in = info_of(c);
		if (in.slabs > max_slabs)
			max_slabs = in.slabs;
		bool all = true;
		for (unsigned k = 0; k < PRODUCERS; k++)
			all &= atomic_load(&prod_ring[k].done);
		if (all)
			break;
		usleep(2000);
	}
	for (unsigned k = 0; k < PRODUCERS; k++)
		CHECK_EQ(pthread_join(p[k], NULL), 0);
	CHECK_EQ(pthread_join(q, NULL), 0);
	struct uslab_cache_info in = info_of(c);
	unsigned per = in.objects_per_slab;
	/* in flight: PRODUCERS rings; per producer a CPU slab and its partial
	 * list; the consumer's partial list; the node's empty slabs */
	uint64_t bound = (uint64_t)PRODUCERS * RING / per + PRODUCERS * (2 + in.cpu_partial / per) + 2 * 16 + 16;
	printf("    %d producers x %lu objects, at most %llu slabs (bound %llu)\n", PRODUCERS, (unsigned long)PROD_N,
	       (unsigned long long)max_slabs, (unsigned long long)bound);
	CHECK(max_slabs <= bound);
	CHECK_EQ(in.active_objects, 0);
	uslab_cache_destroy(c);
}

/* ---- exit_while_notified ----------------------------------------------------------- */

#define OWNERS 4
#define HANDED SCALE(20000, 4000)   /* per owner and generation */
#define GENS SCALE(10, 4)

static void *_Atomic handed[OWNERS][HANDED];
static struct uslab_cache *exit_cache;

static void *exiting_owner(void *arg)
{
	unsigned k = (unsigned)(uintptr_t)arg;
	void *own[256];
	for (unsigned i = 0; i < HANDED; i++) {
		/* free our own objects too, so that this thread parks */
		void *q = uslab_cache_alloc(exit_cache);
		CHECK(q != NULL);
		fill(q, 48, 0xb0b);
		own[i % 256] = q;
		if (i % 256 == 255)
			for (unsigned j = 0; j < 256; j++) {
				check_fill(own[j], 48, 0xb0b);
				uslab_cache_free(exit_cache, own[j]);
			}
		void *p = uslab_cache_alloc(exit_cache);
		CHECK(p != NULL);
		fill(p, 48, 0xb0b);
		atomic_store(&handed[k][i], p);
	}
	for (unsigned j = 0; j < HANDED % 256; j++)
		uslab_cache_free(exit_cache, own[j]);
	return NULL;   /* exits while the freers are still at work */
}

static void *late_freer(void *arg)
{
	unsigned k = (unsigned)(uintptr_t)arg;
	for (unsigned i = 0; i < HANDED; i++) {
		void *p;
		while ((p = atomic_exchange(&handed[k][i], NULL)) == NULL)
			sched_yield();
		check_fill(p, 48, 0xb0b);
		uslab_cache_free(exit_cache, p);
	}
	return NULL;
}

static void exit_while_notified(void)
{
	exit_cache = uslab_cache_create("parked_exit", 48, 0, USLAB_NO_MERGE, NULL);
	CHECK(exit_cache != NULL);
	for (int g = 0; g < GENS; g++) {
		pthread_t o[OWNERS], f[OWNERS];
		for (unsigned k = 0; k < OWNERS; k++) {
			CHECK_EQ(pthread_create(&f[k], NULL, late_freer, (void *)(uintptr_t)k), 0);
			CHECK_EQ(pthread_create(&o[k], NULL, exiting_owner, (void *)(uintptr_t)k), 0);
		}
		for (unsigned k = 0; k < OWNERS; k++) {
			CHECK_EQ(pthread_join(o[k], NULL), 0);
			CHECK_EQ(pthread_join(f[k], NULL), 0);
		}
	}
	struct uslab_cache_info in = info_of(exit_cache);
	uint64_t n = (uint64_t)GENS * OWNERS * HANDED * 2;
	printf("    %llu objects, FREE_FROZEN %llu, active %llu\n", (unsigned long long)n,
	       (unsigned long long)ev(&in, USLAB_STAT_FREE_FROZEN), (unsigned long long)in.active_objects);
	CHECK_EQ(in.active_objects, 0);
	CHECK_EQ(allocs_of(&in), n);
	CHECK_EQ(frees_of(&in), n);
	uslab_cache_shrink(exit_cache);
	in = info_of(exit_cache);
	CHECKF(in.slabs == 0, "%llu slabs left after shrink", (unsigned long long)in.slabs);
	uslab_cache_destroy(exit_cache);
}

/* Under slub_debug for every cache nothing parks (debug caches take the
 * slow path for everything): check that objects still survive handing
 * around and threads exiting, then run the test again without it. */
static void debug_check(void)
{
	exit_while_notified();
}

int main(int argc, char **argv)
{
	(void)argc;
	rerun_without_slub_debug(argv, debug_check);
	check_init("test_parked");
	RUN(own_frees_local);
	RUN(remote_notify);
	RUN(producer_shares);
	RUN(exit_while_notified);
	return 0;
}
