/*
 * Bulk allocation and free (kmem_cache_alloc_bulk/free_bulk).
 *
 * Sheaves mode (sheaf.c): as the kernel's, through the sheaves: objects
 * come off main (then spare and the barn) and go onto it; what does not
 * fit goes straight between the caller's array and the slabs, grouped by
 * slab (the 2015 thread's detached free lists: one CAS per slab). What
 * main can give or take needs no slow path: on parts of CPUs one
 * restartable sequence copies it (pcpu.c), on a thread's own part plain
 * stores do, each ending in one store of n as single calls do.
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

/* The part to use for s, or NULL (debug caches, exiting threads): this
 * CPU's (locked and closed: pcpu.c) or this thread's. bulk_done() after. */
static struct cpu_cache *bulk_cpu(struct uslab_cache *s)
{
	if (s->debug)
		return NULL;
	struct cpu_cache *c;
	if (pcpu_g.on && (c = pcpu_acquire(s)) != NULL)
		return c;
	c = cpu_this(s);
	if (c->cache != s && !(c = cpu_get(s)))
		return NULL;
	slab_cpu_enter(s, c);
	return c;
}

static void bulk_done(struct cpu_cache *c)
{
	if (c->pcpu)
		pcpu_release(c);
	else
		cpu_idle(c);
}

static size_t alloc_bulk_general(struct uslab_cache *s, size_t nr, void **objs);

/* Sheaves mode, on either backend: objs[0 .. got) came off main; the rest
 * from the general path, or (all or nothing) the got objects go back and
 * neither way is counted: the totals count what the program got. */
static size_t alloc_bulk_rest(struct uslab_cache *s, size_t got, size_t nr, void **objs)
{
	if (got == nr || alloc_bulk_general(s, nr - got, objs + got))
		return nr;
	int e = errno;
	uslab_cache_free_bulk(s, got, objs);
	stat_add(s, NULL, USLAB_STAT_ALLOC_BULK, -(uint64_t)got);
	stat_add(s, NULL, USLAB_STAT_FREE_BULK, -(uint64_t)got);
	memset(objs, 0, nr * sizeof(void *));
	errno = e;
	return 0;
}

/* Sheaves mode on this thread's own part c: the top of main, as single
 * allocations take it (a plain store of n, the fast path's commit). */
static size_t tls_alloc_bulk_fast(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs)
{
	uint32_t n = c->n;
	size_t k = MIN((size_t)n, nr);
	for (size_t j = 0; j < k; j++)
		objs[j] = c->objs[n - 1 - j];
	cpu_set_n(c, n - (uint32_t)k);
	for (size_t j = 0; j < k; j++) {
		cpu_fp_scrub(c, objs[j]);
		track_alloc(objs[j], s->object_size);
	}
	cpu_count(&c->stat[USLAB_STAT_ALLOC_BULK], k);
	return k;
}

size_t uslab_cache_alloc_bulk(struct uslab_cache *s, size_t nr, void **objs)
{
	if (!nr)
		return 0;
	if (!s || !objs) {
		errno = EINVAL;
		return 0;
	}
	s = cache_root(s);
	/* sheaves on parts of CPUs: this CPU's main by one sequence */
	if (atomic_load_explicit(&s->pcpu_slot, memory_order_relaxed))
		return alloc_bulk_rest(s, pcpu_alloc_bulk_fast(s, nr, objs), nr, objs);
	struct cpu_cache *c = cpu_this(s);
	/* sheaves on this thread's part: its main */
	if (likely(c->cache == s) && c->mode == CPU_SHEAVES && c->n)
		return alloc_bulk_rest(s, tls_alloc_bulk_fast(s, c, nr, objs), nr, objs);
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
	got = cpu_modes[c->mode]->alloc_bulk(s, c, nr, objs);
	bool pc = c->pcpu;
	bulk_done(c);
	if (!got) {
		memset(objs, 0, nr * sizeof(void *));
		return 0;
	}
	for (size_t j = 0; USLAB_TRACKED && j < nr; j++)
		track_alloc(objs[j], s->object_size);
	for (size_t j = 0; unlikely(opt.hardened) && j < nr; j++)
		slab_hand_out(s, objs[j]);
	if (pc)   /* (a part of a CPU: counted under its lock, or on the cache) */
		stat_add(s, NULL, USLAB_STAT_ALLOC_BULK, nr);
	else
		stat_add(s, c, USLAB_STAT_ALLOC_BULK, nr);
	return nr;
}


static void free_bulk_general(struct uslab_cache *named, struct uslab_cache *s, size_t nr, void **objs);

/* x (not NULL) in a bulk free: an object of s's slabs (its slab in
 * *slab: true), or a KFENCE sample, freed here (false); anything else is
 * reported. Inline: the KFENCE report's call site is the API call's. */
static inline __attribute__((always_inline)) bool bulk_object(struct uslab_cache *named, struct uslab_cache *s,
							      void *x, struct slab **slab)
{
	struct slab *d = slab_of(x);
	if (unlikely(slab_kind(d) != SK_SLAB || d->cache != s || !slab_obj_valid(s, d, x))) {
		if (kfence_owns(x)) {   /* a sampled object (from a single allocation) */
			kfence_free(x, named, __builtin_return_address(0), USLAB_STAT_FREE_BULK);
			return false;
		}
		slab_bad_free(named, d, x, "invalid free");
	}
	*slab = d;
	return true;
}

/* Check objs[*ip ..] as single frees do (NULLs skipped, a KFENCE object
 * freed, misuse reported) and mark them free, up to 64 into chunk[]:
 * how many. An object twice in objs[] finds its own mark the second time. */
static inline __attribute__((always_inline)) unsigned mark_chunk(struct uslab_cache *named, struct uslab_cache *s,
								size_t nr, void **objs, size_t *ip, void **chunk)
{
	unsigned k = 0;
	size_t i = *ip;
	for (; i < nr && k < 64; i++) {
		void *x = objs[i];
		struct slab *slab;
		if (!x || !bulk_object(named, s, x, &slab))
			continue;
		fp_mark_free(s, slab, x);
		track_free(x, s->object_size);
		chunk[k++] = x;
	}
	*ip = i;
	return k;
}

/*
 * Sheaves mode, on either backend: every object checked and marked first
 * (on parts of CPUs a committed object may be popped by another thread at
 * once, and the mark cannot be in the sequence: a restart would find its
 * own), then onto main where it has room, by sequences per CPU or by plain
 * stores (n last, the single free's commit) on this thread's part c; the
 * rest through the part's slow path.
 */
static NOINLINE void sheaves_free_bulk(struct uslab_cache *named, struct uslab_cache *s, struct cpu_cache *c,
				       size_t nr, void **objs)
{
	void *chunk[64];
	for (size_t i = 0; i < nr;) {
		unsigned k = mark_chunk(named, s, nr, objs, &i, chunk);
		if (!c) {
			pcpu_free_bulk_marked(s, chunk, k);
			continue;
		}
		uint32_t n = c->n, m = MIN(k, c->cap - n);
		for (uint32_t j = 0; j < m; j++)
			c->objs[n + j] = chunk[j];
		cpu_order();
		cpu_set_n(c, n + m);
		cpu_count(&c->stat[USLAB_STAT_FREE_BULK], m);
		if (m == k)
			continue;
		slab_cpu_enter(s, c);   /* (which may change the part's mode) */
		if (c->mode == CPU_SHEAVES)
			sheaf_free_bulk_marked(s, c, k - m, chunk + m, true);
		else
			slab_free_objects(s, c, chunk + m, k - m, false, true);
		stat_add(s, c, USLAB_STAT_FREE_BULK, k - m);
		cpu_idle(c);
	}
}

void uslab_cache_free_bulk(struct uslab_cache *s, size_t nr, void **objs)
{
	if (!nr || !objs)
		return;
	if (!s)
		report_fatal("free_bulk of %zu objects to a NULL cache", nr);
	struct uslab_cache *named = s;
	s = cache_root(s);
	if (atomic_load_explicit(&s->pcpu_slot, memory_order_relaxed)) {   /* sheaves on parts of CPUs */
		sheaves_free_bulk(named, s, NULL, nr, objs);
		return;
	}
	struct cpu_cache *c = cpu_this(s);
	if (likely(c->cache == s) && c->mode == CPU_SHEAVES) {   /* sheaves on this thread's part */
		sheaves_free_bulk(named, s, c, nr, objs);
		return;
	}
	if (nr == 1 && objs[0]) {   /* one object of this thread's current slab: as a single free */
		void *x = objs[0];
		struct slab *d = slab_lookup(x);   /* (a later slot of a slab of several: the general path) */
		struct cpu_cache *o;
		if (atomic_load_explicit(&d->otag, memory_order_relaxed) == cpu_tls.tag && d->cache == s &&
		    (o = atomic_load_explicit(&d->owner, memory_order_relaxed))->slab == d &&
		    cpu_offset_ok(o, d, (uintptr_t)x & SLOT_MASK) && cpu_fp_swap(o, x, o->freelist)) {
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
			struct slab *slab;
			if (!x || !bulk_object(named, s, x, &slab))
				continue;
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
		cpu_modes[c->mode]->free_bulk(s, c, k, chunk);
		freed += k;
	}
	if (c && c->pcpu) {   /* (counted on the cache: the part is no longer ours) */
		pcpu_release(c);
		c = NULL;
	} else if (c) {
		cpu_idle(c);
	}
	if (freed)
		stat_add(s, c, USLAB_STAT_FREE_BULK, freed);
}
