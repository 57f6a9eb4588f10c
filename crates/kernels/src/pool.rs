//! A small persistent thread pool for the kernels.
//!
//! A decode step runs a couple of hundred products of 5-100 µs each, so waking threads must
//! cost far less than that: workers spin on the job counter for a while after each job (as
//! llama.cpp's do) and only then park on a condition variable. Tasks are claimed one at a
//! time by whichever thread gets there first, and the caller waits only for tasks that were
//! claimed: on a machine shared with other processes a descheduled worker then costs at
//! most the task it holds, not a scheduler time slice per product. Where other processes
//! leave the pool about one core anyway, its threads can gather onto the caller's core
//! (`gather.rs`, asked for by [`crate::set_gathering`]).

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::gather;

/// How long an idle worker spins before parking: longer than the serial work between two
/// products of a pass, short enough that a worker waiting for the next token (or on a
/// machine with more runnable threads than cores) soon stops taking CPU time from the
/// threads that have work. Measured against 2 ms (2-thread decode, alternating, six rounds):
/// the same when the machine is quiet, 64 against 55 tok/s on average beside two busy loops.
const SPIN: Duration = Duration::from_micros(100);

/// How long an idle worker spins (yielding every few spins) while the threads are gathered
/// onto one core (`gather.rs`): a worker kept runnable beside the caller holds that core's
/// share of the machine for the process, so the scheduler is less apt to move a competing
/// thread back onto it, and costs the caller little since it yields. Two-thread decode beside
/// two busy loops, eight alternating runs each: parked after 100 us 60-122 tok/s, after 2 ms
/// 87-118, never 94-123 (medians 110-113); never parking would spin while the process idles.
const GATHERED_SPIN: Duration = Duration::from_millis(2);

/// A job: called once with each task index in `0..n_tasks`.
type Job<'a> = dyn Fn(usize) + Sync + 'a;

/// The job number in the high 32 bits of [`Shared::state`], the next task index in the low.
const INDEX_BITS: u32 = 32;
const INDEX_MASK: u64 = (1 << INDEX_BITS) - 1;

struct Shared {
    /// `(job number << 32) | next task index`: a task is claimed by incrementing the index
    /// of the job number the claimer saw, so a worker that wakes late can never claim a task
    /// of a later job, and the caller never waits for a worker that has not started a task.
    state: AtomicU64,
    /// The current job, valid while some of its tasks are unfinished (lifetime erased; the
    /// caller waits).
    job: UnsafeCell<Option<*const Job<'static>>>,
    /// `(job number << 32) | number of tasks` of the current job: a claimer checks its index
    /// against the count of the job number it saw, so a worker still looping over a finished
    /// job can never claim (and run, and count as done) a task of the next one, whatever
    /// their task counts.
    tasks: AtomicU64,
    /// Tasks of the current job finished.
    done: AtomicUsize,
    /// Workers parked (or about to park) on `wake`: a new job takes the lock and wakes them
    /// only when there are some, so the products of a pass whose workers are still spinning
    /// cost no system call (a 128-token 2-thread SmolLM2 decode made 45,600 `futex` calls
    /// with a wake per product, 432 without).
    parked: AtomicUsize,
    shutdown: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread holding `Pool::run_lock`, before it publishes a
// new job number and after every task of the previous job has finished; it is read only by a
// thread that has claimed an unfinished task of that job, which the writer waits for.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw job pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

/// A fixed set of worker threads plus the calling thread (see [`shared`]).
pub(crate) struct Pool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    run_lock: Mutex<()>,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let threads = threads.min(MAX_THREADS);
        let shared = Arc::new(Shared {
            state: AtomicU64::new(0),
            job: UnsafeCell::new(None),
            tasks: AtomicU64::new(0),
            done: AtomicUsize::new(0),
            parked: AtomicUsize::new(0),
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

    /// Threads, the caller included.
    pub(crate) fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Run `job(i)` for every `i` in `0..n_tasks`, returning when all are done.
    pub(crate) fn run(&self, n_tasks: usize, job: &Job<'_>) {
        if self.workers.is_empty() {
            gather::follow();
        } else {
            gather::observe(self.threads());
        }
        if n_tasks <= 1 || self.workers.is_empty() || n_tasks as u64 > INDEX_MASK {
            (0..n_tasks).for_each(job);
            return;
        }
        let _guard = self.run_lock.lock().unwrap_or_else(|e| e.into_inner());
        let s = &*self.shared;
        // SAFETY: see `Shared`: every task of the previous job has finished, so no thread
        // reads `job` now, and this call waits below until every task of this one has
        // finished, so the erased lifetime is never exceeded.
        unsafe {
            let erased: *const Job<'static> = std::mem::transmute::<&Job<'_>, &Job<'static>>(job);
            *s.job.get() = Some(erased);
        }
        s.done.store(0, Ordering::Relaxed);
        let number = (s.state.load(Ordering::Relaxed) >> INDEX_BITS).wrapping_add(1);
        s.tasks
            .store((number << INDEX_BITS) | n_tasks as u64, Ordering::Release);
        // Sequentially consistent with the worker's count of itself as parked and its check of
        // the state: either it sees this job, or this sees it parked and wakes it.
        s.state.store(number << INDEX_BITS, Ordering::SeqCst);
        if s.parked.load(Ordering::SeqCst) > 0 {
            let _l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        take_tasks(s, number);
        // Spin briefly, then yield: on an oversubscribed machine the worker we wait for may
        // need this very core. Only tasks already claimed are waited for.
        let mut spins = 0u32;
        while s.done.load(Ordering::Acquire) != n_tasks {
            spins = spins.saturating_add(1);
            if spins < 2048 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// Claim and run tasks of job `number` until none are left (or a later job has started).
fn take_tasks(s: &Shared, number: u64) {
    let mut state = s.state.load(Ordering::Acquire);
    loop {
        if state >> INDEX_BITS != number & (u64::MAX >> INDEX_BITS) {
            return;
        }
        let index = state & INDEX_MASK;
        let tasks = s.tasks.load(Ordering::Acquire);
        if tasks >> INDEX_BITS != state >> INDEX_BITS || index >= tasks & INDEX_MASK {
            // All claimed, or `state` is of a job that has finished (its count replaced).
            return;
        }
        let index = index as usize;
        match s
            .state
            .compare_exchange_weak(state, state + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                // SAFETY: task `index` of this job is claimed and unfinished, so the job is
                // published (by the Release store this Acquire saw) and alive.
                if let Some(job) = unsafe { (*s.job.get()).map(|p| &*p) } {
                    job(index);
                }
                s.done.fetch_add(1, Ordering::Release);
                state = s.state.load(Ordering::Acquire);
            }
            Err(now) => state = now,
        }
    }
}

fn worker(s: &Shared) {
    let mut seen = 0u64;
    loop {
        // Spin, then park, until a new job number appears.
        let mut gathered = gather::follow();
        let start = Instant::now();
        let mut spins = 0u32;
        let number = loop {
            let n = s.state.load(Ordering::Acquire) >> INDEX_BITS;
            if n != seen {
                break n;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(if gathered { 16 } else { 256 }) {
                // Give the core away now and then in case another thread is runnable.
                std::thread::yield_now();
                gathered = gather::follow();
            }
            let spin = if gathered { GATHERED_SPIN } else { SPIN };
            if spins.is_multiple_of(1024) && start.elapsed() > spin {
                let mut l = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                // Counted before the state is checked (see `Pool::run`); the check and the
                // wait hold the lock, which a waker takes before it notifies.
                s.parked.fetch_add(1, Ordering::SeqCst);
                while s.state.load(Ordering::SeqCst) >> INDEX_BITS == seen {
                    l = s.wake.wait(l).unwrap_or_else(|e| e.into_inner());
                }
                s.parked.fetch_sub(1, Ordering::SeqCst);
                gathered = gather::follow();
            }
            std::hint::spin_loop();
        };
        seen = number;
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        take_tasks(s, number);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        // A new job number with no tasks wakes every worker, which then sees the flag.
        let number = (self.shared.state.load(Ordering::Relaxed) >> INDEX_BITS).wrapping_add(1);
        self.shared
            .tasks
            .store(number << INDEX_BITS, Ordering::Release);
        self.shared
            .state
            .store(number << INDEX_BITS, Ordering::Release);
        {
            let _l = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A pool of `threads` threads (at least 1), shared with every other live handle asking for
/// the same number: models loaded with the same thread count use one set of workers, and a
/// pool's workers end when its last handle is dropped.
pub(crate) fn shared(threads: usize) -> Arc<Pool> {
    /// Each live pool by its thread count.
    type Pools = Mutex<Vec<(usize, Weak<Pool>)>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let threads = threads.max(1);
    let mut pools = POOLS
        .get_or_init(|| Mutex::new(Vec::new()))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    pools.retain(|(_, pool)| pool.strong_count() > 0);
    if let Some(pool) = pools
        .iter()
        .filter(|&&(n, _)| n == threads)
        .find_map(|(_, pool)| pool.upgrade())
    {
        return pool;
    }
    let pool = Arc::new(Pool::new(threads));
    pools.push((threads, Arc::downgrade(&pool)));
    pool
}

/// The most kernel threads a pool runs (llama.cpp's `GGML_MAX_N_THREADS` too): a larger
/// count is refused where it is given (`-t`), and capped here.
pub const MAX_THREADS: usize = 512;

/// `KINDLE_THREADS` when set (at most [`MAX_THREADS`]), else the physical cores (distinct
/// `(package, core)` pairs in Linux's sysfs topology), else the available parallelism.
pub fn default_threads() -> usize {
    if let Some(n) = std::env::var("KINDLE_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return n.min(MAX_THREADS);
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

/// A raw pointer handed to the pool's threads, each writing a disjoint range.
#[derive(Clone, Copy)]
pub(crate) struct SyncPtr(pub(crate) *mut f32);

impl SyncPtr {
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }
}

// SAFETY: used only to write disjoint ranges from the pool's threads while the owner waits.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}
