//! How the kernels run a product: [`KernelOptions`] (plain settings, part of a model's load
//! options) and [`Kernels`], the handle they resolve to (the activation format and a thread
//! pool), which a model holds and passes to every product.

use std::fmt;
use std::sync::Arc;

use crate::ActivationFormat;
use crate::pool::{self, Pool};

/// The kernels' settings: thread count, activation format, and the arithmetic of products of
/// several rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KernelOptions {
    /// Threads that split a product, the calling thread among them; `None`:
    /// [`default_threads`](crate::default_threads) (`KINDLE_THREADS`, else the physical cores).
    pub threads: Option<usize>,
    /// Activations in the inner products.
    pub activations: ActivationFormat,
    /// How products of several rows choose their arithmetic ([`RowArithmetic`]).
    pub arithmetic: RowArithmetic,
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
    arithmetic: RowArithmetic,
    pool: Arc<Pool>,
}

/// Which arithmetic a product of several activation rows gives its `f32` outputs.
///
/// The decode kernels sum each row a block at a time; the prefill product (`gemm.rs`) runs an
/// FMA chain over the whole row. Each gives a row the same bits whatever the number of rows
/// it runs with, but not the other's. A caller that batches rows of different origins (a
/// server's prompts and decode steps together) picks the arithmetic by what the rows are, so
/// that a row's result does not depend on its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RowArithmetic {
    /// By row count: the prefill product from [`PREFILL_ROWS`](crate::PREFILL_ROWS) rows on
    /// (where this CPU has its micro-kernel), the decode kernels below.
    #[default]
    ByRows,
    /// The prefill product's for any number of rows (a prompt's rows, however split).
    Prefill,
    /// The decode kernels' for any number of rows (decode steps, batched or not).
    Decode,
}

impl Kernels {
    /// The handle for `options` (a thread count of 0 counts as 1).
    pub fn new(options: KernelOptions) -> Self {
        let threads = options.threads.unwrap_or_else(pool::default_threads);
        Kernels {
            activations: options.activations,
            arithmetic: options.arithmetic,
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
            arithmetic: self.arithmetic,
        }
    }

    /// The same activations on `threads` threads.
    pub fn with_threads(&self, threads: usize) -> Self {
        Kernels::new(KernelOptions {
            threads: Some(threads),
            ..self.options()
        })
    }

    /// The same threads with activations in `activations`.
    pub fn with_activations(&self, activations: ActivationFormat) -> Self {
        Kernels {
            activations,
            ..self.clone()
        }
    }

    /// The same threads and activations, products of several rows in `arithmetic`.
    ///
    /// ```
    /// use kindle_kernels::{KernelOptions, Kernels, RowArithmetic};
    ///
    /// let kernels = Kernels::new(KernelOptions::threads(1));
    /// assert_eq!(kernels.arithmetic(), RowArithmetic::ByRows);
    /// let decode = kernels.with_arithmetic(RowArithmetic::Decode);
    /// assert_eq!((decode.arithmetic(), decode.threads()), (RowArithmetic::Decode, 1));
    /// ```
    pub fn with_arithmetic(&self, arithmetic: RowArithmetic) -> Self {
        Kernels {
            arithmetic,
            ..self.clone()
        }
    }

    /// How products of several rows choose their arithmetic.
    pub fn arithmetic(&self) -> RowArithmetic {
        self.arithmetic
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
