//! Raw bindings to [uslab], a user-space slab allocator after Linux SLUB.
//!
//! This crate builds the uslab C library from source (see `build.rs`) and
//! declares its API, `include/uslab.h`, one to one: object caches
//! (`uslab_cache_*`), statistics, and the malloc family (`uslab_malloc`,
//! ...). Everything here is `unsafe` and follows the C contract documented in
//! `uslab.h` and the uslab(3) man pages. The [`uslab`] crate is the safe
//! interface: a `#[global_allocator]`, typed caches, statistics.
//!
//! The stat item constants, [`USLAB_NR_STAT_ITEMS`] and the version constants
//! are generated from the header at build time, so they always match the C
//! library that was compiled. The versioned structs ([`uslab_cache_info`],
//! [`uslab_process_info`], [`uslab_malloc_info`]) mirror the versions named by
//! [`USLAB_CACHE_INFO_VERSION`] and friends; a test checks every field offset
//! against the C compiler's.
//!
//! Linking this crate links uslab statically. The C library's `malloc` is
//! not replaced: uslab's malloc family is reachable as `uslab_malloc` etc.
//! (the `uslab` crate's `UslabAlloc` makes it Rust's global allocator).
//!
//! [uslab]: https://docs.rs/uslab
//! [`uslab`]: https://docs.rs/uslab
#![allow(non_camel_case_types)]
#![deny(missing_docs)]

use std::marker::{PhantomData, PhantomPinned};
use std::os::raw::{c_char, c_int, c_long, c_uint, c_ulong, c_void};

/// A stat item: an index into [`uslab_cache_info::events`]
/// (`enum uslab_stat_item`).
pub type uslab_stat_item = c_uint;

include!(concat!(env!("OUT_DIR"), "/generated.rs"));

/// An object cache (`struct uslab_cache`), opaque.
#[repr(C)]
pub struct uslab_cache {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// A constructor for [`uslab_cache_create`]: runs once per object when its
/// slab is created, not on every allocation.
pub type uslab_ctor = Option<unsafe extern "C" fn(obj: *mut c_void)>;

/// The text callback of [`uslab_stats_print`].
pub type uslab_write_fn = Option<unsafe extern "C" fn(arg: *mut c_void, text: *const c_char)>;

/// Longest cache name, not counting the terminating NUL.
pub const USLAB_NAME_MAX: usize = 63;
/// Largest object a cache can hold, in bytes.
pub const USLAB_CACHE_MAX_SIZE: usize = 1024 * 1024;

/// Align objects to the hardware cache line (SLUB's `SLAB_HWCACHE_ALIGN`).
pub const USLAB_HWCACHE_ALIGN: c_ulong = 0x0000_2000;
/// Never merge this cache with another one.
pub const USLAB_NO_MERGE: c_ulong = 0x0100_0000;
/// slub_debug F: consistency checks on every operation.
pub const USLAB_CONSISTENCY_CHECKS: c_ulong = 0x0000_0100;
/// slub_debug Z: red zones around each object.
pub const USLAB_RED_ZONE: c_ulong = 0x0000_0400;
/// slub_debug P: poison free objects.
pub const USLAB_POISON: c_ulong = 0x0000_0800;
/// slub_debug U: record allocation and free call sites.
pub const USLAB_STORE_USER: c_ulong = 0x0001_0000;
/// slub_debug T: trace every allocation and free on stderr.
pub const USLAB_TRACE: c_ulong = 0x0020_0000;

/// `cpu_mode` tunable and [`uslab_cache_info`]`::cpu_mode`: SLUB's CPU slab
/// and CPU partial lists (the 2011 design).
///
/// The `USLAB_CPU_*` values exist from struct uslab_cache_info version 4
/// on; a library before that rejects the `cpu_mode` tunable (`EINVAL`).
pub const USLAB_CPU_CLASSIC: c_uint = 0;
/// `cpu_mode`: per-CPU object arrays (sheaves) and a barn.
pub const USLAB_CPU_SHEAVES: c_uint = 1;
/// `cpu_mode`: owned slabs, remote frees batched home (uslab's default).
pub const USLAB_CPU_HOME: c_uint = 2;
/// `cpu_mode`: SLQB: home's slabs and a LIFO object queue (tunables
/// `freebatch`, `hiwater`).
pub const USLAB_CPU_SLQB: c_uint = 3;
/// `cpu_mode`: the kernel's SLAB: per-CPU arrays (tunables `limit`,
/// `batchcount`), a shared array (`sharedfactor`), three slab lists, index
/// free lists, colouring and a periodic reap. A library before it rejects
/// the value (`EINVAL`); [`USLAB_CPU_NR_MODES`] says whether this one has it.
pub const USLAB_CPU_SLAB: c_uint = 4;

/// The [`uslab_process_info`] version these bindings mirror: the header's,
/// 3 at most, 2 at least. `build.rs` sets cfg `uslab_process_info_v3` from
/// the header.
#[cfg(uslab_process_info_v3)]
pub const USLAB_PROCESS_INFO_VERSION: c_uint = 3;
/// The [`uslab_process_info`] version these bindings mirror: the header's,
/// 3 at most, 2 at least. `build.rs` sets cfg `uslab_process_info_v3` from
/// the header.
#[cfg(not(uslab_process_info_v3))]
pub const USLAB_PROCESS_INFO_VERSION: c_uint = 2;
/// The [`uslab_malloc_info`] version these bindings mirror.
pub const USLAB_MALLOC_INFO_VERSION: c_uint = 1;

/// [`uslab_stats_print`] form: a table like the kernel's slabinfo tool.
pub const USLAB_STATS_TABLE: c_ulong = 0x0;
/// [`uslab_stats_print`] form: one JSON object.
pub const USLAB_STATS_JSON: c_ulong = 0x1;
/// [`uslab_stats_print`] form: `/proc/slabinfo` version 2.1.
pub const USLAB_STATS_SLABINFO: c_ulong = 0x2;
/// The bits of `opts` that choose the form.
pub const USLAB_STATS_FORM_MASK: c_ulong = 0x3;

/// A snapshot of one cache (`struct uslab_cache_info`), in the version
/// [`USLAB_CACHE_INFO_VERSION`] names: the header's, 5 at most (5: slab
/// mode's tunables; 4: the CPU mode and totals; 3: the sheaf fields), else
/// 2. `build.rs` picks it from the header.
///
/// Set `version` to [`USLAB_CACHE_INFO_VERSION`] before calling
/// [`uslab_cache_get_info`]. [`uslab_cache_info::sheaves`],
/// [`uslab_cache_info::v4`] and [`uslab_cache_info::v5`] read the
/// version-3, 4 and 5 fields whichever version is mirrored.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct uslab_cache_info {
    /// In: the version of this struct the caller knows.
    pub version: c_uint,
    /// The cache's name, NUL-terminated.
    pub name: [c_char; USLAB_NAME_MAX + 1],
    /// For a merged cache, the name of the cache it is an alias of; empty otherwise.
    pub alias_of: [c_char; USLAB_NAME_MAX + 1],
    /// Caches merged into this one.
    pub aliases: c_uint,
    /// `USLAB_*` flags in effect, slub_debug's included.
    pub flags: c_ulong,
    /// Object size given at creation.
    pub object_size: usize,
    /// Stride of objects in a slab (with metadata, aligned).
    pub slab_object_size: usize,
    /// Effective alignment.
    pub align: usize,
    /// Preferred slab order (pages = 1 << order).
    pub order: c_uint,
    /// Fallback order.
    pub min_order: c_uint,
    /// Objects per slab at the preferred order.
    pub objects_per_slab: c_uint,
    /// CPU partial list limit, in objects.
    pub cpu_partial: c_uint,
    /// Empty slabs the node partial list keeps.
    pub min_partial: c_uint,
    /// Slabs that exist.
    pub slabs: u64,
    /// Slabs on the node partial list.
    pub partial_slabs: u64,
    /// Object slots in all slabs.
    pub total_objects: u64,
    /// Objects allocated and not yet freed.
    pub active_objects: u64,
    /// Memory held in slabs, in bytes.
    pub slab_bytes: u64,
    /// Event counters, indexed by the `USLAB_STAT_*` items (entries past
    /// [`USLAB_NR_STAT_ITEMS`] are 0).
    pub events: [u64; USLAB_CACHE_INFO_EVENTS],
    /// Version 2: threads holding a CPU slab of this cache now.
    pub cpu_slabs: u64,
    /// Version 2: the CPU object queue length (always 0 from version 3 on).
    pub cpu_queue: c_uint,
    /// Version 2: 1 if the cache has a constructor.
    pub has_ctor: c_uint,
    /// Version 3: objects per sheaf; 0 in classic mode.
    #[cfg(uslab_cache_info_v3)]
    pub sheaf_capacity: c_uint,
    /// Version 3: full sheaves the barn keeps at most.
    #[cfg(uslab_cache_info_v3)]
    pub barn_full_max: c_uint,
    /// Version 3: empty sheaves the barn keeps at most.
    #[cfg(uslab_cache_info_v3)]
    pub barn_empty_max: c_uint,
    /// Version 3: threads with a CPU part for this cache.
    #[cfg(uslab_cache_info_v3)]
    pub cpu_parts: c_uint,
    /// Version 3: objects in threads' sheaves now.
    #[cfg(uslab_cache_info_v3)]
    pub sheaf_objects: u64,
    /// Version 3: full sheaves in the barn now.
    #[cfg(uslab_cache_info_v3)]
    pub barn_full: u64,
    /// Version 3: empty sheaves in the barn now.
    #[cfg(uslab_cache_info_v3)]
    pub barn_empty: u64,
    /// Version 3: objects in the barn now.
    #[cfg(uslab_cache_info_v3)]
    pub barn_objects: u64,
    /// Version 4: the `USLAB_CPU_*` mode the cache's CPU parts run.
    #[cfg(uslab_cache_info_v4)]
    pub cpu_mode: c_uint,
    /// Version 4: home, slqb: remote batch size (tunable `freebatch`).
    #[cfg(uslab_cache_info_v4)]
    pub freebatch: c_uint,
    /// Version 4: slqb: queue bound (tunable `hiwater`).
    #[cfg(uslab_cache_info_v4)]
    pub hiwater: c_uint,
    /// Version 4: home, slqb: slabs CPU parts own now.
    #[cfg(uslab_cache_info_v4)]
    pub owned_slabs: u64,
    /// Version 4: every allocation the program made through the cache, in
    /// any mode, on any path (ALLOC_FASTPATH + ALLOC_PCS + ALLOC_SLOWPATH +
    /// ALLOC_BULK).
    #[cfg(uslab_cache_info_v4)]
    pub allocs: u64,
    /// Version 4: of those, the fast paths' (ALLOC_FASTPATH + ALLOC_PCS).
    #[cfg(uslab_cache_info_v4)]
    pub allocs_fast: u64,
    /// Version 4: every free, likewise.
    #[cfg(uslab_cache_info_v4)]
    pub frees: u64,
    /// Version 4: of those, the fast paths' (FREE_FASTPATH + FREE_PCS).
    #[cfg(uslab_cache_info_v4)]
    pub frees_fast: u64,
    /// Version 5: slab mode's per-CPU array size (tunable `limit`; set in
    /// every mode, used in slab mode).
    #[cfg(uslab_cache_info_v5)]
    pub limit: c_uint,
    /// Version 5: slab mode's objects per refill and flush (`batchcount`).
    #[cfg(uslab_cache_info_v5)]
    pub batchcount: c_uint,
    /// Version 5: slab mode's batches in the shared array (`sharedfactor`).
    #[cfg(uslab_cache_info_v5)]
    pub sharedfactor: c_uint,
    /// Version 5: slab mode's slabs on the free list now.
    #[cfg(uslab_cache_info_v5)]
    pub free_slabs: u64,
}

/// The sheaf fields of [`uslab_cache_info`] (version 3), all 0 when the
/// mirrored version predates them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct uslab_cache_info_sheaves {
    /// Objects per sheaf; 0 in classic mode.
    pub sheaf_capacity: c_uint,
    /// Full sheaves the barn keeps at most.
    pub barn_full_max: c_uint,
    /// Empty sheaves the barn keeps at most.
    pub barn_empty_max: c_uint,
    /// Threads with a CPU part for this cache.
    pub cpu_parts: c_uint,
    /// Objects in threads' sheaves now.
    pub sheaf_objects: u64,
    /// Full sheaves in the barn now.
    pub barn_full: u64,
    /// Empty sheaves in the barn now.
    pub barn_empty: u64,
    /// Objects in the barn now.
    pub barn_objects: u64,
}

/// The fields version 4 added to [`uslab_cache_info`]: the per-CPU mode,
/// SLQB's bounds, owned slabs and the totals of allocations and frees.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct uslab_cache_info_v4 {
    /// The `USLAB_CPU_*` mode the cache's CPU parts run.
    pub cpu_mode: c_uint,
    /// home, slqb: remote batch size (tunable `freebatch`).
    pub freebatch: c_uint,
    /// slqb: queue bound (tunable `hiwater`).
    pub hiwater: c_uint,
    /// home, slqb: slabs CPU parts own now.
    pub owned_slabs: u64,
    /// Every allocation through the cache, whatever the mode and path.
    pub allocs: u64,
    /// Of those, the fast paths'.
    pub allocs_fast: u64,
    /// Every free through the cache.
    pub frees: u64,
    /// Of those, the fast paths'.
    pub frees_fast: u64,
}

/// The fields version 5 added to [`uslab_cache_info`]: slab mode's tunables
/// and its free slabs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct uslab_cache_info_v5 {
    /// Per-CPU array size (tunable `limit`).
    pub limit: c_uint,
    /// Objects per refill and flush (`batchcount`).
    pub batchcount: c_uint,
    /// Batches in the shared array (`sharedfactor`).
    pub sharedfactor: c_uint,
    /// Slabs on slab mode's free list now.
    pub free_slabs: u64,
}

impl uslab_cache_info {
    /// The counters that hold values: `events[..USLAB_NR_STAT_ITEMS]`.
    pub fn stat_events(&self) -> &[u64] {
        &self.events[..USLAB_NR_STAT_ITEMS.min(USLAB_CACHE_INFO_EVENTS)]
    }

    /// The version-3 sheaf fields (zeros before version 3).
    pub fn sheaves(&self) -> uslab_cache_info_sheaves {
        #[cfg(uslab_cache_info_v3)]
        {
            uslab_cache_info_sheaves {
                sheaf_capacity: self.sheaf_capacity,
                barn_full_max: self.barn_full_max,
                barn_empty_max: self.barn_empty_max,
                cpu_parts: self.cpu_parts,
                sheaf_objects: self.sheaf_objects,
                barn_full: self.barn_full,
                barn_empty: self.barn_empty,
                barn_objects: self.barn_objects,
            }
        }
        #[cfg(not(uslab_cache_info_v3))]
        {
            uslab_cache_info_sheaves::default()
        }
    }

    /// The version-5 fields (slab mode's tunables and free slabs); `None`
    /// when the mirrored version predates them.
    pub fn v5(&self) -> Option<uslab_cache_info_v5> {
        #[cfg(uslab_cache_info_v5)]
        {
            Some(uslab_cache_info_v5 {
                limit: self.limit,
                batchcount: self.batchcount,
                sharedfactor: self.sharedfactor,
                free_slabs: self.free_slabs,
            })
        }
        #[cfg(not(uslab_cache_info_v5))]
        {
            None
        }
    }

    /// The version-4 fields; `None` when the mirrored version predates them.
    pub fn v4(&self) -> Option<uslab_cache_info_v4> {
        #[cfg(uslab_cache_info_v4)]
        {
            Some(uslab_cache_info_v4 {
                cpu_mode: self.cpu_mode,
                freebatch: self.freebatch,
                hiwater: self.hiwater,
                owned_slabs: self.owned_slabs,
                allocs: self.allocs,
                allocs_fast: self.allocs_fast,
                frees: self.frees,
                frees_fast: self.frees_fast,
            })
        }
        #[cfg(not(uslab_cache_info_v4))]
        {
            None
        }
    }
}

/// The page allocator's view of the process (`struct uslab_process_info`),
/// in the version [`USLAB_PROCESS_INFO_VERSION`] names: 3 (KFENCE's
/// sampling by time and its pool's size) where the header has it, else 2
/// (version 1 plus the KFENCE fields). [`uslab_process_info::v3`] reads the
/// version-3 fields whichever version is mirrored.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct uslab_process_info {
    /// In: [`USLAB_PROCESS_INFO_VERSION`].
    pub version: c_uint,
    /// Segments mapped from the OS.
    pub segments: u64,
    /// Bytes mapped from the OS.
    pub mapped_bytes: u64,
    /// Bytes in allocated page blocks (slabs, metadata).
    pub used_bytes: u64,
    /// Free bytes not yet given back to the OS.
    pub dirty_bytes: u64,
    /// Free page blocks by order 0..9.
    pub free_blocks: [u64; 10],
    /// Resident set size of the process.
    pub rss_bytes: u64,
    /// Version 2: about one allocation in this many is sampled by KFENCE
    /// (`kfence=N`); 0: off; `c_uint::MAX`: one every `kfence_ms` (the
    /// default from version 3 on).
    pub kfence_interval: c_uint,
    /// Version 2: objects the guarded pool holds (0: no pool).
    pub kfence_slots: c_uint,
    /// Version 2: allocations placed in the pool since the start.
    pub kfence_allocs: u64,
    /// Version 2: samples allocated normally (pool full, object above a
    /// page, debug cache).
    pub kfence_missed: u64,
    /// Version 2: pool objects allocated now.
    pub kfence_in_use: u64,
    /// Version 2: KFENCE reports made (misuse found).
    pub kfence_reports: u64,
    /// Version 3: KFENCE sampling by time: milliseconds between samples
    /// (0: not by time).
    #[cfg(uslab_process_info_v3)]
    pub kfence_ms: c_uint,
    /// Version 3: bytes the KFENCE pool maps (data and guard pages, slot
    /// metadata); 0 until the first sample maps it. Not in `mapped_bytes`.
    #[cfg(uslab_process_info_v3)]
    pub kfence_pool_bytes: u64,
}

/// The fields version 3 added to [`uslab_process_info`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct uslab_process_info_v3 {
    /// KFENCE sampling by time: milliseconds between samples (0: not by
    /// time).
    pub kfence_ms: c_uint,
    /// Bytes the KFENCE pool maps; 0 until the first sample maps it.
    pub kfence_pool_bytes: u64,
}

impl uslab_process_info {
    /// The version-3 fields; `None` when the mirrored version predates them.
    pub fn v3(&self) -> Option<uslab_process_info_v3> {
        #[cfg(uslab_process_info_v3)]
        {
            Some(uslab_process_info_v3 { kfence_ms: self.kfence_ms, kfence_pool_bytes: self.kfence_pool_bytes })
        }
        #[cfg(not(uslab_process_info_v3))]
        {
            None
        }
    }
}

/// The malloc family's memory (`struct uslab_malloc_info`, version 1).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct uslab_malloc_info {
    /// In: [`USLAB_MALLOC_INFO_VERSION`].
    pub version: c_uint,
    /// Bytes of segments mapped (slabs, large blocks, free pages).
    pub segment_bytes: u64,
    /// Bytes in live blocks.
    pub in_use_bytes: u64,
    /// Live blocks in mappings of their own.
    pub huge_blocks: u64,
    /// Bytes mapped for them.
    pub huge_bytes: u64,
    /// Free memory not yet given back to the OS.
    pub cached_bytes: u64,
}

extern "C" {
    /// The version of the library, as `USLAB_VERSION`.
    pub fn uslab_version() -> c_int;

    /// Creates a cache of objects of `size` bytes; NULL with errno on failure.
    pub fn uslab_cache_create(
        name: *const c_char,
        size: usize,
        align: usize,
        flags: c_ulong,
        ctor: uslab_ctor,
    ) -> *mut uslab_cache;
    /// Destroys a cache (kept, with one report line, if objects are live).
    pub fn uslab_cache_destroy(cache: *mut uslab_cache);
    /// Allocates one object; NULL with errno ENOMEM.
    pub fn uslab_cache_alloc(cache: *mut uslab_cache) -> *mut c_void;
    /// Allocates one object and zeroes its `size` bytes.
    pub fn uslab_cache_zalloc(cache: *mut uslab_cache) -> *mut c_void;
    /// Frees an object to its cache; any thread; NULL does nothing.
    pub fn uslab_cache_free(cache: *mut uslab_cache, obj: *mut c_void);
    /// Gives back unused slabs; 0 if none remain, 1 otherwise.
    pub fn uslab_cache_shrink(cache: *mut uslab_cache) -> c_int;
    /// Sets a tunable by name; 0, or -1 with errno EINVAL.
    pub fn uslab_cache_tune_set(cache: *mut uslab_cache, name: *const c_char, value: c_ulong) -> c_int;
    /// Reads a tunable by name; 0, or -1 with errno EINVAL.
    pub fn uslab_cache_tune_get(cache: *mut uslab_cache, name: *const c_char, value: *mut c_ulong) -> c_int;
    /// Allocates `nr` objects into `objs`, all or nothing: `nr` or 0.
    pub fn uslab_cache_alloc_bulk(cache: *mut uslab_cache, nr: usize, objs: *mut *mut c_void) -> usize;
    /// Frees `nr` objects (NULL entries skipped).
    pub fn uslab_cache_free_bulk(cache: *mut uslab_cache, nr: usize, objs: *mut *mut c_void);
    /// Checks every slab; the number of problems, or -1 with errno EINVAL.
    pub fn uslab_cache_validate(cache: *mut uslab_cache) -> c_long;
    /// The name given at creation.
    pub fn uslab_cache_name(cache: *const uslab_cache) -> *const c_char;
    /// The object size given at creation.
    pub fn uslab_cache_size(cache: *const uslab_cache) -> usize;

    /// Name of a stat item ("ALLOC_FASTPATH"); NULL if out of range.
    pub fn uslab_stat_name(item: uslab_stat_item) -> *const c_char;
    /// Description of a stat item; NULL if out of range.
    pub fn uslab_stat_desc(item: uslab_stat_item) -> *const c_char;
    /// Fills `info` (set `version` first); 0, or -1 with errno EINVAL.
    pub fn uslab_cache_get_info(cache: *mut uslab_cache, info: *mut uslab_cache_info) -> c_int;
    /// Fills `info` (set `version` first); 0, or -1 with errno EINVAL.
    pub fn uslab_process_get_info(info: *mut uslab_process_info) -> c_int;
    /// The backend the CPU parts run on: "rseq" (caches in sheaves mode keep
    /// one part per CPU) or "thread"; a static string.
    pub fn uslab_cpu_backend() -> *const c_char;
    /// One CPU's part of `cache` (per-CPU backend): its event counters into
    /// `events[..n]` (by stat item) and the objects it holds into `*objects`
    /// (may be NULL); 0, or -1 with errno ENOENT (no part there) or EINVAL.
    pub fn uslab_cache_cpu_stats(
        cache: *mut uslab_cache,
        cpu: c_uint,
        events: *mut u64,
        n: usize,
        objects: *mut u64,
    ) -> c_int;
    /// Prints every cache through `write_fn` in the form chosen by `opts`.
    pub fn uslab_stats_print(write_fn: uslab_write_fn, arg: *mut c_void, opts: c_ulong);
    /// Prints the statistics table to a file descriptor.
    pub fn uslab_stats_print_fd(fd: c_int);
    /// Prints statistics in any form to a file descriptor.
    pub fn uslab_stats_print_fd_opts(fd: c_int, opts: c_ulong);
    /// The export file's path, or NULL when the process does not export.
    pub fn uslab_export_path() -> *const c_char;
    /// Brings the export up to date now; 0, or -1 with errno ENOENT.
    pub fn uslab_export_refresh() -> c_int;
    /// Starts (1) or stops and waits for (0) the background thread that
    /// gives memory back while the process is idle; 0, or -1 with errno.
    pub fn uslab_background_thread(enable: c_int) -> c_int;

    /// malloc(3).
    pub fn uslab_malloc(size: usize) -> *mut c_void;
    /// free(3).
    pub fn uslab_free(p: *mut c_void);
    /// calloc(3).
    pub fn uslab_calloc(n: usize, size: usize) -> *mut c_void;
    /// realloc(3), glibc semantics (size 0 frees and returns NULL).
    pub fn uslab_realloc(p: *mut c_void, size: usize) -> *mut c_void;
    /// reallocarray(3).
    pub fn uslab_reallocarray(p: *mut c_void, n: usize, size: usize) -> *mut c_void;
    /// posix_memalign(3): 0, EINVAL or ENOMEM.
    pub fn uslab_posix_memalign(out: *mut *mut c_void, align: usize, size: usize) -> c_int;
    /// aligned_alloc(3).
    pub fn uslab_aligned_alloc(align: usize, size: usize) -> *mut c_void;
    /// memalign(3).
    pub fn uslab_memalign(align: usize, size: usize) -> *mut c_void;
    /// valloc(3).
    pub fn uslab_valloc(size: usize) -> *mut c_void;
    /// pvalloc(3).
    pub fn uslab_pvalloc(size: usize) -> *mut c_void;
    /// malloc_usable_size(3).
    pub fn uslab_malloc_usable_size(p: *mut c_void) -> usize;
    /// free_sized (C23).
    pub fn uslab_free_sized(p: *mut c_void, size: usize);
    /// free_aligned_sized (C23).
    pub fn uslab_free_aligned_sized(p: *mut c_void, align: usize, size: usize);
    /// malloc_trim(3): 1 if memory was given back, else 0.
    pub fn uslab_malloc_trim(pad: usize) -> c_int;
    /// malloc_stats(3) lines to a file descriptor.
    pub fn uslab_malloc_stats_print_fd(fd: c_int);
    /// Fills `info` (set `version` first); 0, or -1 with errno EINVAL.
    pub fn uslab_malloc_get_info(info: *mut uslab_malloc_info) -> c_int;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;
    use std::mem::{size_of, MaybeUninit};
    use std::ptr::addr_of;

    extern "C" {
        fn uslab_sys_layout(i: usize) -> usize;
    }

    /// Byte offset of a field, from a pointer to an uninitialised struct.
    macro_rules! offset_of {
        ($t:ty, $f:ident) => {{
            let m = MaybeUninit::<$t>::uninit();
            let base = m.as_ptr();
            // SAFETY: addr_of! computes the field's address without reading
            // or creating a reference to uninitialised memory.
            let field = unsafe { addr_of!((*base).$f) };
            field as usize - base as usize
        }};
    }

    /// Every size and offset c/layout.c reports, in its order.
    #[test]
    fn layout_matches_the_c_compiler() {
        let mut rust = vec![
            size_of::<uslab_cache_info>(),
            offset_of!(uslab_cache_info, name),
            offset_of!(uslab_cache_info, alias_of),
            offset_of!(uslab_cache_info, aliases),
            offset_of!(uslab_cache_info, flags),
            offset_of!(uslab_cache_info, object_size),
            offset_of!(uslab_cache_info, slab_object_size),
            offset_of!(uslab_cache_info, align),
            offset_of!(uslab_cache_info, order),
            offset_of!(uslab_cache_info, min_order),
            offset_of!(uslab_cache_info, objects_per_slab),
            offset_of!(uslab_cache_info, cpu_partial),
            offset_of!(uslab_cache_info, min_partial),
            offset_of!(uslab_cache_info, slabs),
            offset_of!(uslab_cache_info, partial_slabs),
            offset_of!(uslab_cache_info, total_objects),
            offset_of!(uslab_cache_info, active_objects),
            offset_of!(uslab_cache_info, slab_bytes),
            offset_of!(uslab_cache_info, events),
            offset_of!(uslab_cache_info, cpu_slabs),
            offset_of!(uslab_cache_info, cpu_queue),
            offset_of!(uslab_cache_info, has_ctor),
        ];
        #[cfg(uslab_cache_info_v3)]
        rust.extend([
            offset_of!(uslab_cache_info, sheaf_capacity),
            offset_of!(uslab_cache_info, barn_full_max),
            offset_of!(uslab_cache_info, barn_empty_max),
            offset_of!(uslab_cache_info, cpu_parts),
            offset_of!(uslab_cache_info, sheaf_objects),
            offset_of!(uslab_cache_info, barn_full),
            offset_of!(uslab_cache_info, barn_empty),
            offset_of!(uslab_cache_info, barn_objects),
        ]);
        #[cfg(uslab_cache_info_v4)]
        rust.extend([
            offset_of!(uslab_cache_info, cpu_mode),
            offset_of!(uslab_cache_info, freebatch),
            offset_of!(uslab_cache_info, hiwater),
            offset_of!(uslab_cache_info, owned_slabs),
            offset_of!(uslab_cache_info, allocs),
            offset_of!(uslab_cache_info, allocs_fast),
            offset_of!(uslab_cache_info, frees),
            offset_of!(uslab_cache_info, frees_fast),
            USLAB_CPU_CLASSIC as usize,
            USLAB_CPU_SHEAVES as usize,
            USLAB_CPU_HOME as usize,
            USLAB_CPU_SLQB as usize,
        ]);
        #[cfg(uslab_cache_info_v5)]
        rust.extend([
            offset_of!(uslab_cache_info, limit),
            offset_of!(uslab_cache_info, batchcount),
            offset_of!(uslab_cache_info, sharedfactor),
            offset_of!(uslab_cache_info, free_slabs),
        ]);
        // Slab mode came without a struct version: c/layout.c has its value
        // where the header defines it.
        if USLAB_CPU_NR_MODES > USLAB_CPU_SLAB {
            rust.push(USLAB_CPU_SLAB as usize);
        }
        rust.extend([
            size_of::<uslab_process_info>(),
            offset_of!(uslab_process_info, segments),
            offset_of!(uslab_process_info, mapped_bytes),
            offset_of!(uslab_process_info, used_bytes),
            offset_of!(uslab_process_info, dirty_bytes),
            offset_of!(uslab_process_info, free_blocks),
            offset_of!(uslab_process_info, rss_bytes),
            offset_of!(uslab_process_info, kfence_interval),
            offset_of!(uslab_process_info, kfence_slots),
            offset_of!(uslab_process_info, kfence_allocs),
            offset_of!(uslab_process_info, kfence_missed),
            offset_of!(uslab_process_info, kfence_in_use),
            offset_of!(uslab_process_info, kfence_reports),
        ]);
        #[cfg(uslab_process_info_v3)]
        rust.extend([
            offset_of!(uslab_process_info, kfence_ms),
            offset_of!(uslab_process_info, kfence_pool_bytes),
        ]);
        rust.extend([
            size_of::<uslab_malloc_info>(),
            offset_of!(uslab_malloc_info, segment_bytes),
            offset_of!(uslab_malloc_info, in_use_bytes),
            offset_of!(uslab_malloc_info, huge_blocks),
            offset_of!(uslab_malloc_info, huge_bytes),
            offset_of!(uslab_malloc_info, cached_bytes),
            USLAB_NAME_MAX,
            USLAB_CACHE_MAX_SIZE,
            USLAB_NR_STAT_ITEMS,
        ]);
        for (i, &r) in rust.iter().enumerate() {
            // SAFETY: uslab_sys_layout reads a constant table.
            let c = unsafe { uslab_sys_layout(i) };
            assert_eq!(r, c, "layout value #{} (see c/layout.c): Rust {} vs C {}", i, r, c);
        }
        // The header's struct versions may move ahead of the mirrored ones
        // (the library fills the version asked for), never behind. Where
        // the header's cache info is newer than the newest mirrored
        // version (5), the C struct is larger than the mirror: then this
        // test fails on its size first, as it should (mirror the new
        // version).
        let mirrored = [
            USLAB_CACHE_INFO_VERSION,
            USLAB_PROCESS_INFO_VERSION,
            USLAB_MALLOC_INFO_VERSION,
        ];
        for (k, &v) in mirrored.iter().enumerate() {
            // SAFETY: as above.
            let header = unsafe { uslab_sys_layout(rust.len() + k) };
            assert!(v as usize <= header, "struct version #{}: mirrored {} > header {}", k, v, header);
        }
        // SAFETY: as above; the table has exactly as many entries.
        assert_eq!(unsafe { uslab_sys_layout(rust.len() + 3) }, usize::MAX, "c/layout.c has more values");
    }

    /// Every `USLAB_API` function of uslab.h is declared here.
    #[test]
    fn every_api_function_is_declared() {
        let source = include_str!("lib.rs");
        let missing: Vec<&str> = API_FUNCTIONS
            .iter()
            .copied()
            .filter(|f| !source.contains(&format!("pub fn {}(", f)))
            .collect();
        assert!(
            missing.is_empty(),
            "uslab.h declares functions src/lib.rs lacks: {:?}",
            missing
        );
    }

    #[test]
    fn version_and_stat_names() {
        // SAFETY: uslab_version has no preconditions.
        assert_eq!(unsafe { uslab_version() }, USLAB_VERSION);
        // SAFETY: in-range items give static NUL-terminated strings.
        let name = unsafe { CStr::from_ptr(uslab_stat_name(USLAB_STAT_ALLOC_FASTPATH)) };
        assert_eq!(name.to_str().unwrap(), "ALLOC_FASTPATH");
        // SAFETY: out of range is NULL, by contract.
        assert!(unsafe { uslab_stat_name(USLAB_NR_STAT_ITEMS as uslab_stat_item) }.is_null());
        // The items version 4's modes count, at the library's numbers.
        #[cfg(uslab_cache_info_v4)]
        for (item, expect) in [
            (USLAB_STAT_FREE_REMOTE, "FREE_REMOTE"),
            (USLAB_STAT_FLUSH_RFREE_LIST, "FLUSH_RFREE_LIST"),
            (USLAB_STAT_FLUSH_RFREE_LIST_OBJECTS, "FLUSH_RFREE_LIST_OBJECTS"),
            (USLAB_STAT_CLAIM_REMOTE_LIST, "CLAIM_REMOTE_LIST"),
            (USLAB_STAT_CLAIM_REMOTE_LIST_OBJECTS, "CLAIM_REMOTE_LIST_OBJECTS"),
            (USLAB_STAT_FLUSH_FREE_LIST, "FLUSH_FREE_LIST"),
            (USLAB_STAT_FLUSH_FREE_LIST_OBJECTS, "FLUSH_FREE_LIST_OBJECTS"),
            (USLAB_STAT_SLAB_OWN, "SLAB_OWN"),
            (USLAB_STAT_SLAB_DISOWN, "SLAB_DISOWN"),
        ] {
            // SAFETY: in range: a static NUL-terminated string.
            let name = unsafe { CStr::from_ptr(uslab_stat_name(item)) };
            assert_eq!(name.to_str().unwrap(), expect);
        }
    }

    #[test]
    fn cache_round_trip() {
        // SAFETY: the C contract: a valid name, a live cache, objects freed
        // to their cache before it is destroyed.
        unsafe {
            let c = uslab_cache_create(b"uslab-sys-test\0".as_ptr().cast(), 48, 0, USLAB_NO_MERGE, None);
            assert!(!c.is_null());
            let mut objs = [std::ptr::null_mut(); 32];
            assert_eq!(uslab_cache_alloc_bulk(c, objs.len(), objs.as_mut_ptr()), objs.len());
            let mut info: uslab_cache_info = std::mem::zeroed();
            info.version = USLAB_CACHE_INFO_VERSION;
            assert_eq!(uslab_cache_get_info(c, &mut info), 0);
            assert_eq!(info.active_objects, 32);
            assert_eq!(info.object_size, 48);
            assert_eq!(CStr::from_ptr(info.name.as_ptr()).to_str().unwrap(), "uslab-sys-test");
            if let Some(v4) = info.v4() {
                assert_eq!(v4.allocs - v4.frees, info.active_objects);
                assert!(v4.allocs >= 32 && v4.allocs_fast <= v4.allocs);
                // A new cache runs the default mode or USLAB_OPTIONS's
                // (slub_cpu_mode=), any mode the library has.
                assert!(v4.cpu_mode < USLAB_CPU_NR_MODES, "cpu_mode {}", v4.cpu_mode);
            }
            uslab_cache_free_bulk(c, objs.len(), objs.as_mut_ptr());
            assert_eq!(uslab_cache_validate(c), 0);
            uslab_cache_destroy(c);
        }
    }
}
