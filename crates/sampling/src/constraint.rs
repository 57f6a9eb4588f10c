//! [`LogitsConstraint`]: a grammar (or any rule) that says which tokens may come next, applied
//! to the logits row before the sampler and advanced with the chosen token.

use std::time::Duration;

/// What a constraint's methods fail with (kindle-constrain's typed errors, boxed so that the
/// sampling crate does not depend on the grammar engine).
pub type ConstraintError = Box<dyn std::error::Error + Send + Sync>;

/// A logits processor that restricts output to a language (JSON schema, regex, grammar), one
/// per sequence. The generation loop calls [`mask`](Self::mask) on the raw row before
/// sampling, appends the returned forced token without sampling when there is one, then calls
/// [`advance`](Self::advance) with the token it appended, and stops (finish reason `stop`)
/// once [`is_complete`](Self::is_complete).
pub trait LogitsConstraint: Send {
    /// Set to `-inf` the logit of every token that cannot continue a valid output. Returns
    /// `Some(token)` when exactly one token is allowed: the loop appends it without sampling.
    fn mask(&mut self, logits: &mut [f32]) -> Result<Option<u32>, ConstraintError>;

    /// The loop appended `token`.
    fn advance(&mut self, token: u32) -> Result<(), ConstraintError>;

    /// The output is complete: nothing more may follow.
    fn is_complete(&self) -> bool;

    /// Counts and mask timings so far.
    fn stats(&self) -> ConstraintStats;
}

/// What a [`LogitsConstraint`] cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ConstraintStats {
    /// Masks computed (one per generated token).
    pub masks: usize,
    /// Tokens appended without sampling (the mask allowed only them).
    pub forced: usize,
    /// Time spent computing masks, in total.
    pub mask_total: Duration,
    /// Median time of one mask.
    pub mask_p50: Duration,
    /// 99th percentile time of one mask.
    pub mask_p99: Duration,
}
