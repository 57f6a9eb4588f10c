//! `kindle score`: teacher-forced log-probabilities and perplexity.

use anyhow::{Result, bail};
use clap::Args;
use kindle_cli::plan::{
    ContextSettings, GenerationSettings, ModelSettings, PromptEncoding, PromptInput,
    PromptSettings, RunPlan, RunSettings, SamplingSettings,
};
use kindle_generate::score;
use serde_json::json;

use super::{DeviceArgs, ModelArgs};

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
    let input = match (&args.ids, &args.text) {
        (Some(ids), _) => PromptInput::Ids(ids.clone()),
        (None, Some(text)) => PromptInput::Text(text.clone()),
        (None, None) => bail!("give --text or --ids"),
    };
    let settings = RunSettings {
        model: ModelSettings {
            path: args.model.path()?,
            quantize: args.model.quantize,
            engine: args.device.options(),
        },
        prompts: PromptSettings {
            inputs: vec![input],
            encoding: PromptEncoding::Plain {
                special: args.special,
            },
        },
        context: ContextSettings::default(),
        sampling: SamplingSettings::default(),
        // Nothing is generated: the whole text is the prompt.
        generation: GenerationSettings::default(),
    };
    let plan = RunPlan::build_checked(&settings, |prompts| {
        let n = prompts.first().map_or(0, |p| p.ids.len());
        if n < 2 {
            bail!("scoring needs at least 2 tokens, got {n}");
        }
        Ok(())
    })?;
    let ids = &plan.prompts[0].ids;
    let mut session = plan.session()?;
    let scored = score(&plan.engine, &mut session, ids, args.top)?;
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
            let piece = plan
                .loaded
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
