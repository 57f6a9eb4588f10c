//! Fake models, caches and decoders for the integration tests.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::fmt;
use std::time::Duration;

use kindle_generate::{LanguageModel, ModelCache, TokenDecoder};

/// A cache that counts tokens and refuses to overflow.
#[derive(Debug, Clone, PartialEq)]
pub struct FakeCache {
    pub len: usize,
    pub capacity: usize,
}

impl ModelCache for FakeCache {
    fn len(&self) -> usize {
        self.len
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    fn fork(&self) -> Self {
        self.clone()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum FakeError {
    CacheFull {
        len: usize,
        adding: usize,
        capacity: usize,
    },
    ScriptExhausted {
        call: usize,
    },
    Injected {
        call: usize,
    },
}

impl fmt::Display for FakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}

impl std::error::Error for FakeError {}

/// A cache that remembers its tokens, so a fake model's logits can depend on the whole history.
#[derive(Debug, Clone)]
pub struct HistoryCache {
    /// The tokens fed so far.
    pub tokens: Vec<u32>,
    /// The most tokens it takes (not enforced).
    pub capacity: usize,
}

impl HistoryCache {
    /// An empty cache.
    pub fn new(capacity: usize) -> Self {
        HistoryCache {
            tokens: Vec::new(),
            capacity,
        }
    }
}

impl ModelCache for HistoryCache {
    fn len(&self) -> usize {
        self.tokens.len()
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }
    fn fork(&self) -> Self {
        self.clone()
    }
}

/// One recorded forward call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// Cache length when the call started.
    pub cache_len: usize,
    /// Tokens fed.
    pub tokens: Vec<u32>,
}

/// A model whose `forward_last` call number `i` returns `rows[i]`, whatever the tokens; it
/// records every call.
pub struct ScriptedModel {
    pub vocab: usize,
    pub context_length: usize,
    pub rows: Vec<Vec<f32>>,
    pub sleep: Option<Duration>,
    pub fail_on_call: Option<usize>,
    /// Return rows of this length instead of `vocab` (to test the size check).
    pub bad_row_len: Option<usize>,
    calls: RefCell<Vec<Call>>,
    next: Cell<usize>,
}

impl ScriptedModel {
    pub fn new(vocab: usize, context_length: usize, rows: Vec<Vec<f32>>) -> Self {
        for row in &rows {
            assert_eq!(row.len(), vocab);
        }
        ScriptedModel {
            vocab,
            context_length,
            rows,
            sleep: None,
            fail_on_call: None,
            bad_row_len: None,
            calls: RefCell::new(Vec::new()),
            next: Cell::new(0),
        }
    }

    /// Rows whose argmax is `tokens[i]` (logit 5 there, a small id-dependent slope elsewhere,
    /// so the log-probabilities are not trivial).
    pub fn argmax_script(vocab: usize, context_length: usize, tokens: &[u32]) -> Self {
        let rows = tokens.iter().map(|&t| peaked_row(vocab, t)).collect();
        Self::new(vocab, context_length, rows)
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.borrow().clone()
    }

    pub fn call_tokens(&self) -> Vec<Vec<u32>> {
        self.calls
            .borrow()
            .iter()
            .map(|c| c.tokens.clone())
            .collect()
    }

    fn run(&self, tokens: &[u32], cache: &mut FakeCache) -> Result<Vec<f32>, FakeError> {
        let call = self.next.get();
        self.next.set(call + 1);
        self.calls.borrow_mut().push(Call {
            cache_len: cache.len,
            tokens: tokens.to_vec(),
        });
        if let Some(sleep) = self.sleep {
            std::thread::sleep(sleep);
        }
        if self.fail_on_call == Some(call) {
            // Pretend part of the batch was appended before failing.
            cache.len += 1;
            return Err(FakeError::Injected { call });
        }
        assert!(!tokens.is_empty(), "forward with no token");
        if cache.len + tokens.len() > cache.capacity {
            return Err(FakeError::CacheFull {
                len: cache.len,
                adding: tokens.len(),
                capacity: cache.capacity,
            });
        }
        let mut row = self
            .rows
            .get(call)
            .cloned()
            .ok_or(FakeError::ScriptExhausted { call })?;
        if let Some(n) = self.bad_row_len {
            row.resize(n, 0.0);
        }
        cache.len += tokens.len();
        Ok(row)
    }
}

pub fn peaked_row(vocab: usize, peak: u32) -> Vec<f32> {
    let mut row: Vec<f32> = (0..vocab).map(|j| -0.01 * j as f32).collect();
    row[peak as usize] = 5.0;
    row
}

impl LanguageModel for ScriptedModel {
    type Cache = FakeCache;
    type Error = FakeError;

    fn vocab_size(&self) -> usize {
        self.vocab
    }
    fn context_length(&self) -> usize {
        self.context_length
    }
    fn new_cache(&self, capacity: usize) -> Result<FakeCache, FakeError> {
        Ok(FakeCache { len: 0, capacity })
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut FakeCache) -> Result<Vec<f32>, FakeError> {
        self.run(tokens, cache)
    }
    fn forward_all(&self, _: &[u32], _: &mut FakeCache) -> Result<Vec<f32>, FakeError> {
        unimplemented!("the scripted model only generates")
    }
}

/// A model whose logits at a position depend only on the token there: `table[token]`.
pub struct TableModel {
    pub table: Vec<Vec<f32>>,
    pub context_length: usize,
    pub forward_all_calls: Cell<usize>,
}

impl TableModel {
    fn row(&self, token: u32) -> &[f32] {
        &self.table[token as usize]
    }
}

impl LanguageModel for TableModel {
    type Cache = FakeCache;
    type Error = FakeError;

    fn vocab_size(&self) -> usize {
        self.table.len()
    }
    fn context_length(&self) -> usize {
        self.context_length
    }
    fn new_cache(&self, capacity: usize) -> Result<FakeCache, FakeError> {
        Ok(FakeCache { len: 0, capacity })
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut FakeCache) -> Result<Vec<f32>, FakeError> {
        cache.len += tokens.len();
        Ok(self.row(*tokens.last().unwrap()).to_vec())
    }
    fn forward_all(&self, tokens: &[u32], cache: &mut FakeCache) -> Result<Vec<f32>, FakeError> {
        self.forward_all_calls.set(self.forward_all_calls.get() + 1);
        assert!(cache.len + tokens.len() <= cache.capacity);
        cache.len += tokens.len();
        Ok(tokens.iter().flat_map(|&t| self.row(t).to_vec()).collect())
    }
}

/// Decoder error for [`ByteVocab`].
#[derive(Debug)]
pub struct UnknownId(pub u32);

impl fmt::Display for UnknownId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown id {}", self.0)
    }
}

impl std::error::Error for UnknownId {}

/// Each id is a byte string; decode = lossy UTF-8 of the concatenation.
#[derive(Debug, Clone)]
pub struct ByteVocab {
    pub pieces: Vec<Vec<u8>>,
}

impl ByteVocab {
    pub fn from_strs(pieces: &[&str]) -> Self {
        ByteVocab {
            pieces: pieces.iter().map(|p| p.as_bytes().to_vec()).collect(),
        }
    }

    /// Ids 0..256 are the single bytes, then `extra` pieces from 256 on.
    pub fn bytes_plus(extra: &[&str]) -> Self {
        let mut pieces: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        pieces.extend(extra.iter().map(|p| p.as_bytes().to_vec()));
        ByteVocab { pieces }
    }

    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    pub fn id(&self, piece: &str) -> u32 {
        self.pieces
            .iter()
            .position(|p| p == piece.as_bytes())
            .unwrap_or_else(|| panic!("no piece {piece:?}")) as u32
    }

    pub fn ids(&self, pieces: &[&str]) -> Vec<u32> {
        pieces.iter().map(|p| self.id(p)).collect()
    }
}

impl TokenDecoder for ByteVocab {
    type Error = UnknownId;

    fn decode(&self, ids: &[u32]) -> Result<String, UnknownId> {
        let mut bytes = Vec::new();
        for &id in ids {
            bytes.extend_from_slice(self.pieces.get(id as usize).ok_or(UnknownId(id))?);
        }
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }
}

/// Log-softmax the plain way (`f64`, no max shift: the tests' logits are small), to check the
/// crate's log-probabilities against.
pub fn naive_log_softmax(row: &[f32]) -> Vec<f64> {
    let lse = row.iter().map(|&x| f64::from(x).exp()).sum::<f64>().ln();
    row.iter().map(|&x| f64::from(x) - lse).collect()
}

/// `task(0..n)` on three threads of their own, each claiming the next index (a model's
/// `for_each_task` in the tests that finish a batch's steps on several threads).
pub fn on_three_threads(n: usize, task: &(dyn Fn(usize) + Sync)) {
    let next = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= n {
                        break;
                    }
                    task(i);
                }
            });
        }
    });
}
