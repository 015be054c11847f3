/*
 * uslab_cache_validate(): the kernel's validate_slab_cache() for uslab.
 *
 * What can be checked without stopping other threads:
 *  - every slab of the cache (found by walking the page allocator's blocks
 *    under its lock): it names the cache, its object count and inuse fit;
 *  - slabs on the node partial list, under the node lock: the free list is
 *    a chain of distinct objects on slot boundaries whose length matches
 *    the counters (other threads may only push to it meanwhile, and the
 *    snapshot's chain cannot lose objects while the lock is held);
 *  - the calling thread's own CPU free list and CPU slab;
 *  - slab mode's lists, under the node lock (array.c): each slab on the
 *    list its inuse says, its index list's free entries distinct, in
 *    range and clear in its bitmap, the bitmap's count, the list counts;
 *  - the node's slab and object counts against the slabs found.
 * Each problem is reported once, as one line.
 */
#include "cpu.h"
#include "debug.h"

#include <errno.h>
#include <time.h>

struct vstate {
	struct uslab_cache *s;
	long problems;
	long slabs;
	long objects;
};

static void problem(struct vstate *v, const char *what, const void *where, unsigned long a, unsigned long b)
{
	v->problems++;
	report_line("validate: cache '%s': %s at %p (%lu, %lu)", v->s->name, what, where, a, b);
}

/* Walk a free list of `slab`; returns its length, or -1 after reporting. */
static long walk_chain(struct vstate *v, struct slab *slab, void *head, unsigned limit)
{
	long n = 0;
	for (void *p = head; p; p = get_freepointer(v->s, p)) {
		if (slab_of(p) != slab || !slab_obj_valid(v->s, slab, p)) {
			problem(v, "free pointer outside the slab or off a slot boundary", p, (unsigned long)n, 0);
			return -1;
		}
		if ((unsigned)++n > limit) {
			problem(v, "free list longer than the slab (a loop?)", slab_base(slab), limit, 0);
			return -1;
		}
	}
	return n;
}

static void check_slab(struct slab *d, void *arg)
{
	struct vstate *v = arg;
	if (d->cache != v->s)
		return;
	v->slabs++;
	v->objects += d->objects;
	uint64_t fc = atomic_load_explicit(&d->fc, memory_order_acquire);
	unsigned max_objs = (unsigned)((PAGE_SIZE << d->order) / v->s->size);
	if (!d->objects || d->objects > max_objs)
		problem(v, "slab object count does not fit its pages", slab_base(d), d->objects, max_objs);
	if (fc_inuse(fc) > d->objects)
		problem(v, "slab inuse above its object count", slab_base(d), fc_inuse(fc), d->objects);
	if (slab_carve_chunks(d) > CARVE_CHUNKS)
		problem(v, "slab carved past its objects", slab_base(d), slab_carve_chunks(d), CARVE_CHUNKS);
}

long uslab_cache_validate(struct uslab_cache *cache)
{
	if (!cache) {
		errno = EINVAL;
		return -1;
	}
	struct uslab_cache *s = cache_root(cache);
	struct vstate v = { .s = s };
	struct node *n = &s->node;

	/* the caller's own CPU part */
	struct cpu_cache *c = cpu_part(s);
	if (c && c->slab)
		walk_chain(&v, c->slab, c->freelist, c->slab->objects);

	pthread_mutex_lock(&n->list_lock);
	unsigned long listed = 0;
	for (struct slab *slab = n->partial_head; slab; slab = slab->next) {
		listed++;
		uint64_t fc = atomic_load_explicit(&slab->fc, memory_order_acquire);
		if (slab->cache != s || slab_kind(slab) != SK_SLAB || !slab->on_node) {
			problem(&v, "slab on the partial list is not a listed slab of this cache", slab_base(slab), 0, 0);
			continue;
		}
		if (fc_frozen(fc))
			problem(&v, "frozen slab on the node partial list", slab_base(slab), 0, 0);
		/* free: the listed ones and the uncarved ones (slab.h, "carving") */
		long len = walk_chain(&v, slab, fc_freelist(fc, slab), slab->objects);
		unsigned uncarved = slab_uncarved(slab);
		if (len >= 0 && (unsigned long)len + uncarved + fc_inuse(fc) != slab->objects)
			problem(&v, "free objects + inuse != objects", slab_base(slab), (unsigned long)len + uncarved,
				fc_inuse(fc));
		if (len == 0 && !uncarved)
			problem(&v, "full slab on the partial list", slab_base(slab), 0, 0);
	}
	if (listed != atomic_load_explicit(&n->nr_partial, memory_order_relaxed))
		problem(&v, "nr_partial does not match the partial list", s, listed,
			atomic_load_explicit(&n->nr_partial, memory_order_relaxed));
	/* slab mode's lists (the same lock; empty for a cache that never ran
	 * in slab mode) */
	v.problems += array_validate_locked(s);
	/* Slabs are created and freed by threads that hold no lock of ours
	 * here; with the node lock held the counts can still move, so they
	 * are compared only when the cache is quiet enough to agree twice. */
	page_for_each_slab(check_slab, &v);
	if (s->debug)   /* every object, in the state the node lock keeps consistent */
		v.problems += debug_validate_locked(s);
	long ns = atomic_load_explicit(&n->nr_slabs, memory_order_relaxed);
	long no = atomic_load_explicit(&n->total_objects, memory_order_relaxed);
	pthread_mutex_unlock(&n->list_lock);
	/* A slab is counted a moment before the page walk can see it (made)
	 * and after it no longer can (discarded): a thread preempted in
	 * between makes a walk and quiet counts disagree for as long as it
	 * stays off its CPU. So disagreement is a problem only if it holds,
	 * with the counts unchanged, over several walks some milliseconds
	 * apart (about 40 ms in all). */
	for (int tries = 0; ns != v.slabs || no != v.objects; tries++) {
		struct vstate again = { .s = s };
		page_for_each_slab(check_slab, &again);   /* counts only; problems were reported above */
		long ns2 = atomic_load_explicit(&n->nr_slabs, memory_order_relaxed);
		long no2 = atomic_load_explicit(&n->total_objects, memory_order_relaxed);
		if (ns2 != ns || no2 != no || (again.slabs == ns && again.objects == no))
			break;   /* moving, or they agree now */
		if (tries == 8) {
			problem(&v, "node slab/object counts disagree with the slabs found", s,
				(unsigned long)again.slabs, (unsigned long)ns);
			break;
		}
		struct timespec ts = { 0, 5000000 };
		nanosleep(&ts, NULL);
	}
	return v.problems;
}
