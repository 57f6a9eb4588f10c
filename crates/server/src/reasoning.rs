//! A chat reply's reasoning split from its answer: the text between `<think>` and `</think>`
//! that opens a reply (DeepSeek-R1's and Qwen3's format) goes to the message's
//! `reasoning_content` (the field vLLM's reasoning parsers and llama-server's
//! `--reasoning-format deepseek` fill), the text after it to `content`. Streamed, the split is
//! made as the text comes: a tag split across tokens is held back until it is whole.
//!
//! ```
//! use kindle_server::reasoning::{Delta, ReasoningSplitter, split};
//! assert_eq!(
//!     split("<think>\nAdd them.\n</think>\n\n4", false),
//!     (Some("\nAdd them.\n".to_string()), "\n\n4".to_string())
//! );
//! assert_eq!(split("4", false), (None, "4".to_string()));
//! let mut s = ReasoningSplitter::new(false);
//! assert_eq!(s.push("<th"), Delta::default()); // might be the tag: held back
//! assert_eq!(s.push("ink>Hm</th").reasoning, "Hm");
//! assert_eq!(s.push("ink>Yes").content, "Yes");
//! ```

/// The tag that opens a reply's reasoning.
pub const OPEN: &str = "<think>";
/// The tag that closes it.
pub const CLOSE: &str = "</think>";

/// Whether chat replies have their reasoning split out (`--reasoning-format`, a request's
/// `reasoning_format`), with llama-server's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReasoningFormat {
    /// The reply as the model wrote it, tags and all, in `content`.
    None,
    /// Reasoning in `reasoning_content`, the answer in `content` (`auto` is this too).
    #[default]
    Deepseek,
}

impl ReasoningFormat {
    /// The format a name gives (`none`, `deepseek`, `auto`), if any.
    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Self::None),
            "deepseek" | "auto" => Some(Self::Deepseek),
            _ => None,
        }
    }
}

/// Text for each field of a message from one piece of a reply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// Reasoning text.
    pub reasoning: String,
    /// Answer text.
    pub content: String,
}

impl Delta {
    /// Whether it holds no text.
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Nothing but whitespace seen: the reply may open with the tag.
    Start,
    /// Inside the reasoning.
    Reasoning,
    /// After it, or a reply with none.
    Content,
}

/// Splits a reply's text as it streams (see the module docs).
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    state: State,
    /// Text held back: the start of a reply that may yet open with the tag, or the end of the
    /// reasoning that may be the start of the closing tag.
    pending: String,
    /// Whether any reasoning was seen (a reply that opened with the tag).
    reasoned: bool,
}

impl ReasoningSplitter {
    /// A splitter for a reply that starts inside its reasoning when `in_reasoning` (the
    /// prompt ended with the opening tag, as DeepSeek-R1's template ends it).
    pub fn new(in_reasoning: bool) -> Self {
        ReasoningSplitter {
            state: if in_reasoning {
                State::Reasoning
            } else {
                State::Start
            },
            pending: String::new(),
            reasoned: in_reasoning,
        }
    }

    /// Whether the reply had reasoning (so far).
    pub fn reasoned(&self) -> bool {
        self.reasoned
    }

    /// The next piece of the reply; returns what can be told of it now.
    pub fn push(&mut self, text: &str) -> Delta {
        self.pending.push_str(text);
        let mut out = Delta::default();
        loop {
            match self.state {
                State::Start => {
                    let trimmed = self.pending.trim_start();
                    if let Some(rest) = trimmed.strip_prefix(OPEN) {
                        self.pending = rest.to_string();
                        self.state = State::Reasoning;
                        self.reasoned = true;
                        continue;
                    }
                    if OPEN.starts_with(trimmed) {
                        // Whitespace, or a start of the tag: wait for more.
                        return out;
                    }
                    self.state = State::Content;
                }
                State::Reasoning => {
                    if let Some(at) = self.pending.find(CLOSE) {
                        out.reasoning.push_str(&self.pending[..at]);
                        self.pending = self.pending[at + CLOSE.len()..].to_string();
                        self.state = State::Content;
                        continue;
                    }
                    let keep = partial_tag(&self.pending, CLOSE);
                    let cut = self.pending.len() - keep;
                    out.reasoning.push_str(&self.pending[..cut]);
                    self.pending.drain(..cut);
                    return out;
                }
                State::Content => {
                    out.content.push_str(&self.pending);
                    self.pending.clear();
                    return out;
                }
            }
        }
    }

    /// The end of the reply: whatever was held back.
    pub fn finish(&mut self) -> Delta {
        let rest = std::mem::take(&mut self.pending);
        match self.state {
            State::Reasoning => Delta {
                reasoning: rest,
                content: String::new(),
            },
            State::Start | State::Content => Delta {
                reasoning: String::new(),
                content: rest,
            },
        }
    }
}

/// Bytes at the end of `text` that may begin `tag` (a streamed text holds them back until
/// the next piece shows whether the tag follows).
pub(crate) fn partial_tag(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| {
            text.len() >= n
                && text.is_char_boundary(text.len() - n)
                && tag.starts_with(&text[text.len() - n..])
        })
        .unwrap_or(0)
}

/// Whether `text` (a prefilled reply) ends inside a reasoning block: it opens one after the
/// last it closes.
pub fn ends_inside(text: &str) -> bool {
    text.rfind(OPEN) > text.rfind(CLOSE)
}

/// A whole reply split: its reasoning (`None` when it has none) and its answer. A reply cut
/// off inside its reasoning has all of it as reasoning and an empty answer.
pub fn split(text: &str, in_reasoning: bool) -> (Option<String>, String) {
    let mut splitter = ReasoningSplitter::new(in_reasoning);
    let mut all = splitter.push(text);
    let rest = splitter.finish();
    all.reasoning.push_str(&rest.reasoning);
    all.content.push_str(&rest.content);
    (splitter.reasoned().then_some(all.reasoning), all.content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn replies_with_and_without_reasoning() {
        for (prefill, inside) in [
            ("<think>\nhmm", true),
            ("<think>a</think> b", false),
            ("<think>a</think><think>", true),
            ("plain", false),
        ] {
            assert_eq!(ends_inside(prefill), inside, "{prefill}");
        }
        for (text, in_reasoning, want) in [
            ("<think>a</think>b", false, (Some("a"), "b")),
            ("  <think>a</think>", false, (Some("a"), "")),
            ("<think>cut off", false, (Some("cut off"), "")),
            (
                "plain <think>x</think>",
                false,
                (None, "plain <think>x</think>"),
            ),
            ("<thin", false, (None, "<thin")),
            ("   ", false, (None, "   ")),
            (
                "already thinking</think>done",
                true,
                (Some("already thinking"), "done"),
            ),
            ("a </thin b</think>c", false, (None, "a </thin b</think>c")),
            (
                "<think>a </thin b</think>c",
                false,
                (Some("a </thin b"), "c"),
            ),
        ] {
            let got = split(text, in_reasoning);
            assert_eq!(
                (got.0.as_deref(), got.1.as_str()),
                want,
                "{text:?} {in_reasoning}"
            );
        }
    }

    proptest! {
        /// However the reply is cut into pieces, the streamed deltas add up to the split of
        /// the whole.
        #[test]
        fn any_chunking_gives_the_whole_split(
            text in "( |<think>|</think>|<th|ink>|</|a|b\n|é){0,12}",
            cuts in proptest::collection::vec(0usize..40, 0..6),
            in_reasoning in any::<bool>(),
        ) {
            let mut at: Vec<usize> = cuts
                .into_iter()
                .map(|c| c.min(text.len()))
                .filter(|&c| text.is_char_boundary(c))
                .collect();
            at.sort_unstable();
            let mut splitter = ReasoningSplitter::new(in_reasoning);
            let (mut reasoning, mut content) = (String::new(), String::new());
            let mut from = 0;
            for to in at.into_iter().chain([text.len()]) {
                let d = splitter.push(&text[from..to.max(from)]);
                reasoning.push_str(&d.reasoning);
                content.push_str(&d.content);
                from = to.max(from);
            }
            let d = splitter.finish();
            reasoning.push_str(&d.reasoning);
            content.push_str(&d.content);
            let (want_reasoning, want_content) = split(&text, in_reasoning);
            prop_assert_eq!(reasoning, want_reasoning.unwrap_or_default());
            prop_assert_eq!(content, want_content);
        }
    }
}
