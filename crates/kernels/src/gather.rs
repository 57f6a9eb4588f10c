//! Gathering the kernels' threads onto one core when the machine is oversubscribed.
//!
//! A decode step is a chain of fork-join products that the calling thread drives. Beside
//! other busy processes on a small machine, the scheduler often places each of a pool's
//! threads on a core shared with one of them: the caller is then off its core about half of
//! the time, and nothing progresses while it waits its turn (two-thread SmolLM2 decode beside
//! two busy loops on a 2-vCPU VM: 0.28-0.30x of its quiet speed in such runs, 0.50-0.57x in
//! those where both loops happened to share a core). When the caller's waits on the run queue
//! show that the process gets about one core's worth of time anyway, every kernel thread of
//! the process is pinned to the caller's core: the scheduler's load balancing then moves the
//! competing threads to the other cores (within 0.1-3 s), and the caller runs undisturbed,
//! its workers taking tasks only while it waits, so the step runs near its one-thread speed
//! (six alternating rounds, quiet 216-235 tok/s: 67-111 tok/s beside the two loops before,
//! median 99; 88-123 with the gathering, median 118). When another core of the caller's
//! affinity shows idle time again, the threads get their own affinity back.
//!
//! Off unless the program asks for it ([`set_gathering`]: the `kindle` binary does, a library
//! user decides, since the calling thread is pinned too and gets its own affinity back only
//! at its next product after the release). `KINDLE_GATHER=0` or `1` overrides both. Linux
//! only; elsewhere [`observe`] and [`follow`] do nothing.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Whether [`observe`] may gather (see [`set_gathering`]).
static GATHERING: AtomicBool = AtomicBool::new(false);

/// Let the kernels gather their threads onto the calling thread's core while the machine is
/// oversubscribed, and give them back their own affinity when another core idles again
/// (Linux; see `gather.rs` for what it measures). Off by default; `KINDLE_GATHER=0` or `1`
/// overrides the setting. Results never depend on it, only speed under load.
pub fn set_gathering(on: bool) {
    GATHERING.store(on, Ordering::Relaxed);
}

/// Gatherings so far in this process (see [`gatherings`]).
static GATHERINGS: AtomicUsize = AtomicUsize::new(0);

/// How many times the kernels' threads have been gathered onto one core in this process
/// (0 where [`set_gathering`] is off or the machine was never oversubscribed): for a
/// program's report of why it ran as it did.
pub fn gatherings() -> usize {
    GATHERINGS.load(Ordering::Relaxed)
}

/// [`set_gathering`]'s setting, or `KINDLE_GATHER` where it is set.
fn gathering() -> bool {
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced =
        FORCED.get_or_init(
            || match std::env::var("KINDLE_GATHER").as_deref().map(str::trim) {
                Ok("0") => Some(false),
                Ok("1") => Some(true),
                _ => None,
            },
        );
    forced.unwrap_or_else(|| GATHERING.load(Ordering::Relaxed))
}

/// Shortest stretch of the caller's time a decision is made on: short, since the scheduler
/// takes a while to move the competing threads once the pool's are gathered (against 100 ms,
/// six alternating rounds of two-thread decode beside two busy loops: 0.39-0.53x of the quiet
/// speed, five rounds at 0.50x or more, against 0.45-0.54x, four).
const WINDOW: Duration = Duration::from_millis(50);
/// Of which the caller must have been running or runnable this long (else the window goes
/// on: a caller that mostly sleeps, a server between requests, tells nothing).
const MIN_BUSY: Duration = Duration::from_millis(25);
/// A window this old with too little busy time is started afresh.
const STALE: Duration = Duration::from_secs(2);
/// The process's threads get about `threads * (1 - waited)` cores; below this many, they are
/// gathered onto one (for two threads: waiting more than a quarter of the time).
const GATHER_BELOW_CORES: f64 = 1.5;
/// Idle fraction of another core of the original affinity that ends a gathering.
const SPARE_IDLE: f64 = 0.25;
/// A gathering that finds spare time on another core sooner than this was the process's own
/// threads competing with one another (they all moved over): do not gather again for
/// [`HOLD_OFF`].
const QUICK_RELEASE: Duration = Duration::from_secs(1);
/// How long not to gather again after a gathering that did not help.
const HOLD_OFF: Duration = Duration::from_secs(30);
/// Windows in a row still waiting on the gathered core before giving up on it (more busy
/// threads than the other cores take).
const STUCK_WINDOWS: u32 = 60;

/// What the caller's policy asks for after a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    None,
    Gather,
    Release,
}

/// The decisions of one calling thread, apart from how they are measured and carried out.
#[derive(Debug, Default)]
struct Policy {
    /// When this thread gathered the threads (while they are gathered).
    gathered_at: Option<Instant>,
    /// No gathering before this.
    hold_off_until: Option<Instant>,
    /// Windows in a row that waited on the gathered core.
    stuck: u32,
}

impl Policy {
    /// A window ended at `now`: the caller waited on the run queue for `waited` of its busy
    /// time; while gathered, `spare` is the largest idle fraction of the other cores.
    fn on_window(&mut self, now: Instant, threads: usize, waited: f64, spare: f64) -> Action {
        let oversubscribed = threads >= 2 && threads as f64 * (1.0 - waited) < GATHER_BELOW_CORES;
        match self.gathered_at {
            None => {
                if !oversubscribed || self.hold_off_until.is_some_and(|t| now < t) {
                    return Action::None;
                }
                self.gathered_at = Some(now);
                self.stuck = 0;
                Action::Gather
            }
            Some(at) => {
                if spare >= SPARE_IDLE {
                    if now.duration_since(at) < QUICK_RELEASE {
                        self.hold_off_until = Some(now + HOLD_OFF);
                    }
                    self.gathered_at = None;
                    return Action::Release;
                }
                self.stuck = if oversubscribed { self.stuck + 1 } else { 0 };
                if self.stuck >= STUCK_WINDOWS {
                    self.hold_off_until = Some(now + HOLD_OFF);
                    self.gathered_at = None;
                    return Action::Release;
                }
                Action::None
            }
        }
    }

    /// Another thread released the gathering this one made.
    fn forget(&mut self) {
        self.gathered_at = None;
        self.stuck = 0;
    }
}

/// `(run time, run-queue wait)` in nanoseconds from `/proc/thread-self/schedstat`.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_ascii_whitespace().map(|f| f.parse::<u64>().ok());
    Some((fields.next()??, fields.next()??))
}

/// One CPU's line of `/proc/stat`: its number, idle ticks (idle and iowait) and all ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CpuTimes {
    cpu: usize,
    idle: u64,
    total: u64,
}

/// The per-CPU lines of `/proc/stat` (`cpuN user nice system idle iowait irq softirq
/// steal ...`; guest time is already in user time).
fn parse_cpu_times(text: &str) -> Vec<CpuTimes> {
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cpu")?;
            let (id, ticks) = rest.split_once(' ')?;
            let cpu = id.parse().ok()?;
            let ticks: Vec<u64> = ticks
                .split_ascii_whitespace()
                .take(8)
                .map(|t| t.parse().ok())
                .collect::<Option<_>>()?;
            (ticks.len() >= 5).then(|| CpuTimes {
                cpu,
                idle: ticks[3] + ticks[4],
                total: ticks.iter().sum(),
            })
        })
        .collect()
}

/// The largest idle fraction among `others` between two readings (0 where a CPU has no
/// ticks in between).
fn spare_idle(before: &[CpuTimes], after: &[CpuTimes], others: &[usize]) -> f64 {
    others
        .iter()
        .filter_map(|&cpu| {
            let a = before.iter().find(|t| t.cpu == cpu)?;
            let b = after.iter().find(|t| t.cpu == cpu)?;
            let total = b.total.checked_sub(a.total)?;
            let idle = b.idle.checked_sub(a.idle)?;
            (total > 0).then(|| idle as f64 / total as f64)
        })
        .fold(0.0, f64::max)
}

#[cfg(target_os = "linux")]
mod imp {
    use std::cell::RefCell;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;
    use std::time::Instant;

    use crate::gather::{
        Action, CpuTimes, MIN_BUSY, Policy, STALE, WINDOW, parse_cpu_times, parse_schedstat,
        spare_idle,
    };

    /// `(epoch << 32) | (cpu + 1)`, with 0 in the low half while the threads keep their own
    /// affinity. Every kernel thread follows it ([`follow`]).
    static PLACEMENT: AtomicU64 = AtomicU64::new(0);

    /// The latest hold-off of any calling thread ([`Policy::hold_off_until`]), in
    /// milliseconds after [`base`]: a process whose calls move between threads (a test
    /// harness, a server) holds off as a whole.
    static HOLD_OFF_MS: AtomicU64 = AtomicU64::new(0);

    fn base() -> Instant {
        static BASE: OnceLock<Instant> = OnceLock::new();
        *BASE.get_or_init(Instant::now)
    }

    /// What one thread has applied of [`PLACEMENT`].
    struct Applied {
        epoch: u64,
        /// The thread's own affinity while it is pinned.
        original: Option<libc::cpu_set_t>,
    }

    /// The measurements of one calling thread.
    struct Monitor {
        start: Instant,
        /// `(run time, run-queue wait)` at `start`.
        sched: Option<(u64, u64)>,
        policy: Policy,
        /// While this thread's gathering holds: the other CPUs of its affinity, and their
        /// times at `start`.
        others: Vec<usize>,
        times: Vec<CpuTimes>,
    }

    thread_local! {
        static APPLIED: RefCell<Applied> = const {
            RefCell::new(Applied { epoch: 0, original: None })
        };
        static MONITOR: RefCell<Option<Monitor>> = const { RefCell::new(None) };
    }

    fn affinity() -> Option<libc::cpu_set_t> {
        // SAFETY: `set` is a plain bit set the call fills; 0 is the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let ok = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
            (ok == 0).then_some(set)
        }
    }

    fn set_affinity(set: &libc::cpu_set_t) -> bool {
        // SAFETY: as above; a set the kernel refuses leaves the affinity as it was.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) == 0 }
    }

    fn cpus_of(set: &libc::cpu_set_t) -> Vec<usize> {
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below the set's size.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, set) })
            .collect()
    }

    /// Pin this thread to `cpu` (keeping its own affinity to restore), or restore it.
    pub(super) fn apply(cpu: Option<usize>) {
        APPLIED.with(|a| {
            let mut a = a.borrow_mut();
            match cpu {
                Some(cpu) => {
                    if a.original.is_none() {
                        a.original = affinity();
                    }
                    // Only within the thread's own affinity.
                    if a.original
                        .as_ref()
                        .is_some_and(|o| cpus_of(o).contains(&cpu))
                    {
                        // SAFETY: a plain bit set, `cpu` below its size.
                        let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                        // SAFETY: as above.
                        unsafe { libc::CPU_SET(cpu, &mut one) };
                        set_affinity(&one);
                    }
                }
                None => {
                    if let Some(original) = a.original.take() {
                        set_affinity(&original);
                    }
                }
            }
        });
    }

    /// Bring this thread's affinity in line with the placement: one atomic load when it has
    /// not changed. True while the threads are gathered.
    pub(crate) fn follow() -> bool {
        let state = PLACEMENT.load(Ordering::Acquire);
        let epoch = state >> 32;
        let changed = APPLIED.with(|a| {
            let mut a = a.borrow_mut();
            let changed = a.epoch != epoch;
            a.epoch = epoch;
            changed
        });
        if changed {
            apply((state as u32).checked_sub(1).map(|c| c as usize));
        }
        state as u32 != 0
    }

    /// Publish a new placement (`None`: every thread its own affinity).
    fn publish(cpu: Option<usize>) {
        let low = cpu.map_or(0, |c| c as u64 + 1) & 0xffff_ffff;
        let _ = PLACEMENT.fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
            Some(((s >> 32).wrapping_add(1) << 32) | low)
        });
    }

    fn read(path: &str) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    /// Called by a thread about to run a product on a pool of `threads`: follows the
    /// placement and, once a window, measures the thread's waits and acts on them.
    pub(crate) fn observe(threads: usize) {
        follow();
        if !crate::gather::gathering() {
            return;
        }
        let now = Instant::now();
        MONITOR.with(|m| {
            let mut m = m.borrow_mut();
            let monitor = m.get_or_insert_with(|| Monitor {
                start: now,
                sched: None,
                policy: Policy::default(),
                others: Vec::new(),
                times: Vec::new(),
            });
            if now.duration_since(monitor.start) < WINDOW {
                return;
            }
            let Some(sched) = read("/proc/thread-self/schedstat").and_then(|t| parse_schedstat(&t))
            else {
                return;
            };
            let Some((run0, wait0)) = monitor.sched else {
                monitor.start = now;
                monitor.sched = Some(sched);
                return;
            };
            let (run, wait) = (sched.0.saturating_sub(run0), sched.1.saturating_sub(wait0));
            let busy = run + wait;
            if busy < MIN_BUSY.as_nanos() as u64 {
                if now.duration_since(monitor.start) > STALE {
                    monitor.start = now;
                    monitor.sched = Some(sched);
                }
                return;
            }
            let gathered = PLACEMENT.load(Ordering::Acquire) as u32 != 0;
            if monitor.policy.gathered_at.is_some() && !gathered {
                monitor.policy.forget();
            }
            let times = if monitor.policy.gathered_at.is_some() {
                read("/proc/stat").map_or_else(Vec::new, |t| parse_cpu_times(&t))
            } else {
                Vec::new()
            };
            let spare = spare_idle(&monitor.times, &times, &monitor.others);
            let waited = wait as f64 / busy as f64;
            let held = base() + Duration::from_millis(HOLD_OFF_MS.load(Ordering::Relaxed));
            let policy = &mut monitor.policy;
            policy.hold_off_until = policy.hold_off_until.max(Some(held));
            let action = policy.on_window(now, threads, waited, spare);
            if let Some(until) = policy.hold_off_until.filter(|&t| t > held) {
                let ms = until.duration_since(base()).as_millis() as u64;
                HOLD_OFF_MS.fetch_max(ms, Ordering::Relaxed);
            }
            match action {
                Action::Gather => {
                    // SAFETY: no arguments; -1 on failure.
                    let cpu = unsafe { libc::sched_getcpu() };
                    let own = affinity().map(|s| cpus_of(&s)).unwrap_or_default();
                    let others: Vec<usize> =
                        own.iter().copied().filter(|&c| c as i32 != cpu).collect();
                    if cpu < 0 || others.is_empty() || gathered {
                        monitor.policy.forget();
                    } else {
                        monitor.others = others;
                        monitor.times =
                            read("/proc/stat").map_or_else(Vec::new, |t| parse_cpu_times(&t));
                        publish(Some(cpu as usize));
                        crate::gather::GATHERINGS.fetch_add(1, Ordering::Relaxed);
                        follow();
                    }
                }
                Action::Release => {
                    monitor.others.clear();
                    monitor.times.clear();
                    publish(None);
                    follow();
                }
                Action::None => monitor.times = times,
            }
            monitor.start = now;
            monitor.sched = Some(sched);
        });
    }
}

#[cfg(target_os = "linux")]
pub(crate) use imp::{follow, observe};

/// Does nothing off Linux (never gathered).
#[cfg(not(target_os = "linux"))]
pub(crate) fn follow() -> bool {
    false
}

/// Does nothing off Linux.
#[cfg(not(target_os = "linux"))]
pub(crate) fn observe(_threads: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gathers_two_threads_that_wait_a_quarter_of_their_time_and_no_others() {
        let now = Instant::now();
        for (threads, waited, gather) in [
            (2, 0.02, false),
            (2, 0.2, false),
            (2, 0.3, true),
            (2, 0.5, true),
            (1, 0.6, false),
            (4, 0.5, false),
            (8, 0.9, true),
        ] {
            let mut p = Policy::default();
            let want = if gather { Action::Gather } else { Action::None };
            assert_eq!(
                p.on_window(now, threads, waited, 0.0),
                want,
                "{threads} {waited}"
            );
        }
    }

    #[test]
    fn a_gathering_holds_while_the_other_cores_are_busy_and_ends_when_one_idles() {
        let t0 = Instant::now();
        let mut p = Policy::default();
        assert_eq!(p.on_window(t0, 2, 0.5, 0.0), Action::Gather);
        for i in 1..20 {
            let now = t0 + Duration::from_millis(100 * i);
            assert_eq!(p.on_window(now, 2, 0.01, 0.0), Action::None);
        }
        let later = t0 + Duration::from_secs(3);
        assert_eq!(p.on_window(later, 2, 0.0, 0.6), Action::Release);
        // Released after a useful while: free to gather again at once.
        assert_eq!(p.on_window(later + WINDOW, 2, 0.5, 0.0), Action::Gather);
    }

    #[test]
    fn a_gathering_that_only_moved_the_process_onto_one_core_is_not_repeated_soon() {
        let t0 = Instant::now();
        let mut p = Policy::default();
        assert_eq!(p.on_window(t0, 2, 0.5, 0.0), Action::Gather);
        // The other core went idle at once: the competition was the process's own threads.
        let t1 = t0 + Duration::from_millis(200);
        assert_eq!(p.on_window(t1, 2, 0.1, 0.9), Action::Release);
        assert_eq!(p.on_window(t1 + WINDOW, 2, 0.5, 0.0), Action::None);
        assert_eq!(p.on_window(t1 + HOLD_OFF, 2, 0.5, 0.0), Action::Gather);
    }

    #[test]
    fn a_gathering_that_still_waits_is_given_up() {
        let t0 = Instant::now();
        let mut p = Policy::default();
        assert_eq!(p.on_window(t0, 2, 0.5, 0.0), Action::Gather);
        let mut released = None;
        for i in 1..=STUCK_WINDOWS {
            let now = t0 + WINDOW * i;
            if p.on_window(now, 2, 0.6, 0.0) == Action::Release {
                released = Some(i);
                break;
            }
        }
        assert_eq!(released, Some(STUCK_WINDOWS));
        let after = t0 + WINDOW * (STUCK_WINDOWS + 1);
        assert_eq!(p.on_window(after, 2, 0.6, 0.0), Action::None);
    }

    #[test]
    fn reads_schedstat_and_the_per_cpu_times() {
        assert_eq!(parse_schedstat("35395 2446398 3\n"), Some((35395, 2446398)));
        assert_eq!(parse_schedstat("35395\n"), None);
        assert_eq!(parse_schedstat("x 1 2"), None);
        let stat = "cpu  6759884 1280 643066 4357509 17072 0 2686 10112 0 0\n\
                    cpu0 100 0 50 800 50 0 0 0 0 0\n\
                    cpu1 900 0 100 0 0 0 0 0 0 0\n\
                    intr 1 2 3\nprocs_running 4\n";
        let times = parse_cpu_times(stat);
        assert_eq!(
            times,
            [
                CpuTimes {
                    cpu: 0,
                    idle: 850,
                    total: 1000
                },
                CpuTimes {
                    cpu: 1,
                    idle: 0,
                    total: 1000
                }
            ]
        );
        let later = [
            CpuTimes {
                cpu: 0,
                idle: 850,
                total: 1100,
            },
            CpuTimes {
                cpu: 1,
                idle: 80,
                total: 1100,
            },
        ];
        assert_eq!(spare_idle(&times, &later, &[1]), 0.8);
        assert_eq!(spare_idle(&times, &later, &[0]), 0.0);
        assert_eq!(spare_idle(&times, &later, &[0, 1]), 0.8);
        // A CPU missing from a reading counts as busy.
        assert_eq!(spare_idle(&times, &later, &[7]), 0.0);
        assert_eq!(spare_idle(&[], &later, &[1]), 0.0);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn pinning_a_thread_and_releasing_it_gives_back_its_own_affinity() {
        std::thread::spawn(|| {
            let mask = || {
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                let size = std::mem::size_of::<libc::cpu_set_t>();
                assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut set) }, 0);
                (0..libc::CPU_SETSIZE as usize)
                    .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
                    .collect::<Vec<_>>()
            };
            let own = mask();
            let cpu = *own.last().expect("a thread runs on some CPU");
            imp::apply(Some(cpu));
            assert_eq!(mask(), [cpu]);
            // A second pin keeps the first original.
            imp::apply(Some(own[0]));
            assert_eq!(mask(), [own[0]]);
            imp::apply(None);
            assert_eq!(mask(), own);
            // A CPU outside the thread's affinity is not taken.
            imp::apply(Some(4095));
            assert_eq!(mask(), own);
            imp::apply(None);
            assert_eq!(mask(), own);
        })
        .join()
        .unwrap();
    }
}
