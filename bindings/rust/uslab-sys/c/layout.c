/*
 * The C side of uslab-sys's layout test (tests in src/lib.rs): sizes and
 * field offsets of the versioned structs of uslab.h, as this compiler lays
 * them out, so that the #[repr(C)] mirrors can be checked field by field.
 * Part of the Rust crate only (not of libuslab).
 */
#include <stddef.h>
#include "uslab.h"

/* The sheaf fields of struct uslab_cache_info version 3 (src/lib.rs
 * mirrors them under cfg uslab_cache_info_v3, which build.rs sets from the
 * same header). */
#if USLAB_CACHE_INFO_VERSION >= 3
#define LAYOUT_V3(X) \
	X(offsetof(struct uslab_cache_info, sheaf_capacity)) \
	X(offsetof(struct uslab_cache_info, barn_full_max)) \
	X(offsetof(struct uslab_cache_info, barn_empty_max)) \
	X(offsetof(struct uslab_cache_info, cpu_parts)) \
	X(offsetof(struct uslab_cache_info, sheaf_objects)) \
	X(offsetof(struct uslab_cache_info, barn_full)) \
	X(offsetof(struct uslab_cache_info, barn_empty)) \
	X(offsetof(struct uslab_cache_info, barn_objects))
#else
#define LAYOUT_V3(X)
#endif

/* Version 4: the CPU mode, SLQB's bounds, owned slabs and the totals (cfg
 * uslab_cache_info_v4), and the USLAB_CPU_* values of the "cpu_mode"
 * tunable, which src/lib.rs writes out by hand. */
#if USLAB_CACHE_INFO_VERSION >= 4
#define LAYOUT_V4(X) \
	X(offsetof(struct uslab_cache_info, cpu_mode)) \
	X(offsetof(struct uslab_cache_info, freebatch)) \
	X(offsetof(struct uslab_cache_info, hiwater)) \
	X(offsetof(struct uslab_cache_info, owned_slabs)) \
	X(offsetof(struct uslab_cache_info, allocs)) \
	X(offsetof(struct uslab_cache_info, allocs_fast)) \
	X(offsetof(struct uslab_cache_info, frees)) \
	X(offsetof(struct uslab_cache_info, frees_fast)) \
	X((size_t)USLAB_CPU_CLASSIC) \
	X((size_t)USLAB_CPU_SHEAVES) \
	X((size_t)USLAB_CPU_HOME) \
	X((size_t)USLAB_CPU_SLQB)
#else
#define LAYOUT_V4(X)
#endif

/* Version 5: slab mode's tunables and free slabs (cfg uslab_cache_info_v5). */
#if USLAB_CACHE_INFO_VERSION >= 5
#define LAYOUT_V5(X) \
	X(offsetof(struct uslab_cache_info, limit)) \
	X(offsetof(struct uslab_cache_info, batchcount)) \
	X(offsetof(struct uslab_cache_info, sharedfactor)) \
	X(offsetof(struct uslab_cache_info, free_slabs))
#else
#define LAYOUT_V5(X)
#endif

/* Slab mode, which came without a struct version (src/lib.rs pushes its
 * value where USLAB_CPU_NR_MODES, counted by build.rs from the same header,
 * says the mode exists). */
#ifdef USLAB_CPU_SLAB
#define LAYOUT_CPU_SLAB(X) X((size_t)USLAB_CPU_SLAB)
#else
#define LAYOUT_CPU_SLAB(X)
#endif

/* struct uslab_process_info version 3: KFENCE's sampling by time and its
 * pool's size (cfg uslab_process_info_v3). */
#if USLAB_PROCESS_INFO_VERSION >= 3
#define LAYOUT_PROCESS_V3(X) \
	X(offsetof(struct uslab_process_info, kfence_ms)) \
	X(offsetof(struct uslab_process_info, kfence_pool_bytes))
#else
#define LAYOUT_PROCESS_V3(X)
#endif

#define LAYOUT(X) \
	X(sizeof(struct uslab_cache_info)) \
	X(offsetof(struct uslab_cache_info, name)) \
	X(offsetof(struct uslab_cache_info, alias_of)) \
	X(offsetof(struct uslab_cache_info, aliases)) \
	X(offsetof(struct uslab_cache_info, flags)) \
	X(offsetof(struct uslab_cache_info, object_size)) \
	X(offsetof(struct uslab_cache_info, slab_object_size)) \
	X(offsetof(struct uslab_cache_info, align)) \
	X(offsetof(struct uslab_cache_info, order)) \
	X(offsetof(struct uslab_cache_info, min_order)) \
	X(offsetof(struct uslab_cache_info, objects_per_slab)) \
	X(offsetof(struct uslab_cache_info, cpu_partial)) \
	X(offsetof(struct uslab_cache_info, min_partial)) \
	X(offsetof(struct uslab_cache_info, slabs)) \
	X(offsetof(struct uslab_cache_info, partial_slabs)) \
	X(offsetof(struct uslab_cache_info, total_objects)) \
	X(offsetof(struct uslab_cache_info, active_objects)) \
	X(offsetof(struct uslab_cache_info, slab_bytes)) \
	X(offsetof(struct uslab_cache_info, events)) \
	X(offsetof(struct uslab_cache_info, cpu_slabs)) \
	X(offsetof(struct uslab_cache_info, cpu_queue)) \
	X(offsetof(struct uslab_cache_info, has_ctor)) \
	LAYOUT_V3(X) \
	LAYOUT_V4(X) \
	LAYOUT_V5(X) \
	LAYOUT_CPU_SLAB(X) \
	X(sizeof(struct uslab_process_info)) \
	X(offsetof(struct uslab_process_info, segments)) \
	X(offsetof(struct uslab_process_info, mapped_bytes)) \
	X(offsetof(struct uslab_process_info, used_bytes)) \
	X(offsetof(struct uslab_process_info, dirty_bytes)) \
	X(offsetof(struct uslab_process_info, free_blocks)) \
	X(offsetof(struct uslab_process_info, rss_bytes)) \
	X(offsetof(struct uslab_process_info, kfence_interval)) \
	X(offsetof(struct uslab_process_info, kfence_slots)) \
	X(offsetof(struct uslab_process_info, kfence_allocs)) \
	X(offsetof(struct uslab_process_info, kfence_missed)) \
	X(offsetof(struct uslab_process_info, kfence_in_use)) \
	X(offsetof(struct uslab_process_info, kfence_reports)) \
	LAYOUT_PROCESS_V3(X) \
	X(sizeof(struct uslab_malloc_info)) \
	X(offsetof(struct uslab_malloc_info, segment_bytes)) \
	X(offsetof(struct uslab_malloc_info, in_use_bytes)) \
	X(offsetof(struct uslab_malloc_info, huge_blocks)) \
	X(offsetof(struct uslab_malloc_info, huge_bytes)) \
	X(offsetof(struct uslab_malloc_info, cached_bytes)) \
	X((size_t)USLAB_NAME_MAX) \
	X((size_t)USLAB_CACHE_MAX_SIZE) \
	X((size_t)USLAB_NR_STAT_ITEMS) \
	X((size_t)USLAB_CACHE_INFO_VERSION) \
	X((size_t)USLAB_PROCESS_INFO_VERSION) \
	X((size_t)USLAB_MALLOC_INFO_VERSION)

#define X_VALUE(v) v,
static const size_t layout[] = { LAYOUT(X_VALUE) };

/* The i-th value above, (size_t)-1 past the end. */
size_t uslab_sys_layout(size_t i)
{
	return i < sizeof layout / sizeof layout[0] ? layout[i] : (size_t)-1;
}
