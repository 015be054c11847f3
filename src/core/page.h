/*
 * Page allocator and slab records: the memory under every slab.
 *
 * Memory comes from the OS in segments of SEG_SIZE (4 MiB) aligned to
 * SEG_SIZE. A segment is 64 slots of 64 KiB and 1024 pages of 4 KiB:
 *
 *   0      4 KiB                      ~40 KiB        104 KiB  128 KiB                          4 MiB
 *   +------+--------------------------+--------------+--------+-------+-------+-- ... --+-------+
 *   |slab[]| header | page[1024]      | (live bits:  | small  | slot 2| slot 3|         |slot 63|
 *   |64 x  | (list, | page allocator's | hardened     | blocks | slab  | slab  |         | large |
 *   |64 B  | counts)| descriptors     | only)        |        |       |  ...  |         | block |
 *   +------+--------------------------+--------------+--------+-------+-------+-- ... --+-------+
 *    slot 0 .......................................... slot 1
 *
 *   - slab[i] is the record of the slab that starts at slot i: everything a
 *     free needs, in one cache line (struct slab). 64 records are 4 KiB
 *     per 4 MiB of memory, so they stay in cache where per-page
 *     descriptors (64 KiB per segment) missed. Every slab is a block of at
 *     least one slot (SLAB_MIN_ORDER), aligned to its size, so pointer ->
 *     record is a mask and a shift: &seg->slab[(p >> 16) & 63], no index
 *     table. A slab of several slots (big objects) has its record at its
 *     first slot; the others hold SK_TAIL records that say how far back
 *     it is (the slow paths follow them). A slot that starts no slab
 *     (header, large blocks, free pages) has an SK_NONE record.
 *   - page[] is the buddy allocator's own: a descriptor per 4 KiB page for
 *     free lists, block heads and large blocks (malloc blocks above the
 *     kmalloc classes, page-granular). Only the slow paths read it.
 *
 * Blocks of 2^order pages (order 0..PAGE_MAX_ORDER) come from per-order
 * free lists with buddy coalescing. Inside a block only its first page's
 * descriptor is a head (PK_FREE, PK_BUSY, PK_PURGING, PK_LARGE); the
 * others are PK_TAIL (or PK_META, never used), also after buddies merge,
 * so the block holding any page is found by walking back to the nearest
 * head (page_block). Freed blocks keep their memory until they have been
 * free for page_purge_delay_ms; then their pages are given back with
 * madvise, and segments that are wholly free are unmapped.
 *
 * A global bitmap of segments tells uslab's pointers from others before
 * anything in a segment is read.
 */
#ifndef USLAB_PAGE_H
#define USLAB_PAGE_H

#include "internal.h"

#define SEG_SHIFT       22
#define SEG_SIZE        (1UL << SEG_SHIFT)            /* 4 MiB */
#define SEG_MASK        (SEG_SIZE - 1)
#define SEG_PAGES       (SEG_SIZE >> PAGE_SHIFT)      /* 1024 */
#ifndef USLAB_SLOT_SHIFT
#define USLAB_SLOT_SHIFT 16
#endif
#define SLOT_SHIFT      USLAB_SLOT_SHIFT
#define SLOT_SIZE       (1UL << SLOT_SHIFT)           /* 64 KiB: the smallest slab */
#define SLOT_MASK       (SLOT_SIZE - 1)
#define SEG_SLOTS       (SEG_SIZE >> SLOT_SHIFT)      /* 64 */
#define SLAB_MIN_ORDER  (SLOT_SHIFT - PAGE_SHIFT)     /* 4: every slab is one slot or more */
#define PAGE_MAX_ORDER  9                             /* 2 MiB: the largest block a segment holds */
#define ADDR_BITS       47                            /* user address space covered by the map */
#define SEG_MAP_BITS    (1UL << (ADDR_BITS - SEG_SHIFT))

/* What a page descriptor says (the buddy allocator's view). */
enum page_kind {
	PK_META = 0,   /* header page, or never handed out */
	PK_FREE,       /* head of a free block */
	PK_BUSY,       /* head of an allocated block (a slab's, or another user's) */
	PK_PURGING,    /* head of a free block being given back (off the free lists) */
	PK_LARGE,      /* head of a malloc block above the largest kmalloc class (large.c):
	                * `npages` its size in pages, `order` the order of its first
	                * buddy piece (a trimmed block is several pieces) */
	PK_PIECE,      /* head of a later piece of a large block: not a block of its own,
	                * but a buddy head the allocator must not merge into a free one */
	PK_TAIL,       /* any other page of a block */
};

/* The page allocator's descriptor of a 4 KiB page (32 bytes). Fields
 * marked "head" mean something in a block's first page only. */
struct page {
	struct page *next, *prev;   /* head of a free block: its free list */
	uint64_t free_time;         /* head of a free block: when freed (ms, os_now_ms) */
	uint16_t npages;            /* PK_LARGE: pages the block keeps */
	/* atomic: a buddy's kind is read while its owner may change it */
	_Atomic uint8_t kind;       /* enum page_kind */
	uint8_t order;              /* head: block order */
	uint8_t dirty;              /* free block: has pages not yet given back to the OS */
	uint8_t pad[3];
};
_Static_assert(sizeof(struct page) == 32, "page descriptors: two a cache line");

/* What a slab record says. */
enum slab_kind {
	SK_NONE = 0,   /* no slab starts at this slot */
	SK_SLAB,       /* a live slab starts here (published: its fields are set) */
	SK_TAIL,       /* a later slot of a slab of several slots: `back` slots to its record */
};

/*
 * The record of a slab (SLUB's struct slab, kept in its segment's header,
 * one per 64 KiB slot): one cache line, everything the free fast paths
 * read, so that a free of any object loads one record line that stays
 * hot (4 KiB of records per 4 MiB segment).
 */
struct slab {
	/* free-list head (as an offset in the segment), inuse count and
	 * frozen bit in one word, changed together by compare-and-swap. */
	_Atomic uint64_t fc;
	/* owning cache; NULL in every record that is not a slab's own (SK_NONE,
	 * SK_TAIL: never set there, cleared before a slab's block goes back),
	 * so that cache == s stands for the kind check (cpu.h's slab_free_fast) */
	struct uslab_cache *cache;
	struct slab *next;          /* node/CPU partial list, an owner's list, the empty list */
	struct slab *prev;          /* node partial list, an owner's list, the empty list */
	/* Ownership (home.c): the CPU part that owns this slab, or NULL,
	 * and its thread's tag (otag, below). Written by the owner (relaxed
	 * stores); remote freers read them relaxed and take any stale value
	 * to the old owner's inbox, which re-routes. */
	struct cpu_cache *_Atomic owner;
	union {
		uint64_t free_time;     /* on a node's empty list: when it went there (ms, os_now_ms) */
		void *lfree;            /* owned slab: the owner's private free list (obfuscated links),
		                         * objects it freed while the slab was not its current one;
		                         * SLAB-format slab: its off-slab index list, or NULL */
	};
	/* The owner's thread tag, 0 if none: what the free fast path compares
	 * with cpu_tls.tag, equal only for a live slab owned by the calling
	 * thread (so it stands for the kind check there too). SLAB_TAG_ARRAY
	 * (slab.h; even, never a thread's): a SLAB-format slab, nobody's. */
	_Atomic uint32_t otag;
	uint16_t objects;           /* object slots */
	_Atomic uint8_t kind;       /* enum slab_kind; release when it becomes SK_SLAB */
	uint8_t order;              /* the slab's block order (pages), >= SLAB_MIN_ORDER */
	union {
		uint8_t on_node;    /* on the node partial list (1) or empty list (2) (node list_lock) */
		uint8_t back;       /* SK_TAIL: slots back to the slab's record */
	};
	/* Chunks of objects initialized so far (slab.h, "carving"): the rest
	 * have never been touched. Advanced only by whoever holds the slab
	 * (frozen, owned, or taken under the node lock). */
	uint8_t carve;
	uint16_t pfree;             /* slab on a classic CPU partial list: the free objects it
	                             * was counted with there; owned slab: objects its owner has
	                             * out (not on lfree nor its free list), owner only */
	uint16_t cid;               /* its cache's id, so that free() reaches the CPU part
	                             * without loading the cache first */
	uint16_t colour;            /* bytes before its first object (a SLAB-format slab's
	                             * colour, cpu/array.c; 0 for every other slab) */
} __attribute__((aligned(CACHE_LINE)));
_Static_assert(sizeof(struct slab) == CACHE_LINE, "one record per cache line");

struct segment {
	struct slab slab[SEG_SLOTS];   /* one record per slot: at the segment's start (see the top) */
	uint64_t magic;
	struct segment *next, *prev;   /* all segments (page lock) */
	uint32_t used_pages;           /* pages in allocated blocks (page lock) */
	uint32_t dirty_pages;          /* free pages not yet given back (page lock) */
	uint64_t empty_since;          /* when used_pages dropped to 0 (ms) */
	struct page page[SEG_PAGES] __attribute__((aligned(CACHE_LINE)));   /* one per page */
	/* USLAB_OPTIONS=hardened: a bit per 8-byte granule of the segment, set
	 * while an object that starts there is live (slab.h: live_set/clear).
	 * Untouched, and so free of memory, otherwise. */
	_Atomic uint64_t live[SEG_SIZE / 8 / 64] __attribute__((aligned(PAGE_SIZE)));
};

#define SEG_HEADER_PAGES ((sizeof(struct segment) + PAGE_SIZE - 1) / PAGE_SIZE)

/* A byte per possible segment of the address space (32 MiB of address
 * space, untouched but where segments are: no memory): nonzero while the
 * segment is ours. A byte rather than a bit: the free fast path tests it
 * with one compare, no shift and mask. Written under the page lock, read
 * locklessly (relaxed: a pointer that is ours was published to its user
 * after the byte was set). */
extern _Atomic uint8_t page_seg_map[SEG_MAP_BITS] USLAB_HIDDEN;

static inline struct segment *page_segment(const void *p)
{
	return (struct segment *)((uintptr_t)p & ~SEG_MASK);
}

/* Is p inside one of our segments, of the first `lim` (SEG_MAP_BITS: all)? */
static inline bool page_ours_below(const void *p, uintptr_t lim)
{
	uintptr_t si = (uintptr_t)p >> SEG_SHIFT;
	return si < lim && atomic_load_explicit(&page_seg_map[si], memory_order_relaxed);
}
/* Is p inside one of our segments? */
static inline bool page_ours(const void *p)
{
	return page_ours_below(p, SEG_MAP_BITS);
}

static inline unsigned page_kind(const struct page *pg)
{
	return atomic_load_explicit(&pg->kind, memory_order_relaxed);
}
static inline void page_set_kind(struct page *pg, unsigned k)
{
	atomic_store_explicit(&pg->kind, (uint8_t)k, memory_order_release);
}
/* The descriptor of the page holding p (p in a segment of ours). */
static inline struct page *page_desc(const void *p)
{
	return &page_segment(p)->page[((uintptr_t)p & SEG_MASK) >> PAGE_SHIFT];
}
/* The first byte of the page (or block) a descriptor describes. */
static inline void *page_address(const struct page *pg)
{
	struct segment *seg = page_segment(pg);
	return (char *)seg + ((size_t)(pg - seg->page) << PAGE_SHIFT);
}

/* ---- slab records --------------------------------------------------------- */

static inline unsigned slab_kind(const struct slab *d)
{
	return atomic_load_explicit(&d->kind, memory_order_relaxed);
}

/* Stands for every pointer outside our segments: SK_NONE, otag 0, no
 * cache, 0 objects, so checks on it fail without a NULL test on the fast
 * paths. Never written. */
extern struct slab slab_foreign USLAB_HIDDEN;

/* The record of p's slot (p in a segment of ours: page_ours): a live
 * slab's record (SK_SLAB) only if a slab starts at p's slot; the caller
 * checks. A mask and a shift. */
static inline struct slab *slab_record(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	return &page_segment(p)->slab[(a >> SLOT_SHIFT) & (SEG_SLOTS - 1)];
}

/* Start loading the line of object p for writing, at the top of a free:
 * the double-free mark's word is read only once p's record and cache are
 * (its address needs the cache's offset), so a cold object's miss would
 * otherwise wait for theirs. A prefetch never faults, whatever p is.
 * (2026-11-26, churn: 1.44 -> 1.27 s, medians of 7 interleaved.) */
static inline void slab_prefetch_obj(const void *p)
{
#if defined(__x86_64__)
	__asm__("prefetchw %0" : : "m"(*(const char *)p));
#else
	__builtin_prefetch(p, 1);
#endif
}

/* The record of p's slot, or &slab_foreign if p is in no segment of ours. */
static inline struct slab *slab_lookup(const void *p)
{
	return likely(page_ours(p)) ? slab_record(p) : &slab_foreign;
}

/* The record of the slab holding p, also in a later slot of a slab of
 * several (following its SK_TAIL record), or &slab_foreign. The slow
 * paths' lookup; the caller checks the kind. */
static inline struct slab *slab_of(const void *p)
{
	struct slab *d = slab_lookup(p);
	if (unlikely(slab_kind(d) == SK_TAIL))
		d -= d->back;
	return d;
}

/* The first byte of the slab a record describes (its slot's). */
static inline void *slab_address(const struct slab *d)
{
	struct segment *seg = page_segment(d);
	return (char *)seg + ((size_t)(d - seg->slab) << SLOT_SHIFT);
}

/* ---- blocks --------------------------------------------------------------- */

/* The head descriptor of the block holding p (p in a segment of ours):
 * the nearest head at or before p's page (the top of the file). NULL for
 * the header pages. Slow paths only (misuse reports, large blocks). */
USLAB_HIDDEN struct page *page_block(const void *p);

/* Is p in free pages of one of our segments (a slab or a large block that
 * went back to the page allocator)? The reports then say "free of a freed
 * block" rather than "invalid free". */
USLAB_HIDDEN bool page_is_freed(const void *p);

/* Allocate a block of 2^order pages, aligned to its size; its head
 * descriptor has kind PK_BUSY. NULL (errno ENOMEM) if no memory. */
USLAB_HIDDEN void *page_alloc(unsigned order);
/* Free a block returned by page_alloc() (p: its first byte; its head
 * descriptor's order says how big). */
USLAB_HIDDEN void page_free(void *p);
/* Give back every free page now and unmap every empty segment. */
USLAB_HIDDEN void page_release_all(void);

/* Call fn on the record of every live slab (SK_SLAB), with the page lock
 * held (blocks cannot come or go meanwhile; fn must not call into the page
 * allocator). */
USLAB_HIDDEN void page_for_each_slab(void (*fn)(struct slab *d, void *arg), void *arg);


struct page_info {
	uint64_t segments;      /* segments mapped */
	uint64_t mapped_bytes;  /* bytes mapped */
	uint64_t used_bytes;    /* bytes in allocated blocks */
	uint64_t dirty_bytes;   /* free bytes not yet given back */
	uint64_t free_blocks[PAGE_MAX_ORDER + 1];
};
USLAB_HIDDEN void page_get_info(struct page_info *pi);

/* How long a free block keeps its memory before it is given back
 * (USLAB_OPTIONS=decay_ms=N; 0: at once), and the most free memory kept
 * dirty whatever its age, in MiB (decay_dirty_max=N). */
extern unsigned page_purge_delay_ms USLAB_HIDDEN;
extern unsigned page_dirty_max_mb USLAB_HIDDEN;
/* What the dirty bound has learned, in bytes (page.c: pages that purges
 * gave back and the program soon allocated again), and the bound itself:
 * decay_dirty_max, half the pages in use, or that, whichever is most. */
USLAB_HIDDEN uint64_t page_dirty_learned(void);
USLAB_HIDDEN uint64_t page_dirty_bound(void);
/* Blocks freed since `since` (ms, os_now_ms) are due at once: a decay
 * pass freed them, memory that had gone unused for the delay already (an
 * idle part's sheaves, a barn, empty slabs kept for reuse), so that it
 * does not wait for the delay a second time. Other threads' frees during
 * the pass (milliseconds) are aged with them. */
USLAB_HIDDEN void page_age_since(uint64_t since);
/* Give back what has decayed; returns when the next block is due (ms,
 * os_now_ms), 0 if nothing is dirty. */
USLAB_HIDDEN uint64_t page_decay(void);
/* decay.c: a free made memory dirty that nobody will purge soon: wake a
 * background thread that sleeps with nothing to do (cheap otherwise). */
USLAB_HIDDEN void mem_dirty_notify(void);

#endif
