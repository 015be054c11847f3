/*
 * mallopt (malloc.c) and the settings of other files it changes. (Declared
 * here rather than in kmalloc.h, which others are changing.)
 */
#ifndef USLAB_MALLOPT_H
#define USLAB_MALLOPT_H

#include <stddef.h>

#include "internal.h"

/* glibc's mallopt: 1 for a parameter glibc knows with a value it accepts
 * (README has the table of what each does here), 0 otherwise. */
USLAB_HIDDEN int mf_mallopt(int param, int value);

/* large.c. M_MMAP_THRESHOLD: freed large and huge blocks of at least
 * `bytes` go back to the OS at once (SIZE_MAX, the default: never at
 * once). M_TOP_PAD: bytes of freed huge mappings kept for reuse beyond a
 * quarter of the live ones (HUGE_CACHE_BYTES by default). */
USLAB_HIDDEN void large_set_release_min(size_t bytes);
USLAB_HIDDEN void large_set_huge_pad(size_t bytes);

#endif
