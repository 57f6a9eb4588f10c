//! One module per subcommand: its arguments and its `run`.

pub mod bench;
pub mod chat;
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

pub use kindle_cli::engine::DeviceArgs;

#[derive(clap::Args, Debug)]
/// `-m/--model`: which model file a command runs.
pub struct ModelArgs {
    /// GGUF model file, or the name of a fetchable model (smollm2-135m-instruct, gemma3-270m),
    /// fetched on first use [default: smollm2-135m-instruct]
    #[arg(short, long, value_name = "PATH|NAME")]
    pub model: Option<PathBuf>,
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
