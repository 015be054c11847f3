/*
 * Ownership and remote batches (src/cpu/home.c), in the normal, ASan and
 * TSan builds. Every cache here is put in home mode (or cycled through the
 * modes), whatever mode the variant runs the rest of the process in.
 *
 * exit_in_flight   producers allocate, hand their objects to consumers and
 *                  exit while the consumers' remote batches for them are
 *                  still gathering or on their way; new producers take the
 *                  exited ones' parts; every object arrives intact and the
 *                  counts balance
 * free_to_exiting  consumers free a producer's objects while that producer
 *                  is exiting (released by a barrier at the same moment)
 * fork_in_flight   fork while threads free each other's objects: the child
 *                  frees what it inherited, allocates, validates, forks again
 * shrink_destroy   shrink while others free remotely; then a private cache is
 *                  destroyed while idle threads still hold remote batches and
 *                  owned slabs of it: nothing is reported live, nothing leaks
 * mode_change      a tuner cycles cpu_mode (classic, sheaves, home, slqb)
 *                  while workers allocate and free across threads
 * Objects carry a stamp (their address and a generation) checked at free.
 */
#include "check.h"

#include <stdatomic.h>
#include <sys/wait.h>

#define OBJ 128
#define SLOTS 2048

static struct uslab_cache *mk_home(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	struct uslab_cache_info in;
	cache_info(c, &in);
	if (!cache_debugged(&in))   /* (debug caches have no per-CPU layer) */
		CHECK(uslab_cache_tune_set(c, "cpu_mode", USLAB_CPU_HOME) == 0);
	return c;
}

static void stamp(void *p, uint64_t gen)
{
	uint64_t *w = p;
	w[0] = (uintptr_t)p ^ gen;
	w[OBJ / 8 - 1] = ~((uintptr_t)p ^ gen);
	w[1] = gen;
}

static void unstamp(struct uslab_cache *c, void *p)
{
	uint64_t *w = p;
	uint64_t gen = w[1];
	CHECKF(w[0] == ((uintptr_t)p ^ gen) && w[OBJ / 8 - 1] == ~((uintptr_t)p ^ gen), "object %p damaged", p);
	w[0] = 0;
	uslab_cache_free(c, p);
}

/* A mailbox of object slots between threads. */
static _Atomic(void *) box[SLOTS];

static void drain_box(struct uslab_cache *c)
{
	for (int i = 0; i < SLOTS; i++) {
		void *p = atomic_exchange(&box[i], NULL);
		if (p)
			unstamp(c, p);
	}
}

static void finish(struct uslab_cache *c, const char *what)
{
	drain_box(c);
	uslab_malloc_trim(0);   /* (this thread's part: its batches home) */
	CHECKF(cache_active(c) == 0, "%s: %llu objects active at the end", what, (unsigned long long)cache_active(c));
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECKF(uslab_cache_shrink(c) == 0, "%s: slabs left after shrink", what);
	destroy_silently(c);
}

/* ---- owners exit with batches in flight ------------------------------------------ */

static struct uslab_cache *ex_cache;
static _Atomic int ex_stop;

struct ex_arg {
	uint64_t seed, gen;
	long n;
};

static void *ex_producer(void *arg)
{
	struct ex_arg *a = arg;
	for (long i = 0; i < a->n; i++) {
		void *p = uslab_cache_alloc(ex_cache);
		CHECK(p != NULL);
		stamp(p, a->gen);
		void *old = atomic_exchange(&box[rnd_next(&a->seed) % SLOTS], p);
		if (old)
			unstamp(ex_cache, old);   /* another producer's object: a remote free */
	}
	return NULL;   /* exits with its slabs' objects spread over the box and the consumers' batches */
}

static void *ex_consumer(void *arg)
{
	uint64_t seed = (uintptr_t)arg;
	while (!atomic_load(&ex_stop)) {
		void *p = atomic_exchange(&box[rnd_next(&seed) % SLOTS], NULL);
		if (p)
			unstamp(ex_cache, p);   /* remote: into this thread's batch for the producer */
		else
			sched_yield();
	}
	return NULL;   /* exits with a batch gathering: flushed at its exit */
}

static void exit_in_flight(void)
{
	ex_cache = mk_home("home-exit", OBJ);
	atomic_store(&ex_stop, 0);
	pthread_t cons[2];
	for (uintptr_t i = 0; i < 2; i++)
		CHECK(pthread_create(&cons[i], NULL, ex_consumer, (void *)(i + 7)) == 0);
	int gens = SCALE(200, 20);
	struct ex_arg args[3];
	for (int g = 0; g < gens; g++) {
		pthread_t prod[3];
		for (int i = 0; i < 3; i++) {
			args[i] = (struct ex_arg){ .seed = (uint64_t)g * 31 + (uint64_t)i, .gen = (uint64_t)g,
						   .n = SCALE(5000, 1000) };
			CHECK(pthread_create(&prod[i], NULL, ex_producer, &args[i]) == 0);
		}
		for (int i = 0; i < 3; i++)
			CHECK(pthread_join(prod[i], NULL) == 0);
	}
	atomic_store(&ex_stop, 1);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_join(cons[i], NULL) == 0);
	struct uslab_cache_info in;
	cache_info(ex_cache, &in);
	printf("    %d generations of 3 producers: FREE_REMOTE %llu, batches %llu, inboxes claimed %llu\n", gens,
	       (unsigned long long)in.events[USLAB_STAT_FREE_REMOTE],
	       (unsigned long long)in.events[USLAB_STAT_FLUSH_RFREE_LIST],
	       (unsigned long long)in.events[USLAB_STAT_CLAIM_REMOTE_LIST]);
	finish(ex_cache, "exit_in_flight");
}

/* ---- frees to a thread that is exiting --------------------------------------------- */

static struct uslab_cache *fx_cache;
static pthread_barrier_t fx_bar;
static void *fx_objs[2][SLOTS / 2];

static void *fx_owner(void *arg)
{
	int k = (int)(uintptr_t)arg;
	for (int i = 0; i < SLOTS / 2; i++) {
		fx_objs[k][i] = uslab_cache_alloc(fx_cache);
		CHECK(fx_objs[k][i] != NULL);
		stamp(fx_objs[k][i], (uint64_t)k);
	}
	pthread_barrier_wait(&fx_bar);   /* the freers start now, and this thread exits */
	return NULL;
}

static void *fx_freer(void *arg)
{
	int k = (int)(uintptr_t)arg;
	pthread_barrier_wait(&fx_bar);
	for (int i = 0; i < SLOTS / 2; i++)
		unstamp(fx_cache, fx_objs[k][i]);
	return NULL;
}

static void free_to_exiting(void)
{
	fx_cache = mk_home("home-exiting", OBJ);
	for (int round = 0; round < SCALE(30, 6); round++) {
		CHECK(pthread_barrier_init(&fx_bar, NULL, 4) == 0);
		pthread_t t[4];
		for (uintptr_t k = 0; k < 2; k++) {
			CHECK(pthread_create(&t[2 * k], NULL, fx_owner, (void *)k) == 0);
			CHECK(pthread_create(&t[2 * k + 1], NULL, fx_freer, (void *)k) == 0);
		}
		for (int i = 0; i < 4; i++)
			CHECK(pthread_join(t[i], NULL) == 0);
		pthread_barrier_destroy(&fx_bar);
	}
	finish(fx_cache, "free_to_exiting");
}

/* ---- fork while batches are in flight ------------------------------------------------ */

static struct uslab_cache *fk_cache;
static _Atomic int fk_stop;

static void *fk_worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg;
	while (!atomic_load(&fk_stop)) {
		void *p = uslab_cache_alloc(fk_cache);
		CHECK(p != NULL);
		stamp(p, 3);
		void *old = atomic_exchange(&box[rnd_next(&seed) % SLOTS], p);
		if (old)
			unstamp(fk_cache, old);
	}
	return NULL;
}

static void fork_child_work(void)
{
	alarm(30);
	/* the parent's objects, some of whose owners are threads that do not
	 * exist here */
	drain_box(fk_cache);
	void *v[256];
	for (int i = 0; i < 256; i++) {
		v[i] = uslab_cache_alloc(fk_cache);
		if (!v[i])
			_exit(3);
		stamp(v[i], 9);
	}
	for (int i = 0; i < 256; i++)
		unstamp(fk_cache, v[i]);
	if (uslab_cache_validate(fk_cache) != 0)
		_exit(4);
	pid_t pid = fork();
	if (pid == 0) {
		void *x = uslab_cache_alloc(fk_cache);
		_exit(x ? 17 : 5);
	}
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 17)
		_exit(6);
	_exit(17);
}

static void fork_in_flight(void)
{
	fk_cache = mk_home("home-fork", OBJ);
	atomic_store(&fk_stop, 0);
	pthread_t t[3];
	for (uintptr_t i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, fk_worker, (void *)(i + 11)) == 0);
	int forks = UNDER_TSAN ? 0 : SCALE(40, 10);   /* (TSan: fork in a threaded process is not supported) */
	for (int f = 0; f < forks; f++) {
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
		fflush(NULL);
		pid_t pid = fork();
		CHECK(pid >= 0);
		if (pid == 0)
			fork_child_work();
		int st;
		CHECK(waitpid(pid, &st, 0) == pid);
		CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 17, "fork %d: child status %#x", f, st);
	}
	atomic_store(&fk_stop, 1);
	for (int i = 0; i < 3; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	printf("    %d forks while 3 threads freed each other's objects\n", forks);
	finish(fk_cache, "fork_in_flight");
}

/* ---- shrink and destroy while others free remotely --------------------------------- */

static struct uslab_cache *sd_cache;
static _Atomic int sd_stop;
static pthread_barrier_t sd_bar;

static void *sd_worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg;
	while (!atomic_load(&sd_stop)) {
		void *p = uslab_cache_alloc(sd_cache);
		CHECK(p != NULL);
		stamp(p, 5);
		void *old = atomic_exchange(&box[rnd_next(&seed) % SLOTS], p);
		if (old)
			unstamp(sd_cache, old);
		if (rnd_next(&seed) % 4096 == 0)
			uslab_cache_shrink(sd_cache);
	}
	return NULL;
}

/* Frees some of the others' objects (batches gathering), then waits idle
 * while the cache is destroyed under it. */
static void *sd_idle(void *arg)
{
	for (int i = (int)(uintptr_t)arg; i < SLOTS; i += 2) {
		void *p = atomic_exchange(&box[i], NULL);
		if (p)
			unstamp(sd_cache, p);
	}
	pthread_barrier_wait(&sd_bar);   /* 1: done freeing, batches not sent */
	pthread_barrier_wait(&sd_bar);   /* 2: the cache is gone */
	return NULL;
}

static void shrink_destroy(void)
{
	sd_cache = mk_home("home-shrink", OBJ);
	atomic_store(&sd_stop, 0);
	pthread_t t[3];
	for (uintptr_t i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, sd_worker, (void *)(i + 21)) == 0);
	for (int i = 0; i < SCALE(200, 40); i++) {
		uslab_cache_shrink(sd_cache);
		struct timespec ts = { 0, 1000000 };
		nanosleep(&ts, NULL);
	}
	atomic_store(&sd_stop, 1);
	for (int i = 0; i < 3; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	/* every object now sits in the box; two idle threads free them (their
	 * batches for the exited workers' parts stay with them), then block */
	CHECK(pthread_barrier_init(&sd_bar, NULL, 3) == 0);
	pthread_t idle[2];
	for (uintptr_t i = 0; i < 2; i++)
		CHECK(pthread_create(&idle[i], NULL, sd_idle, (void *)i) == 0);
	pthread_barrier_wait(&sd_bar);
	CHECKF(cache_active(sd_cache) == 0, "%llu objects active", (unsigned long long)cache_active(sd_cache));
	struct stderr_capture cap;
	char out[2048];
	stderr_capture_begin(&cap);
	uslab_cache_destroy(sd_cache);   /* settles the idle threads' parts: nothing live */
	size_t n = stderr_capture_end(&cap, out, sizeof out);
	CHECKF(n == 0, "destroy reported: %s", out);
	pthread_barrier_wait(&sd_bar);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_join(idle[i], NULL) == 0);
	pthread_barrier_destroy(&sd_bar);
}

/* ---- the mode changed at run time ------------------------------------------------------ */

static struct uslab_cache *mc_cache;
static _Atomic int mc_stop;

static void *mc_worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg;
	void *mine[64] = { 0 }, *b[16];
	while (!atomic_load(&mc_stop)) {
		uint64_t r = rnd_next(&seed);
		unsigned k = (unsigned)(r >> 8) % 64;
		switch (r % 4) {
		case 0:
			if (mine[k]) {
				unstamp(mc_cache, mine[k]);
				mine[k] = NULL;
			} else {
				CHECK((mine[k] = uslab_cache_alloc(mc_cache)) != NULL);
				stamp(mine[k], 6);
			}
			break;
		case 1: {
			void *p = uslab_cache_alloc(mc_cache);
			CHECK(p != NULL);
			stamp(p, 6);
			void *old = atomic_exchange(&box[(r >> 20) % SLOTS], p);
			if (old)
				unstamp(mc_cache, old);
			break;
		}
		case 2: {
			size_t n = 1 + (r >> 24) % 16;
			CHECK_EQ(uslab_cache_alloc_bulk(mc_cache, n, b), n);
			for (size_t i = 0; i < n; i++)
				stamp(b[i], 6);
			uslab_cache_free_bulk(mc_cache, n, b);
			break;
		}
		default:
			break;
		}
	}
	for (int i = 0; i < 64; i++)
		if (mine[i])
			unstamp(mc_cache, mine[i]);
	return NULL;
}

static void mode_change(void)
{
	mc_cache = mk_home("home-modes", OBJ);
	struct uslab_cache_info in;
	cache_info(mc_cache, &in);
	if (cache_debugged(&in)) {
		printf("    slub_debug: debug caches have no per-CPU modes to change\n");
		destroy_silently(mc_cache);
		return;
	}
	atomic_store(&mc_stop, 0);
	pthread_t t[3];
	for (uintptr_t i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, mc_worker, (void *)(i + 31)) == 0);
	static const unsigned modes[] = { USLAB_CPU_CLASSIC, USLAB_CPU_SHEAVES, USLAB_CPU_HOME, USLAB_CPU_SLQB };
	int changes = SCALE(3000, 300);
	for (int i = 0; i < changes; i++) {
		CHECK(uslab_cache_tune_set(mc_cache, "cpu_mode", modes[i % 4]) == 0);
		struct timespec ts = { 0, 500000 };
		nanosleep(&ts, NULL);
	}
	atomic_store(&mc_stop, 1);
	for (int i = 0; i < 3; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	printf("    %d mode changes while 3 threads allocated and freed across threads\n", changes);
	finish(mc_cache, "mode_change");
}

int main(void)
{
	check_init("test_home");
	RUN(exit_in_flight);
	RUN(free_to_exiting);
	RUN(fork_in_flight);
	RUN(shrink_destroy);
	RUN(mode_change);
	return 0;
}
