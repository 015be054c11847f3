/*
 * The slab core's types and interface (core/slab.c, core/cache.c): the
 * slab word, the node part (partial and empty lists, the barn sheaves
 * trade through), the cache (kmem_cache), free pointers and the
 * double-free mark, hardened mode's live bits, and what the core offers
 * the layers above: new and discarded slabs, objects taken from and freed
 * to slabs in bulk, the node-locked path of debug caches.
 *
 * Layers (docs/design.md): core/ (OS, pages, slabs, caches) below cpu/
 * (the per-CPU modes, cpu/cpu.h) below malloc/ (kmalloc and the malloc
 * family); debug/ and observe/ beside them. This header includes only
 * core and shared headers.
 */
#ifndef USLAB_SLAB_H
#define USLAB_SLAB_H

#include <pthread.h>
#include <stddef.h>

#include "internal.h"
#include "page.h"
#include "track.h"

#define SLAB_MAX_OBJECTS   32767   /* per slab, as the kernel's MAX_OBJS_PER_PAGE */
#define SLUB_MAX_ORDER_DEFAULT 5   /* two slots: room to cut waste for big objects (page.h) */
#define CACHE_ID_MAX       65536   /* live caches at once */
#define SHEAF_MAX_CAPACITY 508     /* largest sheaf_capacity (a sheaf is then one page) */
#define BARN_MAX_SHEAVES   1024    /* largest barn bound */
#define BARN_FLOOR         10      /* full sheaves a barn always takes (the kernel's bound) */
#define BARN_FULL_DEFAULT  256     /* barn_full's default: what demand may grow it to */

struct cpu_cache;   /* cpu/cpu.h: the core counts events on the part that calls it */

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

/* ---- carving: objects are made as they are wanted ---------------------- */
/*
 * A new slab (64 KiB or more) is not written whole: its objects are carved
 * in chunks (1/64 of them each, about 1 KiB of a 64 KiB slab), each
 * constructed and linked as it is, when whoever holds the slab needs
 * objects and its lists are empty. So a slab that a thread takes a few
 * objects from costs the pages of those objects, not 64 KiB, and no page
 * fault is taken for objects never used (mimalloc extends its pages' free
 * lists the same way).
 *
 * Accounting. Uncarved objects are free but on no list. An unfrozen
 * slab's word counts in `inuse` the carved objects that are out (its empty
 * test, inuse 0, holds whatever is uncarved), and an unfrozen slab with
 * uncarved objects is on the node partial list. Whoever takes a slab
 * (freezes it, owns it, or takes it under the node lock) holds its
 * uncarved objects as it holds the word's list (the word says inuse =
 * objects meanwhile), carves from them, and gives back what it did not
 * carve when it unfreezes the slab (slab_uncarved(), subtracted from
 * inuse). Only a holder advances `carve`; others read it under the node
 * lock, or of a slab nobody can take (full and unlisted).
 * Debug caches, caches with a constructor (SLUB constructs every object
 * when its slab is made, and says so), SLAB-format slabs (whose free
 * objects are on index lists, not linked), tracked builds and
 * slab_freelist_random (one shuffle of the whole slab) carve everything at
 * once.
 */
#define CARVE_CHUNKS 64   /* slab->carve: chunks carved, CARVE_CHUNKS: all */
#define CARVE_STEP   4    /* chunks a carve makes at least: a 64 KiB slab's page */
static inline unsigned slab_chunk_objs(const struct slab *d)
{
	return (d->objects + CARVE_CHUNKS - 1U) / CARVE_CHUNKS;
}
/* d->carve, read by anyone. Relaxed atomic: a free that reads it without
 * the node lock (free_chain's listing test) may race with a holder's carve,
 * but decides only together with the slab word it then swaps, and the
 * holder changes that word (freezing, then unfreezing it by a release CAS
 * after the carve) around any carve: a stale value goes with a stale word
 * and the CAS fails. A value read after an acquire load of an unfrozen
 * word is the holder's last. */
static inline unsigned slab_carve_chunks(const struct slab *d)
{
	return __atomic_load_n(&d->carve, __ATOMIC_RELAXED);
}
/* Objects carved so far. */
static inline unsigned slab_carved(const struct slab *d)
{
	return MIN(slab_carve_chunks(d) * slab_chunk_objs(d), (unsigned)d->objects);
}
static inline unsigned slab_uncarved(const struct slab *d)
{
	return d->objects - slab_carved(d);
}

/* ---- sheaves ---------------------------------------------------------- */
/*
 * A sheaf: an array of object pointers. A CPU part's `main` sheaf is where
 * its allocations pop and its frees push; `spare` is a second one to swap
 * with; the barn keeps more of them per cache. A sheaf that is main keeps
 * its count in the CPU part (c->n), its `size` is stale meanwhile.
 */
struct sheaf {
	struct sheaf *next;        /* barn list link */
	uint32_t size;             /* objects held (not while main: see c->n) */
	uint32_t cap;              /* entries in objects[] */
	void *objects[];           /* each marked free (see FP_TAKEN) */
};

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
	/* How many full sheaves it takes now (sheaf.c, "the barn's bound"):
	 * BARN_FLOOR, plus what producers' demand earned, up to barn_full. */
	_Atomic unsigned extra; /* earned beyond the floor (written under lock, peeked without) */
	_Atomic unsigned spilled; /* full sheaves flushed for want of room, not yet wanted back
	                           * (added to without the lock, taken from under it) */
};

/* ---- SLAB mode's part of a cache (cpu/array.c) ------------------------- */
/*
 * SLAB-format slabs (made in slab mode; marked by otag SLAB_TAG_ARRAY,
 * which is no thread's tag) keep their free objects as an array of object
 * indices at the slab's end, or off the slab for objects of 128 bytes and
 * more when that saves an object (slab->lfree points there; the kernel's
 * freelist_idx_t array, "bufctl", and its OFF_SLAB caches):
 * entries [inuse, objects) are the free objects' indices, so allocation
 * and free never write into an object. A bitmap before it has a bit per
 * object, set while the object is out of the slab (the double-free check
 * the kernel's SLAB did not have). The first object sits at a colour
 * offset (slab->colour): consecutive slabs start at different cache-line
 * offsets. inuse is kept in the slab word's inuse field (free list 0,
 * never frozen), so the core's readers of the word (validate, count_live)
 * read SLAB slabs right.
 */
#define SLAB_TAG_ARRAY 4U   /* slab->otag of a SLAB-format slab: even, so no thread's (tls.c: odd) */
#define ARRAY_NR_NODES 1    /* nodes the lists exist for (one: user space has no NUMA placement yet) */

struct slab_list {
	struct slab *head, *tail;   /* doubly linked through slab->next/prev */
};

struct array_node {
	/* The layout of new SLAB-format slabs, in one word (array.c packs
	 * it: order, objects, colour step and count, off-slab index list) so
	 * that the "order" tunable changes it at once; a slab's own layout
	 * follows from its descriptor (order, objects, slab->lfree). */
	_Atomic uint64_t layout;
	/* The next slab's colour (n->colour_next): fetch-and-add, taken
	 * modulo colours, so that growers need no lock. */
	_Atomic unsigned colour_next;
	/* node.list_lock protects the lists, each listed slab's next/prev,
	 * inuse (the word, stored relaxed under the lock) and bitmap and
	 * index array, free_touched; the counts are written under it and
	 * peeked without. Which list a slab is on follows from its inuse:
	 * objects (full), 0 (free), else partial (as the kernel's). */
	struct slab_list full, partial, free;
	_Atomic unsigned long nr_full, nr_partial, nr_free;
	_Atomic unsigned long free_objects;   /* free objects in listed slabs */
	_Atomic long nr_slabs;                /* SLAB-format slabs that exist */
	bool free_touched;                    /* a refill took a free slab since the last reap */
	/* The node reap (cache_reap's node part): due at next_reap (ms),
	 * claimed by compare-and-swap; reap_gets: the barn's gets then
	 * (written by the claimer; atomic, as claims follow one another
	 * without a lock). */
	_Atomic uint64_t next_reap;
	_Atomic unsigned long reap_gets;
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

/*
 * Per-CPU modes (a cache's cpu_mode tunable; each part runs the mode it was
 * set up with until its next slow path sees the tunable changed):
 *   CPU_CLASSIC  SLUB's CPU slab and CPU partial lists (the 2011 thread):
 *                classic.c.
 *   CPU_SHEAVES  sheaves and the barn (SLUB+Q 2010, Linux 7.0): sheaf.c.
 *   CPU_HOME     slabs owned by the part, local frees straight to their
 *                slab, remote frees batched home (SLQB v2's page lists,
 *                mimalloc's pages): home.c.
 *   CPU_SLQB     SLQB as compared in 2009: the same ownership plus a LIFO
 *                object queue bounded by hiwater: home.c.
 *   CPU_SLAB     the kernel's SLAB: per-CPU arrays (sheaves of `limit`
 *                objects), a shared array (the barn), full/partial/free
 *                slab lists of its own, index free lists, colouring, a
 *                periodic reap: array.c.
 */
enum cpu_mode { CPU_CLASSIC = 0, CPU_SHEAVES = 1, CPU_HOME = 2, CPU_SLQB = 3, CPU_SLAB = 4, CPU_NR_MODES };
#define CPU_MODE_DEFAULT CPU_SHEAVES   /* chosen by measurement (on the per-CPU backend): README, "Choosing the default" */

/* ---- a cache (kmem_cache) ---------------------------------------------- */
struct uslab_cache {
	/* read-only after creation; the fast paths use the first line */
	unsigned id;               /* index in each thread's CPU part array */
	unsigned size;             /* stride of objects in a slab: object, free pointer, padding */
	unsigned offset;           /* free pointer's offset in a free object */
	unsigned object_size;      /* size given at creation */
	/* Where its parts sit in CPU 0's area (cpu.h's pcpu_slot_id) while
	 * they are CPUs' (the per-CPU backend, cpu/pcpu.c), 0 while they are
	 * threads': one load answers both of the fast paths' questions. Set
	 * when made and at every retune, on a real cache and its aliases
	 * alike (an alias has its root's id, so its root's slot). */
	_Atomic uintptr_t pcpu_slot;
	/* size = q << divk, q odd; divinv = q's inverse mod 2^32. For a
	 * 32-bit offset x from a slab's first object, ror32(x * divinv, divk)
	 * is x / size when size divides x, and at least 2^32 / size otherwise:
	 * one compare with the slab's object count is the whole boundary
	 * check, on every path (slab_obj_index below) */
	uint32_t divinv;
	uint32_t divk;
	struct uslab_cache *real;  /* the cache whose slabs hold the objects: root, or itself */
	uintptr_t fp_key;          /* random key of free pointer obfuscation */
	/* preferred order << 16 | objects per slab of that order, in one word
	 * so that the order tunable changes both at once (kmem_cache's oo) */
	_Atomic uint32_t oo;
	uint8_t min_order;         /* fallback order: smallest that holds an object */
	uint16_t min_objects;      /* objects in a slab of `min_order` */
	unsigned long flags;
	unsigned align;            /* effective alignment */
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
	_Atomic unsigned limit;             /* slab: objects a thread's array holds */
	_Atomic unsigned batchcount;        /* slab: objects a refill or flush moves */
	_Atomic unsigned sharedfactor;      /* slab: batches the shared array (the barn) holds */

	struct node node;
	struct array_node array;               /* slab mode (cpu/array.c) */
	struct cpu_cache *cpu_list;            /* CPU parts of live threads (cache_mutex) */
	/* Parts whose threads exited (cache_mutex): kept, not freed, because a
	 * remote freer may still push to one's inbox (home.c); the next
	 * thread that needs a part takes one from here. */
	struct cpu_cache *cpu_dead;
	/* The per-CPU backend's parts, retired ones too (cache_mutex; cpu/pcpu.c) */
	struct cpu_cache *pcpu_list;
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
 * An object in a sheaf, a SLAB array or the barn has no link: it carries
 * the mark alone, an encoded NULL (written as it goes in: by the free, or
 * by the refill that takes it off its slab), and a SLAB-format slab's free
 * object keeps the mark its last free wrote. Popping one for the program
 * overwrites it (cpu_fp_scrub), as for a list.
 * So a double free is caught at any distance, in every mode, as long as
 * the object is still free: on a CPU free list, a slab's list, an owned
 * slab's list, a remote batch or inbox, an SLQB queue, a sheaf, an array.
 * Only obfuscated builds (USLAB_HARDENED, the default) check: without the
 * key, user data that holds a pointer to another object of the cache
 * would read as a link.
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
/* x (an object of s, slab its descriptor) goes into a sheaf or an array:
 * checked as fp_check_free() checks, then marked free (an encoded NULL). */
static inline void fp_mark_free(struct uslab_cache *s, struct slab *slab, void *x)
{
	fp_check_free(s, slab, x);
	set_freepointer(s, x, NULL);
}
static inline void *slab_base(const struct slab *slab) { return slab_address(slab); }
/* Is slab a SLAB-format slab (made in slab mode, cpu/array.c)? Set before
 * the slab is published and never changed while it lives: a relaxed load. */
static inline bool slab_is_array(const struct slab *slab)
{
	return atomic_load_explicit(&slab->otag, memory_order_relaxed) == SLAB_TAG_ARRAY;
}

/* The first object of a slab: after the left red zone of debug caches, or
 * at a SLAB-format slab's colour offset (0 for every other slab). */
static inline char *slab_first(const struct uslab_cache *s, const struct slab *slab)
{
	return (char *)slab_address(slab) + s->red_left_pad + slab->colour;
}

/* divinv and divk of a stride (above, struct uslab_cache). */
static inline void slab_div_init(uint32_t stride, uint32_t *inv, uint32_t *k)
{
	*k = (uint32_t)__builtin_ctz(stride);
	uint32_t q = stride >> *k, x = q;   /* x: q's inverse mod 2^3 (q odd) */
	for (int i = 0; i < 4; i++)         /* Newton: each step doubles the bits, 3 -> 48 */
		x *= 2 - q * x;
	*inv = x;
}

/* The object index that a 32-bit offset from a slab's first object gives,
 * by the stride's odd part's inverse and its power of two (divinv, divk):
 * exact when the stride divides off, and at least 2^32 / stride (more
 * objects than any slab has: its span is under 4 GiB) when it does
 * not. So one compare with a slab's object count checks both the boundary
 * and the range, and an offset below the first object (negative, so near
 * 2^32) fails it too. test_hardening (boundary) checks it against % and /. */
static inline uint32_t slab_obj_index(uint32_t off, uint32_t inv, uint32_t k)
{
	uint32_t y = off * inv;
	return (y >> (k & 31)) | (y << (-k & 31));   /* ror */
}

/* Is `off` (from a slab's first object, a pointer difference) the offset
 * of one of its `objects` objects, by a stride's inv and k? */
static inline bool slab_off_ok_by(uintptr_t off, uint32_t inv, uint32_t k, unsigned objects)
{
	return !(off >> 32) && slab_obj_index((uint32_t)off, inv, k) < objects;
}
static inline bool slab_off_ok(const struct uslab_cache *s, uintptr_t off, unsigned objects)
{
	return slab_off_ok_by(off, s->divinv, s->divk, objects);
}

/* Is x the start of an object of this slab? */
static inline bool slab_obj_valid(const struct uslab_cache *s, const struct slab *slab, const void *x)
{
	return slab_off_ok(s, (uintptr_t)x - (uintptr_t)slab_first(s, slab), slab->objects);
}

/* Is x an object of a live slab of cache s (a real cache without debug
 * padding: red_left_pad 0)? The sheaf free path's check: kind, cache and
 * object boundary, all from the descriptor's line and s's first line. */
static inline bool slab_owns(const struct uslab_cache *s, const struct slab *slab, const void *x)
{
	uintptr_t off = (uintptr_t)x - (uintptr_t)slab_address(slab) - slab->colour;
	return likely(slab->cache == s) && likely(slab_kind(slab) == SK_SLAB) &&
	       likely(slab_off_ok(s, off, slab->objects));
}

/* ---- hardened mode: the live bit of every object ------------------------- */
/*
 * USLAB_OPTIONS=hardened: every allocation sets the object's bit in its
 * segment's live map and every free clears it, atomically, so that a free
 * of anything not live (a double free at any distance, an object sitting in
 * a sheaf, a never-allocated slot) is caught before it can do harm, and an
 * object handed out while live (corrupted state) too. The fast paths do not
 * know: in hardened mode no thread's fast-path pointers are ever set
 * (tls.c), so every operation takes the slow paths, which check here.
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

USLAB_HIDDEN _Noreturn void slab_bad_freelist(struct uslab_cache *s, const void *obj, const void *next);
/* The same, typed for a tail call from the alloc fast path; never returns. */
USLAB_HIDDEN void *slab_freelist_corrupt(struct uslab_cache *s, const void *obj, const void *next);

/* ---- slab.c: the slab core ------------------------------------------------ */
USLAB_HIDDEN _Noreturn void slab_bad_free(struct uslab_cache *s, struct slab *slab, const void *x, const char *why);

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

/* Allocate/free without a CPU part (metadata caches, exiting threads). */
USLAB_HIDDEN void *slab_alloc_nocpu(struct uslab_cache *s);
USLAB_HIDDEN void slab_free_nocpu(struct uslab_cache *s, void *x);
/* Take up to `want` (>= 1) objects off slabs into objs[]: node partial
 * slabs first, several in one lock hold, then at most one new slab.
 * Returns how many (0: no memory). c may be NULL (for the counters).
 * for_sheaf: the objects go into a sheaf and carry the double-free mark;
 * else they go to the caller (FP_TAKEN). */
USLAB_HIDDEN unsigned slab_take_objects(struct uslab_cache *s, struct cpu_cache *c, void **objs, unsigned want,
					bool for_sheaf);
/* Free n objects (checked, of cache s) to their slabs, grouped by slab:
 * one CAS per slab, the node lock (one hold) only for slabs that change
 * list. `freeze`: classic part c may freeze full slabs onto its partial
 * list (SLUB); sheaves never do. from_cpu: they come from a sheaf or an
 * array, marked free (not checked again); else from the program, each
 * checked for the mark or a link. */
USLAB_HIDDEN void slab_free_objects(struct uslab_cache *s, struct cpu_cache *c, void *const *objs, unsigned n,
				    bool freeze, bool from_cpu);
/* Free the chain head..tail of cnt objects of one slab: one CAS, the node
 * lock if the slab changes list. `freeze` as above. */
USLAB_HIDDEN void slab_free_chain(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head,
				  void *tail, unsigned cnt, bool freeze);
/* A new slab, its first objects carved (the rest wait: "carving" above)
 * onto one list: frozen for classic part c (the list in *chain, inuse =
 * objects: c holds the uncarved ones too) or, with chain NULL, unfrozen
 * with the list in the slab (inuse 0). */
USLAB_HIDDEN struct slab *slab_new(struct uslab_cache *s, struct cpu_cache *c, void **chain);
/* Carve up to `want` (>= 1) more objects of slab d, which the caller holds,
 * CARVE_STEP chunks at least (past `want`: they are the caller's too):
 * constructed and chained through their free pointers, the last one's link
 * NULL. Returns how many, the chain in *head and *tail (0: none left). */
USLAB_HIDDEN unsigned slab_carve(struct uslab_cache *s, struct slab *d, unsigned want, void **head, void **tail);
USLAB_HIDDEN void slab_discard(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab);
/* A SLAB-format slab (cpu/array.c): `objects` objects at byte `colour` of
 * a block of 2^order pages, constructed, counted, marked SLAB_TAG_ARRAY,
 * inuse 0; not yet published: the caller sets up its index list, then
 * slab_publish(). NULL (errno ENOMEM) if no pages. */
USLAB_HIDDEN struct slab *slab_new_array(struct uslab_cache *s, struct cpu_cache *c, unsigned order,
					 unsigned objects, unsigned colour);
/* From here on, lookups of the slab's pages find a slab. */
USLAB_HIDDEN void slab_publish(struct slab *slab);
/* node partial list; list_lock held */
USLAB_HIDDEN void add_partial_locked(struct node *n, struct slab *slab, bool tail);
USLAB_HIDDEN void remove_partial_locked(struct node *n, struct slab *slab);
/*
 * Take a lock that is held for short batches (the node lock, a barn's, a
 * CPU part's): the kernel takes these as spinlocks, whose waiter never
 * sleeps. These are pthread mutexes, whose waiter sleeps on a futex at the
 * first failed attempt and costs the holder a futex wake: SmartHeap's
 * patterns (runs of hundreds of frees of one size, two threads, one node
 * lock per cache) made tens of thousands of such sleeps a second in slab
 * mode and then in sheaves mode (issues 25, 26). So a waiter tries again
 * for about a hold's time, backing off, before it sleeps; with more
 * threads than CPUs a holder may be off its CPU, and the bound keeps a
 * spin from costing more than the sleep it avoids.
 */
#if defined(__x86_64__) || defined(__i386__)
#define slab_spin_pause() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define slab_spin_pause() __asm__ __volatile__("yield" ::: "memory")
#else
#define slab_spin_pause() __asm__ __volatile__("" ::: "memory")
#endif
#ifndef SLAB_SPIN_ROUNDS
#define SLAB_SPIN_ROUNDS 8   /* attempts; the pauses between double: 255 in all */
#endif
static inline void slab_lock_spin(pthread_mutex_t *m)
{
	os_sched_point();
	for (unsigned r = 0; r < SLAB_SPIN_ROUNDS; r++) {
		if (!pthread_mutex_trylock(m))
			return;
		for (unsigned k = 1U << r; k; k--)
			slab_spin_pause();
	}
	pthread_mutex_lock(m);
}
USLAB_HIDDEN void slab_node_lock(struct uslab_cache *s, struct cpu_cache *c);
USLAB_HIDDEN void slab_node_unlock(struct uslab_cache *s);
/* The slab word's compare-and-swap (always locked: slab.c). */
USLAB_HIDDEN bool slab_cas(struct slab *slab, uint64_t *old, uint64_t new);

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

/* ---- what the core needs from the layers above ----------------------------- */
/*
 * The core calls down only: the OS seam, the page allocator, and track.h
 * (the sanitizer hooks). What it needs from above (the per-CPU layer's
 * counters and what each mode adds to slabs and caches, slub_debug,
 * KFENCE, the export and the background thread, the malloc family's fork
 * locks) it reaches through this table, which src/glue.c fills: the one
 * file that names every layer. Wired at link time rather than registered
 * at start, because the allocator is called before constructors run
 * (malloc from the dynamic linker, a preloaded library's init): nothing
 * may depend on the order in which layers start. Every pointer is set.
 */
struct core_hooks {
	/* start-up, in order, once (cache_init): KFENCE, the export, the
	 * background thread; NULL-terminated */
	void (*const *init)(void);

	/* The per-CPU layer (cpu/). */
	/* where a CPU part keeps its counters (offsetof(struct cpu_cache, stat)):
	 * the core counts its events on the part that called it */
	size_t part_stats;
	/* the sizes of the per-CPU layer's structures, which live in the
	 * core's internal caches: a CPU part (and its alignment), a thread's */
	size_t part_size, part_align, thread_size;
	/* classic mode: a free froze the full slab `slab` for part c, nfree of
	 * its objects free: onto c's CPU partial list (free_chain) */
	void (*part_freeze)(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, unsigned nfree);
	/* destroy (cache_mutex held): take back every CPU part and the barn;
	 * once nothing is live, free the parts of exited threads */
	void (*parts_orphan)(struct uslab_cache *s);
	void (*parts_release)(struct uslab_cache *s);
	/* cpu_mode or sheaf_capacity changed: parts that run per CPU take it
	 * up now (cache_mutex held) */
	void (*parts_retune)(struct uslab_cache *s);
	/* shrink: everything unused back (decay.c's mem_take_back) */
	unsigned long (*take_back)(struct uslab_cache *only, bool all);

	/* Slab mode (cpu/array.c): its slabs' layout and tunables at create
	 * and at an order change, and its SLAB-format slabs, which every
	 * free path of the core may meet (their objects go to array.c). */
	void (*array_cache_init)(struct uslab_cache *s);
	void (*array_set_order)(struct uslab_cache *s, unsigned order);
	void (*array_slab_shape)(const struct uslab_cache *s, unsigned *order, unsigned *objects);
	void (*array_free_chain)(struct uslab_cache *s, struct cpu_cache *c, struct slab *slab, void *head,
				 unsigned cnt);
	void (*array_free_objs)(struct uslab_cache *s, struct cpu_cache *c, void *const *objs, unsigned n,
				bool from_cpu);
	unsigned long (*array_shrink)(struct uslab_cache *s);
	unsigned long (*array_free_objects_locked)(struct uslab_cache *s);
	void *(*array_alloc_nocpu)(struct uslab_cache *s);

	/* slub_debug (debug/debug.c): the layout of a debug cache, the hooks
	 * of the node-locked path, reports, and a cache's random sequence
	 * (slab_freelist_random) */
	unsigned (*debug_flags_for)(const char *name, unsigned long flags);
	size_t (*debug_layout)(struct uslab_cache *s, size_t size, size_t align);
	void (*debug_init_slab)(struct uslab_cache *s, struct slab *slab);
	const char *(*debug_alloc)(struct uslab_cache *s, struct slab *slab, void *x, size_t asked, void *caller);
	const char *(*debug_free)(struct uslab_cache *s, struct slab *slab, void *x, void *caller);
	void (*debug_report_done)(struct uslab_cache *s, const void *x, const char *bug);
	void (*debug_report_live)(struct uslab_cache *s);
	void (*debug_cache_made)(struct uslab_cache *s);
	void (*debug_cache_gone)(struct uslab_cache *s);
	/* KFENCE (debug/kfence.c): a cache's live samples (destroy counts them) */
	unsigned long (*sampled_live)(const struct uslab_cache *s);

	/* fork (fork.c): the lock taken before cache_mutex (creating the
	 * kmalloc classes) and the one after the page locks (huge blocks);
	 * the child's settling of vanished threads' CPU parts */
	pthread_mutex_t *(*fork_lock_first)(void);
	pthread_mutex_t *(*fork_lock_last)(void);
	void (*fork_child)(void);
	/* caches the fork handler reaches without the cache list (the kmalloc
	 * classes): the i-th in *s (NULL if not made yet); false past the end */
	bool (*fork_known_cache)(unsigned i, struct uslab_cache **s);
	/* a cache's locks the per-CPU layer holds before the node's (the
	 * per-CPU backend's parts): fn on each in order; false: fn stopped */
	bool (*fork_part_locks)(struct uslab_cache *s, bool (*fn)(pthread_mutex_t *m));
};
extern const struct core_hooks core_hooks USLAB_HIDDEN;

/* Count an event on CPU part c (its owner), or on the cache when there is
 * none: the core's stat_add(), through core_hooks.part_stats (cpu.h has
 * the same for the layers that know struct cpu_cache). */
static inline void core_stat_add(struct uslab_cache *s, struct cpu_cache *c, enum uslab_stat_item i, uint64_t n)
{
	if (likely(c)) {
		_Atomic uint64_t *ctr = (_Atomic uint64_t *)((char *)c + core_hooks.part_stats) + i;
		atomic_store_explicit(ctr, atomic_load_explicit(ctr, memory_order_relaxed) + n, memory_order_relaxed);
	} else {
		atomic_fetch_add_explicit(&s->stat_gone[i], n, memory_order_relaxed);
	}
}
static inline void core_stat_inc(struct uslab_cache *s, struct cpu_cache *c, enum uslab_stat_item i)
{
	core_stat_add(s, c, i, 1);
}

/* ---- fork.c ---------------------------------------------------------------- */
USLAB_HIDDEN void fork_init(void);
/* A decay pass's hold of cache_mutex (decay.c), for fork (fork.c: "Decay
 * passes"): begin right after taking it; fork_pass_unlock() gives it back.
 * Between the two the pass changes nothing cache_mutex protects and waits
 * for other allocator locks with cache_mutex as its only one. */
USLAB_HIDDEN void fork_pass_begin(void);
USLAB_HIDDEN void fork_pass_unlock(void);

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
