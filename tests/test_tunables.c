/*
 * Run-time tunables (uslab_cache_tune_set/get: sheaf_capacity, barn_full,
 * barn_empty, cpu_partial, min_partial, order), as the kernel's
 * /sys/kernel/slab/<cache>/ files the 2011 and 2015 threads tune.
 *
 * get_set_each      each tunable: get, set (bounds included), get again; an
 *                   alias reads and writes its root's values
 * einval            unknown names, NULL arguments, out-of-range values
 *                   (order below the cache's minimum or above 9, ...) give
 *                   -1/EINVAL and change nothing
 * order_effect      after an order change new slabs have that order:
 *                   get_info.order and objects_per_slab follow, and the
 *                   objects of a fresh fill lie in slabs of 4 KiB << order
 * cpu_partial_off   classic mode (sheaf_capacity=0), cpu_partial=0: a
 *                   cross-thread free workload (producer allocates, consumer
 *                   frees) never freezes a slab onto a CPU partial list
 *                   (CPU_PARTIAL_FREE, _NODE, _ALLOC stay 0); the same
 *                   workload with the default does
 * barn              sheaves: the same workload carries the consumer's full
 *                   sheaves back to the producer through the barn (BARN_PUT,
 *                   BARN_GET); with barn_full=0 they are flushed to the slabs
 *                   instead (BARN_GET 0, SHEAF_FLUSH); with sheaf_capacity=0
 *                   no sheaf is used at all
 * default_capacity  the default sheaf_capacity by object stride: up to
 *                   2 KiB the most of 28, 60, 124, 252, 508 objects (full
 *                   sheaf storage buckets) that hold at most 16 KiB, at
 *                   least 12; above, 32 KiB over the stride, 2 to 6 (not
 *                   checked where the run's options set it, or for debug
 *                   caches, which have none)
 * stress            tunables changed at random by one thread while three
 *                   others allocate and free (single, bulk, cross-thread);
 *                   then validate, nothing left allocated. Clean under TSan.
 */
#include "check.h"

#include <stdatomic.h>

static const char *const NAMES[] = { "sheaf_capacity", "barn_full", "barn_empty", "cpu_partial", "min_partial",
				     "order" };
#define NNAMES (sizeof NAMES / sizeof NAMES[0])

static struct uslab_cache *mk(const char *name, size_t size)
{
	struct uslab_cache *c = uslab_cache_create(name, size, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	return c;
}

static unsigned long tget(struct uslab_cache *c, const char *name)
{
	unsigned long v = 0xdeadbeef;
	CHECKF(uslab_cache_tune_get(c, name, &v) == 0, "get %s: errno %d", name, errno);
	return v;
}

static void tset(struct uslab_cache *c, const char *name, unsigned long v)
{
	CHECKF(uslab_cache_tune_set(c, name, v) == 0, "set %s=%lu: errno %d", name, v, errno);
	CHECKF(tget(c, name) == v, "%s: set %lu, get %lu", name, v, tget(c, name));
}

static void set_einval(struct uslab_cache *c, const char *name, unsigned long v)
{
	errno = 0;
	CHECKF(uslab_cache_tune_set(c, name, v) == -1 && errno == EINVAL, "set %s=%lu: expected EINVAL, errno %d",
	       name ? name : "(null)", v, errno);
}

/* ---- get and set ------------------------------------------------------------ */

static void get_set_each(void)
{
	struct uslab_cache *c = mk("tune-each", 256);
	struct uslab_cache_info in;
	cache_info(c, &in);
	/* defaults agree with get_info */
	CHECK_EQ(tget(c, "cpu_partial"), in.cpu_partial);
	CHECK_EQ(tget(c, "min_partial"), in.min_partial);
	CHECK_EQ(tget(c, "order"), in.order);
	CHECK_EQ(tget(c, "sheaf_capacity"), in.sheaf_capacity);
	CHECK_EQ(tget(c, "barn_full"), in.barn_full_max);
	CHECK_EQ(tget(c, "barn_empty"), in.barn_empty_max);
	printf("    defaults for 256-byte objects: sheaf_capacity %lu, barn_full %lu, barn_empty %lu, cpu_partial %lu, "
	       "min_partial %lu, order %lu\n",
	       tget(c, "sheaf_capacity"), tget(c, "barn_full"), tget(c, "barn_empty"), tget(c, "cpu_partial"),
	       tget(c, "min_partial"), tget(c, "order"));

	static const unsigned long cp[] = { 0, 1, 13, 256, 65535, 30 };
	for (unsigned i = 0; i < sizeof cp / sizeof cp[0]; i++) {
		tset(c, "cpu_partial", cp[i]);
		cache_info(c, &in);
		CHECK_EQ(in.cpu_partial, cp[i]);
	}
	static const unsigned long mp[] = { 0, 1, 9, 1024, 5 };
	for (unsigned i = 0; i < sizeof mp / sizeof mp[0]; i++) {
		tset(c, "min_partial", mp[i]);
		cache_info(c, &in);
		CHECK_EQ(in.min_partial, mp[i]);
	}
	for (unsigned long o = 0; o < 4; o++)
		set_einval(c, "order", o);   /* below a slot (64 KiB): every slab fills one at least */
	for (unsigned long o = 4; o <= 9; o++) {
		tset(c, "order", o);
		cache_info(c, &in);
		CHECK_EQ(in.order, o);
		CHECK_EQ(in.objects_per_slab, (4096UL << o) / in.slab_object_size);
	}
	static const unsigned long sc[] = { 0, 1, 508, 8, 28 };
	for (unsigned i = 0; i < sizeof sc / sizeof sc[0]; i++) {
		tset(c, "sheaf_capacity", sc[i]);
		cache_info(c, &in);
		CHECK_EQ(in.sheaf_capacity, sc[i]);
		/* the calling thread switches at its next slow path: objects
		 * still come and go */
		void *x = uslab_cache_alloc(c);
		CHECK(x != NULL);
		uslab_cache_free(c, x);
	}
	static const unsigned long b[] = { 0, 1, 1024, 10 };
	for (unsigned i = 0; i < sizeof b / sizeof b[0]; i++) {
		tset(c, "barn_full", b[i]);
		tset(c, "barn_empty", b[i]);
		cache_info(c, &in);
		CHECK_EQ(in.barn_full_max, b[i]);
		CHECK_EQ(in.barn_empty_max, b[i]);
	}

	/* an alias's tunables are its root's */
	struct uslab_cache *root = uslab_cache_create("tune-root", 3000, 0, 0, NULL);
	struct uslab_cache *alias = uslab_cache_create("tune-alias", 3000, 0, 0, NULL);
	CHECK(root && alias);
	struct uslab_cache_info ia;
	cache_info(alias, &ia);
	CHECK(strcmp(ia.alias_of, "tune-root") == 0);
	tset(alias, "cpu_partial", 77);
	CHECK_EQ(tget(root, "cpu_partial"), 77);
	tset(root, "min_partial", 3);
	CHECK_EQ(tget(alias, "min_partial"), 3);
	destroy_silently(alias);
	destroy_silently(root);
	destroy_silently(c);
}

/* ---- EINVAL ------------------------------------------------------------------ */

static void einval(void)
{
	struct uslab_cache *c = mk("tune-inval", 64 * 1024);   /* a 64 KiB slab at least: order >= 4 */
	struct uslab_cache_info in;
	cache_info(c, &in);
	CHECK_EQ(in.min_order, 4);
	unsigned long before[NNAMES];
	for (unsigned i = 0; i < NNAMES; i++)
		before[i] = tget(c, NAMES[i]);

	static const char *const bad_names[] = { "", "cpu_partials", "cpu", "CPU_PARTIAL", "order ", " order",
						 "min_partial\n", "objects", "slub_max_order", "cpu_queue", "sheaf",
						 "sheaf_capacity=1", "barn" };
	for (unsigned i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
		set_einval(c, bad_names[i], 1);
		unsigned long v = 42;
		errno = 0;
		CHECK(uslab_cache_tune_get(c, bad_names[i], &v) == -1 && errno == EINVAL && v == 42);
	}
	set_einval(c, NULL, 1);
	set_einval(NULL, "order", 4);
	unsigned long v;
	errno = 0;
	CHECK(uslab_cache_tune_get(NULL, "order", &v) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(uslab_cache_tune_get(c, NULL, &v) == -1 && errno == EINVAL);
	errno = 0;
	CHECK(uslab_cache_tune_get(c, "order", NULL) == -1 && errno == EINVAL);

	set_einval(c, "cpu_partial", 65536);
	set_einval(c, "cpu_partial", ~0UL);
	set_einval(c, "min_partial", 1025);
	set_einval(c, "min_partial", ~0UL);
	set_einval(c, "order", 10);
	set_einval(c, "order", ~0UL);
	for (unsigned long o = 0; o < 4; o++)
		set_einval(c, "order", o);          /* below the cache's minimum */
	set_einval(c, "sheaf_capacity", 509);
	set_einval(c, "sheaf_capacity", ~0UL);
	set_einval(c, "barn_full", 1025);
	set_einval(c, "barn_empty", ~0UL);
	for (unsigned i = 0; i < NNAMES; i++)
		CHECKF(tget(c, NAMES[i]) == before[i], "%s changed by a rejected set", NAMES[i]);
	/* the bounds themselves are accepted */
	tset(c, "order", 4);
	tset(c, "order", 9);
	destroy_silently(c);
}

/* ---- order changes take effect on new slabs ---------------------------------- */

static int cmp_uptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
	return x < y ? -1 : x > y;
}

/* Distinct (4 KiB << order)-aligned blocks holding these objects. */
static size_t blocks_of(void **p, size_t n, unsigned order)
{
	uintptr_t *b = malloc(n * sizeof *b);
	CHECK(b != NULL);
	for (size_t i = 0; i < n; i++)
		b[i] = (uintptr_t)p[i] >> (12 + order);
	qsort(b, n, sizeof *b, cmp_uptr);
	size_t k = n ? 1 : 0;
	for (size_t i = 1; i < n; i++)
		k += b[i] != b[i - 1];
	free(b);
	return k;
}

static void default_capacity(void)
{
	const char *o = getenv("USLAB_OPTIONS");
	if (o && strstr(o, "sheaf_capacity")) {
		printf("  skipped: USLAB_OPTIONS sets the capacity\n");
		return;
	}
	static const size_t sizes[] = { 8, 16, 24, 32, 40, 48, 64, 96, 100, 128, 136, 192, 256, 264, 384,
					512, 520, 1024, 1500, 2048, 3000, 4096, 8192, 20000 };
	char name[32];
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		snprintf(name, sizeof name, "tt-cap-%zu", sizes[i]);
		struct uslab_cache *c = mk(name, sizes[i]);
		struct uslab_cache_info in = { .version = USLAB_CACHE_INFO_VERSION };
		CHECK_EQ(uslab_cache_get_info(c, &in), 0);
		unsigned long cap = tget(c, "sheaf_capacity"), stride = in.slab_object_size;
		if (cache_debugged(&in)) {
			CHECK_EQ(cap, 0);
		} else if (stride <= 2048) {
			CHECKF(cap == 12 || cap == 28 || cap == 60 || cap == 124 || cap == 252 || cap == 508,
			       "stride %lu: capacity %lu fills no storage bucket", stride, cap);
			CHECKF(cap == 12 || cap * stride <= 16384, "stride %lu: %lu objects hold more than 16 KiB", stride,
			       cap);
			CHECKF(cap == 508 || (2 * cap + 4) * stride > 16384, "stride %lu: %lu objects, %lu would fit", stride,
			       cap, 2 * cap + 4);
		} else {
			unsigned long want = 32768 / stride;
			want = want < 2 ? 2 : want > 6 ? 6 : want;
			CHECKF(cap == want, "stride %lu: capacity %lu, not %lu", stride, cap, want);
		}
		uslab_cache_destroy(c);
	}
}

static void order_effect(void)
{
	struct uslab_cache *c = mk("tune-order", 256);
	static const unsigned orders[] = { 4, 6, 5, 7, 4 };
	enum { SLABS = 12 };
	for (unsigned k = 0; k < sizeof orders / sizeof orders[0]; k++) {
		unsigned o = orders[k];
		tset(c, "order", o);
		struct uslab_cache_info in;
		cache_info(c, &in);
		CHECK_EQ(in.order, o);
		unsigned per = in.objects_per_slab;
		CHECK_EQ(per, (4096U << o) / in.slab_object_size);
		/* no slab of an earlier order is left: every object is in a new one */
		CHECK_EQ(in.slabs, 0);
		size_t n = (size_t)per * SLABS;
		void **p = malloc(n * sizeof *p);
		CHECK(p != NULL);
		CHECK_EQ(uslab_cache_alloc_bulk(c, n, p), n);
		cache_info(c, &in);
		CHECKF(in.slabs == SLABS && in.total_objects == n, "order %u: %llu slabs, %llu objects (per slab %u)", o,
		       (unsigned long long)in.slabs, (unsigned long long)in.total_objects, per);
		/* objects of one slab share one naturally aligned block of that order */
		CHECK_EQ(blocks_of(p, n, o), SLABS);
		uslab_cache_free_bulk(c, n, p);
		free(p);
		CHECK_EQ(uslab_cache_shrink(c), 0);
		cache_info(c, &in);
		CHECK_EQ(in.slabs, 0);
	}
	/* a change while slabs of the old order exist: both kinds coexist */
	tset(c, "order", 4);
	void *old = uslab_cache_alloc(c);
	tset(c, "order", 5);
	struct uslab_cache_info in;
	cache_info(c, &in);
	void **p = malloc(in.objects_per_slab * 3 * sizeof *p);
	CHECK(p != NULL);
	CHECK_EQ(uslab_cache_alloc_bulk(c, in.objects_per_slab * 3, p), in.objects_per_slab * 3);
	CHECK_EQ(uslab_cache_validate(c), 0);
	uslab_cache_free_bulk(c, in.objects_per_slab * 3, p);
	uslab_cache_free(c, old);
	free(p);
	CHECK_EQ(uslab_cache_validate(c), 0);
	destroy_silently(c);
}

/* ---- cross-thread workloads ---------------------------------------------------- */

/* A one-slot mailbox between a producer and a consumer thread. */
struct mailbox {
	struct uslab_cache *c;
	_Atomic(void **) box;
	size_t batch;
	unsigned rounds;
	int lockstep;          /* producer waits until the batch was freed */
	_Atomic unsigned freed_rounds;
};

static void *mb_producer(void *arg)
{
	struct mailbox *m = arg;
	for (unsigned r = 0; r < m->rounds; r++) {
		void **b = malloc(m->batch * sizeof *b);
		CHECK(b != NULL);
		for (size_t i = 0; i < m->batch; i++) {
			b[i] = uslab_cache_alloc(m->c);
			CHECK(b[i] != NULL);
			*(size_t *)b[i] = i;
		}
		void **expect = NULL;
		while (!atomic_compare_exchange_weak(&m->box, &expect, b)) {
			expect = NULL;
			sched_yield();
		}
		if (m->lockstep)
			while (atomic_load(&m->freed_rounds) <= r)
				sched_yield();
	}
	return NULL;
}

static void *mb_consumer(void *arg)
{
	struct mailbox *m = arg;
	for (unsigned r = 0; r < m->rounds;) {
		void **b = atomic_exchange(&m->box, NULL);
		if (!b) {
			sched_yield();
			continue;
		}
		for (size_t i = 0; i < m->batch; i++) {
			CHECK(*(size_t *)b[i] == i);
			uslab_cache_free(m->c, b[i]);
		}
		free(b);
		r++;
		atomic_store(&m->freed_rounds, r);
	}
	return NULL;
}

static void run_mailbox(struct uslab_cache *c, size_t batch, unsigned rounds, int lockstep, struct uslab_cache_info *out)
{
	struct mailbox m = { .c = c, .batch = batch, .rounds = rounds, .lockstep = lockstep };
	pthread_t p, q;
	CHECK(pthread_create(&q, NULL, mb_consumer, &m) == 0);
	CHECK(pthread_create(&p, NULL, mb_producer, &m) == 0);
	CHECK(pthread_join(p, NULL) == 0);
	CHECK(pthread_join(q, NULL) == 0);
	cache_info(c, out);
	CHECK_EQ(out->active_objects, 0);   /* both threads are gone: exact */
	CHECK_EQ(uslab_cache_validate(c), 0);
}

static void cpu_partial_off(void)
{
	struct uslab_cache_info on, off;
	/* Batches of 600 fill whole slabs; the consumer's frees hit full
	 * slabs that nobody has frozen. */
	struct uslab_cache *a = mk("tune-cp-default", 128);
	tset(a, "sheaf_capacity", 0);   /* classic mode: CPU partial lists */
	CHECK(tget(a, "cpu_partial") > 0);
	run_mailbox(a, 600, SCALE(200, 40), 0, &on);
	struct uslab_cache *b = mk("tune-cp-off", 128);
	tset(b, "sheaf_capacity", 0);
	tset(b, "cpu_partial", 0);
	run_mailbox(b, 600, SCALE(200, 40), 0, &off);
	printf("    default: CPU_PARTIAL_FREE %llu, CPU_PARTIAL_ALLOC %llu, NODE_LOCK %llu; "
	       "cpu_partial=0: CPU_PARTIAL_FREE %llu, NODE_LOCK %llu\n",
	       (unsigned long long)on.events[USLAB_STAT_CPU_PARTIAL_FREE],
	       (unsigned long long)on.events[USLAB_STAT_CPU_PARTIAL_ALLOC],
	       (unsigned long long)on.events[USLAB_STAT_NODE_LOCK],
	       (unsigned long long)off.events[USLAB_STAT_CPU_PARTIAL_FREE],
	       (unsigned long long)off.events[USLAB_STAT_NODE_LOCK]);
	CHECK(on.events[USLAB_STAT_CPU_PARTIAL_FREE] > 0);
	CHECK_EQ(off.events[USLAB_STAT_CPU_PARTIAL_FREE], 0);
	CHECK_EQ(off.events[USLAB_STAT_CPU_PARTIAL_NODE], 0);
	CHECK_EQ(off.events[USLAB_STAT_CPU_PARTIAL_ALLOC], 0);
	CHECK(off.events[USLAB_STAT_FREE_ADD_PARTIAL] > 0);   /* the node list took them instead */
	destroy_silently(a);
	destroy_silently(b);
}

static void barn(void)
{
	struct uslab_cache_info on, nobarn, classic;
	/* Batches of 600: the consumer's frees fill whole sheaves, which go
	 * to the barn, and the producer's refills take them from there. */
	struct uslab_cache *a = mk("tune-barn-default", 64);
	tset(a, "sheaf_capacity", 60);   /* the default, also when slub_sheaf_capacity=0 is set */
	CHECK(tget(a, "barn_full") > 0);
	run_mailbox(a, 600, SCALE(200, 40), 0, &on);
	struct uslab_cache *b = mk("tune-barn-off", 64);
	tset(b, "sheaf_capacity", 60);
	tset(b, "barn_full", 0);
	run_mailbox(b, 600, SCALE(200, 40), 0, &nobarn);
	struct uslab_cache *c = mk("tune-barn-classic", 64);
	tset(c, "sheaf_capacity", 0);
	run_mailbox(c, 600, SCALE(200, 40), 0, &classic);
	printf("    default: BARN_PUT %llu, BARN_GET %llu, SHEAF_FLUSH %llu, NODE_LOCK %llu; barn_full=0: BARN_GET %llu, "
	       "SHEAF_FLUSH %llu, NODE_LOCK %llu; classic: NODE_LOCK %llu\n",
	       (unsigned long long)on.events[USLAB_STAT_BARN_PUT], (unsigned long long)on.events[USLAB_STAT_BARN_GET],
	       (unsigned long long)on.events[USLAB_STAT_SHEAF_FLUSH], (unsigned long long)on.events[USLAB_STAT_NODE_LOCK],
	       (unsigned long long)nobarn.events[USLAB_STAT_BARN_GET],
	       (unsigned long long)nobarn.events[USLAB_STAT_SHEAF_FLUSH],
	       (unsigned long long)nobarn.events[USLAB_STAT_NODE_LOCK],
	       (unsigned long long)classic.events[USLAB_STAT_NODE_LOCK]);
	CHECK(on.events[USLAB_STAT_BARN_PUT] > 0);
	CHECK(on.events[USLAB_STAT_BARN_GET] > 0);
	CHECK(on.events[USLAB_STAT_FREE_PCS] > 0 && on.events[USLAB_STAT_ALLOC_PCS] > 0);
	CHECK_EQ(nobarn.events[USLAB_STAT_BARN_GET], 0);
	CHECK_EQ(nobarn.events[USLAB_STAT_BARN_PUT], 0);
	CHECK(nobarn.events[USLAB_STAT_SHEAF_FLUSH] > 0);
	CHECK_EQ(classic.events[USLAB_STAT_FREE_PCS] + classic.events[USLAB_STAT_ALLOC_PCS], 0);
	CHECK_EQ(classic.events[USLAB_STAT_SHEAF_FLUSH] + classic.events[USLAB_STAT_SHEAF_REFILL], 0);
	/* whole sheaves travel: fewer node locks than with every sheaf flushed */
	CHECK(on.events[USLAB_STAT_NODE_LOCK] < nobarn.events[USLAB_STAT_NODE_LOCK]);
	destroy_silently(a);
	destroy_silently(b);
	destroy_silently(c);
}

/* ---- tunables changed under load ------------------------------------------------ */

#define XSLOTS 256
struct stress {
	struct uslab_cache *c;
	_Atomic(void *) xchg[XSLOTS];   /* objects in flight between threads */
	_Atomic int stop;
	unsigned long ops;
	_Atomic unsigned long sets;
};

struct worker {
	struct stress *st;
	uint64_t seed;
	pthread_t tid;
};

#define OBJ 200
static void stamp(void *p) { memset(p, 0x3c, OBJ); }
static void verify(const void *p)
{
	const unsigned char *b = p;
	for (int i = 0; i < OBJ; i += 37)
		CHECKF(b[i] == 0x3c, "object %p byte %d is 0x%02x", p, i, b[i]);
}

static void *stress_worker(void *arg)
{
	struct worker *w = arg;
	struct stress *st = w->st;
	enum { MINE = 512 };
	void *mine[MINE] = { 0 };
	void *bulk[48];
	for (unsigned long i = 0; i < st->ops; i++) {
		uint64_t r = rnd_next(&w->seed);
		unsigned k = (unsigned)(r >> 8) % MINE;
		switch (r % 8) {
		case 0: case 1: case 2:   /* alloc or free a slot of our own */
			if (mine[k]) {
				verify(mine[k]);
				uslab_cache_free(st->c, mine[k]);
				mine[k] = NULL;
			} else {
				mine[k] = uslab_cache_alloc(st->c);
				CHECK(mine[k] != NULL);
				stamp(mine[k]);
			}
			break;
		case 3: case 4: {         /* hand an object to some other thread, free what was there */
			void *p = uslab_cache_alloc(st->c);
			CHECK(p != NULL);
			stamp(p);
			void *old = atomic_exchange(&st->xchg[(r >> 20) % XSLOTS], p);
			if (old) {
				verify(old);
				uslab_cache_free(st->c, old);
			}
			break;
		}
		case 5: {                 /* take one in flight */
			void *old = atomic_exchange(&st->xchg[(r >> 20) % XSLOTS], NULL);
			if (old) {
				verify(old);
				uslab_cache_free(st->c, old);
			}
			break;
		}
		default: {                /* a bulk round trip */
			size_t n = 1 + (r >> 32) % 48;
			CHECK_EQ(uslab_cache_alloc_bulk(st->c, n, bulk), n);
			for (size_t j = 0; j < n; j++)
				stamp(bulk[j]);
			uslab_cache_free_bulk(st->c, n, bulk);
			break;
		}
		}
	}
	for (unsigned k = 0; k < MINE; k++)
		if (mine[k])
			uslab_cache_free(st->c, mine[k]);
	return NULL;
}

static void *stress_tuner(void *arg)
{
	struct worker *w = arg;
	struct stress *st = w->st;
	while (!atomic_load(&st->stop)) {
		uint64_t r = rnd_next(&w->seed);
		unsigned long v;
		const char *name = NAMES[r % NNAMES];
		switch (r % NNAMES) {
		case 0: v = (r >> 8) % 4 == 0 ? 0 : (r >> 16) % 65; break;   /* sheaf_capacity, classic too */
		case 1: case 2: v = (r >> 16) % 12; break;                    /* barn bounds */
		case 3: v = (r >> 8) % 4 == 0 ? 0 : (r >> 16) % 300; break;   /* cpu_partial */
		case 4: v = (r >> 16) % 12; break;                            /* min_partial */
		default: v = 4 + (r >> 16) % 3; break;                        /* order (a slot at least) */
		}
		CHECKF(uslab_cache_tune_set(st->c, name, v) == 0, "set %s=%lu", name, v);
		unsigned long got;
		CHECK(uslab_cache_tune_get(st->c, NAMES[(r >> 40) % NNAMES], &got) == 0);
		if ((r >> 48) % 16 == 0) {
			struct uslab_cache_info in;
			cache_info(st->c, &in);
		}
		atomic_fetch_add(&st->sets, 1);
		if ((r >> 52) % 4 == 0)
			sched_yield();
	}
	return NULL;
}

static void stress(void)
{
	static struct stress st;
	st.c = mk("tune-stress", OBJ);
	st.ops = SCALE(300000, 40000);
	enum { W = 3 };
	struct worker w[W + 1];
	for (int i = 0; i <= W; i++) {
		w[i].st = &st;
		w[i].seed = 1000 + (uint64_t)i;
	}
	CHECK(pthread_create(&w[W].tid, NULL, stress_tuner, &w[W]) == 0);
	for (int i = 0; i < W; i++)
		CHECK(pthread_create(&w[i].tid, NULL, stress_worker, &w[i]) == 0);
	for (int i = 0; i < W; i++)
		CHECK(pthread_join(w[i].tid, NULL) == 0);
	atomic_store(&st.stop, 1);
	CHECK(pthread_join(w[W].tid, NULL) == 0);
	for (int i = 0; i < XSLOTS; i++) {
		void *p = atomic_exchange(&st.xchg[i], NULL);
		if (p) {
			verify(p);
			uslab_cache_free(st.c, p);
		}
	}
	printf("    %lu tunable changes during %d x %lu operations\n", atomic_load(&st.sets), W, st.ops);
	CHECK(atomic_load(&st.sets) > 10);
	CHECK_EQ(cache_active(st.c), 0);
	CHECK_EQ(uslab_cache_validate(st.c), 0);
	destroy_silently(st.c);
}

/* Under slub_debug for every cache: debug caches keep no objects per CPU,
 * so sheaf_capacity accepts only 0; the other tunables work. */
static void debug_sheaves_refused(void)
{
	struct uslab_cache *c = uslab_cache_create("dbg-tune", 256, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	CHECK_EQ(tget(c, "sheaf_capacity"), 0);
	set_einval(c, "sheaf_capacity", 1);
	tset(c, "sheaf_capacity", 0);
	tset(c, "barn_full", 3);
	tset(c, "cpu_partial", 7);
	tset(c, "min_partial", 3);
	uslab_cache_destroy(c);
}

int main(int argc, char **argv)
{
	(void)argc;
	rerun_without_slub_debug(argv, debug_sheaves_refused);
	check_init("test_tunables");
	RUN(get_set_each);
	RUN(einval);
	RUN(order_effect);
	RUN(default_capacity);
	RUN(cpu_partial_off);
	RUN(barn);
	RUN(stress);
	return 0;
}
