//! How the kernels run a product: [`KernelOptions`] (plain settings, part of a model's load
//! options) and [`Kernels`], the handle they resolve to (the activation format and a thread
//! pool), which a model holds and passes to every product.

use std::fmt;
use std::sync::Arc;

use crate::ActivationFormat;
use crate::pool::{self, Pool};

/// The kernels' settings: thread count and activation format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelOptions {
    /// Threads that split a product, the calling thread among them; `None`:
    /// [`default_threads`](crate::default_threads) (`KINDLE_THREADS`, else the physical cores).
    pub threads: Option<usize>,
    /// Activations in the inner products.
    pub activations: ActivationFormat,
}

impl KernelOptions {
    /// `threads` threads, the default activations.
    pub fn threads(threads: usize) -> Self {
        KernelOptions {
            threads: Some(threads),
            ..KernelOptions::default()
        }
    }

    /// The same options with activations in `activations`.
    pub fn with_activations(self, activations: ActivationFormat) -> Self {
        KernelOptions {
            activations,
            ..self
        }
    }
}

/// The kernels as one model runs them: an activation format and a thread pool. Cheap to
/// clone; handles with the same thread count share one pool (its workers end with the last
/// handle), so models loaded with different options run side by side without a process-wide
/// setting.
///
/// ```
/// use kindle_kernels::{ActivationFormat, KernelOptions, Kernels};
///
/// let kernels = Kernels::new(KernelOptions::threads(2).with_activations(ActivationFormat::Int8));
/// assert_eq!((kernels.threads(), kernels.activations()), (2, ActivationFormat::Int8));
/// assert_eq!(kernels.with_threads(1).threads(), 1);
/// ```
#[derive(Clone)]
pub struct Kernels {
    activations: ActivationFormat,
    pool: Arc<Pool>,
}

impl Kernels {
    /// The handle for `options` (a thread count of 0 counts as 1).
    pub fn new(options: KernelOptions) -> Self {
        let threads = options.threads.unwrap_or_else(pool::default_threads);
        Kernels {
            activations: options.activations,
            pool: pool::shared(threads),
        }
    }

    /// The activation format of [`QuantMatrix::matmul`](crate::QuantMatrix::matmul).
    pub fn activations(&self) -> ActivationFormat {
        self.activations
    }

    /// Threads a product is split over, the caller included.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// The options this handle was made from, with the thread count resolved.
    pub fn options(&self) -> KernelOptions {
        KernelOptions {
            threads: Some(self.threads()),
            activations: self.activations,
        }
    }

    /// The same activations on `threads` threads.
    pub fn with_threads(&self, threads: usize) -> Self {
        Kernels::new(KernelOptions {
            threads: Some(threads),
            activations: self.activations,
        })
    }

    /// The same threads with activations in `activations`.
    pub fn with_activations(&self, activations: ActivationFormat) -> Self {
        Kernels {
            activations,
            pool: Arc::clone(&self.pool),
        }
    }

    /// Run `task(i)` for every `i` in `0..n_tasks` on this handle's threads (the caller
    /// among them), returning when all have finished. Tasks are handed out one at a time in
    /// index order to whichever thread is free, so put the longest first. For work beside the
    /// products that should obey the same thread count (a model's attention, for one).
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use kindle_kernels::{KernelOptions, Kernels};
    ///
    /// let kernels = Kernels::new(KernelOptions::threads(2));
    /// let sum = AtomicUsize::new(0);
    /// kernels.parallel_for(100, &|i| {
    ///     sum.fetch_add(i, Ordering::Relaxed);
    /// });
    /// assert_eq!(sum.into_inner(), 4950);
    /// ```
    pub fn parallel_for(&self, n_tasks: usize, task: &(dyn Fn(usize) + Sync)) {
        self.pool.run(n_tasks, task);
    }

    /// The thread pool.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }
}

impl Default for Kernels {
    /// [`KernelOptions::default`]: the default thread count, `f32` activations.
    fn default() -> Self {
        Kernels::new(KernelOptions::default())
    }
}

impl fmt::Debug for Kernels {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kernels")
            .field("activations", &self.activations)
            .field("threads", &self.threads())
            .finish()
    }
}
