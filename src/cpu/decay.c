/*
 * Giving memory back to the OS over time, and taking it back from threads
 * that hold it while idle.
 *
 * Where free memory sits, and what returns it:
 *   - free pages of the page allocator: page_free() purges (MADV_DONTNEED)
 *     what has been free for decay_ms, and at once whatever exceeds
 *     decay_dirty_max, so a burst of frees gives memory back while it runs;
 *     wholly free segments are unmapped (page.c);
 *   - freed huge mappings: unmapped after decay_ms (large.c);
 *   - slab mode's free slabs and shared array: its reap (array.c, the
 *     kernel's cache_reap: part of an untouched shared array, free slabs
 *     beyond the free limit, every 4 s) runs in each pass when it is due,
 *     and on slab mode's slow paths;
 *   - empty slabs the node list keeps (min_partial), sheaves in the barn,
 *     and sheaves of threads that stopped allocating: a decay pass
 *     (mem_decay_pass) gives these back once they have gone unused for a
 *     whole pass of the caches (one per decay_ms / 2), and the pages that
 *     frees are purged at once (they were unused for that long already).
 *     Passes run on the background thread when there is one (bgthread.c:
 *     at the earliest of the caches' next pass and the page allocator's
 *     next deadline while anything is pending, never while nothing is),
 *     and on demand: uslab_cache_shrink(), malloc_trim(0).
 *
 * Taking back from another thread: only the owner may touch its main sheaf
 * (its fast paths read and write it without atomics), so the taker uses
 * two mechanisms, chosen by what is safe without the owner's help:
 *   - the spare sheaf sits in an atomic slot: the taker exchanges it out
 *     (sheaf_take_spare), an owner that wants it meanwhile finds the slot
 *     empty and carries on;
 *   - for the rest (main, a classic CPU slab and partial list, the slabs a
 *     home or slqb part owns) the taker sets the part's flush_req, a
 *     hand-off the owner acknowledges on its next slow path
 *     (slab_cpu_enter) by giving everything back.
 * A thread blocked for good keeps at most its main sheaf per cache (in
 * classic mode, its CPU slab and partial list; in home and slqb modes,
 * the slabs it owns, and what others freed to its inbox).
 *
 * Locks: cache_mutex across a pass (the parts cannot go away), then node
 * and barn locks as the flushes take them, and the page lock, one at a
 * time: a pass never waits for a lock while it holds one but cache_mutex
 * (pcpu.c's drains flush after they give a part's lock back), and changes
 * nothing cache_mutex protects. fork.c relies on both ("Decay passes"):
 * a fork walks the cache list under the pass's hold rather than wait, and
 * the child gets cache_mutex back. The pass reads each part's slow-path
 * count (relaxed) and remembers it in seen_ops (only passes, under
 * cache_mutex, touch that).
 */
#include "cpu.h"

#include <string.h>

/* bgthread.c: set while the background thread sleeps with no deadline,
 * and how to wake it. */
_Atomic bool mem_bg_sleeping;
void (*_Atomic mem_bg_wake)(void);

void mem_dirty_notify(void)
{
	if (unlikely(atomic_load_explicit(&mem_bg_sleeping, memory_order_relaxed)) &&
	    atomic_exchange_explicit(&mem_bg_sleeping, false, memory_order_relaxed)) {
		void (*wake)(void) = atomic_load_explicit(&mem_bg_wake, memory_order_acquire);
		if (wake)
			wake();
	}
}

/* Does part c hold objects or slabs (as far as another thread can see)? */
static bool part_holds(struct cpu_cache *c)
{
	return __atomic_load_n(&c->n, __ATOMIC_RELAXED) || atomic_load_explicit(&c->spare_n, memory_order_relaxed) ||
	       __atomic_load_n(&c->slab, __ATOMIC_RELAXED) || __atomic_load_n(&c->partial, __ATOMIC_RELAXED) ||
	       atomic_load_explicit(&c->own_slabs, memory_order_relaxed) || atomic_load_explicit(&c->inbox, memory_order_relaxed);
}

/*
 * One cache (cache_mutex held). `all`: take everything that can be taken
 * now (shrink, trim); else only what was unused since the last pass.
 * `self`: the calling thread's own part (flushed directly), or NULL.
 * Returns true if something is left that a later pass may take.
 */
static bool decay_cache_locked(struct uslab_cache *s, bool all, struct cpu_cache *self, unsigned long *taken)
{
	bool pending = false, idle = true;
	if (self)
		slab_flush_cpu(s, self);
	for (struct cpu_cache *c = s->cpu_list; c; c = c->cnext) {
		uint64_t ops = atomic_load_explicit(&c->slow_ops, memory_order_relaxed);
		if (c == self) {
			c->seen_ops = ops;
			continue;
		}
		if (all || ops == c->seen_ops) {   /* idle since the last pass */
			*taken += sheaf_take_spare(s, c);
			*taken += home_take_stash(s, c);   /* its empty slabs: nobody else can touch them */
			/* the rest at its next slow path; a part asked before and
			 * still idle is not waited for (its thread may never run) */
			if (part_holds(c) && !atomic_exchange_explicit(&c->flush_req, true, memory_order_relaxed))
				pending = true;
		} else {
			idle = false;
			pending |= part_holds(c);
		}
		c->seen_ops = ops;
	}
	/* the parts of CPUs (pcpu.c): drained when idle for a pass, or all */
	pending |= pcpu_decay(s, all, taken);
	/* what remote freers sent to parts of exited threads since */
	for (struct cpu_cache *c = s->cpu_dead; c; c = c->cnext)
		home_drain_dead(s, c);
	struct barn *b = &s->node.barn;
	unsigned long gets = atomic_load_explicit(&b->gets, memory_order_relaxed);
	bool barn_used = atomic_load_explicit(&b->nr_full, memory_order_relaxed) ||
			 atomic_load_explicit(&b->nr_empty, memory_order_relaxed);
	if (barn_used && (all || gets == b->seen_gets)) {
		*taken += atomic_load_explicit(&b->objects, memory_order_relaxed);
		sheaf_flush_barn(s);
	} else if (barn_used) {
		pending = true;
	}
	b->seen_gets = gets;
	/* slab mode's reap: its free slabs, its shared array (the barn) */
	pending |= array_reap(s, all);
	/* empty slabs kept for reuse longer than decay_ms, whoever uses the
	 * cache; and those the node list keeps (min_partial) when nobody used
	 * it for a pass */
	slab_decay_empty(s);
	if (all || idle) {
		*taken += slab_shrink_node(s);
	} else if (atomic_load_explicit(&s->node.nr_partial, memory_order_relaxed)) {
		pending = true;
	}
	return pending;
}

unsigned long mem_take_back_locked(struct uslab_cache *only, bool all)
{
	unsigned long taken = 0;
	for (struct uslab_cache *s = cache_list; s; s = s->next)
		if (!only || s == only)
			decay_cache_locked(s, all, cpu_part(s), &taken);
	return taken;
}

unsigned long mem_take_back(struct uslab_cache *only, bool all)
{
	cache_init();
	pthread_mutex_lock(&cache_mutex);
	unsigned long taken = mem_take_back_locked(only, all);
	pthread_mutex_unlock(&cache_mutex);
	return taken;
}

/*
 * Two clocks, so that memory unused for decay_ms is back with the OS about
 * decay_ms after its last use, whatever the phase of the passes.
 *  - Free pages have deadlines of their own (free time + decay_ms,
 *    page.c): the pass wakes for the earliest. With one pass per decay_ms
 *    a page freed just after a pass waited for the next but one, up to
 *    twice the delay.
 *  - The caches' part (idle parts, barns, the node lists' empty slabs)
 *    runs once per decay_ms / 2: what went unused for a whole one of
 *    these passes, between decay_ms / 2 and decay_ms, is taken, and the
 *    pages that frees are purged at once (page_age_since): they have
 *    waited already. Once per decay_ms took them back between one and
 *    two delays after their last use, and their pages a delay later still.
 * 2026-11-26, background thread on, 1.5 s into the idle time: 256 idle
 * threads held 31-44 KiB each (the floor, stacks and TLS, 12.6), now
 * 12.5-14.9; memreturn's burst 16-18 MiB, now 5-5.6; blocked 25-27 MiB,
 * now 7.8-8.4.
 */
/* Both are the passes' own, unlocked: one thread runs passes, the background
 * thread (fuzz_ops, the one other caller, stops it first). */
static uint64_t caches_due;     /* os_now_ms() when the caches' part is next due */
static bool caches_pending;     /* the caches' last part left something for a later one */

uint64_t mem_decay_pass(void)
{
	unsigned long taken = 0;
	uint64_t now = os_now_ms(), delay = MAX(__atomic_load_n(&page_purge_delay_ms, __ATOMIC_RELAXED), 10U);
	if (now >= caches_due || caches_due - now > delay / 2) {   /* (or the delay was shortened) */
		bool pending = false;
		pthread_mutex_lock(&cache_mutex);
		fork_pass_begin();   /* fork.c, "Decay passes": a fork need not wait for us */
		for (struct uslab_cache *s = cache_list; s; s = s->next)
			pending |= decay_cache_locked(s, false, NULL, &taken);
		fork_pass_unlock();
		page_age_since(now);   /* what it freed was unused for a pass already */
		caches_pending = pending;
		caches_due = now + delay / 2;
	}
	uint64_t page_due = page_decay();
	bool more = cpu_hooks.decay_more();   /* freed huge mappings (glue.c) */
	now = os_now_ms();
	uint64_t wait = UINT64_MAX;
	if (caches_pending || more)
		wait = caches_due > now ? caches_due - now : 0;
	if (page_due)
		wait = MIN(wait, page_due > now ? page_due - now : 0);
	return wait == UINT64_MAX ? wait : MAX(wait, 10U);
}
