//! `kindle`: text generation with local language models.

mod commands;

use clap::{Args, Parser, Subcommand};
use commands::{
    bench, chat, convert, devices, explain, generate, inspect, quantize, score, serve, tokenize,
};
use kindle_fetch::{FetchableModel, Fetcher};

#[derive(Parser, Debug)]
#[command(
    name = "kindle",
    version,
    about = "Text generation with local language models (GGUF), on Burn"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Continue a prompt, streaming the text as it is generated.
    Generate(Box<generate::GenerateArgs>),
    /// Chat with the model: one message per line on standard input, replies streamed.
    Chat(chat::ChatArgs),
    /// Teacher-forced scoring: each next token's logprob, the argmax, the top N, perplexity.
    Score(score::ScoreArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (completions, chat completions),
    /// with continuous batching.
    Serve(serve::ServeArgs),
    /// Generate a few tokens and show every decision: the candidates, their probability
    /// before and after each processor of the chain, the entropy (table, JSON, plots, HTML).
    Explain(explain::ExplainArgs),
    /// Show the token ids and pieces of a text.
    Tokenize(tokenize::TokenizeArgs),
    /// Prefill and decode speed in llama-bench's form (pp512, tg128 tokens per second).
    Bench(bench::BenchArgs),
    /// Show a model's metadata, tensors and KV-cache size.
    Inspect(inspect::InspectArgs),
    /// Re-encode a GGUF model's weight matrices as llama-quantize does (q4_k_m, q5_k_m, q6_k,
    /// q8_0, q4_0, f16, ...: the same types and bytes), keeping its metadata and tokenizer (to
    /// make a draft model, for instance)
    Quantize(quantize::QuantizeArgs),
    /// Convert a GGUF file to a Hugging Face directory (safetensors, config.json,
    /// tokenizer.json) or a Hugging Face directory to a GGUF file
    Convert(convert::ConvertArgs),
    /// List the compute devices (--device) and whether each opens on this machine.
    Devices(devices::DevicesArgs),
    /// Download a model (by name; the default is SmolLM2-135M-Instruct, Q4_1) into the cache
    /// folder, unless it is there with the right sha256, and print its path.
    FetchModel(FetchModelArgs),
}

#[derive(Args, Debug)]
struct FetchModelArgs {
    /// Which model: smollm2-135m-instruct or gemma3-270m
    #[arg(value_name = "NAME", default_value = "smollm2-135m-instruct", value_parser = fetchable_model())]
    model: &'static FetchableModel,
    /// Fetch even when the file in place has the right sha256.
    #[arg(long)]
    force: bool,
}

/// The parser of a fetchable model's name: one of [`kindle_fetch::MODELS`], listed in `--help`.
fn fetchable_model() -> impl clap::builder::TypedValueParser<Value = &'static FetchableModel> {
    use clap::builder::TypedValueParser;
    let names: Vec<&'static str> = kindle_fetch::MODELS.iter().map(|m| m.name).collect();
    clap::builder::PossibleValuesParser::new(names)
        .map(|name| FetchableModel::named(&name).unwrap_or(&kindle_fetch::SMOLLM2_135M))
}

fn main() {
    if let Err(message) = kindle_model::simd_cap_name() {
        eprintln!("kindle: error: {message}");
        std::process::exit(1);
    }
    let cli = Cli::parse();
    // The program runs its kernels' threads as its main work: let them take one whole core
    // between them when other processes leave them about one (`KINDLE_GATHER=0` to keep the
    // scheduler's placement).
    kindle_model::set_gathering(true);
    let result = match cli.command {
        Command::Generate(args) => generate::run(*args),
        Command::Chat(args) => chat::run(args),
        Command::Score(args) => score::run(args),
        Command::Explain(args) => explain::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Devices(args) => devices::run(args),
        Command::FetchModel(args) => Fetcher::new()
            .model(args.model)
            .force(args.force)
            .fetch(&mut |event| eprintln!("kindle: {event}"))
            .map(|path| println!("{}", path.display()))
            .map_err(Into::into),
    };
    if let Err(error) = result {
        eprintln!("kindle: error: {}", describe(&error));
        std::process::exit(1);
    }
}

/// `error` and its causes joined by `: `, leaving out a cause its context already says (an
/// error whose message quotes its source would otherwise print it twice).
fn describe(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if part.is_empty() || text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    /// Every subcommand's flags are well formed (clap's own checks, which only a build with
    /// debug assertions runs), and, as ours, checked in any build: no short or long name (or
    /// alias) taken by two of a subcommand's arguments.
    #[test]
    fn the_whole_command_line_is_consistent() {
        use clap::CommandFactory;
        super::Cli::command().debug_assert();
        let mut cli = super::Cli::command();
        cli.build();
        let clashes = name_clashes(&cli);
        assert!(clashes.is_empty(), "{clashes:#?}");
    }

    /// A short flag given to two arguments of one subcommand is caught.
    #[test]
    fn a_short_flag_taken_twice_is_caught() {
        let mut cli = clap::Command::new("kindle").subcommand(
            clap::Command::new("generate")
                .arg(clap::Arg::new("seed").long("seed").short('s'))
                .arg(clap::Arg::new("special").long("special").short('s')),
        );
        cli.build();
        let clashes = name_clashes(&cli);
        assert_eq!(clashes.len(), 1, "{clashes:?}");
        assert!(clashes[0].contains("-s") && clashes[0].contains("generate"));
    }

    /// `"<command path>: -x taken by a and b"` for every name two arguments share.
    fn name_clashes(cmd: &clap::Command) -> Vec<String> {
        let mut out = Vec::new();
        let mut names: HashMap<String, String> = HashMap::new();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().to_string();
            let shorts = arg
                .get_short()
                .into_iter()
                .chain(arg.get_all_short_aliases().unwrap_or_default());
            let longs = arg.get_long().into_iter().map(str::to_string).chain(
                arg.get_all_aliases()
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_string),
            );
            let all = shorts
                .map(|c| format!("-{c}"))
                .chain(longs.map(|l| format!("--{l}")));
            for name in all {
                if let Some(other) = names.insert(name.clone(), id.clone()) {
                    out.push(format!(
                        "{}: {name} taken by {other} and {id}",
                        cmd.get_name()
                    ));
                }
            }
        }
        for sub in cmd.get_subcommands() {
            out.extend(name_clashes(sub));
        }
        out
    }
}
