//! [`Trace`]: what each stage of the chain did to one row, for `kindle explain`.
//!
//! A trace is recorded only by [`crate::Sampler::sample_traced`]; the other sampling calls
//! pay one untaken branch per stage for it. Each [`StageTrace`] holds the distribution after
//! its stage (every token still in play with its logit, and the normaliser), so any token's
//! probability after any stage can be read back, and the last one is the distribution the
//! selection drew from.

/// The distribution after each stage of one sampling call, in chain order.
///
/// The first stage is `raw` (the logits as given, softmaxed); then `masks` when logit bias,
/// min-tokens or the n-gram ban is configured; then every stage of the configured order (a
/// stage that changes nothing is still listed); then, under greedy decoding, `greedy` (all
/// mass on the argmax, the distribution the selection used).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// The stages, in the order they ran.
    pub stages: Vec<StageTrace>,
}

/// The distribution after one stage.
#[derive(Debug, Clone, PartialEq)]
pub struct StageTrace {
    /// The stage's name (`raw`, `masks`, a [`crate::Stage`] name, or `greedy`).
    pub name: &'static str,
    /// Tokens still in play after it.
    pub kept: usize,
    /// Tokens whose logit it changed or that it dropped (0 for `raw`).
    pub changed: usize,
    /// Every token in play, `(id, logit)`, in id order.
    cands: Vec<(u32, f32)>,
    /// `log Σ exp(logit)` over `cands`.
    log_norm: f64,
}

impl StageTrace {
    pub(crate) fn new(
        name: &'static str,
        mut cands: Vec<(u32, f32)>,
        previous: Option<&StageTrace>,
    ) -> Self {
        cands.sort_unstable_by_key(|c| c.0);
        let max = cands
            .iter()
            .map(|c| c.1 as f64)
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = cands.iter().map(|c| (c.1 as f64 - max).exp()).sum();
        let log_norm = max + sum.ln();
        let changed = previous.map_or(0, |p| {
            let mut changed = p.cands.len().saturating_sub(cands.len());
            for &(id, logit) in &cands {
                match p.cands.binary_search_by_key(&id, |c| c.0) {
                    Ok(i) if p.cands[i].1 == logit => {}
                    _ => changed += 1,
                }
            }
            changed
        });
        StageTrace {
            name,
            kept: cands.len(),
            changed,
            cands,
            log_norm,
        }
    }

    /// The probability of `id` after this stage (0 if the stage or an earlier one dropped it).
    pub fn probability(&self, id: u32) -> f64 {
        match self.cands.binary_search_by_key(&id, |c| c.0) {
            Ok(i) => (self.cands[i].1 as f64 - self.log_norm).exp(),
            Err(_) => 0.0,
        }
    }

    /// The logit of `id` after this stage, if it is still in play.
    pub fn logit(&self, id: u32) -> Option<f32> {
        self.cands
            .binary_search_by_key(&id, |c| c.0)
            .ok()
            .map(|i| self.cands[i].1)
    }

    /// The rank of `id` after this stage (1: the most likely; ties: lower id first), or `None`
    /// if it is no longer in play. One pass, no sort.
    pub fn rank(&self, id: u32) -> Option<usize> {
        let logit = self.logit(id)?;
        let ahead = self
            .cands
            .iter()
            .filter(|&&(other, l)| l > logit || (l == logit && other < id))
            .count();
        Some(ahead + 1)
    }

    /// Shannon entropy of the distribution after this stage, in nats.
    pub fn entropy(&self) -> f64 {
        self.cands
            .iter()
            .map(|&(_, l)| {
                let lp = l as f64 - self.log_norm;
                let p = lp.exp();
                if p > 0.0 { -p * lp } else { 0.0 }
            })
            .sum()
    }

    /// The `n` most likely tokens after this stage, `(id, probability)`, most likely first
    /// (ties: lower id first).
    pub fn top(&self, n: usize) -> Vec<(u32, f64)> {
        let mut best: Vec<(u32, f32)> = self.cands.clone();
        let by = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if best.len() > n {
            best.select_nth_unstable_by(n, by);
            best.truncate(n);
        }
        best.sort_by(by);
        best.into_iter()
            .map(|(id, l)| (id, (l as f64 - self.log_norm).exp()))
            .collect()
    }
}

impl Trace {
    /// The first stage (`raw`).
    pub fn raw(&self) -> Option<&StageTrace> {
        self.stages.first()
    }

    /// The last stage: the distribution the selection drew from.
    pub fn last(&self) -> Option<&StageTrace> {
        self.stages.last()
    }

    /// What a person is shown about choosing `token`: each stage after `raw` (name, kept,
    /// changed, entropy) and the candidates (the `top` most likely raw, the `top` most likely
    /// after the chain, and `token`), most likely raw first, each with its probability after
    /// every stage. `None` for an empty trace. `kindle explain` and the server's
    /// `kindle_trace` both read this.
    pub fn summary(&self, token: u32, top: usize) -> Option<TraceSummary> {
        let (raw, last) = (self.raw()?, self.last()?);
        let mut ids: Vec<u32> = raw.top(top).into_iter().map(|c| c.0).collect();
        for (id, _) in last.top(top) {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        if !ids.contains(&token) {
            ids.push(token);
        }
        ids.sort_by(|a, b| {
            raw.probability(*b)
                .total_cmp(&raw.probability(*a))
                .then(a.cmp(b))
        });
        let later = &self.stages[1..];
        Some(TraceSummary {
            token,
            vocab: raw.kept,
            rank: raw.rank(token),
            probability: raw.probability(token),
            selected_probability: last.probability(token),
            entropy: raw.entropy(),
            stages: later
                .iter()
                .map(|s| StageSummary {
                    name: s.name,
                    kept: s.kept,
                    changed: s.changed,
                    entropy: s.entropy(),
                })
                .collect(),
            candidates: ids
                .into_iter()
                .map(|id| CandidateSummary {
                    id,
                    raw_probability: raw.probability(id),
                    after: later.iter().map(|s| s.probability(id)).collect(),
                })
                .collect(),
        })
    }

    pub(crate) fn record(&mut self, name: &'static str, cands: Vec<(u32, f32)>) {
        let stage = StageTrace::new(name, cands, self.stages.last());
        self.stages.push(stage);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_entropy_and_changes() {
        let mut trace = Trace::default();
        trace.record("raw", vec![(2, 0.0), (0, 0.0), (1, 0.0), (3, 0.0)]);
        trace.record("top_k", vec![(0, 0.0), (1, 0.0)]);
        trace.record("temperature", vec![(0, 1.0), (1, 0.0)]);
        let raw = &trace.stages[0];
        assert!((raw.probability(3) - 0.25).abs() < 1e-12);
        assert!((raw.entropy() - 4f64.ln()).abs() < 1e-12);
        assert_eq!(raw.changed, 0);
        let k = &trace.stages[1];
        assert_eq!((k.kept, k.changed), (2, 2));
        assert_eq!(k.probability(3), 0.0);
        let t = trace.last().unwrap();
        assert_eq!(t.changed, 1);
        let e = std::f64::consts::E;
        assert!((t.probability(0) - e / (e + 1.0)).abs() < 1e-12);
        assert_eq!(t.top(1)[0].0, 0);
        assert_eq!((t.rank(0), t.rank(1), t.rank(3)), (Some(1), Some(2), None));
        assert_eq!((raw.rank(0), raw.rank(3)), (Some(1), Some(4)));
        assert_eq!(t.logit(1), Some(0.0));
    }
}

/// One sampling decision in brief ([`Trace::summary`]): the chosen token, how sure the model
/// was, what each stage did, and the candidates through the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSummary {
    /// The chosen token.
    pub token: u32,
    /// Tokens in the raw distribution (the vocabulary).
    pub vocab: usize,
    /// The token's rank in the raw distribution (1: the most likely); `None` when it was not
    /// in it (a masked token imposed from outside).
    pub rank: Option<usize>,
    /// Its raw probability (softmax of the logits).
    pub probability: f64,
    /// Its probability after the whole chain (what the selection drew from).
    pub selected_probability: f64,
    /// Entropy of the raw distribution, in nats.
    pub entropy: f64,
    /// Every stage after `raw`, in the order they ran.
    pub stages: Vec<StageSummary>,
    /// The candidates, most likely raw first.
    pub candidates: Vec<CandidateSummary>,
}

/// What one stage did.
#[derive(Debug, Clone, PartialEq)]
pub struct StageSummary {
    /// The stage (`masks`, a chain stage, or `greedy`).
    pub name: &'static str,
    /// Tokens left in play after it.
    pub kept: usize,
    /// Tokens it changed or dropped.
    pub changed: usize,
    /// Entropy of the distribution after it, in nats.
    pub entropy: f64,
}

/// One candidate token through the chain.
#[derive(Debug, Clone, PartialEq)]
pub struct CandidateSummary {
    /// Token id.
    pub id: u32,
    /// Its raw probability.
    pub raw_probability: f64,
    /// Its probability after each stage, aligned with [`TraceSummary::stages`] (0 once a
    /// stage dropped it).
    pub after: Vec<f64>,
}
