/*
 * uslab: a user-space slab allocator after Linux SLUB.
 *
 * One public header. Every function says what it returns, what errno means
 * and who may call it. Internal symbols are hidden; everything exported
 * starts with uslab_ / USLAB_.
 *
 * Thread safety: every function may be called from any thread, except that
 * uslab_cache_destroy() must not race with other calls on the same cache
 * (the same contract as kmem_cache_destroy()).
 */
#ifndef USLAB_H
#define USLAB_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define USLAB_API __attribute__((visibility("default")))
#else
#define USLAB_API
#endif

/* ======================================================================
 * Object caches
 * ====================================================================== */

struct uslab_cache;

/* Cache flags for uslab_cache_create(). */
/* Align objects to the hardware cache line (64 bytes), or to the largest
 * power of two half of it that still exceeds the object size, as SLUB does
 * for SLAB_HWCACHE_ALIGN. */
#define USLAB_HWCACHE_ALIGN  0x00002000UL
/* Never merge this cache with another one (cache merging comes later; the
 * flag is accepted now so that callers can state their intent). */
#define USLAB_NO_MERGE       0x01000000UL

/* slub_debug for this cache (also for all or named caches with
 * USLAB_OPTIONS="slub_debug=FZPU[T],cache,..."). Debug caches take the slow
 * path for every operation; other caches are not slowed.
 * F: consistency checks on every operation (slab, boundary, free list, counts);
 * Z: red zones before and after each object, checked at free and validation;
 * P: poison free objects (0x6b..., last byte 0xa5), checked at allocation
 *    and validation (write after free);
 * U: record allocation and free call sites, thread and time, for reports;
 * T: trace every allocation and free on stderr. */
#define USLAB_CONSISTENCY_CHECKS 0x00000100UL   /* F */
#define USLAB_RED_ZONE           0x00000400UL   /* Z */
#define USLAB_POISON             0x00000800UL   /* P */
#define USLAB_STORE_USER         0x00010000UL   /* U */
#define USLAB_TRACE              0x00200000UL   /* T */

/* Longest cache name accepted, not counting the terminating NUL. */
#define USLAB_NAME_MAX 63

/* Largest object a cache can hold, in bytes (before alignment padding). */
#define USLAB_CACHE_MAX_SIZE (1024UL * 1024UL)

/*
 * Create a cache of objects of `size` bytes.
 *
 * align: 0 for the default (8 bytes, or 16 when size >= 16, as malloc
 *        would), or a power of two; objects are aligned to it. Alignments
 *        above the page size are honoured by using larger slabs.
 * flags: USLAB_HWCACHE_ALIGN, USLAB_NO_MERGE and the debug flags above;
 *        other bits are EINVAL.
 * ctor:  optional constructor. SLUB semantics: it runs once per object when
 *        the slab holding the object is created, NOT on every allocation.
 *        An object must therefore be returned to its constructed state
 *        before it is freed. The constructor must not use this cache.
 * name:  copied; at most USLAB_NAME_MAX bytes. Names need not be unique.
 *
 * Returns the cache, or NULL with errno:
 *   EINVAL  size 0 or above USLAB_CACHE_MAX_SIZE, align not a power of two
 *           or above USLAB_CACHE_MAX_SIZE, unknown flag bits, NULL or empty
 *           name, name longer than USLAB_NAME_MAX;
 *   ENOMEM  memory for the cache could not be had.
 */
USLAB_API struct uslab_cache *uslab_cache_create(const char *name, size_t size, size_t align,
                                                 unsigned long flags, void (*ctor)(void *obj));

/*
 * Destroy a cache. The caller guarantees that no other thread uses the cache
 * during and after the call. Slabs cached by other threads are taken back.
 * If objects are still allocated, one line is written to stderr naming the
 * cache and the number of live objects, and the cache is left in place (still
 * valid and usable) rather than freeing memory that is in use, as the kernel
 * does. NULL is ignored.
 */
USLAB_API void uslab_cache_destroy(struct uslab_cache *cache);

/*
 * Allocate one object. Returns NULL with errno ENOMEM when memory cannot be
 * had; the cache keeps working afterwards. The object's contents are what the
 * constructor left (new slab) or what the previous user left.
 */
USLAB_API void *uslab_cache_alloc(struct uslab_cache *cache);

/* As uslab_cache_alloc(), then zero the object's `size` bytes. */
USLAB_API void *uslab_cache_zalloc(struct uslab_cache *cache);

/*
 * Free an object to the cache it came from. Any thread may free any object.
 * NULL does nothing. Never changes errno.
 *
 * Misuse that costs a compare to detect is detected in every build: a pointer
 * that is not the start of an object of a uslab slab (stack, global, interior
 * pointer), an object of another cache (both caches are named), and a double
 * free that meets the object at the head of a free list. Each writes one line
 * starting "uslab: fatal:" to stderr and calls abort().
 */
USLAB_API void uslab_cache_free(struct uslab_cache *cache, void *obj);

/*
 * Give back what the cache holds but does not use: the calling thread's CPU
 * slabs for this cache, every empty slab on the node's partial list (ignoring
 * min_partial), and then every free page of the process to the OS. Slabs
 * cached by other live threads stay with them.
 * Returns 0 if the cache holds no slabs afterwards, 1 if some remain (as
 * kmem_cache_shrink()).
 */
USLAB_API int uslab_cache_shrink(struct uslab_cache *cache);

/*
 * Tunables, at run time, as the kernel's /sys/kernel/slab/<cache>/ files:
 *   "cpu_partial"  objects kept on each CPU's partial list (0..65535;
 *                  0 turns CPU partial lists off);
 *   "min_partial"  empty slabs the node list keeps (0..1024);
 *   "order"        page order of new slabs (the smallest order that holds
 *                  an object .. 9);
 *   "cpu_queue"    objects each CPU's object queue holds (0..64; 0 turns
 *                  it off).
 * They can also be set at start: USLAB_OPTIONS="NAME:cpu_partial=N ...".
 * Return 0, or -1 with errno EINVAL for an unknown name, a value out of
 * range, or a NULL argument.
 */
USLAB_API int uslab_cache_tune_set(struct uslab_cache *cache, const char *name, unsigned long value);
USLAB_API int uslab_cache_tune_get(struct uslab_cache *cache, const char *name, unsigned long *value);

/*
 * Allocate nr objects into objs[0..nr). All or nothing: returns nr, or 0
 * with nothing allocated (errno ENOMEM when memory ran out part way;
 * EINVAL for a NULL cache or array). nr == 0 returns 0.
 */
USLAB_API size_t uslab_cache_alloc_bulk(struct uslab_cache *cache, size_t nr, void **objs);

/*
 * Free nr objects (NULL entries are skipped), as nr calls of
 * uslab_cache_free() would, with the same checks, but with one atomic
 * operation per group of objects of one slab. The array's contents are
 * left as they were.
 */
USLAB_API void uslab_cache_free_bulk(struct uslab_cache *cache, size_t nr, void **objs);

/*
 * Check every slab of the cache: each slab belongs to the cache, its free
 * list is sane (objects on boundaries, no loops, length agrees with the
 * counters), the node counts agree. Each problem is reported once on
 * stderr ("uslab: validate: ..."). Returns the number of problems found
 * (0 for a sound cache), or -1 with errno EINVAL for NULL. Slabs held by
 * other live threads' CPU parts are checked as far as their shared state
 * allows.
 */
USLAB_API long uslab_cache_validate(struct uslab_cache *cache);

/* The name given at creation. */
USLAB_API const char *uslab_cache_name(const struct uslab_cache *cache);
/* The object size given at creation. */
USLAB_API size_t uslab_cache_size(const struct uslab_cache *cache);

/* ======================================================================
 * Statistics (the kernel's stat_item events, per cache)
 * ====================================================================== */

/* Declared once, expanded many times: X(name, description). */
#define USLAB_STAT_ITEMS(X) \
	X(ALLOC_FASTPATH,        "allocation from the CPU free list") \
	X(ALLOC_SLOWPATH,        "allocation by the slow path") \
	X(FREE_FASTPATH,         "free to the CPU slab") \
	X(FREE_SLOWPATH,         "free to a slab that is not the CPU slab") \
	X(FREE_FROZEN,           "free to a slab frozen by some CPU") \
	X(FREE_ADD_PARTIAL,      "free put a full slab on the node partial list") \
	X(FREE_REMOVE_PARTIAL,   "free took an empty slab off the node partial list") \
	X(ALLOC_FROM_PARTIAL,    "CPU slab taken from the node partial list") \
	X(ALLOC_SLAB,            "CPU slab is a new slab from the page allocator") \
	X(ALLOC_REFILL,          "CPU free list refilled from the slab's remote frees") \
	X(FREE_SLAB,             "slab given back to the page allocator") \
	X(CPUSLAB_FLUSH,         "CPU slab flushed (shrink, destroy, thread exit)") \
	X(DEACTIVATE_FULL,       "CPU slab was full when deactivated") \
	X(DEACTIVATE_EMPTY,      "CPU slab was empty when deactivated") \
	X(DEACTIVATE_TO_HEAD,    "deactivated CPU slab put at the head of the partial list") \
	X(DEACTIVATE_TO_TAIL,    "deactivated CPU slab put at the tail of the partial list") \
	X(DEACTIVATE_REMOTE_FREES, "deactivated CPU slab held remotely freed objects") \
	X(DEACTIVATE_BYPASS,     "CPU slab dropped because it ran out of objects") \
	X(ORDER_FALLBACK,        "slab allocated at the minimum order after the preferred failed") \
	X(CMPXCHG_DOUBLE_FAIL,   "compare-and-swap of free list and counters retried") \
	X(CPU_PARTIAL_ALLOC,     "CPU slab taken from the CPU partial list") \
	X(CPU_PARTIAL_FREE,      "free froze a full slab onto the CPU partial list") \
	X(CPU_PARTIAL_NODE,      "slab moved from the node list to the CPU partial list") \
	X(CPU_PARTIAL_DRAIN,     "CPU partial list drained to the node list") \
	X(ALLOC_PCS,             "allocation from the CPU object queue") \
	X(FREE_PCS,              "free to the CPU object queue") \
	X(SHEAF_FLUSH,           "CPU object queue handed back to slabs") \
	X(ALLOC_BULK,            "objects allocated by alloc_bulk") \
	X(FREE_BULK,             "objects freed by free_bulk") \
	X(NODE_LOCK,             "node list lock acquisitions") \
	X(ALLOC_FAILED,          "allocation returned NULL (no memory)")

enum uslab_stat_item {
#define USLAB_X_ENUM(n, d) USLAB_STAT_##n,
	USLAB_STAT_ITEMS(USLAB_X_ENUM)
#undef USLAB_X_ENUM
	USLAB_NR_STAT_ITEMS
};

/* Name ("ALLOC_FASTPATH") and description of a stat item; NULL if out of range. */
USLAB_API const char *uslab_stat_name(enum uslab_stat_item item);
USLAB_API const char *uslab_stat_desc(enum uslab_stat_item item);

#define USLAB_CACHE_INFO_VERSION 1

/* A snapshot of one cache. Fill `version` with USLAB_CACHE_INFO_VERSION. */
struct uslab_cache_info {
	unsigned version;          /* in: USLAB_CACHE_INFO_VERSION */
	char name[USLAB_NAME_MAX + 1];
	/* For a cache merged into another: that cache's name (every number
	 * below is then the shared cache's). Empty otherwise. */
	char alias_of[USLAB_NAME_MAX + 1];
	unsigned aliases;          /* caches merged into this one */
	unsigned long flags;       /* USLAB_* flags in effect, slub_debug's included */
	size_t object_size;        /* size given at creation */
	size_t slab_object_size;   /* stride of objects in a slab (with metadata, aligned) */
	size_t align;              /* effective alignment */
	unsigned order;            /* preferred slab order (pages = 1 << order) */
	unsigned min_order;        /* fallback order */
	unsigned objects_per_slab; /* at the preferred order */
	unsigned cpu_partial;      /* CPU partial list limit, in objects */
	unsigned min_partial;      /* node partial slabs kept when empty */
	uint64_t slabs;            /* slabs that exist */
	uint64_t partial_slabs;    /* slabs on the node partial list */
	uint64_t total_objects;    /* object slots in all slabs */
	uint64_t active_objects;   /* allocated and not yet freed */
	uint64_t slab_bytes;       /* memory held in slabs */
	uint64_t events[USLAB_NR_STAT_ITEMS]; /* sums over all threads, live and gone */
};

/*
 * Fill `info`. Returns 0, or -1 with errno EINVAL (NULL argument or unknown
 * version).
 *
 * Counters of live threads are read without stopping them. The sums are
 * exact for the calling thread's own use and for threads that have exited.
 * For another live thread, ALLOC_FASTPATH (which is not counted on the fast
 * path but derived from the slow paths) and so active_objects count the
 * objects on that thread's CPU free list as allocated, as the kernel's
 * slabinfo counts CPU slabs as full: they run ahead by at most one slab of
 * objects per such thread until it next takes a slow path or exits.
 */
USLAB_API int uslab_cache_get_info(struct uslab_cache *cache, struct uslab_cache_info *info);

#define USLAB_PROCESS_INFO_VERSION 1

/* The page allocator's view of the whole process. Fill `version`. */
struct uslab_process_info {
	unsigned version;          /* in: USLAB_PROCESS_INFO_VERSION */
	uint64_t segments;         /* segments mapped from the OS */
	uint64_t mapped_bytes;     /* bytes mapped from the OS */
	uint64_t used_bytes;       /* bytes in allocated page blocks (slabs, metadata) */
	uint64_t dirty_bytes;      /* free bytes not yet given back to the OS */
	uint64_t free_blocks[10];  /* free page blocks by order 0..9 */
	uint64_t rss_bytes;        /* resident set size of the process */
};
/* Returns 0, or -1 with errno EINVAL. */
USLAB_API int uslab_process_get_info(struct uslab_process_info *info);

/* Print one row per cache (Name, Objects, Objsize, Slabs, Partial, Order,
 * O/S, Fast%) through write_fn, which is called with pieces of text, then
 * one line per merged cache ("alias NAME -> CACHE"). opts is reserved
 * (pass 0). Never allocates. */
USLAB_API void uslab_stats_print(void (*write_fn)(void *arg, const char *text), void *arg,
                                 unsigned long opts);

/* Write the table of uslab_stats_print() to a file descriptor. */
USLAB_API void uslab_stats_print_fd(int fd);

#ifdef __cplusplus
}
#endif
#endif /* USLAB_H */
