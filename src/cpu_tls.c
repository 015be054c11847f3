/*
 * The CPU part, thread-local backend: each thread has an array of CPU parts
 * indexed by cache id, reached through one initial-exec TLS pointer (the
 * cheapest TLS access from a shared library; see DESIGN.md). A true per-CPU
 * backend (rseq) can replace this file behind cpu_this()/cpu_get().
 *
 * A thread's parts are created on its first slow path in each cache and
 * handed back when the thread exits (a pthread key destructor): CPU slabs
 * are deactivated, CPU partial lists unfrozen, counters folded into the
 * cache. Objects the thread allocated stay valid and can be freed by anyone.
 * After that the thread has no CPU part: allocations and frees it still
 * makes (other destructors) take the CPU-less slow paths.
 */
#include "slab.h"

#include <string.h>

/* Zero until the thread's first slow path: nslots 0 sends the fast paths
 * to the slow path without a NULL test. */
__thread struct cpu_tls cpu_tls __attribute__((tls_model("initial-exec")));

static pthread_key_t cpu_key;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void fold_stats(struct uslab_cache *s, struct cpu_cache *c)
{
	/* flushed: the free list is empty, so the derived count is exact */
	atomic_fetch_add_explicit(&s->stat_gone[USLAB_STAT_ALLOC_FASTPATH], cpu_alloc_fastpath(c),
				  memory_order_relaxed);
	atomic_store_explicit(&c->fl_in, 0, memory_order_relaxed);
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++) {
		uint64_t v = atomic_load_explicit(&c->stat[i], memory_order_relaxed);
		if (v)
			atomic_fetch_add_explicit(&s->stat_gone[i], v, memory_order_relaxed);
		atomic_store_explicit(&c->stat[i], 0, memory_order_relaxed);
	}
}

/* Flush c, fold its counters into its cache and unlink it. cache_mutex held. */
static void cpu_detach_locked(struct cpu_cache *c)
{
	struct uslab_cache *s = c->cache;
	slab_flush_cpu(s, c);
	fold_stats(s, c);
	if (c->cprev)
		c->cprev->cnext = c->cnext;
	else
		s->cpu_list = c->cnext;
	if (c->cnext)
		c->cnext->cprev = c->cprev;
	c->cnext = c->cprev = NULL;
	c->cache = NULL;
	if (c->mag) {   /* flushed: empty */
		page_free(page_obj_slab(c->mag));
		c->mag = NULL;
	}
	if (c->queue) {   /* flushed: empty */
		slab_free_nocpu(&cache_queue_cache, c->queue);
		c->queue = NULL;
	}
}

static void cpu_thread_exit(void *arg)
{
	struct cpu_thread *t = arg;
	struct cpu_cache **slots = cpu_tls.slots;
	unsigned nslots = cpu_tls.nslots;
	cpu_tls.dead = true;
	memset(cpu_tls.fast, 0, sizeof cpu_tls.fast);
	cpu_tls.nslots = 0;
	cpu_tls.slots = NULL;
	cpu_tls.thread = NULL;
	pthread_mutex_lock(&cache_mutex);
	for (unsigned i = 0; i < nslots; i++) {
		struct cpu_cache *c = slots[i];
		if (!c)
			continue;
		if (c->cache)
			cpu_detach_locked(c);
		slab_free_nocpu(&cache_cpu_cache, c);
	}
	pthread_mutex_unlock(&cache_mutex);
	if (t->slots_block)
		page_free(t->slots_block);
	slab_free_nocpu(&cache_thread_cache, t);
}

static void cpu_init_once(void)
{
	pthread_key_create(&cpu_key, cpu_thread_exit);
}

static struct cpu_thread *thread_create(void)
{
	pthread_once(&cpu_once, cpu_init_once);
	struct cpu_thread *t = slab_alloc_nocpu(&cache_thread_cache);
	if (!t)
		return NULL;
	memset(t, 0, sizeof *t);
	/* pthread_setspecific may calloc (glibc, for keys past the first 32):
	 * with the malloc family that comes back here; meanwhile this thread
	 * has no CPU part and takes the CPU-less paths. */
	cpu_tls.creating = true;
	int err = pthread_setspecific(cpu_key, t);
	cpu_tls.creating = false;
	if (err) {
		slab_free_nocpu(&cache_thread_cache, t);
		return NULL;
	}
	cpu_tls.thread = t;
	return t;
}

/* Make room for slot `id` (only the owner thread reads and writes slots). */
static bool slots_grow(struct cpu_thread *t, unsigned id)
{
	if (id < CPU_INLINE_SLOTS) {   /* a thread's first 64 caches cost no page */
		cpu_tls.slots = t->inline_slots;
		cpu_tls.nslots = CPU_INLINE_SLOTS;
		return true;
	}
	unsigned order = 0;
	while (((PAGE_SIZE << order) / sizeof(void *)) <= id)
		order++;
	struct slab *blk = page_alloc(order);
	if (!blk)
		return false;
	struct cpu_cache **slots = page_address(blk);
	size_t n = (PAGE_SIZE << order) / sizeof(void *);
	memset(slots, 0, n * sizeof(void *));
	if (cpu_tls.nslots)
		memcpy(slots, cpu_tls.slots, cpu_tls.nslots * sizeof(void *));
	struct slab *old = t->slots_block;
	cpu_tls.slots = slots;
	t->slots_block = blk;
	cpu_tls.nslots = (unsigned)n;
	if (old)
		page_free(old);
	return true;
}

struct cpu_cache *cpu_get(struct uslab_cache *s)
{
	struct cpu_thread *t = cpu_tls.thread;
	if (cpu_tls.dead || cpu_tls.creating || s->internal)
		return NULL;
	if (!t && !(t = thread_create()))
		return NULL;
	if (s->id >= cpu_tls.nslots && !slots_grow(t, s->id))
		return NULL;
	struct cpu_cache *c = cpu_tls.slots[s->id];
	if (c && c->cache == s)
		return c;
	if (!c) {
		c = slab_alloc_nocpu(&cache_cpu_cache);
		if (!c)
			return NULL;
		memset(c, 0, sizeof *c);
		c->thread = t;
		cpu_tls.slots[s->id] = c;
		if (s->id < CPU_TLS_FAST)
			cpu_tls.fast[s->id] = c;
	}
	/* A new part, or one left by a destroyed cache that had this id. */
	pthread_mutex_lock(&cache_mutex);
	c->freelist = NULL;
	cpu_set_slab(s, c, NULL);
	c->partial = c->partial_tail = NULL;
	c->nforeign = 0;
	c->nempty = 0;
	c->partial_free = 0;
	c->partial_limit = TUNE(s, cpu_partial);
	c->full = c->full_tail = NULL;
	c->park_score = PARK_REMOTE;   /* parks once seen freeing its own objects */
	c->park_ff = 0;
	c->own_run_freed = false;
	atomic_store_explicit(&c->delayed, NULL, memory_order_relaxed);
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		atomic_store_explicit(&c->stat[i], 0, memory_order_relaxed);
	atomic_store_explicit(&c->fl_in, 0, memory_order_relaxed);
	c->cache = s;
	c->cprev = NULL;
	c->cnext = s->cpu_list;
	if (s->cpu_list)
		s->cpu_list->cprev = c;
	s->cpu_list = c;
	pthread_mutex_unlock(&cache_mutex);
	return c;
}

void cpu_orphan_all(struct uslab_cache *s)
{
	while (s->cpu_list)
		cpu_detach_locked(s->cpu_list);
}
