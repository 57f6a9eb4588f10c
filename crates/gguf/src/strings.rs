//! Strings one after another in one buffer: how a metadata array of strings is stored.
//!
//! A vocabulary is a few arrays of one entry per token (texts, scores, types, merges). As a
//! list of `MetadataValue`s each entry took a 32-byte enum, and each text a heap string of
//! its own: about 34 MB for Gemma-3's 262,144 tokens, for the life of the file. Read arrays are
//! plain vectors instead ([`crate::MetadataArray`]; texts here, with their end offsets): about
//! 5 MB.

/// Strings one after another in one buffer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StringArray {
    text: String,
    /// Where each string ends in `text`.
    ends: Vec<usize>,
}

impl StringArray {
    /// An empty array with room for `n` strings.
    pub fn with_capacity(n: usize) -> Self {
        StringArray {
            text: String::new(),
            ends: Vec::with_capacity(n),
        }
    }

    /// Append `s`.
    pub fn push(&mut self, s: &str) {
        self.text.push_str(s);
        self.ends.push(self.text.len());
    }

    /// Give back the buffers' spare capacity.
    pub fn shrink_to_fit(&mut self) {
        self.text.shrink_to_fit();
        self.ends.shrink_to_fit();
    }

    /// The number of strings.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// String `i`.
    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// The strings in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i).unwrap_or_default())
    }
}

impl<S: AsRef<str>> FromIterator<S> for StringArray {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Self {
        let mut a = StringArray::default();
        for s in iter {
            a.push(s.as_ref());
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::StringArray;

    #[test]
    fn strings_in_one_buffer_read_back_in_order() {
        let a: StringArray = ["", "ab", "ß", "", "x"].into_iter().collect();
        assert_eq!(a.len(), 5);
        assert_eq!(a.iter().collect::<Vec<_>>(), ["", "ab", "ß", "", "x"]);
        assert_eq!(a.get(2), Some("ß"));
        assert_eq!(a.get(5), None);
    }
}
