/*
 * The uslab thread (bgthread.c: decay passes with background_thread, and
 * the export's serving thread with export) and what export.c offers it.
 * Declared here rather than in slab.h, which others are changing;
 * bgthread.c has the design.
 */
#ifndef USLAB_BGTHREAD_H
#define USLAB_BGTHREAD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "internal.h"

/* ---- bgthread.c ------------------------------------------------------------ */

/* USLAB_OPTIONS: "background_thread" or "background_thread=1" 1,
 * "background_thread=0" 0; -1 when not given (the library's default
 * applies: off, or BG_MALLOC_DEFAULT for the malloc family). */
extern int bg_option USLAB_HIDDEN;
/* cache.c's init_once_fn, after export_init(): resolve the option and, if
 * a thread is wanted (decay passes, or serving the export), ask for it at
 * the next safe point (never here: init may run inside malloc, and
 * pthread_create allocates). */
USLAB_HIDDEN void bg_init(void);
/* Wake the thread, if it runs, to look at the export again (a forked
 * child's export file has just been made). Keeps errno. */
USLAB_HIDDEN void bg_wake(void);
/* Is a start waiting for a safe point (after init, or in a forked child)?
 * export.c's slow-path hook then calls bg_start_deferred() first. */
USLAB_HIDDEN bool bg_start_pending(void);
/* A safe point: an allocation slow path with no allocator lock held,
 * after our constructors ran. Starts the thread if one is pending. */
USLAB_HIDDEN void bg_start_deferred(void);

/* What the thread did (tests). A forked child counts its own starts. */
struct bg_stats {
	bool running;        /* the thread exists and was not asked to stop */
	bool decay;          /* it runs decay passes (else it only serves the export) */
	bool pending;        /* a start waits for a safe point */
	uint64_t starts;     /* threads started in this process */
	uint64_t passes;     /* decay passes run */
	uint64_t serves;     /* export requests (or stale snapshots) served */
	uint64_t wakeups;    /* sleeps ended */
	bool malloc_ours;    /* the process's malloc is this library's (the default's condition) */
};
USLAB_HIDDEN void bg_get_stats(struct bg_stats *st);

/* ---- export.c, for the background thread ----------------------------------- */

/* Does the process export (or will it: a forked child's file is made at
 * its first slow path)? Then a thread serves it unless background_thread=0. */
USLAB_HIDDEN bool export_bg_wanted(void);
/* The futex word of the export mapping (struct export_header's `wake`),
 * or NULL when the process does not export (or not yet: a forked child). */
USLAB_HIDDEN _Atomic uint32_t *export_bg_word(void);
/* Serve a reader's request now, waiting for
 * cache_mutex. Returns EXPORT_BG_IDLE (nothing was pending),
 * EXPORT_BG_SERVED, or EXPORT_BG_AGAIN (still pending: another thread was
 * serving; look again shortly). */
enum { EXPORT_BG_IDLE = 0, EXPORT_BG_SERVED = 1, EXPORT_BG_AGAIN = 2 };
USLAB_HIDDEN int export_bg_serve(void);
/* Is a reader's request unanswered (or a forked child's export not yet
 * started)? A snapshot that is merely stale is left to slow paths and to
 * the next request. */
USLAB_HIDDEN bool export_bg_pending(void);
/* Mark the export file as served by the thread (bits: EXPORT_BG_SERVE,
 * with EXPORT_BG_DECAY when it also runs decay passes) or no longer (0),
 * so that uslabinfo knows whether to expect an answer at once; while it is
 * served, the allocation slow path no longer polls for requests. Only the
 * thread calls this. */
USLAB_HIDDEN void export_bg_attach(_Atomic uint32_t *word, uint32_t bits);
/* Set slab_slow_hook from the export's state and bg_start_pending(); call
 * after changing either (any thread, the fork child handler too: no lock). */
USLAB_HIDDEN void export_hook_update(void);

#endif
