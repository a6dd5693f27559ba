//! Page-aligned, lazily zeroed f64 buffers for kernels and STREAM.
//!
//! Large `Vec<f64>` allocations come from malloc's mmap path at a page boundary plus a 16-byte
//! header, so arrays start mid cache line and measured bandwidth depends on that offset (about
//! 5% on triad here). Spatter and STREAM use aligned arrays; so do we. The memory comes straight
//! from an anonymous `mmap`: page-aligned, zero-filled by the kernel on first touch (so the
//! threads that first write a page decide where it lives, which matters on NUMA machines), and
//! an allocation failure is an error instead of an abort.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// An owned, page-aligned slice of f64 backed by an anonymous mapping.
pub struct Buffer {
    ptr: NonNull<f64>,
    len: usize,
    map_bytes: usize,
}

// SAFETY: Buffer owns its mapping exclusively, like Vec<f64>; f64 is Send and Sync.
unsafe impl Send for Buffer {}
// SAFETY: shared access only hands out &[f64].
unsafe impl Sync for Buffer {}

#[derive(Debug, thiserror::Error)]
#[error("cannot allocate {bytes} bytes: {cause}")]
pub struct AllocError {
    pub bytes: usize,
    pub cause: std::io::Error,
}

impl Buffer {
    /// `len` zeroed elements; pages are only backed when first touched.
    pub fn zeroed(len: usize) -> Result<Buffer, AllocError> {
        let bytes = len
            .checked_mul(std::mem::size_of::<f64>())
            .filter(|&b| b <= isize::MAX as usize)
            .ok_or_else(|| AllocError {
                bytes: usize::MAX,
                cause: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
            })?;
        if bytes == 0 {
            return Ok(Buffer {
                ptr: NonNull::dangling(),
                len: 0,
                map_bytes: 0,
            });
        }
        // SAFETY: an anonymous private mapping with no address hint touches no existing memory;
        // the result is checked against MAP_FAILED before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(AllocError {
                bytes,
                cause: std::io::Error::last_os_error(),
            });
        }
        let ptr = NonNull::new(p.cast::<f64>()).ok_or_else(|| AllocError {
            bytes,
            cause: std::io::Error::from(std::io::ErrorKind::OutOfMemory),
        })?;
        Ok(Buffer {
            ptr,
            len,
            map_bytes: bytes,
        })
    }
}

impl Deref for Buffer {
    type Target = [f64];
    fn deref(&self) -> &[f64] {
        // SAFETY: ptr is valid for len elements (a live mapping, zero-initialised by the kernel,
        // or dangling with len 0), properly aligned (page-aligned), and owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for Buffer {
    fn deref_mut(&mut self) -> &mut [f64] {
        // SAFETY: as in deref; &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.map_bytes > 0 {
            // SAFETY: ptr/map_bytes describe the mapping created in zeroed(), unmapped once.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.map_bytes) };
        }
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer").field("len", &self.len).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_writable() {
        let mut b = Buffer::zeroed(10_000).unwrap();
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.iter().all(|&x| x == 0.0));
        b[9_999] = 1.5;
        assert_eq!(b[9_999], 1.5);
        assert_eq!(b.len(), 10_000);
    }

    #[test]
    fn empty_and_impossible_sizes() {
        assert_eq!(Buffer::zeroed(0).unwrap().len(), 0);
        assert!(Buffer::zeroed(usize::MAX / 4).is_err());
    }
}
