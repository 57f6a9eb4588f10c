//! [`ConstrainError`]: what building or running a constraint fails with.

/// Errors of kindle-constrain. `source` names where the constraint came from: a flag
/// (`--json-schema`, `--regex`, ...) or a request field (`response_format`, `guided_regex`).
#[derive(Debug, thiserror::Error)]
pub enum ConstrainError {
    /// The JSON schema is not JSON.
    #[error("{source_name}: not valid JSON at line {line}, column {column}: {message}")]
    NotJson {
        /// The flag or field.
        source_name: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// The schema, regex or grammar was refused by the grammar compiler (its message gives the
    /// position: the regex with a caret, the grammar's line and column, the schema's keyword).
    #[error("{source_name}: invalid {kind}: {message}")]
    Invalid {
        /// The flag or field.
        source_name: String,
        /// `JSON schema`, `regex`, `choice list` or `grammar` (Lark or GBNF).
        kind: &'static str,
        /// The compiler's description.
        message: String,
    },
    /// The GBNF grammar (llama.cpp's format) does not parse, has no `root` rule or refers to a
    /// rule it never defines.
    #[error("{source_name}: invalid GBNF at line {line}, column {column}: {message}")]
    Gbnf {
        /// The flag or field (`grammar` from [`crate::gbnf_to_lark`] itself).
        source_name: String,
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem, in characters.
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// The vocabulary cannot be used (no end-of-generation token).
    #[error("the vocabulary cannot be constrained: {0}")]
    Vocabulary(String),
    /// The generation loop appended a token the constraint does not allow.
    #[error("token {token} is not allowed by the constraint: {message}")]
    Rejected {
        /// The token id.
        token: u32,
        /// The grammar engine's description.
        message: String,
    },
    /// The grammar engine failed while computing a mask.
    #[error("the grammar engine failed: {0}")]
    Engine(String),
}
