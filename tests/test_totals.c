/*
 * The totals of struct uslab_cache_info (allocs, allocs_fast, frees,
 * frees_fast; issue 19) against the program's own counts, in one per-CPU
 * mode. The totals must mean the same in every mode, whatever path each
 * allocation and free took.
 *
 *   test_totals MODE     MODE: classic, sheaves, home or slqb
 *
 * CTest runs it once per mode (test_totals_MODE) with
 * "slub_cpu_mode=MODE" added to USLAB_OPTIONS, so that the mode reaches
 * the caches through the option (the kmalloc classes too) and, for one
 * object cache, through the "cpu_mode" tunable after it ran a while in
 * another mode. A debug cache (slub_debug in USLAB_OPTIONS, as in
 * scripts/test.sh's debug variant) is always classic: then the mode is
 * checked to be that, and the counts the same.
 *
 * object_caches   three caches (mode from the option; switched to the mode
 *                 by the tunable half way; tunable from the start) each run
 *                 the same workload, counting every allocation and free it
 *                 makes: single allocations (alloc, zalloc) and frees, bulk
 *                 allocations of 1, 7, 32 and 250 and bulk frees (with NULL
 *                 entries, not counted), frees of this thread's objects by
 *                 another thread (single and bulk) and the other way round,
 *                 two threads freeing each other's objects at once, a thread
 *                 that exits holding objects freed later here, a free and an
 *                 allocation in a thread's TLS destructor (possibly after
 *                 uslab's own: the CPU-less paths), uslab_cache_shrink in
 *                 between, and enough objects for many slabs (slow paths).
 *                 While objects are live and at the end: allocs and frees
 *                 equal the program's counts, allocs - frees ==
 *                 active_objects == objects the program holds, allocs_fast
 *                 <= allocs, frees_fast <= frees, and some allocations took
 *                 a slow path (allocs_fast < allocs)
 * malloc_classes  the same for three kmalloc classes (24, 200 and 3000
 *                 bytes) through uslab_malloc, uslab_calloc, uslab_realloc
 *                 (kept in place: no count; moved to another class: an
 *                 allocation there and a free here), uslab_free_sized and
 *                 uslab_free, frees by another thread, blocks of a thread
 *                 that exited freed here, and uslab_malloc_trim (no count);
 *                 the classes' counts are taken as differences from before
 *                 (the library may use them too, but not meanwhile); each
 *                 class must run the mode slub_cpu_mode gave it
 *
 * failed_bulk     a cache of 512 KiB objects: alloc_bulk of 48 while the
 *                 OS mappings fail from the nth on (n = 1..8), so that
 *                 most rounds take some objects before they fail: a failed
 *                 round changes neither allocs nor frees (what it took goes
 *                 back uncounted), only ALLOC_FAILED
 *
 * KFENCE is on (the default): its samples count as slow-path allocations
 * and frees of their cache (uslab.h), so the totals hold with it.
 */
#include "check.h"
#include "kmalloc.h"   /* kmalloc_caches[], kmalloc_index() */
#include "os.h"        /* os_fault_set() */

#include <stdatomic.h>

#define NMODES 5              /* USLAB_CPU_CLASSIC .. USLAB_CPU_SLAB */
static unsigned mode;         /* USLAB_CPU_*: the mode asked for */
static const char *mode_name;

/* What the program did, by its own count. */
struct ledger {
	_Atomic uint64_t allocs, frees;
};

static void got(struct ledger *l, uint64_t n) { atomic_fetch_add(&l->allocs, n); }
static void gave(struct ledger *l, uint64_t n) { atomic_fetch_add(&l->frees, n); }

/* The cache's totals against the ledger (the caller's threads are quiet:
 * every other thread that used the cache has been joined). `held`: objects
 * the program holds now. */
static void check_totals(struct uslab_cache *c, const struct ledger *l, uint64_t held, const char *when)
{
	struct uslab_cache_info info;
	cache_info(c, &info);
	uint64_t al = atomic_load(&l->allocs), fr = atomic_load(&l->frees);
	printf("    %-10s %-28s allocs %7" PRIu64 " (fast %7" PRIu64 ")  frees %7" PRIu64 " (fast %7" PRIu64
	       ")  active %6" PRIu64 "\n", info.name, when, info.allocs, info.allocs_fast, info.frees, info.frees_fast,
	       info.active_objects);
	CHECKF(info.allocs == al, "%s, %s: allocs %" PRIu64 ", the program made %" PRIu64, info.name, when,
	       info.allocs, al);
	CHECKF(info.frees == fr, "%s, %s: frees %" PRIu64 ", the program made %" PRIu64, info.name, when, info.frees,
	       fr);
	CHECK_EQ(al - fr, held);
	CHECK_EQ(info.allocs - info.frees, info.active_objects);
	CHECK_EQ(info.active_objects, held);
	CHECK(info.allocs_fast <= info.allocs);
	CHECK(info.frees_fast <= info.frees);
}

/* The mode a cache must run: the one asked for; classic for a debug cache,
 * and for sheaves of capacity 0 (slub_sheaf_capacity=0, as in
 * scripts/test.sh's classic variant). */
static void check_mode(struct uslab_cache *c)
{
	struct uslab_cache_info info;
	cache_info(c, &info);
	bool classic = cache_debugged(&info) || (mode == USLAB_CPU_SHEAVES && !info.sheaf_capacity);
	unsigned want = classic ? USLAB_CPU_CLASSIC : mode;
	CHECKF(info.cpu_mode == want, "%s: cpu_mode %u, want %u (%s%s)", info.name, info.cpu_mode, want, mode_name,
	       cache_debugged(&info) ? ", a debug cache" : classic ? ", sheaf capacity 0" : "");
}

/* ---- object caches ------------------------------------------------------------- */

#define SIZE 200
#define NSINGLE SCALE(3000, 1000)
#define NTHREAD SCALE(1200, 400)
#define NCROSS SCALE(2000, 600)

struct work {
	struct uslab_cache *c;
	struct ledger *l;
	void **objs;              /* in or out */
	size_t n;
	pthread_barrier_t *bar;
	void **theirs;            /* cross frees: the other thread's objects */
	size_t ntheirs;
};

static void *alloc1(struct uslab_cache *c, struct ledger *l, size_t i)
{
	void *x = i % 3 == 2 ? uslab_cache_zalloc(c) : uslab_cache_alloc(c);
	CHECK(x != NULL);
	memset(x, (int)(i & 0xff), SIZE);
	got(l, 1);
	return x;
}

/* Allocate w->n objects into w->objs (singles and bulk), then exit holding them. */
static void *thread_alloc(void *arg)
{
	struct work *w = arg;
	size_t i = 0;
	while (i < w->n) {
		size_t k = w->n - i < 32 ? w->n - i : 32;
		if ((i / 32) % 2) {
			CHECK(uslab_cache_alloc_bulk(w->c, k, w->objs + i) == k);
			got(w->l, k);
			i += k;
		} else {
			for (size_t j = 0; j < k; j++, i++)
				w->objs[i] = alloc1(w->c, w->l, i);
		}
	}
	return NULL;
}

/* Free w->objs (another thread's objects): every other one singly, the
 * rest in bulk (with NULL entries). */
static void *thread_free(void *arg)
{
	struct work *w = arg;
	void *batch[40];
	size_t nb = 0;
	for (size_t i = 0; i < w->n; i++) {
		if (i % 2) {
			uslab_cache_free(w->c, w->objs[i]);
			gave(w->l, 1);
			continue;
		}
		batch[nb++] = w->objs[i];
		if (nb % 8 == 7)
			batch[nb++] = NULL;   /* skipped, not counted */
		if (nb >= 38 || i + 2 >= w->n) {
			size_t real = 0;
			for (size_t j = 0; j < nb; j++)
				real += batch[j] != NULL;
			uslab_cache_free_bulk(w->c, nb, batch);
			gave(w->l, real);
			nb = 0;
		}
	}
	CHECK(nb == 0);
	return NULL;
}

/* Two threads at once: allocate, wait for the other, free the other's. */
static void *thread_cross(void *arg)
{
	struct work *w = arg;
	thread_alloc(w);
	pthread_barrier_wait(w->bar);
	struct work f = *w;
	f.objs = w->theirs;
	f.n = w->ntheirs;
	thread_free(&f);
	return NULL;
}

/* A thread whose TLS destructor frees an object and allocates and frees
 * another: it may run after uslab's own destructor took the thread's CPU
 * parts (the CPU-less paths). */
static pthread_key_t dtor_key;
static struct work *dtor_work;
static void dtor(void *p)
{
	struct work *w = dtor_work;
	uslab_cache_free(w->c, p);
	gave(w->l, 1);
	void *x = uslab_cache_alloc(w->c);
	CHECK(x != NULL);
	got(w->l, 1);
	uslab_cache_free(w->c, x);
	gave(w->l, 1);
}

static void *thread_dtor(void *arg)
{
	struct work *w = arg;
	void *x = uslab_cache_alloc(w->c);
	CHECK(x != NULL);
	got(w->l, 1);
	/* a few fast-path operations first, so that uslab's part exists */
	for (int i = 0; i < 10; i++) {
		void *y = alloc1(w->c, w->l, (size_t)i);
		uslab_cache_free(w->c, y);
		gave(w->l, 1);
	}
	pthread_setspecific(dtor_key, x);
	return NULL;
}

static void run(void *(*fn)(void *), struct work *w)
{
	pthread_t t;
	CHECK(pthread_create(&t, NULL, fn, w) == 0);
	CHECK(pthread_join(t, NULL) == 0);
}

/* The workload. switch_to: if not -1, the cpu_mode tunable is set to it
 * half way. */
static void workload(struct uslab_cache *c, int switch_to)
{
	struct ledger l = { 0 };
	static void *mine[SCALE(3000, 1000)];
	size_t held = 0;

	/* singles: many slabs' worth (slow paths for new slabs), every third
	 * zeroed; then every other one freed, from the end */
	for (size_t i = 0; i < NSINGLE; i++)
		mine[i] = alloc1(c, &l, i);
	held = NSINGLE;
	for (size_t i = NSINGLE; i-- > 0;)
		if (i % 2) {
			uslab_cache_free(c, mine[i]);
			gave(&l, 1);
			mine[i] = NULL;
			held--;
		}
	check_totals(c, &l, held, "singles");

	/* bulk: 1, 7, 32, 250 objects, freed in bulk (with two NULL holes,
	 * not counted; what they held goes back singly) or singly */
	static void *bulk[250];
	static const size_t sizes[] = { 1, 7, 32, 250, 1, 32, 2 };
	for (size_t r = 0; r < sizeof sizes / sizeof sizes[0]; r++) {
		size_t k = sizes[r];
		CHECK(uslab_cache_alloc_bulk(c, k, bulk) == k);
		got(&l, k);
		for (size_t j = 0; j < k; j++)
			memset(bulk[j], 0x5a, SIZE);
		if (r % 2) {
			for (size_t j = 0; j < k; j++)
				uslab_cache_free(c, bulk[j]);
			gave(&l, k);
			continue;
		}
		void *h1 = NULL, *h2 = NULL;
		if (k > 2) {
			h1 = bulk[1];
			h2 = bulk[k - 1];
			bulk[1] = bulk[k - 1] = NULL;
		}
		uslab_cache_free_bulk(c, k, bulk);
		gave(&l, h1 ? k - 2 : k);
		if (h1) {
			check_totals(c, &l, held + 2, "bulk free with NULLs");
			uslab_cache_free(c, h1);
			uslab_cache_free(c, h2);
			gave(&l, 2);
		}
	}
	check_totals(c, &l, held, "bulk");

	if (switch_to >= 0) {
		CHECK(uslab_cache_tune_set(c, "cpu_mode", (unsigned long)switch_to) == 0);
		check_mode(c);
	}

	/* another thread frees half of this thread's live objects */
	static void *pass[SCALE(3000, 1000)];
	size_t np = 0;
	for (size_t i = 0; i < NSINGLE; i++)
		if (mine[i] && i % 4 == 0) {
			pass[np++] = mine[i];
			mine[i] = NULL;
		}
	struct work w = { .c = c, .l = &l, .objs = pass, .n = np };
	run(thread_free, &w);
	held -= np;
	check_totals(c, &l, held, "remote frees");

	/* another thread allocates and exits holding them; freed here, half
	 * singly, half in bulk */
	static void *theirs[SCALE(1200, 400)];
	w = (struct work){ .c = c, .l = &l, .objs = theirs, .n = NTHREAD };
	run(thread_alloc, &w);
	held += NTHREAD;
	check_totals(c, &l, held, "a gone thread's objects");
	w.n = NTHREAD;
	thread_free(&w);
	held -= NTHREAD;
	check_totals(c, &l, held, "... freed here");

	/* two threads free each other's objects at once */
	static void *xa[SCALE(2000, 600)], *xb[SCALE(2000, 600)];
	pthread_barrier_t bar;
	CHECK(pthread_barrier_init(&bar, NULL, 2) == 0);
	struct work wa = { .c = c, .l = &l, .objs = xa, .n = NCROSS, .bar = &bar, .theirs = xb, .ntheirs = NCROSS };
	struct work wb = { .c = c, .l = &l, .objs = xb, .n = NCROSS, .bar = &bar, .theirs = xa, .ntheirs = NCROSS };
	pthread_t ta, tb;
	CHECK(pthread_create(&ta, NULL, thread_cross, &wa) == 0);
	CHECK(pthread_create(&tb, NULL, thread_cross, &wb) == 0);
	CHECK(pthread_join(ta, NULL) == 0 && pthread_join(tb, NULL) == 0);
	pthread_barrier_destroy(&bar);
	check_totals(c, &l, held, "cross frees");

	/* TLS destructors: a free and an allocation at thread exit */
	w = (struct work){ .c = c, .l = &l };
	dtor_work = &w;
	run(thread_dtor, &w);
	check_totals(c, &l, held, "TLS destructor");

	/* shrink gives back what the CPU layer holds: no count changes */
	uslab_cache_shrink(c);
	check_totals(c, &l, held, "shrink");

	/* the rest, singly; then a last round of fast-path pairs */
	for (size_t i = 0; i < NSINGLE; i++)
		if (mine[i]) {
			uslab_cache_free(c, mine[i]);
			gave(&l, 1);
			held--;
		}
	for (int i = 0; i < 100; i++) {
		void *x = alloc1(c, &l, (size_t)i);
		uslab_cache_free(c, x);
		gave(&l, 1);
	}
	CHECK_EQ(held, 0);
	check_totals(c, &l, 0, "end");
	struct uslab_cache_info info;
	cache_info(c, &info);
	CHECKF(info.allocs_fast < info.allocs, "%s: no allocation took a slow path (%" PRIu64 " of %" PRIu64 " fast)",
	       info.name, info.allocs_fast, info.allocs);
	CHECK(info.events[USLAB_STAT_ALLOC_SLOWPATH] + info.events[USLAB_STAT_ALLOC_BULK] > 0);
}

static struct uslab_cache *mk(const char *name)
{
	struct uslab_cache *c = uslab_cache_create(name, SIZE, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	return c;
}

static void object_caches(void)
{
	CHECK(pthread_key_create(&dtor_key, dtor) == 0);

	/* the mode from USLAB_OPTIONS=slub_cpu_mode */
	struct uslab_cache *c = mk("tot_option");
	check_mode(c);
	workload(c, -1);
	check_mode(c);
	destroy_silently(c);

	/* another mode first, the tunable half way (a debug cache takes only
	 * classic: then it stays classic) */
	c = mk("tot_switch");
	struct uslab_cache_info info;
	cache_info(c, &info);
	bool debugged = cache_debugged(&info);
	unsigned other = (mode + 2) % NMODES;
	CHECK(uslab_cache_tune_set(c, "cpu_mode", other) == (debugged && other ? -1 : 0));
	workload(c, debugged ? -1 : (int)mode);
	check_mode(c);
	destroy_silently(c);

	/* the tunable from the start */
	c = mk("tot_tuned");
	CHECK(uslab_cache_tune_set(c, "cpu_mode", mode) == (debugged && mode ? -1 : 0));
	check_mode(c);
	workload(c, -1);
	destroy_silently(c);
}

/* ---- the malloc family's classes -------------------------------------------------- */

#define NCLASS 3
static const size_t class_sizes[NCLASS] = { 24, 200, 3000 };
#define NM SCALE(2000, 600)

struct mclass {
	struct uslab_cache *c;
	struct uslab_cache_info base;   /* before */
	struct ledger l;
};
static struct mclass mc[NCLASS];

static int class_of(size_t size)
{
	for (int i = 0; i < NCLASS; i++)
		if (kmalloc_caches[kmalloc_index(size)] == mc[i].c)
			return i;
	CHECKF(0, "size %zu is in none of the classes", size);
	return -1;
}

static void *m_alloc(size_t size, bool zero)
{
	void *p = zero ? uslab_calloc(1, size) : uslab_malloc(size);
	CHECK(p != NULL);
	memset(p, 0x33, size);
	got(&mc[class_of(size)].l, 1);
	return p;
}

static void m_free(void *p, size_t size, bool sized)
{
	if (sized)
		uslab_free_sized(p, size);
	else
		uslab_free(p);
	gave(&mc[class_of(size)].l, 1);
}

static void check_classes(const char *when)
{
	for (int i = 0; i < NCLASS; i++) {
		struct uslab_cache_info info;
		cache_info(mc[i].c, &info);
		const struct uslab_cache_info *b = &mc[i].base;
		uint64_t al = atomic_load(&mc[i].l.allocs), fr = atomic_load(&mc[i].l.frees);
		printf("    %-13s %-24s allocs %6" PRIu64 " (fast %6" PRIu64 ")  frees %6" PRIu64 " (fast %6" PRIu64 ")\n",
		       info.name, when, info.allocs - b->allocs, info.allocs_fast - b->allocs_fast,
		       info.frees - b->frees, info.frees_fast - b->frees_fast);
		CHECKF(info.allocs - b->allocs == al, "%s, %s: %" PRIu64 " allocations counted, the program made %" PRIu64,
		       info.name, when, info.allocs - b->allocs, al);
		CHECKF(info.frees - b->frees == fr, "%s, %s: %" PRIu64 " frees counted, the program made %" PRIu64,
		       info.name, when, info.frees - b->frees, fr);
		CHECK_EQ(info.active_objects - b->active_objects, al - fr);
		CHECK_EQ(info.allocs - info.frees, info.active_objects);
		CHECK(info.allocs_fast - b->allocs_fast <= info.allocs - b->allocs);
		CHECK(info.frees_fast - b->frees_fast <= info.frees - b->frees);
	}
}

struct mwork {
	void **p;
	size_t n, size;
};

static void *thread_mfree(void *arg)
{
	struct mwork *w = arg;
	for (size_t i = 0; i < w->n; i++)
		m_free(w->p[i], w->size, i % 2);
	return NULL;
}

static void *thread_malloc(void *arg)
{
	struct mwork *w = arg;
	for (size_t i = 0; i < w->n; i++)
		w->p[i] = m_alloc(w->size, i % 3 == 0);
	return NULL;
}

static void malloc_classes(void)
{
	uslab_free(uslab_malloc(1));   /* the classes exist from here */
	for (int i = 0; i < NCLASS; i++) {
		mc[i].c = kmalloc_caches[kmalloc_index(class_sizes[i])];
		CHECK(mc[i].c != NULL);
		for (int j = 0; j < i; j++)
			CHECK(mc[j].c != mc[i].c);
		check_mode(mc[i].c);
		cache_info(mc[i].c, &mc[i].base);
	}
	static void *p[NCLASS][NM];
	/* single allocations (every third zeroed by calloc): many slabs */
	for (int k = 0; k < NCLASS; k++)
		for (size_t i = 0; i < NM; i++)
			p[k][i] = m_alloc(class_sizes[k], i % 3 == 0);
	check_classes("malloc, calloc");

	/* realloc within the usable size keeps the block: nothing counted */
	for (size_t i = 0; i < NM; i += 10)
		CHECK(uslab_realloc(p[0][i], class_sizes[0] - 4) == p[0][i]);
	/* realloc to another class: an allocation there, a free here */
	for (int k = 0; k + 1 < NCLASS; k++)
		for (size_t i = 5; i < NM; i += 10) {
			void *q = uslab_realloc(p[k][i], class_sizes[k + 1]);
			CHECK(q != NULL && q != p[k][i]);
			gave(&mc[k].l, 1);
			got(&mc[k + 1].l, 1);
			/* it lives on as a block of the next class: free it now */
			m_free(q, class_sizes[k + 1], false);
			p[k][i] = m_alloc(class_sizes[k], false);
		}
	check_classes("realloc");

	/* another thread frees half of every class (free and free_sized) */
	static void *half[NCLASS][NM / 2];
	for (int k = 0; k < NCLASS; k++) {
		for (size_t i = 0; i < NM / 2; i++) {
			half[k][i] = p[k][2 * i];
			p[k][2 * i] = NULL;
		}
		struct mwork w = { half[k], NM / 2, class_sizes[k] };
		pthread_t t;
		CHECK(pthread_create(&t, NULL, thread_mfree, &w) == 0);
		CHECK(pthread_join(t, NULL) == 0);
	}
	check_classes("remote frees");

	/* another thread allocates and exits; freed here */
	for (int k = 0; k < NCLASS; k++) {
		struct mwork w = { half[k], NM / 2, class_sizes[k] };
		pthread_t t;
		CHECK(pthread_create(&t, NULL, thread_malloc, &w) == 0);
		CHECK(pthread_join(t, NULL) == 0);
	}
	check_classes("a gone thread's blocks");
	for (int k = 0; k < NCLASS; k++) {
		for (size_t i = 0; i < NM / 2; i++)
			m_free(half[k][i], class_sizes[k], i % 2);
		for (size_t i = 0; i < NM; i++)
			if (p[k][i])
				m_free(p[k][i], class_sizes[k], i % 3 == 1);
	}
	check_classes("end");
	uslab_malloc_trim(0);
	check_classes("malloc_trim");
}

/* ---- a failed all-or-nothing bulk allocation ------------------------------------ */

#define BIG (512 * 1024)   /* one object per 512 KiB slab: 7 per 4 MiB segment */
#define NR_BIG 48          /* about 7 segments: most rounds take some objects, then fail */

/* Objects a failed alloc_bulk took and gave back were never the
 * program's: the totals must not count them as allocated and freed (they
 * did in classic, home and slqb modes). The ledger counts only what the
 * program got and gave back; ALLOC_FAILED counts the failures. */
static void failed_bulk(void)
{
	struct uslab_cache *c = uslab_cache_create("tot_bulkfail", BIG, 0, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	struct ledger l = { 0 };
	void *objs[NR_BIG];
	void *warm = uslab_cache_alloc(c);   /* the CPU part exists before faults start */
	CHECK(warm != NULL);
	got(&l, 1);
	uslab_cache_free(c, warm);
	gave(&l, 1);
	struct uslab_cache_info before;
	cache_info(c, &before);
	uint64_t failures = 0;
	for (unsigned long nth = 1; nth <= 8; nth++) {
		os_fault_set(OS_FAULT_FROM, nth);
		errno = 0;
		size_t n = uslab_cache_alloc_bulk(c, NR_BIG, objs);
		int e = errno;
		os_fault_set(OS_FAULT_OFF, 0);
		if (n) {
			CHECK_EQ(n, NR_BIG);
			got(&l, n);
			uslab_cache_free_bulk(c, n, objs);
			gave(&l, n);
		} else {
			CHECKF(e == ENOMEM, "nth %lu: errno %d", nth, e);
			failures++;
		}
		char when[48];
		snprintf(when, sizeof when, "alloc_bulk %s (nth %lu)", n ? "succeeded" : "failed", nth);
		check_totals(c, &l, 0, when);
		uslab_cache_shrink(c);   /* every slab back: the next round maps again */
	}
	CHECKF(failures > 0, "no round failed: the fault never hit alloc_bulk");
	struct uslab_cache_info after;
	cache_info(c, &after);
	CHECK_EQ(after.events[USLAB_STAT_ALLOC_FAILED] - before.events[USLAB_STAT_ALLOC_FAILED], failures);
	printf("    %" PRIu64 " of 8 rounds failed\n", failures);
	uslab_cache_destroy(c);
}

int main(int argc, char **argv)
{
	check_init("test_totals");
	static const char *const names[] = { "classic", "sheaves", "home", "slqb", "slab" };
	mode_name = argc > 1 ? argv[1] : "";
	for (mode = 0; mode < NMODES && strcmp(mode_name, names[mode]); mode++)
		;
	if (mode == NMODES) {
		fprintf(stderr, "usage: test_totals classic|sheaves|home|slqb|slab (with USLAB_OPTIONS=slub_cpu_mode=MODE)\n");
		return 2;
	}
	const char *o = getenv("USLAB_OPTIONS");
	printf("  mode %s, USLAB_OPTIONS=%s\n", mode_name, o ? o : "(unset)");
	char want[32];
	snprintf(want, sizeof want, "slub_cpu_mode=%s", mode_name);
	CHECKF(o && strstr(o, want), "run with USLAB_OPTIONS=%s (CTest's test_totals_%s does)", want, mode_name);
	RUN(object_caches);
	RUN(malloc_classes);
	RUN(failed_bulk);
	return 0;
}
