//! Why generation ended, and the text-level stop-string matcher.

use std::fmt;

/// Why generation ended. Its [`as_str`](Self::as_str) / `Display` form is the OpenAI-style
/// `finish_reason` string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// An end-of-generation token, a stop token or a stop string (see [`StopMatch`]): `"stop"`.
    Stop,
    /// `max_new_tokens` generated, or the context is full: `"length"`.
    Length,
    /// `max_time` elapsed: `"time"`.
    Time,
}

impl FinishReason {
    /// `"stop"`, `"length"` or `"time"`.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Time => "time",
        }
    }
}

impl fmt::Display for FinishReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which stop condition ended generation with [`FinishReason::Stop`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum StopMatch {
    /// An end-of-generation token of the model (its text is not part of the output).
    Eog(u32),
    /// One of the extra stop token ids (its text is not part of the output).
    Token(u32),
    /// A stop string, matched in the decoded text.
    String(String),
    /// The output constraint (grammar, schema) is complete: nothing more may follow.
    Constraint,
}

impl fmt::Display for StopMatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopMatch::Eog(id) => write!(f, "end-of-generation token {id}"),
            StopMatch::Token(id) => write!(f, "stop token {id}"),
            StopMatch::String(s) => write!(f, "stop string {s:?}"),
            StopMatch::Constraint => write!(f, "end of the output constraint"),
        }
    }
}

/// What [`StopStringMatcher::push`] lets through.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopScan {
    /// Text that is safe to emit now.
    pub text: String,
    /// The stop string that matched, if one did (then `text` ends just before it, or just after
    /// it when the stop string is included in the output).
    pub matched: Option<String>,
}

/// Finds stop strings in a stream of text deltas, across delta boundaries, and never lets any
/// part of a stop string through.
///
/// The pending text is emitted except for its longest suffix that is a prefix of some stop
/// string; that suffix is held back until later text shows it either completes a stop string
/// (it is dropped) or does not (it is emitted). When several stop strings occur, the one
/// completed first in the text wins (the longest if several end at the same place), so the
/// result does not depend on how the text was split into deltas.
///
/// ```
/// use kindle_generate::StopStringMatcher;
/// let mut m = StopStringMatcher::new(["STOP"], false);
/// assert_eq!(m.push("ab S").text, "ab ");
/// assert_eq!(m.push("T").text, "");
/// let end = m.push("OP and more");
/// assert_eq!((end.text.as_str(), end.matched.as_deref()), ("", Some("STOP")));
/// ```
#[derive(Debug, Clone)]
pub struct StopStringMatcher {
    stops: Vec<String>,
    include: bool,
    pending: String,
    matched: bool,
}

impl StopStringMatcher {
    /// A matcher for `stops` (empty strings are ignored). With `include_stop_str_in_output`
    /// the matched stop string is emitted as the end of the text.
    pub fn new<I, S>(stops: I, include_stop_str_in_output: bool) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        StopStringMatcher {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            include: include_stop_str_in_output,
            pending: String::new(),
            matched: false,
        }
    }

    /// Text held back: a prefix of some stop string.
    pub fn pending(&self) -> &str {
        &self.pending
    }

    /// Whether a stop string has matched (later pushes return nothing).
    pub fn is_matched(&self) -> bool {
        self.matched
    }

    /// Add `text`; return what is safe to emit and the stop string if one completed.
    pub fn push(&mut self, text: &str) -> StopScan {
        if self.matched {
            return StopScan::default();
        }
        self.pending.push_str(text);
        // The stop string completed first wins: earliest end, then earliest start (longest).
        // For one stop string the leftmost occurrence is also the one that ends first.
        let mut best: Option<(usize, usize, usize)> = None; // (end, start, stop index)
        for (k, stop) in self.stops.iter().enumerate() {
            if let Some(start) = self.pending.find(stop.as_str()) {
                let key = (start + stop.len(), start, k);
                if best.is_none_or(|b| (key.0, key.1) < (b.0, b.1)) {
                    best = Some(key);
                }
            }
        }
        if let Some((_, start, k)) = best {
            let stop = self.stops[k].clone();
            self.pending.truncate(start);
            let mut text = std::mem::take(&mut self.pending);
            if self.include {
                text.push_str(&stop);
            }
            self.matched = true;
            return StopScan {
                text,
                matched: Some(stop),
            };
        }
        let hold = self.hold_from();
        let rest = self.pending.split_off(hold);
        StopScan {
            text: std::mem::replace(&mut self.pending, rest),
            matched: None,
        }
    }

    /// End of the stream: release the held-back text (it can no longer become a stop string).
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Start of the longest suffix of the pending text that is a prefix of a stop string.
    fn hold_from(&self) -> usize {
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let earliest = self.pending.len().saturating_sub(longest.saturating_sub(1));
        self.pending
            .char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= earliest)
            .find(|&i| {
                let tail = &self.pending[i..];
                self.stops.iter().any(|s| s.starts_with(tail))
            })
            .unwrap_or(self.pending.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reason_strings() {
        assert_eq!(FinishReason::Stop.to_string(), "stop");
        assert_eq!(FinishReason::Length.as_str(), "length");
        assert_eq!(format!("{}", FinishReason::Time), "time");
        assert_eq!(
            StopMatch::String("\n\n".into()).to_string(),
            "stop string \"\\n\\n\""
        );
    }

    #[test]
    fn holds_only_stop_prefixes() {
        let mut m = StopStringMatcher::new(["abc", "xyz"], false);
        assert_eq!(m.push("hello a").text, "hello ");
        assert_eq!(m.pending(), "a");
        assert_eq!(m.push("b").text, "");
        assert_eq!(m.push("d").text, "abd");
        assert_eq!(m.push("xx").text, "x");
        assert_eq!(m.finish(), "x");
    }

    #[test]
    fn first_completed_then_longest_match_wins() {
        let mut m = StopStringMatcher::new(["abcd", "b"], true);
        let s = m.push("abcde");
        assert_eq!(s.text, "ab");
        assert_eq!(s.matched.as_deref(), Some("b"));
        assert!(m.is_matched());
        assert_eq!(m.push("more"), StopScan::default());

        let mut m = StopStringMatcher::new(["cd", "bcd"], true);
        let s = m.push("abcde");
        assert_eq!(s.text, "abcd");
        assert_eq!(s.matched.as_deref(), Some("bcd"));
    }

    #[test]
    fn overlapping_prefix_is_rechecked() {
        // "aab": after "aa" the held suffix must be "aa" (a prefix), and "aaab" still matches.
        let mut m = StopStringMatcher::new(["aab"], false);
        let mut out = String::new();
        for piece in ["a", "a", "a", "b"] {
            let s = m.push(piece);
            out.push_str(&s.text);
            if s.matched.is_some() {
                break;
            }
        }
        assert_eq!(out, "a");
    }

    #[test]
    fn multibyte_and_no_stops() {
        let mut m = StopStringMatcher::new(["é!"], false);
        assert_eq!(m.push("café").text, "caf");
        assert_eq!(m.push("?").text, "é?");
        let mut none = StopStringMatcher::new(Vec::<String>::new(), false);
        assert_eq!(none.push("anything").text, "anything");
        let mut empty_only = StopStringMatcher::new([""], false);
        assert_eq!(empty_only.push("x").text, "x");
    }
}
