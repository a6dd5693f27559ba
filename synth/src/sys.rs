//! The operating-system and CPU hints of the analyses (kept here with their unsafe calls).

/// Asks the kernel to back `buf` with transparent huge pages where it can (advice only:
/// errors are ignored, and the contents are unchanged). Large tables indexed at random
/// (affinity's pair rows) otherwise take a TLB miss per access.
pub fn advise_huge_pages<T>(buf: &mut [T]) {
    const HUGE: usize = 2 << 20;
    let start = buf.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(buf);
    let (lo, hi) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if hi > lo {
        // SAFETY: [lo, hi) lies within `buf`'s allocation; MADV_HUGEPAGE changes how the
        // kernel backs those pages, never their contents or their mapping's validity.
        unsafe {
            libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE);
        }
    }
}

/// Asks the CPU to start loading the cache line of `x` (a hint: no fault, no wait).
#[inline(always)]
pub fn prefetch<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: SSE is part of the x86-64 baseline, and a prefetch of any address is only a
        // hint to the caches (it never faults and changes no memory).
        unsafe { _mm_prefetch::<_MM_HINT_T0>((x as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}
