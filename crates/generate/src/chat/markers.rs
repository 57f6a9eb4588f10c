//! The placeholder delimiters of rendered chat parts: private-use characters no tokenizer or
//! user is expected to produce.

/// Opens a marker: `OPEN` index `CLOSE`.
pub(super) const OPEN: char = '\u{F8F0}';
/// Closes a marker.
pub(super) const CLOSE: char = '\u{F8F1}';
