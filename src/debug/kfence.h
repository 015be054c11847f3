/*
 * Sampled guard pages (KFENCE in user space), kfence.c's interface.
 *
 * Sampling by time, as the kernel's KFENCE samples (the default): one
 * allocation every kfence_ms (100, the kernel's sample_interval). The
 * fast paths pay nothing for it that they did not pay before: each part
 * counts its fast allocations (cpu_tick_alloc, cpu.h), and the count's
 * low byte wrapping to 0 (one branch on the flags of that add, taken once
 * in 256) sends one allocation in 256 to cpu_alloc_wrapped(), which reads
 * the coarse monotonic clock (vDSO, no system call: kfence_alloc_due);
 * every allocation slow path asks kfence_maybe() (cpu.h), which reads it
 * every 32nd time. Once kfence_ms have passed since the last sample, the
 * allocation that sees it is the sample. So a thread that only ever runs
 * its fast paths is looked at every 256 allocations, and a program that
 * allocates rarely still gets samples over time (one that allocates a
 * thousand times a second: one look every quarter second). No timer and
 * no signal: nothing runs while the
 * program does not allocate, a fork child inherits the clock, and the
 * program's signal handlers are not touched until the first sample
 * installs the fault handler.
 *
 * kfence=N (a test and debugging mode) samples one allocation in N,
 * counted per thread (cpu_tls.kf_left): the fast paths are off then (as
 * with hardened), so that every allocation reaches the count.
 *
 * Pool objects live outside uslab's segments, so every free of one fails
 * the fast paths' checks and reaches the slow paths, which ask
 * kfence_owns() before reporting an invalid free.
 */
#ifndef USLAB_KFENCE_H
#define USLAB_KFENCE_H

#include "internal.h"

struct uslab_cache;

#define KFENCE_BY_TIME          0xffffffffU  /* kfence_interval: sample by time (the default, "kfence") */
#define KFENCE_INTERVAL_MAX     1000000000   /* kfence=N: largest N */
#define KFENCE_MS_DEFAULT       100          /* kfence_ms: the kernel's kfence.sample_interval */
#define KFENCE_MS_MAX           3600000      /* kfence_ms=M: largest M (an hour) */
#define KFENCE_POOL_DEFAULT     255          /* objects in the pool (the kernel's default) */
#define KFENCE_POOL_MAX         65535        /* kfence_pool=N: largest N */

/* KFENCE_BY_TIME: one allocation every kfence_ms; N: about one in N
 * allocations; 0: off. Set from USLAB_OPTIONS before any allocation,
 * read-only after (kfence_init may turn it off). */
extern unsigned kfence_interval USLAB_HIDDEN;
/* Milliseconds between samples by time (0: off). */
extern unsigned kfence_ms USLAB_HIDDEN;
/* Objects the pool holds (kfence_pool=N; 0: KFENCE_POOL_DEFAULT). Set from
 * USLAB_OPTIONS before any allocation, read-only after. */
extern unsigned kfence_pool_objects USLAB_HIDDEN;

/* When (coarse monotonic ms) the next sample by time is due; UINT64_MAX:
 * never (off, kfence=N, or no pool could be had). */
extern _Atomic uint64_t kfence_due USLAB_HIDDEN;

/* kfence=N: every allocation takes a slow path, which counts. */
static inline bool kfence_counting(void)
{
	return kfence_interval && kfence_interval != KFENCE_BY_TIME;
}

/* After options_init(): map the pool and install the fault handler if
 * sampling is on. */
USLAB_HIDDEN void kfence_init(void);
/* kfence=N: the next per-thread count, uniform in [N/2, 3N/2), never 0. */
USLAB_HIDDEN unsigned kfence_next_skip(void);
/* On an allocation path of cache s (a real cache, not debug or internal),
 * `asked` bytes of it (0: the object size); caller: the API call's return
 * address. If a sample is due (by time, or this thread's count with
 * kfence=N), the pool object that is this allocation; else NULL (also
 * when the pool has no room or the object does not fit a page: the caller
 * allocates normally). Counted as an allocation of s. */
USLAB_HIDDEN void *kfence_alloc_due(struct uslab_cache *s, size_t asked, void *caller);
/* Is p inside the pool (any byte of it)? Cheap: two compares. */
USLAB_HIDDEN bool kfence_owns(const void *p);
/* Free a pointer inside the pool: frees the object (counted on its cache
 * as `counted_as`: a single or a bulk free), or reports misuse (double
 * free, interior pointer, wrong cache, canary damage) and aborts. named:
 * the cache the caller named (NULL: free() of the malloc family). */
USLAB_HIDDEN void kfence_free(void *p, struct uslab_cache *named, void *caller, enum uslab_stat_item counted_as);
/* The usable size of a live pool object, or a fatal report (`what`: the
 * entry point, "malloc_usable_size", "realloc"). */
USLAB_HIDDEN size_t kfence_usable(const void *p, const char *what);

/* Pool objects of real cache `root` live now (a scan of the pool; 0 at
 * once when the pool is empty). For the cache's active_objects, and for
 * destroy, which must not free a cache that pool objects still name. */
USLAB_HIDDEN unsigned long kfence_cache_live(const struct uslab_cache *root);
/* The same, with the usable bytes of those objects (the sizes asked for)
 * in *bytes: the malloc family's bytes in use count those. */
USLAB_HIDDEN unsigned long kfence_cache_live_bytes(const struct uslab_cache *root, uint64_t *bytes);

/* What the pool did since the start (uslab_process_get_info version 2). */
struct kfence_stats {
	unsigned interval;   /* kfence_interval in effect (0: off, or no pool could be had) */
	unsigned ms;         /* by time: ms between samples (0: not by time) */
	uint64_t pool_bytes; /* bytes the pool maps (0 until the first sample maps it) */
	unsigned slots;      /* objects the pool holds (0: no pool) */
	uint64_t allocs;     /* allocations placed in the pool */
	uint64_t missed;     /* samples allocated normally: pool full, object above a page,
	                      * debug or internal cache */
	uint64_t in_use;     /* pool objects allocated now */
	uint64_t reports;    /* KFENCE reports made */
};
USLAB_HIDDEN void kfence_get_stats(struct kfence_stats *st);

#endif
