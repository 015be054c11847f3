/*
 * The libc names of the malloc family, for libuslab-malloc.so (LD_PRELOAD)
 * and libuslab-malloc.a. Not part of libuslab.so: a program linking libuslab
 * keeps its own malloc (bench/fastpath compares the two in one process).
 *
 * Every name forwards to a hidden mf_* function (malloc.c): a direct call,
 * no PLT; malloc and free are kmalloc.h's inline paths themselves (one
 * jump less on the two calls programs make most). glibc's internal
 * callers reach these through the __libc_* names and through the public
 * ones (glibc's own functions call malloc through the PLT, so interposing
 * the public names is enough; see the glibc manual, "Replacing malloc").
 * reallocarray is given too, though glibc's calls realloc; strdup and
 * friends call malloc and need nothing.
 */
#define _GNU_SOURCE
#include "kmalloc.h"
#include "mallopt.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define ALIAS(target) __attribute__((alias(#target), visibility("default")))

EXPORT void *malloc(size_t n) { return kmalloc(n); }
EXPORT void free(void *p) { kfree(p); }
EXPORT void *calloc(size_t n, size_t size) { return mf_calloc(n, size); }
EXPORT void *realloc(void *p, size_t n) { return mf_realloc(p, n); }
EXPORT void *reallocarray(void *p, size_t n, size_t size) { return mf_reallocarray(p, n, size); }
EXPORT int posix_memalign(void **out, size_t align, size_t n) { return mf_posix_memalign(out, align, n); }
EXPORT void *aligned_alloc(size_t align, size_t n) { return mf_aligned_alloc(align, n); }
EXPORT void *memalign(size_t align, size_t n) { return mf_memalign(align, n); }
EXPORT void *valloc(size_t n) { return mf_valloc(n); }
EXPORT void *pvalloc(size_t n) { return mf_pvalloc(n); }
EXPORT size_t malloc_usable_size(void *p) { return mf_usable_size(p); }
EXPORT void free_sized(void *p, size_t n) { mf_free_sized(p, n); }
EXPORT void free_aligned_sized(void *p, size_t align, size_t n) { mf_free_aligned_sized(p, align, n); }
EXPORT void cfree(void *p) { mf_free(p); }

void *__libc_malloc(size_t n) ALIAS(malloc);
void __libc_free(void *p) ALIAS(free);
void *__libc_calloc(size_t n, size_t size) ALIAS(calloc);
void *__libc_realloc(void *p, size_t n) ALIAS(realloc);
void *__libc_memalign(size_t align, size_t n) ALIAS(memalign);
void *__libc_valloc(size_t n) ALIAS(valloc);
void *__libc_pvalloc(size_t n) ALIAS(pvalloc);
int __posix_memalign(void **out, size_t align, size_t n) ALIAS(posix_memalign);

EXPORT int malloc_trim(size_t pad) { return mf_trim(pad); }

EXPORT void malloc_stats(void)
{
	fflush(stderr);
	mf_stats_print(2);
}

static size_t clamp_int(size_t v) { return v > 0x7fffffff ? 0x7fffffff : v; }

EXPORT struct mallinfo2 mallinfo2(void)
{
	struct mf_info mi;
	struct mallinfo2 r;
	mf_get_info(&mi);
	memset(&r, 0, sizeof r);
	r.arena = mi.arena;
	r.ordblks = mi.ordblks;
	r.hblks = mi.hblks;
	r.hblkhd = mi.hblkhd;
	r.uordblks = mi.uordblks;
	r.fordblks = mi.fordblks;
	r.keepcost = mi.keepcost;
	return r;
}

/* The old interface, with int fields (values clamped, not wrapped). */
EXPORT struct mallinfo mallinfo(void)
{
	struct mallinfo2 m = mallinfo2();
	struct mallinfo r;
	memset(&r, 0, sizeof r);
	r.arena = (int)clamp_int(m.arena);
	r.ordblks = (int)clamp_int(m.ordblks);
	r.hblks = (int)clamp_int(m.hblks);
	r.hblkhd = (int)clamp_int(m.hblkhd);
	r.uordblks = (int)clamp_int(m.uordblks);
	r.fordblks = (int)clamp_int(m.fordblks);
	r.keepcost = (int)clamp_int(m.keepcost);
	return r;
}

EXPORT int mallopt(int param, int value) { return mf_mallopt(param, value); }

EXPORT int malloc_info(int options, FILE *fp)
{
	if (options)
		return EINVAL;   /* as glibc: the code, errno untouched */
	struct mf_info mi;
	mf_get_info(&mi);
	fprintf(fp,
		"<malloc version=\"uslab-1\">\n"
		"<total type=\"segments\" size=\"%zu\"/>\n"
		"<total type=\"in-use\" size=\"%zu\"/>\n"
		"<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
		"<total type=\"cached\" size=\"%zu\"/>\n"
		"</malloc>\n",
		mi.arena, mi.uordblks, mi.hblks, mi.hblkhd, mi.keepcost);
	return 0;
}
