//! Tool calls streamed as OpenAI streams them: a call's first delta carries its `index`, `id`,
//! `type` and `function.name` as soon as the name is whole and its arguments have begun, and
//! each later token's share of the arguments follows as a `function.arguments` fragment, so
//! that the fragments joined are the call's arguments exactly as the model wrote them (the
//! same text a reply that is not streamed returns).
//!
//! The text of a call is read by a small scanner that knows where a (perhaps unfinished) JSON
//! object's `name` and arguments lie (`tools::scan`); nothing is sent for a call until it
//! can only be one.

use serde_json::{Value, json};

use crate::tools::scan::{CallScan, scan_call, skip_ws};
use crate::tools::{CLOSE, OPEN, ToolCall, ToolFormat, argument_keys, parse_calls_as};

/// One streamed piece of a call: its header the first time, then arguments text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDelta {
    /// Which call of the reply (0, 1, ...).
    pub index: usize,
    /// The call's id and function name, in its first delta only.
    pub header: Option<(String, String)>,
    /// The next piece of its arguments' text (may be empty in the first delta).
    pub arguments: String,
}

/// What a piece of a reply gives a stream: text to send and call deltas.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamOut {
    /// Text that streams as `content`.
    pub content: String,
    /// Call deltas, in order.
    pub calls: Vec<ToolDelta>,
}

/// Where a stream is in the reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Mode {
    /// Plain text (Hermes: outside any block; JSON formats: the reply has not begun).
    #[default]
    Text,
    /// Inside a `<tool_call>` block (Hermes) or a reply that opens with `{`.
    Call,
    /// A reply that opens with `[`: a list of calls, streamed one after another.
    List,
    /// A reply in a JSON format that is text.
    Prose,
}

/// The call being streamed: its index and how far into the body its arguments have gone out.
#[derive(Debug, Clone, Copy)]
struct Open {
    index: usize,
    sent: usize,
}

/// Splits a streamed reply into its text and its calls' deltas (see the module docs). Text
/// before the first call streams as it comes (a `<tool_call>` tag split across tokens held
/// until it is whole or not a tag); text after a call, and a block that is not a call as it
/// was written, go out at the end.
#[derive(Debug, Clone, Default)]
pub struct ToolStream {
    format: ToolFormat,
    mode: Mode,
    /// Text not yet placed.
    pending: String,
    /// The current call's text (a block's body, or a JSON format's whole reply).
    body: String,
    /// A list's current item: where it starts in `body`.
    item: usize,
    /// The call of `body` whose header has gone out.
    open: Option<Open>,
    /// Calls begun.
    calls: usize,
    /// Text from the first block on that is not part of a call.
    after: String,
    /// Whether any block has begun (then text is held for the end).
    begun: bool,
    /// Whether any text has streamed.
    spoke: bool,
}

impl ToolStream {
    /// A stream of a reply whose calls are in `format`.
    pub fn new(format: ToolFormat) -> Self {
        ToolStream {
            format,
            ..ToolStream::default()
        }
    }

    fn keys(&self) -> &'static [&'static str] {
        argument_keys(self.format)
    }

    /// The next piece of the reply's text.
    pub fn push(&mut self, text: &str) -> StreamOut {
        self.pending.push_str(text);
        let mut out = StreamOut::default();
        match self.format {
            ToolFormat::Hermes => self.hermes(&mut out),
            ToolFormat::Llama3 | ToolFormat::Mistral => self.json_reply(&mut out),
        }
        out
    }

    fn text(&mut self, text: &str, out: &mut StreamOut) {
        if self.begun {
            self.after.push_str(text);
        } else {
            self.spoke |= !text.is_empty();
            out.content.push_str(text);
        }
    }

    fn hermes(&mut self, out: &mut StreamOut) {
        loop {
            if self.mode == Mode::Call {
                self.body.push_str(&std::mem::take(&mut self.pending));
                let Some(end) = self.body.find(CLOSE) else {
                    self.progress(0, out);
                    return;
                };
                self.pending = self.body[end + CLOSE.len()..].to_string();
                self.body.truncate(end);
                self.close_call(out);
                self.mode = Mode::Text;
                continue;
            }
            if let Some(at) = self.pending.find(OPEN) {
                let before = self.pending[..at].to_string();
                self.text(&before, out);
                self.pending.drain(..at + OPEN.len());
                self.begun = true;
                self.mode = Mode::Call;
                continue;
            }
            let keep = crate::reasoning::partial_tag(&self.pending, OPEN);
            let cut = self.pending.len() - keep;
            let text = self.pending[..cut].to_string();
            self.pending.drain(..cut);
            self.text(&text, out);
            return;
        }
    }

    /// Llama 3 and Mistral: the whole reply is a call, a list of calls, or text.
    fn json_reply(&mut self, out: &mut StreamOut) {
        if self.mode == Mode::Text {
            match self.pending.trim_start().chars().next() {
                None => return,
                Some('{') => self.mode = Mode::Call,
                Some('[') => {
                    self.mode = Mode::List;
                    self.item = self.pending.find('[').map_or(0, |at| at + 1);
                }
                Some(_) => self.mode = Mode::Prose,
            }
            self.begun = self.mode != Mode::Prose;
        }
        let pending = std::mem::take(&mut self.pending);
        match self.mode {
            Mode::Call => {
                self.body.push_str(&pending);
                self.progress(0, out);
            }
            Mode::List => {
                self.body.push_str(&pending);
                self.list(out);
            }
            _ => self.text(&pending, out),
        }
    }

    /// A list's items as they come: each a call streamed as it is written.
    fn list(&mut self, out: &mut StreamOut) {
        loop {
            let b = self.body.as_bytes();
            let at = skip_ws(b, self.item);
            match b.get(at) {
                None | Some(b']') => return,
                Some(b',') => {
                    self.item = at + 1;
                    continue;
                }
                Some(_) => self.item = at,
            }
            let Some(scan) = self.progress(self.item, out) else {
                return;
            };
            let Some(end) = scan.end else {
                return;
            };
            let (start, end) = (self.item, self.item + end);
            self.close_item(start, end, out);
            self.item = end;
        }
    }

    /// The call starting at `base` in the body has grown: its header once the name is whole
    /// and the arguments (an object) have begun, then the arguments' new text. Returns what
    /// its text holds.
    fn progress(&mut self, base: usize, out: &mut StreamOut) -> Option<CallScan> {
        let scan = scan_call(&self.body[base..], self.keys())?;
        let (Some(name), Some((start, end))) = (scan.name.clone(), scan.arguments) else {
            return Some(scan);
        };
        if self.body.as_bytes()[base + start] != b'{' {
            return Some(scan); // arguments as JSON text in a string: sent whole at the end
        }
        let end = base + end.unwrap_or(self.body.len() - base);
        let header = match self.open {
            Some(_) => None,
            None => {
                let index = self.calls;
                self.calls += 1;
                self.open = Some(Open {
                    index,
                    sent: base + start,
                });
                Some((self.format.call_id(), name))
            }
        };
        let open = self.open.as_mut().expect("opened above");
        if header.is_some() || end > open.sent {
            out.calls.push(ToolDelta {
                index: open.index,
                header,
                arguments: self.body[open.sent..end].to_string(),
            });
            open.sent = end;
        }
        Some(scan)
    }

    /// The open call's arguments to their end (as far as `body[base..]` holds them).
    fn close_open(&mut self, base: usize, out: &mut StreamOut) -> bool {
        let Some(open) = self.open.take() else {
            return false;
        };
        let end = scan_call(&self.body[base..], self.keys())
            .and_then(|s| s.arguments)
            .and_then(|(_, end)| end)
            .map(|end| base + end);
        if let Some(end) = end.filter(|&end| end > open.sent) {
            out.calls.push(ToolDelta {
                index: open.index,
                header: None,
                arguments: self.body[open.sent..end].to_string(),
            });
        }
        true
    }

    /// Whole calls, not streamed before, as deltas.
    fn whole_calls(&mut self, calls: Vec<ToolCall>, out: &mut StreamOut) {
        for ToolCall {
            id,
            name,
            arguments,
        } in calls
        {
            out.calls.push(ToolDelta {
                index: self.calls,
                header: Some((id, name)),
                arguments,
            });
            self.calls += 1;
        }
    }

    /// A list's item `body[start..end]` is whole.
    fn close_item(&mut self, start: usize, end: usize, out: &mut StreamOut) {
        if self.close_open(start, out) {
            return;
        }
        // Not streamed (its arguments JSON text in a string): whole, if it is a call.
        let item = self.body[start..end].to_string();
        if let (_, calls) = parse_calls_as(self.format, &item)
            && !calls.is_empty()
        {
            self.whole_calls(calls, out);
        }
    }

    /// The current call's body is whole (its block closed, or the reply ended): the rest of
    /// a streamed call, a whole call not streamed yet, or, when it is not a call, its text.
    fn close_call(&mut self, out: &mut StreamOut) {
        if self.close_open(0, out) {
            self.body.clear();
            return;
        }
        let body = std::mem::take(&mut self.body);
        let whole = match self.format {
            ToolFormat::Hermes => format!("{OPEN}{body}{CLOSE}"),
            _ => body,
        };
        let (text, calls) = parse_calls_as(self.format, &whole);
        if calls.is_empty() {
            self.after.push_str(&whole);
            return;
        }
        self.after.push_str(&text);
        self.whole_calls(calls, out);
    }

    /// The end of the reply: what is still to send.
    pub fn finish(&mut self) -> StreamOut {
        let mut out = StreamOut::default();
        let rest = std::mem::take(&mut self.pending);
        match self.mode {
            Mode::Call => {
                self.body.push_str(&rest);
                if self.open.is_some() || self.format != ToolFormat::Hermes {
                    self.close_call(&mut out);
                } else if self.calls > 0 {
                    // A further call the token limit cut: dropped, as a reply not streamed
                    // drops it.
                    self.body.clear();
                } else {
                    // A block left open that never became a call: its text.
                    self.after.push_str(OPEN);
                    self.after.push_str(&std::mem::take(&mut self.body));
                }
            }
            Mode::List => {
                self.body.push_str(&rest);
                if self.calls == 0 {
                    // No item streamed: the whole reply, as a reply not streamed reads it.
                    self.close_call(&mut out);
                } else {
                    let item = self.item;
                    self.close_open(item, &mut out);
                }
            }
            _ => self.text(&rest, &mut out),
        }
        // Around calls, the text is trimmed as a reply that is not streamed is.
        let after = std::mem::take(&mut self.after);
        out.content.push_str(match (self.calls > 0, self.spoke) {
            (false, _) => &after,
            (true, false) => after.trim(),
            (true, true) => after.trim_end(),
        });
        out
    }

    /// Whether a call has begun.
    pub fn called(&self) -> bool {
        self.calls > 0
    }
}

/// The `tool_calls` of a streamed delta: a call's first piece with its `id`, `type` and
/// name, later pieces with `index` and arguments text only (OpenAI's shape).
pub fn deltas_json(deltas: &[ToolDelta]) -> Value {
    Value::Array(
        deltas
            .iter()
            .map(|d| match &d.header {
                Some((id, name)) => json!({
                    "index": d.index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": d.arguments},
                }),
                None => json!({"index": d.index, "function": {"arguments": d.arguments}}),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Replies of each format: text around calls, two calls, arguments as JSON text, a block
    /// that is not a call, a block left open, a Llama 3 list and prose.
    const REPLIES: [(ToolFormat, &str); 10] = [
        (
            ToolFormat::Hermes,
            "Sure. <tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\", \
             \"days\": [1, 2]}}\n</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": \
             \"{\\\"y\\\": 2}\"}</tool_call> done",
        ),
        (
            ToolFormat::Hermes,
            "<tool_call>{\"arguments\": {\"x\": \"</tool\"}, \"name\": \"late\"}</tool_call>",
        ),
        (
            ToolFormat::Hermes,
            "a <to y> b <tool_call>oops</tool_call> c",
        ),
        (
            ToolFormat::Hermes,
            "x <tool_call>{\"name\": \"a\", \"arguments\": {\"q\": 1",
        ),
        (ToolFormat::Hermes, "no calls at all"),
        (
            ToolFormat::Llama3,
            " {\"name\": \"w\", \"parameters\": {\"city\": \"Oslo\"}}",
        ),
        (
            ToolFormat::Llama3,
            "[{\"name\": \"a\", \"parameters\": {}}, {\"name\": \"b\", \"arguments\": {\"x\": 1}}]",
        ),
        (ToolFormat::Llama3, "It is {sunny}."),
        (
            ToolFormat::Mistral,
            " [{\"name\": \"a\", \"arguments\": {\"x\": [1, \"]\"]}}, {\"name\": \"b\", \
             \"arguments\": \"{}\"}, {\"arguments\": {\"z\": null}, \"name\": \"c\"}]",
        ),
        (ToolFormat::Mistral, "[1, 2]"),
    ];

    /// The reply streamed in `pieces`: its text, and each call's name and joined arguments.
    fn stream(format: ToolFormat, pieces: &[&str]) -> (String, Vec<(String, String)>) {
        let mut s = ToolStream::new(format);
        let mut outs: Vec<StreamOut> = pieces.iter().map(|p| s.push(p)).collect();
        outs.push(s.finish());
        let mut text = String::new();
        let mut calls: Vec<(String, String)> = Vec::new();
        for out in outs {
            text.push_str(&out.content);
            for d in out.calls {
                match d.header {
                    Some((id, name)) => {
                        assert_eq!(d.index, calls.len(), "calls open in order");
                        assert_eq!(id.len(), format.call_id().len(), "{id}");
                        calls.push((name, d.arguments));
                    }
                    None => calls[d.index].1.push_str(&d.arguments),
                }
            }
        }
        (text, calls)
    }

    /// A further call the token limit cut after a whole one is dropped, streamed or not (no
    /// `<tool_call>` markup in the content); alone, an unfinished block stays text.
    #[test]
    fn a_cut_second_call_is_dropped() {
        let reply = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>\n<tool_call>\n{\"";
        let (text, calls) = whole(ToolFormat::Hermes, reply);
        assert_eq!(text, "");
        assert_eq!(calls.len(), 1);
        for cut in [1, 7, 40, reply.len() - 2] {
            let (a, b) = reply.split_at(cut);
            assert_eq!(
                stream(ToolFormat::Hermes, &[a, b]),
                (text.clone(), calls.clone())
            );
        }
        let alone = "Let me look. <tool_call>\n{\"na";
        assert_eq!(
            whole(ToolFormat::Hermes, alone),
            (alone.to_string(), vec![])
        );
        assert_eq!(
            stream(ToolFormat::Hermes, &[alone]),
            (alone.to_string(), vec![])
        );
        // Cut inside its arguments: a call with the arguments written so far, streamed or not.
        let cut = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city";
        let (text, calls) = whole(ToolFormat::Hermes, cut);
        assert_eq!(text, "");
        assert_eq!(calls, [("get_weather".to_string(), "{\"city".to_string())]);
        for at in [5, 20, 40, cut.len() - 1] {
            let (a, b) = cut.split_at(at);
            let streamed = stream(ToolFormat::Hermes, &[a, b]);
            assert_eq!(streamed, (text.clone(), calls.clone()), "{at}");
        }
    }

    fn whole(format: ToolFormat, reply: &str) -> (String, Vec<(String, String)>) {
        let (text, calls) = parse_calls_as(format, reply);
        (
            text,
            calls.into_iter().map(|c| (c.name, c.arguments)).collect(),
        )
    }

    #[test]
    fn a_streamed_reply_gives_the_calls_of_the_whole_reply() {
        for (format, reply) in REPLIES {
            let (text, calls) = stream(format, &[reply]);
            let (want_text, want_calls) = whole(format, reply);
            if reply.ends_with("{\"q\": 1") {
                // A block left open: the call had begun, so it stands, cut where the reply ends.
                assert_eq!(calls, [("a".to_string(), "{\"q\": 1".to_string())]);
                assert_eq!(text.trim(), "x");
                continue;
            }
            assert_eq!(calls, want_calls, "{reply}");
            assert_eq!(text.trim(), want_text, "{reply}");
        }
        let (_, calls) = stream(ToolFormat::Hermes, &[REPLIES[0].1]);
        assert_eq!(calls[0].1, r#"{"city": "Oslo", "days": [1, 2]}"#);
        assert_eq!(calls[1].1, r#"{"y": 2}"#);
    }

    #[test]
    fn a_call_streams_its_name_first_then_its_arguments_piece_by_piece() {
        let reply = REPLIES[0].1;
        let mut s = ToolStream::new(ToolFormat::Hermes);
        let mut pieces = Vec::new();
        let mut text = String::new();
        for c in reply.chars() {
            let out = s.push(&c.to_string());
            text.push_str(&out.content);
            pieces.extend(out.calls);
        }
        // The text before the call streamed before its block closed; nothing of the tag.
        assert_eq!(text, "Sure. ");
        let first: Vec<&ToolDelta> = pieces.iter().filter(|d| d.index == 0).collect();
        assert_eq!(first[0].header.as_ref().unwrap().1, "weather");
        assert_eq!(first[0].arguments, "{");
        assert!(first.len() > 20, "{first:?}");
        // The second call's arguments are JSON text in a string: sent whole when it closes.
        let second: Vec<&ToolDelta> = pieces.iter().filter(|d| d.index == 1).collect();
        assert_eq!(second.len(), 1);
        assert_eq!(s.finish().content, "\n done"); // "Sure. \n done" in all, as not streamed
    }

    #[test]
    fn a_list_streams_each_call_before_the_next_begins() {
        let (format, reply) = REPLIES[8];
        let mut s = ToolStream::new(format);
        let mut seen = Vec::new();
        for (at, c) in reply.char_indices() {
            for d in s.push(&c.to_string()).calls {
                seen.push((at, d));
            }
        }
        let second = reply.find("\"b\"").unwrap();
        let first: Vec<usize> = seen
            .iter()
            .filter(|(_, d)| d.index == 0)
            .map(|(at, _)| *at)
            .collect();
        assert!(
            first.len() > 5 && first.iter().all(|&at| at < second),
            "{seen:?}"
        );
        assert!(s.finish().calls.is_empty());
    }

    proptest! {
        #[test]
        fn any_chunking_gives_the_same_calls_and_text(
            reply in 0..REPLIES.len(),
            cuts in proptest::collection::vec(0usize..200, 0..12),
        ) {
            let (format, reply) = REPLIES[reply];
            let mut cuts: Vec<usize> = cuts
                .into_iter()
                .map(|c| c % (reply.len() + 1))
                .filter(|&c| reply.is_char_boundary(c))
                .collect();
            cuts.extend([0, reply.len()]);
            cuts.sort_unstable();
            let pieces: Vec<&str> = cuts.windows(2).map(|w| &reply[w[0]..w[1]]).collect();
            prop_assert_eq!(stream(format, &pieces), stream(format, &[reply]));
        }
    }
}
