//! Statistics: per cache ([`CacheInfo`]), per process ([`ProcessInfo`],
//! [`MallocInfo`]), and the printed forms ([`stats_string`]).

use std::ffi::{CStr, OsStr};
use std::fmt;
use std::io;
use std::os::raw::{c_char, c_ulong, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::ptr::NonNull;

use crate::cache::{CpuMode, Flags};
use crate::sys;

/// One of uslab's event counters, the kernel's `enum stat_item`
/// (`ALLOC_FASTPATH`, `FREE_SLOWPATH`, ...).
///
/// The set grows with uslab releases, so it is not a closed enum: items are
/// numbered `0..StatItem::count()` and known by their names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatItem(u32);

impl StatItem {
    /// How many items this uslab counts.
    pub fn count() -> usize {
        sys::USLAB_NR_STAT_ITEMS
    }

    /// Every item, in uslab's order.
    pub fn all() -> impl Iterator<Item = StatItem> {
        (0..sys::USLAB_NR_STAT_ITEMS as u32).map(StatItem)
    }

    /// The item called `name` (`"ALLOC_FASTPATH"`), if this uslab has it.
    pub fn by_name(name: &str) -> Option<StatItem> {
        StatItem::all().find(|i| i.name() == name)
    }

    /// The item's index in [`CacheInfo`]'s counters.
    pub fn index(self) -> usize {
        self.0 as usize
    }

    /// Its name, `"ALLOC_FASTPATH"`.
    pub fn name(self) -> &'static str {
        // SAFETY: in range by construction; the strings are static.
        static_str(unsafe { sys::uslab_stat_name(self.0) })
    }

    /// A one-line description.
    pub fn description(self) -> &'static str {
        // SAFETY: as above.
        static_str(unsafe { sys::uslab_stat_desc(self.0) })
    }
}

impl fmt::Display for StatItem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        return "";
    }
    // SAFETY: uslab's item names and descriptions are static C strings.
    unsafe { CStr::from_ptr(p) }.to_str().unwrap_or("")
}

/// A counter's value, with the item's name and description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The counter.
    pub item: StatItem,
    /// Its value: a sum over all threads, live and gone.
    pub count: u64,
}

/// A snapshot of one cache (`uslab_cache_get_info`).
///
/// Counters of live threads are read without stopping them: each is a
/// moment old, exact once they are quiet. [`CacheInfo::active_objects`] is
/// what the program holds, [`CacheInfo::allocs`] less [`CacheInfo::frees`]
/// (a KFENCE sample counts as a slow-path allocation, its free as a
/// slow-path or bulk free; a uslab before KFENCE sampled by time left
/// samples out of both). Objects in sheaves, barns, SLQB queues, slab
/// mode's arrays and remote batches on their way home are free to the
/// program but in use to the slabs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheInfo {
    /// The cache's name.
    pub name: String,
    /// For a cache merged into another: that cache's name (every number is
    /// then the shared cache's).
    pub alias_of: Option<String>,
    /// Caches merged into this one.
    pub aliases: u32,
    /// Flags in effect, slub_debug's included.
    pub flags: Flags,
    /// Object size given at creation.
    pub object_size: usize,
    /// Stride of objects in a slab (with metadata, aligned).
    pub slab_object_size: usize,
    /// Effective alignment.
    pub align: usize,
    /// Preferred slab order (slabs of `1 << order` pages).
    pub order: u32,
    /// Fallback order.
    pub min_order: u32,
    /// Objects per slab at the preferred order.
    pub objects_per_slab: u32,
    /// The `cpu_partial` tunable: free objects a CPU partial list holds.
    pub cpu_partial: u32,
    /// The `min_partial` tunable: empty slabs the node list keeps.
    pub min_partial: u32,
    /// Objects of the CPU object queue (uslab before sheaves; 0 since).
    pub cpu_queue: u32,
    /// Objects per sheaf, the per-thread object stacks (the
    /// `sheaf_capacity` tunable); 0 in classic mode or before sheaves.
    pub sheaf_capacity: u32,
    /// Full sheaves the cache's barn keeps at most (`barn_full`).
    pub barn_full_max: u32,
    /// Empty sheaves the barn keeps at most (`barn_empty`).
    pub barn_empty_max: u32,
    /// Threads with a CPU part for this cache.
    pub cpu_parts: u32,
    /// Objects in threads' sheaves now: free to the program, in use to the slabs.
    pub sheaf_objects: u64,
    /// Full sheaves in the barn now.
    pub barn_full: u64,
    /// Empty sheaves in the barn now.
    pub barn_empty: u64,
    /// Objects in the barn now.
    pub barn_objects: u64,
    /// The per-CPU mode the cache runs ([`CpuMode::Sheaves`] with
    /// `sheaf_capacity` 0 shows as [`CpuMode::Classic`]). From a uslab
    /// before modes: classic or sheaves, by `sheaf_capacity`.
    pub cpu_mode: CpuMode,
    /// The `freebatch` tunable (home, slqb): objects a thread gathers for
    /// another thread's slabs before it sends them in one batch; slqb: also
    /// the objects a queue flush moves. 0 from a uslab before modes.
    pub freebatch: u32,
    /// The `hiwater` tunable (slqb): objects the queue holds before a
    /// flush. 0 from a uslab before modes.
    pub hiwater: u32,
    /// Slabs the threads own now (home, slqb).
    pub owned_slabs: u64,
    /// Allocations the program made through the cache, whatever the mode:
    /// single and bulk, fast and slow paths (ALLOC_FASTPATH + ALLOC_PCS +
    /// ALLOC_SLOWPATH + ALLOC_BULK).
    pub allocs: u64,
    /// Of [`CacheInfo::allocs`], those the fast paths served
    /// (ALLOC_FASTPATH + ALLOC_PCS).
    pub allocs_fast: u64,
    /// Frees through the cache, likewise (FREE_FASTPATH + FREE_PCS +
    /// FREE_SLOWPATH + FREE_BULK).
    pub frees: u64,
    /// Of [`CacheInfo::frees`], those of the fast paths (FREE_FASTPATH +
    /// FREE_PCS).
    pub frees_fast: u64,
    /// Slabs that exist.
    pub slabs: u64,
    /// Slabs on the node partial list.
    pub partial_slabs: u64,
    /// Threads holding a slab of this cache now.
    pub cpu_slabs: u64,
    /// Object slots in all slabs.
    pub total_objects: u64,
    /// Objects allocated and not yet freed.
    pub active_objects: u64,
    /// Memory held in slabs, in bytes.
    pub slab_bytes: u64,
    /// Whether the cache has a constructor.
    pub has_ctor: bool,
    events: Vec<u64>,
}

fn c_name(chars: &[c_char]) -> String {
    let bytes: Vec<u8> = chars.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl CacheInfo {
    pub(crate) fn of(cache: NonNull<sys::uslab_cache>) -> io::Result<CacheInfo> {
        // SAFETY: uslab_cache_info is plain data; all-zero is a valid value.
        let mut raw: sys::uslab_cache_info = unsafe { std::mem::zeroed() };
        raw.version = sys::USLAB_CACHE_INFO_VERSION;
        // SAFETY: a live cache and a struct of the version we set.
        if unsafe { sys::uslab_cache_get_info(cache.as_ptr(), &mut raw) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let alias_of = c_name(&raw.alias_of);
        let sheaves = raw.sheaves();
        let events = raw.stat_events().to_vec();
        // Before struct version 4, the totals from the counters, as
        // uslab.h defines them.
        let v4 = raw.v4().unwrap_or_else(|| {
            let sum = |names: &[&str]| -> u64 {
                names
                    .iter()
                    .filter_map(|n| StatItem::by_name(n))
                    .map(|i| events.get(i.index()).copied().unwrap_or(0))
                    .sum()
            };
            let allocs_fast = sum(&["ALLOC_FASTPATH", "ALLOC_PCS"]);
            let frees_fast = sum(&["FREE_FASTPATH", "FREE_PCS"]);
            sys::uslab_cache_info_v4 {
                cpu_mode: if sheaves.sheaf_capacity > 0 { sys::USLAB_CPU_SHEAVES } else { sys::USLAB_CPU_CLASSIC },
                allocs_fast,
                allocs: allocs_fast + sum(&["ALLOC_SLOWPATH", "ALLOC_BULK"]),
                frees_fast,
                frees: frees_fast + sum(&["FREE_SLOWPATH", "FREE_BULK"]),
                ..Default::default()
            }
        });
        Ok(CacheInfo {
            name: c_name(&raw.name),
            alias_of: if alias_of.is_empty() { None } else { Some(alias_of) },
            aliases: raw.aliases,
            flags: Flags::from_bits(raw.flags),
            object_size: raw.object_size,
            slab_object_size: raw.slab_object_size,
            align: raw.align,
            order: raw.order,
            min_order: raw.min_order,
            objects_per_slab: raw.objects_per_slab,
            cpu_partial: raw.cpu_partial,
            min_partial: raw.min_partial,
            cpu_queue: raw.cpu_queue,
            sheaf_capacity: sheaves.sheaf_capacity,
            barn_full_max: sheaves.barn_full_max,
            barn_empty_max: sheaves.barn_empty_max,
            cpu_parts: sheaves.cpu_parts,
            sheaf_objects: sheaves.sheaf_objects,
            barn_full: sheaves.barn_full,
            barn_empty: sheaves.barn_empty,
            barn_objects: sheaves.barn_objects,
            cpu_mode: CpuMode::from_raw(v4.cpu_mode),
            freebatch: v4.freebatch,
            hiwater: v4.hiwater,
            owned_slabs: v4.owned_slabs,
            allocs: v4.allocs,
            allocs_fast: v4.allocs_fast,
            frees: v4.frees,
            frees_fast: v4.frees_fast,
            slabs: raw.slabs,
            partial_slabs: raw.partial_slabs,
            cpu_slabs: raw.cpu_slabs,
            total_objects: raw.total_objects,
            active_objects: raw.active_objects,
            slab_bytes: raw.slab_bytes,
            has_ctor: raw.has_ctor != 0,
            events,
        })
    }

    /// The value of one counter.
    pub fn event(&self, item: StatItem) -> u64 {
        self.events.get(item.index()).copied().unwrap_or(0)
    }

    /// The value of the counter called `name`, if this uslab has it.
    ///
    /// ```
    /// let c = uslab::Cache::<u64>::new("counted")?;
    /// let x = c.alloc(1)?;
    /// let info = c.info()?;
    /// // the fast path, a sheaf (where uslab has them), or the slow path
    /// let allocs: u64 = ["ALLOC_FASTPATH", "ALLOC_PCS", "ALLOC_SLOWPATH"]
    ///     .iter()
    ///     .filter_map(|name| info.event_by_name(name))
    ///     .sum();
    /// assert!(allocs >= 1 && info.allocs >= allocs);
    /// # drop(x);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn event_by_name(&self, name: &str) -> Option<u64> {
        StatItem::by_name(name).map(|i| self.event(i))
    }

    /// Every counter, in uslab's order.
    pub fn events(&self) -> impl Iterator<Item = Event> + '_ {
        StatItem::all().map(move |item| Event { item, count: self.event(item) })
    }
}

/// The page allocator's view of the whole process (`uslab_process_get_info`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessInfo {
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
    /// KFENCE: about one allocation in this many is sampled into the
    /// guarded pool (`USLAB_OPTIONS=kfence=N`); 0: off; `u32::MAX`: one
    /// every [`ProcessInfo::kfence_ms`] (uslab's default).
    pub kfence_interval: u32,
    /// KFENCE: objects the guarded pool holds (0: no pool).
    pub kfence_slots: u32,
    /// KFENCE: allocations placed in the pool since the start.
    pub kfence_allocs: u64,
    /// KFENCE: samples allocated normally (pool full, object above a page,
    /// debug cache).
    pub kfence_missed: u64,
    /// KFENCE: pool objects allocated now.
    pub kfence_in_use: u64,
    /// KFENCE: reports made (misuse found).
    pub kfence_reports: u64,
    /// KFENCE sampling by time: milliseconds between samples
    /// (`kfence_ms`); 0: not by time, or a uslab before it.
    pub kfence_ms: u32,
    /// Bytes the KFENCE pool maps (its data and guard pages and its slots'
    /// metadata); 0 until the first sample maps it, or from a uslab before
    /// it. Not part of [`ProcessInfo::mapped_bytes`].
    pub kfence_pool_bytes: u64,
}

/// The page allocator's view of the process.
pub fn process_info() -> io::Result<ProcessInfo> {
    let mut raw = sys::uslab_process_info {
        version: sys::USLAB_PROCESS_INFO_VERSION,
        ..Default::default()
    };
    // SAFETY: a struct of the version we set.
    if unsafe { sys::uslab_process_get_info(&mut raw) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let v3 = raw.v3().unwrap_or_default();
    Ok(ProcessInfo {
        segments: raw.segments,
        mapped_bytes: raw.mapped_bytes,
        used_bytes: raw.used_bytes,
        dirty_bytes: raw.dirty_bytes,
        free_blocks: raw.free_blocks,
        rss_bytes: raw.rss_bytes,
        kfence_interval: raw.kfence_interval,
        kfence_slots: raw.kfence_slots,
        kfence_allocs: raw.kfence_allocs,
        kfence_missed: raw.kfence_missed,
        kfence_in_use: raw.kfence_in_use,
        kfence_reports: raw.kfence_reports,
        kfence_ms: v3.kfence_ms,
        kfence_pool_bytes: v3.kfence_pool_bytes,
    })
}

/// The malloc family's memory (`uslab_malloc_get_info`): what
/// [`UslabAlloc`](crate::UslabAlloc) serves.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MallocInfo {
    /// Bytes of segments mapped (slabs, large blocks, free pages).
    pub segment_bytes: u64,
    /// Bytes in live blocks.
    pub in_use_bytes: u64,
    /// Live blocks in mappings of their own (above 2 MiB).
    pub huge_blocks: u64,
    /// Bytes mapped for them.
    pub huge_bytes: u64,
    /// Free memory not yet given back to the OS.
    pub cached_bytes: u64,
}

/// The malloc family's memory.
///
/// ```
/// let before = uslab::malloc_info()?.in_use_bytes;
/// let p = unsafe { uslab::sys::uslab_malloc(1 << 20) };
/// assert!(uslab::malloc_info()?.in_use_bytes >= before + (1 << 20));
/// unsafe { uslab::sys::uslab_free(p) };
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn malloc_info() -> io::Result<MallocInfo> {
    let mut raw = sys::uslab_malloc_info {
        version: sys::USLAB_MALLOC_INFO_VERSION,
        ..Default::default()
    };
    // SAFETY: a struct of the version we set.
    if unsafe { sys::uslab_malloc_get_info(&mut raw) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(MallocInfo {
        segment_bytes: raw.segment_bytes,
        in_use_bytes: raw.in_use_bytes,
        huge_blocks: raw.huge_blocks,
        huge_bytes: raw.huge_bytes,
        cached_bytes: raw.cached_bytes,
    })
}

/// The forms of [`stats_string`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StatsForm {
    /// A table with the kernel slabinfo tool's columns, one row per cache,
    /// then the aliases and a process summary.
    Table,
    /// `/proc/slabinfo` version 2.1, byte-compatible with the kernel's.
    Slabinfo,
    /// One JSON object: process, caches (with every counter), aliases.
    Json,
}

/// Every cache of the process, printed in `form` (`uslab_stats_print`).
///
/// ```
/// let c = uslab::Cache::<[u8; 24]>::new("printed")?;
/// let table = uslab::stats_string(uslab::StatsForm::Table);
/// assert!(table.contains("printed"));
/// let json = uslab::stats_string(uslab::StatsForm::Json);
/// assert!(json.starts_with('{'));
/// # drop(c);
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn stats_string(form: StatsForm) -> String {
    let opts: c_ulong = match form {
        StatsForm::Table => sys::USLAB_STATS_TABLE,
        StatsForm::Slabinfo => sys::USLAB_STATS_SLABINFO,
        StatsForm::Json => sys::USLAB_STATS_JSON,
    };
    /// Appends one piece of text. It must not unwind into C: pushing to a
    /// String only fails by aborting on memory exhaustion.
    unsafe extern "C" fn append(arg: *mut c_void, text: *const c_char) {
        // SAFETY: arg is the &mut String passed below, text a NUL-terminated
        // piece valid for this call.
        let (out, piece) = unsafe { (&mut *(arg as *mut String), CStr::from_ptr(text)) };
        out.push_str(&piece.to_string_lossy());
    }
    let mut out = String::new();
    // SAFETY: the callback is called during this call only, with our String
    // (uslab calls it with no allocator lock held, so it may allocate).
    unsafe { sys::uslab_stats_print(Some(append), &mut out as *mut String as *mut c_void, opts) };
    out
}

/// The statistics file this process exports for `uslabinfo`, when it runs
/// with `USLAB_OPTIONS=export`.
pub fn export_path() -> Option<PathBuf> {
    // SAFETY: no preconditions; the path is a static NUL-terminated string.
    let p = unsafe { sys::uslab_export_path() };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-NULL: a NUL-terminated path that lives as long as the process.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    Some(PathBuf::from(OsStr::from_bytes(bytes)))
}

/// Brings the exported statistics up to date now and serves a pending
/// `uslabinfo` command. Errors: `ENOENT` when the process does not export.
pub fn export_refresh() -> io::Result<()> {
    // SAFETY: no preconditions.
    if unsafe { sys::uslab_export_refresh() } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
