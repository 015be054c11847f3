/*
 * Telling AddressSanitizer or Valgrind's Memcheck which memory is a live
 * object (a build option: -DUSLAB_TRACK=asan|valgrind). Without it every
 * hook is empty and costs nothing.
 *
 * Tracked builds keep the free pointer outside the object (as for caches
 * with a constructor), so a free object can be poisoned whole while uslab
 * still reads and writes its free pointer. Objects are poisoned when their
 * slab is made and when freed, unpoisoned when handed out; a discarded
 * slab's pages are unpoisoned for their next use.
 */
#ifndef USLAB_TRACK_H
#define USLAB_TRACK_H

#if defined(USLAB_TRACK_ASAN)
#include <sanitizer/asan_interface.h>
#define USLAB_TRACKED 1
static inline void track_alloc(const void *x, size_t n) { ASAN_UNPOISON_MEMORY_REGION(x, n); }
static inline void track_free(const void *x, size_t n) { ASAN_POISON_MEMORY_REGION(x, n); }
static inline void track_new(const void *x, size_t n) { ASAN_POISON_MEMORY_REGION(x, n); }
static inline void track_release(const void *p, size_t n) { ASAN_UNPOISON_MEMORY_REGION(p, n); }
#elif defined(USLAB_TRACK_VALGRIND)
#include <valgrind/memcheck.h>
#define USLAB_TRACKED 1
static inline void track_alloc(const void *x, size_t n) { VALGRIND_MALLOCLIKE_BLOCK(x, n, 0, 0); }
static inline void track_free(const void *x, size_t n) { VALGRIND_FREELIKE_BLOCK(x, 0); (void)n; }
static inline void track_new(const void *x, size_t n) { VALGRIND_MAKE_MEM_NOACCESS(x, n); }
static inline void track_release(const void *p, size_t n) { VALGRIND_MAKE_MEM_UNDEFINED(p, n); }
#else
#define USLAB_TRACKED 0
static inline void track_alloc(const void *x, size_t n) { (void)x, (void)n; }
static inline void track_free(const void *x, size_t n) { (void)x, (void)n; }
static inline void track_new(const void *x, size_t n) { (void)x, (void)n; }
static inline void track_release(const void *p, size_t n) { (void)p, (void)n; }
#endif

#endif
