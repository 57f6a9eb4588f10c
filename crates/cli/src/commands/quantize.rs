//! `kindle quantize IN OUT --type T`: re-encode a GGUF model's weight matrices as one of
//! llama-quantize's file types (`q4_k_m`, `q5_k_s`, `q6_k`, `q8_0`, `f16`, ...), choosing each
//! matrix's type as llama-quantize does (`kindle_gguf::mix`; `--pure`: one type for all) and
//! encoding it as ggml's reference quantizers do, byte for byte. Every metadata entry (the
//! tokenizer included) and the tensor order are kept; `general.file_type` names the new type.
//! The written file is read back and checked against what was meant to be written.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_cli::engine::{self, Scheme};
use kindle_gguf::GgufFile;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The GGUF file to read
    pub input: PathBuf,
    /// The GGUF file to write
    pub output: PathBuf,
    /// The file type, as llama-quantize names it: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
    /// q2_k, q3_k_s, q3_k_m, q3_k_l, q4_k_s, q4_k_m, q5_k_s, q5_k_m or q6_k (q3_k, q4_k and q5_k are
    /// the _m mixtures). A mixture gives some matrices more bits (the output, some attention
    /// values and feed-forward down projections) as llama-quantize does; a matrix whose rows are
    /// not whole blocks of its type takes llama-quantize's fallback (q4_k -> q5_0, q5_k -> q5_1,
    /// q6_k -> q8_0, q2_k and q3_k -> q4_0)
    #[arg(long = "type", value_name = "TYPE")]
    pub ty: String,
    /// Every quantized matrix the file type's own type (q4_k for q4_k_m), without the mixture's
    /// exceptions (llama-quantize's --pure)
    #[arg(long)]
    pub pure: bool,
}

/// Run the command.
pub fn run(args: QuantizeArgs) -> Result<()> {
    let ftype = engine::file_type(&args.ty).context("--type")?;
    let scheme = if args.pure {
        Scheme::PureFile(ftype)
    } else {
        Scheme::Mix(ftype)
    };
    // The same file by another name (`./in.gguf`, a link) too: the input is read while the
    // output is written.
    let same = args.input == args.output
        || matches!(
            (args.input.canonicalize(), args.output.canonicalize()),
            (Ok(a), Ok(b)) if a == b
        );
    if same {
        bail!(
            "the output would overwrite the input ({})",
            args.input.display()
        );
    }
    let file = engine::open_file(&args.input)?;
    let writer = engine::requantize(&file, scheme, true)?;
    writer
        .write_checked(&args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    let before: usize = file
        .tensors()
        .iter()
        .map(|t| file.tensor_bytes(t).len())
        .sum();
    let after = std::fs::metadata(&args.output).map_or(0, |m| m.len() as usize);
    let written = GgufFile::open(&args.output)
        .with_context(|| format!("reading back {}", args.output.display()))?;
    let mut counts = BTreeMap::new();
    for t in written.tensors() {
        *counts.entry(t.ty.name()).or_insert(0usize) += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(ty, n)| format!("{n} {ty}")).collect();
    eprintln!(
        "kindle: wrote {} as {}{} ({} tensors: {}; {:.1} MiB, was {:.1} MiB of tensors)",
        args.output.display(),
        ftype.name(),
        if args.pure { " --pure" } else { "" },
        written.tensors().len(),
        counts.join(", "),
        after as f64 / (1 << 20) as f64,
        before as f64 / (1 << 20) as f64
    );
    Ok(())
}
