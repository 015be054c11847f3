/*
 * The CPU part, thread-local backend: each thread has an array of CPU parts
 * indexed by cache id, and one by kmalloc class, reached through one
 * initial-exec TLS block (the cheapest TLS access from a shared library;
 * see DESIGN.md). A true per-CPU backend (rseq) can replace this file
 * behind cpu_this()/cpu_get().
 *
 * Every pointer a fast path loads starts at cpu_empty, a part with no
 * sheaf room and no free list, so that the first operation of a thread on
 * a cache takes the slow path without a NULL test on the fast path; the
 * TLS block's initial image points there.
 *
 * A thread's parts are created on its first slow path in each cache and
 * handed back when the thread exits (a pthread key destructor): full
 * sheaves go to the barn, other objects to their slabs, CPU slabs are
 * deactivated, counters folded into the cache. Objects the thread
 * allocated stay valid and can be freed by anyone. After that the thread
 * has no CPU part: allocations and frees it still makes (other
 * destructors) take the CPU-less slow paths.
 */
#include "kmalloc.h"

#include <string.h>

/* A sheaf with no room: cpu_empty's objs, whose objects[-1] (guard) is NULL. */
static struct sheaf empty_sheaf;

struct cpu_cache cpu_empty __attribute__((aligned(CACHE_LINE))) = { .objs = empty_sheaf.objects };

static struct cpu_cache *const cpu_empty_kparts[KMALLOC_CLASSES_MAX] = {
	[0 ... KMALLOC_CLASSES_MAX - 1] = &cpu_empty,
};
_Static_assert(KMALLOC_CLASSES_MAX == KMALLOC_NR_CLASSES, "one kparts entry per kmalloc class");

/* The image every thread's block starts from (its relocations are applied
 * before any thread's TLS is set up, also when libuslab is dlopen'ed). */
__thread struct cpu_tls cpu_tls __attribute__((tls_model("initial-exec"))) = {
	.fast = { [0 ... CPU_TLS_FAST - 1] = &cpu_empty },
	.kparts = (struct cpu_cache **)cpu_empty_kparts,
};

static pthread_key_t cpu_key;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void tls_reset(void)
{
	for (unsigned i = 0; i < CPU_TLS_FAST; i++)
		cpu_tls.fast[i] = &cpu_empty;
	cpu_tls.kparts = (struct cpu_cache **)cpu_empty_kparts;
	cpu_tls.nslots = 0;
	cpu_tls.slots = NULL;
	cpu_tls.thread = NULL;
	cpu_tls.kf_left = 0;
}

static void fold(_Atomic uint64_t *to, _Atomic uint64_t *from)
{
	uint64_t v = atomic_load_explicit(from, memory_order_relaxed);
	if (v)
		atomic_fetch_add_explicit(to, v, memory_order_relaxed);
	atomic_store_explicit(from, 0, memory_order_relaxed);
}

static void fold_stats(struct uslab_cache *s, struct cpu_cache *c)
{
	/* flushed: nothing is held, so the derived counts are exact */
	atomic_fetch_add_explicit(&s->stat_gone[USLAB_STAT_ALLOC_FASTPATH], cpu_alloc_fastpath(c),
				  memory_order_relaxed);
	atomic_fetch_add_explicit(&s->stat_gone[USLAB_STAT_ALLOC_PCS], cpu_alloc_pcs(c), memory_order_relaxed);
	atomic_store_explicit(&c->fl_in, 0, memory_order_relaxed);
	atomic_store_explicit(&c->sh_in, 0, memory_order_relaxed);
	atomic_store_explicit(&c->stolen, 0, memory_order_relaxed);
	fold(&s->stat_gone[USLAB_STAT_FREE_FASTPATH], &c->free_fast);
	fold(&s->stat_gone[USLAB_STAT_FREE_PCS], &c->free_pcs);
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		fold(&s->stat_gone[i], &c->stat[i]);
}

/* Flush c (its sheaves to the barn when `to_barn`), fold its counters into
 * its cache and unlink it. cache_mutex held. */
static void cpu_detach_locked(struct cpu_cache *c, bool to_barn)
{
	struct uslab_cache *s = c->cache;
	sheaf_flush_cpu(s, c, to_barn);
	cpu_slab_flush(s, c);
	fold_stats(s, c);
	if (c->cprev)
		c->cprev->cnext = c->cnext;
	else
		s->cpu_list = c->cnext;
	if (c->cnext)
		c->cnext->cprev = c->cprev;
	c->cnext = c->cprev = NULL;
	c->cache = NULL;
	/* malloc's way to it: back to cpu_empty (the slots entry stays, an
	 * orphan that cpu_get() reuses) */
	for (unsigned i = 0; c->thread && i < KMALLOC_CLASSES_MAX; i++)
		if (c->thread->kparts[i] == c)
			c->thread->kparts[i] = &cpu_empty;
}

static void cpu_thread_exit(void *arg)
{
	struct cpu_thread *t = arg;
	struct cpu_cache **slots = t->slots;
	unsigned nslots = t->nslots;
	cpu_tls.dead = true;
	tls_reset();
	pthread_mutex_lock(&cache_mutex);
	for (unsigned i = 0; i < nslots; i++) {
		struct cpu_cache *c = slots[i];
		if (c == &cpu_empty)
			continue;
		if (c->cache)
			cpu_detach_locked(c, true);
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
	for (unsigned i = 0; i < KMALLOC_CLASSES_MAX; i++)
		t->kparts[i] = &cpu_empty;
	for (unsigned i = 0; i < CPU_INLINE_SLOTS; i++)
		t->inline_slots[i] = &cpu_empty;
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
	if (!opt.hardened)   /* hardened: the fast paths keep finding cpu_empty */
		cpu_tls.kparts = t->kparts;
	cpu_tls.kf_left = kfence_interval ? kfence_next_skip() : 0;   /* KFENCE sampling starts */
	return t;
}

/* The fast paths' view of t's slots (none in hardened mode). */
static void slots_publish(struct cpu_thread *t)
{
	if (opt.hardened)
		return;
	cpu_tls.slots = t->slots;
	cpu_tls.nslots = t->nslots;
}

/* Make room for slot `id` (only the owner thread reads and writes slots). */
static bool slots_grow(struct cpu_thread *t, unsigned id)
{
	if (id < CPU_INLINE_SLOTS) {   /* a thread's first 64 caches cost no page */
		t->slots = t->inline_slots;
		t->nslots = CPU_INLINE_SLOTS;
		slots_publish(t);
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
	for (size_t i = 0; i < n; i++)
		slots[i] = i < t->nslots ? t->slots[i] : &cpu_empty;
	struct slab *old = t->slots_block;
	t->slots = slots;
	t->slots_block = blk;
	t->nslots = (unsigned)n;
	slots_publish(t);
	if (old)
		page_free(old);
	return true;
}

/* If s is a kmalloc class's cache, make c malloc's part for that class. */
static void kparts_register(struct cpu_thread *t, struct uslab_cache *s, struct cpu_cache *c)
{
	for (unsigned i = 0; i < KMALLOC_NR_CLASSES; i++)
		if (kmalloc_caches[i] == s)
			t->kparts[i] = c;
}

struct cpu_cache *cpu_get(struct uslab_cache *s)
{
	struct cpu_thread *t = cpu_tls.thread;
	if (cpu_tls.dead || cpu_tls.creating || s->internal || s->debug)
		return NULL;
	if (!t && !(t = thread_create()))
		return NULL;
	if (s->id >= t->nslots && !slots_grow(t, s->id))
		return NULL;
	struct cpu_cache *c = t->slots[s->id];
	if (c != &cpu_empty && c->cache == s) {
		kparts_register(t, s, c);   /* a class made an alias of s since */
		return c;
	}
	if (c == &cpu_empty) {
		c = slab_alloc_nocpu(&cache_cpu_cache);
		if (!c)
			return NULL;
		memset(c, 0, sizeof *c);
		c->thread = t;
		t->slots[s->id] = c;
		if (s->id < CPU_TLS_FAST && !opt.hardened)
			cpu_tls.fast[s->id] = c;
	}
	/* A new part, or one left by a destroyed cache that had this id. */
	pthread_mutex_lock(&cache_mutex);
	c->freelist = NULL;
	cpu_set_slab(s, c, NULL);
	__atomic_store_n(&c->partial, NULL, __ATOMIC_RELAXED);   /* peeked by decay.c */
	c->partial_free = 0;
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		atomic_store_explicit(&c->stat[i], 0, memory_order_relaxed);
	atomic_store_explicit(&c->free_pcs, 0, memory_order_relaxed);
	atomic_store_explicit(&c->free_fast, 0, memory_order_relaxed);
	atomic_store_explicit(&c->fl_in, 0, memory_order_relaxed);
	atomic_store_explicit(&c->sh_in, 0, memory_order_relaxed);
	atomic_store_explicit(&c->stolen, 0, memory_order_relaxed);
	atomic_store_explicit(&c->spare_n, 0, memory_order_relaxed);
	atomic_store_explicit(&c->flush_req, false, memory_order_relaxed);
	sheaf_setup_cpu(s, c, TUNE(s, sheaf_capacity));
	c->cache = s;
	c->cprev = NULL;
	c->cnext = s->cpu_list;
	if (s->cpu_list)
		s->cpu_list->cprev = c;
	s->cpu_list = c;
	pthread_mutex_unlock(&cache_mutex);
	kparts_register(t, s, c);
	return c;
}

struct cpu_cache *cpu_part(struct uslab_cache *s)
{
	struct cpu_thread *t = cpu_tls.thread;
	if (!t || s->id >= t->nslots)
		return NULL;
	struct cpu_cache *c = t->slots[s->id];
	return c != &cpu_empty && c->cache == s ? c : NULL;
}

void cpu_orphan_all(struct uslab_cache *s)
{
	while (s->cpu_list)
		cpu_detach_locked(s->cpu_list, false);
}
