// SPDX-License-Identifier: GPL-2.0
//! Page-aligned host memory for `validate --memory host`: an anonymous
//! private mapping, unmapped on drop.

use std::io;

/// `len` bytes of zeroed, page-aligned host memory.
pub struct HostBuffer {
    ptr: *mut u8,
    len: usize,
}

impl HostBuffer {
    pub fn new(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: an anonymous private mapping at an address of the
        // kernel's choice touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { ptr: p.cast(), len })
    }

    pub fn ptr(&self) -> u64 {
        self.ptr as u64
    }

    /// The bytes. The NIC writes them behind the compiler's back: read
    /// them only after the RDMA operation's completion was polled.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` maps `len` readable bytes until drop.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub fn fill(&self, byte: u8) {
        // SAFETY: `ptr` maps `len` writable bytes until drop; the mapping
        // is raw memory reached only through this pointer (no Rust value
        // lives in it), and no `bytes()` slice is held across this call.
        unsafe { std::ptr::write_bytes(self.ptr, byte, self.len) };
    }

    /// Copies `data` in at `offset` (clamped to the buffer).
    pub fn write(&self, offset: usize, data: &[u8]) {
        let n = data.len().min(self.len.saturating_sub(offset));
        // SAFETY: as in `fill`; `offset + n <= len`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), n) };
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::HostBuffer;

    #[test]
    fn page_aligned_and_filled() {
        let b = HostBuffer::new(10_000).expect("mmap");
        assert_eq!(b.ptr() % 4096, 0);
        assert!(b.bytes().iter().all(|&x| x == 0));
        b.fill(0xa5);
        assert!(b.bytes().iter().all(|&x| x == 0xa5));
        b.write(9_998, &[1, 2, 3]);
        assert_eq!(&b.bytes()[9_997..], &[0xa5, 1, 2]);
        assert!(HostBuffer::new(0).is_err());
    }
}
