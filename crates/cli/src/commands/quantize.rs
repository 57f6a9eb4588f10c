//! `kindle quantize IN OUT --type T`: re-encode a GGUF model's weight matrices as `f32`, `f16`,
//! `q8_0`, `q4_0` or `q4_1`, keeping every metadata entry (the tokenizer included) and the
//! tensor order; one-dimensional tensors (norms, biases) stay `f32`. The written file is read
//! back and checked against what was meant to be written.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_gguf::quant::{GgmlType, QUANTIZE_TYPES, quantize};
use kindle_gguf::{ALIGNMENT_KEY, GgufWriter};

#[derive(Args, Debug)]
pub struct QuantizeArgs {
    /// The GGUF file to read
    pub input: PathBuf,
    /// The GGUF file to write
    pub output: PathBuf,
    /// The type of the weight matrices: f32, f16, q8_0, q4_0 or q4_1
    #[arg(long = "type", value_name = "TYPE")]
    pub ty: String,
}

/// Run the command.
pub fn run(args: QuantizeArgs) -> Result<()> {
    let ty = QUANTIZE_TYPES
        .into_iter()
        .find(|t| t.name().eq_ignore_ascii_case(&args.ty))
        .with_context(|| {
            format!(
                "--type {}: not a type kindle quantizes to (f32, f16, q8_0, q4_0, q4_1)",
                args.ty
            )
        })?;
    if args.input == args.output {
        bail!(
            "the output would overwrite the input ({})",
            args.input.display()
        );
    }
    let file = kindle_cli::engine::open_file(&args.input)?;
    let mut writer = GgufWriter::new();
    for (key, value) in file.metadata() {
        writer = writer.metadata(key.clone(), value.clone());
    }
    if file.get(ALIGNMENT_KEY).is_none() {
        writer = writer.alignment(file.alignment());
    }
    let (mut before, mut after) = (0usize, 0usize);
    for info in file.tensors() {
        let values = file
            .dequantize(&info.name)
            .with_context(|| format!("reading tensor {}", info.name))?;
        let to = if info.dims.len() >= 2 && info.dims[0] as usize % ty.block_size() == 0 {
            ty
        } else {
            GgmlType::F32
        };
        let bytes = quantize(to, &values).with_context(|| format!("quantizing {}", info.name))?;
        before += file.tensor_bytes(info).len();
        after += bytes.len();
        writer = writer.tensor(info.name.clone(), &info.dims, to, bytes);
    }
    writer
        .write_checked(&args.output)
        .with_context(|| format!("writing {}", args.output.display()))?;
    eprintln!(
        "kindle: wrote {} ({} tensors, weights as {}: {:.1} MiB, was {:.1} MiB)",
        args.output.display(),
        file.tensors().len(),
        ty.name(),
        after as f64 / (1 << 20) as f64,
        before as f64 / (1 << 20) as f64
    );
    Ok(())
}
