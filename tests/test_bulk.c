/*
 * Bulk allocation and free (docs/testing.md row 17; kmem_cache_alloc_bulk and
 * kmem_cache_free_bulk of the 2015 thread).
 *
 * zero_and_args     nr = 0 does nothing; NULL cache/array are EINVAL
 * sizes_1_to_1024   alloc_bulk of n = 1..1024 (a sweep) gives n distinct,
 *                   aligned, writable objects from many slabs; free_bulk in
 *                   a shuffled order gives every one back
 * many_slabs        objects spread over many slabs (every other one kept),
 *                   freed in bulk: counters, validate, slabs given back
 * equals_single     free_bulk of a set of objects leaves the cache exactly as
 *                   n single frees do (event counts, active objects, slabs,
 *                   validate) and leaves the array and live objects' contents
 *                   untouched
 * null_entries      NULL entries are skipped and not counted
 * other_threads     objects allocated by other threads (singly and in bulk)
 *                   are freed in bulk here, and the other way round, with
 *                   threads freeing in bulk concurrently
 * forced_failure    all or nothing: with every map call failing from the nth
 *                   on (n = 1..8), alloc_bulk of big objects that need new
 *                   segments returns either nr or 0 with every entry NULL,
 *                   ENOMEM, and nothing left allocated (active_objects 0);
 *                   afterwards the cache works again (in a child process, so
 *                   that the page allocator starts empty)
 * through_sheaves   sheaves mode: objects free_bulk leaves in the sheaves and
 *                   the barn come back from alloc_bulk (after warm-up no new
 *                   slab), keep their contents, are never handed out twice,
 *                   count as freed, and go back to their slabs on shrink;
 *                   classic mode: the same rounds, with SLUB's slab churn
 * misuse            free_bulk with a stack address, an interior pointer or
 *                   an object of another cache in the array dies with
 *                   "uslab: fatal:"
 */
#include "check.h"
#include "os.h"

#include <stdatomic.h>

static struct uslab_cache *mk(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	return c;
}

static void fill(void *p, size_t size, uint64_t tag)
{
	unsigned char *b = p;
	for (size_t i = 0; i < size; i++)
		b[i] = (unsigned char)(tag + i * 13);
}

static bool filled(const void *p, size_t size, uint64_t tag)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < size; i++)
		if (b[i] != (unsigned char)(tag + i * 13))
			return false;
	return true;
}

static void shuffle(void **a, size_t n, uint64_t *seed)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = rnd_next(seed) % i;
		void *t = a[i - 1];
		a[i - 1] = a[j];
		a[j] = t;
	}
}

static int cmp_ptr(const void *a, const void *b)
{
	uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
	return x < y ? -1 : x > y;
}

/* n distinct, non-NULL, aligned pointers. */
static void check_distinct(void **objs, size_t n, size_t align)
{
	void **tmp = malloc(n * sizeof *tmp);
	CHECK(tmp != NULL);
	memcpy(tmp, objs, n * sizeof *tmp);
	qsort(tmp, n, sizeof *tmp, cmp_ptr);
	for (size_t i = 0; i < n; i++) {
		CHECK(tmp[i] != NULL);
		CHECKF((uintptr_t)tmp[i] % align == 0, "%p not aligned to %zu", tmp[i], align);
		if (i)
			CHECKF(tmp[i] != tmp[i - 1], "object %p handed out twice", tmp[i]);
	}
	free(tmp);
}

static uint64_t ev(const struct uslab_cache_info *in, enum uslab_stat_item i) { return in->events[i]; }

/* ---- bulk through the sheaves -------------------------------------------------- */

static void through_sheaves(void)
{
	struct uslab_cache *c = mk("bulk-sheaves", 256);
	enum { N = 200 };
	void *objs[N];
	CHECK_EQ(uslab_cache_alloc_bulk(c, N, objs), N);
	for (size_t i = 0; i < N; i++)
		fill(objs[i], 256, i);
	uslab_cache_free_bulk(c, N, objs);
	struct uslab_cache_info a = { .version = USLAB_CACHE_INFO_VERSION };
	CHECK_EQ(uslab_cache_get_info(c, &a), 0);
	CHECK_EQ(a.active_objects, 0);   /* objects in sheaves count as freed */
	uint64_t seed = 7;
	for (int round = 0; round < 100; round++) {
		if (round == 10)   /* from here on: steady state */
			CHECK_EQ(uslab_cache_get_info(c, &a), 0);
		CHECK_EQ(uslab_cache_alloc_bulk(c, N, objs), N);
		check_distinct(objs, N, 16);
		for (size_t i = 0; i < N; i++)
			fill(objs[i], 256, (uint64_t)round << 32 | i);
		shuffle(objs, N, &seed);
		uslab_cache_free_bulk(c, N, objs);
	}
	struct uslab_cache_info b = { .version = USLAB_CACHE_INFO_VERSION };
	CHECK_EQ(uslab_cache_get_info(c, &b), 0);
	printf("    rounds 11-100 of %d: ALLOC_SLAB +%llu, ALLOC_SLOWPATH +%llu\n", N,
	       (unsigned long long)(ev(&b, USLAB_STAT_ALLOC_SLAB) - ev(&a, USLAB_STAT_ALLOC_SLAB)),
	       (unsigned long long)(ev(&b, USLAB_STAT_ALLOC_SLOWPATH) - ev(&a, USLAB_STAT_ALLOC_SLOWPATH)));
	if (b.sheaf_capacity)   /* debug caches and classic mode have no sheaves */
		CHECK_EQ(ev(&b, USLAB_STAT_ALLOC_SLAB), ev(&a, USLAB_STAT_ALLOC_SLAB));
	CHECK_EQ(ev(&b, USLAB_STAT_ALLOC_BULK) - ev(&a, USLAB_STAT_ALLOC_BULK), 90ULL * N);
	CHECK_EQ(ev(&b, USLAB_STAT_FREE_BULK) - ev(&a, USLAB_STAT_FREE_BULK), 90ULL * N);
	CHECK_EQ(b.active_objects, 0);
	void *one = uslab_cache_alloc(c);
	CHECK(one != NULL);
	uslab_cache_free(c, one);
	/* shrink flushes this thread's sheaves and the barn: every slab can go */
	CHECK_EQ(uslab_cache_shrink(c), 0);
	CHECK_EQ(uslab_cache_get_info(c, &b), 0);
	CHECK_EQ(b.slabs, 0);
	destroy_silently(c);
}

/* ---- nr = 0, bad arguments ------------------------------------------------ */

static void zero_and_args(void)
{
	struct uslab_cache *c = mk("bulk-zero", 64);
	void *objs[4] = { (void *)1, (void *)2, (void *)3, (void *)4 };
	CHECK_EQ(uslab_cache_alloc_bulk(c, 0, objs), 0);
	CHECK(objs[0] == (void *)1);   /* untouched */
	CHECK_EQ(uslab_cache_alloc_bulk(c, 0, NULL), 0);
	uslab_cache_free_bulk(c, 0, objs);   /* must not look at the entries */
	uslab_cache_free_bulk(c, 0, NULL);
	uslab_cache_free_bulk(c, 3, NULL);   /* NULL array: nothing */
	errno = 0;
	CHECK_EQ(uslab_cache_alloc_bulk(c, 4, NULL), 0);
	CHECK_EQ(errno, EINVAL);
	errno = 0;
	CHECK_EQ(uslab_cache_alloc_bulk(NULL, 4, objs), 0);
	CHECK_EQ(errno, EINVAL);

	struct uslab_cache_info in;
	cache_info(c, &in);
	CHECK_EQ(in.active_objects, 0);
	CHECK_EQ(ev(&in, USLAB_STAT_ALLOC_BULK), 0);
	CHECK_EQ(ev(&in, USLAB_STAT_FREE_BULK), 0);
	destroy_silently(c);
}

/* ---- a sweep of sizes ----------------------------------------------------- */

static void sizes_1_to_1024(void)
{
	struct uslab_cache *c = mk("bulk-sweep", 48);
	enum { MAXN = 1024 };
	void **objs = calloc(MAXN, sizeof *objs);
	CHECK(objs != NULL);
	uint64_t seed = 1;
	uint64_t total = 0;
	size_t step = SCALE(1, 7);
	for (size_t n = 1; n <= MAXN; n += (n < 70 ? 1 : step * 13)) {
		CHECK_EQ(uslab_cache_alloc_bulk(c, n, objs), n);
		check_distinct(objs, n, 16);
		for (size_t i = 0; i < n; i++)
			fill(objs[i], 48, i + n);
		for (size_t i = 0; i < n; i++)
			CHECKF(filled(objs[i], 48, i + n), "object %zu of %zu overwritten", i, n);
		CHECK_EQ(cache_active(c), n);
		shuffle(objs, n, &seed);
		uslab_cache_free_bulk(c, n, objs);
		CHECK_EQ(cache_active(c), 0);
		total += n;
	}
	struct uslab_cache_info in;
	cache_info(c, &in);
	CHECK_EQ(ev(&in, USLAB_STAT_ALLOC_BULK), total);
	CHECK_EQ(ev(&in, USLAB_STAT_FREE_BULK), total);
	CHECK_EQ(uslab_cache_validate(c), 0);
	free(objs);
	destroy_silently(c);
}

/* ---- objects from many slabs -------------------------------------------- */

static void many_slabs(void)
{
	struct uslab_cache *c = mk("bulk-many", 200);
	struct uslab_cache_info in;
	cache_info(c, &in);
	unsigned per = in.objects_per_slab;
	size_t n = (size_t)per * 40;
	void **all = calloc(n, sizeof *all), **keep = calloc(n, sizeof *keep), **gone = calloc(n, sizeof *gone);
	CHECK(all && keep && gone);
	for (size_t i = 0; i < n; i++) {
		all[i] = uslab_cache_alloc(c);
		CHECK(all[i] != NULL);
		fill(all[i], 200, i);
	}
	/* every other object goes: each of the ~40 slabs loses half */
	size_t nk = 0, ng = 0;
	for (size_t i = 0; i < n; i++) {
		if (i % 2)
			gone[ng++] = all[i];
		else
			keep[nk++] = all[i];
	}
	uint64_t seed = 7;
	shuffle(gone, ng, &seed);
	cache_info(c, &in);
	uint64_t slabs_before = in.slabs;
	CHECK(slabs_before >= 40);
	uslab_cache_free_bulk(c, ng, gone);
	CHECK_EQ(cache_active(c), nk);
	CHECK_EQ(uslab_cache_validate(c), 0);
	for (size_t i = 0; i < n; i += 2)
		CHECKF(filled(all[i], 200, i), "live object %zu changed by free_bulk", i);
	cache_info(c, &in);
	CHECK_EQ(in.slabs, slabs_before);   /* every slab still has live objects */
	/* the rest, in order; then the slabs can go */
	uslab_cache_free_bulk(c, nk, keep);
	CHECK_EQ(cache_active(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);
	uslab_cache_shrink(c);
	cache_info(c, &in);
	CHECK_EQ(in.slabs, 0);
	CHECK_EQ(ev(&in, USLAB_STAT_FREE_BULK), n);
	free(all);
	free(keep);
	free(gone);
	destroy_silently(c);
}

/* ---- free_bulk equals n single frees ------------------------------------- */

static void equals_single(void)
{
	/* Two caches with the same layout, driven through the same sequence;
	 * only the frees differ (bulk in A, single in B). */
	struct uslab_cache *a = mk("bulk-eq-a", 72), *b = mk("bulk-eq-b", 72);
	enum { N = 3000 };
	void **pa = calloc(N, sizeof *pa), **pb = calloc(N, sizeof *pb);
	void **fa = calloc(N, sizeof *fa), **fb = calloc(N, sizeof *fb), **copy = calloc(N, sizeof *copy);
	CHECK(pa && pb && fa && fb && copy);
	for (int i = 0; i < N; i++) {
		pa[i] = uslab_cache_alloc(a);
		pb[i] = uslab_cache_alloc(b);
		CHECK(pa[i] && pb[i]);
		fill(pa[i], 72, (uint64_t)i);
		fill(pb[i], 72, (uint64_t)i);
	}
	uint64_t seed = 99;
	size_t nf = 0;
	for (int i = 0; i < N; i++) {
		if (rnd_chance(&seed, 60)) {
			fa[nf] = pa[i];
			fb[nf] = pb[i];
			nf++;
		}
	}
	struct uslab_cache_info ia0, ib0, ia, ib;
	cache_info(a, &ia0);
	cache_info(b, &ib0);
	memcpy(copy, fa, nf * sizeof *copy);
	uslab_cache_free_bulk(a, nf, fa);
	CHECK(memcmp(copy, fa, nf * sizeof *copy) == 0);   /* the array is left as it was */
	for (size_t i = 0; i < nf; i++)
		uslab_cache_free(b, fb[i]);
	cache_info(a, &ia);
	cache_info(b, &ib);
	CHECK_EQ(ia.active_objects, N - nf);
	CHECK_EQ(ib.active_objects, N - nf);
	CHECK_EQ(ev_frees(&ia) - ev_frees(&ia0), nf);
	CHECK_EQ(ev_frees(&ib) - ev_frees(&ib0), nf);
	CHECK_EQ(ev(&ia, USLAB_STAT_FREE_BULK) - ev(&ia0, USLAB_STAT_FREE_BULK), nf);
	CHECK_EQ(ev(&ib, USLAB_STAT_FREE_BULK), 0);
	CHECK_EQ(ev_allocs(&ia), ev_allocs(&ib));
	CHECK_EQ(ia.slabs, ib.slabs);
	CHECK_EQ(ia.total_objects, ib.total_objects);
	CHECK_EQ(uslab_cache_validate(a), 0);
	CHECK_EQ(uslab_cache_validate(b), 0);
	/* Objects that stay allocated are untouched in both. */
	size_t k = 0;
	for (int i = 0; i < N; i++) {
		if (k < nf && fa[k] == pa[i]) {
			k++;
			continue;
		}
		CHECKF(filled(pa[i], 72, (uint64_t)i), "A: live object %d changed", i);
		CHECKF(filled(pb[i], 72, (uint64_t)i), "B: live object %d changed", i);
	}
	/* The freed memory is reused alike: nf allocations need no new slab. */
	cache_info(a, &ia0);
	cache_info(b, &ib0);
	CHECK_EQ(uslab_cache_alloc_bulk(a, nf, fa), nf);
	CHECK_EQ(uslab_cache_alloc_bulk(b, nf, fb), nf);
	cache_info(a, &ia);
	cache_info(b, &ib);
	CHECK_EQ(ev(&ia, USLAB_STAT_ALLOC_SLAB), ev(&ia0, USLAB_STAT_ALLOC_SLAB));
	CHECK_EQ(ev(&ib, USLAB_STAT_ALLOC_SLAB), ev(&ib0, USLAB_STAT_ALLOC_SLAB));
	CHECK_EQ(ia.active_objects, N);
	CHECK_EQ(ib.active_objects, N);
	/* everything back: A by bulk, B singly */
	k = 0;
	for (int i = 0; i < N; i++) {
		if (k < nf && copy[k] == pa[i]) {
			k++;
			continue;
		}
		fa[nf + (size_t)i - k] = pa[i];
		fb[nf + (size_t)i - k] = pb[i];
	}
	uslab_cache_free_bulk(a, N, fa);
	for (int i = 0; i < N; i++)
		uslab_cache_free(b, fb[i]);
	CHECK_EQ(cache_active(a), 0);
	CHECK_EQ(cache_active(b), 0);
	CHECK_EQ(uslab_cache_validate(a), 0);
	CHECK_EQ(uslab_cache_validate(b), 0);
	free(pa);
	free(pb);
	free(fa);
	free(fb);
	free(copy);
	destroy_silently(a);
	destroy_silently(b);
}

/* ---- NULL entries ---------------------------------------------------------- */

static void null_entries(void)
{
	struct uslab_cache *c = mk("bulk-null", 32);
	enum { N = 500 };
	void *objs[2 * N + 3];
	size_t n = 0;
	objs[n++] = NULL;
	for (int i = 0; i < N; i++) {
		objs[n++] = uslab_cache_alloc(c);
		CHECK(objs[n - 1] != NULL);
		if (i % 3 == 0)
			objs[n++] = NULL;
	}
	objs[n++] = NULL;
	objs[n++] = NULL;
	struct uslab_cache_info in;
	CHECK_EQ(cache_active(c), N);
	uslab_cache_free_bulk(c, n, objs);
	cache_info(c, &in);
	CHECK_EQ(in.active_objects, 0);
	CHECK_EQ(ev(&in, USLAB_STAT_FREE_BULK), N);   /* NULLs are not counted */
	void *nulls[5] = { NULL, NULL, NULL, NULL, NULL };
	uslab_cache_free_bulk(c, 5, nulls);
	cache_info(c, &in);
	CHECK_EQ(ev(&in, USLAB_STAT_FREE_BULK), N);
	CHECK_EQ(uslab_cache_validate(c), 0);
	destroy_silently(c);
}

/* ---- other threads ------------------------------------------------------- */

#define XT_N 2000
struct xt_arg {
	struct uslab_cache *c;
	void **objs;
	size_t n;
	int bulk;
	uint64_t tag;
};

static void *xt_alloc(void *p)
{
	struct xt_arg *a = p;
	if (a->bulk) {
		CHECK_EQ(uslab_cache_alloc_bulk(a->c, a->n, a->objs), a->n);
	} else {
		for (size_t i = 0; i < a->n; i++) {
			a->objs[i] = uslab_cache_alloc(a->c);
			CHECK(a->objs[i] != NULL);
		}
	}
	for (size_t i = 0; i < a->n; i++)
		fill(a->objs[i], 64, a->tag + i);
	return NULL;
}

static void *xt_free(void *p)
{
	struct xt_arg *a = p;
	for (size_t i = 0; i < a->n; i++)
		CHECKF(filled(a->objs[i], 64, a->tag + i), "object %zu corrupt", i);
	/* in chunks of varying size, as a consumer would */
	for (size_t i = 0, k = 1; i < a->n; i += k, k = k * 3 % 61 + 1)
		uslab_cache_free_bulk(a->c, k < a->n - i ? k : a->n - i, a->objs + i);
	return NULL;
}

/* The box is a one-batch mailbox; each side sleeps on the condition
 * variable while it cannot go on (spinning or yielding would let a loaded
 * machine, with more runnable threads than CPUs, run a round per time
 * slice: minutes for the 20,000 rounds). */
struct pingpong {
	struct uslab_cache *c;
	pthread_mutex_t lock;      /* protects box */
	pthread_cond_t cv;         /* box changed */
	void **box;                /* a batch handed from producer to consumer, or NULL */
	unsigned rounds;
};

static void *pp_producer(void *p)
{
	struct pingpong *pp = p;
	for (unsigned r = 0; r < pp->rounds; r++) {
		void **batch = malloc(33 * sizeof *batch);
		CHECK(batch != NULL);
		size_t n = 1 + r % 32;
		CHECK_EQ(uslab_cache_alloc_bulk(pp->c, n, batch + 1), n);
		batch[0] = (void *)n;
		for (size_t i = 1; i <= n; i++)
			fill(batch[i], 64, r + i);
		pthread_mutex_lock(&pp->lock);
		while (pp->box)
			pthread_cond_wait(&pp->cv, &pp->lock);
		pp->box = batch;
		pthread_cond_broadcast(&pp->cv);
		pthread_mutex_unlock(&pp->lock);
	}
	return NULL;
}

static void *pp_consumer(void *p)
{
	struct pingpong *pp = p;
	unsigned got = 0;
	while (got < pp->rounds) {
		pthread_mutex_lock(&pp->lock);
		while (!pp->box)
			pthread_cond_wait(&pp->cv, &pp->lock);
		void **batch = pp->box;
		pp->box = NULL;
		pthread_cond_broadcast(&pp->cv);
		pthread_mutex_unlock(&pp->lock);
		size_t n = (size_t)batch[0];
		for (size_t i = 1; i <= n; i++)
			CHECKF(filled(batch[i], 64, got + i), "round %u object %zu corrupt", got, i);
		uslab_cache_free_bulk(pp->c, n, batch + 1);
		free(batch);
		got++;
	}
	return NULL;
}

static void other_threads(void)
{
	struct uslab_cache *c = mk("bulk-xt", 64);
	enum { T = 3 };
	pthread_t th[T];
	struct xt_arg arg[T];
	void **mine = calloc(XT_N, sizeof *mine);
	CHECK(mine != NULL);
	/* 1. other threads allocate (singly and in bulk); this one frees in bulk,
	 * mixed with its own objects. */
	for (int t = 0; t < T; t++) {
		arg[t] = (struct xt_arg){ c, calloc(XT_N, sizeof(void *)), XT_N, t % 2, (uint64_t)t << 20 };
		CHECK(arg[t].objs != NULL);
		CHECK(pthread_create(&th[t], NULL, xt_alloc, &arg[t]) == 0);
	}
	for (int t = 0; t < T; t++)
		CHECK(pthread_join(th[t], NULL) == 0);
	CHECK_EQ(uslab_cache_alloc_bulk(c, XT_N, mine), XT_N);
	CHECK_EQ(cache_active(c), (T + 1) * XT_N);
	void **mix = calloc((T + 1) * XT_N, sizeof *mix);
	CHECK(mix != NULL);
	size_t n = 0;
	for (size_t i = 0; i < XT_N; i++) {
		for (int t = 0; t < T; t++) {
			CHECK(filled(arg[t].objs[i], 64, arg[t].tag + i));
			mix[n++] = arg[t].objs[i];
		}
		mix[n++] = mine[i];
	}
	uslab_cache_free_bulk(c, n, mix);
	CHECK_EQ(cache_active(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* 2. this thread allocates, the others free in bulk, concurrently. */
	for (int t = 0; t < T; t++) {
		CHECK_EQ(uslab_cache_alloc_bulk(c, XT_N, arg[t].objs), XT_N);
		for (size_t i = 0; i < XT_N; i++)
			fill(arg[t].objs[i], 64, arg[t].tag + i);
	}
	for (int t = 0; t < T; t++)
		CHECK(pthread_create(&th[t], NULL, xt_free, &arg[t]) == 0);
	for (int t = 0; t < T; t++)
		CHECK(pthread_join(th[t], NULL) == 0);
	CHECK_EQ(cache_active(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);

	/* 3. producer/consumer threads: bulks of 1..32 allocated on one
	 * thread and freed in bulk on another while both run. */
	struct pingpong pp = { .c = c, .lock = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER,
			       .rounds = SCALE(20000, 3000) };
	pthread_t prod, cons;
	CHECK(pthread_create(&cons, NULL, pp_consumer, &pp) == 0);
	CHECK(pthread_create(&prod, NULL, pp_producer, &pp) == 0);
	CHECK(pthread_join(prod, NULL) == 0);
	CHECK(pthread_join(cons, NULL) == 0);
	CHECK_EQ(cache_active(c), 0);
	CHECK_EQ(uslab_cache_validate(c), 0);

	for (int t = 0; t < T; t++)
		free(arg[t].objs);
	free(mine);
	free(mix);
	destroy_silently(c);
}

/* ---- all or nothing under forced failure --------------------------------- */

#define BIG (512 * 1024)   /* one object per 512 KiB slab: 7 per 4 MiB segment */
#define NR_BIG 48          /* about 7 segments */

static void forced_failure_child(void *arg)
{
	struct uslab_cache *c = mk("bulk-fail", BIG);
	void *objs[NR_BIG];
	/* the CPU part exists before faults start */
	void *warm = uslab_cache_alloc(c);
	CHECK(warm != NULL);
	uslab_cache_free(c, warm);
	uint64_t failures = 0, successes = 0;
	for (unsigned long nth = 1; nth <= 8; nth++) {
		for (int i = 0; i < NR_BIG; i++)
			objs[i] = (void *)(uintptr_t)(0x1000 + i);
		os_fault_set(OS_FAULT_FROM, nth);
		errno = 0;
		size_t got = uslab_cache_alloc_bulk(c, NR_BIG, objs);
		int e = errno;
		os_fault_set(OS_FAULT_OFF, 0);
		if (got == 0) {
			CHECKF(e == ENOMEM, "nth %lu: errno %d", nth, e);
			for (int i = 0; i < NR_BIG; i++)
				CHECKF(objs[i] == NULL, "nth %lu: entry %d is %p after a failed alloc_bulk", nth, i, objs[i]);
			CHECKF(cache_active(c) == 0, "nth %lu: %llu objects left allocated", nth,
			       (unsigned long long)cache_active(c));
			failures++;
		} else {
			CHECK_EQ(got, NR_BIG);
			check_distinct(objs, NR_BIG, 16);
			CHECK_EQ(cache_active(c), NR_BIG);
			uslab_cache_free_bulk(c, NR_BIG, objs);
			CHECK_EQ(cache_active(c), 0);
			successes++;
		}
		CHECK_EQ(uslab_cache_validate(c), 0);
		/* give everything back so that the next round has to map again */
		uslab_cache_shrink(c);
	}
	CHECKF(failures > 0, "no round failed: the fault never hit alloc_bulk");
	struct uslab_cache_info in;
	cache_info(c, &in);
	CHECK(in.events[USLAB_STAT_ALLOC_FAILED] >= failures);
	/* recovery */
	CHECK_EQ(uslab_cache_alloc_bulk(c, NR_BIG, objs), NR_BIG);
	for (int i = 0; i < NR_BIG; i++)
		memset(objs[i], 0xab, BIG);
	uslab_cache_free_bulk(c, NR_BIG, objs);
	CHECK_EQ(cache_active(c), 0);
	printf("    forced failure: %llu rounds failed, %llu succeeded\n", (unsigned long long)failures,
	       (unsigned long long)successes);
	uslab_cache_destroy(c);
}

static void forced_failure(void)
{
	struct child_result *r = malloc(sizeof *r);
	CHECK(r != NULL);
	run_in_child(forced_failure_child, NULL, 60, r);
	char desc[128];
	child_describe(r, desc, sizeof desc);
	CHECKF(WIFEXITED(r->status) && WEXITSTATUS(r->status) == 0 && r->len == 0, "child %s; stderr:\n%s", desc,
	       r->out);
	free(r);
}

/* ---- misuse --------------------------------------------------------------- */

static struct uslab_cache *misuse_cache, *misuse_other;

static void free_bulk_stack(void *arg)
{
	int local[16];
	void *objs[4] = { uslab_cache_alloc(misuse_cache), uslab_cache_alloc(misuse_cache), &local[4],
			  uslab_cache_alloc(misuse_cache) };
	uslab_cache_free_bulk(misuse_cache, 4, objs);
}

static void free_bulk_interior(void *arg)
{
	void *objs[3] = { uslab_cache_alloc(misuse_cache), NULL, NULL };
	objs[1] = (char *)uslab_cache_alloc(misuse_cache) + 8;
	uslab_cache_free_bulk(misuse_cache, 3, objs);
}

static void free_bulk_wrong_cache(void *arg)
{
	void *objs[2] = { uslab_cache_alloc(misuse_cache), uslab_cache_alloc(misuse_other) };
	uslab_cache_free_bulk(misuse_cache, 2, objs);
}

static void free_bulk_malloced(void *arg)
{
	void *objs[2] = { uslab_cache_alloc(misuse_cache), malloc(64) };
	uslab_cache_free_bulk(misuse_cache, 2, objs);
}

static void misuse(void)
{
	misuse_cache = mk("bulk-misuse", 64);
	misuse_other = mk("bulk-misuse-other", 64);
	CHECK_DEATH("free_bulk with a stack address", free_bulk_stack, NULL, "uslab: fatal:", "bulk-misuse");
	CHECK_DEATH("free_bulk with an interior pointer", free_bulk_interior, NULL, "uslab: fatal:", "bulk-misuse");
	CHECK_DEATH("free_bulk with another cache's object", free_bulk_wrong_cache, NULL, "uslab: fatal:",
		    "bulk-misuse-other");
	CHECK_DEATH("free_bulk with a malloc'd block", free_bulk_malloced, NULL, "uslab: fatal:");
	destroy_silently(misuse_cache);
	destroy_silently(misuse_other);
}

int main(void)
{
	check_init("test_bulk");
	/* First, while the page allocator is untouched and no thread exists. */
	RUN(forced_failure);
	RUN(misuse);
	RUN(zero_and_args);
	RUN(sizes_1_to_1024);
	RUN(many_slabs);
	RUN(equals_single);
	RUN(null_entries);
	RUN(other_threads);
	RUN(through_sheaves);
	return 0;
}
