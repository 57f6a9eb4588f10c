//! `kindle chat`: a multi-turn conversation read from standard input, one message per line.
//!
//! The conversation is rendered with the model's chat template (GGUF `tokenizer.chat_template`,
//! ChatML when absent) and tokenized with message contents as plain text. One
//! [`Session`] lives across turns: each turn's prompt is the whole conversation, of which the
//! part already in the KV cache (the previous prompt and reply) is reused, so only the closing
//! of the reply and the new user turn are prefilled.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_cli::chat::{chat_template, encode_chat};
use kindle_cli::engine::{self, Detokenizer};
use kindle_cli::sampling_args::SamplingArgs;
use kindle_generate::chat::ChatMessage;
use kindle_generate::{Event, GenerationConfig, Session, generate};

use crate::{DeviceArgs, ModelArgs};

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// A system message opening the conversation
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    /// Most tokens per reply
    #[arg(short = 'n', long, default_value_t = 512)]
    pub max_tokens: usize,
    /// Context length of the whole conversation [default: the model's, at most 4096]
    #[arg(short = 'c', long = "ctx-size", value_name = "N")]
    pub ctx_size: Option<usize>,
    /// Print prompt and prefill figures of each turn to standard error
    #[arg(short, long)]
    pub verbose: bool,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// Run the command.
pub fn run(args: ChatArgs) -> Result<()> {
    let path = args.model.path()?;
    let loaded = engine::open(&path)?;
    let tokenizer = &loaded.tokenizer;
    let template = chat_template(tokenizer)?;
    let model = engine::load_model(&loaded, &args.device)?;
    let model_ctx = model.llama.config().context_length;
    let ctx = args.ctx_size.unwrap_or(model_ctx.min(4096));
    if ctx == 0 || ctx > model_ctx {
        bail!("--ctx-size must be between 1 and the model's context length {model_ctx}");
    }
    let encode = |text: &str| tokenizer.encode(text, false).unwrap_or_default();
    let mut sampler = args
        .sampling
        .to_config(tokenizer.eog_ids(), &encode)?
        .build()?;
    let config = GenerationConfig::default()
        .with_max_new_tokens(args.max_tokens)
        .with_eog_token_ids(tokenizer.eog_ids().iter().copied());
    let decoder = Detokenizer {
        tokenizer,
        render_special: false,
    };
    let mut session = Session::new(&model, ctx)?;
    let mut messages: Vec<ChatMessage> = args.system.into_iter().map(ChatMessage::system).collect();

    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let mut lines = stdin.lock().lines();
    let mut stdout = std::io::stdout().lock();
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading a message from standard input")?;
        if line.trim().is_empty() {
            continue;
        }
        messages.push(ChatMessage::user(line));
        let prompt = encode_chat(tokenizer, &template, &messages, true)?;
        if prompt.len() >= ctx {
            bail!(
                "the conversation has {} tokens, which leaves no room in a context of {ctx} \
                 tokens (see --ctx-size)",
                prompt.len()
            );
        }
        let reused = session.common_prefix_len(&prompt);
        sampler.set_prompt_len(prompt.len());
        let mut summary = None;
        for event in generate(
            &model,
            &mut session,
            &prompt,
            &mut sampler,
            &decoder,
            &config,
        )? {
            match event? {
                Event::Token { text, .. } => {
                    stdout.write_all(text.as_bytes())?;
                    stdout.flush()?;
                }
                Event::Done(done) => summary = Some(done),
            }
        }
        writeln!(stdout)?;
        let summary = summary.context("generation ended without a summary")?;
        if args.verbose {
            let t = &summary.timings;
            eprintln!(
                "kindle: conversation {} tokens ({} reused from the cache, {} prefilled in {:.0} ms); \
                 reply {} tokens, {:.1} tok/s; finish {}",
                prompt.len(),
                reused,
                t.prefill_tokens,
                t.prefill.as_secs_f64() * 1e3,
                summary.generated_tokens,
                t.decode_tokens_per_second(),
                summary.finish_reason
            );
        }
        messages.push(ChatMessage::assistant(summary.text));
    }
    Ok(())
}
