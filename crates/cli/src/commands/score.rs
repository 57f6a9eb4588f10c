//! `kindle score`: teacher-forced log-probabilities and perplexity.

use anyhow::{Result, bail};
use clap::Args;
use kindle_cli::engine;
use kindle_generate::{Session, score};
use kindle_model::Engine;
use serde_json::json;

use crate::{DeviceArgs, ModelArgs};

#[derive(Args, Debug)]
pub struct ScoreArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// Text to score (tokenized without special-token parsing unless --special)
    #[arg(long, conflicts_with = "ids", required_unless_present = "ids")]
    pub text: Option<String>,
    /// Token ids to score, comma-separated
    #[arg(long, value_delimiter = ',')]
    pub ids: Option<Vec<u32>>,
    /// Parse special-token text in --text
    #[arg(long)]
    pub special: bool,
    /// How many top alternatives to list per position
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

/// Run the command.
pub fn run(args: ScoreArgs) -> Result<()> {
    let path = args.model.path()?;
    let loaded = engine::open(&path)?;
    let ids = match (&args.ids, &args.text) {
        (Some(ids), _) => ids.clone(),
        (None, Some(text)) => loaded.tokenizer.encode(text, args.special)?,
        (None, None) => bail!("give --text or --ids"),
    };
    if ids.len() < 2 {
        bail!("scoring needs at least 2 tokens, got {}", ids.len());
    }
    let model: Engine = engine::load_model(&loaded, &args.device)?;
    let mut session = Session::new(&model, ids.len())?;
    let scored = score(&model, &mut session, &ids, args.top)?;
    if args.json {
        let positions: Vec<_> = scored
            .positions
            .iter()
            .map(|p| {
                json!({
                    "pos": p.pos,
                    "next_token": p.next_token,
                    "logprob": p.logprob,
                    "argmax": p.argmax,
                    "top": p.top.iter().map(|&(id, lp)| json!([id, lp])).collect::<Vec<_>>(),
                })
            })
            .collect();
        println!(
            "{}",
            json!({ "tokens": ids, "positions": positions, "perplexity": scored.perplexity })
        );
    } else {
        println!(
            "{:>5} {:>8} {:>10} {:>8}  piece",
            "pos", "next", "logprob", "argmax"
        );
        for p in &scored.positions {
            let piece = loaded
                .tokenizer
                .decode(&[p.next_token], false)
                .unwrap_or_default();
            println!(
                "{:>5} {:>8} {:>10.4} {:>8}  {:?}",
                p.pos, p.next_token, p.logprob, p.argmax, piece
            );
        }
        println!(
            "perplexity {:.4} over {} predicted tokens",
            scored.perplexity,
            scored.positions.len()
        );
    }
    Ok(())
}
