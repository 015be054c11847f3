/*
 * The SLUB core's types: caches, the node part, the CPU part, and the
 * free-list/counter word of a slab. Shared by slab.c, cache.c, cpu_tls.c,
 * stats.c.
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
#define CPU_QUEUE_MAX      64      /* objects a CPU object queue can hold */

/* ---- the slab word: free list, inuse, frozen -------------------------- */
/*
 * SLUB changes a slab's free-list head and its counters together with a
 * double-word cmpxchg. Here they fit one 64-bit word: the head as its byte
 * offset in the segment (0 = empty list; offset 0 is the segment header and
 * never an object), inuse, and frozen (the slab belongs to some CPU part and
 * only that CPU allocates from it or moves it between lists).
 */
#define FC_OFF_BITS    22
#define FC_INUSE_SHIFT 22
#define FC_INUSE_MASK  0xffffULL
#define FC_FROZEN      (1ULL << 38)
/* Parked slabs (full, kept frozen by their CPU, see slab.c): the owner
 * sets PARKED to hear of the next free by another thread; that free clears
 * it and sets NOTIFYING while it hands its objects to the owner. PARKED
 * implies an empty list. */
#define FC_PARKED      (1ULL << 39)
#define FC_NOTIFYING   (1ULL << 40)
#define FC_FLAGS       (FC_FROZEN | FC_PARKED | FC_NOTIFYING)

static inline void *fc_freelist(uint64_t fc, const struct slab *slab)
{
	uint64_t off = fc & ((1ULL << FC_OFF_BITS) - 1);
	return off ? (char *)page_segment(slab) + off : NULL;
}
static inline unsigned fc_inuse(uint64_t fc) { return (unsigned)((fc >> FC_INUSE_SHIFT) & FC_INUSE_MASK); }
static inline bool fc_frozen(uint64_t fc) { return fc & FC_FROZEN; }
static inline uint64_t fc_flags(uint64_t fc) { return fc & FC_FLAGS; }
/* A word with the given list, inuse and FC_* flags. */
static inline uint64_t fc_set(const void *freelist, unsigned inuse, uint64_t flags)
{
	uint64_t off = freelist ? (uintptr_t)freelist & SEG_MASK : 0;
	return off | ((uint64_t)inuse << FC_INUSE_SHIFT) | flags;
}
static inline uint64_t fc_make(const void *freelist, unsigned inuse, bool frozen)
{
	return fc_set(freelist, inuse, frozen ? FC_FROZEN : 0);
}

/* A CPU part parks its exhausted slabs while its park_score is below this
 * (slab.c: park_wanted); a new part starts at it, so it parks once it is
 * seen freeing its own objects. */
#define PARK_REMOTE 3

/* Owner-side flags of a frozen slab (slab->ostate, owner only; slab.c). */
#define OS_FULL  0x1   /* parked: on the owner's full list */
#define OS_ARMED 0x2   /* the owner set FC_PARKED and has not seen it cleared since */
#define OS_FOREIGN 0x4 /* on the CPU partial list by a free, not allocated from yet */
#define OS_EMPTY   0x8 /* on the CPU partial list, emptied by the owner's frees (counted in nempty) */

/* ---- the node part (one node: user space has no NUMA placement yet) ----- */
struct node {
	/* list_lock protects: the partial list, nr_partial, slab->on_node and
	 * slab->next/prev of listed slabs. Taken before any slab CAS (lock
	 * order: node list_lock -> slab CAS -> page lock). */
	pthread_mutex_t list_lock;
	struct slab *partial_head, *partial_tail;
	_Atomic unsigned long nr_partial; /* slabs on the partial list (written under list_lock, peeked without) */
	_Atomic long nr_slabs;          /* slabs of the cache that exist */
	_Atomic long total_objects;     /* object slots in those slabs */
};

/* ---- the CPU part: one per thread and cache (kmem_cache_cpu) ---------- */
struct cpu_cache {
	/* first cache line (the struct is line-aligned): everything the fast
	 * paths touch */
	void *freelist;                 /* objects of `slab` this CPU may take */
	uintptr_t slab_base;            /* first object of `slab` (0 without a slab) */
	uintptr_t slab_span;            /* bytes of object slots in `slab` (0 without) */
	/* Free objects on the CPU partial list, as far as this CPU knows: those
	 * of each slab when it came onto the list, and our own frees to it
	 * since (other threads' frees to its slabs are not seen). Above
	 * partial_limit (cpu_partial more than the last drain kept), the
	 * list is drained (slab.c). */
	unsigned partial_free, partial_limit;
	/* Event counters. Only the owning thread writes them, with relaxed
	 * load+store (no read-modify-write); readers sum them. FREE_FASTPATH
	 * (index 2) is on the first line with freelist. ALLOC_FASTPATH is not
	 * counted on the fast path (a second counter there costs a quarter of
	 * the alloc+free pair): it is derived as fl_in + FREE_FASTPATH - (objects
	 * now on freelist), see stats.c. */
	_Atomic uint64_t stat[USLAB_NR_STAT_ITEMS];
	_Atomic uint64_t fl_in;         /* objects the slow path put on freelist, less those it took off */
	unsigned qn;                    /* objects in queue */
	struct slab *slab;              /* the CPU slab (frozen), or NULL */
	/* CPU partial list (frozen slabs), via slab->next/prev: first in,
	 * first out, so that a slab a free just froze (often with one free
	 * object) gathers more frees before allocation comes back to it */
	struct slab *partial, *partial_tail;
	unsigned nforeign;              /* slabs on it that are OS_FOREIGN */
	unsigned nempty;                /* slabs on it that are OS_EMPTY */
	/* Parked slabs: full slabs this CPU keeps frozen, via slab->next/prev
	 * (owner only), and the objects other threads freed to them first,
	 * handed over here (pushed by any thread, taken by the owner). */
	struct slab *full, *full_tail;
	int park_score;                 /* who frees to parked slabs first (slab.c); parks below PARK_REMOTE */
	uint64_t park_ff;               /* FREE_FASTPATH at the last refill */
	bool own_run_freed;             /* a run of frees to the CPU slab since */
	void *_Atomic delayed;
	struct uslab_cache *cache;      /* owner; NULL once destroy took it back */
	struct cpu_thread *thread;      /* the thread this part belongs to */
	struct cpu_cache *cnext, *cprev;/* the cache's list of CPU parts (cache_mutex) */
	struct cpu_queue *queue;
	struct cpu_mag *mag;            /* bulk magazine (bulk.c), one page */
	unsigned magn;                  /* objects in it */
} __attribute__((aligned(CACHE_LINE)));
_Static_assert(offsetof(struct cpu_cache, stat[USLAB_STAT_FREE_FASTPATH + 1]) <= CACHE_LINE,
	       "the fast paths' fields share the first line");

/* A CPU part's bulk magazine (bulk.c): one page. */
#define CPU_MAG_MAX 256
struct cpu_mag {
	void *obj[CPU_MAG_MAX];
	struct slab *slab[CPU_MAG_MAX];   /* the slab of each object */
};

struct cpu_queue {
	void *obj[CPU_QUEUE_MAX];
	struct slab *slab[CPU_QUEUE_MAX];  /* the slab of each queued object */
};

/* ---- a cache (kmem_cache) ---------------------------------------------- */
struct uslab_cache {
	/* read-only after creation; the fast paths use the first line */
	unsigned id;               /* index in each thread's CPU part array */
	unsigned size;             /* stride of objects in a slab: object, free pointer, padding */
	unsigned offset;           /* free pointer's offset in a free object */
	uint64_t divmagic;         /* ceil(2^64 / size): x % size == 0 iff x * divmagic <= divmagic - 1 */
	unsigned object_size;      /* size given at creation */
	unsigned align;            /* effective alignment */
	/* preferred order << 16 | objects per slab of that order, in one word
	 * so that the order tunable changes both at once (kmem_cache's oo) */
	_Atomic uint32_t oo;
	uint8_t min_order;         /* fallback order: smallest that holds an object */
	uint16_t min_objects;      /* objects in a slab of `min_order` */
	uintptr_t fp_key;          /* random key of free pointer obfuscation */
	unsigned long flags;
	void (*ctor)(void *);
	/* slub_debug (debug.c). Debug caches never get a CPU slab or queue, so
	 * every operation takes the slow path, as in the kernel; other caches'
	 * fast paths do not look at these fields. */
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
	_Atomic unsigned cpu_partial;       /* free objects kept on CPU partial lists; 0 = none */
	_Atomic unsigned long min_partial;  /* empty slabs kept on the node list */
	_Atomic unsigned queue_cap;         /* CPU object queue length; 0 = plain SLUB frees */

	struct node node;
	struct cpu_cache *cpu_list;            /* CPU parts (cache_mutex) */
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

/* The real cache behind s (s itself unless s is an alias). */
static inline struct uslab_cache *cache_root(struct uslab_cache *s)
{
	return s->root ? s->root : s;
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

/* Make `slab` (or none) the CPU slab of c, with the range the free fast
 * path checks pointers against. */
static inline void cpu_set_slab(const struct uslab_cache *s, struct cpu_cache *c, struct slab *slab)
{
	/* a relaxed atomic store (a plain mov): statistics readers count other
	 * threads' CPU slabs with a relaxed load; the owner reads it plainly */
	__atomic_store_n(&c->slab, slab, __ATOMIC_RELAXED);
	c->slab_base = slab ? (uintptr_t)slab_first(s, slab) : 0;
	c->slab_span = slab ? (uintptr_t)slab->objects * s->size : 0;
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
static inline void stat_inc(struct uslab_cache *s, struct cpu_cache *c, enum uslab_stat_item i)
{
	if (likely(c))
		cpu_count(&c->stat[i], 1);
	else
		atomic_fetch_add_explicit(&s->stat_gone[i], 1, memory_order_relaxed);
}

static inline void stat_add(struct uslab_cache *s, struct cpu_cache *c, enum uslab_stat_item i, uint64_t n)
{
	if (likely(c))
		cpu_count(&c->stat[i], n);
	else
		atomic_fetch_add_explicit(&s->stat_gone[i], n, memory_order_relaxed);
}

/* ---- slab.c ----------------------------------------------------------- */
/* `caller`: the return address of the API call, for slub_debug's U and T. */
USLAB_HIDDEN void *slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c, void *caller, size_t asked);
USLAB_HIDDEN void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *x, struct cpu_cache *c,
				 void *caller);
/* Fill c->freelist (CPU slab from CPU partial list, node list or a new
 * slab); false when no memory can be had. */
USLAB_HIDDEN bool slab_refill_cpu(struct uslab_cache *s, struct cpu_cache *c);
/* Free the chain head..tail of cnt objects of one slab that is not c's CPU
 * slab: one CAS, list moves as needed. c may be NULL. */
USLAB_HIDDEN void slab_free_chain(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head,
				  void *tail, unsigned cnt);
/* Free the chain head..tail of cnt objects of one slab (validated, of
 * cache s): onto c's CPU free list for its CPU slab, onto the slab's
 * owner-local list if c keeps it frozen, else slab_free_chain(). */
USLAB_HIDDEN void slab_free_run(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head,
				void *tail, unsigned cnt);
/* Free n objects (validated, of cache s) whose slabs are in `slabs`: one
 * CAS per group of objects of one slab; CPU slab objects go to c->freelist. */
USLAB_HIDDEN void slab_free_objs(struct uslab_cache *s, struct cpu_cache *c, void *const *objs,
				 struct slab *const *slabs, unsigned n);
/* A new slab with all objects on one list: for CPU part c (frozen, the
 * list in *chain) or, with chain NULL, unfrozen with the list in the slab. */
USLAB_HIDDEN struct slab *slab_new(struct uslab_cache *s, struct cpu_cache *c, void **chain);
USLAB_HIDDEN void slab_discard(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab);
/* node partial list; list_lock held */
USLAB_HIDDEN void add_partial_locked(struct node *n, struct slab *slab, bool tail);
USLAB_HIDDEN void remove_partial_locked(struct node *n, struct slab *slab);
/* Allocate/free without a CPU part (metadata caches, exiting threads). */
USLAB_HIDDEN void *slab_alloc_nocpu(struct uslab_cache *s);
USLAB_HIDDEN void slab_free_nocpu(struct uslab_cache *s, void *x);
/* Give a CPU part's slabs back to the node (owner, or cache_mutex holder
 * when the owner cannot be running on this cache). */
USLAB_HIDDEN void slab_flush_cpu(struct uslab_cache *s, struct cpu_cache *c);
/* Free every empty slab on the node list (all=true: ignore min_partial).
 * Returns the number of slabs freed. */
USLAB_HIDDEN unsigned long slab_shrink_node(struct uslab_cache *s);
/* Live objects, counted from the slabs; exact once no CPU part holds a slab. */
USLAB_HIDDEN unsigned long slab_count_live(struct uslab_cache *s);
USLAB_HIDDEN _Noreturn void slab_bad_free(struct uslab_cache *s, struct slab *slab, const void *x, const char *why);

/* ---- cpu_tls.c -------------------------------------------------------- */
/* What a thread keeps beside its CPU parts. */
#define CPU_INLINE_SLOTS 64
struct cpu_thread {
	struct slab *slots_block;  /* page block holding the slots array, once it outgrew inline */
	struct cpu_cache *inline_slots[CPU_INLINE_SLOTS]; /* the first slots, without a page */
};
/* The thread's only TLS: 88 bytes, initial-exec, so that the fast paths
 * reach their CPU part with one TLS access and no __tls_get_addr call.
 * (Small: a dlopen'ed libuslab.so takes it from glibc's static TLS
 * reserve.) */
#define CPU_TLS_FAST 8
struct cpu_tls {
	/* the CPU parts of cache ids below CPU_TLS_FAST, as in slots[]: one
	 * load less on the fast paths of the first caches made */
	struct cpu_cache *fast[CPU_TLS_FAST];
	struct cpu_cache **slots;  /* CPU parts indexed by cache id; NULL where none */
	unsigned nslots;           /* 0 until the thread's first slow path */
	bool dead;                 /* exiting: no CPU parts any more */
	bool creating;             /* setting up the thread: no CPU parts yet */
	struct cpu_thread *thread;
};
extern __thread struct cpu_tls cpu_tls USLAB_HIDDEN __attribute__((tls_model("initial-exec")));

/* This thread's CPU part for s, or NULL. May be an orphan (c->cache != s)
 * whose freelist and slab are empty, so fast paths fall to the slow path. */
static inline struct cpu_cache *cpu_this(const struct uslab_cache *s)
{
	unsigned id = s->id;
	if (likely(id < CPU_TLS_FAST))
		return cpu_tls.fast[id];
	return likely(id < cpu_tls.nslots) ? cpu_tls.slots[id] : NULL;
}
/* Get or create this thread's CPU part for s; NULL if none can be had. */
USLAB_HIDDEN struct cpu_cache *cpu_get(struct uslab_cache *s);
/* Take back every CPU part of s (destroy). cache_mutex held. */
USLAB_HIDDEN void cpu_orphan_all(struct uslab_cache *s);

/* ---- options.c ---------------------------------------------------------- */
struct uslab_opts {
	bool nomerge;          /* slab_nomerge */
	unsigned max_order;    /* slub_max_order */
	unsigned min_order;    /* slub_min_order */
	unsigned min_objects;  /* slub_min_objects; 0: grows with the CPU count */
	int cpu_partial;       /* slub_cpu_partial; -1: per-size default */
	bool show_stats;       /* show_stats: print the stats table at exit */
	bool export_stats;     /* export: keep a stats file for uslabinfo */
	bool report_continue;  /* report_continue: report, leak the object, go on */
	bool freelist_random;  /* slab_freelist_random */
	unsigned debug;        /* slub_debug letters (DBG_*) */
	char debug_caches[256];/* slub_debug's cache list, ",a,b," (empty: all caches) */
};
extern struct uslab_opts opt USLAB_HIDDEN;
USLAB_HIDDEN void options_init(void);
USLAB_HIDDEN void options_parse(const char *s);
USLAB_HIDDEN void options_apply_cache(struct uslab_cache *s);
/* Does USLAB_OPTIONS tune this cache by name ("NAME:key=value")? */
USLAB_HIDDEN bool options_names_cache(const char *name);
/* cache.c: set a tunable by name; -1 if the name or value is invalid */
USLAB_HIDDEN int cache_tune_set(struct uslab_cache *s, const char *name, unsigned long v);

/* ---- fork.c ---------------------------------------------------------------- */
USLAB_HIDDEN void fork_init(void);

/* ---- debug.c: slub_debug ------------------------------------------------ */
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
/* counted_as: the event a success counts (ALLOC/FREE_SLOWPATH, or _BULK) */
USLAB_HIDDEN void *debug_alloc(struct uslab_cache *s, void *caller, enum uslab_stat_item counted_as,
			       size_t asked);
/* The size asked for object x (the object size if not known). */
USLAB_HIDDEN size_t debug_obj_size(struct uslab_cache *s, void *x);
USLAB_HIDDEN void debug_free(struct uslab_cache *s, struct slab *slab, void *x, void *caller,
			     enum uslab_stat_item counted_as);
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
/* Set while USLAB_OPTIONS=export is on; the slow paths then call
 * export_poll() to keep the exported statistics current and to apply
 * controls written by uslabinfo (by this process, on its own slow path). */
extern _Atomic bool export_active USLAB_HIDDEN;
USLAB_HIDDEN void export_poll(void);
/* Issue 6 hook, called once from cache.c's init_once_fn() after
 * options_init(): starts the export when USLAB_OPTIONS has "export".
 * (show_stats and the export's final snapshot run from a destructor in
 * export.c, so nothing is registered with atexit, which may allocate.) */
USLAB_HIDDEN void export_init(void);

/* ---- the fast paths ------------------------------------------------------ */
/* Shared by the cache API and the malloc family; each stays on one screen. */

/* Pop the CPU free list: no lock, no atomic read-modify-write.
 * ALLOC_FASTPATH is derived, not counted (see above).
 * `asked`: the size the caller wants (kmalloc), or 0 for the whole object;
 * only debug caches use it (the rest of the object is red zone). */
static inline __attribute__((always_inline)) void *slab_alloc_fast_sized(struct uslab_cache *s, size_t asked)
{
	struct cpu_cache *c = cpu_this(s);
	void *x;
	if (likely(c != NULL)) {
		if (likely((x = c->freelist) != NULL)) {
			void *next = get_freepointer(s, x);
			if (unlikely(!cpu_next_ok(c, next)))
				return slab_freelist_corrupt(s, x, next);   /* a tail call: no frame here */
			c->freelist = next;
			track_alloc(x, s->object_size);
			return x;
		}
	}
	return slab_alloc_slow(s, c, __builtin_return_address(0), asked);
}

static inline __attribute__((always_inline)) void *slab_alloc_fast(struct uslab_cache *s)
{
	return slab_alloc_fast_sized(s, 0);
}

/*
 * The second fast free: x is in a slab on c's CPU partial list (frozen by
 * c, which only c unfreezes): onto that slab's owner-local list, no atomic.
 * Checks: the slab is c's, not parked and not the CPU slab (whose objects
 * go to the CPU free list); x is an object of it and not the local head;
 * the list is below its limit (else the slow path drains it); this free
 * does not empty the slab (the slow path may give it back). False: take
 * the slow path.
 */
static inline __attribute__((always_inline)) bool slab_free_owned(struct uslab_cache *s, struct cpu_cache *c,
								  struct slab *slab, void *x)
{
	if (atomic_load_explicit(&slab->owner, memory_order_relaxed) != c || (slab->ostate & OS_FULL) ||
	    (uintptr_t)x - c->slab_base < c->slab_span || !slab_obj_valid(s, slab, x) || x == slab->local ||
	    c->partial_free >= c->partial_limit ||
	    fc_inuse(atomic_load_explicit(&slab->fc, memory_order_relaxed)) == slab->local_cnt + 1u)
		return false;
	track_free(x, s->object_size);
	set_freepointer(s, x, slab->local);
	if (!slab->local)
		slab->local_tail = (uint32_t)((uintptr_t)x & SEG_MASK);
	slab->local = x;
	slab->local_cnt++;
	slab->acct++;
	c->partial_free++;
	stat_inc(s, c, USLAB_STAT_FREE_FASTPATH);
	return true;
}

/* Push to the CPU free list when x is in the CPU slab; the checks (inside
 * the slab, on an object boundary, not the list head) cost a subtraction,
 * a multiply and compares. Then slab_free_owned(). Everything else, every
 * foreign pointer included, goes to the slow path, which checks it in
 * full. x != NULL. `slab`: x's descriptor if the caller has it, or NULL. */
static inline __attribute__((always_inline)) void slab_free_fast_slab(struct uslab_cache *s, struct slab *slab,
								   void *x)
{
	struct cpu_cache *c = cpu_this(s);
	if (likely(c != NULL)) {
		uintptr_t off = (uintptr_t)x - c->slab_base;
		if (likely(off < c->slab_span) && likely(obj_offset_ok(s, off)) && likely(x != c->freelist)) {
			track_free(x, s->object_size);
			set_freepointer(s, x, c->freelist);
			c->freelist = x;
			stat_inc(s, c, USLAB_STAT_FREE_FASTPATH);
			return;
		}
	}
	if (!slab)
		slab = page_obj_slab(x);
	if (likely(c != NULL) && slab_free_owned(s, c, slab, x))
		return;
	slab_free_slow(s, slab, x, c, __builtin_return_address(0));
}

static inline __attribute__((always_inline)) void slab_free_fast(struct uslab_cache *s, void *x)
{
	slab_free_fast_slab(s, NULL, x);
}

/* ---- stats.c ---------------------------------------------------------- */
USLAB_HIDDEN uint64_t cpu_alloc_fastpath(struct cpu_cache *c);
/* Fill a current-version snapshot of `named` (an alias reports its root's
 * numbers). cache_mutex held. (Issue 6: used by export.c.) */
USLAB_HIDDEN void stats_fill_info_locked(struct uslab_cache *named, struct uslab_cache_info *info);

/* ---- cache.c ---------------------------------------------------------- */
/* cache_mutex protects: the cache list, cache ids, every cache's cpu_list,
 * and stat_gone folding. Lock order: cache_mutex -> node list_lock -> page. */
extern pthread_mutex_t cache_mutex USLAB_HIDDEN;
extern struct uslab_cache *cache_list USLAB_HIDDEN;
USLAB_HIDDEN void cache_init(void);
extern struct uslab_cache cache_cache USLAB_HIDDEN;        /* struct uslab_cache */
extern struct uslab_cache cache_cpu_cache USLAB_HIDDEN;    /* struct cpu_cache */
extern struct uslab_cache cache_thread_cache USLAB_HIDDEN; /* struct cpu_thread */
extern struct uslab_cache cache_queue_cache USLAB_HIDDEN;  /* struct cpu_queue */

#endif
