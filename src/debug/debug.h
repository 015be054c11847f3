/*
 * slub_debug (debug/debug.c, debug/validate.c): hooks on the slab core's
 * node-locked path, which debug caches take for every operation.
 */
#ifndef USLAB_DEBUG_H
#define USLAB_DEBUG_H

#include "slab.h"

/* ---- debug.c: slub_debug, as hooks on slab.c's node-locked path ------------ */
#define DBG_F 0x01   /* consistency checks */
#define DBG_Z 0x02   /* red zones */
#define DBG_P 0x04   /* poisoning */
#define DBG_U 0x08   /* alloc/free call-site tracking */
#define DBG_T 0x10   /* tracing */
/* Turn debug letters on for a new cache (from its flags and slub_debug=);
 * called before the layout is computed. */
USLAB_HIDDEN unsigned debug_flags_for(const char *name, unsigned long flags);
/* Lay out a debug cache's object: left pad, object, right red zone, free
 * pointer, tracks, requested size. Returns the stride before alignment. */
USLAB_HIDDEN size_t debug_layout(struct uslab_cache *s, size_t size, size_t align);
/* Initialize a new slab's objects (red zones inactive, poison, no tracks). */
USLAB_HIDDEN void debug_init_slab(struct uslab_cache *s, struct slab *slab);
/* slab.c took x off its slab for an allocation (node lock held): check it
 * and make it allocated (red zones, requested size, track, trace). Returns
 * NULL, or the bug found (x is then leaked: the caller reports it with
 * debug_report_done() after dropping the lock and takes another). */
USLAB_HIDDEN const char *debug_alloc_hook(struct uslab_cache *s, struct slab *slab, void *x, size_t asked,
					  void *caller);
/* slab.c is about to free x to its slab (node lock held): check it and, if
 * sound, make it free (track, poison, red zones, trace). Returns NULL, or
 * the bug found (x is then left alone: the caller reports it after
 * dropping the lock and does not free it). */
USLAB_HIDDEN const char *debug_free_hook(struct uslab_cache *s, struct slab *slab, void *x, void *caller);
/* Report a bug a hook found (aborts unless report_continue). No lock held. */
USLAB_HIDDEN void debug_report_done(struct uslab_cache *s, const void *x, const char *bug);
/* The size asked for object x (the object size if not known). */
USLAB_HIDDEN size_t debug_obj_size(struct uslab_cache *s, void *x);
/* Check every object of every slab (debug caches), reporting each bad one
 * once; returns the number of problems. Node lock held by the caller. */
USLAB_HIDDEN long debug_validate_locked(struct uslab_cache *s);
/* Print the alloc sites of live objects (destroy with live objects, U). */
USLAB_HIDDEN void debug_report_live(struct uslab_cache *s);
/* kmalloc: the size actually requested, so the slack up to the class size
 * is red zone too (Z). No-op for other caches. */
USLAB_HIDDEN void debug_set_orig_size(struct uslab_cache *s, void *obj, size_t size);
/* The USLAB_* flags of DBG_* letters. */
USLAB_HIDDEN unsigned long debug_public_flags(unsigned debug);
/* Order new slabs' free lists randomly (slab_freelist_random); release
 * the sequence when the cache goes. */
USLAB_HIDDEN void debug_random_seq(struct uslab_cache *s);
USLAB_HIDDEN void debug_cache_release(struct uslab_cache *s);

#endif
