//! The threads a session's runs use: the calling thread and `threads - 1` workers, as in
//! onnxruntime's intra-op pool.
//!
//! A run on a pool it is not part of hands its graph to a worker and sleeps until the worker
//! returns: two wake-ups of a sleeping thread per run, each tens of microseconds under a
//! hypervisor, and a third thread on two cores. So the calling thread joins a rayon pool of its
//! own ([`Caller`], built with `use_current_thread` at its first run and kept for the thread's
//! lifetime), and runs start and end on it.
//!
//! rayon gives a thread no way out of a pool it joined, so a thread keeps the pool of the first
//! thread count it ran with. A run on that thread with another count, or from inside another
//! rayon pool (a caller's parallel loop), is handed to a pool of the session's own
//! ([`Session::pool`](super::Session)) as before.
//!
//! The workers of a caller's pool serve every session that thread runs, so they find their arena
//! through a [`WorkerArena`] that each run sets for its length.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use crate::tensor::{Arena, WorkerArena};

/// The pool a thread belongs to as its first worker.
pub(super) struct Caller {
    /// The thread count asked for (0: rayon's default).
    threads: usize,
    pool: rayon::ThreadPool,
    arena: Arc<WorkerArena>,
}

thread_local! {
    static CALLER: RefCell<Option<Rc<Caller>>> = const { RefCell::new(None) };
}

impl Caller {
    /// The calling thread's pool of `threads` threads (0: rayon's default), built on first use;
    /// `None` when the thread already belongs to another pool (another thread count, or a pool
    /// it is a worker of) or the pool cannot be built.
    pub(super) fn get(threads: usize) -> Option<Rc<Caller>> {
        CALLER.with(|slot| {
            let mut slot = slot.borrow_mut();
            if let Some(caller) = &*slot {
                return (caller.threads == threads).then(|| caller.clone());
            }
            if rayon::current_thread_index().is_some() {
                return None;
            }
            let arena = Arc::new(WorkerArena::default());
            let workers = arena.clone();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .use_current_thread()
                .thread_name(|k| format!("multigather-{k}"))
                .start_handler(move |_| workers.install_on_thread())
                .build()
                .ok()?;
            let caller = Rc::new(Caller {
                threads,
                pool,
                arena,
            });
            *slot = Some(caller.clone());
            Some(caller)
        })
    }

    /// Runs `f` on this thread, inside the pool, with the workers allocating from `arena`.
    pub(super) fn run<R: Send>(&self, arena: &Arc<Arena>, f: impl FnOnce() -> R + Send) -> R {
        self.arena.enter(arena, || self.pool.install(f))
    }
}

/// A pool of `threads` threads (0: rayon's default) that a session hands its runs to, its
/// workers allocating from `arena`; `None` if it cannot be built.
pub(super) fn own(threads: usize, arena: &Arc<Arena>) -> Option<rayon::ThreadPool> {
    let workers = WorkerArena::with(arena);
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|k| format!("multigather-session-{k}"))
        .start_handler(move |_| workers.install_on_thread())
        .build()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_the_pool_of_its_first_thread_count() {
        std::thread::spawn(|| {
            let two = Caller::get(2).expect("a pool of two");
            assert!(Caller::get(3).is_none());
            let again = Caller::get(2).expect("the same pool");
            assert!(Rc::ptr_eq(&two, &again));
            let arena = Arena::new(1 << 20, true);
            let on = two.run(&arena, || {
                (rayon::current_thread_index(), rayon::current_num_threads())
            });
            assert_eq!(on, (Some(0), 2));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn workers_allocate_from_the_arena_of_the_run() {
        std::thread::spawn(|| {
            let caller = Caller::get(2).expect("a pool of two");
            let arena = Arena::new(1 << 20, true);
            let pool = &caller.pool;
            let on_worker = caller.run(&arena, || {
                pool.broadcast(|ctx| (ctx.index(), Arc::ptr_eq(&Arena::current(), &arena)))
            });
            assert!(on_worker.iter().all(|&(k, same)| k == 0 || same));
            // After the run, the workers hold nothing of it.
            let after = caller.pool.broadcast(|ctx| (ctx.index(), Arena::current()));
            assert!(after
                .iter()
                .all(|(k, a)| *k == 0 || !Arc::ptr_eq(a, &arena)));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_thread_inside_another_pool_gets_none() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert!(pool.install(|| Caller::get(2).is_none()));
    }
}
