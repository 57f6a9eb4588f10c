//! Chat prompts with a SentencePiece vocabulary that adds a space prefix (Llama 2, Mistral,
//! TinyLlama): the rendered template and the message contents are tokenized as one text, so
//! the ids equal llama.cpp's tokenization of the whole prompt (with special parsing) whenever
//! the contents hold no control-token text, and no stray `▁` appears at part boundaries.

use kindle_cli::chat::{encode_chat, encode_single_turn};
use kindle_generate::chat::{ChatMessage, ChatPart, ChatTemplate};
use kindle_tokenizer::{GgufVocab, Tokenizer};

/// `<unk>`, `<s>`, `</s>`, the byte tokens, and pieces for a Llama-2 style `[INST]` prompt.
fn tokenizer() -> Tokenizer {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    let mut token_types = vec![2, 3, 3];
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    token_types.extend([6; 256]);
    let pieces = [
        "▁", "[", "]", "/", "I", "N", "S", "T", "▁[", "IN", "ST", "INST", "▁[/", "▁Hi", "H", "i",
        "▁there", "t", "h", "e", "r", "▁you", "y", "o", "u",
    ];
    let mut scores = vec![0.0; tokens.len()];
    for (rank, piece) in pieces.iter().enumerate() {
        tokens.push((*piece).to_string());
        token_types.push(1);
        scores.push(-(rank as f32));
    }
    Tokenizer::from_vocab(GgufVocab {
        model: "llama".into(),
        tokens,
        token_types,
        scores,
        bos: Some(1),
        eos: Some(2),
        add_bos: true,
        ..GgufVocab::default()
    })
    .expect("the vocabulary builds")
}

const LLAMA2: &str = "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}";

#[test]
fn a_chat_prompt_is_tokenized_as_one_text() {
    let tokenizer = tokenizer();
    assert!(tokenizer.add_space_prefix());
    let template = ChatTemplate::new(LLAMA2)
        .expect("template")
        .with_special_tokens("<s>", "</s>");
    let messages = [
        ChatMessage::user("Hi there"),
        ChatMessage::assistant("Hi you"),
        ChatMessage::user("there"),
    ];
    let ids = encode_chat(&tokenizer, &template, &messages, false).expect("encode");
    let whole = "<s>[INST] Hi there [/INST] Hi you</s>[INST] there [/INST]";
    let mut want = tokenizer.encode(whole, true).expect("encode");
    // encode adds BOS and the template wrote it too: the chat prompt has it once.
    assert_eq!(want[..2], [1, 1]);
    want.remove(0);
    assert_eq!(ids, want);
    // Tokenizing each part on its own would give each a space prefix of its own.
    let mut per_part = Vec::new();
    for part in template.render_parts(&messages, false).expect("render") {
        let (text, special) = match &part {
            ChatPart::Template(text) => (text, true),
            ChatPart::Content(text) => (text, false),
        };
        per_part.extend(&tokenizer.encode(text, special).expect("encode")[1..]);
    }
    assert_ne!(ids, per_part);
    let marker = tokenizer.piece_to_id("▁").expect("▁");
    let count = |ids: &[u32]| ids.iter().filter(|&&id| id == marker).count();
    assert!(count(&per_part) > count(&ids), "{per_part:?}");

    // Control-token text inside a message stays text.
    let ids = encode_single_turn(&tokenizer, &template, None, "</s>").expect("encode");
    assert!(!ids[1..].contains(&2), "{ids:?}");
    assert_eq!(
        tokenizer.decode(&ids, true).unwrap(),
        " [INST] </s> [/INST]"
    );
}
