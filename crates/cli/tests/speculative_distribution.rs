//! Sampled speculative decoding on the real model keeps the sampler's distribution: the first
//! tokens of many seeded runs with a drafter are distributed as those of plain runs (a
//! chi-square homogeneity test per position and on the drafted pair), with a sampled draft
//! (self-speculation on a few layers, mostly rejected) and a deterministic one (prompt
//! lookup); and the same test rejects a wrong acceptance rule. The fake-model tests
//! (`crates/generate/tests/speculative.rs`) compare against exact distributions; here the
//! distribution of a whole start is not computable, so two samples are compared.
//!
//! Each run generates [`GENERATED`] tokens: the first is sampled from the prefill's logits in
//! every arm, the drafter then proposes the next two and one verification pass decides them
//! (acceptance `min(1, p/q)`, else a draw from the residual `norm(max(0, p - q))`), so
//! positions 2 and 3 come from the rule under test and position 4 from the bonus row or a
//! later step. Every arm is sampled once per test binary, the arms side by side on the
//! cores, the model on one thread per arm.

mod common;
#[path = "../../generate/tests/common/gamma.rs"]
mod gamma;

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use gamma::upper_gamma_q;
use kindle_cli::draft::DraftSettings;
use kindle_cli::plan::{
    ContextSettings, GenerationSettings, ModelSettings, PromptEncoding, PromptInput,
    PromptSettings, RunPlan, RunSettings, SamplingSettings,
};
use kindle_generate::{AcceptRule, SpecStats, generate};
use kindle_model::EngineOptions;
use kindle_sampling::SamplerConfig;

/// Runs per arm on [`OPEN_PROMPT`]. A run costs one core 35 to 65 ms: a one-token pass of the
/// model takes about 10 ms on one thread of a 2-core Xeon VM, and a verification pass of
/// `k + 1` rows costs `k + 1` of them.
const OPEN_RUNS: usize = 200;

/// Runs per arm on [`COPY_PROMPT`]: more, so that the wrong rule fails by a wide margin (over
/// four seeds its combined p-value was at most 1.3e-6 with 300 runs, 9e-5 with 200).
const COPY_RUNS: usize = 300;

/// Tokens generated per run (all compared).
const GENERATED: usize = 4;

/// The p-value below which two samples are taken to differ.
const ALPHA: f64 = 0.001;

/// An open prompt: every position is spread (about 4 bits for the first token, 5 to 6 bits
/// for the next ones).
const OPEN_PROMPT: &str = "The colour of the sky is";

/// A sequence the model mostly goes on copying, so prompt lookup's drafts are accepted about
/// half the time; positions 2 to 4 have 2 to 4 bits.
const COPY_PROMPT: &str = "Random digits: 3 8 1 5 9 2 6 4 7 3 8 1 5 9";

/// The least entropy, in bits, of each drafted position (2 and 3) in a plain sample: the test
/// means little where the model is nearly sure.
const MIN_BITS: f64 = 1.5;

/// The first tokens of one run; a run that ended early is padded with [`ENDED`].
type Start = [u32; GENERATED];

/// Stands for the positions after an end-of-generation token.
const ENDED: u32 = u32::MAX;

fn engine_options() -> EngineOptions {
    EngineOptions {
        threads: Some(1),
        ..EngineOptions::default()
    }
}

/// A run of `prompt` on the real model sampling at temperature 1 with top-k 40 and top-p 0.95.
fn plan(prompt: &str) -> RunPlan {
    let settings = RunSettings {
        model: ModelSettings {
            path: common::model_path(),
            quantize: None,
            engine: engine_options(),
        },
        prompts: PromptSettings {
            inputs: vec![PromptInput::Text(prompt.into())],
            encoding: PromptEncoding::Plain { special: false },
        },
        context: ContextSettings::default(),
        sampling: SamplingSettings {
            config: SamplerConfig {
                temperature: 1.0,
                top_k: 40,
                top_p: 0.95,
                seed: Some(1000),
                ..SamplerConfig::neutral()
            },
            dry_breakers: None,
        },
        generation: GenerationSettings {
            max_tokens: GENERATED,
            ..GenerationSettings::default()
        },
    };
    RunPlan::build(&settings).expect("planning a run of the real model")
}

/// One sample of runs: a prompt, plain or with a drafter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    OpenPlain,
    /// `--self-speculative 12 --draft-max 2`: the first 12 of the 30 layers draft; most of
    /// their tokens are rejected (about 7% accepted).
    SelfSpeculative,
    CopyPlain,
    /// `--lookup-ngram 2 --draft-max 2`.
    Lookup,
    /// Prompt lookup with a wrong rule: on a rejection, a draw from p instead of the residual,
    /// so a drafted token d comes out with probability p(d)(2 - p(d)) instead of p(d).
    WrongRule,
}

impl Arm {
    /// Every arm, the longest to sample first.
    const ALL: [Arm; 5] = [
        Arm::SelfSpeculative,
        Arm::CopyPlain,
        Arm::Lookup,
        Arm::WrongRule,
        Arm::OpenPlain,
    ];

    fn prompt(self) -> &'static str {
        match self {
            Arm::OpenPlain | Arm::SelfSpeculative => OPEN_PROMPT,
            Arm::CopyPlain | Arm::Lookup | Arm::WrongRule => COPY_PROMPT,
        }
    }

    fn runs(self) -> usize {
        match self {
            Arm::OpenPlain | Arm::SelfSpeculative => OPEN_RUNS,
            Arm::CopyPlain | Arm::Lookup | Arm::WrongRule => COPY_RUNS,
        }
    }

    /// The drafting flags and the acceptance rule; `None` for a plain arm.
    fn drafting(self) -> Option<(DraftSettings, AcceptRule)> {
        let lookup = DraftSettings {
            lookup_ngram: Some(2),
            draft_max: Some(2),
            ..DraftSettings::default()
        };
        match self {
            Arm::OpenPlain | Arm::CopyPlain => None,
            Arm::SelfSpeculative => Some((
                DraftSettings {
                    self_speculative: Some(12),
                    draft_max: Some(2),
                    ..DraftSettings::default()
                },
                AcceptRule::Exact,
            )),
            Arm::Lookup => Some((lookup, AcceptRule::Exact)),
            Arm::WrongRule => Some((lookup, AcceptRule::ResampleFromTarget)),
        }
    }
}

/// The starts of an arm's runs, and its speculator's counters (zero for a plain arm).
struct Sample {
    starts: Vec<Start>,
    stats: SpecStats,
}

/// `arm`'s runs. Run `i` of `n` samples with the plan's seed + `i` in a plain arm and + `n` +
/// `i` with a drafter, so the samples compared are independent. One session serves every run
/// (each reuses the prompt it holds), and one speculator (the draft model's sampler draws from
/// its own seeded stream).
fn sample(arm: Arm) -> Sample {
    let t0 = Instant::now();
    let plan = plan(arm.prompt());
    let prompt = &plan.prompts[0].ids;
    let drafting = arm.drafting();
    let mut spec = drafting.as_ref().map(|(settings, rule)| {
        settings
            .speculator(&plan, &engine_options(), prompt.len(), plan.capacity)
            .expect("building the speculator")
            .expect("a drafter")
            .with_rule(*rule)
    });
    let n = arm.runs();
    let first_seed = if spec.is_some() { n } else { 0 };
    let mut session = plan.session().unwrap();
    let decoder = plan.decoder();
    let mut starts = Vec::with_capacity(n);
    for i in 0..n {
        let mut sampler = plan.sampler(first_seed + i, prompt.len()).unwrap();
        let mut generator = generate(
            &plan.engine,
            &mut session,
            prompt,
            &mut sampler,
            &decoder,
            &plan.generation,
        )
        .unwrap();
        if let Some(spec) = spec.as_mut() {
            generator = generator.with_speculator(spec).unwrap();
        }
        let summary = generator.run(|_| {}).unwrap();
        let mut start = [ENDED; GENERATED];
        for (slot, &t) in start.iter_mut().zip(&summary.tokens) {
            *slot = t;
        }
        starts.push(start);
    }
    let stats = spec.map(|s| *s.stats()).unwrap_or_default();
    let seconds = t0.elapsed().as_secs_f64();
    match drafting {
        Some(_) => eprintln!("{arm:?}: {n} runs in {seconds:.1} s; {}", stats.line()),
        None => eprintln!("{arm:?}: {n} runs in {seconds:.1} s"),
    }
    Sample { starts, stats }
}

/// Every arm's sample, taken once per test binary, as many arms at a time as there are cores.
fn samples(arm: Arm) -> &'static Sample {
    static BY_ARM: OnceLock<Vec<Sample>> = OnceLock::new();
    let all = BY_ARM.get_or_init(|| {
        let next = AtomicUsize::new(0);
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        let mut taken: Vec<(usize, Sample)> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..workers.min(Arm::ALL.len()))
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            let Some(&arm) = Arm::ALL.get(i) else {
                                return mine;
                            };
                            mine.push((i, sample(arm)));
                        }
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("sampling an arm"))
                .collect()
        });
        taken.sort_by_key(|(i, _)| *i);
        taken.into_iter().map(|(_, s)| s).collect()
    });
    let i = Arm::ALL.iter().position(|&a| a == arm).unwrap();
    &all[i]
}

/// The entropy in bits of a sample of tokens (plug-in estimate).
fn bits(sample: &[u32]) -> f64 {
    let mut counts: BTreeMap<u32, f64> = BTreeMap::new();
    for &t in sample {
        *counts.entry(t).or_default() += 1.0;
    }
    let n = sample.len() as f64;
    counts
        .into_values()
        .map(|c| -(c / n) * (c / n).log2())
        .sum()
}

/// Pearson's chi-square homogeneity test of two samples of categories: its p-value and
/// degrees of freedom. Categories expected fewer than 5 times in either sample are pooled
/// into one; while the pool (or any cell) is itself that rare, it is merged into the next
/// rarest. One category left: nothing to compare, p = 1.
fn homogeneity_p<K: Ord + Clone>(a: &[K], b: &[K]) -> (f64, usize) {
    let mut table: BTreeMap<K, [f64; 2]> = BTreeMap::new();
    for (arm, sample) in [a, b].into_iter().enumerate() {
        for k in sample {
            table.entry(k.clone()).or_insert([0.0; 2])[arm] += 1.0;
        }
    }
    let rows = [a.len() as f64, b.len() as f64];
    let total = rows[0] + rows[1];
    // A category's expected count in the smaller sample is at least 5 from this total on.
    let needed = 5.0 * total / rows[0].min(rows[1]);
    let column = |c: &[f64; 2]| c[0] + c[1];
    let (mut cells, rare): (Vec<[f64; 2]>, Vec<[f64; 2]>) =
        table.into_values().partition(|c| column(c) >= needed);
    let pool = rare
        .iter()
        .fold([0.0; 2], |acc, c| [acc[0] + c[0], acc[1] + c[1]]);
    if column(&pool) > 0.0 {
        cells.push(pool);
    }
    cells.sort_by(|x, y| column(y).total_cmp(&column(x)));
    while cells.len() > 1 && column(&cells[cells.len() - 1]) < needed {
        let last = cells.pop().unwrap();
        let next = cells.last_mut().unwrap();
        next[0] += last[0];
        next[1] += last[1];
        cells.sort_by(|x, y| column(y).total_cmp(&column(x)));
    }
    if cells.len() < 2 {
        return (1.0, 0);
    }
    let mut stat = 0.0;
    for cell in &cells {
        for arm in 0..2 {
            let expected = rows[arm] * column(cell) / total;
            stat += (cell[arm] - expected).powi(2) / expected;
        }
    }
    let df = cells.len() - 1;
    (upper_gamma_q(df as f64 / 2.0, stat / 2.0), df)
}

/// Whether `drafted` has `plain`'s distribution: the homogeneity test of each position's
/// token and of the drafted pair (positions 2 and 3), Bonferroni-combined (the smallest
/// p-value times the number of tests, at most 1). Each test is written to `report`.
fn same_distribution_p(plain: &[Start], drafted: &[Start], report: &mut String) -> f64 {
    let mut ps = Vec::new();
    for pos in 0..GENERATED {
        let a: Vec<u32> = plain.iter().map(|s| s[pos]).collect();
        let b: Vec<u32> = drafted.iter().map(|s| s[pos]).collect();
        let (p, df) = homogeneity_p(&a, &b);
        report.push_str(&format!(
            "  position {}: p = {p:.4} (df {df}; {:.2} / {:.2} bits)\n",
            pos + 1,
            bits(&a),
            bits(&b)
        ));
        ps.push(p);
    }
    let pair = |s: &Start| (s[1], s[2]);
    let (a, b): (Vec<_>, Vec<_>) = (
        plain.iter().map(pair).collect(),
        drafted.iter().map(pair).collect(),
    );
    let (p, df) = homogeneity_p(&a, &b);
    report.push_str(&format!("  positions 2 and 3: p = {p:.4} (df {df})\n"));
    ps.push(p);
    let min = ps.iter().copied().fold(1.0, f64::min);
    let combined = (min * ps.len() as f64).min(1.0);
    report.push_str(&format!("  combined: p = {combined:.3e}"));
    combined
}

/// The drafter was used (a verification pass in at least every other run), and both outcomes
/// of the rule happened: acceptances and rejections.
fn assert_both_paths(arm: Arm) {
    let stats = &samples(arm).stats;
    assert!(
        stats.passes >= arm.runs() / 2,
        "{arm:?}: {} verification passes in {} runs",
        stats.passes,
        arm.runs()
    );
    assert!(
        stats.accepted > 0 && stats.accepted < stats.drafted,
        "{arm:?}: {} of {} drafted tokens accepted; the test needs both acceptances and rejections",
        stats.accepted,
        stats.drafted
    );
}

/// `arm` against the plain arm of its prompt, whose drafted positions must be spread.
fn p_against_plain(arm: Arm, plain: Arm) -> f64 {
    let plain = &samples(plain).starts;
    for pos in [1, 2] {
        let tokens: Vec<u32> = plain.iter().map(|s| s[pos]).collect();
        let bits = bits(&tokens);
        assert!(
            bits >= MIN_BITS,
            "{:?}: position {} has {bits:.2} bits; the test needs a spread distribution",
            arm.prompt(),
            pos + 1
        );
    }
    let mut report = format!("{arm:?} against the plain runs of {:?}:\n", arm.prompt());
    let p = same_distribution_p(plain, &samples(arm).starts, &mut report);
    eprintln!("{report}");
    p
}

#[test]
fn homogeneity_test_is_calibrated() {
    // Q(1, x) = exp(-x); Q(2.5, 0.5) from tables.
    assert!((upper_gamma_q(1.0, 2.0) - (-2.0f64).exp()).abs() < 1e-10);
    assert!((upper_gamma_q(2.5, 0.5) - 0.96257).abs() < 1e-4);
    // Two categories, 30/70 against 50/50 in samples of 100: statistic 8.333, df 1.
    let a: Vec<u8> = [[0; 30].as_slice(), &[1; 70]].concat();
    let b: Vec<u8> = [[0; 50].as_slice(), &[1; 50]].concat();
    let (p, df) = homogeneity_p(&a, &b);
    assert_eq!(df, 1);
    assert!((p - 0.003892).abs() < 1e-5, "{p}");
    // Rare categories are pooled: 2 and 3 (4 and 2 draws) make a cell of 6, under the 10
    // needed, which is merged into category 0 (the next rarest): cells 24/22 and 40/42,
    // statistic 2/23 + 2/41, df 1.
    let a: Vec<u8> = [[0; 20].as_slice(), &[1; 40], &[2; 4]].concat();
    let b: Vec<u8> = [[0; 20].as_slice(), &[1; 42], &[3; 2]].concat();
    let (p, df) = homogeneity_p(&a, &b);
    assert_eq!(df, 1);
    assert!((p - 0.712556).abs() < 1e-5, "{p}");
    // The same sample: p = 1.
    assert_eq!(homogeneity_p(&a, &a).0, 1.0);
}

#[test]
fn self_speculation_keeps_the_distribution() {
    let Some(_) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_both_paths(Arm::SelfSpeculative);
    let p = p_against_plain(Arm::SelfSpeculative, Arm::OpenPlain);
    assert!(
        p > ALPHA,
        "self-speculation changed the distribution: p = {p:e}"
    );
}

#[test]
fn prompt_lookup_keeps_the_distribution() {
    let Some(_) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_both_paths(Arm::Lookup);
    let p = p_against_plain(Arm::Lookup, Arm::CopyPlain);
    assert!(
        p > ALPHA,
        "prompt lookup changed the distribution: p = {p:e}"
    );
}

#[test]
fn a_wrong_acceptance_rule_fails_the_same_test() {
    let Some(_) = common::real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    assert_both_paths(Arm::WrongRule);
    let p = p_against_plain(Arm::WrongRule, Arm::CopyPlain);
    assert!(p < ALPHA, "the wrong rule passed: p = {p:e}");
}
