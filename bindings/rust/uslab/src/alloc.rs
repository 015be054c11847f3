//! [`UslabAlloc`]: uslab's malloc family as Rust's global allocator.

use std::alloc::{GlobalAlloc, Layout};
use std::os::raw::c_void;
use std::ptr;

use crate::sys;

/// uslab's malloc family as a [`GlobalAlloc`]:
///
/// ```
/// #[global_allocator]
/// static GLOBAL: uslab::UslabAlloc = uslab::UslabAlloc;
/// # fn main() { let _ = Box::new(1); }
/// ```
///
/// Sizes up to 32 KiB come from uslab's kmalloc caches (`kmalloc-8` ..
/// `kmalloc-32768`, visible in the statistics), larger ones from whole pages
/// and, above 2 MiB, from mappings of their own. Alignment is honoured for
/// every layout: blocks from `uslab_malloc` are aligned to 16 bytes, or to 8
/// for sizes up to 128 that are not multiples of 16, so larger or finer
/// alignments go through `uslab_aligned_alloc`. `realloc` keeps the block
/// when the new size fits, as `uslab_realloc` does.
///
/// The C library's `malloc` stays glibc's: only Rust's allocations move to
/// uslab. (To move C's too, run the program under `uslab-run` or link
/// `libuslab-malloc` instead.)
#[derive(Clone, Copy, Debug, Default)]
pub struct UslabAlloc;

/// Whether a block from `uslab_malloc(layout.size())` is aligned enough.
#[inline]
fn malloc_aligns(layout: Layout) -> bool {
    layout.align() <= 8 || (layout.align() <= 16 && layout.size() % 16 == 0)
}

impl UslabAlloc {
    /// The usable size of a block this allocator returned (at least the
    /// size asked for). uslab aborts the process, with one `uslab: fatal:`
    /// line, if `ptr` is not the start of a live block of its malloc family.
    ///
    /// # Safety
    ///
    /// `ptr` must have come from [`UslabAlloc`] (or `uslab_malloc` and
    /// friends) and not have been freed.
    pub unsafe fn usable_size(ptr: *const u8) -> usize {
        // SAFETY: the caller passes a live block of the malloc family.
        unsafe { sys::uslab_malloc_usable_size(ptr as *mut c_void) }
    }

    /// Gives every free page and cached mapping of the malloc family back
    /// to the OS (`malloc_trim`). Returns whether any memory was given back.
    pub fn trim(&self) -> bool {
        // SAFETY: uslab_malloc_trim may be called at any time.
        unsafe { sys::uslab_malloc_trim(0) != 0 }
    }
}

// SAFETY: every method hands back memory from uslab's malloc family, which is
// thread-safe, aligned as the layout asks (malloc_aligns, else
// uslab_aligned_alloc), and not aliased; dealloc and realloc only receive
// blocks this allocator returned.
unsafe impl GlobalAlloc for UslabAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: plain C calls; NULL is returned to the caller as failure.
        unsafe {
            if malloc_aligns(layout) {
                sys::uslab_malloc(layout.size()) as *mut u8
            } else {
                sys::uslab_aligned_alloc(layout.align(), layout.size()) as *mut u8
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if malloc_aligns(layout) {
            // SAFETY: calloc(1, size) returns zeroed memory or NULL.
            unsafe { sys::uslab_calloc(1, layout.size()) as *mut u8 }
        } else {
            // SAFETY: `alloc` returns a block of layout.size() bytes or NULL.
            let p = unsafe { self.alloc(layout) };
            if !p.is_null() {
                // SAFETY: p points to layout.size() writable bytes.
                unsafe { ptr::write_bytes(p, 0, layout.size()) };
            }
            p
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: ptr came from this allocator (GlobalAlloc's contract).
        unsafe { sys::uslab_free(ptr as *mut c_void) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: GlobalAlloc's contract: new_size > 0 and, rounded up to
        // layout.align(), does not overflow isize, so the layout is valid.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if malloc_aligns(new_layout) {
            // uslab_realloc's block (kept, or a new one of new_size bytes)
            // is aligned as malloc_aligns says; on failure it returns NULL
            // and leaves ptr alone, as GlobalAlloc wants.
            // SAFETY: ptr came from this allocator; new_size > 0, so this
            // is never realloc's free-on-zero case.
            return unsafe { sys::uslab_realloc(ptr as *mut c_void, new_size) as *mut u8 };
        }
        // Over-aligned: a new aligned block, unless the old one still fits.
        // SAFETY: ptr is a live block of this allocator.
        if new_size <= unsafe { Self::usable_size(ptr) } {
            return ptr;
        }
        // SAFETY: new_layout is valid (above).
        let new_ptr = unsafe { self.alloc(new_layout) };
        if !new_ptr.is_null() {
            // SAFETY: both blocks hold at least min(old, new) bytes and are
            // distinct live blocks.
            unsafe {
                ptr::copy_nonoverlapping(ptr, new_ptr, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new_ptr
    }
}
