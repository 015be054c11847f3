/*
 * What the core calls of the observe layer (observe/): the export's start
 * at init, and the statistics snapshot the export writes.
 */
#ifndef USLAB_OBSERVE_H
#define USLAB_OBSERVE_H

#include "internal.h"

struct uslab_cache_info;

/* ---- export.c ------------------------------------------------------------- */
/* Issue 6 hook, called once from cache.c's init_once_fn() after
 * options_init(): starts the export when USLAB_OPTIONS has "export" (and
 * then sets slab_slow_hook). show_stats and the export's final snapshot
 * run from a destructor in export.c, so nothing is registered with atexit,
 * which may allocate. */
USLAB_HIDDEN void export_init(void);

/* ---- stats.c ---------------------------------------------------------- */
/* Fill a current-version snapshot of `named` (an alias reports its root's
 * numbers). cache_mutex held. (Issue 6: used by export.c.) */
USLAB_HIDDEN void stats_fill_info_locked(struct uslab_cache *named, struct uslab_cache_info *info);

#endif
