/*
 * The wiring: the one file that names every layer. Each layer calls only
 * the layers below it (docs/design.md, "Layers"); what a lower layer needs
 * from a higher one it reaches through a table filled in here:
 *   - core_hooks (core/slab.h): the per-CPU layer's counters, parts and
 *     modes, slab mode's slabs, slub_debug, KFENCE, the export and the
 *     background thread, the malloc family's fork locks;
 *   - cpu_hooks (cpu/cpu.h): the malloc family's classes and decay.
 * Constant tables, set when the library is linked rather than registered
 * when it starts: the allocator is called before constructors run (malloc
 * from the dynamic linker, a preloaded library's init), so nothing may
 * depend on the order in which layers start.
 */
#include "kmalloc.h"
#include "debug.h"
#include "fork.h"
#include "observe.h"
#include "bgthread.h"

/* ---- the per-CPU layer, as the core sees it ----------------------------------- */

static void parts_orphan(struct uslab_cache *s)
{
	cpu_orphan_all(s);
	pcpu_destroy(s);
	sheaf_flush_barn(s);
}

static void parts_release(struct uslab_cache *s)
{
	cpu_free_dead(s);
	pcpu_free_parts(s);
}

static void fork_child(void)
{
	pcpu_fork_child();
	cpu_fork_child();
}

static void array_cache_init(struct uslab_cache *s)
{
	array_init_cache(s);
	array_default_tunables(s);
}

/* KFENCE, the per-CPU backend, the export, the background thread: after
 * the options are read */
/* KFENCE first: the per-CPU backend runs only if it does not count every
 * allocation (kfence=N) */
static void (*const init_list[])(void) = { kfence_init, pcpu_init, export_init, bg_init, NULL };

const struct core_hooks core_hooks = {
	.init = init_list,
	.part_stats = offsetof(struct cpu_cache, stat),
	.part_size = sizeof(struct cpu_cache),
	.part_align = _Alignof(struct cpu_cache),
	.thread_size = sizeof(struct cpu_thread),
	.part_freeze = cpu_slab_put_partial,
	.parts_orphan = parts_orphan,
	.parts_release = parts_release,
	.parts_retune = pcpu_retune,
	.take_back = mem_take_back,

	.array_cache_init = array_cache_init,
	.array_set_order = array_set_order,
	.array_slab_shape = array_slab_shape,
	.array_free_chain = array_free_chain,
	.array_free_objs = array_free_objs,
	.array_shrink = array_shrink,
	.array_free_objects_locked = array_free_objects_locked,
	.array_alloc_nocpu = array_alloc_nocpu,

	.debug_flags_for = debug_flags_for,
	.debug_layout = debug_layout,
	.debug_init_slab = debug_init_slab,
	.debug_alloc = debug_alloc_hook,
	.debug_free = debug_free_hook,
	.debug_report_done = debug_report_done,
	.debug_report_live = debug_report_live,
	.debug_cache_made = debug_random_seq,
	.debug_cache_gone = debug_cache_release,
	.sampled_live = kfence_cache_live,

	.fork_lock_first = kmalloc_fork_lock,
	.fork_lock_last = large_fork_lock,
	.fork_child = fork_child,
	.fork_known_cache = kmalloc_fork_cache,
	.fork_part_locks = pcpu_fork_locks,
};

/* ---- the malloc family, as the per-CPU layer sees it --------------------------- */

_Static_assert(KMALLOC_CLASSES_MAX == KMALLOC_NR_CLASSES, "one kparts entry per kmalloc class");
_Static_assert(KMALLOC_SIZES_MAX == KMALLOC_SMALL_MAX / 8 + 1, "one ksize entry per 8 bytes of small sizes");

const struct cpu_hooks cpu_hooks = {
	.fast_classes = kmalloc_caches,
	.fast_size_class = kmalloc_idx_small,
	.decay_more = huge_decay,
};
