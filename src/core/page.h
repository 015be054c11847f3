/*
 * Page allocator: the user-space struct page world.
 *
 * Memory comes from the OS in segments of SEG_SIZE bytes aligned to
 * SEG_SIZE. A segment starts with a descriptor (struct slab) for each of its
 * pages, so that any pointer finds its page descriptor with a mask and an
 * index, and its slab through the descriptor's head index: O(1), no lock,
 * no search. A global bitmap of segments tells uslab's pointers from others.
 *
 * Blocks of 2^order pages (order 0..PAGE_MAX_ORDER) are handed out from
 * per-order free lists with buddy coalescing. Freed blocks keep their memory
 * until they have been free for page_purge_delay_ms; then their pages are
 * given back with madvise, and segments that are wholly free are unmapped.
 */
#ifndef USLAB_PAGE_H
#define USLAB_PAGE_H

#include "internal.h"

#define SEG_SHIFT       22
#define SEG_SIZE        (1UL << SEG_SHIFT)            /* 4 MiB */
#define SEG_MASK        (SEG_SIZE - 1)
#define SEG_PAGES       (SEG_SIZE >> PAGE_SHIFT)      /* 1024 */
#define PAGE_MAX_ORDER  9                             /* 2 MiB: the largest block a segment holds */
#define ADDR_BITS       47                            /* user address space covered by the map */
#define SEG_MAP_BITS    (1UL << (ADDR_BITS - SEG_SHIFT))

enum page_kind {
	PK_META = 0,   /* segment header page (never handed out) */
	PK_FREE,       /* head of a free block */
	PK_SLAB,       /* head page of a slab */
	PK_BUSY,       /* head of an allocated block that is not (yet) a slab */
	PK_PURGING,    /* head of a free block being given back (off the free lists) */
	PK_LARGE,      /* head of a malloc block above the largest kmalloc class (large.c):
	                * `objects` holds its size in pages, `order` the order of its
	                * first buddy piece (a trimmed block is several pieces) */
};

/*
 * Descriptor of one page. Fields marked "head" mean something in the first
 * page of a block only; other pages of a block hold only `head`. One cache
 * line each, so that slabs of different threads never share a line.
 */
struct slab {
	/* slab: free-list head (as an offset in the segment), inuse count and
	 * frozen bit in one word, changed together by compare-and-swap. */
	_Atomic uint64_t fc;
	struct uslab_cache *cache;  /* slab: owning cache; NULL otherwise */
	struct slab *next;          /* head: node/CPU partial list, an owner's list, or free-list link */
	struct slab *prev;          /* head: node partial list, an owner's list, or free-list back link */
	/* Ownership (home.c): the CPU part that owns this slab, or NULL,
	 * and its thread's tag (otag, below). Written by the owner (relaxed
	 * stores); remote freers read them relaxed and take any stale value
	 * to the old owner's inbox, which re-routes. */
	struct cpu_cache *_Atomic owner;
	union {
		uint64_t free_time;     /* free block: when freed (ms, os_now_ms) */
		void *lfree;            /* owned slab: the owner's private free list (obfuscated links),
		                         * objects it freed while the slab was not its current one;
		                         * SLAB-format slab: its off-slab index list, or NULL */
	};
	/* The owner's thread tag, 0 if none: what the free fast path compares
	 * with cpu_tls.tag, equal only for a live slab owned by the calling
	 * thread (so it stands for the kind check there too). SLAB_TAG_ARRAY
	 * (slab.h; even, never a thread's): a SLAB-format slab, nobody's. */
	_Atomic uint32_t otag;
	uint16_t objects;           /* slab: object slots */
	_Atomic uint8_t kind;       /* head: enum page_kind; atomic: the page allocator reads a
	                             * buddy's kind while its owner may change it (BUSY<->SLAB) */
	uint8_t order;              /* head: block order */
	uint8_t on_node;            /* slab: on the node partial list (node list_lock) */
	uint8_t dirty;              /* free block: has pages not yet given back to the OS */
	uint16_t pfree;             /* slab on a classic CPU partial list: the free objects it
	                             * was counted with there; owned slab: objects its owner has
	                             * out (not on lfree nor its free list), owner only */
	uint16_t cid;               /* slab: its cache's id, so that free() reaches the CPU part
	                             * without loading the cache first */
	uint16_t colour;            /* slab: bytes before its first object (a SLAB-format slab's
	                             * colour, cpu/array.c; 0 for every other slab): on the line the
	                             * free fast path loads anyway */
} __attribute__((aligned(CACHE_LINE)));
_Static_assert(sizeof(struct slab) == CACHE_LINE, "one descriptor per cache line");
_Static_assert((SEG_PAGES - 1) * CACHE_LINE <= UINT16_MAX, "head[] holds descriptor offsets");


struct segment {
	/* Every page: its block's head page index times the descriptor size
	 * (64), which is the head descriptor's offset from desc[0] and, shifted
	 * by 6, the block's offset in the segment: the free fast path gets both
	 * with an add and a shift. Apart from the descriptors, dense (32 pages
	 * a line), so that finding an object's slab misses on at most the head
	 * descriptor. */
	uint16_t head[SEG_PAGES];
	struct slab desc[SEG_PAGES] __attribute__((aligned(CACHE_LINE)));   /* one per page of the segment */
	uint64_t magic;
	struct segment *next, *prev;   /* all segments (page lock) */
	uint32_t used_pages;           /* pages in allocated blocks (page lock) */
	uint32_t dirty_pages;          /* free pages not yet given back (page lock) */
	uint64_t empty_since;          /* when used_pages dropped to 0 (ms) */
	/* USLAB_OPTIONS=hardened: a bit per 8-byte granule of the segment, set
	 * while an object that starts there is live (slab.h: live_set/clear).
	 * Untouched, and so free of memory, otherwise. */
	_Atomic uint64_t live[SEG_SIZE / 8 / 64] __attribute__((aligned(PAGE_SIZE)));
};

#define SEG_HEADER_PAGES ((sizeof(struct segment) + PAGE_SIZE - 1) / PAGE_SIZE)

/* Bit per possible segment of the address space: set while the segment is
 * ours. Written under the page lock, read locklessly (relaxed: a pointer
 * that is ours was published to its user after the bit was set). */
extern _Atomic uint64_t page_seg_map[SEG_MAP_BITS / 64] USLAB_HIDDEN;

static inline struct segment *page_segment(const void *p)
{
	return (struct segment *)((uintptr_t)p & ~SEG_MASK);
}

static inline unsigned page_kind(const struct slab *d)
{
	return atomic_load_explicit(&d->kind, memory_order_relaxed);
}
static inline void page_set_kind(struct slab *d, unsigned k)
{
	atomic_store_explicit(&d->kind, (uint8_t)k, memory_order_release);
}

/* Stands for every pointer outside our segments: kind PK_META, 0 objects,
 * so checks on it fail without a NULL test on the fast path. */
extern struct slab page_foreign USLAB_HIDDEN;

/* The descriptor of the block holding p, or &page_foreign if p is in no
 * segment of ours. The caller checks kind/cache: p may be in a free or
 * header page. */
static inline struct slab *page_obj_slab(const void *p)
{
	uintptr_t a = (uintptr_t)p, si = a >> SEG_SHIFT;
	if (unlikely(si >= SEG_MAP_BITS))
		return &page_foreign;
	uint64_t w = atomic_load_explicit(&page_seg_map[si / 64], memory_order_relaxed);
	if (unlikely(!(w & (1ULL << (si % 64)))))
		return &page_foreign;
	struct segment *seg = (struct segment *)(a & ~SEG_MASK);
	return (struct slab *)((char *)seg->desc + seg->head[(a & SEG_MASK) >> PAGE_SHIFT]);
}

/* page_obj_slab() that also gives the block's first byte (computed from
 * the head index the lookup reads anyway). */
static inline struct slab *page_obj_lookup(const void *p, uintptr_t *base)
{
	uintptr_t a = (uintptr_t)p, si = a >> SEG_SHIFT;
	*base = 0;
	if (unlikely(si >= SEG_MAP_BITS))
		return &page_foreign;
	uint64_t w = atomic_load_explicit(&page_seg_map[si / 64], memory_order_relaxed);
	if (unlikely(!(w & (1ULL << (si % 64)))))
		return &page_foreign;
	struct segment *seg = (struct segment *)(a & ~SEG_MASK);
	uintptr_t h = seg->head[(a & SEG_MASK) >> PAGE_SHIFT];   /* head index * 64 */
	*base = (uintptr_t)seg + (h << (PAGE_SHIFT - 6));
	return (struct slab *)((char *)seg->desc + h);
}

/* Does d, the descriptor a lookup found for a pointer, say that the
 * pointer lies in free pages (a slab given back, a freed large block)?
 * A free page's head index still names the head of the block it last
 * belonged to, and that descriptor is free (the head or a merged part of
 * a free block: kinds stay PK_FREE when buddies merge) until a new block
 * covers the page, which rewrites the index. So a pointer whose
 * descriptor is free was handed out once and is free now: the reports
 * say "free of a freed block" rather than "invalid free". */
static inline bool page_desc_free(const struct slab *d)
{
	unsigned k = page_kind(d);
	return d != &page_foreign && (k == PK_FREE || k == PK_PURGING);
}

/* First byte of the block a head descriptor describes. */
static inline void *page_address(const struct slab *d)
{
	struct segment *seg = page_segment(d);
	return (char *)seg + ((size_t)(d - seg->desc) << PAGE_SHIFT);
}

/* Allocate a block of 2^order pages; returns its head descriptor with kind
 * PK_BUSY and every page's head index set, or NULL (errno ENOMEM). */
USLAB_HIDDEN struct slab *page_alloc(unsigned order);
/* Free a block returned by page_alloc(). */
USLAB_HIDDEN void page_free(struct slab *d);
/* Give back every free page now and unmap every empty segment. */
USLAB_HIDDEN void page_release_all(void);

/* Call fn on the head descriptor of every block of kind PK_SLAB, with the
 * page lock held (blocks cannot come or go meanwhile; fn must not call
 * into the page allocator). */
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
/* Give back what has decayed; returns when the next block is due (ms,
 * os_now_ms), 0 if nothing is dirty. */
USLAB_HIDDEN uint64_t page_decay(void);
/* decay.c: a free made memory dirty that nobody will purge soon: wake a
 * background thread that sleeps with nothing to do (cheap otherwise). */
USLAB_HIDDEN void mem_dirty_notify(void);

#endif
