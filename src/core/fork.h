/*
 * fork.c's interface beyond fork_init() (slab.h): the locks that other files
 * own and fork.c takes across fork(), and counters for the tests. (Declared
 * here rather than in page.h and kmalloc.h, which others are changing.)
 */
#ifndef USLAB_FORK_H
#define USLAB_FORK_H

#include <pthread.h>
#include <stdint.h>

#include "internal.h"

/* page.c: its locks in the order it takes them (grow_lock, then the page
 * lock); returns how many were stored (at most 2). */
USLAB_HIDDEN unsigned page_fork_locks(pthread_mutex_t **out);
/* kmalloc.c: the lock that serializes creating the size classes, and the
 * classes by index (core_hooks.fork_lock_first, fork_known_cache). */
USLAB_HIDDEN pthread_mutex_t *kmalloc_fork_lock(void);
USLAB_HIDDEN bool kmalloc_fork_cache(unsigned i, struct uslab_cache **s);
/* large.c: the lock of the huge-block registry and range cache
 * (core_hooks.fork_lock_last). */
USLAB_HIDDEN pthread_mutex_t *large_fork_lock(void);

/* What the fork handlers did, since the start (tests print these). */
struct fork_stats {
	uint64_t forks;     /* prepare handlers run in a process with threads */
	uint64_t lone;      /* ... in a process that never had a second thread (nothing taken) */
	uint64_t nested;    /* ... while this thread's own prepare handler was running */
	uint64_t self;      /* forks from inside the allocator: this thread's interrupted frame held a lock */
	uint64_t windows;   /* locks found held with no owner recorded and taken for the frame's */
	uint64_t left;      /* locks left to other threads after the wait bound (self forks only) */
	uint64_t waits;     /* times the handler gave back what it held to wait for one lock */
	uint64_t proxied;   /* forks that walked the cache list under a decay pass's hold of cache_mutex */
	uint64_t reset;     /* children that got cache_mutex back from a vanished pass thread */
};
USLAB_HIDDEN void fork_get_stats(struct fork_stats *st);

#endif
