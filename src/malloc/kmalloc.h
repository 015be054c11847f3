/*
 * kmalloc and the malloc family, internal interface (kmalloc.c, large.c,
 * malloc.c, override.c, override_cpp.cc).
 *
 * Three tiers, picked by size:
 *   - kmalloc caches: KMALLOC_NR_CLASSES slab caches of 8 .. 32 KiB, 8-byte
 *     steps to 128, then four classes per power of two (waste <= 25 %, and
 *     <= 12.5 % on average for uniform sizes). size -> class is a table
 *     lookup; the fast paths are slab_alloc_fast_sized()/slab_free_fast().
 *   - large blocks (large.c): up to 2 MiB, whole pages from the page
 *     allocator, marked PK_LARGE, trimmed to eighths of their order.
 *   - huge blocks (large.c): above 2 MiB, their own mappings, found by free
 *     through a registry, kept in a decaying cache when freed.
 *
 * free(p) finds which through the record of p's slot (slab_lookup): a
 * slab's -> slab free; a slot with no slab -> the page allocator's head of
 * p's block (page_block): PK_LARGE -> large free; a pointer outside every
 * segment -> huge registry; anything else -> "uslab: fatal: invalid free".
 */
#ifndef USLAB_KMALLOC_H
#define USLAB_KMALLOC_H

#include "cpu.h"
#include "debug.h"

#define KMALLOC_MAX_SIZE     (32UL * 1024)   /* largest kmalloc class */
#define KMALLOC_NR_CLASSES   48              /* 16 of 8..128, then 4 per power of two to 32 KiB */
#define KMALLOC_SMALL_MAX    1024            /* kmalloc_idx_small covers 0..1024 in steps of 8 */
#define HUGE_MIN_SIZE        (PAGE_SIZE << PAGE_MAX_ORDER)   /* above this: huge mappings */
/* Requests above this fail with ENOMEM at once (glibc: PTRDIFF_MAX). */
#define MALLOC_MAX_REQUEST   ((size_t)PTRDIFF_MAX - 2 * SEG_SIZE)

/* The class caches (roots), NULL until kmalloc_init() ran. */
extern struct uslab_cache *kmalloc_caches[KMALLOC_NR_CLASSES] USLAB_HIDDEN;
extern uint8_t kmalloc_idx_small[KMALLOC_SMALL_MAX / 8 + 1] USLAB_HIDDEN;      /* (size + 7) >> 3 */
extern uint8_t kmalloc_idx_big[KMALLOC_MAX_SIZE / 128 + 1] USLAB_HIDDEN;       /* (size + 127) >> 7 */
extern uint32_t kmalloc_class_size[KMALLOC_NR_CLASSES] USLAB_HIDDEN;

/* Class index of a size <= KMALLOC_MAX_SIZE (0 maps to the 8-byte class). */
static inline unsigned kmalloc_index(size_t size)
{
	return size <= KMALLOC_SMALL_MAX ? kmalloc_idx_small[(size + 7) >> 3] : kmalloc_idx_big[(size + 127) >> 7];
}

/* The inline paths' limits: sizes below `small` and `mid` take them, and
 * pointers in segments below `seg` free through them (page_ours_below).
 * Normally KMALLOC_SMALL_MAX + 1, KMALLOC_MAX_SIZE + 1 and SEG_MAP_BITS;
 * all 0 while M_PERTURB is on (kmalloc_set_perturb), so that every call
 * takes kmalloc_slow() or kfree_other(), which fill the block. So the
 * perturb check costs the fast paths nothing: they compare with memory
 * where they would compare with a constant. */
struct kmalloc_lims {
	size_t small, mid;
	uintptr_t seg;
};
extern struct kmalloc_lims kmalloc_lim USLAB_HIDDEN;
/* M_PERTURB's byte (0: off), and setting it (mallopt). */
extern int kmalloc_perturb USLAB_HIDDEN;
USLAB_HIDDEN void kmalloc_set_perturb(int value);
/* M_PERTURB's fills: a new block's n bytes with the byte's complement; a
 * block about to be freed over its usable size with the byte (slab
 * objects and large blocks; huge ones are left alone, as glibc leaves its
 * mmapped chunks). Both return at once while it is off. */
USLAB_HIDDEN void *kmalloc_perturb_alloc(void *p, size_t n);
USLAB_HIDDEN void kmalloc_perturb_free(void *p);

/* kmalloc() past its fast path: the class caches not made yet, a part
 * to make or refill, KFENCE, large and huge sizes, impossible sizes, and
 * every size while M_PERTURB is on. */
USLAB_HIDDEN void *kmalloc_slow(size_t size);
USLAB_HIDDEN void *kmalloc_class_slow(size_t size, struct cpu_cache *c);

/*
 * The malloc fast path: size -> this thread's part for its class (up to
 * KMALLOC_SMALL_MAX one load, indexed by size / 8, from the array the TLS
 * block points at; above, through the class table), part -> pop. The part
 * starts as cpu_empty (nothing to pop): its first use and the class
 * caches' creation go through kmalloc_class_slow().
 */
static inline __attribute__((always_inline)) void *kmalloc_tls(size_t size)
{
	struct cpu_cache *c;
	if (likely(size < kmalloc_lim.small))
		c = cpu_tls.ksize[(size + 7) >> 3];
	else if (size < kmalloc_lim.mid)
		c = cpu_tls.kparts[kmalloc_idx_big[(size + 127) >> 7]];
	else
		return kmalloc_slow(size);
	void *x = c->freelist;
	if (likely(x != NULL)) {
		void **where = cpu_fp_where(c, x);
		void *next = cpu_fp_decode(c, where);
		if (likely(cpu_next_near(x, next))) {
			c->freelist = next;
			cpu_order();
			*where = NULL;   /* (cpu_fp_scrub: the address computed once) */
			if (unlikely(cpu_tick_alloc(&c->alloc_fast)))
				return cpu_alloc_wrapped(c->cache, c, x, false, size);
			track_alloc(x, c->cache->object_size);
			return x;
		}
	} else if (likely(c->n)) {
		uint32_t n = c->n - 1;
		x = c->objs[n];
		cpu_set_n(c, n);
		cpu_fp_scrub(c, x);   /* off: the double-free mark */
		if (unlikely(cpu_tick_alloc(&c->alloc_pcs)))
			return cpu_alloc_wrapped(c->cache, c, x, true, size);
		track_alloc(x, c->cache->object_size);
		return x;
	}
	return kmalloc_class_slow(size, c);
}

/* The same on the per-CPU backend (cpu.h's pcpu_pop): the part by size from
 * this CPU's area; the thread-local path where the CPU has none. */
static inline __attribute__((always_inline)) void *kmalloc(size_t size)
{
	if (pcpu_g.on) {
		uintptr_t slot;
		if (likely(size < kmalloc_lim.small))
			slot = pcpu_slot_ksize((size + 7) >> 3);
		else if (size < kmalloc_lim.mid)
			slot = pcpu_slot_kparts(kmalloc_idx_big[(size + 127) >> 7]);
		else
			return kmalloc_slow(size);
		void *x;
		struct cpu_cache *c;
		uint64_t nc;
		int st = pcpu_pop(slot, &x, &c, &nc);
		if (likely(st == PCPU_OK))
			return pcpu_popped(NULL, c, x, nc, size);
		if (st == PCPU_EMPTY)
			return kmalloc_class_slow(size, &cpu_empty);
	}
	return kmalloc_tls(size);
}

/* Usable bytes of object p of slab cache s: the whole stride (the free
 * pointer only matters once it is free), but in debug caches, whose stride
 * holds red zones and tracks, the size asked for: the rest of the class is
 * red zone (slub_debug Z). */
static inline size_t kmalloc_obj_usable(struct uslab_cache *s, void *p)
{
	return unlikely(s->debug) ? debug_obj_size(s, p) : s->size;
}

/* free() of anything the inline path does not take (p != NULL, d the
 * record of its slot): an object in a later slot of a slab of several, a
 * large, huge, KFENCE or boot block, misuse. */
USLAB_HIDDEN void kfree_other(void *p, struct slab *d);

/* free(): a slab this thread owns (home), any other live slab, or
 * kfree_other() (large, huge, KFENCE, boot memory, misuse, and NULL: no
 * segment of ours is at address 0, so free(NULL) needs no test of its
 * own here; the prefetch of NULL does not fault). */
static inline __attribute__((always_inline)) void kfree(void *p)
{
	slab_prefetch_obj(p);   /* (its miss overlaps the record's and cache's) */
	if (unlikely(!page_ours_below(p, kmalloc_lim.seg))) {
		kfree_other(p, &slab_foreign);   /* huge, KFENCE, boot blocks, misuse; M_PERTURB */
		return;
	}
	slab_free_fast_rec(slab_record(p), p, kfree_other);
}

/* A block above the kmalloc classes (or aligned beyond them), creating the
 * classes first if needed; *zeroed (may be NULL) tells whether it is known
 * to be zero. NULL with ENOMEM. */
USLAB_HIDDEN void *kmalloc_big(size_t size, size_t align, bool *zeroed);
/* size bytes aligned to align (a power of two); NULL with ENOMEM. */
USLAB_HIDDEN void *kmalloc_aligned(size_t size, size_t align);
/* Usable bytes of a live block; fatal report for a pointer that is not one
 * (`what` names the entry point: "malloc_usable_size", "realloc"). */
USLAB_HIDDEN size_t kmalloc_usable(const void *p, const char *what);
/* Create the class caches (idempotent); false with ENOMEM if they could not
 * be had. */
USLAB_HIDDEN bool kmalloc_init(void);
/* Bootstrap memory (allocations made while kmalloc_init() runs, re-entered
 * from inside it): a static arena, never freed. */
USLAB_HIDDEN bool kmalloc_is_boot(const void *p);
USLAB_HIDDEN size_t kmalloc_boot_usable(const void *p);
/* malloc_trim: take back what every cache holds unused (decay.c's
 * mem_take_back); nonzero if something went back. */
USLAB_HIDDEN unsigned long kmalloc_shrink_all(void);
/* Bytes in live slab objects of the class caches (stride-sized). */
USLAB_HIDDEN uint64_t kmalloc_slab_bytes_in_use(void);

/* ---- large.c ----------------------------------------------------------- */
/* A block of at least size bytes (size <= HUGE_MIN_SIZE unless align says
 * otherwise goes to the page allocator, else a huge mapping), aligned to
 * align (a power of two, or 0). *zeroed (may be NULL) tells whether the
 * memory is known to be zero. NULL with ENOMEM. */
USLAB_HIDDEN void *large_alloc(size_t size, size_t align, bool *zeroed);
/* Free a PK_LARGE block whose head descriptor is d; p must be its start. */
USLAB_HIDDEN void large_free(struct page *d, void *p);
static inline size_t large_usable(const struct page *d) { return (size_t)d->npages << PAGE_SHIFT; }
/* Resize in place: true if the block at p now holds size bytes (shrinking
 * gives the tail back). */
USLAB_HIDDEN bool large_resize(struct page *d, void *p, size_t size);
/* The head descriptor of the live large block that starts at p, or NULL. */
static inline struct page *large_block(const void *p)
{
	if (((uintptr_t)p & (PAGE_SIZE - 1)) || !page_ours(p))
		return NULL;
	struct page *d = page_desc(p);
	return page_kind(d) == PK_LARGE ? d : NULL;
}
/* Huge blocks: free (false if p is not the start of a live huge block, in
 * which case nothing is done), usable size (0 if not one), resize in place. */
USLAB_HIDDEN bool huge_free(void *p);
USLAB_HIDDEN size_t huge_usable(const void *p);
USLAB_HIDDEN bool huge_resize(void *p, size_t size);
/* Was p a huge block that is now free (in the cache of freed mappings)? */
USLAB_HIDDEN bool huge_is_freed(const void *p);
/* Unmap every cached freed huge mapping; returns the bytes given back. */
USLAB_HIDDEN size_t huge_release_all(void);
/* Unmap the cached mappings unused for the decay time; true if some stay. */
USLAB_HIDDEN bool huge_decay(void);

struct large_info {
	uint64_t large_bytes;    /* bytes in live PK_LARGE blocks */
	uint64_t large_blocks;
	uint64_t huge_bytes;     /* bytes mapped for live huge blocks */
	uint64_t huge_blocks;
	uint64_t huge_cached;    /* bytes of freed huge mappings kept for reuse */
	uint64_t huge_max_blocks, huge_max_bytes;   /* high-water marks */
};
USLAB_HIDDEN void large_get_info(struct large_info *li);

/* ---- malloc.c: the family with its C semantics, shared by the uslab_*
 * API and the libc names in override.c ----------------------------------- */
USLAB_HIDDEN void *mf_malloc(size_t n);
USLAB_HIDDEN void mf_free(void *p);
USLAB_HIDDEN void *mf_calloc(size_t n, size_t size);
USLAB_HIDDEN void *mf_realloc(void *p, size_t n);
USLAB_HIDDEN void *mf_reallocarray(void *p, size_t n, size_t size);
USLAB_HIDDEN int mf_posix_memalign(void **out, size_t align, size_t n);
USLAB_HIDDEN void *mf_aligned_alloc(size_t align, size_t n);
USLAB_HIDDEN void *mf_memalign(size_t align, size_t n);
USLAB_HIDDEN void *mf_valloc(size_t n);
USLAB_HIDDEN void *mf_pvalloc(size_t n);
USLAB_HIDDEN size_t mf_usable_size(void *p);
USLAB_HIDDEN void mf_free_sized(void *p, size_t n);
USLAB_HIDDEN void mf_free_aligned_sized(void *p, size_t align, size_t n);
USLAB_HIDDEN int mf_trim(size_t pad);
/* mallinfo2's fields, in bytes or counts. */
struct mf_info {
	size_t arena;     /* bytes in segments mapped from the OS */
	size_t ordblks;   /* free page blocks */
	size_t hblks;     /* live huge mappings */
	size_t hblkhd;    /* bytes in live huge mappings */
	size_t uordblks;  /* bytes in live blocks inside segments (slab objects by stride, large blocks) */
	size_t fordblks;  /* arena - uordblks: free pages, free slots, metadata */
	size_t keepcost;  /* free bytes not yet given back (page cache and freed huge mappings) */
	size_t max_hblks, max_hblkhd;
};
USLAB_HIDDEN void mf_get_info(struct mf_info *mi);
USLAB_HIDDEN void mf_stats_print(int fd);

#endif
