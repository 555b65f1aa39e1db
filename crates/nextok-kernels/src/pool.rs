//! A persistent thread pool for the forward pass: its threads are started once and wait for work
//! by spinning briefly, then sleeping, so that a decode step dispatches hundreds of small jobs
//! without starting a thread or allocating.
//!
//! Spinning only pays while every thread has a core of its own. With more threads than cores a
//! spinning thread takes the core from the one whose part everyone waits for, so an
//! oversubscribed pool (more threads than [`std::thread::available_parallelism`]) spins a few
//! polls only and then sleeps; the caller of [`ThreadPool::run`] waits the same way.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// How many times a waiting thread polls before it goes to sleep, when each thread has a core:
/// long enough to cover the gap between two matrix products of a decode step, short enough not
/// to burn a core between requests.
const SPIN_LIMIT: u32 = 1 << 16;

/// The same for a pool with more threads than cores: a few polls, then sleep.
const OVERSUBSCRIBED_SPIN_LIMIT: u32 = 64;

type Job = dyn Fn(usize) + Sync;

struct Shared {
    /// Incremented once per job; a worker runs a job when it sees a new value.
    epoch: AtomicU64,
    /// Workers that have finished the current job.
    done: AtomicUsize,
    /// Whether a worker's part of the current job panicked.
    panicked: AtomicBool,
    shutdown: AtomicBool,
    sleepers: AtomicUsize,
    /// Whether the caller of `run` sleeps until the last worker finishes.
    caller_sleeps: AtomicBool,
    /// Polls before a waiting thread sleeps ([`SPIN_LIMIT`] or [`OVERSUBSCRIBED_SPIN_LIMIT`]).
    spin_limit: u32,
    /// Every poll made while waiting, by the workers and the caller: what waiting cost.
    polls: AtomicU64,
    lock: Mutex<()>,
    /// Workers sleep on it until a new epoch.
    wake: Condvar,
    /// The caller of `run` sleeps on it until every worker is done.
    finished: Condvar,
    /// The current job, with its lifetime erased. Written only by the thread that calls `run`,
    /// before it publishes the new epoch, and read by workers only after they see that epoch;
    /// `run` does not return until every worker is done with it.
    job: UnsafeCell<Option<*const Job>>,
}

// SAFETY: `job` is written and read only under the epoch protocol described on the field; all
// other fields are atomics or synchronisation primitives.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced while the job it points to is alive.
unsafe impl Send for Shared {}

/// A fixed set of threads that run one job at a time, each thread taking its own part.
///
/// `run(f)` calls `f(i)` once for every `i < threads()`, part 0 on the calling thread, and returns
/// when all have finished. Which part a thread takes is fixed, so a job that splits its work by
/// part index is deterministic.
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serialises concurrent callers of `run` on the same pool.
    running: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads())
            .finish()
    }
}

impl ThreadPool {
    /// A pool of `threads` threads in all (at least 1), counting the caller of `run`.
    ///
    /// # Panics
    ///
    /// When the operating system cannot start a thread; callers that take the count from a user
    /// bound it first.
    pub fn new(threads: usize) -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let spin_limit = if threads.max(1) > cores {
            OVERSUBSCRIBED_SPIN_LIMIT
        } else {
            SPIN_LIMIT
        };
        Self::with_spin_limit(threads, spin_limit)
            .unwrap_or_else(|e| panic!("cannot start a worker thread: {e}"))
    }

    /// A pool of `threads` threads in all (at least 1) whose waiting threads poll `spin_limit`
    /// times before they sleep, or why a thread could not be started (the threads already
    /// started are stopped again). A pool whose jobs come far apart (one per decode step, say)
    /// gains nothing by spinning between them: a small limit leaves the core to others.
    pub fn with_spin_limit(threads: usize, spin_limit: u32) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            caller_sleeps: AtomicBool::new(false),
            spin_limit,
            polls: AtomicU64::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            finished: Condvar::new(),
            job: UnsafeCell::new(None),
        });
        let mut pool = ThreadPool {
            shared,
            workers: Vec::with_capacity(threads.max(1) - 1),
            running: Mutex::new(()),
        };
        for part in 1..threads.max(1) {
            let shared = Arc::clone(&pool.shared);
            // On an error `pool` is dropped here, which stops and joins the workers started.
            let handle = std::thread::Builder::new()
                .name(format!("nextok-worker-{part}"))
                .spawn(move || worker(&shared, part))?;
            pool.workers.push(handle);
        }
        Ok(pool)
    }

    /// Threads in all, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// How many polls a waiting thread makes before it sleeps: short when the pool has more
    /// threads than the machine has cores.
    pub fn spin_limit(&self) -> u32 {
        self.shared.spin_limit
    }

    /// Every poll made so far by threads waiting for work or for the others to finish. Each wait
    /// polls at most [`spin_limit`](Self::spin_limit) times before it sleeps, so this grows by at
    /// most `threads() × spin_limit()` per [`run`](Self::run), whatever the machine's load.
    pub fn polls(&self) -> u64 {
        self.shared.polls.load(Ordering::Relaxed)
    }

    /// Runs `f(part)` for every part `0..threads()` and waits for all of them. A panic in any
    /// part is re-raised here, after every part has finished.
    pub fn run<F: Fn(usize) + Sync>(&self, f: F) {
        self.run_beside(|| f(0), &f);
    }

    /// Runs `main` on the calling thread while the workers run `others(part)` for every part
    /// `1..threads()`, and returns what `main` returns once all have finished: [`run`](Self::run)
    /// with a part 0 of its own (which may borrow mutably what the others do not touch). A panic
    /// in `main` goes on once the workers are done; one in a worker's part is re-raised here.
    pub fn run_beside<R>(&self, main: impl FnOnce() -> R, others: &(dyn Fn(usize) + Sync)) -> R {
        if self.workers.is_empty() {
            return main();
        }
        let _serial = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let shared = &*self.shared;
        let job: &(dyn Fn(usize) + Sync + '_) = others;
        // SAFETY: the erased reference is only used by workers until `done` reaches the worker
        // count, and this function waits for that (also when `main` panics, through `Wait`).
        let job: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(usize) + Sync + '_), &'static Job>(job) };
        // SAFETY: no worker reads the slot until the epoch below changes.
        unsafe { *shared.job.get() = Some(job) };
        shared.done.store(0, Ordering::SeqCst);
        shared.epoch.fetch_add(1, Ordering::SeqCst);
        if shared.sleepers.load(Ordering::SeqCst) > 0 {
            let _guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.wake.notify_all();
        }
        struct Wait<'a>(&'a Shared, usize);
        impl Drop for Wait<'_> {
            fn drop(&mut self) {
                let shared = self.0;
                let mut spins = 0u32;
                while shared.done.load(Ordering::Acquire) < self.1 && spins < shared.spin_limit {
                    spins += 1;
                    std::hint::spin_loop();
                }
                shared.polls.fetch_add(u64::from(spins), Ordering::Relaxed);
                if shared.done.load(Ordering::Acquire) < self.1 {
                    // Sleep until the last worker says it is done. The flag is set before the
                    // check under the lock and the worker counts itself done before it reads the
                    // flag, so one of the two always sees the other.
                    let mut guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
                    shared.caller_sleeps.store(true, Ordering::SeqCst);
                    while shared.done.load(Ordering::SeqCst) < self.1 {
                        guard = shared
                            .finished
                            .wait(guard)
                            .unwrap_or_else(|e| e.into_inner());
                    }
                    shared.caller_sleeps.store(false, Ordering::SeqCst);
                }
            }
        }
        let out = {
            let _wait = Wait(shared, self.workers.len());
            main()
        };
        if shared.panicked.swap(false, Ordering::SeqCst) {
            panic!("a worker thread of the nextok thread pool panicked");
        }
        out
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _guard = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn worker(shared: &Shared, part: usize) {
    let mut seen = 0u64;
    loop {
        let mut spins = 0u32;
        loop {
            let epoch = shared.epoch.load(Ordering::SeqCst);
            if epoch != seen {
                seen = epoch;
                shared.polls.fetch_add(u64::from(spins), Ordering::Relaxed);
                break;
            }
            if shared.shutdown.load(Ordering::SeqCst) {
                return;
            }
            if spins < shared.spin_limit {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            shared.polls.fetch_add(u64::from(spins), Ordering::Relaxed);
            let mut guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.sleepers.fetch_add(1, Ordering::SeqCst);
            while shared.epoch.load(Ordering::SeqCst) == seen
                && !shared.shutdown.load(Ordering::SeqCst)
            {
                guard = shared.wake.wait(guard).unwrap_or_else(|e| e.into_inner());
            }
            shared.sleepers.fetch_sub(1, Ordering::SeqCst);
            spins = 0;
        }
        // SAFETY: the caller of `run` wrote the slot before publishing this epoch and keeps the
        // job alive until this worker increments `done`.
        let job = unsafe { *shared.job.get() };
        if let Some(job) = job {
            // SAFETY: see above.
            let job = unsafe { &*job };
            if catch_unwind(AssertUnwindSafe(|| job(part))).is_err() {
                shared.panicked.store(true, Ordering::SeqCst);
            }
        }
        shared.done.fetch_add(1, Ordering::SeqCst);
        if shared.caller_sleeps.load(Ordering::SeqCst) {
            let _guard = shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.finished.notify_all();
        }
    }
}
