/*
 * slub_debug in user space: F consistency checks, Z red zones, P poisoning,
 * U call-site tracking, T tracing; full-object validation; reports in the
 * kernel's shape; the free-list order shuffle of slab_freelist_random.
 *
 * A debug cache has no CPU parts (no sheaves, no CPU slab), so its every
 * allocation and free takes slab.c's node-locked path (slab_debug_alloc,
 * slab_debug_free), as the kernel sends debug caches to its slow paths.
 * That path owns the slab word; it calls the hooks here, under the node
 * list_lock, to check an object and to change its debug state (red zones,
 * poison, tracks), so validation, which holds the lock too, always sees
 * objects in a consistent state.
 *
 * Object layout of a debug cache (offsets from the object pointer):
 *
 *   [-red_left_pad, 0)        left red zone (Z)
 *   [0, object_size)          the object (poisoned while free, P)
 *   [orig or size, meta_off)  right red zone (Z): from the requested size
 *                             (kmalloc slack) to a word past the object
 *   [meta_off, +8)            free pointer (outside the object, so poison
 *                             and the object's contents survive)
 *   [track_off, +2 tracks)    alloc and free track (U)
 *   [orig_off, +8)            requested size (Z)
 */
#define _GNU_SOURCE
#include "cpu.h"
#include "debug.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RED_INACTIVE 0xbb   /* red zone of a free object (SLUB_RED_INACTIVE) */
#define RED_ACTIVE   0xcc   /* red zone of an allocated object (SLUB_RED_ACTIVE) */
#define POISON_FREE  0x6b   /* a free object's bytes (POISON_FREE) */
#define POISON_END   0xa5   /* a free object's last byte (POISON_END) */

struct track {
	void *addr;         /* return address of the alloc/free call */
	uint64_t when;      /* os_real_ms() */
	int tid;            /* gettid() */
	int cpu;            /* unused; keeps the size a multiple of 8 */
};

/* ---- layout ---------------------------------------------------------------- */

static bool in_list(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; (p = strstr(p, name)) != NULL; p++)
		if (p > list && p[-1] == ',' && p[n] == ',')
			return true;
	return false;
}

unsigned debug_flags_for(const char *name, unsigned long flags)
{
	unsigned d = 0;
	if (flags & USLAB_CONSISTENCY_CHECKS)
		d |= DBG_F;
	if (flags & USLAB_RED_ZONE)
		d |= DBG_Z;
	if (flags & USLAB_POISON)
		d |= DBG_P;
	if (flags & USLAB_STORE_USER)
		d |= DBG_U;
	if (flags & USLAB_TRACE)
		d |= DBG_T;
	if (opt.debug && (!opt.debug_caches[0] || in_list(opt.debug_caches, name)))
		d |= opt.debug;
	return d;
}

unsigned long debug_public_flags(unsigned d)
{
	return ((d & DBG_F) ? USLAB_CONSISTENCY_CHECKS : 0) | ((d & DBG_Z) ? USLAB_RED_ZONE : 0) |
	       ((d & DBG_P) ? USLAB_POISON : 0) | ((d & DBG_U) ? USLAB_STORE_USER : 0) |
	       ((d & DBG_T) ? USLAB_TRACE : 0);
}

size_t debug_layout(struct uslab_cache *s, size_t size, size_t align)
{
	const size_t word = sizeof(void *);
	if (s->ctor)
		s->debug &= ~DBG_P;   /* poison would destroy constructed state (as the kernel) */
	s->red_left_pad = (s->debug & DBG_Z) ? (unsigned)ALIGN_UP(2 * word, align) : 0;
	size_t end = ALIGN_UP(size, word) + ((s->debug & DBG_Z) ? word : 0);
	s->meta_off = (unsigned)end;
	s->offset = (unsigned)end;
	end += word;
	s->track_off = (unsigned)end;
	if (s->debug & DBG_U)
		end += 2 * sizeof(struct track);
	s->orig_off = (unsigned)end;
	if (s->debug & DBG_Z)
		end += word;
	return s->red_left_pad + end;
}

static struct track *track(struct uslab_cache *s, void *x, bool freed)
{
	return (struct track *)((char *)x + s->track_off) + freed;
}

static size_t orig_size(struct uslab_cache *s, void *x)
{
	return (s->debug & DBG_Z) ? *(size_t *)((char *)x + s->orig_off) : s->object_size;
}

static void set_track(struct uslab_cache *s, void *x, bool freed, void *caller)
{
	struct track *t = track(s, x, freed);
	t->addr = caller;
	t->when = os_real_ms();
	t->tid = (int)gettid();
	t->cpu = 0;
}

/* Red zones of x to `v`: left zone and [orig size, meta_off). */
static void set_redzones(struct uslab_cache *s, void *x, int v)
{
	memset((char *)x - s->red_left_pad, v, s->red_left_pad);
	size_t o = orig_size(s, x);
	memset((char *)x + o, v, s->meta_off - o);
}

static void poison(struct uslab_cache *s, void *x)
{
	memset(x, POISON_FREE, s->object_size - 1);
	((unsigned char *)x)[s->object_size - 1] = POISON_END;
}

void debug_init_slab(struct uslab_cache *s, struct slab *slab)
{
	char *first = slab_first(s, slab);
	for (unsigned i = 0; i < slab->objects; i++) {
		char *x = first + (size_t)i * s->size;
		if (s->debug & DBG_Z) {
			*(size_t *)(x + s->orig_off) = s->object_size;
			set_redzones(s, x, RED_INACTIVE);
		}
		if (s->debug & DBG_P)
			poison(s, x);
		if (s->debug & DBG_U)
			memset(track(s, x, false), 0, 2 * sizeof(struct track));
	}
}

/* ---- reports --------------------------------------------------------------- */

static void dump(const char *label, const unsigned char *p, size_t n)
{
	char line[128];
	for (size_t i = 0; i < n; i += 16) {
		size_t k = fmt_buf(line, sizeof line, "%-8s %p:", label, (const void *)(p + i));
		for (size_t j = i; j < n && j < i + 16; j++)
			k += fmt_buf(line + k, sizeof line - k, " %02x", p[j]);
		report_line("%s", line);
		label = "";
	}
}

static void print_track(struct uslab_cache *s, void *x, bool freed)
{
	struct track *t = track(s, x, freed);
	if (!t->addr)
		return;
	uint64_t now = os_real_ms();
	report_line("INFO: %s in %p age=%lums tid=%d", freed ? "Freed" : "Allocated", t->addr,
		    (unsigned long)(now - t->when), t->tid);
}

/* The kernel's object report: a BUG line naming the cache and the problem,
 * INFO lines, the bytes around the damage, and what is done about it. */
static void object_report(struct uslab_cache *s, struct slab *slab, void *x, const char *bug,
			  const unsigned char *fault, unsigned expect)
{
	char *first = slab_first(s, slab);
	uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_relaxed);
	report_line("=============================================================================");
	report_line("BUG %s: %s", s->name, bug);
	report_line("-----------------------------------------------------------------------------");
	if (fault) {
		/* the damaged run, within the region the fault is in */
		const unsigned char *o = x, *lim = fault < o ? o : fault < o + s->object_size ? o + s->object_size
											   : o + s->meta_off;
		const unsigned char *end = fault;
		while (end < lim && *end != expect)
			end++;
		report_line("INFO: %p-%p @offset=%ld. First byte 0x%x instead of 0x%x", (const void *)fault,
			    (const void *)(end > fault ? end - 1 : fault), (long)(fault - (const unsigned char *)x),
			    *fault, expect);
	}
	report_line("INFO: Slab %p objects=%u used=%u fp=%p", (void *)slab_base(slab), slab->objects,
		    fc_inuse(fc), fc_freelist(fc, slab));
	report_line("INFO: Object %p @offset=%lu (object %lu of the slab)", x,
		    (unsigned long)((char *)x - (char *)slab_base(slab)),
		    (unsigned long)(((char *)x - first) / s->size));
	if (s->debug & DBG_U) {
		print_track(s, x, false);
		print_track(s, x, true);
	}
	if (s->red_left_pad)
		dump("Redzone", (unsigned char *)x - s->red_left_pad, s->red_left_pad);
	size_t show = MIN((size_t)s->object_size, 64);
	if (fault && fault >= (const unsigned char *)x + show && fault < (const unsigned char *)x + s->object_size) {
		dump("Object", x, 32);   /* the start, then the damage */
		size_t from = (size_t)(fault - (const unsigned char *)x) & ~(size_t)15;
		dump("Object", (unsigned char *)x + from, MIN((size_t)32, s->object_size - from));
	} else {
		dump("Object", x, show);
	}
	size_t o = orig_size(s, x);
	if (s->meta_off > o)
		dump("Redzone", (unsigned char *)x + o, s->meta_off - o);
}

/* After an object report: abort with the one-line summary every uslab
 * misuse report ends with, or with report_continue leak the object. */
void debug_report_done(struct uslab_cache *s, const void *x, const char *bug)
{
	if (!opt.report_continue) {
		report_line("FIX %s: aborting (USLAB_OPTIONS=report_continue reports and leaks instead)", s->name);
		report_fatal("%s at %p (cache '%s')", bug, x, s->name);
	}
	report_line("FIX %s: object %p leaked, continuing", s->name, x);
}

/* First byte of [p, p+n) that is not v, or NULL. */
static const unsigned char *find_not(const void *p, int v, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		if (b[i] != (unsigned char)v)
			return b + i;
	return NULL;
}

/* Red zones of x hold v? Returns the first bad byte or NULL. */
static const unsigned char *check_redzones(struct uslab_cache *s, void *x, int v)
{
	const unsigned char *bad = find_not((char *)x - s->red_left_pad, v, s->red_left_pad);
	if (bad)
		return bad;
	size_t o = orig_size(s, x);
	if (o > s->object_size)   /* the size word itself was overwritten */
		return (const unsigned char *)x + s->orig_off;
	return find_not((char *)x + o, v, s->meta_off - o);
}

static const unsigned char *check_poison(struct uslab_cache *s, void *x)
{
	const unsigned char *bad = find_not(x, POISON_FREE, s->object_size - 1);
	if (bad)
		return bad;
	const unsigned char *last = (const unsigned char *)x + s->object_size - 1;
	return *last == POISON_END ? NULL : last;
}

/* Is x on the slab's free list? Reports a corrupt list (and returns true,
 * so the caller does not touch it) as the kernel's on_freelist(). */
static bool on_freelist(struct uslab_cache *s, struct slab *slab, void *x, bool *corrupt)
{
	uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_relaxed);
	unsigned n = 0;
	*corrupt = false;
	for (void *p = fc_freelist(fc, slab); p; p = get_freepointer(s, p)) {
		if (p == x)
			return true;
		if (slab_of(p) != slab || !slab_obj_valid(s, slab, p) || ++n > slab->objects) {
			object_report(s, slab, x, "Freelist corrupt", NULL, 0);
			*corrupt = true;
			return true;
		}
	}
	return false;
}

/* ---- allocation and free ------------------------------------------------------ */

/* Checks on an object just taken off the free list: NULL if it is sound,
 * else what is wrong (reported). */
static const char *alloc_checks(struct uslab_cache *s, struct slab *slab, void *x)
{
	const unsigned char *bad;
	const char *bug = NULL;
	if ((s->debug & DBG_P) && (bad = check_poison(s, x))) {
		bug = "Poison overwritten (write after free)";
		object_report(s, slab, x, bug, bad,
			      bad == (unsigned char *)x + s->object_size - 1 ? POISON_END : POISON_FREE);
	} else if ((s->debug & DBG_Z) && (bad = check_redzones(s, x, RED_INACTIVE))) {
		bug = "Redzone overwritten (free object)";
		object_report(s, slab, x, bug, bad, RED_INACTIVE);
	}
	return bug;
}

const char *debug_alloc_hook(struct uslab_cache *s, struct slab *slab, void *x, size_t asked, void *caller)
{
	const char *bug = alloc_checks(s, slab, x);
	if (bug) {
		/* With report_continue the bad object stays allocated (leaked):
		 * make it look allocated to validation. */
		if (s->debug & DBG_Z) {
			*(size_t *)((char *)x + s->orig_off) = s->object_size;
			set_redzones(s, x, RED_ACTIVE);
		}
		return bug;
	}
	if (s->debug & DBG_Z) {
		/* kmalloc: the class's slack past the size asked for is red zone */
		*(size_t *)((char *)x + s->orig_off) = asked && asked < s->object_size ? asked : s->object_size;
		set_redzones(s, x, RED_ACTIVE);
	}
	if (s->debug & DBG_U)
		set_track(s, x, false, caller);
	if (s->debug & DBG_T) {
		uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_relaxed);
		report_line("TRACE %s alloc %p inuse=%u fp=%p caller=%p", s->name, x, fc_inuse(fc),
			    fc_freelist(fc, slab), caller);
	}
	return NULL;
}

const char *debug_free_hook(struct uslab_cache *s, struct slab *slab, void *x, void *caller)
{
	const unsigned char *bad;
	const char *bug = NULL;
	bool corrupt;
	static const char double_free[] = "Object already free (double free)";
	uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_acquire);
	if ((s->debug & DBG_Z) && !find_not((char *)x - s->red_left_pad, RED_INACTIVE, s->red_left_pad) &&
	    !check_redzones(s, x, RED_INACTIVE)) {
		object_report(s, slab, x, bug = double_free, NULL, 0);
		return bug;
	}
	if ((s->debug & DBG_F) && on_freelist(s, slab, x, &corrupt)) {
		bug = corrupt ? "Freelist corrupt" : double_free;
		if (!corrupt)
			object_report(s, slab, x, bug, NULL, 0);
		return bug;
	}
	if ((s->debug & DBG_Z) && (bad = check_redzones(s, x, RED_ACTIVE))) {
		bug = bad < (const unsigned char *)x ? "Left Redzone overwritten" : "Right Redzone overwritten";
		object_report(s, slab, x, bug, bad, RED_ACTIVE);
		return bug;
	}
	if (fc_freelist(fc, slab) == x || !fc_inuse(fc)) {
		object_report(s, slab, x, bug = double_free, NULL, 0);
		return bug;
	}
	if (s->debug & DBG_U)
		set_track(s, x, true, caller);
	if (s->debug & DBG_Z)   /* a free object has no size asked: all of it is object */
		*(size_t *)((char *)x + s->orig_off) = s->object_size;
	if (s->debug & DBG_P)
		poison(s, x);
	if (s->debug & DBG_Z)
		set_redzones(s, x, RED_INACTIVE);
	if (s->debug & DBG_T)
		report_line("TRACE %s free %p inuse=%u caller=%p", s->name, x, fc_inuse(fc) - 1, caller);
	return NULL;
}

void debug_set_orig_size(struct uslab_cache *s, void *x, size_t size)
{
	s = cache_root(s);
	if (!(s->debug & DBG_Z))
		return;
	size = MIN(size, (size_t)s->object_size);
	pthread_mutex_lock(&s->node.list_lock);
	*(size_t *)((char *)x + s->orig_off) = size;
	if (size < s->object_size)
		memset((char *)x + size, RED_ACTIVE, s->object_size - size);
	pthread_mutex_unlock(&s->node.list_lock);
}

size_t debug_obj_size(struct uslab_cache *s, void *x)
{
	s = cache_root(s);
	return orig_size(s, x);
}

/* ---- validation and leak reports ---------------------------------------------- */

struct walk {
	struct uslab_cache *s;
	long problems;
	bool live_report;
	unsigned live_shown;
	unsigned long live_more;
};

/* Mark the slab's free objects in `free`; false if the list is corrupt. */
static bool free_map(struct uslab_cache *s, struct slab *slab, uint64_t *free)
{
	memset(free, 0, ((slab->objects + 63) / 64) * 8);
	uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_relaxed);
	char *first = slab_first(s, slab);
	unsigned n = 0;
	for (void *p = fc_freelist(fc, slab); p; p = get_freepointer(s, p)) {
		if (slab_of(p) != slab || !slab_obj_valid(s, slab, p) || ++n > slab->objects)
			return false;
		size_t i = (size_t)((char *)p - first) / s->size;
		if (free[i / 64] & (1ULL << (i % 64)))
			return false;   /* a loop */
		free[i / 64] |= 1ULL << (i % 64);
	}
	return n + fc_inuse(fc) == slab->objects;
}

static void walk_slab(struct slab *slab, void *arg)
{
	struct walk *w = arg;
	struct uslab_cache *s = w->s;
	if (slab->cache != s)
		return;
	uint64_t free[(SLAB_MAX_OBJECTS + 63) / 64];
	if (!free_map(s, slab, free)) {
		w->problems++;
		object_report(s, slab, slab_first(s, slab), "Freelist corrupt or counters disagree", NULL, 0);
		return;
	}
	char *first = slab_first(s, slab);
	for (unsigned i = 0; i < slab->objects; i++) {
		char *x = first + (size_t)i * s->size;
		bool is_free = free[i / 64] & (1ULL << (i % 64));
		if (w->live_report) {
			if (is_free)
				continue;
			if (w->live_shown++ < 16) {
				struct track *t = track(s, x, false);
				report_line("INFO: live object %p allocated in %p age=%lums tid=%d", x, t->addr,
					    (unsigned long)(os_real_ms() - t->when), t->tid);
			} else {
				w->live_more++;
			}
			continue;
		}
		const unsigned char *bad = NULL;
		const char *what = NULL;
		unsigned expect = 0;
#if defined(USLAB_TRACK_ASAN)
		if (is_free)   /* validation reads free objects' poison */
			track_alloc(x, s->object_size);
#endif
		if (is_free && (s->debug & DBG_P) && (bad = check_poison(s, x))) {
			what = "Poison overwritten (write after free)";
			expect = bad == (unsigned char *)x + s->object_size - 1 ? POISON_END : POISON_FREE;
		} else if ((s->debug & DBG_Z) && (bad = check_redzones(s, x, is_free ? RED_INACTIVE : RED_ACTIVE))) {
			what = bad < (const unsigned char *)x ? "Left Redzone overwritten" : "Right Redzone overwritten";
			expect = is_free ? RED_INACTIVE : RED_ACTIVE;
		}
		if (what) {
			w->problems++;
			object_report(s, slab, x, what, bad, expect);
		}
#if defined(USLAB_TRACK_ASAN)
		if (is_free)
			track_free(x, s->object_size);
#endif
	}
}

long debug_validate_locked(struct uslab_cache *s)
{
	struct walk w = { .s = s };
	page_for_each_slab(walk_slab, &w);
	return w.problems;
}

void debug_report_live(struct uslab_cache *s)
{
	if (!(s->debug & DBG_U))
		return;   /* no call sites to say */
	struct walk w = { .s = s, .live_report = true };
	pthread_mutex_lock(&s->node.list_lock);
	page_for_each_slab(walk_slab, &w);
	pthread_mutex_unlock(&s->node.list_lock);
	if (w.live_more)
		report_line("INFO: ... and %lu more live objects", w.live_more);
}

/* ---- slab_freelist_random ------------------------------------------------------ */

void debug_random_seq(struct uslab_cache *s)
{
	if (!opt.freelist_random)
		return;
	unsigned n = oo_objects(cache_oo(s));
	unsigned order = 0;
	while ((PAGE_SIZE << order) < n * sizeof(uint16_t))
		order++;
	uint16_t *seq = page_alloc(order);
	if (!seq)
		return;   /* then new slabs use the random-stride order */
	for (unsigned i = 0; i < n; i++)
		seq[i] = (uint16_t)i;
	uint64_t r = os_random();
	for (unsigned i = n - 1; i > 0; i--) {
		r = r * 6364136223846793005ULL + 1442695040888963407ULL;
		unsigned j = (unsigned)((r >> 33) % (i + 1));
		uint16_t t = seq[i];
		seq[i] = seq[j];
		seq[j] = t;
	}
	s->random_seq = seq;
	s->random_seq_len = n;
}

void debug_cache_release(struct uslab_cache *s)
{
	if (s->random_seq) {
		page_free(s->random_seq);
		s->random_seq = NULL;
	}
}
