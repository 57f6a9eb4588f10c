//! Chat templates and multi-turn prefix reuse on the real model.

mod common;

use std::cell::{Cell, RefCell};

use common::{ids, real_model, reference};
use kindle_cli::chat::{chat_template, encode_chat};
use kindle_cli::engine::{self, Detokenizer};
use kindle_generate::chat::{ChatMessage, ChatTemplate};
use kindle_generate::{GenerationConfig, LanguageModel, Session, generate_to_end};
use kindle_model::{Engine, EngineCache, ModelError};
use kindle_sampling::Sampler;
use kindle_tokenizer::Tokenizer;

fn template(tokenizer: &Tokenizer) -> ChatTemplate {
    assert!(
        tokenizer.chat_template().is_some(),
        "the model has a chat template"
    );
    chat_template(tokenizer, &Default::default()).unwrap()
}

/// The conversation's ids, encoded as the CLI encodes them.
fn encode(
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
) -> Vec<u32> {
    encode_chat(
        tokenizer,
        &template(tokenizer),
        messages,
        add_generation_prompt,
    )
    .unwrap()
}

const SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

#[test]
fn chat_prompt_ids_match_the_reference() {
    let Some(model) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let loaded = engine::open(&model).unwrap();
    let chat = &reference()["prompts"]["chat"];
    let messages = [
        ChatMessage::system(SYSTEM),
        ChatMessage::user("What is the boiling point of water?"),
    ];
    let rendered = template(&loaded.tokenizer).render(&messages, true).unwrap();
    assert_eq!(rendered, chat["prompt"].as_str().unwrap());
    assert_eq!(
        encode(&loaded.tokenizer, &messages, true),
        ids(&chat["prompt_ids"])
    );
}

#[test]
fn control_tokens_in_messages_are_plain_text() {
    let Some(model) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let loaded = engine::open(&model).unwrap();
    let tokenizer = &loaded.tokenizer;
    let im_end = tokenizer.piece_to_id("<|im_end|>").unwrap();
    let with = encode(tokenizer, &[ChatMessage::user("a <|im_end|> b")], true);
    let without = encode(tokenizer, &[ChatMessage::user("a b")], true);
    // The template itself writes <|im_end|> once per message (default system + user).
    let count = |ids: &[u32]| ids.iter().filter(|&&id| id == im_end).count();
    assert_eq!(count(&with), count(&without));
    // The control text is tokenized as text (the message's other text with the template's).
    let plain = tokenizer.encode("<|im_end|>", false).unwrap();
    assert!(plain.len() > 1 && with.windows(plain.len()).any(|w| w == plain));
    assert_eq!(
        tokenizer.decode(&with, false).unwrap(),
        template(tokenizer)
            .render(&[ChatMessage::user("a <|im_end|> b")], true)
            .unwrap()
    );
}

/// Counts the tokens fed and keeps the last logits row.
struct Counting<'a> {
    inner: &'a Engine,
    fed: Cell<usize>,
    last: RefCell<Vec<f32>>,
}

impl LanguageModel for Counting<'_> {
    type Cache = EngineCache;
    type Error = ModelError;
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }
    fn context_length(&self) -> usize {
        self.inner.context_length()
    }
    fn new_cache(&self, capacity: usize) -> Result<EngineCache, ModelError> {
        self.inner.new_cache(capacity)
    }
    fn forward_last(
        &self,
        tokens: &[u32],
        cache: &mut EngineCache,
    ) -> Result<Vec<f32>, ModelError> {
        self.fed.set(self.fed.get() + tokens.len());
        let logits = self.inner.forward_last(tokens, cache)?;
        *self.last.borrow_mut() = logits.clone();
        Ok(logits)
    }
    fn forward_all(&self, tokens: &[u32], cache: &mut EngineCache) -> Result<Vec<f32>, ModelError> {
        self.fed.set(self.fed.get() + tokens.len());
        self.inner.forward_all(tokens, cache)
    }
}

#[test]
fn second_turn_prefills_only_new_tokens_with_the_same_logits() {
    let Some(model) = real_model() else {
        return; // KINDLE_SKIP_REAL_MODEL=1
    };
    let loaded = engine::open(&model).unwrap();
    let tokenizer = &loaded.tokenizer;
    let engine = engine::load_model(&loaded, &engine::DeviceArgs::cpu()).unwrap();
    let model = Counting {
        inner: &engine,
        fed: Cell::new(0),
        last: RefCell::new(Vec::new()),
    };
    let decoder = Detokenizer {
        tokenizer,
        render_special: false,
    };
    let config = GenerationConfig::default()
        .with_max_new_tokens(24)
        .with_eog_token_ids(tokenizer.eog_ids().iter().copied());
    let mut session = Session::new(&model, 512).unwrap();
    let mut sampler = Sampler::greedy();

    let mut messages = vec![
        ChatMessage::system(SYSTEM),
        ChatMessage::user("What is 2+2?"),
    ];
    let first = encode(tokenizer, &messages, true);
    let reply = generate_to_end(
        &model,
        &mut session,
        &first,
        &mut sampler,
        &decoder,
        &config,
    )
    .unwrap();
    assert_eq!(reply.timings.prefill_tokens, first.len());
    messages.push(ChatMessage::assistant(reply.text.clone()));
    messages.push(ChatMessage::user("And 3+3?"));
    let second = encode(tokenizer, &messages, true);
    // The cache (prompt + reply but its last token) is a prefix of the re-rendered conversation.
    let held = session.len();
    assert_eq!(held, first.len() + reply.tokens.len() - 1);
    assert_eq!(
        &second[..held],
        session.tokens(),
        "re-rendered reply matches the cache"
    );

    let fed_before = model.fed.get();
    let config1 = config.clone().with_max_new_tokens(1);
    let turn = generate_to_end(
        &model,
        &mut session,
        &second,
        &mut sampler,
        &decoder,
        &config1,
    )
    .unwrap();
    assert_eq!(turn.timings.prefill_tokens, second.len() - held);
    assert_eq!(model.fed.get() - fed_before, second.len() - held);
    let incremental = model.last.borrow().clone();

    let mut fresh = Session::new(&model, 512).unwrap();
    let full = generate_to_end(
        &model,
        &mut fresh,
        &second,
        &mut sampler,
        &decoder,
        &config1,
    )
    .unwrap();
    assert_eq!(full.timings.prefill_tokens, second.len());
    let whole = model.last.borrow().clone();
    let diff = incremental
        .iter()
        .zip(&whole)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff < 1e-3, "max abs logit difference {diff}");
    assert_eq!(turn.tokens, full.tokens);
}
