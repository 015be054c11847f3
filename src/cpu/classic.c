/*
 * Classic mode (a cache with sheaf_capacity 0): SLUB's per-CPU layer as the
 * 2011 per-CPU partial lists thread left it, kept as the reference for the
 * experiments, and nothing more.
 *
 * A CPU part has a CPU slab (frozen: only this CPU allocates from it), whose
 * free list it pops and pushes on the fast paths (slab.h), and a CPU partial
 * list of more frozen slabs. Allocation, when the CPU free list runs out:
 *   1. the CPU slab's own list: what other threads freed to it (one CAS);
 *   2. the next slab of the CPU partial list becomes the CPU slab;
 *   3. the node partial list: the first slab becomes the CPU slab, more go
 *      onto the CPU partial list, up to half of its bound, all in one node
 *      lock hold;
 *   4. a new slab.
 * A CPU slab that runs out is unfrozen (full, on no list); the first free
 * to it freezes it again, onto the freeing CPU's partial list (slab.c's
 * free_chain, one CAS and no node lock). When the list would hold more
 * slabs than its bound, the whole list is unfrozen onto the node list
 * first, in one lock hold (unfreeze_partials). The bound is in slabs, as
 * the kernel's since 5.16 (cpu_partial_slabs: cpu_partial objects, twice,
 * over the objects a slab holds), not the 2011 thread's count of free
 * objects when slabs join (pobjects): a slab frozen by a free into a full
 * slab brings one free object, so 120 of them could stay with one CPU, 7.5
 * MiB of 64 KiB slabs. cpu_partial 0: no CPU partial lists.
 *
 * States of a slab this file handles (frozen = FC_FROZEN in the word):
 *
 *   state            frozen  on a list          who allocates     who frees
 *   CPU slab         yes     none (c->slab)     its CPU, fast     its CPU fast; others CAS
 *   CPU partial      yes     c->partial (LIFO)  its CPU, later    anyone, CAS
 *   node partial     no      node list          a refill, locked  anyone, CAS (lock if listing)
 *   full             no      none               nobody            anyone: freezes it (CAS)
 *
 * Only the owning part unfreezes a frozen slab (deactivate_slab,
 * unfreeze_partials), by CAS, under the node lock when it lists it.
 */
#include "cpu.h"

#include <errno.h>

/* ---- the CPU partial list (owner only) --------------------------------- */

/* The list head is stored with a relaxed atomic store (a plain mov): a
 * thread taking memory back (decay.c) peeks whether the part holds slabs. */
static inline void set_partial(struct cpu_cache *c, struct slab *slab)
{
	__atomic_store_n(&c->partial, slab, __ATOMIC_RELAXED);
}
/* Last in, first out, as SLUB's: through slab->next, counted in
 * c->partial_slabs; slab->pfree keeps the free objects it brought. */

static void push_partial(struct cpu_cache *c, struct slab *slab, unsigned nfree)
{
	if (unlikely(slab->on_node || !fc_frozen(atomic_load_explicit(&slab->fc, memory_order_relaxed))))
		report_fatal("slab %p of cache '%s': on a CPU partial list while listed or not frozen",
			     slab_base(slab), slab->cache->name);
	slab->pfree = (uint16_t)nfree;
	slab->next = c->partial;
	set_partial(c, slab);
	c->partial_slabs++;
}

static struct slab *pop_partial(struct cpu_cache *c)
{
	struct slab *slab = c->partial;
	if (!slab)
		return NULL;
	set_partial(c, slab->next);
	c->partial_slabs--;
	slab->next = NULL;
	return slab;
}

/* Unfreeze a frozen slab of c, with the chain head..tail of nfree of its
 * objects spliced onto its list. Returns the new word, and in *prior the
 * list it had. */
static uint64_t unfreeze(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head, void *tail,
			 unsigned nfree, void **prior)
{
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire), new;
	for (;;) {
		*prior = fc_freelist(old, slab);
		if (tail)
			set_freepointer(s, tail, *prior);
		if (unlikely(fc_inuse(old) < nfree))
			report_fatal("slab %p of cache '%s': inuse %u below the %u objects its CPU gives back",
				     slab_base(slab), s->name, fc_inuse(old), nfree);
		new = fc_make(head ? head : *prior, fc_inuse(old) - nfree, false);
		if (slab_cas(slab, &old, new))
			return new;
		stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	}
}

/* Unfreeze the whole CPU partial list onto the node list, in one lock
 * hold: slabs with free objects are listed, empty ones beyond min_partial
 * go back to the page allocator (unfreeze_partials). */
static void unfreeze_partials(struct uslab_cache *s, struct cpu_cache *c)
{
	struct node *n = &s->node;
	struct slab *list = c->partial, *discard = NULL;
	if (!list)
		return;
	set_partial(c, NULL);
	c->partial_slabs = 0;
	slab_node_lock(s, c);
	while (list) {
		struct slab *slab = list;
		void *prior;
		list = slab->next;
		uint64_t new = unfreeze(s, c, slab, NULL, NULL, 0, &prior);
		if (!fc_inuse(new) && atomic_load_explicit(&n->nr_partial, memory_order_relaxed) >= TUNE(s, min_partial)) {
			slab->next = discard;
			discard = slab;
		} else {
			add_partial_locked(n, slab, true);
			stat_inc(s, c, USLAB_STAT_FREE_ADD_PARTIAL);
		}
	}
	slab_node_unlock(s);
	while (discard) {
		struct slab *slab = discard;
		discard = slab->next;
		slab_discard(s, c, slab);
	}
	stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_DRAIN);
}

/* The CPU partial list's bound in slabs (slub_set_cpu_partial() since
 * Linux 5.16): cpu_partial objects, twice, over a slab's objects, rounded
 * up; 0 with cpu_partial 0. */
static unsigned partial_slabs_max(struct uslab_cache *s)
{
	unsigned cp = TUNE(s, cpu_partial), per = MAX(oo_objects(cache_oo(s)), 1U);
	return (2 * cp + per - 1) / per;
}

void cpu_slab_put_partial(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, unsigned nfree)
{
	if (c->partial && c->partial_slabs + 1 > partial_slabs_max(s))
		unfreeze_partials(s, c);
	push_partial(c, slab, nfree);
}

/*
 * Give up the CPU slab (deactivate_slab): splice the CPU's free objects
 * onto the slab's list, unfreeze it, and put it on the node list if it has
 * free objects (or free it if it is empty and the node has enough).
 */
void cpu_slab_deactivate(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *freelist)
{
	struct node *n = &s->node;
	unsigned nfree = 0;
	void *tail = NULL, *prior;
	for (void *p = freelist; p; p = get_freepointer(s, p)) {
		tail = p;
		if (unlikely(++nfree > slab->objects))
			slab_bad_freelist(s, p, get_freepointer(s, p));
	}
	/* the uncarved objects were ours too: back to the slab, unlisted
	 * objects no more (its inuse counts carved objects out). Read while
	 * the slab is still ours: once unfrozen full, it is not (a free lists
	 * it, another empties it, and its record may be a new slab's, of
	 * another cache, before the next line runs). */
	const unsigned uncarved = slab_uncarved(slab);
	uint64_t new = unfreeze(s, c, slab, freelist, tail, nfree + uncarved, &prior);
	if (prior)
		stat_inc(s, c, USLAB_STAT_DEACTIVATE_REMOTE_FREES);
	if (!fc_freelist(new, slab) && !uncarved) {
		stat_inc(s, c, USLAB_STAT_DEACTIVATE_FULL);
		return;   /* full: on no list; the first free freezes it again */
	}
	/* Partial (a list, or uncarved objects): still ours to list, as no
	 * free lists or discards an unlisted slab with free objects. */
	slab_node_lock(s, c);
	/* Reread: a free may have emptied it since (and, finding it unlisted,
	 * left it to us: only we list it). */
	if (!fc_inuse(atomic_load_explicit(&slab->fc, memory_order_acquire)) &&
	    atomic_load_explicit(&n->nr_partial, memory_order_relaxed) >= TUNE(s, min_partial)) {
		slab_node_unlock(s);
		stat_inc(s, c, USLAB_STAT_DEACTIVATE_EMPTY);
		slab_discard(s, c, slab);
		return;
	}
	/* Cache-hot objects (the CPU's own) at the head, cold at the tail. */
	add_partial_locked(n, slab, nfree == 0);
	slab_node_unlock(s);
	stat_inc(s, c, nfree ? USLAB_STAT_DEACTIVATE_TO_HEAD : USLAB_STAT_DEACTIVATE_TO_TAIL);
}

void cpu_slab_flush(struct uslab_cache *s, struct cpu_cache *c)
{
	if (c->slab) {
		struct slab *slab = c->slab;
		void *fl = c->freelist;
		cpu_set_slab(s, c, NULL);
		c->freelist = NULL;
		stat_inc(s, c, USLAB_STAT_CPUSLAB_FLUSH);
		cpu_slab_deactivate(s, c, slab, fl);
	}
	unfreeze_partials(s, c);
}

/* ---- allocation -------------------------------------------------------- */

/* Take a frozen slab's list (get_freelist): what other threads freed to
 * it, or, if that is empty, objects carved from its uncarved ones (which
 * the take makes ours: inuse = objects). It stays frozen; NULL if it has
 * neither (no CAS then). */
static void *take_frozen_list(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	void *fl;
	do {
		fl = fc_freelist(old, slab);
		if (!fl && !slab_uncarved(slab))
			return NULL;
	} while (!slab_cas(slab, &old, fc_make(NULL, slab->objects, true)) &&
		 (stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL), 1));
	if (!fl) {   /* taken with its uncarved objects (slab.h, "carving"): carve some */
		void *tail;
		slab_carve(s, slab, 1, &fl, &tail);
	}
	return fl;
}

/* Freeze a listed slab (node lock held) for c; returns its free objects. */
static unsigned freeze_listed(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	while (!slab_cas(slab, &old, old | FC_FROZEN))
		stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	return slab->objects - fc_inuse(old);
}

/* Refill from the node partial list (get_partial_node): the first slab
 * becomes the CPU slab (its whole list taken), more are frozen onto the CPU
 * partial list up to half of its bound in slabs, in one lock hold.
 * Returns the CPU slab's free list or NULL. */
static void *get_partial_node(struct uslab_cache *s, struct cpu_cache *c)
{
	struct node *n = &s->node;
	void *object = NULL;
	unsigned moved = 0, max = partial_slabs_max(s);
	if (!atomic_load_explicit(&n->nr_partial, memory_order_relaxed))
		return NULL;   /* racy peek, as SLUB's: a miss only means a new slab */
	slab_node_lock(s, c);
	struct slab *slab;
	while ((slab = n->partial_head) != NULL) {
		remove_partial_locked(n, slab);
		unsigned nfree = freeze_listed(s, c, slab);
		if (!object) {
			/* listed slabs have free objects, and only list holders take them */
			object = take_frozen_list(s, c, slab);
			cpu_set_slab(s, c, slab);
			stat_inc(s, c, USLAB_STAT_ALLOC_FROM_PARTIAL);
		} else {
			push_partial(c, slab, nfree);
			moved++;
			stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_NODE);
		}
		if (!max || moved > max / 2)
			break;
	}
	slab_node_unlock(s);
	return object;
}

bool cpu_slab_refill(struct uslab_cache *s, struct cpu_cache *c)
{
	void *fl;
	struct slab *slab = c->slab;
	if (slab) {
		fl = take_frozen_list(s, c, slab);   /* other threads' frees to our CPU slab */
		if (fl) {
			c->freelist = fl;
			stat_inc(s, c, USLAB_STAT_ALLOC_REFILL);
			return true;
		}
		/* full: unfrozen, on no list, until a free freezes it again */
		cpu_set_slab(s, c, NULL);
		stat_inc(s, c, USLAB_STAT_DEACTIVATE_BYPASS);
		cpu_slab_deactivate(s, c, slab, NULL);
	}
	while ((slab = pop_partial(c)) != NULL) {
		fl = take_frozen_list(s, c, slab);   /* frozen slabs only gain objects: never empty */
		if (likely(fl)) {
			cpu_set_slab(s, c, slab);
			c->freelist = fl;
			stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_ALLOC);
			return true;
		}
		cpu_slab_deactivate(s, c, slab, NULL);
	}
	fl = get_partial_node(s, c);
	if (fl) {
		c->freelist = fl;
		return true;
	}
	slab = slab_new(s, c, &fl);
	if (!slab)
		return false;
	cpu_set_slab(s, c, slab);
	c->freelist = fl;
	return true;
}

void *cpu_slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c)
{
	if (!c->freelist && !cpu_slab_refill(s, c)) {
		stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
		errno = ENOMEM;
		return NULL;
	}
	void *x = c->freelist, *next = get_freepointer(s, x);
	if (unlikely(!cpu_next_ok(c, next)))
		slab_bad_freelist(s, x, next);
	c->freelist = next;
	cpu_fp_scrub(c, x);
	stat_inc(s, c, USLAB_STAT_ALLOC_SLOWPATH);
	return x;
}

/* ---- free ------------------------------------------------------------------- */

void cpu_slab_free_slow(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *x)
{
	stat_inc(s, c, USLAB_STAT_FREE_SLOWPATH);
	if (slab == c->slab) {   /* the fast path's checks failed: only a double free is left */
		if (unlikely(x == c->freelist))
			slab_bad_free(s, slab, x, "double free");
		set_freepointer(s, x, c->freelist);
		c->freelist = x;
		return;
	}
	slab_free_chain(s, c, slab, x, x, 1, TUNE(s, cpu_partial) != 0);
}

/* ---- bulk ------------------------------------------------------------------- */

/* Classic: pop the CPU free list, refilling it as needed. */
size_t cpu_slab_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	const unsigned offset = s->offset;
	const uintptr_t key = s->fp_key;
	size_t i = 0;
	while (i < nr) {
		/* in locals: the stores to objs[] could alias the CPU part */
		void *x = c->freelist;
		const uintptr_t base = c->slab_base, span = c->slab_span;
		while (i < nr && x) {
			void **where = (void **)((char *)x + offset);
			void *next = (void *)((uintptr_t)*where ^ (USLAB_HARDENED ? key ^ __builtin_bswap64((uintptr_t)where) : 0));
			if (unlikely(next && (uintptr_t)next - base >= span))
				slab_bad_freelist(s, x, next);
			*where = NULL;   /* the double-free mark (slab.h) */
			objs[i++] = x;
			x = next;
		}
		c->freelist = x;
		if (i < nr && !cpu_slab_refill(s, c)) {
			/* nothing stays allocated: what was taken goes back
			 * uncounted (the program never had it: neither its
			 * allocations nor its frees change; ALLOC_FAILED says
			 * what happened), never handed out under hardened */
			if (i)
				cpu_slab_free_bulk(s, c, i, objs);
			stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
			errno = ENOMEM;
			return 0;
		}
	}
	return nr;
}

/* Classic: objects of the CPU slab onto the CPU free list, the rest to
 * their slabs in groups. objs[] holds checked objects, no NULL. */
void cpu_slab_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	void *chunk[64];
	unsigned k = 0;
	void *head = NULL, *tail = NULL;
	unsigned cnt = 0;
	const uintptr_t base = c->slab_base, span = c->slab_span;
	void *const cfree = c->freelist;
	for (size_t i = 0; i < nr; i++) {
		void *x = objs[i];
		if ((uintptr_t)x - base < span) {
			if (unlikely(x == head || x == cfree))
				slab_bad_free(s, c->slab, x, "double free");
			fp_check_free(s, c->slab, x);   /* twice in this batch, or free already */
			set_freepointer(s, x, head);
			if (!head)
				tail = x;
			head = x;
			cnt++;
			continue;
		}
		chunk[k++] = x;
		if (k == 64) {
			slab_free_objects(s, c, chunk, k, TUNE(s, cpu_partial) != 0, false);
			k = 0;
		}
	}
	if (k)
		slab_free_objects(s, c, chunk, k, TUNE(s, cpu_partial) != 0, false);
	if (cnt) {
		set_freepointer(s, tail, c->freelist);
		c->freelist = head;
	}
}

/* ---- the mode's table ------------------------------------------------------ */

static void classic_setup(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	(void)s, (void)cap;
	c->mode = CPU_CLASSIC;
}

const struct cpu_mode_ops cpu_classic_ops = {
	.name = "classic",
	.setup = classic_setup,
	.alloc_slow = cpu_slab_alloc_slow,
	.free_slow = cpu_slab_free_slow,
	.flush = cpu_slab_flush,
	.alloc_bulk = cpu_slab_alloc_bulk,
	.free_bulk = cpu_slab_free_bulk,
};
