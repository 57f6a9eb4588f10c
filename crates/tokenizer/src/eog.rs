//! llama.cpp's end-of-generation rules: which tokens end a turn or a generation.

use crate::{GgufVocab, TokenType};

/// Texts llama.cpp auto-detects as the end-of-turn token when `eot_token_id` is absent.
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
/// Texts of tokens llama.cpp always treats as end of generation (forcing them to control).
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
];
/// Texts that end generation only if the token is already a control token.
const EOG_TEXTS_IF_CONTROL: &[&str] = &["</s>"];
/// FIM pad / repository / file-separator tokens (llama.cpp adds them to the EOG set).
const FIM_EOG_TEXTS: &[&[&str]] = &[
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"],
    &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"],
    &["<|file_sep|>"],
];

/// llama.cpp's end-of-generation rules. Returns `(eot, eom, sorted eog ids)` and forces the
/// detected tokens to control type.
pub(crate) fn end_of_generation(
    vocab: &GgufVocab,
    token_to_id: &dyn Fn(&str) -> Option<u32>,
    types: &mut [TokenType],
) -> (Option<u32>, Option<u32>, Vec<u32>) {
    let find =
        |texts: &[&str]| -> Option<u32> { texts.iter().filter_map(|t| token_to_id(t)).min() };
    let mut force_control = |id: u32| types[id as usize] = TokenType::Control;

    let eot = vocab.eot.or_else(|| find(EOT_TEXTS));
    let eom = vocab.eom.or_else(|| find(&["<|eom_id|>"]));
    let mut eog: Vec<u32> = Vec::new();
    for id in [eot, eom].into_iter().flatten() {
        if vocab.eot != Some(id) && vocab.eom != Some(id) {
            force_control(id);
        }
    }
    for texts in FIM_EOG_TEXTS {
        if let Some(id) = find(texts) {
            force_control(id);
            eog.push(id);
        }
    }
    for text in EOG_TEXTS {
        if let Some(id) = token_to_id(text) {
            force_control(id);
            eog.push(id);
        }
    }
    for text in EOG_TEXTS_IF_CONTROL {
        if let Some(id) = token_to_id(text)
            && types[id as usize] == TokenType::Control
        {
            eog.push(id);
        }
    }
    eog.extend([vocab.eos, eot, eom].into_iter().flatten());
    eog.sort_unstable();
    eog.dedup();
    (eot, eom, eog)
}
