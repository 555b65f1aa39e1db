//! A persistent thread pool for the forward pass: its threads are started once and wait for work
//! by spinning briefly, then sleeping, so that a decode step dispatches hundreds of small jobs
//! without starting a thread or allocating.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// How many times a waiting thread polls before it goes to sleep: long enough to cover the gap
/// between two matrix products of a decode step, short enough not to burn a core between
/// requests.
const SPIN_LIMIT: u32 = 1 << 16;

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
    lock: Mutex<()>,
    wake: Condvar,
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
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            job: UnsafeCell::new(None),
        });
        let workers = (1..threads.max(1))
            .map(|part| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("nextok-worker-{part}"))
                    .spawn(move || worker(&shared, part))
                    .unwrap_or_else(|e| panic!("cannot start a worker thread: {e}"))
            })
            .collect();
        ThreadPool {
            shared,
            workers,
            running: Mutex::new(()),
        }
    }

    /// Threads in all, the caller included.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `f(part)` for every part `0..threads()` and waits for all of them. A panic in any
    /// part is re-raised here, after every part has finished.
    pub fn run<F: Fn(usize) + Sync>(&self, f: F) {
        if self.workers.is_empty() {
            f(0);
            return;
        }
        let _serial = self.running.lock().unwrap_or_else(|e| e.into_inner());
        let shared = &*self.shared;
        let job: &(dyn Fn(usize) + Sync + '_) = &f;
        // SAFETY: the erased reference is only used by workers until `done` reaches the worker
        // count, and this function waits for that (also when part 0 panics, through `Wait`).
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
                let mut spins = 0u32;
                while self.0.done.load(Ordering::Acquire) < self.1 {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(1024) {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        {
            let _wait = Wait(shared, self.workers.len());
            f(0);
        }
        if shared.panicked.swap(false, Ordering::SeqCst) {
            panic!("a worker thread of the nextok thread pool panicked");
        }
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
                break;
            }
            if shared.shutdown.load(Ordering::SeqCst) {
                return;
            }
            if spins < SPIN_LIMIT {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
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
        shared.done.fetch_add(1, Ordering::Release);
    }
}
