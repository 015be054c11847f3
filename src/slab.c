/*
 * The SLUB core: slow paths of allocation and free, freezing, CPU partial
 * lists, the node partial list, the CPU object queue, new and discarded
 * slabs. The fast paths are inline in slab.h (slab_alloc_fast and
 * slab_free_fast), shared by the cache API and the malloc family.
 *
 * Lock order and what protects what (after mm/slub.c):
 *
 *   cache_mutex (cache.c)       cache list, ids, CPU-part lists, folding stats
 *     node->list_lock           node partial list, nr_partial, slab->on_node
 *       slab->fc CAS            a slab's free list, inuse and frozen together
 *         page lock (page.c)    free page blocks, segments
 *
 * Frozen slabs: a slab is frozen while it is some CPU part's CPU slab, on
 * its CPU partial list, or parked on its full list (see "parked slabs").
 * Only that CPU part (slab->owner) allocates from it, moves it, or pushes
 * onto its owner-local list (slab->local, plain stores: the owner's own
 * frees); other threads may only push freed objects onto slab->fc's free
 * list by CAS. An unfrozen slab is either on the node partial list
 * (on_node) or full and on no list at all (SLUB keeps no full list).
 *
 * A free into a full, unfrozen slab freezes it onto the freeing thread's CPU
 * partial list, so a remote free takes one CAS and no lock. The node lock is
 * taken by a free only to take an emptied slab off the node list (or, with
 * cpu_partial 0 or no CPU part, to put a formerly full slab on it). A free
 * into a slab that another CPU is allocating from (frozen, owner not us)
 * does not even CAS at once: the object waits in the freeing CPU's object
 * queue and goes back with others of its slab, one CAS per group.
 *
 * Memory ordering: the fc CAS is acq_rel. A releasing CAS publishes the
 * free-pointer written into the object before it; the acquiring CAS that
 * takes the list makes those writes visible to the new owner.
 */
#include "slab.h"

#include <errno.h>
#include <string.h>

#define NODE_LOCK(s, c, n)  do { pthread_mutex_lock(&(n)->list_lock); stat_inc(s, c, USLAB_STAT_NODE_LOCK); } while (0)
#define NODE_UNLOCK(n)      pthread_mutex_unlock(&(n)->list_lock)

/*
 * A process with one thread needs no lock prefix on the slab word: glibc
 * keeps __libc_single_threaded set until the first pthread_create (which
 * synchronizes with the new thread), and its own malloc elides atomics the
 * same way (SINGLE_THREAD_P). Like any malloc, uslab is not for use from
 * signal handlers, which is the only other way in.
 */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
#include <sys/single_threaded.h>
#define single_threaded() (__libc_single_threaded != 0)
#else
#define single_threaded() false
#endif

static inline bool fc_cas(struct slab *slab, uint64_t *old, uint64_t new)
{
	if (single_threaded()) {
		atomic_store_explicit(&slab->fc, new, memory_order_relaxed);
		return true;
	}
	return atomic_compare_exchange_weak_explicit(&slab->fc, old, new, memory_order_acq_rel,
						     memory_order_acquire);
}

static inline void set_owner(struct slab *slab, struct cpu_cache *c)
{
	atomic_store_explicit(&slab->owner, c, memory_order_relaxed);
}

/* ---- reports ----------------------------------------------------------- */

_Noreturn void slab_bad_free(struct uslab_cache *s, struct slab *slab, const void *x, const char *why)
{
	if (page_kind(slab) == PK_SLAB && slab->cache && slab->cache != cache_root(s))
		report_fatal("wrong cache: free of %p to cache '%s', but it belongs to cache '%s'", x,
			     s->name, slab->cache->name);
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

/* ---- slab lists ----------------------------------------------------- */
/* The node partial list, a CPU partial list and a CPU's full list are all
 * doubly linked through slab->next/prev, with head and tail; a slab is on
 * at most one of them. */

static void slist_add(struct slab **head, struct slab **tail, struct slab *slab, bool at_tail)
{
	if (at_tail) {
		slab->next = NULL;
		slab->prev = *tail;
		if (*tail)
			(*tail)->next = slab;
		else
			*head = slab;
		*tail = slab;
	} else {
		slab->prev = NULL;
		slab->next = *head;
		if (*head)
			(*head)->prev = slab;
		else
			*tail = slab;
		*head = slab;
	}
}

static void slist_del(struct slab **head, struct slab **tail, struct slab *slab)
{
	if (slab->prev)
		slab->prev->next = slab->next;
	else
		*head = slab->next;
	if (slab->next)
		slab->next->prev = slab->prev;
	else
		*tail = slab->prev;
	slab->next = slab->prev = NULL;
}

/* ---- node partial list (list_lock held) ------------------------------ */

void add_partial_locked(struct node *n, struct slab *slab, bool tail)
{
	slab->on_node = 1;
	slist_add(&n->partial_head, &n->partial_tail, slab, tail);
	atomic_store_explicit(&n->nr_partial, atomic_load_explicit(&n->nr_partial, memory_order_relaxed) + 1,
			      memory_order_relaxed);
}

void remove_partial_locked(struct node *n, struct slab *slab)
{
	slist_del(&n->partial_head, &n->partial_tail, slab);
	slab->on_node = 0;
	atomic_store_explicit(&n->nr_partial, atomic_load_explicit(&n->nr_partial, memory_order_relaxed) - 1,
			      memory_order_relaxed);
}

static inline unsigned long nr_partial(struct node *n)
{
	return atomic_load_explicit(&n->nr_partial, memory_order_relaxed);
}

/* ---- slabs from and to the page allocator ---------------------------- */

static struct slab *alloc_slab_pages(struct uslab_cache *s, struct cpu_cache *c, unsigned *objects)
{
	uint32_t oo = cache_oo(s);
	struct slab *slab = page_alloc(oo_order(oo));
	*objects = oo_objects(oo);
	if (unlikely(!slab) && s->min_order < oo_order(oo)) {
		slab = page_alloc(s->min_order);
		*objects = s->min_objects;
		if (slab)
			stat_inc(s, c, USLAB_STAT_ORDER_FALLBACK);
	}
	return slab;
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

/*
 * A new slab from the page allocator with every object on one free list.
 * With `chain`, the slab is frozen for CPU part c and the list is the
 * caller's (slab->fc holds an empty list, inuse = objects); without, the
 * list stays in the slab, unfrozen, inuse 0 (debug caches). Runs the
 * constructor on every object and sets up debug state.
 */
struct slab *slab_new(struct uslab_cache *s, struct cpu_cache *c, void **chain)
{
	unsigned objects;
	struct slab *slab = alloc_slab_pages(s, c, &objects);
	if (!slab)
		return NULL;
	char *first = slab_first(s, slab);
	slab->cache = s;
	slab->objects = (uint16_t)objects;
	slab->on_node = 0;
	slab->next = slab->prev = NULL;
	slab->local = NULL;
	slab->local_cnt = 0;
	if (s->debug)
		debug_init_slab(s, slab);
	if (s->ctor)
		for (unsigned i = 0; i < objects; i++)
			s->ctor(first + (size_t)i * s->size);
	char *head = first, *prev = first;
	if (!opt.freelist_random) {   /* address order: the common case, kept simple */
		for (unsigned i = 1; i < objects; i++) {
			char *x = first + (size_t)i * s->size;
			set_freepointer(s, prev, x);
			prev = x;
		}
	} else {
		struct order_walk w;
		unsigned k;
		order_walk_init(s, objects, &w);
		k = w.start;
		head = prev = first + (size_t)order_walk_next(&w, &k) * s->size;
		for (unsigned i = 1; i < objects; i++) {
			char *x = first + (size_t)order_walk_next(&w, &k) * s->size;
			set_freepointer(s, prev, x);
			prev = x;
		}
	}
	set_freepointer(s, prev, NULL);
	for (unsigned i = 0; USLAB_TRACKED && i < objects; i++)
		track_new(first + (size_t)i * s->size, s->object_size);
	if (chain) {
		atomic_store_explicit(&slab->fc, fc_make(NULL, objects, true), memory_order_relaxed);
		set_owner(slab, c);
		*chain = head;
	} else {
		atomic_store_explicit(&slab->fc, fc_make(head, 0, false), memory_order_relaxed);
		set_owner(slab, NULL);
	}
	atomic_fetch_add_explicit(&s->node.nr_slabs, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->node.total_objects, objects, memory_order_relaxed);
	/* kind last: from here on, lookups of these pages find a slab */
	page_set_kind(slab, PK_SLAB);
	return slab;
}

void slab_discard(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	atomic_fetch_sub_explicit(&s->node.nr_slabs, 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&s->node.total_objects, slab->objects, memory_order_relaxed);
	stat_inc(s, c, USLAB_STAT_FREE_SLAB);
	page_set_kind(slab, PK_BUSY);
	track_release(slab_base(slab), PAGE_SIZE << slab->order);
	page_free(slab);
}

/* ---- taking slabs ------------------------------------------------------ */

/*
 * Take a node slab's whole free list for the CPU (acquire_slab): the list
 * becomes the caller's, inuse = objects, and the slab is frozen for c. The
 * list is not empty (node slabs have free objects, and only list holders
 * take them).
 */
static void *take_node_slab(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	while (!fc_cas(slab, &old, fc_make(NULL, slab->objects, true)))
		stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	set_owner(slab, c);
	slab->ostate = 0;
	/* the list holds every object not in use */
	cpu_count(&c->fl_in, slab->objects - fc_inuse(old));
	return fc_freelist(old, slab);
}

/*
 * Take the list of a slab c keeps frozen (get_freelist): what other
 * threads freed to it. It stays frozen, flags kept; an empty list is left
 * alone (no CAS), and NULL returned.
 */
static void *take_frozen_list(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	void *fl;
	do {
		fl = fc_freelist(old, slab);
		if (!fl)
			return NULL;
	} while (!fc_cas(slab, &old, fc_set(NULL, slab->objects, fc_flags(old))) &&
		 (stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL), 1));
	cpu_count(&c->fl_in, slab->objects - fc_inuse(old));
	return fl;
}

/* Freeze a slab for the CPU partial list, leaving its free list in place;
 * returns its free objects. */
static unsigned freeze_slab(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	while (!fc_cas(slab, &old, old | FC_FROZEN))
		stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	set_owner(slab, c);
	slab->ostate = 0;
	return slab->objects - fc_inuse(old);
}

/* The CPU partial list: doubly linked (slab->next/prev), first in, first
 * out. nfree: the slab's free objects as far as we know. */
static void push_cpu_partial(struct cpu_cache *c, struct slab *slab, unsigned nfree)
{
	slab->acct = (uint16_t)nfree;
	c->partial_free += nfree;
	c->nforeign += (slab->ostate & OS_FOREIGN) != 0;
	slist_add(&c->partial, &c->partial_tail, slab, true);
}

static void unlink_cpu_partial(struct cpu_cache *c, struct slab *slab)
{
	slist_del(&c->partial, &c->partial_tail, slab);
	c->partial_free -= slab->acct;
	c->nforeign -= (slab->ostate & OS_FOREIGN) != 0;
	if (slab->ostate & OS_EMPTY) {
		c->nempty--;
		slab->ostate &= (uint8_t)~OS_EMPTY;
	}
}

static struct slab *pop_cpu_partial(struct cpu_cache *c)
{
	struct slab *slab = c->partial;
	if (slab)
		unlink_cpu_partial(c, slab);
	return slab;
}

/* Take the whole CPU partial list. */
static struct slab *take_cpu_partials(struct cpu_cache *c)
{
	struct slab *list = c->partial;
	c->partial = c->partial_tail = NULL;
	c->partial_free = 0;
	c->nforeign = 0;
	c->nempty = 0;
	for (struct slab *slab = list; slab; slab = slab->next)
		slab->ostate &= (uint8_t)~OS_EMPTY;
	return list;
}

/* Refill the CPU part from the node partial list: the first slab becomes
 * the CPU slab, more go onto the CPU partial list, up to half its limit,
 * all in one lock hold. Returns the CPU slab's free list or NULL. */
static void *get_partial_node(struct uslab_cache *s, struct cpu_cache *c)
{
	struct node *n = &s->node;
	void *object = NULL;
	unsigned moved = 0;
	if (!nr_partial(n))   /* racy peek, as SLUB's: a miss only means a new slab */
		return NULL;
	NODE_LOCK(s, c, n);
	struct slab *slab;
	while ((slab = n->partial_head) != NULL) {
		remove_partial_locked(n, slab);
		if (!object) {
			/* Listed slabs have free objects, and only list holders
			 * take them, so the list cannot be empty here. */
			object = take_node_slab(s, c, slab);
			cpu_set_slab(s, c, slab);
			stat_inc(s, c, USLAB_STAT_ALLOC_FROM_PARTIAL);
		} else {
			unsigned nfree = freeze_slab(s, c, slab);
			push_cpu_partial(c, slab, nfree);
			moved += nfree;
			stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_NODE);
		}
		/* up to half of cpu_partial's objects onto the CPU partial list */
		unsigned cp = TUNE(s, cpu_partial);
		if (!cp || moved > cp / 2)
			break;
	}
	NODE_UNLOCK(n);
	return object;
}

static void queue_flush(struct uslab_cache *s, struct cpu_cache *c, unsigned n);
static void free_local(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head, void *tail,
		       unsigned cnt);
static void drain_cpu_partial(struct uslab_cache *s, struct cpu_cache *c);

/* ---- parked slabs ------------------------------------------------------ */
/*
 * A CPU slab that runs out is full. SLUB unfreezes it and lets the first
 * free freeze it again, for whichever CPU frees: two CAS on the slab word
 * per slab reused, the second usually on a cold line. Here the CPU keeps
 * it frozen instead, on its full list ("parked"), so that its own frees to
 * it take no atomic at all (they move it to the CPU partial list). To
 * hear of other threads' frees, the owner arms the slab (FC_PARKED, one
 * CAS, only when not still armed from before); the first free by another
 * thread clears FC_PARKED, sets FC_NOTIFYING, pushes its objects onto the
 * owner's `delayed` list, and clears FC_NOTIFYING. Later frees go onto the
 * slab's own list as for any frozen slab. The owner takes `delayed` in on
 * its alloc slow path, which moves those slabs to its partial list.
 *
 * While a notification may be on its way (OS_ARMED without FC_PARKED, or
 * FC_NOTIFYING), the owner must not unfreeze the slab or arm it again:
 * owner_settle() waits for the push and takes `delayed` in first. The
 * notifier reads slab->owner after its CAS; the owner disarms the slab
 * (clears FC_PARKED by CAS) before it clears owner to unfreeze it.
 */

/*
 * Parking pays when a CPU frees its own objects: those frees and the
 * slab's reuse take no atomic. When other threads free them (a producer),
 * SLUB's way is better: the unfrozen slab goes onto the node list as it
 * empties and any CPU allocates from it, where a parked slab waits for its
 * owner, so many producers would each keep memory for their own peak.
 * park_score counts which came first to the CPU's parked slabs, its own
 * free (down) or another thread's (up), and goes down when the CPU freed
 * to its CPU slab since its last refill (fast frees, or runs of a bulk
 * free or queue flush); at PARK_REMOTE and above,
 * exhausted slabs are unfrozen as in SLUB.
 */
#define PARK_SCORE_MAX 16

static void full_add(struct cpu_cache *c, struct slab *slab)
{
	slist_add(&c->full, &c->full_tail, slab, false);
	slab->ostate |= OS_FULL;
}

static void full_del(struct cpu_cache *c, struct slab *slab)
{
	slist_del(&c->full, &c->full_tail, slab);
	slab->ostate &= (uint8_t)~OS_FULL;
}

/* Take in the objects other threads handed over with their notifications:
 * each goes where c's own free would put it, without the counting (they
 * were counted as frees by the threads that freed them). */
static void drain_delayed(struct uslab_cache *s, struct cpu_cache *c)
{
	void *x = atomic_exchange_explicit(&c->delayed, NULL, memory_order_acquire);
	while (x) {
		void *next = get_freepointer(s, x);
		struct slab *slab = page_obj_slab(x);
		slab->ostate &= (uint8_t)~OS_ARMED;
		if (slab == c->slab) {
			set_freepointer(s, x, c->freelist);
			c->freelist = x;
			cpu_count(&c->fl_in, 1);
		} else {
			free_local(s, c, slab, x, x, 1);
			if (slab->ostate & OS_FULL) {
				if (c->park_score < PARK_SCORE_MAX)
					c->park_score++;   /* another thread freed first */
				/* its free objects now: the slab's list, and local */
				uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_relaxed);
				full_del(c, slab);
				push_cpu_partial(c, slab, slab->objects - fc_inuse(fc) + slab->local_cnt);
			}
		}
		x = next;
	}
}

/* The word of a slab c keeps frozen, once no notification is on its way. */
static uint64_t owner_settle(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	for (;;) {
		uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
		if (old & FC_NOTIFYING) {
			__builtin_ia32_pause();
			continue;
		}
		if ((slab->ostate & OS_ARMED) && !(old & FC_PARKED)) {
			drain_delayed(s, c);   /* the notification is complete: take it in */
			continue;
		}
		return old;
	}
}

/* Splice a frozen slab's owner-local objects onto the chain *head..*tail
 * (the CPU's objects of it), counting them into *n. */
static void splice_local(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void **head, void **tail,
			 unsigned *n)
{
	if (!slab->local)
		return;
	cpu_count(&c->fl_in, -(uint64_t)slab->local_cnt);
	void *ltail = (char *)page_segment(slab) + slab->local_tail;
	set_freepointer(s, ltail, *head);
	if (!*head)
		*tail = ltail;
	*head = slab->local;
	*n += slab->local_cnt;
	slab->local = NULL;
	slab->local_cnt = 0;
}

/*
 * Unfreeze a slab c keeps frozen, with the chain head..tail of nfree of
 * its objects that c holds (its CPU free list) and its local objects
 * spliced onto its list. Returns the new word and, in *prior, the list the
 * slab had. c's own flags and owner are cleared.
 */
static uint64_t owner_unfreeze(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head,
			       void *tail, unsigned nfree, void **prior)
{
	uint64_t old, new;
	for (;;) {
		old = owner_settle(s, c, slab);
		if (old & FC_PARKED) {
			/* Disarm first: once no notifier can start, owner may be
			 * cleared before the unfreezing CAS, after which the slab
			 * is no longer ours to write. */
			if (!fc_cas(slab, &old, old & ~FC_PARKED)) {
				stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
				continue;
			}
			slab->ostate &= (uint8_t)~OS_ARMED;
			old &= ~FC_PARKED;
		}
		splice_local(s, c, slab, &head, &tail, &nfree);
		*prior = fc_freelist(old, slab);
		if (tail)
			set_freepointer(s, tail, *prior);
		new = fc_make(head ? head : *prior, fc_inuse(old) - nfree, false);
		slab->ostate = 0;
		set_owner(slab, NULL);
		if (fc_cas(slab, &old, new))
			break;
		stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);   /* a free came: still ours, try again */
	}
	return new;
}

static bool park_wanted(struct cpu_cache *c)
{
	/* Fast frees since the last refill: the CPU frees its own objects
	 * (without parking there is no other sign of it). */
	uint64_t ff = atomic_load_explicit(&c->stat[USLAB_STAT_FREE_FASTPATH], memory_order_relaxed);
	if (ff != c->park_ff || c->own_run_freed) {
		c->park_ff = ff;
		c->own_run_freed = false;
		if (c->park_score > -PARK_SCORE_MAX)
			c->park_score--;
	}
	return c->park_score < PARK_REMOTE;
}

/* The CPU slab ran out: park it (or, if objects came meanwhile, put it on
 * the CPU partial list). */
static void park_slab(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	for (;;) {
		uint64_t old = owner_settle(s, c, slab);
		if (slab->local || fc_freelist(old, slab)) {
			push_cpu_partial(c, slab, slab->local_cnt ? slab->local_cnt : 1);
			return;
		}
		if ((old & FC_PARKED) || fc_cas(slab, &old, old | FC_PARKED))
			break;   /* armed (still, or now) */
		stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	}
	slab->ostate |= OS_ARMED;
	full_add(c, slab);
}

/* ---- giving slabs back to the node ------------------------------------- */

/*
 * Unfreeze a list of slabs c kept frozen (its CPU partial list or its full
 * list), in one node lock hold: those with free objects go onto the node
 * list, full ones on no list, empty ones beyond min_partial back to the
 * page allocator.
 */
static void unfreeze_list(struct uslab_cache *s, struct cpu_cache *c, struct slab *list)
{
	struct node *n = &s->node;
	struct slab *discard = NULL;
	/* off c's lists already: taking `delayed` in must not move them */
	for (struct slab *slab = list; slab; slab = slab->next)
		slab->ostate &= (uint8_t)~OS_FULL;
	NODE_LOCK(s, c, n);
	while (list) {
		struct slab *slab = list;
		void *prior;
		list = slab->next;
		uint64_t new = owner_unfreeze(s, c, slab, NULL, NULL, 0, &prior);
		/* Unfrozen under the lock: a free that empties it now waits for the
		 * lock and finds it listed. An empty slab has no objects out, so
		 * nothing can race with discarding it. */
		if (!fc_inuse(new) && nr_partial(n) >= TUNE(s, min_partial)) {
			slab->next = discard;
			discard = slab;
		} else if (fc_freelist(new, slab)) {
			add_partial_locked(n, slab, true);
			stat_inc(s, c, USLAB_STAT_FREE_ADD_PARTIAL);
		}   /* else full: on no list, and any free may freeze it now */
	}
	NODE_UNLOCK(n);
	while (discard) {
		struct slab *slab = discard;
		discard = slab->next;
		slab_discard(s, c, slab);
	}
}

/*
 * The CPU partial list holds more free objects than its limit: give slabs
 * back to the node, in one lock hold. Which ones: every empty slab (its
 * memory can go back to the page allocator) and every slab a free froze
 * onto the list from another CPU (OS_FOREIGN), as SLUB drains its list.
 * Slabs this CPU allocated from and that still hold its live objects stay:
 * given away, every later free of those objects would be another thread's
 * free (a CAS, and a notification), as mimalloc keeps a thread's pages.
 * The free counts are made exact on the way (other threads' frees show in
 * the slab words), and the next drain comes when cpu_partial more free
 * objects have gathered (or half as many as it kept, so that scans cost
 * O(1) per free). cpu_partial 0 gives everything back, and so does a CPU
 * whose objects other threads free (see park_wanted()).
 */
static void drain_cpu_partial(struct uslab_cache *s, struct cpu_cache *c)
{
	unsigned cp = TUNE(s, cpu_partial);
	struct slab *give = NULL;
	if (!cp || c->park_score >= PARK_REMOTE) {
		give = take_cpu_partials(c);   /* cpu_partial 0, or a producer: all, as SLUB */
	} else {
		for (struct slab *slab = take_cpu_partials(c), *next; slab; slab = next) {
			next = slab->next;
			uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_relaxed);
			unsigned nfree = slab->local_cnt + slab->objects - fc_inuse(fc);
			if (nfree >= slab->objects || (slab->ostate & OS_FOREIGN)) {
				slab->next = give;
				give = slab;
			} else {
				push_cpu_partial(c, slab, nfree);   /* in the same order */
			}
		}
	}
	/* the next drain when the count grew by half, or cpu_partial: a scan
	 * costs O(list), so O(1) per free */
	c->partial_limit = c->partial_free + MAX(cp, c->partial_free / 2);
	unfreeze_list(s, c, give);
	stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_DRAIN);
}

/*
 * Give back the slabs that frees froze onto our CPU partial list
 * (OS_FOREIGN), in one node lock hold. Called after a CPU queue flush: a
 * CPU that frees other threads' objects in batches (a consumer) hands the
 * slabs it froze meanwhile to the node list a batch later, where the
 * allocating threads find them, instead of holding them until its list
 * overflows (uhackbench: faster, and fewer node locks, than either). They
 * were pushed last, so the walk starts at the tail.
 */
static void drain_foreign(struct uslab_cache *s, struct cpu_cache *c)
{
	struct slab *give = NULL;
	for (struct slab *slab = c->partial_tail, *prev; slab && c->nforeign; slab = prev) {
		prev = slab->prev;
		if (slab->ostate & OS_FOREIGN) {
			unlink_cpu_partial(c, slab);
			slab->next = give;
			give = slab;
		}
	}
	unfreeze_list(s, c, give);
	stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_DRAIN);
}

/* A free froze a full slab for this CPU, or one of its parked slabs got
 * free objects, nfree on its local list: put it on the CPU partial list,
 * draining the list first if it would hold more than its limit. */
static void put_cpu_partial(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, unsigned nfree)
{
	/* Most frees to foreign slabs are other threads' (unseen in the
	 * count), so those are also held to the kernel's slab count for
	 * cpu_partial, objects * 2 / objects per slab (slub_set_cpu_partial). */
	unsigned foreign_max = (TUNE(s, cpu_partial) * 2 + slab->objects - 1) / slab->objects;
	if (c->partial && (c->partial_free + nfree > c->partial_limit ||
			    ((slab->ostate & OS_FOREIGN) && c->nforeign >= foreign_max)))
		drain_cpu_partial(s, c);
	push_cpu_partial(c, slab, nfree);
}

/*
 * Give up the CPU slab (deactivate_slab): splice the CPU's own free objects
 * onto the slab's list, unfreeze it, and put it on the node list if it has
 * free objects (or free it if it is empty and the node has enough).
 */
static void deactivate_slab(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *freelist)
{
	struct node *n = &s->node;
	unsigned nfree = 0;
	void *tail = NULL, *prior;
	for (void *p = freelist; p; p = get_freepointer(s, p)) {
		tail = p;
		nfree++;
	}
	cpu_count(&c->fl_in, -(uint64_t)nfree);
	uint64_t new = owner_unfreeze(s, c, slab, freelist, tail, nfree, &prior);
	if (prior)
		stat_inc(s, c, USLAB_STAT_DEACTIVATE_REMOTE_FREES);
	if (!fc_freelist(new, slab)) {
		stat_inc(s, c, USLAB_STAT_DEACTIVATE_FULL);
		return;
	}
	NODE_LOCK(s, c, n);
	/* Reread: a free may have emptied it since (and, finding it unlisted,
	 * left it to us). */
	if (!fc_inuse(atomic_load_explicit(&slab->fc, memory_order_acquire)) && nr_partial(n) >= TUNE(s, min_partial)) {
		NODE_UNLOCK(n);
		stat_inc(s, c, USLAB_STAT_DEACTIVATE_EMPTY);
		slab_discard(s, c, slab);
		return;
	}
	/* Cache-hot objects (the CPU's own) at the head, cold at the tail. */
	add_partial_locked(n, slab, nfree != 0);
	NODE_UNLOCK(n);
	stat_inc(s, c, nfree ? USLAB_STAT_DEACTIVATE_TO_TAIL : USLAB_STAT_DEACTIVATE_TO_HEAD);
}

void slab_flush_cpu(struct uslab_cache *s, struct cpu_cache *c)
{
	if (c->magn) {   /* the bulk magazine: objects of our own slabs */
		unsigned n = c->magn;
		c->magn = 0;
		slab_free_objs(s, c, c->mag->obj, c->mag->slab, n);
	}
	if (c->qn)
		queue_flush(s, c, c->qn);
	/* Taking `delayed` in may move slabs between c's lists: loop until
	 * every list is empty. */
	for (;;) {
		if (atomic_load_explicit(&c->delayed, memory_order_relaxed))
			drain_delayed(s, c);
		if (c->slab) {
			struct slab *slab = c->slab;
			void *fl = c->freelist;
			cpu_set_slab(s, c, NULL);
			c->freelist = NULL;
			stat_inc(s, c, USLAB_STAT_CPUSLAB_FLUSH);
			deactivate_slab(s, c, slab, fl);
		} else if (c->partial) {
			unfreeze_list(s, c, take_cpu_partials(c));
		} else if (c->full) {
			struct slab *list = c->full;
			c->full = c->full_tail = NULL;
			unfreeze_list(s, c, list);
		} else {
			break;
		}
	}
}

/* ---- allocation slow path (___slab_alloc) ------------------------------ */

/* Make c->freelist non-empty; false when no memory can be had. */
bool slab_refill_cpu(struct uslab_cache *s, struct cpu_cache *c)
{
	void *fl;
	struct slab *slab = c->slab;
	unsigned cp = TUNE(s, cpu_partial);
	if (c->partial_limit < cp || !cp)
		c->partial_limit = cp;   /* a raised (or zeroed) tunable now; a lowered one at the next drain */
	if (slab) {
		/* Objects other threads freed to our CPU slab meanwhile. */
		fl = take_frozen_list(s, c, slab);
		if (fl) {
			c->freelist = fl;
			stat_inc(s, c, USLAB_STAT_ALLOC_REFILL);
			return true;
		}
		/* Full: park it, or, without CPU partial lists, unfreeze it
		 * (SLUB: it then lives on no list). */
		cpu_set_slab(s, c, NULL);
		stat_inc(s, c, USLAB_STAT_DEACTIVATE_BYPASS);
		if (TUNE(s, cpu_partial) && park_wanted(c))
			park_slab(s, c, slab);
		else
			deactivate_slab(s, c, slab, NULL);
	}
	if (atomic_load_explicit(&c->delayed, memory_order_relaxed)) {
		drain_delayed(s, c);   /* parked slabs that other threads freed to */
		if (c->partial_free > c->partial_limit)
			drain_cpu_partial(s, c);
	}
	while ((slab = pop_cpu_partial(c)) != NULL) {
		if (slab->local) {
			/* Our own frees first: no CAS. Other threads' frees stay on
			 * the slab's list for an ALLOC_REFILL. */
			fl = slab->local;   /* counted in fl_in already */
			slab->local = NULL;
			slab->local_cnt = 0;
		} else {
			fl = take_frozen_list(s, c, slab);
		}
		if (likely(fl)) {   /* frozen slabs only gain objects: never empty */
			slab->ostate &= (uint8_t)~OS_FOREIGN;   /* ours to allocate from now */
			cpu_set_slab(s, c, slab);
			c->freelist = fl;
			stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_ALLOC);
			return true;
		}
	}
	fl = get_partial_node(s, c);
	if (fl) {
		c->freelist = fl;
		return true;
	}
	slab = slab_new(s, c, &fl);
	if (!slab)
		return false;
	stat_inc(s, c, USLAB_STAT_ALLOC_SLAB);
	cpu_count(&c->fl_in, slab->objects);
	cpu_set_slab(s, c, slab);
	c->freelist = fl;
	return true;
}

void *slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c, void *caller, size_t asked)
{
	s = cache_root(s);
	if (unlikely(atomic_load_explicit(&export_active, memory_order_relaxed)))
		export_poll();
	if (unlikely(s->debug))
		return debug_alloc(s, caller, USLAB_STAT_ALLOC_SLOWPATH, asked);
	if (!c || c->cache != s) {
		c = cpu_get(s);
		if (!c)
			return slab_alloc_nocpu(s);
	}
	if (!c->freelist && !slab_refill_cpu(s, c)) {
		stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
		errno = ENOMEM;
		return NULL;
	}
	void *x = c->freelist, *next = get_freepointer(s, x);
	if (unlikely(!cpu_next_ok(c, next)))
		slab_bad_freelist(s, x, next);
	c->freelist = next;
	cpu_count(&c->fl_in, -1);
	stat_inc(s, c, USLAB_STAT_ALLOC_SLOWPATH);
	track_alloc(x, s->object_size);
	return x;
}

/* Without a CPU part: borrow one on the stack for one object. */
void *slab_alloc_nocpu(struct uslab_cache *s)
{
	struct cpu_cache tmp;
	memset(&tmp, 0, sizeof tmp);
	tmp.cache = s;
	void *x = NULL;
	if (slab_refill_cpu(s, &tmp)) {
		x = tmp.freelist;
		tmp.freelist = get_freepointer(s, x);
		cpu_count(&tmp.fl_in, -1);
		stat_inc(s, &tmp, USLAB_STAT_ALLOC_SLOWPATH);
	} else {
		stat_inc(s, &tmp, USLAB_STAT_ALLOC_FAILED);
	}
	slab_flush_cpu(s, &tmp);
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		if (tmp.stat[i])
			atomic_fetch_add_explicit(&s->stat_gone[i], tmp.stat[i], memory_order_relaxed);
	if (!x)
		errno = ENOMEM;
	else
		track_alloc(x, s->object_size);
	return x;
}

/* ---- free slow path (__slab_free) -------------------------------------- */

/* We cleared FC_PARKED of a parked slab and set FC_NOTIFYING: push the
 * chain head..tail onto its owner's delayed list, then clear FC_NOTIFYING
 * (until then the owner cannot unfreeze it, so slab->owner stays valid). */
static void notify_owner(struct uslab_cache *s, struct slab *slab, void *head, void *tail)
{
	/* relaxed: the owner set owner before its arming CAS (release), which
	 * our CAS on the same word acquired */
	struct cpu_cache *own = atomic_load_explicit(&slab->owner, memory_order_relaxed);
	void *top = atomic_load_explicit(&own->delayed, memory_order_relaxed);
	/* release: publishes the chain's free pointers to the owner's
	 * acquiring exchange in drain_delayed() */
	do
		set_freepointer(s, tail, top);
	while (!atomic_compare_exchange_weak_explicit(&own->delayed, &top, head, memory_order_release,
						      memory_order_relaxed));
	/* release: owner_settle() (acquire) sees the push before the bit clear */
	atomic_fetch_and_explicit(&slab->fc, ~FC_NOTIFYING, memory_order_release);
}

/*
 * Free the chain head..tail (cnt objects, all of `slab`) to a slab that is
 * not this CPU's slab: one CAS on the slab word.
 */
void slab_free_chain(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head,
		     void *tail, unsigned cnt)
{
	struct node *n = &s->node;
	bool locked = false, was_frozen;
	bool can_freeze = c && TUNE(s, cpu_partial);
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire), new;
	void *prior;
	for (;;) {
		if (locked) {
			NODE_UNLOCK(n);
			locked = false;
		}
		prior = fc_freelist(old, slab);
		was_frozen = fc_frozen(old);
		if (can_freeze && !prior && !was_frozen) {
			/* Full slab: freeze it onto our CPU partial list, the chain
			 * on its owner-local list (the slab's own list stays empty),
			 * so our later frees and the refill that takes it need no
			 * atomic. The chain is linked after the CAS: nobody else
			 * reads it, and a store to a cold object before a locked
			 * instruction would stall it. */
			if (fc_cas(slab, &old, old | FC_FROZEN)) {
				set_owner(slab, c);
				slab->ostate = OS_FOREIGN;
				slab->local = NULL;
				free_local(s, c, slab, head, tail, cnt);
				put_cpu_partial(s, c, slab, cnt);
				stat_inc(s, c, USLAB_STAT_CPU_PARTIAL_FREE);
				return;
			}
			stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
			continue;
		}
		if (old & FC_PARKED) {
			/* The owner parked it and waits to hear: hand it the chain. */
			if (fc_cas(slab, &old, (old & ~FC_PARKED) | FC_NOTIFYING)) {
				notify_owner(s, slab, head, tail);
				stat_inc(s, c, USLAB_STAT_FREE_FROZEN);
				return;
			}
			stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
			continue;
		}
		if (unlikely(prior == head))
			slab_bad_free(s, slab, head, "double free");
		set_freepointer(s, tail, prior);
		unsigned inuse = fc_inuse(old) - cnt;
		if ((!inuse || !prior) && !was_frozen) {
			NODE_LOCK(s, c, n);
			locked = true;
		}
		new = fc_set(head, inuse, fc_flags(old));   /* a notifier's bit stays */
		if (fc_cas(slab, &old, new))
			break;
		stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	}
	if (!locked) {
		if (was_frozen)
			stat_inc(s, c, USLAB_STAT_FREE_FROZEN);
		return;
	}
	/* Partial but not listed: someone is deactivating it and will list it. */
	if (prior && !slab->on_node) {
		NODE_UNLOCK(n);
		return;
	}
	if (!fc_inuse(new) && nr_partial(n) >= TUNE(s, min_partial)) {
		if (prior) {
			remove_partial_locked(n, slab);
			stat_inc(s, c, USLAB_STAT_FREE_REMOVE_PARTIAL);
		}
		NODE_UNLOCK(n);
		slab_discard(s, c, slab);
		return;
	}
	if (!prior) {
		add_partial_locked(n, slab, true);
		stat_inc(s, c, USLAB_STAT_FREE_ADD_PARTIAL);
	}
	NODE_UNLOCK(n);
}

/*
 * Free objects (validated, of cache s, with their slabs) to their slabs:
 * objects of one slab are chained into a detached free list and handed over
 * with one CAS, or, for the CPU slab, put on the CPU free list in one step.
 * Up to GROUPS slabs are open at once, so interleaved streams (several
 * senders' objects freed by one receiver) still group, while a random order
 * costs a few compares per object, not a sort.
 */
/* Free the chain head..tail (cnt objects) to a slab c keeps frozen, other
 * than its CPU slab: onto the slab's owner-local list, with plain stores.
 * Local objects count as on the CPU free list for the derived
 * ALLOC_FASTPATH: these in fl_in, those slab_free_owned() frees in
 * FREE_FASTPATH. */
static void free_local(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head, void *tail,
		       unsigned cnt)
{
	if (unlikely(head == slab->local))
		slab_bad_free(s, slab, head, "double free");
	set_freepointer(s, tail, slab->local);
	if (!slab->local)
		slab->local_tail = (uint32_t)((uintptr_t)tail & SEG_MASK);
	slab->local = head;
	slab->local_cnt = (uint16_t)(slab->local_cnt + cnt);
	cpu_count(&c->fl_in, cnt);
}

/* A free by c to a slab it keeps frozen other than its CPU slab: one on
 * its CPU partial list (counted against cpu_partial), or a parked one
 * (which moves to the partial list). */
static void owner_free(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head, void *tail,
		       unsigned cnt)
{
	free_local(s, c, slab, head, tail, cnt);
	if (slab->ostate & OS_FULL) {
		if (c->park_score > -PARK_SCORE_MAX)
			c->park_score -= 2;   /* we freed first */
		full_del(c, slab);
		put_cpu_partial(s, c, slab, cnt);
		return;
	}
	slab->acct = (uint16_t)(slab->acct + cnt);
	c->partial_free += cnt;
	if (c->partial_free > c->partial_limit) {
		drain_cpu_partial(s, c);   /* gives back this slab too if it is empty */
		return;
	}
	if (fc_inuse(atomic_load_explicit(&slab->fc, memory_order_relaxed)) == slab->local_cnt &&
	    !(slab->ostate & OS_EMPTY)) {
		/* Emptied by our frees: keep up to cpu_partial objects of empty
		 * slabs (one at least) for reuse, give the rest back at once. */
		slab->ostate |= OS_EMPTY;
		c->nempty++;
		if (c->nempty > MAX(1U, TUNE(s, cpu_partial) * 2 / slab->objects)) {
			unlink_cpu_partial(c, slab);
			slab->next = NULL;
			unfreeze_list(s, c, slab);
		}
	}
}

#define GROUPS 8
struct group {
	struct slab *slab;
	void *head, *tail;
	unsigned cnt;
};

void slab_free_run(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head, void *tail,
		   unsigned cnt)
{
	if (c && slab == c->slab) {
		if (unlikely(head == c->freelist))
			slab_bad_free(s, slab, head, "double free");
		set_freepointer(s, tail, c->freelist);
		c->freelist = head;
		cpu_count(&c->fl_in, cnt);
		c->own_run_freed = true;   /* for park_wanted() */
		return;
	}
	if (c && atomic_load_explicit(&slab->owner, memory_order_relaxed) == c) {
		owner_free(s, c, slab, head, tail, cnt);
		return;
	}
	slab_free_chain(s, c, slab, head, tail, cnt);
}

static void group_free(struct uslab_cache *s, struct cpu_cache *c, struct group *g)
{
	slab_free_run(s, c, g->slab, g->head, g->tail, g->cnt);
}

void slab_free_objs(struct uslab_cache *s, struct cpu_cache *c, void *const *objs, struct slab *const *slabs,
		    unsigned n)
{
	struct group g[GROUPS];
	unsigned ng = 0, victim = 0;
	for (unsigned i = 0; i < n; i++) {
		unsigned k;
		for (k = 0; k < ng && g[k].slab != slabs[i]; k++)
			;
		if (k < ng) {
			if (unlikely(objs[i] == g[k].tail))
				slab_bad_free(s, slabs[i], objs[i], "double free");
			set_freepointer(s, g[k].tail, objs[i]);
			g[k].tail = objs[i];
			g[k].cnt++;
			continue;
		}
		if (ng < GROUPS) {
			k = ng++;
		} else {
			k = victim;
			victim = (victim + 1) % GROUPS;
			group_free(s, c, &g[k]);
		}
		g[k] = (struct group){ slabs[i], objs[i], objs[i], 1 };
	}
	for (unsigned k = 0; k < ng; k++)
		group_free(s, c, &g[k]);
}

/* Hand the oldest `n` queued objects to their slabs. */
static void queue_flush(struct uslab_cache *s, struct cpu_cache *c, unsigned n)
{
	void *objs[CPU_QUEUE_MAX];
	struct slab *slabs[CPU_QUEUE_MAX];
	struct cpu_queue *q = c->queue;
	memcpy(objs, q->obj, n * sizeof(void *));
	memcpy(slabs, q->slab, n * sizeof(void *));
	memmove(q->obj, q->obj + n, (c->qn - n) * sizeof(void *));
	memmove(q->slab, q->slab + n, (c->qn - n) * sizeof(void *));
	c->qn -= n;
	stat_inc(s, c, USLAB_STAT_SHEAF_FLUSH);
	slab_free_objs(s, c, objs, slabs, n);
	if (c->nforeign)
		drain_foreign(s, c);
}

/* Making a CPU part or a queue may fail with ENOMEM; free keeps errno. */
static struct cpu_cache *free_cpu_get(struct uslab_cache *s)
{
	int e = errno;
	struct cpu_cache *c = cpu_get(s);
	errno = e;
	return c;
}

static struct cpu_queue *free_queue_get(void)
{
	int e = errno;
	struct cpu_queue *q = slab_alloc_nocpu(&cache_queue_cache);
	errno = e;
	return q;
}

void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *x, struct cpu_cache *c, void *caller)
{
	struct uslab_cache *named = s;   /* the cache the caller named, for reports */
	s = cache_root(s);
	if (unlikely(page_kind(slab) != PK_SLAB || slab->cache != s || !slab_obj_valid(s, slab, x)))
		slab_bad_free(named, slab, x, "invalid free");
	if (unlikely(s->debug)) {
		debug_free(s, slab, x, caller, USLAB_STAT_FREE_SLOWPATH);
		return;
	}
	if (unlikely(!c || c->cache != s))
		c = free_cpu_get(s);   /* NULL for exiting threads: they free straight to the slab */
	uint64_t old = atomic_load_explicit(&slab->fc, memory_order_acquire);
	if (likely(c)) {
		if (unlikely(x == c->freelist || (c->qn && x == c->queue->obj[c->qn - 1])))
			slab_bad_free(s, slab, x, "double free");
	}
	track_free(x, s->object_size);
	if (likely(c)) {
		if (atomic_load_explicit(&slab->owner, memory_order_relaxed) == c) {
			/* A slab we keep frozen (only we set owner to c, and only
			 * we unfreeze it, clearing owner): no other thread takes
			 * its objects, so our free needs no atomic. */
			stat_inc(s, c, USLAB_STAT_FREE_SLOWPATH);
			if (slab == c->slab) {
				set_freepointer(s, x, c->freelist);
				c->freelist = x;
				cpu_count(&c->fl_in, 1);
			} else {
				stat_inc(s, c, USLAB_STAT_FREE_FROZEN);
				owner_free(s, c, slab, x, x, 1);
			}
			return;
		}
		unsigned cap = TUNE(s, queue_cap);
		if (cap && fc_frozen(old) && atomic_load_explicit(&slab->owner, memory_order_relaxed) != c &&
		    (c->queue || (c->queue = free_queue_get()))) {
			/* Another CPU is allocating from this slab: a CAS on its word
			 * would bounce a line that CPU is using. The object waits in
			 * our CPU queue instead, for an allocation here or a batched
			 * hand-back to its slab (one CAS per slab). */
			if (c->qn >= cap)   /* >=: the tunable may have shrunk */
				queue_flush(s, c, c->qn - cap / 2);
			c->queue->slab[c->qn] = slab;
			c->queue->obj[c->qn++] = x;
			stat_inc(s, c, USLAB_STAT_FREE_PCS);
			return;
		}
	}
	stat_inc(s, c, USLAB_STAT_FREE_SLOWPATH);
	/* Most slow frees change no list: the slab is frozen, or keeps free
	 * and used objects. Try that with one CAS before the general path. */
	void *prior = fc_freelist(old, slab);
	if (likely(prior && prior != x && (fc_inuse(old) > 1 || fc_frozen(old)))) {
		set_freepointer(s, x, prior);
		if (likely(fc_cas(slab, &old, fc_set(x, fc_inuse(old) - 1, fc_flags(old))))) {
			if (fc_frozen(old))
				stat_inc(s, c, USLAB_STAT_FREE_FROZEN);
			return;
		}
		stat_inc(s, c, USLAB_STAT_CMPXCHG_DOUBLE_FAIL);
	}
	slab_free_chain(s, c, slab, x, x, 1);
}

void slab_free_nocpu(struct uslab_cache *s, void *x)
{
	slab_free_slow(s, page_obj_slab(x), x, NULL, NULL);
}

/* ---- shrink and accounting --------------------------------------------- */

unsigned long slab_shrink_node(struct uslab_cache *s)
{
	struct node *n = &s->node;
	struct slab *discard = NULL;
	unsigned long freed = 0;
	NODE_LOCK(s, NULL, n);
	for (struct slab *slab = n->partial_head, *nx; slab; slab = nx) {
		nx = slab->next;
		/* listed and empty: no object is out, nothing can change it */
		if (!fc_inuse(atomic_load_explicit(&slab->fc, memory_order_acquire))) {
			remove_partial_locked(n, slab);
			slab->next = discard;
			discard = slab;
		}
	}
	NODE_UNLOCK(n);
	while (discard) {
		struct slab *slab = discard;
		discard = slab->next;
		slab_discard(s, NULL, slab);
		freed++;
	}
	return freed;
}

unsigned long slab_count_live(struct uslab_cache *s)
{
	struct node *n = &s->node;
	NODE_LOCK(s, NULL, n);
	long live = atomic_load_explicit(&n->total_objects, memory_order_relaxed);
	for (struct slab *slab = n->partial_head; slab; slab = slab->next) {
		unsigned inuse = fc_inuse(atomic_load_explicit(&slab->fc, memory_order_acquire));
		live -= slab->objects - inuse;
	}
	NODE_UNLOCK(n);
	return live > 0 ? (unsigned long)live : 0;
}
