//! Cache<T> and CacheBox: values, drops, bulk operations, tunables,
//! statistics, odd types, errors.

use std::cell::Cell;
use std::io;
use std::mem::MaybeUninit;
use std::rc::Rc;

use uslab::{Cache, CacheBox, Flags, StatItem};

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
    for name in ["min_partial", "order", "cpu_partial", "cpu_queue", "sheaf_capacity", "barn_full", "barn_empty"] {
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
