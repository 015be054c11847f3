/*
 * Bulk allocation and free (kmem_cache_alloc_bulk/free_bulk).
 *
 * Sheaves mode (sheaf.c): as the kernel's, through the sheaves: objects
 * come off main (then spare and the barn) and go onto it; what does not
 * fit goes straight between the caller's array and the slabs, grouped by
 * slab (the 2015 thread's detached free lists: one CAS per slab).
 *
 * Classic mode: alloc_bulk pops the CPU free list, refilling the CPU slab
 * as often as needed; free_bulk puts objects of the CPU slab onto the CPU
 * free list in one step and hands the rest to their slabs grouped by slab,
 * one CAS per slab (freezing full ones onto the CPU partial list, as
 * single frees would).
 *
 * Home and slqb modes (home.c): alloc_bulk pops the current slab's
 * list (or the queue) in one loop; free_bulk frees each object as a single
 * free would: to its owned slab, into the remote batch (one atomic per
 * batch), or onto the queue.
 *
 * Slab mode (array.c): as sheaves, through the thread's array: popped and
 * pushed there, refilled and flushed a batch at a time.
 *
 * Debug caches and threads without a CPU part go one object at a time.
 * Allocation is all or nothing: a failed one gives back what it took
 * without counting it (the totals count what the program got and gave
 * back, in every mode); every freed object gets the checks of a single
 * free, and the caller's array is left as it was.
 */
#include "cpu.h"

#include <errno.h>
#include <string.h>

/* The part to use for s, or NULL (debug caches, exiting threads). */
static struct cpu_cache *bulk_cpu(struct uslab_cache *s)
{
	if (s->debug)
		return NULL;
	struct cpu_cache *c = cpu_this(s);
	if (c->cache != s && !(c = cpu_get(s)))
		return NULL;
	slab_cpu_enter(s, c);
	return c;
}

static void classic_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);

/* Classic: pop the CPU free list, refilling it as needed. */
static size_t classic_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
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
				classic_free_bulk(s, c, i, objs);
			stat_inc(s, c, USLAB_STAT_ALLOC_FAILED);
			errno = ENOMEM;
			return 0;
		}
	}
	return nr;
}

static size_t alloc_bulk_general(struct uslab_cache *s, size_t nr, void **objs);

size_t uslab_cache_alloc_bulk(struct uslab_cache *s, size_t nr, void **objs)
{
	if (!nr)
		return 0;
	if (!s || !objs) {
		errno = EINVAL;
		return 0;
	}
	s = cache_root(s);
	struct cpu_cache *c = cpu_this(s);
	/* home mode: the current slab's list straight into objs[], no more
	 * bookkeeping than a single allocation unless it runs dry; one object
	 * as the single allocation's pop (counted as bulk) */
	if (nr == 1 && likely(c->cache == s) && c->mode == CPU_HOME) {
		void *x = c->freelist, *next;
		if (likely(x != NULL) && likely(cpu_next_ok(c, next = cpu_fp_get(c, x)))) {
			c->freelist = next;
			cpu_order();
			cpu_fp_scrub(c, x);
			track_alloc(x, s->object_size);
			cpu_count(&c->stat[USLAB_STAT_ALLOC_BULK], 1);
			objs[0] = x;
			return 1;
		}
	}
	size_t got;
	if (likely(c->cache == s) && c->mode == CPU_HOME && (got = home_alloc_bulk_fast(s, c, nr, objs)) != 0)
		return got;
	return alloc_bulk_general(s, nr, objs);
}

/* Every other mode, debug caches, threads without a part, hardened. */
static NOINLINE size_t alloc_bulk_general(struct uslab_cache *s, size_t nr, void **objs)
{
	struct cpu_cache *c = bulk_cpu(s);
	size_t got;
	if (!c) {   /* one at a time; each is counted (ALLOC_BULK or ALLOC_SLOWPATH) */
		for (got = 0; got < nr; got++) {
			objs[got] = s->debug ? slab_debug_alloc(s, __builtin_return_address(0), USLAB_STAT_ALLOC_BULK, 0)
					     : slab_alloc_nocpu(s);
			if (!objs[got]) {
				int e = errno;
				uslab_cache_free_bulk(s, got, objs);
				/* nothing stays allocated: the objects taken were
				 * counted one by one as they came and went (the debug
				 * and part-less paths count as they go); take those
				 * counts back, so that the totals, as in every mode,
				 * count only what the program got (ALLOC_FAILED says
				 * what happened). Unsigned counters: adding the
				 * negation subtracts. */
				stat_add(s, NULL, s->debug ? USLAB_STAT_ALLOC_BULK : USLAB_STAT_ALLOC_SLOWPATH, -(uint64_t)got);
				stat_add(s, NULL, USLAB_STAT_FREE_BULK, -(uint64_t)got);
				errno = e;
				memset(objs, 0, nr * sizeof(void *));
				return 0;
			}
		}
		return nr;
	}
	switch (c->mode) {
	case CPU_SHEAVES: got = sheaf_alloc_bulk(s, c, nr, objs); break;
	case CPU_CLASSIC: got = classic_alloc_bulk(s, c, nr, objs); break;
	case CPU_SLAB:    got = array_alloc_bulk(s, c, nr, objs); break;
	default:          got = home_alloc_bulk(s, c, nr, objs); break;
	}
	cpu_idle(c);
	if (!got) {
		memset(objs, 0, nr * sizeof(void *));
		return 0;
	}
	for (size_t j = 0; USLAB_TRACKED && j < nr; j++)
		track_alloc(objs[j], s->object_size);
	for (size_t j = 0; unlikely(opt.hardened) && j < nr; j++)
		slab_hand_out(s, objs[j]);
	stat_add(s, c, USLAB_STAT_ALLOC_BULK, nr);
	return nr;
}

/* Classic: objects of the CPU slab onto the CPU free list, the rest to
 * their slabs in groups. objs[] holds checked objects, no NULL. */
static void classic_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
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

static void free_bulk_general(struct uslab_cache *named, struct uslab_cache *s, size_t nr, void **objs);

void uslab_cache_free_bulk(struct uslab_cache *s, size_t nr, void **objs)
{
	if (!nr || !objs)
		return;
	if (!s)
		report_fatal("free_bulk of %zu objects to a NULL cache", nr);
	struct uslab_cache *named = s;
	s = cache_root(s);
	struct cpu_cache *c = cpu_this(s);
	if (nr == 1 && objs[0]) {   /* one object of this thread's current slab: as a single free */
		void *x = objs[0];
		uintptr_t base;
		struct slab *d = page_obj_lookup(x, &base);
		struct cpu_cache *o;
		if (atomic_load_explicit(&d->otag, memory_order_relaxed) == cpu_tls.tag && d->cache == s &&
		    (o = atomic_load_explicit(&d->owner, memory_order_relaxed))->slab == d &&
		    cpu_offset_ok(o, d, (uintptr_t)x - base) && cpu_fp_swap(o, x, o->freelist)) {
			track_free(x, s->object_size);
			cpu_order();
			o->freelist = x;
			cpu_count(&o->stat[USLAB_STAT_FREE_BULK], 1);
			return;
		}
	}
	if (likely(c->cache == s) && c->mode == CPU_HOME) {   /* checks each object as it goes */
		home_free_bulk_fast(named, c, nr, objs);
		return;
	}
	free_bulk_general(named, s, nr, objs);
}

static NOINLINE void free_bulk_general(struct uslab_cache *named, struct uslab_cache *s, size_t nr, void **objs)
{
	struct cpu_cache *c = bulk_cpu(s);
	/* Check every object as a single free would, in chunks compacted of
	 * NULLs; debug caches and CPU-less threads free one at a time. */
	void *chunk[64];
	size_t freed = 0;
	for (size_t i = 0; i < nr;) {
		unsigned k = 0;
		for (; i < nr && k < 64; i++) {
			void *x = objs[i];
			if (!x)
				continue;
			struct slab *slab = page_obj_slab(x);
			if (unlikely(page_kind(slab) != PK_SLAB || slab->cache != s || !slab_obj_valid(s, slab, x))) {
				if (kfence_owns(x)) {   /* a sampled object (from a single allocation) */
					kfence_free(x, named, __builtin_return_address(0), USLAB_STAT_FREE_BULK);
					continue;
				}
				slab_bad_free(named, slab, x, "invalid free");
			}
			if (unlikely(opt.hardened) && !live_clear(x))
				slab_bad_free(named, slab, x, "double free");
			if (!s->debug && !c)
				fp_check_free(s, slab, x);   /* (the modes check as they link or mark it) */
			if (!c) {
				if (s->debug) {   /* through every debug check, which counts it */
					slab_debug_free(s, slab, x, __builtin_return_address(0), USLAB_STAT_FREE_BULK);
					continue;
				}
				track_free(x, s->object_size);
				slab_free_chain(s, NULL, slab, x, x, 1, false);
				freed++;
				continue;
			}
			track_free(x, s->object_size);
			chunk[k++] = x;
		}
		if (!k)
			continue;
		switch (c->mode) {
		case CPU_SHEAVES: sheaf_free_bulk(s, c, k, chunk); break;
		case CPU_CLASSIC: classic_free_bulk(s, c, k, chunk); break;
		case CPU_SLAB:    array_free_bulk(s, c, k, chunk); break;
		default:          home_free_bulk(s, c, k, chunk); break;
		}
		freed += k;
	}
	if (c)
		cpu_idle(c);
	if (freed)
		stat_add(s, c, USLAB_STAT_FREE_BULK, freed);
}
