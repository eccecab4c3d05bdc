//! How kernels share their work among threads: the thread count they may use, a serial mode
//! that keeps a whole run on the calling thread, and the grain below which splitting a loop
//! costs more than it saves.
//!
//! Kernels split loops with rayon's parallel iterators on the current pool. Two things decide
//! whether a loop is split at all, and both live here so that every kernel decides alike:
//!
//! - [`serial`] marks the calling thread as a one-thread run (`--threads 1`): [`threads`] then
//!   says 1, and every loop bounded by [`min_len`] runs as one piece on that thread, without
//!   handing anything to a pool (a handoff that costs a scheduler tick when the cores are busy).
//! - [`GRAIN`] is the least work worth a task: waking a sleeping worker costs tens of
//!   microseconds, so a loop with less than two grains of work stays on one thread, and a split
//!   loop gives each task at least one grain.
//!
//! # Example
//! ```
//! use multigather::par;
//! use rayon::prelude::*;
//!
//! let mut v = vec![1.0f32; 1 << 20];
//! par::serial(|| {
//!     assert_eq!(par::threads(), 1);
//!     // One piece, on this thread.
//!     v.par_chunks_mut(256)
//!         .with_min_len(par::min_len(4096, &[256]))
//!         .for_each(|c| c.iter_mut().for_each(|x| *x *= 2.0));
//! });
//! assert!(v.iter().all(|&x| x == 2.0));
//! ```

use std::cell::Cell;

/// The least work (in elementary operations: an element written, a multiply-add) worth handing
/// to another thread.
pub const GRAIN: usize = 1 << 15;

thread_local! {
    static SERIAL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with this thread in serial mode (restoring the previous mode after): kernels it
/// calls use one thread, this one.
pub fn serial<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            SERIAL.set(self.0);
        }
    }
    let _restore = Restore(SERIAL.replace(true));
    f()
}

/// The threads a kernel called here may use: 1 in serial mode, else the current rayon pool's.
pub fn threads() -> usize {
    if SERIAL.get() {
        1
    } else {
        rayon::current_num_threads()
    }
}

/// The `with_min_len` of a parallel loop over `items` pieces of about `cost` operations each,
/// `cost` given as factors (multiplied without overflow, as a model's dims may be anything):
/// `usize::MAX` (one piece, on the calling thread) in serial mode or when the loop holds less
/// than two grains of work, otherwise enough pieces per task to make a grain.
pub fn min_len(items: usize, cost: &[usize]) -> usize {
    let cost = cost.iter().fold(1usize, |a, &f| a.saturating_mul(f)).max(1);
    if threads() <= 1 || items.saturating_mul(cost) < 2 * GRAIN {
        usize::MAX
    } else {
        GRAIN.div_ceil(cost)
    }
}

/// `rayon::join` where threads are worth it, `(a(), b())` in serial mode.
pub fn join<A, B, RA, RB>(a: A, b: B) -> (RA, RB)
where
    A: FnOnce() -> RA + Send,
    B: FnOnce() -> RB + Send,
    RA: Send,
    RB: Send,
{
    if threads() > 1 {
        rayon::join(a, b)
    } else {
        (a(), b())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serial_mode_is_scoped_and_small_loops_stay_whole() {
        assert!(!SERIAL.get());
        serial(|| {
            assert_eq!(threads(), 1);
            assert_eq!(min_len(1 << 30, &[1 << 10]), usize::MAX);
            serial(|| assert_eq!(threads(), 1));
            assert_eq!(threads(), 1);
        });
        assert!(!SERIAL.get());
        assert_eq!(min_len(10, &[10]), usize::MAX);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        pool.install(|| {
            assert_eq!(threads(), 2);
            assert_eq!(min_len(1 << 20, &[1]), GRAIN);
            assert_eq!(min_len(1 << 20, &[1 << 20]), 1);
            assert_eq!(min_len(2, &[1 << 40, 1 << 40]), 1);
        });
    }

    #[test]
    fn a_serial_loop_runs_on_the_calling_thread() {
        use rayon::prelude::*;
        let me = std::thread::current().id();
        let mut v = vec![0u8; 1 << 16];
        serial(|| {
            v.par_chunks_mut(1)
                .with_min_len(min_len(1 << 16, &[1 << 16]))
                .for_each(|c| {
                    assert_eq!(std::thread::current().id(), me);
                    c[0] = 1;
                })
        });
        assert!(v.iter().all(|&x| x == 1));
    }
}
