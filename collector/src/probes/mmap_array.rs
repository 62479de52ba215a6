//! A `BPF_F_MMAPABLE` array mapped into the collector once, at load: the
//! probes' slot tables (`BLOCK_RQ_SLOTS`, `CUDA_LAUNCH_SLOTS`) are read as
//! memory, not with a lookup system call per slot.
use std::{
    marker::PhantomData,
    os::fd::{AsRawFd, BorrowedFd},
};

/// `len` values of `T` shared with the kernel. The programs write them
/// concurrently, so every access is a volatile copy of one value: a value
/// being rewritten while it is read can be torn between its old and new
/// contents (the readers say what that means for them).
pub struct MmapArray<T> {
    ptr: *mut T,
    len: usize,
    _t: PhantomData<T>,
}

// SAFETY: the mapping is plain shared memory owned by this value; every
// access is a volatile copy, no reference into it escapes.
unsafe impl<T: Send> Send for MmapArray<T> {}
// SAFETY: as above.
unsafe impl<T: Sync> Sync for MmapArray<T> {}

impl<T: aya::Pod> MmapArray<T> {
    /// Maps the value area of the array map `fd` (`len` values of `T`),
    /// readable and, when `writable`, writable.
    pub fn map(fd: BorrowedFd<'_>, len: usize, writable: bool) -> std::io::Result<Self> {
        let bytes = len * std::mem::size_of::<T>();
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // SAFETY: a fresh shared mapping of `bytes` bytes of the map's value
        // area (what the kernel allows for an mmapable array of `len`
        // values of this size), checked for failure, unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                prot,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self {
            ptr: p.cast(),
            len,
            _t: PhantomData,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// A copy of value `i` (`None` beyond the end).
    pub fn get(&self, i: usize) -> Option<T> {
        // SAFETY: `i < len`, inside the mapping; `T` is Pod, so any bytes
        // the kernel left there are a valid `T`.
        (i < self.len).then(|| unsafe { std::ptr::read_volatile(self.ptr.add(i)) })
    }

    /// A raw pointer to value `i`, for writing one field of it in a chosen
    /// order (`None` beyond the end).
    pub fn ptr(&self, i: usize) -> Option<*mut T> {
        // SAFETY: `i < len`: inside the mapping.
        (i < self.len).then(|| unsafe { self.ptr.add(i) })
    }
}

impl<T> Drop for MmapArray<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, with its length; no reference
        // into it remains.
        unsafe { libc::munmap(self.ptr.cast(), self.len * std::mem::size_of::<T>()) };
    }
}
