/*
 * Bulk allocation and free (kmem_cache_alloc_bulk/free_bulk).
 *
 * Each CPU part has a bulk magazine (as the kernel's sheaves): an array of
 * up to CPU_MAG_MAX objects of the CPU's own slabs that free_bulk left
 * and alloc_bulk takes first, by copying pointers, without walking free
 * lists. Only objects of slabs the CPU keeps frozen go in, so that
 * alloc_bulk never hands out another CPU's objects (passive false
 * sharing); the magazine goes back to the slabs when the CPU part is
 * flushed (shrink, destroy, thread exit).
 *
 * Beyond the magazine, alloc_bulk takes objects straight off the CPU free
 * list, refilling the CPU slab as often as needed; it is all or nothing.
 * free_bulk checks every object as a single free would, then hands them
 * back in detached free lists, one CAS per run of objects of one slab (none
 * for a slab this CPU keeps frozen: onto its owner-local list); objects of
 * the CPU slab go onto the CPU free list in one step.
 */
#include "slab.h"

#include <errno.h>
#include <string.h>

size_t uslab_cache_alloc_bulk(struct uslab_cache *s, size_t nr, void **objs)
{
	if (!nr)
		return 0;
	if (!s || !objs) {
		errno = EINVAL;
		return 0;
	}
	s = cache_root(s);
	struct cpu_cache *c = s->debug ? NULL : cpu_this(s);
	if (!s->debug && (!c || c->cache != s))
		c = cpu_get(s);
	size_t i = 0;
	if (!c) {   /* debug caches and exiting threads: one at a time */
		for (; i < nr; i++)
			if (!(objs[i] = s->debug ? debug_alloc(s, __builtin_return_address(0), USLAB_STAT_ALLOC_BULK, 0)
						 : slab_alloc_nocpu(s)))
				goto fail;   /* each was counted (ALLOC_BULK or ALLOC_SLOWPATH) */
		return nr;
	}
	if (c->magn) {   /* the magazine first, newest objects first */
		size_t k = nr < c->magn ? nr : c->magn;
		c->magn -= (unsigned)k;
		memcpy(objs, &c->mag->obj[c->magn], k * sizeof(void *));
		i = k;
	}
	const unsigned offset = s->offset;
	const uintptr_t key = s->fp_key;
	while (i < nr) {
		/* in locals: the stores to objs[] could alias the CPU part */
		void *x = c->freelist;
		const uintptr_t base = c->slab_base, span = c->slab_span;
		size_t start = i;
		while (i < nr && x) {
			void **where = (void **)((char *)x + offset);
			void *next = (void *)((uintptr_t)*where ^ (USLAB_HARDENED ? key ^ __builtin_bswap64((uintptr_t)where) : 0));
			if (unlikely(next && (uintptr_t)next - base >= span))
				slab_bad_freelist(s, x, next);
			objs[i++] = x;
			x = next;
		}
		c->freelist = x;
		cpu_count(&c->fl_in, -(uint64_t)(i - start));
		if (i < nr && !slab_refill_cpu(s, c))
			goto fail;
	}
	for (size_t j = 0; USLAB_TRACKED && j < nr; j++)
		track_alloc(objs[j], s->object_size);
	stat_add(s, c, USLAB_STAT_ALLOC_BULK, nr);
	return nr;
fail:
	/* nothing stays allocated: count what was taken, then give it back */
	if (c)
		stat_add(s, c, USLAB_STAT_ALLOC_BULK, i);
	uslab_cache_free_bulk(s, i, objs);
	stat_add(s, c, USLAB_STAT_ALLOC_FAILED, 1);
	for (size_t j = 0; j < nr; j++)
		objs[j] = NULL;
	errno = ENOMEM;
	return 0;
}

/* The run of objects of one slab being chained by free_bulk. */
struct run {
	struct slab *slab;
	uintptr_t first, span;   /* the slab's objects: [first, first + span) */
	void *head, *tail;
	unsigned cnt;
	bool own;                /* a slab this CPU keeps frozen: objects may go to the magazine */
};

void uslab_cache_free_bulk(struct uslab_cache *s, size_t nr, void **objs)
{
	if (!nr || !objs)
		return;
	if (!s)
		report_fatal("free_bulk of %zu objects to a NULL cache", nr);
	struct uslab_cache *named = s;
	s = cache_root(s);
	struct cpu_cache *c = s->debug ? NULL : cpu_this(s);
	if (!s->debug && (!c || c->cache != s))
		c = cpu_get(s);   /* NULL for exiting threads: no CPU slab to use */
	if (c && !c->mag) {
		int e = errno;   /* free keeps errno */
		struct slab *blk = page_alloc(0);
		c->mag = blk ? page_address(blk) : NULL;
		errno = e;
	}
	/* Objects of the CPU's own slabs go to the magazine while it has room;
	 * then objects of the CPU slab go to one chain, put on the CPU free
	 * list at the end, and runs of objects of one other slab go back with
	 * one CAS each (objects from alloc_bulk come in runs). Each object gets
	 * the checks of a single free, but only the first of a run a
	 * descriptor lookup. */
	struct run r = { 0 };
	void *cpu_head = NULL, *cpu_tail = NULL;
	unsigned cpu_cnt = 0, nulls = 0;   /* nulls: entries not to count here (NULL, or counted by debug_free) */
	/* the CPU part's fields in locals: the stores below could alias c */
	const uintptr_t cbase = c ? c->slab_base : 0, cspan = c ? c->slab_span : 0;
	void *const cfree = c ? c->freelist : NULL;
	struct slab *const cslab = c ? c->slab : NULL;
	struct cpu_mag *const mag = c ? c->mag : NULL;
	unsigned magn = c ? c->magn : 0;
	for (size_t i = 0; i < nr; i++) {
		void *x = objs[i];
		if (!x) {
			nulls++;
			continue;
		}
		uintptr_t off;
		if ((off = (uintptr_t)x - cbase) < cspan && obj_offset_ok(s, off)) {
			if (unlikely(x == cpu_head || x == cfree || (magn && x == mag->obj[magn - 1])))
				slab_bad_free(named, cslab, x, "double free");
			track_free(x, s->object_size);
			if (mag && magn < CPU_MAG_MAX) {
				mag->slab[magn] = cslab;
				mag->obj[magn++] = x;
				continue;
			}
			set_freepointer(s, x, cpu_head);
			if (!cpu_head)
				cpu_tail = x;
			cpu_head = x;
			cpu_cnt++;
			continue;
		}
		if (!r.slab || (off = (uintptr_t)x - r.first) >= r.span || !obj_offset_ok(s, off)) {
			struct slab *slab = page_obj_slab(x);
			if (unlikely(page_kind(slab) != PK_SLAB || slab->cache != s || !slab_obj_valid(s, slab, x)))
				slab_bad_free(named, slab, x, "invalid free");
			if (s->debug) {   /* one at a time, through every debug check (which counts it) */
				debug_free(s, slab, x, __builtin_return_address(0), USLAB_STAT_FREE_BULK);
				nulls++;
				continue;
			}
			if (r.cnt)
				slab_free_run(s, c, r.slab, r.head, r.tail, r.cnt);
			r = (struct run){ slab, (uintptr_t)slab_first(s, slab), (uintptr_t)slab->objects * s->size, NULL,
					  NULL, 0, c && atomic_load_explicit(&slab->owner, memory_order_relaxed) == c };
		}
		if (unlikely(x == r.tail || (magn && x == mag->obj[magn - 1])))
			slab_bad_free(named, r.slab, x, "double free");
		track_free(x, s->object_size);
		if (r.own && mag && magn < CPU_MAG_MAX) {
			mag->slab[magn] = r.slab;
			mag->obj[magn++] = x;
			continue;
		}
		if (r.cnt)
			set_freepointer(s, r.tail, x);
		else
			r.head = x;
		r.tail = x;
		r.cnt++;
	}
	if (c)
		c->magn = magn;
	if (r.cnt)
		slab_free_run(s, c, r.slab, r.head, r.tail, r.cnt);
	if (cpu_cnt) {
		set_freepointer(s, cpu_tail, c->freelist);
		c->freelist = cpu_head;
		cpu_count(&c->fl_in, cpu_cnt);
	}
	if (c && magn)
		c->own_run_freed = true;   /* the CPU frees its own objects (slab.c: park_wanted) */
	if (nr - nulls)
		stat_add(s, c, USLAB_STAT_FREE_BULK, nr - nulls);
}
