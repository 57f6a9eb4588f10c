//! A sampler configuration, logits and a token history, all from the fuzz input: building and
//! sampling return a valid token id or an error, never panic.
#![no_main]

use kindle_sampling::{Mirostat, PenaltyScope, SamplerConfig, Stage};
use libfuzzer_sys::fuzz_target;

/// Reads little-endian values off the fuzz input, zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn u8(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    /// Mostly small, meaningful values, sometimes any bit pattern (NaN, inf, negative, huge).
    fn f32(&mut self) -> f32 {
        match self.u8() % 4 {
            0 => f32::from_bits(self.u32()),
            1 => f32::from(self.u8()) / 255.0,
            2 => f32::from(self.u8()) / 16.0 - 4.0,
            _ => [
                0.0,
                1.0,
                -1.0,
                f32::INFINITY,
                f32::NEG_INFINITY,
                f32::NAN,
                0.5,
                2.0,
            ][usize::from(self.u8() % 8)],
        }
    }
    fn i64(&mut self) -> i64 {
        i64::from(self.u8() as i8)
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let vocab = usize::from(b.u8()) + 1;
    let stages = [
        Stage::Penalties,
        Stage::Dry,
        Stage::TopNSigma,
        Stage::TopK,
        Stage::TypicalP,
        Stage::TopP,
        Stage::MinP,
        Stage::Xtc,
        Stage::Temperature,
    ];
    let mut config = SamplerConfig::neutral();
    config.temperature = b.f32();
    config.top_k = b.i64();
    config.top_p = b.f32();
    config.min_p = b.f32();
    config.typical_p = b.f32();
    config.top_n_sigma = b.f32();
    config.xtc_probability = b.f32();
    config.xtc_threshold = b.f32();
    config.mirostat = match b.u8() % 3 {
        0 => Mirostat::Off,
        1 => Mirostat::V1 {
            tau: b.f32(),
            eta: b.f32(),
        },
        _ => Mirostat::V2 {
            tau: b.f32(),
            eta: b.f32(),
        },
    };
    config.dry.multiplier = b.f32();
    config.dry.base = b.f32();
    config.dry.allowed_length = usize::from(b.u8() % 8);
    config.dry.penalty_last_n = b.i64();
    config.dry.sequence_breakers = (0..b.u8() % 4).map(|_| b.u32() % 300).collect();
    config.repetition_penalty = b.f32();
    config.frequency_penalty = b.f32();
    config.presence_penalty = b.f32();
    config.penalty_last_n = b.i64();
    config.penalty_scope = match b.u8() % 2 {
        0 => PenaltyScope::PromptAndOutput,
        _ => PenaltyScope::OutputOnly,
    };
    config.no_repeat_ngram_size = usize::from(b.u8() % 5);
    config.logit_bias = (0..b.u8() % 4).map(|_| (b.u32() % 300, b.f32())).collect();
    config.min_tokens = usize::from(b.u8() % 4);
    config.eog_ids = (0..b.u8() % 3).map(|_| b.u32() % 300).collect();
    config.seed = Some(u64::from(b.u32()));
    if b.u8() % 2 == 1 {
        config.order = (0..b.u8() % 12)
            .map(|_| stages[usize::from(b.u8()) % stages.len()])
            .collect();
    }
    let prompt_len = usize::from(b.u8() % 16);
    let history: Vec<u32> = (0..b.u8() % 32).map(|_| u32::from(b.u8()) % 300).collect();
    let steps = usize::from(b.u8() % 4) + 1;
    let logits: Vec<f32> = (0..vocab).map(|_| b.f32()).collect();

    let Ok(mut sampler) = config.build() else {
        return;
    };
    sampler.set_prompt_len(prompt_len.min(history.len()));
    let mut history = history;
    for _ in 0..steps {
        let mut row = logits.clone();
        match sampler.sample(&mut row, &history) {
            Ok(id) => {
                assert!(
                    (id as usize) < vocab,
                    "id {id} outside a vocabulary of {vocab}"
                );
                history.push(id);
            }
            Err(_) => break,
        }
    }
});
