//! `#[global_allocator] static GLOBAL: UslabAlloc`: every allocation of
//! this test program is uslab's. Checks alignment for every layout class,
//! realloc semantics, zeroing, threads, and that the blocks really are
//! uslab's (uslab_malloc_usable_size aborts on any other pointer).

use std::alloc::{GlobalAlloc, Layout};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard};
use std::thread;

use uslab::UslabAlloc;

#[global_allocator]
static GLOBAL: UslabAlloc = UslabAlloc;

/// The test harness runs tests on parallel threads; the byte counts
/// std_collections_run_on_uslab compares are process-wide, so the tests
/// of this file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn std_collections_run_on_uslab() {
    let _turn = serial();
    let before = uslab::malloc_info().unwrap().in_use_bytes;
    let mut map: HashMap<u64, String> = HashMap::new();
    for i in 0..50_000u64 {
        map.insert(i, format!("value {}", i));
    }
    let tree: BTreeMap<u64, Vec<u8>> = (0..10_000u64).map(|i| (i, vec![i as u8; (i % 300) as usize])).collect();
    let during = uslab::malloc_info().unwrap().in_use_bytes;
    assert!(during > before + 1_000_000, "uslab serves the program: {} -> {}", before, during);
    assert_eq!(map[&4242], "value 4242");
    assert_eq!(tree[&299].len(), 299);

    // A Box's block is a live uslab block (this would abort otherwise).
    let b = Box::new([7u8; 100]);
    // SAFETY: the Box's block came from the global allocator, UslabAlloc.
    assert!(unsafe { UslabAlloc::usable_size(b.as_ptr()) } >= 100);
    drop((map, tree, b));
    assert!(uslab::malloc_info().unwrap().in_use_bytes < during);
}

#[test]
fn every_alignment_is_honoured() {
    let _turn = serial();
    let sizes = [1usize, 7, 8, 15, 16, 24, 40, 100, 128, 129, 1000, 4096, 5000, 40_000, 300_000, 3 << 20];
    for shift in 0..=21 {
        let align = 1usize << shift;
        for &size in &sizes {
            let layout = Layout::from_size_align(size, align).unwrap();
            // SAFETY: size > 0; the block is written within its size, then freed
            // with its layout.
            unsafe {
                let p = GLOBAL.alloc(layout);
                assert!(!p.is_null(), "{:?}", layout);
                assert_eq!(p as usize % align, 0, "{:?} gave {:p}", layout, p);
                p.write_bytes(0xa5, size);
                let z = GLOBAL.alloc_zeroed(layout);
                assert_eq!(z as usize % align, 0, "zeroed {:?}", layout);
                assert!(std::slice::from_raw_parts(z, size).iter().all(|&b| b == 0));
                GLOBAL.dealloc(z, layout);
                GLOBAL.dealloc(p, layout);
            }
        }
    }
}

#[test]
fn realloc_keeps_contents_and_alignment() {
    let _turn = serial();
    for &align in &[1usize, 8, 16, 32, 64, 4096] {
        let mut size = 3usize;
        let layout = Layout::from_size_align(size, align).unwrap();
        // SAFETY: the block is only accessed within its current size, and
        // reallocated and freed with the layout it has.
        unsafe {
            let mut p = GLOBAL.alloc(layout);
            for i in 0..size {
                *p.add(i) = i as u8;
            }
            let mut cur = layout;
            for &next in &[17usize, 100, 33, 5000, 70_000, 1 << 22, 64, 9] {
                let q = GLOBAL.realloc(p, cur, next);
                assert!(!q.is_null());
                assert_eq!(q as usize % align, 0, "realloc to {} at align {}", next, align);
                let keep = size.min(next);
                for i in 0..keep {
                    assert_eq!(*q.add(i), i as u8, "byte {} after realloc {} -> {}", i, size, next);
                }
                for i in keep..next {
                    *q.add(i) = i as u8;
                }
                p = q;
                size = next;
                cur = Layout::from_size_align(size, align).unwrap();
            }
            GLOBAL.dealloc(p, cur);
        }
    }
    // Vec growth goes through realloc.
    let mut v: Vec<u32> = Vec::new();
    for i in 0..1_000_000 {
        v.push(i);
    }
    assert_eq!(v.iter().map(|&x| x as u64).sum::<u64>(), 499_999_500_000);
}

#[test]
fn threads_allocate_and_free_across() {
    let _turn = serial();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            thread::spawn(move || {
                let mut keep = Vec::new();
                for i in 0..100_000usize {
                    let s = vec![t as u8; 1 + i % 512];
                    if i % 3 == 0 {
                        keep.push(s);
                    }
                }
                keep
            })
        })
        .collect();
    // Blocks allocated by the threads are freed here, after they exited.
    let mut kept: Vec<Vec<Vec<u8>>> = Vec::new();
    for h in handles {
        kept.push(h.join().unwrap());
    }
    for (t, blocks) in kept.iter().enumerate() {
        assert!(blocks.iter().all(|b| b.iter().all(|&x| x == t as u8)));
    }
    drop(kept);
    GLOBAL.trim();
}
