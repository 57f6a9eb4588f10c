//! The generation loop against scripted fake models.

mod common;

use std::time::Duration;

use common::{ByteVocab, Call, ScriptedModel, naive_log_softmax, peaked_row};
use kindle_generate::{
    Event, FinishReason, GenerateError, GenerationConfig, Session, StopMatch, Summary, generate,
    generate_to_end,
};
use kindle_sampling::Sampler;

/// What the token events carried.
#[derive(Debug)]
struct Streamed {
    ids: Vec<u32>,
    deltas: Vec<String>,
    logprobs: Vec<f32>,
    tops: Vec<Vec<(u32, f32)>>,
}

fn run(
    model: &ScriptedModel,
    session: &mut Session<ScriptedModel>,
    prompt: &[u32],
    vocab: &ByteVocab,
    config: &GenerationConfig,
) -> (Streamed, Summary) {
    let mut sampler = Sampler::greedy();
    let mut streamed = Streamed {
        ids: vec![],
        deltas: vec![],
        logprobs: vec![],
        tops: vec![],
    };
    let mut summary = None;
    let generator = generate(model, session, prompt, &mut sampler, vocab, config).unwrap();
    for event in generator {
        assert!(summary.is_none(), "an event after Done");
        match event.unwrap() {
            Event::Token {
                id,
                text,
                logprob,
                top_logprobs,
            } => {
                streamed.ids.push(id);
                streamed.deltas.push(text);
                streamed.logprobs.push(logprob);
                streamed.tops.push(top_logprobs);
            }
            Event::Done(s) => summary = Some(s),
        }
    }
    let summary = summary.expect("no Done event");
    // Invariants of every run.
    assert_eq!(streamed.deltas.concat(), summary.text);
    assert_eq!(streamed.ids, summary.tokens);
    assert_eq!(summary.generated_tokens, summary.tokens.len());
    assert_eq!(summary.prompt_tokens, prompt.len());
    (streamed, summary)
}

fn session(model: &ScriptedModel, capacity: usize) -> Session<ScriptedModel> {
    Session::new(model, capacity).unwrap()
}

fn naive_logprob(row: &[f32], id: u32) -> f64 {
    naive_log_softmax(row)[id as usize]
}

fn hello_vocab() -> ByteVocab {
    ByteVocab::from_strs(&["<eos>", "Hel", "lo", ",", " world", "!", "Say", ":"])
}

#[test]
fn greedy_follows_the_scripted_argmax_with_one_prefill_call() {
    let vocab = hello_vocab();
    let script = vocab.ids(&["Hel", "lo", ",", " world", "!"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let prompt = vocab.ids(&["Say", ":"]);
    let config = GenerationConfig::default()
        .with_max_new_tokens(5)
        .with_top_logprobs(2);
    let (streamed, summary) = run(&model, &mut s, &prompt, &vocab, &config);

    assert_eq!(summary.tokens, script);
    assert_eq!(summary.text, "Hello, world!");
    assert_eq!(streamed.deltas, ["Hel", "lo", ",", " world", "!"]);
    assert_eq!(summary.finish_reason, FinishReason::Length);
    assert_eq!(summary.stop, None);
    // Prefill = one call with the whole prompt, then one call per token fed back; the last
    // sampled token is never fed.
    let mut expected = vec![prompt.clone()];
    expected.extend(script[..4].iter().map(|&t| vec![t]));
    assert_eq!(model.call_tokens(), expected);
    let mut held = prompt.clone();
    held.extend_from_slice(&script[..4]);
    assert_eq!(s.tokens(), held);
    assert_eq!(s.cache().len, held.len());

    // Raw log-probabilities of the chosen tokens and the top 2.
    for (i, (&lp, top)) in streamed.logprobs.iter().zip(&streamed.tops).enumerate() {
        let row = &model.rows[i];
        assert!((f64::from(lp) - naive_logprob(row, script[i])).abs() < 1e-5);
        assert_eq!(top.len(), 2);
        assert_eq!(top[0].0, script[i]);
        assert_eq!(top[0].1, lp);
        // Runner-up: the smallest other id (the slope favours low ids).
        let runner_up = if script[i] == 0 { 1 } else { 0 };
        assert_eq!(top[1].0, runner_up);
        assert!((f64::from(top[1].1) - naive_logprob(row, runner_up)).abs() < 1e-5);
    }
    let t = summary.timings;
    assert_eq!(t.prefill_tokens, 2);
    assert_eq!(t.decode_tokens, 4);
    assert!(t.prefill_tokens_per_second() >= 0.0 && t.decode_tokens_per_second() >= 0.0);
}

#[test]
fn logprob_is_of_the_raw_logits_not_the_sampler_output() {
    // Two rows; the chosen token's logprob must match a log-softmax over the raw row.
    let vocab = ByteVocab::from_strs(&["a", "b", "c"]);
    let rows = vec![vec![1.0, 3.0, 2.0], vec![0.5, 0.25, 4.0]];
    let model = ScriptedModel::new(3, 16, rows.clone());
    let mut s = session(&model, 16);
    let config = GenerationConfig::default()
        .with_max_new_tokens(2)
        .with_top_logprobs(5);
    let (streamed, summary) = run(&model, &mut s, &[0], &vocab, &config);
    assert_eq!(summary.tokens, [1, 2]);
    assert_eq!(summary.text, "bc");
    for (i, row) in rows.iter().enumerate() {
        let id = summary.tokens[i];
        assert!((f64::from(streamed.logprobs[i]) - naive_logprob(row, id)).abs() < 1e-6);
        // top-n larger than the vocabulary: the whole vocabulary, most likely first.
        let ids: Vec<u32> = streamed.tops[i].iter().map(|&(t, _)| t).collect();
        assert_eq!(ids.len(), 3);
        assert_eq!(ids[0], id);
        let sum: f64 = streamed.tops[i]
            .iter()
            .map(|&(_, l)| f64::from(l).exp())
            .sum();
        assert!((sum - 1.0).abs() < 1e-5);
    }
}

#[test]
fn stops_on_eog_without_emitting_its_text() {
    let vocab = hello_vocab();
    let script = vocab.ids(&["Hel", "lo", "<eos>", "!"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default()
        .with_max_new_tokens(10)
        .with_eog_token_ids([0]);
    let (streamed, summary) = run(&model, &mut s, &[6], &vocab, &config);
    assert_eq!(summary.finish_reason, FinishReason::Stop);
    assert_eq!(summary.stop, Some(StopMatch::Eog(0)));
    assert_eq!(summary.tokens, [1, 2, 0]);
    assert_eq!(summary.text, "Hello");
    assert_eq!(streamed.deltas, ["Hel", "lo", ""]);
    assert_eq!(model.calls().len(), 3);
    assert_eq!(s.tokens(), [6, 1, 2]);
}

#[test]
fn stops_on_an_extra_stop_token() {
    let vocab = hello_vocab();
    let script = vocab.ids(&["Hel", "lo", ",", " world"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default()
        .with_eog_token_ids([0])
        .with_stop_token_ids([3]);
    let (streamed, summary) = run(&model, &mut s, &[6], &vocab, &config);
    assert_eq!(summary.finish_reason, FinishReason::Stop);
    assert_eq!(summary.stop, Some(StopMatch::Token(3)));
    assert_eq!(summary.text, "Hello");
    assert_eq!(streamed.deltas, ["Hel", "lo", ""]);
    assert_eq!(summary.tokens, [1, 2, 3]);
}

#[test]
fn max_new_tokens_ends_with_length() {
    let vocab = hello_vocab();
    let script = vocab.ids(&["Hel", "lo", ",", " world"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default().with_max_new_tokens(2);
    let (_, summary) = run(&model, &mut s, &[6], &vocab, &config);
    assert_eq!(summary.finish_reason, FinishReason::Length);
    assert_eq!(summary.finish_reason.to_string(), "length");
    assert_eq!(summary.text, "Hello");
    assert_eq!(model.calls().len(), 2);
}

#[test]
fn zero_max_new_tokens_finishes_without_running_the_model() {
    let vocab = hello_vocab();
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &[1]);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default().with_max_new_tokens(0);
    let (streamed, summary) = run(&model, &mut s, &[6], &vocab, &config);
    assert!(streamed.ids.is_empty());
    assert_eq!(summary.finish_reason, FinishReason::Length);
    assert!(model.calls().is_empty());
}

#[test]
fn zero_max_time_stops_after_one_token() {
    let vocab = hello_vocab();
    let script = vocab.ids(&["Hel", "lo", ",", " world"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default().with_max_time(Duration::ZERO);
    let (streamed, summary) = run(&model, &mut s, &[6], &vocab, &config);
    assert_eq!(summary.finish_reason, FinishReason::Time);
    assert_eq!(summary.finish_reason.as_str(), "time");
    assert_eq!(summary.stop, None);
    assert_eq!(streamed.deltas, ["Hel"]);
    assert_eq!(model.calls().len(), 1);
}

#[test]
fn max_time_stops_a_slow_model() {
    let vocab = hello_vocab();
    let script = vec![1; 200];
    let mut model = ScriptedModel::argmax_script(vocab.len(), 1000, &script);
    model.sleep = Some(Duration::from_millis(10));
    let mut s = session(&model, 1000);
    let config = GenerationConfig::default().with_max_time(Duration::from_millis(45));
    let (_, summary) = run(&model, &mut s, &[6], &vocab, &config);
    assert_eq!(summary.finish_reason, FinishReason::Time);
    let n = summary.generated_tokens;
    assert!((2..=6).contains(&n), "{n} tokens in ~45 ms at 10 ms each");
    assert!(summary.timings.total() >= Duration::from_millis(10 * n as u64));
}

fn stop_vocab() -> ByteVocab {
    ByteVocab::from_strs(&[
        "<eos>", "ab", "S", "TO", "P", "cd", "x", "xxST", "OPyy", "ST", "Q",
    ])
}

#[test]
fn stop_string_over_three_tokens_is_never_partially_streamed() {
    let vocab = stop_vocab();
    let script = vocab.ids(&["ab", "S", "TO", "P", "cd", "cd"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default()
        .with_stop_strings(["STOP"])
        .with_eog_token_ids([0]);
    let (streamed, summary) = run(&model, &mut s, &[10], &vocab, &config);
    assert_eq!(streamed.deltas, ["ab", "", "", ""]);
    assert_eq!(summary.text, "ab");
    assert_eq!(summary.finish_reason, FinishReason::Stop);
    assert_eq!(summary.stop, Some(StopMatch::String("STOP".into())));
    assert_eq!(summary.tokens, vocab.ids(&["ab", "S", "TO", "P"]));
    assert_eq!(model.calls().len(), 4, "nothing generated after the match");
}

#[test]
fn stop_string_can_be_included_in_the_output() {
    let vocab = stop_vocab();
    let script = vocab.ids(&["ab", "S", "TO", "P", "cd"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default()
        .with_stop_strings(["STOP"])
        .with_include_stop_str_in_output(true);
    let (streamed, summary) = run(&model, &mut s, &[10], &vocab, &config);
    assert_eq!(streamed.deltas, ["ab", "", "", "STOP"]);
    assert_eq!(summary.text, "abSTOP");
    assert_eq!(summary.stop, Some(StopMatch::String("STOP".into())));
}

#[test]
fn stop_string_inside_tokens_cuts_their_text() {
    let vocab = stop_vocab();
    let script = vocab.ids(&["xxST", "OPyy", "cd"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default().with_stop_strings(["STOP"]);
    let (streamed, summary) = run(&model, &mut s, &[10], &vocab, &config);
    assert_eq!(streamed.deltas, ["xx", ""]);
    assert_eq!(summary.text, "xx");

    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = config.with_include_stop_str_in_output(true);
    let (streamed, summary) = run(&model, &mut s, &[10], &vocab, &config);
    assert_eq!(streamed.deltas, ["xx", "STOP"]);
    assert_eq!(summary.text, "xxSTOP");
}

#[test]
fn a_stop_prefix_that_does_not_match_is_flushed_later() {
    let vocab = stop_vocab();
    let script = vocab.ids(&["ab", "S", "TO", "x", "cd"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default()
        .with_max_new_tokens(5)
        .with_stop_strings(["STOP"]);
    let (streamed, summary) = run(&model, &mut s, &[10], &vocab, &config);
    assert_eq!(streamed.deltas, ["ab", "", "", "STOx", "cd"]);
    assert_eq!(summary.text, "abSTOxcd");
    assert_eq!(summary.finish_reason, FinishReason::Length);
    assert_eq!(summary.stop, None);
}

#[test]
fn a_held_stop_prefix_is_flushed_at_the_end() {
    let vocab = stop_vocab();
    // Ends on length, and on an eog token, while "ST" is held back.
    for (config, tail) in [
        (GenerationConfig::default().with_max_new_tokens(2), vec![]),
        (
            GenerationConfig::default().with_eog_token_ids([0]),
            vec!["<eos>"],
        ),
    ] {
        let mut pieces = vec!["ab", "ST"];
        pieces.extend(tail.iter());
        let script = vocab.ids(&pieces);
        let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
        let mut s = session(&model, 64);
        let config = config.with_stop_strings(["STOP"]);
        let (streamed, summary) = run(&model, &mut s, &[10], &vocab, &config);
        assert_eq!(
            streamed.deltas[..2],
            ["ab", if tail.is_empty() { "ST" } else { "" }]
        );
        assert_eq!(summary.text, "abST");
    }
}

#[test]
fn multibyte_characters_split_over_byte_tokens_never_stream_replacement_chars() {
    let vocab = ByteVocab::bytes_plus(&["<eos>"]);
    let text = "héllo €😀 ok";
    let mut script: Vec<u32> = text.bytes().map(u32::from).collect();
    script.push(256);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default().with_eog_token_ids([256]);
    let (streamed, summary) = run(&model, &mut s, &[b'>' as u32], &vocab, &config);
    assert_eq!(summary.text, text);
    assert!(streamed.deltas.iter().all(|d| !d.contains('\u{FFFD}')));
    // "h", then 'é' is held for one byte, then emitted whole.
    assert_eq!(streamed.deltas[..4], ["h", "", "é", "l"]);
    let euro = text.find('€').unwrap();
    assert_eq!(streamed.deltas[euro..euro + 3], ["", "", "€"]);
    assert_eq!(summary.stop, Some(StopMatch::Eog(256)));
}

#[test]
fn an_incomplete_character_at_the_end_is_flushed_lossily() {
    let vocab = ByteVocab::bytes_plus(&[]);
    let script: Vec<u32> = vec![b'a' as u32, 0xE2, 0x82]; // "a" + 2 of the 3 bytes of '€'
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default().with_max_new_tokens(3);
    let (streamed, summary) = run(&model, &mut s, &[b'>' as u32], &vocab, &config);
    assert_eq!(streamed.deltas, ["a", "", "\u{FFFD}"]);
    assert_eq!(summary.text, "a\u{FFFD}");
}

#[test]
fn stop_string_with_multibyte_characters_over_byte_tokens() {
    let vocab = ByteVocab::bytes_plus(&[]);
    let text = "ça va «fin» après";
    let script: Vec<u32> = text.bytes().map(u32::from).collect();
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default().with_stop_strings(["«fin»"]);
    let (streamed, summary) = run(&model, &mut s, &[b'>' as u32], &vocab, &config);
    assert_eq!(summary.text, "ça va ");
    assert!(streamed.deltas.iter().all(|d| !d.contains('«')));
    assert_eq!(summary.stop, Some(StopMatch::String("«fin»".into())));
}

#[test]
fn prompt_too_long_names_both_counts() {
    let vocab = hello_vocab();
    let model = ScriptedModel::argmax_script(vocab.len(), 8, &[1]);
    let mut sampler = Sampler::greedy();
    let config = GenerationConfig::default();
    // Limited by the model's context length...
    let mut s = session(&model, 16);
    let err = generate(&model, &mut s, &[1; 9], &mut sampler, &vocab, &config).err();
    let err = err.expect("prompt of 9 > 8 accepted");
    assert!(matches!(
        err,
        GenerateError::PromptTooLong {
            prompt_tokens: 9,
            context_length: 8
        }
    ));
    let message = err.to_string();
    assert!(message.contains('9') && message.contains('8'), "{message}");
    // ...or by the cache capacity.
    let mut s = session(&model, 4);
    let err = generate(&model, &mut s, &[1; 5], &mut sampler, &vocab, &config).err();
    assert!(matches!(
        err,
        Some(GenerateError::PromptTooLong {
            prompt_tokens: 5,
            context_length: 4
        })
    ));
    assert!(model.calls().is_empty());
}

#[test]
fn empty_prompt_and_out_of_vocab_tokens_are_errors() {
    let vocab = hello_vocab();
    let model = ScriptedModel::argmax_script(vocab.len(), 8, &[1]);
    let mut s = session(&model, 8);
    let mut sampler = Sampler::greedy();
    let config = GenerationConfig::default();
    let err = generate(&model, &mut s, &[], &mut sampler, &vocab, &config).err();
    assert!(matches!(err, Some(GenerateError::EmptyPrompt)));
    let err = generate_to_end(&model, &mut s, &[1, 99], &mut sampler, &vocab, &config);
    assert!(matches!(
        err,
        Err(GenerateError::TokenOutOfVocab {
            token: 99,
            vocab_size: 8
        })
    ));
}

#[test]
fn reaching_the_context_length_ends_with_length() {
    let vocab = hello_vocab();
    let model = ScriptedModel::argmax_script(vocab.len(), 6, &[1; 10]);
    let mut s = session(&model, 100);
    let config = GenerationConfig::default();
    let (_, summary) = run(&model, &mut s, &[6, 7, 6, 7], &vocab, &config);
    assert_eq!(summary.finish_reason, FinishReason::Length);
    assert_eq!(summary.generated_tokens, 2, "4 prompt + 2 generated = 6");
    assert_eq!(model.calls().len(), 2);

    // A prompt that fills the context: nothing to generate, the model is not run.
    let model = ScriptedModel::argmax_script(vocab.len(), 6, &[1; 10]);
    let mut s = session(&model, 100);
    let (streamed, summary) = run(&model, &mut s, &[6; 6], &vocab, &config);
    assert!(streamed.ids.is_empty());
    assert_eq!(summary.finish_reason, FinishReason::Length);
    assert!(model.calls().is_empty());

    // The cache capacity limits the same way.
    let model = ScriptedModel::argmax_script(vocab.len(), 100, &[1; 10]);
    let mut s = session(&model, 5);
    let (_, summary) = run(&model, &mut s, &[6, 7], &vocab, &config);
    assert_eq!(summary.generated_tokens, 3);
    assert_eq!(summary.finish_reason, FinishReason::Length);
}

#[test]
fn session_reuse_prefills_only_new_tokens() {
    let vocab = hello_vocab();
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &[1, 2, 3, 4, 5, 1, 2, 3, 4]);
    let mut s = session(&model, 64);
    let config = GenerationConfig::default().with_max_new_tokens(2);

    // Turn 1: prompt [6, 7] -> generates 1, 2; the session holds [6, 7, 1].
    let (_, first) = run(&model, &mut s, &[6, 7], &vocab, &config);
    assert_eq!(first.tokens, [1, 2]);
    assert_eq!(s.tokens(), [6, 7, 1]);
    assert_eq!(first.timings.prefill_tokens, 2);

    // Turn 2: the conversation so far plus new tokens: only [2, 6, 7] are fed.
    let (_, second) = run(&model, &mut s, &[6, 7, 1, 2, 6, 7], &vocab, &config);
    assert_eq!(second.prompt_tokens, 6);
    assert_eq!(second.timings.prefill_tokens, 3);
    let calls = model.calls();
    assert_eq!(
        calls[2],
        Call {
            cache_len: 3,
            tokens: vec![2, 6, 7]
        }
    );
    assert_eq!(second.tokens, [3, 4]);
    assert_eq!(s.tokens(), [6, 7, 1, 2, 6, 7, 3]);

    // Turn 3: an edited history: the cache is rolled back to the common prefix [6, 7].
    let (_, third) = run(&model, &mut s, &[6, 7, 5], &vocab, &config);
    assert_eq!(third.timings.prefill_tokens, 1);
    assert_eq!(
        model.calls()[4],
        Call {
            cache_len: 2,
            tokens: vec![5]
        }
    );

    // Turn 4: the same prompt as held: the last token is fed again to get logits.
    let held = s.tokens().to_vec();
    let (_, fourth) = run(&model, &mut s, &held, &vocab, &config);
    assert_eq!(fourth.timings.prefill_tokens, 1);
    assert_eq!(
        model.calls()[6],
        Call {
            cache_len: held.len() - 1,
            tokens: vec![*held.last().unwrap()]
        }
    );
}

#[test]
fn generator_is_fused_and_the_session_holds_what_was_fed() {
    let vocab = hello_vocab();
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &[1, 2, 3]);
    let mut s = session(&model, 64);
    let mut sampler = Sampler::greedy();
    let config = GenerationConfig::default().with_max_new_tokens(3);
    let mut generator = generate(&model, &mut s, &[6, 7], &mut sampler, &vocab, &config).unwrap();
    let mut n = 0;
    while let Some(event) = generator.next() {
        if let Event::Token { .. } = event.unwrap() {
            n += 1;
            assert_eq!(generator.tokens().len(), n);
        }
    }
    assert!(generator.next().is_none(), "fused after Done");
    drop(generator);
    assert_eq!(s.tokens(), [6, 7, 1, 2]);
}

#[test]
fn model_errors_surface_and_roll_the_session_back() {
    let vocab = hello_vocab();
    let mut model = ScriptedModel::argmax_script(vocab.len(), 64, &[1, 2, 3, 4]);
    model.fail_on_call = Some(2);
    let mut s = session(&model, 64);
    let mut sampler = Sampler::greedy();
    let config = GenerationConfig::default();
    let mut generator = generate(&model, &mut s, &[6], &mut sampler, &vocab, &config).unwrap();
    assert!(generator.next().unwrap().is_ok());
    assert!(generator.next().unwrap().is_ok());
    let err = generator.next().unwrap().unwrap_err();
    assert!(matches!(err, GenerateError::Model(_)));
    let source = std::error::Error::source(&err).unwrap().to_string();
    assert!(source.contains("Injected"), "{source}");
    assert!(generator.next().is_none(), "fused after an error");
    drop(generator);
    assert_eq!(s.tokens(), [6, 1]);
    assert_eq!(s.cache().len, 2, "the partial append was rolled back");
}

#[test]
fn sampling_and_logits_errors_surface() {
    let vocab = hello_vocab();
    let mut rows = vec![peaked_row(vocab.len(), 1); 3];
    rows[1][3] = f32::NAN;
    let model = ScriptedModel::new(vocab.len(), 64, rows);
    let mut s = session(&model, 64);
    let mut sampler = Sampler::greedy();
    let config = GenerationConfig::default();
    let err = generate_to_end(&model, &mut s, &[6], &mut sampler, &vocab, &config).unwrap_err();
    assert!(
        matches!(err, GenerateError::Sampling { step: 1, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("step 1"));

    let mut model = ScriptedModel::argmax_script(vocab.len(), 64, &[1, 2]);
    model.bad_row_len = Some(3);
    let mut s = session(&model, 64);
    let err = generate_to_end(&model, &mut s, &[6], &mut sampler, &vocab, &config).unwrap_err();
    assert!(matches!(
        err,
        GenerateError::LogitsLength {
            expected: 8,
            actual: 3
        }
    ));
    assert!(s.is_empty());
}

#[test]
fn decoder_errors_surface() {
    // The decoder knows fewer ids than the model.
    let vocab = ByteVocab::from_strs(&["a", "b"]);
    let model = ScriptedModel::argmax_script(4, 64, &[1, 3]);
    let mut s = session(&model, 64);
    let mut sampler = Sampler::greedy();
    let config = GenerationConfig::default();
    let err = generate_to_end(&model, &mut s, &[0], &mut sampler, &vocab, &config).unwrap_err();
    assert!(matches!(err, GenerateError::Decode(_)), "{err:?}");
}

#[test]
fn run_with_a_sink_matches_the_iterator() {
    let vocab = hello_vocab();
    let script = vocab.ids(&["Hel", "lo", "<eos>"]);
    let model = ScriptedModel::argmax_script(vocab.len(), 64, &script);
    let mut s = session(&model, 64);
    let mut sampler = Sampler::greedy();
    let config = GenerationConfig::default().with_eog_token_ids([0]);
    let mut printed = String::new();
    let summary = generate(&model, &mut s, &[6], &mut sampler, &vocab, &config)
        .unwrap()
        .run(|event| {
            if let Event::Token { text, .. } = event {
                printed.push_str(text);
            }
        })
        .unwrap();
    assert_eq!(printed, "Hello");
    assert_eq!(summary.text, "Hello");
}
