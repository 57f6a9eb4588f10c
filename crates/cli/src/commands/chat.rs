//! `kindle chat`: a multi-turn conversation read from standard input, one message per line.
//!
//! The conversation is rendered with the model's chat template (GGUF `tokenizer.chat_template`,
//! ChatML when absent) and tokenized with message contents as plain text. One
//! [`Session`] lives across turns: each turn's prompt is the whole conversation, of which the
//! part already in the KV cache (the previous prompt and reply) is reused, so only the closing
//! of the reply and the new user turn are prefilled.

use std::io::{BufRead, IsTerminal, Write};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_cli::chat::encode_chat;
use kindle_cli::engine::ContextMode;
use kindle_cli::plan::{
    ContextSettings, GenerationSettings, ModelSettings, Prompt, PromptEncoding, PromptSettings,
    RunPlan, RunSettings,
};
use kindle_cli::run::{self, Mode, Report, Sequence};
use kindle_cli::sampling_args::SamplingArgs;
use kindle_cli::sink::{Sink, TextSink};
use kindle_generate::chat::{ChatMessage, ChatTemplate};
use kindle_generate::{Session, Speculator, Summary};
use kindle_model::Engine;
use kindle_sampling::Sampler;

use super::draft_args::DraftArgs;
use super::{DeviceArgs, ModelArgs, TemplateArgs};

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub device: DeviceArgs,
    /// A system message opening the conversation
    #[arg(long, value_name = "TEXT")]
    pub system: Option<String>,
    #[command(flatten)]
    pub template: TemplateArgs,
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
    #[command(flatten)]
    pub draft: DraftArgs,
}

/// Run the command.
pub fn run(args: ChatArgs) -> Result<()> {
    let draft = args.draft.settings();
    draft.check()?;
    let settings = args.settings()?;
    let plan = RunPlan::build(&settings)?;
    // One drafter for the whole conversation: a draft model's cache follows the conversation
    // as the target's does (each proposal reuses the common prefix).
    let speculator = draft
        .speculator(&plan, &settings.model.engine, 0, plan.context)?
        .map(|s| {
            if args.verbose {
                s.with_timing_step()
            } else {
                s
            }
        });
    let template = plan
        .template
        .as_ref()
        .context("a chat needs the model's chat template")?;
    let mut chat = Conversation {
        plan: &plan,
        template,
        session: Session::new(&plan.engine, plan.context)?,
        sampler: plan.sampler(0, 0)?,
        messages: args
            .system
            .iter()
            .cloned()
            .map(ChatMessage::system)
            .collect(),
        verbose: args.verbose,
        speculator,
    };
    let stdin = std::io::stdin();
    let interactive = stdin.is_terminal();
    let mut lines = stdin.lock().lines();
    let mut sink = TextSink::new(std::io::stdout().lock());
    sink.begin(&Mode::Single)?;
    loop {
        if interactive {
            eprint!("> ");
            std::io::stderr().flush()?;
        }
        let Some(line) = lines.next() else { break };
        let line = line.context("reading a message from standard input")?;
        if !line.trim().is_empty() {
            chat.turn(line, &mut sink)?;
        }
    }
    Ok(())
}

impl ChatArgs {
    /// The plain settings of the conversation (fetching the default model when it is missing).
    fn settings(&self) -> Result<RunSettings> {
        Ok(RunSettings {
            model: ModelSettings {
                path: self.model.path()?,
                quantize: self.model.quantize,
                engine: self.device.options(),
            },
            prompts: PromptSettings {
                inputs: Vec::new(),
                encoding: PromptEncoding::Chat {
                    system: self.system.clone(),
                    template: self.template.settings(),
                },
            },
            context: ContextSettings {
                size: self.ctx_size,
                default_limit: Some(4096),
                mode: ContextMode::Fixed,
                keep: 0,
                max_kv_memory: None,
            },
            sampling: self.sampling.settings()?,
            generation: GenerationSettings {
                max_tokens: self.max_tokens,
                ..GenerationSettings::default()
            },
        })
    }
}

/// A conversation: its messages, and the session whose cache holds what was said.
struct Conversation<'p> {
    plan: &'p RunPlan,
    template: &'p ChatTemplate,
    session: Session<Engine>,
    sampler: Sampler,
    messages: Vec<ChatMessage>,
    verbose: bool,
    /// The drafter, when a drafting flag was given.
    speculator: Option<Speculator>,
}

impl Conversation<'_> {
    /// The user says `line`; the reply is streamed to `sink` and joins the conversation.
    fn turn(&mut self, line: String, sink: &mut dyn Sink) -> Result<()> {
        let tokenizer = &self.plan.loaded.tokenizer;
        self.messages.push(ChatMessage::user(line.clone()));
        let ids = encode_chat(tokenizer, self.template, &self.messages, true)?;
        let ctx = self.plan.context;
        if ids.len() >= ctx {
            bail!(
                "the conversation has {} tokens, which leaves no room in a context of {ctx} \
                 tokens (see --ctx-size)",
                ids.len()
            );
        }
        let reused = self.session.common_prefix_len(&ids);
        self.sampler.set_prompt_len(ids.len());
        let started = Instant::now();
        let summary = run::single(
            self.plan,
            &mut self.session,
            &mut self.sampler,
            &ids,
            sink,
            self.speculator.as_mut(),
            None,
        )?;
        let prompts = [Prompt {
            text: Some(line),
            ids,
        }];
        let mut report = Report {
            mode: &Mode::Single,
            prompts: &prompts,
            sequences: vec![Sequence {
                prompt: 0,
                summary,
                seed: Some(self.sampler.seed()),
                beam: None,
            }],
            timings: None,
            wall: started.elapsed(),
        };
        sink.finish(&report)?;
        let summary = report
            .sequences
            .pop()
            .context("the turn produced no reply")?
            .summary;
        if self.verbose {
            log_turn(prompts[0].ids.len(), reused, &summary);
            if let Some(spec) = &self.speculator {
                eprintln!("kindle: {}", spec.stats().line());
            }
        }
        self.messages.push(ChatMessage::assistant(summary.text));
        Ok(())
    }
}

/// `-v`: the conversation's length, what the cache saved, the reply's speed.
fn log_turn(conversation: usize, reused: usize, summary: &Summary) {
    let t = &summary.timings;
    eprintln!(
        "kindle: conversation {conversation} tokens ({reused} reused from the cache, {} prefilled in {:.0} ms); \
         reply {} tokens, {:.1} tok/s; finish {}",
        t.prefill_tokens,
        t.prefill.as_secs_f64() * 1e3,
        summary.generated_tokens,
        t.decode_tokens_per_second(),
        summary.finish_reason
    );
}
