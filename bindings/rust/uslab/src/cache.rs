//! [`Cache<T>`]: typed object caches, and [`CacheBox`], the owning handle of
//! one object.

use std::borrow::{Borrow, BorrowMut};
use std::ffi::{CStr, CString};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io;
use std::marker::PhantomData;
use std::mem::{self, ManuallyDrop, MaybeUninit};
use std::ops::{BitOr, BitOrAssign, Deref, DerefMut};
use std::os::raw::{c_ulong, c_void};
use std::ptr::{self, NonNull};

use crate::stats::CacheInfo;
use crate::sys;

/// Flags of a cache (`USLAB_*` in uslab.h). Combine them with `|`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Flags(c_ulong);

impl Flags {
    /// No flags.
    pub const NONE: Flags = Flags(0);
    /// Align objects to the cache line (the kernel's `SLAB_HWCACHE_ALIGN`).
    pub const HWCACHE_ALIGN: Flags = Flags(sys::USLAB_HWCACHE_ALIGN);
    /// Never merge this cache with a compatible one. Without it, a cache may
    /// become an alias of an existing cache with the same object layout,
    /// sharing its slabs and statistics, as the kernel merges caches.
    pub const NO_MERGE: Flags = Flags(sys::USLAB_NO_MERGE);
    /// slub_debug F: consistency checks on every operation.
    pub const CONSISTENCY_CHECKS: Flags = Flags(sys::USLAB_CONSISTENCY_CHECKS);
    /// slub_debug Z: red zones before and after each object.
    pub const RED_ZONE: Flags = Flags(sys::USLAB_RED_ZONE);
    /// slub_debug P: poison free objects, to catch writes after free.
    pub const POISON: Flags = Flags(sys::USLAB_POISON);
    /// slub_debug U: record allocation and free call sites.
    pub const STORE_USER: Flags = Flags(sys::USLAB_STORE_USER);
    /// slub_debug T: trace every allocation and free on stderr.
    pub const TRACE: Flags = Flags(sys::USLAB_TRACE);
    /// slub_debug FZPU: all checks, no tracing.
    pub const DEBUG: Flags = Flags(
        sys::USLAB_CONSISTENCY_CHECKS | sys::USLAB_RED_ZONE | sys::USLAB_POISON | sys::USLAB_STORE_USER,
    );

    /// The C flag bits.
    pub const fn bits(self) -> c_ulong {
        self.0
    }

    /// Flags from C bits, unchecked (uslab rejects unknown bits at creation).
    pub const fn from_bits(bits: c_ulong) -> Flags {
        Flags(bits)
    }

    /// Whether every flag of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

/// The per-CPU layer of a cache: what each thread keeps of the cache
/// between calls, so that most allocations and frees touch no lock and no
/// other thread's memory. The `cpu_mode` tunable ([`Cache::set_cpu_mode`],
/// `USLAB_OPTIONS=slub_cpu_mode=NAME`); [`CacheInfo::cpu_mode`] shows the
/// mode a cache runs.
///
/// Values compare by their C number, so `CpuMode::Other(2)` equals
/// [`CpuMode::Home`]; [`CpuMode::from_raw`] never makes `Other` of a value
/// it knows.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum CpuMode {
    /// `"classic"`: SLUB's CPU slab and CPU partial lists (the 2011 design).
    Classic,
    /// `"sheaves"`: per-CPU object arrays (sheaves, tunable
    /// `sheaf_capacity`) and a barn of full and empty ones (SLUB+Q, Linux
    /// 7.0).
    Sheaves,
    /// `"home"`: each thread owns slabs and frees to them without atomics;
    /// frees of other threads' objects go to their owner in batches
    /// (tunable `freebatch`). uslab's default.
    Home,
    /// `"slqb"`: SLQB as compared in 2009: home's slabs and a LIFO object
    /// queue flushed `freebatch` objects at a time above `hiwater`.
    Slqb,
    /// `"slab"`: the kernel's SLAB: per-thread arrays of `limit` objects
    /// refilled and flushed `batchcount` at a time, a shared array of up to
    /// `sharedfactor` batches, full/partial/free slab lists, index free
    /// lists, colouring and a periodic reap. A uslab before it rejects it
    /// (`EINVAL`; see [`sys::USLAB_CPU_NR_MODES`]).
    Slab,
    /// A mode of a newer uslab that this crate does not name.
    Other(u32),
}

impl CpuMode {
    /// The mode of a `USLAB_CPU_*` value.
    pub const fn from_raw(value: u32) -> CpuMode {
        match value {
            sys::USLAB_CPU_CLASSIC => CpuMode::Classic,
            sys::USLAB_CPU_SHEAVES => CpuMode::Sheaves,
            sys::USLAB_CPU_HOME => CpuMode::Home,
            sys::USLAB_CPU_SLQB => CpuMode::Slqb,
            sys::USLAB_CPU_SLAB => CpuMode::Slab,
            other => CpuMode::Other(other),
        }
    }

    /// Its `USLAB_CPU_*` value, the `cpu_mode` tunable's.
    pub const fn to_raw(self) -> u32 {
        match self {
            CpuMode::Classic => sys::USLAB_CPU_CLASSIC,
            CpuMode::Sheaves => sys::USLAB_CPU_SHEAVES,
            CpuMode::Home => sys::USLAB_CPU_HOME,
            CpuMode::Slqb => sys::USLAB_CPU_SLQB,
            CpuMode::Slab => sys::USLAB_CPU_SLAB,
            CpuMode::Other(v) => v,
        }
    }

    /// Its name in `USLAB_OPTIONS` (`slub_cpu_mode=home`); `None` for
    /// [`CpuMode::Other`].
    pub const fn name(self) -> Option<&'static str> {
        match CpuMode::from_raw(self.to_raw()) {
            CpuMode::Classic => Some("classic"),
            CpuMode::Sheaves => Some("sheaves"),
            CpuMode::Home => Some("home"),
            CpuMode::Slqb => Some("slqb"),
            CpuMode::Slab => Some("slab"),
            CpuMode::Other(_) => None,
        }
    }

    /// The mode called `name` (`"slqb"`), if this crate knows it.
    pub fn by_name(name: &str) -> Option<CpuMode> {
        [CpuMode::Classic, CpuMode::Sheaves, CpuMode::Home, CpuMode::Slqb, CpuMode::Slab]
            .into_iter()
            .find(|m| m.name() == Some(name))
    }
}

impl PartialEq for CpuMode {
    fn eq(&self, other: &CpuMode) -> bool {
        self.to_raw() == other.to_raw()
    }
}

impl Eq for CpuMode {}

impl Hash for CpuMode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.to_raw().hash(state)
    }
}

impl fmt::Display for CpuMode {
    /// The name, or the number of a mode without one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "{}", self.to_raw()),
        }
    }
}

/// A cache of objects of type `T`: uslab's `kmem_cache`.
///
/// Objects come out as [`CacheBox<T>`] handles, which own their object and
/// give it back to the cache when dropped; they borrow the cache, so a cache
/// outlives its objects. Any thread may allocate from a cache shared by
/// reference (`&Cache<T>` is `Send`, for instance into
/// [`std::thread::scope`], or in an `Arc`), and any thread may drop an
/// object.
///
/// ```
/// use uslab::{Cache, Flags};
///
/// #[derive(Debug, PartialEq)]
/// struct Request { id: u64, path: [u8; 48] }
///
/// let requests = Cache::<Request>::with_flags("request", Flags::HWCACHE_ALIGN)?;
/// let r = requests.alloc(Request { id: 7, path: [0; 48] })?;
/// assert_eq!(r.id, 7);
/// let batch = requests.alloc_bulk(64, |i| Request { id: i as u64, path: [0; 48] })?;
/// assert_eq!(requests.info()?.active_objects, 65);
/// requests.free_bulk(batch);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct Cache<T> {
    raw: NonNull<sys::uslab_cache>,
    _marker: PhantomData<fn(T) -> T>,
}

// SAFETY: every uslab cache operation may be called from any thread, and a
// Cache holds no T: values live in CacheBoxes, whose Send/Sync follow T's.
// Destruction takes the Cache by value, so no other thread can use it then.
unsafe impl<T> Send for Cache<T> {}
// SAFETY: as above: all methods taking &self are thread-safe C calls.
unsafe impl<T> Sync for Cache<T> {}

impl<T> Cache<T> {
    /// Creates a cache for objects of type `T` named `name` (at most 63
    /// bytes; names need not be unique, they are how statistics,
    /// `uslabinfo` and `USLAB_OPTIONS` refer to caches).
    ///
    /// Errors: `InvalidInput` for a name with a NUL byte, `EINVAL` for an
    /// empty or too long name or a `T` larger than 1 MiB or aligned to more,
    /// `ENOMEM`.
    pub fn new(name: &str) -> io::Result<Cache<T>> {
        Cache::with_flags(name, Flags::NONE)
    }

    /// As [`Cache::new`], with [`Flags`].
    pub fn with_flags(name: &str, flags: Flags) -> io::Result<Cache<T>> {
        let cname = CString::new(name).map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "cache name contains a NUL byte")
        })?;
        // Zero-sized types still get a slot each: uslab has no empty objects.
        let size = mem::size_of::<T>().max(1);
        // SAFETY: a valid NUL-terminated name; no constructor (values are
        // written on allocation).
        let raw = unsafe {
            sys::uslab_cache_create(cname.as_ptr(), size, mem::align_of::<T>(), flags.bits(), None)
        };
        match NonNull::new(raw) {
            Some(raw) => Ok(Cache { raw, _marker: PhantomData }),
            None => Err(io::Error::last_os_error()),
        }
    }

    /// Moves `value` into a new object of the cache.
    ///
    /// Errors: `ENOMEM` (the value is dropped).
    pub fn alloc(&self, value: T) -> io::Result<CacheBox<'_, T>> {
        let slot = self.alloc_uninit()?;
        Ok(CacheBox::write(slot, value))
    }

    /// A new object whose contents are not initialised yet; fill it with
    /// [`CacheBox::write`].
    pub fn alloc_uninit(&self) -> io::Result<CacheBox<'_, MaybeUninit<T>>> {
        // SAFETY: self.raw is a live cache.
        let p = unsafe { sys::uslab_cache_alloc(self.raw.as_ptr()) };
        self.wrap_uninit(p)
    }

    /// A new object whose bytes are all zero (`uslab_cache_zalloc`); for
    /// types where zero bytes are a valid value, [`CacheBox::assume_init`]
    /// makes it a `CacheBox<T>`.
    pub fn alloc_zeroed(&self) -> io::Result<CacheBox<'_, MaybeUninit<T>>> {
        // SAFETY: self.raw is a live cache.
        let p = unsafe { sys::uslab_cache_zalloc(self.raw.as_ptr()) };
        self.wrap_uninit(p)
    }

    fn wrap_uninit(&self, p: *mut c_void) -> io::Result<CacheBox<'_, MaybeUninit<T>>> {
        match NonNull::new(p as *mut MaybeUninit<T>) {
            // SAFETY: a fresh object of this cache, sized and aligned for T.
            Some(ptr) => Ok(unsafe { CacheBox::from_parts(ptr, self.raw) }),
            None => Err(io::Error::last_os_error()),
        }
    }

    /// Allocates `n` objects in one call (`uslab_cache_alloc_bulk`, all or
    /// nothing) and fills object `i` with `f(i)`.
    ///
    /// If `f` panics, the values written so far are dropped and every object
    /// is given back.
    pub fn alloc_bulk<F>(&self, n: usize, mut f: F) -> io::Result<Vec<CacheBox<'_, T>>>
    where
        F: FnMut(usize) -> T,
    {
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut raw: Vec<*mut c_void> = vec![ptr::null_mut(); n];
        // SAFETY: raw holds n slots for the object pointers.
        let got = unsafe { sys::uslab_cache_alloc_bulk(self.raw.as_ptr(), n, raw.as_mut_ptr()) };
        if got != n {
            return Err(io::Error::last_os_error());
        }
        // Objects not yet filled are freed uninitialised if f panics; the
        // filled ones are already CacheBoxes in `boxes`, which drop theirs.
        struct Unfilled<'a> {
            cache: NonNull<sys::uslab_cache>,
            rest: &'a mut [*mut c_void],
        }
        impl Drop for Unfilled<'_> {
            fn drop(&mut self) {
                if !self.rest.is_empty() {
                    // SAFETY: these objects came from alloc_bulk on this
                    // cache and hold no values.
                    unsafe { sys::uslab_cache_free_bulk(self.cache.as_ptr(), self.rest.len(), self.rest.as_mut_ptr()) };
                }
            }
        }
        let mut boxes = Vec::with_capacity(n);
        let mut unfilled = Unfilled { cache: self.raw, rest: &mut raw[..] };
        for i in 0..n {
            let value = f(i);
            let p = unfilled.rest[0] as *mut T;
            // SAFETY: p is a fresh object of this cache, sized and aligned
            // for T; once written it is owned by the CacheBox.
            unsafe {
                p.write(value);
                boxes.push(CacheBox::from_parts(NonNull::new_unchecked(p), self.raw));
            }
            let rest = mem::take(&mut unfilled.rest);
            unfilled.rest = &mut rest[1..];
        }
        Ok(boxes)
    }

    /// Drops the values and frees the objects in one call
    /// (`uslab_cache_free_bulk`: one atomic operation per slab rather than
    /// per object). Objects of other caches in `objects` are freed one by
    /// one, as dropping them would.
    pub fn free_bulk<'c, I>(&'c self, objects: I)
    where
        I: IntoIterator<Item = CacheBox<'c, T>>,
    {
        // Freed even if a value's drop panics part way: the guard frees
        // what was collected.
        struct Pending {
            cache: NonNull<sys::uslab_cache>,
            ptrs: Vec<*mut c_void>,
        }
        impl Drop for Pending {
            fn drop(&mut self) {
                // SAFETY: objects of this cache whose values were dropped.
                unsafe { sys::uslab_cache_free_bulk(self.cache.as_ptr(), self.ptrs.len(), self.ptrs.as_mut_ptr()) };
            }
        }
        let iter = objects.into_iter();
        let mut pending = Pending { cache: self.raw, ptrs: Vec::with_capacity(iter.size_hint().0) };
        for b in iter {
            if b.cache != self.raw {
                drop(b);
                continue;
            }
            let b = ManuallyDrop::new(b);
            pending.ptrs.push(b.ptr.as_ptr() as *mut c_void);
            // SAFETY: the value is live; the object is freed by `pending`.
            unsafe { ptr::drop_in_place(b.ptr.as_ptr()) };
        }
    }

    /// Gives back what the cache holds but does not use: this thread's
    /// slabs of the cache, every empty slab, then the process's free pages.
    /// Returns `true` when the cache holds no slabs afterwards.
    pub fn shrink(&self) -> bool {
        // SAFETY: self.raw is a live cache.
        unsafe { sys::uslab_cache_shrink(self.raw.as_ptr()) == 0 }
    }

    /// Checks every slab of the cache (`uslab_cache_validate`); problems
    /// are reported on stderr. Returns how many were found.
    pub fn validate(&self) -> usize {
        // SAFETY: self.raw is a live cache.
        let n = unsafe { sys::uslab_cache_validate(self.raw.as_ptr()) };
        n.max(0) as usize
    }

    /// Sets a tunable by name, as `/sys/kernel/slab/<cache>/<name>`: the
    /// names of `uslab_cache_tune_set()` in uslab.h (`"min_partial"`,
    /// `"order"`, `"cpu_partial"`, ...), passed through as they are, so
    /// that tunables later uslab releases add work without a new crate.
    ///
    /// Errors: `EINVAL` for an unknown name or a value out of range.
    ///
    /// ```
    /// let c = uslab::Cache::<[u8; 100]>::new("tuned")?;
    /// c.set_tunable("min_partial", 2)?;
    /// assert_eq!(c.tunable("min_partial")?, 2);
    /// assert!(c.set_tunable("no_such_tunable", 1).is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_tunable(&self, name: &str, value: u64) -> io::Result<()> {
        let cname = tunable_name(name)?;
        // c_ulong is u64 on 64-bit Linux but u32 on 32-bit targets.
        #[allow(clippy::useless_conversion)]
        let value = c_ulong::try_from(value).map_err(|_| io::Error::from_raw_os_error(EINVAL))?;
        // SAFETY: a live cache and a NUL-terminated name.
        if unsafe { sys::uslab_cache_tune_set(self.raw.as_ptr(), cname.as_ptr(), value) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Reads a tunable by name (see [`Cache::set_tunable`]).
    pub fn tunable(&self, name: &str) -> io::Result<u64> {
        let cname = tunable_name(name)?;
        let mut value: c_ulong = 0;
        // SAFETY: a live cache, a NUL-terminated name, a place for the value.
        if unsafe { sys::uslab_cache_tune_get(self.raw.as_ptr(), cname.as_ptr(), &mut value) } == 0 {
            Ok(value as u64)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Sets the cache's per-CPU mode (the `cpu_mode` tunable). Each thread
    /// switches at its next allocation slow path, giving back what it held
    /// in the old mode.
    ///
    /// Errors: `EINVAL` for a debug cache (no per-CPU layer: classic only),
    /// a mode this uslab does not have, or a uslab before modes.
    ///
    /// ```
    /// use uslab::{Cache, CpuMode, Flags};
    ///
    /// // NO_MERGE: a merged cache's tunables are those of the cache it
    /// // shares, which other code uses too.
    /// let c = Cache::<[u8; 64]>::with_flags("queued", Flags::NO_MERGE)?;
    /// # if uslab::sys::USLAB_CACHE_INFO_VERSION < 4 { return Ok(()); } // built on a uslab before modes
    /// c.set_cpu_mode(CpuMode::Slqb)?;
    /// assert_eq!(c.cpu_mode()?, CpuMode::Slqb);
    /// assert_eq!(c.info()?.cpu_mode, CpuMode::Slqb);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_cpu_mode(&self, mode: CpuMode) -> io::Result<()> {
        self.set_tunable("cpu_mode", u64::from(mode.to_raw()))
    }

    /// The `cpu_mode` tunable. It may say [`CpuMode::Sheaves`] where the
    /// cache runs classic (`sheaf_capacity` 0), which
    /// [`CacheInfo::cpu_mode`] shows.
    pub fn cpu_mode(&self) -> io::Result<CpuMode> {
        let v = self.tunable("cpu_mode")?;
        Ok(CpuMode::from_raw(u32::try_from(v).unwrap_or(u32::MAX)))
    }

    /// A snapshot of the cache: layout, slabs, objects, event counters.
    pub fn info(&self) -> io::Result<CacheInfo> {
        CacheInfo::of(self.raw)
    }

    /// The counters of this cache's part on CPU `cpu`, as SLUB's per-CPU
    /// sysfs files: `Ok(None)` when that CPU has no part of it (no
    /// operation ran there, or the parts are threads': see
    /// [`crate::cpu_backend`]).
    pub fn cpu_stats(&self, cpu: u32) -> io::Result<Option<CpuStats>> {
        let mut events = vec![0u64; sys::USLAB_NR_STAT_ITEMS];
        let mut objects = 0u64;
        // SAFETY: self.raw is a live cache; `events` has room for n counters.
        let r = unsafe {
            sys::uslab_cache_cpu_stats(self.raw.as_ptr(), cpu, events.as_mut_ptr(), events.len(), &mut objects)
        };
        if r == 0 {
            return Ok(Some(CpuStats { cpu, objects, events }));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc_enoent()) {
            Ok(None)
        } else {
            Err(e)
        }
    }

    /// The name given at creation.
    pub fn name(&self) -> &str {
        // SAFETY: the name lives as long as the cache; it was copied from a
        // &str, so it is UTF-8.
        unsafe { CStr::from_ptr(sys::uslab_cache_name(self.raw.as_ptr())) }
            .to_str()
            .unwrap_or("")
    }

    /// The size of an object in bytes as uslab sees it (`size_of::<T>()`, at
    /// least 1).
    pub fn object_size(&self) -> usize {
        // SAFETY: self.raw is a live cache.
        unsafe { sys::uslab_cache_size(self.raw.as_ptr()) }
    }

    /// The C cache, for calls through [`crate::sys`]. It stays valid as
    /// long as `self`.
    pub fn as_ptr(&self) -> *mut sys::uslab_cache {
        self.raw.as_ptr()
    }
}

const EINVAL: i32 = 22;

fn tunable_name(name: &str) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(EINVAL))
}

impl<T> Drop for Cache<T> {
    /// Destroys the cache (`uslab_cache_destroy`). Every CacheBox borrowed
    /// it, so none is left, unless one was leaked with `mem::forget`: then
    /// uslab reports the live objects on stderr and keeps the cache.
    fn drop(&mut self) {
        // SAFETY: no other reference to the cache exists (we own it and
        // every CacheBox borrow has ended).
        unsafe { sys::uslab_cache_destroy(self.raw.as_ptr()) }
    }
}

impl<T> fmt::Debug for Cache<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("name", &self.name())
            .field("object_size", &self.object_size())
            .finish()
    }
}

/// An object of a [`Cache`]: owns a `T`, dereferences to it, and gives the
/// object back to its cache when dropped, from whichever thread.
///
/// Like [`Box`], its own operations are associated functions
/// (`CacheBox::into_inner(b)`), so that they never hide methods of `T`.
pub struct CacheBox<'c, T> {
    ptr: NonNull<T>,
    cache: NonNull<sys::uslab_cache>,
    // Owns a T (drop check), borrows the cache for 'c.
    _marker: PhantomData<(T, &'c ())>,
}

// SAFETY: a CacheBox owns its T exclusively; freeing the object from another
// thread is allowed by uslab. So it may move between threads when T may.
unsafe impl<T: Send> Send for CacheBox<'_, T> {}
// SAFETY: &CacheBox only gives &T.
unsafe impl<T: Sync> Sync for CacheBox<'_, T> {}

impl<'c, T> CacheBox<'c, T> {
    /// # Safety
    /// `ptr` is an object of `cache`, allocated and not freed, holding a
    /// valid `T`, owned by nobody else, and the cache outlives 'c.
    unsafe fn from_parts(ptr: NonNull<T>, cache: NonNull<sys::uslab_cache>) -> Self {
        CacheBox { ptr, cache, _marker: PhantomData }
    }

    /// Takes the value out and gives the object back to the cache.
    pub fn into_inner(b: Self) -> T {
        let b = ManuallyDrop::new(b);
        // SAFETY: the value is valid and read once; the object is then
        // freed without dropping the value again.
        unsafe {
            let value = ptr::read(b.ptr.as_ptr());
            sys::uslab_cache_free(b.cache.as_ptr(), b.ptr.as_ptr() as *mut c_void);
            value
        }
    }

    /// Leaks the object: the reference lives as long as the cache borrow.
    /// The value is never dropped and the object never freed; a cache
    /// dropped with leaked objects is kept by uslab (with one report line).
    pub fn leak(b: Self) -> &'c mut T {
        let b = ManuallyDrop::new(b);
        // SAFETY: the object stays allocated and exclusively ours for 'c.
        unsafe { &mut *b.ptr.as_ptr() }
    }

    /// A pointer to the value, for FFI; it stays valid while `b` lives.
    pub fn as_ptr(b: &Self) -> *const T {
        b.ptr.as_ptr()
    }

    /// Consumes the box without freeing: the raw object pointer, for
    /// [`CacheBox::from_raw`].
    pub fn into_raw(b: Self) -> NonNull<T> {
        ManuallyDrop::new(b).ptr
    }

    /// Takes back an object from [`CacheBox::into_raw`].
    ///
    /// # Safety
    ///
    /// `ptr` must come from `CacheBox::into_raw` of a box of `cache`, and
    /// must not be owned by another `CacheBox`.
    pub unsafe fn from_raw(cache: &'c Cache<T>, ptr: NonNull<T>) -> Self {
        // SAFETY: the caller's contract.
        unsafe { CacheBox::from_parts(ptr, cache.raw) }
    }
}

impl<'c, T> CacheBox<'c, MaybeUninit<T>> {
    /// Writes the value into an object from [`Cache::alloc_uninit`].
    pub fn write(b: Self, value: T) -> CacheBox<'c, T> {
        let b = ManuallyDrop::new(b);
        // SAFETY: the object is ours and sized and aligned for T; it holds
        // a valid T once written.
        unsafe {
            let p = b.ptr.as_ptr() as *mut T;
            p.write(value);
            CacheBox::from_parts(NonNull::new_unchecked(p), b.cache)
        }
    }

    /// Declares the contents initialised.
    ///
    /// # Safety
    ///
    /// The object must hold a valid `T` (for [`Cache::alloc_zeroed`]: all
    /// zero bytes must be a valid `T`).
    pub unsafe fn assume_init(b: Self) -> CacheBox<'c, T> {
        let b = ManuallyDrop::new(b);
        // SAFETY: the caller's contract; MaybeUninit<T> has T's layout.
        unsafe { CacheBox::from_parts(b.ptr.cast(), b.cache) }
    }
}

impl<T> Drop for CacheBox<'_, T> {
    fn drop(&mut self) {
        // The object goes back even if T's drop panics.
        struct Free(NonNull<sys::uslab_cache>, *mut c_void);
        impl Drop for Free {
            fn drop(&mut self) {
                // SAFETY: an object of this cache whose value has been dropped.
                unsafe { sys::uslab_cache_free(self.0.as_ptr(), self.1) }
            }
        }
        let _free = Free(self.cache, self.ptr.as_ptr() as *mut c_void);
        // SAFETY: the value is valid and dropped exactly once.
        unsafe { ptr::drop_in_place(self.ptr.as_ptr()) }
    }
}

impl<T> Deref for CacheBox<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the box owns a valid T.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> DerefMut for CacheBox<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the box owns a valid T exclusively.
        unsafe { self.ptr.as_mut() }
    }
}

impl<T> AsRef<T> for CacheBox<'_, T> {
    fn as_ref(&self) -> &T {
        self
    }
}

impl<T> AsMut<T> for CacheBox<'_, T> {
    fn as_mut(&mut self) -> &mut T {
        self
    }
}

impl<T> Borrow<T> for CacheBox<'_, T> {
    fn borrow(&self) -> &T {
        self
    }
}

impl<T> BorrowMut<T> for CacheBox<'_, T> {
    fn borrow_mut(&mut self) -> &mut T {
        self
    }
}

impl<T: fmt::Debug> fmt::Debug for CacheBox<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl<T: fmt::Display> fmt::Display for CacheBox<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&**self, f)
    }
}

impl<T: PartialEq> PartialEq for CacheBox<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: Eq> Eq for CacheBox<'_, T> {}

impl<T: Hash> Hash for CacheBox<'_, T> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (**self).hash(state)
    }
}

/// One CPU's part of a cache ([`Cache::cpu_stats`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CpuStats {
    /// The CPU.
    pub cpu: u32,
    /// Objects its sheaves hold now.
    pub objects: u64,
    events: Vec<u64>,
}

impl CpuStats {
    /// The value of one counter (`ALLOC_PCS`, `FREE_PCS`: its fast paths'
    /// pops and pushes, exact).
    pub fn event(&self, item: crate::StatItem) -> u64 {
        self.events.get(item.index()).copied().unwrap_or(0)
    }

    /// The value of the counter called `name`, if this uslab has it.
    pub fn event_by_name(&self, name: &str) -> Option<u64> {
        crate::StatItem::by_name(name).map(|i| self.event(i))
    }
}

/// ENOENT without a libc dependency (Linux: 2 on every architecture).
const fn libc_enoent() -> i32 {
    2
}
