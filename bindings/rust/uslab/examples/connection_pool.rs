//! A connection table on a typed object cache: connections come and go,
//! each one an object of the `conn` cache that goes back when its handle
//! is dropped; a second cache holds the requests. At the end the program
//! prints the caches' statistics.
//!
//!     cargo run --example connection_pool
//!     USLAB_OPTIONS=show_stats cargo run --example connection_pool

use std::collections::HashMap;
use std::io;

use uslab::{Cache, CacheBox, Flags};

struct Conn {
    id: u64,
    peer: [u8; 4],
    served: u64,
    buffer: [u8; 256],
}

struct Request {
    conn: u64,
    len: usize,
}

fn main() -> io::Result<()> {
    let conns: Cache<Conn> = Cache::with_flags("conn", Flags::HWCACHE_ALIGN)?;
    let requests: Cache<Request> = Cache::new("request")?;
    let mut open: HashMap<u64, CacheBox<'_, Conn>> = HashMap::new();
    let mut next_id = 0u64;
    let mut answered = 0u64;

    for tick in 0..20_000u64 {
        // A new connection now and then ...
        if tick % 3 == 0 {
            let conn = conns.alloc(Conn {
                id: next_id,
                peer: [127, 0, 0, (next_id % 250) as u8 + 1],
                served: 0,
                buffer: [0; 256],
            })?;
            open.insert(next_id, conn);
            next_id += 1;
        }
        // ... requests on the open ones, batched ...
        let batch = requests.alloc_bulk(open.len().min(16), |i| Request {
            conn: (tick + i as u64) % next_id.max(1),
            len: 1 + i * 7,
        })?;
        for r in &batch {
            if let Some(c) = open.get_mut(&r.conn) {
                let fill = c.peer[3];
                c.buffer[..r.len].fill(fill);
                c.served += 1;
                answered += 1;
            }
        }
        requests.free_bulk(batch);
        // ... and connections closing: dropping the handle frees the object.
        if tick % 5 == 0 {
            let oldest = open.keys().min().copied();
            if let Some(id) = oldest {
                let conn = open.remove(&id).expect("open connection");
                assert_eq!(conn.id, id);
            }
        }
    }

    let info = conns.info()?;
    println!(
        "{} connections opened, {} still open, {} requests answered",
        next_id,
        open.len(),
        answered
    );
    println!(
        "conn cache: {} objects in use of {} in {} slabs ({}-byte objects, {}-byte slots)",
        info.active_objects, info.total_objects, info.slabs, info.object_size, info.slab_object_size
    );
    for e in info.events().filter(|e| e.count > 0) {
        println!("  {:<24} {:>8}  {}", e.item.name(), e.count, e.item.description());
    }
    assert_eq!(info.active_objects, open.len() as u64);
    drop(open);
    assert_eq!(conns.info()?.active_objects, 0);
    Ok(())
}
