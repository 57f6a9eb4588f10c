//! A strict reader and writer of SentencePiece's `tokenizer.model`: the `ModelProto` of
//! sentencepiece's `sentencepiece_model.proto` (proto2), only the fields kindle converts.
//!
//! ```text
//! message ModelProto     { repeated SentencePiece pieces = 1; TrainerSpec trainer_spec = 2;
//!                          NormalizerSpec normalizer_spec = 3; }
//! message SentencePiece  { string piece = 1; float score = 2; Type type = 3 [default = NORMAL]; }
//!                          // NORMAL=1 UNKNOWN=2 CONTROL=3 USER_DEFINED=4 UNUSED=5 BYTE=6
//! message TrainerSpec    { ModelType model_type = 3 [default = UNIGRAM]; // UNIGRAM=1 BPE=2
//!                          bool byte_fallback = 35; int32 unk_id = 40 [default = 0];
//!                          int32 bos_id = 41 [default = 1]; int32 eos_id = 42 [default = 2];
//!                          int32 pad_id = 43 [default = -1]; }
//! message NormalizerSpec { string name = 1; bool add_dummy_prefix = 3 [default = true];
//!                          bool remove_extra_whitespaces = 4 [default = true];
//!                          bool escape_whitespaces = 5 [default = true]; }
//! ```
//!
//! Every length is checked against the buffer; unknown fields are skipped by wire type
//! (groups, wire types 3 and 4, are refused); a known field with the wrong wire type, a
//! truncated varint or a piece that is not UTF-8 is an error. Nothing is allocated beyond
//! what the input's bytes hold.

use crate::error::{HfError, Result};

/// SentencePiece piece types (`SentencePiece.Type`).
pub(crate) mod piece_type {
    pub(crate) const NORMAL: i32 = 1;
    pub(crate) const UNKNOWN: i32 = 2;
    pub(crate) const CONTROL: i32 = 3;
    pub(crate) const USER_DEFINED: i32 = 4;
    pub(crate) const UNUSED: i32 = 5;
    pub(crate) const BYTE: i32 = 6;
}

/// `TrainerSpec.ModelType.BPE`.
pub(crate) const MODEL_BPE: i32 = 2;

/// One vocabulary entry.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Piece {
    pub(crate) piece: String,
    pub(crate) score: f32,
    /// A [`piece_type`] code.
    pub(crate) ty: i32,
}

/// The fields of a `ModelProto` kindle reads and writes (proto2 defaults when absent).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SpmModel {
    pub(crate) pieces: Vec<Piece>,
    pub(crate) model_type: i32,
    pub(crate) byte_fallback: bool,
    pub(crate) unk_id: i32,
    pub(crate) bos_id: i32,
    pub(crate) eos_id: i32,
    pub(crate) pad_id: i32,
    pub(crate) normalizer_name: String,
    pub(crate) add_dummy_prefix: bool,
    pub(crate) remove_extra_whitespaces: bool,
    pub(crate) escape_whitespaces: bool,
}

impl Default for SpmModel {
    fn default() -> Self {
        Self {
            pieces: Vec::new(),
            model_type: 1,
            byte_fallback: false,
            unk_id: 0,
            bos_id: 1,
            eos_id: 2,
            pad_id: -1,
            normalizer_name: String::new(),
            add_dummy_prefix: true,
            remove_extra_whitespaces: true,
            escape_whitespaces: true,
        }
    }
}

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

fn error(at: usize, what: impl std::fmt::Display) -> HfError {
    HfError::Tokenizer(format!("tokenizer.model: {what} (at byte {at})"))
}

/// A cursor over one message's bytes; `base` is its offset in the file (for messages).
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], base: usize) -> Self {
        Self { buf, pos: 0, base }
    }

    fn at(&self) -> usize {
        self.base + self.pos
    }

    fn done(&self) -> bool {
        self.pos >= self.buf.len()
    }

    fn varint(&mut self) -> Result<u64> {
        let start = self.at();
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(error(start, "truncated varint"));
            };
            self.pos += 1;
            if i == 9 && b > 1 {
                return Err(error(start, "varint longer than 64 bits"));
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(error(start, "varint longer than 10 bytes"))
    }

    /// A field key: (field number, wire type).
    fn key(&mut self) -> Result<(u64, u8)> {
        let at = self.at();
        let key = self.varint()?;
        let wire = (key & 7) as u8;
        let field = key >> 3;
        if field == 0 {
            return Err(error(at, "field number 0"));
        }
        Ok((field, wire))
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        let at = self.at();
        let left = self.buf.len() - self.pos;
        match usize::try_from(n) {
            Ok(n) if n <= left => {
                let s = &self.buf[self.pos..self.pos + n];
                self.pos += n;
                Ok(s)
            }
            _ => Err(error(
                at,
                format!("{what}: length {n} runs past the end ({left} bytes left)"),
            )),
        }
    }

    /// A length-delimited field's bytes and their offset in the file.
    fn bytes(&mut self, what: &str) -> Result<(&'a [u8], usize)> {
        let n = self.varint()?;
        let at = self.at();
        Ok((self.take(n, what)?, at))
    }

    fn fixed32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn skip(&mut self, field: u64, wire: u8) -> Result<()> {
        let what = format!("field {field}");
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8, &what).map(drop),
            LEN => self.bytes(&what).map(drop),
            FIXED32 => self.take(4, &what).map(drop),
            _ => Err(error(
                self.at(),
                format!(
                    "field {field} has wire type {wire} (groups and unknown types are not read)"
                ),
            )),
        }
    }

    /// Checks that known field `name` came with wire type `want`.
    fn expect(&self, name: &str, wire: u8, want: u8) -> Result<()> {
        if wire == want {
            Ok(())
        } else {
            Err(error(
                self.at(),
                format!("{name} has wire type {wire}, expected {want}"),
            ))
        }
    }
}

fn int32(v: u64) -> i32 {
    // proto int32: the low 32 bits of the (sign-extended) varint.
    v as u32 as i32
}

fn utf8(bytes: &[u8], at: usize, what: &str) -> Result<String> {
    String::from_utf8(bytes.to_vec()).map_err(|_| error(at, format!("{what} is not UTF-8")))
}

/// Parses a `tokenizer.model` file.
pub(crate) fn parse(buf: &[u8]) -> Result<SpmModel> {
    let mut model = SpmModel::default();
    let mut r = Reader::new(buf, 0);
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                r.expect("ModelProto.pieces", wire, LEN)?;
                let (b, at) = r.bytes("ModelProto.pieces")?;
                model.pieces.push(parse_piece(b, at, model.pieces.len())?);
            }
            2 => {
                r.expect("ModelProto.trainer_spec", wire, LEN)?;
                let (b, at) = r.bytes("ModelProto.trainer_spec")?;
                parse_trainer(b, at, &mut model)?;
            }
            3 => {
                r.expect("ModelProto.normalizer_spec", wire, LEN)?;
                let (b, at) = r.bytes("ModelProto.normalizer_spec")?;
                parse_normalizer(b, at, &mut model)?;
            }
            _ => r.skip(field, wire)?,
        }
    }
    Ok(model)
}

fn parse_piece(buf: &[u8], base: usize, index: usize) -> Result<Piece> {
    let mut p = Piece {
        piece: String::new(),
        score: 0.0,
        ty: piece_type::NORMAL,
    };
    let mut r = Reader::new(buf, base);
    while !r.done() {
        let (field, wire) = r.key()?;
        match field {
            1 => {
                r.expect("SentencePiece.piece", wire, LEN)?;
                let (b, at) = r.bytes("SentencePiece.piece")?;
                p.piece = utf8(b, at, &format!("piece {index}"))?;
            }
            2 => {
                r.expect("SentencePiece.score", wire, FIXED32)?;
                p.score = f32::from_bits(r.fixed32("SentencePiece.score")?);
            }
            3 => {
                r.expect("SentencePiece.type", wire, VARINT)?;
                let at = r.at();
                p.ty = int32(r.varint()?);
                if !(1..=6).contains(&p.ty) {
                    return Err(error(at, format!("piece {index} has type {}", p.ty)));
                }
            }
            _ => r.skip(field, wire)?,
        }
    }
    Ok(p)
}

fn parse_trainer(buf: &[u8], base: usize, m: &mut SpmModel) -> Result<()> {
    let mut r = Reader::new(buf, base);
    while !r.done() {
        let (field, wire) = r.key()?;
        let slot = match field {
            3 => &mut m.model_type,
            35 => {
                r.expect("TrainerSpec.byte_fallback", wire, VARINT)?;
                m.byte_fallback = r.varint()? != 0;
                continue;
            }
            40 => &mut m.unk_id,
            41 => &mut m.bos_id,
            42 => &mut m.eos_id,
            43 => &mut m.pad_id,
            _ => {
                r.skip(field, wire)?;
                continue;
            }
        };
        r.expect(&format!("TrainerSpec field {field}"), wire, VARINT)?;
        *slot = int32(r.varint()?);
    }
    Ok(())
}

fn parse_normalizer(buf: &[u8], base: usize, m: &mut SpmModel) -> Result<()> {
    let mut r = Reader::new(buf, base);
    while !r.done() {
        let (field, wire) = r.key()?;
        let slot = match field {
            1 => {
                r.expect("NormalizerSpec.name", wire, LEN)?;
                let (b, at) = r.bytes("NormalizerSpec.name")?;
                m.normalizer_name = utf8(b, at, "NormalizerSpec.name")?;
                continue;
            }
            3 => &mut m.add_dummy_prefix,
            4 => &mut m.remove_extra_whitespaces,
            5 => &mut m.escape_whitespaces,
            _ => {
                r.skip(field, wire)?;
                continue;
            }
        };
        r.expect(&format!("NormalizerSpec field {field}"), wire, VARINT)?;
        *slot = r.varint()? != 0;
    }
    Ok(())
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_key(out: &mut Vec<u8>, field: u64, wire: u8) {
    put_varint(out, (field << 3) | u64::from(wire));
}

fn put_int(out: &mut Vec<u8>, field: u64, v: i64) {
    put_key(out, field, VARINT);
    put_varint(out, v as u64);
}

fn put_bytes(out: &mut Vec<u8>, field: u64, b: &[u8]) {
    put_key(out, field, LEN);
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Serialises `model` (every field written explicitly).
pub(crate) fn write(model: &SpmModel) -> Vec<u8> {
    let mut out = Vec::new();
    let mut msg = Vec::new();
    for p in &model.pieces {
        msg.clear();
        put_bytes(&mut msg, 1, p.piece.as_bytes());
        put_key(&mut msg, 2, FIXED32);
        msg.extend_from_slice(&p.score.to_bits().to_le_bytes());
        put_int(&mut msg, 3, i64::from(p.ty));
        put_bytes(&mut out, 1, &msg);
    }
    msg.clear();
    put_int(&mut msg, 3, i64::from(model.model_type));
    put_int(&mut msg, 4, model.pieces.len() as i64); // vocab_size
    put_int(&mut msg, 35, i64::from(model.byte_fallback));
    for (field, id) in [
        (40, model.unk_id),
        (41, model.bos_id),
        (42, model.eos_id),
        (43, model.pad_id),
    ] {
        put_int(&mut msg, field, i64::from(id));
    }
    put_bytes(&mut out, 2, &msg);
    msg.clear();
    put_bytes(&mut msg, 1, model.normalizer_name.as_bytes());
    put_int(&mut msg, 3, i64::from(model.add_dummy_prefix));
    put_int(&mut msg, 4, i64::from(model.remove_extra_whitespaces));
    put_int(&mut msg, 5, i64::from(model.escape_whitespaces));
    put_bytes(&mut out, 3, &msg);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_negative_ids() {
        let m = SpmModel {
            pieces: vec![
                Piece {
                    piece: "<unk>".into(),
                    score: 0.0,
                    ty: piece_type::UNKNOWN,
                },
                Piece {
                    piece: "▁a".into(),
                    score: -1.5,
                    ty: piece_type::NORMAL,
                },
            ],
            model_type: MODEL_BPE,
            byte_fallback: true,
            pad_id: -1,
            bos_id: -1,
            add_dummy_prefix: false,
            normalizer_name: "identity".into(),
            ..SpmModel::default()
        };
        assert_eq!(parse(&write(&m)).unwrap(), m);
    }

    #[test]
    fn every_prefix_is_an_error_or_a_model_never_a_panic() {
        let m = SpmModel {
            pieces: vec![Piece {
                piece: "x".into(),
                score: 1.0,
                ty: 1,
            }],
            ..SpmModel::default()
        };
        let bytes = write(&m);
        for n in 0..bytes.len() {
            let _ = parse(&bytes[..n]);
        }
    }

    #[test]
    fn random_bytes_and_mutations_never_panic() {
        let good = write(&SpmModel {
            pieces: vec![Piece {
                piece: "▁ab".into(),
                score: -2.0,
                ty: piece_type::CONTROL,
            }],
            ..SpmModel::default()
        });
        let mut s = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for _ in 0..20_000 {
            let mut bytes = good.clone();
            for _ in 0..(next() % 4 + 1) {
                let at = (next() as usize) % bytes.len();
                bytes[at] = next() as u8;
            }
            let _ = parse(&bytes);
            let len = (next() % 24) as usize;
            let random: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            if let Ok(m) = parse(&random) {
                assert!(m.pieces.len() * 2 <= random.len());
            }
        }
    }
}
