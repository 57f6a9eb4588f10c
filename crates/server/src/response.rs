//! Response bodies and server-sent-event chunks in OpenAI's shapes, built from the engine's
//! [`Update`]s.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use kindle_sampling::TraceSummary;
use serde_json::{Map, Value, json};

use crate::codec::TextCodec;
use crate::engine::{PromptToken, Update};
use crate::reasoning::{Delta, ReasoningSplitter};
use crate::tool_stream::{ToolDelta, ToolStream, deltas_json};
use crate::tools::{ToolCall, ToolFormat, calls_json};

/// Seconds since the Unix epoch.
pub fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Which endpoint a response belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

/// The fields every body and chunk of one response repeats, and how it reports.
#[derive(Debug, Clone)]
pub struct ResponseMeta {
    /// `cmpl-...` or `chatcmpl-...`.
    pub id: String,
    /// Unix time of the request.
    pub created: u64,
    /// The served model's name.
    pub model: String,
    /// Which shapes to use.
    pub endpoint: Endpoint,
    /// Whether logprobs were asked for.
    pub logprobs: bool,
    /// Whether chunks carry `"usage": null` and a last usage chunk follows.
    pub include_usage: bool,
    /// `prompt_logprobs`: report every prompt token with this many alternatives (vLLM's
    /// shape: per choice for completions, once for chat).
    pub prompt_logprobs: Option<usize>,
}

impl ResponseMeta {
    /// A new response's fields, with a fresh id.
    pub fn new(endpoint: Endpoint, model: &str, logprobs: bool, include_usage: bool) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let created = now_seconds();
        let serial = NEXT.fetch_add(1, Ordering::Relaxed);
        let prefix = match endpoint {
            Endpoint::Completions => "cmpl",
            Endpoint::Chat => "chatcmpl",
        };
        ResponseMeta {
            id: format!("{prefix}-{created:x}{serial:08x}"),
            created,
            model: model.to_string(),
            endpoint,
            logprobs,
            include_usage,
            prompt_logprobs: None,
        }
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Completions, _) => "text_completion",
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
        }
    }

    fn envelope(&self, chunk: bool, choices: Vec<Value>) -> Map<String, Value> {
        let mut body = Map::new();
        body.insert("id".into(), json!(self.id));
        body.insert("object".into(), json!(self.object(chunk)));
        body.insert("created".into(), json!(self.created));
        body.insert("model".into(), json!(self.model));
        body.insert("system_fingerprint".into(), Value::Null);
        body.insert("choices".into(), Value::Array(choices));
        body
    }
}

/// One token as reported: generated, or of an echoed prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenReport {
    /// Its id.
    pub id: u32,
    /// Its log-probability; `None` for an echoed prompt's first token (reported as `null`,
    /// its alternatives too).
    pub logprob: Option<f32>,
    /// The alternatives.
    pub top: Vec<(u32, f32)>,
    /// What the sampler's chain did (`kindle_trace`).
    pub trace: Option<Box<TraceSummary>>,
}

/// A token's `kindle_trace`: its rank, raw and after-chain probability and the raw entropy;
/// each stage of the chain (`name`, `kept`, `changed`); the candidates (`token`, `id`, `raw`,
/// `after`: the probability after each stage, `final`: after the chain).
pub fn trace_json<C: TextCodec>(codec: &C, trace: &TraceSummary) -> Value {
    json!({
        "rank": trace.rank,
        "probability": trace.probability,
        "selected_probability": trace.selected_probability,
        "entropy": trace.entropy,
        "vocab": trace.vocab,
        "stages": trace.stages.iter().map(|s| json!({
            "name": s.name, "kept": s.kept, "changed": s.changed,
        })).collect::<Vec<_>>(),
        "candidates": trace.candidates.iter().map(|c| json!({
            "token": codec.token_text(c.id),
            "id": c.id,
            "raw": c.raw_probability,
            "after": c.after,
            "final": c.after.last().copied().unwrap_or(c.raw_probability),
        })).collect::<Vec<_>>(),
    })
}

/// How far token `id` moves a completion's `text_offset`: its text's length, or nothing for a
/// token the text leaves out (a control token, which decoding skips).
fn token_width<C: TextCodec + ?Sized>(codec: &C, id: u32) -> usize {
    if codec.decode(&[id]).is_ok_and(|t| !t.is_empty()) {
        // Its bytes: a piece of a character adds its own, not U+FFFD's three.
        codec.token_bytes(id).len()
    } else {
        0
    }
}

/// Drop the tokens of `choice` whose text begins past its text: a stop string cut them off
/// (llama-server reports no probabilities for a stop string's tokens, and their
/// `text_offset`s would point past the text).
pub fn trim_to_text<C: TextCodec + ?Sized>(codec: &C, choice: &mut Choice) {
    let mut at = 0;
    let keep = choice
        .tokens
        .iter()
        .take_while(|t| {
            let start = at;
            at += token_width(codec, t.id);
            start < choice.text.len()
        })
        .count();
    choice.tokens.truncate(keep);
}

/// A token as completions' `logprobs` name it: its text, or OpenAI's `bytes:\xf0\x9f` for a
/// token that is part of a multi-byte character.
fn completion_token<C: TextCodec + ?Sized>(codec: &C, id: u32) -> String {
    match String::from_utf8(codec.token_bytes(id)) {
        Ok(text) => text,
        Err(bytes) => {
            let hex: String = bytes
                .as_bytes()
                .iter()
                .map(|b| format!("\\x{b:02x}"))
                .collect();
            format!("bytes:{hex}")
        }
    }
}

/// Token logprobs in the endpoint's shape: completions' parallel arrays (`tokens`,
/// `token_logprobs`, `top_logprobs`, `text_offset`, offsets counted from `offset`) or chat's
/// `content` list.
pub fn logprobs_json<C: TextCodec>(
    codec: &C,
    endpoint: Endpoint,
    tokens: &[TokenReport],
    mut offset: usize,
) -> Value {
    match endpoint {
        Endpoint::Completions => {
            let mut texts = Vec::new();
            let mut logprobs = Vec::new();
            let mut tops = Vec::new();
            let mut offsets = Vec::new();
            for token in tokens {
                offsets.push(offset);
                offset += token_width(codec, token.id);
                let name = completion_token(codec, token.id);
                texts.push(name.clone());
                logprobs.push(json!(token.logprob));
                let Some(logprob) = token.logprob else {
                    tops.push(Value::Null);
                    continue;
                };
                let mut top: Map<String, Value> = token
                    .top
                    .iter()
                    .map(|&(id, lp)| (completion_token(codec, id), json!(lp)))
                    .collect();
                // OpenAI: "the API will always return the logprob of the sampled token, so
                // there may be up to logprobs+1 elements".
                top.entry(name).or_insert(json!(logprob));
                tops.push(Value::Object(top));
            }
            let mut value = json!({
                "tokens": texts,
                "token_logprobs": logprobs,
                "top_logprobs": tops,
                "text_offset": offsets,
            });
            if tokens.iter().any(|t| t.trace.is_some()) {
                value["kindle_trace"] = tokens
                    .iter()
                    .map(|t| {
                        t.trace
                            .as_ref()
                            .map_or(Value::Null, |x| trace_json(codec, x))
                    })
                    .collect();
            }
            value
        }
        Endpoint::Chat => {
            // Chat reports no prompt tokens: every logprob is a number.
            // `bytes`: the token's own bytes, which joined give the text where a character
            // spans tokens (each token's text alone has U+FFFD there).
            let entry = |id: u32, logprob: Option<f32>| {
                json!({
                    "token": codec.token_text(id),
                    "logprob": logprob,
                    "bytes": codec.token_bytes(id),
                })
            };
            let content: Vec<Value> = tokens
                .iter()
                .map(|token| {
                    let mut value = entry(token.id, token.logprob);
                    let top: Vec<Value> = token
                        .top
                        .iter()
                        .map(|&(id, lp)| entry(id, Some(lp)))
                        .collect();
                    value["top_logprobs"] = Value::Array(top);
                    if let Some(trace) = &token.trace {
                        value["kindle_trace"] = trace_json(codec, trace);
                    }
                    value
                })
                .collect();
            json!({"content": content, "refusal": null})
        }
    }
}

/// Token counts of a response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens (each prompt once, whatever `n`).
    pub prompt_tokens: usize,
    /// Generated tokens over all choices.
    pub completion_tokens: usize,
}

impl Usage {
    /// `{"prompt_tokens", "completion_tokens", "total_tokens"}`.
    pub fn json(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        })
    }
}

/// One choice collected to its end (non-streamed responses).
#[derive(Debug, Clone, Default)]
pub struct Choice {
    /// The text (after the echoed prompt, when `echo`).
    pub text: String,
    /// Its tokens, for logprobs (an echoed prompt's first).
    pub tokens: Vec<TokenReport>,
    /// `"stop"` or `"length"`, once done.
    pub finish_reason: Option<&'static str>,
    /// A chat reply's reasoning, split from `text` (see [`crate::reasoning`]).
    pub reasoning: Option<String>,
    /// A chat reply's tool calls, parsed out of `text` (see [`crate::tools`]).
    pub tool_calls: Vec<ToolCall>,
    /// Its prompt's tokens, scored (`echo` with `logprobs`, `prompt_logprobs`).
    pub prompt: Vec<PromptToken>,
    /// Its prompt's tokens.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
}

/// OpenAI's finish reasons: `stop` or `length` (a time limit counts as `length`).
pub fn finish_reason(reason: kindle_generate::FinishReason) -> &'static str {
    match reason {
        kindle_generate::FinishReason::Stop => "stop",
        _ => "length",
    }
}

/// The whole non-streamed body. `n` is the choices per prompt (usage counts each prompt once).
pub fn body<C: TextCodec>(codec: &C, meta: &ResponseMeta, choices: &[Choice], n: usize) -> Value {
    let mut usage = Usage::default();
    let values = choices
        .iter()
        .enumerate()
        .map(|(index, choice)| {
            if index % n.max(1) == 0 {
                usage.prompt_tokens += choice.prompt_tokens;
            }
            usage.completion_tokens += choice.completion_tokens;
            let logprobs = if meta.logprobs {
                logprobs_json(codec, meta.endpoint, &choice.tokens, 0)
            } else {
                Value::Null
            };
            match meta.endpoint {
                Endpoint::Completions => {
                    let mut value = json!({
                        "index": index,
                        "text": choice.text,
                        "logprobs": logprobs,
                        "finish_reason": choice.finish_reason,
                    });
                    if let Some(top) = meta.prompt_logprobs {
                        value["prompt_logprobs"] = prompt_logprobs_json(codec, &choice.prompt, top);
                    }
                    value
                }
                Endpoint::Chat => {
                    let mut message =
                        json!({"role": "assistant", "content": choice.text, "refusal": null});
                    if let Some(reasoning) = &choice.reasoning {
                        // As vLLM: the answer is null when the reply is all reasoning.
                        if choice.text.is_empty() {
                            message["content"] = Value::Null;
                        }
                        message["reasoning_content"] = json!(reasoning);
                    }
                    let mut finish = json!(choice.finish_reason);
                    if !choice.tool_calls.is_empty() {
                        if choice.text.is_empty() {
                            message["content"] = Value::Null;
                        }
                        message["tool_calls"] = calls_json(&choice.tool_calls);
                        // A reply the token limit cut says so (OpenAI's "length").
                        if finish != json!("length") {
                            finish = json!("tool_calls");
                        }
                    }
                    json!({
                        "index": index,
                        "message": message,
                        "logprobs": logprobs,
                        "finish_reason": finish,
                    })
                }
            }
        })
        .collect();
    let mut body = meta.envelope(false, values);
    if meta.endpoint == Endpoint::Chat
        && let (Some(top), Some(first)) = (meta.prompt_logprobs, choices.first())
    {
        // One prompt a chat request: vLLM reports it once, beside the choices.
        body.insert(
            "prompt_logprobs".into(),
            prompt_logprobs_json(codec, &first.prompt, top),
        );
    }
    body.insert("usage".into(), usage.json());
    Value::Object(body)
}

/// vLLM's `prompt_logprobs`: for each prompt token, `null` for the first, else a map from
/// token id to `{logprob, rank, decoded_token}` holding the prompt's token and the `top` most
/// likely ones.
pub fn prompt_logprobs_json<C: TextCodec>(codec: &C, prompt: &[PromptToken], top: usize) -> Value {
    let entry = |logprob: f32, rank: Option<u32>, id: u32| json!({"logprob": logprob, "rank": rank, "decoded_token": codec.token_text(id)});
    Value::Array(
        prompt
            .iter()
            .map(|t| {
                let Some(logprob) = t.logprob else {
                    return Value::Null;
                };
                let mut map = Map::new();
                map.insert(t.id.to_string(), entry(logprob, t.rank, t.id));
                for (i, &(id, lp)) in t.top_logprobs.iter().take(top).enumerate() {
                    map.entry(id.to_string())
                        .or_insert_with(|| entry(lp, Some(i as u32 + 1), id));
                }
                Value::Object(map)
            })
            .collect(),
    )
}

/// `data: {json}\n\n`.
pub fn sse(value: &Value) -> String {
    format!("data: {value}\n\n")
}

/// The stream's end.
pub const SSE_DONE: &str = "data: [DONE]\n\n";

/// Turns the engine's updates into SSE chunks for one streamed response.
pub struct ChunkWriter<C: TextCodec> {
    codec: Arc<C>,
    meta: ResponseMeta,
    /// Text offset of each choice so far (completions logprobs).
    offsets: Vec<usize>,
    n: usize,
    usage: Usage,
    /// Each prompt's text, repeated before its choices' completions (`echo`); empty without.
    echo: Vec<String>,
    /// Whether each choice's echoed prompt has been sent.
    echoed: Vec<bool>,
    /// Each chat choice's reasoning splitter, when replies are split.
    reasoning: Vec<ReasoningSplitter>,
    /// Each chat choice's tool-call holder, when replies are parsed for calls.
    tools: Vec<ToolStream>,
    /// Whether each choice made a call (its finish reason is then `tool_calls`).
    called: Vec<bool>,
}

impl<C: TextCodec> ChunkWriter<C> {
    /// A writer for `choices` choices, `n` per prompt.
    pub fn new(codec: Arc<C>, meta: ResponseMeta, choices: usize, n: usize) -> Self {
        ChunkWriter {
            codec,
            meta,
            offsets: vec![0; choices],
            n: n.max(1),
            usage: Usage::default(),
            echo: Vec::new(),
            echoed: vec![false; choices],
            reasoning: Vec::new(),
            tools: Vec::new(),
            called: vec![false; choices],
        }
    }

    /// Parse each chat choice's reply for tool calls written in `format` (see
    /// [`crate::tools`]): the text before the first call streams, each call as `tool_calls`
    /// deltas as it is written (its name, then its arguments piece by piece).
    pub fn with_tools(mut self, format: ToolFormat) -> Self {
        self.tools = vec![ToolStream::new(format); self.offsets.len()];
        self
    }

    /// A reply's piece of text split into reasoning and answer, and the answer into text and
    /// tool-call deltas, when the writer splits; `None` when it does not.
    fn split(&mut self, index: usize, text: &str) -> Option<(Delta, Vec<ToolDelta>)> {
        if self.reasoning.is_empty() && self.tools.is_empty() {
            return None;
        }
        let mut delta = match self.reasoning.get_mut(index) {
            Some(splitter) => splitter.push(text),
            None => Delta {
                reasoning: String::new(),
                content: text.to_string(),
            },
        };
        let mut calls = Vec::new();
        if let Some(tools) = self.tools.get_mut(index) {
            let out = tools.push(&delta.content);
            delta.content = out.content;
            calls = out.calls;
            self.called[index] |= tools.called();
        }
        Some((delta, calls))
    }

    /// Split each chat choice's reasoning into `reasoning_content` deltas (`in_reasoning`:
    /// the replies start inside it; see [`crate::reasoning`]).
    pub fn with_reasoning(mut self, in_reasoning: bool) -> Self {
        self.reasoning = vec![ReasoningSplitter::new(in_reasoning); self.offsets.len()];
        self
    }

    /// A chunk of one choice (`"usage": null` beside it when usage is asked for).
    fn choice_chunk(&self, choice: Value) -> String {
        let mut body = self.meta.envelope(true, vec![choice]);
        if self.meta.include_usage {
            body.insert("usage".into(), Value::Null);
        }
        sse(&Value::Object(body))
    }

    /// A chat chunk with `delta`, not the last of its choice.
    fn delta_chunk(&self, index: usize, delta: Value, logprobs: Value) -> String {
        self.choice_chunk(json!({
            "index": index,
            "delta": delta,
            "logprobs": logprobs,
            "finish_reason": null,
        }))
    }

    /// A chat chunk whose delta carries pieces of a reply's tool calls.
    fn calls_chunk(&self, index: usize, calls: &[ToolDelta], logprobs: Value) -> String {
        let delta = json!({"tool_calls": deltas_json(calls)});
        self.delta_chunk(index, delta, logprobs)
    }

    /// A chat chunk whose delta carries `delta`'s reasoning and answer text.
    fn reasoning_chunk(&self, index: usize, delta: &Delta, logprobs: Value) -> String {
        let mut fields = Map::new();
        if !delta.reasoning.is_empty() {
            fields.insert("reasoning_content".into(), json!(delta.reasoning));
        }
        if !delta.content.is_empty() || delta.reasoning.is_empty() {
            fields.insert("content".into(), json!(delta.content));
        }
        self.delta_chunk(index, Value::Object(fields), logprobs)
    }

    /// Repeat each prompt's text (`prompts[p]` for choices `p n .. (p + 1) n`) before its
    /// choices' completions (`echo`): in the first chunk of each choice, with the prompt's
    /// scored tokens when logprobs are asked for.
    pub fn with_echo(mut self, prompts: Vec<String>) -> Self {
        self.echo = prompts;
        self
    }

    /// The echoed prompt's text for choice `index` if it is still to be sent (then marked
    /// sent), else empty.
    fn take_echo(&mut self, index: usize) -> String {
        match self.echo.get(index / self.n) {
            Some(text) if !self.echoed[index] => {
                self.echoed[index] = true;
                text.clone()
            }
            _ => String::new(),
        }
    }

    /// Logprobs of `tokens` of choice `index`, its text offset moved past them.
    fn logprobs(&mut self, index: usize, tokens: &[TokenReport]) -> Value {
        let value = logprobs_json(
            self.codec.as_ref(),
            self.meta.endpoint,
            tokens,
            self.offsets[index],
        );
        for token in tokens {
            self.offsets[index] += token_width(self.codec.as_ref(), token.id);
        }
        value
    }

    fn chunk(&self, index: usize, text: &str, logprobs: Value, finish: Option<&str>) -> String {
        let choice = match self.meta.endpoint {
            Endpoint::Completions => json!({
                "index": index,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish,
            }),
            Endpoint::Chat => {
                let delta = if finish.is_some() && text.is_empty() {
                    json!({})
                } else {
                    json!({"content": text})
                };
                json!({
                    "index": index,
                    "delta": delta,
                    "logprobs": logprobs,
                    "finish_reason": finish,
                })
            }
        };
        self.choice_chunk(choice)
    }

    /// The chunks that open the stream: for chat, each choice's `{"role": "assistant"}`.
    pub fn opening(&self) -> Vec<String> {
        if self.meta.endpoint != Endpoint::Chat {
            return Vec::new();
        }
        (0..self.offsets.len())
            .map(|index| {
                let delta = json!({"role": "assistant", "content": ""});
                self.delta_chunk(index, delta, Value::Null)
            })
            .collect()
    }

    /// The chunks of one update: none if it has nothing to say (a token whose text is held
    /// back, with no logprobs asked for), and the echoed prompt first where it is still due.
    pub fn update(&mut self, update: Update) -> Vec<String> {
        let index = match &update {
            Update::Prompt { index, .. }
            | Update::Token { index, .. }
            | Update::Done { index, .. }
            | Update::Error { index, .. } => *index,
        };
        if index >= self.offsets.len() && !matches!(update, Update::Error { .. }) {
            return Vec::new();
        }
        let mut out = Vec::new();
        if !matches!(update, Update::Prompt { .. } | Update::Error { .. }) {
            // Echo without logprobs: the prompt's text opens the choice.
            let echo = self.take_echo(index);
            if !echo.is_empty() {
                out.push(self.chunk(index, &echo, Value::Null, None));
            }
        }
        if matches!(update, Update::Done { .. }) {
            // What the splitters held back (a reply ending in a partial tag, the calls)
            // before the end.
            let mut rest = match self.reasoning.get_mut(index) {
                Some(splitter) => splitter.finish(),
                None => Delta::default(),
            };
            let mut calls = Vec::new();
            if let Some(tools) = self.tools.get_mut(index) {
                let mut held = tools.push(&rest.content);
                let last = tools.finish();
                held.content.push_str(&last.content);
                held.calls.extend(last.calls);
                rest.content = held.content;
                calls = held.calls;
                self.called[index] |= tools.called();
            }
            if !rest.is_empty() {
                out.push(self.reasoning_chunk(index, &rest, Value::Null));
            }
            if !calls.is_empty() {
                out.push(self.calls_chunk(index, &calls, Value::Null));
            }
        }
        out.extend(self.update_chunks(update));
        out
    }

    fn update_chunks(&mut self, update: Update) -> Vec<String> {
        match update {
            Update::Prompt { index, tokens } => {
                let text = self.take_echo(index);
                let logprobs = if self.meta.logprobs {
                    let reports: Vec<TokenReport> = tokens
                        .into_iter()
                        .map(|t| TokenReport {
                            id: t.id,
                            logprob: t.logprob,
                            top: t.top_logprobs,
                            trace: None,
                        })
                        .collect();
                    self.logprobs(index, &reports)
                } else {
                    Value::Null
                };
                vec![self.chunk(index, &text, logprobs, None)]
            }
            Update::Token {
                index,
                id,
                text,
                logprob,
                top_logprobs,
                trace,
            } => {
                let split = self.split(index, &text);
                let nothing = match &split {
                    Some((delta, calls)) => delta.is_empty() && calls.is_empty(),
                    None => text.is_empty(),
                };
                if nothing && !self.meta.logprobs {
                    return Vec::new();
                }
                let logprobs = if self.meta.logprobs {
                    let token = TokenReport {
                        id,
                        logprob: Some(logprob),
                        top: top_logprobs,
                        trace,
                    };
                    self.logprobs(index, &[token])
                } else {
                    Value::Null
                };
                match split {
                    // Calls alone: the token's logprobs go with them.
                    Some((delta, calls)) if delta.is_empty() && !calls.is_empty() => {
                        vec![self.calls_chunk(index, &calls, logprobs)]
                    }
                    Some((delta, calls)) => {
                        let mut out = vec![self.reasoning_chunk(index, &delta, logprobs)];
                        if !calls.is_empty() {
                            out.push(self.calls_chunk(index, &calls, Value::Null));
                        }
                        out
                    }
                    None => vec![self.chunk(index, &text, logprobs, None)],
                }
            }
            Update::Done {
                index,
                finish_reason: reason,
                prompt_tokens,
                completion_tokens,
            } => {
                if index % self.n == 0 {
                    self.usage.prompt_tokens += prompt_tokens;
                }
                self.usage.completion_tokens += completion_tokens;
                let reason = match finish_reason(reason) {
                    "length" => "length",
                    _ if self.called[index] => "tool_calls",
                    other => other,
                };
                vec![self.chunk(index, "", Value::Null, Some(reason))]
            }
            Update::Error {
                message, request, ..
            } => {
                let kind = if request {
                    "invalid_request_error"
                } else {
                    "server_error"
                };
                vec![sse(&json!({
                    "error": {"message": message, "type": kind, "param": null, "code": null}
                }))]
            }
        }
    }

    /// The last chunks: the usage chunk (when asked for) and `[DONE]`.
    pub fn closing(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.meta.include_usage {
            let mut body = self.meta.envelope(true, Vec::new());
            body.insert("usage".into(), self.usage.json());
            out.push(sse(&Value::Object(body)));
        }
        out.push(SSE_DONE.to_string());
        out
    }
}
