//! The working set a chain operates on: the whole logits row until a stage truncates it, then a
//! short list of `(id, logit)` candidates. The whole vocabulary is never sorted: truncating stages
//! select their candidates with `select_nth_unstable_by` and sort only what they keep.

use std::cmp::Ordering;

use crate::SamplingError;

/// A candidate token: id and (processed) logit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cand {
    pub id: u32,
    pub logit: f32,
}

/// The deterministic candidate order: logit descending, then id ascending.
#[inline]
pub(crate) fn by_logit_desc(a: &Cand, b: &Cand) -> Ordering {
    b.logit.total_cmp(&a.logit).then(a.id.cmp(&b.id))
}

/// Clamps the result of arithmetic on a finite logit back into the finite range, so no
/// processor can turn a finite logit into `±inf` (and later a NaN). `-inf` stays `-inf`.
#[inline]
pub(crate) fn keep_finite(before: f32, after: f32) -> f32 {
    if before == f32::NEG_INFINITY {
        before
    } else if after.is_nan() {
        // Unreachable with validated parameters; never let a NaN escape.
        before
    } else {
        after.clamp(-f32::MAX, f32::MAX)
    }
}

/// The set of tokens still in play.
///
/// In *full* mode the set is every entry of `row` that is not `-inf`; once a stage truncates,
/// the set is `list` (and `row` is no longer consulted). `sorted` says `list` is in
/// [`by_logit_desc`] order.
pub(crate) struct WorkSet<'a> {
    pub row: &'a mut [f32],
    pub list: &'a mut Vec<Cand>,
    pub full: bool,
    pub sorted: bool,
}

impl<'a> WorkSet<'a> {
    pub fn new(row: &'a mut [f32], list: &'a mut Vec<Cand>) -> Self {
        list.clear();
        WorkSet {
            row,
            list,
            full: true,
            sorted: false,
        }
    }

    /// Number of tokens in play (a scan of the row in full mode).
    pub fn len(&self) -> usize {
        if self.full {
            self.row.iter().filter(|&&l| l > f32::NEG_INFINITY).count()
        } else {
            self.list.len()
        }
    }

    /// Visits `(id, logit)` of every token in play, in id order (full mode) or list order.
    pub fn for_each(&self, mut f: impl FnMut(u32, f32)) {
        if self.full {
            for (i, &l) in self.row.iter().enumerate() {
                if l > f32::NEG_INFINITY {
                    f(i as u32, l);
                }
            }
        } else {
            for c in self.list.iter() {
                f(c.id, c.logit);
            }
        }
    }

    /// The best token (highest logit, lowest id on ties), or `AllMasked`.
    pub fn best(&self) -> Result<Cand, SamplingError> {
        if self.full {
            return crate::logprobs::row_best(self.row)
                .map(|(i, logit)| Cand {
                    id: i as u32,
                    logit,
                })
                .ok_or(SamplingError::AllMasked);
        }
        if self.sorted {
            return self.list.first().copied().ok_or(SamplingError::AllMasked);
        }
        let mut best: Option<Cand> = None;
        self.for_each(|id, logit| {
            let c = Cand { id, logit };
            if best.is_none_or(|b| by_logit_desc(&c, &b) == Ordering::Less) {
                best = Some(c);
            }
        });
        best.ok_or(SamplingError::AllMasked)
    }

    /// `(max logit, ln sum exp(logit - max))`, in f64; `None` when the set is empty.
    pub fn log_normalizer(&self) -> Option<(f64, f64)> {
        let max = self.best().ok()?.logit as f64;
        let mut sum = 0.0f64;
        self.for_each(|_, l| sum += (l as f64 - max).exp());
        Some((max, sum.ln()))
    }

    /// Applies `f(logit, &value)` to each listed id (sorted by id, unique): to the row always, and
    /// to the candidate list when the set has been truncated.
    pub fn apply_sparse<T>(&mut self, adjust: &[(u32, T)], f: impl Fn(f32, &T) -> f32) {
        for (id, t) in adjust {
            let l = &mut self.row[*id as usize];
            *l = keep_finite(*l, f(*l, t));
        }
        if !self.full {
            for c in self.list.iter_mut() {
                if let Ok(i) = adjust.binary_search_by_key(&c.id, |a| a.0) {
                    c.logit = keep_finite(c.logit, f(c.logit, &adjust[i].1));
                }
            }
            self.sorted = false;
        }
    }

    /// Applies `f` to every logit in play (temperature).
    pub fn map_logits(&mut self, f: impl Fn(f32) -> f32) {
        if self.full {
            for l in self.row.iter_mut() {
                *l = keep_finite(*l, f(*l));
            }
        } else {
            for c in self.list.iter_mut() {
                c.logit = keep_finite(c.logit, f(c.logit));
            }
            // A monotone map keeps the order, except that clamping may create ties, which the
            // id tie-break orders differently; re-sort when needed.
            self.sorted = false;
        }
    }

    /// Switches to list mode with every token in play, in id order.
    pub fn materialize(&mut self) {
        if self.full {
            self.list.clear();
            self.list.extend(
                self.row
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| **l > f32::NEG_INFINITY)
                    .map(|(i, &logit)| Cand {
                        id: i as u32,
                        logit,
                    }),
            );
            self.full = false;
            self.sorted = false;
        }
    }

    /// Sorts the candidate list (switching to list mode). Only call on a truncated set, or when a
    /// stage genuinely needs the whole distribution in order.
    pub fn sort(&mut self) {
        self.materialize();
        if !self.sorted {
            self.list.sort_unstable_by(by_logit_desc);
            self.sorted = true;
        }
    }

    /// Keeps the `k` best tokens (`k >= 1`; a larger `k` keeps everything). The kept list is
    /// sorted.
    pub fn keep_top(&mut self, k: usize) {
        let k = k.max(1);
        if self.full {
            if k >= self.row.len() {
                return;
            }
            self.prefilter_top(k);
        }
        if k < self.list.len() {
            if !self.sorted {
                self.list.select_nth_unstable_by(k - 1, by_logit_desc);
            }
            self.list.truncate(k);
        }
        self.sort();
    }

    /// Switches to list mode with a superset of the `k` best tokens, without materialising the
    /// whole row: the `k`-th largest logit of a strided sample is a lower bound for the `k`-th
    /// largest of the row, so every entry at or above it is collected (ties included, so the
    /// exact top-k with id tie-breaks is inside).
    fn prefilter_top(&mut self, k: usize) {
        const SAMPLE: usize = 2048;
        let n = self.row.len();
        self.list.clear();
        if n > 4 * SAMPLE && k <= SAMPLE / 8 {
            let stride = n / SAMPLE;
            let mut sample: Vec<f32> = self.row.iter().step_by(stride).copied().collect();
            let (_, kth, _) = sample.select_nth_unstable_by(k - 1, |a, b| b.total_cmp(a));
            let bound = *kth;
            if bound > f32::NEG_INFINITY {
                for (i, &logit) in self.row.iter().enumerate() {
                    if logit >= bound {
                        self.list.push(Cand {
                            id: i as u32,
                            logit,
                        });
                    }
                }
                self.full = false;
                self.sorted = false;
                return;
            }
        }
        self.materialize();
    }

    /// Keeps the tokens whose logit satisfies `keep`; if none would remain, keeps the best one.
    pub fn retain(&mut self, keep: impl Fn(f32) -> bool) {
        let best = match self.best() {
            Ok(b) => b,
            Err(_) => return,
        };
        if self.full {
            self.list.clear();
            self.list.extend(
                self.row
                    .iter()
                    .enumerate()
                    .filter(|(_, l)| **l > f32::NEG_INFINITY && keep(**l))
                    .map(|(i, &logit)| Cand {
                        id: i as u32,
                        logit,
                    }),
            );
            self.full = false;
            self.sorted = false;
        } else {
            // `retain` preserves the relative order, so `sorted` stays valid.
            self.list.retain(|c| keep(c.logit));
        }
        if self.list.is_empty() {
            self.list.push(best);
            self.sorted = true;
        }
    }

    /// Leaves only the best token.
    pub fn collapse_to_best(&mut self) -> Result<Cand, SamplingError> {
        let best = self.best()?;
        self.list.clear();
        self.list.push(best);
        self.full = false;
        self.sorted = true;
        Ok(best)
    }
}

/// Reorders `items` so that a prefix, sorted by `cmp`, is the shortest one (in `cmp` order) whose
/// `weight`s add up to at least `target`; returns its length (at least 1 when `items` is not
/// empty; all of them if the target is never reached).
///
/// Works on a growing partial selection (64, 256, 1024, ... items) instead of sorting everything.
pub(crate) fn shortest_prefix_reaching<T>(
    items: &mut [T],
    already_sorted: bool,
    cmp: impl Fn(&T, &T) -> Ordering,
    weight: impl Fn(&T) -> f64,
    target: f64,
) -> usize {
    let n = items.len();
    if n == 0 {
        return 0;
    }
    let mut done = 0;
    let mut acc = 0.0f64;
    let mut m = n.min(64);
    loop {
        if !already_sorted {
            if m < n {
                items[done..].select_nth_unstable_by(m - done - 1, &cmp);
            }
            items[done..m].sort_unstable_by(&cmp);
        }
        for (i, item) in items[..m].iter().enumerate().skip(done) {
            acc += weight(item);
            if acc >= target {
                return i + 1;
            }
        }
        if m == n {
            return n;
        }
        done = m;
        m = (m * 4).min(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shortest_prefix_matches_full_sort() {
        let mut v: Vec<u32> = (0..1000).map(|i| (i * 7919) % 1000).collect();
        let n = shortest_prefix_reaching(&mut v, false, |a, b| a.cmp(b), |&x| x as f64, 200_000.0);
        let mut sorted: Vec<u32> = (0..1000).collect();
        sorted.sort();
        let mut acc = 0.0;
        let want = sorted.iter().position(|&x| {
            acc += x as f64;
            acc >= 200_000.0
        });
        assert_eq!(n, want.unwrap() + 1);
        assert!(v[..n].windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(&v[..n], &sorted[..n]);
    }

    #[test]
    fn keep_finite_never_makes_inf_or_nan() {
        assert_eq!(keep_finite(1.0, f32::INFINITY), f32::MAX);
        assert_eq!(keep_finite(-1.0, f32::NEG_INFINITY), -f32::MAX);
        assert_eq!(keep_finite(f32::NEG_INFINITY, 5.0), f32::NEG_INFINITY);
        assert_eq!(keep_finite(2.0, f32::NAN), 2.0);
    }
}
