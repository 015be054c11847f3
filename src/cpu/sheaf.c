/*
 * Sheaves: the per-CPU layer of every non-debug cache with sheaf_capacity >
 * 0 (the default). The 2010 SLUB+Q thread put per-CPU object queues in
 * front of SLUB so that a free of a cache-cold object costs no miss; Linux
 * 6.18 brought the idea back as sheaves and 7.0 made them the only per-CPU
 * layer. This is that design:
 *
 * A CPU part holds `main` and `spare`, arrays of sheaf_capacity object
 * pointers. Allocation pops main and free pushes onto it, for any object of
 * the cache whichever thread allocated it (slab.h's fast paths): neither
 * touches the object or its slab. When main is empty (alloc):
 *   1. swap with spare if that has objects;
 *   2. else trade main for a full sheaf of the barn (the empty one becomes
 *      spare, or goes to the barn's empty list);
 *   3. else refill main from slabs (slab_take_objects: node partial slabs
 *      first, each walked with the node lock dropped, then new slabs).
 * When main is full (free):
 *   1. swap with spare if that is empty (or make a new empty main, the full
 *      one becoming spare, if there is no spare);
 *   2. else put main in the barn and take an empty sheaf (barn's or new);
 *   3. else (the barn holds what it may: ten full sheaves, more as demand
 *      earns them, up to barn_full_max; "the barn's bound" below) flush
 *      main to the slabs: each run of one slab's objects with one CAS, the
 *      node lock only for slabs that change list (slab_free_objects).
 * A consumer thread's frees thus fill sheaves that travel back whole to the
 * producers through the barn: no atomic per object on either side.
 *
 * Memory held, per cache: at most 2 * sheaf_capacity objects per thread
 * that used the cache (main and spare, also while the thread is idle), and
 * at most barn_full_max full sheaves plus barn_empty_max empty ones in the
 * barn.
 * Thread exit gives main and spare to the barn (full ones, if it has room)
 * or to the slabs; shrink and destroy flush the calling thread's sheaves
 * and the whole barn to the slabs.
 *
 * Sheaves are allocated from internal caches of 128 .. 4096 bytes
 * (cache_sheaf_cache[], without CPU parts). A sheaf that is some part's
 * main keeps its count in the part (c->n); its `size` is stale until it
 * stops being main.
 *
 * Locking: the barn lock protects its lists and counts and is a leaf (no
 * other lock is taken under it; sheaves are flushed and freed after it is
 * dropped). Everything else here is the owning thread's own.
 */
#include "cpu.h"

#include <errno.h>
#include <string.h>

struct uslab_cache cache_sheaf_cache[SHEAF_CACHES];

/* ---- sheaf storage -------------------------------------------------------- */

static unsigned sheaf_bytes(unsigned cap)
{
	return (unsigned)(sizeof(struct sheaf) + (size_t)cap * sizeof(void *));
}

/* The storage cache for sheaves of `cap` objects. */
static struct uslab_cache *sheaf_cache_for(unsigned cap)
{
	unsigned k = 0;
	while ((128U << k) < sheaf_bytes(cap))
		k++;
	return &cache_sheaf_cache[k];
}

/* A new empty sheaf, or NULL (errno kept: free paths ask for sheaves). */
static struct sheaf *sheaf_new(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	int e = errno;
	struct sheaf *sh = slab_alloc_nocpu(sheaf_cache_for(cap));
	errno = e;
	if (!sh)
		return NULL;
	sh->next = NULL;
	sh->size = 0;
	sh->cap = cap;
	stat_inc(s, c, USLAB_STAT_SHEAF_ALLOC);
	return sh;
}

static void sheaf_free(struct uslab_cache *s, struct cpu_cache *c, struct sheaf *sh)
{
	slab_free_nocpu(sheaf_cache_for(sh->cap), sh);
	stat_inc(s, c, USLAB_STAT_SHEAF_FREE);
}

/* Flush a sheaf's objects to their slabs (it stays, empty). */
static void sheaf_flush(struct uslab_cache *s, struct cpu_cache *c, struct sheaf *sh)
{
	if (!sh->size)
		return;
	slab_free_objects(s, c, sh->objects, sh->size, false, true);
	stat_add(s, c, USLAB_STAT_SHEAF_FLUSH, sh->size);
	sh->size = 0;
}

/* ---- the barn ---------------------------------------------------------------- */

/*
 * The barn's bound. The kernel keeps at most ten full sheaves per node and
 * flushes the rest to the slabs; a producer then refills from those slabs,
 * walking free lists whose links the consumers' CPUs wrote, a cache miss per
 * object. Where more objects are in flight between consumers and producers
 * than ten sheaves hold, the barn earns room by demand:
 *   - a full sheaf flushed for want of room counts as spilled;
 *   - a taker of a full sheaf while sheaves were spilled turns one spill
 *     into one more sheaf of room (`extra`, up to barn_full): a producer
 *     came for what had to be flushed.
 * A burst of frees with no producer (a program freeing what it built)
 * earns nothing and leaves the barn at the floor. What was earned is given
 * back with the barn's sheaves by a decay pass that finds the barn unused,
 * by uslab_cache_shrink() and by malloc_trim(0) (sheaf_flush_barn).
 * `extra` changes under the barn lock and is peeked without it (a stale
 * bound only flushes a sheaf the barn could have kept, or keeps one more);
 * a spill is counted by an atomic add without the lock, and only a taker
 * under the lock takes one back, so the count never goes below zero.
 */
static unsigned barn_floor(const struct uslab_cache *s)
{
	return MIN((unsigned)BARN_FLOOR, TUNE(s, barn_full_max));
}
static unsigned barn_limit(const struct uslab_cache *s)
{
	unsigned max = TUNE(s, barn_full_max);
	return MIN(max, barn_floor(s) + atomic_load_explicit(&s->node.barn.extra, memory_order_relaxed));
}
/* A full sheaf goes to the slabs for want of room in the barn. */
static void barn_spilled(struct barn *b)
{
	if (atomic_load_explicit(&b->spilled, memory_order_relaxed) < BARN_MAX_SHEAVES)
		atomic_fetch_add_explicit(&b->spilled, 1, memory_order_relaxed);
}
/* A full sheaf is being taken. */
static void barn_taken(const struct uslab_cache *s, struct barn *b)
{
	if (atomic_load_explicit(&b->spilled, memory_order_relaxed)) {
		atomic_fetch_sub_explicit(&b->spilled, 1, memory_order_relaxed);   /* (only here, under the lock) */
		unsigned extra = atomic_load_explicit(&b->extra, memory_order_relaxed);
		if (barn_floor(s) + extra < TUNE(s, barn_full_max))
			atomic_store_explicit(&b->extra, extra + 1, memory_order_relaxed);
	}
}

/* A full sheaf of capacity cap from the barn, or NULL. Sheaves of another
 * capacity (the tunable changed) are flushed and freed on the way. */
static struct sheaf *barn_get_full(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	struct barn *b = &s->node.barn;
	struct sheaf *sh;
	for (;;) {
		if (!atomic_load_explicit(&b->nr_full, memory_order_relaxed)) {
			stat_inc(s, c, USLAB_STAT_BARN_GET_FAIL);
			return NULL;   /* racy peek: a miss only means a refill */
		}
		slab_lock_spin(&b->lock);
		sh = b->full;
		if (sh) {
			b->full = sh->next;
			barn_taken(s, b);
			atomic_store_explicit(&b->nr_full, atomic_load_explicit(&b->nr_full, memory_order_relaxed) - 1,
					      memory_order_relaxed);
			atomic_store_explicit(&b->gets, atomic_load_explicit(&b->gets, memory_order_relaxed) + 1,
					      memory_order_relaxed);
			atomic_store_explicit(&b->objects,
					      atomic_load_explicit(&b->objects, memory_order_relaxed) - sh->size,
					      memory_order_relaxed);
		}
		pthread_mutex_unlock(&b->lock);
		if (!sh) {
			stat_inc(s, c, USLAB_STAT_BARN_GET_FAIL);
			return NULL;
		}
		sh->next = NULL;
		if (likely(sh->cap == cap)) {
			stat_inc(s, c, USLAB_STAT_BARN_GET);
			return sh;
		}
		sheaf_flush(s, c, sh);
		sheaf_free(s, c, sh);
	}
}

/* Put a full sheaf in the barn; false if it is at its bound (the caller
 * flushes the sheaf to the slabs: a spill). */
static bool barn_put_full(struct uslab_cache *s, struct cpu_cache *c, struct sheaf *sh)
{
	struct barn *b = &s->node.barn;
	bool ok = false;
	if (atomic_load_explicit(&b->nr_full, memory_order_relaxed) < barn_limit(s)) {   /* racy peek */
		slab_lock_spin(&b->lock);
		unsigned nf = atomic_load_explicit(&b->nr_full, memory_order_relaxed);
		if (nf < barn_limit(s)) {
			sh->next = b->full;
			b->full = sh;
			atomic_store_explicit(&b->nr_full, nf + 1, memory_order_relaxed);
			atomic_store_explicit(&b->objects,
					      atomic_load_explicit(&b->objects, memory_order_relaxed) + sh->size,
					      memory_order_relaxed);
			ok = true;
		}
		pthread_mutex_unlock(&b->lock);
	}
	if (!ok)
		barn_spilled(b);
	stat_inc(s, c, ok ? USLAB_STAT_BARN_PUT : USLAB_STAT_BARN_PUT_FAIL);
	return ok;
}

/* An empty sheaf of capacity cap: the barn's, or a new one; NULL if none
 * can be had. */
static struct sheaf *barn_get_empty(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	struct barn *b = &s->node.barn;
	while (atomic_load_explicit(&b->nr_empty, memory_order_relaxed)) {
		slab_lock_spin(&b->lock);
		struct sheaf *sh = b->empty;
		if (sh) {
			b->empty = sh->next;
			atomic_store_explicit(&b->nr_empty,
					      atomic_load_explicit(&b->nr_empty, memory_order_relaxed) - 1,
					      memory_order_relaxed);
		}
		pthread_mutex_unlock(&b->lock);
		if (!sh)
			break;
		sh->next = NULL;
		if (likely(sh->cap == cap))
			return sh;
		sheaf_free(s, c, sh);
	}
	return sheaf_new(s, c, cap);
}

/* Keep an empty sheaf in the barn, or free it if the barn has enough. */
static void barn_put_empty(struct uslab_cache *s, struct cpu_cache *c, struct sheaf *sh)
{
	struct barn *b = &s->node.barn;
	unsigned max = TUNE(s, barn_empty_max);
	sh->size = 0;
	if (atomic_load_explicit(&b->nr_empty, memory_order_relaxed) < max) {
		slab_lock_spin(&b->lock);
		unsigned ne = atomic_load_explicit(&b->nr_empty, memory_order_relaxed);
		if (ne < max) {
			sh->next = b->empty;
			b->empty = sh;
			atomic_store_explicit(&b->nr_empty, ne + 1, memory_order_relaxed);
			sh = NULL;
		}
		pthread_mutex_unlock(&b->lock);
	}
	if (sh)
		sheaf_free(s, c, sh);
}

void sheaf_flush_barn(struct uslab_cache *s)
{
	struct barn *b = &s->node.barn;
	slab_lock_spin(&b->lock);
	struct sheaf *full = b->full, *empty = b->empty;
	b->full = b->empty = NULL;
	atomic_store_explicit(&b->nr_full, 0, memory_order_relaxed);
	atomic_store_explicit(&b->nr_empty, 0, memory_order_relaxed);
	atomic_store_explicit(&b->objects, 0, memory_order_relaxed);
	atomic_store_explicit(&b->extra, 0, memory_order_relaxed);   /* earned again by demand */
	atomic_store_explicit(&b->spilled, 0, memory_order_relaxed);
	pthread_mutex_unlock(&b->lock);
	while (full) {
		struct sheaf *sh = full;
		full = sh->next;
		sheaf_flush(s, NULL, sh);
		sheaf_free(s, NULL, sh);
	}
	while (empty) {
		struct sheaf *sh = empty;
		empty = sh->next;
		sheaf_free(s, NULL, sh);
	}
}

/* ---- main and spare ------------------------------------------------------------ */

/* Make sh main with n objects. */
static void set_main(struct cpu_cache *c, struct sheaf *sh, uint32_t n)
{
	c->main = sh;
	c->objs = sh->objects;
	c->cap = sh->cap;
	cpu_set_n(c, n);
}

/* The spare slot is shared with threads taking memory back from idle
 * owners (sheaf_take_spare): taken by exchange, put by store; spare_n
 * follows the sheaf in the slot by read-modify-writes from both sides. */
static struct sheaf *spare_take(struct cpu_cache *c)
{
	struct sheaf *sh = atomic_exchange_explicit(&c->spare, NULL, memory_order_acquire);
	if (sh)
		atomic_fetch_sub_explicit(&c->spare_n, sh->size, memory_order_relaxed);
	return sh;
}

/* Put sh (or nothing) into the spare slot, which is empty (the owner's). */
static void spare_put(struct cpu_cache *c, struct sheaf *sh)
{
	if (!sh)
		return;
	atomic_fetch_add_explicit(&c->spare_n, sh->size, memory_order_relaxed);
	atomic_store_explicit(&c->spare, sh, memory_order_release);
}

/* main leaves the part's fast paths: its count goes back into the sheaf. */
static struct sheaf *take_main(struct cpu_cache *c)
{
	struct sheaf *sh = c->main;
	sh->size = c->n;
	return sh;
}

/* Make sp (taken from the spare slot) main; the old main becomes spare. */
static void swap_spare(struct cpu_cache *c, struct sheaf *sp)
{
	struct sheaf *old = take_main(c);
	set_main(c, sp, sp->size);
	spare_put(c, old);
}

bool sheaf_setup_cpu(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	c->sheaf_cap = cap;
	c->main = NULL;
	atomic_store_explicit(&c->spare, NULL, memory_order_relaxed);   /* taken by the flush before */
	c->objs = cpu_empty.objs;
	c->cap = 0;
	cpu_set_n(c, 0);
	atomic_store_explicit(&c->spare_n, 0, memory_order_relaxed);
	if (!cap)
		return true;
	struct sheaf *sh = sheaf_new(s, c, cap);
	if (!sh)
		return false;   /* tried again on the slow paths */
	set_main(c, sh, 0);
	return true;
}

/* Take main and spare out of c, which is left without sheaves (its next
 * slow path sets it up again). */
void sheaf_detach_cpu(struct cpu_cache *c, struct sheaf *sh[2])
{
	sh[0] = c->main ? take_main(c) : NULL;
	sh[1] = spare_take(c);
	if (!sh[0] && !sh[1])
		return;
	c->main = NULL;
	c->objs = cpu_empty.objs;
	c->cap = 0;
	cpu_set_n(c, 0);
}

void sheaf_flush_cpu(struct uslab_cache *s, struct cpu_cache *c, bool to_barn)
{
	struct sheaf *sh[2];
	sheaf_detach_cpu(c, sh);
	sheaf_flush_detached(s, c, sh, to_barn);
}

/* Give back the sheaves' objects: to the barn (whole full sheaves, when
 * to_barn and it has room) or to the slabs; the sheaves themselves to the
 * barn's empty list or freed. */
void sheaf_flush_detached(struct uslab_cache *s, struct cpu_cache *c, struct sheaf *sh[2], bool to_barn)
{
	for (unsigned i = 0; i < 2; i++) {
		if (!sh[i])
			continue;
		if (sh[i]->size == sh[i]->cap && to_barn && barn_put_full(s, c, sh[i]))
			continue;
		sheaf_flush(s, c, sh[i]);
		barn_put_empty(s, c, sh[i]);
	}
}

/* ---- the slow paths ---------------------------------------------------------- */

/* Objects into main (which is empty): spare, barn, slabs. False: no memory. */
static bool refill_main(struct uslab_cache *s, struct cpu_cache *c)
{
	struct sheaf *sp = spare_take(c);
	if (sp && sp->size) {
		swap_spare(c, sp);
		return true;
	}
	struct sheaf *full = barn_get_full(s, c, c->sheaf_cap);
	if (full) {
		struct sheaf *empty = take_main(c);
		set_main(c, full, full->size);
		if (!sp) {
			spare_put(c, empty);
		} else {
			spare_put(c, sp);
			barn_put_empty(s, c, empty);
		}
		return true;
	}
	spare_put(c, sp);   /* empty, or none */
	unsigned got = slab_take_objects(s, c, c->objs, c->cap, true);
	if (!got)
		return false;
	stat_add(s, c, USLAB_STAT_SHEAF_REFILL, got);
	cpu_set_n(c, got);
	return true;
}

void *sheaf_alloc_slow(struct uslab_cache *s, struct cpu_cache *c)
{
	if (unlikely(!c->main) && !sheaf_setup_cpu(s, c, c->sheaf_cap))
		return slab_alloc_nocpu(s);   /* no memory for a sheaf: one object, straight */
	if (!c->n && !refill_main(s, c)) {
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

/* Room in main (which is full): spare, a new or the barn's empty sheaf,
 * the barn, or a flush to the slabs. */
static void make_room(struct uslab_cache *s, struct cpu_cache *c)
{
	struct sheaf *sp = spare_take(c);
	if (sp && !sp->size) {
		swap_spare(c, sp);
		return;
	}
	spare_put(c, sp);   /* a full spare stays */
	if (!sp) {
		struct sheaf *e = barn_get_empty(s, c, c->sheaf_cap);
		if (e) {
			spare_put(c, take_main(c));
			set_main(c, e, 0);
			return;
		}
	} else if (atomic_load_explicit(&s->node.barn.nr_full, memory_order_relaxed) < barn_limit(s)) {
		struct sheaf *e = barn_get_empty(s, c, c->sheaf_cap);
		if (e) {
			struct sheaf *full = take_main(c);
			if (barn_put_full(s, c, full)) {
				set_main(c, e, 0);
				return;
			}
			barn_put_empty(s, c, e);
		}
	} else {
		barn_spilled(&s->node.barn);
		stat_inc(s, c, USLAB_STAT_BARN_PUT_FAIL);
	}
	/* flush main in place */
	uint32_t n = c->n;
	slab_free_objects(s, c, c->objs, n, false, true);
	stat_add(s, c, USLAB_STAT_SHEAF_FLUSH, n);
	cpu_set_n(c, 0);
}

/* x: checked, an object of s. */
void sheaf_free_slow(struct uslab_cache *s, struct cpu_cache *c, void *x)
{
	stat_inc(s, c, USLAB_STAT_FREE_SLOWPATH);
	if (unlikely(!c->main)) {
		sheaf_setup_cpu(s, c, c->sheaf_cap);
		if (!c->main) {   /* no memory for a sheaf: straight to the slab */
			slab_free_chain(s, c, slab_of(x), x, x, 1, false);
			return;
		}
	}
	set_freepointer(s, x, NULL);   /* the mark (checked by the caller) */
	uint32_t n = c->n;
	if (n == c->cap) {
		make_room(s, c);
		n = c->n;
	}
	c->objs[n] = x;
	cpu_set_n(c, n + 1);
}

unsigned sheaf_take_spare(struct uslab_cache *s, struct cpu_cache *c)
{
	struct sheaf *sh = spare_take(c);
	if (!sh)
		return 0;
	unsigned n = sh->size;
	/* counted on the cache (NULL part): c's counters are its owner's */
	if (n && n == sh->cap && barn_put_full(s, NULL, sh))
		return n;
	sheaf_flush(s, NULL, sh);
	barn_put_empty(s, NULL, sh);
	return n;
}

/* ---- bulk ---------------------------------------------------------------------- */

size_t sheaf_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	size_t i = 0;
	if (unlikely(!c->main))
		sheaf_setup_cpu(s, c, c->sheaf_cap);
	while (i < nr) {
		uint32_t n = c->n;
		if (n) {   /* from the top of main, as single allocations would */
			size_t k = MIN((size_t)n, nr - i);
			for (size_t j = 0; j < k; j++) {
				objs[i + j] = c->objs[n - 1 - j];
				cpu_fp_scrub(c, objs[i + j]);
			}
			cpu_set_n(c, n - (uint32_t)k);
			i += k;
			continue;
		}
		if (c->main && (atomic_load_explicit(&c->spare_n, memory_order_relaxed) ||
				atomic_load_explicit(&s->node.barn.nr_full, memory_order_relaxed))) {
			if (refill_main(s, c) && c->n)
				continue;
		}
		/* straight from the slabs into the caller's array, in chunks
		 * (the node lock is not held for a whole large request) */
		unsigned want = (unsigned)MIN(nr - i, (size_t)512);
		unsigned got = slab_take_objects(s, c, objs + i, want, false);
		if (!got) {
			if (i)
				slab_free_objects(s, c, objs, (unsigned)i, false, false);
			stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
			errno = ENOMEM;
			return 0;
		}
		i += got;
	}
	return nr;
}

/* objs[]: checked objects of s (none NULL); the array is left as it was.
 * marked: they carry the double-free mark already (the per-CPU bulk free
 * marked them for its sequences: the rest that did not fit), else each is
 * checked and marked here. */
void sheaf_free_bulk_marked(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs, bool marked)
{
	size_t i = 0;
	if (unlikely(!c->main))
		sheaf_setup_cpu(s, c, c->sheaf_cap);
	while (i < nr && c->main) {
		uint32_t n = c->n, room = c->cap - n;
		if (room) {
			size_t k = MIN((size_t)room, nr - i);
			for (size_t j = 0; j < k; j++) {
				void *x = objs[i + j];
				if (!marked)
					fp_mark_free(s, slab_of(x), x);   /* (x twice in objs[]: the second finds it) */
				c->objs[n++] = x;
			}
			cpu_set_n(c, n);
			i += k;
			continue;
		}
		/* main is full: swap or trade it, but flush the rest straight
		 * to the slabs rather than main over and over */
		bool room_cheap = !atomic_load_explicit(&c->spare_n, memory_order_relaxed) ||   /* no spare, or empty */
				  atomic_load_explicit(&s->node.barn.nr_full, memory_order_relaxed) < barn_limit(s);
		if (!room_cheap)
			break;
		make_room(s, c);
	}
	while (i < nr) {   /* the rest, grouped by slab, from a copy (objs[] stays as it was) */
		void *chunk[64];
		unsigned k = (unsigned)MIN(nr - i, (size_t)64);
		memcpy(chunk, objs + i, k * sizeof(void *));
		slab_free_objects(s, c, chunk, k, false, marked);   /* (marked: checked as a sheaf's) */
		i += k;
	}
}

static void sheaf_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	sheaf_free_bulk_marked(s, c, nr, objs, false);
}

/* ---- setup ----------------------------------------------------------------------- */

void sheaf_init_cache(struct uslab_cache *s)
{
	pthread_mutex_init(&s->node.barn.lock, NULL);
}

/* ---- the mode's table ------------------------------------------------------ */

static void sheaf_setup(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	c->mode = CPU_SHEAVES;
	sheaf_setup_cpu(s, c, cap);   /* no memory: tried again on the slow paths */
}

static void sheaf_free_slow_(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *x)
{
	(void)slab;
	sheaf_free_slow(s, c, x);
}

static void sheaf_flush_part(struct uslab_cache *s, struct cpu_cache *c)
{
	sheaf_flush_cpu(s, c, false);
}

const struct cpu_mode_ops cpu_sheaf_ops = {
	.name = "sheaves",
	.setup = sheaf_setup,
	.alloc_slow = sheaf_alloc_slow,
	.free_slow = sheaf_free_slow_,
	.flush = sheaf_flush_part,
	.alloc_bulk = sheaf_alloc_bulk,
	.free_bulk = sheaf_free_bulk,
};
