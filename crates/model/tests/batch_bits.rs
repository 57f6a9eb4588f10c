//! With one arithmetic for every row (`RowArithmetic::Decode`, what `kindle serve` and a
//! batch of prompts ask for), a row's logits have the same bits whatever it is batched with,
//! however its prompt is chunked: a server's requests get what they get alone. By row count
//! (the default) a decode row batched beside a long prompt takes the prefill product's
//! arithmetic instead, which the companion test shows the comparison catches.

mod common;

use common::paths::{tiny_quantized, tokens};
use kindle_gguf::quant::GgmlType;
use kindle_model::{BatchSequence, KernelOptions, Kernels, Llama, LogitsFor, RowArithmetic};

fn model(arithmetic: RowArithmetic) -> Llama {
    tiny_quantized(false, GgmlType::Q8_0, 96).with_kernels(Kernels::new(KernelOptions {
        threads: Some(2),
        arithmetic,
        ..KernelOptions::default()
    }))
}

/// Sequence A (a short prompt, then one decode step) and sequence B (a 40-token prompt):
/// A's decode logits alone and batched with B's prompt, and B's last logits alone, batched,
/// and fed in two chunks.
fn runs(model: &Llama) -> [Vec<f32>; 5] {
    let (prompt_a, next_a, prompt_b) = (tokens(1, 5, 96), [7u32], tokens(2, 40, 96));
    let mut a = model.new_cache(64);
    model.forward(&prompt_a, &mut a, LogitsFor::Last).unwrap();
    let a_alone = model
        .forward(&next_a, &mut a.fork(), LogitsFor::Last)
        .unwrap();
    let b_alone = model
        .forward(&prompt_b, &mut model.new_cache(64), LogitsFor::Last)
        .unwrap();
    let mut b = model.new_cache(64);
    model
        .forward(&prompt_b[..16], &mut b, LogitsFor::Last)
        .unwrap();
    let b_chunked = model
        .forward(&prompt_b[16..], &mut b, LogitsFor::Last)
        .unwrap();
    let (mut a2, mut b2) = (a.fork(), model.new_cache(64));
    let mut batch = model
        .forward_batch(
            &mut [
                BatchSequence {
                    tokens: &next_a,
                    cache: &mut a2,
                },
                BatchSequence {
                    tokens: &prompt_b,
                    cache: &mut b2,
                },
            ],
            LogitsFor::Last,
        )
        .unwrap();
    let b_batched = batch.pop().unwrap();
    let a_batched = batch.pop().unwrap();
    [a_alone, a_batched, b_alone, b_batched, b_chunked]
}

#[test]
fn with_one_arithmetic_a_row_keeps_its_bits_in_any_batch_and_chunking() {
    let [a_alone, a_batched, b_alone, b_batched, b_chunked] = runs(&model(RowArithmetic::Decode));
    assert_eq!(
        a_batched, a_alone,
        "a decode row batched beside a 20-token prompt"
    );
    assert_eq!(b_batched, b_alone, "a prompt batched beside a decode row");
    assert_eq!(b_chunked, b_alone, "a prompt fed as 32 + 8 tokens");
}

#[test]
fn by_row_count_a_decode_row_beside_a_long_prompt_changes() {
    let [a_alone, a_batched, b_alone, _, b_chunked] = runs(&model(RowArithmetic::ByRows));
    assert_ne!(
        a_batched, a_alone,
        "the batch's 21 rows take the prefill product"
    );
    assert_ne!(
        b_chunked, b_alone,
        "the 4-token chunk takes the decode kernels"
    );
}

/// Logits asked for part of the vocabulary (`forward_last_rows`, a draft proposing from it)
/// have the bits of the whole row's, after a prompt and after one token, with a packed `Q8_0`
/// head (tied to the embedding) and an `F16` one read in place; the head's other rows are not
/// computed (their entries stay zero, from the second group of eight past the ranges).
#[test]
fn logits_of_part_of_the_vocabulary_have_the_whole_row_s_bits() {
    for tied in [true, false] {
        let model =
            tiny_quantized(tied, GgmlType::Q8_0, 96).with_kernels(Kernels::new(KernelOptions {
                threads: Some(2),
                ..KernelOptions::default()
            }));
        let rows = [0..10, 37..38, 90..96];
        let (prompt, next) = (tokens(3, 7, 96), [5u32]);
        let (mut whole, mut part) = (model.new_cache(32), model.new_cache(32));
        for feed in [&prompt[..], &next[..]] {
            let want = model.forward(feed, &mut whole, LogitsFor::Last).unwrap();
            let got = model.forward_last_rows(feed, &mut part, &rows).unwrap();
            assert_eq!(got.len(), want.len());
            for r in rows.iter().flat_map(|r| r.clone()) {
                assert_eq!(got[r].to_bits(), want[r].to_bits(), "tied {tied}: id {r}");
            }
            let skipped = (48..88).filter(|&r| got[r] == 0.0).count();
            assert_eq!(
                skipped, 40,
                "tied {tied}: the head's rows 48..88 were computed"
            );
        }
    }
}
