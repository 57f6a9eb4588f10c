//! The rules on files (a–f).

use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::manifest::{DepKind, dependencies};
use super::source::{Source, path_roots, print_macros};
use super::{BURN_CRATES, Files, MAX_LINES, Rule, Violation};

pub(crate) fn check_files(files: &Files) -> Result<Vec<Violation>> {
    let mut sources = BTreeMap::new();
    for path in &files.rust {
        sources.insert(path.clone(), Source::new(&files.read(path)?));
    }
    let mut manifests = BTreeMap::new();
    for path in &files.manifests {
        manifests.insert(path.clone(), files.read(path)?);
    }
    let mut violations = Vec::new();
    burn_dependency(&sources, &manifests, &mut violations);
    print_in_library(&sources, &mut violations);
    unwrap(&sources, &mut violations);
    file_length(&sources, &mut violations);
    crate_docs(&sources, &manifests, &mut violations);
    unused_dependency(&sources, &manifests, &mut violations);
    super::imports::import_cycles(&sources, &mut violations);
    Ok(violations)
}

fn violation(path: &Path, line: usize, rule: Rule, message: String) -> Violation {
    Violation {
        path: path.to_path_buf(),
        line,
        rule,
        message,
    }
}

fn may_use_burn(path: &Path) -> bool {
    BURN_CRATES.iter().any(|dir| path.starts_with(dir))
}

fn is_burn_package(name: &str) -> bool {
    name == "burn" || name.starts_with("burn-") || name.starts_with("burn_")
}

/// The crate folder `crates/NAME` a path is in, as `NAME`.
fn crate_under_crates(path: &Path) -> Option<&str> {
    let mut parts = path.components();
    (parts.next()?.as_os_str() == "crates").then_some(())?;
    parts.next()?.as_os_str().to_str()
}

/// Whether `path` is in the `src/` folder of a crate under `crates/` (returning the crate's
/// name) or, with `xtask`, in `xtask/src/`.
fn library_source(path: &Path, with_xtask: bool) -> Option<&str> {
    if path.file_name().is_some_and(|name| name == "tests.rs") {
        return None;
    }
    if let Some(name) = crate_under_crates(path) {
        return path
            .starts_with(Path::new("crates").join(name).join("src"))
            .then_some(name);
    }
    (with_xtask && path.starts_with("xtask/src")).then_some("xtask")
}

/// (a) Burn only in `crates/model` and `crates/kv-cache`.
fn burn_dependency(
    sources: &BTreeMap<PathBuf, Source>,
    manifests: &BTreeMap<PathBuf, String>,
    out: &mut Vec<Violation>,
) {
    let rule_says = "only crates/model and crates/kv-cache may depend on Burn";
    for (path, text) in manifests {
        if may_use_burn(path) {
            continue;
        }
        for dep in dependencies(text) {
            if is_burn_package(&dep.package) {
                out.push(violation(
                    path,
                    dep.line,
                    Rule::BurnDependency,
                    format!("`{}` in {}: {rule_says}", dep.name, dep.kind.table()),
                ));
            }
        }
    }
    for (path, source) in sources {
        if may_use_burn(path) {
            continue;
        }
        for (index, code) in source.code.iter().enumerate() {
            if let Some(root) = path_roots(code).into_iter().find(|r| is_burn_package(r)) {
                out.push(violation(
                    path,
                    index + 1,
                    Rule::BurnDependency,
                    format!("uses `{root}`: {rule_says}"),
                ));
            }
        }
    }
}

/// (b) No printing in library code.
fn print_in_library(sources: &BTreeMap<PathBuf, Source>, out: &mut Vec<Violation>) {
    for (path, source) in sources {
        match library_source(path, false) {
            Some(name) if name != "cli" => {}
            _ => continue,
        }
        for (index, code) in source.code.iter().enumerate() {
            if source.test[index] || source.allows(index, "print") {
                continue;
            }
            for name in print_macros(code) {
                out.push(violation(
                    path,
                    index + 1,
                    Rule::PrintInLibrary,
                    format!(
                        "`{name}` in library code: hand the caller a value, an event or an \
                         error, or use `tracing`"
                    ),
                ));
            }
        }
    }
}

/// (c) No `.unwrap()` outside tests.
fn unwrap(sources: &BTreeMap<PathBuf, Source>, out: &mut Vec<Violation>) {
    for (path, source) in sources {
        if library_source(path, true).is_none() {
            continue;
        }
        for (index, code) in source.code.iter().enumerate() {
            if source.test[index] || !code.contains(".unwrap()") || source.allows(index, "unwrap") {
                continue;
            }
            out.push(violation(
                path,
                index + 1,
                Rule::Unwrap,
                "`.unwrap()` outside tests: return an error, or say why it cannot fail with \
                 `// tidy: allow(unwrap): <reason>`"
                    .into(),
            ));
        }
    }
}

/// (d) No `.rs` file over [`MAX_LINES`] lines.
fn file_length(sources: &BTreeMap<PathBuf, Source>, out: &mut Vec<Violation>) {
    for (path, source) in sources {
        let checked = ["crates", "xtask", "fuzz"]
            .iter()
            .any(|dir| path.starts_with(dir));
        if checked && source.lines.len() > MAX_LINES {
            out.push(violation(
                path,
                1,
                Rule::FileLength,
                format!(
                    "{} lines, more than {MAX_LINES}: split it",
                    source.lines.len()
                ),
            ));
        }
    }
}

/// The crates the crate rules apply to: `crates/NAME` folders with a manifest, and `xtask`.
fn crate_dirs(manifests: &BTreeMap<PathBuf, String>) -> Vec<PathBuf> {
    manifests
        .keys()
        .filter_map(|path| path.parent())
        .filter(|dir| {
            *dir == Path::new("xtask")
                || (dir.components().count() == 2 && crate_under_crates(dir).is_some())
        })
        .map(Path::to_path_buf)
        .collect()
}

/// Whether a manifest's table `[table]` has a line whose key is `key` (and, with `value`, whose
/// value is that).
fn table_has(manifest: &str, table: &str, key: &str, value: Option<&str>) -> bool {
    let mut inside = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            inside = line == table;
        } else if inside && let Some((k, v)) = line.split_once('=') {
            let v = v.split('#').next().unwrap_or(v).trim();
            if k.trim() == key && value.is_none_or(|value| v == value) {
                return true;
            }
        }
    }
    false
}

/// (e) Crate docs that open the crate root, with an example, and `missing_docs` on.
fn crate_docs(
    sources: &BTreeMap<PathBuf, Source>,
    manifests: &BTreeMap<PathBuf, String>,
    out: &mut Vec<Violation>,
) {
    let workspace_manifest = manifests.get(Path::new("Cargo.toml"));
    let workspace_missing_docs = workspace_manifest
        .is_some_and(|m| table_has(m, "[workspace.lints.rust]", "missing_docs", None));
    for dir in crate_dirs(manifests) {
        let manifest_path = dir.join("Cargo.toml");
        let lib = dir.join("src").join("lib.rs");
        let main = dir.join("src").join("main.rs");
        let crate_root = if sources.contains_key(&lib) {
            lib
        } else {
            main
        };
        let Some(source) = sources.get(&crate_root) else {
            out.push(violation(
                &manifest_path,
                1,
                Rule::CrateDocs,
                "no src/lib.rs or src/main.rs to check the crate docs of".into(),
            ));
            continue;
        };
        let first = source
            .lines
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty());
        if !first.is_some_and(|line| line.starts_with("//!")) {
            out.push(violation(
                &crate_root,
                1,
                Rule::CrateDocs,
                "the crate root does not open with `//!` docs".into(),
            ));
            continue;
        }
        if dir == Path::new("xtask") {
            continue;
        }
        let has_example = source
            .lines
            .iter()
            .filter_map(|l| l.trim().strip_prefix("//!"))
            .any(|doc| doc.trim_start().starts_with("```"));
        if !has_example {
            out.push(violation(
                &crate_root,
                1,
                Rule::CrateDocs,
                "the crate docs (`//!`) have no code example (```): open with a short example \
                 that compiles"
                    .into(),
            ));
        }
        let attribute = source.code.iter().any(|line| {
            let line = line.trim();
            ["#![warn(", "#![deny(", "#![forbid("]
                .iter()
                .any(|a| line.starts_with(a))
                && line.contains("missing_docs")
        });
        let manifest = manifests
            .get(&manifest_path)
            .map(String::as_str)
            .unwrap_or("");
        let lints = table_has(manifest, "[lints.rust]", "missing_docs", None)
            || (workspace_missing_docs
                && table_has(manifest, "[lints]", "workspace", Some("true")));
        if !attribute && !lints {
            out.push(violation(
                &crate_root,
                1,
                Rule::CrateDocs,
                "`missing_docs` is not on: add `#![warn(missing_docs)]` (or `[lints] workspace = \
                 true` with `missing_docs` in `[workspace.lints.rust]`)"
                    .into(),
            ));
        }
    }
}

/// (f) Every dependency named by the code that may use it.
fn unused_dependency(
    sources: &BTreeMap<PathBuf, Source>,
    manifests: &BTreeMap<PathBuf, String>,
    out: &mut Vec<Violation>,
) {
    for dir in crate_dirs(manifests) {
        // The workspace-hack crate depends on crates for their features only.
        if dir == Path::new("crates/workspace-hack") {
            continue;
        }
        let manifest_path = dir.join("Cargo.toml");
        let Some(manifest) = manifests.get(&manifest_path) else {
            continue;
        };
        let roots_in = |folders: &[&str]| -> BTreeSet<String> {
            sources
                .iter()
                .filter(|(path, _)| folders.iter().any(|f| path.starts_with(dir.join(f))))
                .flat_map(|(_, source)| source.code.iter().flat_map(|line| path_roots(line)))
                .collect()
        };
        let src = roots_in(&["src", "build.rs"]);
        let dev = roots_in(&["src", "tests", "benches", "examples"]);
        let build = roots_in(&["build.rs"]);
        for dep in dependencies(manifest) {
            if dep.allow_unused || dep.package == "kindle-workspace-hack" {
                continue;
            }
            let ident = dep.name.replace('-', "_");
            let (used, places) = match dep.kind {
                DepKind::Normal => (src.contains(&ident), "src/ or build.rs"),
                DepKind::Dev => (dev.contains(&ident), "src/, tests/, benches/ or examples/"),
                DepKind::Build => (build.contains(&ident), "build.rs"),
            };
            if !used {
                out.push(violation(
                    &manifest_path,
                    dep.line,
                    Rule::UnusedDependency,
                    format!(
                        "`{}` in {} is not used: no `{ident}::` path or `use {ident}` in {places}; \
                         remove it, or mark the line `# tidy: allow(unused-dependency)`",
                        dep.name,
                        dep.kind.table()
                    ),
                ));
            }
        }
    }
}
