//! Beam search and several samples against fake models whose logits depend on the history.

mod common;

use std::cell::Cell;
use std::convert::Infallible;

use common::HistoryCache;
use kindle_generate::{
    BeamConfig, EarlyStopping, FinishReason, GenerateError, GenerationConfig, LanguageModel,
    Session, TokenDecoder, beam_search, generate_samples, generate_to_end,
};
use kindle_sampling::logprobs::log_softmax;
use kindle_sampling::{Sampler, SamplerConfig};

/// Logits are a hash of (seed, history, token): deterministic, history-dependent, and spread
/// enough that greedy decoding is usually not optimal. Counts the tokens fed.
struct HashModel {
    vocab: usize,
    seed: u64,
    /// Add this to the end-of-sequence token's logit (id `vocab - 1`).
    eos_bias: f32,
    fed: Cell<usize>,
}

impl HashModel {
    fn new(vocab: usize, seed: u64) -> Self {
        HashModel {
            vocab,
            seed,
            eos_bias: 0.0,
            fed: Cell::new(0),
        }
    }

    fn row(&self, history: &[u32]) -> Vec<f32> {
        (0..self.vocab as u64)
            .map(|t| {
                let mut h = self.seed ^ 0x9E37_79B9_7F4A_7C15;
                for &x in history.iter().chain([&(t as u32)]) {
                    h = (h ^ u64::from(x)).wrapping_mul(0x100_0000_01B3);
                    h ^= h >> 29;
                }
                let base = (h % 1000) as f32 / 250.0;
                if t as usize == self.vocab - 1 {
                    base + self.eos_bias
                } else {
                    base
                }
            })
            .collect()
    }

    fn eos(&self) -> u32 {
        self.vocab as u32 - 1
    }
}

impl LanguageModel for HashModel {
    type Cache = HistoryCache;
    type Error = Infallible;
    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn context_length(&self) -> usize {
        64
    }
    fn new_cache(&self, capacity: usize) -> Result<HistoryCache, Infallible> {
        Ok(HistoryCache::new(capacity))
    }
    fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut HistoryCache,
    ) -> Result<Vec<f32>, Infallible> {
        self.fed.set(self.fed.get() + tokens.len());
        cache.tokens.extend_from_slice(tokens);
        Ok(self.row(&cache.tokens))
    }
    fn forward_all(
        &self,
        tokens: &[u32],
        cache: &mut HistoryCache,
    ) -> Result<Vec<f32>, Infallible> {
        let mut out = Vec::new();
        for &t in tokens {
            out.extend(self.forward_last(&[t], cache)?);
        }
        Ok(out)
    }
}

/// Token `i` is the letter `'a' + i`.
struct Letters;
impl TokenDecoder for Letters {
    type Error = Infallible;
    fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
        Ok(ids.iter().map(|&i| (b'a' + i as u8) as char).collect())
    }
}

/// Every finished sequence (ending in EOS, or `depth` tokens long) with its score.
fn exhaustive(model: &HashModel, prompt: &[u32], depth: usize, lp: f64) -> Vec<(f64, Vec<u32>)> {
    let mut out = Vec::new();
    let mut stack = vec![(Vec::<u32>::new(), 0f64)];
    while let Some((seq, sum)) = stack.pop() {
        let history: Vec<u32> = prompt.iter().chain(&seq).copied().collect();
        let row = log_softmax(&model.row(&history));
        for t in 0..model.vocab as u32 {
            let mut next = seq.clone();
            next.push(t);
            let s = sum + f64::from(row[t as usize]);
            if t == model.eos() || next.len() == depth {
                out.push((s / (next.len() as f64).powf(lp), next));
            } else {
                stack.push((next, s));
            }
        }
    }
    out.sort_by(|a, b| b.0.total_cmp(&a.0));
    out
}

fn greedy(model: &HashModel, prompt: &[u32], depth: usize) -> Vec<u32> {
    let mut session = Session::new(model, 64).unwrap();
    let config = GenerationConfig::default()
        .with_max_new_tokens(depth)
        .with_eog_token_ids([model.eos()]);
    generate_to_end(
        model,
        &mut session,
        prompt,
        &mut Sampler::greedy(),
        &Letters,
        &config,
    )
    .unwrap()
    .tokens
}

fn run(
    model: &HashModel,
    prompt: &[u32],
    depth: usize,
    beam: BeamConfig,
) -> kindle_generate::BeamOutput {
    let mut session = Session::new(model, 64).unwrap();
    let config = GenerationConfig::default()
        .with_max_new_tokens(depth)
        .with_eog_token_ids([model.eos()]);
    let out = beam_search(model, &mut session, prompt, &Letters, &config, &beam).unwrap();
    // The caller's session keeps the shared prompt prefix.
    assert_eq!(session.tokens(), &prompt[..prompt.len() - 1]);
    out
}

#[test]
fn enough_beams_find_the_exhaustive_optimum() {
    let prompt = [0, 1];
    let mut greedy_was_beaten = 0;
    for seed in 0..40 {
        for (vocab, depth) in [(4, 3), (5, 3), (4, 4)] {
            for lp in [1.0f32, 0.0, 2.0, -0.5] {
                let model = HashModel::new(vocab, seed);
                let all = exhaustive(&model, &prompt, depth, f64::from(lp));
                let beams = vocab.pow(depth as u32);
                let out = run(
                    &model,
                    &prompt,
                    depth,
                    BeamConfig {
                        num_beams: beams,
                        num_return_sequences: 3,
                        length_penalty: lp,
                        early_stopping: EarlyStopping::Never,
                    },
                );
                let got: Vec<f64> = out.sequences.iter().map(|s| s.score).collect();
                let want: Vec<f64> = all.iter().take(3).map(|a| a.0).collect();
                for (g, w) in got.iter().zip(&want) {
                    assert!(
                        (g - w).abs() < 1e-5,
                        "seed {seed} lp {lp}: {got:?} vs {want:?}"
                    );
                }
                assert_eq!(out.sequences[0].tokens, all[0].1, "seed {seed} lp {lp}");
                let best = &out.sequences[0];
                let ends_in_eos = best.tokens.last() == Some(&model.eos());
                assert_eq!(
                    best.finish_reason,
                    if ends_in_eos {
                        FinishReason::Stop
                    } else {
                        FinishReason::Length
                    }
                );
                let text: String = best
                    .tokens
                    .iter()
                    .filter(|&&t| t != model.eos())
                    .map(|&t| (b'a' + t as u8) as char)
                    .collect();
                assert_eq!(best.text, text);
                if lp == 1.0 && greedy(&model, &prompt, depth) != all[0].1 {
                    greedy_was_beaten += 1;
                }
            }
        }
    }
    assert!(
        greedy_was_beaten > 10,
        "the fake model makes greedy sub-optimal"
    );
}

#[test]
fn one_beam_is_greedy_and_beams_share_the_prompt() {
    let prompt = [2, 0, 1, 3, 0];
    for seed in 0..20 {
        let model = HashModel::new(5, seed);
        let want = greedy(&model, &prompt, 6);
        let out = run(
            &model,
            &prompt,
            6,
            BeamConfig {
                num_beams: 1,
                ..BeamConfig::default()
            },
        );
        assert_eq!(out.sequences[0].tokens, want, "seed {seed}");

        // With 3 beams: the prompt is fed once, then one token per live beam per step.
        let model = HashModel::new(5, seed);
        let out = run(&model, &prompt, 6, BeamConfig::default());
        assert_eq!(out.timings.prefill_tokens, prompt.len());
        assert_eq!(model.fed.get(), prompt.len() + out.timings.decode_tokens);
        assert!(out.timings.decode_tokens <= 4 * 5);
    }
}

#[test]
fn early_stopping_modes() {
    // EOS is likely everywhere: hypotheses finish at once. The search length differs by mode.
    let prompt = [0];
    let depth = 12;
    let mut lengths = [0usize; 3];
    let mut fed = [0usize; 3];
    let mut scores = [0f64; 3];
    for seed in 0..30 {
        for (i, mode) in [
            EarlyStopping::Immediate,
            EarlyStopping::Heuristic,
            EarlyStopping::Never,
        ]
        .into_iter()
        .enumerate()
        {
            let mut model = HashModel::new(4, seed);
            model.eos_bias = 1.5;
            let out = run(
                &model,
                &prompt,
                depth,
                BeamConfig {
                    num_beams: 2,
                    num_return_sequences: 2,
                    length_penalty: 2.0,
                    early_stopping: mode,
                },
            );
            assert_eq!(out.sequences.len(), 2);
            assert!(out.sequences[0].score >= out.sequences[1].score);
            fed[i] += model.fed.get();
            scores[i] += out.sequences[0].score;
            lengths[i] += out.sequences[0].tokens.len();
            if mode == EarlyStopping::Immediate {
                // Done as soon as two hypotheses are finished: at most depth 2 here (the eos
                // candidates of step 1 and 2 are among the 2 best).
                let longest = out.sequences.iter().map(|s| s.tokens.len()).max().unwrap();
                assert!(longest <= depth);
            }
        }
    }
    // Stopping later can only find better (or equal) hypotheses, at more cost.
    assert!(fed[0] <= fed[1] && fed[1] <= fed[2], "tokens fed {fed:?}");
    assert!(fed[0] < fed[2], "the modes differ: {fed:?}");
    assert!(
        scores[0] <= scores[1] + 1e-9 && scores[1] <= scores[2] + 1e-9,
        "{scores:?}"
    );
    assert!(lengths[0] <= lengths[2], "{lengths:?}");
}

#[test]
fn immediate_stops_once_num_beams_hypotheses_finished() {
    // A model where EOS is the argmax everywhere: with 2 beams, step 1 finishes one hypothesis
    // (EOS ranks first), step 2 another; Immediate stops there.
    let mut model = HashModel::new(4, 3);
    model.eos_bias = 20.0;
    let out = run(
        &model,
        &[1],
        10,
        BeamConfig {
            num_beams: 2,
            num_return_sequences: 2,
            length_penalty: 1.0,
            early_stopping: EarlyStopping::Immediate,
        },
    );
    let lens: Vec<usize> = out.sequences.iter().map(|s| s.tokens.len()).collect();
    assert_eq!(lens, [1, 2]);
    assert!(
        out.sequences
            .iter()
            .all(|s| s.finish_reason == FinishReason::Stop)
    );
    // The prompt (1) plus two beams for one step.
    assert_eq!(model.fed.get(), 3);
}

#[test]
fn bad_settings_are_errors() {
    let model = HashModel::new(4, 0);
    let mut session = Session::new(&model, 64).unwrap();
    let config = GenerationConfig::default().with_max_new_tokens(3);
    for beam in [
        BeamConfig {
            num_beams: 0,
            ..BeamConfig::default()
        },
        BeamConfig {
            num_return_sequences: 5,
            ..BeamConfig::default()
        },
        BeamConfig {
            length_penalty: f32::NAN,
            ..BeamConfig::default()
        },
    ] {
        assert!(matches!(
            beam_search(&model, &mut session, &[1], &Letters, &config, &beam),
            Err(GenerateError::InvalidBeamConfig(_))
        ));
    }
    assert!(matches!(
        beam_search(
            &model,
            &mut session,
            &[],
            &Letters,
            &config,
            &BeamConfig::default()
        ),
        Err(GenerateError::EmptyPrompt)
    ));
    assert_eq!("never".parse(), Ok(EarlyStopping::Never));
    assert_eq!("TRUE".parse(), Ok(EarlyStopping::Immediate));
    assert!("maybe".parse::<EarlyStopping>().is_err());
}

#[test]
fn samples_share_the_prompt_and_follow_their_seeds() {
    let model = HashModel::new(5, 7);
    let prompt = [0, 1, 2, 3];
    let config = GenerationConfig::default().with_max_new_tokens(8);
    let sampler = |seed| {
        SamplerConfig {
            temperature: 1.0,
            seed: Some(seed),
            ..SamplerConfig::default()
        }
        .build()
        .unwrap()
    };
    let mut samplers: Vec<Sampler> = (10..14).map(sampler).collect();
    let mut session = Session::new(&model, 64).unwrap();
    let mut events = [0usize; 4];
    let summaries = generate_samples(
        &model,
        &mut session,
        &prompt,
        &mut samplers,
        &Letters,
        &config,
        |i, _| events[i] += 1,
    )
    .unwrap();
    assert_eq!(summaries.len(), 4);
    assert_eq!(session.tokens(), &prompt[..3]);
    // Prefix once, then per sample: the last prompt token and 7 decode steps.
    assert_eq!(model.fed.get(), 3 + 4 * 8);
    for (i, summary) in summaries.iter().enumerate() {
        assert_eq!(summary.timings.prefill_tokens, 1);
        assert_eq!(events[i], 8);
        // Same as a lone run with the same seed.
        let mut alone = Session::new(&model, 64).unwrap();
        let want = generate_to_end(
            &model,
            &mut alone,
            &prompt,
            &mut sampler(10 + i as u64),
            &Letters,
            &config,
        )
        .unwrap();
        assert_eq!(summary.tokens, want.tokens);
    }
    assert!(
        summaries.iter().any(|s| s.tokens != summaries[0].tokens),
        "different seeds give different samples"
    );
}
