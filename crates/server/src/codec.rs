//! [`TextCodec`]: the server's view of the tokenizer and chat template.

use kindle_generate::chat::{ChatEnding, ChatMessage, TemplateVars};
use kindle_generate::{BoxError, TokenDecoder};
use kindle_sampling::LogitsConstraint;

use crate::guided::Guided;

/// Text to token ids and back, as the server needs it. Its [`TokenDecoder`] (special tokens
/// not rendered) decodes generated text; the engine thread and the HTTP handlers share one.
///
/// `kindle serve` implements it with the model's tokenizer and chat template; tests implement
/// it with a toy vocabulary.
pub trait TextCodec: TokenDecoder + Send + Sync + 'static {
    /// The ids of a plain-text prompt (special-token text not parsed; BOS as the vocabulary
    /// asks).
    fn encode(&self, text: &str) -> Result<Vec<u32>, BoxError>;
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
