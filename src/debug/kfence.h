/*
 * Sampled guard pages (KFENCE in user space), kfence.c's interface.
 *
 * Sampling: every thread counts its allocations down in cpu_tls.kf_left
 * (slab.h, kmalloc.h): 0 means off, which is all the fast paths pay for
 * then (one load from the TLS line they read anyway, and a branch). When a
 * count reaches 0 the allocation goes to kfence_alloc_slow(), which places
 * it in the pool (or, with the pool full, allocates normally) and sets the
 * next count. Pool objects live outside uslab's segments, so every free of
 * one fails the fast paths' checks and reaches the slow paths, which ask
 * kfence_owns() before reporting an invalid free.
 */
#ifndef USLAB_KFENCE_H
#define USLAB_KFENCE_H

#include "internal.h"

struct uslab_cache;

#define KFENCE_INTERVAL_DEFAULT 65536        /* "kfence" alone: about one allocation in this many */
#define KFENCE_INTERVAL_MAX     1000000000   /* kfence=N: largest N */
#define KFENCE_POOL_DEFAULT     255          /* objects in the pool (the kernel's default) */
#define KFENCE_POOL_MAX         65535        /* kfence_pool=N: largest N */

/* About one allocation in kfence_interval is sampled (0: off). Set from
 * USLAB_OPTIONS before any allocation, read-only after. */
extern unsigned kfence_interval USLAB_HIDDEN;
/* Objects the pool holds (kfence_pool=N; 0: KFENCE_POOL_DEFAULT). Set from
 * USLAB_OPTIONS before any allocation, read-only after. */
extern unsigned kfence_pool_objects USLAB_HIDDEN;

/* After options_init(): map the pool and install the fault handler if
 * sampling is on. */
USLAB_HIDDEN void kfence_init(void);
/* The next per-thread count: about kfence_interval, never 0 while on. */
USLAB_HIDDEN unsigned kfence_next_skip(void);
/* The sampled allocation of an object of cache s (a real cache, not debug),
 * `asked` bytes of it (0: the object size); caller: the API call's return
 * address. Returns a pool object, or, when the pool has no room or the
 * object does not fit a page, an ordinary allocation (or NULL+ENOMEM).
 * Sets cpu_tls.kf_left again. */
USLAB_HIDDEN void *kfence_alloc_slow(struct uslab_cache *s, size_t asked, void *caller);
/* Is p inside the pool (any byte of it)? Cheap: two compares. */
USLAB_HIDDEN bool kfence_owns(const void *p);
/* Free a pointer inside the pool: frees the object, or reports misuse
 * (double free, interior pointer, wrong cache, canary damage) and aborts.
 * named: the cache the caller named (NULL: free() of the malloc family). */
USLAB_HIDDEN void kfence_free(void *p, struct uslab_cache *named, void *caller);
/* The usable size of a live pool object, or a fatal report (`what`: the
 * entry point, "malloc_usable_size", "realloc"). */
USLAB_HIDDEN size_t kfence_usable(const void *p, const char *what);

/* Pool objects of real cache `root` live now (a scan of the pool; 0 at
 * once when the pool is empty). For the cache's active_objects, and for
 * destroy, which must not free a cache that pool objects still name. */
USLAB_HIDDEN unsigned long kfence_cache_live(const struct uslab_cache *root);

/* What the pool did since the start (uslab_process_get_info version 2). */
struct kfence_stats {
	unsigned interval;   /* kfence_interval in effect (0: off, or no pool could be had) */
	unsigned slots;      /* objects the pool holds (0: no pool) */
	uint64_t allocs;     /* allocations placed in the pool */
	uint64_t missed;     /* samples allocated normally: pool full, object above a page,
	                      * debug or internal cache */
	uint64_t in_use;     /* pool objects allocated now */
	uint64_t reports;    /* KFENCE reports made */
};
USLAB_HIDDEN void kfence_get_stats(struct kfence_stats *st);

#endif
