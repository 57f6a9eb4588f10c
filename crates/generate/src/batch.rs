//! Several prompts generated together: each step runs every unfinished sequence's next tokens
//! through one batched forward pass ([`LanguageModel::forward_batch`]), while each sequence
//! keeps its own session, sampler, stop conditions and detokeniser.

use crate::generator::Step;
use crate::sequence::Completion;
use crate::{
    Event, GenerateError, GenerationConfig, Generator, LanguageModel, Session, Summary,
    TokenDecoder,
};
use kindle_sampling::Sampler;

/// Generate a continuation of each of `prompts`, in lockstep, one batched forward pass per
/// step: the prefills of all prompts form the first batch, then each step feeds every
/// unfinished sequence its last token. `on_event(i, event)` hears sequence `i`'s events as
/// they happen (a finished sequence's [`Event::Done`] included); the summaries come back in
/// prompt order.
///
/// `sessions`, `prompts` and `samplers` are matched by position and must have the same
/// length. With greedy samplers each output equals that of running its prompt alone.
///
/// After each batched pass the sequences' steps (processors, sampling, logprobs,
/// detokenising, stops) run on the model's threads ([`LanguageModel::for_each_task`]), each
/// with its own sampler, so `decoder` is shared between threads (`Sync`); every sequence gets
/// what it would get alone, and the events arrive in order.
pub fn generate_batch<M: LanguageModel, D: TokenDecoder + Sync + ?Sized>(
    model: &M,
    sessions: &mut [Session<M>],
    prompts: &[Vec<u32>],
    samplers: &mut [Sampler],
    decoder: &D,
    config: &GenerationConfig,
    mut on_event: impl FnMut(usize, &Event),
) -> Result<Vec<Summary>, GenerateError> {
    if sessions.len() != prompts.len() || samplers.len() != prompts.len() {
        return Err(GenerateError::BatchShape {
            prompts: prompts.len(),
            sessions: sessions.len(),
            samplers: samplers.len(),
        });
    }
    let mut generators = Vec::with_capacity(prompts.len());
    for ((session, prompt), sampler) in sessions.iter_mut().zip(prompts).zip(samplers.iter_mut()) {
        generators.push(Generator::new(
            model, session, prompt, sampler, decoder, config,
        )?);
    }
    let mut summaries: Vec<Option<Summary>> = (0..prompts.len()).map(|_| None).collect();
    let mut active = vec![true; prompts.len()];
    loop {
        let mut feeds: Vec<(usize, Vec<u32>)> = Vec::new();
        for (i, generator) in generators.iter_mut().enumerate() {
            if !active[i] {
                continue;
            }
            match generator.plan() {
                Step::End => active[i] = false,
                Step::Emit(event) => {
                    on_event(i, &event);
                    if let Event::Done(summary) = event {
                        summaries[i] = Some(summary);
                        active[i] = false;
                    }
                }
                Step::Feed(tokens) => feeds.push((i, tokens)),
            }
        }
        if feeds.is_empty() {
            if active.iter().any(|&a| a) {
                continue;
            }
            break;
        }
        let rows = {
            let mut wanted = feeds.iter().peekable();
            let mut items: Vec<(&[u32], &mut Session<M>)> = Vec::with_capacity(feeds.len());
            for (i, generator) in generators.iter_mut().enumerate() {
                if let Some((_, tokens)) = wanted.next_if(|(j, _)| *j == i) {
                    items.push((tokens.as_slice(), generator.session_mut()));
                }
            }
            Session::forward_batch(model, &mut items)?
        };
        // Each fed sequence's step finished on the model's threads (processors, the draw,
        // detokenising, stops: its own sampler and decoder), the events heard in order.
        let mut wanted = feeds.iter().map(|&(i, _)| i).peekable();
        let completions: Vec<_> = generators
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| wanted.next_if_eq(i).is_some())
            .zip(rows)
            .map(|((_, generator), row)| {
                let (core, sampler, history) = generator.completion_parts();
                Completion::of(core, sampler, history, Ok(row))
            })
            .collect();
        for ((i, _), result) in feeds.iter().zip(Completion::run_all(model, completions)) {
            on_event(*i, &result?);
        }
    }
    summaries
        .into_iter()
        .map(|s| s.ok_or(GenerateError::BatchIncomplete))
        .collect()
}
