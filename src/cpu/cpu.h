/*
 * The per-CPU layer (cpu/): the CPU part of every cache, the modes it runs
 * (classic.c, sheaf.c, home.c; dispatch.c picks one per slow path), the
 * thread-local backend (tls.c), bulk (bulk.c), memory taken back from idle
 * parts (decay.c), and the inline fast paths the cache API and the malloc
 * family share. Includes the core below it (core/slab.h).
 */
#ifndef USLAB_CPU_H
#define USLAB_CPU_H

#include "slab.h"

/* ---- the CPU part: one per thread and cache (kmem_cache_cpu) ---------- */

/* Counters the fast paths bump: one instruction (an unlocked add to
 * memory) by the owning thread; others read them with relaxed loads. An
 * aligned 8-byte store is never torn on x86-64, so a reader sees the old
 * or the new value. TSan builds, and other architectures, use relaxed
 * atomic load and store, which TSan understands. */
static inline void cpu_tick(uint64_t *ctr)
{
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
	__asm__ volatile("addq $1, %0" : "+m"(*ctr));
#else
	__atomic_store_n(ctr, __atomic_load_n(ctr, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
#endif
}
/* cpu_tick() for the allocation counters, which also time KFENCE's look at
 * the clock: true once in 256 ticks, when the count's low byte wraps (the
 * flags of the add itself: no load, one branch taken once in 256). The
 * byte add leaves the carry out; the caller's unlikely path adds it, so a
 * reader on another thread may see the count 256 short for the few
 * instructions between. 256: the clock read and the call it costs are
 * about 0.1 ns per allocation, and a program that allocates a thousand
 * times a second is still looked at four times a second. */
static inline bool cpu_tick_alloc(uint64_t *ctr)
{
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
	__asm__ goto("addb $1, %0\n\tje %l[wrapped]" : : "m"(*ctr) : "memory", "cc" : wrapped);
	return false;
wrapped:
	__asm__ volatile("addq $0x100, %0" : "+m"(*ctr));
	return true;
#else
	uint64_t v = __atomic_load_n(ctr, __ATOMIC_RELAXED) + 1;
	__atomic_store_n(ctr, v, __ATOMIC_RELAXED);
	return unlikely(!(v & 0xff));
#endif
}
static inline uint64_t cpu_ctr(const uint64_t *ctr)
{
	return __atomic_load_n(ctr, __ATOMIC_RELAXED);
}

/* Keep the fast paths' stores in program order (a compiler barrier; x86
 * keeps stores in order itself): a link before the head that publishes it,
 * a head before the scrub of the object it handed out. Then another
 * thread's part is consistent at every instant, which a fork child relies
 * on when it settles the parts of threads the fork left behind (tls.c):
 * at worst an object is lost, never a list broken. */
#define cpu_order() __asm__ volatile("" ::: "memory")

struct cpu_cache {
	/* Line 0 (the struct is two lines aligned): everything the fast
	 * paths read, in every mode. */
	void *freelist;                 /* classic: the CPU slab's objects this CPU may take; home: the
	                                 * current slab's; slqb: the object queue (obfuscated links) */
	struct slab *slab;              /* classic: the CPU slab (frozen); home: the current slab; or
	                                 * NULL. Relaxed atomic stores: statistics readers peek */
	union {
		uintptr_t slab_base;    /* first object of `slab` (0 without a slab) */
		/* a part of the per-CPU backend (sheaves only, no slab): the
		 * commit word of its sequences, n | room << 16 | ops << 32
		 * (rseq_x86_64.h; pcpu.c) */
		uint64_t pcpu_nc;
	};
	uint32_t slab_span;             /* bytes of object slots in `slab` (0 without) */
	uint32_t offset;                /* the cache's free-pointer offset (a copy: one line less) */
	uintptr_t fp_key;               /* the cache's free-pointer key (a copy) */
	uint32_t divinv, divk;          /* the cache's boundary check in a slot (copies; slab.h) */
	void **objs;                    /* sheaves: main's objects[] */
	uint32_t n;                     /* sheaves: objects in main; owner writes, others read (relaxed) */
	uint32_t cap;                   /* sheaves: main's capacity; 0 in other modes, so that the free
	                                 * fast path never pushes there */

	/* Line 1: the fast paths' counters (owner: cpu_tick; stats.c reads
	 * them relaxed), then what the slow paths use most. */
	uint64_t alloc_fast;            /* ALLOC_FASTPATH: pops of `freelist` */
	uint64_t free_fast;             /* FREE_FASTPATH: pushes onto `freelist` or an owned slab */
	uint64_t alloc_pcs;             /* ALLOC_PCS: pops of main */
	uint64_t free_pcs;              /* FREE_PCS: pushes onto main */
	struct cpu_thread *thread;      /* the thread this part belongs to */
	uint8_t mode;                   /* enum cpu_mode this part runs; CPU_NR_MODES: none yet */
	/* inside a slow path (its private state may be half changed): a fork
	 * child leaves such a part of a vanished thread alone (tls.c) */
	uint8_t busy;
	/* slqb: objects on the queue = qadj + free_fast - alloc_fast (the
	 * inline pop keeps no count of its own; slow paths adjust qadj) */
	int64_t qadj;
	struct uslab_cache *cache;      /* owner; NULL once destroy took it back */

	/* Ownership (home, slqb; home.c): the slabs this part owns other
	 * than `slab`, on doubly linked lists through slab->next/prev. */
	struct own_list {
		struct slab *head, *tail;
	} own_partial,                  /* owned slabs with objects on their lfree (FIFO) */
	  own_full;                     /* owned slabs with every object out */
	_Atomic uint32_t own_slabs;     /* slabs owned, `slab` and the stash included (RMW: a decay
	                                 * pass that takes the stash takes them off too) */
	/* Empty owned slabs kept for reuse (home): a stack through
	 * slab->next, pushed and popped by the owner by CAS; a decay pass
	 * takes an idle part's whole stack by exchange. Only the owner pushes
	 * and others only take all, so a pop's CAS cannot succeed on a stale
	 * head (no ABA). At most a remote batch's worth of slabs, plus one
	 * (stash_max()). */
	struct slab *_Atomic stash;
	_Atomic uint32_t stash_n;
	/* The remote batch (SLQB's rlist): objects of slabs another part
	 * owns, chained through their free pointers, for one destination. */
	struct cpu_cache *rdest;        /* the owner they go to, or NULL */
	void *rhead, *rtail;
	uint32_t rn;                    /* objects in the batch */
	uint32_t hiwater;               /* slqb: queue bound; home: remote batch size */
	uint32_t freebatch;             /* slqb: objects a queue flush moves; remote batch size */

	/* Sheaves. */
	struct sheaf *main;             /* main (objs/n mirror it); slab mode: the array cache */
	/* spare, or NULL. Taken by atomic exchange, by the owner (to use it)
	 * or by another thread taking memory back from an idle owner
	 * (decay.c). */
	struct sheaf *_Atomic spare;
	_Atomic uint32_t spare_n;       /* objects in the sheaf in `spare` (RMW by both) */
	uint32_t sheaf_cap;             /* the capacity this part runs with (slab mode: its limit) */
	/* Slab mode (array.c): when this part's array is next looked at by
	 * the reap (ms), and its allocations counted then; no allocation
	 * since is the kernel's "not touched" (owner only). */
	uint64_t reap_next;
	uint64_t reap_allocs;

	/* Taking memory back from idle threads (decay.c): the owner counts its
	 * slow paths; a pass that finds the count unchanged since the last one
	 * takes the spare and sets flush_req, which the owner acknowledges on
	 * its next slow path by giving everything back. */
	_Atomic uint64_t slow_ops;
	uint64_t seen_ops;              /* slow_ops at the last pass (cache_mutex) */
	_Atomic bool flush_req;
	/* classic: the CPU partial list (frozen slabs, via slab->next), and
	 * how many slabs it holds (bounded by cpu_partial's objects over a
	 * slab's, as the kernel's cpu_partial_slabs: classic.c). */
	struct slab *partial;
	unsigned partial_slabs;
	/* Event counters. Only the owning thread writes them, with relaxed
	 * load+store (no read-modify-write); readers sum them. */
	_Atomic uint64_t stat[USLAB_NR_STAT_ITEMS];
	struct cpu_cache *cnext, *cprev;/* the cache's list of CPU parts (cache_mutex) */

	/* A part of the per-CPU backend (pcpu.c): a CPU's, not a thread's.
	 * plock is held by whoever has the part closed (its slow paths, a
	 * decay pass, shrink, a retune, destroy); the fields below are its. */
	pthread_mutex_t plock;
	uint32_t pcpu_cpu;              /* the CPU whose part it is */
	uint32_t open_n, open_ops;      /* n and ops when it was last opened (statistics) */
	uint32_t seen_fast;             /* ops at the last decay pass */
	bool pcpu;                      /* a part of the per-CPU backend */
	bool pcpu_retired;              /* no longer in its CPU's area (the cache left sheaves mode) */
	/* Objects that bulk calls moved by sequences (pcpu_alloc_bulk_fast,
	 * pcpu_free_bulk_marked): in ops as pops and pushes, and here, so that the
	 * sums count them as ALLOC_BULK and FREE_BULK instead. Added by
	 * whichever thread's sequence committed on this CPU, after it, with
	 * an atomic add (relaxed: counters, read a moment old). */
	_Atomic uint64_t bulk_pops, bulk_pushes;

	/* The inbox (SLQB's remote_free): objects other parts freed to slabs
	 * this part owns, pushed as whole batches by compare-and-swap
	 * (release: the links written into them before are visible to the
	 * owner, which takes the whole list by exchange, acquire). On a line
	 * of its own: remote freers write it, the owner only peeks at it on
	 * its slow path. */
	void *_Atomic inbox __attribute__((aligned(CACHE_LINE)));
} __attribute__((aligned(2 * CACHE_LINE)));
_Static_assert(offsetof(struct cpu_cache, alloc_fast) == CACHE_LINE, "the fast paths' fields fill the first line");

/* Where every thread's CPU part pointers start: n 0, cap 0, no free list
 * and no slab, so each fast path falls to its slow path without a NULL
 * test. Never written. */
extern struct cpu_cache cpu_empty USLAB_HIDDEN;

/* Make `slab` (or none) the CPU slab of c, with the range the free fast
 * path checks pointers against. */
static inline void cpu_set_slab(const struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	/* a relaxed atomic store (a plain mov): statistics readers count other
	 * threads' CPU slabs with a relaxed load; the owner reads it plainly */
	__atomic_store_n(&c->slab, slab, __ATOMIC_RELAXED);
	c->slab_base = slab ? (uintptr_t)slab_first(s, slab) : 0;
	c->slab_span = slab ? (uint32_t)slab->objects * s->size : 0;
}

/* A free pointer taken from the CPU free list must be NULL or another
 * object of the CPU slab: anything else is a corrupted free list, caught
 * before a wild pointer is handed out. */
static inline bool cpu_next_ok(const struct cpu_cache *c, const void *next)
{
	return !next || (uintptr_t)next - c->slab_base < c->slab_span;
}
/* The fast paths' form of it, for x's link: NULL or in x's 64 KiB slot,
 * one xor and a compare on registers; a link that leaves the slot (a slab
 * of several slots, SLQB's queue, which spans slabs, or corruption) goes
 * to cpu_pop_checked(), which checks it as above. */
static inline bool cpu_next_near(const void *x, const void *next)
{
	return likely(((uintptr_t)next ^ (uintptr_t)x) < SLOT_SIZE) || !next;
}
/* Add to a counter of the owner's CPU part: load and store, no RMW. */
static inline void cpu_count(_Atomic uint64_t *ctr, uint64_t n)
{
	atomic_store_explicit(ctr, atomic_load_explicit(ctr, memory_order_relaxed) + n, memory_order_relaxed);
}

/* Count an event on a CPU part (owner only), or on the cache when there is
 * no CPU part. */
static inline void stat_add(struct uslab_cache *s, struct cpu_cache *c, enum uslab_stat_item i, uint64_t n)
{
	if (likely(c))
		cpu_count(&c->stat[i], n);
	else
		atomic_fetch_add_explicit(&s->stat_gone[i], n, memory_order_relaxed);
}
static inline void stat_inc(struct uslab_cache *s, struct cpu_cache *c, enum uslab_stat_item i)
{
	stat_add(s, c, i, 1);
}

/* main's count: the owner stores it with a relaxed store (a plain mov),
 * statistics readers load it relaxed. */
static inline void cpu_set_n(struct cpu_cache *c, uint32_t n)
{
	__atomic_store_n(&c->n, n, __ATOMIC_RELAXED);
}

/* ---- the modes: one table of operations each ------------------------------ */
/*
 * What a part does in its mode past the inline fast paths. dispatch.c and
 * bulk.c call through cpu_modes[c->mode] rather than switching on the
 * mode; what the core needs of a mode it reaches through core_hooks
 * (slab.h, filled by glue.c). Each mode's file defines its table.
 */
struct cpu_mode_ops {
	const char *name;
	/* a part starts in this mode, holding nothing (cap: the sheaves'
	 * capacity, slab mode's limit) */
	void (*setup)(struct uslab_cache *s, struct cpu_cache *c, unsigned cap);
	/* the allocation slow path: an object, or NULL with errno ENOMEM */
	void *(*alloc_slow)(struct uslab_cache *s, struct cpu_cache *c);
	/* a free the fast paths did not finish: x checked, an object of s,
	 * slab its record */
	void (*free_slow)(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *x);
	/* give back everything the part holds */
	void (*flush)(struct uslab_cache *s, struct cpu_cache *c);
	/* bulk: nr objects, or 0 with nothing kept; objs[] checked, no NULL */
	size_t (*alloc_bulk)(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
	void (*free_bulk)(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
};
extern const struct cpu_mode_ops cpu_classic_ops USLAB_HIDDEN;   /* classic.c */
extern const struct cpu_mode_ops cpu_sheaf_ops USLAB_HIDDEN;     /* sheaf.c */
extern const struct cpu_mode_ops cpu_home_ops USLAB_HIDDEN;      /* home.c */
extern const struct cpu_mode_ops cpu_slqb_ops USLAB_HIDDEN;      /* home.c */
extern const struct cpu_mode_ops cpu_array_ops USLAB_HIDDEN;     /* array.c */
/* by enum cpu_mode (dispatch.c) */
extern const struct cpu_mode_ops *const cpu_modes[CPU_NR_MODES] USLAB_HIDDEN;

/* ---- dispatch.c: the slow paths of every mode --------------------------- */
/* Every allocation and free that the fast paths do not finish. `caller`:
 * the return address of the API call, for slub_debug's U and T; `asked`:
 * the size a kmalloc caller wants (0: the object size), for debug caches. */
USLAB_HIDDEN void *slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c, void *caller, size_t asked);
/* The same, tail-called by the inline fast paths: its own return address
 * is the API call's (so the fast path does not load it). */
USLAB_HIDDEN void *slab_alloc_slow_tail(struct uslab_cache *s, struct cpu_cache *c, size_t asked);
USLAB_HIDDEN void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *x, struct cpu_cache *c,
				 void *caller);
/* A slow path is about to use part c of s: count it, acknowledge a
 * take-back request (decay.c), switch modes if sheaf_capacity changed. */
USLAB_HIDDEN void slab_cpu_enter(struct uslab_cache *s, struct cpu_cache *c);
/* Give a CPU part's objects and slabs back (owner, or cache_mutex holder
 * when the owner cannot be running on this cache): sheaves or classic. */
USLAB_HIDDEN void slab_flush_cpu(struct uslab_cache *s, struct cpu_cache *c);

/* ---- sheaf.c: sheaves and the barn ---------------------------------------- */
/* The allocation/free slow paths of a part in sheaves mode: make room or
 * objects in main, then do the operation. */
USLAB_HIDDEN void *sheaf_alloc_slow(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void sheaf_free_slow(struct uslab_cache *s, struct cpu_cache *c, void *x);
/* Give main and spare back (to the barn if they fit, else the slabs). */
USLAB_HIDDEN void sheaf_flush_cpu(struct uslab_cache *s, struct cpu_cache *c, bool to_barn);
/* sheaf_flush_cpu in two steps, so that a part's lock need not be held
 * while the objects go back (pcpu.c's drains): take main and spare out of
 * c (sh[0], sh[1], either may be NULL), leaving it without sheaves; then
 * give them back as sheaf_flush_cpu does, counted on c (NULL: on the
 * cache). */
USLAB_HIDDEN void sheaf_detach_cpu(struct cpu_cache *c, struct sheaf *sh[2]);
USLAB_HIDDEN void sheaf_flush_detached(struct uslab_cache *s, struct cpu_cache *c, struct sheaf *sh[2], bool to_barn);
/* Flush every sheaf in the barn to the slabs and free the sheaves. */
USLAB_HIDDEN void sheaf_flush_barn(struct uslab_cache *s);
/* Another thread's part: take its spare sheaf (objects to the barn if it is
 * full and the barn has room, else to the slabs). cache_mutex held, so the
 * part cannot go away. Returns the objects taken. */
USLAB_HIDDEN unsigned sheaf_take_spare(struct uslab_cache *s, struct cpu_cache *c);
/* Set up a part for sheaves of capacity cap (0: none). */
USLAB_HIDDEN bool sheaf_setup_cpu(struct uslab_cache *s, struct cpu_cache *c, unsigned cap);
USLAB_HIDDEN void sheaf_init_cache(struct uslab_cache *s);
USLAB_HIDDEN void sheaf_init(void);
/* bulk through the sheaves (bulk.c calls them for parts in sheaves mode) */
USLAB_HIDDEN size_t sheaf_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
USLAB_HIDDEN void sheaf_free_bulk_marked(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs, bool marked);

/* ---- decay.c: memory back to the OS over time, and from idle threads ---- */
/* Take back what caches hold unused (only: one cache, NULL: all): the
 * calling thread's sheaves or CPU slabs, other threads' spare sheaves (and
 * a request for the rest, acknowledged at their next slow path), the
 * barn, empty slabs. `all`: everything now (shrink, trim); else what was
 * unused since the last pass. Returns about how many objects and slabs
 * went back (0: nothing). */
USLAB_HIDDEN unsigned long mem_take_back(struct uslab_cache *only, bool all);
/* The same with cache_mutex held (the export's shrink command). */
USLAB_HIDDEN unsigned long mem_take_back_locked(struct uslab_cache *only, bool all);
/* One decay pass over every cache, the page allocator and the huge cache;
 * returns the ms until the next one is due (UINT64_MAX: nothing pending).
 * One thread at a time: the background thread's (decay.c's caches_due). */
USLAB_HIDDEN uint64_t mem_decay_pass(void);
/* The background thread (bgthread.c): sleeping with no deadline, and its
 * wake-up (registered by it). */
extern _Atomic bool mem_bg_sleeping USLAB_HIDDEN;
extern void (*_Atomic mem_bg_wake)(void) USLAB_HIDDEN;

/* ---- classic.c: classic mode ----------------------------------------------- */
/* Fill c->freelist (CPU slab from CPU partial list, node list or a new
 * slab); false when no memory can be had. */
USLAB_HIDDEN bool cpu_slab_refill(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void *cpu_slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void cpu_slab_free_slow(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *x);
USLAB_HIDDEN size_t cpu_slab_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
USLAB_HIDDEN void cpu_slab_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
/* A free froze a full slab for c: put it on the CPU partial list, draining
 * the list to the node first if it would hold more than cpu_partial. */
USLAB_HIDDEN void cpu_slab_put_partial(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab,
				       unsigned nfree);
/* Deactivate the CPU slab and unfreeze the CPU partial list. */
USLAB_HIDDEN void cpu_slab_flush(struct uslab_cache *s, struct cpu_cache *c);
/* Unfreeze a frozen slab that c gives up, with the chain `freelist` of its
 * free objects spliced onto its list: listed on the node partial list if
 * it has free objects, freed if it is empty and the node has min_partial
 * slabs, else full on no list (SLUB's deactivate_slab). */
USLAB_HIDDEN void cpu_slab_deactivate(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab,
				      void *freelist);

/* ---- home.c: home and slqb modes (ownership, remote batches) ----------- */
/* Set up part c for mode (CPU_HOME or CPU_SLQB), holding nothing. */
USLAB_HIDDEN void home_setup_cpu(struct uslab_cache *s, struct cpu_cache *c, unsigned mode);
USLAB_HIDDEN void *home_alloc_slow(struct uslab_cache *s, struct cpu_cache *c);
/* A free the inline paths left (x checked, of s, slab d): local, remote,
 * or slqb's queue. */
USLAB_HIDDEN void home_free(struct uslab_cache *s, struct cpu_cache *c, struct slab *d, void *x);
/* Give back everything c holds (owner, or cache_mutex holder for a part
 * whose thread cannot run on this cache). */
USLAB_HIDDEN void home_flush_cpu(struct uslab_cache *s, struct cpu_cache *c);
/* Route what reached the inbox of a part whose thread is gone. cache_mutex held. */
USLAB_HIDDEN void home_drain_dead(struct uslab_cache *s, struct cpu_cache *c);
/* Take another part's stash of empty slabs (decay: the part is idle) and
 * give them back. Returns how many. cache_mutex held. */
USLAB_HIDDEN unsigned home_take_stash(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN size_t home_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
/* The bulk API's paths for this thread's home part c of s (its mode
 * checked): as lean as single calls per call, leaner per object. The alloc
 * returns nr or 0 (nothing allocated, errno set); the free takes the
 * caller's array as it is (NULLs skipped, every object checked as a
 * single free would be, misuse reported). */
USLAB_HIDDEN size_t home_alloc_bulk_fast(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
USLAB_HIDDEN void home_free_bulk_fast(struct uslab_cache *named, struct cpu_cache *c, size_t nr, void **objs);
USLAB_HIDDEN void home_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);

/* ---- array.c: slab mode (the kernel's SLAB) ------------------------------ */
/* Set up part c for slab mode (an array of `limit` objects), holding nothing. */
USLAB_HIDDEN void array_setup_cpu(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void *array_alloc_slow(struct uslab_cache *s, struct cpu_cache *c);
/* A free the inline path left (x checked, an object of s): the array is
 * full (flushed by a batch), or x is among its last frees (reported). */
USLAB_HIDDEN void array_free_slow(struct uslab_cache *s, struct cpu_cache *c, void *x);
/* Give back what c holds (owner, or cache_mutex holder for a part whose
 * thread cannot run on this cache). */
USLAB_HIDDEN void array_flush_cpu(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN size_t array_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
USLAB_HIDDEN void array_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
/* One object without a CPU part (exiting threads, no memory for a part). */
USLAB_HIDDEN void *array_alloc_nocpu(struct uslab_cache *s);
/* Free objs[0..n) (checked objects of s, of any slab layout): SLAB-format
 * ones to their slabs' index lists (one node lock hold per chunk), others
 * through slab_free_objects(). c may be NULL. from_cpu: they come from
 * an array or a sheaf (marked), else from the program (checked there). */
USLAB_HIDDEN void array_free_objs(struct uslab_cache *s, struct cpu_cache *c, void *const *objs, unsigned n,
				  bool from_cpu);
/* The chain head..tail of cnt objects of SLAB-format slab (links through
 * free pointers, written by the caller: a remote batch, a queue). */
USLAB_HIDDEN void array_free_chain(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head,
				   unsigned cnt);
/* The layout of the cache's SLAB-format slabs (cache creation), or with
 * the "order" tunable's order; and the order and objects new ones get. */
USLAB_HIDDEN void array_init_cache(struct uslab_cache *s);
USLAB_HIDDEN void array_set_order(struct uslab_cache *s, unsigned order);
USLAB_HIDDEN void array_slab_shape(const struct uslab_cache *s, unsigned *order, unsigned *objects);
/* The kernel's enable_cpucache() defaults: limit, batchcount, sharedfactor. */
USLAB_HIDDEN void array_default_tunables(struct uslab_cache *s);
/* The node reap (drain part of an untouched shared array, free slabs
 * beyond the free limit) when due, or, with `all`, every free slab now.
 * Returns true if something is left that a later reap may take. */
USLAB_HIDDEN bool array_reap(struct uslab_cache *s, bool all);
/* Free every free SLAB-format slab (shrink, destroy); returns how many. */
USLAB_HIDDEN unsigned long array_shrink(struct uslab_cache *s);
/* Free objects in listed SLAB-format slabs (count_live); node lock held. */
USLAB_HIDDEN unsigned long array_free_objects_locked(struct uslab_cache *s);
/* uslab_cache_validate's part for slab mode (node lock held): the three
 * lists, each slab's index list and bitmap, the counts; one report_line
 * per problem. Returns the problems found. */
USLAB_HIDDEN long array_validate_locked(struct uslab_cache *s);

/* ---- what the per-CPU layer needs from the malloc family ---------------- */
/* Filled by src/glue.c (as core_hooks, slab.h): the layer calls down only. */
struct cpu_hooks {
	/* the kmalloc classes' caches (KMALLOC_CLASSES_MAX entries, NULL until
	 * made) and, for each size / 8 up to the small classes' end, its class
	 * (KMALLOC_SIZES_MAX entries): a thread keeps its parts of those caches
	 * in arrays malloc's fast path indexes (tls.c) */
	struct uslab_cache *const *fast_classes;
	const uint8_t *fast_size_class;
	/* a decay pass also ages what the malloc family keeps (freed huge
	 * mappings): true if something stays pending */
	bool (*decay_more)(void);
};
extern const struct cpu_hooks cpu_hooks USLAB_HIDDEN;

/* ---- tls.c -------------------------------------------------------- */
/* What a thread keeps beside its CPU parts. */
#define CPU_INLINE_SLOTS 64
#define KMALLOC_CLASSES_MAX 48   /* kmalloc.h's KMALLOC_NR_CLASSES */
#define KMALLOC_SIZES_MAX 129    /* kmalloc.h's KMALLOC_SMALL_MAX / 8 + 1 */
struct cpu_thread {
	void *slots_block;         /* page block holding the slots array, once it outgrew inline */
	/* The thread's CPU parts by cache id (&cpu_empty where none): what
	 * cpu_get() looks up. cpu_tls mirrors it for the fast paths, except in
	 * hardened mode, which sends every operation to the slow paths. */
	struct cpu_cache **slots;
	unsigned nslots;
	/* CPU parts by kmalloc class, and by size / 8 up to the small
	 * classes' end (&cpu_empty where none): malloc's fast path reaches
	 * its part with one load from here */
	struct cpu_cache *kparts[KMALLOC_CLASSES_MAX];
	struct cpu_cache *ksize[KMALLOC_SIZES_MAX];
	struct cpu_cache *inline_slots[CPU_INLINE_SLOTS]; /* the first slots, without a page */
	uint32_t tag;              /* the tag of the slabs it owns (tls.c: unique among live threads) */
	uint32_t gen;              /* the forks this process had been through when it was made */
};
/* The thread's only TLS, initial-exec, so that the fast paths reach their
 * CPU part with one TLS access and no __tls_get_addr call. Small (112
 * bytes): a dlopen'ed libuslab.so takes it from glibc's static TLS
 * reserve. Its initial image points at cpu_empty. */
#define CPU_TLS_FAST 8
struct cpu_tls {
	/* the CPU parts of cache ids below CPU_TLS_FAST, as in slots[]: one
	 * load less on the fast paths of the first caches made */
	struct cpu_cache *fast[CPU_TLS_FAST];
	struct cpu_cache **kparts; /* this thread's CPU parts by kmalloc class */
	struct cpu_cache **ksize;  /* ... and by size / 8, up to KMALLOC_SMALL_MAX */
	struct cpu_cache **slots;  /* CPU parts indexed by cache id (&cpu_empty where none) */
	/* The tag of slabs this thread owns (slab->otag): its cpu_thread's
	 * while it has one (odd, unique among live threads), else
	 * CPU_TAG_NONE, which no slab carries (unowned slabs carry 0). */
	uint32_t tag;
	unsigned nslots;           /* 0 until the thread's first slow path */
	uint32_t kf_left;          /* KFENCE: kfence=N, allocations until the next sample (0: draw a
	                            * count); by time, looks since the thread began (kfence.c) */
	bool dead;                 /* exiting: no CPU parts any more */
	bool creating;             /* setting up the thread: no CPU parts yet */
	struct cpu_thread *thread;
};
#define CPU_TAG_NONE 2U
_Static_assert(CPU_TAG_NONE != SLAB_TAG_ARRAY && !(SLAB_TAG_ARRAY & 1), "no thread's tag marks SLAB slabs");
static inline uint32_t cpu_thread_tag(const struct cpu_thread *t)
{
	return t->tag;
}
extern __thread struct cpu_tls cpu_tls USLAB_HIDDEN __attribute__((tls_model("initial-exec")));

/* This thread's CPU part for cache id `id`: never NULL (cpu_empty where
 * there is none). May be an orphan (c->cache is not the cache) whose
 * sheaf and free list are empty, so fast paths fall to the slow path. */
static inline struct cpu_cache *cpu_this_id(unsigned id)
{
	if (likely(id < CPU_TLS_FAST))
		return cpu_tls.fast[id];
	return likely(id < cpu_tls.nslots) ? cpu_tls.slots[id] : &cpu_empty;
}
static inline struct cpu_cache *cpu_this(const struct uslab_cache *s)
{
	return cpu_this_id(s->id);
}
/* Get or create this thread's CPU part for s; NULL if none can be had. */
USLAB_HIDDEN struct cpu_cache *cpu_get(struct uslab_cache *s);
/* This thread's CPU part for s if it has one, else NULL (never creates;
 * also in hardened mode, where cpu_this() only ever finds cpu_empty). */
USLAB_HIDDEN struct cpu_cache *cpu_part(struct uslab_cache *s);
/* Take back every CPU part of s (destroy). cache_mutex held. */
USLAB_HIDDEN void cpu_orphan_all(struct uslab_cache *s);
/* Free the parts s kept of exited threads (destroy, once nothing is live). */
USLAB_HIDDEN void cpu_free_dead(struct uslab_cache *s);
/* fork.c's child handler: the parts of the threads that did not survive
 * are settled at the next slow path (cpu_fork_check). */
USLAB_HIDDEN void cpu_fork_child(void);
USLAB_HIDDEN void cpu_fork_check(void);

/* Mark c inside a slow path, and out of it (see busy). The release fence
 * keeps the mark ahead of the changes it covers, for a fork child that
 * reads it on another CPU's copy; x86 emits nothing for it. ThreadSanitizer
 * does not model fences (gcc warns): there an acquire-release exchange
 * orders the same way (no later access moves above it) where it can see it. */
static inline void cpu_busy(struct cpu_cache *c)
{
#ifdef __SANITIZE_THREAD__
	(void)__atomic_exchange_n(&c->busy, 1, __ATOMIC_ACQ_REL);
#else
	__atomic_store_n(&c->busy, 1, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_release);
#endif
}
static inline void cpu_idle(struct cpu_cache *c)
{
	__atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
}

/* ---- pcpu.c: the per-CPU backend (restartable sequences) ------------------ */
/*
 * Parts per CPU rather than per thread, for caches in sheaves mode, where
 * the kernel's rseq is registered (glibc's). Each CPU has an area that the
 * fast paths index by the CPU number their sequence reads: its parts by
 * kmalloc size and class (as cpu_tls's tables) and by cache id. NULL where
 * a CPU has no part for that cache: the fast path then takes the
 * thread-local backend's path, whose slow path makes the part. pcpu.c's
 * file comment has the protocol.
 */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#include "rseq_x86_64.h"
#else
#define PCPU_ARCH 0   /* TSan cannot follow a sequence's restart; other architectures: to do */
#endif

#define PCPU_AREA_SHIFT 12
/* CPUs with an area: every number the kernel can give (x86-64's NR_CPUS
 * is at most 8192; pcpu_init checks the machine's possible CPUs), so the
 * sequences index areas with the number unchecked. */
#define PCPU_MAX_CPUS 8192
#define PCPU_NOBODY_AREAS 2   /* below CPU 0's: cpu_id -1 and -2, never written */
#define PCPU_SLOTS ((1U << PCPU_AREA_SHIFT) / sizeof(void *) - KMALLOC_SIZES_MAX - KMALLOC_CLASSES_MAX)
struct pcpu_area {
	struct cpu_cache *ksize[KMALLOC_SIZES_MAX];
	struct cpu_cache *kparts[KMALLOC_CLASSES_MAX];
	struct cpu_cache *slots[PCPU_SLOTS];   /* by cache id (ids beyond run thread-local) */
};
_Static_assert(sizeof(struct pcpu_area) == 1U << PCPU_AREA_SHIFT, "an area is a page");

/* Set once at start (pcpu_init), read by every fast path: one line. */
struct pcpu_global {
	bool on;                   /* the backend runs */
	long rseq_off;             /* glibc's __rseq_offset: the rseq area from the thread pointer */
	char *areas;               /* CPU 0's area of PCPU_MAX_CPUS (reserved, touched as CPUs use
	                            * them), after PCPU_NOBODY_AREAS read-only empty ones */
};
extern struct pcpu_global pcpu_g USLAB_HIDDEN;

USLAB_HIDDEN void pcpu_init(void);
/* Does s run on the per-CPU backend (sheaves mode, not debug, an id with
 * a slot)? */
USLAB_HIDDEN bool pcpu_eligible(const struct uslab_cache *s);
/* This CPU's part of s, made if needed, locked and closed (its slow path's
 * state private); NULL if s does not run per CPU or no part can be had. */
USLAB_HIDDEN struct cpu_cache *pcpu_acquire(struct uslab_cache *s);
/* Open the part again and unlock it. */
USLAB_HIDDEN void pcpu_release(struct cpu_cache *c);
/* The kmalloc classes are set (cpu_hooks.fast_classes filled): publish
 * the parts their caches already have in malloc's slots of their CPUs'
 * areas (a part made before, such as the one malloc's first allocation
 * makes, was published by cache id only). */
USLAB_HIDDEN void pcpu_publish_kmalloc(void);
/* A free the push could not finish (main full, no part on this CPU): x is
 * checked and already marked free. Called last (the API call's return
 * address is the caller's). */
USLAB_HIDDEN void pcpu_free_marked(struct uslab_cache *s, struct slab *d, void *x);
/* Bulk calls of s (the root, running per CPU; bulk.c): up to nr objects
 * of this CPU's main into objs[] by one sequence (how many: 0 when main is
 * empty or there is no part); objs[0 .. k), checked and marked free, onto
 * main by sequences, what has no room there through the part's slow path. */
USLAB_HIDDEN size_t pcpu_alloc_bulk_fast(struct uslab_cache *s, size_t nr, void **objs);
USLAB_HIDDEN void pcpu_free_bulk_marked(struct uslab_cache *s, void **objs, unsigned k);
/* A fast allocation whose ops count wrapped: KFENCE's look at the clock
 * (x goes back to the part if a sample is taken). Tail-called. */
USLAB_HIDDEN void *pcpu_alloc_wrapped(struct uslab_cache *named, void *x, size_t asked);
/* cache_mutex held: decay (idle parts: not used for a pass, or all),
 * shrink, retune (cpu_mode or sheaf_capacity changed), destroy. */
USLAB_HIDDEN bool pcpu_decay(struct uslab_cache *s, bool all, unsigned long *taken);
USLAB_HIDDEN void pcpu_retune(struct uslab_cache *s);
USLAB_HIDDEN void pcpu_destroy(struct uslab_cache *s);
/* Statistics (cache_mutex held): add every part's counters into ev[],
 * and count the parts and the objects they hold. */
USLAB_HIDDEN void pcpu_sum_events(struct uslab_cache *s, uint64_t *ev);
USLAB_HIDDEN void pcpu_count(struct uslab_cache *s, unsigned *parts, uint64_t *objects);
/* One part's counters (added into ev[]) and its pops and pushes; and the
 * part of CPU cpu, or NULL. cache_mutex held. */
USLAB_HIDDEN void pcpu_part_events(struct cpu_cache *c, uint64_t *ev, uint64_t *pops, uint64_t *pushes);
USLAB_HIDDEN struct cpu_cache *pcpu_part_of(struct uslab_cache *s, unsigned cpu);
/* fn(arg, cpu, ev, objects) for each part of s (not retired; in no order):
 * what uslab_cache_cpu_stats() reports of that CPU (ev: USLAB_NR_STAT_ITEMS
 * counters). Returns the parts. cache_mutex held (fn must not take it). */
USLAB_HIDDEN unsigned pcpu_each_part(struct uslab_cache *s,
				     void (*fn)(void *arg, unsigned cpu, const uint64_t *ev, uint64_t objects),
				     void *arg);
/* Free every part of s (its memory goes: nothing of it is live). */
USLAB_HIDDEN void pcpu_free_parts(struct uslab_cache *s);
/* fork: walk the parts' locks (in the order slow paths take them: before
 * the node's), and the child's membarrier registration. */
USLAB_HIDDEN bool pcpu_fork_locks(struct uslab_cache *s, bool (*fn)(pthread_mutex_t *m));
USLAB_HIDDEN void pcpu_fork_child(void);

/* Where the parts of cache id `id` / kmalloc size index / class sit in
 * CPU 0's area (another CPU's: + cpu << PCPU_AREA_SHIFT). */
static inline uintptr_t pcpu_slot_id(unsigned id)
{
	return (uintptr_t)pcpu_g.areas + offsetof(struct pcpu_area, slots) + (uintptr_t)id * sizeof(void *);
}
static inline uintptr_t pcpu_slot_ksize(size_t i)
{
	return (uintptr_t)pcpu_g.areas + offsetof(struct pcpu_area, ksize) + i * sizeof(void *);
}
static inline uintptr_t pcpu_slot_kparts(size_t i)
{
	return (uintptr_t)pcpu_g.areas + offsetof(struct pcpu_area, kparts) + i * sizeof(void *);
}

enum { PCPU_OK, PCPU_NOPART, PCPU_EMPTY };
/* Pop from this CPU's part at `slot`: PCPU_OK with the object, the part
 * and the new commit word; PCPU_EMPTY; PCPU_NOPART. */
static inline __attribute__((always_inline)) int pcpu_pop(uintptr_t slot, void **xp, struct cpu_cache **cp,
							   uint64_t *ncp)
{
#if PCPU_ARCH
	void *x;
	struct cpu_cache *c;
	uint64_t nc;
	PCPU_ARCH_POP(x, c, nc, slot, pcpu_g.rseq_off, PCPU_AREA_SHIFT, offsetof(struct cpu_cache, pcpu_nc),
		      offsetof(struct cpu_cache, objs), nopart, empty);
	*xp = x;
	*cp = c;
	*ncp = nc;
	return PCPU_OK;
nopart:
	return PCPU_NOPART;
empty:
	return PCPU_EMPTY;
#else
	(void)slot, (void)xp, (void)cp, (void)ncp;
	return PCPU_NOPART;
#endif
}
/* Push x onto this CPU's part at `slot`: true, or false (no part, or full). */
static inline __attribute__((always_inline)) bool pcpu_push(uintptr_t slot, void *x)
{
#if PCPU_ARCH
	PCPU_ARCH_PUSH(x, slot, pcpu_g.rseq_off, PCPU_AREA_SHIFT, offsetof(struct cpu_cache, pcpu_nc),
		       offsetof(struct cpu_cache, objs), fail);
	return true;
fail:
	return false;
#else
	(void)slot, (void)x;
	return false;
#endif
}
/* Bulk pop: up to `want` objects of this CPU's main at `slot` into out[]
 * (one sequence); how many, with the part in *cp. 0: main empty, or no
 * part. */
static inline size_t pcpu_pop_n(uintptr_t slot, void **out, size_t want, struct cpu_cache **cp)
{
#if PCPU_ARCH
	size_t k;
	struct cpu_cache *c;
	PCPU_ARCH_POP_N(k, c, out, want, slot, pcpu_g.rseq_off, PCPU_AREA_SHIFT, offsetof(struct cpu_cache, pcpu_nc),
			offsetof(struct cpu_cache, objs));
	*cp = c;
	return k;
#else
	(void)slot, (void)out, (void)want, (void)cp;
	return 0;
#endif
}
/* Bulk push: up to nr objects of in[] onto this CPU's main at `slot` (one
 * sequence); how many, with the part in *cp. 0: main full, or no part. */
static inline size_t pcpu_push_n(uintptr_t slot, void *const *in, size_t nr, struct cpu_cache **cp)
{
#if PCPU_ARCH
	size_t k;
	struct cpu_cache *c;
	PCPU_ARCH_PUSH_N(k, c, in, nr, slot, pcpu_g.rseq_off, PCPU_AREA_SHIFT, offsetof(struct cpu_cache, pcpu_nc),
			 offsetof(struct cpu_cache, objs));
	*cp = c;
	return k;
#else
	(void)slot, (void)in, (void)nr, (void)cp;
	return 0;
#endif
}
/* The CPU number this thread last ran on (a hint outside a sequence; for a
 * thread rseq does not know, a number >= PCPU_MAX_CPUS). */
static inline unsigned pcpu_cpu_now(void)
{
#if PCPU_ARCH
	return pcpu_arch_cpu(pcpu_g.rseq_off);
#else
	return PCPU_MAX_CPUS;
#endif
}
/* This CPU's part at `slot` now, or NULL: outside a sequence, only to read
 * what every part of the cache has alike (its copies of the cache's
 * offset, key and stride). */
static inline struct cpu_cache *pcpu_peek(uintptr_t slot)
{
	unsigned cpu = pcpu_cpu_now();
	if (unlikely(cpu >= PCPU_MAX_CPUS))
		return NULL;
	return __atomic_load_n((struct cpu_cache **)(slot + ((uintptr_t)cpu << PCPU_AREA_SHIFT)), __ATOMIC_RELAXED);
}
/* KFENCE's look at the clock: when the ops count's low byte passes 0 or 1
 * (a pop and a push alternate: one of the two is a pop), about once in
 * 128 to 256 operations, as the thread-local count's wrap. */
static inline bool pcpu_ops_wrapped(uint64_t nc)
{
	return !((uint32_t)(nc >> 32) & 0xfe);
}

/* ---- the fast paths ------------------------------------------------------ */
/*
 * Shared by the cache API and the malloc family; each stays on one screen.
 * Dependent loads, allocation: this thread's part (TLS, then an index),
 * its first line, the object (its free pointer). Free: the segment map
 * bit and the slot's record (in parallel: both addresses come from the
 * pointer alone), the owner part's first line; the object's line is
 * written.
 */
#include "kfence.h"

/* An allocation slow path's question to KFENCE: a sample, or NULL. By
 * time, only every 32nd question of a thread reads the clock
 * (kfence_alloc_due): a slow path pays an increment and a branch, and a
 * sample comes at most 32 slow paths (or 256 fast allocations: a wrapped
 * count asks kfence_alloc_due itself) late. */
static inline void *kfence_maybe(struct uslab_cache *s, size_t asked, void *caller)
{
	if (likely(kfence_interval == KFENCE_BY_TIME)) {
		if (likely(++cpu_tls.kf_left & 31))
			return NULL;
	} else if (likely(!kfence_interval)) {
		return NULL;
	}
	return kfence_alloc_due(s, asked, caller);
}

/* Free pointers through the part's copies of the cache's key and offset
 * (fp_mask() above, without loading the cache). */
static inline void **cpu_fp_where(const struct cpu_cache *c, void *x)
{
	return (void **)((char *)x + c->offset);
}
static inline void *cpu_fp_decode(const struct cpu_cache *c, void **where)
{
#if USLAB_HARDENED
	return (void *)((uintptr_t)*where ^ c->fp_key ^ __builtin_bswap64((uintptr_t)where));
#else
	return *where;
#endif
}
static inline void *cpu_fp_get(const struct cpu_cache *c, void *x)
{
	return cpu_fp_decode(c, cpu_fp_where(c, x));
}
/* A free's link into x: next, unless x's word already reads as a link
 * (see FP_NOT_LINK): then nothing is stored and false is returned (the
 * caller takes its slow path, which gives the verdict). The mask that
 * decodes the old word encodes the new one. */
static inline bool cpu_fp_swap(const struct cpu_cache *c, void *x, void *next)
{
	void **where = (void **)((char *)x + c->offset);
#if USLAB_HARDENED
	uintptr_t mask = c->fp_key ^ __builtin_bswap64((uintptr_t)where);
	if (unlikely(!(((uintptr_t)*where ^ mask) & FP_NOT_LINK)))
		return false;
	*where = (void *)((uintptr_t)next ^ mask);
#else
	*where = next;
#endif
	return true;
}

/* An object being handed out: its free-pointer word no longer reads as a
 * link (0 decodes to noise; see FP_NOT_LINK). */
static inline void cpu_fp_scrub(const struct cpu_cache *c, void *x)
{
	*(void **)((char *)x + c->offset) = NULL;
}

/* Is off the offset of one of slab d's objects in its first slot (by the
 * part's copies of the cache's divinv and divk; slab.h's slab_obj_index)? */
static inline bool cpu_offset_ok(const struct cpu_cache *c, const struct slab *d, uint32_t off)
{
	return slab_obj_index(off, c->divinv, c->divk) < d->objects;
}

/* A free pointer popped off `freelist` that is not NULL nor in x's slot:
 * one of the part's slab (a slab of several slots), the SLQB queue's
 * (which spans slabs: checked to be an object of the cache, out of line)
 * or a corrupted list (fatal). Pops x then. */
USLAB_HIDDEN void *cpu_pop_checked(struct uslab_cache *s, struct cpu_cache *c, void *x, void *next);

/* A fast allocation of x from c (popped from main if from_objs, else from
 * the free list; counted) for cache `named` whose count wrapped: KFENCE's
 * look at the clock (kfence.h). Returns x, or the sample, with x put back
 * where it was. Tail-called by the API functions' inline fast paths: its
 * return address is the API call's (for the sample's report). */
USLAB_HIDDEN void *cpu_alloc_wrapped(struct uslab_cache *named, struct cpu_cache *c, void *x, bool from_objs,
				     size_t asked);

/* Pop `freelist` (classic, home, slqb), else main (sheaves): no lock, no
 * atomic read-modify-write. `asked`: the size a kmalloc caller wants, or
 * 0; only debug caches, which never get here, and KFENCE use it. `caller`:
 * the API call's return address for the slow path, or NULL when every
 * way out is a tail call (the slow path then finds it itself). */
static inline __attribute__((always_inline)) void *cpu_alloc_fast_at(struct uslab_cache *s, struct cpu_cache *c,
								   size_t asked, void *caller)
{
	void *x = c->freelist;
	if (likely(x != NULL)) {
		void **where = cpu_fp_where(c, x);
		void *next = cpu_fp_decode(c, where);
		if (unlikely(!cpu_next_near(x, next)))
			return cpu_pop_checked(s, c, x, next);   /* a tail call: no frame here */
		c->freelist = next;
		cpu_order();
		*where = NULL;   /* (cpu_fp_scrub: the address computed once) */
		if (unlikely(cpu_tick_alloc(&c->alloc_fast)))
			return cpu_alloc_wrapped(s, c, x, false, asked);
		track_alloc(x, s->object_size);
		return x;
	}
	uint32_t n = c->n;
	if (likely(n)) {
		x = c->objs[n - 1];
		cpu_set_n(c, n - 1);
		cpu_fp_scrub(c, x);   /* off: the double-free mark */
		if (unlikely(cpu_tick_alloc(&c->alloc_pcs)))
			return cpu_alloc_wrapped(s, c, x, true, asked);
		track_alloc(x, s->object_size);
		return x;
	}
	if (caller)
		return slab_alloc_slow(s, c, caller, asked);
	return slab_alloc_slow_tail(s, c, asked);   /* a tail call: no frame, no return address here */
}

static inline __attribute__((always_inline)) void *cpu_alloc_fast(struct uslab_cache *s, struct cpu_cache *c,
								size_t asked)
{
	return cpu_alloc_fast_at(s, c, asked, NULL);
}

/*
 * The per-CPU backend's pop for cache `named` from its part at `slot`: the
 * object (an empty part: the slow path's answer), or NULL with *nopart set
 * when this CPU has no part there (the caller takes the thread-local
 * path). The object's double-free mark is scrubbed after the commit, once
 * it is this thread's. `caller` as for cpu_alloc_fast_at().
 */
/* After a pop of x from part c committed with word nc: scrub x's mark (it
 * is this thread's now), and KFENCE's look at the clock when the count
 * wrapped (a tail call). For cpu_alloc_fast's and kmalloc()'s pops; named
 * NULL (kmalloc) is the part's cache, read only when the count wrapped. */
static inline __attribute__((always_inline)) void *pcpu_popped(struct uslab_cache *named, struct cpu_cache *c,
							     void *x, uint64_t nc, size_t asked)
{
	cpu_fp_scrub(c, x);
	if (unlikely(pcpu_ops_wrapped(nc)))
		return pcpu_alloc_wrapped(named ? named : c->cache, x, asked);
	track_alloc(x, c->cache->object_size);
	return x;
}

static inline __attribute__((always_inline)) void *pcpu_alloc_fast(struct uslab_cache *named, uintptr_t slot,
								 size_t asked, void *caller, bool *nopart)
{
	void *x;
	struct cpu_cache *c;
	uint64_t nc;
	int st = pcpu_pop(slot, &x, &c, &nc);
	if (likely(st == PCPU_OK))
		return pcpu_popped(named, c, x, nc, asked);
	if (st == PCPU_EMPTY) {
		if (caller)
			return slab_alloc_slow(named, &cpu_empty, caller, asked);
		return slab_alloc_slow_tail(named, &cpu_empty, asked);
	}
	*nopart = true;
	return NULL;
}

static inline __attribute__((always_inline)) void *slab_alloc_fast_sized(struct uslab_cache *s, size_t asked)
{
	uintptr_t slot = atomic_load_explicit(&s->pcpu_slot, memory_order_relaxed);
	if (slot) {
		bool nopart = false;
		void *x = pcpu_alloc_fast(s, slot, asked, NULL, &nopart);
		if (likely(!nopart))
			return x;
	}
	return cpu_alloc_fast(s, cpu_this(s), asked);
}


/* home_free_fast()'s way out: d is owned by this thread's part (its tag
 * matched), but the free changes the slab's list, or is misuse. */
USLAB_HIDDEN void home_free_local(struct slab *d, void *x);

/* Every free the inline paths do not finish (a full sheaf, a remote free,
 * an SLQB queue push, the transitions of an owned slab, an object in a
 * later slot of a slab of several, misuse), with the record of x's slot d
 * (any kind, or &slab_foreign). `named`: the cache the caller named, or NULL
 * (free()). Called last, so that its return address is the API call's
 * (for slub_debug's call sites and KFENCE reports). */
USLAB_HIDDEN void cpu_free_other(struct uslab_cache *named, struct slab *d, void *x);

/*
 * Free of x into a slab this thread owns (home mode: d->otag matched the
 * thread's tag, so d is a live slab and c its owner, this thread's part;
 * d is x's slot's record, so x is in the slab's first slot and its offset
 * there is its offset in the slab): the current slab's objects onto
 * `freelist`, others onto the slab's own list, no lock, no atomic. A slab
 * that becomes empty or was full changes lists: the slow path, as misuse
 * (a boundary, the head of the list).
 */
static inline __attribute__((always_inline)) void home_free_fast_c(struct cpu_cache *c, struct slab *d, void *x)
{
	if (likely(cpu_offset_ok(c, d, (uintptr_t)x & SLOT_MASK))) {
		if (d == c->slab) {
			if (likely(cpu_fp_swap(c, x, c->freelist))) {
				track_free(x, c->cache->object_size);
				cpu_order();
				c->freelist = x;
				cpu_tick(&c->free_fast);
				return;
			}
		} else {
			unsigned used = d->pfree;
			if (likely(used - 2 < (unsigned)d->objects - 2) && likely(cpu_fp_swap(c, x, d->lfree))) {
				track_free(x, c->cache->object_size);   /* (used 2 .. objects-1: no list moves) */
				cpu_order();
				d->lfree = x;
				d->pfree = (uint16_t)(used - 1);
				cpu_tick(&c->free_fast);
				return;
			}
		}
	}
	home_free_local(d, x);
}

/* The same, the owner part read from d (free(): no cache to start from). */
static inline __attribute__((always_inline)) void home_free_fast(struct slab *d, void *x)
{
	home_free_fast_c(atomic_load_explicit(&d->owner, memory_order_relaxed), d, x);
}

/* The per-CPU backend's free checks, with the cache's own offset, key and
 * stride (every part has copies of them; r: the real cache or an alias of
 * it, which has the same): x is one of d's objects, and its free-pointer
 * word does not read as a link; then the word gets the mark. */
static inline bool pcpu_offset_ok(const struct uslab_cache *r, const struct slab *d, uint32_t off)
{
	return slab_obj_index(off, r->divinv, r->divk) < d->objects;
}
static inline bool pcpu_mark(const struct uslab_cache *r, void *x)
{
	void **where = (void **)((char *)x + r->offset);
#if USLAB_HARDENED
	uintptr_t mask = r->fp_key ^ __builtin_bswap64((uintptr_t)where);
	if (unlikely(!(((uintptr_t)*where ^ mask) & FP_NOT_LINK)))
		return false;
	*where = (void *)mask;   /* NULL, encoded */
#else
	*where = NULL;
#endif
	return true;
}

/* x (of d, checked and marked) onto this CPU's part at `slot`, or through
 * the slow path when the push cannot finish: the end of every per-CPU free
 * (the inline one below, and dispatch.c's for a slab's later slot). */
static inline __attribute__((always_inline)) void pcpu_push_marked(struct uslab_cache *named, struct slab *d,
								   void *x, uintptr_t slot)
{
	track_free(x, d->cache->object_size);
	if (likely(pcpu_push(slot, x)))
		return;
	pcpu_free_marked(named, d, x);
}

/*
 * Free of x (of slab d, a live slab of r's) on the per-CPU backend: checked
 * and marked first, then pushed by a sequence (the mark cannot be in it: a
 * restart would find its own mark and call it a double free). A push that
 * cannot finish (main full, or no part on this CPU) goes to the slow path
 * with x marked; a check that fails gets its verdict there.
 */
static inline __attribute__((always_inline)) void pcpu_free_fast(struct uslab_cache *named,
								 const struct uslab_cache *r, struct slab *d,
								 void *x, uintptr_t slot)
{
	if (likely(pcpu_offset_ok(r, d, ((uintptr_t)x & SLOT_MASK) - d->colour)) && likely(pcpu_mark(r, x))) {
		pcpu_push_marked(named, d, x, slot);
		return;
	}
	cpu_free_other(named, d, x);
}

/*
 * Every other live slab's object, on parts of threads: push onto main when it has room
 * (sheaves: any object of the cache, not marked free already), onto the
 * CPU free list when x is in the CPU slab (classic: a range and boundary
 * check, not the list head); else out of line (remote frees of home and
 * slqb, slqb's queue, full sheaves). d: the record of x's slot, a live
 * slab's (SK_SLAB), its cache checked by the caller, so x is in the slab's
 * first slot; cid: d->cid, which
 * the cache API passes from the cache it was given (checked to be d's):
 * the part's address then does not wait for x's descriptor, so the next
 * allocation's loads of main are not held up behind the stores to it
 * (2026-11-24: the sheaves and slab pair 10.0 -> 5.2 ns).
 */
static inline __attribute__((always_inline)) void slab_free_fast_tls(struct uslab_cache *named, struct slab *d,
								  void *x, unsigned cid)
{
	struct cpu_cache *c = cpu_this_id(cid);
	uint32_t n = c->n;
	uintptr_t off = ((uintptr_t)x & SLOT_MASK) - d->colour;   /* (SLAB-format slabs start at their colour) */
	if (likely(n < c->cap)) {
		if (likely(cpu_offset_ok(c, d, off)) && likely(cpu_fp_swap(c, x, NULL))) {   /* NULL: the mark */
			track_free(x, d->cache->object_size);
			c->objs[n] = x;
			cpu_order();
			cpu_set_n(c, n + 1);
			cpu_tick(&c->free_pcs);
			return;
		}
	} else if (d == c->slab) {
		if (likely(cpu_offset_ok(c, d, off)) && likely(cpu_fp_swap(c, x, c->freelist))) {
			track_free(x, d->cache->object_size);
			cpu_order();
			c->freelist = x;
			cpu_tick(&c->free_fast);
			return;
		}
	}
	cpu_free_other(named, d, x);
}

/*
 * free() of x whose slot record is d (x in one of our segments): per-CPU
 * parts first (the default: sheaves on parts of CPUs, whose slabs no
 * thread owns, so the owner tag is not looked at), then a slab this thread
 * owns (home), then the thread's part. Other kinds go to `other`.
 */
static inline __attribute__((always_inline)) void slab_free_fast_rec(struct slab *d, void *x,
								  void (*other)(void *, struct slab *))
{
	struct uslab_cache *r = d->cache;   /* NULL unless d is a slab's own record (page.h): the kind check */
	if (likely(r != NULL)) {
		uintptr_t slot = atomic_load_explicit(&r->pcpu_slot, memory_order_relaxed);
		if (likely(slot)) {
			pcpu_free_fast(NULL, r, d, x, slot);
			return;
		}
		if (atomic_load_explicit(&d->otag, memory_order_relaxed) == cpu_tls.tag) {
			home_free_fast(d, x);
			return;
		}
		slab_free_fast_tls(NULL, d, x, d->cid);
		return;
	}
	other(x, d);
}

/* uslab_cache_free(): x != NULL. The record's cache must be s's root
 * (else the slow path reports the wrong cache, or takes a KFENCE object,
 * or an object in a later slot of a slab of several). */
static inline __attribute__((always_inline)) void slab_free_fast(struct uslab_cache *s, void *x)
{
	if (unlikely(!page_ours(x))) {
		cpu_free_other(s, &slab_foreign, x);   /* (a KFENCE object, misuse) */
		return;
	}
	struct slab *d = slab_record(x);
	uintptr_t slot = atomic_load_explicit(&s->pcpu_slot, memory_order_relaxed);   /* (s's line: loaded already) */
	if (likely(slot)) {
		/* (d->cache == s->real stands for the kind check: only a slab's
		 * own record names a cache, page.h) */
		if (likely(d->cache == s->real))
			pcpu_free_fast(s, s, d, x, slot);   /* (an alias has its root's slot) */
		else
			cpu_free_other(s, d, x);
		return;
	}
	if (likely(atomic_load_explicit(&d->otag, memory_order_relaxed) == cpu_tls.tag) && likely(d->cache == s->real)) {
		/* this thread owns d, a slab of s: its part of s is the owner,
		 * found from s (an alias has its root's id) while d loads */
		home_free_fast_c(cpu_this(s), d, x);
		return;
	}
	if (likely(d->cache == s->real)) {   /* (and so SK_SLAB, as above) */
		slab_free_fast_tls(s, d, x, s->real->id);   /* (= d->cid, without waiting for d) */
		return;
	}
	cpu_free_other(s, d, x);
}

#endif
