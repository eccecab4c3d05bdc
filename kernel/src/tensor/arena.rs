//! Where tensor buffers come from: a pool that keeps freed buffers for the next tensor of a
//! similar size, and the memory budget every model-sized allocation is checked against.
//!
//! An [`Arena`] counts the bytes of the buffers it has handed out (`live`) and of the freed ones
//! it keeps (`pooled`). A request first takes a pooled buffer of the right size class; otherwise
//! it is checked against the budget — pooled buffers are released to the system first when that
//! makes room — and only then allocated, fallibly. A model asking for a 4 TB tensor therefore gets
//! [`TensorError::OverBudget`] before any memory is touched, and a model that fits runs its second
//! and later passes on warm memory: no page faults, no zeroing by the kernel.
//!
//! The arena is found through the thread: [`Arena::enter`] makes an arena current for the
//! duration of a closure (the interpreter enters its session's arena for every run, and points
//! its pool's worker threads to it for the run's length through a `WorkerArena`). Outside any
//! entered arena, tensors come from a process-wide arena that checks the default budget and
//! keeps nothing.
//!
//! Design note: buffers return to their arena when the last tensor sharing them is dropped, on
//! whatever thread that happens, so the pool is behind a mutex; it is taken once per buffer of at
//! least [`MIN_POOLED_BYTES`], never per element. Smaller buffers are left to the allocator, which
//! serves them from its own warm caches.
//!
//! # Example
//! ```
//! use multigather_kernel::tensor::{Arena, TensorError};
//! use multigather_kernel::{DataType, Tensor};
//!
//! let arena = Arena::new(1 << 20, true);
//! let err = arena.enter(|| Tensor::zeros(DataType::Float, &[1 << 20])).unwrap_err();
//! assert!(matches!(err, TensorError::OverBudget { .. }));
//! let t = arena.enter(|| Tensor::zeros(DataType::Float, &[1024]))?;
//! assert_eq!(arena.live_bytes(), t.len() * 4 + 16);
//! drop(t);
//! assert_eq!(arena.live_bytes(), 0);
//! # Ok::<(), TensorError>(())
//! ```

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::TensorError;

/// Buffers smaller than this are not pooled: the allocator's own caches serve them well.
pub const MIN_POOLED_BYTES: usize = 32 << 10;

/// A memory budget and a pool of reusable buffers.
#[derive(Debug)]
pub struct Arena {
    limit: usize,
    pooling: bool,
    /// Bytes of buffers handed out and not yet returned.
    live: AtomicUsize,
    pool: Mutex<Pool>,
}

/// Freed buffers by capacity in words.
#[derive(Debug, Default)]
struct Pool {
    free: BTreeMap<usize, Vec<Vec<MaybeUninit<u64>>>>,
    bytes: usize,
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Arena>>> = const { RefCell::new(None) };
    /// On a pool's worker thread, the arena its pool's runs allocate from.
    static WORKERS: RefCell<Option<Arc<WorkerArena>>> = const { RefCell::new(None) };
}

impl Arena {
    /// An arena allowing `limit` bytes of live buffers; with `pooling`, freed buffers are kept
    /// for reuse (they count towards the limit and are released when room is needed).
    pub fn new(limit: usize, pooling: bool) -> Arc<Arena> {
        Arc::new(Arena {
            limit,
            pooling,
            live: AtomicUsize::new(0),
            pool: Mutex::new(Pool::default()),
        })
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes of buffers handed out and not yet returned.
    pub fn live_bytes(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Bytes of freed buffers kept for reuse.
    pub fn pooled_bytes(&self) -> usize {
        lock(&self.pool).bytes
    }

    /// Runs `f` with this arena current on this thread (restoring the previous one after).
    pub fn enter<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<Arena>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let previous = self.0.take();
                CURRENT.with(|c| *c.borrow_mut() = previous);
            }
        }
        let previous = CURRENT.with(|c| c.borrow_mut().replace(self.clone()));
        let _restore = Restore(previous);
        f()
    }

    /// The arena of this thread: the one entered last, else on a pool's worker thread the one
    /// of the run it works for (a `WorkerArena`), else the process-wide default.
    pub fn current() -> Arc<Arena> {
        CURRENT
            .with(|c| c.borrow().clone())
            .or_else(|| WORKERS.with(|w| w.borrow().as_ref().and_then(|s| s.get())))
            .unwrap_or_else(|| default_arena().clone())
    }

    /// Checks that `bytes` more could be held, without taking them: for scratch space and
    /// string tensors, which do not come from the pool.
    pub fn check(&self, bytes: usize) -> Result<(), TensorError> {
        let live = self.live_bytes();
        if live
            .checked_add(bytes)
            .is_some_and(|total| total <= self.limit)
        {
            Ok(())
        } else {
            Err(self.over_budget(bytes, live))
        }
    }

    fn over_budget(&self, bytes: usize, live: usize) -> TensorError {
        TensorError::OverBudget {
            bytes,
            live,
            limit: self.limit,
        }
    }

    /// A buffer of `words` words whose contents are unspecified, counted as live until it
    /// comes back through [`Arena::give_back`].
    pub(crate) fn take(&self, words: usize) -> Result<Vec<MaybeUninit<u64>>, TensorError> {
        let bytes = words.saturating_mul(8);
        if self.pooling && bytes >= MIN_POOLED_BYTES {
            let mut pool = lock(&self.pool);
            // The smallest free buffer that holds `words` without wasting more than a quarter.
            let found = pool
                .free
                .range_mut(words..=words + words / 4)
                .find_map(|(&cap, list)| list.pop().map(|v| (cap, v)));
            if let Some((cap, v)) = found {
                if pool.free.get(&cap).is_some_and(Vec::is_empty) {
                    pool.free.remove(&cap);
                }
                pool.bytes -= cap * 8;
                self.live.fetch_add(cap * 8, Ordering::Relaxed);
                return Ok(v);
            }
            // Make room by releasing pooled buffers, largest first, while over the budget.
            while self
                .live_bytes()
                .saturating_add(pool.bytes)
                .saturating_add(bytes)
                > self.limit
            {
                let Some(mut entry) = pool.free.last_entry() else {
                    break;
                };
                let cap = *entry.key();
                entry.get_mut().pop();
                if entry.get().is_empty() {
                    entry.remove();
                }
                pool.bytes -= cap * 8;
            }
        }
        let live = self.live.fetch_add(bytes, Ordering::Relaxed);
        if live
            .checked_add(bytes)
            .is_none_or(|total| total > self.limit)
        {
            self.live.fetch_sub(bytes, Ordering::Relaxed);
            return Err(self.over_budget(bytes, live));
        }
        let mut v = Vec::new();
        if v.try_reserve_exact(words).is_err() {
            self.live.fetch_sub(bytes, Ordering::Relaxed);
            return Err(TensorError::OutOfMemory { bytes });
        }
        // Count what was really reserved, so that `give_back` subtracts the same amount.
        let extra = (v.capacity() - words) * 8;
        self.live.fetch_add(extra, Ordering::Relaxed);
        Ok(v)
    }

    /// Returns a buffer obtained from [`Arena::take`]: kept for reuse or released.
    pub(crate) fn give_back(&self, mut v: Vec<MaybeUninit<u64>>) {
        let cap = v.capacity();
        self.live.fetch_sub(cap * 8, Ordering::Relaxed);
        if !self.pooling || cap * 8 < MIN_POOLED_BYTES {
            return;
        }
        let mut pool = lock(&self.pool);
        if self.live_bytes().saturating_add(pool.bytes + cap * 8) > self.limit {
            return;
        }
        v.clear();
        pool.bytes += cap * 8;
        pool.free.entry(cap).or_default().push(v);
    }
}

/// The process-wide arena: the default budget, nothing pooled.
fn default_arena() -> &'static Arc<Arena> {
    static DEFAULT: OnceLock<Arc<Arena>> = OnceLock::new();
    DEFAULT.get_or_init(|| Arena::new(default_budget(), false))
}

/// The default memory budget: the machine's physical memory (from `/proc/meminfo` where there
/// is one), or 16 GiB where it cannot be read.
pub fn default_budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| physical_memory().unwrap_or(16 << 30))
}

fn physical_memory() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The arena the worker threads of a pool allocate from: the thread that drives a run sets it
/// for the length of the run, so the tasks that workers take from the run's kernels count against
/// that run's budget and reuse its buffers, and a pool that outlives a session keeps nothing of
/// it.
#[derive(Debug, Default)]
pub struct WorkerArena(Mutex<Option<Arc<Arena>>>);

impl WorkerArena {
    /// A slot holding `arena` for good (for a pool that serves one session only).
    pub fn with(arena: &Arc<Arena>) -> Arc<WorkerArena> {
        Arc::new(WorkerArena(Mutex::new(Some(arena.clone()))))
    }

    /// Makes this the slot of the calling (worker) thread: a pool's start handler.
    pub fn install_on_thread(self: &Arc<Self>) {
        WORKERS.with(|w| *w.borrow_mut() = Some(self.clone()));
    }

    /// Runs `f` with `arena` in the slot (restoring the previous one after).
    pub fn enter<R>(&self, arena: &Arc<Arena>, f: impl FnOnce() -> R) -> R {
        struct Restore<'s>(&'s WorkerArena, Option<Arc<Arena>>);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                *lock(&self.0 .0) = self.1.take();
            }
        }
        let previous = lock(&self.0).replace(arena.clone());
        let _restore = Restore(self, previous);
        f()
    }

    fn get(&self) -> Option<Arc<Arena>> {
        lock(&self.0).clone()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `n` copies of `fill` in a plain vector, checked against the current arena's budget and
/// allocated fallibly: scratch space and outputs of kernels that a model sizes.
///
/// # Example
/// ```
/// let v = multigather_kernel::tensor::try_vec(3, 0.5f32)?;
/// assert_eq!(v, [0.5, 0.5, 0.5]);
/// assert!(multigather_kernel::tensor::try_vec(usize::MAX / 4, 0u64).is_err());
/// # Ok::<(), multigather_kernel::tensor::TensorError>(())
/// ```
pub fn try_vec<T: Clone>(n: usize, fill: T) -> Result<Vec<T>, TensorError> {
    let mut v = try_with_capacity(n)?;
    v.resize(n, fill);
    Ok(v)
}

/// A copy of `items`, checked and allocated as [`try_vec`] does.
///
/// ```
/// let v = multigather_kernel::tensor::try_to_vec(&[1u8, 2, 3])?;
/// assert_eq!(v, [1, 2, 3]);
/// # Ok::<(), multigather_kernel::tensor::TensorError>(())
/// ```
pub fn try_to_vec<T: Clone>(items: &[T]) -> Result<Vec<T>, TensorError> {
    let mut v = try_with_capacity(items.len())?;
    v.extend_from_slice(items);
    Ok(v)
}

/// An empty vector with room for `n` elements, checked and allocated as [`try_vec`] does.
pub fn try_with_capacity<T>(n: usize) -> Result<Vec<T>, TensorError> {
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    Arena::current().check(bytes)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| TensorError::OutOfMemory { bytes })?;
    Ok(v)
}

/// Scratch space of a kernel: `len` elements of `T` in a buffer of the current arena, counted
/// against its budget while alive and returned to its pool when dropped, so that the next step or
/// run reuses the memory without page faults (a plain `Vec` of a few hundred KiB goes back to the
/// system when freed, and is faulted in and zeroed again next time).
///
/// # Example
/// ```
/// use multigather_kernel::tensor::Scratch;
/// let mut col = Scratch::new(4, 0.0f32)?;
/// col[1] = 2.5;
/// assert_eq!(&col[..], &[0.0, 2.5, 0.0, 0.0]);
/// # Ok::<(), multigather_kernel::tensor::TensorError>(())
/// ```
pub struct Scratch<T> {
    words: Vec<MaybeUninit<u64>>,
    len: usize,
    home: Arc<Arena>,
    _elements: PhantomData<T>,
}

impl<T: bytemuck::Pod> Scratch<T> {
    /// `len` copies of `fill`.
    pub fn new(len: usize, fill: T) -> Result<Scratch<T>, TensorError> {
        // SAFETY: `init` writes every element.
        unsafe {
            Scratch::new_with(len, |slots| {
                for slot in slots {
                    slot.write(fill);
                }
            })
        }
    }

    /// `len` elements written by `init`, with no fill before: for scratch space a kernel
    /// overwrites whole.
    ///
    /// # Safety
    /// `init` must write every element of the slice it is given.
    ///
    /// # Example
    /// ```
    /// use multigather_kernel::tensor::Scratch;
    /// // SAFETY: the closure writes all four elements.
    /// let squares = unsafe {
    ///     Scratch::new_with(4, |s| {
    ///         for (i, slot) in s.iter_mut().enumerate() {
    ///             slot.write((i * i) as u32);
    ///         }
    ///     })
    /// }?;
    /// assert_eq!(&squares[..], &[0, 1, 4, 9]);
    /// # Ok::<(), multigather_kernel::tensor::TensorError>(())
    /// ```
    pub unsafe fn new_with(
        len: usize,
        init: impl FnOnce(&mut [MaybeUninit<T>]),
    ) -> Result<Scratch<T>, TensorError> {
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or(TensorError::OutOfMemory { bytes: usize::MAX })?;
        const { assert!(std::mem::align_of::<T>() <= 8) };
        let home = Arena::current();
        let mut words = home.take(bytes.div_ceil(8))?;
        words.resize(bytes.div_ceil(8), MaybeUninit::uninit());
        let mut scratch = Scratch {
            words,
            len,
            home,
            _elements: PhantomData,
        };
        init(scratch.slots());
        Ok(scratch)
    }

    /// The elements, possibly uninitialised.
    fn slots(&mut self) -> &mut [MaybeUninit<T>] {
        // SAFETY: the buffer holds at least `len * size_of::<T>()` bytes (see `new`), is 8-byte
        // aligned, which is enough for `T` (asserted in `new`), and `MaybeUninit<T>` has no
        // validity requirement.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }
}

impl<T: bytemuck::Pod> std::ops::Deref for Scratch<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: as in `slots`; every element was written in `new_with` (its caller's
        // promise), and only initialised `T`s
        // are written after (through `DerefMut`).
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast(), self.len) }
    }
}

impl<T: bytemuck::Pod> std::ops::DerefMut for Scratch<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `Deref`.
        unsafe { std::slice::from_raw_parts_mut(self.words.as_mut_ptr().cast(), self.len) }
    }
}

impl<T> Drop for Scratch<T> {
    fn drop(&mut self) {
        self.home.give_back(std::mem::take(&mut self.words));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_comes_back_to_the_pool() {
        let arena = Arena::new(1 << 30, true);
        let len = MIN_POOLED_BYTES / 4 * 2;
        let first = arena.enter(|| Scratch::new(len, 1.0f32)).unwrap();
        let ptr = first.as_ptr();
        assert!(first.iter().all(|&v| v == 1.0));
        assert_eq!(arena.live_bytes(), len * 4);
        drop(first);
        assert_eq!((arena.live_bytes(), arena.pooled_bytes()), (0, len * 4));
        let second = arena.enter(|| Scratch::new(len, 2.0f32)).unwrap();
        assert_eq!(second.as_ptr(), ptr);
        assert!(second.iter().all(|&v| v == 2.0));
        let small = Arena::new(1024, true);
        assert!(small.enter(|| Scratch::new(len, 0u8)).is_err());
    }

    #[test]
    fn freed_buffers_are_reused_within_a_size_class() {
        let arena = Arena::new(1 << 30, true);
        let words = MIN_POOLED_BYTES / 8 * 4;
        let a = arena.take(words).unwrap();
        let ptr = a.as_ptr();
        arena.give_back(a);
        assert_eq!(arena.live_bytes(), 0);
        assert_eq!(arena.pooled_bytes(), words * 8);
        // A slightly smaller request takes the same buffer; a much smaller one does not.
        let b = arena.take(words - 100).unwrap();
        assert_eq!(b.as_ptr(), ptr);
        assert_eq!(arena.pooled_bytes(), 0);
        let c = arena.take(words / 2).unwrap();
        assert_ne!(c.as_ptr(), ptr);
        arena.give_back(b);
        arena.give_back(c);
        assert_eq!(arena.live_bytes(), 0);
    }

    #[test]
    fn the_budget_is_checked_before_allocating_and_pooled_memory_makes_room() {
        let words = MIN_POOLED_BYTES / 8 * 8;
        let arena = Arena::new(words * 8 * 3, true);
        let a = arena.take(words).unwrap();
        let b = arena.take(words).unwrap();
        assert!(matches!(
            arena.take(words * 2),
            Err(TensorError::OverBudget { .. })
        ));
        arena.give_back(a);
        arena.give_back(b);
        // Two pooled buffers must be released to make room for one twice as large.
        let c = arena.take(words * 2).unwrap();
        assert_eq!(arena.live_bytes(), words * 16);
        assert!(arena.pooled_bytes() <= words * 8);
        arena.give_back(c);
        let huge = arena.take(usize::MAX / 16).unwrap_err();
        assert!(huge.to_string().contains("memory budget"), "{huge}");
    }

    #[test]
    fn entering_an_arena_is_scoped() {
        let arena = Arena::new(1000, false);
        assert!(arena.enter(|| try_vec(10_000, 0u8)).is_err());
        assert!(try_vec(10_000, 0u8).is_ok());
    }
}
