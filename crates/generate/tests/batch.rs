//! `generate_batch`: several sequences in lockstep, one batched forward pass per step, against a
//! fake model whose prediction depends on the whole history.

mod common;

use common::HistoryCache;
use kindle_generate::{
    GenerationConfig, LanguageModel, Session, TokenDecoder, generate_batch, generate_to_end,
};
use kindle_sampling::Sampler;
use std::convert::Infallible;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Predicts (sum of the history * 3 + 1) mod vocab; records each batched call's lengths;
/// runs `for_each_task` on three threads of its own, counting the tasks they ran.
struct Echo {
    vocab: usize,
    batches: Mutex<Vec<Vec<usize>>>,
    task_runs: AtomicUsize,
}

impl Echo {
    fn new(vocab: usize) -> Self {
        Echo {
            vocab,
            batches: Mutex::new(Vec::new()),
            task_runs: AtomicUsize::new(0),
        }
    }
    fn batch_calls(&self) -> Vec<Vec<usize>> {
        self.batches.lock().unwrap().clone()
    }
    fn row(&self, history: &[u32]) -> Vec<f32> {
        let next = (history.iter().map(|&t| t as usize).sum::<usize>() * 3 + 1) % self.vocab;
        (0..self.vocab)
            .map(|i| if i == next { 5.0 } else { -(i as f32) * 0.01 })
            .collect()
    }
}

impl LanguageModel for Echo {
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
            cache.tokens.push(t);
            out.extend(self.row(&cache.tokens));
        }
        Ok(out)
    }
    fn forward_batch(
        &self,
        batch: &mut [(&[u32], &mut HistoryCache)],
    ) -> Result<Vec<Vec<f32>>, Infallible> {
        self.batches
            .lock()
            .unwrap()
            .push(batch.iter().map(|(t, _)| t.len()).collect());
        batch
            .iter_mut()
            .map(|(tokens, cache)| self.forward_last(tokens, cache))
            .collect()
    }
    fn for_each_task(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        common::on_three_threads(n, &|i| {
            task(i);
            self.task_runs.fetch_add(1, Ordering::SeqCst);
        });
    }
}

impl TokenDecoder for Echo {
    type Error = Infallible;
    fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
        Ok(ids.iter().map(|&i| (b'a' + i as u8) as char).collect())
    }
}

/// Greedy outputs of a batch equal those of each prompt run alone, the prompts of
/// different lengths are prefilled together and finished sequences drop out.
#[test]
fn a_batch_gives_each_prompt_its_solo_output() {
    let model = Echo::new(8);
    let prompts: Vec<Vec<u32>> = vec![vec![1], vec![2, 3, 4], vec![5, 6], vec![7, 0, 1, 2]];
    let config = GenerationConfig::default()
        .with_max_new_tokens(5)
        .with_eog_token_ids([0]);
    let solo: Vec<_> = prompts
        .iter()
        .map(|p| {
            let mut session = Session::new(&model, 32).unwrap();
            generate_to_end(
                &model,
                &mut session,
                p,
                &mut Sampler::greedy(),
                &model,
                &config,
            )
            .unwrap()
        })
        .collect();
    let mut samplers: Vec<_> = prompts.iter().map(|_| Sampler::greedy()).collect();
    let mut events = vec![0usize; prompts.len()];
    let batch = run_batch(&model, &prompts, &mut samplers, &config, |i, _| {
        events[i] += 1
    });
    for (i, (b, s)) in batch.iter().zip(&solo).enumerate() {
        assert_eq!(b.tokens, s.tokens, "sequence {i}");
        assert_eq!(b.text, s.text, "sequence {i}");
        assert_eq!(b.finish_reason, s.finish_reason, "sequence {i}");
        assert_eq!(
            events[i],
            s.tokens.len() + 1,
            "one event per token plus Done"
        );
    }
    let calls = model.batch_calls();
    assert_eq!(
        calls[0],
        prompts.iter().map(|p| p.len()).collect::<Vec<_>>(),
        "one batched prefill"
    );
    assert!(
        calls.iter().skip(1).all(|c| c.iter().all(|&n| n == 1)),
        "then one token per sequence"
    );
    assert!(calls.len() <= 6, "steps run in lockstep: {calls:?}");
    // Every batched pass's steps were finished on the model's threads.
    let passes_of_several = calls.iter().filter(|c| c.len() > 1).count();
    assert!(
        model.task_runs.load(Ordering::SeqCst) >= 2 * passes_of_several,
        "{} tasks for {passes_of_several} passes",
        model.task_runs.load(Ordering::SeqCst)
    );
}

/// Seeded samplers with a temperature and a penalty: each sequence of a batch (its steps
/// finished on three threads) draws exactly what its prompt draws alone with the same seed,
/// event by event.
#[test]
fn a_sampled_batch_gives_each_prompt_its_solo_draws() {
    let model = Echo::new(8);
    let prompts: Vec<Vec<u32>> = vec![vec![1], vec![2, 3, 4], vec![5, 6], vec![7, 1, 2]];
    let config = GenerationConfig::default()
        .with_max_new_tokens(12)
        .with_top_logprobs(2);
    let sampler = |seed: u64| {
        kindle_sampling::SamplerConfig {
            temperature: 3.0,
            repetition_penalty: 1.3,
            seed: Some(seed),
            ..Default::default()
        }
        .build()
        .unwrap()
    };
    let solo: Vec<Vec<kindle_generate::Event>> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut session = Session::new(&model, 32).unwrap();
            let mut events = Vec::new();
            let mut sampler = sampler(40 + i as u64);
            let generator = kindle_generate::Generator::new(
                &model,
                &mut session,
                p,
                &mut sampler,
                &model,
                &config,
            )
            .unwrap();
            for event in generator {
                events.push(event.unwrap());
            }
            events
        })
        .collect();
    let mut samplers: Vec<_> = (0..prompts.len()).map(|i| sampler(40 + i as u64)).collect();
    let mut batch = vec![Vec::new(); prompts.len()];
    run_batch(&model, &prompts, &mut samplers, &config, |i, event| {
        batch[i].push(event.clone())
    });
    let texts = |events: &[kindle_generate::Event]| -> Vec<u32> {
        events
            .iter()
            .filter_map(|e| match e {
                kindle_generate::Event::Token { id, .. } => Some(*id),
                _ => None,
            })
            .collect()
    };
    for (i, (b, s)) in batch.iter().zip(&solo).enumerate() {
        assert_eq!(texts(b), texts(s), "sequence {i}");
        let tokens = |events: &[kindle_generate::Event]| -> Vec<kindle_generate::Event> {
            events
                .iter()
                .filter(|e| matches!(e, kindle_generate::Event::Token { .. }))
                .cloned()
                .collect()
        };
        assert_eq!(tokens(b), tokens(s), "sequence {i}: every token event");
    }
    let distinct: std::collections::HashSet<Vec<u32>> = solo.iter().map(|s| texts(s)).collect();
    assert!(
        distinct.len() > 1,
        "the draws differ between seeds: {distinct:?}"
    );
    assert!(model.task_runs.load(Ordering::SeqCst) > 0);
}

/// `prompts` through `generate_batch` over `model` (a fresh 32-token session each), the model
/// its own decoder.
fn run_batch(
    model: &Echo,
    prompts: &[Vec<u32>],
    samplers: &mut [Sampler],
    config: &GenerationConfig,
    on_event: impl FnMut(usize, &kindle_generate::Event),
) -> Vec<kindle_generate::Summary> {
    let mut sessions: Vec<_> = prompts
        .iter()
        .map(|_| Session::new(model, 32).unwrap())
        .collect();
    generate_batch(
        model,
        &mut sessions,
        prompts,
        samplers,
        model,
        config,
        on_event,
    )
    .unwrap()
}

#[test]
fn mismatched_batch_inputs_are_an_error() {
    let model = Echo::new(8);
    let mut sessions = vec![Session::new(&model, 8).unwrap()];
    let err = generate_batch(
        &model,
        &mut sessions,
        &[vec![1], vec![2]],
        &mut [Sampler::greedy()],
        &model,
        &GenerationConfig::default(),
        |_, _| {},
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("2 prompts, 1 sessions, 1 samplers"),
        "{err}"
    );
}
