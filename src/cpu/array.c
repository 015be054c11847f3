/*
 * Slab mode (cpu_mode "slab"): the kernel's SLAB allocator (mm/slab.c as
 * it was from 2.6.30 to 6.1, the third column of Gorman's 2009 SLUB/SLAB/
 * SLQB comparison) on uslab's pages. Written from the design, not the
 * code.
 *
 * What is shared with the modes already built:
 *   - the per-CPU array cache IS a sheaf: each part's `main` (of `limit`
 *     objects), made and given back by sheaf.c (sheaf_setup_cpu,
 *     sheaf_flush_cpu), popped and pushed by the sheaves' inline fast
 *     paths in cpu.h unchanged (c->objs, c->n, c->cap), with their double
 *     free check (the mark: see FP_TAKEN in slab.h);
 *   - the shared array IS the barn (node.barn): batches of `batchcount`
 *     objects in sheaves on its full list, at most `sharedfactor` of them,
 *     under the barn's lock; emptied batch sheaves wait in the part's
 *     spare slot or the barn's empty list. So the barn's statistics, its
 *     flush at destroy and its decay (decay.c, sheaf_flush_barn) and the
 *     take-back of idle parts' spare slots serve slab mode unchanged. The
 *     barn's get/put steps are written here again, since sheaf.c keeps
 *     its own static and trades whole sheaves, where SLAB copies a batch
 *     into and out of the array.
 * What is SLAB's own, here:
 *   - three slab lists per node (full, partial, free) under the node's
 *     list_lock, the slab's list following from its inuse;
 *   - the index free list (the kernel's freelist_idx_t array, "bufctl"):
 *     slab.h's struct array_node. Allocation and free read and write the
 *     slab's index array and bitmap at its end, never an object's links
 *     (the one word an object gives up is the double-free mark: written
 *     by its free, left there while it is free, cleared when it is handed
 *     out; a refill touches no object);
 *   - colouring: slab k starts its objects at colour (k mod colours) x
 *     colour_off, so the first objects of consecutive slabs fall on
 *     different cache lines (slab->colour; the fast paths subtract it);
 *   - batchcount transfers (cache_alloc_refill, cache_flusharray): a
 *     refill takes a batch from the shared array, else from partial then
 *     free slabs, else a new slab; a full array gives its oldest batch to
 *     the shared array, else to the slabs (free_block), where free slabs
 *     beyond the free limit ((1 + CPUs) x batchcount + objects per slab)
 *     go back to the page allocator at once;
 *   - the reap (cache_reap): every 2 s a part's array that no allocation
 *     touched since the last look gives back a fifth of its limit (at the
 *     owner's slow path: only the owner may touch its array; an idle
 *     thread's array is taken back whole by decay.c's take-back request);
 *     every 4 s, on a slow path or in a decay pass, whoever claims the
 *     node reap drains a fifth of an untouched shared array and frees a
 *     fifth of the free limit in free slabs unless a refill took one;
 *   - alien frees: an object of another node's slab goes to that node's
 *     lists under that node's lock, gathered per batch (the kernel's path
 *     without alien arrays). With one node (ARRAY_NR_NODES) it never runs.
 *
 * The double-free checks (the kernel's SLAB had none): the mark, as in
 * every mode (a freed object carries an encoded NULL in an array, the
 * shared array or its slab; every free reads it first, so a second free
 * is caught at any distance; SLAB's free objects could be PROT_NONE, ours
 * cannot); and a per-slab bitmap, a bit per object set while the
 * object is out of its slab: a free to the slab of an object whose bit is
 * clear is reported, whichever path brings it (arrays, the shared array,
 * bulk, another mode's leftovers), which also catches an index list that
 * hands out an object twice. The bitmap costs an eighth of a byte per
 * object and is always on.
 *
 * Keeping the layouts apart. A SLAB-format slab is marked (otag
 * SLAB_TAG_ARRAY) from its making to its discard, is on none of the core's
 * lists and is never frozen or owned; the core sends its objects here from
 * every free path (slab.c: slab_free_chain, slab_free_objects), so a
 * thread still in another mode, or without a part, frees them right.
 * Objects of other slabs that reach an array (a mode change) go back
 * through slab_free_objects. Allocation here takes only SLAB-format slabs.
 *
 * States of a SLAB-format slab (inuse in its word; node = node.list_lock):
 *
 *   state      inuse       list (node)     alloc from            free by
 *   being made 0           none            its grower only       -
 *   free       0           array.free      refill, nocpu (node)  -
 *   partial    1..num-1    array.partial   refill, nocpu (node)  free_block (node)
 *   full       num         array.full      nobody                free_block (node)
 *   discarded  -           none            -                     -
 * A slab being made is published (slab_publish) only once its index list
 * is set up; it is listed with the objects its grower did not take.
 * An object is in its slab (index list), a part's array (owner only), the
 * shared array (barn lock), a batch in a mover's hands, or the program's.
 *
 * Locks: node.list_lock (lists, index lists, bitmaps, inuse), then the
 * page lock (slab_discard after it is dropped); the barn lock is a leaf,
 * never held with the node lock. A part's array and reap clock are its
 * owner's (the fast paths need no atomics). The node reap is claimed by a
 * compare-and-swap on next_reap, so one thread at a time runs it.
 */
#include "cpu.h"

#include <errno.h>
#include <string.h>

#define BATCHREFILL_LIMIT 16   /* an untouched array refills at most this many (the kernel's) */
#define REAP_CPU_MS 2000       /* REAPTIMEOUT_AC */
#define REAP_NODE_MS 4000      /* REAPTIMEOUT_NODE */
#define CHUNK 64               /* objects freed per node lock hold from a caller's array */

/* ---- nodes (one today) ------------------------------------------------------- */

static inline unsigned this_nid(void)
{
	return 0;
}
static inline unsigned slab_nid(const struct slab *d)
{
	(void)d;
	return 0;
}
static inline struct array_node *node_lists(struct uslab_cache *s, unsigned nid)
{
	(void)nid;
	return &s->array;
}

/* ---- locks ------------------------------------------------------------------------ */
/* The node lock and the shared array's lock are taken spinning first, as
 * the kernel's SLAB takes them as spinlocks (slab_lock_spin, slab.h). */

static inline void node_lock(struct uslab_cache *s, struct cpu_cache *c, unsigned nid)
{
	(void)nid;
	slab_lock_spin(&s->node.list_lock);
	stat_inc(s, c, USLAB_STAT_NODE_LOCK);
}
static inline void node_unlock(struct uslab_cache *s, unsigned nid)
{
	(void)nid;
	slab_node_unlock(s);
}

/* ---- layout ------------------------------------------------------------------ */
/*
 * A slab's management: a bitmap (a bit per object, rounded up to whole
 * 16-bit words) then the index array (a byte per index for at most 255
 * objects, else two). On the slab, it ends the slab; off it (slab->lfree),
 * it is an object of an internal cache (cache_sheaf_cache: 128 .. 4096
 * bytes) or, above that, a block of pages. Everything follows from the
 * descriptor: order, objects, lfree.
 */
#define OFF_SLAB_MIN_SIZE (PAGE_SIZE >> 5)   /* 128: the kernel's smallest off-slab object */
#define OFF_SLAB_MAX_CACHE 4096U             /* the largest internal cache */

static inline unsigned isz_of(unsigned num)
{
	return num <= 255 ? 1 : 2;
}
static inline size_t bm_bytes(size_t num)
{
	return (num + 15) / 16 * 2;
}
static size_t mgmt_bytes(size_t num)
{
	return num * isz_of((unsigned)num) + bm_bytes(num);
}

/* The packed layout word (struct array_node.layout). */
struct layout {
	unsigned order, num, colour_off, colours;
	bool off_slab;
};
static uint64_t layout_pack(const struct layout *l)
{
	return (uint64_t)l->order | (uint64_t)l->num << 8 | (uint64_t)l->colour_off << 24 | (uint64_t)l->colours << 40 |
	       (uint64_t)l->off_slab << 56;
}
static struct layout layout_of(const struct uslab_cache *s)
{
	uint64_t w = atomic_load_explicit(&s->array.layout, memory_order_relaxed);
	return (struct layout){ (unsigned)(w & 0xff), (unsigned)(w >> 8 & 0xffff), (unsigned)(w >> 24 & 0xffff),
				(unsigned)(w >> 40 & 0xffff), (w >> 56 & 1) != 0 };
}

/* The kernel's cache_estimate() for a slab of `bytes`: objects, whether
 * the management goes off the slab (objects of 128 bytes and more whose
 * slab has no room for it in its waste: set_off_slab_cache), and the bytes
 * left over for colouring. */
static size_t estimate(size_t bytes, size_t size, bool *off, size_t *left)
{
	size_t num = MIN(bytes / size, (size_t)SLAB_MAX_OBJECTS);
	*off = false;
	if (size >= OFF_SLAB_MIN_SIZE && num) {
		*left = bytes - num * size;
		if (*left >= mgmt_bytes(num))
			*left -= mgmt_bytes(num);   /* it fits in the waste: on the slab after all */
		else
			*off = true;
		return num;
	}
	while (num && num * size + mgmt_bytes(num) > bytes)
		num--;
	*left = num ? bytes - num * size - mgmt_bytes(num) : bytes;
	return num;
}

/* The layout at `order` (the next order up if that holds no object). The
 * order is the cache's, as in every mode (calculate_order(), the slub_*
 * options, the "order" tunable), not the kernel's calculate_slab_order():
 * slabs of one cache have one size whatever the mode, and the options
 * mean the same in all of them. */
static struct layout layout_for(const struct uslab_cache *s, unsigned order)
{
	struct layout l = { 0 };
	size_t left = 0;
	for (unsigned o = MAX(order, (unsigned)s->min_order); o <= PAGE_MAX_ORDER; o++) {
		bool off;
		size_t lo, n = estimate(PAGE_SIZE << o, s->size, &off, &lo);
		if (!n)
			continue;
		l.order = o;
		l.num = (unsigned)n;
		l.off_slab = off;
		left = lo;
		break;
	}
	/* colour_off: a cache line, or more if objects need it (the
	 * alignment asked, and the stride's own power of two, which kmalloc's
	 * aligned allocations count on) */
	size_t off = MAX((size_t)CACHE_LINE, (size_t)s->align);
	off = MAX(off, (size_t)(s->size & -s->size));
	size_t colours = off <= UINT16_MAX ? left / off : 0;
	if (colours > UINT16_MAX / off + 1)   /* the colour fits the descriptor's 16 bits */
		colours = UINT16_MAX / off + 1;
	l.colour_off = (unsigned)MIN(off, (size_t)UINT16_MAX);
	l.colours = (unsigned)MAX(colours, (size_t)1);
	return l;
}

void array_init_cache(struct uslab_cache *s)
{
	struct layout l = layout_for(s, oo_order(cache_oo(s)));
	atomic_store_explicit(&s->array.layout, layout_pack(&l), memory_order_relaxed);
	atomic_store_explicit(&s->array.colour_next, 0, memory_order_relaxed);
	atomic_store_explicit(&s->array.next_reap, os_now_ms() + REAP_NODE_MS, memory_order_relaxed);
}

void array_set_order(struct uslab_cache *s, unsigned order)
{
	struct layout l = layout_for(s, order);
	if (l.num)
		atomic_store_explicit(&s->array.layout, layout_pack(&l), memory_order_relaxed);
}

void array_slab_shape(const struct uslab_cache *s, unsigned *order, unsigned *objects)
{
	struct layout l = layout_of(s);
	*order = l.order;
	*objects = l.num;
}

void array_default_tunables(struct uslab_cache *s)
{
	unsigned size = s->size, limit;
	/* enable_cpucache(): by object size */
	if (size > 131072)
		limit = 1;
	else if (size > PAGE_SIZE)
		limit = 8;
	else if (size > 1024)
		limit = 24;
	else if (size > 256)
		limit = 54;
	else
		limit = 120;
	TUNE_SET(s, limit, limit);
	TUNE_SET(s, batchcount, (limit + 1) / 2);
	TUNE_SET(s, sharedfactor, size <= PAGE_SIZE && os_ncpus() > 1 ? 8U : 0U);
}

/* ---- a slab's index list and bitmap (node lock held) ------------------------- */

static inline uint8_t *bitmap_of(const struct slab *d)
{
	if (d->lfree)
		return d->lfree;
	return (uint8_t *)slab_address(d) + (PAGE_SIZE << d->order) - mgmt_bytes(d->objects);
}
static inline void *index_of(const struct slab *d)
{
	return bitmap_of(d) + bm_bytes(d->objects);
}
static inline unsigned idx_get(const struct slab *d, const void *ix, unsigned i)
{
	return d->objects <= 255 ? ((const uint8_t *)ix)[i] : ((const uint16_t *)ix)[i];
}
static inline void idx_set(const struct slab *d, void *ix, unsigned i, unsigned v)
{
	if (d->objects <= 255)
		((uint8_t *)ix)[i] = (uint8_t)v;
	else
		((uint16_t *)ix)[i] = (uint16_t)v;
}
static inline unsigned inuse_of(const struct slab *d)
{
	return fc_inuse(atomic_load_explicit(&d->fc, memory_order_relaxed));
}
/* A relaxed store: the word is read without the lock (validate, stats). */
static inline void set_inuse(struct slab *d, unsigned n)
{
	atomic_store_explicit(&d->fc, fc_make(NULL, n, false), memory_order_relaxed);
}
/* Index of x (checked: an object of d) in d. */
static inline unsigned obj_index(const struct uslab_cache *s, const struct slab *d, const void *x)
{
	uintptr_t off = (uintptr_t)x - (uintptr_t)slab_first(s, d);
	return slab_obj_index((uint32_t)off, s->divinv, s->divk);
}

/* Counts written under the node lock, peeked without: load and store. */
static inline void cnt_add(_Atomic unsigned long *p, long v)
{
	atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + (unsigned long)v,
			      memory_order_relaxed);
}

/* The list a slab with `inuse` objects out belongs on. */
static struct slab_list *list_of(struct array_node *a, const struct slab *d, unsigned inuse,
				 _Atomic unsigned long **cnt)
{
	if (!inuse) {
		*cnt = &a->nr_free;
		return &a->free;
	}
	if (inuse == d->objects) {
		*cnt = &a->nr_full;
		return &a->full;
	}
	*cnt = &a->nr_partial;
	return &a->partial;
}

/* Onto its list (by its inuse): free and full slabs at the head (the
 * kernel's list_add); partial ones at the tail after a free (free_block's
 * list_add_tail: the most time for its other objects to come back), at
 * the head after a refill took from it (fixup_slab_list's list_add), so
 * that the next refill goes on with the same slab until it is full rather
 * than taking a batch from each partial slab in turn. */
static void list_put_as(struct array_node *a, struct slab *d, bool refilled)
{
	unsigned inuse = inuse_of(d);
	_Atomic unsigned long *cnt;
	struct slab_list *l = list_of(a, d, inuse, &cnt);
	if (inuse && inuse < d->objects && !refilled) {
		d->next = NULL;
		d->prev = l->tail;
		if (l->tail)
			l->tail->next = d;
		else
			l->head = d;
		l->tail = d;
	} else {
		d->prev = NULL;
		d->next = l->head;
		if (l->head)
			l->head->prev = d;
		else
			l->tail = d;
		l->head = d;
	}
	cnt_add(cnt, 1);
}
static void list_put(struct array_node *a, struct slab *d)
{
	list_put_as(a, d, false);
}

/* Off its list (by its inuse, unchanged since it was put there). */
static void list_take(struct array_node *a, struct slab *d)
{
	_Atomic unsigned long *cnt;
	struct slab_list *l = list_of(a, d, inuse_of(d), &cnt);
	if (d->prev)
		d->prev->next = d->next;
	else
		l->head = d->next;
	if (d->next)
		d->next->prev = d->prev;
	else
		l->tail = d->prev;
	d->next = d->prev = NULL;
	cnt_add(cnt, -1);
}

/* Up to `want` objects of d (unlisted) into objs[] (slab_get_obj). For an
 * array (to_caller false) no object is touched: a free one keeps the mark
 * its free wrote, a never-used one is scrubbed when it is handed out; for
 * the caller (bulk, no CPU part) each word is set to FP_TAKEN. */
static unsigned take_from(struct uslab_cache *s, struct slab *d, void **objs, unsigned want, bool to_caller)
{
	unsigned inuse = inuse_of(d), n = d->objects, k = 0;
	uint8_t *bm = bitmap_of(d);
	void *ix = index_of(d);
	char *first = slab_first(s, d);
	while (inuse < n && k < want) {
		unsigned i = idx_get(d, ix, inuse);
		if (unlikely(i >= n || (bm[i >> 3] >> (i & 7)) & 1))
			report_fatal("slab %p of cache '%s': index list corrupted (index %u at %u of %u)", slab_base(d),
				     s->name, i, inuse, n);
		bm[i >> 3] |= (uint8_t)(1U << (i & 7));
		objs[k] = first + (size_t)i * s->size;
		if (to_caller)
			set_freepointer(s, objs[k], FP_TAKEN);
		k++;
		inuse++;
	}
	set_inuse(d, inuse);
	return k;
}

/* The lines put_back will write for x: its bitmap byte and the index
 * slot at the top of the list (if no other free comes first). Taken before
 * the node lock, with the descriptor just read to sort x: the misses of a
 * chunk of frees overlap, and are not paid inside the lock hold (the
 * bitmap load was a third of array_free_objs' time in sh8bench). */
static inline void mgmt_prefetch(const struct uslab_cache *s, const struct slab *d, const void *x)
{
	unsigned i = obj_index(s, d, x), inuse = inuse_of(d);
	__builtin_prefetch(bitmap_of(d) + (i >> 3), 1);
	if (inuse)
		__builtin_prefetch((char *)index_of(d) + (size_t)(inuse - 1) * isz_of(d->objects), 1);
}

/* x (an object of d, unlisted) back onto d's index list (slab_put_obj). */
static void put_back(struct uslab_cache *s, struct slab *d, void *x)
{
	unsigned i = obj_index(s, d, x), inuse = inuse_of(d);
	uint8_t *bm = bitmap_of(d);
	if (unlikely(!((bm[i >> 3] >> (i & 7)) & 1) || !inuse))
		slab_bad_free(s, d, x, "double free");   /* its bit says it is in its slab already */
	bm[i >> 3] &= (uint8_t)~(1U << (i & 7));
	idx_set(d, index_of(d), --inuse, i);
	set_inuse(d, inuse);
}

/* ---- growing and freeing slabs ------------------------------------------------ */

/* Off-slab management of `bytes`: an internal cache's object, or pages. */
static void *mgmt_alloc(size_t bytes)
{
	int e = errno;
	void *p = NULL;
	if (bytes <= OFF_SLAB_MAX_CACHE) {
		unsigned k = 0;
		while ((128U << k) < bytes)
			k++;
		p = slab_alloc_nocpu(&cache_sheaf_cache[k]);
	} else {
		unsigned o = 0;
		while ((PAGE_SIZE << o) < bytes)
			o++;
		p = page_alloc(o);
	}
	errno = e;
	return p;
}

static void mgmt_free(void *p, size_t bytes)
{
	if (bytes <= OFF_SLAB_MAX_CACHE) {
		unsigned k = 0;
		while ((128U << k) < bytes)
			k++;
		slab_free_nocpu(&cache_sheaf_cache[k], p);
	} else {
		page_free(p);
	}
}

/* A new SLAB-format slab, coloured, its index list in order (or shuffled
 * with slab_freelist_random), published; NULL without memory. */
static struct slab *grow(struct uslab_cache *s, struct cpu_cache *c)
{
	struct layout l = layout_of(s);
	unsigned colour = l.colours > 1
				  ? atomic_fetch_add_explicit(&s->array.colour_next, 1, memory_order_relaxed) % l.colours
				  : 0;
	void *mgmt = NULL;
	if (l.off_slab && !(mgmt = mgmt_alloc(mgmt_bytes(l.num))))
		return NULL;
	struct slab *d = slab_new_array(s, c, l.order, l.num, colour * l.colour_off);
	if (!d) {
		if (mgmt)
			mgmt_free(mgmt, mgmt_bytes(l.num));
		return NULL;
	}
	d->lfree = mgmt;
	memset(bitmap_of(d), 0, bm_bytes(l.num));
	void *ix = index_of(d);
	for (unsigned i = 0; i < l.num; i++)
		idx_set(d, ix, i, i);
	if (opt.freelist_random && l.num > 1) {   /* shuffle_freelist(), Fisher-Yates */
		uint64_t r = os_random() ^ (uintptr_t)d;
		for (unsigned i = l.num - 1; i > 0; i--) {
			r ^= r << 13, r ^= r >> 7, r ^= r << 17;
			unsigned j = (unsigned)(r % (i + 1)), t = idx_get(d, ix, i);
			idx_set(d, ix, i, idx_get(d, ix, j));
			idx_set(d, ix, j, t);
		}
	}
	slab_publish(d);
	return d;
}

static void discard_all(struct uslab_cache *s, struct cpu_cache *c, struct slab *list)
{
	while (list) {
		struct slab *d = list;
		list = d->next;
		if (d->lfree) {   /* its off-slab index list */
			mgmt_free(d->lfree, mgmt_bytes(d->objects));
			d->lfree = NULL;
		}
		slab_discard(s, c, d);
	}
}

/* The free limit of node a: free objects kept in free slabs beyond which
 * free_block gives free slabs back at once. (os_ncpus() is a load: it
 * used to be sysconf(), three system calls under the node lock.) */
static unsigned long free_limit(struct uslab_cache *s)
{
	return (1UL + os_ncpus()) * TUNE(s, batchcount) + layout_of(s).num;
}

/* free_block(): objs[0..n) (SLAB-format objects of node a) back to their
 * slabs; free slabs beyond the free limit onto *discard. Node lock held. */
static void free_block(struct uslab_cache *s, struct array_node *a, void *const *objs, unsigned n,
		       struct slab **discard)
{
	for (unsigned k = 0; k < n; k++) {
		void *x = objs[k];
		struct slab *d = slab_of(x);
		unsigned inuse = inuse_of(d);
		/* The kernel moves the slab to the partial list's tail at every
		 * free (the most time for its other objects to come back). A
		 * slab that stays partial and is the tail already stays put:
		 * the same order, without touching its neighbours' lines. */
		bool stays = inuse > 1 && inuse < d->objects && a->partial.tail == d;
		if (!stays)
			list_take(a, d);
		put_back(s, d, x);
		if (!stays)
			list_put(a, d);
	}
	cnt_add(&a->free_objects, n);
	unsigned long lim = free_limit(s);
	struct slab *d;
	while (atomic_load_explicit(&a->free_objects, memory_order_relaxed) > lim && (d = a->free.tail) != NULL) {
		list_take(a, d);
		cnt_add(&a->free_objects, -(long)d->objects);
		d->next = *discard;
		*discard = d;
	}
}

/* Alien frees: objects of node nid's slabs (not this thread's node),
 * freed to that node's lists under its lock. */
static void free_alien(struct uslab_cache *s, struct cpu_cache *c, unsigned nid, void *const *objs, unsigned n)
{
	struct slab *discard = NULL;
	node_lock(s, c, nid);
	free_block(s, node_lists(s, nid), objs, n, &discard);
	node_unlock(s, nid);
	discard_all(s, c, discard);
}

void array_free_objs(struct uslab_cache *s, struct cpu_cache *c, void *const *objs, unsigned n, bool from_cpu)
{
	const unsigned local = this_nid();
	for (unsigned i = 0; i < n;) {
		void *mine[CHUNK], *other[CHUNK], *alien[CHUNK];
		unsigned km = 0, ko = 0, ka = 0, anid = 0;
		for (; i < n && km < CHUNK && ko < CHUNK && ka < CHUNK; i++) {
			void *x = objs[i];
			struct slab *d = slab_of(x);
			if (!slab_is_array(d)) {
				other[ko++] = x;   /* a slab of the other layout (a mode change): the core's */
			} else if (likely(slab_nid(d) == local)) {
				mgmt_prefetch(s, d, x);
				mine[km++] = x;
			} else {
				if (ka && slab_nid(d) != anid)
					break;   /* one alien node per chunk */
				anid = slab_nid(d);
				alien[ka++] = x;
			}
		}
		if (km) {
			struct slab *discard = NULL;
			node_lock(s, c, local);
			free_block(s, node_lists(s, local), mine, km, &discard);
			node_unlock(s, local);
			discard_all(s, c, discard);
		}
		if (ka)
			free_alien(s, c, anid, alien, ka);
		if (ko)
			slab_free_objects(s, c, other, ko, false, from_cpu);
	}
}

void array_free_chain(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head, unsigned cnt)
{
	void *buf[CHUNK];
	unsigned k = 0;
	void *p = head;
	while (cnt--) {
		struct slab *d = slab_of(p);
		if (unlikely(!p || slab_kind(d) != SK_SLAB || d->cache != s || !slab_obj_valid(s, d, p)))
			slab_bad_freelist(s, head, p);
		void *next = cnt ? get_freepointer(s, p) : NULL;   /* (read before it is freed) */
		buf[k++] = p;
		if (k == CHUNK) {
			array_free_objs(s, c, buf, k, true);   /* (linked: not the program's to check) */
			k = 0;
		}
		p = next;
	}
	(void)slab;
	if (k)
		array_free_objs(s, c, buf, k, true);
}

/* Up to `want` objects off the lists into objs[] (partial slabs first,
 * then free ones), in one node lock hold; else, with nothing listed, a
 * new slab's. Returns how many (0: no memory). */
static unsigned take_objects(struct uslab_cache *s, struct cpu_cache *c, void **objs, unsigned want, bool to_caller)
{
	struct array_node *a = node_lists(s, this_nid());
	unsigned got = 0;
	if (atomic_load_explicit(&a->nr_partial, memory_order_relaxed) ||
	    atomic_load_explicit(&a->nr_free, memory_order_relaxed)) {   /* racy peek: a miss means a new slab */
		node_lock(s, c, this_nid());
		while (got < want) {
			struct slab *d = a->partial.head;
			if (!d) {
				d = a->free.head;
				if (!d)
					break;
				a->free_touched = true;
			}
			list_take(a, d);
			got += take_from(s, d, objs + got, want - got, to_caller);
			list_put_as(a, d, true);
			stat_inc(s, c, USLAB_STAT_ALLOC_FROM_PARTIAL);
		}
		cnt_add(&a->free_objects, -(long)got);
		node_unlock(s, this_nid());
	}
	if (got)
		return got;
	struct slab *d = grow(s, c);   /* no lock held across the page allocator */
	if (!d)
		return 0;
	node_lock(s, c, this_nid());
	got = take_from(s, d, objs, want, to_caller);
	list_put_as(a, d, true);
	cnt_add(&a->free_objects, (long)d->objects - (long)got);
	node_unlock(s, this_nid());
	return got;
}

void *array_alloc_nocpu(struct uslab_cache *s)
{
	void *x;
	if (!take_objects(s, NULL, &x, 1, true)) {
		stat_inc(s, NULL, USLAB_STAT_ALLOC_FAILED);
		errno = ENOMEM;
		return NULL;
	}
	stat_inc(s, NULL, USLAB_STAT_ALLOC_SLOWPATH);
	return x;
}

/* ---- the shared array: batches in the barn ----------------------------------- */

static struct uslab_cache *sheaf_storage(unsigned cap)
{
	unsigned k = 0;
	while ((128U << k) < sizeof(struct sheaf) + (size_t)cap * sizeof(void *))
		k++;
	return &cache_sheaf_cache[k];
}

static void batch_free(struct uslab_cache *s, struct cpu_cache *c, struct sheaf *sh)
{
	slab_free_nocpu(sheaf_storage(sh->cap), sh);
	stat_inc(s, c, USLAB_STAT_SHEAF_FREE);
}

/* An empty sheaf emptied of its batch: into the part's spare slot, else
 * the barn's empty list, else freed. */
static void batch_recycle(struct uslab_cache *s, struct cpu_cache *c, struct sheaf *sh)
{
	struct barn *b = &s->node.barn;
	sh->size = 0;
	sh->next = NULL;
	/* the slot: only the owner puts, a taker (decay.c) only takes, so a
	 * slot seen empty stays empty until this store */
	if (c && !atomic_load_explicit(&c->spare, memory_order_relaxed)) {
		atomic_store_explicit(&c->spare, sh, memory_order_release);
		return;
	}
	if (atomic_load_explicit(&b->nr_empty, memory_order_relaxed) < TUNE(s, barn_empty_max)) {
		slab_lock_spin(&b->lock);
		unsigned ne = atomic_load_explicit(&b->nr_empty, memory_order_relaxed);
		if (ne < TUNE(s, barn_empty_max)) {
			sh->next = b->empty;
			b->empty = sh;
			atomic_store_explicit(&b->nr_empty, ne + 1, memory_order_relaxed);
			sh = NULL;
		}
		pthread_mutex_unlock(&b->lock);
	}
	if (sh)
		batch_free(s, c, sh);
}

/* A new empty sheaf for batches (the alloc path only: see shared_topup). */
static struct sheaf *batch_new(struct uslab_cache *s, struct cpu_cache *c)
{
	unsigned cap = TUNE(s, batchcount);
	int e = errno;
	struct sheaf *sh = slab_alloc_nocpu(sheaf_storage(cap));
	errno = e;
	if (!sh)
		return NULL;
	sh->next = NULL;
	sh->size = 0;
	sh->cap = cap;   /* (sheaf.c frees it by this capacity's storage too) */
	stat_inc(s, c, USLAB_STAT_SHEAF_ALLOC);
	return sh;
}

/* Sheaves for the shared array's batches are made on the allocation path,
 * never on the free path (as the kernel allocates its shared array when it
 * sets a cache up): a free must not take memory, least of all the pages
 * its own flush just gave back. Up to two per call, until the barn's full
 * and empty sheaves and the part's spare make sharedfactor. */
static void shared_topup(struct uslab_cache *s, struct cpu_cache *c)
{
	struct barn *b = &s->node.barn;
	unsigned sf = TUNE(s, sharedfactor);
	for (unsigned k = 0; k < 2; k++) {
		unsigned have = atomic_load_explicit(&b->nr_full, memory_order_relaxed) +
				atomic_load_explicit(&b->nr_empty, memory_order_relaxed) +
				(atomic_load_explicit(&c->spare, memory_order_relaxed) != NULL);
		if (have >= sf || have >= TUNE(s, barn_empty_max))
			return;
		struct sheaf *sh = batch_new(s, c);
		if (!sh)
			return;
		batch_recycle(s, c, sh);
	}
}

/* An empty sheaf that holds n objects: the spare slot's or the barn's;
 * NULL if there is none (then the batch goes to the slabs). */
static struct sheaf *batch_empty(struct uslab_cache *s, struct cpu_cache *c, unsigned n)
{
	struct barn *b = &s->node.barn;
	struct sheaf *sh = atomic_exchange_explicit(&c->spare, NULL, memory_order_acquire);
	if (sh && sh->size) {   /* a sheaves-mode spare left by a mode change: its objects back */
		atomic_fetch_sub_explicit(&c->spare_n, sh->size, memory_order_relaxed);
		array_free_objs(s, c, sh->objects, sh->size, true);
		sh->size = 0;
	}
	if (sh && sh->cap >= n)
		return sh;
	if (sh)
		batch_recycle(s, NULL, sh);   /* too small: to the barn or freed */
	while (atomic_load_explicit(&b->nr_empty, memory_order_relaxed)) {
		slab_lock_spin(&b->lock);
		sh = b->empty;
		if (sh) {
			b->empty = sh->next;
			atomic_store_explicit(&b->nr_empty, atomic_load_explicit(&b->nr_empty, memory_order_relaxed) - 1,
					      memory_order_relaxed);
		}
		pthread_mutex_unlock(&b->lock);
		if (!sh)
			break;
		if (sh->cap >= n) {
			sh->next = NULL;
			return sh;
		}
		batch_free(s, c, sh);
	}
	return NULL;
}

/* A full batch from the shared array, or NULL. */
static struct sheaf *shared_take(struct uslab_cache *s, struct cpu_cache *c)
{
	struct barn *b = &s->node.barn;
	if (!atomic_load_explicit(&b->nr_full, memory_order_relaxed))
		return NULL;   /* racy peek: a miss only means the slab lists */
	slab_lock_spin(&b->lock);
	struct sheaf *sh = b->full;
	if (sh) {
		b->full = sh->next;
		atomic_store_explicit(&b->nr_full, atomic_load_explicit(&b->nr_full, memory_order_relaxed) - 1,
				      memory_order_relaxed);
		atomic_store_explicit(&b->gets, atomic_load_explicit(&b->gets, memory_order_relaxed) + 1,
				      memory_order_relaxed);
		atomic_store_explicit(&b->objects, atomic_load_explicit(&b->objects, memory_order_relaxed) - sh->size,
				      memory_order_relaxed);
	}
	pthread_mutex_unlock(&b->lock);
	stat_inc(s, c, sh ? USLAB_STAT_BARN_GET : USLAB_STAT_BARN_GET_FAIL);
	if (sh)
		sh->next = NULL;
	return sh;
}

/* Refill from the shared array (transfer_objects): a batch on top of the
 * array; what does not fit (a smaller limit since) to the slabs. */
static bool shared_get(struct uslab_cache *s, struct cpu_cache *c)
{
	struct sheaf *sh = shared_take(s, c);
	if (!sh)
		return false;
	unsigned room = c->cap - c->n, k = MIN(sh->size, room);
	memcpy(c->objs + c->n, sh->objects + (sh->size - k), k * sizeof(void *));
	if (k < sh->size)
		array_free_objs(s, c, sh->objects, sh->size - k, true);
	cpu_set_n(c, c->n + k);
	batch_recycle(s, c, sh);
	return k != 0;
}

/* Give objs[0..n) to the shared array as one batch; false if it holds
 * sharedfactor batches already (or there is no sheaf for it). */
static bool shared_put(struct uslab_cache *s, struct cpu_cache *c, void *const *objs, unsigned n)
{
	struct barn *b = &s->node.barn;
	unsigned sf = TUNE(s, sharedfactor);
	if (!sf || atomic_load_explicit(&b->nr_full, memory_order_relaxed) >= sf) {
		stat_inc(s, c, USLAB_STAT_BARN_PUT_FAIL);
		return false;
	}
	struct sheaf *sh = batch_empty(s, c, n);
	if (!sh)
		return false;
	memcpy(sh->objects, objs, n * sizeof(void *));
	sh->size = n;
	bool ok = false;
	slab_lock_spin(&b->lock);
	unsigned nf = atomic_load_explicit(&b->nr_full, memory_order_relaxed);
	if (nf < sf) {
		sh->next = b->full;
		b->full = sh;
		atomic_store_explicit(&b->nr_full, nf + 1, memory_order_relaxed);
		atomic_store_explicit(&b->objects, atomic_load_explicit(&b->objects, memory_order_relaxed) + n,
				      memory_order_relaxed);
		ok = true;
	}
	pthread_mutex_unlock(&b->lock);
	stat_inc(s, c, ok ? USLAB_STAT_BARN_PUT : USLAB_STAT_BARN_PUT_FAIL);
	if (!ok)
		batch_recycle(s, c, sh);
	return ok;
}

/* ---- the per-CPU array --------------------------------------------------------- */

/* Allocations this part made (its counters: the inline pops and the slow
 * paths'); unchanged since the last reap = the kernel's untouched array. */
static uint64_t part_allocs(struct cpu_cache *c)
{
	return cpu_ctr(&c->alloc_pcs) + atomic_load_explicit(&c->stat[USLAB_STAT_ALLOC_SLOWPATH], memory_order_relaxed) +
	       atomic_load_explicit(&c->stat[USLAB_STAT_ALLOC_BULK], memory_order_relaxed);
}

void array_setup_cpu(struct uslab_cache *s, struct cpu_cache *c)
{
	c->mode = CPU_SLAB;
	sheaf_setup_cpu(s, c, TUNE(s, limit));   /* no memory: tried again on the slow paths */
	c->reap_next = os_now_ms() + REAP_CPU_MS;
	c->reap_allocs = part_allocs(c);
}

/* Objects into the array (cache_alloc_refill): a batch from the shared
 * array, else from the slab lists, else a new slab's. False: no memory. */
static bool refill(struct uslab_cache *s, struct cpu_cache *c)
{
	/* (one load of the tunable: MIN() evaluates an argument twice, and a
	 * tuner may change it in between) */
	unsigned room = c->cap - c->n, bc = TUNE(s, batchcount);
	bc = MIN(bc, room);
	if (part_allocs(c) == c->reap_allocs && bc > BATCHREFILL_LIMIT)
		bc = BATCHREFILL_LIMIT;   /* little recent activity: a partial refill */
	if (shared_get(s, c))
		return true;
	if (TUNE(s, sharedfactor))
		shared_topup(s, c);
	unsigned got = take_objects(s, c, c->objs + c->n, MAX(bc, 1U), false);
	if (!got)
		return false;
	stat_add(s, c, USLAB_STAT_SHEAF_REFILL, got);
	cpu_set_n(c, c->n + got);
	return true;
}

/* The array is full (cache_flusharray): its oldest batch to the shared
 * array, else to the slabs; the rest slides down. */
static void flusharray(struct uslab_cache *s, struct cpu_cache *c)
{
	unsigned n = c->n, bc = TUNE(s, batchcount);   /* one load (see refill) */
	bc = MIN(bc, n);
	if (!bc)
		return;
	if (!shared_put(s, c, c->objs, bc)) {
		array_free_objs(s, c, c->objs, bc, true);
		stat_add(s, c, USLAB_STAT_SHEAF_FLUSH, bc);
	}
	memmove(c->objs, c->objs + bc, (n - bc) * sizeof(void *));
	cpu_set_n(c, n - bc);
}

/* The owner's part of the reap, every REAP_CPU_MS (drain_array): an
 * array no allocation touched since the last look gives back a fifth of
 * its limit (half of what it holds if that is less); then the node reap,
 * if due. */
static void reap_cpu(struct uslab_cache *s, struct cpu_cache *c)
{
	uint64_t now = os_now_ms();
	if (likely(now < c->reap_next))
		return;
	c->reap_next = now + REAP_CPU_MS;
	uint64_t allocs = part_allocs(c);
	bool touched = allocs != c->reap_allocs;
	c->reap_allocs = allocs;
	unsigned n = c->n;
	if (!touched && n) {
		unsigned tofree = (c->cap + 4) / 5;
		if (tofree > n)
			tofree = (n + 1) / 2;
		array_free_objs(s, c, c->objs, tofree, true);
		memmove(c->objs, c->objs + tofree, (n - tofree) * sizeof(void *));
		cpu_set_n(c, n - tofree);
		stat_add(s, c, USLAB_STAT_REAP, tofree);
	}
	array_reap(s, false);
}

void *array_alloc_slow(struct uslab_cache *s, struct cpu_cache *c)
{
	if (unlikely(!c->main) && !sheaf_setup_cpu(s, c, c->sheaf_cap))
		return array_alloc_nocpu(s);   /* no memory for an array: one object, straight */
	reap_cpu(s, c);
	if (!c->n && !refill(s, c)) {
		stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
		errno = ENOMEM;
		return NULL;
	}
	uint32_t n = c->n - 1;
	void *x = c->objs[n];
	cpu_set_n(c, n);
	cpu_fp_scrub(c, x);
	stat_inc(s, c, USLAB_STAT_ALLOC_SLOWPATH);
	return x;
}

void array_free_slow(struct uslab_cache *s, struct cpu_cache *c, void *x)
{
	stat_inc(s, c, USLAB_STAT_FREE_SLOWPATH);
	if (unlikely(!c->main)) {
		sheaf_setup_cpu(s, c, c->sheaf_cap);
		if (!c->main) {   /* no memory for an array: straight to the slab */
			array_free_objs(s, c, &x, 1, true);   /* (checked by the caller) */
			return;
		}
	}
	set_freepointer(s, x, NULL);   /* the mark (checked by the caller) */
	uint32_t n = c->n;
	if (n == c->cap) {
		flusharray(s, c);
		n = c->n;
	}
	c->objs[n] = x;
	cpu_set_n(c, n + 1);
	reap_cpu(s, c);
}

void array_flush_cpu(struct uslab_cache *s, struct cpu_cache *c)
{
	if (c->main && c->n) {
		array_free_objs(s, c, c->objs, c->n, true);
		stat_add(s, c, USLAB_STAT_SHEAF_FLUSH, c->n);
		cpu_set_n(c, 0);
	}
	sheaf_flush_cpu(s, c, false);   /* the (empty) array and spare batch sheaf: to the barn or freed */
}

/* ---- bulk ------------------------------------------------------------------------ */

size_t array_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	size_t i = 0;
	if (unlikely(!c->main))
		sheaf_setup_cpu(s, c, c->sheaf_cap);
	while (i < nr) {
		uint32_t n = c->n;
		if (n) {   /* from the top of the array, as single allocations would */
			size_t k = MIN((size_t)n, nr - i);
			for (size_t j = 0; j < k; j++) {
				objs[i + j] = c->objs[n - 1 - j];
				cpu_fp_scrub(c, objs[i + j]);
			}
			cpu_set_n(c, n - (uint32_t)k);
			i += k;
			continue;
		}
		if (c->main && shared_get(s, c))
			continue;
		/* straight from the lists into the caller's array, in chunks */
		unsigned got = take_objects(s, c, objs + i, (unsigned)MIN(nr - i, (size_t)512), true);
		if (!got) {
			if (i)
				array_free_objs(s, c, objs, (unsigned)i, true);
			stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
			errno = ENOMEM;
			return 0;
		}
		i += got;
	}
	return nr;
}

void array_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	size_t i = 0;
	if (unlikely(!c->main))
		sheaf_setup_cpu(s, c, c->sheaf_cap);
	if (!c->main) {   /* no memory for an array: straight to the slabs */
		for (size_t i = 0; i < nr; i++)
			fp_check_free(s, slab_of(objs[i]), objs[i]);   /* (in an array: the mark) */
		array_free_objs(s, c, objs, (unsigned)nr, false);
		return;
	}
	while (i < nr) {
		uint32_t n = c->n;
		if (n == c->cap) {
			flusharray(s, c);
			continue;
		}
		size_t k = MIN((size_t)(c->cap - n), nr - i);
		for (size_t j = 0; j < k; j++) {
			void *x = objs[i + j];
			fp_mark_free(s, slab_of(x), x);   /* (x twice in objs[]: the second finds it) */
			c->objs[n++] = x;
		}
		cpu_set_n(c, n);
		i += k;
	}
}

/* ---- the node reap, shrink, accounting ---------------------------------------------- */

/* Free slabs (up to max) off the free list onto *discard. Node lock held. */
static unsigned drain_free_locked(struct array_node *a, unsigned long max, struct slab **discard)
{
	unsigned k = 0;
	struct slab *d;
	while (k < max && (d = a->free.tail) != NULL) {
		list_take(a, d);
		cnt_add(&a->free_objects, -(long)d->objects);
		d->next = *discard;
		*discard = d;
		k++;
	}
	return k;
}

unsigned long array_shrink(struct uslab_cache *s)
{
	struct array_node *a = &s->array;
	struct slab *discard = NULL;
	if (!atomic_load_explicit(&a->nr_free, memory_order_relaxed))
		return 0;
	node_lock(s, NULL, this_nid());
	unsigned long k = drain_free_locked(a, ~0UL, &discard);
	node_unlock(s, this_nid());
	discard_all(s, NULL, discard);
	return k;
}

unsigned long array_free_objects_locked(struct uslab_cache *s)
{
	return atomic_load_explicit(&s->array.free_objects, memory_order_relaxed);
}

/* ---- validation (uslab_cache_validate) ----------------------------------------------- */

static long vproblem(struct uslab_cache *s, const char *what, const void *where, unsigned long a, unsigned long b)
{
	report_line("validate: cache '%s': slab mode: %s at %p (%lu, %lu)", s->name, what, where, a, b);
	return 1;
}

/* One slab off list l (its inuse says which): its index list's free
 * entries [inuse, objects) name distinct objects whose bitmap bits are
 * clear, and exactly inuse bits are set. */
static long validate_slab(struct uslab_cache *s, struct slab *d, int which, unsigned long *free_objs)
{
	static const char *const names[] = { "full", "partial", "free" };
	if (slab_kind(d) != SK_SLAB || d->cache != s || !slab_is_array(d))
		return vproblem(s, "a slab on a list is not a SLAB-format slab of this cache", slab_base(d),
				(unsigned long)which, 0);
	unsigned n = d->objects, inuse = inuse_of(d);
	int want = !inuse ? 2 : inuse == n ? 0 : 1;
	long problems = 0;
	if (inuse > n)
		return vproblem(s, "inuse above the slab's objects", slab_base(d), inuse, n);
	if (want != which) {
		report_line("validate: cache '%s': slab mode: slab %p with %u of %u objects out is on the %s list, "
			    "not the %s list", s->name, slab_base(d), inuse, n, names[which], names[want]);
		problems++;
	}
	const uint8_t *bm = bitmap_of(d);
	const void *ix = index_of(d);
	unsigned set = 0;
	for (unsigned i = 0; i < n; i++)
		set += (bm[i >> 3] >> (i & 7)) & 1;
	if (set != inuse)
		problems += vproblem(s, "bitmap bits set != objects out", slab_base(d), set, inuse);
	/* free entries: in range, bit clear, each once (a bit set while
	 * walking marks the ones seen; cleared again below) */
	uint8_t seen[(SLAB_MAX_OBJECTS + 7) / 8];
	memset(seen, 0, (n + 7) / 8);
	for (unsigned k = inuse; k < n; k++) {
		unsigned i = idx_get(d, ix, k);
		if (i >= n) {
			problems += vproblem(s, "index list entry out of range", slab_base(d), k, i);
			continue;
		}
		if ((bm[i >> 3] >> (i & 7)) & 1)
			problems += vproblem(s, "index list names an object whose bitmap bit says it is out",
					     (char *)slab_first(s, d) + (size_t)i * s->size, k, i);
		if ((seen[i >> 3] >> (i & 7)) & 1)
			problems += vproblem(s, "index list names an object twice",
					     (char *)slab_first(s, d) + (size_t)i * s->size, k, i);
		seen[i >> 3] |= (uint8_t)(1U << (i & 7));
	}
	*free_objs += n - inuse;
	return problems;
}

long array_validate_locked(struct uslab_cache *s)
{
	struct array_node *a = node_lists(s, this_nid());
	struct slab_list *lists[] = { &a->full, &a->partial, &a->free };
	_Atomic unsigned long *counts[] = { &a->nr_full, &a->nr_partial, &a->nr_free };
	long problems = 0;
	unsigned long free_objs = 0;
	for (int l = 0; l < 3; l++) {
		unsigned long k = 0, limit = (unsigned long)atomic_load_explicit(&a->nr_slabs, memory_order_relaxed) + 1;
		struct slab *prev = NULL;
		for (struct slab *d = lists[l]->head; d; prev = d, d = d->next) {
			if (++k > limit) {
				problems += vproblem(s, "list longer than the slabs that exist (a loop?)", lists[l],
						     (unsigned long)l, limit);
				break;
			}
			if (d->prev != prev)
				problems += vproblem(s, "list link back does not name the slab before", slab_base(d),
						     (unsigned long)l, k);
			problems += validate_slab(s, d, l, &free_objs);
			if (!d->next && lists[l]->tail != d)
				problems += vproblem(s, "list tail is not its last slab", slab_base(d), (unsigned long)l,
						     k);
		}
		if (!lists[l]->head && lists[l]->tail)
			problems += vproblem(s, "empty list with a tail", lists[l], (unsigned long)l, 0);
		if (k <= limit && k != atomic_load_explicit(counts[l], memory_order_relaxed))
			problems += vproblem(s, "list count does not match the list", lists[l], k,
					     atomic_load_explicit(counts[l], memory_order_relaxed));
	}
	if (free_objs != atomic_load_explicit(&a->free_objects, memory_order_relaxed))
		problems += vproblem(s, "free_objects does not match the lists", a, free_objs,
				     atomic_load_explicit(&a->free_objects, memory_order_relaxed));
	return problems;
}

bool array_reap(struct uslab_cache *s, bool all)
{
	struct array_node *a = &s->array;
	struct barn *b = &s->node.barn;
	if (!atomic_load_explicit(&a->nr_slabs, memory_order_relaxed))
		return false;   /* (a cache that never ran in slab mode) */
	if (all) {
		array_shrink(s);
		return false;
	}
	uint64_t now = os_now_ms(), due = atomic_load_explicit(&a->next_reap, memory_order_relaxed);
	if (now >= due && atomic_compare_exchange_strong_explicit(&a->next_reap, &due, now + REAP_NODE_MS,
								  memory_order_acq_rel, memory_order_relaxed)) {
		os_ncpus_recheck();   /* (the free limit follows the CPU count: hotplug) */
		/* the shared array, if no refill took from it since the last
		 * reap: about a fifth of its capacity */
		unsigned long gets = atomic_load_explicit(&b->gets, memory_order_relaxed);
		if (gets == atomic_load_explicit(&a->reap_gets, memory_order_relaxed) && TUNE(s, sharedfactor)) {
			unsigned batches = (TUNE(s, sharedfactor) + 4) / 5;
			struct sheaf *sh;
			while (batches-- && (sh = shared_take(s, NULL)) != NULL) {
				array_free_objs(s, NULL, sh->objects, sh->size, true);
				stat_add(s, NULL, USLAB_STAT_REAP, sh->size);
				batch_recycle(s, NULL, sh);
			}
		}
		atomic_store_explicit(&a->reap_gets, atomic_load_explicit(&b->gets, memory_order_relaxed),
				      memory_order_relaxed);
		/* free slabs: a fifth of the free limit's worth, unless a
		 * refill took a free slab since the last reap */
		struct slab *discard = NULL;
		node_lock(s, NULL, this_nid());
		if (a->free_touched)
			a->free_touched = false;
		else
			drain_free_locked(a, (free_limit(s) + 5UL * layout_of(s).num - 1) / (5UL * layout_of(s).num), &discard);
		node_unlock(s, this_nid());
		discard_all(s, NULL, discard);
	}
	return atomic_load_explicit(&a->nr_free, memory_order_relaxed) ||
	       (TUNE(s, sharedfactor) && atomic_load_explicit(&b->nr_full, memory_order_relaxed));
}

/* ---- the mode's table ------------------------------------------------------ */

static void array_setup(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	(void)cap;   /* the limit: array_setup_cpu reads it */
	array_setup_cpu(s, c);
}

static void array_free_slow_(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *x)
{
	(void)slab;
	array_free_slow(s, c, x);
}

const struct cpu_mode_ops cpu_array_ops = {
	.name = "slab",
	.setup = array_setup,
	.alloc_slow = array_alloc_slow,
	.free_slow = array_free_slow_,
	.flush = array_flush_cpu,
	.alloc_bulk = array_alloc_bulk,
	.free_bulk = array_free_bulk,
};
