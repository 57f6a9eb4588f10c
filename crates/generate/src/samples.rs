//! Several samples of one prompt, the prompt run through the model once.

use kindle_sampling::Sampler;

use crate::config::GenerationConfig;
use crate::decode::TokenDecoder;
use crate::error::GenerateError;
use crate::generator::Generator;
use crate::model::LanguageModel;
use crate::outcome::{Event, Summary};
use crate::session::Session;

/// Generate one completion of `prompt` per sampler (give them different seeds), in order.
///
/// `session` is prefilled once with the prompt but its last token (reusing a common prefix as
/// usual) and keeps exactly that; each sample runs on a [`Session::fork`] of it, so it feeds
/// only the last prompt token before decoding (its [`Timings::prefill_tokens`] is 1).
/// `on_event(sample_index, event)` sees every token event of every sample as it comes.
///
/// [`Timings::prefill_tokens`]: crate::Timings::prefill_tokens
///
/// Errors: as [`Generator::new`] and the generation itself.
pub fn generate_samples<M: LanguageModel, D: TokenDecoder + ?Sized>(
    model: &M,
    session: &mut Session<M>,
    prompt: &[u32],
    samplers: &mut [Sampler],
    decoder: &D,
    config: &GenerationConfig,
    mut on_event: impl FnMut(usize, &Event),
) -> Result<Vec<Summary>, GenerateError> {
    let Some((_, head)) = prompt.split_last() else {
        return Err(GenerateError::EmptyPrompt);
    };
    session.prefill(model, head)?;
    let mut summaries = Vec::with_capacity(samplers.len());
    for (i, sampler) in samplers.iter_mut().enumerate() {
        let mut fork = session.fork();
        let generator = Generator::new(model, &mut fork, prompt, sampler, decoder, config)?;
        summaries.push(generator.run(|event| on_event(i, event))?);
    }
    Ok(summaries)
}
