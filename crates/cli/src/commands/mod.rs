//! One module per subcommand: its arguments and its `run`.

pub mod bench;
pub mod chat;
pub mod devices;
pub mod generate;
pub mod inspect;
pub mod score;
pub mod tokenize;

use std::path::PathBuf;

pub use kindle_cli::engine::DeviceArgs;

#[derive(clap::Args, Debug)]
/// `-m/--model`: which model file a command runs.
pub struct ModelArgs {
    /// GGUF model file [default: SmolLM2-135M-Instruct Q4_1, fetched on first use]
    #[arg(short, long, value_name = "PATH")]
    pub model: Option<PathBuf>,
}

impl ModelArgs {
    /// The model file: the path given, else the default model (fetched if missing).
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        match &self.model {
            Some(path) => Ok(path.clone()),
            // Quiet when the model is in place: this runs before every command.
            None => Ok(kindle_fetch::ensure_default_model(&mut |event| {
                if !matches!(event, kindle_fetch::Event::AlreadyPresent { .. }) {
                    eprintln!("kindle: {event}");
                }
            })?),
        }
    }
}
