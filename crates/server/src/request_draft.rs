//! The drafting fields of a generation request: `kindle_lookup_ngram`, `kindle_draft_max`,
//! `kindle_draft_min` and `kindle_draft_p_min` (see [`crate::request`]).

use kindle_generate::{DEFAULT_LOOKUP_DRAFT_MAX, MAX_DRAFT};

use crate::error::ApiError;
use crate::fields::{Object, integer, number};

/// Prompt-lookup drafting for one request (see [`DraftAsk::Lookup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup {
    /// The longest n-gram matched.
    pub ngram: usize,
    /// Most tokens drafted per step.
    pub draft_max: usize,
    /// The shortest draft verified (`kindle_draft_min`; 0 or 1: every draft).
    pub draft_min: usize,
}

/// What a request says about speculative decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DraftAsk {
    /// Nothing: the server's draft model drafts (`kindle serve --draft-model`), where there
    /// is one and the request can be drafted for (not traced, no mirostat).
    #[default]
    ServerDefault,
    /// `kindle_draft_max: 0`: no drafting.
    Off,
    /// `kindle_lookup_ngram` (with `kindle_draft_max`, default 4): prompt lookup.
    Lookup(Lookup),
    /// `kindle_draft_max` alone (1-14): the server's draft model, this many tokens a step
    /// (a 400 where the server has none).
    Model {
        /// Most tokens drafted per step.
        draft_max: usize,
    },
}

/// Longest n-gram `kindle_lookup_ngram` takes.
pub const MAX_LOOKUP_NGRAM: i64 = 16;

/// `kindle_draft_p_min` (0-1), where the request drafts with the server's draft model (the
/// default, or `kindle_draft_max` alone; whether the server has one is checked with the
/// server's state).
pub(crate) fn draft_p_min(
    object: &Object,
    draft: DraftAsk,
    trace: bool,
) -> Result<Option<f32>, ApiError> {
    let Some(p) = number(object, "kindle_draft_p_min", 0.0, 1.0)? else {
        return Ok(None);
    };
    let why = match draft {
        DraftAsk::ServerDefault | DraftAsk::Model { .. } => return Ok(Some(p as f32)),
        DraftAsk::Lookup(_) => "prompt lookup ('kindle_lookup_ngram') drafts without probabilities",
        DraftAsk::Off => off_reason(trace),
    };
    Err(ApiError::invalid(
        "kindle_draft_p_min",
        format!("'kindle_draft_p_min' ends the server's draft model's drafts: {why}."),
    ))
}

/// Why a request does not draft ([`DraftAsk::Off`]): it is traced, or `kindle_draft_max` is 0.
fn off_reason(trace: bool) -> &'static str {
    if trace {
        "'kindle_trace' turns drafting off (verified tokens are not traced)"
    } else {
        "'kindle_draft_max': 0 turns drafting off"
    }
}

/// `kindle_draft_min` (0-14): the shortest draft verified, whichever drafter the request
/// drafts with; at most its draft length where the request gives it (prompt lookup's, or
/// `kindle_draft_max`; against the server's draft model's default, and whether the server has
/// one, it is checked with the server's state).
pub(crate) fn draft_min(
    object: &Object,
    draft: DraftAsk,
    trace: bool,
) -> Result<Option<usize>, ApiError> {
    let Some(min) = integer(object, "kindle_draft_min", 0, MAX_DRAFT as i64)? else {
        return Ok(None);
    };
    let min = min as usize;
    let max = match draft {
        DraftAsk::ServerDefault => return Ok(Some(min)),
        DraftAsk::Lookup(lookup) => lookup.draft_max,
        DraftAsk::Model { draft_max } => draft_max,
        DraftAsk::Off => {
            return Err(ApiError::invalid(
                "kindle_draft_min",
                format!(
                    "'kindle_draft_min' sets the shortest draft verified: {}.",
                    off_reason(trace)
                ),
            ));
        }
    };
    if min > max {
        return Err(ApiError::invalid(
            "kindle_draft_min",
            format!(
                "'kindle_draft_min' ({min}) is more than the request's longest draft ({max}): no draft would be verified."
            ),
        ));
    }
    Ok(Some(min))
}

/// `kindle_lookup_ngram` (1-16) with `kindle_draft_max` (1-14, default 4): prompt lookup;
/// `kindle_draft_max` alone: 0 turns drafting off, 1-14 sets the server's draft model's draft
/// length (whether the server has one is checked with the server's state).
pub(crate) fn draft_ask(object: &Object, trace: bool) -> Result<DraftAsk, ApiError> {
    let ngram = integer(object, "kindle_lookup_ngram", 1, MAX_LOOKUP_NGRAM)?;
    // At most `kindle_generate::MAX_DRAFT`: a verification pass keeps a one-token pass's bits.
    let draft_max = integer(object, "kindle_draft_max", 0, MAX_DRAFT as i64)?;
    let traced = |field: &str| {
        Err(ApiError::invalid(
            field,
            format!(
                "'{field}' cannot be combined with 'kindle_trace' (verified tokens are not traced)."
            ),
        ))
    };
    let Some(ngram) = ngram else {
        return match draft_max {
            None if trace => Ok(DraftAsk::Off),
            None => Ok(DraftAsk::ServerDefault),
            Some(0) => Ok(DraftAsk::Off),
            Some(_) if trace => traced("kindle_draft_max"),
            Some(k) => Ok(DraftAsk::Model {
                draft_max: k as usize,
            }),
        };
    };
    if trace {
        return traced("kindle_lookup_ngram");
    }
    if draft_max == Some(0) {
        return Err(ApiError::invalid(
            "kindle_draft_max",
            "'kindle_draft_max' must be between 1 and 14 with 'kindle_lookup_ngram' (0 turns drafting off: drop 'kindle_lookup_ngram').",
        ));
    }
    Ok(DraftAsk::Lookup(Lookup {
        ngram: ngram as usize,
        draft_max: draft_max.map_or(DEFAULT_LOOKUP_DRAFT_MAX, |k| k as usize),
        draft_min: 0,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fields::parse_object;

    fn obj(json: &str) -> Object {
        parse_object(json.as_bytes()).unwrap()
    }

    #[test]
    fn lookup_drafts_four_tokens_unless_told() {
        let ask = |json| draft_ask(&obj(json), false).unwrap();
        assert_eq!(
            ask(r#"{"kindle_lookup_ngram":3}"#),
            DraftAsk::Lookup(Lookup {
                ngram: 3,
                draft_max: DEFAULT_LOOKUP_DRAFT_MAX,
                draft_min: 0,
            })
        );
        assert_eq!(DEFAULT_LOOKUP_DRAFT_MAX, 4);
        assert_eq!(
            ask(r#"{"kindle_lookup_ngram":2,"kindle_draft_max":8}"#),
            DraftAsk::Lookup(Lookup {
                ngram: 2,
                draft_max: 8,
                draft_min: 0,
            })
        );
    }

    #[test]
    fn a_draft_minimum_goes_with_the_draft_model_only() {
        let p_min = |json: &str, trace| {
            let object = obj(json);
            draft_p_min(&object, draft_ask(&object, trace)?, trace)
        };
        assert_eq!(
            p_min(r#"{"kindle_draft_p_min":0.75}"#, false).unwrap(),
            Some(0.75)
        );
        assert_eq!(
            p_min(r#"{"kindle_draft_p_min":0,"kindle_draft_max":4}"#, false).unwrap(),
            Some(0.0)
        );
        assert_eq!(p_min(r#"{}"#, false).unwrap(), None);
        for (json, trace, needle) in [
            (r#"{"kindle_draft_p_min":1.5}"#, false, "kindle_draft_p_min"),
            (
                r#"{"kindle_draft_p_min":"high"}"#,
                false,
                "kindle_draft_p_min",
            ),
            (
                r#"{"kindle_draft_p_min":0.5,"kindle_lookup_ngram":2}"#,
                false,
                "prompt lookup",
            ),
            (
                r#"{"kindle_draft_p_min":0.5,"kindle_draft_max":0}"#,
                false,
                "turns drafting off",
            ),
            (r#"{"kindle_draft_p_min":0.5}"#, true, "'kindle_trace'"),
        ] {
            let err = p_min(json, trace).unwrap_err();
            assert_eq!(err.param.as_deref(), Some("kindle_draft_p_min"), "{json}");
            assert!(err.message.contains(needle), "{json}: {}", err.message);
        }
    }

    #[test]
    fn a_draft_length_minimum_is_at_most_the_requests_longest_draft() {
        let min = |json: &str, trace| {
            let object = obj(json);
            draft_min(&object, draft_ask(&object, trace)?, trace)
        };
        assert_eq!(min(r#"{"kindle_draft_min":3}"#, false).unwrap(), Some(3));
        assert_eq!(
            min(r#"{"kindle_draft_min":4,"kindle_lookup_ngram":2}"#, false).unwrap(),
            Some(4)
        );
        assert_eq!(
            min(r#"{"kindle_draft_min":6,"kindle_draft_max":6}"#, false).unwrap(),
            Some(6)
        );
        assert_eq!(min(r#"{}"#, false).unwrap(), None);
        for (json, trace, needle) in [
            (r#"{"kindle_draft_min":15}"#, false, "kindle_draft_min"),
            (r#"{"kindle_draft_min":-1}"#, false, "kindle_draft_min"),
            (r#"{"kindle_draft_min":2.5}"#, false, "kindle_draft_min"),
            (
                r#"{"kindle_draft_min":5,"kindle_lookup_ngram":2}"#,
                false,
                "more than the request's longest draft (4)",
            ),
            (
                r#"{"kindle_draft_min":7,"kindle_draft_max":6}"#,
                false,
                "more than the request's longest draft (6)",
            ),
            (
                r#"{"kindle_draft_min":2,"kindle_draft_max":0}"#,
                false,
                "turns drafting off",
            ),
            (r#"{"kindle_draft_min":2}"#, true, "'kindle_trace'"),
        ] {
            let err = min(json, trace).unwrap_err();
            assert_eq!(err.param.as_deref(), Some("kindle_draft_min"), "{json}");
            assert!(err.message.contains(needle), "{json}: {}", err.message);
        }
    }
}
