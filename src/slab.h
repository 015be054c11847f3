/*
 * The SLUB core's types: caches, the node part, the CPU part, and the
 * free-list/counter word of a slab. Shared by slab.c, cache.c, cpu_tls.c,
 * stats.c.
 */
#ifndef USLAB_SLAB_H
#define USLAB_SLAB_H

#include <pthread.h>

#include "internal.h"
#include "page.h"

#define SLAB_MAX_OBJECTS   32767   /* per slab, as the kernel's MAX_OBJS_PER_PAGE */
#define SLUB_MAX_ORDER_DEFAULT 3   /* PAGE_ALLOC_COSTLY_ORDER */
#define CACHE_ID_MAX       65536   /* live caches at once */

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

static inline void *fc_freelist(uint64_t fc, const struct slab *slab)
{
	uint64_t off = fc & ((1ULL << FC_OFF_BITS) - 1);
	return off ? (char *)page_segment(slab) + off : NULL;
}
static inline unsigned fc_inuse(uint64_t fc) { return (unsigned)((fc >> FC_INUSE_SHIFT) & FC_INUSE_MASK); }
static inline bool fc_frozen(uint64_t fc) { return fc & FC_FROZEN; }
static inline uint64_t fc_make(const void *freelist, unsigned inuse, bool frozen)
{
	uint64_t off = freelist ? (uintptr_t)freelist & SEG_MASK : 0;
	return off | ((uint64_t)inuse << FC_INUSE_SHIFT) | (frozen ? FC_FROZEN : 0);
}

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
	void *freelist;                 /* objects of `slab` this CPU may take */
	struct slab *slab;              /* the CPU slab (frozen), or NULL */
	/* Event counters. Only the owning thread writes them, with relaxed
	 * load+store (no read-modify-write); readers sum them. The fast-path
	 * ones sit on the same cache line as freelist and slab. */
	_Atomic uint64_t stat[USLAB_NR_STAT_ITEMS];
	struct slab *partial;           /* CPU partial list (frozen slabs), via slab->next */
	struct uslab_cache *cache;      /* owner; NULL once destroy took it back */
	struct cpu_thread *thread;      /* the thread this part belongs to */
	struct cpu_cache *cnext, *cprev;/* the cache's list of CPU parts (cache_mutex) */
};

/* ---- a cache (kmem_cache) ---------------------------------------------- */
struct uslab_cache {
	/* read-only after creation; the fast paths use the first line */
	unsigned id;               /* index in each thread's CPU part array */
	unsigned size;             /* stride of objects in a slab: object, free pointer, padding */
	unsigned offset;           /* free pointer's offset in a free object */
	uint32_t recip;            /* ceil(2^32 / size): object index by multiplication */
	unsigned object_size;      /* size given at creation */
	unsigned align;            /* effective alignment */
	uint8_t order;             /* preferred slab order */
	uint8_t min_order;         /* fallback order: smallest that holds an object */
	uint16_t objects;          /* objects in a slab of `order` */
	uint16_t min_objects;      /* objects in a slab of `min_order` */
	unsigned long flags;
	void (*ctor)(void *);
	/* tunables (plain stores by setters; read racily by design, as SLUB) */
	unsigned cpu_partial;      /* objects kept on CPU partial lists */
	unsigned cpu_partial_slabs;/* the same in slabs; 0 = no CPU partial lists */
	unsigned long min_partial; /* empty slabs kept on the node list */

	struct node node;
	struct cpu_cache *cpu_list;            /* CPU parts (cache_mutex) */
	_Atomic uint64_t stat_gone[USLAB_NR_STAT_ITEMS]; /* counters of CPU parts gone, and of CPU-less paths */
	struct uslab_cache *next, *prev;       /* all caches (cache_mutex) */
	bool internal;                         /* uslab's own metadata cache */
	char name[USLAB_NAME_MAX + 1];
};

/* ---- per-object helpers ----------------------------------------------- */
static inline void *get_freepointer(const struct uslab_cache *s, void *obj)
{
	return *(void **)((char *)obj + s->offset);
}
static inline void set_freepointer(const struct uslab_cache *s, void *obj, void *next)
{
	*(void **)((char *)obj + s->offset) = next;
}
static inline void *slab_base(const struct slab *slab) { return page_address(slab); }

/* Is x the start of an object slot of this slab? One multiply, compares. */
static inline bool slab_obj_valid(const struct uslab_cache *s, const struct slab *slab, const void *x)
{
	uintptr_t off = (uintptr_t)x - (uintptr_t)slab_base(slab);
	uint32_t idx = (uint32_t)(((uint64_t)(uint32_t)off * s->recip) >> 32);
	return off < ((uintptr_t)slab->objects * s->size) && (uintptr_t)idx * s->size == off;
}

/* Count an event on a CPU part (owner only), or on the cache when there is
 * no CPU part. */
static inline void stat_inc(struct uslab_cache *s, struct cpu_cache *c, enum uslab_stat_item i)
{
	if (likely(c))
		atomic_store_explicit(&c->stat[i],
				      atomic_load_explicit(&c->stat[i], memory_order_relaxed) + 1,
				      memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&s->stat_gone[i], 1, memory_order_relaxed);
}

/* ---- slab.c ----------------------------------------------------------- */
USLAB_HIDDEN void *slab_alloc_slow(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void slab_free_slow(struct uslab_cache *s, struct slab *slab, void *x, struct cpu_cache *c);
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
/* The per-thread CPU part array. A thread that has none points at a static
 * empty one, so the fast paths need no NULL test. */
struct cpu_thread {
	struct cpu_cache **slots;  /* indexed by cache id; NULL where unused */
	unsigned nslots;
	struct slab *slots_block;  /* page block holding slots */
	bool dead;                 /* exiting: no CPU parts any more */
};
extern __thread struct cpu_thread *cpu_self USLAB_HIDDEN __attribute__((tls_model("initial-exec")));

/* This thread's CPU part for s, or NULL. May be an orphan (c->cache != s)
 * whose freelist and slab are NULL, so fast paths fall to the slow path. */
static inline struct cpu_cache *cpu_this(const struct uslab_cache *s)
{
	struct cpu_thread *t = cpu_self;
	return likely(s->id < t->nslots) ? t->slots[s->id] : NULL;
}
/* Get or create this thread's CPU part for s; NULL if none can be had. */
USLAB_HIDDEN struct cpu_cache *cpu_get(struct uslab_cache *s);
/* Take back every CPU part of s (destroy). cache_mutex held. */
USLAB_HIDDEN void cpu_orphan_all(struct uslab_cache *s);

/* ---- cache.c ---------------------------------------------------------- */
/* cache_mutex protects: the cache list, cache ids, every cache's cpu_list,
 * and stat_gone folding. Lock order: cache_mutex -> node list_lock -> page. */
extern pthread_mutex_t cache_mutex USLAB_HIDDEN;
extern struct uslab_cache *cache_list USLAB_HIDDEN;
USLAB_HIDDEN void cache_init(void);
extern struct uslab_cache cache_cpu_cache USLAB_HIDDEN;    /* struct cpu_cache */
extern struct uslab_cache cache_thread_cache USLAB_HIDDEN; /* struct cpu_thread */

#endif
