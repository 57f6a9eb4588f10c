//! A prefill task's rows of one head attended together (a leaf of `host_attend.rs`, x86-64
//! with AVX-512 only): pairs of rows score the keys they both see at once, and the rows'
//! weighted sums run as tiles over the positions they all see. Every output keeps the
//! arithmetic of the row-by-row loops (the same bits), because each row's part before and
//! after the shared positions runs alone, in order.
use super::attend_keys::{score_keys, span};
use super::attend_x86;

/// A row of [`paired_scores`]: its query, its scores' slot (from its first position), and its
/// positions `lo..hi` of the key runs.
pub(super) type RowScores<'a> = (&'a [f32], &'a mut [f32], (usize, usize));

/// The scores of two rows of a prefill task (each its query, its scores' slot from its first
/// position, and its positions `lo..hi` of the key runs `keys`): the positions both see
/// scored together ([`attend_x86::scores2`]), the rest row by row, every score with
/// [`key_dot`](super::attend_keys::key_dot)'s arithmetic.
#[inline(always)]
pub(super) fn paired_scores(rows: [RowScores<'_>; 2], keys: &[&[f32]], hd: usize, scale: f32) {
    let [(q0, s0, r0), (q1, s1, r1)] = rows;
    let (lo, hi) = (r0.0.max(r1.0), r0.1.min(r1.1));
    let mut parts = Vec::with_capacity(keys.len());
    let runs = (keys, hd, scale);
    if lo >= hi {
        alone(runs, &mut parts, (q0, s0, r0.0), r0);
        alone(runs, &mut parts, (q1, s1, r1.0), r1);
        return;
    }
    alone(runs, &mut parts, (q0, &mut *s0, r0.0), (r0.0, lo));
    alone(runs, &mut parts, (q1, &mut *s1, r1.0), (r1.0, lo));
    alone(runs, &mut parts, (q0, &mut *s0, r0.0), (hi, r0.1));
    alone(runs, &mut parts, (q1, &mut *s1, r1.0), (hi, r1.1));
    let mut both = Vec::with_capacity(keys.len());
    span(keys, hd, lo, hi, &mut both);
    let (mut a0, mut a1) = (lo - r0.0, lo - r1.0);
    for part in &both {
        let n = part.len() / hd;
        let (o0, o1) = (&mut s0[a0..a0 + n], &mut s1[a1..a1 + n]);
        let done = attend_x86::scores2([q0, q1], part, scale, [&mut *o0, &mut *o1]);
        let rest = &part[done * hd..];
        score_keys::<true>(q0, rest, scale, &mut o0[done..]);
        score_keys::<true>(q1, rest, scale, &mut o1[done..]);
        a0 += n;
        a1 += n;
    }
}

/// Row `q`'s positions `a..b` of the key runs (`keys`, `hd` wide, scaled by `scale`) into
/// `out`, its scores from position `from`, one key at a time. A function, not a closure of
/// [`paired_scores`], so that it is inlined into the caller's AVX2 + FMA instance: a closure
/// was compiled apart, its `mul_add`s calling the library's `fmaf` (0.5% of a Gemma-3 pp512).
#[inline(always)]
fn alone<'k>(
    (keys, hd, scale): (&[&'k [f32]], usize, f32),
    parts: &mut Vec<&'k [f32]>,
    (q, out, from): (&[f32], &mut [f32], usize),
    (a, b): (usize, usize),
) {
    if a < b {
        span(keys, hd, a, b, parts);
        let mut at = a - from;
        for part in parts.iter() {
            let n = part.len() / hd;
            score_keys::<true>(q, part, scale, &mut out[at..at + n]);
            at += n;
        }
    }
}

/// The weighted sums of a task's rows (`contexts`, zeroed here) over the value runs `values`:
/// row `r`'s probabilities at `probs[r * span_len..]`, for positions `ranges[r]` of the runs.
/// The positions every row sees are summed as a tile ([`attend_x86::accumulate`], each value
/// row read once for six rows); the positions before them that some rows see (a sliding
/// window's start) and those after them (the causal tail) row by row, so that every column of
/// a row is one FMA chain over its positions in order: the bits of `host_attend::weighted_sum`.
pub(super) fn tiled_sums(
    contexts: &mut [&mut [f32]],
    probs: &[f32],
    span_len: usize,
    ranges: &[(usize, usize)],
    values: &[&[f32]],
    hd: usize,
) {
    for context in contexts.iter_mut() {
        context.fill(0.0);
    }
    let lo = ranges.iter().map(|r| r.0).max().unwrap_or(0);
    let hi = ranges.iter().map(|r| r.1).min().unwrap_or(0);
    let mut parts = Vec::with_capacity(values.len());
    // Positions `a..b` of rows `rows` (their probabilities from `a`).
    let mut sum = |rows: std::ops::Range<usize>, a: usize, b: usize| {
        if a >= b {
            return;
        }
        span(values, hd, a, b, &mut parts);
        let weights: Vec<&[f32]> = rows
            .clone()
            .map(|r| &probs[r * span_len + a - ranges[r].0..][..b - a])
            .collect();
        attend_x86::accumulate(&mut contexts[rows], &weights, &parts, hd);
    };
    if lo < hi {
        for (r, &(start, _)) in ranges.iter().enumerate() {
            sum(r..r + 1, start, lo);
        }
        sum(0..ranges.len(), lo, hi);
        for (r, &(_, end)) in ranges.iter().enumerate() {
            sum(r..r + 1, hi, end);
        }
    } else {
        for (r, &(start, end)) in ranges.iter().enumerate() {
            sum(r..r + 1, start, end);
        }
    }
}
