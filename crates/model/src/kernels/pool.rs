//! A small persistent thread pool for the kernels.
//!
//! A decode step runs a couple of hundred products of 20-100 µs each, so waking threads must
//! cost far less than that: workers spin on an epoch counter for a while after each job (as
//! llama.cpp's do) and only then park on a condition variable.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before parking.
const SPIN: Duration = Duration::from_millis(2);

/// A job: called once with each task index in `0..n_tasks`.
type Job<'a> = dyn Fn(usize) + Sync + 'a;

struct Shared {
    /// Bumped once per job (and at shutdown).
    epoch: AtomicU64,
    /// The current job, valid while `pending > 0` (lifetime erased; the caller waits).
    job: UnsafeCell<Option<*const Job<'static>>>,
    /// Number of tasks in the current job.
    n_tasks: AtomicUsize,
    /// Next task index to hand out.
    next: AtomicUsize,
    /// Workers that have not yet finished the current job.
    pending: AtomicUsize,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread holding `Pool::run_lock` while no worker reads
// it (all have finished the previous job), and read by workers only between the epoch bump
// that publishes it and their decrement of `pending`.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw job pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// A fixed set of worker threads plus the calling thread.
struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let shared = Arc::new(Shared {
            epoch: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            n_tasks: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            pending: AtomicUsize::new(0),
            shutdown: AtomicBool::new(false),
            lock: Mutex::new(()),
            wake: Condvar::new(),
        });
        let workers = (1..threads)
            .filter_map(|i| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("kindle-kernel-{i}"))
                    .spawn(move || worker(&shared))
                    .ok()
            })
            .collect();
        Pool {
            shared,
            workers,
            run_lock: Mutex::new(()),
        }
    }

    fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    fn run(&self, n_tasks: usize, job: &Job<'_>) {
        if n_tasks <= 1 || self.workers.is_empty() {
            (0..n_tasks).for_each(job);
            return;
        }
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: see `Shared`: no worker reads `job` now, and this call waits below until
        // every worker is done with it, so the erased lifetime is never exceeded.
        unsafe {
            let erased: *const Job<'static> = std::mem::transmute::<&Job<'_>, &Job<'static>>(job);
            *s.job.get() = Some(erased);
        }
        s.n_tasks.store(n_tasks, Ordering::Relaxed);
        s.next.store(0, Ordering::Relaxed);
        s.pending.store(self.workers.len(), Ordering::Relaxed);
        s.epoch.fetch_add(1, Ordering::Release);
        {
            let _l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        take_tasks(s, job);
        // Spin briefly, then yield: on an oversubscribed machine the worker we wait for may
        // need this very core.
        let mut spins = 0u32;
        while s.pending.load(Ordering::Acquire) != 0 {
            spins = spins.saturating_add(1);
            if spins < 2048 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Claim and run task indices until none are left.
fn take_tasks(s: &Shared, job: &Job<'_>) {
    let n = s.n_tasks.load(Ordering::Relaxed);
    loop {
        let i = s.next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            break;
        }
        job(i);
    }
}

fn worker(s: &Shared) {
    let mut seen = 0u64;
    loop {
        // Spin, then park, until the epoch moves.
        let start = Instant::now();
        let mut spins = 0u32;
        let epoch = loop {
            let e = s.epoch.load(Ordering::Acquire);
            if e != seen {
                break e;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(256) {
                // Give the core away now and then in case another thread is runnable.
                std::thread::yield_now();
            }
            if spins.is_multiple_of(1024) && start.elapsed() > SPIN {
                let mut l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    let e = s.epoch.load(Ordering::Acquire);
                    if e != seen {
                        break;
                    }
                    l = s.wake.wait(l).unwrap_or_else(|e| e.into_inner());
                }
            }
            std::hint::spin_loop();
        };
        seen = epoch;
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        // SAFETY: published by the epoch bump; valid until `pending` reaches zero.
        let job = unsafe { (*s.job.get()).map(|p| &*p) };
        if let Some(job) = job {
            take_tasks(s, job);
        }
        s.pending.fetch_sub(1, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.epoch.fetch_add(1, Ordering::Release);
        {
            let _l = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

fn global() -> &'static Mutex<Option<Arc<Pool>>> {
    static POOL: OnceLock<Mutex<Option<Arc<Pool>>>> = OnceLock::new();
    POOL.get_or_init(|| Mutex::new(None))
}

fn current() -> Arc<Pool> {
    let mut pool = global().lock().unwrap_or_else(|e| e.into_inner());
    Arc::clone(pool.get_or_insert_with(|| Arc::new(Pool::new(default_threads()))))
}

/// `KINDLE_THREADS` when set, else the physical cores (distinct `(package, core)` pairs in
/// Linux's sysfs topology), else the available parallelism.
fn default_threads() -> usize {
    if let Some(n) = std::env::var("KINDLE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return n;
    }
    let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
    #[cfg(target_os = "linux")]
    {
        let mut cores = std::collections::HashSet::new();
        for cpu in 0..logical.min(4096) {
            let base = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
            let read = |f: &str| std::fs::read_to_string(format!("{base}/{f}")).ok();
            if let (Some(p), Some(c)) = (read("physical_package_id"), read("core_id")) {
                cores.insert((p.trim().to_string(), c.trim().to_string()));
            }
        }
        if !cores.is_empty() {
            return cores.len().min(logical);
        }
    }
    logical
}

/// Use `n` threads (at least 1; the calling thread is one of them) for the kernels from now on.
pub fn set_num_threads(n: usize) {
    let pool = Arc::new(Pool::new(n.max(1)));
    *global().lock().unwrap_or_else(|e| e.into_inner()) = Some(pool);
}

/// The number of threads the kernels use (by default `KINDLE_THREADS`, else the number of
/// physical cores).
pub fn num_threads() -> usize {
    current().threads()
}

/// Run `job(i)` for every `i` in `0..n_tasks` on the pool, returning when all are done.
pub(crate) fn run(n_tasks: usize, job: &Job<'_>) {
    current().run(n_tasks, job);
}
