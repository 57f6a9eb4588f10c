//! The host executor's attention: causal grouped-query attention of a pass's new rows over
//! each sequence's cache, split over the kernels' threads (a leaf of `host_ops.rs`).
//!
//! Every output has one arithmetic whatever the split, the thread count or the rows computed
//! with it: a row gets the same bits in a decode step and in a prefill.

use kindle_kernels::Kernels;
use kindle_kv_cache::HostKvLayer;

use super::attend_decoded::Decoded;
use super::attend_keys::{
    LANES, score_keys, score_keys_heads, span, weighted_sum, weighted_sum_cols,
};
use super::recipe::Attention;
use super::softmax::softmax;
#[cfg(target_arch = "x86_64")]
use super::{attend_stored, attend_tiles, attend_x86};

/// One sequence's part of a pass's attention: its cache view (the pass's keys and values
/// already written) and its new rows' queries.
pub(super) struct AttendJob<'v, 'c> {
    pub(super) view: &'v HostKvLayer<'c>,
    /// `[rows, h * hd]` queries.
    pub(super) q: &'v [f32],
    /// The pass row of this sequence's first new token (where its output rows start).
    pub(super) out_row: usize,
    /// New tokens of this sequence.
    pub(super) rows: usize,
}

/// Rows of one sequence, of one head, that one attention task computes.
const ATTEND_ROWS: usize = 16;

/// Causal grouped-query attention of every job's new rows into `out` (`[pass rows, q_width]`),
/// split over `kernels`' threads by (sequence, query head, block of [`ATTEND_ROWS`] rows),
/// the longest blocks (the last rows, which see the most positions) handed out first.
pub(super) fn attend_all(
    jobs: &[AttendJob<'_, '_>],
    out: &mut [f32],
    q_width: usize,
    attention: Attention,
    kernels: &Kernels,
) {
    let heads = attention.shape.heads;
    if let [job] = jobs
        && job.rows == 1
        && job.view.len() + 1 - attention.first_seen(job.view.len()) >= split_row_from(job.view)
    {
        let at = job.out_row * q_width;
        return attend_long_row(job, &mut out[at..at + q_width], attention, kernels);
    }
    // (job, head, first row, rows) for every task, in the order they are handed out.
    let mut tasks: Vec<(usize, usize, usize, usize)> = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let blocks = job.rows.div_ceil(ATTEND_ROWS);
        for b in (0..blocks).rev() {
            let first = b * ATTEND_ROWS;
            let n = ATTEND_ROWS.min(job.rows - first);
            tasks.extend((0..heads).map(|head| (j, head, first, n)));
        }
    }
    // Longest first: a task's cost grows with the positions its rows see.
    tasks.sort_by_key(|&(j, _, first, n)| std::cmp::Reverse(jobs[j].view.len() + first + n));
    let out_ptr = SyncPtr(out.as_mut_ptr());
    let decoded: Vec<_> = jobs
        .iter()
        .map(|j| Decoded::of(j.view, j.rows, attention, kernels))
        .collect();
    let run = |task: usize| {
        let (j, head, first, n) = tasks[task];
        let job = &jobs[j];
        let hd = job.view.head_dim();
        // SAFETY: each (row, head) slot of `out` is written by exactly one task, and `out`
        // outlives the job.
        let mut contexts: Vec<&mut [f32]> = (first..first + n)
            .map(|i| unsafe {
                std::slice::from_raw_parts_mut(
                    out_ptr.get().add((job.out_row + i) * q_width + head * hd),
                    hd,
                )
            })
            .collect();
        SCRATCH.with_borrow_mut(|scratch| {
            let decoded = decoded[j].as_ref();
            attend(job, head, first, &mut contexts, attention, decoded, scratch);
        });
    };
    kernels.parallel_for(tasks.len(), &run);
}

/// Positions from which the attention of a pass's only row (a decode step) is split over
/// positions and columns instead of query heads: a long context read once per KV head, by
/// every thread.
const SPLIT_ROW_FROM: usize = 256;

/// Positions from which a decode step's attention runs as [`attend_long_row`]:
/// [`SPLIT_ROW_FROM`] over an f32 cache; from the first over an f16 or int8 cache that the
/// long row reads in place ([`reads_in_place`]), where the split by query head would decode
/// each head's keys and values into scratch first. SmolLM2 Q4_1 on a Zen 4, two threads,
/// depth 200: attention 1.28 ms a token (f16) and 1.01 (int8) split by head, 0.59 and 0.59 as
/// a long row; decode 173-185 -> 191-204 tok/s (f16), 189-193 -> 214-218 (int8)
/// (docs/performance.md, 2026-11-30 (8)).
fn split_row_from(view: &HostKvLayer<'_>) -> usize {
    if (view.stores_f16() || view.stores_int8()) && reads_in_place(view.head_dim()) {
        1
    } else {
        SPLIT_ROW_FROM
    }
}

/// Whether a long row reads an f16 or int8 cache in place ([`AsStored`]): its AVX-512 form
/// ([`sum_stripes`]) or AVX2 one ([`in_place_avx2`]) runs for heads `hd` wide.
fn reads_in_place(hd: usize) -> bool {
    sum_stripes(hd, 1, 1).is_some() || in_place_avx2(hd)
}

/// Positions of one score task of [`attend_long_row`].
const POSITION_BLOCK: usize = 256;

/// One row's attention over a long context, in three parallel stages with the arithmetic of
/// [`attend_body`] for every output (the same bits whatever the split or thread count):
/// scores by (KV head, block of positions), decoding an f16/int8 cache's values on the way;
/// the softmax by query head; the weighted sum by (KV head, 16 columns), or with AVX-512 by
/// (KV head, stripe of whole rows' columns, [`sum_stripes`]). Every key and value is read once
/// per KV head, not once per query head.
fn attend_long_row(
    job: &AttendJob<'_, '_>,
    out: &mut [f32],
    attention: Attention,
    kernels: &Kernels,
) {
    let view = job.view;
    let (h, hkv, hd) = (attention.shape.heads, view.n_kv_heads(), view.head_dim());
    let held = view.len();
    let first = attention.first_seen(held);
    let n = held + 1 - first;
    LONG_ROW.with_borrow_mut(|LongRowScratch { scores, values }| {
        scores.resize(h * n, 0.0);
        let stripes = sum_stripes(hd, hkv, kernels.threads());
        // The AVX-512 and AVX2 forms read an f16 or int8 cache in place, converting as they
        // load.
        let in_place = reads_in_place(hd);
        let stored = match () {
            _ if in_place && view.stores_f16() => Some(AsStored::F16),
            _ if in_place && view.stores_int8() => Some(AsStored::Int8),
            _ => None,
        };
        let borrowed = view.stores_f32() || stored.is_some();
        if !borrowed {
            values.resize(hkv * n * hd, 0.0);
        }
        let row = LongRow {
            view,
            q: &job.q[..h * hd],
            first,
            n,
            scale: attention.scale,
            rep: h / hkv,
            borrowed,
            stored,
            scores: SyncPtr(scores.as_mut_ptr()),
            values: SyncPtr(values.as_mut_ptr()),
            out: SyncPtr(out.as_mut_ptr()),
            stripes,
        };
        let blocks = n.div_ceil(POSITION_BLOCK);
        kernels.parallel_for(hkv * blocks, &|task| row.run(Stage::Scores, task));
        kernels.parallel_for(h, &|task| row.run(Stage::Softmax, task));
        let sum_tasks = match row.stripes {
            Some(stripes) => hkv * stripes,
            None if rows_whole(hd) => h,
            None => hkv * hd.div_ceil(LANES),
        };
        kernels.parallel_for(sum_tasks, &|task| row.run(Stage::Sum, task));
    });
}

/// The stages of [`attend_long_row`].
#[derive(Clone, Copy)]
enum Stage {
    Scores,
    Softmax,
    Sum,
}

/// What the tasks of [`attend_long_row`] share.
struct LongRow<'v, 'c> {
    view: &'v HostKvLayer<'c>,
    /// `[h * hd]` queries.
    q: &'v [f32],
    /// First position seen, and how many.
    first: usize,
    n: usize,
    scale: f32,
    /// Query heads per KV head.
    rep: usize,
    /// Whether the cache's values are read in place (f32, or as `stored`), else decoded into
    /// `values`.
    borrowed: bool,
    /// What the keys and values are read as in place, where not as `f32` ([`AsStored`]).
    stored: Option<AsStored>,
    /// `[h, n]` scores, then probabilities.
    scores: SyncPtr,
    /// `[hkv, n, hd]` decoded values (unused when `borrowed`).
    values: SyncPtr,
    /// `[h * hd]` context.
    out: SyncPtr,
    /// Column stripes per KV head of the weighted sum when the AVX-512 form runs it
    /// ([`sum_stripes`]), else `None` ([`LANES`] columns a task).
    stripes: Option<usize>,
}

/// Whether the AVX2 form of a long row runs where the AVX-512 one does not: its weighted sums
/// for all the query heads of a KV head at once ([`attend_stored::sum16_stored`]), and an f16
/// or int8 cache read in place ([`attend_stored::dot4_avx2`] too). AVX2, FMA and F16C, and
/// whole 16-column stripes.
fn in_place_avx2(hd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    return attend_stored::avx2_available() && hd.is_multiple_of(LANES);
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = hd;
        false
    }
}

/// Whether the AVX2 form of a long row sums its values a query head a task over whole rows
/// ([`attend_stored::sum_rows_stored`]: heads up to 64 wide, eight accumulators) rather than
/// sixteen columns of every query head of a KV head a task ([`LongRow::sum16_task`], which
/// reads one line of each row: a Zen 3 streamed those at about 4 GB/s from memory). Each
/// value row is then read once per query head, whole, in order: SmolLM2 at depth 2048 spent
/// 13-22% less in its attention (docs/performance.md, 2026-11-29 (9)).
fn rows_whole(hd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    return in_place_avx2(hd) && hd <= attend_stored::SUM_ROWS_WIDTH;
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = hd;
        false
    }
}

/// The forms of a cache that the AVX-512 and AVX2 forms of a long row read as they are stored,
/// converting to `f32` as it loads ([`attend_stored::Stored`]: the values a decode into scratch
/// would give, from a half or a quarter of the bytes).
#[derive(Clone, Copy)]
enum AsStored {
    F16,
    Int8,
}

/// How many column stripes of a KV head's values the AVX-512 weighted sum of a long row
/// splits into: as few as give every thread a task (each stripe is read once, row after row,
/// as one stream: the fewer, the longer each contiguous read; SmolLM2 at depth 4096 and two
/// threads decoded 5-12% faster with three whole-row tasks than with six half-row ones), each
/// stripe a whole number of 16-lane vectors and at most [`attend_x86::MAX_COLS`] wide. `None`
/// where the AVX-512 form does not run (no AVX-512, or a head width not a multiple of 16).
fn sum_stripes(hd: usize, hkv: usize, threads: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if attend_x86::available() && hd.is_multiple_of(16) {
        let vectors = hd / 16;
        let mut fits =
            (1..=vectors).filter(|&s| vectors.is_multiple_of(s) && hd / s <= attend_x86::MAX_COLS);
        return fits
            .clone()
            .find(|&s| hkv * s >= threads)
            .or(fits.next_back());
    }
    let _ = (hd, hkv, threads);
    None
}

impl LongRow<'_, '_> {
    fn run(&self, stage: Stage, task: usize) {
        #[cfg(target_arch = "x86_64")]
        if attend_stored::avx2_available() {
            // SAFETY: the CPU has the features the function is compiled for.
            return unsafe { self.run_avx2(stage, task) };
        }
        self.run_body::<false>(stage, task)
    }

    /// [`Self::run_body`] compiled for AVX2, FMA and F16C (the same arithmetic: Rust does not
    /// fuse multiplies and adds).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,f16c")]
    fn run_avx2(&self, stage: Stage, task: usize) {
        self.run_body::<true>(stage, task)
    }

    #[inline(always)]
    fn run_body<const AVX2: bool>(&self, stage: Stage, task: usize) {
        let (view, n) = (self.view, self.n);
        let hd = view.head_dim();
        match stage {
            Stage::Scores => {
                let blocks = n.div_ceil(POSITION_BLOCK);
                let (g, b) = (task / blocks, task % blocks);
                let start = b * POSITION_BLOCK;
                let len = POSITION_BLOCK.min(n - start);
                if self.stored.is_some() {
                    return self.score_block_stored(g, start, len);
                }
                SCRATCH.with_borrow_mut(|scratch| {
                    let keys = view.key_runs(g, self.first + start, len, &mut scratch.keys);
                    let heads = g * self.rep..(g + 1) * self.rep;
                    let qs: Vec<&[f32]> = heads
                        .clone()
                        .map(|h| &self.q[h * hd..(h + 1) * hd])
                        .collect();
                    let mut at = 0;
                    for run in keys.iter() {
                        let m = (run.len() / hd).min(len - at);
                        // SAFETY: task (g, b) alone writes these scores of g's heads.
                        let mut outs: Vec<&mut [f32]> = heads
                            .clone()
                            .map(|h| unsafe {
                                std::slice::from_raw_parts_mut(
                                    self.scores.get().add(h * n + start + at),
                                    m,
                                )
                            })
                            .collect();
                        score_keys_heads::<AVX2>(&qs, &run[..m * hd], self.scale, &mut outs);
                        at += m;
                    }
                    if !self.borrowed {
                        let values =
                            view.values_at(g, self.first + start, len, &mut scratch.values);
                        // SAFETY: task (g, b) alone writes these decoded values.
                        let dst = unsafe {
                            std::slice::from_raw_parts_mut(
                                self.values.get().add((g * n + start) * hd),
                                len * hd,
                            )
                        };
                        dst.copy_from_slice(values);
                    }
                });
            }
            Stage::Softmax => {
                // SAFETY: task `head` alone owns this head's scores now.
                let scores =
                    unsafe { std::slice::from_raw_parts_mut(self.scores.get().add(task * n), n) };
                softmax(scores);
            }
            Stage::Sum if self.stripes.is_some() => self.sum_stripe(task),
            Stage::Sum if rows_whole(hd) => self.sum_head_task(task),
            Stage::Sum if in_place_avx2(hd) => self.sum16_task(task),
            Stage::Sum => {
                // Each value line is read once per KV head: the query heads that share it
                // run one after another while its columns are in the cache.
                let per_group = hd.div_ceil(LANES);
                let (g, c) = (task / per_group, task % per_group);
                let col = c * LANES;
                let mut unused = Vec::new();
                let rows = self.f32_values(g, &mut unused);
                for head in g * self.rep..(g + 1) * self.rep {
                    // SAFETY: the scores are final (the previous stage has returned).
                    let weights =
                        unsafe { std::slice::from_raw_parts(self.scores.get().add(head * n), n) };
                    // SAFETY: task (g, c) alone writes these columns of g's heads.
                    let out = unsafe {
                        std::slice::from_raw_parts_mut(
                            self.out.get().add(head * hd + col),
                            LANES.min(hd - col),
                        )
                    };
                    weighted_sum_cols::<LANES>(weights, &rows, hd, col, out);
                }
            }
        }
    }
}

impl LongRow<'_, '_> {
    /// KV head `g`'s values as f32 runs: the cache's own where it stores f32 (`scratch`
    /// unused), else those the score stage decoded (final once that stage has returned).
    fn f32_values<'s>(&'s self, g: usize, scratch: &'s mut Vec<f32>) -> Vec<&'s [f32]> {
        let (n, hd) = (self.n, self.view.head_dim());
        if self.borrowed {
            return self.view.value_runs(g, self.first, n, scratch);
        }
        // SAFETY: only the score stage writes the decoded values, and it has returned.
        vec![unsafe { std::slice::from_raw_parts(self.values.get().add(g * n * hd), n * hd) }]
    }

    /// Score task (KV head `g`, positions `start..start + len` of those seen) over an f16 or
    /// int8 cache read in place ([`AsStored`]).
    #[cfg(target_arch = "x86_64")]
    fn score_block_stored(&self, g: usize, start: usize, len: usize) {
        let (view, at) = (self.view, self.first + start);
        let missing = "the cache stores what the long row reads";
        match self.stored.expect("a stored form") {
            AsStored::F16 => {
                let runs = view.key_runs_f16(g, at, len).expect(missing);
                self.score_runs(g, start, len, (&runs, &[]));
            }
            AsStored::Int8 => {
                let runs = view.key_runs_int8(g, at, len).expect(missing);
                self.score_runs(g, start, len, (&runs.quants, &runs.scales));
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn score_block_stored(&self, _g: usize, _start: usize, _len: usize) {
        unreachable!("the stored forms run only on x86-64")
    }

    /// The scores of [`Self::score_block_stored`] from the stored keys `runs` (and, for int8,
    /// their scales): whole groups of eight keys by [`attend_x86::scores`], converting as it
    /// loads; a stretch's last few keys converted into scratch and scored as the f32 path
    /// scores them (every score has `key_dot`'s arithmetic whichever loop runs it).
    #[cfg(target_arch = "x86_64")]
    fn score_runs<E: attend_stored::Stored>(
        &self,
        g: usize,
        start: usize,
        len: usize,
        (runs, scales): (&[&[E]], &[&[f32]]),
    ) {
        let hd = self.view.head_dim();
        SCRATCH.with_borrow_mut(|scratch| {
            for head in g * self.rep..(g + 1) * self.rep {
                let qv = &self.q[head * hd..(head + 1) * hd];
                // SAFETY: task (g, b) alone writes these scores of g's heads.
                let scores = unsafe {
                    std::slice::from_raw_parts_mut(
                        self.scores.get().add(head * self.n + start),
                        len,
                    )
                };
                let mut at = 0;
                for (r, run) in runs.iter().enumerate() {
                    let n = (run.len() / hd).min(len - at);
                    let out = &mut scores[at..at + n];
                    let sc = if E::SCALED { &scales[r][..n] } else { &[][..] };
                    // The stored forms run only where `avx2_available()`: `scores` runs.
                    let mut done = attend_x86::scores(qv, (&run[..n * hd], sc), self.scale, out);
                    // Four at a time in AVX2 (`key_dot`'s arithmetic).
                    while done + 4 <= n {
                        let key = |k: usize| &run[(done + k) * hd..(done + k + 1) * hd];
                        let s = |k: usize| if E::SCALED { sc[done + k] } else { 1.0 };
                        let keys = [key(0), key(1), key(2), key(3)];
                        // SAFETY: the stored forms run only where `avx2_available()`; every
                        // key is `hd` long.
                        let dots =
                            unsafe { attend_stored::dot4_avx2(qv, keys, [s(0), s(1), s(2), s(3)]) };
                        for (o, d) in out[done..done + 4].iter_mut().zip(dots) {
                            *o = d * self.scale;
                        }
                        done += 4;
                    }
                    scratch.keys.clear();
                    for (i, key) in run[..n * hd].chunks_exact(hd).enumerate().skip(done) {
                        let s = if E::SCALED { sc[i] } else { 1.0 };
                        scratch.keys.extend(key.iter().map(|v| v.widen(s)));
                    }
                    score_keys::<true>(qv, &scratch.keys, self.scale, &mut out[done..]);
                    at += n;
                }
            }
        });
    }

    /// Weighted-sum task `task` of the AVX2 form: KV head `task / (hd / 16)`, sixteen of its
    /// columns, for all its query heads at once, each value row read once for them
    /// ([`attend_stored::sum16_stored`], the same bits as [`weighted_sum_cols`]), from the
    /// cache's values in place (f32, f16, int8) or from the decoded ones.
    #[cfg(target_arch = "x86_64")]
    fn sum16_task(&self, task: usize) {
        let (view, n, hd) = (self.view, self.n, self.view.head_dim());
        let (g, col) = (task / (hd / LANES), task % (hd / LANES) * LANES);
        let missing = "the cache stores what the long row reads";
        match self.stored {
            Some(AsStored::F16) => {
                let rows = view.value_runs_f16(g, self.first, n).expect(missing);
                self.sum16_heads(g, col, (&rows, &[]));
            }
            Some(AsStored::Int8) => {
                let rows = view.value_runs_int8(g, self.first, n).expect(missing);
                self.sum16_heads(g, col, (&rows.quants, &rows.scales));
            }
            None => {
                let mut unused = Vec::new();
                let rows = self.f32_values(g, &mut unused);
                self.sum16_heads(g, col, (&rows, &[]));
            }
        }
    }

    /// Weighted-sum task `task` of the AVX2 form over whole rows: query head `task`, all its
    /// columns ([`attend_stored::sum_rows_stored`], the bits of [`Self::sum16_task`]'s).
    #[cfg(target_arch = "x86_64")]
    fn sum_head_task(&self, head: usize) {
        let (view, n, hd) = (self.view, self.n, self.view.head_dim());
        let g = head / self.rep;
        let missing = "the cache stores what the long row reads";
        // SAFETY: the scores are final (the previous stage has returned).
        let weights = unsafe { std::slice::from_raw_parts(self.scores.get().add(head * n), n) };
        // SAFETY: task `head` alone writes this head's columns.
        let out = unsafe { std::slice::from_raw_parts_mut(self.out.get().add(head * hd), hd) };
        match self.stored {
            Some(AsStored::F16) => {
                let rows = view.value_runs_f16(g, self.first, n).expect(missing);
                attend_stored::sum_rows_stored(weights, (&rows, &[]), hd, out);
            }
            Some(AsStored::Int8) => {
                let rows = view.value_runs_int8(g, self.first, n).expect(missing);
                attend_stored::sum_rows_stored(weights, (&rows.quants, &rows.scales), hd, out);
            }
            None => {
                let mut unused = Vec::new();
                let rows = self.f32_values(g, &mut unused);
                attend_stored::sum_rows_stored(weights, (&rows, &[]), hd, out);
            }
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn sum_head_task(&self, _head: usize) {
        unreachable!("the AVX2 form runs only on x86-64")
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn sum16_task(&self, _task: usize) {
        unreachable!("the AVX2 form runs only on x86-64")
    }

    /// [`Self::sum16_task`]'s sums for the query heads of KV head `g`, up to
    /// [`attend_stored::SUM16_HEADS`] a call.
    #[cfg(target_arch = "x86_64")]
    fn sum16_heads<E: attend_stored::Stored>(
        &self,
        g: usize,
        col: usize,
        rows: (&[&[E]], &[&[f32]]),
    ) {
        let (n, hd) = (self.n, self.view.head_dim());
        let heads: Vec<usize> = (g * self.rep..(g + 1) * self.rep).collect();
        for chunk in heads.chunks(attend_stored::SUM16_HEADS) {
            // SAFETY: the scores are final (the previous stage has returned).
            let weights: Vec<&[f32]> = chunk
                .iter()
                .map(|&head| unsafe {
                    std::slice::from_raw_parts(self.scores.get().add(head * n), n)
                })
                .collect();
            // SAFETY: task (g, col) alone writes these sixteen columns of g's heads.
            let mut outs: Vec<&mut [f32; LANES]> = chunk
                .iter()
                .map(|&head| unsafe {
                    &mut *(self.out.get().add(head * hd + col) as *mut [f32; LANES])
                })
                .collect();
            attend_stored::sum16_stored(&weights, rows, hd, col, &mut outs);
        }
    }

    /// Weighted-sum task `task` of the AVX-512 form: KV head `task / stripes`, one stripe of
    /// its columns, for all its query heads at once ([`attend_x86::weighted_sums`], the same
    /// bits as [`weighted_sum_cols`]), from the cache's values in place (f32, f16, int8) or
    /// from the decoded ones.
    #[cfg(target_arch = "x86_64")]
    fn sum_stripe(&self, task: usize) {
        let stripes = self.stripes.expect("the AVX-512 form runs");
        let (view, n) = (self.view, self.n);
        let hd = view.head_dim();
        let (g, c) = (task / stripes, task % stripes);
        let cols = hd / stripes;
        let col = c * cols;
        let missing = "the cache stores what the long row reads";
        match self.stored {
            Some(AsStored::F16) => {
                let rows = view.value_runs_f16(g, self.first, n).expect(missing);
                return self.sum_heads(g, col, cols, (&rows, &[]));
            }
            Some(AsStored::Int8) => {
                let rows = view.value_runs_int8(g, self.first, n).expect(missing);
                return self.sum_heads(g, col, cols, (&rows.quants, &rows.scales));
            }
            None => {}
        }
        let mut unused = Vec::new();
        let rows = self.f32_values(g, &mut unused);
        self.sum_heads(g, col, cols, (&rows, &[]));
    }

    /// The weighted sums of KV head `g`'s query heads over `rows`, columns `col..col + cols`.
    #[cfg(target_arch = "x86_64")]
    fn sum_heads<E: attend_stored::Stored>(
        &self,
        g: usize,
        col: usize,
        cols: usize,
        rows: (&[&[E]], &[&[f32]]),
    ) {
        let (n, hd) = (self.n, self.view.head_dim());
        let heads = g * self.rep..(g + 1) * self.rep;
        for chunk in heads.collect::<Vec<_>>().chunks(attend_x86::MAX_HEADS) {
            // SAFETY: the scores are final (the previous stage has returned).
            let weights: Vec<&[f32]> = chunk
                .iter()
                .map(|&head| unsafe {
                    std::slice::from_raw_parts(self.scores.get().add(head * n), n)
                })
                .collect();
            // SAFETY: task (g, c) alone writes these columns of g's heads.
            let mut outs: Vec<&mut [f32]> = chunk
                .iter()
                .map(|&head| unsafe {
                    std::slice::from_raw_parts_mut(self.out.get().add(head * hd + col), cols)
                })
                .collect();
            attend_x86::weighted_sums(&weights, rows, hd, col, &mut outs);
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn sum_stripe(&self, _task: usize) {
        unreachable!("the AVX-512 form runs only on x86-64")
    }
}

/// The calling thread's buffers for [`attend_long_row`].
#[derive(Default)]
struct LongRowScratch {
    scores: Vec<f32>,
    values: Vec<f32>,
}

thread_local! {
    static LONG_ROW: std::cell::RefCell<LongRowScratch> = std::cell::RefCell::default();
}

/// A raw pointer to the attention output, written at disjoint places by the tasks.
#[derive(Clone, Copy)]
pub(super) struct SyncPtr(pub(super) *mut f32);

impl SyncPtr {
    /// The pointer (a method, so that closures capture the whole `Sync` wrapper).
    pub(super) fn get(self) -> *mut f32 {
        self.0
    }
}
// SAFETY: only used to write disjoint slots from the pool's threads while the owner waits.
unsafe impl Send for SyncPtr {}
// SAFETY: as above.
unsafe impl Sync for SyncPtr {}

/// A thread's attention scratch: scores, and keys and values decoded from an f16/int8 cache.
#[derive(Default)]
struct AttendScratch {
    scores: Vec<f32>,
    keys: Vec<f32>,
    values: Vec<f32>,
    /// Several rows' probabilities (the tiled weighted sums).
    probs: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<AttendScratch> = std::cell::RefCell::default();
}

/// Attention of new rows `first..first + contexts.len()` of `job`, query head `head`, over the
/// cache, into `contexts` (one `head_dim`-wide slot per row). The head reads KV head
/// `head / (h / hkv)`; row `i` sees positions `0..=held + i`, or of a local layer only the
/// last `window` of them.
fn attend(
    job: &AttendJob<'_, '_>,
    head: usize,
    first: usize,
    contexts: &mut [&mut [f32]],
    attention: Attention,
    decoded: Option<&Decoded>,
    scratch: &mut AttendScratch,
) {
    #[cfg(target_arch = "x86_64")]
    if attend_stored::avx2_available() {
        // SAFETY: the CPU has the features the function is compiled for.
        return unsafe { attend_avx2(job, head, first, contexts, attention, decoded, scratch) };
    }
    attend_body::<false>(job, head, first, contexts, attention, decoded, scratch)
}

/// [`attend`] compiled for AVX2, FMA and F16C: the loops of [`attend_body`] (inlined)
/// vectorize twice as wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn attend_avx2(
    job: &AttendJob<'_, '_>,
    head: usize,
    first: usize,
    contexts: &mut [&mut [f32]],
    attention: Attention,
    decoded: Option<&Decoded>,
    scratch: &mut AttendScratch,
) {
    attend_body::<true>(job, head, first, contexts, attention, decoded, scratch)
}

#[inline(always)]
fn attend_body<const AVX2: bool>(
    job: &AttendJob<'_, '_>,
    head: usize,
    first_row: usize,
    contexts: &mut [&mut [f32]],
    attention: Attention,
    decoded: Option<&Decoded>,
    scratch: &mut AttendScratch,
) {
    let view = job.view;
    let (h, hkv, hd) = (attention.shape.heads, view.n_kv_heads(), view.head_dim());
    let g = head / (h / hkv);
    let held = view.len();
    let AttendScratch {
        scores,
        keys,
        values,
        probs,
    } = scratch;
    // Every position the rows see: borrowed from an f32 cache (one run, or one per block of
    // a paged pool), else decoded once for the pass (`Decoded`) or for the task's rows.
    let from = attention.first_seen(held + first_row);
    let most = held + first_row + contexts.len();
    let (keys, values) = match decoded {
        Some(d) => d.runs(g, from, most - from),
        None => (
            view.key_runs(g, from, most - from, keys),
            view.value_runs(g, from, most - from, values),
        ),
    };
    let mut parts = Vec::with_capacity(values.len());
    #[cfg(target_arch = "x86_64")]
    if AVX2 && contexts.len() > 1 && hd.is_multiple_of(64) && attend_x86::available() {
        // Each row's probabilities, then the rows' weighted sums as a tile.
        let span_len = most - from;
        probs.clear();
        probs.resize(contexts.len() * span_len, 0.0);
        let ranges: Vec<(usize, usize)> = (0..contexts.len())
            .map(|offset| {
                let i = first_row + offset;
                (attention.first_seen(held + i) - from, held + i + 1 - from)
            })
            .collect();
        let query = |offset: usize| &job.q[((first_row + offset) * h + head) * hd..][..hd];
        let mut rows = probs.chunks_exact_mut(span_len).enumerate();
        while let Some((r, a)) = rows.next() {
            match rows.next() {
                Some((_, b)) => {
                    let pair = [(query(r), a, ranges[r]), (query(r + 1), b, ranges[r + 1])];
                    attend_tiles::paired_scores(pair, &keys, hd, attention.scale);
                }
                None => {
                    let (lo, hi) = ranges[r];
                    span(&keys, hd, lo, hi, &mut parts);
                    let mut at = 0;
                    for part in &parts {
                        let n = part.len() / hd;
                        score_keys::<AVX2>(query(r), part, attention.scale, &mut a[at..at + n]);
                        at += n;
                    }
                }
            }
        }
        for (probs, &(lo, hi)) in probs.chunks_exact_mut(span_len).zip(&ranges) {
            softmax(&mut probs[..hi - lo]);
        }
        attend_tiles::tiled_sums(contexts, probs, span_len, &ranges, &values, hd);
        return;
    }
    for (offset, context) in contexts.iter_mut().enumerate() {
        let i = first_row + offset;
        let seen = held + i + 1;
        let first = attention.first_seen(held + i);
        let qv = &job.q[(i * h + head) * hd..][..hd];
        scores.clear();
        span(&keys, hd, first - from, seen - from, &mut parts);
        for part in &parts {
            let at = scores.len();
            scores.resize(at + part.len() / hd, 0.0);
            score_keys::<AVX2>(qv, part, attention.scale, &mut scores[at..]);
        }
        softmax(scores);
        span(&values, hd, first - from, seen - from, &mut parts);
        weighted_sum(scores, &parts, context);
    }
}
