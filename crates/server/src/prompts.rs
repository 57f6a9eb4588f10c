//! A generation request's prompts as token ids: a chat's messages through the chat template
//! (with the request's variables and tools, ending as it asks), or a completion's prompts,
//! each checked against the vocabulary and the context.

use kindle_generate::chat::{ChatEnding, TemplateVars};

use crate::codec::{Encoding, TextCodec};
use crate::error::ApiError;
use crate::inputs::{PromptInput, chat_ending, documents, messages, prompts, template_vars};
use crate::request::Object;
use crate::response::Endpoint;

/// A request's prompts, encoded.
pub(crate) struct Encoded {
    /// Each prompt's ids, checked against the vocabulary and the context.
    pub ids: Vec<Vec<u32>>,
    /// Each prompt's text (as given, or decoded from the ids given; for `echo`).
    pub texts: Vec<String>,
    /// For a chat whose final message is continued, that message's content.
    pub continued: Option<String>,
}

/// The request's prompts (see [`Encoded`]).
pub(crate) fn encode_prompts<C: TextCodec>(
    codec: &C,
    context: usize,
    object: &Object,
    endpoint: Endpoint,
    tools: Option<&crate::tools::Tools>,
) -> Result<Encoded, ApiError> {
    let mut texts = Vec::new();
    let mut continued = None;
    let (param, encoded) = match endpoint {
        Endpoint::Chat => {
            let messages = messages(object)?;
            let ending = chat_ending(object)?;
            if ending == ChatEnding::Continue {
                continued = messages.last().map(|m| m.content.clone());
            }
            let mut vars = template_vars(object)?;
            if let Some(tools) = tools.filter(|t| t.parses()) {
                vars = with_request_vars(codec, vars, "tools", &tools.template_vars(), "")?;
            }
            if let Some(documents) = documents(object)? {
                let mut given = serde_json::Map::new();
                given.insert("documents".into(), documents);
                vars = with_request_vars(
                    codec,
                    vars,
                    "documents",
                    &given,
                    "put them in a message, or ",
                )?;
            }
            let ids = codec.encode_chat(&messages, ending, &vars).map_err(|e| {
                ApiError::invalid(
                    "messages",
                    format!("Could not apply the chat template: {e}"),
                )
            })?;
            ("messages", vec![ids])
        }
        Endpoint::Completions => {
            let mut all = Vec::new();
            for input in prompts(object)? {
                all.push(match input {
                    PromptInput::Ids(ids) => {
                        texts.push(codec.decode(&ids).map_err(|e| {
                            ApiError::invalid(
                                "prompt",
                                format!("Could not decode the prompt's token ids: {e}"),
                            )
                        })?);
                        ids
                    }
                    PromptInput::Text(text) => {
                        // As llama-server and vLLM: special-token text in a prompt is the
                        // special token (a prompt formatted by hand for a chat model).
                        let ids = codec.encode(&text, Encoding::PROMPT).map_err(|e| {
                            ApiError::invalid(
                                "prompt",
                                format!("Could not tokenize the prompt: {e}"),
                            )
                        })?;
                        texts.push(text);
                        ids
                    }
                });
            }
            ("prompt", all)
        }
    };
    let vocab = codec.vocab_size();
    for ids in &encoded {
        if ids.is_empty() {
            return Err(ApiError::invalid(
                param,
                format!("Invalid value for '{param}': the prompt has no tokens."),
            ));
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= vocab) {
            return Err(ApiError::invalid(
                param,
                format!(
                    "Invalid value for '{param}': token id {id} is out of range for a vocabulary \
                     of {vocab}."
                ),
            ));
        }
        if ids.len() >= context {
            return Err(ApiError::context_length(ids.len(), context, param));
        }
    }
    Ok(Encoded {
        ids: encoded,
        texts,
        continued,
    })
}

/// `vars` with a request's own template variables `given` (its `tools`, its `documents`) set
/// over them; refused, naming `name`, when the chat template never reads `name` (rather than
/// ignored), `instead` saying what else to do.
fn with_request_vars<C: TextCodec>(
    codec: &C,
    vars: TemplateVars,
    name: &str,
    given: &serde_json::Map<String, serde_json::Value>,
    instead: &str,
) -> Result<TemplateVars, ApiError> {
    if !codec.template_uses(name) {
        return Err(ApiError::invalid(
            name,
            format!(
                "This model's chat template does not render {name} (it never reads \
                 '{name}'): {instead}serve it with a --chat-template-file that does."
            ),
        ));
    }
    let given =
        TemplateVars::from_json(given).map_err(|e| ApiError::invalid(name, e.to_string()))?;
    Ok(vars.overridden_by(&given))
}
