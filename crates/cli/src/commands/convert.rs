//! `kindle convert IN OUT --to hf|gguf`: a GGUF file to a Hugging Face directory (weights
//! dequantised to f32, f16 or bf16; config.json; tokenizer.json and the chat template) and a
//! Hugging Face directory to a GGUF file (f32, f16 or one quantized type for the weight
//! matrices, the tokenizer in the metadata), both through [`kindle_hf`]. The written GGUF is read back
//! and checked; nothing is overwritten without `--force`.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use kindle_cli::engine;
use kindle_hf::{HfDir, HfDtype, ToGgufOptions};

/// What `kindle convert` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// A Hugging Face directory (from a GGUF file).
    Hf,
    /// A GGUF file (from a Hugging Face directory).
    Gguf,
}

/// The dtype of a Hugging Face directory's weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// 32-bit floats (the dequantised values exactly).
    F32,
    /// IEEE half precision.
    F16,
    /// bfloat16.
    Bf16,
}

#[derive(Args, Debug)]
pub struct ConvertArgs {
    /// The model to read: a GGUF file (or a fetchable model's name) for --to hf, a Hugging
    /// Face directory for --to gguf
    pub input: PathBuf,
    /// Where to write: a directory for --to hf, a file for --to gguf
    pub output: PathBuf,
    /// What to write [default: hf for a GGUF input, gguf for a directory]
    #[arg(long, value_enum)]
    pub to: Option<Target>,
    /// --to hf: the weights' dtype
    #[arg(long, value_enum, default_value = "f32")]
    pub dtype: Dtype,
    /// --to gguf: the weight matrices' type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1,
    /// q2_k, q3_k, q4_k, q5_k, q6_k; rows that are not whole blocks take llama-quantize's
    /// fallback) [default: as stored: f32, f16 and bf16 stay]
    #[arg(long = "type", value_name = "TYPE")]
    pub ty: Option<String>,
    /// Replace an existing output
    #[arg(long)]
    pub force: bool,
}

/// Run the command.
pub fn run(args: ConvertArgs) -> Result<()> {
    let input = resolve_input(&args.input)?;
    let to = args.to.unwrap_or(if input.is_dir() {
        Target::Gguf
    } else {
        Target::Hf
    });
    check_output(&args.output, to, args.force)?;
    match to {
        Target::Hf => {
            if args.ty.is_some() {
                bail!("--type sets a GGUF file's tensor type: with --to hf use --dtype");
            }
            if input.is_dir() {
                bail!(
                    "--to hf converts a GGUF file, and {} is a directory",
                    input.display()
                );
            }
            let file = engine::open_file(&input)?;
            let dtype = match args.dtype {
                Dtype::F32 => HfDtype::F32,
                Dtype::F16 => HfDtype::F16,
                Dtype::Bf16 => HfDtype::BF16,
            };
            kindle_hf::write_hf(&file, &args.output, dtype)
                .with_context(|| format!("writing {}", args.output.display()))?;
            eprintln!(
                "kindle: wrote {} (Hugging Face directory, {} weights: {})",
                args.output.display(),
                dtype.torch_name(),
                listing(&args.output)
            );
        }
        Target::Gguf => {
            if !kindle_hf::is_hf_dir(&input) {
                bail!(
                    "--to gguf converts a Hugging Face directory (with a config.json), and {} is not one",
                    input.display()
                );
            }
            let tensor_type = args
                .ty
                .as_deref()
                .map(engine::quantize_type)
                .transpose()
                .context("--type")?;
            let options = ToGgufOptions {
                tensor_type,
                tokenizer: true,
            };
            HfDir::open(&input)
                .and_then(|dir| dir.write_gguf(&args.output, &options))
                .with_context(|| {
                    format!(
                        "converting {} to {}",
                        input.display(),
                        args.output.display()
                    )
                })?;
            let bytes = std::fs::metadata(&args.output).map_or(0, |m| m.len());
            eprintln!(
                "kindle: wrote {} (GGUF, {:.1} MiB)",
                args.output.display(),
                bytes as f64 / (1 << 20) as f64
            );
        }
    }
    Ok(())
}

/// The input path: as given when it exists, else a fetchable model's file by name.
fn resolve_input(input: &Path) -> Result<PathBuf> {
    super::ModelArgs {
        model: Some(input.to_path_buf()),
        quantize: None,
    }
    .path()
}

/// The output must not exist (a directory may exist empty) unless `--force`.
fn check_output(output: &Path, to: Target, force: bool) -> Result<()> {
    if force || !output.exists() {
        return Ok(());
    }
    match to {
        Target::Hf if output.is_dir() => {
            let empty = std::fs::read_dir(output)
                .with_context(|| format!("reading {}", output.display()))?
                .next()
                .is_none();
            if !empty {
                bail!(
                    "{} exists and is not empty (--force writes into it)",
                    output.display()
                );
            }
            Ok(())
        }
        Target::Hf => bail!("{} exists and is not a directory", output.display()),
        Target::Gguf => bail!("{} exists (--force replaces it)", output.display()),
    }
}

/// The files of a written directory with their sizes, for the closing line.
fn listing(dir: &Path) -> String {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| {
                    let size = e.metadata().map_or(0, |m| m.len());
                    (e.file_name().to_string_lossy().into_owned(), size)
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
        .iter()
        .map(|(name, size)| match *size {
            s if s >= 1 << 20 => format!("{name} {:.1} MiB", s as f64 / (1 << 20) as f64),
            s => format!("{name} {s} B"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}
