//! A global allocator for the binaries that train: large freed blocks kept for reuse.
//!
//! Why: a training step allocates and frees the same large tensors every step (activations,
//! their gradients, the logits, the products' outputs). glibc hands blocks above its mmap
//! threshold (at most 32 MiB) back to the kernel when they are freed, and trims the tops of its
//! heaps, so every step maps that memory afresh: one page fault and one zeroed page per 4 KiB.
//! On a 2,048-token step of SmolLM2-135M on 2 cores that was about 2 million faults a pass and
//! a tenth of the CPU time in the kernel (BENCHMARKS.md, *Page faults and spinning threads*).
//! PyTorch's CPU allocator has the same cost; a block reused is a fault and a zeroing saved.
//!
//! Execution model: [`ReuseLarge`] wraps the system allocator and passes everything through
//! until [`enable_reuse`] is called (a trainer calls it; a binary that never trains keeps the
//! system allocator's behaviour, memory returned as soon as it is freed). After that, a freed
//! block of at least [`MIN_BLOCK`] bytes is kept, up to the cap given, and handed out again to
//! an allocation of the same size class and alignment (sizes are rounded up to an eighth of
//! their power of two, so a block is at most 12.5% larger than asked); the oldest kept block is
//! freed first when the cap or the slots run out. A zeroed allocation served from the cache is
//! zeroed in place. One mutex guards the cache and only allocations of [`MIN_BLOCK`] or more
//! take it (a few thousand a training step). [`release`] frees every kept block and turns reuse
//! off. The cache holds no memory of its own (a fixed array of slots), so the allocator never
//! calls itself.
//!
//! A binary opts in with one line:
//!
//! ```ignore
//! #[global_allocator]
//! static ALLOC: dojo_kernels::alloc::ReuseLarge = dojo_kernels::alloc::ReuseLarge;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Blocks smaller than this go straight to the system allocator (glibc's heaps already reuse
/// them).
pub const MIN_BLOCK: usize = 1 << 20;

/// Kept blocks at most (the cache's fixed array).
const SLOTS: usize = 64;

static ENABLED: AtomicBool = AtomicBool::new(false);
static CACHE: Mutex<Cache> = Mutex::new(Cache {
    blocks: [Block::EMPTY; SLOTS],
    len: 0,
    bytes: 0,
    cap: 0,
});

/// The system allocator, keeping large freed blocks for reuse once [`enable_reuse`] is called.
pub struct ReuseLarge;

#[derive(Clone, Copy)]
struct Block {
    ptr: usize,
    size: usize,
    align: usize,
}

impl Block {
    const EMPTY: Block = Block {
        ptr: 0,
        size: 0,
        align: 0,
    };

    /// Returns a block taken out of the cache to the system allocator.
    ///
    /// # Safety
    /// The block must have been kept by the cache (allocated by `System` with exactly this
    /// size and alignment: `large_layout` of its request) and be owned by the caller alone.
    unsafe fn free(self) {
        // SAFETY: the caller's guarantee: `size` and `align` form the layout `System`
        // allocated the block with.
        unsafe {
            System.dealloc(
                self.ptr as *mut u8,
                Layout::from_size_align_unchecked(self.size, self.align),
            )
        };
    }
}

/// Kept blocks, oldest first.
struct Cache {
    blocks: [Block; SLOTS],
    len: usize,
    bytes: usize,
    cap: usize,
}

impl Cache {
    /// Takes a kept block of exactly this size class and alignment, newest first (the one most
    /// likely still in cache and TLB).
    fn take(&mut self, size: usize, align: usize) -> Option<usize> {
        let i = (0..self.len)
            .rev()
            .find(|&i| self.blocks[i].size == size && self.blocks[i].align == align)?;
        let b = self.blocks[i];
        self.blocks.copy_within(i + 1..self.len, i);
        self.len -= 1;
        self.bytes -= b.size;
        Some(b.ptr)
    }

    /// The oldest kept block, removed.
    fn pop_oldest(&mut self) -> Option<Block> {
        if self.len == 0 {
            return None;
        }
        let b = self.blocks[0];
        self.blocks.copy_within(1..self.len, 0);
        self.len -= 1;
        self.bytes -= b.size;
        Some(b)
    }
}

/// The size class of a large allocation: rounded up to an eighth of its power of two.
fn class(size: usize) -> usize {
    let granule = 1usize << (usize::BITS - 1 - size.leading_zeros()).saturating_sub(3);
    size.div_ceil(granule) * granule
}

/// The layout a large block is really allocated with: its size class.
fn large_layout(layout: Layout) -> Option<Layout> {
    if layout.size() < MIN_BLOCK {
        return None;
    }
    Layout::from_size_align(class(layout.size()), layout.align()).ok()
}

/// Keeps freed blocks of [`MIN_BLOCK`] bytes or more, up to `cap` bytes in all, for reuse by
/// later allocations of the same size class (for binaries whose global allocator is
/// [`ReuseLarge`]; a no-op otherwise). Calling it again changes the cap (kept blocks over a
/// lower cap are freed, oldest first).
pub fn enable_reuse(cap: usize) {
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    c.cap = cap;
    ENABLED.store(true, Ordering::Release);
    while c.bytes > cap {
        let Some(b) = c.pop_oldest() else { break };
        // SAFETY: popped from the cache, so kept by it and now owned here alone.
        unsafe { b.free() };
    }
}

/// Frees every kept block and stops keeping new ones.
pub fn release() {
    ENABLED.store(false, Ordering::Release);
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    while let Some(b) = c.pop_oldest() {
        // SAFETY: popped from the cache, so kept by it and now owned here alone.
        unsafe { b.free() };
    }
}

/// Bytes the cache holds now.
pub fn cached_bytes() -> usize {
    CACHE.lock().unwrap_or_else(|e| e.into_inner()).bytes
}

impl ReuseLarge {
    /// A kept block for this layout, if reuse is on and one fits.
    fn reuse(&self, large: Layout) -> Option<*mut u8> {
        if !ENABLED.load(Ordering::Acquire) {
            return None;
        }
        let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        c.take(large.size(), large.align()).map(|p| p as *mut u8)
    }
}

// SAFETY: every block is allocated and freed by `System` with one layout: the request's
// `large_layout` for blocks of `MIN_BLOCK` or more (at least as large as asked, same
// alignment), the request itself otherwise. A kept block is owned by the cache until `take`
// hands it to exactly one caller.
unsafe impl GlobalAlloc for ReuseLarge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match large_layout(layout) {
            Some(large) => match self.reuse(large) {
                Some(p) => p,
                // SAFETY: `large` has a non-zero size (at least `MIN_BLOCK`).
                None => unsafe { System.alloc(large) },
            },
            // SAFETY: forwarded with the caller's layout.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match large_layout(layout) {
            Some(large) => match self.reuse(large) {
                Some(p) => {
                    // SAFETY: the block has `large.size() >= layout.size()` writable bytes.
                    unsafe { p.write_bytes(0, layout.size()) };
                    p
                }
                // SAFETY: as in `alloc`.
                None => unsafe { System.alloc_zeroed(large) },
            },
            // SAFETY: forwarded with the caller's layout.
            None => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(large) = large_layout(layout) else {
            // SAFETY: small blocks were allocated by `System` with this layout.
            return unsafe { System.dealloc(ptr, layout) };
        };
        let mut evicted = [Block::EMPTY; SLOTS];
        let mut n_evicted = 0;
        let mut kept = false;
        if ENABLED.load(Ordering::Acquire) {
            let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
            if large.size() <= c.cap {
                while c.len == SLOTS || c.bytes + large.size() > c.cap {
                    let Some(b) = c.pop_oldest() else { break };
                    evicted[n_evicted] = b;
                    n_evicted += 1;
                }
                let len = c.len;
                c.blocks[len] = Block {
                    ptr: ptr as usize,
                    size: large.size(),
                    align: large.align(),
                };
                c.len += 1;
                c.bytes += large.size();
                kept = true;
            }
        }
        // Freed outside the lock: returning memory to the kernel can take a while.
        for b in &evicted[..n_evicted] {
            // SAFETY: popped from the cache under the lock, so owned here alone.
            unsafe { b.free() };
        }
        if !kept {
            // SAFETY: the block was allocated by `System` with `large`.
            unsafe { System.dealloc(ptr, large) };
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` with `layout.align()` is a valid layout.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (large_layout(layout), large_layout(new)) {
            // Both small: the system allocator can grow in place.
            // SAFETY: forwarded as received.
            (None, None) => unsafe { System.realloc(ptr, layout, new_size) },
            // The same size class: the block already has room.
            (Some(a), Some(b)) if a.size() == b.size() => ptr,
            _ => {
                // SAFETY: `new` is a valid layout (above); the copy is of the smaller size,
                // within both blocks.
                unsafe {
                    let p = self.alloc(new);
                    if !p.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    p
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_round_up_by_at_most_an_eighth() {
        for size in [
            MIN_BLOCK,
            MIN_BLOCK + 1,
            3 << 20,
            (5 << 20) + 7,
            403 << 20,
            usize::MAX >> 4,
        ] {
            let c = class(size);
            assert!(c >= size && c - size <= size / 8, "{size} -> {c}");
            assert_eq!(class(c), c, "a class is its own class");
        }
    }

    /// The allocator's own methods, called directly (a test binary's global allocator is the
    /// system's): a freed large block comes back for the same class once reuse is on, zeroed
    /// when asked, and `release` frees it.
    #[test]
    fn large_blocks_are_kept_and_reused_once_enabled() {
        let a = ReuseLarge;
        let layout = Layout::from_size_align(3 << 20, 64).unwrap();
        let near = Layout::from_size_align((3 << 20) - 100, 64).unwrap();
        unsafe {
            // Off: nothing kept.
            let p = a.alloc(layout);
            a.dealloc(p, layout);
            assert_eq!(cached_bytes(), 0);

            enable_reuse(64 << 20);
            let p = a.alloc(layout);
            p.write_bytes(7, layout.size());
            a.dealloc(p, layout);
            assert_eq!(cached_bytes(), class(3 << 20));
            // Same class, a little smaller: the kept block, zeroed.
            let q = a.alloc_zeroed(near);
            assert_eq!(q, p);
            assert!(
                std::slice::from_raw_parts(q, near.size())
                    .iter()
                    .all(|&b| b == 0)
            );
            assert_eq!(cached_bytes(), 0);
            // Growing within its class keeps the block; beyond it moves the contents.
            let q = a.realloc(q, near, layout.size());
            assert_eq!(q, p);
            *q = 9;
            let r = a.realloc(q, layout, 8 << 20);
            assert_eq!(*r, 9);
            assert_eq!(cached_bytes(), class(3 << 20), "the old block is kept");
            a.dealloc(r, Layout::from_size_align(8 << 20, 64).unwrap());
            // Over the cap: the oldest goes first.
            enable_reuse(9 << 20);
            assert_eq!(cached_bytes(), 8 << 20);
            release();
            assert_eq!(cached_bytes(), 0);
            // Small blocks never touch the cache.
            let s = Layout::from_size_align(1024, 8).unwrap();
            let p = a.alloc(s);
            a.dealloc(p, s);
            assert_eq!(cached_bytes(), 0);
        }
    }
}
