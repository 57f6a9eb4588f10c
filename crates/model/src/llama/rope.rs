//! Rotary position embeddings: the one table both executors rotate with.

use super::RopeStyle;

/// `cos` and `sin` of the rotary angles `position * theta^(-2i / head_dim)` of a pass's rows,
/// `[rows, head_dim / 2]` row-major. The angles are computed in `f64` and stored as `f32`
/// (llama.cpp's precision); the host executor reads the table as it is, the Burn executor
/// uploads it once per pass.
///
/// Pair `i` is `(2i, 2i + 1)` ([`RopeStyle::Adjacent`]: GGUF's llama converter permuted the
/// q/k rows so that this is the right pairing) or `(i, i + head_dim / 2)`
/// ([`RopeStyle::Halves`], Gemma's).
#[derive(Debug, Clone, PartialEq)]
pub struct RopeTable {
    style: RopeStyle,
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl RopeTable {
    /// The table of `positions` (one row each) for heads `head_dim` wide (even), rotary base
    /// `theta`.
    pub fn new(positions: &[usize], head_dim: usize, theta: f64) -> Self {
        let half = head_dim / 2;
        let inv_freq: Vec<f64> = (0..half)
            .map(|i| theta.powf(-2.0 * i as f64 / head_dim as f64))
            .collect();
        let mut cos = Vec::with_capacity(positions.len() * half);
        let mut sin = Vec::with_capacity(positions.len() * half);
        for &pos in positions {
            for &freq in &inv_freq {
                let angle = pos as f64 * freq;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        RopeTable {
            style: RopeStyle::Adjacent,
            half,
            cos,
            sin,
        }
    }

    /// The same angles, pairing features as `style` says.
    pub fn with_style(self, style: RopeStyle) -> Self {
        RopeTable { style, ..self }
    }

    /// How the table pairs a head's features.
    pub fn style(&self) -> RopeStyle {
        self.style
    }

    /// Rows (positions).
    pub fn rows(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }

    /// Pairs per head: `head_dim / 2`.
    pub fn half(&self) -> usize {
        self.half
    }

    /// `(cos, sin)` of row `r`, `head_dim / 2` each.
    pub fn row(&self, r: usize) -> (&[f32], &[f32]) {
        let range = r * self.half..(r + 1) * self.half;
        (&self.cos[range.clone()], &self.sin[range])
    }

    /// The whole table: `(cos, sin)`, `[rows, head_dim / 2]` each.
    pub fn into_parts(self) -> (Vec<f32>, Vec<f32>) {
        (self.cos, self.sin)
    }

    /// Rotate every `head_dim`-wide head of `row` (one token's queries or keys, heads one
    /// after another) by row `r`'s angles.
    pub fn rotate(&self, r: usize, row: &mut [f32]) {
        let (cos, sin) = self.row(r);
        for head in row.chunks_exact_mut(2 * self.half) {
            match self.style {
                RopeStyle::Adjacent => {
                    for ((pair, &c), &s) in head.chunks_exact_mut(2).zip(cos).zip(sin) {
                        let (x0, x1) = (pair[0], pair[1]);
                        pair[0] = x0 * c - x1 * s;
                        pair[1] = x0 * s + x1 * c;
                    }
                }
                RopeStyle::Halves => {
                    let (first, second) = head.split_at_mut(self.half);
                    for (((a, b), &c), &s) in first.iter_mut().zip(second).zip(cos).zip(sin) {
                        let (x0, x1) = (*a, *b);
                        *a = x0 * c - x1 * s;
                        *b = x0 * s + x1 * c;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn angles_are_position_times_frequency() {
        let table = RopeTable::new(&[0, 3], 4, 100.0);
        assert_eq!((table.rows(), table.half()), (2, 2));
        assert_eq!(table.row(0), (&[1.0, 1.0][..], &[0.0, 0.0][..]));
        let (cos, sin) = table.row(1);
        // Pair 0 turns by 3 radians, pair 1 by 3 / 100^(2/4) = 0.3.
        assert_eq!((cos[0], sin[0]), (3f64.cos() as f32, 3f64.sin() as f32));
        assert!((cos[1] - 0.3f32.cos()).abs() < 1e-6 && (sin[1] - 0.3f32.sin()).abs() < 1e-6);
    }

    #[test]
    fn rotation_turns_adjacent_pairs() {
        let table = RopeTable::new(&[1], 2, 10000.0);
        let mut row = [1.0, 0.0, 0.0, 2.0];
        table.rotate(0, &mut row);
        let (c, s) = (1f64.cos() as f32, 1f64.sin() as f32);
        assert_eq!(row, [c, s, -2.0 * s, 2.0 * c]);
        // Halves pair feature 0 with 1 of a 2-wide head as well; with 4-wide heads the
        // pairs are (0, 2) and (1, 3).
        let table = RopeTable::new(&[1], 4, 1.0).with_style(RopeStyle::Halves);
        let mut row = [1.0, 0.0, 0.0, 2.0];
        table.rotate(0, &mut row);
        assert_eq!(row, [c, -2.0 * s, s, 2.0 * c]);
    }
}
