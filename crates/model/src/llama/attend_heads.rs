//! The scores of a long decode row's query heads that share a KV head, a group of eight keys
//! at a time for all of them (a leaf of the host attention, beside `attend_x86.rs`, whose
//! arithmetic every score keeps).

use std::arch::x86_64::*;

use super::attend_x86::{available, finish8, per_line};

/// Groups of eight keys ahead that [`scores_heads`] prefetches (each group serves every
/// query before the next, so a group takes as long as several of [`scores`]').
///
/// [`scores`]: super::attend_x86::scores
const PREFETCH_GROUPS: usize = 4;

/// Groups of eight keys ahead that [`scores_heads`] also asks for into L2 (`prefetcht1`): the
/// keys come from memory, and four groups into L1 left the long row waiting on them (see
/// `attend_x86::FAR_ROWS`, measured with it: 8 groups, 16 KB of 64-wide keys; 4 was slower,
/// 16 no faster).
const FAR_GROUPS: usize = 8;

/// [`scores`] (`f32` keys) for several queries over the same keys, `out[r]` for `q[r]`: each
/// group of eight keys scored for every query before the next group, so that the group comes
/// from memory once and from L1 for the other queries (one query at a time over a block of
/// keys read it from memory for the first query only, then twice from L2: SmolLM2's decode
/// at depth 2048 spent about 12% less in its attention this way on a Zen 3). Every score has
/// [`scores`]' arithmetic. Returns how many keys it scored (the whole groups of eight).
///
/// [`scores`]: super::attend_x86::scores
///
/// # Panics
/// As [`scores`]; or if the queries or outputs differ in length.
pub(super) fn scores_heads(
    q: &[&[f32]],
    keys: &[f32],
    scale: f32,
    out: &mut [&mut [f32]],
) -> usize {
    let hd = q.first().map_or(0, |q| q.len());
    let n = out.first().map_or(0, |o| o.len());
    assert!(
        (available() || super::attend_stored::avx2_available())
            && hd.is_multiple_of(8)
            && hd > 0
            && q.len() == out.len()
            && q.iter().all(|q| q.len() == hd)
            && out.iter().all(|o| o.len() == n)
            && keys.len() >= n * hd,
        "scores_heads: {} queries of width {hd} (a multiple of 8), {} keys for {n} scores",
        q.len(),
        keys.len() / hd.max(1)
    );
    let groups = n / 8;
    // SAFETY: the form's features and the bounds checked above.
    unsafe {
        if available() {
            scores_heads_avx512(q, keys, scale, out, groups);
        } else {
            scores_heads_avx2(q, keys, scale, out, groups);
        }
    }
    8 * groups
}

/// # Safety
/// As [`scores_heads_body`], with AVX-512 (the 256-bit instructions, 32 registers).
#[target_feature(enable = "avx512f,avx512vl,avx2,fma,f16c")]
unsafe fn scores_heads_avx512(
    q: &[&[f32]],
    keys: &[f32],
    scale: f32,
    out: &mut [&mut [f32]],
    groups: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe { scores_heads_body(q, keys, scale, out, groups) }
}

/// # Safety
/// As [`scores_heads_body`], with AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scores_heads_avx2(
    q: &[&[f32]],
    keys: &[f32],
    scale: f32,
    out: &mut [&mut [f32]],
    groups: usize,
) {
    // SAFETY: forwarded from the caller.
    unsafe { scores_heads_body(q, keys, scale, out, groups) }
}

/// # Safety
/// Inlined only into a function with AVX2, FMA and F16C; every query `hd` wide (a multiple
/// of 8), every output at least `8 * groups` long, `keys` at least `8 * groups` keys.
#[inline(always)]
unsafe fn scores_heads_body(
    q: &[&[f32]],
    keys: &[f32],
    scale: f32,
    out: &mut [&mut [f32]],
    groups: usize,
) {
    let hd = q[0].len();
    let chunks = hd / 8;
    // SAFETY: the features and bounds (the caller's); a prefetch never faults.
    unsafe {
        let scale = _mm256_set1_ps(scale);
        let zero = _mm256_setzero_ps();
        for g in 0..groups {
            let base = keys.as_ptr().wrapping_add(8 * g * hd);
            for l in (0..8 * hd).step_by(per_line::<f32>()) {
                _mm_prefetch::<_MM_HINT_T0>(
                    base.wrapping_add(PREFETCH_GROUPS * 8 * hd + l) as *const i8
                );
                _mm_prefetch::<_MM_HINT_T1>(base.wrapping_add(FAR_GROUPS * 8 * hd + l) as *const i8);
            }
            for (qr, out) in q.iter().zip(out.iter_mut()) {
                let mut acc = [zero; 8];
                for c in 0..chunks {
                    let x = _mm256_loadu_ps(qr.as_ptr().add(8 * c));
                    for (k, acc) in acc.iter_mut().enumerate() {
                        let y = _mm256_loadu_ps(base.add(k * hd + 8 * c));
                        *acc = _mm256_fmadd_ps(x, y, *acc);
                    }
                }
                finish8(acc, scale, &mut out[8 * g..8 * g + 8]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::super::attend_keys::tests::values;
    use super::super::attend_stored::tests::bits;

    /// Several queries scored a group of keys at a time (a long decode row's query heads of
    /// one KV head) have the bits of each scored alone, in the AVX2 form or the AVX-512 one
    /// (whichever runs here), the keys past the last whole eight left alone; and through
    /// `score_keys_heads`, those too.
    #[test]
    fn scores_of_several_queries_have_the_bits_of_one() {
        assert!(
            available() || super::super::attend_stored::avx2_available(),
            "the scores of several queries are not tested: no AVX2/FMA/F16C"
        );
        for hd in [8, 64, 72] {
            let n = 8 * 3 + 5;
            let qs: Vec<Vec<f32>> = (0..3).map(|r| values(hd, 40 + r)).collect();
            let q: Vec<&[f32]> = qs.iter().map(|q| &q[..]).collect();
            let keys = values(n * hd, 47 + hd as u32);
            let mut got = vec![vec![f32::NAN; n]; 3];
            let mut outs: Vec<&mut [f32]> = got.iter_mut().map(|g| &mut g[..]).collect();
            assert_eq!(scores_heads(&q, &keys, 0.3, &mut outs), 24);
            let mut all = vec![vec![f32::NAN; n]; 3];
            let mut outs: Vec<&mut [f32]> = all.iter_mut().map(|g| &mut g[..]).collect();
            super::super::attend_keys::score_keys_heads::<true>(&q, &keys, 0.3, &mut outs);
            for r in 0..3 {
                let mut want = vec![f32::NAN; n];
                super::super::attend_keys::score_keys::<true>(q[r], &keys, 0.3, &mut want);
                assert_eq!(bits(&got[r][..24]), bits(&want[..24]), "hd {hd}, query {r}");
                assert!(
                    got[r][24..].iter().all(|s| s.is_nan()),
                    "the rest untouched"
                );
                assert_eq!(bits(&all[r]), bits(&want), "hd {hd}, query {r}, every key");
            }
        }
    }
}
