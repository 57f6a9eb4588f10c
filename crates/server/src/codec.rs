//! [`TextCodec`]: the server's view of the tokenizer and chat template.

use kindle_generate::chat::{ChatEnding, ChatMessage, TemplateVars};
use kindle_generate::{BoxError, TokenDecoder};
use kindle_sampling::LogitsConstraint;

use crate::guided::Guided;

/// How [`TextCodec::encode`] reads a text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Encoding {
    /// Special-token text (`<|im_start|>`) becomes the special token.
    pub parse_special: bool,
    /// BOS (and EOS) added as the vocabulary asks.
    pub add_special: bool,
}

impl Encoding {
    /// A completion prompt, as llama-server and vLLM read one: special-token text parsed, BOS
    /// added as the vocabulary asks.
    pub const PROMPT: Encoding = Encoding {
        parse_special: true,
        add_special: true,
    };
    /// Plain text (a DRY sequence breaker): nothing parsed, nothing added.
    pub const TEXT: Encoding = Encoding {
        parse_special: false,
        add_special: false,
    };
}

/// Text to token ids and back, as the server needs it. Its [`TokenDecoder`] (special tokens
/// not rendered) decodes generated text; the engine thread and the HTTP handlers share one.
///
/// `kindle serve` implements it with the model's tokenizer and chat template; tests implement
/// it with a toy vocabulary.
pub trait TextCodec: TokenDecoder + Send + Sync + 'static {
    /// The ids of a text, as `options` says: special-token text (`<|im_start|>`) parsed or
    /// not, BOS/EOS added as the vocabulary asks or not.
    fn encode(&self, text: &str, options: Encoding) -> Result<Vec<u32>, BoxError>;
    /// The ids of a conversation rendered with the model's chat template, ending as `ending`
    /// says (the assistant's generation prompt added, unless a request asks otherwise), with
    /// the request's extra template variables (`vars`, from `chat_template_kwargs`, over the
    /// server's defaults); message contents are never parsed for special tokens.
    fn encode_chat(
        &self,
        messages: &[ChatMessage],
        ending: ChatEnding,
        vars: &TemplateVars,
    ) -> Result<Vec<u32>, BoxError>;
    /// Whether the chat template reads the variable `name` (a request's `tools` are refused
    /// by a template that would ignore them). By default it is taken to.
    fn template_uses(&self, name: &str) -> bool {
        let _ = name;
        true
    }
    /// How the model writes tool calls (from its chat template). By default Hermes'
    /// `<tool_call>` blocks.
    fn tool_format(&self) -> crate::tools::ToolFormat {
        crate::tools::ToolFormat::Hermes
    }
    /// One token's text for log-probability reports (special tokens rendered).
    fn token_text(&self, id: u32) -> String;
    /// One token's bytes (special tokens rendered): for a piece of a multi-byte character its
    /// bytes, where [`token_text`](Self::token_text) has U+FFFD. By default the text's bytes.
    fn token_bytes(&self, id: u32) -> Vec<u8> {
        self.token_text(id).into_bytes()
    }
    /// The text of `ids` with special tokens rendered (`/detokenize`, as llama-server). By
    /// default as [`TokenDecoder::decode`].
    fn render(&self, ids: &[u32]) -> Result<String, BoxError> {
        self.decode(ids).map_err(|e| e.to_string().into())
    }
    /// The chat template's source, for `/props`. By default none.
    fn chat_template(&self) -> Option<String> {
        None
    }
    /// The end-of-generation ids.
    fn eog_ids(&self) -> Vec<u32>;
    /// Number of token ids (valid ids are below it).
    fn vocab_size(&self) -> usize;
    /// A fresh output constraint for one sequence, asked for by request field `field`
    /// (`response_format`, `guided_*`); the error text names the field and says what is wrong
    /// and where. By default structured output is not supported.
    fn constraint(&self, spec: &Guided, field: &str) -> Result<Box<dyn LogitsConstraint>, String> {
        let _ = (spec, field);
        Err("structured output is not supported by this server".into())
    }
}
