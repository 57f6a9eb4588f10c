//! C-compatible FFI bindings for llguidance.
//!
//! This module exposes the llguidance constrained-decoding engine to C (and
//! other languages that can call C functions). It is the API surface behind
//! the generated `llguidance.h` header.
//!
//! # Typical usage
//!
//! 1. **Create a tokenizer** — fill in [`LlgTokenizerInit`] (or
//!    [`LlgTokenizerInitV2`] for multiple EOS tokens) and call
//!    [`llg_new_tokenizer()`] (or [`llg_new_tokenizer_v2()`]).
//! 2. **Create a constraint** — fill in [`LlgConstraintInit`] (use
//!    [`llg_constraint_init_set_defaults()`] for sane defaults) and call one
//!    of the `llg_new_constraint*` functions, e.g. [`llg_new_constraint()`],
//!    [`llg_new_constraint_json()`], or [`llg_new_constraint_regex()`].
//! 3. **Sampling loop** — repeatedly call [`llg_compute_mask()`] to get the
//!    set of allowed tokens, sample a token from the LLM, then call
//!    [`llg_commit_token()`]. Stop when the result indicates completion.
//! 4. **Free resources** — call [`llg_free_constraint()`] and
//!    [`llg_free_tokenizer()`].
//!
//! Alternatively, the **matcher** API ([`llg_new_matcher()`] and the
//! `llg_matcher_*` family) provides a lower-level interface for grammar
//! validation and incremental token matching.

use std::{
    ffi::{c_char, c_void, CStr},
    fmt::Display,
    panic::AssertUnwindSafe,
    sync::Arc,
};

use anyhow::{bail, ensure, Result};
use toktrie::{
    ApproximateTokEnv, InferenceCapabilities, SimpleVob, TokEnv, TokRxInfo, TokTrie, TokenizerEnv,
    INVALID_TOKEN,
};

use crate::{
    api::{GrammarInit, ParserLimits, TopLevelGrammar},
    earley::{SlicedBiasComputer, ValidationResult},
    panic_utils, CancellationHandle, CommitResult, Constraint, Logger, Matcher, ParserFactory,
    StopController, TokenParser,
};

// ---------------------------------------------------------------------------
// FFI panic-safety helpers
// ---------------------------------------------------------------------------

/// Convert a string into a NUL-terminated `String` suitable for returning
/// as `*const c_char` via `.as_ptr()`.
///
/// Any interior NUL bytes are replaced with `\0` (the two-character escape)
/// to maintain the C string invariant.
fn make_c_string(s: impl Into<String>) -> String {
    let mut s = s.into();
    // Replace interior NULs so the C string isn't accidentally truncated.
    if s.contains('\0') {
        s = s.replace('\0', "\\0");
    }
    s.push('\0');
    s
}

/// Wraps an FFI function body that returns a pointer (non-null on success, null
/// on error). If `f` panics, writes the panic message into `error_string` and
/// returns null.
///
/// Use for functions like `llg_new_tokenizer` that report errors via a
/// caller-provided buffer.
fn ffi_guard_ptr<T>(
    f: impl FnOnce() -> *mut T + std::panic::UnwindSafe,
    error_string: *mut c_char,
    error_string_len: usize,
) -> *mut T {
    match panic_utils::catch_unwind(|| Ok(f())) {
        Ok(ptr) => ptr,
        Err(e) => {
            // SAFETY: save_error_string handles null/zero-len gracefully
            unsafe { save_error_string(e, error_string, error_string_len) };
            std::ptr::null_mut()
        }
    }
}

/// Wraps an FFI function body that returns `*mut LlgConstraint`.
/// On panic, returns a constraint handle in an error state (consistent with
/// the "always returns non-null" contract of `llg_new_constraint*`).
fn ffi_guard_constraint(
    f: impl FnOnce() -> *mut LlgConstraint + std::panic::UnwindSafe,
) -> *mut LlgConstraint {
    match panic_utils::catch_unwind(|| Ok(f())) {
        Ok(ptr) => ptr,
        Err(e) => {
            let mut res = LlgConstraint::default();
            res.set_error(&e.to_string());
            Box::into_raw(Box::new(res))
        }
    }
}

struct CTokenizerInner {
    trie: TokTrie,
    tokenize_fn: LlgTokenizeFn,
    tokenize_user_data: *const c_void,
    tokenize_assumes_string: bool,
}

// SAFETY: `CTokenizerInner` is `Send` because:
// - `trie` (TokTrie) is a plain data structure with no interior mutability.
// - `tokenize_fn` is `Option<extern "C" fn(...)>` — function pointers are
//   inherently `Send`.
// - `tokenize_user_data` is a raw `*const c_void`. The C API documentation
//   requires that `tokenize_fn` (and any data it accesses via `user_data`) be
//   thread-safe. This is the caller's contractual obligation.
unsafe impl Send for CTokenizerInner {}

// SAFETY: `CTokenizerInner` is `Sync` because:
// - `trie` is `Sync` (immutable after construction).
// - `tokenize_fn` is a function pointer (trivially `Sync`).
// - `tokenize_user_data` is never mutated through `&self`; the C caller
//   guarantees that concurrent calls to `tokenize_fn` with the same
//   `user_data` are safe (documented requirement).
unsafe impl Sync for CTokenizerInner {}

impl CTokenizerInner {
    fn raw_tokenize(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        if let Some(tokenize_fn) = self.tokenize_fn {
            let mut res_toks = vec![0; s.len() / 4 + 5];
            let n_toks = tokenize_fn(
                self.tokenize_user_data,
                s.as_ptr(),
                s.len(),
                res_toks.as_mut_ptr(),
                res_toks.len(),
            );

            if n_toks > res_toks.len() {
                res_toks.resize(n_toks, 0);
                tokenize_fn(
                    self.tokenize_user_data,
                    s.as_ptr(),
                    s.len(),
                    res_toks.as_mut_ptr(),
                    res_toks.len(),
                );
            }

            res_toks.truncate(n_toks);
            res_toks
        } else {
            self.trie.greedy_tokenize(s)
        }
    }
}

impl TokenizerEnv for CTokenizerInner {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<toktrie::TokenId> {
        if self.tokenize_assumes_string {
            self.trie
                .tokenize_with_greedy_fallback(s, |s| self.raw_tokenize(s.as_bytes()))
        } else {
            self.raw_tokenize(s)
        }
    }

    fn tokenize_is_canonical(&self) -> bool {
        self.tokenize_fn.is_some()
    }
}

/// Tokenizer handle used by the C API.
///
/// Wraps a [`ParserFactory`] and the associated token environment. Create one
/// with [`llg_new_tokenizer()`] or [`llg_new_tokenizer_v2()`], and free it
/// with [`llg_free_tokenizer()`].
#[derive(Clone)]
pub struct LlgTokenizer {
    factory: Arc<ParserFactory>,
}

/// Create a slice from a raw pointer and length.
///
/// Returns `Ok(&[])` when `len` is 0, and `Err` when `data` is null but
/// `len > 0`.
///
/// # Safety
/// - If `len > 0`, `data` must point to `len` consecutive properly-initialized
///   elements of type `T`, and the resulting slice must not be used beyond
///   lifetime `'a`.
/// - `data` must be properly aligned for `T`.
/// - The memory referenced must not be mutated during lifetime `'a` (standard
///   shared-reference rules).
unsafe fn slice_from_ptr<'a, T>(data: *const T, len: usize) -> Result<&'a [T]> {
    if len == 0 {
        return Ok(&[]);
    }
    if data.is_null() {
        bail!("Null pointer");
    }
    Ok(std::slice::from_raw_parts(data, len))
}

/// Create a slice from a raw pointer and length, returning an empty slice for
/// null or zero-length inputs (never fails).
///
/// # Safety
/// - If `len > 0` and `data` is non-null, `data` must point to `len`
///   consecutive properly-initialized elements of type `T`.
/// - `data` must be properly aligned for `T`.
/// - The memory referenced must not be mutated during lifetime `'a`.
unsafe fn slice_from_ptr_or_empty<'a, T>(data: *const T, len: usize) -> &'a [T] {
    if len == 0 || data.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(data, len)
    }
}

impl LlgTokenizer {
    fn from_init(init: &LlgTokenizerInit) -> Result<Self> {
        Self::from_init_v2(&LlgTokenizerInitV2::from_v1(init))
    }

    fn from_init_v2(init: &LlgTokenizerInitV2) -> Result<Self> {
        ensure!(
            init.tokenize_fn.is_some() || init.use_approximate_greedy_tokenize_fn,
            "Either tokenize_fn or use_approximate_greedy_tokenize_fn must be set"
        );
        let tokens = if init.tokenizer_json.is_null() {
            ensure!(
                !init.token_lens.is_null() && !init.token_bytes.is_null(),
                "token_lens and token_bytes must be set"
            );
            // SAFETY: see comments on the struct definition
            let token_lens = unsafe { slice_from_ptr(init.token_lens, init.vocab_size as usize) }?;
            let total_len = token_lens.iter().sum::<u32>();
            let token_bytes = unsafe { slice_from_ptr(init.token_bytes, total_len as usize) }?;

            let mut tokens = vec![];
            let mut ptr = 0;
            for len in token_lens {
                let token = &token_bytes[ptr..ptr + *len as usize];
                tokens.push(token.to_vec());
                ptr += *len as usize;
            }
            tokens
        } else {
            let tokenizer_json = unsafe { c_str_to_str(init.tokenizer_json, "tokenizer_json") }?;
            let tokenizer_json = serde_json::from_str(tokenizer_json)
                .map_err(|e| anyhow::anyhow!("Invalid JSON in tokenizer_json: {e}"))?;
            let mut token_bytes =
                crate::tokenizer_json::token_bytes_from_tokenizer_json(&tokenizer_json)?;

            let sz = init.vocab_size as usize;
            if token_bytes.len() < sz {
                token_bytes.resize(sz, vec![]);
            }

            token_bytes
        };

        let vocab_size = tokens.len() as u32;
        ensure!(
            init.tok_eos == INVALID_TOKEN || init.tok_eos < vocab_size,
            "EOS token ID {} is out of range (vocab_size={vocab_size})",
            init.tok_eos
        );

        let mut trie = TokTrie::from(&TokRxInfo::new(vocab_size, init.tok_eos), &tokens);

        // Apply additional EOS tokens if provided
        if !init.tok_eos_extra.is_null() && init.tok_eos_extra_count > 0 {
            let extra = unsafe {
                std::slice::from_raw_parts(init.tok_eos_extra, init.tok_eos_extra_count as usize)
            };
            let mut eos_tokens = vec![init.tok_eos];
            eos_tokens.extend_from_slice(extra);

            let vocab_size = trie.vocab_size() as u32;
            for &id in &eos_tokens {
                ensure!(
                    id < vocab_size,
                    "EOS token ID {id} is out of range (vocab_size={vocab_size})"
                );
            }

            trie = trie.with_eos_tokens(&eos_tokens);
        }

        let tok_env: TokEnv = Arc::new(CTokenizerInner {
            trie,
            tokenize_assumes_string: init.tokenize_assumes_string && init.tokenize_fn.is_some(),
            tokenize_fn: init.tokenize_fn,
            tokenize_user_data: init.tokenize_user_data,
        });

        let slices = if init.slices.is_null() {
            SlicedBiasComputer::general_slices()
        } else {
            let mut slices = vec![];
            let mut idx = 0;
            loop {
                let p = unsafe { *init.slices.add(idx) };
                if p.is_null() {
                    break;
                }
                let s = unsafe { c_str_to_str(p, "slice") }?;
                slices.push(s.to_string());
                idx += 1;
            }
            slices
        };

        let factory = ParserFactory::new(&tok_env, InferenceCapabilities::default(), &slices)?;

        Ok(LlgTokenizer {
            factory: Arc::new(factory),
        })
    }

    /// Return a cloned reference to the token environment.
    pub fn to_env(&self) -> TokEnv {
        self.factory.tok_env().clone()
    }

    /// Return a reference to the token environment.
    pub fn tok_env(&self) -> &TokEnv {
        self.factory.tok_env()
    }

    /// Return a reference to the token trie.
    pub fn tok_trie(&self) -> &TokTrie {
        self.factory.tok_env().tok_trie()
    }

    /// Return a reference to the underlying [`ParserFactory`].
    pub fn factory(&self) -> &ParserFactory {
        &self.factory
    }
}

/// Token ID type used throughout the C API (alias for `u32`).
pub type LlgToken = u32;

/// Tokenization function.
///
/// Will not write more than `output_tokens_len` tokens (which can be 0).
/// Returns the total number of tokens (which can be more than
/// `output_tokens_len`).
///
/// **This function must be thread-safe.**
pub type LlgTokenizeFn = Option<
    extern "C" fn(
        user_data: *const c_void,
        bytes: *const u8,
        bytes_len: usize,
        output_tokens: *mut u32,
        output_tokens_len: usize,
    ) -> usize,
>;

/// Callback that llguidance invokes when an operation completes.
pub type LlgCallback = Option<extern "C" fn(user_data: *const c_void)>;

/// V1 tokenizer initialization parameters.
///
/// This struct must be zero-initialized (e.g., `= {}` in C/C++) before setting fields.
/// New fields may be appended in future versions, and zero-initialization ensures
/// they receive safe default values.
///
/// For multi-EOS support, use [`LlgTokenizerInitV2`] with [`llg_new_tokenizer_v2()`]
/// instead.
#[repr(C)]
pub struct LlgTokenizerInit {
    /// The number of tokens in the vocabulary.
    pub vocab_size: u32,

    /// The token ID for the end-of-sentence token.
    /// For chat mode, set this to the end-of-turn token.
    pub tok_eos: LlgToken,

    /// An array of the lengths of the token strings (`vocab_size` elements).
    pub token_lens: *const u32,

    /// A pointer to the token strings.
    /// The length of this is the sum of all `token_lens`.
    pub token_bytes: *const u8,

    /// Instead of passing `token_lens` and `token_bytes`, this can be set to
    /// the contents of a HuggingFace `tokenizer.json` file.
    pub tokenizer_json: *const c_char,

    /// Set to true to enable a workaround for tokenize functions that only
    /// accept valid UTF-8 strings and possibly prepend `<BOS>` etc.
    /// TODO: the `<BOS>` bit is not implemented yet.
    pub tokenize_assumes_string: bool,

    /// Tokenization function; see [`LlgTokenizeFn`] for details.
    /// It should only tokenize the bytes and not add
    /// any `<BOS>` etc. It should also work on any byte sequence, including
    /// invalid UTF-8. If this is not the case, set `tokenize_assumes_string` to true.
    /// Either way, this function must be thread-safe.
    pub tokenize_fn: LlgTokenizeFn,

    /// Set to true to skip `tokenize_fn` and instead tokenize greedily,
    /// which is often incorrect and may reduce accuracy.
    pub use_approximate_greedy_tokenize_fn: bool,

    /// User data passed as the first argument to [`LlgTokenizeFn`].
    pub tokenize_user_data: *const c_void,

    /// Tokenizer partitions for the slicer optimization.
    /// This is array of pointers to strings, terminated with NULL (argv style).
    /// Pass NULL to use defaults. Pass empty array to disable.
    pub slices: *const *const c_char,
}

/// V2 tokenizer initialization parameters.
///
/// Extends [`LlgTokenizerInit`] with support for multiple EOS tokens.
/// Use with [`llg_new_tokenizer_v2()`].
///
/// Initialize with: `LlgTokenizerInitV2 init = {}; init.struct_size = sizeof(init);`
/// The library only reads `struct_size` bytes from the pointer, so callers
/// compiled against an older header (with a smaller struct) will work with
/// newer library versions — any new fields default to zero.
#[repr(C)]
pub struct LlgTokenizerInitV2 {
    /// Must be set to `sizeof(LlgTokenizerInitV2)`.
    /// The library uses this to determine how many bytes to read, enabling
    /// forward compatibility when new fields are appended in future versions.
    pub struct_size: usize,

    /// The number of tokens in the vocabulary.
    pub vocab_size: u32,

    /// The token ID for the end-of-sentence token.
    /// For chat mode, set this to the end-of-turn token.
    pub tok_eos: LlgToken,

    /// An array of the lengths of the token strings (`vocab_size` elements).
    pub token_lens: *const u32,

    /// A pointer to the token strings.
    /// The length of this is the sum of all `token_lens`.
    pub token_bytes: *const u8,

    /// Instead of passing `token_lens` and `token_bytes`, this can be set to
    /// the contents of a HuggingFace `tokenizer.json` file.
    pub tokenizer_json: *const c_char,

    /// Set to true to enable a workaround for tokenize functions that only
    /// accept valid UTF-8 strings and possibly prepend `<BOS>` etc.
    /// TODO: the `<BOS>` bit is not implemented yet.
    pub tokenize_assumes_string: bool,

    /// Tokenization function; see [`LlgTokenizeFn`] for details.
    /// It should only tokenize the bytes and not add
    /// any `<BOS>` etc. It should also work on any byte sequence, including
    /// invalid UTF-8. If this is not the case, set `tokenize_assumes_string` to true.
    /// Either way, this function must be thread-safe.
    pub tokenize_fn: LlgTokenizeFn,

    /// Set to true to skip `tokenize_fn` and instead tokenize greedily,
    /// which is often incorrect and may reduce accuracy.
    pub use_approximate_greedy_tokenize_fn: bool,

    /// User data passed as the first argument to [`LlgTokenizeFn`].
    pub tokenize_user_data: *const c_void,

    /// Tokenizer partitions for the slicer optimization.
    /// This is array of pointers to strings, terminated with NULL (argv style).
    /// Pass NULL to use defaults. Pass empty array to disable.
    pub slices: *const *const c_char,

    /// Additional EOS token IDs beyond [`tok_eos`](Self::tok_eos).
    /// Points to an array of [`tok_eos_extra_count`](Self::tok_eos_extra_count) elements.
    /// When `NULL` (the default for zero-initialized structs), only `tok_eos` is used.
    pub tok_eos_extra: *const LlgToken,

    /// Number of elements in the [`tok_eos_extra`](Self::tok_eos_extra) array.
    pub tok_eos_extra_count: u32,
}

impl LlgTokenizerInitV2 {
    fn from_v1(v1: &LlgTokenizerInit) -> Self {
        LlgTokenizerInitV2 {
            struct_size: std::mem::size_of::<LlgTokenizerInitV2>(),
            vocab_size: v1.vocab_size,
            tok_eos: v1.tok_eos,
            token_lens: v1.token_lens,
            token_bytes: v1.token_bytes,
            tokenizer_json: v1.tokenizer_json,
            tokenize_assumes_string: v1.tokenize_assumes_string,
            tokenize_fn: v1.tokenize_fn,
            use_approximate_greedy_tokenize_fn: v1.use_approximate_greedy_tokenize_fn,
            tokenize_user_data: v1.tokenize_user_data,
            slices: v1.slices,
            tok_eos_extra: std::ptr::null(),
            tok_eos_extra_count: 0,
        }
    }
}

/// Configuration for creating a new constraint or matcher.
///
/// This struct does not include a `struct_size` field for forward
/// compatibility (unlike [`LlgTokenizerInitV2`]). Callers **must**
/// zero-initialize the struct before populating fields — for example,
/// with `= {}` in C/C++ or `memset` — so that any fields added in
/// future versions default to zero. The recommended pattern is to call
/// [`llg_constraint_init_set_defaults()`] to populate sane defaults,
/// then override individual fields as needed.
#[derive(Clone)]
#[repr(C)]
pub struct LlgConstraintInit {
    /// The tokenizer to use, created with [`llg_new_tokenizer()`] or
    /// [`llg_new_tokenizer_v2()`].
    pub tokenizer: *const LlgTokenizer,
    /// The log level for the buffer that is kept inside the constraint.
    /// 0 — no logging, 1 — warnings only, 2 — info.
    pub log_buffer_level: u32,
    /// The log level for writing to stderr.
    pub log_stderr_level: u32,
    /// Whether the engine supports fast-forward tokens
    /// (appending more than one token to output at once).
    pub ff_tokens_ok: bool,
    /// Whether the engine supports backtracking
    /// (removing tokens from the output).
    pub backtrack_ok: bool,
    /// The resource limits for the parser.
    /// Default values will be used for all fields that are 0.
    pub limits: ParserLimits,
}

impl LlgConstraintInit {
    /// Build a [`Logger`] from the configured log levels.
    pub fn logger(&self) -> Logger {
        Logger::new(self.log_buffer_level, self.log_stderr_level)
    }

    /// Build [`InferenceCapabilities`] from this configuration.
    pub fn inference_capabilities(&self) -> InferenceCapabilities {
        InferenceCapabilities {
            ff_tokens: self.ff_tokens_ok,
            backtrack: self.backtrack_ok,
            conditional_ff_tokens: false,
            fork: false,
        }
    }

    /// Return a reference to the [`ParserFactory`] from the stored tokenizer.
    ///
    /// Returns an error if the tokenizer pointer is null.
    pub fn factory(&self) -> Result<&ParserFactory> {
        if self.tokenizer.is_null() {
            bail!("Tokenizer is null");
        }
        // SAFETY: the C caller needs to ensure that the tokenizer remains valid
        Ok(unsafe { &(*self.tokenizer).factory })
    }

    /// Compile `grammar` into a [`TokenParser`].
    pub fn build_parser(&self, grammar: TopLevelGrammar) -> Result<TokenParser> {
        self.factory()?.create_parser_from_init_ext(
            GrammarInit::Serialized(grammar),
            self.logger(),
            self.inference_capabilities(),
            self.limits.clone(),
        )
    }

    /// Compile `grammar` into a [`Constraint`].
    pub fn build_constraint(&self, grammar: TopLevelGrammar) -> Result<Constraint> {
        let parser = self.build_parser(grammar)?;
        Ok(Constraint::new(parser))
    }
}

/// Describes one step for [`llg_par_compute_mask()`].
///
/// Each step pairs a constraint with a destination buffer for the resulting
/// token mask.
#[derive(Clone)]
#[repr(C)]
pub struct LlgConstraintStep {
    /// The constraint to compute mask for.
    pub constraint: *mut LlgConstraint,
    /// Pointer to memory where the mask should be written.
    pub mask_dest: *mut u32,
    /// The length of the `mask_dest` array in bytes (not elements).
    pub mask_byte_len: usize,
}
// SAFETY: `LlgConstraintStep` contains raw pointers (`constraint`, `mask_dest`)
// that are not inherently `Send`. We implement `Send` because:
// - The caller of `llg_par_compute_mask()` guarantees that each step's pointers
//   remain valid and unaliased for the duration of the parallel computation.
// - Each step is processed by exactly one rayon worker (no sharing).
#[cfg(feature = "rayon")]
unsafe impl Send for LlgConstraintStep {}

/// Opaque handle to a grammar constraint.
///
/// Created by one of the `llg_new_constraint*` functions (e.g.
/// [`llg_new_constraint()`], [`llg_new_constraint_json()`]).
/// Always check for errors after creation with [`llg_get_error()`].
/// Free with [`llg_free_constraint()`] when done.
pub struct LlgConstraint {
    local_error: Option<String>,
    last_logs: String,
    pub(crate) constraint: Option<Constraint>,
    last_commit_result: CommitResult,
}

/// Handle to a stop-sequence controller.
///
/// Tracks generated tokens and detects when a stop sequence has been produced.
/// Created with [`llg_new_stop_controller()`] and freed with
/// [`llg_free_stop_controller()`].
#[derive(Clone)]
pub struct LlgStopController {
    stop_controller: StopController,
    last_result: String,
}

impl Clone for LlgConstraint {
    fn clone(&self) -> Self {
        LlgConstraint {
            local_error: self.local_error.clone(),
            last_logs: self.last_logs.clone(),
            constraint: self.constraint.clone(),
            last_commit_result: self.last_commit_result.clone(),
        }
    }
}

impl Default for LlgConstraint {
    fn default() -> Self {
        LlgConstraint {
            local_error: None,
            last_logs: "\x00".to_string(),
            constraint: None,
            last_commit_result: CommitResult::default(),
        }
    }
}

/// Result of [`llg_compute_mask()`].
#[repr(C)]
pub struct LlgMaskResult {
    /// One bit per vocab token.
    /// This is valid until any subsequent `llg_*` call on the same constraint.
    pub sample_mask: *const u32,
    /// Temperature to use for sampling.
    pub temperature: f32,
    /// Whether the sequence should stop.
    pub is_stop: bool,
}

/// Result of [`llg_commit_token()`].
#[repr(C)]
pub struct LlgCommitResult {
    /// The tokens to append to the output, if any.
    /// This is valid until any subsequent `llg_*` call on the same constraint.
    pub tokens: *const u32,
    /// The number of tokens in the `tokens` array (can be 0).
    pub n_tokens: u32,
    /// Whether the sequence should stop.
    pub is_stop: bool,
}

impl LlgCommitResult {
    /// Convert from an internal [`CommitResult`].
    pub fn from_commit_result(r: &CommitResult) -> Self {
        let len = r.ff_tokens.len() as u32;
        LlgCommitResult {
            tokens: if len == 0 {
                std::ptr::null()
            } else {
                r.ff_tokens.as_ptr()
            },
            n_tokens: len,
            is_stop: r.stop,
        }
    }
}

/// Convert a C string pointer to a Rust `&str`.
///
/// Returns `Err` if `c_str` is null or if the string is not valid UTF-8.
///
/// # Safety
/// - `c_str` must either be null or point to a valid NUL-terminated C string.
/// - The returned reference borrows from the pointee; the caller must ensure
///   the pointee outlives lifetime `'a`.
unsafe fn c_str_to_str<'a>(c_str: *const c_char, info: &str) -> Result<&'a str> {
    ensure!(!c_str.is_null(), "{info} is null");
    CStr::from_ptr(c_str)
        .to_str()
        .map_err(|_| anyhow::anyhow!("Invalid UTF-8 in {}", info))
}

fn new_constraint_str_cstr(
    init: &LlgConstraintInit,
    constraint_type: &str,
    data: *const c_char,
) -> Result<Constraint> {
    let data = unsafe { c_str_to_str(data, constraint_type) }?;
    let grammar = TopLevelGrammar::from_tagged_str(constraint_type, data)?;
    init.build_constraint(grammar)
}

fn new_constraint_cstr_cstr(
    init: &LlgConstraintInit,
    constraint_type: *const c_char,
    data: *const c_char,
) -> Result<Constraint> {
    let constraint_type = unsafe { c_str_to_str(constraint_type, "constraint_type") }?;
    let data = unsafe { c_str_to_str(data, "data") }?;
    let grammar = TopLevelGrammar::from_tagged_str(constraint_type, data)?;
    init.build_constraint(grammar)
}

fn new_constraint_tagged(
    init: &LlgConstraintInit,
    constraint_type: &str,
    data: *const c_char,
) -> *mut LlgConstraint {
    ffi_guard_constraint(AssertUnwindSafe(|| {
        constraint_to_llg(new_constraint_str_cstr(init, constraint_type, data))
    }))
}

impl LlgConstraint {
    fn get_error(&self) -> *const c_char {
        match &self.local_error {
            Some(e) => e.as_ptr() as *const c_char,
            None => std::ptr::null(),
        }
    }

    fn get_error_code(&self) -> i32 {
        if self.local_error.is_some() {
            -1
        } else {
            0
        }
    }

    pub(crate) fn set_error(&mut self, e: &str) {
        self.constraint = None;
        self.local_error = Some(make_c_string(e));
    }
}

/// Set default values for an [`LlgConstraintInit`].
///
/// Disables fast-forward tokens and backtracking, enables warnings on stderr,
/// and sets all logging to the buffer (retrieve with [`llg_flush_logs()`]).
/// You still need to set the `tokenizer` field manually.
#[no_mangle]
pub extern "C" fn llg_constraint_init_set_defaults(
    init: &mut LlgConstraintInit,
    tokenizer: *const LlgTokenizer,
) {
    *init = LlgConstraintInit {
        tokenizer,
        log_buffer_level: 0,
        log_stderr_level: 1,
        ff_tokens_ok: false,
        backtrack_ok: false,
        limits: ParserLimits::default(),
    };
}

/// Convert a [`Constraint`] result into a heap-allocated [`LlgConstraint`].
///
/// On `Ok`, the constraint is stored inside the returned handle. On `Err`, the
/// handle carries the error message (retrievable via [`llg_get_error()`]).
/// Always returns a non-null pointer.
pub fn constraint_to_llg(c: Result<Constraint>) -> *mut LlgConstraint {
    let mut res = LlgConstraint::default();

    match c {
        Ok(constraint) => res.constraint = Some(constraint),
        Err(e) => res.set_error(&e.to_string()),
    };

    Box::into_raw(Box::new(res))
}

/// Create a new constraint from a grammar JSON string.
///
/// Always returns a non-null value. Call [`llg_get_error()`] on the result to
/// check for errors.
#[no_mangle]
pub extern "C" fn llg_new_constraint(
    init: &LlgConstraintInit,
    llguidance: *const c_char,
) -> *mut LlgConstraint {
    new_constraint_tagged(init, "llguidance", llguidance)
}

/// Create a new constraint from a regular expression.
///
/// Always returns a non-null value. Call [`llg_get_error()`] on the result to
/// check for errors.
#[no_mangle]
pub extern "C" fn llg_new_constraint_regex(
    init: &LlgConstraintInit,
    regex: *const c_char,
) -> *mut LlgConstraint {
    new_constraint_tagged(init, "regex", regex)
}

/// Create a new constraint from a JSON schema.
///
/// Always returns a non-null value. Call [`llg_get_error()`] on the result to
/// check for errors.
#[no_mangle]
pub extern "C" fn llg_new_constraint_json(
    init: &LlgConstraintInit,
    json_schema: *const c_char,
) -> *mut LlgConstraint {
    new_constraint_tagged(init, "json_schema", json_schema)
}

/// Create a new constraint from a Lark grammar.
///
/// Always returns a non-null value. Call [`llg_get_error()`] on the result to
/// check for errors.
#[no_mangle]
pub extern "C" fn llg_new_constraint_lark(
    init: &LlgConstraintInit,
    lark: *const c_char,
) -> *mut LlgConstraint {
    new_constraint_tagged(init, "lark", lark)
}

/// Create a new constraint with a specified type.
///
/// `constraint_type` can be one of `"regex"`, `"json_schema"` (or `"json"`),
/// `"lark"`, `"llguidance"` (or `"guidance"`).
///
/// Always returns a non-null value. Call [`llg_get_error()`] on the result to
/// check for errors.
#[no_mangle]
pub extern "C" fn llg_new_constraint_any(
    init: &LlgConstraintInit,
    constraint_type: *const c_char,
    data: *const c_char,
) -> *mut LlgConstraint {
    ffi_guard_constraint(AssertUnwindSafe(|| {
        constraint_to_llg(new_constraint_cstr_cstr(init, constraint_type, data))
    }))
}

/// Get the error message from the constraint, or null if there is no error.
///
/// After it returns a non-null value, it will always return that same pointer
/// until the constraint is freed with [`llg_free_constraint()`] (at which
/// point the pointer becomes invalid).
#[no_mangle]
pub extern "C" fn llg_get_error(cc: &LlgConstraint) -> *const c_char {
    cc.get_error()
}

/// Get the current temperature of the constraint.
///
/// Updated by [`llg_compute_mask()`].
#[no_mangle]
pub extern "C" fn llg_get_temperature(cc: &LlgConstraint) -> f32 {
    cc.constraint.as_ref().map_or(0.0, |c| c.temperature)
}

/// Check whether the constraint is stopped (cannot be extended further).
#[no_mangle]
pub extern "C" fn llg_is_stopped(cc: &LlgConstraint) -> bool {
    if let Some(c) = &cc.constraint {
        c.step_result().is_stop()
    } else {
        // if there is no constraint, we consider it stopped
        true
    }
}

/// Compute the token mask for the next sampling step.
///
/// This typically takes up to a millisecond for a 100k tokenizer, so it should
/// be called on a background thread. Returns 0 on success and −1 on error
/// (use [`llg_get_error()`] to get the exact error). When 0 is returned, the
/// result is written to `*res_p`.
#[no_mangle]
#[must_use]
pub extern "C" fn llg_compute_mask(cc: &mut LlgConstraint, res_p: &mut LlgMaskResult) -> i32 {
    if let Some(constraint) = &mut cc.constraint {
        match constraint.compute_mask() {
            Ok(r) => {
                let r = LlgMaskResult {
                    sample_mask: r
                        .sample_mask
                        .as_ref()
                        .map_or(std::ptr::null(), |m| m.as_ptr()),
                    is_stop: r.is_stop(),
                    temperature: constraint.temperature,
                };
                *res_p = r;
            }
            Err(e) => cc.set_error(&e.to_string()),
        }
    }
    cc.get_error_code()
}

/// Commit the token sampled with the mask returned from [`llg_compute_mask()`].
///
/// Can be run on the critical path of sampling (it is fast). Returns 0 on
/// success and −1 on error (use [`llg_get_error()`] to get the exact error).
/// When 0 is returned, the result is written to `*res_p`.
#[no_mangle]
#[must_use]
pub extern "C" fn llg_commit_token(
    cc: &mut LlgConstraint,
    token: LlgToken,
    res_p: &mut LlgCommitResult,
) -> i32 {
    if let Some(constraint) = &mut cc.constraint {
        let trie = constraint.parser.token_env.tok_trie();
        let token = if token < trie.vocab_size() as LlgToken {
            Some(token)
        } else {
            None
        };
        match constraint.commit_token(token) {
            Ok(r) => {
                // store it, so it survives until the next call to llg_*()
                cc.last_commit_result = r;
                let res = LlgCommitResult::from_commit_result(&cc.last_commit_result);
                *res_p = res;
            }
            Err(e) => cc.set_error(&e.to_string()),
        }
    }
    cc.get_error_code()
}

/// Compute masks for several constraints in parallel.
///
/// When `done_cb` is non-null, this function returns immediately and the work
/// proceeds asynchronously on Rayon worker threads. The caller **must not**
/// read step results (masks, constraint state) until `done_cb` has been
/// invoked. Use a synchronization primitive (e.g., semaphore, condition
/// variable) in the callback to signal completion to the calling thread.
///
/// If `steps` is null but `n_steps > 0` (a caller bug), no work is performed
/// and `done_cb` is invoked immediately so async callers do not deadlock.
/// If the `rayon` feature is not enabled, each constraint is set
/// to an error state and the callback is invoked immediately.
///
/// # Safety
/// - `steps` must point to an array of `n_steps` valid [`LlgConstraintStep`]
///   elements. The `steps` array itself is copied immediately and need not
///   remain valid after this function returns.
/// - Each step's `constraint` pointer must remain valid and unaliased for the
///   duration of the parallel computation (until `done_cb` is invoked, or
///   until this function returns if `done_cb` is null).
/// - Each step's `mask_dest` must point to a buffer of at least
///   `mask_byte_len` bytes.
/// - All `mask_dest[..mask_byte_len]` regions across steps must be pairwise
///   non-overlapping until the computation completes, since steps are
///   processed concurrently by rayon workers.
/// - `user_data` is passed opaquely to `done_cb`; the caller must ensure it
///   remains valid until `done_cb` is invoked.
/// - When `done_cb` is non-null, it will be invoked on a Rayon worker thread
///   (not the calling thread). The callback and any state it accesses through
///   `user_data` must be safe for cross-thread invocation.
#[no_mangle]
pub unsafe extern "C" fn llg_par_compute_mask(
    steps: *const LlgConstraintStep,
    n_steps: usize,
    user_data: *const c_void,
    done_cb: LlgCallback,
) {
    // Perform all panic-prone preparation (null-check and copying the steps
    // array) inside catch_unwind. At this point we have NOT yet handed
    // `done_cb` off to anyone, so we remain solely responsible for invoking it
    // exactly once. If preparation fails, we invoke it below so that async
    // callers waiting on the callback do not deadlock.
    let prepared = panic_utils::catch_unwind(AssertUnwindSafe(|| {
        if steps.is_null() && n_steps != 0 {
            bail!("llg_par_compute_mask: steps is null but n_steps > 0");
        }
        // SAFETY: when n_steps > 0, steps is non-null (checked above). When
        // n_steps == 0 we avoid calling from_raw_parts with a possibly-null
        // pointer. The array is copied here so it need not outlive this call.
        let steps = if n_steps == 0 {
            Vec::new()
        } else {
            unsafe { std::slice::from_raw_parts(steps, n_steps).to_vec() }
        };
        Ok(steps)
    }));

    let steps = match prepared {
        Ok(steps) => steps,
        Err(_e) => {
            // Preparation failed (null mismatch or allocation panic) before we
            // handed `done_cb` off, so we still own it: invoke it exactly once
            // so the caller can unblock and observe that no masks were written.
            if let Some(cb) = done_cb {
                cb(user_data);
            }
            return;
        }
    };

    #[cfg(feature = "rayon")]
    {
        // `par_compute_mask` takes ownership of `done_cb` and guarantees it is
        // invoked exactly once, even if the rayon spawn itself fails.
        crate::ffi_par::par_compute_mask(steps, user_data, done_cb);
    }

    #[cfg(not(feature = "rayon"))]
    {
        // Without rayon, we cannot perform parallel computation.
        // Mark each constraint as errored so the caller can detect failure.
        // Wrap in catch_unwind so a panic here can't unwind across the FFI
        // boundary and still lets us invoke `done_cb` below.
        let _ = panic_utils::catch_unwind(AssertUnwindSafe(|| {
            for step in &steps {
                if !step.constraint.is_null() {
                    // SAFETY: the caller guarantees each non-null constraint
                    // pointer is valid and unaliased for the duration of this
                    // call (documented in the `# Safety` section above).
                    let cc = unsafe { &mut *step.constraint };
                    cc.set_error("llg_par_compute_mask: rayon feature is not enabled");
                }
                // Zero the mask buffer so callers don't use uninitialized data.
                if !step.mask_dest.is_null() && step.mask_byte_len > 0 {
                    // SAFETY: mask_dest points to at least mask_byte_len bytes
                    // (documented caller requirement).
                    unsafe {
                        std::ptr::write_bytes(step.mask_dest as *mut u8, 0, step.mask_byte_len);
                    }
                }
            }
            Ok(())
        }));
        // Invoke callback to avoid deadlocking the caller. This runs whether or
        // not the loop above panicked.
        if let Some(cb) = done_cb {
            cb(user_data);
        }
    }
}

/// Clone the constraint.
#[no_mangle]
pub extern "C" fn llg_clone_constraint(cc: &LlgConstraint) -> *mut LlgConstraint {
    Box::into_raw(Box::new(cc.clone()))
}

/// Construct a new tokenizer from a [`LlgTokenizerInit`].
///
/// Returns a pointer to a new tokenizer on success, or null on error.
/// On error, the error message is written to `error_string` (NUL-terminated).
///
/// # Safety
/// - `tok_init` must point to a valid, fully initialized [`LlgTokenizerInit`].
/// - Pointer fields within the struct (`token_lens`, `token_bytes`, etc.) must
///   satisfy the documented requirements (see struct docs).
/// - `error_string` must point to a buffer of at least `error_string_len` bytes
///   (or be null).
#[no_mangle]
pub unsafe extern "C" fn llg_new_tokenizer(
    tok_init: &LlgTokenizerInit,
    error_string: *mut c_char,
    error_string_len: usize,
) -> *mut LlgTokenizer {
    ffi_guard_ptr(
        AssertUnwindSafe(|| match LlgTokenizer::from_init(tok_init) {
            Ok(tok) => Box::into_raw(Box::new(tok)),
            Err(e) => {
                save_error_string(e, error_string, error_string_len);
                std::ptr::null_mut()
            }
        }),
        error_string,
        error_string_len,
    )
}

/// Create a new tokenizer from a [`LlgTokenizerInitV2`] struct.
///
/// This is the v2 API that supports multiple EOS tokens.
///
/// The `tok_init` pointer must be valid and `tok_init->struct_size` must be set
/// to `sizeof(LlgTokenizerInitV2)` as known by the caller. The library will
/// only read `struct_size` bytes, so callers compiled against an older (smaller)
/// version of the struct will work with newer library versions — new fields
/// default to zero.
///
/// # Safety
/// `tok_init` must point to at least `tok_init->struct_size` bytes of
/// initialized memory, and `struct_size` must be at least
/// `offset_of!(LlgTokenizerInitV2, token_lens)` (i.e., it must include
/// `struct_size`, `vocab_size`, and the complete `tok_eos` field).
#[no_mangle]
pub unsafe extern "C" fn llg_new_tokenizer_v2(
    tok_init: *const LlgTokenizerInitV2,
    error_string: *mut c_char,
    error_string_len: usize,
) -> *mut LlgTokenizer {
    ffi_guard_ptr(
        AssertUnwindSafe(|| {
            if tok_init.is_null() {
                save_error_string(
                    anyhow::anyhow!("tok_init is NULL"),
                    error_string,
                    error_string_len,
                );
                return std::ptr::null_mut();
            }

            // Read struct_size from the first field (always safe if pointer is valid)
            let struct_size = unsafe { std::ptr::read(tok_init as *const usize) };
            let min_size = std::mem::offset_of!(LlgTokenizerInitV2, token_lens);
            if struct_size < min_size {
                save_error_string(
                    anyhow::anyhow!(
                        "LlgTokenizerInitV2.struct_size is {struct_size} but expected at least {min_size}. \
                         Set struct_size = sizeof(LlgTokenizerInitV2)."
                    ),
                    error_string,
                    error_string_len,
                );
                return std::ptr::null_mut();
            }

            // Copy the caller's data into a zero-initialized local struct.
            // Fields beyond what the caller provides default to zero.
            let mut local: LlgTokenizerInitV2 = unsafe { std::mem::zeroed() };
            let copy_size = std::cmp::min(struct_size, std::mem::size_of::<LlgTokenizerInitV2>());
            unsafe {
                std::ptr::copy_nonoverlapping(
                    tok_init as *const u8,
                    &mut local as *mut LlgTokenizerInitV2 as *mut u8,
                    copy_size,
                );
            }

            match LlgTokenizer::from_init_v2(&local) {
                Ok(tok) => Box::into_raw(Box::new(tok)),
                Err(e) => {
                    save_error_string(e, error_string, error_string_len);
                    std::ptr::null_mut()
                }
            }
        }),
        error_string,
        error_string_len,
    )
}

/// Clone a tokenizer.
///
/// This increments a reference count and performs a small allocation.
#[no_mangle]
pub extern "C" fn llg_clone_tokenizer(tok: &LlgTokenizer) -> *mut LlgTokenizer {
    Box::into_raw(Box::new(tok.clone()))
}

/// Tokenize the given bytes and return the tokens.
///
/// Always returns the number of tokens that would be written to
/// `output_tokens` if `output_tokens_len` were large enough.
///
/// # Safety
/// - If `bytes_len > 0`, `bytes` must point to `bytes_len` valid bytes.
/// - If `output_tokens` is non-null, it must point to a buffer of at least
///   `output_tokens_len` elements.
#[no_mangle]
pub unsafe extern "C" fn llg_tokenize_bytes(
    tok: &LlgTokenizer,
    bytes: *const u8,
    bytes_len: usize,
    output_tokens: *mut u32,
    output_tokens_len: usize,
) -> usize {
    let tokens = tok
        .tok_env()
        .tokenize_bytes(unsafe { slice_from_ptr_or_empty(bytes, bytes_len) });
    let n_toks = tokens.len();
    if output_tokens.is_null() {
        return n_toks;
    }
    let to_copy = std::cmp::min(n_toks, output_tokens_len);
    // SAFETY: tokens is freshly allocated and thus non-overlapping, output_tokens is non-null
    unsafe {
        std::ptr::copy_nonoverlapping(tokens.as_ptr(), output_tokens, to_copy);
    }
    n_toks
}

/// Tokenize the given bytes and return the tokens.
///
/// Special tokens will be tokenized if they follow a `0xFF` byte prefix.
/// Always returns the number of tokens that would be written to
/// `output_tokens` if `output_tokens_len` were large enough.
///
/// # Safety
/// - If `bytes_len > 0`, `bytes` must point to `bytes_len` valid bytes.
/// - If `output_tokens` is non-null, it must point to a buffer of at least
///   `output_tokens_len` elements.
#[no_mangle]
pub unsafe extern "C" fn llg_tokenize_bytes_marker(
    tok: &LlgTokenizer,
    bytes: *const u8,
    bytes_len: usize,
    output_tokens: *mut u32,
    output_tokens_len: usize,
) -> usize {
    let tokens = tok
        .tok_env()
        .tokenize_bytes_marker(unsafe { slice_from_ptr_or_empty(bytes, bytes_len) })
        .0;
    let n_toks = tokens.len();
    if output_tokens.is_null() {
        return n_toks;
    }
    let to_copy = std::cmp::min(n_toks, output_tokens_len);
    // SAFETY: tokens is freshly allocated and thus non-overlapping, output_tokens is non-null
    unsafe {
        std::ptr::copy_nonoverlapping(tokens.as_ptr(), output_tokens, to_copy);
    }
    n_toks
}

/// Return a string representation of the tokens, useful for debugging.
///
/// The output is NUL-terminated. Returns the number of bytes that would be
/// written to `output` if `output_len` were large enough.
///
/// # Safety
/// - If `n_tokens > 0`, `tokens` must point to `n_tokens` valid `u32` values.
/// - If `output` is non-null, it must point to a buffer of at least
///   `output_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn llg_stringify_tokens(
    tok: &LlgTokenizer,
    tokens: *const u32,
    n_tokens: usize,
    output: *mut c_char,
    output_len: usize,
) -> usize {
    let trie = tok.tok_trie();
    let tokens = unsafe { slice_from_ptr_or_empty(tokens, n_tokens) };
    let s = trie.tokens_dbg(tokens);
    let s = s.as_bytes();
    if output.is_null() || output_len == 0 {
        return s.len() + 1;
    }
    let len = std::cmp::min(s.len(), output_len - 1);
    // SAFETY: s is freshly allocated and thus non-overlapping, output is non-null
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), output as *mut u8, len);
        *output.add(len) = 0;
    }
    s.len() + 1
}

/// Do not include special tokens and keep invalid UTF-8 as-is.
pub const LLG_DECODE_NONE: u32 = 0;

/// Include special tokens in the output.
/// They may look like `<|something|>`, `<something_else>`, or `<[12345]>` if they don't have a name.
pub const LLG_DECODE_INCLUDE_SPECIAL: u32 = 1;

/// Replace invalid UTF-8 with the replacement character.
pub const LLG_DECODE_VALID_UTF8: u32 = 2;

/// Return a string representation of the tokens, useful for debugging.
///
/// The output is NUL-terminated. Returns the number of bytes that would be
/// written to `output` if `output_len` were large enough.
/// `flags` is a combination of [`LLG_DECODE_NONE`], [`LLG_DECODE_INCLUDE_SPECIAL`],
/// and [`LLG_DECODE_VALID_UTF8`].
///
/// # Safety
/// - If `n_tokens > 0`, `tokens` must point to `n_tokens` valid `u32` values.
/// - If `output` is non-null, it must point to a buffer of at least
///   `output_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn llg_decode_tokens(
    tok: &LlgTokenizer,
    tokens: *const u32,
    n_tokens: usize,
    output: *mut c_char,
    output_len: usize,
    flags: u32,
) -> usize {
    let trie = tok.tok_trie();
    let tokens = unsafe { slice_from_ptr_or_empty(tokens, n_tokens) };
    let s = trie.decode_ext(tokens, flags & LLG_DECODE_INCLUDE_SPECIAL != 0);
    let s = if flags & LLG_DECODE_VALID_UTF8 != 0 {
        String::from_utf8_lossy(&s).to_string().into()
    } else {
        s
    };
    if output.is_null() || output_len == 0 {
        return s.len() + 1;
    }
    let len = std::cmp::min(s.len(), output_len - 1);
    // SAFETY: s is freshly allocated and thus non-overlapping, output is non-null
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), output as *mut u8, len);
        *output.add(len) = 0;
    }
    s.len() + 1
}

/// Free the tokenizer.
///
/// Must **not** be called while there are still constraints using it.
/// Passing null is a safe no-op.
///
/// # Safety
/// - `tok` must be a pointer previously returned by [`llg_new_tokenizer()`] or
///   [`llg_new_tokenizer_v2()`] (or [`llg_clone_tokenizer()`]), or null.
/// - `tok` must not have been freed already (double-free is UB).
/// - No other thread may access `tok` concurrently with this call.
#[no_mangle]
pub unsafe extern "C" fn llg_free_tokenizer(tok: *mut LlgTokenizer) {
    if !tok.is_null() {
        unsafe {
            drop(Box::from_raw(tok));
        }
    }
}

/// Free the constraint.
///
/// Passing null is a safe no-op.
///
/// # Safety
/// - `cc` must be a pointer previously returned by one of the
///   `llg_new_constraint*` functions (or [`llg_clone_constraint()`]),
///   or null.
/// - `cc` must not have been freed already (double-free is UB).
/// - No other thread may access `cc` concurrently with this call.
#[no_mangle]
pub unsafe extern "C" fn llg_free_constraint(cc: *mut LlgConstraint) {
    if !cc.is_null() {
        unsafe {
            drop(Box::from_raw(cc));
        }
    }
}

/// Get the logs from the constraint since the last call to this function.
///
/// The returned string is NUL-terminated and remains valid until the next
/// call to this function or until the constraint is freed.
#[no_mangle]
pub extern "C" fn llg_flush_logs(cc: &mut LlgConstraint) -> *const c_char {
    if let Some(constraint) = &mut cc.constraint {
        cc.last_logs = make_c_string(constraint.flush_logs());
    }
    cc.last_logs.as_ptr() as *const c_char
}

fn build_stop_controller(
    tokenizer: &LlgTokenizer,
    stop_tokens: &[u32],
    stop_rx: *const c_char,
) -> Result<StopController> {
    let stop_rx = if stop_rx.is_null() {
        None
    } else {
        Some(unsafe { c_str_to_str(stop_rx, "stop_rx") }?.to_string())
    };
    StopController::new(tokenizer.to_env(), stop_tokens.to_vec(), stop_rx, vec![])
}

/// Write an error message into a caller-provided buffer.
///
/// The string is NUL-terminated. The function will write at most
/// `error_string_len` bytes (including the NUL).
///
/// # Safety
/// This function should only be called when interacting with pointers passed
/// from C.
pub unsafe fn save_error_string(
    e: impl Display,
    error_string: *mut c_char,
    error_string_len: usize,
) {
    if !error_string.is_null() && error_string_len > 0 {
        let e = e.to_string();
        let e = e.as_bytes();
        let len = std::cmp::min(e.len(), error_string_len - 1);
        // SAFETY: e is freshly allocated and thus non-overlapping, error_string is non-null
        unsafe {
            std::ptr::copy_nonoverlapping(e.as_ptr(), error_string as *mut u8, len);
            *error_string.add(len) = 0;
        }
    }
}

/// Create a new stop-sequence controller.
///
/// # Safety
/// - If `stop_tokens_len > 0`, `stop_tokens` must point to `stop_tokens_len`
///   valid `u32` values.
/// - `stop_rx`, if non-null, must be a valid NUL-terminated UTF-8 C string.
/// - `error_string`, if non-null, must point to a buffer of at least
///   `error_string_len` bytes.
#[no_mangle]
pub unsafe extern "C" fn llg_new_stop_controller(
    tokenizer: &LlgTokenizer,
    stop_tokens: *const u32,
    stop_tokens_len: usize,
    stop_rx: *const c_char,
    error_string: *mut c_char,
    error_string_len: usize,
) -> *mut LlgStopController {
    ffi_guard_ptr(
        AssertUnwindSafe(|| {
            let stop_tokens = unsafe { slice_from_ptr_or_empty(stop_tokens, stop_tokens_len) };
            match build_stop_controller(tokenizer, stop_tokens, stop_rx) {
                Ok(stop_controller) => Box::into_raw(Box::new(LlgStopController {
                    stop_controller,
                    last_result: String::new(),
                })),
                Err(e) => {
                    save_error_string(e, error_string, error_string_len);
                    std::ptr::null_mut()
                }
            }
        }),
        error_string,
        error_string_len,
    )
}

/// Commit a token to the stop-sequence controller.
///
/// Returns a pointer to a valid UTF-8 string to be returned to the user (which
/// may be empty) and sets `*is_stopped_p` to indicate whether the sequence
/// should then be finished. The returned string is valid until the next call
/// to this function or until the controller is freed.
#[no_mangle]
pub extern "C" fn llg_stop_commit_token(
    stop_ctrl: &mut LlgStopController,
    token: u32,
    output_len_p: &mut usize,
    is_stopped_p: &mut bool,
) -> *const c_char {
    let r = stop_ctrl.stop_controller.commit_token(token);
    *output_len_p = r.len();
    *is_stopped_p = stop_ctrl.stop_controller.is_stopped();
    stop_ctrl.last_result = make_c_string(r);
    stop_ctrl.last_result.as_ptr() as *const c_char
}

/// Clone the stop-sequence controller.
///
/// The cloned controller shares (under a mutex) regex caches, if any, so
/// cloning is cheap.
#[no_mangle]
pub extern "C" fn llg_clone_stop_controller(
    stop_ctrl: &LlgStopController,
) -> *mut LlgStopController {
    Box::into_raw(Box::new(stop_ctrl.clone()))
}

/// Free the stop-sequence controller.
///
/// Passing null is a safe no-op.
///
/// # Safety
/// - `stop_ctrl` must be a pointer previously returned by
///   [`llg_new_stop_controller()`] (or [`llg_clone_stop_controller()`]),
///   or null.
/// - `stop_ctrl` must not have been freed already.
/// - No other thread may access `stop_ctrl` concurrently with this call.
#[no_mangle]
pub unsafe extern "C" fn llg_free_stop_controller(stop_ctrl: *mut LlgStopController) {
    if !stop_ctrl.is_null() {
        unsafe {
            drop(Box::from_raw(stop_ctrl));
        }
    }
}

/// Opaque handle to a grammar matcher.
///
/// Created with [`llg_new_matcher()`]. Check for errors with
/// [`llg_matcher_get_error()`]. Free with [`llg_free_matcher()`].
pub struct LlgMatcher {
    last_error: Option<String>,
    matcher: Matcher,
    saved_mask: Option<SimpleVob>,
    tok_env: TokEnv,
}

/// Opaque cancellation handle for one matcher.
///
/// Get a handle with [`llg_matcher_get_cancellation_handle()`]. Each C handle
/// owns an independent reference to the matcher cancellation state.
pub struct LlgCancellationHandle {
    handle: CancellationHandle,
}

impl LlgMatcher {
    fn wrap(&mut self, f: impl FnOnce(&mut Matcher) -> Result<i32>) -> i32 {
        if self.matcher.is_error() {
            return -1;
        }
        match f(&mut self.matcher) {
            Ok(v) => v,
            Err(_) => {
                if let Some(error) = self.matcher.get_error() {
                    self.last_error = Some(make_c_string(error));
                }
                -1
            }
        }
    }

    fn clear_mask(&mut self) {
        self.saved_mask = None;
    }

    fn mask_elts(&self) -> usize {
        self.tok_env.tok_trie().vocab_size().div_ceil(32)
    }
}

/// Create a new matcher from the given [`LlgConstraintInit`].
///
/// Always returns a non-null value. Call [`llg_matcher_get_error()`] on the
/// result to check for errors.
///
/// `init.ff_tokens_ok` and `init.backtrack_ok` are ignored
/// (backtracking is always disabled, and fast-forward tokens can be retrieved
/// using [`llg_matcher_compute_ff_tokens()`]).
///
/// The `data` argument is interpreted differently depending on
/// `constraint_type`:
/// - `"regex"` — data is a regular expression in Rust regex format;
///   see <https://docs.rs/regex/latest/regex/#syntax>
/// - `"json"` or `"json_schema"` — data is a (stringified) JSON schema;
///   see <https://github.com/guidance-ai/llguidance/blob/main/docs/json_schema.md>
/// - `"json_object"` — equivalent to JSON schema `{"type":"object"}`
/// - `"lark"` — data is a grammar in a variant of Lark syntax;
///   see <https://github.com/guidance-ai/llguidance/blob/main/docs/syntax.md>
/// - `"llguidance"` or `"guidance"` — data is a list of Lark or JSON schemas
///   in JSON format
///
/// # Safety
/// - `constraint_type` and `data` must be valid NUL-terminated UTF-8 C strings.
#[no_mangle]
pub unsafe extern "C" fn llg_new_matcher(
    init: &LlgConstraintInit,
    constraint_type: *const c_char,
    data: *const c_char,
) -> *mut LlgMatcher {
    match panic_utils::catch_unwind(AssertUnwindSafe(|| {
        let tok_env = init.factory().map_or_else(
            |_| ApproximateTokEnv::single_byte_env(),
            |f| f.tok_env().clone(),
        );
        let parser = || {
            let tp = unsafe { c_str_to_str(constraint_type, "constraint_type") }?;
            let data = unsafe { c_str_to_str(data, "data") }?;
            let grammar = TopLevelGrammar::from_tagged_str(tp, data)?;
            init.build_parser(grammar)
        };
        let matcher = Matcher::new(parser());
        Ok(Box::into_raw(Box::new(LlgMatcher {
            matcher,
            last_error: None,
            saved_mask: None,
            tok_env,
        })))
    })) {
        Ok(ptr) => ptr,
        Err(e) => {
            // Return a matcher in error state. Use the approximate tokenizer
            // unconditionally to avoid a potential second panic from init.factory().
            let tok_env = ApproximateTokEnv::single_byte_env();
            let matcher = Matcher::new(Err(e));
            Box::into_raw(Box::new(LlgMatcher {
                matcher,
                last_error: None,
                saved_mask: None,
                tok_env,
            }))
        }
    }
}

fn validate_grammar(
    init: &LlgConstraintInit,
    constraint_type: *const c_char,
    data: *const c_char,
) -> Result<String> {
    let tp = unsafe { c_str_to_str(constraint_type, "constraint_type") }?;
    let data = unsafe { c_str_to_str(data, "data") }?;
    let grammar = TopLevelGrammar::from_tagged_str(tp, data)?;
    let tok_env = init.factory()?.tok_env().clone();
    match GrammarInit::Serialized(grammar).validate(Some(tok_env), init.limits.clone()) {
        ValidationResult::Valid => Ok(String::new()),
        ValidationResult::Error(e) => bail!(e),
        r => Ok(r.render(true)),
    }
}

/// Check if the given grammar is valid.
///
/// This is about twice as fast as creating a matcher (which also validates).
/// See [`llg_new_matcher()`] for the grammar format. Returns 0 on success,
/// −1 on error, and 1 on warning. The error message or warning is written to
/// `message`, which is `message_len` bytes long. It is always NUL-terminated.
///
/// # Safety
/// - `constraint_type` and `data` must be valid NUL-terminated UTF-8 C strings.
/// - `message` must point to a buffer of at least `message_len` bytes.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn llg_validate_grammar(
    init: &LlgConstraintInit,
    constraint_type: *const c_char,
    data: *const c_char,
    message: *mut c_char,
    message_len: usize,
) -> i32 {
    match panic_utils::catch_unwind(AssertUnwindSafe(|| {
        match validate_grammar(init, constraint_type, data) {
            Err(e) => {
                save_error_string(e, message, message_len);
                Ok(-1)
            }
            Ok(s) => {
                if !s.is_empty() {
                    save_error_string(s, message, message_len);
                    Ok(1)
                } else {
                    save_error_string("", message, message_len);
                    Ok(0)
                }
            }
        }
    })) {
        Ok(code) => code,
        Err(e) => {
            unsafe { save_error_string(e, message, message_len) };
            -1
        }
    }
}

/// Compute the set of allowed tokens for the current state into a
/// caller-provided buffer.
///
/// `mask_byte_len` must equal the value returned by
/// [`llg_matcher_get_mask_byte_size()`]. Returns 0 on success and −1 on error.
///
/// # Safety
/// - `mask_dest` must point to a buffer of at least `mask_byte_len` bytes,
///   where `mask_byte_len` equals [`llg_matcher_get_mask_byte_size()`].
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn llg_matcher_compute_mask_into(
    matcher: &mut LlgMatcher,
    mask_dest: *mut u32,
    mask_byte_len: usize,
) -> i32 {
    let n_elts = matcher.mask_elts();
    matcher.clear_mask();
    matcher.wrap(|m| {
        // this may become more optimized in the future (no copy)
        let vob = m.compute_mask_or_eos()?;
        let slc = &vob.as_slice()[0..n_elts];
        ensure!(
            std::mem::size_of_val(slc) == mask_byte_len,
            "mask_dest size mismatch: expected {}, got {}",
            mask_byte_len,
            std::mem::size_of_val(slc)
        );
        ensure!(!mask_dest.is_null(), "mask_dest is null");
        // SAFETY: mask_dest is non-null and has the right size; slc is freshly allocated and thus non-overlapping
        unsafe {
            std::ptr::copy_nonoverlapping(slc.as_ptr(), mask_dest, slc.len());
        }
        Ok(0)
    })
}

/// Compute the set of allowed tokens for the current state.
///
/// Use [`llg_matcher_get_mask()`] to retrieve the result.
/// Returns 0 on success and −1 on error.
#[no_mangle]
#[must_use]
pub extern "C" fn llg_matcher_compute_mask(matcher: &mut LlgMatcher) -> i32 {
    matcher.clear_mask();
    match matcher.matcher.compute_mask_or_eos() {
        Ok(v) => {
            matcher.saved_mask = Some(v);
            0
        }
        Err(_) => -1,
    }
}

/// Return a pointer to the mask computed by [`llg_matcher_compute_mask()`],
/// or null if no mask has been computed, cancellation was requested, or an
/// error occurred.
///
/// The pointer becomes invalid after the next matcher operation or after
/// [`llg_free_matcher()`].
#[no_mangle]
pub extern "C" fn llg_matcher_get_mask(matcher: &mut LlgMatcher) -> *const u32 {
    if matcher.matcher.is_error() {
        matcher.clear_mask();
        return std::ptr::null();
    }
    matcher
        .saved_mask
        .as_ref()
        .map_or(std::ptr::null(), |m| m.as_ptr())
}

/// Return the size of the mask in bytes.
#[no_mangle]
pub extern "C" fn llg_matcher_get_mask_byte_size(matcher: &LlgMatcher) -> usize {
    matcher.mask_elts() * 4
}

/// Get a cancellation handle for a matcher.
///
/// Call this while `matcher` is idle. The returned handle can outlive the
/// matcher. Free it with [`llg_free_cancellation_handle()`]. Cancellation
/// becomes enabled for the matcher before the handle is returned. Cancellation
/// handle operations may run while a worker mutates the matcher. Join the
/// worker before accessing or freeing the matcher.
#[no_mangle]
pub extern "C" fn llg_matcher_get_cancellation_handle(
    matcher: &mut LlgMatcher,
) -> *mut LlgCancellationHandle {
    matcher.matcher.enable_cancellation();
    Box::into_raw(Box::new(LlgCancellationHandle {
        handle: matcher
            .matcher
            .cancellation_handle()
            .expect("cancellation is enabled"),
    }))
}

/// Clone a cancellation handle.
///
/// Each clone is a new allocation. Free each returned handle separately with
/// [`llg_free_cancellation_handle()`]. `handle` must remain valid during this
/// call.
#[no_mangle]
pub extern "C" fn llg_clone_cancellation_handle(
    handle: &LlgCancellationHandle,
) -> *mut LlgCancellationHandle {
    Box::into_raw(Box::new(LlgCancellationHandle {
        handle: handle.handle.clone(),
    }))
}

/// Request permanent cancellation for a matcher.
///
/// This call does not access the matcher or wait for a worker. It is safe to
/// call after the matcher is freed, if `handle` remains valid. Do not free the
/// same handle allocation during this call.
#[no_mangle]
pub extern "C" fn llg_cancel(handle: &LlgCancellationHandle) {
    handle.handle.cancel();
}

/// Free a cancellation handle.
///
/// Passing null is a safe no-op.
///
/// # Safety
/// - `handle` must be a pointer returned by
///   [`llg_matcher_get_cancellation_handle()`] or
///   [`llg_clone_cancellation_handle()`], or null.
/// - `handle` must not have been freed already.
/// - No other thread may access `handle` during this call.
#[no_mangle]
pub unsafe extern "C" fn llg_free_cancellation_handle(handle: *mut LlgCancellationHandle) {
    if !handle.is_null() {
        unsafe {
            drop(Box::from_raw(handle));
        }
    }
}

/// Check whether cancellation has been requested for a matcher.
///
/// Call this while `matcher` is idle. This returns false if an earlier
/// non-cancellation error already stopped the matcher.
#[no_mangle]
pub extern "C" fn llg_matcher_is_cancelled(matcher: &LlgMatcher) -> bool {
    matcher.matcher.is_cancelled()
}

/// Advance the matcher by one token.
///
/// Returns 0 on success and −1 on error.
#[no_mangle]
#[must_use]
pub extern "C" fn llg_matcher_consume_token(matcher: &mut LlgMatcher, token: u32) -> i32 {
    matcher.clear_mask();
    matcher.wrap(|m| {
        m.consume_token(token)?;
        Ok(0)
    })
}

/// Advance the matcher by several tokens.
///
/// Returns 0 on success and −1 on error.
///
/// # Safety
/// - If `n_tokens > 0`, `tokens` must point to `n_tokens` valid `u32` values.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn llg_matcher_consume_tokens(
    matcher: &mut LlgMatcher,
    tokens: *const u32,
    n_tokens: usize,
) -> i32 {
    matcher.clear_mask();
    let tokens = unsafe { slice_from_ptr_or_empty(tokens, n_tokens) };
    matcher.wrap(|m| {
        m.consume_tokens(tokens)?;
        Ok(0)
    })
}

/// Get the error message from the matcher, or null if there is no error.
///
/// After it returns a non-null value, it will always return that same pointer
/// until the matcher is freed with [`llg_free_matcher()`] (at which point the
/// pointer becomes invalid).
#[no_mangle]
pub extern "C" fn llg_matcher_get_error(matcher: &mut LlgMatcher) -> *const c_char {
    if !matcher.matcher.is_error() {
        return std::ptr::null();
    }
    if matcher.last_error.is_none() {
        let err = matcher
            .matcher
            .get_error()
            .unwrap_or_else(|| "unknown error".to_string());
        matcher.last_error = Some(make_c_string(err));
    }
    // SAFETY: we just ensured `last_error` is `Some` above.
    match matcher.last_error.as_ref() {
        Some(s) => s.as_ptr() as *const c_char,
        None => std::ptr::null(),
    }
}

/// Check whether the matcher is in an error state.
#[no_mangle]
pub extern "C" fn llg_matcher_is_error(matcher: &LlgMatcher) -> bool {
    matcher.matcher.is_error()
}

/// Free the matcher.
///
/// Passing null is a safe no-op.
///
/// # Safety
/// - `matcher` must be a pointer previously returned by [`llg_new_matcher()`]
///   (or [`llg_clone_matcher()`]), or null.
/// - `matcher` must not have been freed already.
/// - No other thread may access `matcher` concurrently with this call.
#[no_mangle]
pub unsafe extern "C" fn llg_free_matcher(matcher: *mut LlgMatcher) {
    if !matcher.is_null() {
        unsafe {
            drop(Box::from_raw(matcher));
        }
    }
}

/// Roll back the matcher state by `num_tokens`.
///
/// Returns 0 on success and −1 on error.
#[no_mangle]
#[must_use]
pub extern "C" fn llg_matcher_rollback(matcher: &mut LlgMatcher, num_tokens: usize) -> i32 {
    matcher.clear_mask();
    matcher.wrap(|m| {
        m.rollback(num_tokens)?;
        Ok(0)
    })
}

/// Reset the matcher to the initial state.
///
/// A matcher in an error state cannot be reset.
/// Returns 0 on success and −1 on error.
#[no_mangle]
#[must_use]
pub extern "C" fn llg_matcher_reset(matcher: &mut LlgMatcher) -> i32 {
    matcher.clear_mask();
    matcher.wrap(|m| {
        m.reset()?;
        Ok(0)
    })
}

/// Check whether the grammar can fully accept the input so far.
#[no_mangle]
pub extern "C" fn llg_matcher_is_accepting(matcher: &mut LlgMatcher) -> bool {
    matcher.matcher.is_accepting().unwrap_or(false)
}

/// Check whether the matcher has reached a terminal state.
///
/// Returns true after normal completion, an error, or cancellation.
/// Use [`llg_matcher_is_error()`] and [`llg_matcher_is_cancelled()`] to
/// distinguish unsuccessful termination.
#[no_mangle]
pub extern "C" fn llg_matcher_is_stopped(matcher: &LlgMatcher) -> bool {
    matcher.matcher.is_stopped()
}

/// Check how many tokens can be consumed from the given token sequence.
///
/// Returns the number of tokens that can be consumed, or −1 on error.
///
/// # Safety
/// - If `n_tokens > 0`, `tokens` must point to `n_tokens` valid `u32` values.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn llg_matcher_validate_tokens(
    matcher: &mut LlgMatcher,
    tokens: *const u32,
    n_tokens: usize,
) -> i32 {
    matcher.clear_mask();
    let tokens = unsafe { slice_from_ptr_or_empty(tokens, n_tokens) };
    matcher.wrap(|m| {
        m.validate_tokens(tokens)
            .map(|v| i32::try_from(v).unwrap_or(i32::MAX))
    })
}

/// Compute the fast-forward (forced) tokens for the current state.
///
/// The result is written to `output`. Returns the number of tokens written
/// (which can be 0) or −1 on error.
///
/// # Safety
/// - `output` must point to a buffer of at least `output_len` elements.
#[no_mangle]
#[must_use]
pub unsafe extern "C" fn llg_matcher_compute_ff_tokens(
    matcher: &mut LlgMatcher,
    output: *mut u32,
    output_len: usize,
) -> i32 {
    matcher.clear_mask();
    if output.is_null() {
        return -1;
    }
    matcher.wrap(|m| {
        let v = m.compute_ff_tokens();
        if let Some(error) = m.get_error() {
            bail!(error);
        }
        let v = v.as_slice();
        let len = std::cmp::min(v.len(), output_len);
        unsafe {
            std::ptr::copy_nonoverlapping(v.as_ptr(), output, len);
        }
        Ok(i32::try_from(len).unwrap_or(i32::MAX))
    })
}

/// Clone the matcher.
#[no_mangle]
pub extern "C" fn llg_clone_matcher(matcher: &LlgMatcher) -> *mut LlgMatcher {
    Box::into_raw(Box::new(LlgMatcher {
        matcher: matcher.matcher.deep_clone(),
        last_error: matcher.last_error.clone(),
        saved_mask: None,
        tok_env: matcher.tok_env.clone(),
    }))
}

/// Returns the version string of llguidance and its key dependencies.
/// This also allows dumping the version of the binary using
/// `strings libllguidance.so | grep -oE "(llguidance|derivre)@[0-9.]+"`
///
/// The returned pointer is valid for the lifetime of the process and must not
/// be freed by the caller.
#[no_mangle]
pub extern "C" fn llg_get_version() -> *const c_char {
    // Both version tags are compile-time literals so they're findable via `strings`.
    static LLG_VERSION: &str = concat!("llguidance@", env!("CARGO_PKG_VERSION"));
    static VERSION: std::sync::OnceLock<std::ffi::CString> = std::sync::OnceLock::new();
    VERSION
        .get_or_init(|| {
            // Version strings are compile-time constants and cannot contain NUL,
            // but we use expect() with an explanatory message for robustness.
            std::ffi::CString::new(format!("{} {}", LLG_VERSION, derivre::VERSION))
                .expect("version strings must not contain NUL bytes")
        })
        .as_ptr()
}
