//! Piece text to id without a second copy of the texts: a hash table of ids, each hashed by
//! its piece's text (in a [`StringArray`]) and compared against it. A `HashMap<String, u32>` cloned every piece: for
//! Gemma-3's 262,144 pieces about 25 MB (the table and a heap string per key), this is 1.3 MB.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use kindle_gguf::StringArray;

/// The ids of a list of pieces, found by text.
#[derive(Debug, Clone)]
pub(crate) struct PieceIndex {
    table: HashTable<u32>,
    state: RandomState,
}

impl PieceIndex {
    /// Index `pieces`; a text spelled by several pieces finds the last one (llama.cpp's map
    /// is filled in id order, later duplicates overwriting).
    pub(crate) fn new(pieces: &StringArray) -> Self {
        let state = RandomState::new();
        let mut table = HashTable::with_capacity(pieces.len());
        let text = |i: u32| pieces.get(i as usize).unwrap_or_default();
        for (id, piece) in pieces.iter().enumerate() {
            let hash = state.hash_one(piece);
            let rehash = |&i: &u32| state.hash_one(text(i));
            match table.entry(hash, |&i: &u32| text(i) == piece, rehash) {
                Entry::Occupied(mut e) => *e.get_mut() = id as u32,
                Entry::Vacant(e) => {
                    e.insert(id as u32);
                }
            }
        }
        PieceIndex { table, state }
    }

    /// The id of the piece spelled `text` among the `pieces` this index was built from.
    pub(crate) fn get(&self, pieces: &StringArray, text: &str) -> Option<u32> {
        let hash = self.state.hash_one(text);
        self.table
            .find(hash, |&i| pieces.get(i as usize) == Some(text))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::PieceIndex;

    #[test]
    fn finds_every_piece_and_the_last_of_duplicates() {
        let pieces: kindle_gguf::StringArray =
            ["a", "b", "ab", "b", "", "▁x"].into_iter().collect();
        let index = PieceIndex::new(&pieces);
        assert_eq!(index.get(&pieces, "a"), Some(0));
        assert_eq!(index.get(&pieces, "ab"), Some(2));
        assert_eq!(index.get(&pieces, "b"), Some(3), "later duplicates win");
        assert_eq!(index.get(&pieces, ""), Some(4));
        assert_eq!(index.get(&pieces, "▁x"), Some(5));
        assert_eq!(index.get(&pieces, "abc"), None);
        assert_eq!(index.get(&pieces, "x"), None);
    }
}
