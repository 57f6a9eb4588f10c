//! Chat templates: turning a conversation into a prompt, with Hugging Face's Jinja semantics,
//! and into token ids without ever reading control tokens out of the messages.
//!
//! A model's template (GGUF `tokenizer.chat_template`) is rendered by [`minijinja`] with the
//! variables Hugging Face `transformers` passes: `messages` (a list of `{role, content}`),
//! `add_generation_prompt`, `bos_token`, `eos_token`, and the functions `raise_exception` and
//! `strftime_now`. Python string methods (`.strip()`, `.startswith()`, ...) work through
//! `minijinja-contrib`'s pycompat layer; blocks are trimmed as in `transformers`
//! (`trim_blocks`, `lstrip_blocks`).
//!
//! **Control tokens in messages.** A user typing `<|im_end|>` must not end their turn. So
//! [`ChatTemplate::render_parts`] splits the rendered prompt into the template's own text
//! ([`ChatPart::Template`], tokenized with special-token parsing on) and what came from the
//! messages ([`ChatPart::Content`], parsing off); [`encode_parts`] concatenates the ids. Given
//! the vocabulary's control-token texts
//! ([`with_protected_texts`](ChatTemplate::with_protected_texts), as `kindle` does), the
//! template renders the real contents with each control text in them swapped for a marker,
//! and only those texts become content parts: the template may transform contents (`trim`,
//! Qwen3's dropping of earlier thinking) and the rest of the prompt is one text, as
//! `transformers` renders and tokenizes it. Without them each whole content is rendered as a
//! placeholder and goes in untransformed.
//!
//! ```
//! use kindle_generate::chat::{ChatMessage, ChatPart, ChatTemplate};
//! let template = ChatTemplate::new(
//!     "{% for m in messages %}<|{{ m.role }}|>{{ m.content.strip() }}\n{% endfor %}\
//!      {% if add_generation_prompt %}<|assistant|>{% endif %}",
//! )?;
//! let messages = [ChatMessage::user(" Hi <|end|> ")];
//! assert_eq!(template.render(&messages, true)?, "<|user|>Hi <|end|>\n<|assistant|>");
//! let parts = template.render_parts(&messages, true)?;
//! assert_eq!(
//!     parts,
//!     [
//!         ChatPart::Template("<|user|>".into()),
//!         ChatPart::Content(" Hi <|end|> ".into()),
//!         ChatPart::Template("\n<|assistant|>".into()),
//!     ]
//! );
//! # Ok::<(), kindle_generate::chat::ChatError>(())
//! ```

use std::collections::BTreeMap;

use minijinja::syntax::SyntaxConfig;
use minijinja::{Environment, Error as JinjaError, Value};

mod functions;
mod markers;
mod tojson;

use markers::{CLOSE, OPEN};

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The template source does not parse.
    #[error("the chat template does not compile")]
    Compile(#[source] JinjaError),
    /// Rendering failed, or the template called `raise_exception`.
    #[error("rendering the chat template failed")]
    Render(#[source] JinjaError),
    /// Rendering ran more than [`TEMPLATE_FUEL`] template instructions: a loop that does not
    /// end soon (a template can come from any model file, and a server renders it per request).
    #[error(
        "the chat template ran more than {TEMPLATE_FUEL} instructions without finishing (a loop \
         too long for a prompt); is the template from a trusted model file?"
    )]
    OutOfFuel,
    /// Extra template variables that are not a JSON object of new names.
    #[error("chat template variables: {0}")]
    Variables(String),
    /// The protected texts could not be made into a matcher.
    #[error("the chat template's protected texts: {0}")]
    Protected(String),
    /// [`ChatEnding::Continue`] found no final message content to continue from.
    #[error("cannot continue the final message: {0}")]
    Continue(String),
}

/// The template instructions one render may run (minijinja's fuel). A long conversation with
/// tools renders in well under a million; a template that loops past this is stopped with
/// [`ChatError::OutOfFuel`] (after about a second at most) instead of hanging.
pub const TEMPLATE_FUEL: u64 = 20_000_000;

/// Variables every render sets itself; [`TemplateVars`] may not name them.
pub const BUILT_IN_VARIABLES: [&str; 4] = [
    "messages",
    "add_generation_prompt",
    "bos_token",
    "eos_token",
];

/// Extra variables a template sees beside the built-in ones: the keyword arguments of
/// Hugging Face's `apply_chat_template(..., **kwargs)`, vLLM's and llama.cpp's
/// `chat_template_kwargs` (`{"enable_thinking": false}` turns Qwen3's thinking off).
///
/// ```
/// use kindle_generate::chat::{ChatMessage, ChatTemplate, TemplateVars};
/// let template = ChatTemplate::new(
///     "{{ messages[0].content }}{% if enable_thinking is defined and not enable_thinking %} \
///      (no thinking){% endif %}",
/// )?;
/// let off = TemplateVars::from_json_text(r#"{"enable_thinking": false}"#)?;
/// let messages = [ChatMessage::user("Hi")];
/// assert_eq!(template.render(&messages, true)?, "Hi");
/// assert_eq!(template.render_with(&messages, true, &off)?, "Hi (no thinking)");
/// # Ok::<(), kindle_generate::chat::ChatError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TemplateVars(BTreeMap<String, serde_json::Value>);

impl TemplateVars {
    /// The entries of a JSON object (any JSON values: booleans, numbers, strings, lists,
    /// objects). Errors: a key of [`BUILT_IN_VARIABLES`].
    pub fn from_json(
        object: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<Self, ChatError> {
        let mut vars = BTreeMap::new();
        for (key, value) in object {
            if BUILT_IN_VARIABLES.contains(&key.as_str()) {
                return Err(ChatError::Variables(format!(
                    "'{key}' is set by kindle itself (the conversation and its options), not by \
                     extra variables"
                )));
            }
            vars.insert(key.clone(), value.clone());
        }
        Ok(TemplateVars(vars))
    }

    /// [`from_json`](Self::from_json) of the text of a JSON object.
    pub fn from_json_text(text: &str) -> Result<Self, ChatError> {
        match serde_json::from_str::<serde_json::Value>(text) {
            Ok(serde_json::Value::Object(object)) => Self::from_json(&object),
            Ok(other) => Err(ChatError::Variables(format!(
                "expected a JSON object such as {{\"enable_thinking\": false}}, got {other}"
            ))),
            Err(e) => Err(ChatError::Variables(format!("not JSON: {e}"))),
        }
    }

    /// These variables with `over`'s set on top (a request's over a server's defaults).
    pub fn overridden_by(&self, over: &TemplateVars) -> TemplateVars {
        let mut vars = self.0.clone();
        vars.extend(over.0.iter().map(|(k, v)| (k.clone(), v.clone())));
        TemplateVars(vars)
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `"system"`, `"user"`, `"assistant"` (or whatever the template knows).
    pub role: String,
    /// The text, never parsed for control tokens.
    pub content: String,
    /// Other fields the template sees on the message (an assistant turn's `tool_calls`, a
    /// tool result's `tool_call_id` and `name`), as JSON values. Protected texts in their
    /// strings stay text as in a content
    /// ([`with_protected_texts`](ChatTemplate::with_protected_texts)).
    pub fields: BTreeMap<String, serde_json::Value>,
}

impl ChatMessage {
    /// A message with any role.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: role.into(),
            content: content.into(),
            fields: BTreeMap::new(),
        }
    }

    /// The message with one more field for the template (`role` and `content` are its own).
    pub fn with_field(mut self, key: impl Into<String>, value: serde_json::Value) -> Self {
        let key = key.into();
        if key != "role" && key != "content" {
            self.fields.insert(key, value);
        }
        self
    }

    /// A `"system"` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A `"user"` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// An `"assistant"` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// Where a rendered conversation ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChatEnding {
    /// With the template's opening of an assistant turn (`add_generation_prompt`).
    #[default]
    Prompt,
    /// After the last message, as the template closes it.
    Closed,
    /// Right after the last message's content, its turn left open for the model to go on
    /// (`continue_final_message` in `transformers` and vLLM: a reply that is prefilled).
    Continue,
}

/// A piece of a rendered conversation: template text or a message's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatPart {
    /// Text written by the template: tokenize with special-token parsing on.
    Template(String),
    /// A message's content: tokenize as plain text.
    Content(String),
}

impl ChatPart {
    /// The text.
    pub fn text(&self) -> &str {
        match self {
            ChatPart::Template(s) | ChatPart::Content(s) => s,
        }
    }
}

const TEMPLATE_NAME: &str = "chat";

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// The template's text.
    source: String,
    bos_token: String,
    eos_token: String,
    /// Extra variables of every render ([`with_vars`](Self::with_vars)).
    vars: TemplateVars,
    /// Texts messages may not write into the template's text
    /// ([`with_protected_texts`](Self::with_protected_texts)).
    protected: Option<Protected>,
}

/// Texts kept out of the template's own text when a message holds them: each occurrence in a
/// content is rendered as a marker (`OPEN` index `CLOSE`) and comes back as a
/// [`ChatPart::Content`] of its own. The markers' own characters are among the texts, so
/// every marker in a rendered prompt is one of ours.
struct Protected {
    texts: Vec<String>,
    matcher: aho_corasick::AhoCorasick,
}

impl Protected {
    fn escape(&self, content: &str) -> String {
        let mut out = String::with_capacity(content.len());
        let mut at = 0;
        for m in self.matcher.find_iter(content) {
            out.push_str(&content[at..m.start()]);
            out.push(OPEN);
            out.push_str(&m.pattern().as_usize().to_string());
            out.push(CLOSE);
            at = m.end();
        }
        out.push_str(&content[at..]);
        out
    }

    /// `value` with [`escape`](Self::escape) applied to every string in it, keys included.
    fn escape_json(&self, value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value as J;
        match value {
            J::String(s) => J::String(self.escape(s)),
            J::Array(items) => J::Array(items.iter().map(|v| self.escape_json(v)).collect()),
            J::Object(map) => J::Object(
                map.iter()
                    .map(|(k, v)| (self.escape(k), self.escape_json(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

impl ChatTemplate {
    /// Compile `source` (empty `bos_token` and `eos_token`; see
    /// [`with_special_tokens`](Self::with_special_tokens)).
    pub fn new(source: impl Into<String>) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(ChatError::Compile)?;
        env.set_syntax(syntax);
        env.set_fuel(Some(TEMPLATE_FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", functions::raise_exception);
        env.add_function("strftime_now", functions::strftime_now);
        env.add_filter("tojson", tojson::tojson);
        let source = source.into();
        env.add_template_owned(TEMPLATE_NAME, functions::without_generation_tags(&source))
            .map_err(ChatError::Compile)?;
        Ok(ChatTemplate {
            env,
            source,
            bos_token: String::new(),
            eos_token: String::new(),
            vars: TemplateVars::default(),
            protected: None,
        })
    }

    /// Keep `texts` (a vocabulary's control-token texts: [`render_parts`](Self::render_parts)
    /// then never lets a message's copy of one reach the template's own text) while the
    /// template renders the real contents: templates that transform a content (Llama 3's
    /// `content | trim`, Qwen3 dropping the thinking of earlier replies) then render as
    /// `transformers` renders them, and the prompt is tokenized as one text as
    /// `transformers` and llama.cpp tokenize it. Without this, `render_parts` renders each
    /// content as an untouched placeholder.
    ///
    /// ```
    /// use kindle_generate::chat::{ChatMessage, ChatPart, ChatTemplate};
    /// let template = ChatTemplate::new(
    ///     "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}<|end|>{% endfor %}",
    /// )?
    /// .with_protected_texts(["<|end|>", "<|user|>"])?;
    /// let parts = template.render_parts(&[ChatMessage::user(" Hi <|end|> there ")], false)?;
    /// assert_eq!(
    ///     parts,
    ///     [
    ///         ChatPart::Template("<|user|>Hi ".into()),
    ///         ChatPart::Content("<|end|>".into()),
    ///         ChatPart::Template(" there<|end|>".into()),
    ///     ]
    /// );
    /// # Ok::<(), kindle_generate::chat::ChatError>(())
    /// ```
    pub fn with_protected_texts<S: Into<String>>(
        mut self,
        texts: impl IntoIterator<Item = S>,
    ) -> Result<Self, ChatError> {
        let mut texts: Vec<String> = texts
            .into_iter()
            .map(Into::into)
            .filter(|t| !t.is_empty())
            .collect();
        texts.extend([OPEN.to_string(), CLOSE.to_string()]);
        // An NFA: a vocabulary has thousands of control tokens (Gemma-3 6,249), for which a
        // DFA takes long to build, and prompts are short.
        let matcher = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .kind(Some(aho_corasick::AhoCorasickKind::ContiguousNFA))
            .build(&texts)
            .map_err(|e| ChatError::Protected(e.to_string()))?;
        self.protected = Some(Protected { texts, matcher });
        Ok(self)
    }

    /// The template's source text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template's source mentions `name` as a word (a variable it may read, such
    /// as `tools`).
    pub fn mentions(&self, name: &str) -> bool {
        let source = self.source();
        let word = |c: char| c.is_alphanumeric() || c == '_';
        source.match_indices(name).any(|(at, _)| {
            let before = source[..at].chars().next_back();
            let after = source[at + name.len()..].chars().next();
            !before.is_some_and(word) && !after.is_some_and(word)
        })
    }

    /// Give every render these extra variables (a render's own, from
    /// [`render_with`](Self::render_with) or [`render_parts_with`](Self::render_parts_with),
    /// override them): a program's defaults, such as `kindle serve --chat-template-kwargs`.
    pub fn with_vars(mut self, vars: TemplateVars) -> Self {
        self.vars = vars;
        self
    }

    /// Set the `bos_token` and `eos_token` variables (the pieces of the model's BOS and EOS).
    pub fn with_special_tokens(mut self, bos: impl Into<String>, eos: impl Into<String>) -> Self {
        self.bos_token = bos.into();
        self.eos_token = eos.into();
        self
    }

    /// Render `messages`; with `add_generation_prompt` the text ends with the opening of an
    /// assistant turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        self.render_with(messages, add_generation_prompt, &TemplateVars::default())
    }

    /// [`render`](Self::render) with extra variables (`vars`).
    pub fn render_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        vars: &TemplateVars,
    ) -> Result<String, ChatError> {
        let contents: Vec<&str> = messages.iter().map(|m| m.content.as_str()).collect();
        self.render_contents(messages, &contents, add_generation_prompt, vars)
    }

    /// Render `messages` split into template text and message contents (see the module docs).
    /// Concatenating the parts' texts gives [`render`](Self::render)'s output for templates
    /// that insert contents verbatim. Empty parts are left out.
    pub fn render_parts(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<Vec<ChatPart>, ChatError> {
        self.render_parts_with(messages, add_generation_prompt, &TemplateVars::default())
    }

    /// [`render_parts`](Self::render_parts) with extra variables (`vars`: a request's, so
    /// protected texts in their strings stay text as in a content; those of
    /// [`with_vars`](Self::with_vars) are the program's and go in as they are).
    pub fn render_parts_with(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        vars: &TemplateVars,
    ) -> Result<Vec<ChatPart>, ChatError> {
        let rendered = match &self.protected {
            Some(p) => {
                // Every string the conversation brings (contents, a call's arguments, a tool
                // result's name, the request's tools and variables) with its control texts
                // as markers.
                let escaped: Vec<ChatMessage> = messages
                    .iter()
                    .map(|m| ChatMessage {
                        role: m.role.clone(),
                        content: p.escape(&m.content),
                        fields: m
                            .fields
                            .iter()
                            .map(|(k, v)| (k.clone(), p.escape_json(v)))
                            .collect(),
                    })
                    .collect();
                let vars = TemplateVars(
                    vars.0
                        .iter()
                        .map(|(k, v)| (k.clone(), p.escape_json(v)))
                        .collect(),
                );
                let contents: Vec<&str> = escaped.iter().map(|m| m.content.as_str()).collect();
                self.render_contents(&escaped, &contents, add_generation_prompt, &vars)?
            }
            None => {
                let contents: Vec<String> = (0..messages.len())
                    .map(|i| format!("{OPEN}{i}{CLOSE}"))
                    .collect();
                let refs: Vec<&str> = contents.iter().map(String::as_str).collect();
                self.render_contents(messages, &refs, add_generation_prompt, vars)?
            }
        };
        let texts: Vec<&str> = match &self.protected {
            Some(p) => p.texts.iter().map(String::as_str).collect(),
            None => messages.iter().map(|m| m.content.as_str()).collect(),
        };
        let mut parts = Vec::new();
        let mut rest = rendered.as_str();
        while let Some(start) = rest.find(OPEN) {
            let after = &rest[start + OPEN.len_utf8()..];
            let index = after
                .find(CLOSE)
                .and_then(|end| after[..end].parse::<usize>().ok().map(|i| (i, end)));
            let Some((i, end)) = index.filter(|(i, _)| *i < texts.len()) else {
                // Not one of ours: keep the character as template text.
                push_part(
                    &mut parts,
                    ChatPart::Template(rest[..start + OPEN.len_utf8()].to_string()),
                );
                rest = after;
                continue;
            };
            push_part(&mut parts, ChatPart::Template(rest[..start].to_string()));
            push_part(&mut parts, ChatPart::Content(texts[i].to_string()));
            rest = &after[end + CLOSE.len_utf8()..];
        }
        push_part(&mut parts, ChatPart::Template(rest.to_string()));
        Ok(parts)
    }

    /// [`render_parts_with`](Self::render_parts_with) ending as `ending` says. To continue
    /// the final message the conversation is rendered closed and cut right after the last
    /// place its content appears (or, for templates that trim contents, its trimmed content),
    /// as `transformers`' `apply_chat_template(continue_final_message=True)` cuts it.
    ///
    /// ```
    /// use kindle_generate::chat::{ChatEnding, ChatMessage, ChatPart, ChatTemplate};
    /// let template = ChatTemplate::new(
    ///     "{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}<|end|>{% endfor %}",
    /// )?
    /// .with_protected_texts(["<|end|>"])?;
    /// let messages = [ChatMessage::user("Hi"), ChatMessage::assistant("Well, ")];
    /// let parts =
    ///     template.render_parts_ending(&messages, ChatEnding::Continue, &Default::default())?;
    /// assert_eq!(parts, [ChatPart::Template("<|user|>Hi<|end|><|assistant|>Well,".into())]);
    /// # Ok::<(), kindle_generate::chat::ChatError>(())
    /// ```
    ///
    /// Errors: for [`ChatEnding::Continue`], no messages, an empty final content, or one the
    /// rendered text does not hold ([`ChatError::Continue`]).
    pub fn render_parts_ending(
        &self,
        messages: &[ChatMessage],
        ending: ChatEnding,
        vars: &TemplateVars,
    ) -> Result<Vec<ChatPart>, ChatError> {
        let parts = self.render_parts_with(messages, ending == ChatEnding::Prompt, vars)?;
        if ending != ChatEnding::Continue {
            return Ok(parts);
        }
        let last = messages
            .last()
            .map(|m| m.content.as_str())
            .ok_or_else(|| ChatError::Continue("there are no messages".into()))?;
        if last.trim().is_empty() {
            return Err(ChatError::Continue(
                "the final message has no content to continue".into(),
            ));
        }
        let joined: String = parts.iter().map(ChatPart::text).collect();
        let cut = [last, last.trim()]
            .iter()
            .find_map(|text| joined.rfind(text).map(|at| at + text.len()))
            .ok_or_else(|| {
                ChatError::Continue(
                    "the chat template does not write the final message's content".into(),
                )
            })?;
        let mut kept = Vec::new();
        let mut at = 0;
        for part in parts {
            let len = part.text().len();
            if at + len <= cut {
                kept.push(part);
            } else {
                let head = part.text()[..cut - at].to_string();
                if !head.is_empty() {
                    kept.push(match part {
                        ChatPart::Template(_) => ChatPart::Template(head),
                        ChatPart::Content(_) => ChatPart::Content(head),
                    });
                }
                break;
            }
            at += len;
        }
        Ok(kept)
    }

    fn render_contents(
        &self,
        messages: &[ChatMessage],
        contents: &[&str],
        add_generation_prompt: bool,
        vars: &TemplateVars,
    ) -> Result<String, ChatError> {
        let messages: Vec<Value> = messages
            .iter()
            .zip(contents)
            .map(|(m, content)| {
                let mut map: BTreeMap<&str, Value> = m
                    .fields
                    .iter()
                    .map(|(k, v)| (k.as_str(), Value::from(minijinja::value::Serde(v))))
                    .collect();
                map.insert("role", Value::from(m.role.as_str()));
                map.insert("content", Value::from(*content));
                Value::from(map)
            })
            .collect();
        let vars = self.vars.overridden_by(vars);
        let mut ctx: BTreeMap<&str, Value> = vars
            .0
            .iter()
            .map(|(k, v)| (k.as_str(), Value::from(minijinja::value::Serde(v))))
            .collect();
        ctx.insert("messages", Value::from(messages));
        ctx.insert("add_generation_prompt", Value::from(add_generation_prompt));
        ctx.insert("bos_token", Value::from(self.bos_token.as_str()));
        ctx.insert("eos_token", Value::from(self.eos_token.as_str()));
        self.env
            .get_template(TEMPLATE_NAME)
            .and_then(|t| t.render(Value::from(ctx)))
            .map_err(|e| match e.kind() {
                minijinja::ErrorKind::OutOfFuel => ChatError::OutOfFuel,
                _ => ChatError::Render(e),
            })
    }
}

fn push_part(parts: &mut Vec<ChatPart>, part: ChatPart) {
    if part.text().is_empty() {
        return;
    }
    match (parts.last_mut(), &part) {
        (Some(ChatPart::Template(a)), ChatPart::Template(b)) => a.push_str(b),
        _ => parts.push(part),
    }
}

/// Tokenize rendered parts: template text with `encode(text, true)` (special tokens parsed),
/// contents with `encode(text, false)`, ids concatenated in order.
pub fn encode_parts<E>(
    parts: &[ChatPart],
    mut encode: impl FnMut(&str, bool) -> Result<Vec<u32>, E>,
) -> Result<Vec<u32>, E> {
    let mut ids = Vec::new();
    for part in parts {
        match part {
            ChatPart::Template(text) => ids.extend(encode(text, true)?),
            ChatPart::Content(text) => ids.extend(encode(text, false)?),
        }
    }
    Ok(ids)
}

#[cfg(test)]
mod tests;
