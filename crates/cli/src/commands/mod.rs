//! One module per subcommand: its arguments and its `run`.

pub mod bench;
mod bench_draft;
mod bench_format;
pub mod chat;
pub mod convert;
pub mod devices;
pub mod draft_args;
pub mod explain;
pub mod generate;
pub mod inspect;
pub mod quantize;
pub mod score;
pub mod serve;
pub mod tokenize;

use std::path::PathBuf;

use kindle_fetch::FetchableModel;
use kindle_gguf::quant::GgmlType;

pub use kindle_cli::engine::DeviceArgs;

/// `--chat-template-file` and `--chat-template-kwargs`: which chat template a command renders
/// conversations with, and the extra variables it sees.
#[derive(clap::Args, Debug, Default)]
pub struct TemplateArgs {
    /// A Jinja chat template file to use instead of the model's (Hugging Face's semantics)
    #[arg(long, value_name = "FILE")]
    pub chat_template_file: Option<PathBuf>,
    /// Extra variables for the chat template, a JSON object, e.g. '{"enable_thinking": false}'
    /// (Qwen3's switch; as Hugging Face's apply_chat_template keyword arguments)
    #[arg(long, value_name = "JSON", value_parser = template_kwargs)]
    pub chat_template_kwargs: Option<String>,
}

/// `--chat-template-kwargs`' parser: the text, once it is known to be a usable JSON object.
fn template_kwargs(text: &str) -> Result<String, String> {
    kindle_cli::chat::parse_template_kwargs(text)
        .map(|_| text.to_string())
        .map_err(|e| e.to_string())
}

impl TemplateArgs {
    /// As plain settings.
    pub fn settings(&self) -> kindle_cli::chat::TemplateSettings {
        kindle_cli::chat::TemplateSettings {
            file: self.chat_template_file.clone(),
            kwargs: self.chat_template_kwargs.clone(),
        }
    }
}

#[derive(clap::Args, Debug)]
/// `-m/--model`: which model file a command runs.
pub struct ModelArgs {
    /// GGUF model file, Hugging Face model directory (config.json, safetensors,
    /// tokenizer.json), or the name of a fetchable model (smollm2-135m-instruct, gemma3-270m),
    /// fetched on first use [default: smollm2-135m-instruct]
    #[arg(short, long, value_name = "PATH|DIR|NAME")]
    pub model: Option<PathBuf>,
    /// Quantize the model's dense (f32, f16, bf16) weight matrices at load, for the CPU
    /// kernels: q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k or q6_k (also f16, bf16, f32;
    /// a matrix whose rows are not whole blocks takes llama-quantize's fallback type);
    /// quantized matrices stay as they are
    #[arg(long, value_name = "TYPE", value_parser = quantize_type)]
    pub quantize: Option<GgmlType>,
}

/// `--quantize`'s parser.
fn quantize_type(name: &str) -> Result<GgmlType, String> {
    kindle_cli::engine::quantize_type(name).map_err(|e| e.to_string())
}

impl ModelArgs {
    /// The model file: the path given; else, for the name of a fetchable model, that model in
    /// the cache folder (fetched if missing); else the default model (fetched if missing). A
    /// file that exists wins over a fetchable model of the same name.
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        let model = match &self.model {
            Some(path) if path.exists() => return Ok(path.clone()),
            Some(path) => match path.to_str().and_then(FetchableModel::named) {
                Some(model) => model,
                None => anyhow::bail!(
                    "model file {} does not exist (fetchable models, by name: {})",
                    path.display(),
                    FetchableModel::names()
                ),
            },
            None => &kindle_fetch::SMOLLM2_135M,
        };
        // Quiet when the model is in place: this runs before every command.
        Ok(kindle_fetch::ensure_model(model, &mut |event| {
            if !matches!(event, kindle_fetch::Event::AlreadyPresent { .. }) {
                eprintln!("kindle: {event}");
            }
        })?)
    }
}
