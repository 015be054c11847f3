/*
 * Objects go home: slabs owned by CPU parts, local frees without atomics,
 * remote frees batched to their owner. Two per-CPU modes share it:
 *
 *   home (CPU_HOME, the design of SLQB v2, 2008, and of mimalloc's pages):
 *     a part owns the slabs it allocates from; it allocates from its
 *     current slab's free list (c->freelist, the inline fast path) and
 *     frees its own objects straight to their slab (the current slab's
 *     onto c->freelist, another owned slab's onto that slab's private
 *     list, lfree); an object of a slab another part owns goes into this
 *     part's remote batch (rlist), which reaches its owner's inbox with
 *     one compare-and-swap per batch. An object never lives in the cache
 *     of a thread that does not own its slab.
 *   slqb (CPU_SLQB, SLQB as Gorman compared it in 2009): the same page
 *     lists, inbox and remote batches, plus a LIFO object queue per part
 *     (c->freelist) that every free of the node pushes (one node here: all
 *     of them), bounded by hiwater; above it, freebatch objects from the
 *     head go to their slab if this part owns it, else into the remote
 *     batch. Allocation pops the queue, then takes one object at a time
 *     from an owned slab. Defaults as calculate_sizes(): freebatch =
 *     max(4 pages / size, min(256, 64 pages / size)), hiwater = 4 x that.
 *
 * States of a slab (frozen = FC_FROZEN in the word, as classic SLUB's CPU
 * slabs; owner and otag in the descriptor):
 *
 *   state          frozen owner otag  list               alloc from    free by owner     free by others
 *   node partial   no     NULL  0     node list (lock)   a refill      -                 CAS on the word
 *   unowned full   no     NULL  0     none               nobody        -                 CAS (lists it)
 *   home current   yes    c     tag   c->slab            c->freelist   onto c->freelist  rlist -> c's inbox
 *   owned partial  yes    c     tag*  c->own_partial     lfree (slqb)  onto lfree        rlist -> c's inbox
 *   owned full     yes    c     tag*  c->own_full        nobody        onto lfree        rlist -> c's inbox
 *   (* tag in home mode; 0 in slqb, whose every free goes to the queue)
 *
 * A frozen slab's word still takes CAS frees (SLUB's rule): from threads
 * without a part, from parts of other modes while a cache's mode changes,
 * and as every remote path's fallback. They land on the word's list
 * ("stray" objects), which the owner takes when it refills from that slab
 * or gives it up. The owner's own counts (slab->pfree: objects out, and
 * lfree) are private: only it reads or writes them, so they need no
 * atomics; others never touch them.
 *
 * Who may touch what:
 *   - c->freelist, c->slab, own lists, rlist, slab->lfree/pfree of owned
 *     slabs: the owning thread only (or, for a part whose thread is gone,
 *     the holder of cache_mutex that detaches it).
 *   - c->inbox: any thread pushes a whole chain by CAS (release); only
 *     the owner (or a detacher under cache_mutex) takes it, by exchange
 *     (acquire). Objects in an inbox or a batch count as in use to their
 *     slab until they are routed.
 *   - c->stash (empty owned slabs): the owner pushes by CAS (release) and
 *     pops by exchange, storing the rest back (release); a decay pass
 *     (cache_mutex) takes it whole by exchange (acquire) and gives the
 *     slabs back. Only the owner adds, so an exchange sees whole links.
 *   - slab->owner, slab->otag: stored by the owner when it takes or gives
 *     up a slab (relaxed); read relaxed by remote freers. A stale read is
 *     harmless: it sends the object to the old owner's inbox, and whoever
 *     empties an inbox routes every object by its slab's owner *then*: to
 *     its own slab if it is the owner, by CAS if the slab is unowned, into
 *     a batch for the new owner otherwise. Parts are therefore never freed
 *     while their cache lives: a part whose thread exited keeps its memory
 *     on the cache's cpu_dead list (reused by the next thread that needs a
 *     part), and its inbox is emptied by whoever reuses it, by decay
 *     passes, shrink and destroy.
 *
 * Memory ordering. A batch's objects are linked (plain stores) before the
 * CAS that publishes the chain (release); the exchange that takes an inbox
 * (acquire) makes those links visible. Ownership needs no ordering of its
 * own: a slab changes hands only through its word's CAS (acq_rel) and the
 * node lock, as in SLUB.
 *
 * Lock order: as slab.c (cache_mutex -> node list_lock -> slab CAS -> page
 * lock). Nothing here takes a lock of its own.
 */
#include "cpu.h"

#include <errno.h>


/* ---- owned-slab lists (doubly linked through slab->next/prev) ----------- */

/* Appended at the tail: a slab that became partial long ago has had the
 * longest time to gather frees, so refills take the head (FIFO), as
 * mimalloc's page queues do; a LIFO list hands the slab that just got its
 * first free object back, and the next refill comes at once. */
static void own_add(struct own_list *l, struct slab *d)
{
	d->next = NULL;
	d->prev = l->tail;
	if (l->tail)
		l->tail->next = d;
	else
		l->head = d;
	l->tail = d;
}

static void own_del(struct own_list *l, struct slab *d)
{
	if (d->prev)
		d->prev->next = d->next;
	else
		l->head = d->next;
	if (d->next)
		d->next->prev = d->prev;
	else
		l->tail = d->prev;
	d->next = d->prev = NULL;
}

static inline bool is_slqb(const struct cpu_cache *c)
{
	return c->mode == CPU_SLQB;
}

/* Take a frozen slab's word list (stray CAS frees): NULL if empty (no CAS
 * then). The slab stays frozen, its word's inuse = objects. */
static void *take_stray(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, unsigned *cnt)
{
	uint64_t old = atomic_load_explicit(&d->fc, memory_order_acquire);
	void *fl;
	do {
		fl = fc_freelist(old, d);
		if (!fl)
			return NULL;
	} while (!slab_cas(d, &old, fc_make(NULL, d->objects, true)) &&
		 (stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL), 1));
	*cnt = d->objects - fc_inuse(old);
	return fl;
}

/* The tail of a chain of n objects (checked: links stay in the slab). */
static void *chain_tail(struct uslab_cache *s, struct slab *d, void *head, unsigned n)
{
	void *t = head;
	for (unsigned i = 1; i < n; i++) {
		void *next = get_freepointer(s, t);
		if (unlikely(!next || !slab_obj_valid(s, d, next)))
			slab_bad_freelist(s, t, next);
		t = next;
	}
	return t;
}

/* Splice stray objects of owned, non-current slab d onto its lfree. */
static void merge_stray(struct uslab_cache *s, struct cpu_cache *c, struct slab *d)
{
	unsigned n;
	void *fl = take_stray(s, c, d, &n);
	if (!fl)
		return;
	void *tail = chain_tail(s, d, fl, n);
	set_freepointer(s, tail, d->lfree);
	d->lfree = fl;
	d->pfree = (uint16_t)(d->pfree - n);
}

/* Make d (frozen, its word's list taken) a slab of c. */
static void own(struct uslab_cache *s, struct cpu_cache *c, struct slab *d)
{
	atomic_store_explicit(&d->owner, c, memory_order_relaxed);
	atomic_store_explicit(&d->otag, is_slqb(c) ? 0 : cpu_thread_tag(c->thread), memory_order_relaxed);
	atomic_fetch_add_explicit(&c->own_slabs, 1, memory_order_relaxed);
	stat_inc(s, c, USLAB_STAT_SLAB_OWN);
}

/* Give up owned slab d (on no list of c, not current), with its lfree:
 * unfrozen onto the node list, or freed if empty and the node has enough
 * (SLUB's deactivate_slab). */
static void disown_by(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, struct cpu_cache *by)
{
	void *fl = d->lfree;
	bool empty = !d->pfree;   /* (strays merged: every object is on lfree) */
	d->lfree = NULL;
	d->pfree = 0;
	atomic_store_explicit(&d->otag, 0, memory_order_relaxed);
	atomic_store_explicit(&d->owner, NULL, memory_order_relaxed);
	atomic_fetch_sub_explicit(&c->own_slabs, 1, memory_order_relaxed);
	stat_inc(s, by, USLAB_STAT_SLAB_DISOWN);
	if (!empty) {
		cpu_slab_deactivate(s, by, d, fl);
		return;
	}
	/* empty: kept on the node's empty list for the next part that needs a
	 * slab (no page allocator, no new free list), within the budget */
	uint64_t old = atomic_load_explicit(&d->fc, memory_order_acquire);
	while (!slab_cas(d, &old, fc_make(fl, 0, false)))
		stat_inc(s, by, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	if (unlikely(fc_inuse(old) != d->objects || fc_freelist(old, d)))
		report_fatal("slab %p of cache '%s': empty to its owner, but its word says inuse %u", slab_base(d),
			     s->name, fc_inuse(old));
	slab_keep_empty(s, by, d);
}

/* c gives up owned slab d (by itself). */
static void disown(struct uslab_cache *s, struct cpu_cache *c, struct slab *d)
{
	disown_by(s, c, d, c);
}

/* ---- the stash of empty owned slabs (home) ------------------------------------------ */

/* A remote batch's worth of slabs, plus one: what one batch coming home
 * can empty at once, kept so that the owner refills from them rather than
 * through the node lock (a producer whose consumer returns its objects in
 * batches empties several slabs per batch and wants them again at once). */
static unsigned stash_max(struct uslab_cache *s, const struct slab *d)
{
	return TUNE(s, freebatch) / d->objects + 1;
}

/* d (owned by c, empty, on no list of c's) onto the stash, or given back
 * when the stash is full. */
static void stash_push(struct uslab_cache *s, struct cpu_cache *c, struct slab *d)
{
	if (is_slqb(c) || atomic_load_explicit(&c->stash_n, memory_order_relaxed) >= stash_max(s, d)) {
		disown(s, c, d);   /* SLQB frees an empty page at once (free_object_to_page) */
		return;
	}
	struct slab *old = atomic_load_explicit(&c->stash, memory_order_relaxed);
	do
		d->next = old;
	while (!atomic_compare_exchange_weak_explicit(&c->stash, &old, d, memory_order_release, memory_order_relaxed));
	atomic_fetch_add_explicit(&c->stash_n, 1, memory_order_relaxed);
}

/* The owner takes one empty slab off its stash, or NULL. It takes the
 * whole stack by exchange, as a drainer does, and puts the rest back: a
 * pop by compare-and-swap would read the top's link while a drainer that
 * took the stack may be rewriting it. Only the owner pushes, so nothing
 * comes in between (a drainer meanwhile finds the stash empty). */
static struct slab *stash_pop(struct cpu_cache *c)
{
	if (!atomic_load_explicit(&c->stash, memory_order_relaxed))
		return NULL;
	os_sched_point();
	struct slab *d = atomic_exchange_explicit(&c->stash, NULL, memory_order_acquire);
	if (!d)
		return NULL;
	if (d->next)
		atomic_store_explicit(&c->stash, d->next, memory_order_release);
	atomic_fetch_sub_explicit(&c->stash_n, 1, memory_order_relaxed);
	return d;
}

/* Give back every slab of c's stash (its owner, or a taker under
 * cache_mutex while the owner is idle: empty slabs that nobody else can
 * touch). */
static unsigned stash_drain(struct uslab_cache *s, struct cpu_cache *c, struct cpu_cache *by)
{
	os_sched_point();
	struct slab *d = atomic_exchange_explicit(&c->stash, NULL, memory_order_acquire);
	unsigned n = 0;
	while (d) {
		struct slab *nx = d->next;
		d->next = NULL;
		disown_by(s, c, d, by);
		d = nx;
		n++;
	}
	atomic_fetch_sub_explicit(&c->stash_n, n, memory_order_relaxed);
	return n;
}

unsigned home_take_stash(struct uslab_cache *s, struct cpu_cache *c)
{
	if (!atomic_load_explicit(&c->stash, memory_order_relaxed))
		return 0;
	return stash_drain(s, c, NULL);   /* counted on the cache: c's counters are its owner's */
}

/* ---- the current slab (home) ---------------------------------------------- */

static void set_current(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, void *freelist)
{
	cpu_set_slab(s, c, d);
	c->freelist = freelist;
	if (d)
		d->pfree = d->objects;   /* everything is out, to the descriptor: the rest is c's */
}

/* The current slab stops being current: what c->freelist holds becomes its
 * lfree; it goes on the partial or the full list (partial also while it
 * has uncarved objects: slab.h, "carving"; they are not out). */
static void demote_current(struct uslab_cache *s, struct cpu_cache *c)
{
	struct slab *d = c->slab;
	if (!d)
		return;
	void *fl = c->freelist;
	unsigned n = 0;
	for (void *p = fl; p; p = get_freepointer(s, p))
		if (unlikely(++n > d->objects))
			slab_bad_freelist(s, p, get_freepointer(s, p));
	set_current(s, c, NULL, NULL);
	d->lfree = fl;
	n += slab_uncarved(d);
	d->pfree = (uint16_t)(d->objects - n);
	if (n) {
		own_add(&c->own_partial, d);
	} else {
		own_add(&c->own_full, d);
	}
}

/* ---- routing objects (inbox, flushes, batches) ------------------------------ */

static void rbatch_flush(struct uslab_cache *s, struct cpu_cache *c);

/* A free of x (checked, of cache s) into owned slab d of c, not current:
 * onto lfree, with the list moves the fast path leaves to here. */
static void own_free(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, void *x)
{
	unsigned used = d->pfree;
	if (unlikely(!used || x == d->lfree))
		slab_bad_free(s, d, x, "double free");
	set_freepointer(s, x, d->lfree);
	d->lfree = x;
	d->pfree = (uint16_t)--used;
	if (used + 1 == d->objects) {   /* was full */
		own_del(&c->own_full, d);
		own_add(&c->own_partial, d);
	}
	if (used)
		return;
	/* empty: to the stash (slqb: back at once) */
	own_del(&c->own_partial, d);
	stash_push(s, c, d);
}

/* x (checked, of cache s) goes to the part that owns its slab d, as seen
 * now: c itself, nobody (CAS onto the slab's word), or another part (into
 * c's remote batch). `c` may be NULL (a thread without a part, a detacher
 * of a part whose thread is gone): then no batch. */
static void route(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, void *x)
{
	struct cpu_cache *o = atomic_load_explicit(&d->owner, memory_order_relaxed);
	if (o && o == c) {
		if (d == c->slab) {
			if (unlikely(x == c->freelist))
				slab_bad_free(s, d, x, "double free");
			set_freepointer(s, x, c->freelist);
			c->freelist = x;
		} else {
			own_free(s, c, d, x);
		}
		return;
	}
	/* nobody's, or its owner's thread is gone (a part a fork child left
	 * alone keeps its slabs): onto the slab's word by CAS */
	if (!o || !c || (c->mode != CPU_HOME && c->mode != CPU_SLQB) || !__atomic_load_n(&o->thread, __ATOMIC_RELAXED)) {
		slab_free_chain(s, c, d, x, x, 1, false);
		return;
	}
	if (c->rdest != o) {
		if (c->rn)
			rbatch_flush(s, c);
		c->rdest = o;
	}
	set_freepointer(s, x, NULL);
	if (c->rn)
		set_freepointer(s, c->rtail, x);
	else
		c->rhead = x;
	c->rtail = x;
	if (++c->rn >= c->freebatch)
		rbatch_flush(s, c);
}

/* The chain head..tail of n objects of slab d, which c owns, goes home in
 * one step: onto c->freelist if d is current, else onto d's lfree (with
 * the list moves of a slab that was full or is now empty). */
static void own_splice(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, void *head, void *tail,
		       unsigned n)
{
	if (d == c->slab) {
		set_freepointer(s, tail, c->freelist);
		c->freelist = head;
		return;
	}
	unsigned used = d->pfree;
	if (unlikely(used < n))   /* more frees than objects out: some was free already */
		slab_bad_free(s, d, head, "double free");
	set_freepointer(s, tail, d->lfree);
	d->lfree = head;
	d->pfree = (uint16_t)(used - n);
	if (used == d->objects) {   /* was full */
		own_del(&c->own_full, d);
		own_add(&c->own_partial, d);
	}
	if (used == n) {   /* empty: as own_free() */
		own_del(&c->own_partial, d);
		stash_push(s, c, d);
	}
}

/* Route every object of a chain (links through free pointers): an inbox,
 * or a batch whose destination is gone. Objects of one of c's slabs that
 * come in a row (a consumer frees what its producer made in order) are
 * chained again as they come and spliced home in one step. */
static unsigned route_chain(struct uslab_cache *s, struct cpu_cache *c, void *p)
{
	unsigned total = 0, n = 0;
	struct slab *d = NULL;
	uintptr_t base = 0, span = 0;   /* d's objects, if c owns d */
	void *head = NULL, *tail = NULL;
	while (p) {
		void *next = get_freepointer(s, p);
		total++;
		if ((uintptr_t)p - base < span) {
			if (unlikely(!slab_obj_valid(s, d, p)))   /* off a boundary */
				slab_bad_freelist(s, p, next);
			set_freepointer(s, p, head);
			head = p;
			n++;
		} else {
			if (n)
				own_splice(s, c, d, head, tail, n);
			n = 0;
			base = span = 0;
			d = slab_of(p);
			base = (uintptr_t)slab_address(d);
			/* checked before it is routed: a routed object may empty its
			 * slab, whose descriptor another thread may then reuse */
			if (unlikely(slab_kind(d) != SK_SLAB || d->cache != s || !slab_obj_valid(s, d, p)))
				slab_bad_freelist(s, p, next);   /* an inbox link that leads out of the cache */
			if (c && atomic_load_explicit(&d->owner, memory_order_relaxed) == c &&
			    __atomic_load_n(&c->thread, __ATOMIC_RELAXED)) {
				span = (uintptr_t)d->objects * s->size;
				set_freepointer(s, p, NULL);
				head = tail = p;
				n = 1;
			} else {
				base = 0;
				route(s, c, d, p);
			}
		}
		p = next;
	}
	if (n)
		own_splice(s, c, d, head, tail, n);
	return total;
}

/* Send c's remote batch to its destination's inbox: one CAS. A
 * destination whose thread is gone gets nothing: its slabs have new
 * owners or none, so each object is routed again. */
static void rbatch_flush(struct uslab_cache *s, struct cpu_cache *c)
{
	struct cpu_cache *o = c->rdest;
	void *head = c->rhead, *tail = c->rtail;
	unsigned n = c->rn;
	c->rn = 0;
	c->rdest = NULL;
	c->rhead = c->rtail = NULL;
	if (!n)
		return;
	if (unlikely(!__atomic_load_n(&o->thread, __ATOMIC_RELAXED))) {
		route_chain(s, c, head);
		return;
	}
	void *old = atomic_load_explicit(&o->inbox, memory_order_relaxed);
	do {
		set_freepointer(s, tail, old);
		os_sched_point();
	} while (!atomic_compare_exchange_weak_explicit(&o->inbox, &old, head, memory_order_release,
						      memory_order_relaxed));
	stat_inc(s, c, USLAB_STAT_FLUSH_RFREE_LIST);
	stat_add(s, c, USLAB_STAT_FLUSH_RFREE_LIST_OBJECTS, n);
}

/* Take c's inbox (c's own thread, or a detacher) and route what it held. */
static unsigned claim_inbox(struct uslab_cache *s, struct cpu_cache *c, struct cpu_cache *by)
{
	if (!atomic_load_explicit(&c->inbox, memory_order_relaxed))
		return 0;
	os_sched_point();
	void *p = atomic_exchange_explicit(&c->inbox, NULL, memory_order_acquire);
	unsigned n = route_chain(s, by, p);
	stat_inc(s, by, USLAB_STAT_CLAIM_REMOTE_LIST);
	stat_add(s, by, USLAB_STAT_CLAIM_REMOTE_LIST_OBJECTS, n);
	return n;
}

/* ---- slqb's queue ------------------------------------------------------------ */

/* Objects on the queue: a base the slow paths adjust, plus the fast paths'
 * pushes less their pops (their counters), so the inline pop keeps no
 * count of its own. */
static inline uint64_t queue_len(const struct cpu_cache *c)
{
	return (uint64_t)((int64_t)c->free_fast - (int64_t)c->alloc_fast + c->qadj);
}

/* flush_free_list: up to `nr` objects from the queue's head, each to its
 * slab (owned by c) or home. */
static void queue_flush(struct uslab_cache *s, struct cpu_cache *c, uint64_t nr)
{
	uint64_t k = 0;
	while (k < nr && c->freelist) {
		void *x = c->freelist;
		c->freelist = get_freepointer(s, x);
		route(s, c, slab_of(x), x);
		k++;
	}
	c->qadj -= (int64_t)k;
	stat_inc(s, c, USLAB_STAT_FLUSH_FREE_LIST);
	stat_add(s, c, USLAB_STAT_FLUSH_FREE_LIST_OBJECTS, k);
}

/* ---- allocation --------------------------------------------------------------- */

static void *queue_pop(struct uslab_cache *s, struct cpu_cache *c);

/* A node partial slab for c to own (node lock, one hold): frozen, its
 * word's list taken into *fl (cnt objects). NULL if the list is empty. */
static struct slab *take_node_slab(struct uslab_cache *s, struct cpu_cache *c, void **fl, unsigned *cnt)
{
	struct node *n = &s->node;
	if (!atomic_load_explicit(&n->nr_partial, memory_order_relaxed))
		return NULL;   /* racy peek, as SLUB's: a miss only means a new slab */
	slab_node_lock(s, c);
	struct slab *d = n->partial_head;
	if (d) {
		remove_partial_locked(n, d);
		uint64_t old = atomic_load_explicit(&d->fc, memory_order_acquire);
		/* listed slabs are unfrozen and have free objects; only list
		 * holders take them */
		while (!slab_cas(d, &old, fc_make(NULL, d->objects, true)))
			stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
		*fl = fc_freelist(old, d);
		*cnt = d->objects - fc_inuse(old);
		stat_inc(s, c, USLAB_STAT_ALLOC_FROM_PARTIAL);
	}
	slab_node_unlock(s);
	return d;
}

/* A slab for c to allocate from, with its free objects in *fl: the node
 * list's, else a new one. NULL: no memory. */
static struct slab *acquire_slab(struct uslab_cache *s, struct cpu_cache *c, void **fl, unsigned *cnt)
{
	struct slab *d = take_node_slab(s, c, fl, cnt);
	if (!d && (d = slab_take_empty(s, c)) != NULL) {
		/* unlisted and empty: nobody else can touch its word */
		uint64_t old = atomic_load_explicit(&d->fc, memory_order_acquire);
		while (!slab_cas(d, &old, fc_make(NULL, d->objects, true)))
			stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
		*fl = fc_freelist(old, d);
		*cnt = d->objects;
	}
	if (!d) {
		d = slab_new(s, c, fl);
		if (!d)
			return NULL;
		*cnt = d->objects;
	}
	d->lfree = NULL;
	own(s, c, d);
	return d;
}

/* Carve objects of c's current slab d onto c->freelist (empty); false if
 * d has none uncarved. */
static bool carve_current(struct uslab_cache *s, struct cpu_cache *c, struct slab *d)
{
	void *tail;
	return slab_carve(s, d, 1, &c->freelist, &tail) != 0;
}

/* home: make c->freelist non-empty. False: no memory. */
static bool home_refill(struct uslab_cache *s, struct cpu_cache *c)
{
	struct slab *d = c->slab;
	unsigned n;
	if (d && (c->freelist = take_stray(s, c, d, &n)) != NULL) {
		stat_inc(s, c, USLAB_STAT_ALLOC_REFILL);
		return true;
	}
	if (d && carve_current(s, c, d))   /* freed objects first, then new ones */
		return true;
	if (claim_inbox(s, c, c) && c->freelist)
		return true;
	demote_current(s, c);
	if (c->rn)   /* before the part takes more slabs: send what it holds for others */
		rbatch_flush(s, c);
	/* a partial slab of its own, else an empty one of its stash */
	if ((d = c->own_partial.head) != NULL)
		own_del(&c->own_partial, d);
	else if ((d = stash_pop(c)) != NULL)
		d->next = NULL;
	if (d) {
		merge_stray(s, c, d);
		void *fl = d->lfree;
		d->lfree = NULL;
		set_current(s, c, d, fl);
		if (!fl)
			carve_current(s, c, d);   /* partial by its uncarved objects alone */
		stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_ALLOC);
		return true;
	}
	void *fl;
	d = acquire_slab(s, c, &fl, &n);
	if (!d)
		return false;
	set_current(s, c, d, fl);
	if (!fl)
		carve_current(s, c, d);
	return true;
}

/* slqb: one object. The queue (empty here: the fast path pops it) after a
 * claim of the inbox, else one object of an owned slab (cache_list_get_page),
 * else a node or new slab. NULL: no memory. */
static void *slqb_alloc(struct uslab_cache *s, struct cpu_cache *c)
{
	if (atomic_load_explicit(&c->inbox, memory_order_relaxed)) {
		/* claim_remote_free_list: the objects join the queue (whoever's) */
		void *p = atomic_exchange_explicit(&c->inbox, NULL, memory_order_acquire);
		unsigned n = 0;
		void *tail = NULL;
		for (void *q = p; q; q = get_freepointer(s, q)) {
			tail = q;
			n++;
		}
		if (p) {
			set_freepointer(s, tail, c->freelist);
			c->freelist = p;
			c->qadj += n;
			stat_inc(s, c, USLAB_STAT_CLAIM_REMOTE_LIST);
			stat_add(s, c, USLAB_STAT_CLAIM_REMOTE_LIST_OBJECTS, n);
			if (queue_len(c) > c->hiwater)
				queue_flush(s, c, c->freebatch);
		}
		if (c->freelist)
			return queue_pop(s, c);
	}
	struct slab *d = c->own_partial.head;
	if (!d) {
		void *fl;
		unsigned n;
		if (c->rn)
			rbatch_flush(s, c);
		d = acquire_slab(s, c, &fl, &n);
		if (!d)
			return NULL;
		d->lfree = fl;
		d->pfree = (uint16_t)(d->objects - n);
		own_add(&c->own_partial, d);
	}
	if (!d->lfree)
		merge_stray(s, c, d);
	if (!d->lfree) {   /* partial by its uncarved objects alone */
		void *tail;
		slab_carve(s, d, 1, &d->lfree, &tail);
	}
	void *x = d->lfree;
	void *next = get_freepointer(s, x);
	if (unlikely(next && !slab_obj_valid(s, d, next)))
		slab_bad_freelist(s, x, next);
	d->lfree = next;
	d->pfree++;
	if (!next) {
		merge_stray(s, c, d);
		if (!d->lfree && !slab_uncarved(d)) {
			own_del(&c->own_partial, d);
			own_add(&c->own_full, d);
		}
	}
	return x;
}

void *home_alloc_slow(struct uslab_cache *s, struct cpu_cache *c)
{
	void *x;
	if (is_slqb(c)) {
		if (!(x = slqb_alloc(s, c)))
			goto fail;
	} else {
		if (!c->freelist && !home_refill(s, c))
			goto fail;
		x = c->freelist;
		void *next = get_freepointer(s, x);
		if (unlikely(!cpu_next_ok(c, next)))
			slab_bad_freelist(s, x, next);
		c->freelist = next;
	}
	cpu_fp_scrub(c, x);
	stat_inc(s, c, USLAB_STAT_ALLOC_SLOWPATH);
	return x;
fail:
	stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
	errno = ENOMEM;
	return NULL;
}

/* ---- free ----------------------------------------------------------------------- */

/* slqb: push x (checked) onto the queue (__slab_free: every free of the
 * node), flushing freebatch objects above hiwater. `fast`: counted as a
 * fast-path free (a single free), else the caller counts it (bulk). */
static void queue_push(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, void *x, bool fast)
{
	if (unlikely(x == c->freelist))
		slab_bad_free(s, d, x, "double free");
	set_freepointer(s, x, c->freelist);
	c->freelist = x;
	if (fast)
		cpu_tick(&c->free_fast);
	else
		c->qadj++;
	if (unlikely(queue_len(c) > c->hiwater))
		queue_flush(s, c, c->freebatch);
}

/* x: checked, an object of s (slab d). c: this thread's part, home or slqb. */
void home_free(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, void *x)
{
	if (is_slqb(c)) {
		queue_push(s, c, d, x, true);   /* SLQB's fast path, out of line here */
		return;
	}
	struct cpu_cache *o = atomic_load_explicit(&d->owner, memory_order_relaxed);
	stat_inc(s, c, USLAB_STAT_FREE_SLOWPATH);
	if (o && o != c)
		stat_inc(s, c, USLAB_STAT_FREE_REMOTE);
	route(s, c, d, x);
	/* what others sent us meanwhile: routed here too, not only at an
	 * allocation slow path, so that a thread that only frees (the end of
	 * a burst handed across threads) lets its slabs empty and go back */
	claim_inbox(s, c, c);
}

void home_free_local(struct slab *d, void *x)
{
	struct cpu_cache *c = atomic_load_explicit(&d->owner, memory_order_relaxed);
	struct uslab_cache *s = c->cache;
	if (unlikely(!slab_obj_valid(s, d, x))) {
		slab_bad_free(s, d, x, "invalid free");
	}
	fp_check_free(s, d, x);
	track_free(x, s->object_size);
	cpu_busy(c);
	stat_inc(s, c, USLAB_STAT_FREE_SLOWPATH);
	/* other threads' frees of our objects: routed here too, not only at
	 * an allocation slow path, so that a thread that only frees (the end
	 * of a burst) lets its slabs empty and go back */
	claim_inbox(s, c, c);
	route(s, c, d, x);
	cpu_idle(c);
}

/* ---- giving everything back ------------------------------------------------------ */

/* Give back what c holds: its batch home, its inbox routed, the queue to
 * the slabs, every owned slab to the node list (or freed). The part keeps
 * nothing; its next slow path starts afresh. */
void home_flush_cpu(struct uslab_cache *s, struct cpu_cache *c)
{
	if (c->mode != CPU_HOME && c->mode != CPU_SLQB) {
		/* another mode now: remote freers that saw it in home mode may
		 * still have sent it batches; each object goes to its slab */
		claim_inbox(s, c, NULL);
		return;
	}
	if (is_slqb(c) && c->freelist)
		queue_flush(s, c, UINT64_MAX);
	claim_inbox(s, c, c);
	demote_current(s, c);
	if (c->rn)
		rbatch_flush(s, c);
	struct slab *lists[2] = { c->own_partial.head, c->own_full.head };
	c->own_partial.head = c->own_partial.tail = c->own_full.head = c->own_full.tail = NULL;
	stash_drain(s, c, c);
	for (unsigned i = 0; i < 2; i++) {
		for (struct slab *d = lists[i], *nx; d; d = nx) {
			nx = d->next;
			d->next = d->prev = NULL;
			merge_stray(s, c, d);
			disown(s, c, d);
		}
	}
	/* objects pushed by freers that read the old owners meanwhile; a
	 * batch to a part whose thread is gone is routed again, and may
	 * leave objects in c's batch for others */
	claim_inbox(s, c, c);
	while (c->rn)
		rbatch_flush(s, c);
}

/* The inbox of a part whose thread is gone (cache_mutex held): route what
 * arrived since it was detached. */
void home_drain_dead(struct uslab_cache *s, struct cpu_cache *c)
{
	claim_inbox(s, c, NULL);
}

void home_setup_cpu(struct uslab_cache *s, struct cpu_cache *c, unsigned mode)
{
	c->mode = (uint8_t)mode;
	c->freelist = NULL;
	cpu_set_slab(s, c, NULL);
	c->own_partial.head = c->own_partial.tail = c->own_full.head = c->own_full.tail = NULL;
	c->rdest = NULL;
	c->rhead = c->rtail = NULL;
	c->rn = 0;
	c->qadj = (int64_t)c->alloc_fast - (int64_t)c->free_fast;   /* queue_len() 0 */
	unsigned size = s->size;
	unsigned long fb = MAX(4UL * PAGE_SIZE / size, MIN(256UL, 64UL * PAGE_SIZE / size));
	c->freebatch = (uint32_t)MAX(1UL, fb);
	c->hiwater = c->freebatch << 2;
}

/* ---- bulk ------------------------------------------------------------------------- */

/* Pop slqb's queue (checked: its links may lead to any slab of the
 * cache), uncounted by the fast paths: the caller counts it. */
static void *queue_pop(struct uslab_cache *s, struct cpu_cache *c)
{
	void *x = c->freelist;
	void *next = get_freepointer(s, x);
	struct slab *nd = next ? slab_of(next) : NULL;
	if (unlikely(next && (slab_kind(nd) != SK_SLAB || nd->cache != s || !slab_obj_valid(s, nd, next))))
		slab_bad_freelist(s, x, next);
	c->freelist = next;
	c->qadj--;
	return x;
}

size_t home_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	size_t i = 0;
	while (i < nr) {
		if (is_slqb(c)) {
			void *x = c->freelist ? queue_pop(s, c) : slqb_alloc(s, c);
			if (!x)
				goto fail;
			cpu_fp_scrub(c, x);
			objs[i++] = x;
			continue;
		}
		if (!c->freelist && !home_refill(s, c))
			goto fail;
		/* the current slab's list in one go; locals, so that the stores
		 * to objs[] cannot alias the part */
		void *x = c->freelist;
		const uintptr_t base = c->slab_base, span = c->slab_span;
		while (i < nr && x) {
			void *next = get_freepointer(s, x);
			if (unlikely(next && (uintptr_t)next - base >= span))
				slab_bad_freelist(s, x, next);
			cpu_fp_scrub(c, x);
			objs[i++] = x;
			x = next;
		}
		c->freelist = x;
	}
	return nr;
fail:
	/* nothing stays allocated: what was taken goes back uncounted (the
	 * program never had it; bulk.c) */
	if (i)
		home_free_bulk(s, c, i, objs);
	stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
	errno = ENOMEM;
	return 0;
}

/* objs[]: checked objects of s, none NULL; the array is left as it was. */
void home_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	for (size_t i = 0; i < nr; i++) {
		void *x = objs[i];
		struct slab *d = slab_of(x);
		fp_check_free(s, d, x);   /* free already, or twice in this batch */
		if (is_slqb(c))
			queue_push(s, c, d, x, false);
		else
			route(s, c, d, x);
	}
}

/* ---- the bulk API's lean paths (home mode) ------------------------------------------ */

size_t home_alloc_bulk_fast(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	size_t i = 0;
	cpu_busy(c);   /* objects leave the list before c->freelist says so (a fork child: tls.c) */
	void *x = c->freelist;
	uintptr_t base = c->slab_base, span = c->slab_span;   /* locals: objs[] may alias the part */
	while (i < nr) {
		if (unlikely(!x)) {
			c->freelist = NULL;
			slab_cpu_enter(s, c);   /* a slow path from here: its bookkeeping */
			bool ok = c->mode == CPU_HOME && home_refill(s, c);
			if (!ok) {
				/* nothing stays allocated: what was taken goes back
				 * uncounted (bulk.c), through whatever mode the part
				 * runs now (still marked busy); the caller's general
				 * path tries once more (the pages given back may serve
				 * it) and counts a failure only if that fails too */
				for (size_t j = 0; USLAB_TRACKED && j < i; j++)
					track_free(objs[j], s->object_size);
				if (i)
					home_free_bulk(s, c, i, objs);
				cpu_idle(c);
				return 0;   /* (a mode change: the caller's general path) */
			}
			x = c->freelist;
			base = c->slab_base;
			span = c->slab_span;
		}
		void *next = cpu_fp_get(c, x);
		if (unlikely(next && (uintptr_t)next - base >= span))
			slab_bad_freelist(s, x, next);
		cpu_fp_scrub(c, x);
		track_alloc(x, s->object_size);
		objs[i++] = x;
		x = next;
	}
	c->freelist = x;
	cpu_idle(c);
	stat_add(s, c, USLAB_STAT_ALLOC_BULK, nr);
	return nr;
}

/* One object the lean loop does not take (not a live slab object of the
 * cache, or a KFENCE object): reported, or freed and counted (a KFENCE
 * object as a bulk free; the rest by the single free's path). */
static void bulk_free_one(struct uslab_cache *named, void *x)
{
	struct slab *d = slab_of(x);
	struct uslab_cache *s = cache_root(named);
	if (slab_kind(d) != SK_SLAB || d->cache != s || !slab_obj_valid(s, d, x)) {
		if (kfence_owns(x)) {
			kfence_free(x, named, __builtin_return_address(0), USLAB_STAT_FREE_BULK);
			return;
		}
		slab_bad_free(named, d, x, "invalid free");
	}
	slab_free_slow(named, d, x, NULL, __builtin_return_address(0));
}

void home_free_bulk_fast(struct uslab_cache *named, struct cpu_cache *c, size_t nr, void **objs)
{
	struct uslab_cache *s = cache_root(named);
	/* locals: the stores into objects could alias the part's fields */
	const uint32_t inv = s->divinv, dk = s->divk;
	const uintptr_t key = c->fp_key;
	const unsigned fpoff = c->offset;
	struct slab *d = NULL;
	uintptr_t base = 0, span = 0;   /* the last slab seen, if this thread owns it: objects freed
	                                 * together mostly share one */
	void *head = NULL, *tail = NULL;   /* its objects, chained */
	unsigned n = 0;
	size_t skipped = 0;
	cpu_busy(c);
	for (size_t i = 0; i < nr; i++) {
		void *x = objs[i];
		uintptr_t off = (uintptr_t)x - base;
		if (unlikely(off >= span)) {
			if (n)
				own_splice(s, c, d, head, tail, n);
			n = 0;
			head = NULL;
			base = span = 0;
			if (!x) {
				skipped++;
				continue;
			}
			d = slab_of(x);
			base = (uintptr_t)slab_address(d);
			if (unlikely(slab_kind(d) != SK_SLAB) || unlikely(d->cache != s) ||
			    unlikely(!slab_obj_valid(s, d, x))) {   /* (any slot of the slab) */
				bulk_free_one(named, x);   /* reported (an interior pointer, another cache's
				                            * object ...), or a KFENCE object freed */
				skipped++;
				base = 0;
				continue;
			}
			track_free(x, s->object_size);
			if (atomic_load_explicit(&d->owner, memory_order_relaxed) != c) {
				fp_check_free(s, d, x);
				route(s, c, d, x);   /* another part's object: its remote batch */
				base = 0;
				continue;
			}
			span = (uintptr_t)d->objects * s->size;
			off = (uintptr_t)x - base;
		} else {
			if (unlikely(slab_obj_index((uint32_t)off, inv, dk) >= d->objects)) {   /* (off < span) */
				bulk_free_one(named, x);   /* not on an object boundary: reported */
				skipped++;
				continue;
			}
			track_free(x, s->object_size);
		}
		/* one of ours: onto the chain. The double-free mark first: free
		 * already, or twice in this batch (its word is a link then). */
		void **where = (void **)((char *)x + fpoff);
		uintptr_t mask = USLAB_HARDENED ? key ^ __builtin_bswap64((uintptr_t)where) : 0;
		if (USLAB_HARDENED && unlikely(!(((uintptr_t)*where ^ mask) & FP_NOT_LINK)))
			fp_double_free(s, d, x);   /* noise if it returns */
		*where = (void *)((uintptr_t)head ^ mask);
		head = x;
		if (!n++)
			tail = x;
	}
	if (n)
		own_splice(s, c, d, head, tail, n);
	cpu_idle(c);
	stat_add(s, c, USLAB_STAT_FREE_BULK, nr - skipped);
}

/* ---- the modes' tables ------------------------------------------------------- */

static void home_setup(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	(void)cap;
	home_setup_cpu(s, c, CPU_HOME);
}

static void slqb_setup(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	(void)cap;
	home_setup_cpu(s, c, CPU_SLQB);
}

const struct cpu_mode_ops cpu_home_ops = {
	.name = "home",
	.setup = home_setup,
	.alloc_slow = home_alloc_slow,
	.free_slow = home_free,
	.flush = home_flush_cpu,
	.alloc_bulk = home_alloc_bulk,
	.free_bulk = home_free_bulk,
};

const struct cpu_mode_ops cpu_slqb_ops = {
	.name = "slqb",
	.setup = slqb_setup,
	.alloc_slow = home_alloc_slow,
	.free_slow = home_free,
	.flush = home_flush_cpu,
	.alloc_bulk = home_alloc_bulk,
	.free_bulk = home_free_bulk,
};
