//! Caches shared between threads: allocation everywhere, objects freed by
//! other threads than their allocators, bulk operations under contention.

use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

use uslab::{Cache, CacheBox, CpuMode, Flags};

#[derive(Debug)]
struct Message {
    from: usize,
    seq: u64,
    body: [u8; 48],
}

const THREADS: usize = 4;
const PER_THREAD: u64 = 20_000;

#[test]
fn producers_and_consumers_free_each_others_objects() -> io::Result<()> {
    let cache: Cache<Message> = Cache::with_flags("messages", Flags::NO_MERGE)?;
    thread::scope(|s| {
        let (tx, rx) = mpsc::sync_channel::<CacheBox<'_, Message>>(256);
        let rx = Arc::new(std::sync::Mutex::new(rx));
        for from in 0..THREADS {
            let tx = tx.clone();
            let cache = &cache;
            s.spawn(move || {
                for seq in 0..PER_THREAD {
                    let m = cache.alloc(Message { from, seq, body: [from as u8; 48] }).expect("alloc");
                    tx.send(m).expect("send");
                }
            });
        }
        drop(tx);
        let mut consumers = Vec::new();
        for _ in 0..THREADS {
            let rx = Arc::clone(&rx);
            consumers.push(s.spawn(move || {
                let mut got = 0u64;
                loop {
                    let next = rx.lock().unwrap().recv();
                    match next {
                        Ok(m) => {
                            assert!(m.body.iter().all(|&b| b == m.from as u8), "{:?}", m);
                            assert!(m.seq < PER_THREAD);
                            got += 1;
                            drop(m); // freed by a thread that did not allocate it
                        }
                        Err(_) => return got,
                    }
                }
            }));
        }
        let total: u64 = consumers.into_iter().map(|c| c.join().unwrap()).sum();
        assert_eq!(total, THREADS as u64 * PER_THREAD);
    });
    let info = cache.info()?;
    assert_eq!(info.active_objects, 0, "{:?}", info);
    assert_eq!(cache.validate(), 0);
    Ok(())
}

#[test]
fn shared_cache_in_an_arc_with_bulk_operations() -> io::Result<()> {
    let cache: Arc<Cache<[u64; 8]>> = Arc::new(Cache::with_flags("bulk-shared", Flags::NO_MERGE)?);
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let cache = Arc::clone(&cache);
            thread::spawn(move || {
                for round in 0..200u64 {
                    let batch = cache.alloc_bulk(64, |i| [t as u64 * 1_000_000 + round * 64 + i as u64; 8]).unwrap();
                    for (i, obj) in batch.iter().enumerate() {
                        assert_eq!(obj[7], t as u64 * 1_000_000 + round * 64 + i as u64);
                    }
                    // single frees and bulk frees mixed
                    let mut batch = batch;
                    let tail = batch.split_off(32);
                    drop(batch);
                    cache.free_bulk(tail);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(cache.info()?.active_objects, 0);
    Ok(())
}

#[test]
fn objects_outlive_their_allocating_thread() -> io::Result<()> {
    let cache: Cache<u128> = Cache::with_flags("orphans", Flags::NO_MERGE)?;
    let objs: Vec<CacheBox<'_, u128>> = thread::scope(|s| {
        s.spawn(|| (0..5000u128).map(|i| cache.alloc(i).unwrap()).collect())
            .join()
            .unwrap()
    });
    // The allocating thread has exited; its slabs went back to the cache.
    assert_eq!(cache.info()?.active_objects, 5000);
    assert!(objs.iter().enumerate().all(|(i, o)| **o == i as u128));
    drop(objs);
    assert_eq!(cache.info()?.active_objects, 0);
    assert_eq!(cache.validate(), 0);
    Ok(())
}

/// Home mode: objects freed by a thread that does not own their slabs go
/// back in batches; the totals still count every free at once.
#[test]
fn home_mode_sends_remote_frees_home() -> io::Result<()> {
    if uslab::sys::USLAB_CACHE_INFO_VERSION < 4 {
        return Ok(()); // a uslab before per-CPU modes
    }
    const N: u64 = 5000;
    let cache: Cache<[u64; 4]> = Cache::with_flags("remote-frees", Flags::NO_MERGE)?;
    cache.set_cpu_mode(CpuMode::Home)?;
    let objs: Vec<CacheBox<'_, [u64; 4]>> = (0..N).map(|i| cache.alloc([i; 4])).collect::<io::Result<_>>()?;
    let info = cache.info()?;
    assert_eq!(info.cpu_mode, CpuMode::Home);
    assert!(info.owned_slabs >= 1, "{:?}", info);
    thread::scope(|s| {
        s.spawn(move || drop(objs));
    });
    let info = cache.info()?;
    assert_eq!(info.active_objects, 0, "{:?}", info);
    assert_eq!(info.allocs - info.frees, 0);
    assert!(info.allocs >= N && info.frees >= N, "{:?}", info);
    let remote = info.event_by_name("FREE_REMOTE").unwrap_or(0);
    assert!(remote > 0, "frees by another thread than the owner: {:?}", info);
    // This thread takes its inbox at its slow paths: allocate through them.
    let again: Vec<_> = (0..N).map(|i| cache.alloc([i; 4])).collect::<io::Result<_>>()?;
    assert_eq!(cache.info()?.active_objects, N);
    drop(again);
    assert_eq!(cache.validate(), 0);
    Ok(())
}
