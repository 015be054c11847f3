/*
 * Sheaves and barns (src/sheaf.c), in the normal, ASan and TSan builds.
 *
 * bound        threads that fill their sheaves and the barn, then block:
 *              the objects held per thread (main + spare) and in the barn
 *              stay within the bound README states (2 * sheaf_capacity per
 *              thread and cache, barn_full full sheaves, barn_empty empty
 *              ones), sampled while they run and exact while they wait;
 *              active_objects counts what the program holds (derived
 *              ALLOC_PCS exact for live threads); at exit the threads'
 *              sheaves go to the barn or the slabs, shrink empties all
 * producer     producer/consumer pairs: the consumers' full sheaves travel
 *              back to the producers through the barn (BARN_PUT/BARN_GET),
 *              contents intact
 * demand       the barn's bound (sheaf.c): a burst of frees with no taker
 *              leaves it at its floor of ten full sheaves; a taker of its
 *              sheaves after some were flushed earns it room, so the next
 *              burst leaves more than ten, at most barn_full; a shrink
 *              empties it and forgets the room (the floor again)
 * stress       many threads at once: random sizes of batches, frees of
 *              other threads' objects through a shared exchange, bulk
 *              alloc/free, threads exiting with full sheaves and new ones
 *              starting, shrink of the shared cache and create/destroy of
 *              private caches while others allocate, sheaf_capacity (0 =
 *              classic included) and the barn bounds changed at run time;
 *              then nothing is left allocated and validate is clean
 */
#include "check.h"

#include <stdatomic.h>

static struct uslab_cache *mk(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	/* sheaves, whatever mode the process runs the others in (debug caches
	 * have no per-CPU layer and refuse) */
	struct uslab_cache_info in;
	cache_info(c, &in);
	CHECK(uslab_cache_tune_set(c, "cpu_mode", USLAB_CPU_SHEAVES) == (cache_debugged(&in) ? -1 : 0));
	return c;
}

static unsigned long tget(struct uslab_cache *c, const char *name)
{
	unsigned long v = 0;
	CHECK(uslab_cache_tune_get(c, name, &v) == 0);
	return v;
}

static void tset(struct uslab_cache *c, const char *name, unsigned long v)
{
	CHECKF(uslab_cache_tune_set(c, name, v) == 0, "set %s=%lu", name, v);
}

/* ---- bound -------------------------------------------------------------------- */

#define BT 6   /* threads */
static struct uslab_cache *bound_cache;
static pthread_barrier_t bound_bar;
static _Atomic int bound_stop;

static void *bound_worker(void *arg)
{
	uintptr_t id = (uintptr_t)arg;
	enum { N = 700 };
	void **v = malloc(N * sizeof *v);
	CHECK(v != NULL);
	/* Allocate a batch, free it: main and spare fill, full sheaves go to
	 * the barn (up to its bound), the rest to the slabs. Repeat with
	 * different amounts so that the sheaves end partly filled. */
	for (int round = 0; round < 20; round++) {
		size_t n = 50 + (size_t)((id * 131 + (uintptr_t)round * 71) % (N - 50));
		for (size_t i = 0; i < n; i++) {
			v[i] = uslab_cache_alloc(bound_cache);
			CHECK(v[i] != NULL);
			*(uintptr_t *)v[i] = id;
		}
		for (size_t i = 0; i < n; i++) {
			CHECK(*(uintptr_t *)v[i] == id);
			uslab_cache_free(bound_cache, v[i]);
		}
	}
	/* keep 10 objects, then wait: an idle thread with full-ish sheaves */
	for (int i = 0; i < 10; i++)
		v[i] = uslab_cache_alloc(bound_cache);
	pthread_barrier_wait(&bound_bar);   /* 1: the main thread measures */
	pthread_barrier_wait(&bound_bar);   /* 2: done measuring */
	for (int i = 0; i < 10; i++)
		uslab_cache_free(bound_cache, v[i]);
	free(v);
	return NULL;
}

static void *bound_sampler(void *arg)
{
	unsigned cap = (unsigned)(uintptr_t)arg;
	unsigned long samples = 0;
	while (!atomic_load(&bound_stop)) {
		struct uslab_cache_info in;
		cache_info(bound_cache, &in);
		/* every part holds at most main + spare, each read relaxed */
		CHECKF(in.sheaf_objects <= (uint64_t)in.cpu_parts * 2 * cap, "sheaf objects %llu > %u parts x 2 x %u",
		       (unsigned long long)in.sheaf_objects, in.cpu_parts, cap);
		CHECKF(in.barn_full <= in.barn_full_max && in.barn_empty <= in.barn_empty_max,
		       "barn %llu full, %llu empty", (unsigned long long)in.barn_full, (unsigned long long)in.barn_empty);
		CHECK(in.barn_objects <= in.barn_full * cap);
		samples++;
	}
	return (void *)(uintptr_t)samples;
}

static void bound(void)
{
	bound_cache = mk("sheaf-bound", 96);
	const unsigned cap = 28;
	tset(bound_cache, "sheaf_capacity", cap);
	tset(bound_cache, "barn_full", 4);
	tset(bound_cache, "barn_empty", 2);
	CHECK(pthread_barrier_init(&bound_bar, NULL, BT + 1) == 0);
	atomic_store(&bound_stop, 0);
	pthread_t t[BT], sampler;
	CHECK(pthread_create(&sampler, NULL, bound_sampler, (void *)(uintptr_t)cap) == 0);
	for (uintptr_t i = 0; i < BT; i++)
		CHECK(pthread_create(&t[i], NULL, bound_worker, (void *)i) == 0);
	pthread_barrier_wait(&bound_bar);
	atomic_store(&bound_stop, 1);
	void *samples;
	CHECK(pthread_join(sampler, &samples) == 0);
	/* The workers wait: numbers are exact now. */
	struct uslab_cache_info in;
	cache_info(bound_cache, &in);
	printf("    %d idle threads: %llu objects in sheaves (bound %u), barn %llu full (%llu objects, bound %u x %u) "
	       "+ %llu empty; active %llu; %lu samples while running\n",
	       BT, (unsigned long long)in.sheaf_objects, BT * 2 * cap, (unsigned long long)in.barn_full,
	       (unsigned long long)in.barn_objects, in.barn_full_max, cap, (unsigned long long)in.barn_empty,
	       (unsigned long long)in.active_objects, (unsigned long)(uintptr_t)samples);
	bool per_cpu = cache_per_cpu(&in);   /* parts of CPUs, not of the threads */
	if (per_cpu)
		CHECK(in.cpu_parts >= 1 && in.cpu_parts <= check_ncpus_conf());
	else
		CHECK_EQ(in.cpu_parts, BT);
	CHECK(in.sheaf_objects <= (uint64_t)in.cpu_parts * 2 * cap);
	CHECK(in.sheaf_objects > 0);
	CHECK(in.barn_full <= 4 && in.barn_empty <= 2);
	CHECK(in.barn_objects <= 4ULL * cap);
	CHECK_EQ(in.active_objects, (uint64_t)BT * 10);   /* derived ALLOC_PCS is exact for live threads */
	/* what the slabs see as in use: the program's objects, sheaves and barn */
	CHECK(in.total_objects >= in.active_objects + in.sheaf_objects + in.barn_objects);
	pthread_barrier_wait(&bound_bar);
	for (int i = 0; i < BT; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	cache_info(bound_cache, &in);
	CHECK_EQ(in.active_objects, 0);
	if (!per_cpu) {
		CHECK_EQ(in.cpu_parts, 0);             /* exit gave every part back */
		CHECK_EQ(in.sheaf_objects, 0);
	}
	CHECK(in.barn_full <= 4);              /* full sheaves went to the barn if it had room */
	CHECK_EQ(uslab_cache_validate(bound_cache), 0);
	CHECK_EQ(uslab_cache_shrink(bound_cache), 0);   /* barn flushed: no slab left */
	cache_info(bound_cache, &in);
	CHECK_EQ(in.slabs, 0);
	CHECK_EQ(in.barn_full + in.barn_empty, 0);
	pthread_barrier_destroy(&bound_bar);
	destroy_silently(bound_cache);
}

/* ---- producer/consumer through the barn ---------------------------------------- */

struct pc {
	struct uslab_cache *c;
	_Atomic(void **) box;
	unsigned rounds;
	size_t batch;
};

static void *pc_producer(void *arg)
{
	struct pc *m = arg;
	for (unsigned r = 0; r < m->rounds; r++) {
		void **b = malloc(m->batch * sizeof *b);
		CHECK(b != NULL);
		for (size_t i = 0; i < m->batch; i++) {
			b[i] = uslab_cache_alloc(m->c);
			CHECK(b[i] != NULL);
			memset(b[i], (int)(i & 0xff), 64);
		}
		void **expect = NULL;
		while (!atomic_compare_exchange_weak(&m->box, &expect, b)) {
			expect = NULL;
			sched_yield();
		}
	}
	return NULL;
}

static void *pc_consumer(void *arg)
{
	struct pc *m = arg;
	for (unsigned r = 0; r < m->rounds;) {
		void **b = atomic_exchange(&m->box, NULL);
		if (!b) {
			sched_yield();
			continue;
		}
		for (size_t i = 0; i < m->batch; i++) {
			const unsigned char *p = b[i];
			CHECK(p[0] == (unsigned char)(i & 0xff) && p[63] == (unsigned char)(i & 0xff));
			uslab_cache_free(m->c, b[i]);
		}
		free(b);
		r++;
	}
	return NULL;
}

static void producer(void)
{
	enum { PAIRS = 3 };
	struct uslab_cache *c = mk("sheaf-pc", 64);
	tset(c, "sheaf_capacity", 60);   /* the default, also under slub_sheaf_capacity=0 */
	struct pc m[PAIRS];
	pthread_t t[2 * PAIRS];
	for (int i = 0; i < PAIRS; i++) {
		m[i] = (struct pc){ .c = c, .rounds = SCALE(150, 30), .batch = 500 };
		CHECK(pthread_create(&t[2 * i], NULL, pc_consumer, &m[i]) == 0);
		CHECK(pthread_create(&t[2 * i + 1], NULL, pc_producer, &m[i]) == 0);
	}
	for (int i = 0; i < 2 * PAIRS; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	struct uslab_cache_info in;
	cache_info(c, &in);
	printf("    %d pairs: BARN_PUT %llu, BARN_GET %llu, SHEAF_REFILL %llu, SHEAF_FLUSH %llu, NODE_LOCK %llu "
	       "for %llu objects\n",
	       PAIRS, (unsigned long long)in.events[USLAB_STAT_BARN_PUT], (unsigned long long)in.events[USLAB_STAT_BARN_GET],
	       (unsigned long long)in.events[USLAB_STAT_SHEAF_REFILL], (unsigned long long)in.events[USLAB_STAT_SHEAF_FLUSH],
	       (unsigned long long)in.events[USLAB_STAT_NODE_LOCK], (unsigned long long)ev_allocs(&in));
	CHECK(in.events[USLAB_STAT_BARN_PUT] > 0 && in.events[USLAB_STAT_BARN_GET] > 0);
	CHECK_EQ(in.active_objects, 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	destroy_silently(c);
}

/* ---- stress ---------------------------------------------------------------------- */

#define XS 512
#define SW 8   /* workers */
struct stress {
	struct uslab_cache *c;
	_Atomic(void *) xchg[XS];
	_Atomic int stop;
	_Atomic unsigned long tunes, shrinks, destroys, exits;
};
static struct stress st;

#define SOBJ 120
static void stamp(void *p, uint64_t tag)
{
	memcpy(p, &tag, 8);
	memcpy((char *)p + SOBJ - 8, &tag, 8);
}
static void verify(const void *p)
{
	uint64_t a, b;
	memcpy(&a, p, 8);
	memcpy(&b, (const char *)p + SOBJ - 8, 8);
	CHECKF(a == b, "object %p: %llx / %llx", p, (unsigned long long)a, (unsigned long long)b);
}

/* One worker's life: some operations, then exit (with whatever its sheaves
 * hold). */
static void *stress_worker(void *arg)
{
	uint64_t seed = (uint64_t)(uintptr_t)arg;
	enum { MINE = 256 };
	void *mine[MINE] = { 0 };
	void *bulk[64];
	unsigned long ops = SCALE(40000, 4000);
	for (unsigned long i = 0; i < ops; i++) {
		uint64_t r = rnd_next(&seed);
		unsigned k = (unsigned)(r >> 8) % MINE;
		switch (r % 10) {
		case 0: case 1: case 2: case 3:   /* own objects */
			if (mine[k]) {
				verify(mine[k]);
				uslab_cache_free(st.c, mine[k]);
				mine[k] = NULL;
			} else {
				mine[k] = uslab_cache_alloc(st.c);
				CHECK(mine[k] != NULL);
				stamp(mine[k], r);
			}
			break;
		case 4: case 5: {                 /* give one away, free what was there */
			void *p = uslab_cache_alloc(st.c);
			CHECK(p != NULL);
			stamp(p, r);
			void *old = atomic_exchange(&st.xchg[(r >> 20) % XS], p);
			if (old) {
				verify(old);
				uslab_cache_free(st.c, old);
			}
			break;
		}
		case 6: {                         /* a bulk round trip, freed in a shuffled order */
			size_t n = 1 + (r >> 32) % 64;
			CHECK_EQ(uslab_cache_alloc_bulk(st.c, n, bulk), n);
			for (size_t j = 0; j < n; j++)
				stamp(bulk[j], r + j);
			for (size_t j = n; j > 1; j--) {
				size_t x = rnd_next(&seed) % j;
				void *t = bulk[j - 1];
				bulk[j - 1] = bulk[x];
				bulk[x] = t;
			}
			uslab_cache_free_bulk(st.c, n, bulk);
			break;
		}
		case 7:                           /* a burst: many allocations, freed at once */
			if ((r >> 40) % 16 == 0) {
				void **v = malloc(600 * sizeof *v);
				CHECK(v != NULL);
				for (int j = 0; j < 600; j++)
					v[j] = uslab_cache_alloc(st.c);
				for (int j = 0; j < 600; j++)
					uslab_cache_free(st.c, v[j]);
				free(v);
			}
			break;
		case 8:                           /* a private cache: created, used, destroyed */
			if ((r >> 40) % 64 == 0) {
				struct uslab_cache *p = uslab_cache_create("sheaf-private", 48 + (r >> 50) % 64, 0,
									   USLAB_NO_MERGE, NULL);
				CHECK(p != NULL);
				void *o[40];
				for (int j = 0; j < 40; j++)
					o[j] = uslab_cache_alloc(p);
				for (int j = 0; j < 40; j++)
					uslab_cache_free(p, o[j]);
				uslab_cache_destroy(p);
				atomic_fetch_add(&st.destroys, 1);
			}
			break;
		default:                          /* shrink the shared cache while others use it */
			if ((r >> 40) % 256 == 0) {
				uslab_cache_shrink(st.c);
				atomic_fetch_add(&st.shrinks, 1);
			}
			break;
		}
	}
	for (unsigned k = 0; k < MINE; k++)
		if (mine[k]) {
			verify(mine[k]);
			uslab_cache_free(st.c, mine[k]);
		}
	atomic_fetch_add(&st.exits, 1);
	return NULL;
}

static void *stress_tuner(void *arg)
{
	uint64_t seed = 99;
	(void)arg;
	while (!atomic_load(&st.stop)) {
		uint64_t r = rnd_next(&seed);
		switch (r % 3) {
		case 0: tset(st.c, "sheaf_capacity", (r >> 8) % 5 == 0 ? 0 : 1 + (r >> 16) % 80); break;
		case 1: tset(st.c, "barn_full", (r >> 16) % 6); break;
		default: tset(st.c, "barn_empty", (r >> 16) % 6); break;
		}
		atomic_fetch_add(&st.tunes, 1);
		struct timespec ts = { 0, 200000 };
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void stress(void)
{
	st.c = mk("sheaf-stress", SOBJ);
	atomic_store(&st.stop, 0);
	pthread_t tuner;
	CHECK(pthread_create(&tuner, NULL, stress_tuner, NULL) == 0);
	/* SW workers at a time; each that exits is replaced, GENS times */
	const unsigned gens = SCALE(4, 2);
	pthread_t t[SW];
	uint64_t seed = 1;
	for (int i = 0; i < SW; i++)
		CHECK(pthread_create(&t[i], NULL, stress_worker, (void *)(uintptr_t)seed++) == 0);
	for (unsigned g = 1; g < gens; g++)
		for (int i = 0; i < SW; i++) {
			CHECK(pthread_join(t[i], NULL) == 0);
			CHECK(pthread_create(&t[i], NULL, stress_worker, (void *)(uintptr_t)seed++) == 0);
		}
	for (int i = 0; i < SW; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	/* the tuner has changed something (a loaded machine may not have run
	 * it while the workers did: wait for it rather than count on it) */
	double t0 = check_now();
	while (atomic_load(&st.tunes) == 0) {
		CHECKF(check_now() - t0 < CHECK_HANG_S, "the tuner made no change in %.0f s", CHECK_HANG_S);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	atomic_store(&st.stop, 1);
	CHECK(pthread_join(tuner, NULL) == 0);
	for (int i = 0; i < XS; i++) {
		void *p = atomic_exchange(&st.xchg[i], NULL);
		if (p) {
			verify(p);
			uslab_cache_free(st.c, p);
		}
	}
	struct uslab_cache_info in;
	cache_info(st.c, &in);
	printf("    %lu threads exited; %lu tunable changes, %lu shrinks, %lu private caches destroyed; "
	       "BARN_PUT %llu, SHEAF_FLUSH %llu, CPU_PARTIAL_FREE %llu\n",
	       atomic_load(&st.exits), atomic_load(&st.tunes), atomic_load(&st.shrinks), atomic_load(&st.destroys),
	       (unsigned long long)in.events[USLAB_STAT_BARN_PUT], (unsigned long long)in.events[USLAB_STAT_SHEAF_FLUSH],
	       (unsigned long long)in.events[USLAB_STAT_CPU_PARTIAL_FREE]);
	CHECK_EQ(atomic_load(&st.exits), (unsigned long)SW * gens);
	CHECK(atomic_load(&st.tunes) > 0);
	CHECK_EQ(in.active_objects, 0);
	CHECK_EQ(uslab_cache_validate(st.c), 0);
	CHECK_EQ(uslab_cache_shrink(st.c), 0);
	destroy_silently(st.c);
}

/* ---- the barn earns room by demand ------------------------------------------------ */

#define DEMAND_CAP 8
#define DEMAND_N (60 * DEMAND_CAP)   /* sixty sheaves' worth */

static void demand_round(struct uslab_cache *c, void **v)
{
	for (unsigned i = 0; i < DEMAND_N; i++)
		CHECK((v[i] = uslab_cache_alloc(c)) != NULL);
	for (unsigned i = 0; i < DEMAND_N; i++)
		uslab_cache_free(c, v[i]);
}

static void demand(void)
{
	struct uslab_cache *c = mk("sheaf-demand", 64);
	tset(c, "sheaf_capacity", DEMAND_CAP);
	tset(c, "barn_full", 40);
	void **v = calloc(DEMAND_N, sizeof *v);
	CHECK(v != NULL);
	struct uslab_cache_info in;
	/* 1: allocated from slabs (the barn is empty: nothing taken from
	 * it), then freed: ten full sheaves kept, the rest flushed */
	demand_round(c, v);
	cache_info(c, &in);
	unsigned long first = in.barn_full;
	CHECKF(first <= 10, "%lu full sheaves after a burst of frees with no taker", first);
	CHECK(in.events[USLAB_STAT_BARN_PUT_FAIL] > 0);
	/* 2: the same objects wanted back: the barn's ten are taken while
	 * sheaves had been flushed, each earning a sheaf of room */
	demand_round(c, v);
	cache_info(c, &in);
	printf("    barn after a burst with no taker: %lu full sheaves; after a round trip: %llu (of at most %u)\n",
	       first, (unsigned long long)in.barn_full, in.barn_full_max);
	CHECKF(in.barn_full > 10 && in.barn_full <= 40, "%llu full sheaves after a producer came back",
	       (unsigned long long)in.barn_full);
	CHECK(in.barn_objects <= in.barn_full * DEMAND_CAP);
	/* 3: a shrink empties the barn and forgets what it earned */
	uslab_cache_shrink(c);
	cache_info(c, &in);
	CHECK_EQ(in.barn_full, 0);
	demand_round(c, v);
	cache_info(c, &in);
	CHECKF(in.barn_full <= 10, "%llu full sheaves after a shrink and a burst with no taker",
	       (unsigned long long)in.barn_full);
	/* barn_full below the floor bounds it too */
	tset(c, "barn_full", 3);
	uslab_cache_shrink(c);
	demand_round(c, v);
	demand_round(c, v);
	cache_info(c, &in);
	CHECK(in.barn_full <= 3);
	CHECK_EQ(uslab_cache_validate(c), 0);
	free(v);
	destroy_silently(c);
}

/* Under slub_debug for every cache: debug caches have no sheaves, and
 * their sheaf_capacity stays 0; then the test runs again without it. */
static void debug_no_sheaves(void)
{
	struct uslab_cache *c = mk("sheaf-dbg", 96);
	CHECK_EQ(tget(c, "sheaf_capacity"), 0);
	errno = 0;
	CHECK(uslab_cache_tune_set(c, "sheaf_capacity", 8) == -1 && errno == EINVAL);
	void *p = uslab_cache_alloc(c);
	CHECK(p != NULL);
	uslab_cache_free(c, p);
	struct uslab_cache_info in;
	cache_info(c, &in);
	CHECK_EQ(in.cpu_parts, 0);
	CHECK_EQ(in.events[USLAB_STAT_ALLOC_PCS] + in.events[USLAB_STAT_FREE_PCS], 0);
	uslab_cache_destroy(c);
}

int main(int argc, char **argv)
{
	(void)argc;
	rerun_without_slub_debug(argv, debug_no_sheaves);
	check_init("test_sheaves");
	RUN(bound);
	RUN(demand);
	RUN(producer);
	RUN(stress);
	return 0;
}
