//! Property: whatever the tokens and stop strings, the streamed deltas join to the output text,
//! which is the decoded text cut before the first completed stop string.

mod common;

use common::{ByteVocab, ScriptedModel};
use kindle_generate::{Event, FinishReason, GenerationConfig, Session, StopMatch, generate};
use kindle_sampling::Sampler;
use proptest::prelude::*;

/// Pieces over a small alphabet so stop strings occur often, plus the two bytes of 'é' alone.
fn vocab() -> ByteVocab {
    let mut v = ByteVocab::from_strs(&["a", "b", "c", "ab", "bc", "cab", "é", "aé", " "]);
    v.pieces.push(vec![0xC3]);
    v.pieces.push(vec![0xA9]);
    v
}

/// Random short strings, and candidates that nest in each other so that which stop string
/// completes first matters ("cab" contains "a", which completes first inside the token "cab").
fn stop_string() -> impl Strategy<Value = String> {
    const NESTED: &[&str] = &[
        "a", "b", "ab", "ca", "cab", "bc", "bca", "abca", "é", "aé", "é ", "cé",
    ];
    prop_oneof![
        "[abcé ]{1,4}",
        prop::sample::select(NESTED).prop_map(str::to_string),
    ]
}

/// The text up to the stop string that is completed first (earliest end, then earliest start).
fn expected(full: &str, stops: &[String], include: bool) -> (String, Option<String>) {
    let best = stops
        .iter()
        .filter_map(|s| {
            full.find(s.as_str())
                .map(|start| (start + s.len(), start, s))
        })
        .min_by_key(|&(end, start, _)| (end, start));
    match best {
        None => (full.to_string(), None),
        Some((end, start, stop)) => {
            let cut = if include { end } else { start };
            (full[..cut].to_string(), Some(stop.clone()))
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn output_is_the_text_before_the_first_stop_string(
        script in prop::collection::vec(0u32..11, 1..30),
        stops in prop::collection::vec(stop_string(), 0..4),
        include in any::<bool>(),
    ) {
        let vocab = vocab();
        let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
        let mut session = Session::new(&model, 64).unwrap();
        let mut sampler = Sampler::greedy();
        let config = GenerationConfig::default()
            .with_max_new_tokens(script.len())
            .with_stop_strings(stops.clone())
            .with_include_stop_str_in_output(include);
        let mut deltas = Vec::new();
        let mut summary = None;
        for event in generate(&model, &mut session, &[0], &mut sampler, &vocab, &config).unwrap() {
            match event.unwrap() {
                Event::Token { text, .. } => deltas.push(text),
                Event::Done(s) => summary = Some(s),
            }
        }
        let summary = summary.unwrap();
        prop_assert_eq!(deltas.concat(), summary.text.clone());
        prop_assert!(script.starts_with(&summary.tokens));

        use kindle_generate::TokenDecoder;
        let full = vocab.decode(&script).unwrap();
        let (text, matched) = expected(&full, &stops, include);
        prop_assert_eq!(&summary.text, &text);
        match matched {
            Some(stop) => {
                prop_assert_eq!(summary.finish_reason, FinishReason::Stop);
                prop_assert_eq!(summary.stop, Some(StopMatch::String(stop)));
            }
            None => {
                prop_assert_eq!(summary.finish_reason, FinishReason::Length);
                prop_assert_eq!(summary.tokens, script);
            }
        }
    }
}
