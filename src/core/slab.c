/*
 * The slab core: the slab word, the node partial list, new and discarded
 * slabs, taking objects off slabs in bulk (sheaf refills), giving them back
 * grouped by slab (sheaf flushes, bulk frees), the general free of a chain
 * to its slab, the dispatch of the slow paths to the per-CPU layer of the
 * cache's mode (sheaf.c or classic.c), and the node-locked path that debug
 * caches take for everything (with debug.c's hooks).
 *
 * Lock order and what protects what (after mm/slub.c):
 *
 *   cache_mutex (cache.c)       cache list, ids, CPU-part lists, folding stats
 *     node->list_lock           node partial list, nr_partial, slab->on_node;
 *                               slab mode's full/partial/free lists and their
 *                               slabs' inuse, bitmaps and index lists
 *                               (cpu/array.c), one node's at a time
 *       slab->fc CAS            a slab's free list, inuse and frozen together
 *         page lock (page.c)    free page blocks, segments
 *   node->barn.lock (sheaf.c)   the barn's sheaf lists (slab mode's shared
 *                               array too): a leaf, never held with any other
 *
 * No lock is held across a call into the page allocator's OS layer; the
 * page lock itself is dropped before the OS is asked for a segment.
 *
 * Slab states. Sheaves never freeze a slab: a slab is on the node partial
 * list (on_node, some objects free), or full and on no list; its objects
 * may sit in any number of sheaves, counted as in use. In classic mode a
 * slab may also be frozen: some CPU part's CPU slab or on its CPU partial
 * list; only that part allocates from it or moves it, others only push
 * freed objects onto its list by CAS. Both kinds coexist while a cache's
 * sheaf_capacity is changed at run time: every path here handles both.
 *
 * Which transitions take the node lock: full -> partial (listing it) and
 * partial -> empty beyond min_partial (unlisting and discarding it), both
 * for unfrozen slabs; a free that changes no list is one CAS and no lock.
 * The lock is taken before the CAS, so that a refill (which takes listed
 * slabs' lists under the lock) never races with a discard.
 *
 * SLAB-format slabs (slab mode, cpu/array.c: otag SLAB_TAG_ARRAY) are on
 * none of the lists here, never frozen nor owned; their words change only
 * under the node lock (plain relaxed stores of inuse). Every path here
 * that gives objects back to their slab (slab_free_chain,
 * slab_free_objects) sends a SLAB-format slab's objects to array.c, so
 * that parts of other modes (a mode change in progress, a thread without
 * a part) free them right; allocation here never takes one.
 *
 * Memory ordering: the fc CAS is acq_rel. A releasing CAS publishes the
 * free pointers written into objects before it; the acquiring CAS that
 * takes the list makes those writes visible to the taker.
 */
#include "slab.h"

#include <errno.h>
#include <string.h>


/*
 * The slab word is always changed by a locked compare-and-swap, also in a
 * process with one thread: a thread made with raw clone(CLONE_VM) is not
 * counted by glibc's __libc_single_threaded, so eliding the atomic there
 * (as glibc's malloc does) would race with it. With sheaves the word changes
 * once per refill or flush of a sheaf, not per object, so this costs next to
 * nothing. (Such threads are still unsupported: they share the creating
 * thread's TLS, and with it its CPU parts. README.)
 */
bool slab_cas(struct slab *slab, uint64_t *old, uint64_t new)
{
	os_sched_point();   /* between the caller's decision and its CAS */
	bool ok = atomic_compare_exchange_weak_explicit(&slab->fc, old, new, memory_order_acq_rel,
							memory_order_acquire);
	os_sched_point();   /* after it, before what the caller reads next */
	return ok;
}

void slab_node_lock(struct uslab_cache *s, struct cpu_cache *c)
{
	slab_lock_spin(&s->node.list_lock);
	core_stat_inc(s, c, USLAB_STAT_NODE_LOCK);
}

void slab_node_unlock(struct uslab_cache *s)
{
	pthread_mutex_unlock(&s->node.list_lock);
	os_sched_point();
}

/* ---- reports ----------------------------------------------------------- */

_Noreturn void slab_bad_free(struct uslab_cache *s, struct slab *slab, const void *x, const char *why)
{
	if (slab_kind(slab) == SK_SLAB && slab->cache && slab->cache != cache_root(s))
		report_fatal("wrong cache: free of %p to cache '%s', but it belongs to cache '%s'", x,
			     s->name, slab->cache->name);
	if (page_is_freed(x))   /* its slab was given back: a double free, or a stale pointer */
		report_fatal("free of a freed block at %p (cache '%s': its slab's pages are free)", x, s->name);
	report_fatal("%s at %p (cache '%s')", why, x, s->name);
}

_Noreturn void slab_bad_freelist(struct uslab_cache *s, const void *obj, const void *next)
{
	report_fatal("corrupted freelist: free pointer of %p decodes to %p, not an object of its slab (cache '%s')",
		     obj, next, s->name);
}

void *slab_freelist_corrupt(struct uslab_cache *s, const void *obj, const void *next)
{
	slab_bad_freelist(s, obj, next);
}

void fp_double_free(struct uslab_cache *s, struct slab *slab, void *x)
{
	void *v = get_freepointer(s, x);
	struct slab *d;
	if (!v || ((d = slab_of(v)) != &slab_foreign && slab_kind(d) == SK_SLAB && d->cache == s->real &&
		   slab_obj_valid(s->real, d, v)))
		slab_bad_free(s, slab, x, "double free");
	/* noise that passed the filter: the object is live */
}

void *slab_hand_out(struct uslab_cache *s, void *x)
{
	if (unlikely(opt.hardened) && x && !s->internal && !live_set(x))
		report_fatal("object %p of cache '%s' handed out while it is live: allocator state corrupted", x,
			     s->name);
	return x;
}

/* ---- node partial list (list_lock held) ------------------------------ */

/* A slab is on at most one list: listing a listed or frozen slab would
 * corrupt two lists at once (cheap checks, always on). */
static _Noreturn COLD void bad_list_state(struct slab *slab, const char *what)
{
	report_fatal("slab %p of cache '%s': %s (on_node %u, word 0x%llx)", slab_base(slab),
		     slab->cache ? slab->cache->name : "?", what, slab->on_node,
		     (unsigned long long)atomic_load_explicit(&slab->fc, memory_order_relaxed));
}

void add_partial_locked(struct node *n, struct slab *slab, bool tail)
{
	if (unlikely(slab->on_node || fc_frozen(atomic_load_explicit(&slab->fc, memory_order_relaxed))))
		bad_list_state(slab, "listed twice or listed while frozen");
	slab->on_node = 1;
	if (tail) {
		slab->next = NULL;
		slab->prev = n->partial_tail;
		if (n->partial_tail)
			n->partial_tail->next = slab;
		else
			n->partial_head = slab;
		n->partial_tail = slab;
	} else {
		slab->prev = NULL;
		slab->next = n->partial_head;
		if (n->partial_head)
			n->partial_head->prev = slab;
		else
			n->partial_tail = slab;
		n->partial_head = slab;
	}
	atomic_store_explicit(&n->nr_partial, atomic_load_explicit(&n->nr_partial, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

void remove_partial_locked(struct node *n, struct slab *slab)
{
	if (unlikely(!slab->on_node))
		bad_list_state(slab, "unlisted while not listed");
	if (slab->prev)
		slab->prev->next = slab->next;
	else
		n->partial_head = slab->next;
	if (slab->next)
		slab->next->prev = slab->prev;
	else
		n->partial_tail = slab->prev;
	slab->next = slab->prev = NULL;
	slab->on_node = 0;
	atomic_store_explicit(&n->nr_partial, atomic_load_explicit(&n->nr_partial, memory_order_relaxed) - 1,
			      memory_order_relaxed);
}

static inline unsigned long nr_partial(struct node *n)
{
	return atomic_load_explicit(&n->nr_partial, memory_order_relaxed);
}

/* ---- slabs from and to the page allocator ---------------------------- */

/* The record of a new slab's block (at addr, 2^order pages, order >=
 * SLAB_MIN_ORDER, not yet published): its later slots get SK_TAIL records
 * pointing back to it (page.h). */
static struct slab *claim_records(void *addr, unsigned order)
{
	struct segment *seg = page_segment(addr);
	unsigned i = (unsigned)(((uintptr_t)addr & SEG_MASK) >> SLOT_SHIFT);
	unsigned n = 1U << (order - SLAB_MIN_ORDER);
	for (unsigned k = 1; k < n; k++) {
		seg->slab[i + k].back = (uint8_t)k;
		atomic_store_explicit(&seg->slab[i + k].kind, SK_TAIL, memory_order_release);
	}
	struct slab *d = &seg->slab[i];
	d->order = (uint8_t)order;
	return d;
}

/* A slab's records say "no slab" again, before its block goes back. */
static void release_records(struct slab *d)
{
	unsigned n = 1U << (d->order - SLAB_MIN_ORDER);
	atomic_store_explicit(&d->kind, SK_NONE, memory_order_relaxed);
	atomic_store_explicit(&d->otag, 0, memory_order_relaxed);
	d->cache = NULL;
	for (unsigned k = 1; k < n; k++)
		atomic_store_explicit(&d[k].kind, SK_NONE, memory_order_relaxed);
}

static struct slab *alloc_slab_pages(struct uslab_cache *s, struct cpu_cache *c, unsigned *objects)
{
	uint32_t oo = cache_oo(s);
	unsigned order = oo_order(oo);
	void *addr = page_alloc(order);
	*objects = oo_objects(oo);
	if (unlikely(!addr) && s->min_order < order) {
		order = s->min_order;
		addr = page_alloc(order);
		*objects = s->min_objects;
		if (addr)
			core_stat_inc(s, c, USLAB_STAT_ORDER_FALLBACK);
	}
	return addr ? claim_records(addr, order) : NULL;
}

/* Index of the i-th object on a new slab's free list: in address order, or
 * shuffled (slab_freelist_random): the cache's random sequence from a
 * random start, or, for a slab of another size (order fallback), a random
 * stride that is coprime with the object count. */
struct order_walk {
	const uint16_t *seq;
	unsigned n, start, step;
};

static void order_walk_init(struct uslab_cache *s, unsigned objects, struct order_walk *w)
{
	w->seq = NULL;
	w->n = objects;
	w->start = 0;
	w->step = 1;
	if (!opt.freelist_random || objects < 2)
		return;
	uint64_t r = (uint64_t)os_now_ms() * 0x9e3779b97f4a7c15ULL ^ (uintptr_t)&w ^ s->fp_key;
	r ^= r >> 29;
	w->start = (unsigned)(r % objects);
	if (s->random_seq && s->random_seq_len == objects) {
		w->seq = s->random_seq;
		return;
	}
	unsigned step = (unsigned)((r >> 32) % objects) | 1;
	for (;; step += 2) {
		unsigned a = step % objects, b = objects;
		while (b) {
			unsigned t = a % b;
			a = b;
			b = t;
		}
		if (a == 1)
			break;
	}
	w->step = step % objects ? step % objects : 1;   /* < objects: order_walk_next adds it mod n */
}

/* The next index of the walk (no division: k advances by step mod n). */
static inline unsigned order_walk_next(const struct order_walk *w, unsigned *k)
{
	unsigned idx = w->seq ? w->seq[*k] : *k;
	*k += w->step;
	if (*k >= w->n)
		*k -= w->n;
	return idx;
}

/* Initialize the next objects of slab d (held by the caller), at least
 * `want` (or what is left) and whole chunks, CARVE_STEP at least: the
 * constructor, tracking. Returns how many, the first one's index in
 * *first. */
static unsigned carve_range(struct uslab_cache *s, struct slab *d, unsigned want, unsigned *first)
{
	unsigned per = slab_chunk_objs(d), from = slab_carved(d);
	unsigned chunks = MAX((want + per - 1) / per, (unsigned)CARVE_STEP);
	unsigned to_chunk = MIN(slab_carve_chunks(d) + chunks, (unsigned)CARVE_CHUNKS);
	unsigned to = MIN(to_chunk * per, (unsigned)d->objects);
	char *base = slab_first(s, d);
	for (unsigned i = from; s->ctor && i < to; i++)
		s->ctor(base + (size_t)i * s->size);
	for (unsigned i = from; USLAB_TRACKED && i < to; i++)
		track_new(base + (size_t)i * s->size, s->object_size);
	__atomic_store_n(&d->carve, (uint8_t)(to == d->objects ? CARVE_CHUNKS : to_chunk), __ATOMIC_RELAXED);
	*first = from;
	return to - from;
}

unsigned slab_carve(struct uslab_cache *s, struct slab *d, unsigned want, void **head, void **tail)
{
	*head = *tail = NULL;
	if (!slab_uncarved(d))
		return 0;
	unsigned first, n = carve_range(s, d, want, &first);
	char *base = slab_first(s, d);
	for (unsigned i = 0; i < n; i++)   /* in address order */
		set_freepointer(s, base + (size_t)(first + i) * s->size,
				i + 1 < n ? base + (size_t)(first + i + 1) * s->size : NULL);
	*head = base + (size_t)first * s->size;
	*tail = base + (size_t)(first + n - 1) * s->size;
	return n;
}

/*
 * A new slab from the page allocator. The first `direct` objects (in the
 * free-list order) are handed out at once: written to direct_objs[], never
 * linked (their words set to `word`: FP_TAKEN for the caller, the
 * double-free mark for a sheaf). Some more are carved onto one free list
 * (all of them in debug caches, caches with a constructor (SLUB's rule:
 * every object is constructed when its slab is made), tracked builds and
 * with slab_freelist_random; else a step's worth: "carving", slab.h): the
 * caller's (*chain, for classic part c: frozen, inuse = objects) or the
 * slab's own (chain NULL: unfrozen, inuse = direct). Runs the constructor
 * on every object it carves and sets up debug state.
 */
static struct slab *new_slab(struct uslab_cache *s, struct cpu_cache *c, void **chain, void **direct_objs,
			     unsigned *direct, void *word)
{
	unsigned objects;
	struct slab *slab = alloc_slab_pages(s, c, &objects);
	if (!slab)
		return NULL;
	slab->colour = 0;
	char *first = slab_first(s, slab);
	slab->cache = s;
	slab->cid = (uint16_t)s->id;
	slab->objects = (uint16_t)objects;
	slab->on_node = 0;
	slab->carve = 0;
	slab->next = slab->prev = NULL;
	slab->lfree = NULL;
	slab->pfree = 0;
	atomic_store_explicit(&slab->owner, NULL, memory_order_relaxed);
	atomic_store_explicit(&slab->otag, 0, memory_order_relaxed);
	if (s->debug)
		core_hooks.debug_init_slab(s, slab);
	unsigned nd = direct ? MIN(*direct, objects) : 0;
	char *head = NULL, *prev = NULL;
	if (s->debug || s->ctor || opt.freelist_random || USLAB_TRACKED) {
		/* everything now, in the walk's order */
		unsigned from;
		carve_range(s, slab, objects, &from);
		struct order_walk w;
		unsigned k;
		order_walk_init(s, objects, &w);
		k = w.start;
		/* handed out: in reverse, so that a sheaf popping its top hands
		 * them out in free-list (address) order */
		for (unsigned i = 0; i < nd; i++) {
			char *x = first + (size_t)order_walk_next(&w, &k) * s->size;
			set_freepointer(s, x, word);   /* (a reused page may hold old links) */
			direct_objs[nd - 1 - i] = x;
		}
		for (unsigned i = nd; i < objects; i++) {
			char *x = first + (size_t)order_walk_next(&w, &k) * s->size;
			if (prev)
				set_freepointer(s, prev, x);
			else
				head = x;
			prev = x;
		}
	} else {
		/* the direct ones and a step more, in address order */
		unsigned from, n = carve_range(s, slab, nd + 1, &from);
		for (unsigned i = 0; i < nd; i++) {
			char *x = first + (size_t)(from + i) * s->size;
			set_freepointer(s, x, word);
			direct_objs[nd - 1 - i] = x;
		}
		for (unsigned i = nd; i < n; i++) {
			char *x = first + (size_t)(from + i) * s->size;
			if (prev)
				set_freepointer(s, prev, x);
			else
				head = x;
			prev = x;
		}
	}
	if (prev)
		set_freepointer(s, prev, NULL);
	if (direct)
		*direct = nd;
	if (chain) {
		atomic_store_explicit(&slab->fc, fc_make(NULL, objects, true), memory_order_relaxed);
		*chain = head;
	} else {
		atomic_store_explicit(&slab->fc, fc_make(head, nd, false), memory_order_relaxed);
	}
	atomic_fetch_add_explicit(&s->node.nr_slabs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->node.total_objects, objects, memory_order_relaxed);
	core_stat_inc(s, c, USLAB_STAT_ALLOC_SLAB);
	/* kind last: from here on, lookups of these pages find a slab */
	atomic_store_explicit(&slab->kind, SK_SLAB, memory_order_release);
	return slab;
}

struct slab *slab_new(struct uslab_cache *s, struct cpu_cache *c, void **chain)
{
	return new_slab(s, c, chain, NULL, NULL, NULL);
}

void slab_discard(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	atomic_fetch_sub_explicit(&s->node.nr_slabs, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&s->node.total_objects, slab->objects, memory_order_relaxed);
	core_stat_inc(s, c, USLAB_STAT_FREE_SLAB);
	if (slab_is_array(slab)) {   /* the block's next use starts unmarked */
		atomic_fetch_sub_explicit(&s->array.nr_slabs, 1, memory_order_relaxed);
		slab->colour = 0;
	}
	void *addr = slab_address(slab);
	release_records(slab);
	track_release(addr, PAGE_SIZE << slab->order);
	page_free(addr);
}

struct slab *slab_new_array(struct uslab_cache *s, struct cpu_cache *c, unsigned order, unsigned objects,
			    unsigned colour)
{
	void *addr = page_alloc(order);
	if (!addr)
		return NULL;
	struct slab *slab = claim_records(addr, order);
	slab->colour = (uint16_t)colour;
	char *first = slab_first(s, slab);
	slab->cache = s;
	slab->cid = (uint16_t)s->id;
	slab->objects = (uint16_t)objects;
	slab->on_node = 0;
	slab->carve = CARVE_CHUNKS;   /* index lists: nothing is written into a free object */
	slab->next = slab->prev = NULL;
	slab->lfree = NULL;
	slab->pfree = 0;
	atomic_store_explicit(&slab->owner, NULL, memory_order_relaxed);
	atomic_store_explicit(&slab->otag, SLAB_TAG_ARRAY, memory_order_relaxed);
	atomic_store_explicit(&slab->fc, fc_make(NULL, 0, false), memory_order_relaxed);
	if (s->ctor)
		for (unsigned i = 0; i < objects; i++)
			s->ctor(first + (size_t)i * s->size);
	for (unsigned i = 0; USLAB_TRACKED && i < objects; i++)
		track_new(first + (size_t)i * s->size, s->object_size);
	atomic_fetch_add_explicit(&s->node.nr_slabs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->node.total_objects, objects, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->array.nr_slabs, 1, memory_order_relaxed);
	core_stat_inc(s, c, USLAB_STAT_ALLOC_SLAB);
	return slab;
}

void slab_publish(struct slab *slab)
{
	/* release: a walker that sees the kind sees the fields */
	atomic_store_explicit(&slab->kind, SK_SLAB, memory_order_release);
}

/* ---- taking objects in bulk (sheaf refills, bulk allocation) ----------- */

/* The next object of a list being taken: NULL or an object of the slab. */
static inline void *take_next(struct uslab_cache *s, struct slab *slab, void *x)
{
	void *next = get_freepointer(s, x);
	if (unlikely(next && !slab_obj_valid(s, slab, next)))
		slab_bad_freelist(s, x, next);
	return next;
}

/*
 * Take up to `want` objects of a listed slab, as SLUB's acquire_slab and
 * deactivate do: unlist it and take its whole list frozen (under the node
 * lock), walk the list with the lock dropped, then unfreeze it with what we
 * did not take and what others freed meanwhile (under the lock again),
 * listing it if that is anything. While it is frozen and on no list the
 * slab is ours alone: frees to it only push by CAS (a frozen slab is never
 * listed, discarded or frozen onto a classic CPU partial list by a free),
 * and no other taker can reach it. The walk is the expensive part: each
 * step loads the next object's word, a cache miss when the slab's free
 * objects are cold (77 % of this function's samples on SmartHeap 8's
 * pattern), and the carve may fault pages in; done under the lock, other
 * threads' slow paths slept on it. A fork while a thread walks leaves the
 * child that slab frozen on no list: it leaks there, as a vanished thread's
 * part busy in a slow path does (tls.c). Objects go to objs[] so that the
 * list's head is on top (popped first: it is the most recently freed).
 * Called with the node lock held and returns with it held; `slab` is the
 * node's first partial slab. Returns how many.
 */
static unsigned take_listed(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void **objs,
			    unsigned want, void *word)
{
	struct node *n = &s->node;
	remove_partial_locked(n, slab);
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	void *fl;
	do
		fl = fc_freelist(old, slab);
	while (!slab_cas(slab, &old, fc_make(NULL, slab->objects, true)) &&
	       (core_stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL), 1));
	slab_node_unlock(s);

	/* avail: the list's objects and the uncarved ones, ours now */
	unsigned avail = slab->objects - fc_inuse(old), listed = avail - slab_uncarved(slab), k = 0;
	/* The walk, with what it reads of s and the slab in locals (the
	 * stores into objects could alias a byte field, so the compiler
	 * reloads them each step otherwise); take_next()'s check inline.
	 * objs[] fills from want - 1 down, so that the head ends on top. */
	const uintptr_t first = (uintptr_t)slab_first(s, slab);
	const uint32_t inv = s->divinv, dk = s->divk, objects = slab->objects;
	const unsigned fpo = s->offset;
	void **top = objs + want;
	void *p = fl;
	while (p && k < want) {
		if (unlikely(k >= listed))   /* longer than its count: a loop or a corrupted count */
			slab_bad_freelist(s, p, get_freepointer(s, p));
		void **where = (void **)((char *)p + fpo);
		uintptr_t mask = fp_mask(s, where);
		void *next = (void *)((uintptr_t)*where ^ mask);
		uintptr_t off = (uintptr_t)next - first;
		if (unlikely(next && !slab_off_ok_by(off, inv, dk, objects)))
			slab_bad_freelist(s, p, next);
		*where = (void *)((uintptr_t)word ^ mask);   /* its line is ours now: see FP_TAKEN */
		*--top = p;
		k++;
		p = next;
	}
	if (unlikely(!p && k != listed))
		report_fatal("slab %p of cache '%s': free list holds %u objects, counters say %u", slab_base(slab),
			     s->name, k, listed);
	if (!p && k < want && slab_uncarved(slab)) {   /* the list ran out: carve more */
		void *h, *t;
		unsigned m = slab_carve(s, slab, want - k, &h, &t);
		while (h && k < want) {
			void *next = get_freepointer(s, h);
			set_freepointer(s, h, word);
			*--top = h;
			k++;
			h = next;
		}
		p = h;   /* carved past `want`: the rest goes back on the list */
		(void)m;
	}
	if (k < want)   /* fewer than asked: down to objs[0] */
		memmove(objs, top, k * sizeof(void *));
	/* Unfreeze with the rest (p..) in front of what was freed meanwhile,
	 * and the uncarved ones given back: under the node lock, so that no
	 * free sees the slab unfrozen and partial before it is listed (a free
	 * that empties it would unlist a slab on no list). The rest's tail is
	 * walked to only when there is something to join it to (rare). */
	unsigned left = avail - k;
	void *tail = NULL, *head;
	slab_node_lock(s, c);
	old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	for (;;) {
		void *prior = fc_freelist(old, slab);
		head = p ? p : prior;
		if (p && prior) {
			if (!tail)
				for (tail = p; get_freepointer(s, tail); tail = get_freepointer(s, tail))
					;
			set_freepointer(s, tail, prior);
		}
		if (unlikely(fc_inuse(old) < left))   /* counted at the take: corrupted since */
			report_fatal("slab %p of cache '%s': inuse %u below the %u objects put back", slab_base(slab),
				     s->name, fc_inuse(old), left);
		if (slab_cas(slab, &old, fc_make(head, fc_inuse(old) - left, false)))
			break;
		core_stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	}
	if (head || slab_uncarved(slab))
		add_partial_locked(n, slab, false);   /* free objects: the next taker's */
	/* else full: on no list (a free lists it again, or freezes it) */
	return k;
}

unsigned slab_take_objects(struct uslab_cache *s, struct cpu_cache *c, void **objs, unsigned want, bool for_sheaf)
{
	void *word = for_sheaf ? NULL : FP_TAKEN;   /* NULL: a link, the mark of a free object */
	struct node *n = &s->node;
	unsigned got = 0;
	if (nr_partial(n)) {   /* racy peek, as SLUB's: a miss only means a new slab */
		slab_node_lock(s, c);
		struct slab *slab;
		while (got < want && (slab = n->partial_head) != NULL) {
			got += take_listed(s, c, slab, objs + got, want - got, word);
			core_stat_inc(s, c, USLAB_STAT_ALLOC_FROM_PARTIAL);
		}
		slab_node_unlock(s);
	}
	/* At most one new slab per call: a refill of a cache of big objects
	 * (one or two per slab) must not map a slab per sheaf entry; the
	 * caller comes back when it needs more. */
	if (got < want) {
		unsigned direct = want - got;
		struct slab *slab = new_slab(s, c, NULL, objs + got, &direct, word);
		if (slab) {
			got += direct;
			if (direct < slab->objects) {   /* objects left: list it for the next taker */
				slab_node_lock(s, c);
				add_partial_locked(n, slab, false);
				slab_node_unlock(s);
			}
		}
	}
	return got;
}

/* ---- freeing to slabs ------------------------------------------------------ */

/* The node lock held across several frees (one batch), and the slabs they
 * emptied, discarded once it is dropped. */
struct lockhold {
	bool locked;
	struct slab *discard;
};

static void hold_release(struct uslab_cache *s, struct cpu_cache *c, struct lockhold *h)
{
	if (h->locked) {
		slab_node_unlock(s);
		h->locked = false;
	}
	while (h->discard) {
		struct slab *slab = h->discard;
		h->discard = slab->next;
		slab_discard(s, c, slab);
	}
}

/*
 * Free the chain head..tail (cnt objects, all of `slab`): one CAS on the
 * slab word. A full unfrozen slab becomes partial (listed) or, with
 * `freeze`, is frozen onto classic part c's partial list with the chain
 * (the 2011 thread: no node lock); an emptied unfrozen slab beyond
 * min_partial is discarded. Double frees the word shows are fatal: a count
 * that would go below zero, the object already at the head.
 */
static void free_chain(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head, void *tail,
		       unsigned cnt, bool freeze, struct lockhold *h)
{
	struct node *n = &s->node;
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	void *prior;
	unsigned inuse;
	bool frozen, listing;
	for (;;) {
		prior = fc_freelist(old, slab);
		frozen = fc_frozen(old);
		inuse = fc_inuse(old);
		if (unlikely(inuse < cnt || prior == head))
			slab_bad_free(s, slab, head, "double free");
		inuse -= cnt;
		/* (a slab with uncarved objects is not full: it is listed) */
		if (freeze && !prior && !frozen && !slab_uncarved(slab)) {
			set_freepointer(s, tail, NULL);
			if (slab_cas(slab, &old, fc_make(head, inuse, true))) {
				if (h->locked) {   /* a drain of the CPU partial list takes it */
					slab_node_unlock(s);
					h->locked = false;
				}
				core_hooks.part_freeze(s, c, slab, cnt);
				core_stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_FREE);
				return;
			}
			core_stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
			continue;
		}
		set_freepointer(s, tail, prior);
		listing = (!inuse || (!prior && !slab_uncarved(slab))) && !frozen;
		if (listing && !h->locked) {
			slab_node_lock(s, c);
			h->locked = true;
		}
		if (slab_cas(slab, &old, fc_make(head, inuse, frozen)))
			break;
		core_stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	}
	if (!listing) {
		if (frozen)
			core_stat_inc(s, c, USLAB_STAT_FREE_FROZEN);
		return;
	}
	/* Partial but not listed: the classic CPU that is deactivating it
	 * will list it (only the thread that unfreezes a slab lists it).
	 * (node lock held: on_node is stable; a slab with uncarved objects
	 * had free objects before this free, as one with a list did) */
	bool listed = slab->on_node;
	if (!listed && (prior || slab_uncarved(slab)))
		return;
	if (!inuse && nr_partial(n) >= TUNE(s, min_partial)) {
		if (listed) {
			remove_partial_locked(n, slab);
			core_stat_inc(s, c, USLAB_STAT_FREE_REMOVE_PARTIAL);
		}
		slab->next = h->discard;
		h->discard = slab;
		return;
	}
	if (!listed) {
		add_partial_locked(n, slab, true);
		core_stat_inc(s, c, USLAB_STAT_FREE_ADD_PARTIAL);
	}
}

void slab_free_chain(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head, void *tail,
		     unsigned cnt, bool freeze)
{
	if (unlikely(slab_is_array(slab))) {   /* its index list: array.c */
		core_hooks.array_free_chain(s, c, slab, head, cnt);
		return;
	}
	struct lockhold h = { 0 };
	free_chain(s, c, slab, head, tail, cnt, freeze, &h);
	hold_release(s, c, &h);
}

/* Sort object pointers by address (shell sort, Ciura's gaps: in place, no
 * recursion, a few hundred compares for a sheaf). */
static void sort_ptrs(void **a, unsigned n)
{
	static const unsigned gaps[] = { 132, 57, 23, 10, 4, 1 };
	for (unsigned g = 0; g < sizeof gaps / sizeof gaps[0]; g++) {
		unsigned gap = gaps[g];
		for (unsigned i = gap; i < n; i++) {
			void *t = a[i];
			unsigned j = i;
			for (; j >= gap && (uintptr_t)a[j - gap] > (uintptr_t)t; j -= gap)
				a[j] = a[j - gap];
			a[j] = t;
		}
	}
}

/*
 * Free objs[0..n) (checked, of cache s) to their slabs: each run of objects
 * of one slab is chained and freed with one CAS. The node lock, when a run
 * needs it, is held for the rest of the batch.
 *
 * Sorting by address first would make every slab's objects one run, but
 * the sort's mispredicted branches cost more than the CASes it saves (a
 * batch of 10,000 objects freed in random order took about twice as long
 * with the sort). So the objects are taken in the order given: an object
 * that comes twice is caught by its free-pointer word (the double-free
 * mark, slab.h), a link since its first run (or since its predecessor in
 * the same run was chained to it). Builds without obfuscation have no mark
 * and sort, so that a duplicate sits next to itself. Permutes objs[] then.
 */
/* Does x's free-pointer word still hold a link of its slab? */
static inline bool fp_is_link(struct uslab_cache *s, struct slab *slab, void *x)
{
	void *v = get_freepointer(s, x);
	return !v || slab_obj_valid(s, slab, v);
}

void slab_free_objects(struct uslab_cache *s, struct cpu_cache *c, void *const *cobjs, unsigned n, bool freeze,
		       bool from_cpu)
{
	void **objs = (void **)cobjs;
	struct lockhold h = { 0 };
	const bool marked = USLAB_HARDENED;
	const bool check = marked && !from_cpu;   /* a sheaf's objects carry the mark: checked as they came in */
	if (!marked)
		sort_ptrs(objs, n);
	for (unsigned i = 0; i < n;) {
		void *x = objs[i];
		struct slab *slab = slab_of(x);
		if (unlikely(slab_is_array(slab))) {   /* a run of SLAB-format slabs' objects: array.c */
			unsigned j = i + 1;
			while (j < n && slab_is_array(slab_of(objs[j])))
				j++;
			hold_release(s, c, &h);   /* (it takes the node lock itself) */
			core_hooks.array_free_objs(s, c, objs + i, j - i, from_cpu);
			i = j;
			continue;
		}
		uintptr_t base = (uintptr_t)slab_address(slab), span = (uintptr_t)slab->objects * s->size;
		const unsigned fpo = s->offset;   /* (in a local: the stores below could alias it) */
		unsigned j = i;
		void *prev = NULL;
		do {
			void *x = objs[j];
			/* already free in its slab (its word is a link), or twice here */
			if (unlikely((check && fp_is_link(s, slab, x)) || x == prev))
				slab_bad_free(s, slab, x, "double free");
			if (prev) {
				void **where = (void **)((char *)prev + fpo);
				*where = (void *)((uintptr_t)x ^ fp_mask(s, where));
			}
			prev = x;
			j++;
		} while (j < n && (uintptr_t)objs[j] - base < span);
		free_chain(s, c, slab, x, objs[j - 1], j - i, freeze, &h);
		i = j;
	}
	hold_release(s, c, &h);
}

/* ---- the debug path: every operation under the node lock --------------- */

/* The word of a debug slab changes only under the node lock: plain stores. */
void *slab_debug_alloc(struct uslab_cache *s, void *caller, enum uslab_stat_item counted_as, size_t asked)
{
	struct node *n = &s->node;
	for (;;) {
		slab_node_lock(s, NULL);
		struct slab *slab = n->partial_head;
		if (!slab) {
			slab_node_unlock(s);   /* not held across the page allocator */
			slab = slab_new(s, NULL, NULL);
			if (!slab) {
				core_stat_inc(s, NULL, USLAB_STAT_ALLOC_FAILED);
				errno = ENOMEM;
				return NULL;
			}
			slab_node_lock(s, NULL);
			add_partial_locked(n, slab, false);
		}
		uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_acquire);
		void *x = fc_freelist(fc, slab);
		void *next = take_next(s, slab, x);
		if (unlikely(fc_inuse(fc) >= slab->objects))
			report_fatal("slab %p of cache '%s': inuse %u with objects on its free list", slab_base(slab),
				     s->name, fc_inuse(fc));
		atomic_store_explicit(&slab->fc, fc_make(next, fc_inuse(fc) + 1, false), memory_order_release);
		if (!next)
			remove_partial_locked(n, slab);   /* full: on no list */
		track_alloc(x, s->object_size);   /* it is being handed out: the checks read it */
		const char *bug = core_hooks.debug_alloc(s, slab, x, asked, caller);
		slab_node_unlock(s);
		core_stat_inc(s, NULL, counted_as);   /* a bad object stays allocated (leaked), counted */
		slab_hand_out(s, x);
		if (!bug)
			return x;
		core_hooks.debug_report_done(s, x, bug);
	}
}

void slab_debug_free(struct uslab_cache *s, struct slab *slab, void *x, void *caller,
		     enum uslab_stat_item counted_as)
{
	struct node *n = &s->node;
	slab_node_lock(s, NULL);
	const char *bug = core_hooks.debug_free(s, slab, x, caller);
	if (bug) {
		/* report_continue: the object is left as it is (leaked, still
		 * counted as allocated); a second free of it changes nothing */
		slab_node_unlock(s);
		core_hooks.debug_report_done(s, x, bug);
		return;
	}
	uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_acquire);
	void *prior = fc_freelist(fc, slab);
	if (unlikely(!fc_inuse(fc)))   /* the hook's checks would have seen it: a corrupted count */
		report_fatal("slab %p of cache '%s': free of %p with inuse 0", slab_base(slab), s->name, x);
	set_freepointer(s, x, prior);
	unsigned inuse = fc_inuse(fc) - 1;
	atomic_store_explicit(&slab->fc, fc_make(x, inuse, false), memory_order_release);
	if (!prior)
		add_partial_locked(n, slab, true);   /* was full */
	bool discard = !inuse && nr_partial(n) > TUNE(s, min_partial);
	if (discard)
		remove_partial_locked(n, slab);
	track_free(x, s->object_size);
	slab_node_unlock(s);
	core_stat_inc(s, NULL, counted_as);
	if (discard)
		slab_discard(s, NULL, slab);
}

/* ---- without a CPU part ------------------------------------------------------ */

/* Without a CPU part: one object straight off a slab. */
void *slab_alloc_nocpu(struct uslab_cache *s)
{
	void *x;
	if (s->debug)
		return slab_debug_alloc(s, NULL, USLAB_STAT_ALLOC_SLOWPATH, 0);
	if (cache_cpu_mode(s) == CPU_SLAB) {   /* from its own slab lists (counted there) */
		x = core_hooks.array_alloc_nocpu(s);
		if (!x)
			return NULL;
		track_alloc(x, s->object_size);
		return slab_hand_out(s, x);
	}
	if (!slab_take_objects(s, NULL, &x, 1, false)) {
		core_stat_inc(s, NULL, USLAB_STAT_ALLOC_FAILED);
		errno = ENOMEM;
		return NULL;
	}
	core_stat_inc(s, NULL, USLAB_STAT_ALLOC_SLOWPATH);
	track_alloc(x, s->object_size);
	return slab_hand_out(s, x);
}

/* Without a CPU part (uslab's own metadata caches): checked as any free,
 * then straight to the slab. */
void slab_free_nocpu(struct uslab_cache *s, void *x)
{
	struct slab *slab = slab_of(x);
	if (unlikely(slab_kind(slab) != SK_SLAB || slab->cache != s || !slab_obj_valid(s, slab, x)))
		slab_bad_free(s, slab, x, "invalid free");
	if (unlikely(s->debug)) {
		slab_debug_free(s, slab, x, NULL, USLAB_STAT_FREE_SLOWPATH);
		return;
	}
	fp_check_free(s, slab, x);
	track_free(x, s->object_size);
	slab_free_chain(s, NULL, slab, x, x, 1, false);
	core_stat_inc(s, NULL, USLAB_STAT_FREE_SLOWPATH);
}

/* ---- empty slabs kept for reuse ------------------------------------------ */

/* Bytes in every cache's empty lists: with the page allocator's dirty pages,
 * the memory kept for reuse; both are bounded by decay_dirty_max each. */
static _Atomic long empty_bytes;

static void empty_unlink_locked(struct node *n, struct slab *slab)
{
	if (slab->prev)
		slab->prev->next = slab->next;
	else
		n->empty_head = slab->next;
	if (slab->next)
		slab->next->prev = slab->prev;
	else
		n->empty_tail = slab->prev;
	slab->next = slab->prev = NULL;
	slab->on_node = 0;
	atomic_store_explicit(&n->nr_empty, atomic_load_explicit(&n->nr_empty, memory_order_relaxed) - 1,
			      memory_order_relaxed);
	atomic_fetch_sub_explicit(&empty_bytes, (long)PAGE_SIZE << slab->order, memory_order_relaxed);
}

/* Unlink the empty slabs kept longer than decay_ms (the oldest are at the
 * tail) onto *discard. list_lock held. */
static void empty_age_locked(struct node *n, uint64_t now, struct slab **discard)
{
	unsigned delay = __atomic_load_n(&page_purge_delay_ms, __ATOMIC_RELAXED);
	struct slab *slab;
	while ((slab = n->empty_tail) != NULL && now - MIN(now, slab->free_time) >= delay) {
		empty_unlink_locked(n, slab);
		slab->next = *discard;
		*discard = slab;
	}
}

static void discard_list(struct uslab_cache *s, struct cpu_cache *c, struct slab *list)
{
	while (list) {
		struct slab *slab = list;
		list = slab->next;
		slab_discard(s, c, slab);
	}
}

void slab_keep_empty(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	struct node *n = &s->node;
	long bytes = (long)PAGE_SIZE << slab->order;
	long cap = (long)__atomic_load_n(&page_dirty_max_mb, __ATOMIC_RELAXED) << 20;
	struct slab *discard = NULL;
	uint64_t now = os_now_ms();
	slab_node_lock(s, c);
	if (atomic_load_explicit(&empty_bytes, memory_order_relaxed) + bytes > cap) {
		slab->next = discard;   /* over the budget: to the page allocator, whose decay takes over */
		discard = slab;
	} else {
		slab->free_time = now;
		slab->on_node = 2;
		slab->prev = NULL;
		slab->next = n->empty_head;
		if (n->empty_head)
			n->empty_head->prev = slab;
		else
			n->empty_tail = slab;
		n->empty_head = slab;
		atomic_store_explicit(&n->nr_empty, atomic_load_explicit(&n->nr_empty, memory_order_relaxed) + 1,
				      memory_order_relaxed);
		atomic_fetch_add_explicit(&empty_bytes, bytes, memory_order_relaxed);
	}
	empty_age_locked(n, now, &discard);
	slab_node_unlock(s);
	discard_list(s, c, discard);
}

struct slab *slab_take_empty(struct uslab_cache *s, struct cpu_cache *c)
{
	struct node *n = &s->node;
	if (!atomic_load_explicit(&n->nr_empty, memory_order_relaxed))
		return NULL;   /* racy peek: a miss only means a new slab */
	slab_node_lock(s, c);
	struct slab *slab = n->empty_head;
	if (slab)
		empty_unlink_locked(n, slab);
	slab_node_unlock(s);
	return slab;
}

void slab_decay_empty(struct uslab_cache *s)
{
	struct node *n = &s->node;
	struct slab *discard = NULL;
	if (!atomic_load_explicit(&n->nr_empty, memory_order_relaxed))
		return;
	slab_node_lock(s, NULL);
	empty_age_locked(n, os_now_ms(), &discard);
	slab_node_unlock(s);
	discard_list(s, NULL, discard);
}

/* ---- shrink and accounting --------------------------------------------- */

unsigned long slab_shrink_node(struct uslab_cache *s)
{
	struct node *n = &s->node;
	struct slab *discard = NULL;
	unsigned long freed = 0;
	slab_node_lock(s, NULL);
	while (n->empty_head) {
		struct slab *slab = n->empty_head;
		empty_unlink_locked(n, slab);
		slab->next = discard;
		discard = slab;
	}
	for (struct slab *slab = n->partial_head, *nx; slab; slab = nx) {
		nx = slab->next;
		/* listed and empty: no object is out, nothing can change it */
		if (!fc_inuse(atomic_load_explicit(&slab->fc, memory_order_acquire))) {
			remove_partial_locked(n, slab);
			slab->next = discard;
			discard = slab;
		}
	}
	slab_node_unlock(s);
	while (discard) {
		struct slab *slab = discard;
		discard = slab->next;
		slab_discard(s, NULL, slab);
		freed++;
	}
	return freed + core_hooks.array_shrink(s);
}

unsigned long slab_count_live(struct uslab_cache *s)
{
	struct node *n = &s->node;
	slab_node_lock(s, NULL);
	long live = atomic_load_explicit(&n->total_objects, memory_order_relaxed);
	for (struct slab *slab = n->empty_head; slab; slab = slab->next)
		live -= slab->objects;
	for (struct slab *slab = n->partial_head; slab; slab = slab->next) {
		unsigned inuse = fc_inuse(atomic_load_explicit(&slab->fc, memory_order_acquire));
		live -= slab->objects - inuse;
	}
	live -= (long)core_hooks.array_free_objects_locked(s);   /* SLAB-format slabs' free objects */
	slab_node_unlock(s);
	return live > 0 ? (unsigned long)live : 0;
}
