//! Property tests of `kindle_sampling::logprobs`, in the style of `properties.rs`: each property
//! is a checking function run on the real helpers, and a companion unit test (`*_catches_*`)
//! feeds it the output of a deliberately broken implementation.

use kindle_sampling::logprobs::{argmax, log_sum_exp, top_n, top_n_logprobs, try_argmax};
use proptest::prelude::*;

const NEG_INF: f32 = f32::NEG_INFINITY;

// ---------------------------------------------------------------- references and strategies

/// Reference order: every id, by a stable full sort on the value descending (NaN as `-inf`), so
/// ties keep the lower id first.
fn fully_sorted(logits: &[f32]) -> Vec<u32> {
    let key = |i: u32| {
        let v = logits[i as usize];
        if v.is_nan() { NEG_INF } else { v }
    };
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    ids.sort_by(|&a, &b| key(b).partial_cmp(&key(a)).expect("NaN mapped to -inf"));
    ids
}

/// Reference log-sum-exp: max-shifted, every step in f64 with the platform's `exp` and `ln`.
fn naive_lse(logits: &[f32]) -> f64 {
    let max = logits
        .iter()
        .map(|&x| f64::from(x))
        .fold(f64::NEG_INFINITY, f64::max);
    max + logits
        .iter()
        .map(|&x| (f64::from(x) - max).exp())
        .sum::<f64>()
        .ln()
}

/// Rows with repeated values (ties), both zeros, and sometimes NaN and infinities.
fn any_row() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(
        prop_oneof![
            8 => -20.0f32..20.0,
            2 => (-3i32..3).prop_map(|i| i as f32),
            1 => Just(-0.0f32),
            1 => Just(NEG_INF),
            1 => Just(f32::INFINITY),
            1 => Just(f32::NAN),
        ],
        0..300,
    )
}

/// Finite rows of moderate logits (what a model emits), long enough to use every lane.
fn moderate_row() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-30.0f32..30.0, 1..2000)
}

// ---------------------------------------------------------------- checks

fn check_top_n(logits: &[f32], n: usize, got: &[(u32, f32)]) -> Result<(), String> {
    let want: Vec<u32> = fully_sorted(logits).into_iter().take(n).collect();
    let ids: Vec<u32> = got.iter().map(|&(id, _)| id).collect();
    if ids != want {
        return Err(format!("top {n} is {ids:?}, a full sort gives {want:?}"));
    }
    match got
        .iter()
        .find(|&&(id, v)| v.to_bits() != logits[id as usize].to_bits())
    {
        Some(&(id, v)) => Err(format!(
            "id {id} reported {v}, the row has {}",
            logits[id as usize]
        )),
        None => Ok(()),
    }
}

fn check_argmax(logits: &[f32], got: Option<u32>, top1: &[(u32, f32)]) -> Result<(), String> {
    let want = top1.first().map(|&(id, _)| id);
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "argmax {got:?}, top_n(.., 1) {want:?} (row {logits:?})"
        ))
    }
}

/// `try_argmax` is `Ok` exactly for rows a sampler accepts, and then agrees with `argmax`.
fn check_try_argmax(logits: &[f32]) -> Result<(), String> {
    let fit = logits.iter().all(|v| !v.is_nan() && *v != f32::INFINITY)
        && logits.iter().any(|&v| v > NEG_INF);
    match try_argmax(logits) {
        Ok(id) if fit && Some(id) == argmax(logits) => Ok(()),
        Err(_) if !fit => Ok(()),
        other => Err(format!("try_argmax {other:?} on {logits:?} (fit: {fit})")),
    }
}

/// Within 2e-7 absolute of the f64 reference: the bound of the fast `exp` (an `f32` polynomial,
/// relative error < 2e-7 per term; the sum is in `f64`). 1e-9 relative is out of reach of an
/// `f32` `exp`; measured on rows of 1 to 49152 logits in [-30, 30], the worst was 2e-8 absolute,
/// 1.1e-8 relative.
fn check_lse(logits: &[f32], got: f64) -> Result<(), String> {
    let want = naive_lse(logits);
    if (got - want).abs() <= 2e-7 {
        Ok(())
    } else {
        Err(format!("log_sum_exp {got}, f64 reference {want}"))
    }
}

// ---------------------------------------------------------------- properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn top_n_is_a_full_sorts_prefix(logits in any_row(), n in 0usize..40) {
        let r = check_top_n(&logits, n, &top_n(&logits, n));
        prop_assert!(r.is_ok(), "{:?}", r);
        let lse = log_sum_exp(&logits);
        let ids: Vec<u32> = top_n_logprobs(&logits, lse, n).into_iter().map(|x| x.0).collect();
        let want: Vec<u32> = top_n(&logits, n).into_iter().map(|x| x.0).collect();
        prop_assert_eq!(ids, want);
    }

    #[test]
    fn argmax_is_top_1(logits in any_row()) {
        let r = check_argmax(&logits, argmax(&logits), &top_n(&logits, 1));
        prop_assert!(r.is_ok(), "{:?}", r);
        let r = check_try_argmax(&logits);
        prop_assert!(r.is_ok(), "{:?}", r);
    }

    #[test]
    fn log_sum_exp_matches_f64(logits in moderate_row()) {
        let r = check_lse(&logits, log_sum_exp(&logits));
        prop_assert!(r.is_ok(), "{:?}", r);
    }
}

// ---------------------------------------------------------------- the checks catch bugs

#[test]
fn top_n_check_catches_ties_to_the_higher_id() {
    let logits = [1.0, 5.0, 3.0, 5.0];
    assert!(check_top_n(&logits, 2, &[(1, 5.0), (3, 5.0)]).is_ok());
    assert!(check_top_n(&logits, 2, &[(3, 5.0), (1, 5.0)]).is_err());
    // A full sort with `total_cmp` ranks NaN first and +0 above -0.
    let logits = [0.0, -0.0, f32::NAN];
    assert!(check_top_n(&logits, 3, &[(0, 0.0), (1, -0.0), (2, f32::NAN)]).is_ok());
    assert!(check_top_n(&logits, 1, &[(2, f32::NAN)]).is_err());
}

#[test]
fn argmax_check_catches_a_last_index_argmax() {
    let logits = [2.0, 7.0, 7.0];
    let last_max = |l: &[f32]| l.iter().rposition(|&x| x == 7.0).map(|i| i as u32);
    assert!(check_argmax(&logits, last_max(&logits), &top_n(&logits, 1)).is_err());
    assert!(check_argmax(&logits, Some(1), &top_n(&logits, 1)).is_ok());
}

#[test]
fn lse_check_catches_dropped_remainder_lanes() {
    let logits: Vec<f32> = (0..19).map(|i| (i % 5) as f32).collect();
    let lanes_only = naive_lse(&logits[..16]);
    assert!(check_lse(&logits, lanes_only).is_err());
    assert!(check_lse(&logits, naive_lse(&logits)).is_ok());
}

#[test]
fn fixed_cases() {
    assert!(check_try_argmax(&[]).is_ok());
    assert_eq!(argmax(&[]), None);
    assert_eq!(argmax(&[f32::NAN, f32::NAN]), Some(0));
    assert_eq!(argmax(&[NEG_INF, f32::NAN, NEG_INF]), Some(0));
    assert_eq!(argmax(&[1.0, f32::INFINITY, f32::INFINITY]), Some(1));
    assert!(try_argmax(&[1.0, f32::INFINITY]).is_err());
}
