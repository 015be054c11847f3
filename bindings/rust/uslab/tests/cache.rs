//! Cache<T> and CacheBox: values, drops, bulk operations, tunables,
//! statistics, odd types, errors.

use std::cell::Cell;
use std::io;
use std::mem::MaybeUninit;
use std::rc::Rc;

use uslab::{Cache, CacheBox, CacheInfo, CpuMode, Flags, StatItem};

/// Counts its drops.
struct Tracked {
    id: usize,
    drops: Rc<Cell<usize>>,
    _payload: [u64; 6],
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.drops.set(self.drops.get() + 1);
    }
}

fn tracked(id: usize, drops: &Rc<Cell<usize>>) -> Tracked {
    Tracked { id, drops: Rc::clone(drops), _payload: [id as u64; 6] }
}

#[test]
fn values_live_in_the_cache_and_drop_once() -> io::Result<()> {
    let cache: Cache<Tracked> = Cache::with_flags("tracked", Flags::NO_MERGE)?;
    let drops = Rc::new(Cell::new(0));
    let mut boxes = Vec::new();
    for i in 0..1000 {
        boxes.push(cache.alloc(tracked(i, &drops))?);
    }
    assert_eq!(cache.info()?.active_objects, 1000);
    for (i, b) in boxes.iter().enumerate() {
        assert_eq!(b.id, i);
        assert_eq!(CacheBox::as_ptr(b) as usize % std::mem::align_of::<Tracked>(), 0);
    }
    boxes.truncate(500);
    assert_eq!(drops.get(), 500);
    assert_eq!(cache.info()?.active_objects, 500);
    let taken = CacheBox::into_inner(boxes.pop().unwrap());
    assert_eq!(taken.id, 499);
    assert_eq!(drops.get(), 500, "into_inner moves the value out without dropping it");
    drop(taken);
    drop(boxes);
    assert_eq!(drops.get(), 1000);
    assert_eq!(cache.info()?.active_objects, 0);
    assert_eq!(cache.validate(), 0);
    Ok(())
}

#[test]
fn bulk_alloc_and_free() -> io::Result<()> {
    let cache: Cache<Tracked> = Cache::with_flags("tracked-bulk", Flags::NO_MERGE)?;
    let other: Cache<Tracked> = Cache::with_flags("tracked-other", Flags::NO_MERGE)?;
    let drops = Rc::new(Cell::new(0));
    let batch = cache.alloc_bulk(300, |i| tracked(i, &drops))?;
    assert_eq!(batch.len(), 300);
    assert!(batch.iter().enumerate().all(|(i, b)| b.id == i));
    let info = cache.info()?;
    assert_eq!(info.active_objects, 300);
    assert!(info.event_by_name("ALLOC_BULK").unwrap() >= 300);

    // A foreign object in the batch is freed to its own cache.
    let mut mixed = batch;
    mixed.push(other.alloc(tracked(1000, &drops))?);
    cache.free_bulk(mixed);
    assert_eq!(drops.get(), 301);
    assert_eq!(cache.info()?.active_objects, 0);
    assert_eq!(other.info()?.active_objects, 0);
    assert!(cache.info()?.event_by_name("FREE_BULK").unwrap() >= 300);

    assert!(cache.alloc_bulk(0, |i| tracked(i, &drops))?.is_empty());
    Ok(())
}

#[test]
fn a_panicking_filler_gives_everything_back() -> io::Result<()> {
    let cache: Cache<Tracked> = Cache::with_flags("tracked-panic", Flags::NO_MERGE)?;
    let drops = Rc::new(Cell::new(0));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        cache.alloc_bulk(64, |i| {
            if i == 40 {
                panic!("filler fails at 40");
            }
            tracked(i, &drops)
        })
    }));
    assert!(result.is_err());
    assert_eq!(drops.get(), 40, "the 40 values written were dropped");
    assert_eq!(cache.info()?.active_objects, 0, "all 64 objects were given back");
    Ok(())
}

#[test]
fn uninit_and_zeroed() -> io::Result<()> {
    let cache: Cache<[u64; 16]> = Cache::with_flags("arrays", Flags::NO_MERGE)?;
    let mut dirty = cache.alloc([0xdead_beef; 16])?;
    dirty[3] = 7;
    drop(dirty);
    let zeroed = cache.alloc_zeroed()?;
    // SAFETY: all-zero bytes are a valid [u64; 16].
    let zeroed = unsafe { CacheBox::assume_init(zeroed) };
    assert_eq!(*zeroed, [0; 16]);
    let slot: CacheBox<'_, MaybeUninit<[u64; 16]>> = cache.alloc_uninit()?;
    let filled = CacheBox::write(slot, [5; 16]);
    assert_eq!(filled[15], 5);
    Ok(())
}

#[test]
fn raw_round_trip_and_leak() -> io::Result<()> {
    let cache: Cache<String> = Cache::new("strings")?;
    let b = cache.alloc(String::from("kept"))?;
    let raw = CacheBox::into_raw(b);
    // SAFETY: raw came from into_raw of a box of this cache.
    let b = unsafe { CacheBox::from_raw(&cache, raw) };
    assert_eq!(&*b, "kept");
    // A leaked object keeps the cache alive when it is dropped: uslab prints
    // "destroy with 1 live object; cache left in place", as designed.
    let leaked: &mut String = CacheBox::leak(cache.alloc(String::from("leaked"))?);
    leaked.push('!');
    assert_eq!(leaked, "leaked!");
    Ok(())
}

#[test]
fn zero_sized_and_over_aligned_types() -> io::Result<()> {
    #[derive(Debug, PartialEq)]
    struct Unit;
    let units: Cache<Unit> = Cache::new("units")?;
    let u = units.alloc(Unit)?;
    assert_eq!(*u, Unit);
    assert_eq!(units.object_size(), 1);

    #[repr(align(4096))]
    struct Page([u8; 4096]);
    let pages: Cache<Page> = Cache::new("pages")?;
    let ps: Vec<_> = (0..20).map(|i| pages.alloc(Page([i as u8; 4096]))).collect::<io::Result<_>>()?;
    for (i, p) in ps.iter().enumerate() {
        assert_eq!(CacheBox::as_ptr(p) as usize % 4096, 0);
        assert!(p.0.iter().all(|&b| b == i as u8));
    }
    Ok(())
}

#[test]
fn tunables_pass_names_through() -> io::Result<()> {
    let cache: Cache<[u8; 200]> = Cache::with_flags("tunable", Flags::NO_MERGE)?;
    // The names are uslab's, not the crate's: whichever of these this uslab
    // has must read back what was set (the set changes between releases).
    let mut known = 0;
    for name in [
        "min_partial",
        "order",
        "cpu_partial",
        "cpu_queue",
        "cpu_mode",
        "freebatch",
        "hiwater",
        "limit",
        "batchcount",
        "sharedfactor",
        "sheaf_capacity",
        "barn_full",
        "barn_empty",
    ] {
        if let Ok(v) = cache.tunable(name) {
            cache.set_tunable(name, v)?;
            assert_eq!(cache.tunable(name)?, v, "{}", name);
            known += 1;
        }
    }
    assert!(known >= 2, "min_partial and order at least");
    cache.set_tunable("min_partial", 3)?;
    assert_eq!(cache.tunable("min_partial")?, 3);
    assert_eq!(cache.info()?.min_partial, 3);
    let err = cache.set_tunable("no_such_tunable", 1).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(22), "EINVAL");
    assert!(cache.tunable("no_such_tunable").is_err());
    assert!(cache.set_tunable("min_partial", 1 << 40).is_err(), "out of range");
    assert!(cache.set_tunable("min\0partial", 1).is_err());
    Ok(())
}

#[test]
fn info_and_events() -> io::Result<()> {
    let cache: Cache<[u8; 40]> = Cache::with_flags("info", Flags::NO_MERGE | Flags::HWCACHE_ALIGN)?;
    let objs: Vec<_> = (0..100).map(|_| cache.alloc([1; 40])).collect::<io::Result<_>>()?;
    let info = cache.info()?;
    assert_eq!(info.name, "info");
    assert_eq!(cache.name(), "info");
    assert_eq!(info.alias_of, None);
    assert_eq!(info.object_size, 40);
    assert!(info.slab_object_size >= 40);
    assert!(info.flags.contains(Flags::HWCACHE_ALIGN | Flags::NO_MERGE));
    assert_eq!(info.active_objects, 100);
    assert!(info.total_objects >= 100 && info.slabs >= 1 && info.slab_bytes > 0);
    // Allocations are counted on one of the paths uslab has: the CPU free
    // list (ALLOC_FASTPATH), a sheaf (ALLOC_PCS, where uslab has sheaves),
    // the slow path.
    let allocs: u64 = ["ALLOC_FASTPATH", "ALLOC_PCS", "ALLOC_SLOWPATH"]
        .iter()
        .filter_map(|n| info.event_by_name(n))
        .sum();
    assert!(allocs >= 100, "{} allocations counted for 100", allocs);
    assert!(StatItem::by_name("ALLOC_FASTPATH").is_some() && StatItem::by_name("ALLOC_SLOWPATH").is_some());
    assert_eq!(info.events().count(), StatItem::count());
    assert!(StatItem::all().all(|i| !i.name().is_empty() && !i.description().is_empty()));
    assert_eq!(StatItem::by_name("NO_SUCH_ITEM"), None);
    drop(objs);
    cache.shrink();
    assert_eq!(cache.info()?.active_objects, 0);
    Ok(())
}

/// Per-CPU counters: on the per-CPU backend a cache in sheaves mode has a
/// part on the CPU this thread ran on (or one of them), and the parts'
/// pops and pushes sum to what the cache counted on its sheaves; on the
/// thread-local backend no CPU has one.
#[test]
fn cpu_stats_sum_to_the_cache() -> io::Result<()> {
    let cache: Cache<[u64; 4]> = Cache::with_flags("percpu", Flags::NO_MERGE)?;
    cache.set_cpu_mode(CpuMode::Sheaves)?;
    for _ in 0..10 {
        let objs: Vec<_> = (0..50).map(|_| cache.alloc([7; 4])).collect::<io::Result<_>>()?;
        drop(objs);
    }
    let info = cache.info()?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    let (mut parts, mut pops, mut pushes) = (0, 0, 0);
    for cpu in 0..cpus.max(64) {
        if let Some(s) = cache.cpu_stats(cpu)? {
            assert_eq!(s.cpu, cpu);
            parts += 1;
            pops += s.event_by_name("ALLOC_PCS").unwrap_or(0);
            pushes += s.event_by_name("FREE_PCS").unwrap_or(0);
        }
    }
    if uslab::cpu_backend() == "rseq" && info.cpu_mode == CpuMode::Sheaves {
        assert!(parts >= 1, "no CPU has a part of a cache this thread used");
        assert!(pops <= info.event_by_name("ALLOC_PCS").unwrap_or(0));
        assert!(pushes <= info.event_by_name("FREE_PCS").unwrap_or(0));
    } else {
        assert_eq!(parts, 0, "parts of threads are no CPU's");
    }
    Ok(())
}

#[test]
fn debug_caches_work() -> io::Result<()> {
    let cache: Cache<[u32; 10]> = Cache::with_flags("debugged", Flags::DEBUG)?;
    let objs: Vec<_> = (0..50).map(|i| cache.alloc([i; 10])).collect::<io::Result<_>>()?;
    assert!(cache.info()?.flags.contains(Flags::POISON));
    assert_eq!(cache.validate(), 0);
    drop(objs);
    assert_eq!(cache.validate(), 0);
    Ok(())
}

#[test]
fn bad_names_are_errors() {
    assert_eq!(
        Cache::<u64>::new("").unwrap_err().raw_os_error(),
        Some(22),
        "an empty name is EINVAL"
    );
    assert!(Cache::<u64>::new(&"x".repeat(64)).is_err(), "64 bytes is too long");
    assert!(Cache::<u64>::new(&"x".repeat(63)).is_ok());
    assert_eq!(
        Cache::<u64>::new("a\0b").unwrap_err().kind(),
        io::ErrorKind::InvalidInput
    );
    assert!(Cache::<[u8; 2 << 20]>::new("too-big").is_err(), "objects above 1 MiB");
}

#[test]
fn trait_forwarding() -> io::Result<()> {
    use std::collections::HashSet;
    let cache: Cache<u32> = Cache::new("u32s")?;
    let a = cache.alloc(5)?;
    let b = cache.alloc(5)?;
    assert_eq!(a, b);
    assert_eq!(format!("{} {:?}", a, b), "5 5");
    let mut set = HashSet::new();
    set.insert(a);
    assert!(set.contains(&5));
    assert!(format!("{:?}", cache).contains("u32s"));
    Ok(())
}

const ALL_MODES: [CpuMode; 5] = [CpuMode::Classic, CpuMode::Sheaves, CpuMode::Home, CpuMode::Slqb, CpuMode::Slab];

/// The modes the linked uslab has (slab mode came after the others,
/// without a struct version).
fn modes() -> Vec<CpuMode> {
    ALL_MODES.into_iter().filter(|m| m.to_raw() < uslab::sys::USLAB_CPU_NR_MODES).collect()
}

/// Whether the linked uslab has per-CPU modes (struct version 4 and the
/// cpu_mode tunable).
fn has_modes() -> bool {
    uslab::sys::USLAB_CACHE_INFO_VERSION >= 4
}

/// Whether it has slab mode (the kernel's SLAB).
fn has_slab_mode() -> bool {
    has_modes() && modes().contains(&CpuMode::Slab)
}

/// The mode info shows for `set`: sheaves without a sheaf capacity run
/// classic.
fn runs(set: CpuMode, info: &CacheInfo) -> CpuMode {
    if set == CpuMode::Sheaves && info.sheaf_capacity == 0 {
        CpuMode::Classic
    } else {
        set
    }
}

#[test]
fn cpu_mode_set_reads_back_from_the_info() -> io::Result<()> {
    if !has_modes() {
        return Ok(());
    }
    let cache: Cache<[u64; 12]> = Cache::with_flags("moded", Flags::NO_MERGE)?;
    let mut held = Vec::new();
    let modes = modes();
    for mode in modes.iter().copied().chain(modes.iter().copied().rev()) {
        cache.set_cpu_mode(mode)?;
        assert_eq!(cache.cpu_mode()?, mode);
        assert_eq!(cache.tunable("cpu_mode")?, u64::from(mode.to_raw()));
        let info = cache.info()?;
        assert_eq!(info.cpu_mode, runs(mode, &info), "set {}", mode);
        // Objects allocated in one mode are freed in another: this thread
        // switches at its next slow path, the objects stay valid.
        for i in 0..300 {
            held.push(cache.alloc([i; 12])?);
        }
        held.drain(..150);
        assert_eq!(cache.info()?.cpu_mode, info.cpu_mode);
    }
    assert!(held.iter().all(|o| o[0] == o[11]));
    drop(held);
    assert_eq!(cache.info()?.active_objects, 0);
    assert_eq!(cache.validate(), 0);

    // SLQB's bounds, as tunables and in the info.
    cache.set_cpu_mode(CpuMode::Slqb)?;
    cache.set_tunable("freebatch", 24)?;
    cache.set_tunable("hiwater", 96)?;
    let info = cache.info()?;
    assert_eq!((info.cpu_mode, info.freebatch, info.hiwater), (CpuMode::Slqb, 24, 96));
    assert!(cache.set_tunable("freebatch", 0).is_err(), "freebatch 0");

    // A mode uslab does not have, by number.
    let err = cache.set_cpu_mode(CpuMode::Other(99)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(22), "EINVAL");
    assert_eq!(cache.cpu_mode()?, CpuMode::Slqb);

    // Debug caches have no per-CPU layer: classic only.
    let debugged: Cache<[u64; 12]> = Cache::with_flags("moded-debug", Flags::DEBUG)?;
    assert_eq!(debugged.info()?.cpu_mode, CpuMode::Classic);
    assert_eq!(debugged.set_cpu_mode(CpuMode::Home).unwrap_err().raw_os_error(), Some(22));
    debugged.set_cpu_mode(CpuMode::Classic)?;
    Ok(())
}

#[test]
fn cpu_mode_names_and_numbers() {
    for (mode, name, raw) in [
        (CpuMode::Classic, "classic", uslab::sys::USLAB_CPU_CLASSIC),
        (CpuMode::Sheaves, "sheaves", uslab::sys::USLAB_CPU_SHEAVES),
        (CpuMode::Home, "home", uslab::sys::USLAB_CPU_HOME),
        (CpuMode::Slqb, "slqb", uslab::sys::USLAB_CPU_SLQB),
        (CpuMode::Slab, "slab", uslab::sys::USLAB_CPU_SLAB),
    ] {
        assert_eq!(mode.name(), Some(name));
        assert_eq!(mode.to_string(), name);
        assert_eq!(CpuMode::by_name(name), Some(mode));
        assert_eq!(mode.to_raw(), raw);
        assert_eq!(CpuMode::from_raw(raw), mode);
        assert_eq!(CpuMode::Other(raw), mode, "compared by number");
    }
    assert_eq!(CpuMode::from_raw(7), CpuMode::Other(7));
    assert_eq!(CpuMode::Other(7).name(), None);
    assert_eq!(CpuMode::Other(7).to_string(), "7");
    assert_eq!(CpuMode::by_name("slub"), None);
}

/// The totals in every mode: allocs - frees is what the program holds.
#[test]
fn totals_count_every_allocation_and_free() -> io::Result<()> {
    const N: usize = 2000;
    const BULK: usize = 300;
    let check = |info: &CacheInfo, held: u64, what: &str| {
        assert_eq!(info.allocs - info.frees, info.active_objects, "{}: {:?}", what, info);
        assert_eq!(info.active_objects, held, "{}", what);
        assert!(info.allocs_fast <= info.allocs && info.frees_fast <= info.frees, "{}: {:?}", what, info);
        // The totals are the counters' sums, as uslab.h defines them.
        let sum = |names: &[&str]| -> u64 { names.iter().filter_map(|n| info.event_by_name(n)).sum() };
        assert_eq!(info.allocs, sum(&["ALLOC_FASTPATH", "ALLOC_PCS", "ALLOC_SLOWPATH", "ALLOC_BULK"]), "{}", what);
        assert_eq!(info.frees, sum(&["FREE_FASTPATH", "FREE_PCS", "FREE_SLOWPATH", "FREE_BULK"]), "{}", what);
    };
    let mut modes = vec![None];
    if has_modes() {
        modes.extend(self::modes().into_iter().map(Some));
    }
    for mode in modes {
        let cache: Cache<[u32; 20]> = Cache::with_flags("totals", Flags::NO_MERGE)?;
        if let Some(mode) = mode {
            cache.set_cpu_mode(mode)?;
        }
        let what = format!("{:?}", mode);
        let mut objs: Vec<_> = (0..N as u32).map(|i| cache.alloc([i; 20])).collect::<io::Result<_>>()?;
        objs.extend(cache.alloc_bulk(BULK, |i| [i as u32; 20])?);
        let info = cache.info()?;
        check(&info, (N + BULK) as u64, &what);
        assert!(info.allocs >= (N + BULK) as u64, "{}: {:?}", what, info);

        // Every other object singly, the rest in one bulk free.
        let mut rest = Vec::new();
        for (i, o) in objs.into_iter().enumerate() {
            if i % 2 == 0 {
                drop(o);
            } else {
                rest.push(o);
            }
        }
        check(&cache.info()?, rest.len() as u64, &what);
        cache.free_bulk(rest);
        let info = cache.info()?;
        check(&info, 0, &what);
        assert!(info.frees >= (N + BULK) as u64, "{}: {:?}", what, info);

        // Allocations right after frees reuse what this thread holds: the
        // fast paths (SLQB's allocations from slabs, above, are all slow
        // ones), unless slub_debug from USLAB_OPTIONS took them away.
        for i in 0..100 {
            drop(cache.alloc([i; 20])?);
        }
        let info = cache.info()?;
        check(&info, 0, &what);
        if info.flags.bits() & (Flags::DEBUG | Flags::TRACE).bits() == 0 {
            assert!(info.allocs_fast > 0 && info.frees_fast > 0, "{}: {:?}", what, info);
        }
        assert_eq!(cache.validate(), 0);
    }
    Ok(())
}

#[test]
fn the_mode_counters_are_stat_items() {
    if !has_modes() {
        return;
    }
    for name in [
        "FREE_REMOTE",
        "FLUSH_RFREE_LIST",
        "FLUSH_RFREE_LIST_OBJECTS",
        "CLAIM_REMOTE_LIST",
        "CLAIM_REMOTE_LIST_OBJECTS",
        "FLUSH_FREE_LIST",
        "FLUSH_FREE_LIST_OBJECTS",
        "SLAB_OWN",
        "SLAB_DISOWN",
    ]
    .into_iter()
    .chain(if has_slab_mode() { Some("REAP") } else { None })
    {
        let item = StatItem::by_name(name).unwrap_or_else(|| panic!("no stat item {}", name));
        assert!(!item.description().is_empty());
    }
}

/// Slab mode's tunables, with the kernel's do_tune_cpucache() rules, and
/// its objects across a change of mode both ways.
#[test]
fn slab_mode_tunables() -> io::Result<()> {
    if !has_slab_mode() {
        return Ok(());
    }
    let cache: Cache<[u64; 8]> = Cache::with_flags("slabbed", Flags::NO_MERGE)?;
    if cache.info()?.flags.bits() & Flags::DEBUG.bits() != 0 {
        return Ok(()); // slub_debug from USLAB_OPTIONS: classic only
    }
    let before: Vec<_> = (0..200).map(|i| cache.alloc([i; 8])).collect::<io::Result<_>>()?;
    cache.set_cpu_mode(CpuMode::Slab)?;
    assert_eq!(cache.cpu_mode()?, CpuMode::Slab);
    assert_eq!(cache.info()?.cpu_mode, CpuMode::Slab);

    // enable_cpucache()'s defaults: a limit by object size, half of it.
    let limit = cache.tunable("limit")?;
    assert!(limit >= 1);
    assert_eq!(cache.tunable("batchcount")?, (limit + 1) / 2);
    cache.set_tunable("limit", 100)?;
    cache.set_tunable("batchcount", 100)?;
    cache.set_tunable("limit", 40)?;
    assert_eq!(cache.tunable("batchcount")?, 20, "a limit below the batchcount lowers it");
    cache.set_tunable("batchcount", 40)?;
    assert_eq!(cache.tunable("batchcount")?, 40);
    assert!(cache.set_tunable("batchcount", 41).is_err(), "batchcount above limit");
    assert!(cache.set_tunable("batchcount", 0).is_err(), "batchcount 0");
    assert!(cache.set_tunable("limit", 0).is_err(), "limit 0");
    cache.set_tunable("sharedfactor", 0)?;
    assert_eq!(cache.tunable("sharedfactor")?, 0);

    // Slabs of the other layout keep serving their objects' frees.
    let after: Vec<_> = (0..200).map(|i| cache.alloc([i + 1000; 8])).collect::<io::Result<_>>()?;
    assert!(before.iter().chain(&after).all(|o| o[0] == o[7]));
    drop(before);
    cache.set_cpu_mode(CpuMode::Home)?;
    drop(after);
    let info = cache.info()?;
    assert_eq!(info.active_objects, 0);
    assert_eq!(info.allocs - info.frees, 0);
    assert_eq!(cache.validate(), 0);
    Ok(())
}

/// The process info in the mirrored version: KFENCE's fields agree.
#[test]
fn process_info_kfence_fields() -> io::Result<()> {
    let cache: Cache<[u8; 100]> = Cache::new("process")?;
    let held: Vec<_> = (0..100).map(|_| cache.alloc([0; 100])).collect::<io::Result<_>>()?;
    let p = uslab::process_info()?;
    assert!(p.segments >= 1 && p.mapped_bytes > 0 && p.used_bytes > 0, "{:?}", p);
    if uslab::sys::USLAB_PROCESS_INFO_VERSION >= 3 {
        // Sampling by time shows as interval u32::MAX (0 once a pool could
        // not be had) with kfence_ms set; kfence=N as N with kfence_ms 0.
        if p.kfence_interval == u32::MAX {
            assert!(p.kfence_ms > 0, "{:?}", p);
        } else if p.kfence_interval != 0 {
            assert_eq!(p.kfence_ms, 0, "{:?}", p);
        }
        // Objects in the pool need the pool mapped.
        assert!(p.kfence_in_use == 0 || p.kfence_pool_bytes > 0, "{:?}", p);
    } else {
        assert_eq!((p.kfence_ms, p.kfence_pool_bytes), (0, 0));
    }
    drop(held);
    Ok(())
}
