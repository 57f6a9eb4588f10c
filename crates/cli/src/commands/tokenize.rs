//! `kindle tokenize`: token ids and pieces of a text.

use anyhow::Result;
use clap::Args;
use kindle_cli::engine;
use serde_json::json;

use super::ModelArgs;

#[derive(Args, Debug)]
pub struct TokenizeArgs {
    /// Text to tokenize
    pub text: String,
    #[command(flatten)]
    pub model: ModelArgs,
    /// Parse special-token text such as <|im_start|>
    #[arg(long)]
    pub special: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// Run the command.
pub fn run(args: TokenizeArgs) -> Result<()> {
    let path = args.model.path()?;
    let loaded = engine::open_with(&path, args.model.quantize)?;
    let ids = loaded.tokenizer.encode(&args.text, args.special)?;
    let pieces: Vec<String> = ids
        .iter()
        .map(|&id| loaded.tokenizer.id_to_piece(id).unwrap_or("").to_string())
        .collect();
    if args.json {
        println!("{}", json!({ "ids": ids, "pieces": pieces }));
    } else {
        for (id, piece) in ids.iter().zip(&pieces) {
            println!("{id:>8} -> {piece:?}");
        }
    }
    Ok(())
}
