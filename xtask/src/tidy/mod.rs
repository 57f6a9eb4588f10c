//! `cargo xtask tidy`: the repository's rules, checked over its files (rules a–f and i) and
//! over `cargo tree` (rules g and h).
//!
//! Every violation prints as `path:line: rule: message`, `path` relative to the workspace root:
//!
//! | rule | what it checks |
//! | --- | --- |
//! | `burn-dependency` | Burn (`burn`, `burn-*` in a dependency table, `burn::`/`use burn` in a source) only in `crates/model` and `crates/kv-cache` (`fuzz/` included) |
//! | `print-in-library` | no `println!`, `eprintln!`, `print!`, `eprint!`, `dbg!` in `crates/*/src` outside `crates/cli` and test code |
//! | `unwrap` | no `.unwrap()` in `crates/*/src` and `xtask/src` outside test code |
//! | `file-length` | no `.rs` file over 800 lines in `crates/`, `xtask/`, `fuzz/` |
//! | `crate-docs` | each crate root opens with `//!` docs holding a code example, with `missing_docs` on (`xtask`: the docs only) |
//! | `unused-dependency` | each dependency named by the code that may use it (`[dependencies]`: `src/`, `build.rs`; `[dev-dependencies]`: also `tests/`, `benches/`, `examples/`); not `kindle-workspace-hack` nor that crate's own |
//! | `feature-unification` | `cargo run` and `cargo test --workspace` resolve the same features |
//! | `burn-in-tree` | `cargo tree -e normal` of the crates that must not reach Burn shows none |
//! | `import-cycle` | no two files of a crate's `src/` import each other, directly or through others (see `imports.rs`; listed exceptions in [`ALLOWED_LOOPS`]) |
//!
//! Test code is a `#[cfg(test)]` item (to its closing brace), a file under `#![cfg(test)]`,
//! or a file named `tests.rs`; `tests/`, `benches/` and `examples/` are not library code.
//! Comments and string literals are not code. Escape hatches, with a reason:
//! `// tidy: allow(unwrap): <reason>` or `// tidy: allow(print): <reason>` on the line or the
//! line before, and `# tidy: allow(unused-dependency)` on a dependency's line.

mod cargo;
mod imports;
mod manifest;
mod rules;
mod source;

pub use cargo::{NO_BURN_CRATES, burn_packages, feature_differences, workspace_root};
pub use imports::ALLOWED_LOOPS;
pub use manifest::{DepKind, Dependency, dependencies};
pub use source::{Source, blank, path_roots, print_macros};

use anyhow::{Context, Result};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// A rule of the repository.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rule {
    /// (a) Burn only in `crates/model` and `crates/kv-cache`.
    BurnDependency,
    /// (b) No printing in library code.
    PrintInLibrary,
    /// (c) No `.unwrap()` outside tests.
    Unwrap,
    /// (d) No source file over [`MAX_LINES`] lines.
    FileLength,
    /// (e) Crate docs with an example, `missing_docs` on.
    CrateDocs,
    /// (f) No unused dependency.
    UnusedDependency,
    /// (g) One feature set for `cargo run` and `cargo test --workspace`.
    FeatureUnification,
    /// (h) No Burn in the trees of the crates that must not use it.
    BurnInTree,
    /// (i) No import loop between the files of one crate.
    ImportCycle,
}

impl Rule {
    /// The rule's name, as printed.
    pub fn name(self) -> &'static str {
        match self {
            Rule::BurnDependency => "burn-dependency",
            Rule::PrintInLibrary => "print-in-library",
            Rule::Unwrap => "unwrap",
            Rule::FileLength => "file-length",
            Rule::CrateDocs => "crate-docs",
            Rule::UnusedDependency => "unused-dependency",
            Rule::FeatureUnification => "feature-unification",
            Rule::BurnInTree => "burn-in-tree",
            Rule::ImportCycle => "import-cycle",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The most lines a `.rs` file may have.
pub const MAX_LINES: usize = 800;

/// The crates (directories under the root) that may depend on Burn.
pub const BURN_CRATES: [&str; 2] = ["crates/model", "crates/kv-cache"];

/// One broken rule.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Violation {
    /// The file, relative to the workspace root.
    pub path: PathBuf,
    /// Line number, 1-based.
    pub line: usize,
    /// The rule.
    pub rule: Rule,
    /// What is wrong and what to do.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}: {}",
            self.path.display(),
            self.line,
            self.rule,
            self.message
        )
    }
}

/// What [`check`] runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// Run the rules that call `cargo` on the real workspace (g and h).
    pub cargo_rules: bool,
    /// The cargo to call: `$CARGO` (set by `cargo run`), else `cargo`.
    pub cargo: OsString,
}

impl Options {
    /// Every rule.
    pub fn all() -> Self {
        Options {
            cargo_rules: true,
            cargo: std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()),
        }
    }

    /// The rules on files only (a–f), for fake workspaces.
    pub fn files_only() -> Self {
        Options {
            cargo_rules: false,
            ..Options::all()
        }
    }
}

/// Checks the workspace at `root`; the violations come sorted by path and line.
pub fn check(root: &Path, options: &Options) -> Result<Vec<Violation>> {
    let files = Files::collect(root)?;
    let mut violations = rules::check_files(&files)?;
    if options.cargo_rules {
        violations.extend(cargo::check(root, &options.cargo)?);
    }
    violations.sort();
    Ok(violations)
}

/// The files the rules read: every `.rs` file and `Cargo.toml` under the root, outside
/// `target` and hidden folders, as paths relative to the root.
pub(crate) struct Files {
    pub(crate) root: PathBuf,
    pub(crate) rust: Vec<PathBuf>,
    pub(crate) manifests: Vec<PathBuf>,
}

impl Files {
    fn collect(root: &Path) -> Result<Self> {
        let mut files = Files {
            root: root.to_path_buf(),
            rust: Vec::new(),
            manifests: Vec::new(),
        };
        files.walk(Path::new(""))?;
        files.rust.sort();
        files.manifests.sort();
        Ok(files)
    }

    fn walk(&mut self, relative: &Path) -> Result<()> {
        let dir = self.root.join(relative);
        let entries =
            std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))?;
        for entry in entries {
            let entry = entry.with_context(|| format!("listing {}", dir.display()))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let path = relative.join(&*name);
            let kind = entry.file_type()?;
            if kind.is_dir() {
                if !name.starts_with('.') && name != "target" {
                    self.walk(&path)?;
                }
            } else if name.ends_with(".rs") {
                self.rust.push(path);
            } else if name == "Cargo.toml" {
                self.manifests.push(path);
            }
        }
        Ok(())
    }

    pub(crate) fn read(&self, relative: &Path) -> Result<String> {
        let path = self.root.join(relative);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }
}
