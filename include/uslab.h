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
 * Version
 * ====================================================================== */

/* The version of this header. Releases with the same major version are
 * compatible (libuslab.so.MAJOR): a program built against one runs on any
 * later one of the same major version. */
#define USLAB_VERSION_MAJOR 0
#define USLAB_VERSION_MINOR 1
#define USLAB_VERSION_PATCH 0
/* One number for #if comparisons: MAJOR * 10000 + MINOR * 100 + PATCH. */
#define USLAB_VERSION \
	(USLAB_VERSION_MAJOR * 10000 + USLAB_VERSION_MINOR * 100 + USLAB_VERSION_PATCH)
#define USLAB_VERSION_STRING "0.1.0"

/*
 * The version of the library the program runs on, as USLAB_VERSION (which
 * is the version it was compiled against): they differ when a newer
 * libuslab.so.MAJOR was installed since. Any thread, any time.
 */
USLAB_API int uslab_version(void);

/* ======================================================================
 * Object caches
 * ====================================================================== */

struct uslab_cache;

/* Cache flags for uslab_cache_create(). */
/* Align objects to the hardware cache line (64 bytes), or to the largest
 * power of two half of it that still exceeds the object size, as SLUB does
 * for SLAB_HWCACHE_ALIGN. */
#define USLAB_HWCACHE_ALIGN  0x00002000UL
/* Never merge this cache with another one. Without it, as SLUB does, a new
 * cache without constructor or debugging (and not tuned by name in
 * USLAB_OPTIONS, nor run with slab_nomerge) may become an alias of an
 * existing compatible cache (the same stride give or take less than a
 * pointer, alignment kept), sharing its slabs, tunables and statistics;
 * uslab_cache_get_info() then names that cache in alias_of. */
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
 * Misuse is detected at the free: a pointer that is not the start of an
 * object of a uslab slab (stack, global, interior pointer), an object of
 * another cache (both caches are named), and a count that would go below
 * zero, in every build; and a double free of an object that is still free,
 * with any number of frees in between and in every cpu_mode (the free reads
 * the object's free-pointer word first, which holds an obfuscated link or
 * the double-free mark while the object is free), in the default build
 * (-DUSLAB_HARDENED=OFF, which has no key to tell a link from the program's
 * data, checks only the first three). Each writes one line starting
 * "uslab: fatal:" to stderr and calls abort(). README.md's "Double frees and
 * invalid frees" has the whole table, with slub_debug and `hardened`.
 */
USLAB_API void uslab_cache_free(struct uslab_cache *cache, void *obj);

/*
 * Give back what the cache holds but does not use: the calling thread's
 * sheaves (or CPU slabs) for this cache, the barn's sheaves, every empty slab
 * on the node's partial list (ignoring min_partial), and then every free
 * page of the process to the OS. Objects and slabs cached by other live
 * threads stay with them.
 * Returns 0 if the cache holds no slabs afterwards, 1 if some remain (as
 * kmem_cache_shrink()).
 */
USLAB_API int uslab_cache_shrink(struct uslab_cache *cache);

/* Per-CPU modes, the values of the "cpu_mode" tunable (and of
 * USLAB_OPTIONS="slub_cpu_mode=NAME", NAME:cpu_mode=NAME). */
#define USLAB_CPU_CLASSIC 0  /* "classic": SLUB's CPU slab and CPU partial lists (2011) */
#define USLAB_CPU_SHEAVES 1  /* "sheaves": per-CPU object arrays and a barn (SLUB+Q 2010, Linux 7.0); the
                              * default, with parts of CPUs where rseq runs (uslab_cpu_backend()) */
#define USLAB_CPU_HOME    2  /* "home": owned slabs, remote frees batched home */
#define USLAB_CPU_SLQB    3  /* "slqb": SLQB as compared in 2009: home's slabs and a LIFO object queue */
#define USLAB_CPU_SLAB    4  /* "slab": the kernel's SLAB (mm/slab.c): per-CPU arrays (limit,
                              * batchcount), a shared array, three slab lists, index free lists,
                              * colouring, a periodic reap */

/*
 * Tunables, at run time, as the kernel's /sys/kernel/slab/<cache>/ files:
 *   "cpu_mode"     the per-CPU layer (USLAB_CPU_*). Each thread switches at
 *                  its next allocation slow path, giving back what it held
 *                  in the old mode. Debug caches have no per-CPU layer and
 *                  take only USLAB_CPU_CLASSIC. USLAB_CPU_SLAB lays slabs
 *                  out its own way (an index free list at the slab's end,
 *                  coloured object offsets): a slab keeps the layout it was
 *                  made with for its whole life and is only ever freed
 *                  through its own layout's paths, so the mode can be
 *                  changed at any time, in both directions; slabs of the
 *                  other layout go on serving the frees of their objects
 *                  and are given back as they empty (a cache changed with
 *                  no slabs, as at creation through USLAB_OPTIONS, has
 *                  only the new layout's);
 *   "limit", "batchcount", "sharedfactor"  slab mode, as the kernel's
 *                  /proc/slabinfo tunables: objects each thread's array
 *                  holds (1..508), objects a refill or flush moves
 *                  (1..limit; a limit set below it lowers it to
 *                  (limit + 1) / 2), and batches the shared array holds
 *                  (0..1024; 0: none). Defaults as the kernel's
 *                  enable_cpucache(): limit 120 for objects up to 256
 *                  bytes, 54 up to 1024, 24 up to a page, 8 up to 128 KiB,
 *                  1 above; batchcount (limit + 1) / 2; sharedfactor 8 for
 *                  objects up to a page when there are several CPUs.
 *                  Threads take a new limit at their next slow path;
 *   "freebatch"    home, slqb: objects a thread gathers for another
 *                  thread's slabs before it sends them in one batch; slqb:
 *                  also the objects a queue flush moves (1..65535; SLQB's
 *                  default: 256 for 64..1024-byte objects, more below, less
 *                  above);
 *   "hiwater"      slqb: objects the queue holds before a flush (4 x
 *                  freebatch by default);
 *   "sheaf_capacity"  sheaves: objects per sheaf (0..508). Each thread that
 *                  uses the cache holds two sheaves (main and spare):
 *                  allocation pops and free pushes there without touching
 *                  the object's slab (of the object, only the word of the
 *                  double-free mark). 0 with cpu_mode sheaves is
 *                  classic mode (what 0 meant before there were modes).
 *                  Debug caches are always 0. Threads switch at their next
 *                  slow path;
 *   "barn_full", "barn_empty"  full and empty sheaves the cache's barn keeps
 *                  (0..1024; default 256 and 10): full sheaves freed by one
 *                  thread wait there for threads that allocate. The barn
 *                  always takes 10 full sheaves (fewer if barn_full is
 *                  less); beyond that it earns room, up to barn_full, one
 *                  sheaf each time a thread takes a full sheaf after one
 *                  was flushed to the slabs for want of room (a producer
 *                  came for it); a shrink, malloc_trim(0) or a decay pass
 *                  that empties the barn starts it at 10 again;
 *   "cpu_partial"  classic mode: objects each CPU's partial list may hold
 *                  before it is drained to the node list, counted in slabs
 *                  as the kernel's since 5.16 (2 x cpu_partial over a
 *                  slab's objects, rounded up; 0..65535; 0 turns CPU
 *                  partial lists off);
 *   "min_partial"  empty slabs the node list keeps (0..1024);
 *   "order"        page order of new slabs (the smallest order that holds
 *                  an object, and at least 4: a slab fills one 64 KiB slot
 *                  or more, .. 9).
 * They can also be set at start: USLAB_OPTIONS="NAME:sheaf_capacity=N ...".
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
 * counters), the node counts agree; in slab mode each slab is on the list
 * its count says and its index list and bitmap agree (entries in range,
 * distinct, not marked out). Each problem is reported once on
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
	X(ALLOC_FASTPATH,        "allocation from the CPU free list (classic mode)") \
	X(ALLOC_SLOWPATH,        "allocation by the slow path") \
	X(FREE_FASTPATH,         "free to the CPU free list without lock or atomic (classic mode)") \
	X(FREE_SLOWPATH,         "free by the slow path") \
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
	X(DEACTIVATE_BYPASS,     "CPU slab dropped (or parked) because it ran out of objects") \
	X(ORDER_FALLBACK,        "slab allocated at the minimum order after the preferred failed") \
	X(CMPXCHG_DOUBLE_FAIL,   "compare-and-swap of free list and counters retried") \
	X(CPU_PARTIAL_ALLOC,     "CPU slab taken from the CPU partial list") \
	X(CPU_PARTIAL_FREE,      "free froze a full slab onto the CPU partial list") \
	X(CPU_PARTIAL_NODE,      "slab moved from the node list to the CPU partial list") \
	X(CPU_PARTIAL_DRAIN,     "CPU partial list drained to the node list") \
	X(FREE_PCS,              "free to a per-CPU sheaf") \
	X(SHEAF_FLUSH,           "objects flushed from a sheaf to their slabs") \
	X(ALLOC_BULK,            "objects allocated by alloc_bulk") \
	X(FREE_BULK,             "objects freed by free_bulk") \
	X(NODE_LOCK,             "node list lock acquisitions") \
	X(ALLOC_FAILED,          "allocation returned NULL (no memory)") \
	X(ALLOC_PCS,             "allocation from a per-CPU sheaf") \
	X(SHEAF_REFILL,          "objects refilled into a sheaf from slabs") \
	X(SHEAF_ALLOC,           "empty sheaf allocated") \
	X(SHEAF_FREE,            "empty sheaf freed") \
	X(BARN_GET,              "full sheaf taken from the barn") \
	X(BARN_GET_FAIL,         "no full sheaf in the barn") \
	X(BARN_PUT,              "full sheaf put in the barn") \
	X(BARN_PUT_FAIL,         "barn had no room for a full sheaf") \
	X(FREE_REMOTE,           "free of another CPU part's object, into this part's remote batch") \
	X(FLUSH_RFREE_LIST,      "remote batch sent to its owner's inbox (one atomic)") \
	X(FLUSH_RFREE_LIST_OBJECTS, "objects in the remote batches sent") \
	X(CLAIM_REMOTE_LIST,     "inbox of remote frees taken by its owner") \
	X(CLAIM_REMOTE_LIST_OBJECTS, "objects in the inboxes taken") \
	X(FLUSH_FREE_LIST,       "SLQB: object queue above hiwater flushed") \
	X(FLUSH_FREE_LIST_OBJECTS, "SLQB: objects flushed from the queue to their slabs or owners") \
	X(SLAB_OWN,              "slab taken by a CPU part to own (node list or new)") \
	X(SLAB_DISOWN,           "slab given up by its owner (to the node list, or freed)") \
	X(REAP,                  "slab mode: objects the periodic reap drained from idle arrays")

enum uslab_stat_item {
#define USLAB_X_ENUM(n, d) USLAB_STAT_##n,
	USLAB_STAT_ITEMS(USLAB_X_ENUM)
#undef USLAB_X_ENUM
	USLAB_NR_STAT_ITEMS
};

/* Name ("ALLOC_FASTPATH") and description of a stat item; NULL if out of range. */
USLAB_API const char *uslab_stat_name(enum uslab_stat_item item);
USLAB_API const char *uslab_stat_desc(enum uslab_stat_item item);

/* Room for stat items in struct uslab_cache_info (version 3 on): the list
 * may grow up to this without changing the struct's layout. */
#define USLAB_STAT_EVENTS_MAX 64

/*
 * Versions of struct uslab_cache_info. Fill `version` with the version your
 * code was compiled against; the library fills exactly that version's
 * layout and fields.
 *   1: everything up to and including `events` (30 stat items);
 *   2: adds cpu_slabs, cpu_queue, has_ctor;
 *   3: events[] has USLAB_STAT_EVENTS_MAX entries (the stat items after
 *      ALLOC_FAILED are new in 3), adds the sheaf fields; cpu_queue is
 *      always 0 (the CPU object queue was replaced by sheaves);
 *   4: adds cpu_mode, freebatch, hiwater, owned_slabs and the totals of
 *      allocations and frees (allocs, allocs_fast, frees, frees_fast),
 *      which mean the same in every per-CPU mode;
 *   5: adds slab mode's tunables (limit, batchcount, sharedfactor) and
 *      its free slabs, which /proc/slabinfo shows for a SLAB cache.
 */
#define USLAB_CACHE_INFO_VERSION 5

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
	uint64_t events[USLAB_STAT_EVENTS_MAX]; /* sums over all threads, live and gone; by
	                           * enum uslab_stat_item, 0 past USLAB_NR_STAT_ITEMS */
	/* ---- version 2 ---- */
	uint64_t cpu_slabs;        /* CPU slabs: threads holding a slab of this cache now (classic) */
	unsigned cpu_queue;        /* always 0 (version 2's CPU object queue no longer exists) */
	unsigned has_ctor;         /* 1 if the cache has a constructor */
	/* ---- version 3 ---- */
	unsigned sheaf_capacity;   /* objects per sheaf; 0: classic mode */
	unsigned barn_full_max;    /* full sheaves the barn keeps at most */
	unsigned barn_empty_max;   /* empty sheaves the barn keeps at most */
	unsigned cpu_parts;        /* CPU parts of this cache: threads', or CPUs' (uslab_cpu_backend()) */
	uint64_t sheaf_objects;    /* objects in the parts' sheaves now (counted as active) */
	uint64_t barn_full;        /* full sheaves in the barn now */
	uint64_t barn_empty;       /* empty sheaves in the barn now */
	uint64_t barn_objects;     /* objects in the barn now (counted as active) */
	/* ---- version 4 ---- */
	unsigned cpu_mode;         /* USLAB_CPU_* the cache's CPU parts run */
	unsigned freebatch;        /* home, slqb: remote batch size (tunable "freebatch") */
	unsigned hiwater;          /* slqb: queue bound (tunable "hiwater") */
	uint64_t owned_slabs;      /* home, slqb: slabs CPU parts own now */
	/* Totals, whatever the mode: every allocation and free the program made
	 * through the cache (single, bulk, any path; a KFENCE sample counts as a
	 * slow-path allocation and its free as a slow-path or bulk free), and
	 * of those the ones the fast paths did.
	 * allocs_fast = ALLOC_FASTPATH + ALLOC_PCS, allocs = that + ALLOC_SLOWPATH
	 * + ALLOC_BULK; frees likewise. */
	uint64_t allocs, allocs_fast, frees, frees_fast;
	/* ---- version 5 ---- */
	/* Slab mode's tunables (uslab_cache_tune_set: set in every mode, used
	 * when cpu_mode is USLAB_CPU_SLAB) and its slabs on the free list
	 * (the kernel's SLAB counts the others as active; 0 for a cache that
	 * never ran in slab mode). Its shared array is the barn: barn_objects
	 * is /proc/slabinfo's sharedavail. */
	unsigned limit, batchcount, sharedfactor;
	uint64_t free_slabs;
};

/*
 * Fill `info`. Returns 0, or -1 with errno EINVAL (NULL argument or unknown
 * version).
 *
 * Counters of live threads are read without stopping them (each is a
 * moment old; exact once they are quiet). active_objects is what the
 * program holds: allocations less frees. Objects in sheaves, barns, SLQB
 * queues and the remote batches on their way to their owners are free to
 * the program but in use to the slabs (sheaf_objects, barn_objects).
 */
USLAB_API int uslab_cache_get_info(struct uslab_cache *cache, struct uslab_cache_info *info);

/*
 * The backend the CPU parts run on, for the whole process: "rseq" (caches
 * in sheaves mode keep one part per CPU, run by restartable sequences;
 * other modes, debug caches and threads rseq does not know keep parts per
 * thread) or "thread" (every part is a thread's). Chosen at start:
 * USLAB_OPTIONS cpu_backend=auto (rseq where the kernel and glibc offer
 * it), rseq, or tls (per thread).
 */
USLAB_API const char *uslab_cpu_backend(void);

/*
 * Statistics per CPU, as SLUB's per-CPU sysfs counters: the part of
 * `cache` on CPU `cpu` (per-CPU backend): its event counters into
 * events[0..n) (by enum uslab_stat_item, 0 past USLAB_NR_STAT_ITEMS;
 * ALLOC_PCS and FREE_PCS are its fast paths' pops and pushes, exact) and
 * the objects it holds into *objects (may be NULL). Returns 0, or -1 with
 * errno ENOENT (that CPU has no part of the cache: no operation ran there,
 * or the cache's parts are threads') or EINVAL (NULL cache, or NULL events
 * with n > 0).
 */
USLAB_API int uslab_cache_cpu_stats(struct uslab_cache *cache, unsigned cpu, uint64_t *events, size_t n,
				    uint64_t *objects);

/*
 * Versions of struct uslab_process_info (fill `version` with the one your
 * code was compiled against; the library fills exactly that layout):
 *   1: up to and including rss_bytes;
 *   2: adds the KFENCE fields (sampled guard pages);
 *   3: adds kfence_ms and kfence_pool_bytes (sampling by time, the default).
 */
#define USLAB_PROCESS_INFO_VERSION 3

/* The page allocator's view of the whole process. Fill `version`. */
struct uslab_process_info {
	unsigned version;          /* in: USLAB_PROCESS_INFO_VERSION */
	uint64_t segments;         /* segments mapped from the OS */
	uint64_t mapped_bytes;     /* bytes mapped from the OS */
	uint64_t used_bytes;       /* bytes in allocated page blocks (slabs, metadata): in use */
	uint64_t dirty_bytes;      /* free bytes not yet given back to the OS */
	uint64_t free_blocks[10];  /* free page blocks by order 0..9 */
	uint64_t rss_bytes;        /* resident set size of the process */
	/* ---- version 2: KFENCE ---- */
	unsigned kfence_interval;  /* about one allocation in this many is sampled (kfence=N); 0: off;
	                            * UINT_MAX: one every kfence_ms (the default) */
	unsigned kfence_slots;     /* objects the guarded pool holds (0: no pool) */
	uint64_t kfence_allocs;    /* allocations placed in the pool since the start */
	uint64_t kfence_missed;    /* samples allocated normally (pool full, object above a
	                            * page, debug cache) */
	uint64_t kfence_in_use;    /* pool objects allocated now */
	uint64_t kfence_reports;   /* KFENCE reports made (misuse found) */
	/* ---- version 3 ---- */
	unsigned kfence_ms;        /* sampling by time: ms between samples (0: not by time) */
	uint64_t kfence_pool_bytes;/* bytes the pool maps (its data and guard pages and its slots'
	                            * metadata; 0 until the first sample maps it); not in
	                            * mapped_bytes, which counts the page allocator's segments */
};
/* Returns 0, or -1 with errno EINVAL (NULL, or a version not 1 to 3). */
USLAB_API int uslab_process_get_info(struct uslab_process_info *info);

/* Forms of uslab_stats_print() (`opts`); one of the first three, plus
 * modifiers. */
#define USLAB_STATS_TABLE    0x0UL  /* a table like the kernel's slabinfo tool */
#define USLAB_STATS_JSON     0x1UL  /* one JSON object: process summary, caches, aliases */
#define USLAB_STATS_SLABINFO 0x2UL  /* /proc/slabinfo version 2.1, byte-compatible */
#define USLAB_STATS_FORM_MASK 0x3UL

/*
 * Print every cache through write_fn, which is called with NUL-terminated
 * pieces of text (a line or less; JSON pieces are not lines):
 *
 *  USLAB_STATS_TABLE: one row per cache (empty ones too), the kernel slabinfo tool's columns (Name, Objects,
 *    Objsize, Space, Slabs/Part/Cpu, O/S, O, %Fr, %Ef, Flg) plus Fast% (share
 *    of allocations and frees on the lock-free paths), then one line per
 *    merged cache ("alias NAME -> CACHE") and a process summary line.
 *  USLAB_STATS_SLABINFO: the header and rows of /proc/slabinfo 2.1, in the
 *    kernel's column format (SLUB values: tunables 0 0 0, active_slabs =
 *    num_slabs; a cache in slab mode as the kernel's SLAB: its limit,
 *    batchcount and sharedfactor, free slabs not active, the shared
 *    array's objects as sharedavail); white space in names is printed as '_' so that readers that
 *    split on white space keep working.
 *  USLAB_STATS_JSON: {"version":1,"process":{...},"caches":[{...,"events":
 *    {"ALLOC_FASTPATH":n,...}}],"aliases":[{"name":..,"alias_of":..}]}.
 *
 * Never allocates, and calls write_fn with no allocator lock held (it may
 * allocate, even from uslab). Unknown opts bits are ignored. Any thread.
 */
USLAB_API void uslab_stats_print(void (*write_fn)(void *arg, const char *text), void *arg,
                                 unsigned long opts);

/* uslab_stats_print() in USLAB_STATS_TABLE form to a file descriptor. */
USLAB_API void uslab_stats_print_fd(int fd);
/* Any form to a file descriptor. */
USLAB_API void uslab_stats_print_fd_opts(int fd, unsigned long opts);

/*
 * Exporting to uslabinfo (USLAB_OPTIONS=export). The process keeps
 * $XDG_RUNTIME_DIR/uslab-PID.stats (or /dev/shm/uslab-PID.stats), mode 0600,
 * removed at exit. Its snapshot is refreshed when a reader asks: by a
 * thread the export starts ("uslab-export"; the same thread, named
 * "uslab-bg", when it also runs background_thread's decay passes: see
 * uslab_background_thread()), within a millisecond or two whatever the
 * program does; or, while no thread serves (background_thread=0, after
 * uslab_background_thread(0), or before the thread has started), on the
 * allocation slow path (at most every few ms). It is also refreshed after
 * caches are created or destroyed, and a final time at exit. A reader's
 * control commands (any tunable of uslab_cache_tune_set(), shrink,
 * validate) are applied by the process itself, in those same places. See
 * tools/uslabinfo.c.
 *
 * uslab_export_path() returns the file's path, or NULL if the process does
 * not export. uslab_export_refresh() brings the exported statistics up to
 * date now and serves a pending command (as the slow path would); returns 0,
 * or -1 with errno ENOENT when not exporting.
 */
USLAB_API const char *uslab_export_path(void);
USLAB_API int uslab_export_refresh(void);

/* ======================================================================
 * Memory return
 * ====================================================================== */

/*
 * The background thread: gives memory back to the OS while the process is
 * idle (decay passes every decay_ms while anything is pending: empty slabs,
 * barns, idle threads' spare sheaves, free pages, freed huge mappings) and,
 * with the export on, answers uslabinfo at once. The same as
 * USLAB_OPTIONS=background_thread, which starts it at the first safe point
 * after initialisation. Without that option the malloc family (where the
 * process's malloc is libuslab-malloc's) starts it by default once the
 * program has started a thread of its own (a single-threaded program gets
 * none); libuslab.so alone never does unasked. The export alone starts the
 * same thread to serve uslabinfo only (no decay passes, but for that
 * default) unless background_thread=0.
 *
 * enable 1 starts it (a thread that only serves the export starts decay
 * passes too; nothing if it runs them already); 0 stops it, also the
 * export's serving thread (the export is then served on allocation slow
 * paths only, as with background_thread=0), and waits until it has stopped
 * (nothing if no thread runs). Returns 0, or -1 with errno EINVAL (enable
 * is not 0 or 1) or EAGAIN (no thread can be made: the system's limit, or
 * the process is exiting). Any thread, any time but in a signal handler.
 * The thread is detached, blocks every signal, is named "uslab-bg", or
 * "uslab-export" while it only serves the export; exit waits at most
 * 100 ms for a pass or snapshot it has under way; it does not survive
 * fork(): a child whose parent ran it starts its own, in the same role, on
 * its first allocation slow path (the default's once the child has threads
 * of its own).
 */
USLAB_API int uslab_background_thread(int enable);

/* ======================================================================
 * malloc family
 *
 * The C allocation functions on top of uslab, with glibc's semantics.
 * libuslab-malloc.so (for LD_PRELOAD) and libuslab-malloc.a give them the
 * libc names (malloc, free, ..., the __libc_* names, C++ operator
 * new/delete); these uslab_* names are the same functions for programs
 * that link libuslab and keep the system malloc.
 *
 * Sizes: kmalloc classes "kmalloc-8" .. "kmalloc-32768" (8-byte steps to
 * 128, then four per power of two; ordinary caches, shown by
 * uslab_stats_print and tunable through USLAB_OPTIONS="kmalloc-64:..."),
 * then whole pages up to 2 MiB, then mappings of their own; freed mappings
 * are kept for reuse and given back after a delay (or by
 * uslab_malloc_trim). Every block is aligned to 16 bytes, except blocks of
 * sizes that are not a multiple of 16 up to 128 bytes (8).
 *
 * Errors: NULL with errno ENOMEM when memory cannot be had and for
 * impossible sizes (above PTRDIFF_MAX, or n * size overflowing), with
 * nothing changed. Freeing, reallocating or asking the size of a pointer
 * that is not the start of a live block from these functions (stack,
 * global, interior pointer, immediate double free) writes one line
 * "uslab: fatal: invalid free at 0x..." (or "double free", "invalid
 * realloc", "invalid malloc_usable_size") to stderr and aborts. Frees
 * never change errno. Every function may be called from any thread, before
 * constructors run, and in the child of a fork() of a threaded program.
 * ====================================================================== */

/* malloc(3): size bytes (0 gives a unique minimal block), or NULL+ENOMEM. */
USLAB_API void *uslab_malloc(size_t size);
/* free(3): NULL does nothing. */
USLAB_API void uslab_free(void *p);
/* calloc(3): zeroed; NULL+ENOMEM if n * size overflows. */
USLAB_API void *uslab_calloc(size_t n, size_t size);
/* realloc(3), as glibc: p NULL is uslab_malloc(size); size 0 frees p and
 * returns NULL. The pointer is kept when size fits the usable size (and a
 * large or huge block may also grow or shrink in place). On failure NULL
 * with ENOMEM and p is untouched. */
USLAB_API void *uslab_realloc(void *p, size_t size);
/* reallocarray(3): uslab_realloc(p, n * size), NULL+ENOMEM on overflow. */
USLAB_API void *uslab_reallocarray(void *p, size_t n, size_t size);
/* posix_memalign(3): 0, EINVAL (align not a power of two multiple of
 * sizeof(void *)) or ENOMEM; *out is set only on success. */
USLAB_API int uslab_posix_memalign(void **out, size_t align, size_t size);
/* aligned_alloc(3): NULL+EINVAL unless align is a power of two; NULL+ENOMEM
 * when it cannot be met (an alignment too large to allocate); size need
 * not be a multiple of align. */
USLAB_API void *uslab_aligned_alloc(size_t align, size_t size);
/* memalign(3): align above SIZE_MAX/2+1 is EINVAL; a non-power of two is
 * rounded up. */
USLAB_API void *uslab_memalign(size_t align, size_t size);
/* valloc(3)/pvalloc(3): page aligned; pvalloc rounds size up to pages. */
USLAB_API void *uslab_valloc(size_t size);
USLAB_API void *uslab_pvalloc(size_t size);
/* malloc_usable_size(3): bytes usable at p (>= the request); 0 for NULL. */
USLAB_API size_t uslab_malloc_usable_size(void *p);
/* free_sized/free_aligned_sized (C23): as uslab_free; the size and
 * alignment are not checked in this build. */
USLAB_API void uslab_free_sized(void *p, size_t size);
USLAB_API void uslab_free_aligned_sized(void *p, size_t align, size_t size);
/* malloc_trim(3), for every cache (object caches too): flush this thread's
 * sheaves (or CPU slabs), the barns and other threads' spare sheaves (and
 * ask those threads to flush the rest at their next slow path), free every
 * empty slab, give every free page and every cached huge mapping back to
 * the OS. pad is ignored. Returns 1 if memory was given back, else 0. */
USLAB_API int uslab_malloc_trim(size_t pad);
/* malloc_stats(3): glibc's lines ("Arena 0:", "system bytes", "in use
 * bytes", "Total (incl. mmap):", "max mmap regions/bytes") to fd. */
USLAB_API void uslab_malloc_stats_print_fd(int fd);

#define USLAB_MALLOC_INFO_VERSION 1
/* The malloc family's memory. Fill `version`. */
struct uslab_malloc_info {
	unsigned version;          /* in: USLAB_MALLOC_INFO_VERSION */
	uint64_t segment_bytes;    /* bytes of segments mapped (slabs, large blocks, free pages) */
	uint64_t in_use_bytes;     /* bytes in live blocks: slab objects by class size, large and huge blocks */
	uint64_t huge_blocks;      /* live blocks in mappings of their own */
	uint64_t huge_bytes;       /* bytes mapped for them */
	uint64_t cached_bytes;     /* free memory not yet given back to the OS */
};
/* Returns 0, or -1 with errno EINVAL (NULL or unknown version). */
USLAB_API int uslab_malloc_get_info(struct uslab_malloc_info *info);

#ifdef __cplusplus
}
#endif
#endif /* USLAB_H */
