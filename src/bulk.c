/*
 * Bulk allocation and free (kmem_cache_alloc_bulk/free_bulk).
 *
 * alloc_bulk takes objects straight off the CPU free list,
 * refilling the CPU slab as often as needed; it is all or nothing. free_bulk
 * checks every object as a single free would, then hands them back in
 * detached free lists, one CAS per run of objects of one slab; objects of
 * the CPU slab go onto the CPU free list in one step.
 */
#include "slab.h"

#include <errno.h>

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
	while (i < nr) {
		size_t k = 0;
		void *x;
		while (i < nr && (x = c->freelist) != NULL) {
			void *next = get_freepointer(s, x);
			if (unlikely(!cpu_next_ok(c, next)))
				slab_bad_freelist(s, x, next);
			c->freelist = next;
			objs[i++] = x;
			k++;
		}
		cpu_count(&c->fl_in, -(uint64_t)k);
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
	/* Objects of the CPU slab go to one chain, put on the CPU free list at
	 * the end; runs of objects of one other slab go back with one CAS each
	 * (objects from alloc_bulk come in runs). Each object gets the checks
	 * of a single free, but only the first of a run a descriptor lookup. */
	struct run r = { 0 };
	void *cpu_head = NULL, *cpu_tail = NULL;
	unsigned cpu_cnt = 0;
	uint64_t freed = 0;
	for (size_t i = 0; i < nr; i++) {
		void *x = objs[i];
		if (!x)
			continue;
		uintptr_t off;
		if (c && (off = (uintptr_t)x - c->slab_base) < c->slab_span && obj_offset_ok(s, off)) {
			if (unlikely(x == cpu_head || x == c->freelist))
				slab_bad_free(named, c->slab, x, "double free");
			track_free(x, s->object_size);
			set_freepointer(s, x, cpu_head);
			if (!cpu_head)
				cpu_tail = x;
			cpu_head = x;
			cpu_cnt++;
			freed++;
			continue;
		}
		if (r.slab && (off = (uintptr_t)x - r.first) < r.span && obj_offset_ok(s, off)) {
			if (unlikely(x == r.tail))
				slab_bad_free(named, r.slab, x, "double free");
			track_free(x, s->object_size);
			set_freepointer(s, r.tail, x);
			r.tail = x;
			r.cnt++;
			freed++;
			continue;
		}
		struct slab *slab = page_obj_slab(x);
		if (unlikely(page_kind(slab) != PK_SLAB || slab->cache != s || !slab_obj_valid(s, slab, x)))
			slab_bad_free(named, slab, x, "invalid free");
		if (s->debug) {   /* one at a time, through every debug check */
			debug_free(s, slab, x, __builtin_return_address(0), USLAB_STAT_FREE_BULK);
			continue;
		}
		if (r.slab)
			slab_free_chain(s, c, r.slab, r.head, r.tail, r.cnt);
		track_free(x, s->object_size);
		r = (struct run){ slab, (uintptr_t)slab_first(s, slab), (uintptr_t)slab->objects * s->size, x, x, 1 };
		freed++;
	}
	if (r.slab)
		slab_free_chain(s, c, r.slab, r.head, r.tail, r.cnt);
	if (cpu_cnt) {
		set_freepointer(s, cpu_tail, c->freelist);
		c->freelist = cpu_head;
		cpu_count(&c->fl_in, cpu_cnt);
	}
	if (freed)
		stat_add(s, c, USLAB_STAT_FREE_BULK, freed);
}
