/*
 * Memory failure (docs/testing.md rows 43 and 44), injected at the OS seam
 * with os_fault_set().
 *
 * The parent never touches the allocator: every case runs in a forked child
 * that starts from the same pristine state, with its stderr captured. A
 * child must exit 0 and print nothing on stderr (destroy of a clean cache is
 * silent).
 *
 * persistent: every map fails (OS_FAULT_FROM 1): allocation until NULL,
 *   which must come with ENOMEM, again and again; frees still work; cache
 *   creation and a new thread's first allocation fail cleanly or succeed;
 *   after os_fault_set(OS_FAULT_OFF) everything works again.
 * systematic: for each scenario and nth = 1..MAX_NTH, the nth map call fails
 *   once: every failure is NULL+ENOMEM and the retry succeeds; at the end
 *   everything is freed, active_objects == 0, ALLOC_FAILED counts the NULLs.
 * every_third: every third map call fails during a 2-thread workload that
 *   tolerates NULLs and gives its memory back between bursts (so that it
 *   maps again); then full recovery.
 */
#include "check.h"
#include "os.h"

#include <pthread.h>
#include <stdatomic.h>

#define MAX_NTH 30

/* A growable array of objects with their caches. */
struct held {
	void **p;
	struct uslab_cache **c;
	size_t n, cap;
};

static void held_push(struct held *h, struct uslab_cache *c, void *p)
{
	if (h->n == h->cap) {
		h->cap = h->cap ? 2 * h->cap : 1024;
		h->p = realloc(h->p, h->cap * sizeof *h->p);
		h->c = realloc(h->c, h->cap * sizeof *h->c);
		CHECK(h->p && h->c);
	}
	h->p[h->n] = p;
	h->c[h->n] = c;
	h->n++;
}

static void held_free_all(struct held *h)
{
	for (size_t i = 0; i < h->n; i++) {
		errno = 4242;
		uslab_cache_free(h->c[i], h->p[i]);
		CHECK(errno == 4242);
	}
	free(h->p);
	free(h->c);
	memset(h, 0, sizeof *h);
}

/* ---- persistent failure ---------------------------------------------------- */

static void *thread_alloc_under_fault(void *arg)
{
	struct uslab_cache *c = arg;
	errno = 0;
	void *p = uslab_cache_alloc(c);
	if (!p) {
		CHECKF(errno == ENOMEM, "errno %d", errno);
		return NULL;
	}
	return p;     /* there were free objects after all */
}

static void *thread_alloc_ok(void *arg)
{
	void *p = uslab_cache_alloc(arg);
	CHECK(p != NULL);
	return p;
}

static void persistent(void *arg)
{
	(void)arg;
	struct held h = { 0 };
	struct uslab_cache *c = uslab_cache_create("fault_persist", 256, 0, 0, NULL);
	CHECK(c != NULL);
	void *first = uslab_cache_alloc(c);
	CHECK(first != NULL);
	held_push(&h, c, first);

	uint64_t inj0 = os_map_injected();
	os_fault_set(OS_FAULT_FROM, 1);
	size_t got = 0;
	for (;;) {
		errno = 0;
		void *p = uslab_cache_alloc(c);
		if (!p) {
			CHECKF(errno == ENOMEM, "alloc failed with errno %d, not ENOMEM", errno);
			break;
		}
		CHECKF(++got < ((size_t)1 << 22), "allocation never failed");
		memset(p, 0x77, 256);
		held_push(&h, c, p);
	}
	printf("    %zu allocations from cached memory before the first NULL\n", got);
	CHECK(os_map_injected() > inj0);
	for (int i = 0; i < 10; i++) {
		CHECK_NULL_ERRNO(uslab_cache_alloc(c), ENOMEM);
		CHECK_NULL_ERRNO(uslab_cache_zalloc(c), ENOMEM);
	}
	struct uslab_cache_info info;
	cache_info(c, &info);
	CHECK(info.events[USLAB_STAT_ALLOC_FAILED] >= 21);
	CHECK_EQ(info.active_objects, h.n);

	/* Frees work while every map fails; the objects come back. */
	size_t half = h.n / 2;
	for (size_t i = h.n - half; i < h.n; i++) {
		errno = 4242;
		uslab_cache_free(c, h.p[i]);
		CHECK(errno == 4242);
	}
	h.n -= half;
	for (size_t i = 0; i < half; i++) {
		void *p = uslab_cache_alloc(c);
		CHECKF(p != NULL, "object %zu of %zu freed under fault not reusable, errno %d", i, half, errno);
		held_push(&h, c, p);
	}

	/* A new cache: creation or its first slab may fail, cleanly. */
	errno = 0;
	struct uslab_cache *d = uslab_cache_create("fault_new", 5000, 0, 0, NULL);
	if (!d) {
		CHECKF(errno == ENOMEM, "create failed with errno %d", errno);
		printf("    cache creation failed with ENOMEM\n");
	} else {
		errno = 0;
		void *p = uslab_cache_alloc(d);
		if (p)
			held_push(&h, d, p);
		else
			CHECK(errno == ENOMEM);
	}
	struct uslab_cache *big = uslab_cache_create("fault_big", USLAB_CACHE_MAX_SIZE, 0, 0, NULL);
	if (big)
		CHECK_NULL_ERRNO(uslab_cache_alloc(big), ENOMEM);
	else
		CHECK(errno == ENOMEM);

	/* A new thread's first allocation. */
	pthread_t t;
	void *tp;
	CHECK(pthread_create(&t, NULL, thread_alloc_under_fault, c) == 0);
	CHECK(pthread_join(t, &tp) == 0);
	if (tp)
		held_push(&h, c, tp);
	CHECK(uslab_cache_shrink(c) == 1);

	/* Recovery. */
	os_fault_set(OS_FAULT_OFF, 0);
	uint64_t injected = os_map_injected() - inj0;
	for (int i = 0; i < 1000; i++) {
		void *p = uslab_cache_alloc(c);
		CHECKF(p != NULL, "no recovery: errno %d", errno);
		held_push(&h, c, p);
	}
	if (!d) {
		d = uslab_cache_create("fault_new", 5000, 0, 0, NULL);
		CHECK(d != NULL);
	}
	if (!big) {
		big = uslab_cache_create("fault_big", USLAB_CACHE_MAX_SIZE, 0, 0, NULL);
		CHECK(big != NULL);
	}
	for (int i = 0; i < 10; i++) {
		void *p = uslab_cache_alloc(d), *q = uslab_cache_alloc(big);
		CHECK(p && q);
		memset(q, 1, USLAB_CACHE_MAX_SIZE);
		held_push(&h, d, p);
		held_push(&h, big, q);
	}
	CHECK(pthread_create(&t, NULL, thread_alloc_ok, c) == 0);
	CHECK(pthread_join(t, &tp) == 0);
	held_push(&h, c, tp);

	held_free_all(&h);
	struct uslab_cache *all[] = { c, d, big };
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(cache_active(all[i]), 0);
		CHECK(uslab_cache_shrink(all[i]) == 0);
		uslab_cache_destroy(all[i]);
	}
	printf("    %" PRIu64 " map calls failed by injection\n", injected);
}

static void test_persistent(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(persistent, NULL, 60, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 && r->len == 0, "child %s; stderr:\n%s", desc,
	       r->out);
	free(r);
}

/* ---- systematic: the nth map call fails ------------------------------------- */

struct ctx {
	struct held h;
	struct uslab_cache *caches[400];
	int ncaches;
	unsigned alloc_failures, create_failures;
};

static struct uslab_cache *x_create(struct ctx *x, const char *name, size_t size, size_t align)
{
	errno = 0;
	struct uslab_cache *c = uslab_cache_create(name, size, align, 0, NULL);
	if (!c) {
		CHECKF(errno == ENOMEM, "create '%s' failed with errno %d", name, errno);
		x->create_failures++;
		c = uslab_cache_create(name, size, align, 0, NULL);
		CHECKF(c != NULL, "create '%s' failed again after the fault, errno %d", name, errno);
	}
	CHECK(x->ncaches < 400);
	x->caches[x->ncaches++] = c;
	return c;
}

static void *x_alloc(struct ctx *x, struct uslab_cache *c)
{
	errno = 0;
	void *p = uslab_cache_alloc(c);
	if (!p) {
		CHECKF(errno == ENOMEM, "alloc failed with errno %d", errno);
		x->alloc_failures++;
		p = uslab_cache_alloc(c);
		CHECKF(p != NULL, "alloc failed again after the fault, errno %d", errno);
	}
	size_t size = uslab_cache_size(c);
	memset(p, 0xab, size < 256 ? size : 256);
	held_push(&x->h, c, p);
	return p;
}

static void sc_first_alloc(struct ctx *x)
{
	struct uslab_cache *c = x_create(x, "nth_first", 64, 0);
	x_alloc(x, c);
	x_alloc(x, c);
}

static void sc_slab_grow(struct ctx *x)
{
	struct uslab_cache *a = x_create(x, "nth_grow_128", 128, 0);
	struct uslab_cache *b = x_create(x, "nth_grow_3000", 3000, 0);
	struct uslab_cache *c = x_create(x, "nth_grow_4k", 4096, 4096);
	for (int i = 0; i < 60000; i++)
		x_alloc(x, a);
	for (int i = 0; i < 4000; i++)
		x_alloc(x, b);
	for (int i = 0; i < 2000; i++)
		x_alloc(x, c);
}

static void sc_cache_create(struct ctx *x)
{
	for (int i = 0; i < 40; i++) {
		char name[32];
		snprintf(name, sizeof name, "nth_create_%d", i);
		x_create(x, name, 16 + (size_t)i * 24, 0);
	}
	x_alloc(x, x->caches[0]);
}

static void sc_many_caches(struct ctx *x)
{
	for (int i = 0; i < 300; i++) {
		char name[32];
		snprintf(name, sizeof name, "nth_many_%d", i);
		struct uslab_cache *c = x_create(x, name, 8 + (size_t)(i * 37) % 3000, i % 3 ? 0 : 64);
		x_alloc(x, c);
	}
}

static void sc_big_objects(struct ctx *x)
{
	struct uslab_cache *a = x_create(x, "nth_max", USLAB_CACHE_MAX_SIZE, 0);
	struct uslab_cache *b = x_create(x, "nth_align_1m", 100, USLAB_CACHE_MAX_SIZE);
	struct uslab_cache *c = x_create(x, "nth_300k", 300000, 0);
	for (int i = 0; i < 24; i++) {
		x_alloc(x, a);
		x_alloc(x, b);
		x_alloc(x, c);
	}
}

static struct ctx *thread_ctx;

static void *sc_thread_fn(void *arg)
{
	struct uslab_cache **cs = arg;
	for (int i = 0; i < 200; i++)
		x_alloc(thread_ctx, cs[i % 2]);
	return NULL;
}

static void sc_thread_init(struct ctx *x)
{
	struct uslab_cache *cs[2] = { x_create(x, "nth_thr_a", 32, 0), x_create(x, "nth_thr_b", 2000, 0) };
	thread_ctx = x;
	for (int i = 0; i < 6; i++) {
		pthread_t t;
		CHECK(pthread_create(&t, NULL, sc_thread_fn, cs) == 0);
		CHECK(pthread_join(t, NULL) == 0);
	}
}

struct scenario {
	const char *name;
	void (*run)(struct ctx *);
};

static const struct scenario scenarios[] = {
	{ "first_alloc", sc_first_alloc },
	{ "slab_grow", sc_slab_grow },
	{ "cache_create", sc_cache_create },
	{ "many_caches", sc_many_caches },
	{ "big_objects", sc_big_objects },
	{ "thread_init", sc_thread_init },
};

struct sys_arg {
	const struct scenario *sc;
	unsigned long nth;
};

#define EXIT_NOT_REACHED 3

static void systematic_child(void *arg)
{
	struct sys_arg *a = arg;
	struct ctx *x = calloc(1, sizeof *x);
	CHECK(x != NULL);
	uint64_t inj0 = os_map_injected();
	os_fault_set(OS_FAULT_NTH, a->nth);
	a->sc->run(x);
	uint64_t injected = os_map_injected() - inj0;
	os_fault_set(OS_FAULT_OFF, 0);
	CHECK(injected <= 1);
	CHECK(x->alloc_failures + x->create_failures <= injected);

	/* The failures show in the counters; everything goes back. A merged
	 * cache reports its root's counters: each root counts once. */
	uint64_t failed = 0;
	static char roots[400][USLAB_NAME_MAX + 1];
	int nroots = 0;
	for (int i = 0; i < x->ncaches; i++) {
		struct uslab_cache_info info;
		cache_info(x->caches[i], &info);
		const char *root = info.alias_of[0] ? info.alias_of : info.name;
		int seen = 0;
		for (int k = 0; k < nroots && !seen; k++)
			seen = !strcmp(roots[k], root);
		if (seen)
			continue;
		snprintf(roots[nroots++], sizeof roots[0], "%s", root);
		failed += info.events[USLAB_STAT_ALLOC_FAILED];
	}
	CHECK_EQ(failed, x->alloc_failures);
	held_free_all(&x->h);
	for (int i = 0; i < x->ncaches; i++) {
		CHECK_EQ(cache_active(x->caches[i]), 0);
		CHECK(uslab_cache_shrink(x->caches[i]) == 0);
		uslab_cache_destroy(x->caches[i]);
	}
	unsigned fails = x->alloc_failures + x->create_failures;
	free(x);
	fflush(NULL);
	/* Tell the parent whether the nth call was reached, and what failed. */
	_exit(injected ? 10 + (int)(fails > 0) : EXIT_NOT_REACHED);
}

static void test_systematic(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	unsigned reached_total = 0;
	for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++) {
		unsigned reached = 0, visible = 0;
		unsigned long nth;
		for (nth = 1; nth <= MAX_NTH; nth++) {
			struct sys_arg a = { &scenarios[s], nth };
			run_in_child(systematic_child, &a, 60, r);
			char desc[128];
			child_describe(r, desc, sizeof desc);
			int st = WIFEXITED(r->status) ? WEXITSTATUS(r->status) : -1;
			CHECKF((st == 10 || st == 11 || st == EXIT_NOT_REACHED) && r->len == 0,
			       "scenario %s, nth %lu: child %s; stderr:\n%s", scenarios[s].name, nth, desc, r->out);
			if (st == EXIT_NOT_REACHED)
				break;
			reached++;
			visible += st == 11;
		}
		printf("    %-12s: map calls 1..%u failed in turn (%u of them seen as NULL), call %lu %s\n",
		       scenarios[s].name, reached, visible, nth,
		       nth > MAX_NTH ? "not tried" : "never made");
		reached_total += reached;
	}
	CHECKF(reached_total >= 10, "faults were hardly ever reached (%u)", reached_total);
	free(r);
}

/* ---- every third map call fails, two threads ---------------------------------- */

#define EVERY_BURSTS SCALE(30, 10)
#define EVERY_BURST  SCALE(3000, 1500)    /* allocations per thread and burst */

static const size_t every_sizes[] = { 64, 1000, 4000, 100000 };
static struct uslab_cache *every_caches[4];
static atomic_ulong every_nulls, every_allocs;
static pthread_barrier_t every_bar;

/* Bursts: allocate (some frees in between), free everything, then both
 * threads shrink every cache so that the pages go back to the OS and the
 * next burst has to map again. */
static void *every_thread(void *arg)
{
	uint64_t r = (uintptr_t)arg + 1;
	enum { HOLD = EVERY_BURST };
	static void *objs_all[2][HOLD];
	static int which_all[2][HOLD];
	void **objs = objs_all[(uintptr_t)arg];
	int *which = which_all[(uintptr_t)arg];
	unsigned long nulls = 0, allocs = 0;
	for (int burst = 0; burst < EVERY_BURSTS; burst++) {
		for (int i = 0; i < HOLD; i++) {
			unsigned p = (unsigned)(rnd_next(&r) % 100);
			int k = p < 50 ? 0 : p < 75 ? 1 : p < 93 ? 2 : 3;
			errno = 0;
			void *o = uslab_cache_alloc(every_caches[k]);
			if (!o) {
				CHECKF(errno == ENOMEM, "errno %d", errno);
				nulls++;
			} else {
				memset(o, 0x3c, every_sizes[k] < 512 ? every_sizes[k] : 512);
				allocs++;
			}
			objs[i] = o;
			which[i] = k;
			if (i > 0 && rnd_chance(&r, 20)) {
				int j = (int)(rnd_next(&r) % (unsigned)i);
				if (objs[j]) {
					uslab_cache_free(every_caches[which[j]], objs[j]);
					objs[j] = NULL;
				}
			}
		}
		if (burst % 5 == 4) {
			errno = 0;
			struct uslab_cache *t = uslab_cache_create("every_tmp", 777, 0, 0, NULL);
			if (!t) {
				CHECK(errno == ENOMEM);
			} else {
				void *q = uslab_cache_alloc(t);
				if (q)
					uslab_cache_free(t, q);
				else
					CHECK(errno == ENOMEM);
				uslab_cache_destroy(t);
			}
		}
		for (int i = 0; i < HOLD; i++)
			if (objs[i]) {
				errno = 77;
				uslab_cache_free(every_caches[which[i]], objs[i]);
				CHECK(errno == 77);
				objs[i] = NULL;
			}
		pthread_barrier_wait(&every_bar);
		for (int i = 0; i < 4; i++)
			(void)uslab_cache_shrink(every_caches[i]);
		pthread_barrier_wait(&every_bar);
	}
	atomic_fetch_add(&every_nulls, nulls);
	atomic_fetch_add(&every_allocs, allocs);
	return NULL;
}

static void every_third(void *arg)
{
	(void)arg;
	for (int i = 0; i < 4; i++) {
		every_caches[i] = uslab_cache_create("every", every_sizes[i], 0, 0, NULL);
		CHECK(every_caches[i] != NULL);
	}
	uint64_t calls0 = os_map_calls(), inj0 = os_map_injected();
	CHECK(pthread_barrier_init(&every_bar, NULL, 2) == 0);
	os_fault_set(OS_FAULT_EVERY, 3);
	pthread_t t[2];
	for (uintptr_t i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, every_thread, (void *)i) == 0);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	os_fault_set(OS_FAULT_OFF, 0);
	uint64_t calls = os_map_calls() - calls0, inj = os_map_injected() - inj0;
	printf("    %lu allocations, %lu NULLs; %" PRIu64 " map calls, %" PRIu64 " failed\n",
	       atomic_load(&every_allocs), atomic_load(&every_nulls), calls, inj);
	CHECK(inj > 0);
	CHECK(atomic_load(&every_nulls) > 0);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(cache_active(every_caches[i]), 0);
		void *p = uslab_cache_alloc(every_caches[i]);
		CHECK(p != NULL);
		uslab_cache_free(every_caches[i], p);
		CHECK(uslab_cache_shrink(every_caches[i]) == 0);
		uslab_cache_destroy(every_caches[i]);
	}
}

static void test_every_third(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(every_third, NULL, 120, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 && r->len == 0, "child %s; stderr:\n%s", desc,
	       r->out);
	free(r);
}

int main(void)
{
	check_init("test_fault");
	RUN(test_persistent);
	RUN(test_systematic);
	RUN(test_every_third);
	return 0;
}
