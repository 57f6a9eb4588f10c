//! One output sink per format: text, one JSON object, JSON lines. A runner
//! ([`crate::run`]) hands a sink the mode, each token event as it is generated, and the
//! [`Report`] at the end; the sink decides what to print when. Every JSON shape is built in
//! one function here (a token, a sequence, a summary, timings), whatever the mode.

use std::io::Write;

use anyhow::{Result, bail};
use kindle_generate::{Event, Summary, Timings};
use serde_json::{Value, json};

use crate::run::{Mode, Report, Sequence};

pub use crate::run::Sink;

/// The output formats of `kindle generate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Text: a single sequence streamed, several each under a `---` header.
    Text,
    /// One JSON object at the end.
    Json,
    /// One JSON line per generated token, then one per finished sequence.
    Jsonl,
}

/// The sink of `format` writing to `out`; `logprobs`: whether the JSON object of a single
/// sequence lists each token's log-probabilities (`--logprobs`).
pub fn sink_for<'w>(format: Format, out: impl Write + 'w, logprobs: bool) -> Box<dyn Sink + 'w> {
    match format {
        Format::Text => Box::new(TextSink::new(out)),
        Format::Json => Box::new(JsonSink::new(out, logprobs)),
        Format::Jsonl => Box::new(JsonlSink::new(out)),
    }
}

/// Text: a single sequence's text streamed as it comes and ended with a newline; several
/// sequences printed at the end, each after a `--- N` header.
pub struct TextSink<W> {
    out: W,
    stream: bool,
}

impl<W: Write> TextSink<W> {
    /// Text written to `out`.
    pub fn new(out: W) -> Self {
        TextSink { out, stream: true }
    }
}

impl<W: Write> Sink for TextSink<W> {
    fn begin(&mut self, mode: &Mode) -> Result<()> {
        self.stream = *mode == Mode::Single;
        Ok(())
    }

    fn event(&mut self, _index: usize, event: &Event) -> Result<()> {
        if self.stream
            && let Event::Token { text, .. } = event
            && !text.is_empty()
        {
            self.out.write_all(text.as_bytes())?;
            self.out.flush()?;
        }
        Ok(())
    }

    fn finish(&mut self, report: &Report<'_>) -> Result<()> {
        for (i, sequence) in report.sequences.iter().enumerate() {
            match text_header(report, i, sequence) {
                Some(header) => writeln!(self.out, "{header}\n{}", sequence.summary.text)?,
                // The text was streamed.
                None if *report.mode == Mode::Single => writeln!(self.out)?,
                None => writeln!(self.out, "{}", sequence.summary.text)?,
            }
        }
        self.out.flush()?;
        Ok(())
    }
}

/// The `--- N ...` line above sequence `index` of several: the prompt in a batch, the seed of
/// a sample, the score of a beam (none above a single sequence or a lone beam).
fn text_header(report: &Report<'_>, index: usize, sequence: &Sequence) -> Option<String> {
    let n = index + 1;
    match report.mode {
        Mode::Single => None,
        Mode::Batch => Some(format!("--- {n} {}", prompt_debug(report, sequence))),
        Mode::Samples(_) => Some(format!(
            "--- {n} (seed {})",
            sequence.seed.unwrap_or_default()
        )),
        Mode::Beams(_) => match sequence.beam {
            Some(beam) if report.sequences.len() > 1 => {
                Some(format!("--- {n} (score {:.4})", beam.score))
            }
            _ => None,
        },
    }
}

/// A sequence's prompt as a quoted string (its ids when it was given as ids).
fn prompt_debug(report: &Report<'_>, sequence: &Sequence) -> String {
    let prompt = &report.prompts[sequence.prompt];
    match &prompt.text {
        Some(text) => format!("{text:?}"),
        None => format!("{:?}", prompt.ids),
    }
}

/// One JSON object at the end: the (best or first) sequence's summary, with every sequence
/// under `sequences` when there are several; a batch's object lists its sequences and the
/// batch's timings.
pub struct JsonSink<W> {
    out: W,
    logprobs: bool,
    tokens: Vec<Value>,
}

impl<W: Write> JsonSink<W> {
    /// JSON written to `out`; `logprobs`: list each token of a single sequence under
    /// `logprobs`.
    pub fn new(out: W, logprobs: bool) -> Self {
        JsonSink {
            out,
            logprobs,
            tokens: Vec::new(),
        }
    }
}

impl<W: Write> Sink for JsonSink<W> {
    fn begin(&mut self, mode: &Mode) -> Result<()> {
        self.logprobs &= *mode == Mode::Single;
        self.tokens.clear();
        Ok(())
    }

    fn event(&mut self, _index: usize, event: &Event) -> Result<()> {
        if self.logprobs
            && let Some(line) = token_json(event)
        {
            self.tokens.push(line);
        }
        Ok(())
    }

    fn finish(&mut self, report: &Report<'_>) -> Result<()> {
        let sequences = || -> Value {
            report
                .sequences
                .iter()
                .map(|s| sequence_json(report, s))
                .collect()
        };
        let out = match report.mode {
            Mode::Batch => json!({
                "batch_size": report.prompts.len(),
                "sequences": sequences(),
                "timings": {
                    "wall_ms": report.wall.as_secs_f64() * 1e3,
                    "prompt_tokens": report.prompts.iter().map(|p| p.ids.len()).sum::<usize>(),
                    "generated_tokens": report.generated_tokens(),
                    "generated_tokens_per_second": report.throughput(),
                },
            }),
            Mode::Beams(beam) => {
                let best = report.sequences.first().map(|s| &s.summary);
                json!({
                    "prompt_tokens": report.prompts[0].ids,
                    "tokens": best.map(|s| s.tokens.clone()).unwrap_or_default(),
                    "text": best.map(|s| s.text.clone()).unwrap_or_default(),
                    "finish_reason": best.map(|s| s.finish_reason.as_str()),
                    "num_beams": beam.num_beams,
                    "timings": timings_json(&report.timings.unwrap_or_default()),
                    "sequences": sequences(),
                })
            }
            Mode::Single | Mode::Samples(_) => {
                let Some(first) = report.sequences.first() else {
                    bail!("the run produced no sequence");
                };
                let ids = &report.prompts[first.prompt].ids;
                let mut out = summary_json(ids, &first.summary, first.seed);
                if matches!(report.mode, Mode::Samples(_)) {
                    out["sequences"] = sequences();
                }
                if self.logprobs {
                    out["logprobs"] = Value::Array(std::mem::take(&mut self.tokens));
                }
                out
            }
        };
        writeln!(self.out, "{out}")?;
        self.out.flush()?;
        Ok(())
    }
}

/// JSON lines: one per generated token as it comes (tagged with `sample` when there are
/// several samples), then one per finished sequence.
pub struct JsonlSink<W> {
    out: W,
    mode: Mode,
}

impl<W: Write> JsonlSink<W> {
    /// JSON lines written to `out`.
    pub fn new(out: W) -> Self {
        JsonlSink {
            out,
            mode: Mode::Single,
        }
    }
}

impl<W: Write> Sink for JsonlSink<W> {
    fn begin(&mut self, mode: &Mode) -> Result<()> {
        self.mode = mode.clone();
        Ok(())
    }

    fn event(&mut self, index: usize, event: &Event) -> Result<()> {
        let sample = match self.mode {
            Mode::Single => None,
            Mode::Samples(_) => Some(index),
            Mode::Beams(_) | Mode::Batch => return Ok(()),
        };
        if let Some(mut line) = token_json(event) {
            if let Some(sample) = sample {
                line["sample"] = json!(sample);
            }
            writeln!(self.out, "{line}")?;
            self.out.flush()?;
        }
        Ok(())
    }

    fn finish(&mut self, report: &Report<'_>) -> Result<()> {
        for (i, sequence) in report.sequences.iter().enumerate() {
            let line = match report.mode {
                Mode::Single => done_json(&sequence.summary),
                Mode::Samples(_) => {
                    let mut line = done_json(&sequence.summary);
                    line["sample"] = json!(i);
                    line["seed"] = json!(sequence.seed);
                    line
                }
                Mode::Beams(_) | Mode::Batch => sequence_json(report, sequence),
            };
            writeln!(self.out, "{line}")?;
        }
        self.out.flush()?;
        Ok(())
    }
}

/// A token event: `{token, text, logprob[, top_logprobs: [[id, logprob], ...]]}` (`None` for
/// `Done`).
pub fn token_json(event: &Event) -> Option<Value> {
    let Event::Token {
        id,
        text,
        logprob,
        top_logprobs,
    } = event
    else {
        return None;
    };
    let mut line = json!({ "token": id, "text": text, "logprob": logprob });
    if !top_logprobs.is_empty() {
        line["top_logprobs"] = top_logprobs
            .iter()
            .map(|&(id, lp)| json!([id, lp]))
            .collect();
    }
    Some(line)
}

/// One finished sequence among several: `{prompt, tokens, text, finish_reason}`, with the
/// prompt's ids in a batch, the scores of a beam and the seed of a sample.
pub fn sequence_json(report: &Report<'_>, sequence: &Sequence) -> Value {
    let prompt = &report.prompts[sequence.prompt];
    let summary = &sequence.summary;
    let mut out = json!({
        "prompt": prompt.text,
        "tokens": summary.tokens,
        "text": summary.text,
        "finish_reason": summary.finish_reason.as_str(),
    });
    if *report.mode == Mode::Batch {
        out["prompt_tokens"] = json!(prompt.ids);
    }
    if let Some(beam) = sequence.beam {
        out["score"] = json!(beam.score);
        out["sum_logprob"] = json!(beam.sum_logprob);
    }
    if let Some(seed) = sequence.seed {
        out["seed"] = json!(seed);
    }
    out
}

/// The last JSON line of a sequence: finish reason, stop, counts, text, timings.
pub fn done_json(summary: &Summary) -> Value {
    json!({
        "finish_reason": summary.finish_reason.as_str(),
        "stop": summary.stop.as_ref().map(|s| format!("{s:?}")),
        "prompt_tokens": summary.prompt_tokens,
        "generated_tokens": summary.generated_tokens,
        "text": summary.text,
        "timings": timings_json(&summary.timings),
    })
}

/// The JSON object of one generation from `prompt_ids`.
pub fn summary_json(prompt_ids: &[u32], summary: &Summary, seed: Option<u64>) -> Value {
    json!({
        "prompt_tokens": prompt_ids,
        "tokens": summary.tokens,
        "text": summary.text,
        "finish_reason": summary.finish_reason.as_str(),
        "stop": summary.stop.as_ref().map(|s| format!("{s:?}")),
        "seed": seed,
        "timings": timings_json(&summary.timings),
    })
}

/// Prefill and decode times, token counts and rates.
pub fn timings_json(timings: &Timings) -> Value {
    json!({
        "prefill_ms": timings.prefill.as_secs_f64() * 1e3,
        "decode_ms": timings.decode.as_secs_f64() * 1e3,
        "prefill_tokens": timings.prefill_tokens,
        "decode_tokens": timings.decode_tokens,
        "prefill_tokens_per_second": timings.prefill_tokens_per_second(),
        "decode_tokens_per_second": timings.decode_tokens_per_second(),
        "constraint": timings.constraint.map(|c| json!({
            "masks": c.masks,
            "forced_tokens": c.forced,
            "mask_ms": c.mask_total.as_secs_f64() * 1e3,
            "mask_p50_ms": c.mask_p50.as_secs_f64() * 1e3,
            "mask_p99_ms": c.mask_p99.as_secs_f64() * 1e3,
        })),
    })
}
