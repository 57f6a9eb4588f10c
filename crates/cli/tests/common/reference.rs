//! Checks of a model against llama.cpp's reference outputs, shared by the test binaries, under
//! the reference's rules (`how_to_compare` in the file): teacher-forced, the argmax matches
//! wherever llama.cpp's margin is >= 0.5 and every top-5 logprob is within 0.6 of llama.cpp's;
//! free-running, greedy output matches up to the first step whose margin is below 0.5.
//!
//! The teacher-forced comparison collects what it finds ([`TeacherForced`]) instead of
//! panicking at the first difference, so that a test can show it catches a planted one.

use super::*;
use kindle_gguf::GgufFile;
use kindle_model::{Llama, LogitsFor, OpenDevice};
use kindle_sampling::logprobs::{argmax, log_sum_exp, logprob};
use std::fmt;
use std::sync::OnceLock;

pub const MARGIN: f64 = 0.5;
pub const LOGPROB_TOLERANCE: f64 = 0.6;

/// The real model (SmolLM2) on flex, loaded once; `None` only with
/// `KINDLE_SKIP_REAL_MODEL=1`.
pub fn model() -> Option<&'static Llama> {
    model_of(RealModel::SmolLM2)
}

/// A real model on flex, loaded once; `None` only with `KINDLE_SKIP_REAL_MODEL=1`.
pub fn model_of(which: RealModel) -> Option<&'static Llama> {
    static SMOLLM2: OnceLock<Llama> = OnceLock::new();
    static GEMMA3: OnceLock<Llama> = OnceLock::new();
    let cell = match which {
        RealModel::SmolLM2 => &SMOLLM2,
        RealModel::Gemma3 => &GEMMA3,
    };
    let path = which.path()?;
    Some(cell.get_or_init(|| {
        let file = GgufFile::open(path).expect("opening the model");
        Llama::load(&file, &OpenDevice::flex()).expect("loading the model")
    }))
}

/// How a sequence of tokens goes through the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Passes {
    /// One forward pass. Sixteen rows or more are a prefill, which runs in the selected
    /// activation format where the batched kernels apply (packed weights, a SIMD level), and
    /// otherwise as a dense `f32` product of dequantised weights.
    One,
    /// Forward passes of at most this many rows, each attending to what the ones before it
    /// cached (under 16 rows, every row goes through the selected activation format).
    Slices(usize),
}

impl Passes {
    /// The rows of each pass over `len` tokens.
    fn rows(self, len: usize) -> usize {
        match self {
            Passes::One => len.max(1),
            Passes::Slices(rows) => rows,
        }
    }
}

/// The logits of every position of `tokens` (`tokens.len()` rows of the vocabulary), from a
/// fresh cache, the tokens fed as `passes` say.
pub fn all_logits(model: &Llama, tokens: &[u32], passes: Passes) -> Vec<f32> {
    let mut cache = model.new_cache(tokens.len());
    let mut logits = Vec::new();
    for chunk in tokens.chunks(passes.rows(tokens.len())) {
        logits.extend(model.forward(chunk, &mut cache, LogitsFor::All).unwrap());
    }
    logits
}

/// One top-5 logprob set against llama.cpp's.
#[derive(Clone, Debug, PartialEq)]
pub struct Deviation {
    /// The reference prompt.
    pub prompt: String,
    /// The step (0: the last prompt position).
    pub step: usize,
    /// The token whose logprob this is.
    pub token: u32,
    /// Ours.
    pub ours: f32,
    /// llama.cpp's.
    pub llama_cpp: f64,
}

impl Deviation {
    pub fn diff(&self) -> f64 {
        (f64::from(self.ours) - self.llama_cpp).abs()
    }
}

impl fmt::Display for Deviation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: step {}, token {}: logprob {:.4} vs llama.cpp {:.4} (difference {:.4})",
            self.prompt,
            self.step,
            self.token,
            self.ours,
            self.llama_cpp,
            self.diff()
        )
    }
}

/// What the teacher-forced comparison found: every top-5 logprob against llama.cpp's, and the
/// steps whose argmax breaks the margin rule.
#[derive(Debug, Default)]
pub struct TeacherForced {
    /// Every top-5 logprob compared, in order.
    pub deviations: Vec<Deviation>,
    /// The steps where the argmax differs from llama.cpp's and its margin was decisive, in
    /// words.
    pub argmax_violations: Vec<String>,
}

impl TeacherForced {
    /// Compares one step (`reference`: llama.cpp's entry of `steps`) given the model's
    /// log-probability of each token and its argmax.
    pub fn check_step(
        &mut self,
        prompt: &str,
        step: usize,
        reference: &Value,
        logprob: impl Fn(u32) -> f32,
        argmax: u32,
    ) {
        let margin = reference["margin"].as_f64().unwrap();
        let want = reference["argmax"].as_u64().unwrap() as u32;
        if margin >= MARGIN && argmax != want {
            self.argmax_violations.push(format!(
                "{prompt}: argmax at step {step} is {argmax}, llama.cpp's {want} (margin {margin})"
            ));
        }
        for pair in reference["top5"].as_array().unwrap() {
            let token = pair[0].as_u64().unwrap() as u32;
            self.deviations.push(Deviation {
                prompt: prompt.into(),
                step,
                token,
                ours: logprob(token),
                llama_cpp: pair[1].as_f64().unwrap(),
            });
        }
    }

    /// [`check_step`](Self::check_step) on a row of logits.
    pub fn check_row(&mut self, prompt: &str, step: usize, reference: &Value, row: &[f32]) {
        let lse = log_sum_exp(row);
        let best = argmax(row).expect("a logits row is not empty");
        self.check_step(prompt, step, reference, |id| logprob(row, lse, id), best);
    }

    /// The top-5 logprobs further than `tolerance` from llama.cpp's (or NaN).
    pub fn past(&self, tolerance: f64) -> Vec<&Deviation> {
        self.deviations
            .iter()
            .filter(|d| d.diff().is_nan() || d.diff() > tolerance)
            .collect()
    }

    /// The largest top-5 logprob difference over every prompt.
    pub fn worst(&self) -> Option<&Deviation> {
        self.deviations
            .iter()
            .max_by(|a, b| a.diff().total_cmp(&b.diff()))
    }

    /// `Err` listing every argmax violation and every top-5 logprob further than `tolerance`
    /// from llama.cpp's.
    pub fn result(&self, tolerance: f64) -> Result<(), String> {
        let mut violations = self.argmax_violations.clone();
        violations.extend(
            self.past(tolerance)
                .iter()
                .map(|d| format!("{d}, over {tolerance}")),
        );
        if violations.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} violations of llama.cpp's reference rules:\n{}",
            violations.len(),
            violations.join("\n")
        ))
    }

    /// Notes each prompt's steps and largest difference on standard error.
    pub fn report(&self) {
        for run in self.deviations.chunk_by(|a, b| a.prompt == b.prompt) {
            let worst = run
                .iter()
                .max_by(|a, b| a.diff().total_cmp(&b.diff()))
                .expect("a run is not empty");
            let steps = run[run.len() - 1].step + 1;
            eprintln!("{steps} steps, largest top-5 difference: {worst}");
        }
    }
}

/// Teacher-forced over every reference prompt of SmolLM2: see [`teacher_forced_on`].
pub fn teacher_forced(model: &Llama, passes: Passes) -> TeacherForced {
    teacher_forced_on(model, RealModel::SmolLM2, passes)
}

/// Teacher-forced over every reference prompt of `which`: the prompt and llama.cpp's greedy
/// continuation fed as `passes` say, every step's distribution compared.
pub fn teacher_forced_on(model: &Llama, which: RealModel, passes: Passes) -> TeacherForced {
    teacher_forced_over(model, &which.prompts(), passes)
}

/// Teacher-forced over `prompts` (entries of a reference's `prompts`, by name): the prompt
/// and llama.cpp's greedy continuation fed as `passes` say, every step's distribution
/// compared.
pub fn teacher_forced_over(
    model: &Llama,
    prompts: &[(String, &Value)],
    passes: Passes,
) -> TeacherForced {
    let vocab = model.config().vocab_size;
    let mut found = TeacherForced::default();
    for (name, prompt) in prompts {
        let prompt_ids = ids(&prompt["prompt_ids"]);
        let greedy = ids(&prompt["greedy_ids"]);
        let mut all = prompt_ids.clone();
        all.extend_from_slice(&greedy[..greedy.len() - 1]);
        let logits = all_logits(model, &all, passes);
        for (i, step) in prompt["steps"].as_array().unwrap().iter().enumerate() {
            let pos = prompt_ids.len() - 1 + i;
            found.check_row(name, i, step, &logits[pos * vocab..(pos + 1) * vocab]);
        }
    }
    found
}

/// Teacher-forced in one pass per SmolLM2 prompt; panics listing every violation.
pub fn check_teacher_forced(model: &Llama) {
    check_teacher_forced_on(model, RealModel::SmolLM2);
}

/// Teacher-forced in one pass per prompt of `which`; panics listing every violation.
pub fn check_teacher_forced_on(model: &Llama, which: RealModel) {
    let found = teacher_forced_on(model, which, Passes::One);
    found.report();
    if let Err(message) = found.result(LOGPROB_TOLERANCE) {
        panic!("{message}");
    }
}

/// Free-running greedy decoding against llama.cpp's on SmolLM2: see [`check_free_running_on`].
pub fn check_free_running(model: &Llama, passes: Passes) {
    check_free_running_on(model, RealModel::SmolLM2, passes);
}

/// Free-running greedy decoding against llama.cpp's on `which`, up to the first close call;
/// the prompt prefilled as `passes` say. Returns the decisive steps checked.
pub fn check_free_running_on(model: &Llama, which: RealModel, passes: Passes) -> usize {
    check_free_running_over(model, &which.prompts(), passes)
}

/// Free-running greedy decoding against llama.cpp's over `prompts`, up to each one's first
/// close call; the prompt prefilled as `passes` say. Returns the decisive steps checked.
pub fn check_free_running_over(
    model: &Llama,
    prompts: &[(String, &Value)],
    passes: Passes,
) -> usize {
    let vocab = model.config().vocab_size;
    let mut total = 0;
    for (name, prompt) in prompts {
        let prompt_ids = ids(&prompt["prompt_ids"]);
        let greedy = ids(&prompt["greedy_ids"]);
        let steps = prompt["steps"].as_array().unwrap();
        let checked = steps
            .iter()
            .position(|s| s["margin"].as_f64().unwrap() < MARGIN)
            .unwrap_or(steps.len());
        let mut cache = model.new_cache(prompt_ids.len() + checked + 1);
        let mut logits = Vec::new();
        for chunk in prompt_ids.chunks(passes.rows(prompt_ids.len())) {
            logits = model.forward(chunk, &mut cache, LogitsFor::Last).unwrap();
        }
        assert_eq!(logits.len(), vocab);
        let mut out = Vec::new();
        for _ in 0..checked {
            let next = argmax(&logits).expect("a logits row is not empty");
            out.push(next);
            logits = model.forward(&[next], &mut cache, LogitsFor::Last).unwrap();
        }
        assert_eq!(
            out,
            greedy[..checked],
            "{name}: greedy continuation (first {checked} steps are decisive)"
        );
        eprintln!("{name}: {checked} decisive greedy steps match");
        total += checked;
    }
    total
}

/// The largest difference of `logits` (rows of the vocabulary) from the positions of a
/// top-logits reference (each position's top logits and log-sum-exp, as
/// `llama_cpp_top_logits.c` writes them).
pub fn top_logits_difference(logits: &[f32], vocab: usize, positions: &[Value]) -> f32 {
    let mut worst = 0f32;
    for (row, want) in logits.chunks(vocab).zip(positions) {
        let lse = log_sum_exp(row);
        worst = worst.max((lse - want["lse"].as_f64().unwrap()).abs() as f32);
        for pair in want["top"].as_array().unwrap() {
            let id = pair[0].as_u64().unwrap() as usize;
            worst = worst.max((row[id] - pair[1].as_f64().unwrap() as f32).abs());
        }
    }
    worst
}

/// For each sequence of a top-logits reference (`reference["prompts"]`): `model`'s largest
/// difference from it in one pass (prefill) and token by token (decode).
pub fn top_logits_differences(model: &Llama, reference: &Value) -> Vec<(String, f32, f32)> {
    let vocab = model.config().vocab_size;
    let mut found = Vec::new();
    for (name, case) in reference["prompts"].as_object().unwrap() {
        let tokens = ids(&case["tokens"]);
        let positions = case["positions"].as_array().unwrap();
        let mut cache = model.new_cache(tokens.len());
        let all = model.forward(&tokens, &mut cache, LogitsFor::All).unwrap();
        let mut cache = model.new_cache(tokens.len());
        let steps: Vec<f32> = tokens
            .iter()
            .flat_map(|&t| model.forward(&[t], &mut cache, LogitsFor::Last).unwrap())
            .collect();
        found.push((
            name.clone(),
            top_logits_difference(&all, vocab, positions),
            top_logits_difference(&steps, vocab, positions),
        ));
    }
    found
}
