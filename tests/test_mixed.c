/*
 * Mixed stress (issue 12, docs/testing.md rows 31-36): everything at once, for
 * a set time.
 *
 *   test_mixed            USLAB_STRESS_SECONDS (default 60 under a
 *                         sanitizer, 10 otherwise), CTest label "stress"
 *   test_mixed --soak     the same, for scripts/soak.sh: one "soak:" line
 *                         per quiet point (RSS, uslab's memory, live
 *                         objects), set USLAB_STRESS_SECONDS to the length
 *
 * What runs at the same time:
 *   workers   NW threads, each with a random life of operations: objects of
 *             seven caches (16 B .. 30000 B, a constructor cache, a
 *             HWCACHE_ALIGN cache, an aligned one and a pair the library
 *             merges: mx-pair-b becomes an alias of mx-pair-a), zalloc, and
 *             the malloc family (uslab_malloc, calloc, realloc,
 *             posix_memalign, aligned_alloc, memalign, realloc(p, 0) as a
 *             free; sizes 0 B .. 4 MiB, so small classes, large and huge
 *             blocks); objects handed to other threads through shared slots
 *             and freed there; alloc_bulk/free_bulk round trips, frees in a
 *             shuffled order, bulk frees of objects gathered from everywhere
 *             (with NULL entries); bursts that fill the sheaves; shrink and
 *             malloc_trim. A worker whose life is over gives some objects
 *             away, frees the rest, fills its sheaves once more and exits;
 *             the supervisor (main) starts a new one at once (thread churn:
 *             exiting threads leave full sheaves behind).
 *   tuner     sheaf_capacity (0 = classic mode included; debug caches refuse
 *             anything but 0 with EINVAL), barn_full, barn_empty,
 *             cpu_partial, min_partial and order of random caches, shrink,
 *             malloc_trim.
 *   exporter  uslab_export_refresh(), uslab_cache_get_info() of every
 *             cache, uslab_process_get_info(), uslab_stats_print() in its
 *             three forms, uslab_cache_validate() of a cache in use, and, as
 *             uslabinfo does through the export file, refresh requests
 *             (served by the workers' slow paths) and commands (shrink,
 *             validate, set) in its mailbox. USLAB_OPTIONS gets "export"
 *             (the test re-executes itself with it when missing).
 *
 * Every object is stamped when it is handed out (a tag and a descriptor in
 * its first 16 bytes, a byte pattern in the rest, up to 4 KiB and its last
 * 64 bytes) and checked before it is freed or resized: any difference is a
 * failure, as is any "uslab:" report (the library aborts).
 *
 * Quiet points (every USLAB_QUIET_SECONDS, default 3, 10 with --soak): the
 * supervisor stops starting threads and parks every thread; each worker
 * first gives back what its thread caches (shrink of every cache,
 * malloc_trim), so that the counts are exact also in classic mode. Then,
 * for every cache (a merged pair counted together), active_objects must
 * equal the program's own count of live objects (allocations less frees,
 * kept per thread), validate must find nothing, and the malloc family's
 * in_use_bytes must equal the usable bytes of the live blocks (huge blocks
 * by count; not under slub_debug, whose strides hold metadata).
 *
 * At the end, with every thread joined: everything freed, active_objects 0
 * for every cache, validate 0, shrink leaves no slab, malloc in_use_bytes 0,
 * destroy silent. One summary line: operations, threads started, tunable
 * changes, exports. The run lasts its set time, and longer (up to
 * CHECK_HANG_S) until it has seen a tunable changed, a worker replaced, a
 * quiet point and a cross-thread free: a loaded machine may not schedule
 * them in time, and the verdict must not depend on that.
 *
 * Also passes under USLAB_OPTIONS=slub_debug=FZPU (sheaf_capacity > 0 is
 * EINVAL there) and slub_sheaf_capacity=0.
 */
#include "check.h"
#include "export.h"

#include <stdatomic.h>
#include <sys/mman.h>

/* ---- parameters ------------------------------------------------------------------ */

#define NW SCALE(6, 4)          /* workers alive at a time */
#define NSLOTS 1024             /* shared hand-over slots */
#define LOCAL 384               /* objects a worker holds */
#define LOCAL_BYTES ((size_t)SCALE(24, 12) * MiB)
#define SLOT_MAX_SIZE (64 * 1024)   /* larger objects are never put in a slot */
#define HUGE_MIN (2UL * MiB)        /* usable sizes above this are huge blocks */

/* ---- caches ------------------------------------------------------------------------ */

#define CTOR_BYTE 0xc7
#define CTOR_SIZE 96
static void ctor96(void *p)
{
	memset(p, CTOR_BYTE, CTOR_SIZE);
}

struct mcache {
	const char *name;
	size_t size, align;
	unsigned long flags;
	void (*ctor)(void *);
	unsigned weight;        /* how often it is picked */
	struct uslab_cache *c;
	size_t eff_align;       /* the alignment objects must have */
	unsigned group;         /* index of the cache whose numbers it shares (itself unless merged) */
	bool debug;             /* slub_debug applies */
};

enum { C16, CCTOR, C200, CPA, CPB, C4K, C30K, NC };
static struct mcache mc[NC] = {
	[C16] = { "mx-16", 16, 0, USLAB_NO_MERGE, NULL, 20 },
	[CCTOR] = { "mx-96-ctor", CTOR_SIZE, 0, 0, ctor96, 15 },
	[C200] = { "mx-200-hw", 200, 0, USLAB_HWCACHE_ALIGN | USLAB_NO_MERGE, NULL, 15 },
	/* 1000 and 1004 bytes have the same stride (1008): mergeable, and no
	 * kmalloc class is within a pointer of it (896, 1024) */
	[CPA] = { "mx-pair-a", 1000, 0, 0, NULL, 12 },
	[CPB] = { "mx-pair-b", 1004, 0, 0, NULL, 12 },
	[C4K] = { "mx-4096-a64", 4096, 64, USLAB_NO_MERGE, NULL, 8 },
	[C30K] = { "mx-30000", 30000, 0, USLAB_NO_MERGE, NULL, 3 },
};
static unsigned weight_sum;
static bool all_debug;   /* slub_debug on every cache (the kmalloc classes too) */

static unsigned pick_cache(uint64_t r)
{
	unsigned x = (unsigned)(r % weight_sum);
	for (unsigned i = 0; i < NC; i++) {
		if (x < mc[i].weight)
			return i;
		x -= mc[i].weight;
	}
	return 0;
}

/* ---- objects: stamp and check ------------------------------------------------------ */

enum kind { K_NONE, K_CACHE, K_MALLOC };

/* What a holder knows of an object (the first 16 bytes of an object of 16
 * bytes or more say the same: tag, then kind | cache | huge | size).
 * huge: a malloc block in a mapping of its own, which it keeps when
 * realloc shrinks it in place, whatever its usable size becomes. */
struct ref {
	unsigned char *p;
	uint64_t tag;
	uint32_t size;
	uint8_t kind, ci, huge;
};

static uint64_t desc_of(const struct ref *o)
{
	return (uint64_t)o->kind << 56 | (uint64_t)o->ci << 48 | (uint64_t)o->huge << 40 | o->size;
}

static unsigned char pat_of(uint64_t tag)
{
	return (unsigned char)(tag ^ (tag >> 13) ^ (tag >> 29));
}

/* Bytes [from, to) of the stamped ranges: [16, 4096) and the last 64. */
static void stamp_ranges(size_t size, size_t r[2][2])
{
	size_t a = size < 16 ? 0 : 16;
	size_t b = size < 4096 ? size : 4096;
	size_t c = size > 64 ? size - 64 : 0;
	if (c < b)
		c = b;
	r[0][0] = a < b ? a : b;
	r[0][1] = b;
	r[1][0] = c;
	r[1][1] = size;
}

static void stamp(const struct ref *o)
{
	size_t r[2][2];
	if (o->size >= 16) {
		uint64_t h[2] = { o->tag, desc_of(o) };
		memcpy(o->p, h, 16);
	}
	stamp_ranges(o->size, r);
	for (int k = 0; k < 2; k++)
		if (r[k][1] > r[k][0])
			memset(o->p + r[k][0], pat_of(o->tag), r[k][1] - r[k][0]);
}

/* Check the stamp of o in bytes [0, limit). */
static void verify_upto(const struct ref *o, size_t limit, const char *where)
{
	size_t r[2][2];
	if (o->size >= 16 && limit >= 16) {
		uint64_t h[2];
		memcpy(h, o->p, 16);
		CHECKF(h[0] == o->tag && h[1] == desc_of(o), "%s: object %p (kind %u, cache %u, %u bytes): header %#llx %#llx, "
		       "want %#llx %#llx", where, (void *)o->p, o->kind, o->ci, o->size, (unsigned long long)h[0],
		       (unsigned long long)h[1], (unsigned long long)o->tag, (unsigned long long)desc_of(o));
	}
	stamp_ranges(o->size, r);
	unsigned char want = pat_of(o->tag);
	for (int k = 0; k < 2; k++)
		for (size_t i = r[k][0]; i < r[k][1] && i < limit; i++)
			if (o->p[i] != want)
				check_fail(__FILE__, __LINE__, "object contents", "%s: object %p (kind %u, cache %u, %u bytes): "
					   "byte %zu is %#x, want %#x", where, (void *)o->p, o->kind, o->ci, o->size, i,
					   o->p[i], want);
}

static void verify(const struct ref *o, const char *where)
{
	verify_upto(o, o->size, where);
}

/* An object found in a shared slot: its header says what it is. */
static struct ref ref_from_header(void *p)
{
	uint64_t h[2];
	memcpy(h, p, 16);
	struct ref o = { p, h[0], (uint32_t)h[1], (uint8_t)(h[1] >> 56), (uint8_t)(h[1] >> 48), (uint8_t)(h[1] >> 40) };
	CHECKF(((o.kind == K_CACHE && o.ci < NC && o.size == mc[o.ci].size) || (o.kind == K_MALLOC && o.size >= 16)) &&
	       (h[1] >> 32 & 0xfeff) == 0 && o.huge <= 1,
	       "slot object %p: bad header %#llx %#llx", p, (unsigned long long)h[0], (unsigned long long)h[1]);
	return o;
}

/* ---- shared state ----------------------------------------------------------------- */

static _Atomic(void *) slots[NSLOTS];
static _Atomic int stop_all;       /* the run is over: workers end their lives */
static _Atomic int stop_aux;       /* tuner and exporter stop */
static _Atomic int park;           /* a quiet point: every thread parks */

static pthread_mutex_t park_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t park_cv = PTHREAD_COND_INITIALIZER;   /* parked threads wait here */
static pthread_cond_t main_cv = PTHREAD_COND_INITIALIZER;   /* the supervisor waits here */
static unsigned aux_parked;        /* tuner/exporter parked (park_m) */

enum wstate { W_RUNNING, W_PARKED, W_DONE };

/* Per-thread counts, written by their thread only, read by the supervisor
 * when the thread is parked or joined (park_m orders them). */
struct counts {
	long live[NC];          /* objects allocated less objects freed, per cache */
	long m_bytes;           /* malloc family: usable bytes of non-huge blocks */
	long m_huge;            /* malloc family: huge blocks */
	unsigned long ops, cross_frees, bulk_objs, malloc_ops, reallocs, shrinks;
};

struct worker {
	pthread_t tid;
	enum wstate state;      /* park_m */
	uint64_t seed;
	unsigned long life;     /* operations before it exits */
	struct counts n;
	size_t local_bytes;
	struct ref local[LOCAL];
};

static struct counts gone;          /* joined threads' counts (supervisor only) */
static _Atomic unsigned long tunes, tune_einval, aux_shrinks, refreshes, ex_requests, ex_served, ex_commands,
	ex_validates, stats_prints;

/* ---- the workers' operations --------------------------------------------------------- */

static void add_malloc(struct counts *n, void *p, bool huge, long sign)
{
	if (huge)
		n->m_huge += sign;
	else
		n->m_bytes += sign * (long)uslab_malloc_usable_size(p);
}

static bool new_cache_obj(struct worker *w, unsigned ci, bool zero, struct ref *o)
{
	struct mcache *m = &mc[ci];
	unsigned char *p = zero ? uslab_cache_zalloc(m->c) : uslab_cache_alloc(m->c);
	CHECKF(p != NULL, "alloc from %s: %s", m->name, strerror(errno));
	CHECKF(((uintptr_t)p & (m->eff_align - 1)) == 0, "%s: object %p not aligned to %zu", m->name, (void *)p,
	       m->eff_align);
	if (zero) {
		for (size_t i = 0; i < m->size; i++)
			CHECKF(p[i] == 0, "%s: zalloc'd object %p byte %zu is %#x", m->name, (void *)p, i, p[i]);
	} else if (m->ctor) {
		/* every free put it back in its constructed state */
		for (size_t i = 0; i < m->size; i++)
			CHECKF(p[i] == CTOR_BYTE, "%s: object %p not in its constructed state (byte %zu is %#x)",
			       m->name, (void *)p, i, p[i]);
	}
	w->n.live[ci]++;
	*o = (struct ref){ p, rnd_next(&w->seed) | 1, (uint32_t)m->size, K_CACHE, (uint8_t)ci, 0 };
	stamp(o);
	return true;
}

static size_t malloc_size(uint64_t r, bool small_only)
{
	unsigned sel = (unsigned)(r % 1000);
	r >>= 10;
	if (sel < 600 || (small_only && sel < 800))
		return r % 257;
	if (sel < 850 || small_only)
		return 257 + r % (4096 - 256);
	if (sel < 960)
		return 4097 + r % (32768 - 4096);
	if (sel < 997)
		return 32769 + r % (1024 * 1024 - 32768);   /* large blocks */
	return HUGE_MIN + 1 + r % (2 * MiB);             /* huge blocks */
}

/* One of the malloc family's allocation calls. */
static bool new_malloc_obj(struct worker *w, size_t size, struct ref *o)
{
	uint64_t r = rnd_next(&w->seed);
	unsigned char *p = NULL;
	size_t align;
	bool zero = false;
	switch (r % 20) {
	case 0: case 1: case 2:                              /* calloc, zeroes checked */
	{
		if (size > 64 * 1024)
			size = 64 * 1024;
		size_t nm = (r >> 8) % 2 ? 1 : 2;   /* n * size, n 1 or 2 */
		size = size / nm * nm;
		p = uslab_calloc(nm, size / nm);
		align = size > 128 || (size && size % 16 == 0) ? 16 : 8;
		zero = true;
		break;
	}
	case 3: case 4: {                                    /* posix_memalign */
		align = (size_t)16 << ((r >> 8) % 9);          /* 16 .. 4096 */
		void *q = NULL;
		int e = uslab_posix_memalign(&q, align, size);
		CHECKF(e == 0, "posix_memalign(%zu, %zu): %d", align, size, e);
		p = q;
		break;
	}
	case 5:
		align = (size_t)8 << ((r >> 8) % 8);           /* 8 .. 1024 */
		p = uslab_aligned_alloc(align, size);
		break;
	case 6:
		align = (size_t)16 << ((r >> 8) % 6);
		p = uslab_memalign(align, size);
		break;
	default:
		p = uslab_malloc(size);
		/* 16, but 8 for sizes up to 128 that are not multiples of 16 */
		align = size > 128 || (size && size % 16 == 0) ? 16 : 8;
		break;
	}
	CHECKF(p != NULL, "malloc family, %zu bytes: %s", size, strerror(errno));
	CHECKF(((uintptr_t)p & (align - 1)) == 0, "block %p of %zu bytes not aligned to %zu", (void *)p, size, align);
	CHECKF(uslab_malloc_usable_size(p) >= size, "usable size %zu < %zu", uslab_malloc_usable_size(p), size);
	for (size_t i = 0; zero && i < size; i++)
		CHECKF(p[i] == 0, "calloc'd block %p byte %zu is %#x", (void *)p, i, p[i]);
	bool huge = uslab_malloc_usable_size(p) > HUGE_MIN;
	add_malloc(&w->n, p, huge, 1);
	w->n.malloc_ops++;
	*o = (struct ref){ p, rnd_next(&w->seed) | 1, (uint32_t)size, K_MALLOC, 0, huge };
	stamp(o);
	return true;
}

/* Free o (checked first) by the calls its kind allows. */
static void release(struct worker *w, struct counts *n, const struct ref *o, const char *where)
{
	verify(o, where);
	if (o->kind == K_CACHE) {
		struct mcache *m = &mc[o->ci];
		if (m->ctor)
			memset(o->p, CTOR_BYTE, m->size);   /* back to the constructed state (SLUB's rule) */
		uslab_cache_free(m->c, o->p);
		n->live[o->ci]--;
	} else {
		add_malloc(n, o->p, o->huge, -1);
		uint64_t r = w ? rnd_next(&w->seed) : 0;
		if (r % 16 == 1)
			CHECK(uslab_realloc(o->p, 0) == NULL);   /* glibc: frees, returns NULL */
		else if (r % 16 == 2)
			uslab_free_sized(o->p, o->size);
		else
			uslab_free(o->p);
	}
}

/* Put o in a random slot; free what was there (another thread's object,
 * usually). */
static void give(struct worker *w, const struct ref *o)
{
	void *old = atomic_exchange(&slots[rnd_next(&w->seed) % NSLOTS], o->p);
	if (old) {
		struct ref x = ref_from_header(old);
		release(w, &w->n, &x, "slot");
		w->n.cross_frees++;
	}
}

static bool slot_ok(const struct ref *o)
{
	return o->size >= 16 && o->size <= SLOT_MAX_SIZE;
}

static void local_put(struct worker *w, unsigned k, const struct ref *o)
{
	w->local[k] = *o;
	w->local_bytes += o->size;
}

static void local_drop(struct worker *w, unsigned k)
{
	w->local_bytes -= w->local[k].size;
	release(w, &w->n, &w->local[k], "local");
	w->local[k].kind = K_NONE;
}

static void shuffle(struct worker *w, void **v, size_t n)
{
	for (size_t j = n; j > 1; j--) {
		size_t x = rnd_next(&w->seed) % j;
		void *t = v[j - 1];
		v[j - 1] = v[x];
		v[x] = t;
	}
}

/* alloc_bulk, stamp, keep a few (locally or in slots), free the rest with
 * free_bulk in a shuffled order. */
static void bulk_round_trip(struct worker *w, uint64_t r)
{
	unsigned ci = pick_cache(r);
	size_t n = 1 + (r >> 16) % (ci >= C4K ? 24 : 128);
	void *v[128];
	struct mcache *m = &mc[ci];
	CHECKF(uslab_cache_alloc_bulk(m->c, n, v) == n, "alloc_bulk(%s, %zu): %s", m->name, n, strerror(errno));
	w->n.live[ci] += (long)n;
	w->n.bulk_objs += n;
	for (size_t j = 0; j < n; j++) {
		unsigned char *p = v[j];
		CHECKF(((uintptr_t)p & (m->eff_align - 1)) == 0, "%s: bulk object %p misaligned", m->name, (void *)p);
		if (m->ctor)
			for (size_t i = 0; i < m->size; i += 7)
				CHECKF(p[i] == CTOR_BYTE, "%s: bulk object %p not constructed", m->name, (void *)p);
		struct ref o = { p, rnd_next(&w->seed) | 1, (uint32_t)m->size, K_CACHE, (uint8_t)ci, 0 };
		stamp(&o);
	}
	/* keep up to 4: two handed to other threads, two held here */
	size_t keep = (r >> 40) % 5;
	for (size_t j = 0; j < keep && j < n; j++) {
		struct ref o = ref_from_header(v[n - 1 - j]);
		unsigned k = (unsigned)(rnd_next(&w->seed) % LOCAL);
		if (j < 2 && slot_ok(&o)) {
			give(w, &o);
		} else if (w->local[k].kind == K_NONE && w->local_bytes + o.size <= LOCAL_BYTES) {
			local_put(w, k, &o);
		} else {
			release(w, &w->n, &o, "bulk");
		}
	}
	n = keep < n ? n - keep : 0;
	shuffle(w, v, n);
	for (size_t j = 0; j < n; j++) {
		struct ref o = ref_from_header(v[j]);
		verify(&o, "bulk");
		if (m->ctor)
			memset(v[j], CTOR_BYTE, m->size);
	}
	uslab_cache_free_bulk(m->c, n, v);
	w->n.live[ci] -= (long)n;
}

/* One free_bulk of objects of one cache gathered from the local array and
 * the slots (other threads' objects), with NULL entries among them. */
static void bulk_gather(struct worker *w, uint64_t r)
{
	unsigned ci = pick_cache(r);
	struct mcache *m = &mc[ci];
	void *v[96];
	size_t n = 0, want = 1 + (r >> 16) % 64;
	unsigned start = (unsigned)((r >> 32) % LOCAL);
	for (unsigned j = 0; j < LOCAL && n < want; j++) {
		unsigned k = (start + j) % LOCAL;
		struct ref *o = &w->local[k];
		if (o->kind == K_CACHE && o->ci == ci) {
			verify(o, "gather");
			if (m->ctor)
				memset(o->p, CTOR_BYTE, m->size);
			v[n++] = o->p;
			w->local_bytes -= o->size;
			o->kind = K_NONE;
		}
	}
	for (unsigned j = 0; j < 16 && n < want; j++) {
		unsigned s = (unsigned)(rnd_next(&w->seed) % NSLOTS);
		void *p = atomic_exchange(&slots[s], NULL);
		if (!p)
			continue;
		struct ref o = ref_from_header(p);
		if (o.kind == K_CACHE && o.ci == ci) {
			verify(&o, "gather slot");
			if (m->ctor)
				memset(o.p, CTOR_BYTE, m->size);
			v[n++] = p;
			w->n.cross_frees++;
		} else {
			release(w, &w->n, &o, "gather slot");
			w->n.cross_frees++;
		}
	}
	size_t nulls = (r >> 56) % 3;
	for (size_t j = 0; j < nulls; j++)
		v[n + j] = NULL;
	shuffle(w, v, n + nulls);
	uslab_cache_free_bulk(m->c, n + nulls, v);
	w->n.live[ci] -= (long)n;
	w->n.bulk_objs += n;
}

/* Many objects of one cache, then all freed: the sheaves end up full. */
static void burst(struct worker *w, unsigned ci, size_t n)
{
	struct mcache *m = &mc[ci];
	void **v = malloc(n * sizeof *v);
	CHECK(v != NULL);
	for (size_t j = 0; j < n; j++) {
		v[j] = uslab_cache_alloc(m->c);
		CHECKF(v[j] != NULL, "burst alloc %s", m->name);
		*(uint64_t *)v[j] = (uintptr_t)v[j];
	}
	for (size_t j = 0; j < n; j++) {
		CHECKF(*(uint64_t *)v[j] == (uintptr_t)v[j], "burst object %p changed", v[j]);
		if (m->ctor)
			memset(v[j], CTOR_BYTE, m->size);
		uslab_cache_free(m->c, v[j]);
	}
	free(v);
}

static size_t burst_size(unsigned ci, uint64_t r)
{
	unsigned long cap = 0;
	uslab_cache_tune_get(mc[ci].c, "sheaf_capacity", &cap);
	size_t n = 2 * (cap ? cap : 60) + (r % 64);
	size_t max = mc[ci].size >= 4096 ? 96 : 1100;
	return n < max ? n : max;
}

static void realloc_local(struct worker *w, unsigned k, uint64_t r)
{
	struct ref *o = &w->local[k];
	size_t n = malloc_size(r, o->size < 4096);
	if (w->local_bytes - o->size + n > LOCAL_BYTES)
		return;
	verify(o, "before realloc");
	add_malloc(&w->n, o->p, o->huge, -1);
	unsigned char *q = uslab_realloc(o->p, n);
	if (n == 0) {   /* freed (glibc's realloc(p, 0)) */
		CHECK(q == NULL);
		w->local_bytes -= o->size;
		o->kind = K_NONE;
		return;
	}
	CHECKF(q != NULL, "realloc(%p, %zu): %s", (void *)o->p, n, strerror(errno));
	struct ref moved = *o;
	moved.p = q;
	verify_upto(&moved, n, "realloc'd");   /* the kept prefix */
	bool huge = q == o->p ? o->huge : uslab_malloc_usable_size(q) > HUGE_MIN;   /* in place: as it was */
	add_malloc(&w->n, q, huge, 1);
	w->local_bytes = w->local_bytes - o->size + n;
	*o = (struct ref){ q, rnd_next(&w->seed) | 1, (uint32_t)n, K_MALLOC, 0, huge };
	stamp(o);
	w->n.reallocs++;
}

static void park_worker(struct worker *w)
{
	/* give back what this thread caches, so that active_objects is exact
	 * in classic mode too (a live thread's CPU free list counts as in use) */
	for (unsigned i = 0; i < NC; i++)
		uslab_cache_shrink(mc[i].c);
	uslab_malloc_trim(0);
	pthread_mutex_lock(&park_m);
	w->state = W_PARKED;
	pthread_cond_broadcast(&main_cv);
	while (atomic_load(&park))
		pthread_cond_wait(&park_cv, &park_m);
	w->state = W_RUNNING;
	pthread_mutex_unlock(&park_m);
}

static void one_op(struct worker *w)
{
	uint64_t r = rnd_next(&w->seed);
	unsigned k = (unsigned)((r >> 8) % LOCAL);
	struct ref *lo = &w->local[k];
	unsigned sel = (unsigned)(r % 100);
	r >>= 20;
	if (sel < 28) {                                   /* a cache object, held here */
		if (lo->kind != K_NONE) {
			local_drop(w, k);
		} else {
			struct ref o;
			unsigned ci = pick_cache(r);
			if (w->local_bytes + mc[ci].size > LOCAL_BYTES)
				return;
			new_cache_obj(w, ci, !mc[ci].ctor && (r >> 12) % 8 == 0, &o);
			local_put(w, k, &o);
		}
	} else if (sel < 44) {                            /* the malloc family, held here */
		if (lo->kind == K_MALLOC && (r & 3) == 0) {
			realloc_local(w, k, r >> 2);
		} else if (lo->kind != K_NONE) {
			local_drop(w, k);
		} else {
			size_t n = malloc_size(r, false);
			if (w->local_bytes + n > LOCAL_BYTES)
				return;
			struct ref o;
			new_malloc_obj(w, n, &o);
			local_put(w, k, &o);
		}
	} else if (sel < 58) {                            /* hand one to another thread */
		struct ref o;
		if ((r & 3) == 0)
			new_malloc_obj(w, 16 + malloc_size(r >> 2, true), &o);
		else
			new_cache_obj(w, pick_cache(r >> 2), false, &o);
		if (slot_ok(&o))
			give(w, &o);
		else
			release(w, &w->n, &o, "too large for a slot");
	} else if (sel < 68) {                            /* take one another thread left */
		void *p = atomic_exchange(&slots[r % NSLOTS], NULL);
		if (p) {
			struct ref o = ref_from_header(p);
			w->n.cross_frees++;
			if (lo->kind == K_NONE && w->local_bytes + o.size <= LOCAL_BYTES && (r >> 11) % 2)
				local_put(w, k, &o);
			else
				release(w, &w->n, &o, "taken");
		}
	} else if (sel < 76) {
		bulk_round_trip(w, r);
	} else if (sel < 81) {
		bulk_gather(w, r);
	} else if (sel < 83) {
		if ((r >> 8) % 8 == 0) {
			unsigned ci = pick_cache(r);
			burst(w, ci, burst_size(ci, r >> 16));
		}
	} else if (sel < 84) {
		if ((r >> 8) % 16 == 0) {
			uslab_cache_shrink(mc[pick_cache(r >> 12)].c);
			w->n.shrinks++;
		} else if ((r >> 8) % 64 == 1) {
			uslab_malloc_trim(0);
			w->n.shrinks++;
		}
	} else {                                          /* small blocks and realloc of anything held */
		if (lo->kind == K_MALLOC) {
			realloc_local(w, k, r);
		} else if (lo->kind == K_NONE) {
			struct ref o;
			new_malloc_obj(w, r % 24, &o);
			local_put(w, k, &o);
		} else {
			local_drop(w, k);
		}
	}
	w->n.ops++;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	for (unsigned long i = 0; i < w->life && !atomic_load_explicit(&stop_all, memory_order_relaxed); i++) {
		if (atomic_load_explicit(&park, memory_order_relaxed))
			park_worker(w);
		one_op(w);
	}
	/* the end of a life: some objects to other threads, the rest freed,
	 * then the sheaves of a cache or two filled, and exit with them full */
	unsigned given = 0;
	for (unsigned k = 0; k < LOCAL; k++) {
		struct ref *o = &w->local[k];
		if (o->kind == K_NONE)
			continue;
		if (given < 32 && slot_ok(o) && rnd_chance(&w->seed, 30)) {
			give(w, o);
			given++;
			w->local_bytes -= o->size;
			o->kind = K_NONE;
		} else {
			local_drop(w, k);
		}
	}
	CHECK_EQ(w->local_bytes, 0);
	for (unsigned j = 0; j < 2; j++) {
		uint64_t r = rnd_next(&w->seed);
		unsigned ci = pick_cache(r);
		burst(w, ci, burst_size(ci, r >> 16));
	}
	pthread_mutex_lock(&park_m);
	w->state = W_DONE;
	pthread_cond_broadcast(&main_cv);
	pthread_mutex_unlock(&park_m);
	return NULL;   /* the thread's sheaves go to the barn or the slabs at exit */
}

/* ---- tuner and exporter ------------------------------------------------------------------ */

static void park_aux(void)
{
	pthread_mutex_lock(&park_m);
	aux_parked++;
	pthread_cond_broadcast(&main_cv);
	while (atomic_load(&park))
		pthread_cond_wait(&park_cv, &park_m);
	aux_parked--;
	pthread_mutex_unlock(&park_m);
}

static void nap_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };
	nanosleep(&ts, NULL);
}

static void tune(struct mcache *m, const char *name, unsigned long v)
{
	errno = 0;
	if (uslab_cache_tune_set(m->c, name, v) == 0) {
		atomic_fetch_add(&tunes, 1);
		return;
	}
	int e = errno;
	/* debug caches have no sheaves; an order below what holds an object */
	bool allowed = e == EINVAL && ((m->debug && !strcmp(name, "sheaf_capacity") && v > 0) || !strcmp(name, "order"));
	CHECKF(allowed, "%s: %s=%lu refused: %s", m->name, name, v, strerror(e));
	atomic_fetch_add(&tune_einval, 1);
}

static void *tuner_main(void *arg)
{
	uint64_t seed = 0x7e57;
	(void)arg;
	while (!atomic_load(&stop_aux)) {
		if (atomic_load(&park))
			park_aux();
		uint64_t r = rnd_next(&seed);
		struct mcache *m = &mc[r % NC];
		r >>= 8;
		/* bounds that keep memory sane: a sheaf of at most ~1 MiB, a barn
		 * of at most 16 of them, CPU partial lists of at most ~4 MiB */
		unsigned long cap_max = 1048576 / m->size;
		if (cap_max > 508)
			cap_max = 508;
		unsigned long cp_max = 4 * 1048576 / m->size;
		if (cp_max > 2000)
			cp_max = 2000;
		switch (r % 8) {
		case 0: case 1:
			tune(m, "sheaf_capacity", (r >> 4) % 5 == 0 ? 0 : 1 + (r >> 8) % cap_max);
			break;
		case 2: tune(m, "barn_full", (r >> 4) % 17); break;
		case 3: tune(m, "barn_empty", (r >> 4) % 17); break;
		case 4: tune(m, "cpu_partial", (r >> 4) % (cp_max + 1)); break;
		case 5: tune(m, "min_partial", (r >> 4) % 17); break;
		case 6: tune(m, "order", (r >> 4) % 6); break;
		default:
			if ((r >> 4) % 8 == 0)
				uslab_malloc_trim(0);
			else
				uslab_cache_shrink(m->c);
			atomic_fetch_add(&aux_shrinks, 1);
			break;
		}
		nap_us(SCALE(1000, 2000));
	}
	return NULL;
}

struct text_count {
	size_t bytes;
	char first;
};

static void count_text(void *arg, const char *text)
{
	struct text_count *t = arg;
	if (!t->bytes)
		t->first = text[0];
	t->bytes += strlen(text);
}

/* uslab_cache_validate() while the workers run (directly and as an export
 * command): off unless USLAB_MIXED_VALIDATE_IN_USE=1. It reports problems
 * that are not there ("node slab/object counts disagree with the slabs
 * found") when a slab comes or goes meanwhile, and ThreadSanitizer reports
 * its walk of the page descriptors as racing with new_slab(), page_free()
 * and large.c, which write them without the page lock (issue 12's report;
 * validate is checked at every quiet point instead). */
static bool validate_in_use;

/* The export file, mapped as uslabinfo maps it. */
static struct export_header *ex_hdr;

static void ex_map(void)
{
	const char *path = uslab_export_path();
	CHECKF(path != NULL, "USLAB_OPTIONS has export, but the process does not export");
	int fd = open(path, O_RDWR | O_CLOEXEC);
	CHECKF(fd >= 0, "open %s: %s", path, strerror(errno));
	void *h = mmap(NULL, sizeof *ex_hdr, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECKF(h != MAP_FAILED, "mmap %s: %s", path, strerror(errno));
	close(fd);
	ex_hdr = h;
	CHECK(memcmp(ex_hdr->magic, EXPORT_MAGIC, 8) == 0 && ex_hdr->version == EXPORT_VERSION);
}

/* Post a command through the mailbox, as uslabinfo does, and wait for it
 * (served by uslab_export_refresh() here or by any slow path). */
static void ex_command(uint32_t op, const char *cache, const char *key, uint64_t value)
{
	struct export_cmd *c = &ex_hdr->cmd;
	uint32_t st = CMD_EMPTY;
	CHECKF(atomic_compare_exchange_strong(&c->state, &st, CMD_CLAIMED), "mailbox in state %u", st);
	atomic_store(&c->owner, (int32_t)getpid());
	c->op = op;
	snprintf(c->cache, sizeof c->cache, "%s", cache);
	snprintf(c->key, sizeof c->key, "%s", key);
	c->value = value;
	c->err = 0;
	c->result = 0;
	c->caches = 0;
	c->msg[0] = 0;
	atomic_store_explicit(&c->state, CMD_POSTED, memory_order_release);
	atomic_fetch_add(&ex_hdr->req, 1);
	double end = check_now() + 30;
	for (unsigned i = 1; (st = atomic_load_explicit(&c->state, memory_order_acquire)) != CMD_DONE; i++) {
		CHECKF(check_now() < end, "export command %u on '%s' not served in 30 s (state %u)", op, cache, st);
		/* mostly the workers' slow paths serve it; now and then we do */
		if (st == CMD_POSTED && i % 8 == 0)
			CHECK(uslab_export_refresh() == 0);
		nap_us(200);
	}
	CHECKF(c->err == 0, "export command %u on '%s' %s=%llu: error %d: %s", op, cache, key,
	       (unsigned long long)value, c->err, c->msg);
	if (op == EXPORT_OP_VALIDATE)
		CHECKF(c->result == 0, "export validate of '%s': %lld problems", cache, (long long)c->result);
	atomic_store(&c->state, CMD_EMPTY);
	atomic_fetch_add(&ex_commands, 1);
}

static void *exporter_main(void *arg)
{
	uint64_t seed = 0xe8907;
	uint64_t pending = 0;   /* the last request we made */
	(void)arg;
	ex_map();
	for (unsigned long it = 0; !atomic_load(&stop_aux); it++) {
		if (atomic_load(&park))
			park_aux();
		uint64_t r = rnd_next(&seed);
		/* a request as a reader makes it: the workers' slow paths serve it */
		if (it % 4 == 0) {
			uint64_t ack = atomic_load_explicit(&ex_hdr->ack, memory_order_acquire);
			if (pending && (int64_t)(ack - pending) >= 0)
				atomic_fetch_add(&ex_served, 1);
			if (!pending || (int64_t)(ack - pending) >= 0) {
				pending = atomic_fetch_add(&ex_hdr->req, 1) + 1;
				atomic_fetch_add(&ex_requests, 1);
			}
		}
		if (it % 3 == 0) {
			CHECK(uslab_export_refresh() == 0);
			atomic_fetch_add(&refreshes, 1);
		}
		for (unsigned i = 0; i < NC; i++) {
			struct uslab_cache_info in;
			cache_info(mc[i].c, &in);
			CHECK(strcmp(in.name, mc[i].name) == 0);
			CHECK(mc[i].group == i ? in.alias_of[0] == 0 : strcmp(in.alias_of, mc[mc[i].group].name) == 0);
		}
		struct uslab_process_info pi = { .version = USLAB_PROCESS_INFO_VERSION };
		CHECK(uslab_process_get_info(&pi) == 0);
		if (it % 8 == 0) {
			static const unsigned long forms[] = { USLAB_STATS_TABLE, USLAB_STATS_JSON, USLAB_STATS_SLABINFO };
			unsigned long f = forms[(it / 8) % 3];
			struct text_count t = { 0, 0 };
			uslab_stats_print(count_text, &t, f);
			CHECK(t.bytes > 0);
			if (f == USLAB_STATS_JSON)
				CHECK(t.first == '{');
			atomic_fetch_add(&stats_prints, 1);
		}
		if (validate_in_use && it % 16 == 5) {   /* validate a cache while the workers use it */
			unsigned i = (unsigned)(r % NC);
			long v = uslab_cache_validate(mc[i].c);
			CHECKF(v == 0, "validate of %s in use: %ld problems", mc[i].name, v);
			atomic_fetch_add(&ex_validates, 1);
		}
		if (it % 64 == 13) {  /* a command, as uslabinfo -s / -v / --set posts it */
			unsigned i = (unsigned)((r >> 8) % NC);
			switch ((r >> 16) % 4) {
			case 0: ex_command(EXPORT_OP_SHRINK, "", "", 0); break;
			case 1: ex_command(EXPORT_OP_SHRINK, mc[i].name, "", 0); break;
			case 2:
				if (validate_in_use)
					ex_command(EXPORT_OP_VALIDATE, mc[i].name, "", 0);
				else
					ex_command(EXPORT_OP_SHRINK, mc[i].name, "", 0);
				break;
			default: ex_command(EXPORT_OP_SET, mc[i].name, "min_partial", (r >> 24) % 9); break;
			}
		}
		nap_us(SCALE(2000, 4000));
	}
	munmap(ex_hdr, sizeof *ex_hdr);
	return NULL;
}

/* ---- the supervisor ---------------------------------------------------------------------- */

static struct worker *wk[16];
static unsigned long started;
static uint64_t wseed = 1;

static void start_worker(unsigned i)
{
	struct worker *w = calloc(1, sizeof *w);
	CHECK(w != NULL);
	w->seed = wseed++ * 0x9e3779b97f4a7c15ULL;
	uint64_t r = rnd_next(&w->seed);
	/* short and long lives: most threads exit within a fraction of a second */
	w->life = (r % 4 == 0) ? SCALE(40000, 8000) + r % SCALE(40000, 8000) : 300 + (r >> 8) % SCALE(8000, 2000);
	w->state = W_RUNNING;
	wk[i] = w;
	CHECK(pthread_create(&w->tid, NULL, worker_main, w) == 0);
	started++;
}

static void add_counts(struct counts *to, const struct counts *from)
{
	for (unsigned i = 0; i < NC; i++)
		to->live[i] += from->live[i];
	to->m_bytes += from->m_bytes;
	to->m_huge += from->m_huge;
	to->ops += from->ops;
	to->cross_frees += from->cross_frees;
	to->bulk_objs += from->bulk_objs;
	to->malloc_ops += from->malloc_ops;
	to->reallocs += from->reallocs;
	to->shrinks += from->shrinks;
}

static void join_worker(unsigned i)
{
	CHECK(pthread_join(wk[i]->tid, NULL) == 0);
	add_counts(&gone, &wk[i]->n);
	free(wk[i]);
	wk[i] = NULL;
}

/* Join every worker that is done; start new ones unless stopping. */
static void reap(bool restart)
{
	for (unsigned i = 0; i < NW; i++) {
		pthread_mutex_lock(&park_m);
		bool done = wk[i] && wk[i]->state == W_DONE;
		pthread_mutex_unlock(&park_m);
		if (done)
			join_worker(i);
		if (!wk[i] && restart)
			start_worker(i);
	}
}

static unsigned quiet_points;
static bool soak;
static double t_start;

/* Everything parked: the program's counts against the library's. */
static void quiet_point(void)
{
	atomic_store(&park, 1);
	pthread_mutex_lock(&park_m);
	for (;;) {
		bool running = aux_parked < 2;
		for (unsigned i = 0; i < NW; i++)
			if (wk[i] && wk[i]->state == W_RUNNING)
				running = true;
		if (!running)
			break;
		pthread_cond_wait(&main_cv, &park_m);
	}
	pthread_mutex_unlock(&park_m);
	/* threads that ended meanwhile are joined (their exit is complete) */
	for (unsigned i = 0; i < NW; i++) {
		pthread_mutex_lock(&park_m);
		bool done = wk[i] && wk[i]->state == W_DONE;
		pthread_mutex_unlock(&park_m);
		if (done)
			join_worker(i);
	}
	struct counts sum = gone;
	pthread_mutex_lock(&park_m);
	for (unsigned i = 0; i < NW; i++)
		if (wk[i])
			add_counts(&sum, &wk[i]->n);
	pthread_mutex_unlock(&park_m);

	uint64_t live_total = 0, active_total = 0;
	for (unsigned g = 0; g < NC; g++) {
		if (mc[g].group != g)
			continue;
		long live = 0;
		for (unsigned i = 0; i < NC; i++)
			if (mc[i].group == g)
				live += sum.live[i];
		struct uslab_cache_info in;
		cache_info(mc[g].c, &in);
		CHECKF(in.active_objects == (uint64_t)live, "quiet point %u: cache %s%s: active_objects %llu, the program "
		       "holds %ld", quiet_points, mc[g].name, g == CPA && mc[CPB].group == CPA ? " (+ mx-pair-b)" : "",
		       (unsigned long long)in.active_objects, live);
		long v = uslab_cache_validate(mc[g].c);
		CHECKF(v == 0, "quiet point %u: validate %s: %ld problems", quiet_points, mc[g].name, v);
		live_total += (uint64_t)live;
		active_total += in.active_objects;
	}
	struct uslab_malloc_info mi = { .version = USLAB_MALLOC_INFO_VERSION };
	CHECK(uslab_malloc_get_info(&mi) == 0);
	if (!all_debug) {
		CHECKF(mi.huge_blocks == (uint64_t)sum.m_huge, "quiet point %u: %llu huge blocks, the program holds %ld",
		       quiet_points, (unsigned long long)mi.huge_blocks, sum.m_huge);
		CHECKF(mi.in_use_bytes - mi.huge_bytes == (uint64_t)sum.m_bytes,
		       "quiet point %u: malloc in_use_bytes %llu (huge %llu), the program holds %ld usable bytes",
		       quiet_points, (unsigned long long)mi.in_use_bytes, (unsigned long long)mi.huge_bytes, sum.m_bytes);
	}
	quiet_points++;
	if (soak) {
		struct uslab_process_info pi = { .version = USLAB_PROCESS_INFO_VERSION };
		CHECK(uslab_process_get_info(&pi) == 0);
		printf("soak: quiet=%u t=%.1f rss=%zu mapped=%llu used=%llu live_objects=%llu active_objects=%llu "
		       "malloc_bytes=%ld huge=%ld ops=%lu threads=%lu ok\n",
		       quiet_points, check_now() - t_start, test_rss(), (unsigned long long)pi.mapped_bytes,
		       (unsigned long long)pi.used_bytes, (unsigned long long)live_total,
		       (unsigned long long)active_total, sum.m_bytes, sum.m_huge, sum.ops, started);
	}
	pthread_mutex_lock(&park_m);
	atomic_store(&park, 0);
	pthread_cond_broadcast(&park_cv);
	pthread_mutex_unlock(&park_m);
}

static double env_seconds(const char *name, double dflt)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return dflt;
	char *end;
	double v = strtod(s, &end);
	CHECKF(*end == 0 && v >= 0, "%s=%s: not a number of seconds", name, s);
	return v;
}

static void setup_caches(void)
{
	/* the kmalloc classes first, so that no cache here becomes one's alias
	 * by creation order */
	uslab_free(uslab_malloc(1));
	for (unsigned i = 0; i < NC; i++) {
		struct mcache *m = &mc[i];
		m->c = uslab_cache_create(m->name, m->size, m->align, m->flags, m->ctor);
		CHECKF(m->c != NULL, "create %s: %s", m->name, strerror(errno));
		weight_sum += m->weight;
	}
	const char *o = getenv("USLAB_OPTIONS");
	bool nomerge = o && (strstr(o, "slab_nomerge") || strstr(o, "slub_nomerge"));
	all_debug = true;
	for (unsigned i = 0; i < NC; i++) {
		struct mcache *m = &mc[i];
		struct uslab_cache_info in;
		cache_info(m->c, &in);
		m->debug = cache_debugged(&in);
		all_debug &= m->debug;
		m->eff_align = in.align ? in.align : 8;
		m->group = i;
		if (in.alias_of[0]) {
			for (unsigned j = 0; j < NC; j++)
				if (!strcmp(in.alias_of, mc[j].name))
					m->group = j;
			CHECKF(m->group != i, "%s merged into '%s', not a cache of this test", m->name, in.alias_of);
		}
	}
	/* the pair merges unless merging is off (slab_nomerge, debug caches) */
	if (!nomerge && !mc[CPA].debug)
		CHECKF(mc[CPB].group == CPA, "mx-pair-b was not merged into mx-pair-a");
	unsigned long cap = 0;
	CHECK(uslab_cache_tune_get(mc[C16].c, "sheaf_capacity", &cap) == 0);
	printf("  caches: mx-pair-b %s; slub_debug %s; sheaf_capacity of mx-16 %lu\n",
	       mc[CPB].group == CPA ? "merged into mx-pair-a" : "not merged", all_debug ? "on" : "off", cap);
}

/* The end: every thread joined, every object freed. */
static void final_checks(void)
{
	for (unsigned s = 0; s < NSLOTS; s++) {
		void *p = atomic_exchange(&slots[s], NULL);
		if (p) {
			struct ref o = ref_from_header(p);
			release(NULL, &gone, &o, "final slot");
		}
	}
	for (unsigned i = 0; i < NC; i++)
		CHECKF(gone.live[i] == 0, "%s: the program's own count is %ld after freeing everything", mc[i].name,
		       gone.live[i]);
	CHECK_EQ(gone.m_bytes, 0);
	CHECK_EQ(gone.m_huge, 0);
	/* main's own CPU parts hold objects of the slots it freed: give them
	 * back, then every count is exact */
	for (unsigned i = 0; i < NC; i++)
		uslab_cache_shrink(mc[i].c);
	uslab_malloc_trim(0);
	for (unsigned i = 0; i < NC; i++) {
		struct uslab_cache_info in;
		cache_info(mc[i].c, &in);
		CHECKF(in.active_objects == 0, "%s: %llu active objects after everything was freed", mc[i].name,
		       (unsigned long long)in.active_objects);
		CHECKF(in.cpu_parts <= (cache_per_cpu(&in) ? check_ncpus_conf() : 1),
		       "%s: %u CPU parts with only the main thread left", mc[i].name, in.cpu_parts);
		long v = uslab_cache_validate(mc[i].c);
		CHECKF(v == 0, "%s: validate: %ld problems", mc[i].name, v);
		CHECKF(uslab_cache_shrink(mc[i].c) == 0, "%s: shrink left slabs", mc[i].name);
		cache_info(mc[i].c, &in);
		CHECKF(in.slabs == 0, "%s: %llu slabs after shrink", mc[i].name, (unsigned long long)in.slabs);
	}
	struct uslab_malloc_info mi = { .version = USLAB_MALLOC_INFO_VERSION };
	CHECK(uslab_malloc_get_info(&mi) == 0);
	CHECKF(mi.in_use_bytes == 0 && mi.huge_blocks == 0, "malloc family: %llu bytes in use, %llu huge blocks",
	       (unsigned long long)mi.in_use_bytes, (unsigned long long)mi.huge_blocks);
	for (unsigned i = NC; i-- > 0;)   /* aliases first */
		destroy_silently(mc[i].c);
}

int main(int argc, char **argv)
{
	soak = argc > 1 && !strcmp(argv[1], "--soak");
	CHECKF(argc == 1 || (argc == 2 && soak), "usage: %s [--soak]", argv[0]);
	/* the export must be on from the start: add it and start again */
	const char *o = getenv("USLAB_OPTIONS");
	if (!o || !strstr(o, "export")) {
		char opts[1024];
		snprintf(opts, sizeof opts, "%s%sexport", o ? o : "", o && *o ? " " : "");
		setenv("USLAB_OPTIONS", opts, 1);
		fflush(NULL);
		execv("/proc/self/exe", argv);
		perror("execv /proc/self/exe");
		return 1;
	}
	check_init(soak ? "test_mixed --soak" : "test_mixed");
	double seconds = env_seconds("USLAB_STRESS_SECONDS", UNDER_SANITIZER ? 60 : 10);
	double quiet = env_seconds("USLAB_QUIET_SECONDS", soak ? 10 : 3);
	validate_in_use = env_seconds("USLAB_MIXED_VALIDATE_IN_USE", 0) != 0;
	printf("  %.0f s, %u workers at a time, quiet points every %.0f s; USLAB_OPTIONS=\"%s\"\n", seconds, NW, quiet,
	       getenv("USLAB_OPTIONS"));
	setup_caches();

	t_start = check_now();
	pthread_t tuner, exporter;
	CHECK(pthread_create(&tuner, NULL, tuner_main, NULL) == 0);
	CHECK(pthread_create(&exporter, NULL, exporter_main, NULL) == 0);
	for (unsigned i = 0; i < NW; i++)
		start_worker(i);
	double next_quiet = t_start + quiet, end = t_start + seconds;
	/* the set time, then on until each thing the final check counts has
	 * happened once (quiet points are due by then, if any are asked for) */
	while (check_now() < end ||
	       (!(atomic_load(&tunes) > 0 && started > NW && (quiet_points > 0 || quiet <= 0) && gone.cross_frees > 0) &&
		check_now() < end + CHECK_HANG_S)) {
		reap(true);
		if (quiet > 0 && check_now() >= next_quiet) {
			quiet_point();
			next_quiet = check_now() + quiet;
		}
		nap_us(2000);
	}
	atomic_store(&stop_all, 1);
	for (unsigned i = 0; i < NW; i++)
		if (wk[i])
			join_worker(i);
	atomic_store(&stop_aux, 1);
	CHECK(pthread_join(tuner, NULL) == 0);
	CHECK(pthread_join(exporter, NULL) == 0);
	double ran = check_now() - t_start;
	final_checks();

	printf("test_mixed: %.1f s: %lu operations (%lu cross-thread frees, %lu bulk objects, %lu malloc family, "
	       "%lu reallocs, %lu shrinks), %lu threads started, %lu tunable changes (%lu refused: debug or order), "
	       "%lu tuner shrinks, %lu exports (%lu refreshes, %lu requests, %lu served, %lu commands, %lu stats prints, "
	       "%lu validates in use), %u quiet points\n",
	       ran, gone.ops, gone.cross_frees, gone.bulk_objs, gone.malloc_ops, gone.reallocs, gone.shrinks, started,
	       atomic_load(&tunes), atomic_load(&tune_einval), atomic_load(&aux_shrinks),
	       atomic_load(&refreshes) + atomic_load(&ex_requests) + atomic_load(&ex_commands), atomic_load(&refreshes),
	       atomic_load(&ex_requests), atomic_load(&ex_served), atomic_load(&ex_commands), atomic_load(&stats_prints),
	       atomic_load(&ex_validates), quiet_points);
	CHECK(atomic_load(&tunes) > 0 && started > NW && quiet_points > 0 && gone.cross_frees > 0);
	return 0;
}
