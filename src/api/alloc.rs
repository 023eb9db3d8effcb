//! [`LargePages`]: a global-allocator wrapper that asks for transparent huge pages only for
//! large blocks (tensors, weights, arenas), not for the heap as a whole.
//!
//! mimalloc, the allocator of the `ferrite` binary and of the Python extension, would otherwise
//! advise huge pages for all of its memory. A compile is short and allocates small objects on
//! several threads; each thread's first touch of a fresh 2 MiB region then made the kernel zero
//! a whole huge page, a fifth of GPT-2's `ferrite compile` on the 2-core VM (`perf`:
//! `clear_page_erms` under mimalloc's page refill). Without huge pages at all, the large
//! buffers of a convolutional network (47 MB of weights read, folded and packed) pay 4 KiB page
//! faults instead, and its compile got 10% slower. So the binary builds mimalloc with its
//! `no_thp` feature and wraps it in [`LargePages`], which advises `MADV_HUGEPAGE` on the
//! 2 MiB-aligned region around every block of at least [`LargePages::THRESHOLD`] bytes.
//!
//! Where `madvise` does not exist (not Linux) the wrapper only forwards.

use std::alloc::{GlobalAlloc, Layout};

/// Forwards to the allocator `A`, and advises transparent huge pages for the region around every
/// block of at least [`LargePages::THRESHOLD`] bytes (Linux; elsewhere it only forwards).
///
/// ```ignore
/// #[global_allocator]
/// static ALLOCATOR: ferrite::alloc::LargePages<mimalloc::MiMalloc> =
///     ferrite::alloc::LargePages(mimalloc::MiMalloc);
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct LargePages<A>(pub A);

impl<A> LargePages<A> {
    /// Blocks this large or larger are advised. A convolutional network's weights are
    /// mostly tensors of 0.5 to 2.5 MiB.
    pub const THRESHOLD: usize = 1 << 20;
}

/// The huge-page size of x86-64 and of aarch64 with 4 KiB pages.
const HUGE_PAGE: usize = 2 << 20;

/// Advises huge pages for the 2 MiB-aligned region around `[ptr, ptr + size)`. The rounding
/// takes in the neighbours of the block, mostly other large blocks (mimalloc keeps large
/// objects apart from small ones); the advice is per mapping, so a neighbour not yet mapped
/// is simply left out by the kernel. A hint: a failure (THP disabled, an old kernel, a range
/// partly unmapped) changes nothing and is ignored.
fn advise(ptr: *mut u8, size: usize) {
    let start = (ptr as usize) & !(HUGE_PAGE - 1);
    let end = (ptr as usize)
        .saturating_add(size)
        .next_multiple_of(HUGE_PAGE);
    if end <= start {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: MADV_HUGEPAGE changes no contents and no protection of any page, only how later
    // faults of anonymous memory are served, so it is harmless on the block's neighbours too;
    // a part of the range that is not mapped makes the call fail, which is ignored.
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
    }
}

impl<A> LargePages<A> {
    /// `p`, a block of `size` bytes just handed out (or null), advised if it is large.
    fn advised(p: *mut u8, size: usize) -> *mut u8 {
        if !p.is_null() && size >= Self::THRESHOLD {
            advise(p, size);
        }
        p
    }
}

// SAFETY: every call forwards to `A` with the same arguments and returns its result; the
// only addition is `advise`, which neither reads nor writes the memory.
unsafe impl<A: GlobalAlloc> GlobalAlloc for LargePages<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `A::alloc`'s.
        Self::advised(unsafe { self.0.alloc(layout) }, layout.size())
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // A zeroed large block is usually fresh memory the allocator does not write, so the
        // advice comes in time for its first faults.
        // SAFETY: the caller's contract is `A::alloc_zeroed`'s.
        Self::advised(unsafe { self.0.alloc_zeroed(layout) }, layout.size())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `A::dealloc`'s.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `A::realloc`'s.
        Self::advised(unsafe { self.0.realloc(ptr, layout, new_size) }, new_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    /// The `VmFlags` of the mapping of `/proc/self/smaps` that holds `addr`.
    #[cfg(target_os = "linux")]
    fn vm_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = range.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= addr && addr < hi;
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Some(flags.trim().to_string());
                }
            }
        }
        None
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn large_blocks_are_advised_small_ones_are_not() {
        if !std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
            return; // a kernel without THP: nothing to advise
        }
        let a = LargePages(System);
        let large = Layout::from_size_align(8 << 20, 64).unwrap();
        let small = Layout::from_size_align(64 << 10, 64).unwrap();
        // SAFETY: non-zero sizes; each block is freed with its own layout.
        unsafe {
            let p = a.alloc(large);
            let q = a.alloc(small);
            assert!(!p.is_null() && !q.is_null());
            let inner = (p as usize).next_multiple_of(HUGE_PAGE);
            let flags = vm_flags(inner).expect("the block is mapped");
            assert!(flags.split(' ').any(|f| f == "hg"), "large block: {flags}");
            // glibc serves 64 KiB from its heap; nothing advised it.
            let flags = vm_flags(q as usize).expect("the block is mapped");
            assert!(!flags.split(' ').any(|f| f == "hg"), "small block: {flags}");
            a.dealloc(p, large);
            a.dealloc(q, small);
        }
    }

    #[test]
    fn large_blocks_round_trip_through_the_wrapper() {
        let a = LargePages(System);
        for size in [
            16,
            LargePages::<System>::THRESHOLD,
            3 * LargePages::<System>::THRESHOLD + 5,
        ] {
            let layout = Layout::from_size_align(size, 64).unwrap();
            // SAFETY: a non-zero size; the block is freed with its own layout.
            unsafe {
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert!(std::slice::from_raw_parts(p, size).iter().all(|&b| b == 0));
                p.write_bytes(7, size);
                let q = a.realloc(p, layout, 2 * size);
                assert!(!q.is_null());
                assert!(std::slice::from_raw_parts(q, size).iter().all(|&b| b == 7));
                a.dealloc(q, Layout::from_size_align(2 * size, 64).unwrap());
            }
        }
    }
}
