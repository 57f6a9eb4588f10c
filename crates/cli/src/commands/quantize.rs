//! `kindle quantize IN OUT --type T`: re-encode a GGUF model's weight matrices as `f32`, `f16`,
//! `q8_0`, `q4_0` or `q4_1`, keeping every metadata entry (the tokenizer included) and the
//! tensor order; one-dimensional tensors (norms, biases) stay `f32`. The written file is read
//! back and checked against what was meant to be written.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_cli::engine;

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The GGUF file to read
    pub input: PathBuf,
    /// The GGUF file to write
    pub output: PathBuf,
    /// The type of the weight matrices: f32, f16, q8_0, q4_0, q4_1, q3_k or q2_k (K-quant rows
    /// that are not whole 256-value super-blocks take q4_0, as llama-quantize does)
    #[arg(long = "type", value_name = "TYPE")]
    pub ty: String,
}

/// Run the command.
pub fn run(args: QuantizeArgs) -> Result<()> {
    let ty = engine::quantize_type(&args.ty).context("--type")?;
    if args.input == args.output {
        bail!(
            "the output would overwrite the input ({})",
            args.input.display()
        );
    }
    let file = engine::open_file(&args.input)?;
    let writer = engine::requantize(&file, ty, true)?;
    writer
        .write_checked(&args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    let before: usize = file
        .tensors()
        .iter()
        .map(|t| file.tensor_bytes(t).len())
        .sum();
    let after = std::fs::metadata(&args.output).map_or(0, |m| m.len() as usize);
    eprintln!(
        "kindle: wrote {} ({} tensors, weights as {}: {:.1} MiB, was {:.1} MiB of tensors)",
        args.output.display(),
        file.tensors().len(),
        ty.name(),
        after as f64 / (1 << 20) as f64,
        before as f64 / (1 << 20) as f64
    );
    Ok(())
}
