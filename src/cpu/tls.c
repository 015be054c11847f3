/*
 * The CPU part, thread-local backend: each thread has an array of CPU parts
 * indexed by cache id, one by kmalloc class and one by size / 8, reached
 * through one initial-exec TLS block (the cheapest TLS access from a shared
 * library; see docs/design.md). A true per-CPU backend (rseq) can replace
 * this file behind cpu_this()/cpu_get().
 *
 * Every pointer a fast path loads starts at cpu_empty, a part with nothing
 * to pop and no room to push, so that the first operation of a thread on a
 * cache takes the slow path without a NULL test on the fast path; the TLS
 * block's initial image points there. Its tag (CPU_TAG_NONE) is on no slab.
 *
 * A thread's parts are created on its first slow path in each cache and
 * handed back when the thread exits (a pthread key destructor): flushed
 * (full sheaves to the barn, other objects to their slabs, owned slabs to
 * the node list), counters folded into the cache, and kept on the cache's
 * cpu_dead list rather than freed: a remote freer may still hold a pointer
 * to one (home.c), so parts live as long as their cache. The next
 * thread that needs a part of that cache takes one from there. Objects the
 * thread allocated stay valid and can be freed by anyone. After that the
 * thread has no CPU part: allocations and frees it still makes (other
 * destructors) take the CPU-less slow paths.
 *
 * fork: the child has one thread; the others' parts stay behind, with what
 * they held. The child settles them at its first slow path after the fork
 * (cpu_fork_settle): each is flushed and put on cpu_dead, as if its thread
 * had exited, unless its thread was inside a slow path at the fork (busy:
 * its private state may be half changed), which is left alone and leaks
 * what it holds (bounded by what one thread holds of that cache).
 */
#include "cpu.h"

#include <string.h>

/* A sheaf with no room: cpu_empty's objs (cap 0). */
static struct sheaf empty_sheaf;

struct cpu_cache cpu_empty __attribute__((aligned(2 * CACHE_LINE))) = { .objs = empty_sheaf.objects,
									 .mode = CPU_NR_MODES };

static struct cpu_cache *const cpu_empty_kparts[KMALLOC_CLASSES_MAX] = {
	[0 ... KMALLOC_CLASSES_MAX - 1] = &cpu_empty,
};
static struct cpu_cache *const cpu_empty_ksize[KMALLOC_SIZES_MAX] = {
	[0 ... KMALLOC_SIZES_MAX - 1] = &cpu_empty,
};
/* (glue.c checks that these sizes are kmalloc's) */

/* The image every thread's block starts from (its relocations are applied
 * before any thread's TLS is set up, also when libuslab is dlopen'ed). */
__thread struct cpu_tls cpu_tls __attribute__((tls_model("initial-exec"))) = {
	.fast = { [0 ... CPU_TLS_FAST - 1] = &cpu_empty },
	.kparts = (struct cpu_cache **)cpu_empty_kparts,
	.ksize = (struct cpu_cache **)cpu_empty_ksize,
	.tag = CPU_TAG_NONE,
};

/* No fast paths at all: hardened checks every operation on the slow path,
 * and kfence=N counts every allocation there. */
static bool cpu_fast_off(void)
{
	return opt.hardened || kfence_counting();
}

static pthread_key_t cpu_key;
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void tls_reset(void)
{
	for (unsigned i = 0; i < CPU_TLS_FAST; i++)
		cpu_tls.fast[i] = &cpu_empty;
	cpu_tls.kparts = (struct cpu_cache **)cpu_empty_kparts;
	cpu_tls.ksize = (struct cpu_cache **)cpu_empty_ksize;
	cpu_tls.tag = CPU_TAG_NONE;
	cpu_tls.nslots = 0;
	cpu_tls.slots = NULL;
	cpu_tls.thread = NULL;
	cpu_tls.kf_left = 0;
}

static void fold(_Atomic uint64_t *to, uint64_t *from)
{
	uint64_t v = cpu_ctr(from);
	if (v)
		atomic_fetch_add_explicit(to, v, memory_order_relaxed);
	__atomic_store_n(from, 0, __ATOMIC_RELAXED);
}

static void fold_stats(struct uslab_cache *s, struct cpu_cache *c)
{
	fold(&s->stat_gone[USLAB_STAT_ALLOC_FASTPATH], &c->alloc_fast);
	fold(&s->stat_gone[USLAB_STAT_FREE_FASTPATH], &c->free_fast);
	fold(&s->stat_gone[USLAB_STAT_ALLOC_PCS], &c->alloc_pcs);
	fold(&s->stat_gone[USLAB_STAT_FREE_PCS], &c->free_pcs);
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++) {
		uint64_t v = atomic_load_explicit(&c->stat[i], memory_order_relaxed);
		if (v)
			atomic_fetch_add_explicit(&s->stat_gone[i], v, memory_order_relaxed);
		atomic_store_explicit(&c->stat[i], 0, memory_order_relaxed);
	}
}

static void list_unlink(struct cpu_cache **head, struct cpu_cache *c)
{
	if (c->cprev)
		c->cprev->cnext = c->cnext;
	else
		*head = c->cnext;
	if (c->cnext)
		c->cnext->cprev = c->cprev;
	c->cnext = c->cprev = NULL;
}

static void list_push(struct cpu_cache **head, struct cpu_cache *c)
{
	c->cprev = NULL;
	c->cnext = *head;
	if (*head)
		(*head)->cprev = c;
	*head = c;
}

/* malloc's ways to c, back to cpu_empty. */
static void kparts_unregister(struct cpu_thread *t, struct cpu_cache *c)
{
	for (unsigned i = 0; t && i < KMALLOC_CLASSES_MAX; i++)
		if (t->kparts[i] == c)
			t->kparts[i] = &cpu_empty;
	for (unsigned i = 0; t && i < KMALLOC_SIZES_MAX; i++)
		if (t->ksize[i] == c)
			t->ksize[i] = &cpu_empty;
}

/* Flush c (its sheaves to the barn when `to_barn`), fold its counters into
 * its cache and unlink it from the live parts. `dead`: its thread is gone
 * (exit, or a fork left it behind): it goes on the cache's cpu_dead list;
 * else (destroy) it stays its thread's, an orphan cpu_get() reuses.
 * cache_mutex held. */
static void cpu_detach_locked(struct cpu_cache *c, bool to_barn, bool dead)
{
	struct uslab_cache *s = c->cache;
	if (c->mode == CPU_SHEAVES)
		sheaf_flush_cpu(s, c, to_barn);
	slab_flush_cpu(s, c);
	fold_stats(s, c);
	list_unlink(&s->cpu_list, c);
	if (dead) {
		/* remote freers that still see it route through it (home.c) */
		__atomic_store_n(&c->thread, NULL, __ATOMIC_RELAXED);
		list_push(&s->cpu_dead, c);
	} else {
		kparts_unregister(c->thread, c);
		c->cache = NULL;
	}
}

static _Atomic bool fork_pending;        /* a fork child has parts of vanished threads to settle */
static struct cpu_thread *fork_survivor; /* the thread that forked (set in the child handler; NULL if
                                          * it had no cpu_thread yet) */
/* Forks this process came through (child side): a cpu_thread made before
 * the last one, other than the survivor's, belongs to a vanished thread. */
static _Atomic uint32_t fork_gen;

/* ---- thread tags ------------------------------------------------------------------ */
/*
 * A thread's tag marks the slabs it owns (slab->otag); the free fast path
 * trusts a match, so no two live threads may share one. Tags are odd
 * 32-bit numbers: exited threads' tags are reused first (up to TAG_KEEP of
 * them are remembered), fresh ones counted up otherwise; if the count ever
 * ran out, threads would get CPU_TAG_NONE (no fast local frees, every free
 * through the slow path, which compares the owner part itself).
 * cache_mutex protects them (thread start and exit only; fork.c takes it
 * across fork).
 */
#define TAG_KEEP 1024
static uint32_t tag_next = 1;            /* the next fresh tag's serial */
static uint32_t tag_free[TAG_KEEP];      /* tags of exited threads */
static unsigned tag_nfree;

static uint32_t tag_get(void)
{
	uint32_t t = CPU_TAG_NONE;
	pthread_mutex_lock(&cache_mutex);
	if (tag_nfree)
		t = tag_free[--tag_nfree];
	else if (tag_next < (1U << 31))
		t = tag_next++ << 1 | 1;
	pthread_mutex_unlock(&cache_mutex);
	return t;
}

/* Called once the thread owns no slab any more. cache_mutex held. */
static void tag_put_locked(uint32_t t)
{
	if (t != CPU_TAG_NONE && tag_nfree < TAG_KEEP)
		tag_free[tag_nfree++] = t;
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
			cpu_detach_locked(c, true, true);   /* kept on its cache's cpu_dead */
		else
			slab_free_nocpu(&cache_cpu_cache, c);   /* an orphan: its cache is gone */
	}
	tag_put_locked(t->tag);   /* its slabs were all given up above */
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
	for (unsigned i = 0; i < KMALLOC_SIZES_MAX; i++)
		t->ksize[i] = &cpu_empty;
	for (unsigned i = 0; i < CPU_INLINE_SLOTS; i++)
		t->inline_slots[i] = &cpu_empty;
	t->tag = tag_get();
	t->gen = atomic_load_explicit(&fork_gen, memory_order_relaxed);
	/* pthread_setspecific may calloc (glibc, for keys past the first 32):
	 * with the malloc family that comes back here; meanwhile this thread
	 * has no CPU part and takes the CPU-less paths. */
	cpu_tls.creating = true;
	int err = pthread_setspecific(cpu_key, t);
	cpu_tls.creating = false;
	if (err) {
		pthread_mutex_lock(&cache_mutex);
		tag_put_locked(t->tag);
		pthread_mutex_unlock(&cache_mutex);
		slab_free_nocpu(&cache_thread_cache, t);
		return NULL;
	}
	cpu_tls.thread = t;
	if (!cpu_fast_off()) {   /* hardened, kfence=N: the fast paths keep finding cpu_empty */
		cpu_tls.kparts = t->kparts;
		cpu_tls.ksize = t->ksize;
		cpu_tls.tag = t->tag;
	}
	return t;
}

/* The fast paths' view of t's slots (none in hardened mode). */
static void slots_publish(struct cpu_thread *t)
{
	if (cpu_fast_off())
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
	void *blk = page_alloc(order);
	if (!blk)
		return false;
	struct cpu_cache **slots = blk;
	size_t n = (PAGE_SIZE << order) / sizeof(void *);
	for (size_t i = 0; i < n; i++)
		slots[i] = i < t->nslots ? t->slots[i] : &cpu_empty;
	void *old = t->slots_block;
	t->slots = slots;
	t->slots_block = blk;
	t->nslots = (unsigned)n;
	slots_publish(t);
	if (old)
		page_free(old);
	return true;
}

/* If s is a kmalloc class's cache, make c malloc's part for that class
 * (and for the sizes that map to it). */
static void kparts_register(struct cpu_thread *t, struct uslab_cache *s, struct cpu_cache *c)
{
	for (unsigned i = 0; i < KMALLOC_CLASSES_MAX; i++) {
		if (cpu_hooks.fast_classes[i] != s)
			continue;
		t->kparts[i] = c;
		for (unsigned j = 0; j < KMALLOC_SIZES_MAX; j++)
			if (cpu_hooks.fast_size_class[j] == i)
				t->ksize[j] = c;
	}
}

/* ---- fork ---------------------------------------------------------------------- */



void cpu_fork_child(void)
{
	fork_survivor = cpu_tls.thread;
	atomic_fetch_add_explicit(&fork_gen, 1, memory_order_relaxed);
	atomic_store_explicit(&fork_pending, true, memory_order_relaxed);
}

/* The parts of the threads fork() left behind: flushed and put on
 * cpu_dead, as at their exit, unless caught inside a slow path (busy). */
static void cpu_fork_settle(void)
{
	/* trylock: a child whose fork left cache_mutex to a thread that does
	 * not exist in it (fork.c) never settles; it only leaks */
	if (pthread_mutex_trylock(&cache_mutex))
		return;
	if (atomic_load_explicit(&fork_pending, memory_order_relaxed)) {
		atomic_store_explicit(&fork_pending, false, memory_order_relaxed);
		for (struct uslab_cache *s = cache_list; s; s = s->next) {
			for (struct cpu_cache *c = s->cpu_list, *nx; c; c = nx) {
				nx = c->cnext;
				if (c->thread == fork_survivor ||
				    c->thread->gen == atomic_load_explicit(&fork_gen, memory_order_relaxed))
					continue;   /* the survivor's, or made since the fork */
				if (c->busy) {   /* half-changed state: leave it, with what it holds */
					list_unlink(&s->cpu_list, c);
					__atomic_store_n(&c->thread, NULL, __ATOMIC_RELAXED);
					continue;
				}
				cpu_detach_locked(c, true, true);
			}
		}
	}
	pthread_mutex_unlock(&cache_mutex);
}

void cpu_fork_check(void)
{
	if (unlikely(atomic_load_explicit(&fork_pending, memory_order_relaxed)))
		cpu_fork_settle();
}

/* ---- parts ----------------------------------------------------------------------- */

/* A part for s: one left by an exited thread (its inbox routed first), or a
 * new one. cache_mutex held. */
static struct cpu_cache *part_get_locked(struct uslab_cache *s)
{
	struct cpu_cache *c = s->cpu_dead;
	if (c) {
		list_unlink(&s->cpu_dead, c);
		home_drain_dead(s, c);
		return c;
	}
	c = slab_alloc_nocpu(&cache_cpu_cache);
	if (c)
		memset(c, 0, sizeof *c);
	return c;
}

struct cpu_cache *cpu_get(struct uslab_cache *s)
{
	struct cpu_thread *t = cpu_tls.thread;
	if (cpu_tls.dead || cpu_tls.creating || s->internal || s->debug)
		return NULL;
	cpu_fork_check();
	if (!t && !(t = thread_create()))
		return NULL;
	if (s->id >= t->nslots && !slots_grow(t, s->id))
		return NULL;
	struct cpu_cache *c = t->slots[s->id];
	if (c != &cpu_empty && c->cache == s) {
		kparts_register(t, s, c);   /* a class made an alias of s since */
		return c;
	}
	pthread_mutex_lock(&cache_mutex);
	if (c == &cpu_empty) {
		c = part_get_locked(s);
		if (!c) {
			pthread_mutex_unlock(&cache_mutex);
			return NULL;
		}
		t->slots[s->id] = c;
		if (s->id < CPU_TLS_FAST && !cpu_fast_off())
			cpu_tls.fast[s->id] = c;
	}
	/* A new part, one left by an exited thread, or one left by a destroyed
	 * cache that had this id: everything but its inbox (which remote
	 * freers may be pushing to) starts afresh. */
	memset(c, 0, offsetof(struct cpu_cache, inbox));
	c->objs = cpu_empty.objs;
	c->mode = CPU_NR_MODES;
	c->offset = s->offset;
	c->fp_key = s->fp_key;
	c->divinv = s->divinv;
	c->divk = s->divk;
	__atomic_store_n(&c->thread, t, __ATOMIC_RELAXED);
	c->cache = s;
	list_push(&s->cpu_list, c);
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
	/* Flush every live part first: a flush sends its remote batch to
	 * another part's inbox, which may already be flushed. Then route what
	 * reached every inbox (no batches from here on: nobody can push to a
	 * part of a cache being destroyed, as no free of it may race with the
	 * destroy). */
	struct cpu_cache *flushed = NULL;
	while (s->cpu_list) {
		struct cpu_cache *c = s->cpu_list;
		slab_flush_cpu(s, c);
		fold_stats(s, c);
		list_unlink(&s->cpu_list, c);
		list_push(&flushed, c);
	}
	while (flushed) {
		struct cpu_cache *c = flushed;
		list_unlink(&flushed, c);
		home_drain_dead(s, c);
		kparts_unregister(c->thread, c);
		c->cache = NULL;   /* an orphan in its thread's slots, for cpu_get() to reuse */
	}
	for (struct cpu_cache *c = s->cpu_dead; c; c = c->cnext)
		home_drain_dead(s, c);
}

void cpu_free_dead(struct uslab_cache *s)
{
	while (s->cpu_dead) {
		struct cpu_cache *c = s->cpu_dead;
		list_unlink(&s->cpu_dead, c);
		slab_free_nocpu(&cache_cpu_cache, c);
	}
}
