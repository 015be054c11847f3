/*
 * Slab mode (cpu_mode "slab", src/cpu/array.c): the kernel's SLAB on
 * uslab's pages. Every cache here is put in slab mode before its first
 * allocation, whatever mode the process runs its other caches in, so that
 * this test checks slab mode in every test variant (debug caches have no
 * per-CPU layer: each sub-test says so and returns).
 *
 *   defaults         cpu_mode, limit/batchcount/sharedfactor by object size
 *                    (the kernel's enable_cpucache()), the tunables' rules
 *                    (EINVAL), /proc/slabinfo's tunables columns
 *   pattern_intact   free objects are filled with a pattern; every object
 *                    allocated again still holds it but for one word, the
 *                    double-free mark (written by the free, cleared by the
 *                    allocation): no allocation or free (array, shared
 *                    array, slab lists, bulk, flushes) wrote anything else
 *                    into a free object
 *   colouring        the first objects of consecutive slabs sit at
 *                    different cache-line offsets; frees of coloured
 *                    objects pass the fast path's boundary check
 *   double_free      in a thread's array (its last frees) and in its slab
 *                    (the index list's bitmap): fatal reports
 *   reap             an array no allocation touched for the reap interval
 *                    gives part of its objects back (REAP); the interval
 *                    passes on the policy clock (os.h), held and moved by
 *                    the test: no sleep, and no verdict that depends on
 *                    how the machine schedules it
 *   mode_changes     slab <-> other modes with objects of both layouts
 *                    live and freed by threads in either mode
 *   stress           threads allocate, hand objects to each other, free in
 *                    bulk, while a tuner changes limit, batchcount and
 *                    sharedfactor and shrinks (run under TSan in CI)
 *   fork             a fork while another thread holds objects in its
 *                    array: the child settles it and uses the cache
 *   contention       sh6bench's pattern on one cache from 4 threads: runs
 *                    of hundreds of allocations, freed in order and in
 *                    reverse, that overflow the arrays and the shared
 *                    array, so that the node lock and the shared array's
 *                    lock are contended (taken by spinning, then
 *                    sleeping: array.c), while a validator walks slab
 *                    mode's lists under the node lock; objects intact,
 *                    counts exact, the whole validate clean, and the CPU
 *                    count read at most once a second, not per batch freed
 *                    (run under TSan in CI)
 *   validate_index   uslab_cache_validate walks slab mode's lists: a
 *                    heap overflow from a slab's last object into the
 *                    index list and bitmap at the slab's end is reported
 *                    (out-of-range entries, bitmap count), and once the
 *                    bytes are put back the cache validates clean
 */
#include "check.h"
#include "cpu.h"    /* array_validate_locked() */
#include "os.h"     /* os_ncpus_reads() */
#include "slab.h"   /* struct uslab_cache: the free pointer's offset (the mark word) */
#include "kfence.h" /* kfence_owns(): sampling by time is on by default */
#include "os.h"     /* os_clock_hold(), os_clock_advance() */

#include <stdatomic.h>

/* A cache in slab mode; NULL (destroyed) for a debug cache. */
static struct uslab_cache *mk_slab(const char *name, size_t size, size_t align)
{
	struct uslab_cache *c = uslab_cache_create(name, size, align, USLAB_NO_MERGE, NULL);
	CHECK(c != NULL);
	struct uslab_cache_info in;
	cache_info(c, &in);
	if (cache_debugged(&in)) {
		CHECK(uslab_cache_tune_set(c, "cpu_mode", USLAB_CPU_SLAB) == -1 && errno == EINVAL);
		printf("    slub_debug: debug caches have no per-CPU layer (no slab mode)\n");
		destroy_silently(c);
		return NULL;
	}
	CHECK(uslab_cache_tune_set(c, "cpu_mode", USLAB_CPU_SLAB) == 0);
	cache_info(c, &in);
	CHECK_EQ(in.cpu_mode, USLAB_CPU_SLAB);
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
	CHECKF(uslab_cache_tune_set(c, name, v) == 0, "set %s=%lu: errno %d", name, v, errno);
}

static void tset_einval(struct uslab_cache *c, const char *name, unsigned long v)
{
	errno = 0;
	CHECKF(uslab_cache_tune_set(c, name, v) == -1 && errno == EINVAL, "set %s=%lu accepted", name, v);
}

/* ---- defaults, rules, slabinfo ------------------------------------------------ */

/* The tunables columns of cache `name` in /proc/slabinfo form. */
static void slabinfo_tunables(const char *name, unsigned *l, unsigned *b, unsigned *s)
{
	char *line = check_stats_text(USLAB_STATS_SLABINFO);
	while (line && *line) {
		char *nl = strchr(line, '\n');
		size_t nlen = strlen(name);
		if (!strncmp(line, name, nlen) && line[nlen] == ' ') {
			char *p = strstr(line, ": tunables");
			CHECK(p != NULL);
			CHECK(sscanf(p, ": tunables %u %u %u", l, b, s) == 3);
			return;
		}
		line = nl ? nl + 1 : NULL;
	}
	CHECKF(0, "cache %s not in slabinfo", name);
}

static void defaults(void)
{
	static const size_t sizes[] = { 64, 256, 512, 1024, 2048, 4096, 8192, 200000 };
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		char name[32];
		snprintf(name, sizeof name, "slabmode-def-%zu", sizes[i]);
		struct uslab_cache *c = mk_slab(name, sizes[i], 0);
		if (!c)
			return;
		/* enable_cpucache() goes by the stride (a tracked build's is the
		 * size and a free pointer) */
		struct uslab_cache_info in;
		cache_info(c, &in);
		size_t st = in.slab_object_size;
		unsigned want = st > 131072 ? 1 : st > 4096 ? 8 : st > 1024 ? 24 : st > 256 ? 54 : 120;
		CHECK_EQ(tget(c, "limit"), want);
		CHECK_EQ(tget(c, "batchcount"), (want + 1) / 2);
		CHECK_EQ(tget(c, "sharedfactor"), st <= 4096 && ncpu > 1 ? 8 : 0);
		void *p = uslab_cache_alloc(c);
		CHECK(p != NULL);
		memset(p, 0xab, sizes[i]);
		unsigned l, b, s;
		slabinfo_tunables(name, &l, &b, &s);
		CHECK_EQ(l, want);
		CHECK_EQ(b, (want + 1) / 2);
		CHECK_EQ(s, tget(c, "sharedfactor"));
		uslab_cache_free(c, p);
		CHECK_EQ(uslab_cache_validate(c), 0);
		CHECK_EQ(uslab_cache_shrink(c), 0);
		uslab_cache_destroy(c);
	}
	/* the rules: limit 1..508, batchcount 1..limit, sharedfactor 0..1024 */
	struct uslab_cache *c = mk_slab("slabmode-rules", 128, 0);
	tset_einval(c, "limit", 0);
	tset_einval(c, "limit", 509);
	tset_einval(c, "batchcount", 0);
	tset_einval(c, "batchcount", tget(c, "limit") + 1);
	tset_einval(c, "sharedfactor", 1025);
	tset(c, "limit", 200);
	tset(c, "batchcount", 200);
	tset(c, "sharedfactor", 0);
	tset(c, "limit", 31);   /* below the batchcount: it follows, as enable_cpucache() sets it */
	CHECK_EQ(tget(c, "batchcount"), 16);
	unsigned l, b, s;
	slabinfo_tunables("slabmode-rules", &l, &b, &s);
	CHECK(l == 31 && b == 16 && s == 0);
	/* another mode's cache shows none, as SLUB's */
	CHECK(uslab_cache_tune_set(c, "cpu_mode", USLAB_CPU_SHEAVES) == 0);
	slabinfo_tunables("slabmode-rules", &l, &b, &s);
	CHECK(l == 0 && b == 0 && s == 0);
	tset_einval(c, "cpu_mode", USLAB_CPU_SLAB + 1);
	uslab_cache_destroy(c);
}

/* ---- no write into free objects --------------------------------------------------- */

/* An open-addressing set of object addresses. */
#define SET_BITS 16
static uintptr_t set_slot[1 << SET_BITS];
static size_t set_pos(uintptr_t p)
{
	size_t h = (size_t)((p * 0x9e3779b97f4a7c15ULL) >> (64 - SET_BITS));
	while (set_slot[h] && set_slot[h] != p)
		h = (h + 1) & ((1 << SET_BITS) - 1);
	return h;
}
static void set_add(void *p)
{
	set_slot[set_pos((uintptr_t)p)] = (uintptr_t)p;
}
static bool set_has(void *p)
{
	return set_slot[set_pos((uintptr_t)p)] == (uintptr_t)p;
}
static void set_del(void *p)
{
	/* backward-shift deletion keeps probe chains whole */
	size_t h = set_pos((uintptr_t)p);
	if (!set_slot[h])
		return;
	set_slot[h] = 0;
	for (size_t j = (h + 1) & ((1 << SET_BITS) - 1); set_slot[j]; j = (j + 1) & ((1 << SET_BITS) - 1)) {
		uintptr_t q = set_slot[j];
		set_slot[j] = 0;
		set_slot[set_pos(q)] = q;
	}
}

#define PAT_SIZE 64
static void pattern_fill(void *p)
{
	uint64_t *w = p;
	for (unsigned i = 0; i < PAT_SIZE / 8; i++)
		w[i] = (uintptr_t)p * 31 + i * 0x0101010101010101ULL + 0x5a5a;
}
static unsigned pat_mark;   /* the mark word's index (the cache's free-pointer offset / 8) */
static void pattern_check(void *p)
{
	uint64_t *w = p;
	for (unsigned i = 0; i < PAT_SIZE / 8; i++)
		CHECKF(i == pat_mark || w[i] == (uintptr_t)p * 31 + i * 0x0101010101010101ULL + 0x5a5a,
		       "free object %p written while free (word %u: %#llx)", p, i, (unsigned long long)w[i]);
}

static unsigned long pat_checked;
static void got_object(void *p)
{
	if (set_has(p)) {   /* freed by us with its pattern: intact? */
		pattern_check(p);
		pat_checked++;
		set_del(p);
	}
	memset(p, 0x11, PAT_SIZE);   /* the program's now */
}
/* A slab given back to the page allocator takes its free objects with it:
 * a later slab on the same pages has new objects, whatever they hold. So
 * the set forgets everything whenever a slab went back (FREE_SLAB). */
static uint64_t pat_slabs_freed;
static void forget_if_slabs_freed(struct uslab_cache *c)
{
	struct uslab_cache_info in;
	cache_info(c, &in);
	if (in.events[USLAB_STAT_FREE_SLAB] != pat_slabs_freed) {
		pat_slabs_freed = in.events[USLAB_STAT_FREE_SLAB];
		memset(set_slot, 0, sizeof set_slot);
	}
}

static void put_object(struct uslab_cache *c, void *p)
{
	pattern_fill(p);   /* (after this, only the allocator has the pointer) */
	set_add(p);
	uslab_cache_free(c, p);
	forget_if_slabs_freed(c);
}

static void pattern_intact(void)
{
	memset(set_slot, 0, sizeof set_slot);
	struct uslab_cache *c = mk_slab("slabmode-pattern", PAT_SIZE, 0);
	if (!c)
		return;
	pat_mark = c->offset / 8;
	CHECK(c->offset % 8 == 0 && pat_mark < PAT_SIZE / 8);
	pat_slabs_freed = 0;
	unsigned long checked = 0;
	tset(c, "limit", 32);   /* small arrays: batches move often */
	tset(c, "batchcount", 8);
	tset(c, "sharedfactor", 2);
	enum { HOLD = 3000 };
	void **held = calloc(HOLD, sizeof *held);
	CHECK(held != NULL);
	uint64_t seed = 12345;
	unsigned rounds = SCALE(400000, 60000);
	for (unsigned r = 0; r < rounds; r++) {
		unsigned k = (unsigned)(rnd_next(&seed) % HOLD);
		if (held[k]) {
			put_object(c, held[k]);
			held[k] = NULL;
		} else {
			held[k] = uslab_cache_alloc(c);
			CHECK(held[k] != NULL);
			got_object(held[k]);
		}
		if (r % 20000 == 19999) {   /* bulk both ways, then a shrink flushes the array and the shared array */
			void *b[100];
			CHECK_EQ(uslab_cache_alloc_bulk(c, 100, b), 100);
			for (int i = 0; i < 100; i++)
				got_object(b[i]);
			for (int i = 0; i < 100; i++) {
				pattern_fill(b[i]);
				set_add(b[i]);
			}
			uslab_cache_free_bulk(c, 100, b);
			forget_if_slabs_freed(c);
			if (r % 100000 == 99999) {
				uslab_cache_shrink(c);   /* flushes the array and the shared array through free_block */
				forget_if_slabs_freed(c);
			}
		}
	}
	for (unsigned k = 0; k < HOLD; k++)
		if (held[k])
			put_object(c, held[k]);
	/* once more through every free object still in the cache */
	void **all = calloc(HOLD * 2, sizeof *all);
	CHECK(all != NULL);
	for (unsigned k = 0; k < HOLD * 2; k++) {
		all[k] = uslab_cache_alloc(c);
		CHECK(all[k] != NULL);
		got_object(all[k]);
	}
	for (unsigned k = 0; k < HOLD * 2; k++)
		uslab_cache_free(c, all[k]);
	free(all);
	free(held);
	checked = pat_checked;
	printf("    %lu objects handed out again with their pattern intact\n", checked);
	CHECK(checked > 1000);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_shrink(c), 0);
	uslab_cache_destroy(c);
}


/* ---- colouring ----------------------------------------------------------------------- */

static int cmp_uptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
	return x < y ? -1 : x > y;
}

static void colouring(void)
{
	/* An object size whose slab of one 64 KiB slot (order 4) leaves room
	 * for 3 colours after its objects and index list, which go off the
	 * slab (objects of 128 bytes and more) when the waste cannot hold them
	 * (1000 bytes: 65 objects, 536 bytes left, 8 colours; a tracked
	 * build's stride is longer, so the size is searched) */
	struct uslab_cache *c = NULL;
	struct uslab_cache_info in;
	for (size_t size = 1000; size >= 200 && !c; size -= 8) {
		c = mk_slab("slabmode-colour", size, 0);
		if (!c)
			return;
		tset(c, "order", 4);
		cache_info(c, &in);
		size_t st = in.slab_object_size, num = 65536 / st, left = 65536 - num * st;
		size_t mgmt = num + (num + 15) / 16 * 2;
		size_t room = st >= 128 && left < mgmt ? left : left >= mgmt ? left - mgmt : 0;
		if (room < 3 * 64) {
			uslab_cache_destroy(c);
			c = NULL;
		}
	}
	CHECK(c != NULL);
	size_t slab_bytes = (size_t)4096 << in.order, per = in.objects_per_slab;
	CHECK(per >= 1);
	enum { SLABS = 12 };
	size_t n = per * SLABS;
	void **p = calloc(n, sizeof *p);
	CHECK(p != NULL);
	for (size_t i = 0; i < n; i++) {
		p[i] = uslab_cache_alloc(c);
		CHECK(p[i] != NULL);
		memset(p[i], 0x44, in.object_size);
	}
	/* each slab's colour: every object's offset in it, modulo the stride
	 * (a KFENCE sample, which the default sampling by time may take, lies
	 * in its pool, in no slab: left out) */
	uintptr_t *base = calloc(n, sizeof *base);
	CHECK(base != NULL);
	size_t nb = 0;
	for (size_t i = 0; i < n; i++)
		if (!kfence_owns(p[i]))
			base[nb++] = (uintptr_t)p[i] & ~(uintptr_t)(slab_bytes - 1);
	qsort(base, nb, sizeof *base, cmp_uptr);
	unsigned seen = 0, slabs = 0;
	for (size_t i = 0; i < nb; i++) {
		if (i && base[i] == base[i - 1])
			continue;
		slabs++;
		size_t colour = SIZE_MAX;
		for (size_t j = 0; j < n; j++) {
			if (kfence_owns(p[j]) || ((uintptr_t)p[j] & ~(uintptr_t)(slab_bytes - 1)) != base[i])
				continue;
			size_t off = ((uintptr_t)p[j] - base[i]) % in.slab_object_size;
			CHECKF(colour == SIZE_MAX || colour == off, "objects of one slab at two colours: %zu, %zu", colour,
			       off);
			colour = off;
		}
		CHECKF(colour % 64 == 0 && colour + per * in.slab_object_size <= slab_bytes, "colour %zu", colour);
		seen |= 1U << (colour / 64);
	}
	unsigned distinct = (unsigned)__builtin_popcount(seen);
	printf("    %u slabs of %zu objects: first objects at %u different cache-line offsets (mask %#x)\n", slabs,
	       per, distinct, seen);
	CHECK(slabs >= SLABS);
	CHECKF(distinct >= 3, "colours mask %#x", seen);
	/* frees of coloured objects: the fast path's boundary check, the bulk path */
	for (size_t i = 0; i < n / 2; i++)
		uslab_cache_free(c, p[i]);
	uslab_cache_free_bulk(c, n - n / 2, p + n / 2);
	CHECK_EQ(uslab_cache_validate(c), 0);
	CHECK_EQ(uslab_cache_shrink(c), 0);
	free(base);
	free(p);
	uslab_cache_destroy(c);
}

/* ---- double frees ------------------------------------------------------------------ */

static void df_array(void *arg)
{
	struct uslab_cache *c = arg;
	void *p = uslab_cache_alloc(c);
	uslab_cache_free(c, p);
	uslab_cache_free(c, p);
}

static void df_slab(void *arg)
{
	struct uslab_cache *c = arg;
	void *p = uslab_cache_alloc(c);
	void *q[600];
	for (int i = 0; i < 600; i++)
		q[i] = uslab_cache_alloc(c);
	uslab_cache_free(c, p);
	for (int i = 10; i < 600; i++)   /* p leaves the array: back in its slab (which q[0..9] keep) */
		uslab_cache_free(c, q[i]);
	uslab_cache_shrink(c);
	uslab_cache_free(c, p);   /* into the array: caught when the array gives it to its slab */
	uslab_cache_shrink(c);
}

static void double_free(void)
{
	struct uslab_cache *c = mk_slab("slabmode-df", 96, 0);
	if (!c)
		return;
	tset(c, "sharedfactor", 0);
	CHECK_DEATH("double free in the array", df_array, c, "uslab: fatal:", "double free", "slabmode-df");
	CHECK_DEATH("double free in the slab", df_slab, c, "uslab: fatal:", "double free", "slabmode-df");
	uslab_cache_destroy(c);
}

/* ---- reap ------------------------------------------------------------------------------- */

static void reap(void)
{
	os_clock_hold(true);   /* before the cache's first reap deadline is set */
	struct uslab_cache *c = mk_slab("slabmode-reap", 128, 0);
	if (!c) {
		os_clock_hold(false);
		return;
	}
	tset(c, "limit", 100);
	tset(c, "batchcount", 10);
	tset(c, "sharedfactor", 0);
	enum { N = 600 };
	void **p = calloc(N, sizeof *p);
	CHECK(p != NULL);
	for (int i = 0; i < N; i++)
		CHECK((p[i] = uslab_cache_alloc(c)) != NULL);
	int next = 0;
	for (; next < 150; next++)   /* the array fills */
		uslab_cache_free(c, p[next]);
	struct uslab_cache_info a, b;
	cache_info(c, &a);
	/* Two reap intervals with frees only: the first look finds the array
	 * touched by the allocations above (and clears that, as the kernel's
	 * cache_reap), the second finds it untouched and drains a fifth of
	 * its limit. Each round frees more than the array holds, so that a
	 * free takes the slow path, where the owner reaps. The interval
	 * (REAP_CPU_MS, 2 s) passes on the held clock: exactly as much time
	 * as the rounds say, however slowly they run. */
	for (int round = 0; round < 2; round++) {
		os_clock_advance(2150);
		for (int k = 0; k < 120 && next < N; k++)
			uslab_cache_free(c, p[next++]);
	}
	cache_info(c, &b);
	printf("    array %llu objects before; REAP %llu objects\n", (unsigned long long)a.sheaf_objects,
	       (unsigned long long)b.events[USLAB_STAT_REAP]);
	CHECK(b.events[USLAB_STAT_REAP] >= 1);
	while (next < N)
		uslab_cache_free(c, p[next++]);
	free(p);
	CHECK_EQ(uslab_cache_shrink(c), 0);
	uslab_cache_destroy(c);
	os_clock_hold(false);
}

/* ---- mode changes -------------------------------------------------------------------- */

static struct uslab_cache *mc_cache;
static _Atomic(void *) mc_box[1024];
static _Atomic int mc_stop;

static void *mc_worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg;
	void *mine[64] = { 0 };
	while (!atomic_load(&mc_stop)) {
		uint64_t r = rnd_next(&seed);
		unsigned k = (unsigned)(r % 64);
		if (mine[k]) {
			void *p = mine[k];
			mine[k] = NULL;
			CHECK(*(uint64_t *)p == (uintptr_t)p);
			/* half go to another thread through the box */
			if (r & 64)
				p = atomic_exchange(&mc_box[(r >> 8) % 1024], p);
			if (p) {
				CHECK(*(uint64_t *)p == (uintptr_t)p);
				*(uint64_t *)p = 0;
				uslab_cache_free(mc_cache, p);
			}
		} else {
			void *p = uslab_cache_alloc(mc_cache);
			CHECK(p != NULL);
			*(uint64_t *)p = (uintptr_t)p;
			mine[k] = p;
		}
		if ((r >> 20) % 512 == 0) {
			void *b[40];
			CHECK_EQ(uslab_cache_alloc_bulk(mc_cache, 40, b), 40);
			uslab_cache_free_bulk(mc_cache, 40, b);
		}
	}
	for (int k = 0; k < 64; k++)
		if (mine[k]) {
			*(uint64_t *)mine[k] = 0;
			uslab_cache_free(mc_cache, mine[k]);
		}
	return NULL;
}

static void mode_changes(void)
{
	mc_cache = mk_slab("slabmode-modes", 128, 0);
	if (!mc_cache)
		return;
	atomic_store(&mc_stop, 0);
	pthread_t t[3];
	for (uintptr_t i = 0; i < 3; i++)
		CHECK(pthread_create(&t[i], NULL, mc_worker, (void *)(i + 71)) == 0);
	static const unsigned modes[] = { USLAB_CPU_SLAB, USLAB_CPU_HOME,  USLAB_CPU_SLAB, USLAB_CPU_CLASSIC,
					  USLAB_CPU_SLAB, USLAB_CPU_SHEAVES, USLAB_CPU_SLAB, USLAB_CPU_SLQB };
	int changes = SCALE(800, 120);
	for (int i = 0; i < changes; i++) {
		CHECK(uslab_cache_tune_set(mc_cache, "cpu_mode", modes[i % 8]) == 0);
		struct timespec ts = { 0, 500000 };
		nanosleep(&ts, NULL);
	}
	CHECK(uslab_cache_tune_set(mc_cache, "cpu_mode", USLAB_CPU_SLAB) == 0);
	atomic_store(&mc_stop, 1);
	for (int i = 0; i < 3; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	for (int i = 0; i < 1024; i++) {
		void *p = atomic_exchange(&mc_box[i], NULL);
		if (p) {
			CHECK(*(uint64_t *)p == (uintptr_t)p);
			uslab_cache_free(mc_cache, p);
		}
	}
	struct uslab_cache_info in;
	cache_info(mc_cache, &in);
	CHECK_EQ(in.active_objects, 0);
	CHECK_EQ(uslab_cache_validate(mc_cache), 0);
	CHECK_EQ(uslab_cache_shrink(mc_cache), 0);
	printf("    %d mode changes, slabs of both layouts freed by threads in either mode\n", changes);
	uslab_cache_destroy(mc_cache);
}

/* ---- stress (TSan) --------------------------------------------------------------------- */

#define ST_THREADS 4
static struct uslab_cache *st_cache[2];
static _Atomic(void *) st_box[512];
static _Atomic int st_stop;
static _Atomic unsigned long st_ops;

static void *st_worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg * 7919;
	void *mine[128] = { 0 };
	while (!atomic_load(&st_stop)) {
		uint64_t r = rnd_next(&seed);
		struct uslab_cache *c = st_cache[r & 1];
		unsigned k = (unsigned)((r >> 1) % 128);
		if (mine[k]) {
			void *p = mine[k];
			mine[k] = NULL;
			if ((r >> 10) & 1)
				p = atomic_exchange(&st_box[(r >> 12) % 512], p);   /* a remote free */
			if (p) {
				struct uslab_cache *o = ((uint64_t *)p)[1] ? st_cache[1] : st_cache[0];
				CHECK(((uint64_t *)p)[0] == (uintptr_t)p);
				((uint64_t *)p)[0] = 0;
				uslab_cache_free(o, p);
			}
		} else {
			void *p = uslab_cache_alloc(c);
			CHECK(p != NULL);
			((uint64_t *)p)[0] = (uintptr_t)p;
			((uint64_t *)p)[1] = c == st_cache[1];
			mine[k] = p;
		}
		if ((r >> 24) % 256 == 0) {
			void *b[70];
			CHECK_EQ(uslab_cache_alloc_bulk(c, 70, b), 70);
			uslab_cache_free_bulk(c, 70, b);
		}
		atomic_fetch_add_explicit(&st_ops, 1, memory_order_relaxed);
	}
	for (int k = 0; k < 128; k++)
		if (mine[k]) {
			struct uslab_cache *o = ((uint64_t *)mine[k])[1] ? st_cache[1] : st_cache[0];
			((uint64_t *)mine[k])[0] = 0;
			uslab_cache_free(o, mine[k]);
		}
	return NULL;
}

static void stress(void)
{
	st_cache[0] = mk_slab("slabmode-stress-a", 48, 0);
	if (!st_cache[0])
		return;
	st_cache[1] = mk_slab("slabmode-stress-b", 700, 0);
	atomic_store(&st_stop, 0);
	atomic_store(&st_ops, 0);
	pthread_t t[ST_THREADS];
	for (uintptr_t i = 0; i < ST_THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, st_worker, (void *)(i + 1)) == 0);
	uint64_t seed = 99;
	double end = check_now() + SCALE(3.0, 6.0);
	unsigned tunes = 0;
	while (check_now() < end) {
		uint64_t r = rnd_next(&seed);
		struct uslab_cache *c = st_cache[r & 1];
		unsigned long lim = 1 + (r >> 8) % 200;
		tset(c, "limit", lim);
		tset(c, "batchcount", 1 + (r >> 16) % lim);
		tset(c, "sharedfactor", (r >> 24) % 10);
		if ((r >> 32) % 8 == 0)
			uslab_cache_shrink(c);
		if ((r >> 36) % 16 == 0) {
			struct uslab_cache_info in;
			cache_info(c, &in);
		}
		tunes++;
		struct timespec ts = { 0, 2000000 };
		nanosleep(&ts, NULL);
	}
	atomic_store(&st_stop, 1);
	for (int i = 0; i < ST_THREADS; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	for (int i = 0; i < 512; i++) {
		void *p = atomic_exchange(&st_box[i], NULL);
		if (p)
			uslab_cache_free(((uint64_t *)p)[1] ? st_cache[1] : st_cache[0], p);
	}
	printf("    %lu operations by %d threads, %u tunings\n", atomic_load(&st_ops), ST_THREADS, tunes);
	for (int i = 0; i < 2; i++) {
		CHECK_EQ(cache_active(st_cache[i]), 0);
		CHECK_EQ(uslab_cache_validate(st_cache[i]), 0);
		CHECK_EQ(uslab_cache_shrink(st_cache[i]), 0);
		uslab_cache_destroy(st_cache[i]);
	}
}

/* ---- contention on the node lock (TSan) --------------------------------------------------- */

#define CT_THREADS 4
#define CT_RUN 600
static struct uslab_cache *ct_cache;
static _Atomic int ct_stop;
static _Atomic unsigned long ct_objs;

static void *ct_worker(void *arg)
{
	uint64_t id = (uintptr_t)arg;
	void *run[CT_RUN];
	for (unsigned r = 0; !atomic_load(&ct_stop); r++) {
		for (unsigned i = 0; i < CT_RUN; i++) {
			uint64_t *p = uslab_cache_alloc(ct_cache);
			CHECK(p != NULL);
			p[0] = (uintptr_t)p ^ id;
			p[2] = i;
			run[i] = p;
		}
		for (unsigned k = 0; k < CT_RUN; k++) {
			unsigned i = r & 1 ? CT_RUN - 1 - k : k;   /* in order, then in reverse */
			uint64_t *p = run[i];
			CHECK(p[0] == ((uintptr_t)p ^ id) && p[2] == i);
			uslab_cache_free(ct_cache, p);
		}
		atomic_fetch_add_explicit(&ct_objs, CT_RUN, memory_order_relaxed);
	}
	return NULL;
}

static void contention(void)
{
	/* small arrays and one shared batch: most batches go through the
	 * node lock */
	ct_cache = mk_slab("slabmode-contention", 24, 0);
	if (!ct_cache)
		return;
	tset(ct_cache, "limit", 16);
	tset(ct_cache, "batchcount", 8);
	tset(ct_cache, "sharedfactor", 1);
	atomic_store(&ct_stop, 0);
	atomic_store(&ct_objs, 0);
	uint64_t reads0 = os_ncpus_reads();
	double t0 = check_now();
	pthread_t t[CT_THREADS];
	for (uintptr_t i = 0; i < CT_THREADS; i++)
		CHECK(pthread_create(&t[i], NULL, ct_worker, (void *)(i + 1)) == 0);
	double end = t0 + SCALE(2.0, 4.0);
	unsigned validations = 0;
	while (check_now() < end) {
		/* slab mode's part of validate (its lists, index lists and
		 * bitmaps, under the node lock the workers take); the whole of
		 * uslab_cache_validate once they are quiet, below: its page walk
		 * reads a slab's cache field, which page_free clears outside the
		 * page lock (a race of the core's, reported, not slab mode's) */
		slab_node_lock(ct_cache, NULL);
		long bad = array_validate_locked(ct_cache);
		slab_node_unlock(ct_cache);
		CHECK_EQ(bad, 0);
		validations++;
		struct timespec ts = { 0, 20000000 };
		nanosleep(&ts, NULL);
	}
	atomic_store(&ct_stop, 1);
	for (int i = 0; i < CT_THREADS; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	double secs = check_now() - t0;
	uint64_t reads = os_ncpus_reads() - reads0;
	struct uslab_cache_info in;
	cache_info(ct_cache, &in);
	printf("    %lu objects through %d threads in %.1f s, %" PRIu64 " node-lock acquisitions, %u validations, "
	       "%" PRIu64 " reads of the CPU count\n",
	       atomic_load(&ct_objs), CT_THREADS, secs, in.events[USLAB_STAT_NODE_LOCK], validations, reads);
	CHECK(in.events[USLAB_STAT_NODE_LOCK] > 1000);   /* the lock was taken, often */
	/* sysconf(_SC_NPROCESSORS_ONLN) is three system calls: read once
	 * and then at most once a second (the node reap), never per batch */
	CHECKF(reads <= 2 + (uint64_t)secs, "the CPU count was read %" PRIu64 " times in %.1f s", reads, secs);
	CHECK_EQ(cache_active(ct_cache), 0);
	CHECK_EQ(uslab_cache_validate(ct_cache), 0);
	CHECK_EQ(uslab_cache_shrink(ct_cache), 0);
	uslab_cache_destroy(ct_cache);
}

/* ---- fork -------------------------------------------------------------------------------- */

static struct uslab_cache *fk_cache;
static pthread_barrier_t fk_bar;

static void *fk_thread(void *arg)
{
	(void)arg;
	void *p[50];
	for (int i = 0; i < 50; i++)
		p[i] = uslab_cache_alloc(fk_cache);
	for (int i = 0; i < 50; i++)   /* into this thread's array */
		uslab_cache_free(fk_cache, p[i]);
	pthread_barrier_wait(&fk_bar);   /* holding them: the fork happens */
	pthread_barrier_wait(&fk_bar);
	return NULL;
}

static void forked(void)
{
	fk_cache = mk_slab("slabmode-fork", 64, 0);
	if (!fk_cache)
		return;
	CHECK(pthread_barrier_init(&fk_bar, NULL, 2) == 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, fk_thread, NULL) == 0);
	pthread_barrier_wait(&fk_bar);
	fflush(NULL);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		/* the other thread's part is settled at this first slow path */
		void *q[500];
		for (int i = 0; i < 500; i++)
			if (!(q[i] = uslab_cache_alloc(fk_cache)))
				_exit(2);
		for (int i = 0; i < 500; i++)
			uslab_cache_free(fk_cache, q[i]);
		if (uslab_cache_validate(fk_cache) != 0 || cache_active(fk_cache) != 0)
			_exit(3);
		_exit(uslab_cache_shrink(fk_cache) == 0 ? 0 : 4);
	}
	int st;
	CHECK(waitpid(pid, &st, 0) == pid);
	CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	pthread_barrier_wait(&fk_bar);
	CHECK(pthread_join(t, NULL) == 0);
	pthread_barrier_destroy(&fk_bar);
	CHECK_EQ(uslab_cache_shrink(fk_cache), 0);
	uslab_cache_destroy(fk_cache);
}

/* ---- validate walks the index lists ---------------------------------------------- */

#define VI_SIZE 64   /* on-slab management: objects below 128 bytes */

static void validate_index(void)
{
	struct uslab_cache *c = mk_slab("sm_validate", VI_SIZE, 0);
	if (!c)
		return;
	struct uslab_cache_info in;
	cache_info(c, &in);
	const size_t slab_bytes = (size_t)4096 << in.order, per = in.objects_per_slab;
	CHECK(per > 8);
	/* three slabs' worth, all allocated: then find a slab all of whose
	 * objects this test holds */
	const size_t n = 3 * per;
	void **objs = calloc(n, sizeof *objs);
	CHECK(objs != NULL);
	for (size_t i = 0; i < n; i++)
		CHECK((objs[i] = uslab_cache_alloc(c)) != NULL);
	uintptr_t base = 0;
	size_t last = n, mine = 0;
	for (size_t i = 0; i < n && !base; i++) {
		uintptr_t b = (uintptr_t)objs[i] & ~(uintptr_t)(slab_bytes - 1);
		size_t cnt = 0, hi = i;
		for (size_t j = 0; j < n; j++)
			if (((uintptr_t)objs[j] & ~(uintptr_t)(slab_bytes - 1)) == b) {
				cnt++;
				if ((uintptr_t)objs[j] > (uintptr_t)objs[hi])
					hi = j;
			}
		if (cnt == per) {
			base = b;
			last = hi;
			mine = cnt;
		}
	}
	CHECKF(base, "no slab of %zu objects is wholly this thread's", per);
	/* half of that slab's other objects back to it (shrink flushes the
	 * arrays): its index list has free entries */
	size_t back = 0;
	for (size_t j = 0; j < n; j++)
		if (j != last && ((uintptr_t)objs[j] & ~(uintptr_t)(slab_bytes - 1)) == base && back < mine / 2) {
			uslab_cache_free(c, objs[j]);
			objs[j] = NULL;
			back++;
		}
	uslab_cache_shrink(c);
	CHECK_EQ(uslab_cache_validate(c), 0);
	/* the overflow: from the end of the slab's last object to the end of
	 * the slab, where its bitmap and index list are */
	char *from = (char *)objs[last] + VI_SIZE, *to = (char *)base + slab_bytes;
	CHECK(from < to);
	size_t len = (size_t)(to - from);
	char *saved = malloc(len);
	CHECK(saved != NULL);
	memcpy(saved, from, len);
	memset(from, 0xff, len);
	struct stderr_capture cap;
	static char text[1 << 14];
	stderr_capture_begin(&cap);
	long found = uslab_cache_validate(c);
	stderr_capture_end(&cap, text, sizeof text);
	memcpy(from, saved, len);   /* put back before anything else reads them */
	free(saved);
	printf("    %zu bytes overwritten past the last object of slab %p: %ld problems\n", len, (void *)base, found);
	CHECKF(found > 0, "validate found nothing in a corrupted index list");
	CHECK(strstr(text, "slab mode: index list entry out of range") != NULL);
	CHECK(strstr(text, "slab mode: bitmap bits set != objects out") != NULL);
	CHECK_EQ(uslab_cache_validate(c), 0);
	for (size_t j = 0; j < n; j++)
		if (objs[j])
			uslab_cache_free(c, objs[j]);
	free(objs);
	CHECK_EQ(uslab_cache_validate(c), 0);
	destroy_silently(c);
}

int main(void)
{
	check_init("test_slab_mode");
	RUN(defaults);
	RUN(pattern_intact);
	RUN(colouring);
	RUN(double_free);
	RUN(reap);
	RUN(mode_changes);
	RUN(stress);
	RUN(contention);
	RUN(forked);
	RUN(validate_index);
	return 0;
}
