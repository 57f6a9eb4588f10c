//! A batch's sequences finished on the model's threads ([`Sequence::completion`] and
//! [`Completion::run_all`], what `kindle serve` does after each batched pass) give exactly
//! what [`Sequence::complete`] gives each, in order, though a sequence itself (its cache)
//! cannot leave its thread.

mod common;

use std::cell::Cell;
use std::convert::Infallible;
use std::rc::Rc;

use common::ByteVocab;
use kindle_generate::{
    Completion, Event, GenerationConfig, LanguageModel, ModelCache, Sequence, Session, Step,
};
use kindle_sampling::SamplerConfig;

/// A cache that stays on its thread (an `Rc`), as a GPU model's may.
struct LocalCache {
    len: usize,
    _here: Rc<Cell<u8>>,
}

impl ModelCache for LocalCache {
    fn len(&self) -> usize {
        self.len
    }
    fn capacity(&self) -> usize {
        256
    }
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    fn fork(&self) -> Self {
        LocalCache {
            len: self.len,
            _here: Rc::clone(&self._here),
        }
    }
}

/// Logits that depend on the last token and the position, spread enough that a seeded
/// sampler at temperature 1 goes its own way for each seed.
struct Spread {
    vocab: usize,
}

impl Spread {
    fn row(&self, last: u32, position: usize) -> Vec<f32> {
        (0..self.vocab)
            .map(|j| {
                let h = (j as u64 * 2_654_435_761 + last as u64 * 40_503 + position as u64 * 97)
                    % 1_000;
                h as f32 / 250.0
            })
            .collect()
    }
}

impl LanguageModel for Spread {
    type Cache = LocalCache;
    type Error = Infallible;

    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn context_length(&self) -> usize {
        256
    }
    fn new_cache(&self, _: usize) -> Result<LocalCache, Infallible> {
        Ok(LocalCache {
            len: 0,
            _here: Rc::new(Cell::new(0)),
        })
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut LocalCache) -> Result<Vec<f32>, Infallible> {
        cache.len += tokens.len();
        Ok(self.row(*tokens.last().unwrap(), cache.len))
    }
    fn forward_all(&self, _: &[u32], _: &mut LocalCache) -> Result<Vec<f32>, Infallible> {
        unimplemented!("only generation")
    }
    /// Three threads, each claiming the next index.
    fn for_each_task(&self, n: usize, task: &(dyn Fn(usize) + Sync)) {
        common::on_three_threads(n, task);
    }
}

/// Four seeded sequences over `model`, stepped in batches; each step's sequences finished by
/// `finish` (serially, or on threads). Every sequence's events.
fn run(
    model: &Spread,
    vocab: &ByteVocab,
    finish: impl Fn(Vec<(&mut Sequence<Spread, &ByteVocab>, Vec<f32>)>) -> Vec<Event>,
) -> Vec<Vec<Event>> {
    let config = GenerationConfig::default()
        .with_max_new_tokens(40)
        .with_top_logprobs(2);
    let mut seqs: Vec<_> = (0..4u64)
        .map(|i| {
            let sampler = SamplerConfig {
                temperature: 1.0,
                top_k: 40,
                repetition_penalty: 1.1,
                seed: Some(100 + i),
                ..SamplerConfig::default()
            }
            .build()
            .unwrap();
            let prompt = [b'a' as u32 + i as u32, b'b' as u32];
            Sequence::new(
                model,
                Session::new(model, 256).unwrap(),
                &prompt,
                sampler,
                vocab,
                &config,
            )
            .unwrap()
        })
        .collect();
    let mut events = vec![Vec::new(); seqs.len()];
    loop {
        let mut fed = Vec::new();
        for (i, seq) in seqs.iter_mut().enumerate() {
            match seq.plan() {
                Step::Feed(tokens) => fed.push((i, tokens)),
                Step::Emit(event) => events[i].push(event),
                Step::End => {}
            }
        }
        if fed.is_empty() {
            break;
        }
        let order: Vec<usize> = fed.iter().map(|(i, _)| *i).collect();
        let mut chosen: Vec<_> = seqs
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| order.contains(i))
            .map(|(_, seq)| seq)
            .collect();
        let rows = {
            let mut items: Vec<_> = fed
                .iter()
                .zip(chosen.iter_mut())
                .map(|((_, tokens), seq)| (&tokens[..], &mut **seq))
                .collect();
            Sequence::forward_batch(model, &mut items).unwrap()
        };
        let done = finish(chosen.into_iter().zip(rows).collect());
        for (i, event) in order.into_iter().zip(done) {
            events[i].push(event);
        }
    }
    events
}

#[test]
fn a_batch_finished_on_the_models_threads_gives_the_events_of_complete() {
    let vocab = ByteVocab::bytes_plus(&[]);
    let model = Spread { vocab: vocab.len() };
    let serial = run(&model, &vocab, |jobs| {
        jobs.into_iter()
            .map(|(seq, row)| seq.complete(row).unwrap())
            .collect()
    });
    let threaded = run(&model, &vocab, |jobs| {
        let completions = jobs
            .into_iter()
            .map(|(seq, row)| seq.completion(row))
            .collect();
        Completion::run_all(&model, completions)
            .into_iter()
            .map(Result::unwrap)
            .collect()
    });
    // Everything but the timings.
    let untimed = |runs: Vec<Vec<Event>>| -> Vec<Vec<Event>> {
        runs.into_iter()
            .map(|events| {
                events
                    .into_iter()
                    .map(|e| match e {
                        Event::Done(mut summary) => {
                            summary.timings = Default::default();
                            Event::Done(summary)
                        }
                        e => e,
                    })
                    .collect()
            })
            .collect()
    };
    let (serial, threaded) = (untimed(serial), untimed(threaded));
    assert_eq!(serial, threaded);
    // The seeds went their own ways: the check compares four different outputs.
    let tokens = |events: &Vec<Event>| -> Vec<u32> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Token { id, .. } => Some(*id),
                _ => None,
            })
            .collect()
    };
    for (a, b) in serial.iter().zip(serial.iter().skip(1)) {
        assert_ne!(tokens(a), tokens(b));
    }
    assert!(serial.iter().all(|e| tokens(e).len() == 40));
}

/// Decodes bytes, and panics on one id.
struct Fragile {
    bytes: ByteVocab,
    fatal: u32,
}

impl kindle_generate::TokenDecoder for Fragile {
    type Error = common::UnknownId;

    fn decode(&self, ids: &[u32]) -> Result<String, common::UnknownId> {
        assert!(!ids.contains(&self.fatal), "decoding the fatal id");
        self.bytes.decode(ids)
    }
}

#[test]
fn a_panic_in_one_sequences_step_reaches_the_caller_after_the_others() {
    let bytes = ByteVocab::bytes_plus(&[]);
    let model = Spread { vocab: bytes.len() };
    let config = GenerationConfig::default().with_max_new_tokens(4);
    // Greedy sequences: the first token of each is the argmax of the prompt's row.
    let prompts: Vec<[u32; 2]> = (0..4).map(|i| [b'a' as u32, b'b' as u32 + i]).collect();
    let first = |p: &[u32; 2]| {
        let row = model.row(p[1], 2);
        kindle_sampling::logprobs::argmax(&row).unwrap()
    };
    let fatal = first(&prompts[2]);
    assert!(prompts.iter().filter(|p| first(p) == fatal).count() < prompts.len());
    let decoder = Fragile { bytes, fatal };
    let mut seqs: Vec<_> = prompts
        .iter()
        .map(|p| {
            let sampler = kindle_sampling::Sampler::greedy();
            let session = Session::new(&model, 256).unwrap();
            Sequence::new(&model, session, p, sampler, &decoder, &config).unwrap()
        })
        .collect();
    let mut rows = Vec::new();
    for seq in &mut seqs {
        let Step::Feed(tokens) = seq.plan() else {
            panic!("a prompt step")
        };
        let batch = &mut [(&tokens[..], &mut *seq)];
        rows.push(Sequence::forward_batch(&model, batch).unwrap().remove(0));
    }
    let completions = seqs
        .iter_mut()
        .zip(rows)
        .map(|(seq, row)| seq.completion(row))
        .collect();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        Completion::run_all(&model, completions)
    }));
    let message = caught.expect_err("the panic reaches the caller");
    let text = message
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| message.downcast_ref::<&str>().copied());
    assert_eq!(text, Some("decoding the fatal id"));
    // The others finished their step.
    for (i, seq) in seqs.iter().enumerate() {
        if first(&prompts[i]) != fatal {
            assert_eq!(seq.tokens().len(), 1, "sequence {i}");
        }
    }
}
