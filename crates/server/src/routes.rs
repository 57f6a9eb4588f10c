//! The HTTP side: the router, its middleware (CORS, body limit and timeout, API key, OpenAI
//! error shapes, request counting) and the handlers, which validate a request, turn it into
//! engine [`Job`]s and turn the engine's updates into a response.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use kindle_generate::GenerationConfig;
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::RequestBodyTimeoutLayer;

use crate::app::{AppState, Shared, json_response, read_json};
use crate::codec::{Encoding, TextCodec};
use crate::draft::DraftDefaults;
use crate::engine::{Command, Job, JobDraft, Update};
use crate::error::ApiError;
use crate::prompts::{Encoded, encode_prompts};
use crate::reasoning::ReasoningFormat;
use crate::request::{DraftAsk, GenerationParams, generation_params, integer};
use crate::request_draft::Lookup;
use crate::response::{
    Choice, ChunkWriter, Endpoint, ResponseMeta, TokenReport, body as response_body, finish_reason,
};

/// The application: every endpoint and the middleware.
pub fn router<C: TextCodec>(state: Shared<C>) -> Router {
    let limit = state.config.max_body_bytes;
    let mut app = Router::new()
        .route("/v1/completions", post(completions::<C>))
        .route("/v1/chat/completions", post(chat_completions::<C>))
        .route("/v1/models", get(models::<C>))
        .route("/v1/models/{model}", get(model::<C>))
        .route("/health", get(health::<C>))
        .route("/metrics", get(metrics::<C>))
        .route("/tokenize", post(crate::utility::tokenize::<C>))
        .route("/detokenize", post(crate::utility::detokenize::<C>))
        .route("/props", get(crate::utility::props::<C>))
        // llama-server's and vLLM's paths without `/v1`.
        .route("/completions", post(completions::<C>))
        .route("/chat/completions", post(chat_completions::<C>))
        .route("/models", get(models::<C>))
        .route("/", get(playground))
        .fallback(unknown_endpoint)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            check_api_key::<C>,
        ))
        .layer(RequestBodyTimeoutLayer::new(state.config.body_timeout))
        .layer(RequestBodyLimitLayer::new(limit))
        .layer(middleware::from_fn_with_state(
            Arc::clone(&state),
            openai_errors::<C>,
        ));
    if !state.config.cors_origins.is_empty() {
        let origins = &state.config.cors_origins;
        let allow = if origins.iter().any(|o| o == "*") {
            AllowOrigin::from(Any)
        } else {
            AllowOrigin::list(
                origins
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o).ok())
                    .collect::<Vec<_>>(),
            )
        };
        app = app.layer(
            CorsLayer::new()
                .allow_origin(allow)
                .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE]),
        );
    }
    app.with_state(state)
}

/// Every error the framework answers by itself (405, 413, a body read that timed out) gets
/// OpenAI's JSON shape; every answer is counted by status.
async fn openai_errors<C: TextCodec>(
    State(state): State<Shared<C>>,
    request: Request,
    next: Next,
) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let mut response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if (status.is_client_error() || status.is_server_error()) && !is_json {
        let error = match status {
            StatusCode::METHOD_NOT_ALLOWED => ApiError::method_not_allowed(method.as_str(), &path),
            StatusCode::PAYLOAD_TOO_LARGE => ApiError::too_large(state.config.max_body_bytes),
            StatusCode::NOT_FOUND => ApiError::unknown_endpoint(method.as_str(), &path),
            _ => ApiError {
                status,
                message: status
                    .canonical_reason()
                    .unwrap_or("request failed")
                    .to_string(),
                kind: "invalid_request_error",
                param: None,
                code: None,
                retry_after: None,
            },
        };
        response = error.into_response();
    }
    state.metrics.count_request(response.status().as_u16());
    response
}

/// With `--api-key`, every endpoint but `/health` needs `Authorization: Bearer <key>`.
async fn check_api_key<C: TextCodec>(
    State(state): State<Shared<C>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(key) = &state.config.api_key
        && !matches!(request.uri().path(), "/health" | "/")
        && request.method() != Method::OPTIONS
    {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if !given.is_some_and(|given| constant_time_eq(given.as_bytes(), key.as_bytes())) {
            return ApiError::unauthorized().into_response();
        }
    }
    next.run(request).await
}

/// Compare without stopping at the first difference.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn unknown_endpoint(method: Method, uri: axum::http::Uri) -> ApiError {
    ApiError::unknown_endpoint(method.as_str(), uri.path())
}

/// The playground: one static page (no external resources), compiled into the binary. It
/// calls the API from the browser, so it is served without the API key (the page asks for it).
async fn playground() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PLAYGROUND,
    )
        .into_response()
}

const PLAYGROUND: &str = include_str!("playground.html");

async fn health<C: TextCodec>(State(state): State<Shared<C>>) -> Response {
    let draining = state.draining.load(Ordering::SeqCst);
    let (status, text) = if draining {
        (StatusCode::SERVICE_UNAVAILABLE, "draining")
    } else {
        (StatusCode::OK, "ok")
    };
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        json!({ "status": text }).to_string(),
    )
        .into_response()
}

async fn metrics<C: TextCodec>(State(state): State<Shared<C>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

fn model_object<C: TextCodec>(state: &AppState<C>) -> Value {
    json!({
        "id": state.config.model_name,
        "object": "model",
        "created": state.started,
        "owned_by": "kindle",
        "max_model_len": state.config.context,
    })
}

async fn models<C: TextCodec>(State(state): State<Shared<C>>) -> Response {
    json_response(json!({"object": "list", "data": [model_object(&state)]}))
}

async fn model<C: TextCodec>(
    State(state): State<Shared<C>>,
    name: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    // A name that is not UTF-8 once its percent-escapes are decoded is answered in the
    // API's error shape, naming the problem (axum's own rejection is a bare text).
    let Path(name) = name.map_err(|e| {
        ApiError::bad_request(format!("The model name in the path is not valid: {e}."))
    })?;
    check_model(&state, Some(&name))?;
    Ok(json_response(model_object(&state)))
}

/// The served model, or `kindle`; anything else is 404.
fn check_model<C: TextCodec>(state: &AppState<C>, model: Option<&str>) -> Result<(), ApiError> {
    match model {
        None => Ok(()),
        Some(name) if name == state.config.model_name || name == "kindle" => Ok(()),
        Some(name) => Err(ApiError::unknown_model(name, &state.config.model_name)),
    }
}

async fn completions<C: TextCodec>(
    State(state): State<Shared<C>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    generation(state, headers, body, Endpoint::Completions).await
}

async fn chat_completions<C: TextCodec>(
    State(state): State<Shared<C>>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    generation(state, headers, body, Endpoint::Chat).await
}

/// How a request's jobs draft: what it asks for ([`DraftAsk`], `p_min`, where the draft
/// model's drafts end, and `min`, the shortest draft verified), with the server's draft model
/// (`server`, where there is one) by default. Asking for drafting with mirostat, or for the
/// draft model of a server without one, is a 400; mirostat without asking takes no drafts.
/// A sampled request whose draft model's drafts end where it is unsure verifies every draft:
/// its own `kindle_draft_min` above 1 is a 400 (dropping the short drafts would change its
/// output distribution), the server's `--draft-min` does not apply to it.
fn job_draft(
    server: Option<DraftDefaults>,
    ask: DraftAsk,
    p_min: Option<f32>,
    min: Option<usize>,
    sampler: &kindle_sampling::SamplerConfig,
) -> Result<Option<JobDraft>, ApiError> {
    // Mirostat's state follows each draw: no fixed distribution to verify drafts against.
    let mirostat = sampler.temperature != 0.0 && sampler.mirostat != kindle_sampling::Mirostat::Off;
    let asked = |field: &str| {
        if mirostat {
            return Err(ApiError::invalid(
                field,
                format!(
                    "'{field}' cannot be combined with 'mirostat' (its state follows each draw, so it has no fixed distribution to verify drafts against)."
                ),
            ));
        }
        Ok(())
    };
    if p_min.is_some() {
        asked("kindle_draft_p_min")?;
        if server.is_none() {
            return Err(ApiError::invalid(
                "kindle_draft_p_min",
                "'kindle_draft_p_min' ends the server's draft model's drafts: this server has none (start it with --draft-model).",
            ));
        }
    }
    if min.is_some() {
        asked("kindle_draft_min")?;
    }
    // The server's draft model, `draft_max` tokens a step.
    let model = |server: DraftDefaults, draft_max: usize| {
        let stops = p_min.unwrap_or(server.p_min) > 0.0 && sampler.temperature != 0.0;
        let draft_min = match min {
            Some(min) if min > draft_max => {
                return Err(ApiError::invalid(
                    "kindle_draft_min",
                    format!(
                        "'kindle_draft_min' ({min}) is more than the server's longest draft ({draft_max}): no draft would be verified."
                    ),
                ));
            }
            Some(min) if min > 1 && stops => {
                return Err(ApiError::invalid(
                    "kindle_draft_min",
                    "'kindle_draft_min' cannot be combined with sampling where the draft model's drafts end where it is unsure ('kindle_draft_p_min' or the server's --draft-p-min): a draft's length then depends on the tokens it drew, and dropping the short ones would change the output distribution.",
                ));
            }
            Some(min) => min,
            None if stops => 0,
            None => server.draft_min.min(draft_max),
        };
        Ok(Some(JobDraft::Model {
            draft_max,
            p_min,
            draft_min,
        }))
    };
    match ask {
        DraftAsk::Off => Ok(None),
        DraftAsk::ServerDefault => match server {
            Some(server) if !mirostat => model(server, server.draft_max),
            Some(_) => Ok(None),
            None if min.is_some() => Err(ApiError::invalid(
                "kindle_draft_min",
                "'kindle_draft_min' needs a drafter: set 'kindle_lookup_ngram' (this server has no draft model: start it with --draft-model).",
            )),
            None => Ok(None),
        },
        DraftAsk::Lookup(lookup) => {
            asked("kindle_lookup_ngram")?;
            Ok(Some(JobDraft::Lookup(Lookup {
                draft_min: min.unwrap_or(0),
                ..lookup
            })))
        }
        DraftAsk::Model { draft_max } => {
            asked("kindle_draft_max")?;
            match server {
                Some(server) => model(server, draft_max),
                None => Err(ApiError::invalid(
                    "kindle_draft_max",
                    "'kindle_draft_max' needs a drafter: set 'kindle_lookup_ngram' (this server has no draft model: start it with --draft-model).",
                )),
            }
        }
    }
}

/// One engine job per choice of each prompt; `index` = prompt × n + choice.
fn jobs<C: TextCodec>(
    state: &AppState<C>,
    params: &GenerationParams,
    prompts: Vec<Vec<u32>>,
    endpoint: Endpoint,
    events: &tokio::sync::mpsc::UnboundedSender<Update>,
    arrived: Instant,
) -> Result<Vec<Job>, ApiError> {
    let vocab = state.codec.vocab_size();
    if let Some(&(id, _)) = params
        .sampler
        .logit_bias
        .iter()
        .find(|(id, _)| *id as usize >= vocab)
    {
        return Err(ApiError::invalid(
            "logit_bias",
            format!(
                "Invalid key in 'logit_bias': token id {id} is out of range for a vocabulary of {vocab}."
            ),
        ));
    }
    let eog = state.codec.eog_ids();
    let mut base = params.sampler.clone();
    base.eog_ids = eog.clone();
    base.dry.sequence_breakers = dry_breaker_ids(state.codec.as_ref(), params, &base)?;
    base.validate().map_err(sampling_error)?;
    let default_max = match endpoint {
        Endpoint::Completions => 16,
        Endpoint::Chat => usize::MAX,
    };
    let max_tokens = params.max_tokens.unwrap_or(default_max);
    let draft = job_draft(
        state.draft,
        params.draft,
        params.draft_p_min,
        params.draft_min,
        &base,
    )?;
    let mut out = Vec::with_capacity(prompts.len() * params.n);
    for (p, prompt) in prompts.into_iter().enumerate() {
        let room = state.config.context - prompt.len();
        let max_new = max_tokens.min(room);
        let mut config = GenerationConfig::default()
            .with_max_new_tokens(max_new)
            .with_stop_strings(params.stop.iter().cloned())
            .with_top_logprobs(params.logprobs.unwrap_or(0));
        if !params.ignore_eos {
            config = config.with_eog_token_ids(eog.iter().copied());
        }
        for c in 0..params.n {
            let index = p * params.n + c;
            let mut sampler_config = base.clone();
            sampler_config.seed = base.seed.map(|s| s.wrapping_add(index as u64));
            let mut sampler = sampler_config.build().map_err(sampling_error)?;
            sampler.set_prompt_len(prompt.len());
            let constraint = match &params.guided {
                Some((spec, field)) => Some(
                    state
                        .codec
                        .constraint(spec, field)
                        .map_err(|message| ApiError::invalid(*field, message))?,
                ),
                None => None,
            };
            out.push(Job {
                constraint,
                prompt_logprobs: params
                    .logprobs
                    .filter(|_| params.echo)
                    .max(params.prompt_logprobs),
                trace: params.trace,
                draft,
                capacity: prompt.len() + max_new,
                prompt: prompt.clone(),
                sampler,
                config: config.clone(),
                index,
                events: events.clone(),
                arrived,
            });
        }
    }
    Ok(out)
}

/// The DRY breakers' token ids: the last token of each text's encoding (the request's, each of
/// which must encode, or llama.cpp's defaults that do), none while DRY is off.
fn dry_breaker_ids<C: TextCodec>(
    codec: &C,
    params: &GenerationParams,
    config: &kindle_sampling::SamplerConfig,
) -> Result<Vec<u32>, ApiError> {
    let last = |text: &str| {
        let ids = codec.encode(text, Encoding::TEXT).ok()?;
        ids.last().copied()
    };
    let mut ids = Vec::new();
    match &params.dry_breakers {
        Some(texts) => {
            for text in texts {
                ids.push(last(text).ok_or_else(|| {
                    ApiError::invalid(
                        "dry_sequence_breakers",
                        format!("Invalid value in 'dry_sequence_breakers': {text:?} encodes to no token."),
                    )
                })?);
            }
        }
        None => ids.extend(
            kindle_sampling::DEFAULT_DRY_BREAKERS
                .iter()
                .filter_map(|text| last(text)),
        ),
    }
    if !config.dry.is_enabled() {
        ids.clear();
    }
    ids.sort_unstable();
    ids.dedup();
    Ok(ids)
}

fn sampling_error(error: kindle_sampling::SamplingError) -> ApiError {
    let param = match &error {
        // The request's names where the sampler's differ.
        kindle_sampling::SamplingError::InvalidParameter { name, .. } => match *name {
            "repetition_penalty" => "repeat_penalty",
            "penalty_last_n" => "repeat_last_n",
            name => name,
        },
        _ => "sampling",
    };
    ApiError::invalid(param, format!("Invalid sampling parameter: {error}"))
}

async fn generation<C: TextCodec>(
    state: Shared<C>,
    headers: HeaderMap,
    body: Body,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    if state.draining.load(Ordering::SeqCst) {
        return Err(ApiError::draining());
    }
    let object = read_json(&headers, body, state.config.max_body_bytes).await?;
    let mut params = generation_params(&object, endpoint == Endpoint::Chat)?;
    // Calls in the format the model's template asks for; a forced call as its grammar.
    let tool_format = state.codec.tool_format();
    if let Some(tools) = params.tools.as_mut() {
        tools.format = tool_format;
        if let Some(grammar) = tools.grammar() {
            params.guided = Some((crate::guided::Guided::Grammar(grammar), "tool_choice"));
        }
    }
    check_model(&state, params.model.as_deref())?;
    // Rendering a chat template (up to its fuel: a fraction of a second for one that loops)
    // and tokenizing long prompts is CPU work: on a blocking thread, not the handlers' one.
    let object = Arc::new(object);
    let (codec, context, tools) = (
        Arc::clone(&state.codec),
        state.config.context,
        params.tools.clone(),
    );
    let request = Arc::clone(&object);
    let Encoded {
        ids: prompts,
        texts,
        continued,
    } = tokio::task::spawn_blocking(move || {
        encode_prompts(codec.as_ref(), context, &request, endpoint, tools.as_ref())
    })
    .await
    .map_err(|e| ApiError::internal(format!("encoding the prompts failed: {e}")))??;
    let parse_tools = params
        .tools
        .as_ref()
        .is_some_and(crate::tools::Tools::parses);
    let echo = if params.echo { texts } else { Vec::new() };
    // A chat reply's reasoning split out, starting inside it when the prompt opened it.
    let reasoning = (endpoint == Endpoint::Chat
        && params.reasoning.unwrap_or(state.config.reasoning_format) == ReasoningFormat::Deepseek)
        .then(|| {
            opens_reasoning(state.codec.as_ref(), &prompts[0])
                || continued
                    .as_deref()
                    .is_some_and(crate::reasoning::ends_inside)
        });
    let prompt_count = prompts.len();
    // More choices than the server runs and queues are refused (whether they come from `n`
    // or from a list of prompts), rather than admitted only while the server is idle.
    let choices = prompt_count * params.n;
    if choices > state.config.parallel + state.config.queue {
        let given_n = integer(&object, "n", 1, crate::request::MAX_N)?.is_some();
        return Err(ApiError::invalid(
            if given_n { "n" } else { "prompt" },
            format!(
                "{prompt_count} prompt(s) with 'n' of {} make {choices} choices, more than this \
                 server runs and queues ({} + {}; its --parallel and --queue).",
                params.n, state.config.parallel, state.config.queue
            ),
        ));
    }
    let (sender, receiver) = unbounded_channel();
    let jobs = jobs(&state, &params, prompts, endpoint, &sender, arrived)?;
    drop(sender);
    let total = jobs.len();
    if !state.metrics.reserve_queue(total, state.config.queue) {
        return Err(ApiError::queue_full(state.config.queue));
    }
    if !state.engine.send(Command::Submit(jobs)) {
        state.metrics.queued.fetch_sub(total, Ordering::SeqCst);
        return Err(ApiError::draining());
    }
    let mut meta = ResponseMeta::new(
        endpoint,
        &state.config.model_name,
        params.logprobs.is_some(),
        params.include_usage,
    );
    meta.prompt_logprobs = params.prompt_logprobs;
    if params.stream {
        let mut writer =
            ChunkWriter::new(Arc::clone(&state.codec), meta, total, params.n).with_echo(echo);
        if let Some(in_reasoning) = reasoning {
            writer = writer.with_reasoning(in_reasoning);
        }
        if parse_tools {
            writer = writer.with_tools(tool_format);
        }
        Ok(stream_response(writer, receiver, total))
    } else {
        let field = params.guided.as_ref().map(|(_, field)| *field);
        let mut choices = collect(receiver, total, field).await?;
        for (index, choice) in choices.iter_mut().enumerate() {
            crate::response::trim_to_text(state.codec.as_ref(), choice);
            if let Some(prompt) = echo.get(index / params.n.max(1)) {
                choice.text.insert_str(0, prompt);
                // With logprobs, the prompt's tokens open the choice's (as many alternatives
                // as `logprobs` asks for, whatever `prompt_logprobs` scored).
                if let Some(top) = params.logprobs {
                    let reports = choice.prompt.iter().map(|t| TokenReport {
                        id: t.id,
                        logprob: t.logprob,
                        top: t.top_logprobs.iter().take(top).copied().collect(),
                        trace: None,
                    });
                    choice.tokens.splice(0..0, reports.collect::<Vec<_>>());
                }
            }
            if let Some(in_reasoning) = reasoning {
                let (thought, answer) = crate::reasoning::split(&choice.text, in_reasoning);
                choice.reasoning = thought;
                choice.text = answer;
            }
            if parse_tools {
                let (text, calls) = crate::tools::parse_calls_as(tool_format, &choice.text);
                if !calls.is_empty() {
                    choice.text = text;
                    choice.tool_calls = calls;
                }
            }
        }
        Ok(json_response(response_body(
            state.codec.as_ref(),
            &meta,
            &choices,
            params.n,
        )))
    }
}

/// Whether a chat prompt ends inside an opened reasoning block (its last tokens read
/// `<think>` and whitespace, as DeepSeek-R1's template ends a prompt): the reply then starts
/// in its reasoning.
fn opens_reasoning<C: TextCodec>(codec: &C, prompt: &[u32]) -> bool {
    let tail = &prompt[prompt.len().saturating_sub(8)..];
    codec
        .decode(tail)
        .is_ok_and(|text| text.trim_end().ends_with(crate::reasoning::OPEN))
}

/// Wait for every choice to finish. Dropping this future (the client went away) drops the
/// receiver, which the engine notices at its next step.
async fn collect(
    mut receiver: UnboundedReceiver<Update>,
    total: usize,
    constraint_field: Option<&'static str>,
) -> Result<Vec<Choice>, ApiError> {
    let mut choices = vec![Choice::default(); total];
    let mut done = 0;
    while done < total {
        match receiver.recv().await {
            // A scored prompt's tokens come before the choice's first token.
            Some(Update::Prompt { index, tokens }) => {
                if let Some(choice) = choices.get_mut(index) {
                    choice.prompt.extend(tokens);
                }
            }
            Some(Update::Token {
                index,
                id,
                text,
                logprob,
                top_logprobs,
                trace,
            }) => {
                if let Some(choice) = choices.get_mut(index) {
                    choice.text.push_str(&text);
                    choice.tokens.push(TokenReport {
                        id,
                        logprob: Some(logprob),
                        top: top_logprobs,
                        trace,
                    });
                }
            }
            Some(Update::Done {
                index,
                finish_reason: reason,
                prompt_tokens,
                completion_tokens,
            }) => {
                if let Some(choice) = choices.get_mut(index) {
                    choice.finish_reason = Some(finish_reason(reason));
                    choice.prompt_tokens = prompt_tokens;
                    choice.completion_tokens = completion_tokens;
                }
                done += 1;
            }
            Some(Update::Error {
                message, request, ..
            }) => {
                return Err(if request {
                    let message = format!("The output constraint cannot be met: {message}");
                    match constraint_field {
                        Some(field) => ApiError::invalid(field, message),
                        None => ApiError::bad_request(message),
                    }
                } else {
                    ApiError::internal(message)
                });
            }
            None => return Err(ApiError::draining()),
        }
    }
    Ok(choices)
}

/// A server-sent-event stream: chunks as the engine's updates come, then usage and `[DONE]`.
/// When the client goes away, the body (and with it the receiver) is dropped.
fn stream_response<C: TextCodec>(
    writer: ChunkWriter<C>,
    receiver: UnboundedReceiver<Update>,
    total: usize,
) -> Response {
    struct StreamState<C: TextCodec> {
        writer: ChunkWriter<C>,
        receiver: UnboundedReceiver<Update>,
        pending: VecDeque<String>,
        remaining: usize,
        ended: bool,
    }
    let pending: VecDeque<String> = writer.opening().into();
    let state = StreamState {
        writer,
        receiver,
        pending,
        remaining: total,
        ended: false,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(chunk) = st.pending.pop_front() {
                return Some((Ok::<_, Infallible>(chunk), st));
            }
            if st.ended {
                return None;
            }
            match st.receiver.recv().await {
                Some(update) => {
                    let finished = matches!(update, Update::Done { .. } | Update::Error { .. });
                    st.pending.extend(st.writer.update(update));
                    if finished {
                        st.remaining = st.remaining.saturating_sub(1);
                        if st.remaining == 0 {
                            st.pending.extend(st.writer.closing());
                            st.ended = true;
                        }
                    }
                }
                // The engine stopped (shutdown past the drain timeout): end without [DONE].
                None => st.ended = true,
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| ApiError::internal("building the stream").into_response())
}
