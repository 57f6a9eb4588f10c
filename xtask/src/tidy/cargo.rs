//! The rules on `cargo tree` (g and h): they need cargo and the real workspace.

use anyhow::{Context, Result, bail};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::manifest::dependencies;
use super::{Rule, Violation};

/// The crates whose normal dependencies must not reach Burn (those that do not exist yet are
/// skipped).
pub const NO_BURN_CRATES: [&str; 11] = [
    "kindle-blocks",
    "kindle-gguf",
    "kindle-tokenizer",
    "kindle-kernels",
    "kindle-sampling",
    "kindle-generate",
    "kindle-fetch",
    "kindle-server",
    "kindle-hf",
    "kindle-explain",
    "kindle-constrain",
];

/// Where [`feature_differences`] reports: the crate that fixes them.
const WORKSPACE_HACK: &str = "crates/workspace-hack/Cargo.toml";

pub(crate) fn check(root: &Path, cargo: &OsStr) -> Result<Vec<Violation>> {
    let features = ["-f", "{p} {f}", "--prefix", "none"];
    let run = cargo_tree(
        root,
        cargo,
        &[&["-p", "kindle-cli", "-e", "normal,build"], &features[..]].concat(),
    )?;
    let test = cargo_tree(
        root,
        cargo,
        &[&["--workspace", "-e", "normal,build,dev"], &features[..]].concat(),
    )?;
    let mut out = feature_differences(&run, &test);

    let packages = workspace_packages(root, cargo)?;
    let names = ["-f", "{p}", "--prefix", "none"];
    for name in NO_BURN_CRATES {
        let Some(manifest) = packages.get(name) else {
            continue;
        };
        let tree = cargo_tree(
            root,
            cargo,
            &[&["-e", "normal", "-p", name], &names[..]].concat(),
        )?;
        if let Some(shown) = shown_burn(&tree) {
            out.push(Violation {
                path: manifest.clone(),
                line: burn_line(root, manifest),
                rule: Rule::BurnInTree,
                message: format!(
                    "`cargo tree -e normal -p {name}` shows {shown}: only kindle-model and \
                     kindle-kv-cache may depend on Burn"
                ),
            });
        }
    }
    if let Some(manifest) = packages.get("kindle-cli") {
        let tree = cargo_tree(
            root,
            cargo,
            &[
                &["-p", "kindle-cli", "-e", "normal", "--depth", "1"],
                &names[..],
            ]
            .concat(),
        )?;
        if let Some(shown) = shown_burn(&tree) {
            out.push(Violation {
                path: manifest.clone(),
                line: burn_line(root, manifest),
                rule: Rule::BurnInTree,
                message: format!(
                    "`cargo tree -p kindle-cli -e normal --depth 1` shows {shown}: kindle-cli \
                     names no Burn type and reaches Burn only through kindle-model"
                ),
            });
        }
    }
    Ok(out)
}

/// "burn v0.22.1" (with "and N more burn packages") when a tree has Burn packages.
fn shown_burn(tree: &str) -> Option<String> {
    let burn = burn_packages(tree);
    let first = burn
        .iter()
        .find(|p| p.starts_with("burn "))
        .or(burn.first())?;
    Some(match burn.len() {
        1 => first.clone(),
        n => format!("{first} (and {} more burn packages)", n - 1),
    })
}

/// The line of a direct Burn dependency in a manifest, else 1.
fn burn_line(root: &Path, manifest: &Path) -> usize {
    std::fs::read_to_string(root.join(manifest))
        .ok()
        .and_then(|text| {
            dependencies(&text)
                .into_iter()
                .find(|d| d.package == "burn" || d.package.starts_with("burn-"))
        })
        .map_or(1, |dep| dep.line)
}

/// The distinct Burn packages (`burn`, `burn-*`) of a `cargo tree --prefix none` output, as
/// "name version", in order of appearance.
pub fn burn_packages(tree: &str) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for line in tree.lines() {
        let mut words = line.split_whitespace();
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        let package = format!("{name} {version}");
        if (name == "burn" || name.starts_with("burn-")) && !found.contains(&package) {
            found.push(package);
        }
    }
    found
}

/// Package ("name version") to its feature lists, from `cargo tree -f '{p} {f}' --prefix none`.
fn features_by_package(tree: &str) -> BTreeMap<String, Vec<String>> {
    let mut packages: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in tree.lines() {
        let line = line.strip_suffix(" (*)").unwrap_or(line);
        let Some((package, features)) = line.rsplit_once(' ') else {
            continue;
        };
        let key: Vec<&str> = package.split_whitespace().take(2).collect();
        if key.len() < 2 {
            continue;
        }
        let lists = packages.entry(key.join(" ")).or_default();
        if !lists.iter().any(|l| l == features) {
            lists.push(features.to_string());
        }
    }
    packages
}

/// Rule g's comparison: every package of `run_tree` (`cargo tree -p kindle-cli -e
/// normal,build -f '{p} {f}' --prefix none`) must appear with the same features in
/// `test_tree` (the same for `--workspace -e normal,build,dev`).
pub fn feature_differences(run_tree: &str, test_tree: &str) -> Vec<Violation> {
    let test = features_by_package(test_tree);
    let shown = |features: &str| {
        if features.is_empty() {
            "(none)".to_string()
        } else {
            features.to_string()
        }
    };
    let mut out = Vec::new();
    for (package, lists) in features_by_package(run_tree) {
        let test_lists = test.get(&package).cloned().unwrap_or_default();
        for features in lists {
            if test_lists.contains(&features) {
                continue;
            }
            let y = if test_lists.is_empty() {
                "none (it is not in that tree)".to_string()
            } else {
                test_lists
                    .iter()
                    .map(|l| shown(l))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            out.push(Violation {
                path: PathBuf::from(WORKSPACE_HACK),
                line: 1,
                rule: Rule::FeatureUnification,
                message: format!(
                    "{package} has features {} for `cargo run` but {y} for `cargo test \
                     --workspace`: add it to crates/workspace-hack with {y}",
                    shown(&features)
                ),
            });
        }
    }
    out
}

fn run_cargo(root: &Path, cargo: &OsStr, args: &[&str]) -> Result<String> {
    let shown = format!("cargo {}", args.join(" "));
    let output = Command::new(cargo)
        .current_dir(root)
        .args(args)
        .output()
        .with_context(|| format!("running `{shown}`"))?;
    if !output.status.success() {
        bail!(
            "`{shown}` failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    String::from_utf8(output.stdout).with_context(|| format!("`{shown}` printed non-UTF-8"))
}

fn cargo_tree(root: &Path, cargo: &OsStr, args: &[&str]) -> Result<String> {
    run_cargo(root, cargo, &[&["tree"], args].concat())
}

/// The workspace's packages: name to manifest path relative to the root.
fn workspace_packages(root: &Path, cargo: &OsStr) -> Result<BTreeMap<String, PathBuf>> {
    let text = run_cargo(
        root,
        cargo,
        &["metadata", "--format-version", "1", "--no-deps"],
    )?;
    let metadata: serde_json::Value =
        serde_json::from_str(&text).context("parsing `cargo metadata`")?;
    let workspace_root = metadata["workspace_root"].as_str().map(PathBuf::from);
    let mut packages = BTreeMap::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let (Some(name), Some(manifest)) =
            (package["name"].as_str(), package["manifest_path"].as_str())
        else {
            continue;
        };
        let manifest = Path::new(manifest);
        let relative = workspace_root
            .as_deref()
            .and_then(|r| manifest.strip_prefix(r).ok())
            .unwrap_or(manifest);
        packages.insert(name.to_string(), relative.to_path_buf());
    }
    Ok(packages)
}

/// The workspace root, from `cargo metadata` run in `dir`.
pub fn workspace_root(dir: &Path, cargo: &OsStr) -> Result<PathBuf> {
    let text = run_cargo(
        dir,
        cargo,
        &["metadata", "--format-version", "1", "--no-deps"],
    )?;
    let metadata: serde_json::Value =
        serde_json::from_str(&text).context("parsing `cargo metadata`")?;
    match metadata["workspace_root"].as_str() {
        Some(root) => Ok(PathBuf::from(root)),
        None => bail!("`cargo metadata` named no workspace_root"),
    }
}
