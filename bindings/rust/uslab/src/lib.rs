//! Rust bindings to **uslab**, a user-space slab allocator after Linux SLUB.
//!
//! uslab gives a program the kernel's object caches: a cache hands out
//! objects of one type from slabs (runs of pages cut into equal objects), with
//! lock-free per-thread fast paths, per-CPU and node partial lists, the
//! kernel's event counters and `slub_debug`. Its malloc family, on size-class
//! caches, can serve as Rust's global allocator. The C library is compiled
//! from source by the [`uslab-sys`](uslab_sys) crate and linked statically:
//! nothing needs to be installed.
//!
//! Three ways to use it:
//!
//! * [`UslabAlloc`]: a [`GlobalAlloc`](std::alloc::GlobalAlloc), so that every
//!   `Box`, `Vec` and `String` of the program is uslab's:
//!
//!   ```
//!   use uslab::UslabAlloc;
//!
//!   #[global_allocator]
//!   static GLOBAL: UslabAlloc = UslabAlloc;
//!
//!   let v: Vec<u64> = (0..1000).collect();
//!   assert_eq!(v.iter().sum::<u64>(), 499_500);
//!   ```
//!
//! * [`Cache<T>`]: a typed object cache whose [`CacheBox`] handles free their
//!   object when dropped, with bulk allocation and freeing, tunables and
//!   statistics:
//!
//!   ```
//!   use uslab::Cache;
//!
//!   struct Conn { fd: i32, served: u64 }
//!
//!   let conns: Cache<Conn> = Cache::new("conn")?;
//!   let mut c = conns.alloc(Conn { fd: 3, served: 0 })?;
//!   c.served += 1;
//!   assert_eq!(conns.info()?.active_objects, 1);
//!   drop(c); // back to the cache
//!   assert_eq!(conns.info()?.active_objects, 0);
//!   # Ok::<(), std::io::Error>(())
//!   ```
//!
//! * Statistics of the whole process: [`process_info`], [`malloc_info`],
//!   [`stats_string`] (the kernel's slabinfo table, `/proc/slabinfo` text or
//!   JSON).
//!
//! Process-wide options (debugging, slab orders, statistics at exit) come
//! from the `USLAB_OPTIONS` environment variable, read once at start; see
//! uslab-options(7). For example `USLAB_OPTIONS=show_stats cargo run`
//! prints the table when the program exits.
//!
//! uslab runs on Linux. Errors are [`std::io::Error`]s carrying the C
//! library's `errno` (`ENOMEM`, `EINVAL`).
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn)]

mod alloc;
mod cache;
mod stats;

pub use crate::alloc::UslabAlloc;
pub use crate::cache::{Cache, CacheBox, CpuMode, CpuStats, Flags};
pub use crate::stats::{
    export_path, export_refresh, malloc_info, process_info, stats_string, CacheInfo, Event,
    MallocInfo, ProcessInfo, StatItem, StatsForm,
};

/// The raw bindings this crate is built on.
pub use uslab_sys as sys;

/// A uslab version: `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Incompatible releases change it.
    pub major: u32,
    /// Compatible releases with new features.
    pub minor: u32,
    /// Fixes.
    pub patch: u32,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The version of the uslab C library linked into this program.
///
/// ```
/// assert_eq!(uslab::version().major, 0);
/// ```
pub fn version() -> Version {
    // SAFETY: uslab_version has no preconditions.
    let v = unsafe { sys::uslab_version() }.max(0) as u32;
    Version {
        major: v / 10000,
        minor: v / 100 % 100,
        patch: v % 100,
    }
}

/// Where the CPU parts run, for the whole process: `"rseq"` (caches in
/// sheaves mode keep one part per CPU, run by restartable sequences) or
/// `"thread"` (every part is a thread's). `USLAB_OPTIONS=cpu_backend=tls`
/// forces the second.
///
/// ```
/// assert!(["rseq", "thread"].contains(&uslab::cpu_backend()));
/// ```
pub fn cpu_backend() -> &'static str {
    // SAFETY: a static NUL-terminated string.
    unsafe { std::ffi::CStr::from_ptr(sys::uslab_cpu_backend()) }
        .to_str()
        .unwrap_or("thread")
}
