//! Tool calls streamed as OpenAI streams them: a call's first delta carries its `index`, `id`,
//! `type` and `function.name` as soon as the name is whole and its arguments have begun, and
//! each later token's share of the arguments follows as a `function.arguments` fragment, so
//! that the fragments joined are the call's arguments exactly as the model wrote them (the
//! same text a reply that is not streamed returns).
//!
//! The text of a call is read by a small scanner that knows where a (perhaps unfinished) JSON
//! object's `name` and arguments lie ([`scan_call`]); nothing is sent for a call until it
//! can only be one.

use super::{CLOSE, OPEN, ToolCall, ToolFormat, call_id, parse_calls_as};

/// What a (perhaps unfinished) call object's text holds so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CallScan {
    /// The function's name, once its string is whole.
    pub name: Option<String>,
    /// Where the arguments value starts (its first byte) and, once whole, ends.
    pub arguments: Option<(usize, Option<usize>)>,
    /// Where the object ends (past its closing brace), once whole.
    pub end: Option<usize>,
}

/// Where `text`'s call object (leading white space allowed) has its `name` string and the
/// value under one of `keys`: `None` when the text cannot be the start of a JSON object.
pub(crate) fn scan_call(text: &str, keys: &[&str]) -> Option<CallScan> {
    let b = text.as_bytes();
    let mut scan = CallScan::default();
    let mut at = skip_ws(b, 0);
    if at == b.len() {
        return Some(scan);
    }
    if b[at] != b'{' {
        return None;
    }
    at += 1;
    loop {
        at = skip_ws(b, at);
        match b.get(at) {
            None => return Some(scan),
            Some(b'}') => {
                scan.end = Some(at + 1);
                return Some(scan);
            }
            Some(b'"') => {}
            Some(_) => return None,
        }
        let Some(key_end) = skip_value(b, at)? else {
            return Some(scan);
        };
        let key: String = serde_json::from_str(&text[at..key_end]).ok()?;
        at = skip_ws(b, key_end);
        match b.get(at) {
            None => return Some(scan),
            Some(b':') => at = skip_ws(b, at + 1),
            Some(_) => return None,
        }
        if at == b.len() {
            return Some(scan);
        }
        let value_end = skip_value(b, at)?;
        if keys.contains(&key.as_str()) {
            scan.arguments = Some((at, value_end));
        } else if key == "name"
            && let Some(end) = value_end
            && b[at] == b'"'
        {
            scan.name = serde_json::from_str(&text[at..end]).ok();
        }
        let Some(end) = value_end else {
            return Some(scan);
        };
        at = skip_ws(b, end);
        match b.get(at) {
            None => return Some(scan),
            Some(b',') => at += 1,
            Some(b'}') => {
                scan.end = Some(at + 1);
                return Some(scan);
            }
            Some(_) => return None,
        }
    }
}

fn skip_ws(b: &[u8], mut at: usize) -> usize {
    while at < b.len() && b[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// The end of the JSON value starting at `at`: `Some(Some(end))` when whole, `Some(None)`
/// when the text stops inside it, `None` when it cannot be a value.
fn skip_value(b: &[u8], at: usize) -> Option<Option<usize>> {
    match b[at] {
        b'"' | b'{' | b'[' => {
            let mut depth = 0usize;
            let mut in_string = false;
            let mut i = at;
            while i < b.len() {
                let c = b[i];
                if in_string {
                    match c {
                        b'\\' => i += 1,
                        b'"' => {
                            in_string = false;
                            if depth == 0 {
                                return Some(Some(i + 1));
                            }
                        }
                        _ => {}
                    }
                } else {
                    match c {
                        b'"' => in_string = true,
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                return Some(Some(i + 1));
                            }
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            Some(None)
        }
        b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
            let end = (at..b.len())
                .find(|&i| matches!(b[i], b',' | b'}' | b']') || b[i].is_ascii_whitespace());
            Some(end)
        }
        _ => None,
    }
}

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
#[derive(Debug, Clone, Default)]
enum Mode {
    /// Plain text (Hermes: outside any block; Llama 3: the reply has not begun).
    #[default]
    Text,
    /// Inside a `<tool_call>` block (Hermes) or a reply that opens with `{` (Llama 3).
    Call,
    /// A Llama 3 reply that opens with `[`: held whole to the end.
    Held,
    /// A Llama 3 reply that is text.
    Prose,
}

/// The call being streamed: its index and how much of its arguments' text has gone out.
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
    /// The current call's text (a block's body, or a Llama 3 reply).
    body: String,
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
        super::argument_keys(self.format)
    }

    /// The next piece of the reply's text.
    pub fn push(&mut self, text: &str) -> StreamOut {
        self.pending.push_str(text);
        let mut out = StreamOut::default();
        match self.format {
            ToolFormat::Hermes => self.hermes(&mut out),
            ToolFormat::Llama3 => self.llama3(&mut out),
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
            match self.mode {
                Mode::Call => {
                    self.body.push_str(&std::mem::take(&mut self.pending));
                    let Some(end) = self.body.find(CLOSE) else {
                        self.progress(out);
                        return;
                    };
                    self.pending = self.body[end + CLOSE.len()..].to_string();
                    self.body.truncate(end);
                    self.close_call(out);
                    self.mode = Mode::Text;
                }
                _ => {
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
        }
    }

    fn llama3(&mut self, out: &mut StreamOut) {
        if let Mode::Text = self.mode {
            match self.pending.trim_start().chars().next() {
                None => return,
                Some('{') => {
                    self.begun = true;
                    self.mode = Mode::Call;
                }
                Some('[') => self.mode = Mode::Held,
                Some(_) => self.mode = Mode::Prose,
            }
        }
        match self.mode {
            Mode::Call => {
                self.body.push_str(&std::mem::take(&mut self.pending));
                self.progress(out);
            }
            Mode::Prose => {
                let text = std::mem::take(&mut self.pending);
                self.text(&text, out);
            }
            _ => {}
        }
    }

    /// The current call's body has grown: its header once the name is whole and the
    /// arguments (an object) have begun, then the arguments' new text.
    fn progress(&mut self, out: &mut StreamOut) {
        let Some(scan) = scan_call(&self.body, self.keys()) else {
            return;
        };
        let (Some(name), Some((start, end))) = (scan.name, scan.arguments) else {
            return;
        };
        if self.body.as_bytes()[start] != b'{' {
            return; // arguments as JSON text in a string: sent whole at the block's end
        }
        let end = end.unwrap_or(self.body.len());
        let header = match self.open {
            Some(_) => None,
            None => {
                let index = self.calls;
                self.calls += 1;
                self.open = Some(Open { index, sent: start });
                Some((call_id(), name))
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
    }

    /// The current call's body is whole (its block closed, or the reply ended): the rest of
    /// a streamed call, a whole call not streamed yet, or, when it is not a call, its text.
    fn close_call(&mut self, out: &mut StreamOut) {
        let body = std::mem::take(&mut self.body);
        if let Some(open) = self.open.take() {
            let end = scan_call(&body, self.keys())
                .and_then(|s| s.arguments)
                .and_then(|(_, end)| end);
            if let Some(end) = end.filter(|&end| end > open.sent) {
                out.calls.push(ToolDelta {
                    index: open.index,
                    header: None,
                    arguments: body[open.sent..end].to_string(),
                });
            }
            return;
        }
        let (text, calls) = match self.format {
            ToolFormat::Hermes => parse_calls_as(self.format, &format!("{OPEN}{body}{CLOSE}")),
            ToolFormat::Llama3 => parse_calls_as(self.format, &body),
        };
        if calls.is_empty() {
            match self.format {
                ToolFormat::Hermes => self.after.push_str(&format!("{OPEN}{body}{CLOSE}")),
                ToolFormat::Llama3 => self.after.push_str(&body),
            }
            return;
        }
        self.after.push_str(&text);
        for ToolCall { name, arguments } in calls {
            out.calls.push(ToolDelta {
                index: self.calls,
                header: Some((call_id(), name)),
                arguments,
            });
            self.calls += 1;
        }
    }

    /// The end of the reply: what is still to send.
    pub fn finish(&mut self) -> StreamOut {
        let mut out = StreamOut::default();
        let rest = std::mem::take(&mut self.pending);
        match self.mode {
            Mode::Call => {
                self.body.push_str(&rest);
                if self.open.is_some() || self.format == ToolFormat::Llama3 {
                    self.close_call(&mut out);
                } else {
                    // A block left open that never became a call: its text.
                    self.after.push_str(OPEN);
                    self.after.push_str(&std::mem::take(&mut self.body));
                }
            }
            Mode::Held => {
                self.body = rest;
                self.close_call(&mut out);
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_scanner_finds_the_name_and_the_arguments_of_unfinished_calls() {
        let keys = &["arguments"];
        let whole = r#" {"name": "w", "arguments": {"city": "Os}lo", "n": [1, {"k": 2}]}}"#;
        let scan = scan_call(whole, keys).unwrap();
        assert_eq!(scan.name.as_deref(), Some("w"));
        let (start, end) = scan.arguments.unwrap();
        assert_eq!(
            &whole[start..end.unwrap()],
            r#"{"city": "Os}lo", "n": [1, {"k": 2}]}"#
        );
        assert_eq!(scan.end, Some(whole.len()));
        // Every prefix: a name only once its string is whole, the arguments from their brace.
        for cut in 0..whole.len() {
            let scan = scan_call(&whole[..cut], keys).unwrap();
            assert_eq!(scan.name.is_some(), cut >= 13, "{cut}");
            assert_eq!(scan.arguments.is_some(), cut > 28, "{cut}");
            assert_eq!(scan.end, None);
            if let Some((start, None)) = scan.arguments {
                assert_eq!(start, 28);
            }
        }
        for not_a_call in [
            "x",
            "[1]",
            r#"{"name" 1}"#,
            r#"{"a": 1 2}"#,
            r#"{3: 1}"#,
            "{]",
        ] {
            assert_eq!(scan_call(not_a_call, keys), None, "{not_a_call}");
        }
        let escaped = r#"{"name": "a\"b", "arguments": {"q": "\"}"}}"#;
        let scan = scan_call(escaped, keys).unwrap();
        assert_eq!(scan.name.as_deref(), Some("a\"b"));
        assert_eq!(scan.end, Some(escaped.len()));
    }

    /// Replies of each format: text around calls, two calls, arguments as JSON text, a block
    /// that is not a call, a block left open, a Llama 3 list and prose.
    const REPLIES: [(ToolFormat, &str); 8] = [
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
                        assert!(id.starts_with("call_"));
                        calls.push((name, d.arguments));
                    }
                    None => calls[d.index].1.push_str(&d.arguments),
                }
            }
        }
        (text, calls)
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
