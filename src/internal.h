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

/* ---- options (observe/options.c), read by every layer ------------------- */
struct uslab_cache;
struct uslab_opts {
	bool nomerge;          /* slab_nomerge */
	unsigned max_order;    /* slub_max_order */
	unsigned min_order;    /* slub_min_order */
	unsigned min_objects;  /* slub_min_objects; 0: grows with the CPU count */
	int cpu_partial;       /* slub_cpu_partial; -1: per-size default */
	int sheaf_capacity;    /* slub_sheaf_capacity; -1: per-size default, 0: classic mode */
	int cpu_mode;          /* slub_cpu_mode; -1: CPU_MODE_DEFAULT (classic if slub_sheaf_capacity=0) */
	int barn_full;         /* slub_barn_full; -1: default */
	int barn_empty;        /* slub_barn_empty; -1: default */
	int cpu_backend;       /* cpu_backend: CPU_BACKEND_AUTO, _RSEQ (asked for) or _TLS */
	bool show_stats;       /* show_stats: print the stats table at exit */
	bool export_stats;     /* export: keep a stats file for uslabinfo */
	bool report_continue;  /* report_continue: report, leak the object, go on */
	bool freelist_random;  /* slab_freelist_random */
	bool hardened;         /* hardened: live bits, every operation on the slow paths */
	unsigned debug;        /* slub_debug letters (DBG_*) */
	char debug_caches[256];/* slub_debug's cache list, ",a,b," (empty: all caches) */
};
extern struct uslab_opts opt USLAB_HIDDEN;
enum { CPU_BACKEND_AUTO, CPU_BACKEND_RSEQ, CPU_BACKEND_TLS };
USLAB_HIDDEN void options_init(void);
USLAB_HIDDEN void options_parse(const char *s);
USLAB_HIDDEN void options_apply_cache(struct uslab_cache *s);
/* A per-CPU mode by name ("classic", "sheaves", "home", "slqb"), or -1;
 * and a mode's name. */
USLAB_HIDDEN int cpu_mode_parse(const char *v, size_t n);
USLAB_HIDDEN const char *cpu_mode_name(unsigned mode);
/* Does USLAB_OPTIONS tune this cache by name ("NAME:key=value")? */
USLAB_HIDDEN bool options_names_cache(const char *name);
/* cache.c: set a tunable by name; -1 if the name or value is invalid */
USLAB_HIDDEN int cache_tune_set(struct uslab_cache *s, const char *name, unsigned long v);
/* The same for a cache in use (cache_mutex held): CPU parts that need it
 * take the change up at once (uslab_cache_tune_set, the export's command). */
USLAB_HIDDEN int cache_tune_set_live(struct uslab_cache *s, const char *name, unsigned long v);
/* cache.c: is `name` (n bytes) a tunable's name? */
USLAB_HIDDEN bool cache_tune_known(const char *name, size_t n);

#endif
