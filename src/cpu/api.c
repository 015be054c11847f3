/*
 * The cache API's allocation and free: the inline fast paths of cpu.h
 * (bulk.c has the bulk calls). Here rather than in core/cache.c, which
 * creates and destroys caches: the core calls down only.
 */
#include "cpu.h"

#include <string.h>

/* The caller is passed down rather than left to the slow path's tail call:
 * an instrumented build (ASan gives `nopart` a stack slot) keeps a frame
 * here, and the slow path would then name this function as the site. */
static inline __attribute__((always_inline)) void *cache_alloc(struct uslab_cache *s, void *caller)
{
	void *x;
	uintptr_t slot = atomic_load_explicit(&s->pcpu_slot, memory_order_relaxed);
	bool nopart = !slot;
	if (nopart || (x = pcpu_alloc_fast(s, slot, 0, caller, &nopart), nopart))
		x = cpu_alloc_fast_at(s, cpu_this(s), 0, caller);
	return x;
}

void *uslab_cache_alloc(struct uslab_cache *s)
{
	return cache_alloc(s, __builtin_return_address(0));
}

void *uslab_cache_zalloc(struct uslab_cache *s)
{
	void *x = cache_alloc(s, __builtin_return_address(0));   /* (not tail calls: the memset follows) */
	if (x)
		memset(x, 0, s->object_size);
	return x;
}

void uslab_cache_free(struct uslab_cache *s, void *x)
{
	slab_free_fast(s, x);   /* (NULL is not ours: cpu_free_other returns) */
}
