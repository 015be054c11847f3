/*
 * The per-CPU backend: CPU parts that belong to a CPU, not a thread, as
 * the kernel's kmem_cache_cpu and sheaves do, on restartable sequences
 * (rseq). A thread that stops allocating holds nothing; what caches keep
 * grows with CPUs, not threads.
 *
 * Which caches. Those in sheaves mode (not debug, not internal, with an id
 * below PCPU_SLOTS): their fast paths are a pop or a push of one array
 * with one count, which commits with one store, the shape rseq needs.
 * Classic's free list and home's owned slabs change several words per
 * operation (a list head and a slab's list, an owner's lists): other modes
 * keep the thread-local backend (tls.c) even while this one runs.
 *
 * When it runs. cpu_backend=auto (the default): where glibc registered
 * rseq for the thread that starts the allocator and membarrier can fence
 * restartable sequences, and neither hardened nor kfence=N asks for every
 * operation on the slow paths. cpu_backend=rseq asks for it (a line on
 * stderr says why not, when it cannot); cpu_backend=tls turns it off. A
 * thread rseq does not know (cpu_id -1 or -2) runs thread-local.
 *
 * A part (struct cpu_cache, pcpu set) is the sheaves mode's: main and
 * spare, the barn behind them (sheaf.c). Its fast paths see only the
 * commit word pcpu_nc = n | room << 16 | ops << 32 (room = cap - n) and
 * main's array objs:
 *   pop  (n > 0):    x = objs[n - 1]; commit n - 1, room + 1, ops + 1
 *   push (room > 0): objs[n] = x;     commit n + 1, room - 1, ops + 1
 * each a sequence of rseq_x86_64.h on the CPU's own part. The bulk calls
 * have two of their own (pcpu_alloc_bulk_fast, pcpu_free_bulk_marked): k
 * objects copied between main and the caller's array, then one commit of
 * n -/+ k, room +/- k, ops + k; a restart copies again. What main cannot
 * give or take goes through the slow path below.
 *
 * The slow paths: a part is "closed" (n = room = 0) while one thread works
 * on it with the sheaf code as if it were thread-local, holding its plock:
 *
 *   state     pcpu_nc          fast paths           who may change main
 *   open      n, room, ops     pop if n, push if     nobody but sequences
 *             (n + room > 0)   room (commit)
 *   empty     0, 0, ops        refuse: slow path     nobody (no main yet,
 *                                                    or after a drain)
 *   closed    0, 0, ops        refuse: slow path,    the plock holder
 *                              which waits on plock
 *
 *   open -> closed: by the plock holder, on the part's CPU, as a sequence
 *     (PCPU_ARCH_CLOSE: a store of 0, 0, ops that commits like a pop);
 *     from another CPU (a decay pass, shrink, a retune, a slow path that
 *     migrated) by close_remote: compare-and-swap to 0, 0, ops, then
 *     membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) on that CPU,
 *     which restarts any sequence there that read the old word; if one
 *     committed between the swap and the fence the word is no longer
 *     0, 0, ops and the close starts over (nothing was taken yet).
 *   closed -> open: the holder stores main's array, then the word with a
 *     release store (from any CPU: a closed part has no commits to race
 *     with; a fast path that loads the new word sees the array before it).
 *
 * Counting. Pops and pushes are counted in ops, 32 bits, in the commit
 * itself (a bulk sequence's k objects as k; the part's bulk_pops and
 * bulk_pushes then move them from ALLOC_PCS/FREE_PCS to the bulk items).
 * At every close, ops and n against their values at the last open give
 * both counts exactly (pushes - pops = the change of n, pushes + pops
 * = the change of ops), folded into the part's alloc_pcs and free_pcs. A
 * part that did more than 2^32 operations between two closes (decay
 * passes and statistics readers close nothing, but slow paths, idle
 * drains and retunes do) would lose multiples of 2^32.
 *
 * Memory. Per cache: at most two sheaves (main and spare) per CPU that
 * used it, and the barn: CPUs x (2 x sheaf_capacity) objects, whatever
 * the number of threads. A decay pass drains a part that did no operation
 * since the last pass (its sheaves to the barn or the slabs), shrink
 * drains them all.
 *
 * Locks: plock before the node and barn locks (slow paths take those under
 * it), after cache_mutex (decay passes, statistics and retunes take plock
 * under cache_mutex; a slow path takes cache_mutex only to make a part,
 * before it takes plock). fork.c takes every plock across fork.
 */
#include "cpu.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ
#define MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ (1 << 7)
#define MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ (1 << 8)
#endif
#ifndef MEMBARRIER_CMD_FLAG_CPU
#define MEMBARRIER_CMD_FLAG_CPU (1 << 0)
#endif

/* glibc 2.35 and later: where its registration is (weak: older ones have
 * neither, and the backend stays off) */
extern const ptrdiff_t __rseq_offset __attribute__((weak));
extern const unsigned int __rseq_size __attribute__((weak));

struct pcpu_global pcpu_g __attribute__((aligned(CACHE_LINE)));
static bool fence_one_cpu;   /* membarrier takes MEMBARRIER_CMD_FLAG_CPU */

#define NC_N(nc)    ((unsigned)((nc) & 0xffff))
#define NC_ROOM(nc) ((unsigned)(((nc) >> 16) & 0xffff))
#define NC_OPS(nc)  ((uint32_t)((nc) >> 32))
/* (room 0 if main holds more than cap, as it may for a moment after the
 * capacity shrank: pushes wait for the slow path that sets main up again) */
#define NC_MAKE(n, cap, ops) \
	((uint64_t)(n) | (uint64_t)((cap) > (n) ? (cap) - (n) : 0) << 16 | (uint64_t)(ops) << 32)
_Static_assert(SHEAF_MAX_CAPACITY < 0x10000, "a sheaf's count and capacity fit 16 bits");

static struct pcpu_area *area(unsigned cpu)
{
	return (struct pcpu_area *)(pcpu_g.areas + ((size_t)cpu << PCPU_AREA_SHIFT));
}

static long sys_membarrier(int cmd, unsigned flags, int cpu)
{
	return syscall(__NR_membarrier, cmd, flags, cpu);
}

/* ---- start ------------------------------------------------------------------------- */

#if PCPU_ARCH
/* The number of CPUs the kernel may ever name (the highest in
 * /sys/devices/system/cpu/possible, plus one; where /sys cannot be read,
 * the configured CPUs): the sequences index areas by the CPU number
 * without a bound check, so every such number must have one. */
static unsigned possible_cpus(void)
{
	unsigned n = 0;
	int e = errno;   /* (the allocator's start changes no errno) */
	int fd = open("/sys/devices/system/cpu/possible", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		char buf[256];
		ssize_t k = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (k > 0) {
			/* "0-3", "0,2-5": the last number is the highest */
			buf[k] = 0;
			unsigned v = 0;
			bool digits = false;
			for (ssize_t i = 0; i < k; i++) {
				if (buf[i] >= '0' && buf[i] <= '9') {
					v = digits ? MIN(v * 10 + (unsigned)(buf[i] - '0'), 1U << 30) : (unsigned)(buf[i] - '0');
					digits = true;
				} else if (digits) {
					n = MAX(n, v + 1);
					digits = false;
				}
			}
			if (digits)
				n = MAX(n, v + 1);
		}
	}
	if (!n) {
		long c = sysconf(_SC_NPROCESSORS_CONF);
		n = c > 0 ? (unsigned)MIN(c, 1L << 30) : UINT_MAX;
	}
	errno = e;
	return n;
}
#endif

static const char *pcpu_why_not(void)
{
#if !PCPU_ARCH
	return "no restartable sequences for this architecture or build (ThreadSanitizer)";
#else
	if (opt.hardened)
		return "hardened runs every operation on the slow paths";
	if (kfence_counting())
		return "kfence=N counts every allocation on the slow paths";
	if (!&__rseq_size || !&__rseq_offset || __rseq_size < 20)
		return "glibc has not registered rseq (before 2.35, GLIBC_TUNABLES=glibc.pthread.rseq=0, "
		       "a seccomp filter, Valgrind)";
	if (pcpu_arch_cpu(__rseq_offset) >= PCPU_MAX_CPUS)
		return "rseq is not registered for this thread";
	if (possible_cpus() > PCPU_MAX_CPUS)
		return "more possible CPUs than the backend has areas for";
	if (sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0))
		return "membarrier cannot fence restartable sequences";
	return NULL;
#endif
}

void pcpu_init(void)
{
	if (opt.cpu_backend == CPU_BACKEND_TLS)
		return;
	const char *why = pcpu_why_not();
	char *areas = NULL;
	if (!why) {
		/* the empty areas below CPU 0's, read-only: a sequence of a thread
		 * rseq does not know reads NULL parts there and leaves */
		size_t nobody = (size_t)PCPU_NOBODY_AREAS << PCPU_AREA_SHIFT;
		char *base = os_reserve(nobody + ((size_t)PCPU_MAX_CPUS << PCPU_AREA_SHIFT));
		if (!base)
			why = "no address space for the CPU areas";
		else {
			mprotect(base, nobody, PROT_READ);
			areas = base + nobody;
		}
	}
	if (why) {
		if (opt.cpu_backend == CPU_BACKEND_RSEQ)
			report_line("cpu_backend=rseq: %s; the CPU parts stay thread-local", why);
		return;
	}
#if PCPU_ARCH
	fence_one_cpu = !sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_FLAG_CPU, 0);
	pcpu_g.rseq_off = __rseq_offset;
	pcpu_g.areas = areas;
	pcpu_g.on = true;
#else
	(void)areas;   /* (pcpu_why_not said why not) */
#endif
}

void pcpu_fork_child(void)
{
	/* the child is a new mm: its fences need the intent again */
	if (pcpu_g.on)
		sys_membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0);
}

bool pcpu_eligible(const struct uslab_cache *s)
{
	return pcpu_g.on && !s->internal && !s->debug && s->id < PCPU_SLOTS && cache_cpu_mode(s) == CPU_SHEAVES;
}

/* ---- close and open ------------------------------------------------------------------ */

/* Restart every sequence in progress on `cpu` (on every CPU, if the kernel
 * cannot aim at one). */
static void fence(unsigned cpu)
{
	if (fence_one_cpu && !sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, MEMBARRIER_CMD_FLAG_CPU, (int)cpu))
		return;
	if (sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0))
		report_fatal("membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ) failed (errno %d)", errno);
}

/* Close c from wherever this thread runs (file comment). plock held. */
static uint64_t close_remote(struct cpu_cache *c)
{
	for (;;) {
		uint64_t v = __atomic_load_n(&c->pcpu_nc, __ATOMIC_ACQUIRE);
		uint64_t closed = v & ~0xffffffffULL;
		if (v == closed)
			return v;   /* refusing everything already: no sequence can commit */
		/* seq_cst: the swap is ordered before the fence's reads */
		if (!__atomic_compare_exchange_n(&c->pcpu_nc, &v, closed, false, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
			continue;
		fence(c->pcpu_cpu);
		if (__atomic_load_n(&c->pcpu_nc, __ATOMIC_ACQUIRE) == closed)
			return v;
		/* a sequence that read v committed after the swap: its word
		 * stands (main as it says), and the close starts over */
	}
}

/* Pops and pushes since the part was last opened, from the word `nc`. */
static void ops_since_open(const struct cpu_cache *c, uint64_t nc, uint64_t *pops, uint64_t *pushes)
{
	int64_t dops = (uint32_t)(NC_OPS(nc) - c->open_ops);
	int64_t dn = (int64_t)NC_N(nc) - (int64_t)c->open_n;
	*pushes = (uint64_t)((dops + dn) / 2);
	*pops = (uint64_t)((dops - dn) / 2);
}

/* Close c (plock held): main's count into c->n, the operations since the
 * last open into the counters. */
static void part_close(struct cpu_cache *c)
{
	uint64_t old;
#if PCPU_ARCH
	PCPU_ARCH_CLOSE(old, c, c->pcpu_cpu, pcpu_g.rseq_off, offsetof(struct cpu_cache, pcpu_nc), other);
	goto closed;
other:
#endif
	old = close_remote(c);
#if PCPU_ARCH
closed:
#endif
	if (NC_ROOM(old) || NC_N(old) || NC_OPS(old) != c->open_ops) {
		uint64_t pops, pushes;
		ops_since_open(c, old, &pops, &pushes);
		__atomic_store_n(&c->alloc_pcs, cpu_ctr(&c->alloc_pcs) + pops, __ATOMIC_RELAXED);
		__atomic_store_n(&c->free_pcs, cpu_ctr(&c->free_pcs) + pushes, __ATOMIC_RELAXED);
	}
	c->open_ops = NC_OPS(old);
	c->open_n = NC_N(old);
	cpu_set_n(c, NC_N(old));
}

/* Open c with main as the sheaf code left it (n, cap; cap 0 without one). */
static void part_open(struct cpu_cache *c)
{
	uint32_t ops = NC_OPS(c->pcpu_nc);   /* (no commits while closed) */
	c->open_ops = ops;
	c->open_n = c->main ? c->n : 0;
	/* release: main's array and objects before the word that shows them */
	__atomic_store_n(&c->pcpu_nc, NC_MAKE(c->open_n, c->main ? c->cap : 0, ops), __ATOMIC_RELEASE);
}

/* ---- parts ---------------------------------------------------------------------------- */

static void publish(struct uslab_cache *s, struct cpu_cache *c, struct cpu_cache *v)
{
	struct pcpu_area *a = area(c->pcpu_cpu);
	__atomic_store_n(&a->slots[s->id], v, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < KMALLOC_CLASSES_MAX; i++) {
		struct uslab_cache *k = cpu_hooks.fast_classes[i];
		if (!k || k->real != s)
			continue;
		__atomic_store_n(&a->kparts[i], v, __ATOMIC_RELEASE);
		for (unsigned j = 0; j < KMALLOC_SIZES_MAX; j++)
			if (cpu_hooks.fast_size_class[j] == i)
				__atomic_store_n(&a->ksize[j], v, __ATOMIC_RELEASE);
	}
}

void pcpu_publish_kmalloc(void)
{
	if (!pcpu_g.on)
		return;
	/* cache_mutex: the parts' lists, and the slots part_create and the
	 * retunes publish too (publish's release stores order each part
	 * before the fast paths that load it) */
	pthread_mutex_lock(&cache_mutex);
	for (unsigned i = 0; i < KMALLOC_CLASSES_MAX; i++) {
		struct uslab_cache *k = cpu_hooks.fast_classes[i];
		if (!k)
			continue;
		/* (classes that share a cache publish its parts again: the same stores) */
		for (struct cpu_cache *c = k->real->pcpu_list; c; c = c->cnext)
			if (!c->pcpu_retired)
				publish(k->real, c, c);
	}
	pthread_mutex_unlock(&cache_mutex);
}

/* Take c out of its CPU's area (the cache no longer runs per CPU, or is
 * destroyed): plock held, c closed and flushed. A sequence that loaded c
 * before finds it closed and takes the slow path, which no longer finds
 * it. */
static void retire(struct uslab_cache *s, struct cpu_cache *c)
{
	publish(s, c, NULL);
	c->pcpu_retired = true;
}

/* This CPU's part of s: a retired one of the CPU again, or a new one
 * (cache_mutex). NULL if s does not run per CPU any more or no memory. */
static struct cpu_cache *part_create(struct uslab_cache *s, unsigned cpu)
{
	pthread_mutex_lock(&cache_mutex);
	struct cpu_cache *c = __atomic_load_n(&area(cpu)->slots[s->id], __ATOMIC_RELAXED);
	if (c || !pcpu_eligible(s))
		goto out;
	for (c = s->pcpu_list; c; c = c->cnext)
		if (c->pcpu_cpu == cpu && c->pcpu_retired)
			break;
	if (c) {
		pthread_mutex_lock(&c->plock);
		c->pcpu_retired = false;
		pthread_mutex_unlock(&c->plock);
	} else {
		c = slab_alloc_nocpu(&cache_cpu_cache);
		if (!c)
			goto out;
		memset(c, 0, sizeof *c);
		pthread_mutex_init(&c->plock, NULL);
		c->objs = cpu_empty.objs;
		c->mode = CPU_SHEAVES;
		c->offset = s->offset;
		c->fp_key = s->fp_key;
		c->divinv = s->divinv;
		c->divk = s->divk;
		c->cache = s;
		c->pcpu = true;
		c->pcpu_cpu = cpu;
		c->pcpu_nc = 0;   /* empty: the first operation sets main up */
		c->cprev = NULL;
		c->cnext = s->pcpu_list;
		if (s->pcpu_list)
			s->pcpu_list->cprev = c;
		s->pcpu_list = c;
	}
	publish(s, c, c);
out:
	pthread_mutex_unlock(&cache_mutex);
	return c;
}

/* A slow path's first steps on its closed part: count it (decay), and set
 * main up (first use, after a drain, or sheaf_capacity changed). */
static void part_enter(struct uslab_cache *s, struct cpu_cache *c, unsigned cap)
{
	atomic_store_explicit(&c->slow_ops, atomic_load_explicit(&c->slow_ops, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	if (unlikely(!c->main || c->sheaf_cap != cap)) {
		if (c->main)
			sheaf_flush_cpu(s, c, false);
		sheaf_setup_cpu(s, c, cap);   /* no memory: the sheaf code copes (no main) */
	}
}

struct cpu_cache *pcpu_acquire(struct uslab_cache *s)
{
	if (!pcpu_eligible(s))
		return NULL;
	int e = errno;   /* (frees keep errno; a part that cannot be made is no error) */
	for (;;) {
		unsigned cpu = pcpu_cpu_now();
		if (cpu >= PCPU_MAX_CPUS)
			break;
		struct cpu_cache *c = __atomic_load_n(&area(cpu)->slots[s->id], __ATOMIC_ACQUIRE);
		if (!c && !(c = part_create(s, cpu)))
			break;
		slab_lock_spin(&c->plock);   /* held for a slow path's batch: spin first */
		if (unlikely(c->pcpu_retired)) {   /* retired since it was loaded */
			pthread_mutex_unlock(&c->plock);
			continue;
		}
		part_close(c);
		/* one read of the capacity: a tuner may set it to 0 (classic
		 * mode) meanwhile, and then retires this part (pcpu_retune) */
		unsigned cap = TUNE(s, sheaf_capacity);
		if (unlikely(!cap)) {
			part_open(c);
			pthread_mutex_unlock(&c->plock);
			break;
		}
		part_enter(s, c, cap);
		errno = e;
		return c;
	}
	errno = e;
	return NULL;
}

void pcpu_release(struct cpu_cache *c)
{
	part_open(c);
	pthread_mutex_unlock(&c->plock);
}

/* ---- the slow paths the inline ones call -------------------------------------------- */

/* x (checked, an object of s) to this CPU's part, or straight to its slab. */
static void free_to_part(struct uslab_cache *s, struct slab *d, void *x)
{
	struct cpu_cache *c = pcpu_acquire(s);
	if (c) {
		sheaf_free_slow(s, c, x);
		pcpu_release(c);
		return;
	}
	int e = errno;
	slab_free_chain(s, NULL, d, x, x, 1, false);
	stat_inc(s, NULL, USLAB_STAT_FREE_SLOWPATH);
	errno = e;
}

void pcpu_free_marked(struct uslab_cache *named, struct slab *d, void *x)
{
	(void)named;
	free_to_part(d->cache, d, x);
}

void *pcpu_alloc_wrapped(struct uslab_cache *named, void *x, size_t asked)
{
	struct uslab_cache *s = named->real;
	void *k = kfence_interval ? kfence_alloc_due(named, asked, __builtin_return_address(0)) : NULL;   /* the clock */
	if (likely(!k)) {
		track_alloc(x, s->object_size);
		return x;
	}
	/* x back as if never taken, its counts too: the sample is the
	 * allocation. The pop's count is in some part's ops (perhaps another
	 * CPU's), the put-back's in this part's slow-path frees; both are
	 * taken off the cache's own counters, which only sums read, so the
	 * totals are exact. */
	free_to_part(s, slab_of(x), x);   /* (one FREE_SLOWPATH, on a part or the cache) */
	atomic_fetch_sub_explicit(&s->stat_gone[USLAB_STAT_ALLOC_PCS], 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&s->stat_gone[USLAB_STAT_FREE_SLOWPATH], 1, memory_order_relaxed);
	return k;
}

/* ---- bulk ------------------------------------------------------------------------------ */

size_t pcpu_alloc_bulk_fast(struct uslab_cache *s, size_t nr, void **objs)
{
	struct cpu_cache *c;
	size_t got = pcpu_pop_n(pcpu_slot_id(s->id), objs, nr, &c);
	if (!got)
		return 0;
	for (size_t j = 0; j < got; j++) {
		cpu_fp_scrub(c, objs[j]);
		track_alloc(objs[j], s->object_size);
	}
	/* an add, not a store: another thread may add for this CPU's part
	 * at once (it migrated there); relaxed: a counter, read a moment old */
	atomic_fetch_add_explicit(&c->bulk_pops, got, memory_order_relaxed);
	return got;
}

void pcpu_free_bulk_marked(struct uslab_cache *s, void **objs, unsigned k)
{
	unsigned done = 0;
	struct cpu_cache *c;
	size_t m;
	while (done < k && (m = pcpu_push_n(pcpu_slot_id(s->id), objs + done, k - done, &c)) != 0) {
		atomic_fetch_add_explicit(&c->bulk_pushes, m, memory_order_relaxed);   /* (as bulk_pops) */
		done += (unsigned)m;
	}
	if (done == k)
		return;
	/* what main had no room for: the part's slow path, or straight to
	 * the slabs without a part */
	if ((c = pcpu_acquire(s)) != NULL) {
		sheaf_free_bulk_marked(s, c, k - done, objs + done, true);
		pcpu_release(c);
	} else {
		int e = errno;
		slab_free_objects(s, NULL, objs + done, k - done, false, true);
		errno = e;
	}
	stat_add(s, NULL, USLAB_STAT_FREE_BULK, k - done);
}

/* ---- other threads: decay, shrink, retune, destroy (cache_mutex held) ------------------- */

/* Take what c holds (plock held): its sheaves, detached into sh, and c
 * left empty (its next operation sets main up again). Returns the objects.
 * drain_end() gives them back once plock is released: a drain never waits
 * for the barn, node or page locks while it holds a part's lock. So a
 * decay pass (the background thread) that waits for one of those holds
 * cache_mutex alone, which fork.c's child handler can give back for it
 * (fork_child: the thread is gone, and a pass changes nothing that
 * cache_mutex protects). */
static unsigned drain_begin(struct cpu_cache *c, struct sheaf *sh[2])
{
	part_close(c);
	unsigned n = (c->main ? c->n : 0) + atomic_load_explicit(&c->spare_n, memory_order_relaxed);
	sheaf_detach_cpu(c, sh);
	part_open(c);
	return n;
}

/* The rest of a drain, plock released: the sheaves' objects to the barn
 * (whole full ones, to_barn) or the slabs, counted on the cache (c's
 * counters are its CPU's slow paths', which may run meanwhile). */
static void drain_end(struct uslab_cache *s, struct sheaf *sh[2], bool to_barn)
{
	sheaf_flush_detached(s, NULL, sh, to_barn);
}

bool pcpu_decay(struct uslab_cache *s, bool all, unsigned long *taken)
{
	bool pending = false;
	for (struct cpu_cache *c = s->pcpu_list; c; c = c->cnext) {
		if (c->pcpu_retired)
			continue;
		uint64_t nc = __atomic_load_n(&c->pcpu_nc, __ATOMIC_RELAXED);
		uint64_t slow = atomic_load_explicit(&c->slow_ops, memory_order_relaxed);
		bool idle = NC_OPS(nc) == c->seen_fast && slow == c->seen_ops;
		bool holds = NC_ROOM(nc) || NC_N(nc) || atomic_load_explicit(&c->spare_n, memory_order_relaxed);
		c->seen_fast = NC_OPS(nc);
		c->seen_ops = slow;
		if (!holds)
			continue;
		if (!all && !idle) {
			pending = true;
			continue;
		}
		if (all)
			pthread_mutex_lock(&c->plock);
		else if (pthread_mutex_trylock(&c->plock)) {   /* a slow path has it: in use */
			pending = true;
			continue;
		}
		struct sheaf *sh[2];
		*taken += drain_begin(c, sh);
		pthread_mutex_unlock(&c->plock);
		drain_end(s, sh, !all);
	}
	return pending;
}

void pcpu_retune(struct uslab_cache *s)
{
	bool keep = pcpu_eligible(s);
	/* the fast paths' question, on the cache and its aliases (they read
	 * their own; an alias has its root's id); a stale answer for a moment
	 * is harmless: a part that is gone sends them to the slow path, which
	 * asks again */
	uintptr_t slot = keep ? pcpu_slot_id(s->id) : 0;
	atomic_store_explicit(&s->pcpu_slot, slot, memory_order_relaxed);
	for (struct uslab_cache *a = s->aliases; a; a = a->alias_next)
		atomic_store_explicit(&a->pcpu_slot, slot, memory_order_relaxed);
	for (struct cpu_cache *c = s->pcpu_list; c; c = c->cnext) {
		struct sheaf *sh[2] = { NULL, NULL };
		pthread_mutex_lock(&c->plock);
		if (!c->pcpu_retired) {
			drain_begin(c, sh);   /* the next slow path sets main up with the new capacity */
			if (!keep)
				retire(s, c);
		}
		pthread_mutex_unlock(&c->plock);
		drain_end(s, sh, false);
	}
}

void pcpu_destroy(struct uslab_cache *s)
{
	for (struct cpu_cache *c = s->pcpu_list; c; c = c->cnext) {
		struct sheaf *sh[2] = { NULL, NULL };
		pthread_mutex_lock(&c->plock);
		if (!c->pcpu_retired) {
			drain_begin(c, sh);
			retire(s, c);
		}
		pthread_mutex_unlock(&c->plock);
		drain_end(s, sh, false);
	}
}

void pcpu_free_parts(struct uslab_cache *s)
{
	while (s->pcpu_list) {
		struct cpu_cache *c = s->pcpu_list;
		s->pcpu_list = c->cnext;
		pthread_mutex_destroy(&c->plock);
		slab_free_nocpu(&cache_cpu_cache, c);
	}
}

/* ---- statistics, fork ------------------------------------------------------------------ */

void pcpu_sum_events(struct uslab_cache *s, uint64_t *ev)
{
	for (struct cpu_cache *c = s->pcpu_list; c; c = c->cnext) {
		uint64_t pops, pushes;
		pcpu_part_events(c, ev, &pops, &pushes);
		(void)pops, (void)pushes;
	}
}

void pcpu_part_events(struct cpu_cache *c, uint64_t *ev, uint64_t *pops, uint64_t *pushes)
{
	pthread_mutex_lock(&c->plock);   /* (open, or empty: its open_* match the word) */
	uint64_t nc = __atomic_load_n(&c->pcpu_nc, __ATOMIC_RELAXED);
	ops_since_open(c, nc, pops, pushes);
	*pops += cpu_ctr(&c->alloc_pcs);
	*pushes += cpu_ctr(&c->free_pcs);
	for (unsigned i = 0; i < USLAB_NR_STAT_ITEMS; i++)
		ev[i] += atomic_load_explicit(&c->stat[i], memory_order_relaxed);
	pthread_mutex_unlock(&c->plock);
	/* bulk calls' sequences: counted in ops, reported as bulk (read after
	 * the word: an add not yet made leaves them counted as pops a moment,
	 * never below zero) */
	uint64_t bp = atomic_load_explicit(&c->bulk_pops, memory_order_relaxed);
	uint64_t bq = atomic_load_explicit(&c->bulk_pushes, memory_order_relaxed);
	bp = MIN(bp, *pops);
	bq = MIN(bq, *pushes);
	*pops -= bp;
	*pushes -= bq;
	ev[USLAB_STAT_ALLOC_BULK] += bp;
	ev[USLAB_STAT_FREE_BULK] += bq;
	ev[USLAB_STAT_ALLOC_PCS] += *pops;
	ev[USLAB_STAT_FREE_PCS] += *pushes;
}

void pcpu_count(struct uslab_cache *s, unsigned *parts, uint64_t *objects)
{
	for (struct cpu_cache *c = s->pcpu_list; c; c = c->cnext) {
		if (c->pcpu_retired)
			continue;
		(*parts)++;
		*objects += NC_N(__atomic_load_n(&c->pcpu_nc, __ATOMIC_RELAXED)) +
			    atomic_load_explicit(&c->spare_n, memory_order_relaxed);
	}
}

/* One part's counters into ev[] (zeroed first) and the objects its
 * sheaves hold: what uslab_cache_cpu_stats() reports. cache_mutex held. */
static void part_stats(struct cpu_cache *c, uint64_t *ev, uint64_t *objects)
{
	uint64_t pops, pushes;
	memset(ev, 0, USLAB_NR_STAT_ITEMS * sizeof *ev);
	pcpu_part_events(c, ev, &pops, &pushes);
	*objects = NC_N(__atomic_load_n(&c->pcpu_nc, __ATOMIC_RELAXED)) +
		   atomic_load_explicit(&c->spare_n, memory_order_relaxed);
}

unsigned pcpu_each_part(struct uslab_cache *s, void (*fn)(void *arg, unsigned cpu, const uint64_t *ev, uint64_t objects),
			void *arg)
{
	unsigned n = 0;
	uint64_t ev[USLAB_NR_STAT_ITEMS], objects;
	for (struct cpu_cache *c = s->pcpu_list; c; c = c->cnext) {
		if (c->pcpu_retired)
			continue;
		part_stats(c, ev, &objects);
		fn(arg, c->pcpu_cpu, ev, objects);
		n++;
	}
	return n;
}

struct cpu_cache *pcpu_part_of(struct uslab_cache *s, unsigned cpu)
{
	for (struct cpu_cache *c = s->pcpu_list; c; c = c->cnext)
		if (c->pcpu_cpu == cpu && !c->pcpu_retired)
			return c;
	return NULL;
}

bool pcpu_fork_locks(struct uslab_cache *s, bool (*fn)(pthread_mutex_t *m))
{
	for (struct cpu_cache *c = s->pcpu_list; c; c = c->cnext)
		if (!fn(&c->plock))
			return false;
	return true;
}

/* ---- the API ---------------------------------------------------------------------------- */

const char *uslab_cpu_backend(void)
{
	cache_init();
	return pcpu_g.on ? "rseq" : "thread";
}

int uslab_cache_cpu_stats(struct uslab_cache *cache, unsigned cpu, uint64_t *events, size_t n, uint64_t *objects)
{
	if (!cache || (n && !events)) {
		errno = EINVAL;
		return -1;
	}
	struct uslab_cache *s = cache_root(cache);
	uint64_t ev[USLAB_NR_STAT_ITEMS] = { 0 }, held = 0;
	pthread_mutex_lock(&cache_mutex);
	struct cpu_cache *c = pcpu_part_of(s, cpu);
	if (c)
		part_stats(c, ev, &held);
	pthread_mutex_unlock(&cache_mutex);
	if (!c) {
		errno = ENOENT;
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		events[i] = i < USLAB_NR_STAT_ITEMS ? ev[i] : 0;
	if (objects)
		*objects = held;
	return 0;
}
