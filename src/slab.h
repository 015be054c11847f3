/*
 * The slab layer's types: caches, the node part (partial list and barn),
 * the CPU part (sheaves, or the classic CPU slab), sheaves, and the slab
 * word. Shared by slab.c (the core), sheaf.c (sheaves and barn),
 * cpu_slab.c (classic mode), cpu_tls.c, bulk.c, cache.c, stats.c, debug.c.
 *
 * Two per-CPU modes, chosen per cache by its sheaf_capacity tunable:
 *   sheaves (capacity > 0, the default): the CPU part holds two arrays of
 *     object pointers, main and spare; alloc pops main, free pushes onto it,
 *     neither touches the object or its slab (the 2010 queuing thread, as
 *     Linux 7.0 does it). sheaf.c.
 *   classic (capacity 0): SLUB as of the 2011 per-CPU partial lists thread:
 *     a CPU slab whose free list the CPU pops and pushes, a CPU partial list
 *     bounded by cpu_partial, lockless frees by CAS on the slab word.
 *     cpu_slab.c. The reference mode for the experiments.
 * Debug caches have neither: every operation takes the node-locked slab
 * path in slab.c, with debug.c's hooks.
 */
#ifndef USLAB_SLAB_H
#define USLAB_SLAB_H

#include <pthread.h>
#include <stddef.h>

#include "internal.h"
#include "page.h"
#include "track.h"

#define SLAB_MAX_OBJECTS   32767   /* per slab, as the kernel's MAX_OBJS_PER_PAGE */
#define SLUB_MAX_ORDER_DEFAULT 3   /* PAGE_ALLOC_COSTLY_ORDER */
#define CACHE_ID_MAX       65536   /* live caches at once */
#define SHEAF_MAX_CAPACITY 508     /* largest sheaf_capacity (a sheaf is then one page) */
#define BARN_MAX_SHEAVES   1024    /* largest barn bound */

/* ---- the slab word: free list, inuse, frozen -------------------------- */
/*
 * SLUB changes a slab's free-list head and its counters together with a
 * double-word cmpxchg. Here they fit one 64-bit word: the head as its byte
 * offset in the segment (0 = empty list; offset 0 is the segment header and
 * never an object), inuse, and frozen (classic mode: the slab is some CPU
 * part's CPU slab or on its CPU partial list, and only that CPU allocates
 * from it or moves it between lists). Sheaves never freeze slabs.
 */
#define FC_OFF_BITS    22
#define FC_INUSE_SHIFT 22
#define FC_INUSE_MASK  0xffffULL
#define FC_FROZEN      (1ULL << 38)

static inline void *fc_freelist(uint64_t fc, const struct slab *slab)
{
	uint64_t off = fc & ((1ULL << FC_OFF_BITS) - 1);
	return off ? (char *)page_segment(slab) + off : NULL;
}
static inline unsigned fc_inuse(uint64_t fc) { return (unsigned)((fc >> FC_INUSE_SHIFT) & FC_INUSE_MASK); }
static inline bool fc_frozen(uint64_t fc) { return fc & FC_FROZEN; }
/* A word with the given list, inuse and frozen bit. Every caller computes
 * inuse from a checked count (0 .. objects), so it never spills into the
 * frozen bit. */
static inline uint64_t fc_make(const void *freelist, unsigned inuse, bool frozen)
{
	uint64_t off = freelist ? (uintptr_t)freelist & SEG_MASK : 0;
	return off | ((uint64_t)(inuse & FC_INUSE_MASK) << FC_INUSE_SHIFT) | (frozen ? FC_FROZEN : 0);
}

/* ---- sheaves ---------------------------------------------------------- */
/*
 * A sheaf: an array of object pointers. A CPU part's `main` sheaf is where
 * its allocations pop and its frees push; `spare` is a second one to swap
 * with; the barn keeps more of them per cache. A sheaf that is main keeps
 * its count in the CPU part (c->n), its `size` is stale meanwhile.
 */
struct sheaf {
	/* The header is objects[-4 .. -1]: none of its words is ever an object
	 * pointer of a user cache (a sheaf pointer, two small counts, NULL),
	 * so the free fast path can compare x with objects[n - 4 .. n - 1]
	 * without a bound check at n < 4. */
	struct sheaf *next;        /* barn list link */
	uint32_t size;             /* objects held (not while main: see c->n) */
	uint32_t cap;              /* entries in objects[] */
	void *guard[2];            /* always NULL */
	void *objects[];
};
_Static_assert(offsetof(struct sheaf, objects) == 4 * sizeof(void *), "objects[-4 .. -1] is the header");

/* Is x among this thread's last SHEAF_RECENT frees onto main (or the
 * objects on top of it)? Four compares, one branch: the cheap double-free
 * check of sheaves mode (free(a); free(b); free(a) included). */
#define SHEAF_RECENT 4
static inline bool sheaf_recent(void *const *objs, uint32_t n, const void *x)
{
	void *const *top = objs + n;
	return (top[-1] == x) | (top[-2] == x) | (top[-3] == x) | (top[-4] == x);
}

/* ---- the node part (one node: user space has no NUMA placement yet) ----- */
/*
 * The barn: full and empty sheaves that CPU parts trade their own for.
 * Frees by threads that did not allocate (consumers) fill sheaves that
 * travel back to allocating threads (producers) through it, whole.
 */
struct barn {
	/* lock protects: both lists (via sheaf->next) and the counts. A leaf
	 * lock: nothing else is taken while it is held (sheaves are flushed and
	 * freed after it is released). */
	pthread_mutex_t lock;
	struct sheaf *full, *empty;
	_Atomic unsigned nr_full, nr_empty;   /* written under lock, peeked without */
	_Atomic unsigned long objects;        /* objects in the full sheaves (statistics) */
	_Atomic unsigned long gets;           /* full sheaves taken so far (lock held) */
	unsigned long seen_gets;              /* gets at the last decay pass (cache_mutex) */
};

struct node {
	/* list_lock protects: the partial list, nr_partial, slab->on_node and
	 * slab->next/prev of listed slabs. Taken before any slab CAS (lock
	 * order: node list_lock -> slab CAS -> page lock). */
	pthread_mutex_t list_lock;
	struct slab *partial_head, *partial_tail;
	_Atomic unsigned long nr_partial; /* slabs on the partial list (written under list_lock, peeked without) */
	/* Empty slabs kept for reuse (home and slqb give theirs back here;
	 * list_lock): newest first, each stamped when it came (free_time), so
	 * that a slab that empties and is wanted again within decay_ms costs no
	 * trip through the page allocator and no new free list. Bounded by
	 * decay_ms and, with the page allocator's dirty pages, by
	 * decay_dirty_max (slab_keep_empty). */
	struct slab *empty_head, *empty_tail;
	_Atomic unsigned long nr_empty;
	_Atomic long nr_slabs;          /* slabs of the cache that exist */
	_Atomic long total_objects;     /* object slots in those slabs */
	struct barn barn;
};

/* ---- the CPU part: one per thread and cache (kmem_cache_cpu) ---------- */
/*
 * Per-CPU modes (a cache's cpu_mode tunable; each part runs the mode it was
 * set up with until its next slow path sees the tunable changed):
 *   CPU_CLASSIC  SLUB's CPU slab and CPU partial lists (the 2011 thread):
 *                cpu_slab.c.
 *   CPU_SHEAVES  sheaves and the barn (SLUB+Q 2010, Linux 7.0): sheaf.c.
 *   CPU_HOME     slabs owned by the part, local frees straight to their
 *                slab, remote frees batched home (SLQB v2's page lists,
 *                mimalloc's pages): cpu_home.c.
 *   CPU_SLQB     SLQB as compared in 2009: the same ownership plus a LIFO
 *                object queue bounded by hiwater: cpu_home.c.
 */
enum cpu_mode { CPU_CLASSIC = 0, CPU_SHEAVES = 1, CPU_HOME = 2, CPU_SLQB = 3, CPU_NR_MODES };
#define CPU_MODE_DEFAULT CPU_HOME   /* chosen by measurement: README, "Choosing the default" */

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
static inline uint64_t cpu_ctr(const uint64_t *ctr)
{
	return __atomic_load_n(ctr, __ATOMIC_RELAXED);
}

struct cpu_cache {
	/* Line 0 (the struct is two lines aligned): everything the fast
	 * paths read, in every mode. */
	void *freelist;                 /* classic: the CPU slab's objects this CPU may take; home: the
	                                 * current slab's; slqb: the object queue (obfuscated links) */
	struct slab *slab;              /* classic: the CPU slab (frozen); home: the current slab; or
	                                 * NULL. Relaxed atomic stores: statistics readers peek */
	uintptr_t slab_base;            /* first object of `slab` (0 without a slab) */
	uint32_t slab_span;             /* bytes of object slots in `slab` (0 without) */
	uint32_t offset;                /* the cache's free-pointer offset (a copy: one line less) */
	uintptr_t fp_key;               /* the cache's free-pointer key (a copy) */
	uint64_t divmagic;              /* the cache's boundary multiplier (a copy) */
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
	 * child leaves such a part of a vanished thread alone (cpu_tls.c) */
	uint8_t busy;
	/* slqb: objects on the queue = qadj + free_fast - alloc_fast (the
	 * inline pop keeps no count of its own; slow paths adjust qadj) */
	int64_t qadj;
	struct uslab_cache *cache;      /* owner; NULL once destroy took it back */

	/* Ownership (home, slqb; cpu_home.c): the slabs this part owns other
	 * than `slab`, on doubly linked lists through slab->next/prev. */
	struct own_list {
		struct slab *head, *tail;
	} own_partial,                  /* owned slabs with objects on their lfree (FIFO) */
	  own_full;                     /* owned slabs with every object out */
	uint32_t own_slabs;             /* slabs owned, `slab` included (relaxed: stats peek) */
	uint32_t own_empty;             /* owned slabs on own_partial with no object out */
	/* The remote batch (SLQB's rlist): objects of slabs another part
	 * owns, chained through their free pointers, for one destination. */
	struct cpu_cache *rdest;        /* the owner they go to, or NULL */
	void *rhead, *rtail;
	uint32_t rn;                    /* objects in the batch */
	uint32_t hiwater;               /* slqb: queue bound; home: remote batch size */
	uint32_t freebatch;             /* slqb: objects a queue flush moves; remote batch size */

	/* Sheaves. */
	struct sheaf *main;             /* main (objs/n mirror it) */
	/* spare, or NULL. Taken by atomic exchange, by the owner (to use it)
	 * or by another thread taking memory back from an idle owner
	 * (decay.c). */
	struct sheaf *_Atomic spare;
	_Atomic uint32_t spare_n;       /* objects in the sheaf in `spare` (RMW by both) */
	uint32_t sheaf_cap;             /* the capacity this part runs with */

	/* Taking memory back from idle threads (decay.c): the owner counts its
	 * slow paths; a pass that finds the count unchanged since the last one
	 * takes the spare and sets flush_req, which the owner acknowledges on
	 * its next slow path by giving everything back. */
	_Atomic uint64_t slow_ops;
	uint64_t seen_ops;              /* slow_ops at the last pass (cache_mutex) */
	_Atomic bool flush_req;
	/* classic: the CPU partial list (frozen slabs, via slab->next), and
	 * the free objects they held when they were put there (the 2011
	 * thread's pobjects), bounded by cpu_partial. */
	struct slab *partial;
	unsigned partial_free;
	/* Event counters. Only the owning thread writes them, with relaxed
	 * load+store (no read-modify-write); readers sum them. */
	_Atomic uint64_t stat[USLAB_NR_STAT_ITEMS];
	struct cpu_cache *cnext, *cprev;/* the cache's list of CPU parts (cache_mutex) */

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

/* ---- a cache (kmem_cache) ---------------------------------------------- */
struct uslab_cache {
	/* read-only after creation; the fast paths use the first line */
	unsigned id;               /* index in each thread's CPU part array */
	unsigned size;             /* stride of objects in a slab: object, free pointer, padding */
	unsigned offset;           /* free pointer's offset in a free object */
	unsigned object_size;      /* size given at creation */
	uint64_t divmagic;         /* ceil(2^64 / size): x % size == 0 iff x * divmagic <= divmagic - 1 */
	struct uslab_cache *real;  /* the cache whose slabs hold the objects: root, or itself */
	uintptr_t fp_key;          /* random key of free pointer obfuscation */
	unsigned align;            /* effective alignment */
	/* preferred order << 16 | objects per slab of that order, in one word
	 * so that the order tunable changes both at once (kmem_cache's oo) */
	_Atomic uint32_t oo;
	uint8_t min_order;         /* fallback order: smallest that holds an object */
	uint16_t min_objects;      /* objects in a slab of `min_order` */
	unsigned long flags;
	void (*ctor)(void *);
	/* slub_debug (debug.c). Debug caches have no CPU parts: every operation
	 * takes the node-locked slab path, as in the kernel; other caches' fast
	 * paths do not look at these fields. */
	unsigned debug;            /* DBG_* letters on */
	unsigned red_left_pad;     /* bytes before each object (Z); 0 otherwise */
	unsigned meta_off;         /* from the object: right red zone end = free pointer (debug) */
	unsigned track_off;        /* from the object: alloc and free tracks (U) */
	unsigned orig_off;         /* from the object: requested size (Z, kmalloc slack) */
	uint16_t *random_seq;      /* slab_freelist_random: shuffled object order, or NULL */
	unsigned random_seq_len;
	/* Tunables: written by setters, read without locks by the slow paths
	 * (relaxed atomics: a stale value for one operation is harmless, as in
	 * SLUB's sysfs tunables). */
	_Atomic unsigned cpu_mode;          /* enum cpu_mode of its CPU parts */
	_Atomic unsigned sheaf_capacity;    /* sheaves mode: objects per sheaf; 0 = classic mode */
	_Atomic unsigned barn_full_max;     /* full sheaves the barn keeps */
	_Atomic unsigned barn_empty_max;    /* empty sheaves the barn keeps */
	_Atomic unsigned cpu_partial;       /* classic: free objects kept on CPU partial lists; 0 = none */
	_Atomic unsigned long min_partial;  /* empty slabs kept on the node list */
	_Atomic unsigned freebatch;         /* home, slqb: remote batch size; slqb: objects a queue flush moves */
	_Atomic unsigned hiwater;           /* slqb: objects the queue holds before a flush */

	struct node node;
	struct cpu_cache *cpu_list;            /* CPU parts of live threads (cache_mutex) */
	/* Parts whose threads exited (cache_mutex): kept, not freed, because a
	 * remote freer may still push to one's inbox (cpu_home.c); the next
	 * thread that needs a part takes one from here. */
	struct cpu_cache *cpu_dead;
	_Atomic uint64_t stat_gone[USLAB_NR_STAT_ITEMS]; /* counters of CPU parts gone, and of CPU-less paths */
	struct uslab_cache *next, *prev;       /* all real caches (cache_mutex) */
	bool internal;                         /* uslab's own metadata cache */
	/* Merging. An alias is a small cache of its own (name, requested size)
	 * that shares its root's id, stride and free pointer, so the fast
	 * paths run unchanged on the root's CPU parts; everything else works
	 * on the root. (cache_mutex protects the lists and counts.) */
	struct uslab_cache *root;              /* alias: the real cache; NULL for a real cache */
	struct uslab_cache *aliases;           /* real cache: its aliases, via alias_next */
	struct uslab_cache *alias_next;
	unsigned refs;                         /* real cache: 1 for itself (until destroyed) + aliases */
	bool destroyed;                        /* real cache: its creator destroyed it, aliases live on */
	char name[USLAB_NAME_MAX + 1];
};

static inline unsigned oo_order(uint32_t oo) { return oo >> 16; }
static inline unsigned oo_objects(uint32_t oo) { return oo & 0xffff; }
static inline uint32_t cache_oo(const struct uslab_cache *s)
{
	return atomic_load_explicit(&s->oo, memory_order_relaxed);
}
#define TUNE(s, field) atomic_load_explicit(&(s)->field, memory_order_relaxed)
#define TUNE_SET(s, field, v) atomic_store_explicit(&(s)->field, (v), memory_order_relaxed)

/* The per-CPU mode s's parts should run: cpu_mode, but sheaves with
 * sheaf_capacity 0 is classic (that tunable's old meaning). */
static inline unsigned cache_cpu_mode(const struct uslab_cache *s)
{
	unsigned m = TUNE(s, cpu_mode);
	return m == CPU_SHEAVES && !TUNE(s, sheaf_capacity) ? (unsigned)CPU_CLASSIC : m;
}

/* The real cache behind s (s itself unless s is an alias). */
static inline struct uslab_cache *cache_root(struct uslab_cache *s)
{
	return s->real;
}

/* ---- per-object helpers ----------------------------------------------- */
/*
 * Free pointers are stored obfuscated (CONFIG_SLAB_FREELIST_HARDENED): the
 * pointer xor a per-cache random key xor the byte-swapped address it is
 * stored at, so a leaked or overwritten free pointer is useless to an
 * attacker and a corrupted one decodes to garbage that the checks catch.
 * USLAB_HARDENED=0 builds store them plain (to measure what it costs).
 */
#ifndef USLAB_HARDENED
#define USLAB_HARDENED 1
#endif
static inline uintptr_t fp_mask(const struct uslab_cache *s, const void *where)
{
#if USLAB_HARDENED
	return s->fp_key ^ __builtin_bswap64((uintptr_t)where);
#else
	(void)s, (void)where;
	return 0;
#endif
}
static inline void *get_freepointer(const struct uslab_cache *s, void *obj)
{
	void **where = (void **)((char *)obj + s->offset);
	return (void *)((uintptr_t)*where ^ fp_mask(s, where));
}
static inline void set_freepointer(const struct uslab_cache *s, void *obj, void *next)
{
	void **where = (void **)((char *)obj + s->offset);
	*where = (void *)((uintptr_t)next ^ fp_mask(s, where));
}
/*
 * The double-free mark. A free object's free-pointer word holds an
 * obfuscated link (NULL or another free object); every allocation path
 * overwrites it before the object is handed out (FP_TAKEN, or 0 on the fast
 * path), and every free reads it before anything else, as glibc's tcache
 * reads its key: if it still decodes to something that could be a link, the
 * object may already be free. Two steps:
 *   - the filter (inline, on data the free loads anyway): the decoded word
 *     is NULL or an aligned user-space pointer (FP_NOT_LINK bits clear);
 *     user data decodes through the cache's random key to noise, which
 *     passes one time in about 2^20;
 *   - then, out of line, the verdict: NULL or an object of the same cache
 *     is a link (noise lands there one time in about 2^40), and the free is
 *     reported as a double free; anything else was noise, and the free goes
 *     on.
 * So a double free is caught at any distance, in every mode, as long as
 * the object is still free: on a CPU free list, a slab's list, an owned
 * slab's list, a remote batch or inbox, an SLQB queue. (Objects in a
 * sheaf carry no link: there the last four frees are compared instead.)
 * Only obfuscated builds check: without the key, user data that holds a
 * pointer to another object of the cache would read as a link.
 */
#define FP_TAKEN ((void *)0x7ace)   /* an odd value: never a link */
#define FP_NOT_LINK 0xffff800000000007ULL   /* bits a link never has (8-aligned, below 2^47) */
USLAB_HIDDEN void fp_double_free(struct uslab_cache *s, struct slab *slab, void *x);
/* A free of x (an object of s, slab its descriptor) that is about to write
 * x's free pointer: reported (fatal) if x is free already. */
static inline void fp_check_free(struct uslab_cache *s, struct slab *slab, void *x)
{
#if USLAB_HARDENED
	if (unlikely(!((uintptr_t)get_freepointer(s, x) & FP_NOT_LINK)))
		fp_double_free(s, slab, x);   /* returns if it was noise */
#else
	(void)s, (void)slab, (void)x;
#endif
}
static inline void *slab_base(const struct slab *slab) { return page_address(slab); }
/* The first object of a slab: after the left red zone of debug caches. */
static inline char *slab_first(const struct uslab_cache *s, const struct slab *slab)
{
	return (char *)page_address(slab) + s->red_left_pad;
}

/* Is `off` (< 2^32) a multiple of the object stride? One multiply (Lemire's
 * divisibility test), no division. */
static inline bool obj_offset_ok(const struct uslab_cache *s, uintptr_t off)
{
	return (uint64_t)off * s->divmagic <= s->divmagic - 1;
}

/* Is x the start of an object of this slab? */
static inline bool slab_obj_valid(const struct uslab_cache *s, const struct slab *slab, const void *x)
{
	uintptr_t off = (uintptr_t)x - (uintptr_t)slab_first(s, slab);
	return off < ((uintptr_t)slab->objects * s->size) && obj_offset_ok(s, off);
}

/* Is x an object of a live slab of cache s (a real cache without debug
 * padding: red_left_pad 0)? The sheaf free path's check: kind, cache and
 * object boundary, all from the descriptor's line and s's first line. */
static inline bool slab_owns(const struct uslab_cache *s, const struct slab *slab, const void *x)
{
	uintptr_t off = (uintptr_t)x - (uintptr_t)page_address(slab);
	return likely(slab->cache == s) && likely(page_kind(slab) == PK_SLAB) &&
	       likely(off < (uintptr_t)slab->objects * s->size) && likely(obj_offset_ok(s, off));
}

/* ---- hardened mode: the live bit of every object ------------------------- */
/*
 * USLAB_OPTIONS=hardened: every allocation sets the object's bit in its
 * segment's live map and every free clears it, atomically, so that a free
 * of anything not live (a double free at any distance, an object sitting in
 * a sheaf, a never-allocated slot) is caught before it can do harm, and an
 * object handed out while live (corrupted state) too. The fast paths do not
 * know: in hardened mode no thread's fast-path pointers are ever set
 * (cpu_tls.c), so every operation takes the slow paths, which check here.
 */
static inline _Atomic uint64_t *live_word(const void *x, uint64_t *bit)
{
	uintptr_t g = ((uintptr_t)x & SEG_MASK) >> 3;
	*bit = 1ULL << (g % 64);
	return &page_segment(x)->live[g / 64];
}
/* Mark x live; false if it was live already. */
static inline bool live_set(const void *x)
{
	uint64_t bit;
	_Atomic uint64_t *w = live_word(x, &bit);
	return !(atomic_fetch_or_explicit(w, bit, memory_order_relaxed) & bit);
}
/* Mark x free; false if it was not live. */
static inline bool live_clear(const void *x)
{
	uint64_t bit;
	_Atomic uint64_t *w = live_word(x, &bit);
	return atomic_fetch_and_explicit(w, ~bit, memory_order_relaxed) & bit;
}

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
USLAB_HIDDEN _Noreturn void slab_bad_freelist(struct uslab_cache *s, const void *obj, const void *next);
/* The same, typed for a tail call from the alloc fast path; never returns. */
USLAB_HIDDEN void *slab_freelist_corrupt(struct uslab_cache *s, const void *obj, const void *next);

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

/* ---- slab.c: the slab core ------------------------------------------------ */
USLAB_HIDDEN _Noreturn void slab_bad_free(struct uslab_cache *s, struct slab *slab, const void *x, const char *why);
/* Every allocation and free that the fast paths do not finish. `caller`:
 * the return address of the API call, for slub_debug's U and T; `asked`:
 * the size a kmalloc caller wants (0: the object size), for debug caches. */
USLAB_HIDDEN void *slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c, void *caller, size_t asked);
USLAB_HIDDEN void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *x, struct cpu_cache *c,
				 void *caller);
/* Debug caches: every operation under the node lock, through debug.c's
 * hooks; `counted_as` is the event a success counts (ALLOC/FREE_SLOWPATH,
 * or _BULK). x is checked to be an object of s. */
USLAB_HIDDEN void *slab_debug_alloc(struct uslab_cache *s, void *caller, enum uslab_stat_item counted_as,
				    size_t asked);
USLAB_HIDDEN void slab_debug_free(struct uslab_cache *s, struct slab *slab, void *x, void *caller,
				  enum uslab_stat_item counted_as);
/* Every object an allocation path returns goes through here: in hardened
 * mode it is marked live (fatal if it was). Returns x. */
USLAB_HIDDEN void *slab_hand_out(struct uslab_cache *s, void *x);
/* A slow path is about to use part c of s: count it, acknowledge a
 * take-back request (decay.c), switch modes if sheaf_capacity changed. */
USLAB_HIDDEN void slab_cpu_enter(struct uslab_cache *s, struct cpu_cache *c);
/* Allocate/free without a CPU part (metadata caches, exiting threads). */
USLAB_HIDDEN void *slab_alloc_nocpu(struct uslab_cache *s);
USLAB_HIDDEN void slab_free_nocpu(struct uslab_cache *s, void *x);
/* Take up to `want` (>= 1) objects off slabs into objs[]: node partial
 * slabs first, several in one lock hold, then at most one new slab.
 * Returns how many (0: no memory). c may be NULL (for the counters). */
USLAB_HIDDEN unsigned slab_take_objects(struct uslab_cache *s, struct cpu_cache *c, void **objs, unsigned want);
/* Free n objects (checked, of cache s) to their slabs, grouped by slab:
 * one CAS per slab, the node lock (one hold) only for slabs that change
 * list. `freeze`: classic part c may freeze full slabs onto its partial
 * list (SLUB); sheaves never do. */
USLAB_HIDDEN void slab_free_objects(struct uslab_cache *s, struct cpu_cache *c, void *const *objs, unsigned n,
				    bool freeze);
/* Free the chain head..tail of cnt objects of one slab: one CAS, the node
 * lock if the slab changes list. `freeze` as above. */
USLAB_HIDDEN void slab_free_chain(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head,
				  void *tail, unsigned cnt, bool freeze);
/* A new slab with all objects on one list: frozen for classic part c (the
 * list in *chain, inuse = objects) or, with chain NULL, unfrozen with the
 * list in the slab (inuse 0). */
USLAB_HIDDEN struct slab *slab_new(struct uslab_cache *s, struct cpu_cache *c, void **chain);
USLAB_HIDDEN void slab_discard(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab);
/* node partial list; list_lock held */
USLAB_HIDDEN void add_partial_locked(struct node *n, struct slab *slab, bool tail);
USLAB_HIDDEN void remove_partial_locked(struct node *n, struct slab *slab);
USLAB_HIDDEN void slab_node_lock(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void slab_node_unlock(struct uslab_cache *s);
/* The slab word's compare-and-swap (always locked: slab.c). */
USLAB_HIDDEN bool slab_cas(struct slab *slab, uint64_t *old, uint64_t new);
/* Give a CPU part's objects and slabs back (owner, or cache_mutex holder
 * when the owner cannot be running on this cache): sheaves or classic. */
USLAB_HIDDEN void slab_flush_cpu(struct uslab_cache *s, struct cpu_cache *c);
/* Free every empty slab on the node lists. Returns the number freed. */
USLAB_HIDDEN unsigned long slab_shrink_node(struct uslab_cache *s);
/* Free the empty slabs kept longer than decay_ms. */
USLAB_HIDDEN void slab_decay_empty(struct uslab_cache *s);
/* Keep an empty, unowned, unfrozen slab (its whole list in its word) on
 * the node's empty list, or free it when the budget is spent. */
USLAB_HIDDEN void slab_keep_empty(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab);
/* An empty slab from the node's empty list (unlisted, its whole list in its
 * word), or NULL. */
USLAB_HIDDEN struct slab *slab_take_empty(struct uslab_cache *s, struct cpu_cache *c);
/* Live objects, counted from the slabs; objects in sheaves and barns count
 * as live (they are, to the slabs). */
USLAB_HIDDEN unsigned long slab_count_live(struct uslab_cache *s);
/* A hook the allocation slow path calls when set (export.c registers it,
 * so the core never calls up into the export by name). */
extern void (*_Atomic slab_slow_hook)(void) USLAB_HIDDEN;
/* cache.c calls this hook (when set) after a cache is made or destroyed,
 * with no lock held (export.c: refresh the snapshot's list of caches). */
extern void (*_Atomic cache_list_hook)(void) USLAB_HIDDEN;

/* ---- sheaf.c: sheaves and the barn ---------------------------------------- */
/* The allocation/free slow paths of a part in sheaves mode: make room or
 * objects in main, then do the operation. */
USLAB_HIDDEN void *sheaf_alloc_slow(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void sheaf_free_slow(struct uslab_cache *s, struct cpu_cache *c, void *x);
/* Give main and spare back (to the barn if they fit, else the slabs). */
USLAB_HIDDEN void sheaf_flush_cpu(struct uslab_cache *s, struct cpu_cache *c, bool to_barn);
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
USLAB_HIDDEN void sheaf_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);

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
 * returns the ms until the next one is due (UINT64_MAX: nothing pending). */
USLAB_HIDDEN uint64_t mem_decay_pass(void);
/* The background thread (bgthread.c): sleeping with no deadline, and its
 * wake-up (registered by it). */
extern _Atomic bool mem_bg_sleeping USLAB_HIDDEN;
extern void (*_Atomic mem_bg_wake)(void) USLAB_HIDDEN;

/* ---- cpu_slab.c: classic mode ----------------------------------------------- */
/* Fill c->freelist (CPU slab from CPU partial list, node list or a new
 * slab); false when no memory can be had. */
USLAB_HIDDEN bool cpu_slab_refill(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void *cpu_slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void cpu_slab_free_slow(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *x);
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

/* ---- cpu_home.c: home and slqb modes (ownership, remote batches) ----------- */
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
USLAB_HIDDEN size_t home_alloc_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
/* The bulk API's paths for this thread's home part c of s (its mode
 * checked): as lean as single calls per call, leaner per object. The alloc
 * returns nr or 0 (nothing allocated, errno set); the free takes the
 * caller's array as it is (NULLs skipped, every object checked as a
 * single free would be, misuse reported). */
USLAB_HIDDEN size_t home_alloc_bulk_fast(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);
USLAB_HIDDEN void home_free_bulk_fast(struct uslab_cache *named, struct cpu_cache *c, size_t nr, void **objs);
USLAB_HIDDEN void home_free_bulk(struct uslab_cache *s, struct cpu_cache *c, size_t nr, void **objs);

/* ---- cpu_tls.c -------------------------------------------------------- */
/* What a thread keeps beside its CPU parts. */
#define CPU_INLINE_SLOTS 64
#define KMALLOC_CLASSES_MAX 48   /* kmalloc.h's KMALLOC_NR_CLASSES */
#define KMALLOC_SIZES_MAX 129    /* kmalloc.h's KMALLOC_SMALL_MAX / 8 + 1 */
struct cpu_thread {
	struct slab *slots_block;  /* page block holding the slots array, once it outgrew inline */
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
	uint32_t tag;              /* the tag of the slabs it owns (cpu_tls.c: unique among live threads) */
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
	uint32_t kf_left;          /* allocations until the next KFENCE sample; 0: off (kfence.h) */
	bool dead;                 /* exiting: no CPU parts any more */
	bool creating;             /* setting up the thread: no CPU parts yet */
	struct cpu_thread *thread;
};
#define CPU_TAG_NONE 2U
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
 * reads it on another CPU's copy; x86 emits nothing for it. */
static inline void cpu_busy(struct cpu_cache *c)
{
	__atomic_store_n(&c->busy, 1, __ATOMIC_RELAXED);
	atomic_thread_fence(memory_order_release);
}
static inline void cpu_idle(struct cpu_cache *c)
{
	__atomic_store_n(&c->busy, 0, __ATOMIC_RELEASE);
}

/* ---- options.c ---------------------------------------------------------- */
struct uslab_opts {
	bool nomerge;          /* slab_nomerge */
	unsigned max_order;    /* slub_max_order */
	unsigned min_order;    /* slub_min_order */
	unsigned min_objects;  /* slub_min_objects; 0: grows with the CPU count */
	int cpu_partial;       /* slub_cpu_partial; -1: per-size default */
	int sheaf_capacity;    /* slub_sheaf_capacity; -1: per-size default, 0: classic mode */
	int cpu_mode;          /* slub_cpu_mode; -1: CPU_MODE_DEFAULT (classic if slub_sheaf_capacity=0) */
	int barn_full;         /* slub_barn_full; -1: default */
	int barn_empty;        /* slub_barn_empty; -1: default */
	bool show_stats;       /* show_stats: print the stats table at exit */
	bool export_stats;     /* export: keep a stats file for uslabinfo */
	bool report_continue;  /* report_continue: report, leak the object, go on */
	bool freelist_random;  /* slab_freelist_random */
	bool hardened;         /* hardened: live bits, every operation on the slow paths */
	unsigned debug;        /* slub_debug letters (DBG_*) */
	char debug_caches[256];/* slub_debug's cache list, ",a,b," (empty: all caches) */
};
extern struct uslab_opts opt USLAB_HIDDEN;
USLAB_HIDDEN void options_init(void);
USLAB_HIDDEN void options_parse(const char *s);
USLAB_HIDDEN void options_apply_cache(struct uslab_cache *s);
/* A per-CPU mode by name ("classic", "sheaves", "home", "slqb"), or -1;
 * and a mode's name. */
USLAB_HIDDEN int cpu_mode_parse(const char *v, size_t n);
USLAB_HIDDEN const char *cpu_mode_name(unsigned mode);
/* Does USLAB_OPTIONS tune this cache by name ("NAME:key=value")? */
USLAB_HIDDEN bool options_names_cache(const char *name);
/* cache.c: set a tunable by name; -1 if the name or value is invalid */
USLAB_HIDDEN int cache_tune_set(struct uslab_cache *s, const char *name, unsigned long v);
/* cache.c: is `name` (n bytes) a tunable's name? */
USLAB_HIDDEN bool cache_tune_known(const char *name, size_t n);

/* ---- fork.c ---------------------------------------------------------------- */
USLAB_HIDDEN void fork_init(void);

/* ---- debug.c: slub_debug, as hooks on slab.c's node-locked path ------------ */
#define DBG_F 0x01   /* consistency checks */
#define DBG_Z 0x02   /* red zones */
#define DBG_P 0x04   /* poisoning */
#define DBG_U 0x08   /* alloc/free call-site tracking */
#define DBG_T 0x10   /* tracing */
/* Turn debug letters on for a new cache (from its flags and slub_debug=);
 * called before the layout is computed. */
USLAB_HIDDEN unsigned debug_flags_for(const char *name, unsigned long flags);
/* Lay out a debug cache's object: left pad, object, right red zone, free
 * pointer, tracks, requested size. Returns the stride before alignment. */
USLAB_HIDDEN size_t debug_layout(struct uslab_cache *s, size_t size, size_t align);
/* Initialize a new slab's objects (red zones inactive, poison, no tracks). */
USLAB_HIDDEN void debug_init_slab(struct uslab_cache *s, struct slab *slab);
/* slab.c took x off its slab for an allocation (node lock held): check it
 * and make it allocated (red zones, requested size, track, trace). Returns
 * NULL, or the bug found (x is then leaked: the caller reports it with
 * debug_report_done() after dropping the lock and takes another). */
USLAB_HIDDEN const char *debug_alloc_hook(struct uslab_cache *s, struct slab *slab, void *x, size_t asked,
					  void *caller);
/* slab.c is about to free x to its slab (node lock held): check it and, if
 * sound, make it free (track, poison, red zones, trace). Returns NULL, or
 * the bug found (x is then left alone: the caller reports it after
 * dropping the lock and does not free it). */
USLAB_HIDDEN const char *debug_free_hook(struct uslab_cache *s, struct slab *slab, void *x, void *caller);
/* Report a bug a hook found (aborts unless report_continue). No lock held. */
USLAB_HIDDEN void debug_report_done(struct uslab_cache *s, const void *x, const char *bug);
/* The size asked for object x (the object size if not known). */
USLAB_HIDDEN size_t debug_obj_size(struct uslab_cache *s, void *x);
/* Check every object of every slab (debug caches), reporting each bad one
 * once; returns the number of problems. Node lock held by the caller. */
USLAB_HIDDEN long debug_validate_locked(struct uslab_cache *s);
/* Print the alloc sites of live objects (destroy with live objects, U). */
USLAB_HIDDEN void debug_report_live(struct uslab_cache *s);
/* kmalloc: the size actually requested, so the slack up to the class size
 * is red zone too (Z). No-op for other caches. */
USLAB_HIDDEN void debug_set_orig_size(struct uslab_cache *s, void *obj, size_t size);
/* The USLAB_* flags of DBG_* letters. */
USLAB_HIDDEN unsigned long debug_public_flags(unsigned debug);
/* Order new slabs' free lists randomly (slab_freelist_random); release
 * the sequence when the cache goes. */
USLAB_HIDDEN void debug_random_seq(struct uslab_cache *s);
USLAB_HIDDEN void debug_cache_release(struct uslab_cache *s);

/* ---- export.c ------------------------------------------------------------- */
/* Issue 6 hook, called once from cache.c's init_once_fn() after
 * options_init(): starts the export when USLAB_OPTIONS has "export" (and
 * then sets slab_slow_hook). show_stats and the export's final snapshot
 * run from a destructor in export.c, so nothing is registered with atexit,
 * which may allocate. */
USLAB_HIDDEN void export_init(void);

/* ---- the fast paths ------------------------------------------------------ */
/*
 * Shared by the cache API and the malloc family; each stays on one screen.
 * Dependent loads, allocation: this thread's part (TLS, then an index),
 * its first line, the object (its free pointer). Free: the segment map
 * bit and the page's head index (in parallel), the descriptor, the owner
 * part's first line; the object's line is written.
 */
#include "kfence.h"

/* Free pointers through the part's copies of the cache's key and offset
 * (fp_mask() above, without loading the cache). */
static inline void *cpu_fp_get(const struct cpu_cache *c, void *x)
{
	void **where = (void **)((char *)x + c->offset);
#if USLAB_HARDENED
	return (void *)((uintptr_t)*where ^ c->fp_key ^ __builtin_bswap64((uintptr_t)where));
#else
	return *where;
#endif
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

/* Is off (< 2^32) the offset of one of slab d's objects, by the part's
 * copy of the stride's multiplier? One multiply gives both the remainder
 * test (the low half, Lemire's) and the quotient, the object's index (the
 * high half). */
static inline bool cpu_offset_ok(const struct cpu_cache *c, const struct slab *d, uintptr_t off)
{
	unsigned __int128 m = (unsigned __int128)c->divmagic * off;
	return (uint64_t)m <= c->divmagic - 1 && (uint64_t)(m >> 64) < d->objects;
}

/* A free pointer popped off `freelist` that is not NULL nor in the part's
 * slab: the SLQB queue's (which spans slabs: checked to be an object of
 * the cache, out of line) or a corrupted list (fatal). Pops x then. */
USLAB_HIDDEN void *cpu_pop_checked(struct uslab_cache *s, struct cpu_cache *c, void *x, void *next);

/* Pop `freelist` (classic, home, slqb), else main (sheaves): no lock, no
 * atomic read-modify-write. `asked`: the size a kmalloc caller wants, or
 * 0; only debug caches, which never get here, and KFENCE use it. */
static inline __attribute__((always_inline)) void *cpu_alloc_fast(struct uslab_cache *s, struct cpu_cache *c,
								size_t asked, void *caller)
{
	void *x = c->freelist;
	if (unlikely(cpu_tls.kf_left) && --cpu_tls.kf_left == 0)   /* KFENCE sampling on, and due */
		return kfence_alloc_slow(s, asked, caller);
	if (likely(x != NULL)) {
		void *next = cpu_fp_get(c, x);
		if (unlikely(!cpu_next_ok(c, next)))
			return cpu_pop_checked(s, c, x, next);   /* a tail call: no frame here */
		c->freelist = next;
		cpu_fp_scrub(c, x);
		cpu_tick(&c->alloc_fast);
		track_alloc(x, s->object_size);
		return x;
	}
	uint32_t n = c->n;
	if (likely(n)) {
		x = c->objs[n - 1];
		cpu_set_n(c, n - 1);
		cpu_tick(&c->alloc_pcs);
		track_alloc(x, s->object_size);
		return x;
	}
	return slab_alloc_slow(s, c, caller, asked);
}

static inline __attribute__((always_inline)) void *slab_alloc_fast_sized(struct uslab_cache *s, size_t asked)
{
	return cpu_alloc_fast(s, cpu_this(s), asked, __builtin_return_address(0));
}

static inline __attribute__((always_inline)) void *slab_alloc_fast(struct uslab_cache *s)
{
	return slab_alloc_fast_sized(s, 0);
}

/* home_free_fast()'s way out: d is owned by this thread's part (its tag
 * matched), but the free changes the slab's list, or is misuse. */
USLAB_HIDDEN void home_free_local(struct slab *d, void *x);

/* Every free the inline paths do not finish (a full sheaf, a remote free,
 * an SLQB queue push, the transitions of an owned slab, misuse), with x's
 * descriptor d (any kind). `named`: the cache the caller named, or NULL
 * (free()). Called last, so that its return address is the API call's
 * (for slub_debug's call sites and KFENCE reports). */
USLAB_HIDDEN void cpu_free_other(struct uslab_cache *named, struct slab *d, void *x);

/*
 * Free of x into a slab this thread owns (home mode: d->otag matched the
 * thread's tag, so d is a live slab and c its owner, this thread's part):
 * the current slab's objects onto `freelist`, others onto the slab's own
 * list, no lock, no atomic. A slab that becomes empty or was full changes
 * lists: the slow path, as misuse (a boundary, the head of the list).
 */
static inline __attribute__((always_inline)) void home_free_fast(struct slab *d, uintptr_t base, void *x)
{
	struct cpu_cache *c = atomic_load_explicit(&d->owner, memory_order_relaxed);
	if (likely(cpu_offset_ok(c, d, (uintptr_t)x - base))) {
		if (d == c->slab) {
			if (likely(cpu_fp_swap(c, x, c->freelist))) {
				track_free(x, c->cache->object_size);
				c->freelist = x;
				cpu_tick(&c->free_fast);
				return;
			}
		} else {
			unsigned used = d->pfree;
			if (likely(used - 2 < (unsigned)d->objects - 2) && likely(cpu_fp_swap(c, x, d->lfree))) {
				track_free(x, c->cache->object_size);   /* (used 2 .. objects-1: no list moves) */
				d->lfree = x;
				d->pfree = (uint16_t)(used - 1);
				cpu_tick(&c->free_fast);
				return;
			}
		}
	}
	home_free_local(d, x);
}

/*
 * Every other live slab's object: push onto main when it has room
 * (sheaves: any object of the cache; not among the last frees), onto the
 * CPU free list when x is in the CPU slab (classic: a range and boundary
 * check, not the list head); else out of line (remote frees of home and
 * slqb, slqb's queue, full sheaves). d: x's descriptor, kind checked,
 * its cache checked by the caller; base: its first byte.
 */
static inline __attribute__((always_inline)) void slab_free_fast_desc(struct uslab_cache *named, struct slab *d,
								   uintptr_t base, void *x)
{
	struct cpu_cache *c = cpu_this_id(d->cid);
	uint32_t n = c->n;
	uintptr_t off = (uintptr_t)x - base;
	if (likely(n < c->cap)) {
		if (likely(cpu_offset_ok(c, d, off)) && likely(!sheaf_recent(c->objs, n, x))) {
			track_free(x, d->cache->object_size);
			c->objs[n] = x;
			cpu_set_n(c, n + 1);
			cpu_tick(&c->free_pcs);
			return;
		}
	} else if (d == c->slab) {
		if (likely(cpu_offset_ok(c, d, off)) && likely(cpu_fp_swap(c, x, c->freelist))) {
			track_free(x, d->cache->object_size);
			c->freelist = x;
			cpu_tick(&c->free_fast);
			return;
		}
	}
	cpu_free_other(named, d, x);
}

/* uslab_cache_free(): x != NULL. The descriptor's cache must be s's root
 * (else the slow path reports the wrong cache, or takes a KFENCE object). */
static inline __attribute__((always_inline)) void slab_free_fast(struct uslab_cache *s, void *x)
{
	uintptr_t base;
	struct slab *d = page_obj_lookup(x, &base);
	if (likely(atomic_load_explicit(&d->otag, memory_order_relaxed) == cpu_tls.tag) && likely(d->cache == s->real)) {
		home_free_fast(d, base, x);
		return;
	}
	if (likely(page_kind(d) == PK_SLAB) && likely(d->cache == s->real)) {
		slab_free_fast_desc(s, d, base, x);
		return;
	}
	cpu_free_other(s, d, x);
}

/* ---- stats.c ---------------------------------------------------------- */
/* Fill a current-version snapshot of `named` (an alias reports its root's
 * numbers). cache_mutex held. (Issue 6: used by export.c.) */
USLAB_HIDDEN void stats_fill_info_locked(struct uslab_cache *named, struct uslab_cache_info *info);

/* ---- cache.c ---------------------------------------------------------- */
/* cache_mutex protects: the cache list, cache ids, every cache's cpu_list,
 * and stat_gone folding. Lock order: cache_mutex -> node list_lock -> page;
 * a barn lock is a leaf. */
extern pthread_mutex_t cache_mutex USLAB_HIDDEN;
extern struct uslab_cache *cache_list USLAB_HIDDEN;
USLAB_HIDDEN void cache_init(void);
extern struct uslab_cache cache_cache USLAB_HIDDEN;        /* struct uslab_cache */
extern struct uslab_cache cache_cpu_cache USLAB_HIDDEN;    /* struct cpu_cache */
extern struct uslab_cache cache_thread_cache USLAB_HIDDEN; /* struct cpu_thread */
/* Sheaf storage: internal caches of 128 .. 4096 bytes (sheaf.c). */
#define SHEAF_CACHES 6
extern struct uslab_cache cache_sheaf_cache[SHEAF_CACHES] USLAB_HIDDEN;

#endif
