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
//! use multigather_kernel::par;
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
    /// Whether this worker is in the spin loop of [`with_workers_awake`].
    static SPINNING: Cell<bool> = const { Cell::new(false) };
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

/// Runs `f` on the current rayon pool's thread with the pool's other threads kept awake:
/// each spins, taking any task the kernels of `f` (or of a call that follows it) hand out,
/// until it has found no work for 100 µs.
///
/// A sleeping worker is woken through the kernel, which under a hypervisor costs tens of
/// microseconds when the virtual CPU has to be scheduled again; a run hands out tasks dozens of
/// times, once per split operator, so workers that fall asleep between operators make every
/// split pay that latency. On a 2-vCPU Zen 5 guest, the conv-net at 2 threads (`run --repeat
/// 500`, five interleaved pairs against sleeping workers) took 1.436-1.457 ms against
/// 1.457-1.506; per-node profiles swing more from run to run than that.
///
/// The workers go on spinning for that idle limit after `f` returns, as onnxruntime's do after
/// a parallel section: runs that follow each other closely (a server's requests, `run
/// --repeat`) find them awake instead of waking them at every start, which a one-node graph
/// pays in full: the calling thread has often done the whole gather before the woken worker
/// takes a task. This pays only when the thread that called `f` is itself a worker of the pool
/// (see `interp`'s caller pools): a caller outside it sleeps while `f` runs, and at its end
/// needs a core that the spinning workers hold.
///
/// Outside a pool, or on a one-thread pool, `f` just runs.
///
/// # Example
/// ```
/// use rayon::prelude::*;
/// let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
/// let sum: u64 = pool.install(|| {
///     multigather_kernel::par::with_workers_awake(|| (0..1_000_000u64).into_par_iter().sum())
/// });
/// assert_eq!(sum, 499_999_500_000);
/// ```
pub fn with_workers_awake<R>(f: impl FnOnce() -> R) -> R {
    use std::time::{Duration, Instant};
    /// How long a spinning worker looks for work in vain before it gives its thread back:
    /// longer than the serial stretches between split operators of a run (a few microseconds
    /// to tens of them) and than the gap between runs that follow each other, short enough
    /// that a spin loop entered inside a task delays that task little.
    const IDLE_LIMIT: Duration = Duration::from_micros(100);
    let Some(me) = rayon::current_thread_index() else {
        return f();
    };
    if threads() <= 1 {
        return f();
    }
    rayon::spawn_broadcast(move |worker| {
        // This thread's copy: it runs `f`, and would otherwise take its own copy while waiting
        // for a task and spin where it should return. A worker already spinning for an
        // earlier call may take this copy as a task: it returns at once rather than nest one
        // spin loop in another, and goes on spinning in the first.
        if worker.index() == me || SPINNING.get() {
            return;
        }
        SPINNING.set(true);
        // Idle rounds back off to `MAX_PAUSES` pauses between looks for work, so a spinning
        // worker neither hammers the queues the running thread pushes to nor takes much from a
        // hyperthread sibling, and still starts a task within a microsecond or so.
        const MAX_PAUSES: u32 = 64;
        let mut pauses = 1;
        let mut idle_since = None;
        loop {
            if rayon::yield_now() == Some(rayon::Yield::Executed) {
                pauses = 1;
                idle_since = None;
                continue;
            }
            // A worker takes this job wherever it looks for work, also while it waits inside
            // a task for a half that another thread stole. Found no work for `IDLE_LIMIT`, it
            // gives the thread back (to rayon's own sleep, or to the task it interrupted).
            if idle_since.get_or_insert_with(Instant::now).elapsed() > IDLE_LIMIT {
                break;
            }
            for _ in 0..pauses {
                std::hint::spin_loop();
            }
            pauses = (pauses * 2).min(MAX_PAUSES);
        }
        SPINNING.set(false);
    });
    // Takes this thread's own copy off its queue now: a thread that joined its pool without
    // running rayon's worker loop (a caller pool) would otherwise gather one per call.
    rayon::yield_local();
    f()
}

/// Who runs a kernel's independent tasks: rayon's current pool ([`Pool`]), the calling thread
/// ([`Serial`]), or a host's pool (a runtime that calls the kernel from its own intra-op
/// threads, as onnxruntime's custom-op library does, implements this over its `ParallelFor`).
///
/// # Example
/// ```
/// use multigather_kernel::par::{self, Workers};
///
/// /// Runs the tasks last to first on the calling thread.
/// struct Backwards;
/// impl Workers for Backwards {
///     fn threads(&self) -> usize { 4 }
///     fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
///         (0..tasks).rev().for_each(task)
///     }
/// }
/// let mut v = vec![0u32; 10];
/// let sums = par::for_each_chunk(&Backwards, &mut v, 4, |k, chunk| {
///     chunk.fill(k as u32);
///     chunk.len()
/// });
/// assert_eq!(sums, [Some(4), Some(4), Some(2)]);
/// assert_eq!(v, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]);
/// ```
pub trait Workers: Sync {
    /// How many threads work on the tasks: the kernel cuts its work for that many.
    fn threads(&self) -> usize;
    /// Runs `task(k)` once for every `k` in `0..tasks`, in any order and on any threads, and
    /// returns when all have returned. Kernels call it from the thread that called them, never
    /// from inside a task.
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync));
}

/// The current rayon pool (bounded by [`serial`] mode like every loop here).
#[derive(Clone, Copy, Debug, Default)]
pub struct Pool;

impl Workers for Pool {
    fn threads(&self) -> usize {
        threads()
    }

    /// Each of the pool's threads starts on a stretch of its own (the calling thread on the
    /// first), so a kernel run again on the same data finds its stretch in the same core's
    /// caches; a thread done with its own takes tasks from the ends of the others'.
    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        let threads = threads().min(tasks);
        // A stretch holds 32-bit task numbers (kernels hand out a few per thread).
        if threads <= 1 || u32::try_from(tasks).is_err() {
            (0..tasks).for_each(task);
            return;
        }
        let stretches: Vec<Stretch> = (0..threads)
            .map(|h| Stretch::new(tasks * h / threads, tasks * (h + 1) / threads))
            .collect();
        let work = |home: usize| {
            while let Some(k) = stretches[home].take_front() {
                task(k);
            }
            for other in (1..threads).map(|d| (home + d) % threads) {
                while let Some(k) = stretches[other].take_back() {
                    task(k);
                }
            }
        };
        rayon::scope(|s| {
            for home in 1..threads {
                let work = &work;
                s.spawn(move |_| work(home));
            }
            work(0);
        });
    }
}

/// Tasks `front..back` not yet taken, in one word so that the owner (from the front) and
/// helpers (from the back) never take the same task.
struct Stretch(std::sync::atomic::AtomicU64);

impl Stretch {
    fn new(front: usize, back: usize) -> Stretch {
        Stretch(std::sync::atomic::AtomicU64::new(
            ((front as u64) << 32) | back as u64,
        ))
    }

    fn take_front(&self) -> Option<usize> {
        self.take(|front, back| (front, (front + 1, back)))
    }

    fn take_back(&self) -> Option<usize> {
        self.take(|front, back| (back - 1, (front, back - 1)))
    }

    /// Takes the task `pick` chooses from a non-empty range, leaving the range it returns.
    fn take(&self, pick: impl Fn(u64, u64) -> (u64, (u64, u64))) -> Option<usize> {
        use std::sync::atomic::Ordering;
        let mut now = self.0.load(Ordering::Relaxed);
        loop {
            let (front, back) = (now >> 32, now & 0xffff_ffff);
            if front >= back {
                return None;
            }
            let (k, (f, b)) = pick(front, back);
            match self.0.compare_exchange_weak(
                now,
                (f << 32) | b,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(k as usize),
                Err(seen) => now = seen,
            }
        }
    }
}

/// The calling thread, one task after the other.
#[derive(Clone, Copy, Debug, Default)]
pub struct Serial;

impl Workers for Serial {
    fn threads(&self) -> usize {
        1
    }

    fn run(&self, tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        (0..tasks).for_each(task);
    }
}

/// Cuts `items` into chunks of `chunk` (the last one shorter) and runs `f(k, chunk k)` for each on
/// `workers`. Result `k` is `None` only if task `k` did not return (a host that swallowed a panic).
pub fn for_each_chunk<'a, U: Send, R: Send>(
    workers: &dyn Workers,
    items: &'a mut [U],
    chunk: usize,
    f: impl Fn(usize, &'a mut [U]) -> R + Sync,
) -> Vec<Option<R>> {
    use std::sync::Mutex;
    let chunk = chunk.max(1);
    if items.len() <= chunk {
        return vec![Some(f(0, items))];
    }
    let parts: Vec<Mutex<Option<&'a mut [U]>>> = items
        .chunks_mut(chunk)
        .map(|c| Mutex::new(Some(c)))
        .collect();
    let results: Vec<Mutex<Option<R>>> = parts.iter().map(|_| Mutex::new(None)).collect();
    workers.run(parts.len(), &|k| {
        let part = parts.get(k).and_then(|p| lock(p).take());
        if let (Some(part), Some(slot)) = (part, results.get(k)) {
            let r = f(k, part);
            *lock(slot) = Some(r);
        }
    });
    results
        .into_iter()
        .map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()))
        .collect()
}

/// The mutex's value, also after a panic elsewhere (the tasks here write whole values).
fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
    fn the_pool_runs_every_task_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for tasks in [0, 1, 2, 3, 7, 100, 1000] {
            let runs: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
            pool.install(|| {
                Pool.run(tasks, &|k| {
                    runs[k].fetch_add(1, Ordering::Relaxed);
                })
            });
            assert!(
                runs.iter().all(|r| r.load(Ordering::Relaxed) == 1),
                "{tasks}"
            );
        }
    }

    #[test]
    fn a_stretch_gives_each_task_to_one_end() {
        let s = Stretch::new(3, 7);
        assert_eq!(s.take_front(), Some(3));
        assert_eq!(s.take_back(), Some(6));
        assert_eq!(s.take_back(), Some(5));
        assert_eq!(s.take_front(), Some(4));
        assert_eq!((s.take_front(), s.take_back()), (None, None));
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
