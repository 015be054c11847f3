/*
 * Take-back from idle threads racing with those threads waking up (issue
 * 11), meant for ThreadSanitizer as much as for the normal build.
 *
 * Workers allocate objects (a cache of their own kind and the malloc
 * family), write a pattern into each, free some of their own and some that
 * other workers handed over, then park on a condition variable. While they
 * park and wake, a taker thread calls uslab_cache_shrink() and
 * uslab_malloc_trim(0) (other threads' spare sheaves taken by exchange,
 * flush requests they acknowledge at their next slow path), and the
 * background thread runs decay passes every 5 ms. Main opens and closes
 * the gate at random moments, so wake-ups race with all of that.
 *
 * At quiet points (every worker parked, the taker parked, the background
 * thread stopped) the cache's active_objects equals the objects the
 * workers and the hand-over box hold (exactly with sheaves or slub_debug;
 * at least that in classic mode, where a parked thread's CPU free list
 * counts as allocated until it runs again), and validation is clean.
 * Every object's pattern is checked whenever its holder wakes and before
 * it is freed. At the end everything is freed: active_objects 0.
 *
 * Nothing here depends on how fast the machine runs: the quiet points
 * wait for the workers and for the taker (condition variables, not flags
 * a thread may have set before); the random naps only
 * shuffle the races; the taker's first call is waited for (a loaded
 * machine may not have run it yet), not assumed.
 */
#include "check.h"
#include "cpu.h"
#include "bgthread.h"

#define WORKERS  SCALE(6, 4)
#define ROUNDS   SCALE(120, 30)
#define HOLD_MAX 600
#define BOX_MAX  2048
#define OBJ_SIZE 96

static struct uslab_cache *cache;

struct obj_ref {
	uint64_t *p;
	uint64_t tag;
	bool malloced;
	size_t size;
};

static void fill(struct obj_ref *r)
{
	size_t words = r->size / 8;
	for (size_t i = 0; i < words; i++)
		r->p[i] = r->tag ^ i;
}

static void verify(const struct obj_ref *r)
{
	size_t words = r->size / 8;
	for (size_t i = 0; i < words; i++)
		CHECKF(r->p[i] == (r->tag ^ i), "object %p word %zu: %#llx, want %#llx (tag %#llx)", (void *)r->p, i,
		       (unsigned long long)r->p[i], (unsigned long long)(r->tag ^ i), (unsigned long long)r->tag);
}

static void release(struct obj_ref *r)
{
	verify(r);
	if (r->malloced)
		uslab_free(r->p);
	else
		uslab_cache_free(cache, r->p);
}

/* ---- the gate: workers park here --------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER, parked_cv = PTHREAD_COND_INITIALIZER;
static unsigned generation;   /* main bumps it to release the workers (lock) */
static unsigned parked;       /* workers waiting at the gate (lock) */
static bool finish;           /* the last release: free everything and exit (lock) */

/* The hand-over box (lock): objects one worker allocated for another to free. */
static struct obj_ref box[BOX_MAX];
static unsigned nbox;

/* Objects each worker holds (its own lock-free array; main reads it only at
 * quiet points, under `lock`, which orders it). */
static struct {
	struct obj_ref held[HOLD_MAX];
	unsigned n;
	uint64_t seed;
	unsigned id;
} w[16];

static unsigned long cache_held(void)
{
	unsigned long n = 0;
	for (unsigned i = 0; i < WORKERS; i++)
		for (unsigned k = 0; k < w[i].n; k++)
			n += !w[i].held[k].malloced;
	for (unsigned k = 0; k < nbox; k++)
		n += !box[k].malloced;
	return n;
}

static void *worker(void *arg)
{
	unsigned id = (unsigned)(uintptr_t)arg;
	uint64_t *seed = &w[id].seed;
	unsigned gen = 0;
	uint64_t serial = 0;
	for (;;) {
		/* park */
		pthread_mutex_lock(&lock);
		parked++;
		pthread_cond_broadcast(&parked_cv);
		while (generation == gen)
			pthread_cond_wait(&wake, &lock);
		gen = generation;
		bool last = finish;
		pthread_mutex_unlock(&lock);
		/* woke: everything held is intact */
		for (unsigned k = 0; k < w[id].n; k++)
			verify(&w[id].held[k]);
		if (last)
			break;
		/* allocate */
		unsigned want = 50 + (unsigned)(rnd_next(seed) % 300);
		for (unsigned k = 0; k < want && w[id].n < HOLD_MAX; k++) {
			struct obj_ref *r = &w[id].held[w[id].n];
			r->malloced = rnd_chance(seed, 40);
			r->size = r->malloced ? 8 * (2 + rnd_next(seed) % 60) : OBJ_SIZE;
			r->p = r->malloced ? uslab_malloc(r->size) : uslab_cache_alloc(cache);
			CHECK(r->p != NULL);
			r->tag = ((uint64_t)id << 56) ^ (++serial * 0x9e3779b97f4a7c15ULL);
			fill(r);
			w[id].n++;
		}
		/* free about half, in random order */
		for (unsigned k = 0; k < w[id].n;) {
			if (rnd_chance(seed, 50)) {
				release(&w[id].held[k]);
				w[id].held[k] = w[id].held[--w[id].n];
			} else {
				k++;
			}
		}
		/* hand some over, free some handed to us */
		pthread_mutex_lock(&lock);
		for (unsigned k = 0; k < 20 && w[id].n && nbox < BOX_MAX; k++)
			box[nbox++] = w[id].held[--w[id].n];
		struct obj_ref take[20];
		unsigned nt = 0;
		while (nt < 20 && nbox)
			take[nt++] = box[--nbox];
		pthread_mutex_unlock(&lock);
		for (unsigned k = 0; k < nt; k++)
			release(&take[k]);   /* another thread's object: a remote free */
	}
	for (unsigned k = 0; k < w[id].n; k++)
		release(&w[id].held[k]);
	w[id].n = 0;
	return NULL;
}

/* ---- the taker ------------------------------------------------------------------------ */

static _Atomic bool taker_stop;
static _Atomic unsigned long takes;
/* The taker's pause (tk_lock): main sets taker_pause and waits while
 * taker_busy; the taker makes a call only with taker_busy set, which it
 * sets only while no pause is asked. So once taker_hold(true) returns, no
 * call is under way and none starts until taker_hold(false), however the
 * two threads are scheduled (a flag the taker sets when it sees the pause
 * could be a stale one from the last pause). */
static pthread_mutex_t tk_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tk_cv = PTHREAD_COND_INITIALIZER;
static bool taker_pause, taker_busy;

static void *taker(void *arg)
{
	uint64_t seed = 77;
	while (!atomic_load(&taker_stop)) {
		pthread_mutex_lock(&tk_lock);
		while (taker_pause && !atomic_load(&taker_stop))
			pthread_cond_wait(&tk_cv, &tk_lock);
		taker_busy = true;
		pthread_mutex_unlock(&tk_lock);
		if (rnd_chance(&seed, 50))
			uslab_cache_shrink(cache);
		else
			uslab_malloc_trim(0);
		atomic_fetch_add(&takes, 1);
		pthread_mutex_lock(&tk_lock);
		taker_busy = false;
		pthread_cond_broadcast(&tk_cv);
		pthread_mutex_unlock(&tk_lock);
		struct timespec ts = { 0, (long)(rnd_next(&seed) % 2000000) };
		nanosleep(&ts, NULL);
	}
	return arg;
}

/* Pause the taker (on: returns once no call of it is under way) or let it
 * go on. */
static void taker_hold(bool on)
{
	pthread_mutex_lock(&tk_lock);
	taker_pause = on;
	pthread_cond_broadcast(&tk_cv);
	while (on && taker_busy)
		pthread_cond_wait(&tk_cv, &tk_lock);
	pthread_mutex_unlock(&tk_lock);
}

/* ---- main ------------------------------------------------------------------------------- */

static void wait_all_parked(void)
{
	pthread_mutex_lock(&lock);
	while (parked < WORKERS)
		pthread_cond_wait(&parked_cv, &lock);
	pthread_mutex_unlock(&lock);
}

static void release_workers(bool last)
{
	pthread_mutex_lock(&lock);
	parked = 0;
	finish = last;
	generation++;
	pthread_cond_broadcast(&wake);
	pthread_mutex_unlock(&lock);
}

static void quiet_check(bool exact, unsigned round)
{
	/* every worker parked: stop the taker and the thread so that no
	 * take-back is half done while the counters are read */
	taker_hold(true);
	CHECK(uslab_background_thread(0) == 0);
	pthread_mutex_lock(&lock);
	unsigned long want = cache_held();
	pthread_mutex_unlock(&lock);
	uint64_t active = cache_active(cache);
	if (exact)
		CHECKF(active == want, "round %u: active_objects %llu, workers and box hold %lu", round,
		       (unsigned long long)active, want);
	else
		CHECKF(active >= want, "round %u: active_objects %llu < %lu held", round, (unsigned long long)active,
		       want);
	CHECKF(uslab_cache_validate(cache) == 0, "round %u: validation found problems", round);
	CHECK(uslab_background_thread(1) == 0);
	taker_hold(false);
}

static void test_takeback_races(void)
{
	page_purge_delay_ms = 5;   /* decay passes every 10 ms (their floor) */
	cache = uslab_cache_create("takeback", OBJ_SIZE, 0, USLAB_NO_MERGE, NULL);
	CHECK(cache != NULL);
	struct uslab_cache_info info;
	cache_info(cache, &info);
	bool exact = info.sheaf_capacity > 0 || cache_debugged(&info);
	printf("    %s mode: counts %s at quiet points\n",
	       cache_debugged(&info) ? "slub_debug" : info.sheaf_capacity ? "sheaves" : "classic",
	       exact ? "exact" : "bounded below");
	CHECK(uslab_background_thread(1) == 0);
	pthread_t t[16], tk;
	for (unsigned i = 0; i < WORKERS; i++) {
		w[i].seed = 1000 + i;
		w[i].id = i;
		CHECK(pthread_create(&t[i], NULL, worker, (void *)(uintptr_t)i) == 0);
	}
	CHECK(pthread_create(&tk, NULL, taker, NULL) == 0);
	uint64_t seed = 5;
	struct bg_stats s0, s1;
	bg_get_stats(&s0);
	unsigned long passes = 0;
	for (unsigned round = 0; round < ROUNDS; round++) {
		wait_all_parked();
		if (round % 4 == 0)
			quiet_check(exact, round);
		/* idle a moment (passes take the parked threads' spares and ask
		 * for the rest), then wake them in the middle of it */
		struct timespec ts = { 0, (long)(rnd_next(&seed) % 15000000) };
		nanosleep(&ts, NULL);
		release_workers(false);
	}
	wait_all_parked();
	quiet_check(exact, ROUNDS);
	/* the taker has made a call (a loaded machine may have run it late) */
	double t0 = check_now();
	while (atomic_load(&takes) == 0) {
		CHECKF(check_now() - t0 < CHECK_HANG_S, "the taker made no call in %.0f s", CHECK_HANG_S);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	bg_get_stats(&s1);
	passes = s1.passes - s0.passes;   /* quiet checks restart the thread: counted per start */
	release_workers(true);
	for (unsigned i = 0; i < WORKERS; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	atomic_store(&taker_stop, true);
	CHECK(pthread_join(tk, NULL) == 0);
	CHECK(uslab_background_thread(0) == 0);
	for (unsigned k = 0; k < nbox; k++)
		release(&box[k]);
	nbox = 0;
	printf("    %u rounds, %lu shrink/trim calls, %lu decay passes\n", ROUNDS, atomic_load(&takes), passes);
	CHECK_EQ(cache_active(cache), 0);
	CHECK(uslab_cache_validate(cache) == 0);
	CHECK(atomic_load(&takes) > 0);
	destroy_silently(cache);
}

int main(void)
{
	check_init("test_takeback");
	/* the malloc family's classes are made at its first call: before the
	 * workers' (concurrent first calls are not what this tests) */
	void *x = uslab_malloc(1);
	CHECK(x != NULL);
	uslab_free(x);
	RUN(test_takeback_races);
	return 0;
}
