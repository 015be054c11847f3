/*
 * Shared internal definitions: build constants, branch hints, the fatal
 * report path. Every module includes this.
 *
 * Build variants: one library build for now. USLAB_SANITIZER is defined in
 * sanitizer builds (tests use it to shrink their sizes).
 */
#ifndef USLAB_INTERNAL_H
#define USLAB_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "uslab.h"
#include "os.h"

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define NOINLINE    __attribute__((noinline))
#define COLD        __attribute__((cold, noinline))

#define PAGE_SHIFT  12
#define PAGE_SIZE   (1UL << PAGE_SHIFT)
#define CACHE_LINE  64

#define ALIGN_UP(x, a)  (((x) + ((a) - 1)) & ~((uintptr_t)(a) - 1))
#define MIN(a, b)  ((a) < (b) ? (a) : (b))
#define MAX(a, b)  ((a) > (b) ? (a) : (b))

/* ---- report.c: messages that never allocate -------------------------- */

/* Format into buf (always NUL-terminated, truncated at size). Supports
 * %s %c %d %u %ld %lu %zu %llu %x %lx %p %% and a decimal width with optional
 * '-' (left) or '0' flags. Returns the length written. */
USLAB_HIDDEN size_t fmt_vbuf(char *buf, size_t size, const char *fmt, va_list ap);
USLAB_HIDDEN size_t fmt_buf(char *buf, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* One line to stderr with write(2), prefixed "uslab: ". */
USLAB_HIDDEN void report_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "uslab: fatal: ..." then abort(). */
USLAB_HIDDEN _Noreturn void report_fatal(const char *fmt, ...) COLD
	__attribute__((format(printf, 1, 2)));

#endif
