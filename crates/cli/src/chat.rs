//! Chat prompts: the model's template rendered with Hugging Face's semantics and tokenized so
//! that text inside a message is never parsed as control tokens.

use std::path::PathBuf;

use anyhow::{Context, Result, anyhow};
use kindle_generate::chat::{ChatEnding, ChatMessage, ChatPart, ChatTemplate, TemplateVars};
use kindle_tokenizer::Tokenizer;

/// The chat template a run uses: the model's, or a file's (`--chat-template-file`), with
/// extra variables (`--chat-template-kwargs`, a JSON object such as
/// `{"enable_thinking": false}`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateSettings {
    /// A Jinja template file used instead of the model's.
    pub file: Option<PathBuf>,
    /// The extra variables: the text of a JSON object (checked by [`parse_template_kwargs`]).
    pub kwargs: Option<String>,
}

/// `--chat-template-kwargs`' value checked: a JSON object whose keys are not the variables
/// every render sets.
pub fn parse_template_kwargs(text: &str) -> Result<TemplateVars> {
    TemplateVars::from_json_text(text).map_err(|e| anyhow!("{e}"))
}

/// The template used when the model has none (ChatML, as llama.cpp falls back to).
pub const CHATML: &str = "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// Gemma's turn format, for Gemma models whose file has no template (llama.cpp's built-in
/// `gemma` template: "assistant" is "model", system text opens the first user turn; contents
/// are inserted as they are).
pub const GEMMA: &str = "{%- set ns = namespace(system='') -%}{%- for message in messages -%}{%- if message['role'] == 'system' -%}{%- set ns.system = ns.system + message['content'] -%}{%- else -%}{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}{{- '<start_of_turn>' + role + '\n' -}}{%- if ns.system and role != 'model' -%}{{- ns.system + '\n\n' -}}{%- set ns.system = '' -%}{%- endif -%}{{- message['content'] + '<end_of_turn>\n' -}}{%- endif -%}{%- endfor -%}{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}";

/// The template used when the model has none: Gemma's turn format when the vocabulary has
/// Gemma's `<start_of_turn>` and `<end_of_turn>` tokens (Gemma-3 files such as
/// gemma-3-270m-q4_k_m.gguf carry no template), ChatML otherwise.
pub fn default_template(tokenizer: &Tokenizer) -> &'static str {
    let has = |piece| tokenizer.piece_to_id(piece).is_some();
    if has("<start_of_turn>") && has("<end_of_turn>") {
        GEMMA
    } else {
        CHATML
    }
}

/// The model's chat template ([`default_template`] when it has none), or the file
/// `settings` names, with its BOS and EOS pieces and `settings`' extra variables.
pub fn chat_template(tokenizer: &Tokenizer, settings: &TemplateSettings) -> Result<ChatTemplate> {
    let from_file = match &settings.file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the chat template file {}", path.display()))?,
        ),
        None => None,
    };
    let source = from_file
        .as_deref()
        .or_else(|| tokenizer.chat_template())
        .unwrap_or_else(|| default_template(tokenizer));
    let vars = match &settings.kwargs {
        Some(text) => parse_template_kwargs(text).context("--chat-template-kwargs")?,
        None => TemplateVars::default(),
    };
    let piece = |id: Option<u32>| {
        id.and_then(|id| tokenizer.id_to_piece(id))
            .unwrap_or_default()
            .to_string()
    };
    let what = match &settings.file {
        Some(path) => format!("compiling the chat template of {}", path.display()),
        None => "compiling the model's chat template".to_string(),
    };
    ChatTemplate::new(source)
        .context(what)?
        .with_special_tokens(piece(tokenizer.bos_id()), piece(tokenizer.eos_id()))
        .with_vars(vars)
        // Control-token texts in a message stay text; the template sees the real contents.
        .with_protected_texts(tokenizer.special_pieces())
        .context("preparing the chat template")
}

/// Render `messages` and tokenize them: template text with special tokens parsed, message
/// contents as plain text ([`Tokenizer::encode_segments`]: a SentencePiece vocabulary
/// tokenizes them as one text, as llama.cpp tokenizes the rendered prompt). BOS is added once
/// at the start when the vocabulary asks for it and the template did not write it.
pub fn encode_chat(
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Result<Vec<u32>> {
    encode_chat_with(
        tokenizer,
        template,
        messages,
        add_generation_prompt,
        &TemplateVars::default(),
    )
}

/// [`encode_chat`] with extra template variables (`vars`, over the template's own: a server
/// request's `chat_template_kwargs`).
pub fn encode_chat_with(
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    vars: &TemplateVars,
) -> Result<Vec<u32>> {
    let ending = if add_generation_prompt {
        ChatEnding::Prompt
    } else {
        ChatEnding::Closed
    };
    encode_chat_ending(tokenizer, template, messages, ending, vars)
}

/// [`encode_chat_with`] ending as `ending` says (a server request's `add_generation_prompt`
/// and `continue_final_message`).
pub fn encode_chat_ending(
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    messages: &[ChatMessage],
    ending: ChatEnding,
    vars: &TemplateVars,
) -> Result<Vec<u32>> {
    let parts = template
        .render_parts_ending(messages, ending, vars)
        .context("rendering the chat template")?;
    let bos = tokenizer.bos_id().filter(|_| tokenizer.add_bos());
    let segments: Vec<(&str, bool)> = parts
        .iter()
        .map(|part| match part {
            ChatPart::Template(text) => (text.as_str(), true),
            ChatPart::Content(text) => (text.as_str(), false),
        })
        .collect();
    let mut ids = tokenizer.encode_segments(&segments)?;
    if let Some(bos) = bos
        && ids.first() != Some(&bos)
    {
        ids.insert(0, bos);
    }
    Ok(ids)
}

/// The ids of a one-turn chat prompt: an optional system message and one user message, with
/// the generation prompt added (`kindle generate --chat`).
pub fn encode_single_turn(
    tokenizer: &Tokenizer,
    template: &ChatTemplate,
    system: Option<&str>,
    user: &str,
) -> Result<Vec<u32>> {
    let mut messages: Vec<ChatMessage> = system.map(ChatMessage::system).into_iter().collect();
    messages.push(ChatMessage::user(user));
    encode_chat(tokenizer, template, &messages, true)
}
