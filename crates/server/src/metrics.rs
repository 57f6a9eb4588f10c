//! [`Metrics`]: counters, gauges and histograms shared by the handlers and the engine thread,
//! rendered in Prometheus' text format for `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use kindle_generate::BlockStats;

/// Upper bounds (seconds) of the time-to-first-token buckets.
const TTFT_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];
/// Upper bounds (seconds) of the per-output-token latency buckets.
const TOKEN_BUCKETS: [f64; 11] = [
    0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0,
];

/// A cumulative histogram with fixed buckets.
#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    fn observe(&mut self, seconds: f64) {
        for (bound, count) in self.bounds.iter().zip(&mut self.counts) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        self.sum += seconds;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (bound, count) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

/// Everything `/metrics` shows. Gauges are set by the engine thread after each step; counters
/// only grow.
#[derive(Debug)]
pub struct Metrics {
    /// Sequences running (in the engine's batch).
    pub running: AtomicUsize,
    /// Sequences waiting for a running slot (reserved by a handler, then admitted or dropped by
    /// the engine).
    pub queued: AtomicUsize,
    /// Prompt tokens of admitted sequences.
    pub prompt_tokens: AtomicU64,
    /// Tokens generated.
    pub generated_tokens: AtomicU64,
    /// Sequences removed because their client went away.
    pub cancelled: AtomicU64,
    /// Engine steps (batched forward passes) run.
    pub steps: AtomicU64,
    /// Rows (tokens) in those forward passes.
    pub step_rows: AtomicU64,
    /// Prompt chunks fed without their prompt's end (a long prompt prefilled over steps).
    pub prefill_chunks: AtomicU64,
    /// Sequences that started with cached blocks of their prompt (prefix caching).
    pub prefix_hits: AtomicU64,
    /// Prompt tokens those sequences did not prefill again.
    pub prefix_hit_tokens: AtomicU64,
    /// Prompt tokens a draft model's caches started with (its pool's prefix cache).
    pub draft_prefix_hit_tokens: AtomicU64,
    /// Verification passes of drafting sequences (finished ones).
    pub draft_passes: AtomicU64,
    /// Tokens they drafted.
    pub drafted_tokens: AtomicU64,
    /// Drafted tokens the target accepted.
    pub accepted_tokens: AtomicU64,
    /// Drafts dropped for being shorter than the request's minimum (`kindle_draft_min`).
    pub short_drafts: AtomicU64,
    /// Nanoseconds in the batched forward passes.
    forward_nanos: AtomicU64,
    /// Nanoseconds finishing those passes' sequences (sampling, logprobs, detokenising).
    completion_nanos: AtomicU64,
    /// Where the paged KV pool's blocks are (set by the engine after each step).
    blocks: Mutex<BlockStats>,
    /// Where its local layers' blocks are, for a model with sliding-window layers.
    local_blocks: Mutex<Option<BlockStats>>,
    requests: Mutex<BTreeMap<u16, u64>>,
    ttft: Mutex<Histogram>,
    per_token: Mutex<Histogram>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            running: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            prompt_tokens: AtomicU64::new(0),
            generated_tokens: AtomicU64::new(0),
            cancelled: AtomicU64::new(0),
            steps: AtomicU64::new(0),
            step_rows: AtomicU64::new(0),
            prefill_chunks: AtomicU64::new(0),
            prefix_hits: AtomicU64::new(0),
            prefix_hit_tokens: AtomicU64::new(0),
            draft_prefix_hit_tokens: AtomicU64::new(0),
            draft_passes: AtomicU64::new(0),
            drafted_tokens: AtomicU64::new(0),
            accepted_tokens: AtomicU64::new(0),
            short_drafts: AtomicU64::new(0),
            forward_nanos: AtomicU64::new(0),
            completion_nanos: AtomicU64::new(0),
            blocks: Mutex::new(BlockStats::default()),
            local_blocks: Mutex::new(None),
            requests: Mutex::new(BTreeMap::new()),
            ttft: Mutex::new(Histogram::new(&TTFT_BUCKETS)),
            per_token: Mutex::new(Histogram::new(&TOKEN_BUCKETS)),
        }
    }
}

impl Metrics {
    /// Count `time` spent in a batched forward pass.
    pub fn add_forward_time(&self, time: Duration) {
        self.forward_nanos
            .fetch_add(time.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Count `time` spent finishing a pass's sequences (sampling and what follows it).
    pub fn add_completion_time(&self, time: Duration) {
        self.completion_nanos
            .fetch_add(time.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Count a finished drafting sequence's verification passes and drafted tokens.
    pub fn count_drafts(&self, stats: &kindle_generate::SpecStats) {
        self.draft_passes
            .fetch_add(stats.passes as u64, Ordering::SeqCst);
        self.drafted_tokens
            .fetch_add(stats.drafted as u64, Ordering::SeqCst);
        self.accepted_tokens
            .fetch_add(stats.accepted as u64, Ordering::SeqCst);
        self.short_drafts
            .fetch_add(stats.short_drafts as u64, Ordering::SeqCst);
    }

    /// Record where the KV pool's blocks are.
    pub fn set_blocks(&self, stats: BlockStats) {
        if let Ok(mut blocks) = self.blocks.lock() {
            *blocks = stats;
        }
    }

    /// Record where the KV pool's local layers' blocks are (`None`: no such layers).
    pub fn set_local_blocks(&self, stats: Option<BlockStats>) {
        if let Ok(mut blocks) = self.local_blocks.lock() {
            *blocks = stats;
        }
    }

    /// Where the KV pool's blocks were at the end of the last step.
    pub fn blocks(&self) -> BlockStats {
        self.blocks.lock().map(|b| *b).unwrap_or_default()
    }

    /// Count a finished HTTP request by its status.
    pub fn count_request(&self, status: u16) {
        if let Ok(mut map) = self.requests.lock() {
            *map.entry(status).or_default() += 1;
        }
    }

    /// Record a time to first token (from the request's arrival to its first token).
    pub fn observe_ttft(&self, time: Duration) {
        if let Ok(mut h) = self.ttft.lock() {
            h.observe(time.as_secs_f64());
        }
    }

    /// Record the time between two tokens of one sequence.
    pub fn observe_token(&self, time: Duration) {
        if let Ok(mut h) = self.per_token.lock() {
            h.observe(time.as_secs_f64());
        }
    }

    /// Try to reserve `n` queue places under a limit of `limit`; a request larger than the whole
    /// queue is let in when the queue is empty.
    pub fn reserve_queue(&self, n: usize, limit: usize) -> bool {
        self.queued
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |queued| {
                (queued == 0 || queued + n <= limit).then_some(queued + n)
            })
            .is_ok()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP kindle_requests_total HTTP requests answered, by status.\n# TYPE kindle_requests_total counter"
        );
        if let Ok(map) = self.requests.lock() {
            for (status, count) in map.iter() {
                let _ = writeln!(out, "kindle_requests_total{{status=\"{status}\"}} {count}");
            }
        }
        let gauges = [
            (
                "kindle_sequences_running",
                "Sequences in the running batch.",
                self.running.load(Ordering::SeqCst) as u64,
            ),
            (
                "kindle_sequences_queued",
                "Sequences waiting for a running slot.",
                self.queued.load(Ordering::SeqCst) as u64,
            ),
        ];
        let blocks = self.blocks();
        let gauges = gauges.into_iter().chain([
            (
                "kindle_kv_blocks_total",
                "Blocks in the paged KV pool.",
                blocks.total as u64,
            ),
            (
                "kindle_kv_blocks_used",
                "KV blocks held by running sequences.",
                blocks.used as u64,
            ),
            (
                "kindle_kv_blocks_cached",
                "KV blocks held by no sequence, kept for the prefix cache (evicted when needed).",
                blocks.cached as u64,
            ),
            (
                "kindle_kv_blocks_free",
                "KV blocks holding nothing.",
                blocks.free as u64,
            ),
            (
                "kindle_kv_block_size_tokens",
                "Tokens per KV block.",
                blocks.block_size as u64,
            ),
        ]);
        // A model with sliding-window layers: their blocks, a group of their own.
        let local = self.local_blocks.lock().ok().and_then(|b| *b);
        let gauges = gauges.chain(local.into_iter().flat_map(|b| {
            [
                (
                    "kindle_kv_local_blocks_total",
                    "Blocks of the sliding-window layers (each sequence holds those of its window).",
                    b.total as u64,
                ),
                (
                    "kindle_kv_local_blocks_used",
                    "Sliding-window layers' blocks held by running sequences.",
                    b.used as u64,
                ),
                (
                    "kindle_kv_local_blocks_cached",
                    "Sliding-window layers' blocks held by none, kept for the prefix cache.",
                    b.cached as u64,
                ),
                (
                    "kindle_kv_local_blocks_free",
                    "Sliding-window layers' blocks holding nothing.",
                    b.free as u64,
                ),
            ]
        }));
        for (name, help, value) in gauges {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
            );
        }
        let counters = [
            (
                "kindle_prompt_tokens_total",
                "Prompt tokens of admitted sequences.",
                &self.prompt_tokens,
            ),
            (
                "kindle_generated_tokens_total",
                "Tokens generated.",
                &self.generated_tokens,
            ),
            (
                "kindle_sequences_cancelled_total",
                "Sequences removed because the client disconnected.",
                &self.cancelled,
            ),
            (
                "kindle_engine_steps_total",
                "Batched forward passes run by the engine.",
                &self.steps,
            ),
            (
                "kindle_engine_step_rows_total",
                "Tokens fed in those forward passes.",
                &self.step_rows,
            ),
            (
                "kindle_prefill_chunks_total",
                "Prompt chunks prefilled ahead of their prompt's last chunk (chunked prefill).",
                &self.prefill_chunks,
            ),
            (
                "kindle_prefix_cache_hits_total",
                "Sequences that started with cached KV blocks of their prompt.",
                &self.prefix_hits,
            ),
            (
                "kindle_prefix_cache_hit_tokens_total",
                "Prompt tokens not prefilled again thanks to prefix reuse.",
                &self.prefix_hit_tokens,
            ),
            (
                "kindle_draft_prefix_cache_hit_tokens_total",
                "Prompt tokens the draft model did not run again thanks to its prefix cache.",
                &self.draft_prefix_hit_tokens,
            ),
            (
                "kindle_draft_passes_total",
                "Verification passes of finished speculative sequences.",
                &self.draft_passes,
            ),
            (
                "kindle_draft_tokens_total",
                "Tokens drafted by finished speculative sequences.",
                &self.drafted_tokens,
            ),
            (
                "kindle_draft_accepted_tokens_total",
                "Drafted tokens the model accepted.",
                &self.accepted_tokens,
            ),
            (
                "kindle_draft_short_total",
                "Drafts shorter than their minimum, dropped for plain steps.",
                &self.short_drafts,
            ),
        ];
        for (name, help, value) in counters {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::SeqCst)
            );
        }
        let seconds = [
            (
                "kindle_engine_forward_seconds_total",
                "Time in the batched forward passes.",
                &self.forward_nanos,
            ),
            (
                "kindle_engine_completion_seconds_total",
                "Time finishing those passes' sequences: processors, sampling, logprobs, detokenising, stops.",
                &self.completion_nanos,
            ),
        ];
        for (name, help, nanos) in seconds {
            let value = nanos.load(Ordering::SeqCst) as f64 / 1e9;
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
        if let Ok(h) = self.ttft.lock() {
            h.render(
                &mut out,
                "kindle_time_to_first_token_seconds",
                "Time from a request's arrival to its first generated token.",
            );
        }
        if let Ok(h) = self.per_token.lock() {
            h.render(
                &mut out,
                "kindle_time_per_output_token_seconds",
                "Time between two generated tokens of a sequence.",
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The local layers' block gauges appear for a model that has such layers, only then.
    #[test]
    fn local_block_gauges_only_with_local_layers() {
        let metrics = Metrics::default();
        assert!(!metrics.render().contains("kindle_kv_local_blocks"));
        let stats = BlockStats {
            block_size: 16,
            total: 134,
            used: 3,
            cached: 5,
            free: 126,
        };
        metrics.set_local_blocks(Some(stats));
        let text = metrics.render();
        for line in [
            "kindle_kv_local_blocks_total 134",
            "kindle_kv_local_blocks_used 3",
            "kindle_kv_local_blocks_cached 5",
            "kindle_kv_local_blocks_free 126",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }
}
