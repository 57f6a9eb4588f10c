//! Request bodies: JSON in, validated values out. Every invalid value is an [`ApiError`] (400)
//! naming its field; nothing here panics on any input.

use kindle_sampling::{PenaltyScope, SamplerConfig, parse_order};
use serde_json::Value;

use crate::error::ApiError;

pub use crate::fields::{Object, boolean, integer, number, parse_object, string};
pub(crate) use crate::fields::{expected, field, short};
pub use crate::request_draft::{DraftAsk, Lookup, MAX_LOOKUP_NGRAM};
use crate::request_draft::{draft_ask, draft_min, draft_p_min};

/// What every generation request shares: sampling, stops, counts, streaming, logprobs.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationParams {
    /// The model asked for (`None`: the served one).
    pub model: Option<String>,
    /// `max_tokens` / `max_completion_tokens`.
    pub max_tokens: Option<usize>,
    /// Choices per prompt.
    pub n: usize,
    /// Stream server-sent events.
    pub stream: bool,
    /// Send a last chunk with the usage (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Report logprobs, with this many alternatives per token.
    pub logprobs: Option<usize>,
    /// Keep generating past end-of-generation tokens.
    pub ignore_eos: bool,
    /// The sampler (its `eog_ids` are filled in later; seed as given).
    pub sampler: SamplerConfig,
    /// The output constraint and the field that asked for it.
    pub guided: Option<(crate::guided::Guided, &'static str)>,
    /// `kindle_trace`: report what the sampler's chain did for each token (inside the
    /// logprobs, which it needs).
    pub trace: bool,
    /// `reasoning_format` (chat only; `None`: the server's): whether the reply's reasoning is
    /// split into `reasoning_content`.
    pub reasoning: Option<crate::reasoning::ReasoningFormat>,
    /// `prompt_logprobs` (vLLM's field): score every prompt token, with this many
    /// alternatives each (not streamed).
    pub prompt_logprobs: Option<usize>,
    /// `tools` and `tool_choice` (chat only).
    pub tools: Option<crate::tools::Tools>,
    /// `echo` (completions only): the response repeats the prompt before the completion, and
    /// with `logprobs` reports the prompt's tokens too (each scored by the model given the
    /// tokens before it; the first has none).
    pub echo: bool,
    /// `kindle_lookup_ngram` and `kindle_draft_max`: how the request drafts (see
    /// [`DraftAsk`]). The output is what the request gives without drafting.
    pub draft: DraftAsk,
    /// `kindle_draft_p_min` (0-1): the server's draft model ends a draft where its most
    /// likely token is less likely than this (llama-server's `speculative.p_min`); `None`:
    /// the server's `--draft-p-min`.
    pub draft_p_min: Option<f32>,
    /// `kindle_draft_min` (0-14): the shortest draft verified (llama-server's
    /// `speculative.n_min`); `None`: the server's `--draft-min` with its draft model, every
    /// draft with prompt lookup.
    pub draft_min: Option<usize>,
    /// `dry_sequence_breakers` as texts (each stands for the last token of its encoding,
    /// resolved with the vocabulary); `None`: llama.cpp's defaults where DRY is on.
    pub dry_breakers: Option<Vec<String>>,
}

/// Most choices per prompt.
pub const MAX_N: i64 = 128;

/// Fields that change the meaning of a request and are not supported: an error rather than a
/// silently different answer.
fn refuse_unsupported(object: &Object) -> Result<(), ApiError> {
    if field(object, "suffix").is_some() {
        return Err(ApiError::invalid("suffix", "'suffix' is not supported."));
    }
    if let Some(best_of) = integer(object, "best_of", 1, MAX_N)?
        && best_of > integer(object, "n", 1, MAX_N)?.unwrap_or(1)
    {
        return Err(ApiError::invalid(
            "best_of",
            "'best_of' larger than 'n' is not supported.",
        ));
    }
    match field(object, "modalities") {
        None => {}
        Some(Value::Array(modalities)) if modalities.iter().all(|m| m.as_str() == Some("text")) => {
        }
        Some(Value::Array(_)) => {
            return Err(ApiError::invalid(
                "modalities",
                "Only text output is supported: 'modalities' may hold only \"text\".",
            ));
        }
        Some(other) => return Err(expected("modalities", "an array of strings", other)),
    }
    if field(object, "audio").is_some() {
        return Err(ApiError::invalid(
            "audio",
            "Audio output is not supported ('audio').",
        ));
    }
    if let Some(Value::Array(items)) = field(object, "functions")
        && !items.is_empty()
    {
        return Err(ApiError::invalid(
            "functions",
            "'functions' (OpenAI's deprecated form) is not supported: send 'tools'.",
        ));
    }
    Ok(())
}

/// Parse the fields every generation endpoint takes. `chat` selects the chat form of
/// `logprobs` (a boolean with `top_logprobs` 0-20) over the completions form (an integer 0-5).
pub fn generation_params(object: &Object, chat: bool) -> Result<GenerationParams, ApiError> {
    refuse_unsupported(object)?;
    let model = string(object, "model")?.map(str::to_string);
    for key in [
        "chat_template_kwargs",
        "add_generation_prompt",
        "continue_final_message",
        "documents",
    ] {
        if !chat && field(object, key).is_some() {
            return Err(ApiError::invalid(
                key,
                format!(
                    "'{key}' is a field of /v1/chat/completions; completions render no chat \
                     template."
                ),
            ));
        }
    }
    let reasoning = match string(object, "reasoning_format")? {
        None => None,
        Some(_) if !chat => {
            return Err(ApiError::invalid(
                "reasoning_format",
                "'reasoning_format' is a field of /v1/chat/completions.",
            ));
        }
        Some(name) => Some(crate::reasoning::ReasoningFormat::from_name(name).ok_or_else(|| {
            ApiError::invalid(
                "reasoning_format",
                format!(
                    "Invalid value for 'reasoning_format': {name:?} (expected none, deepseek or \
                     auto)."
                ),
            )
        })?),
    };
    let echo = boolean(object, "echo")?.unwrap_or(false);
    if echo && chat {
        return Err(ApiError::invalid(
            "echo",
            "'echo' is a field of /v1/completions; chat completions do not take it.",
        ));
    }
    // With `echo`, `max_tokens` 0 asks for the prompt alone (scoring it, as evaluation
    // harnesses do).
    let least = i64::from(!echo);
    // llama-server's `n_predict` (-1: no limit but the context) wins over `max_tokens`, as
    // there; OpenAI's newer `max_completion_tokens` over both.
    let n_predict = match integer(object, "n_predict", -1, i64::MAX)? {
        Some(-1) => Some(i64::MAX),
        Some(n) if n < least => {
            return Err(ApiError::invalid(
                "n_predict",
                format!("Invalid value for 'n_predict': {n} (at least {least}, or -1)."),
            ));
        }
        other => other,
    };
    let max_tokens = match integer(object, "max_completion_tokens", least, i64::MAX)? {
        Some(n) => Some(n),
        None => match n_predict {
            Some(n) => Some(n),
            None => integer(object, "max_tokens", least, i64::MAX)?,
        },
    }
    .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    let n = integer(object, "n", 1, MAX_N)?.unwrap_or(1) as usize;
    let stream = boolean(object, "stream")?.unwrap_or(false);
    let prompt_logprobs = integer(object, "prompt_logprobs", 0, 20)?.map(|n| n as usize);
    if prompt_logprobs.is_some() && stream {
        return Err(ApiError::invalid(
            "prompt_logprobs",
            "'prompt_logprobs' is not supported with 'stream' (ask without streaming, or use \
             'echo' with 'logprobs' on /v1/completions).",
        ));
    }
    let include_usage = match field(object, "stream_options") {
        None => false,
        Some(Value::Object(options)) => {
            if !stream {
                return Err(ApiError::invalid(
                    "stream_options",
                    "'stream_options' is only allowed when 'stream' is true.",
                ));
            }
            boolean(options, "include_usage")
                .map_err(|_| {
                    ApiError::invalid(
                        "stream_options.include_usage",
                        "Invalid value for 'stream_options.include_usage': expected a boolean.",
                    )
                })?
                .unwrap_or(false)
        }
        Some(other) => return Err(expected("stream_options", "an object", other)),
    };
    let stop = stop_strings(object)?;
    let logprobs = if chat {
        let top = integer(object, "top_logprobs", 0, 20)?;
        match (boolean(object, "logprobs")?.unwrap_or(false), top) {
            (true, top) => Some(top.unwrap_or(0) as usize),
            (false, Some(_)) => {
                return Err(ApiError::invalid(
                    "top_logprobs",
                    "'top_logprobs' needs 'logprobs' set to true.",
                ));
            }
            (false, None) => None,
        }
    } else {
        integer(object, "logprobs", 0, 5)?.map(|n| n as usize)
    };
    let ignore_eos = boolean(object, "ignore_eos")?.unwrap_or(false);
    let trace = boolean(object, "kindle_trace")?.unwrap_or(false);
    if trace && logprobs.is_none() {
        return Err(ApiError::invalid(
            "kindle_trace",
            if chat {
                "'kindle_trace' is reported inside the logprobs: set 'logprobs' to true."
            } else {
                "'kindle_trace' is reported inside the logprobs: set 'logprobs' (0-5)."
            },
        ));
    }
    let sampler = sampler_config(object)?;
    if trace && sampler.mirostat != kindle_sampling::Mirostat::Off {
        return Err(ApiError::invalid(
            "kindle_trace",
            "'kindle_trace' cannot trace mirostat (its truncation happens in its selection).",
        ));
    }
    let guided = crate::guided::guided(object)?;
    let tools = if chat {
        crate::tools::tools(object)?
    } else {
        match field(object, "tools") {
            Some(Value::Array(items)) if !items.is_empty() => {
                return Err(ApiError::invalid(
                    "tools",
                    "'tools' is a field of /v1/chat/completions.",
                ));
            }
            _ => None,
        }
    };
    // The grammar of a forced call is made once the model's call format is known (routes).
    if tools.as_ref().is_some_and(crate::tools::Tools::forces_call)
        && let Some((_, field)) = &guided
    {
        return Err(ApiError::invalid(
            "tool_choice",
            format!(
                "'tool_choice' that asks for a call constrains the output, as '{field}' does: \
                 send one of them."
            ),
        ));
    }
    let draft = draft_ask(object, trace)?;
    let draft_p_min = draft_p_min(object, draft, trace)?;
    let draft_min = draft_min(object, draft, trace)?;
    let dry_breakers = dry_breakers(object)?;
    Ok(GenerationParams {
        model,
        max_tokens,
        n,
        stream,
        include_usage,
        stop,
        logprobs,
        ignore_eos,
        sampler,
        guided,
        trace,
        reasoning,
        prompt_logprobs,
        tools,
        echo,
        draft,
        draft_p_min,
        draft_min,
        dry_breakers,
    })
}

/// `stop`: a string or an array of up to 4 non-empty strings.
fn stop_strings(object: &Object) -> Result<Vec<String>, ApiError> {
    let stops = match field(object, "stop") {
        None => return Ok(Vec::new()),
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) => {
            if items.len() > 4 {
                return Err(ApiError::invalid(
                    "stop",
                    format!(
                        "Invalid value for 'stop': at most 4 stop sequences, got {}.",
                        items.len()
                    ),
                ));
            }
            items
                .iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(expected("stop", "a string or an array of strings", other)),
                })
                .collect::<Result<_, _>>()?
        }
        Some(other) => {
            return Err(expected("stop", "a string or an array of strings", other));
        }
    };
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid(
            "stop",
            "Invalid value for 'stop': stop sequences must not be empty.",
        ));
    }
    Ok(stops)
}

/// The sampler fields: OpenAI's and the llama.cpp / vLLM extensions.
/// llama-server's `samplers`: the order of the processor chain, as an array of stage names
/// (`["top_k", "top_p", "temperature"]`) or a string (`"top_k;top_p;temperature"`, or the
/// one-letter sequence `"kpt"`). Stages left out are not applied.
fn samplers(object: &Object) -> Result<Option<Vec<kindle_sampling::Stage>>, ApiError> {
    let text = match field(object, "samplers") {
        None => return Ok(None),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => {
            let mut names = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(s) if !s.trim().is_empty() => names.push(s.trim().to_string()),
                    other => return Err(expected("samplers", "an array of stage names", other)),
                }
            }
            names.join(";")
        }
        Some(other) => return Err(expected("samplers", "an array of stage names", other)),
    };
    parse_order(&text)
        .map(Some)
        .map_err(|e| ApiError::invalid("samplers", format!("Invalid value for 'samplers': {e}.")))
}

fn sampler_config(object: &Object) -> Result<SamplerConfig, ApiError> {
    let mut config = SamplerConfig::neutral();
    let f = |x: f64| x as f32;
    if let Some(t) = number(object, "temperature", 0.0, 2.0)? {
        config.temperature = f(t);
    }
    if let Some(p) = number(object, "top_p", 0.0, 1.0)? {
        if p == 0.0 {
            // As OpenAI: only the most likely token.
            config.temperature = 0.0;
        } else {
            config.top_p = f(p);
        }
    }
    if let Some(k) = integer(object, "top_k", -1, i64::from(u32::MAX))? {
        config.top_k = k.max(0);
    }
    if let Some(p) = number(object, "min_p", 0.0, 1.0)? {
        config.min_p = f(p);
    }
    if let Some(p) = number(object, "typical_p", 0.0, 1.0)? {
        if p == 0.0 {
            return Err(ApiError::invalid(
                "typical_p",
                "Invalid value for 'typical_p': expected a number in (0, 1].",
            ));
        }
        config.typical_p = f(p);
    }
    let presence = number(object, "presence_penalty", -2.0, 2.0)?;
    let frequency = number(object, "frequency_penalty", -2.0, 2.0)?;
    let repeat = number(object, "repeat_penalty", 0.0, 10.0)?;
    if repeat == Some(0.0) {
        return Err(ApiError::invalid(
            "repeat_penalty",
            "Invalid value for 'repeat_penalty': expected a number in (0, 10].",
        ));
    }
    config.presence_penalty = f(presence.unwrap_or(0.0));
    config.frequency_penalty = f(frequency.unwrap_or(0.0));
    match repeat {
        // llama.cpp's semantics: the last 64 tokens, prompt included.
        Some(r) => config.repetition_penalty = f(r),
        // OpenAI's: every generated token.
        None => {
            config.penalty_scope = PenaltyScope::OutputOnly;
            config.penalty_last_n = -1;
        }
    }
    if let Some(n) = integer(object, "repeat_last_n", -1, i64::from(u32::MAX))? {
        // llama-server's window of `repeat_penalty` (-1: the whole context).
        config.penalty_last_n = n;
    }
    if let Some(n) = integer(object, "min_tokens", 0, i64::from(u32::MAX))? {
        config.min_tokens = n as usize;
    }
    llama_cpp_samplers(object, &mut config)?;
    if let Some(seed) = field(object, "seed") {
        let seed = seed
            .as_u64()
            .or_else(|| seed.as_i64().map(|s| s as u64))
            .ok_or_else(|| expected("seed", "an integer", seed))?;
        config.seed = Some(seed);
    }
    config.logit_bias = logit_bias(object)?;
    if let Some(order) = samplers(object)? {
        config.order = order;
    }
    Ok(config)
}

/// The samplers llama-server takes beyond OpenAI's, with its names, ranges and defaults:
/// `mirostat` (0, 1, 2) with `mirostat_tau` and `mirostat_eta`; `top_n_sigma` (negative:
/// off); `xtc_probability` and `xtc_threshold`; `dry_multiplier`, `dry_base`,
/// `dry_allowed_length` and `dry_penalty_last_n` (`dry_sequence_breakers`: [`dry_breakers`]).
fn llama_cpp_samplers(object: &Object, config: &mut SamplerConfig) -> Result<(), ApiError> {
    use kindle_sampling::Mirostat;
    let f = |x: f64| x as f32;
    let tau = f(number(object, "mirostat_tau", f64::MIN_POSITIVE, 1e6)?.unwrap_or(5.0));
    let eta = f(number(object, "mirostat_eta", f64::MIN_POSITIVE, 1e6)?.unwrap_or(0.1));
    config.mirostat = match integer(object, "mirostat", 0, 2)? {
        Some(1) => Mirostat::V1 { tau, eta },
        Some(2) => Mirostat::V2 { tau, eta },
        _ => Mirostat::Off,
    };
    if let Some(sigma) = number(object, "top_n_sigma", -1e6, 1e6)? {
        config.top_n_sigma = f(sigma);
    }
    if let Some(p) = number(object, "xtc_probability", 0.0, 1.0)? {
        config.xtc_probability = f(p);
    }
    if let Some(t) = number(object, "xtc_threshold", 0.0, 1.0)? {
        config.xtc_threshold = f(t);
    }
    if let Some(m) = number(object, "dry_multiplier", 0.0, 1e6)? {
        config.dry.multiplier = f(m);
    }
    if let Some(b) = number(object, "dry_base", 1.0, 1e6)? {
        config.dry.base = f(b);
    }
    if let Some(n) = integer(object, "dry_allowed_length", 0, i64::from(u32::MAX))? {
        config.dry.allowed_length = n as usize;
    }
    if let Some(n) = integer(object, "dry_penalty_last_n", -1, i64::from(u32::MAX))? {
        config.dry.penalty_last_n = n;
    }
    Ok(())
}

/// `dry_sequence_breakers`: a list of texts (llama-server's form), or absent.
fn dry_breakers(object: &Object) -> Result<Option<Vec<String>>, ApiError> {
    let Some(value) = field(object, "dry_sequence_breakers") else {
        return Ok(None);
    };
    let texts = value.as_array().and_then(|items| {
        items
            .iter()
            .map(|v| v.as_str().filter(|s| !s.is_empty()).map(String::from))
            .collect::<Option<Vec<_>>>()
    });
    texts.map(Some).ok_or_else(|| {
        expected(
            "dry_sequence_breakers",
            "an array of non-empty strings",
            value,
        )
    })
}

/// `logit_bias`: `{"token id": bias}`, bias in `[-100, 100]`; -100 bans the token.
fn logit_bias(object: &Object) -> Result<Vec<(u32, f32)>, ApiError> {
    let Some(value) = field(object, "logit_bias") else {
        return Ok(Vec::new());
    };
    let Value::Object(map) = value else {
        return Err(expected(
            "logit_bias",
            "an object of token ids to numbers",
            value,
        ));
    };
    let mut bias = Vec::with_capacity(map.len());
    for (key, value) in map {
        let id: u32 = key.trim().parse().map_err(|_| {
            ApiError::invalid(
                "logit_bias",
                format!("Invalid key in 'logit_bias': {key:?} is not a token id."),
            )
        })?;
        let b = value
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| {
                ApiError::invalid(
                    "logit_bias",
                    format!(
                        "Invalid value in 'logit_bias' for token {id}: expected a number between \
                         -100 and 100, got {}.",
                        short(value)
                    ),
                )
            })?;
        bias.push((
            id,
            if b <= -100.0 {
                f32::NEG_INFINITY
            } else {
                b as f32
            },
        ));
    }
    Ok(bias)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(json: &str) -> Object {
        parse_object(json.as_bytes()).unwrap()
    }

    /// llama-server's `n_predict` is the token limit (over `max_tokens`; -1: no limit), and
    /// audio output is refused.
    #[test]
    fn n_predict_and_modalities() {
        let limit = |text: &str| generation_params(&obj(text), false).map(|p| p.max_tokens);
        assert_eq!(limit(r#"{"n_predict":3}"#).unwrap(), Some(3));
        assert_eq!(limit(r#"{"n_predict":3,"max_tokens":9}"#).unwrap(), Some(3));
        assert_eq!(
            limit(r#"{"n_predict":-1}"#).unwrap(),
            Some(i64::MAX as usize)
        );
        assert_eq!(
            limit(r#"{"max_completion_tokens":5,"n_predict":3}"#).unwrap(),
            Some(5)
        );
        for bad in [r#"{"n_predict":-2}"#, r#"{"n_predict":0}"#] {
            let err = limit(bad).unwrap_err();
            assert_eq!(err.param.as_deref(), Some("n_predict"), "{err:?}");
        }
        let chat = |text: &str| generation_params(&obj(text), true);
        assert!(chat(r#"{"modalities":["text"]}"#).is_ok());
        let err = chat(r#"{"modalities":"text"}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("modalities"), "{err:?}");
        let err = chat(r#"{"modalities":["text","audio"]}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("modalities"), "{err:?}");
        let err = chat(r#"{"audio":{"voice":"alloy","format":"wav"}}"#).unwrap_err();
        assert_eq!(err.param.as_deref(), Some("audio"), "{err:?}");
    }

    #[test]
    fn each_invalid_value_names_its_field() {
        for (body, param) in [
            (r#"{"temperature":3}"#, "temperature"),
            (r#"{"temperature":"hot"}"#, "temperature"),
            (r#"{"top_p":1.5}"#, "top_p"),
            (r#"{"n":0}"#, "n"),
            (r#"{"max_tokens":0}"#, "max_tokens"),
            (r#"{"max_tokens":1.5}"#, "max_tokens"),
            (r#"{"stop":["a","b","c","d","e"]}"#, "stop"),
            (r#"{"stop":[1]}"#, "stop"),
            (r#"{"stop":""}"#, "stop"),
            (r#"{"presence_penalty":-3}"#, "presence_penalty"),
            (r#"{"frequency_penalty":2.5}"#, "frequency_penalty"),
            (r#"{"logit_bias":{"x":1}}"#, "logit_bias"),
            (r#"{"logit_bias":{"1":101}}"#, "logit_bias"),
            (r#"{"logprobs":6}"#, "logprobs"),
            (r#"{"seed":"x"}"#, "seed"),
            (r#"{"stream":"yes"}"#, "stream"),
            (
                r#"{"stream_options":{"include_usage":true}}"#,
                "stream_options",
            ),
            (r#"{"top_k":-2}"#, "top_k"),
            (r#"{"min_p":2}"#, "min_p"),
            (r#"{"typical_p":0}"#, "typical_p"),
            (r#"{"mirostat":3}"#, "mirostat"),
            (r#"{"mirostat":2,"mirostat_tau":-1}"#, "mirostat_tau"),
            (r#"{"mirostat_eta":"fast"}"#, "mirostat_eta"),
            (r#"{"xtc_probability":1.5}"#, "xtc_probability"),
            (r#"{"xtc_threshold":-0.5}"#, "xtc_threshold"),
            (r#"{"top_n_sigma":"wide"}"#, "top_n_sigma"),
            (r#"{"dry_multiplier":-1}"#, "dry_multiplier"),
            (r#"{"dry_base":0.5}"#, "dry_base"),
            (r#"{"dry_allowed_length":-2}"#, "dry_allowed_length"),
            (r#"{"dry_penalty_last_n":-5}"#, "dry_penalty_last_n"),
            (
                r#"{"dry_sequence_breakers":[1,2]}"#,
                "dry_sequence_breakers",
            ),
            (r#"{"dry_sequence_breakers":[""]}"#, "dry_sequence_breakers"),
            (r#"{"repeat_last_n":-2}"#, "repeat_last_n"),
            (r#"{"repeat_penalty":0}"#, "repeat_penalty"),
            (r#"{"min_tokens":-1}"#, "min_tokens"),
            (r#"{"ignore_eos":1}"#, "ignore_eos"),
            (r#"{"model":5}"#, "model"),
            (r#"{"echo":"yes"}"#, "echo"),
            (r#"{"echo":false,"max_tokens":0}"#, "max_tokens"),
            (r#"{"echo":true,"max_tokens":-1}"#, "max_tokens"),
        ] {
            let e = generation_params(&obj(body), false).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {e:?}");
            assert_eq!(e.status.as_u16(), 400);
        }
        let e = generation_params(&obj(r#"{"echo":true}"#), true).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("echo"));
        assert!(e.message.contains("/v1/completions"), "{}", e.message);
        let e = generation_params(&obj(r#"{"top_logprobs":3}"#), true).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("top_logprobs"));
        let e =
            generation_params(&obj(r#"{"logprobs":true,"top_logprobs":21}"#), true).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("top_logprobs"));
    }

    #[test]
    fn valid_values_map_to_the_sampler() {
        let p = generation_params(
            &obj(
                r#"{"temperature":0,"seed":7,"stop":"x","logit_bias":{"3":-100,"4":2},
                   "max_completion_tokens":9,"logprobs":true,"top_logprobs":2,"n":2}"#,
            ),
            true,
        )
        .unwrap();
        assert_eq!(p.sampler.temperature, 0.0);
        assert_eq!(p.sampler.seed, Some(7));
        assert_eq!(p.stop, ["x"]);
        assert_eq!(p.sampler.logit_bias[0], (3, f32::NEG_INFINITY));
        assert_eq!(p.sampler.logit_bias[1], (4, 2.0));
        assert_eq!(p.max_tokens, Some(9));
        assert_eq!(p.logprobs, Some(2));
        assert_eq!(p.n, 2);
        assert!(!p.echo);
        // With `echo`, `max_tokens` 0 asks for the prompt alone.
        let p =
            generation_params(&obj(r#"{"echo":true,"max_tokens":0,"logprobs":1}"#), false).unwrap();
        assert!(p.echo);
        assert_eq!((p.max_tokens, p.logprobs), (Some(0), Some(1)));
    }

    #[test]
    fn llama_server_samplers_reach_the_sampler() {
        use kindle_sampling::Mirostat;
        let p = generation_params(
            &obj(
                r#"{"mirostat":2,"mirostat_tau":3.5,"mirostat_eta":0.2,"top_n_sigma":1.5,
                   "xtc_probability":0.5,"xtc_threshold":0.2,"dry_multiplier":0.8,
                   "dry_base":2,"dry_allowed_length":3,"dry_penalty_last_n":64,
                   "dry_sequence_breakers":["\n","ab"],"repeat_penalty":1.1,
                   "repeat_last_n":32}"#,
            ),
            false,
        )
        .unwrap();
        let s = &p.sampler;
        assert_eq!(s.mirostat, Mirostat::V2 { tau: 3.5, eta: 0.2 });
        assert_eq!(
            (s.top_n_sigma, s.xtc_probability, s.xtc_threshold),
            (1.5, 0.5, 0.2)
        );
        assert_eq!((s.dry.multiplier, s.dry.base), (0.8, 2.0));
        assert_eq!((s.dry.allowed_length, s.dry.penalty_last_n), (3, 64));
        assert_eq!(
            p.dry_breakers,
            Some(vec!["\n".to_string(), "ab".to_string()])
        );
        assert_eq!((s.repetition_penalty, s.penalty_last_n), (1.1, 32));
        let p = generation_params(&obj(r#"{"mirostat":1}"#), false).unwrap();
        assert_eq!(p.sampler.mirostat, Mirostat::V1 { tau: 5.0, eta: 0.1 });
        let p = generation_params(&obj(r#"{"mirostat":0}"#), false).unwrap();
        assert_eq!((p.sampler.mirostat, p.dry_breakers), (Mirostat::Off, None));
    }

    #[test]
    fn bodies_that_are_not_objects() {
        assert!(parse_object(b"{").is_err());
        assert!(parse_object(b"[1]").is_err());
        assert!(parse_object(b"").is_err());
        assert!(parse_object(&[0xff, 0xfe]).is_err());
    }
}
