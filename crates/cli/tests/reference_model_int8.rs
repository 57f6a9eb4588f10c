//! The reference checks of `reference_model.rs` with the CPU kernels' 8-bit activations
//! (llama.cpp's scheme), chosen per model with [`Llama::with_kernels`].
//!
//! A pass of 16 rows or more is a prefill, which runs with 8-bit activations only where the
//! batched kernels apply (packed weights and any SIMD level; without SIMD weights are
//! dequantised for a dense `f32` product, `DENSE_PREFILL_ROWS`), so here every sequence, and
//! every prompt before free-running decoding, goes through the cache in slices of 15 rows:
//! every row of every product runs with 8-bit activations on every machine. Where the batched
//! kernels apply, one whole pass gives the slices' logits bit for bit (a row's result does not
//! depend on its batch).
//!
//! **Measured bound.** With 8-bit activations two top-5 logprobs are past the reference's 0.6,
//! both in the tails of steps whose top token is nearly certain: `chat` step 2, token 282,
//! -10.128 against llama.cpp's -10.762 (0.634), and `chat` step 18 (position 55), token 50,
//! -13.199 against -12.557 (0.642; margin 9.0, top token at probability 0.9998). Every other
//! int8 top-5 logprob is within 0.6. (Before the attention summed with FMA, 2026-11-26, the
//! second was 0.77 and the first within 0.6.) The same values come out for slices of 1, 4, 8 or
//! 15 rows (a row's result has the same bits in any such batch). So this test holds int8 to 0.65
//! everywhere and to the reference's 0.6 everywhere but at two places.

mod common;

use common::reference::{
    LOGPROB_TOLERANCE, Passes, TeacherForced, all_logits, check_free_running, model, teacher_forced,
};
use common::{ids, prompts, reference};
use kindle_model::linear::DENSE_PREFILL_ROWS;
use kindle_model::{ActivationFormat, Kernels, Llama};

/// Passes short enough that the kernels keep the selected activation format.
const SLICES: Passes = Passes::Slices(DENSE_PREFILL_ROWS - 1);

/// The bound on every int8 top-5 logprob (measured: 0.642, see the module docs).
const INT8_BOUND: f64 = 0.65;
/// How many int8 top-5 logprobs may be past the reference's 0.6 (measured: two).
const INT8_PAST_TOLERANCE: usize = 2;

/// `model` with its quantized weights multiplied with `format` activations.
fn with_activations(model: &Llama, format: ActivationFormat) -> Llama {
    let options = model.kernels().options().with_activations(format);
    let model = model.clone().with_kernels(Kernels::new(options));
    assert_eq!(model.kernels().activations(), format);
    model
}

#[test]
fn int8_activations_match_llama_cpp_teacher_forced_and_free_running() {
    let Some(f32_model) = model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let f32_model = with_activations(f32_model, ActivationFormat::F32);
    let int8_model = with_activations(&f32_model, ActivationFormat::Int8);
    let model = &int8_model;
    // The slices must really change the arithmetic: the same sequence with f32 activations
    // gives other logits.
    let (_, france) = prompts()
        .into_iter()
        .find(|(name, _)| name == "france")
        .expect("the france prompt");
    let mut tokens = ids(&france["prompt_ids"]);
    tokens.extend(&ids(&france["greedy_ids"])[..20]);
    let f32_logits = all_logits(&f32_model, &tokens, SLICES);
    let int8_logits = all_logits(model, &tokens, SLICES);
    let moved = f32_logits
        .iter()
        .zip(&int8_logits)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    eprintln!(
        "int8 vs f32 activations, france, {} positions: largest logit difference {moved:.3}",
        tokens.len()
    );
    assert!(
        moved > 1e-2,
        "8-bit activations changed the logits by only {moved}: did they run?"
    );
    // One pass (a prefill): 8-bit activations as in the slices where the batched kernels
    // apply, else the dense f32 product.
    let one_pass = all_logits(model, &tokens, Passes::One);
    if kindle_model::simd_level() != "portable scalar" {
        assert!(
            one_pass == int8_logits,
            "an int8 prefill differs from the same rows in slices of 15"
        );
    } else {
        let f32_one_pass = all_logits(&f32_model, &tokens, Passes::One);
        assert!(
            one_pass == f32_one_pass,
            "a dense prefill depends on the format"
        );
    }

    let found = teacher_forced(model, SLICES);
    found.report();
    if let Some(worst) = found.worst() {
        eprintln!("int8 activations, largest top-5 logprob difference: {worst}");
    }
    check_int8(&found).unwrap_or_else(|message| panic!("{message}"));
    check_free_running(model, SLICES);
}

/// The rules for int8 activations: the argmax margin rule, every top-5 logprob within
/// [`INT8_BOUND`], and at most [`INT8_PAST_TOLERANCE`] past the reference's 0.6.
fn check_int8(found: &TeacherForced) -> Result<(), String> {
    found.result(INT8_BOUND)?;
    let past = found.past(LOGPROB_TOLERANCE);
    if past.len() > INT8_PAST_TOLERANCE {
        let list: Vec<String> = past.iter().map(|d| d.to_string()).collect();
        return Err(format!(
            "{} top-5 logprobs past {LOGPROB_TOLERANCE} (at most {INT8_PAST_TOLERANCE}):\n{}",
            past.len(),
            list.join("\n")
        ));
    }
    Ok(())
}

/// The checks fail on a planted error: a top-5 logprob moved by 0.7 breaks the reference's
/// tolerance, three moved by 0.625 break the int8 rules (two do not), one moved by 0.9 breaks
/// the int8 bound, and a wrong argmax where llama.cpp's margin is decisive breaks both;
/// llama.cpp's own values pass.
#[test]
fn the_teacher_forced_checks_catch_a_planted_error() {
    let france = &reference()["prompts"]["france"];
    let steps = france["steps"].as_array().unwrap();
    let top5 = |step: usize| -> Vec<(u32, f32)> {
        steps[step]["top5"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32))
            .collect()
    };
    // Steps 0, 1 and 2 as llama.cpp saw them, with `shift` added to the third top-5 logprob
    // of each step in `shifted` and `argmax` as step 0's argmax.
    let check = |shift: f32, shifted: &[usize], argmax: u32| {
        let mut found = TeacherForced::default();
        for (step, reference) in steps.iter().enumerate().take(3) {
            let top = top5(step);
            let logprob = |id: u32| {
                let i = top.iter().position(|p| p.0 == id).unwrap();
                let planted = i == 2 && shifted.contains(&step);
                top[i].1 + if planted { shift } else { 0.0 }
            };
            let best = if step == 0 { argmax } else { top[0].0 };
            found.check_step("france", step, reference, logprob, best);
        }
        found
    };
    let want = steps[0]["argmax"].as_u64().unwrap() as u32;
    assert!(
        steps[0]["margin"].as_f64().unwrap() >= 0.5,
        "a decisive step"
    );

    let exact = check(0.0, &[], want);
    assert_eq!(exact.result(LOGPROB_TOLERANCE), Ok(()));
    assert_eq!(check_int8(&exact), Ok(()));
    assert_eq!(
        check(-0.59, &[0, 1], want).result(LOGPROB_TOLERANCE),
        Ok(())
    );

    let planted = check(0.7, &[1], want);
    let message = planted.result(LOGPROB_TOLERANCE).unwrap_err();
    assert!(
        message.starts_with("1 violations")
            && message.contains(&format!("step 1, token {}", top5(1)[2].0))
            && message.contains("(difference 0.7000), over 0.6"),
        "{message}"
    );
    assert!((planted.worst().unwrap().diff() - 0.7).abs() < 1e-5);
    assert!(check_int8(&planted).is_err(), "0.7 is past the int8 bound");
    let between = (LOGPROB_TOLERANCE + INT8_BOUND) as f32 / 2.0;
    assert_eq!(check_int8(&check(between, &[1], want)), Ok(()));
    assert_eq!(
        check_int8(&check(between, &[0, 1], want)),
        Ok(()),
        "two past 0.6 are allowed"
    );
    let message = check_int8(&check(between, &[0, 1, 2], want)).unwrap_err();
    assert!(
        message.starts_with("3 top-5 logprobs past 0.6"),
        "{message}"
    );
    let message = check_int8(&check(-0.9, &[0], want)).unwrap_err();
    assert!(message.contains("over 0.65"), "{message}");

    let wrong = check(0.0, &[], top5(0)[1].0);
    let message = wrong.result(LOGPROB_TOLERANCE).unwrap_err();
    assert!(message.contains("argmax at step 0"), "{message}");
    assert!(check_int8(&wrong).is_err());
}
