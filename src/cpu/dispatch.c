/*
 * The slow paths of every per-CPU mode: which mode a part runs (the
 * cache's cpu_mode, switched at a part's next slow path), what every slow
 * path does first (slab_cpu_enter: busy mark, a fork child's settling, a
 * take-back request, the mode), and the dispatch to classic.c, sheaf.c,
 * home.c or array.c. The inline fast paths (cpu.h) end here when they cannot finish.
 */
#include "cpu.h"
#include "debug.h"

#include <errno.h>

void (*_Atomic slab_slow_hook)(void);


const struct cpu_mode_ops *const cpu_modes[CPU_NR_MODES] = {
	[CPU_CLASSIC] = &cpu_classic_ops,
	[CPU_SHEAVES] = &cpu_sheaf_ops,
	[CPU_HOME] = &cpu_home_ops,
	[CPU_SLQB] = &cpu_slqb_ops,
	[CPU_SLAB] = &cpu_array_ops,
};

void slab_cpu_enter(struct uslab_cache *s, struct cpu_cache *c)
{
	cpu_busy(c);   /* the caller marks it idle when done */
	cpu_fork_check();
	atomic_store_explicit(&c->slow_ops, atomic_load_explicit(&c->slow_ops, memory_order_relaxed) + 1,
			      memory_order_relaxed);   /* this part is in use (decay.c) */
	if (unlikely(atomic_load_explicit(&c->flush_req, memory_order_relaxed))) {
		/* another thread asked, while we were idle, for what we hold */
		atomic_store_explicit(&c->flush_req, false, memory_order_relaxed);
		slab_flush_cpu(s, c);
	}
	/* the mode the cache asks for now (it may have been changed), or
	 * set up again after a flush */
	unsigned mode = TUNE(s, cpu_mode), cap = TUNE(s, sheaf_capacity);   /* one read each: a tuner may */
	if (mode == CPU_SHEAVES && !cap)                                      /* change either meanwhile */
		mode = CPU_CLASSIC;
	if (mode == CPU_SLAB)
		cap = TUNE(s, limit);   /* the array's size */
	if (unlikely(c->mode != mode) || unlikely((mode == CPU_SHEAVES || mode == CPU_SLAB) && c->sheaf_cap != cap)) {
		slab_flush_cpu(s, c);
		cpu_modes[mode]->setup(s, c, cap);
	}
}

void *slab_alloc_slow_tail(struct uslab_cache *s, struct cpu_cache *c, size_t asked)
{
	return slab_alloc_slow(s, c, __builtin_return_address(0), asked);
}

void *slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c, void *caller, size_t asked)
{
	struct uslab_cache *named = s;   /* KFENCE sizes a sample by the cache asked for */
	s = cache_root(s);
	void (*hook)(void) = atomic_load_explicit(&slab_slow_hook, memory_order_relaxed);
	if (unlikely(hook))
		hook();
	if (unlikely(s->debug))
		return slab_debug_alloc(s, caller, USLAB_STAT_ALLOC_SLOWPATH, asked);
	void *k = kfence_maybe(named, asked, caller);   /* a sample due (kfence.h) */
	if (unlikely(k))
		return k;
	struct cpu_cache *p;
	if (pcpu_g.on && (p = pcpu_acquire(s)) != NULL) {   /* this CPU's part (pcpu.c) */
		void *x = sheaf_alloc_slow(s, p);
		pcpu_release(p);
		if (likely(x))
			track_alloc(x, s->object_size);
		return slab_hand_out(s, x);
	}
	if (c->cache != s) {
		c = cpu_get(s);
		if (!c)
			return slab_alloc_nocpu(s);
	}
	slab_cpu_enter(s, c);
	void *x = cpu_modes[c->mode]->alloc_slow(s, c);
	cpu_idle(c);
	if (likely(x))
		track_alloc(x, s->object_size);
	return slab_hand_out(s, x);
}


void *cpu_pop_checked(struct uslab_cache *s, struct cpu_cache *c, void *x, void *next)
{
	struct slab *d;
	if (cpu_next_ok(c, next) ||   /* in the part's slab: one of several slots */
	    (c->mode == CPU_SLQB && (d = slab_of(next)) != NULL && slab_kind(d) == SK_SLAB && d->cache == s->real &&
	     slab_obj_valid(s->real, d, next))) {
		c->freelist = next;   /* (the SLQB queue spans slabs) */
		cpu_order();
		cpu_fp_scrub(c, x);
		cpu_tick(&c->alloc_fast);
		track_alloc(x, s->object_size);
		return x;
	}
	slab_bad_freelist(s, x, next);
}

void *cpu_alloc_wrapped(struct uslab_cache *named, struct cpu_cache *c, void *x, bool from_objs, size_t asked)
{
	struct uslab_cache *s = c->cache;
	void *k = kfence_interval ? kfence_alloc_due(named, asked, __builtin_return_address(0)) : NULL;   /* the clock */
	if (likely(!k)) {
		track_alloc(x, s->object_size);
		return x;
	}
	/* x goes back as if never taken (its count too: the sample is counted
	 * as the cache's allocation) */
	if (from_objs) {
		set_freepointer(s, x, NULL);   /* marked free again */
		c->objs[c->n] = x;
		cpu_order();   /* (as the fast paths: the entry before the count that shows it) */
		cpu_set_n(c, c->n + 1);
		__atomic_store_n(&c->alloc_pcs, cpu_ctr(&c->alloc_pcs) - 1, __ATOMIC_RELAXED);
	} else {
		set_freepointer(s, x, c->freelist);
		cpu_order();   /* (the link before the head that publishes it) */
		c->freelist = x;
		__atomic_store_n(&c->alloc_fast, cpu_ctr(&c->alloc_fast) - 1, __ATOMIC_RELAXED);
	}
	return k;
}

/* Making a CPU part may fail with ENOMEM; free keeps errno. */
static struct cpu_cache *free_cpu_get(struct uslab_cache *s)
{
	int e = errno;
	struct cpu_cache *c = cpu_get(s);
	errno = e;
	return c;
}

void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *x, struct cpu_cache *c, void *caller)
{
	struct uslab_cache *named = s;   /* the cache the caller named, for reports */
	s = cache_root(s);
	if (unlikely(slab_kind(slab) != SK_SLAB || slab->cache != s || !slab_obj_valid(s, slab, x))) {
		if (kfence_owns(x)) {   /* a sampled object: outside every segment */
			kfence_free(x, named, caller, USLAB_STAT_FREE_SLOWPATH);
			return;
		}
		slab_bad_free(named, slab, x, "invalid free");
	}
	if (unlikely(opt.hardened) && !s->internal && !live_clear(x))
		slab_bad_free(named, slab, x, "double free (object not live)");   /* or a never-allocated slot */
	if (unlikely(s->debug)) {
		slab_debug_free(s, slab, x, caller, USLAB_STAT_FREE_SLOWPATH);
		return;
	}
	fp_check_free(s, slab, x);
	struct cpu_cache *p;
	if (pcpu_g.on && (p = pcpu_acquire(s)) != NULL) {   /* this CPU's part (pcpu.c) */
		track_free(x, s->object_size);
		sheaf_free_slow(s, p, x);
		pcpu_release(p);
		return;
	}
	if (!c || c->cache != s) {
		c = free_cpu_get(s);   /* NULL for exiting threads: they free straight to the slab */
		if (!c) {
			track_free(x, s->object_size);
			slab_free_chain(s, NULL, slab, x, x, 1, false);
			stat_inc(s, NULL, USLAB_STAT_FREE_SLOWPATH);
			return;
		}
	}
	slab_cpu_enter(s, c);
	track_free(x, s->object_size);
	cpu_modes[c->mode]->free_slow(s, c, slab, x);
	cpu_idle(c);
}

void cpu_free_other(struct uslab_cache *named, struct slab *d, void *x)
{
	void *caller = __builtin_return_address(0);   /* tail-called: the API call's */
	if (unlikely(!x))
		return;   /* uslab_cache_free(s, NULL): the inline path leaves it to us */
	if (unlikely(slab_kind(d) == SK_TAIL))   /* a later slot of a slab of several */
		d -= d->back;
	if (unlikely(slab_kind(d) != SK_SLAB)) {   /* the cache API's misuse, or a KFENCE object */
		slab_free_slow(named, d, x, NULL, caller);
		return;
	}
	struct uslab_cache *s = d->cache;
	/* per CPU: an object of a later slot of a slab of several, whose slot
	 * record the inline path cannot use, is checked here (exactly: its
	 * offset may pass 64 KiB) and pushed as the inline path pushes, not
	 * taken through the part's lock (kmalloc's classes of 20 KiB and more
	 * keep half their objects in a second slot); a mark that fails is a
	 * double free, which the slow path reports */
	uintptr_t slot = atomic_load_explicit(&s->pcpu_slot, memory_order_relaxed);
	if (slot && likely(!named || named->real == s) && likely(slab_obj_valid(s, d, x)) && likely(pcpu_mark(s, x))) {
		pcpu_push_marked(named, d, x, slot);
		return;
	}
	struct cpu_cache *c = cpu_this_id(d->cid);
	/* a remote free or slqb's queue: straight to home.c once x is
	 * checked, without the slow path's bookkeeping (they are this mode's
	 * ordinary frees, not a slow path); a SLAB-format slab's object takes
	 * the slow path, which brings the part to the cache's mode first */
	if (likely(c->cache == s) && (c->mode == CPU_HOME || c->mode == CPU_SLQB) && likely(!named || named->real == s) &&
	    likely(slab_obj_valid(s, d, x)) && !opt.hardened && likely(!slab_is_array(d))) {
		fp_check_free(s, d, x);
		track_free(x, s->object_size);
		cpu_busy(c);
		home_free(s, c, d, x);
		cpu_idle(c);
		return;
	}
	slab_free_slow(named ? named : s, d, x, c, caller);
}


void slab_flush_cpu(struct uslab_cache *s, struct cpu_cache *c)
{
	if (c->mode < CPU_NR_MODES)   /* (CPU_NR_MODES: set up in no mode yet) */
		cpu_modes[c->mode]->flush(s, c);
	if (c->mode != CPU_HOME && c->mode != CPU_SLQB)
		home_flush_cpu(s, c);   /* its inbox: batches from freers that saw it in home mode */
	c->mode = CPU_NR_MODES;   /* set up again at its next slow path */
}

