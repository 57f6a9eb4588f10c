//! `cargo xtask tidy` on tiny fake workspaces: a clean one has no violation, and each planted
//! violation is reported as exactly its rule, at its line.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use xtask::tidy::{Options, Rule, Violation, burn_packages, check, feature_differences};

const LIB: &str = r#"//! The x crate.
//!
//! ```
//! assert_eq!(x::one(), 1);
//! ```
#![warn(missing_docs)]

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
#[error("x")]
pub struct XError;

/// One. Neither this comment nor the string holds code: println!() .unwrap() use burn;
pub fn one() -> u32 {
    let _ = "println!(\"{}\", x.unwrap()); burn::tensor";
    1
}

#[cfg(test)]
mod tests {
    #[test]
    fn one() {
        println!("{}", Some(super::one()).unwrap());
    }
}
"#;

const MANIFEST: &str = r#"[package]
name = "x"
version = "0.1.0"
edition = "2024"

[dependencies]
thiserror = "2"
kindle-workspace-hack = { path = "../workspace-hack" }

[dev-dependencies]
proptest = "1"
"#;

/// A fake workspace in a temporary folder, removed on drop: a library crate `crates/x`, Burn in
/// `crates/model`, printing in `crates/cli`, and an `xtask`, all within the rules.
struct Workspace {
    root: PathBuf,
}

impl Workspace {
    fn clean() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = std::env::temp_dir().join(format!("kindle-tidy-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let workspace = Workspace { root };
        workspace.write(
            "Cargo.toml",
            "[workspace]\nmembers = [\"crates/*\", \"xtask\"]\n",
        );
        workspace.write("crates/x/Cargo.toml", MANIFEST);
        workspace.write("crates/x/src/lib.rs", LIB);
        workspace.write(
            "crates/x/tests/api.rs",
            "use proptest::prelude::*;\n\n#[test]\nfn one() {\n    assert_eq!(x::one(), 1);\n}\n",
        );
        workspace.write(
            "crates/model/Cargo.toml",
            "[package]\nname = \"model\"\n\n[dependencies]\nburn = \"0.22\"\n",
        );
        workspace.write(
            "crates/model/src/lib.rs",
            "//! Model.\n//!\n//! ```\n//! ```\n#![deny(missing_docs)]\n\npub use burn::tensor::Tensor;\n",
        );
        workspace.write("crates/cli/Cargo.toml", "[package]\nname = \"cli\"\n");
        workspace.write(
            "crates/cli/src/main.rs",
            "//! The tool.\n//!\n//! ```text\n//! cli\n//! ```\n#![warn(missing_docs)]\n\nfn main() {\n    println!(\"hi\");\n}\n",
        );
        workspace.write(
            "xtask/Cargo.toml",
            "[package]\nname = \"xtask\"\n\n[dependencies]\nanyhow = \"1\"\n",
        );
        workspace.write(
            "xtask/src/main.rs",
            "//! Tasks.\n\nfn main() -> anyhow::Result<()> {\n    println!(\"ok\");\n    Ok(())\n}\n",
        );
        workspace
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.root.join(relative);
        std::fs::create_dir_all(path.parent().expect("a parent folder")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    fn read(&self, relative: &str) -> String {
        std::fs::read_to_string(self.root.join(relative)).expect("read")
    }

    /// Replaces `from` by `to` in a file (once; it must be there).
    fn edit(&self, relative: &str, from: &str, to: &str) {
        let text = self.read(relative);
        assert!(text.contains(from), "{relative} has no {from:?}");
        self.write(relative, &text.replacen(from, to, 1));
    }

    fn check(&self) -> Vec<Violation> {
        check(&self.root, &Options::files_only()).expect("tidy runs")
    }

    /// The 1-based line of `needle` in a file.
    fn line_of(&self, relative: &str, needle: &str) -> usize {
        let text = self.read(relative);
        let index = text.lines().position(|l| l.contains(needle));
        index.expect("the needle is in the file") + 1
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Asserts that `violations` are exactly `rule` at these places.
fn assert_only(violations: &[Violation], rule: Rule, places: &[(&str, usize)]) {
    let found: Vec<(Rule, PathBuf, usize)> = violations
        .iter()
        .map(|v| (v.rule, v.path.clone(), v.line))
        .collect();
    let expected: Vec<(Rule, PathBuf, usize)> = places
        .iter()
        .map(|&(path, line)| (rule, PathBuf::from(path), line))
        .collect();
    assert_eq!(found, expected, "{violations:#?}");
}

#[test]
fn a_clean_workspace_has_no_violations() {
    assert_eq!(Workspace::clean().check(), []);
}

#[test]
fn a_burn_outside_model_and_kv_cache() {
    let ws = Workspace::clean();
    ws.edit(
        "crates/x/Cargo.toml",
        "thiserror = \"2\"\n",
        "thiserror = \"2\"\nburn = \"0.22\"\n",
    );
    ws.edit(
        "crates/x/src/lib.rs",
        "pub struct XError;\n",
        "pub struct XError;\n\nuse burn as _;\n",
    );
    ws.write(
        "fuzz/fuzz_targets/t.rs",
        "use std::io;\nuse burn::tensor::Tensor;\n",
    );
    ws.write(
        "crates/kv-cache/src/cache.rs",
        "//! Cache.\n\nuse burn::tensor::Tensor;\n",
    );
    let violations = ws.check();
    assert_only(
        &violations,
        Rule::BurnDependency,
        &[
            ("crates/x/Cargo.toml", 8),
            (
                "crates/x/src/lib.rs",
                ws.line_of("crates/x/src/lib.rs", "use burn"),
            ),
            ("fuzz/fuzz_targets/t.rs", 2),
        ],
    );
    assert_eq!(
        violations[0].to_string(),
        "crates/x/Cargo.toml:8: burn-dependency: `burn` in [dependencies]: only crates/model \
         and crates/kv-cache may depend on Burn"
    );
}

#[test]
fn b_printing_in_library_code() {
    let ws = Workspace::clean();
    let lib = "crates/x/src/lib.rs";
    ws.edit(
        lib,
        "    1\n}\n",
        "    eprint!(\"x\");\n    dbg!(1) // tidy: allow(print): a planted exception\n}\n",
    );
    ws.write(
        "crates/x/src/tests.rs",
        "fn f() {\n    println!(\"a test file\");\n}\n",
    );
    ws.write(
        "crates/x/examples/e.rs",
        "fn main() {\n    println!(\"an example\");\n}\n",
    );
    let violations = ws.check();
    assert_only(
        &violations,
        Rule::PrintInLibrary,
        &[(lib, ws.line_of(lib, "eprint!"))],
    );
    assert!(
        violations[0]
            .message
            .starts_with("`eprint!` in library code")
    );
}

#[test]
fn c_unwrap_outside_tests() {
    let ws = Workspace::clean();
    let lib = "crates/x/src/lib.rs";
    ws.edit(
        lib,
        "    1\n}\n",
        "    let a = Some(1).unwrap();\n    // tidy: allow(unwrap): a planted exception\n    \
         let b = Some(2).unwrap();\n    let c = Some(3).unwrap(); // tidy: allow(unwrap):\n    a + b + c\n}\n",
    );
    ws.edit(
        "xtask/src/main.rs",
        "    Ok(())",
        "    Some(()).unwrap();\n    Ok(())",
    );
    let violations = ws.check();
    assert_only(
        &violations,
        Rule::Unwrap,
        &[
            (lib, ws.line_of(lib, "Some(1).unwrap()")),
            // An allow comment without a reason does not count.
            (lib, ws.line_of(lib, "Some(3).unwrap()")),
            (
                "xtask/src/main.rs",
                ws.line_of("xtask/src/main.rs", "unwrap"),
            ),
        ],
    );
}

#[test]
fn d_files_over_800_lines() {
    let ws = Workspace::clean();
    ws.write("crates/x/src/long.rs", &"// line\n".repeat(800));
    ws.write("crates/x/tests/longer.rs", &"// line\n".repeat(801));
    let violations = ws.check();
    assert_only(
        &violations,
        Rule::FileLength,
        &[("crates/x/tests/longer.rs", 1)],
    );
    assert_eq!(
        violations[0].to_string(),
        "crates/x/tests/longer.rs:1: file-length: 801 lines, more than 800: split it"
    );
}

#[test]
fn e_crate_docs_without_an_example() {
    let ws = Workspace::clean();
    ws.edit(
        "crates/x/src/lib.rs",
        "//! ```\n//! assert_eq!(x::one(), 1);\n//! ```\n",
        "",
    );
    assert_only(&ws.check(), Rule::CrateDocs, &[("crates/x/src/lib.rs", 1)]);
}

#[test]
fn e_crate_docs_without_missing_docs() {
    let ws = Workspace::clean();
    ws.edit("crates/x/src/lib.rs", "#![warn(missing_docs)]\n", "");
    let violations = ws.check();
    assert_only(&violations, Rule::CrateDocs, &[("crates/x/src/lib.rs", 1)]);
    assert!(
        violations[0]
            .message
            .starts_with("`missing_docs` is not on")
    );

    // The workspace's lints do as well as the attribute.
    ws.edit(
        "crates/x/Cargo.toml",
        "[dependencies]",
        "[lints]\nworkspace = true\n\n[dependencies]",
    );
    ws.edit(
        "Cargo.toml",
        "\n",
        "\n\n[workspace.lints.rust]\nmissing_docs = \"warn\"\n",
    );
    assert_eq!(ws.check(), []);
}

#[test]
fn e_crate_root_without_docs() {
    let ws = Workspace::clean();
    ws.edit("xtask/src/main.rs", "//! Tasks.\n", "// Tasks.\n");
    let violations = ws.check();
    assert_only(&violations, Rule::CrateDocs, &[("xtask/src/main.rs", 1)]);
    assert_eq!(
        violations[0].to_string(),
        "xtask/src/main.rs:1: crate-docs: the crate root does not open with `//!` docs"
    );
}

#[test]
fn f_unused_dependencies() {
    let ws = Workspace::clean();
    let manifest = "crates/x/Cargo.toml";
    ws.edit(
        manifest,
        "kindle-workspace-hack",
        "serde = \"1\"\nrand = \"0.10\" # tidy: allow(unused-dependency)\nkindle-workspace-hack",
    );
    ws.edit(
        manifest,
        "proptest = \"1\"\n",
        "proptest = \"1\"\ncriterion = \"0.8\"\n",
    );
    ws.write(
        "crates/workspace-hack/Cargo.toml",
        "[package]\nname = \"kindle-workspace-hack\"\n\n[dependencies]\nbitflags = \"2\"\n",
    );
    ws.write(
        "crates/workspace-hack/src/lib.rs",
        "//! Features.\n//!\n//! ```\n//! ```\n#![warn(missing_docs)]\n",
    );
    let violations = ws.check();
    assert_only(
        &violations,
        Rule::UnusedDependency,
        &[
            (manifest, ws.line_of(manifest, "serde")),
            (manifest, ws.line_of(manifest, "criterion")),
        ],
    );
    assert_eq!(
        violations[0].to_string(),
        "crates/x/Cargo.toml:8: unused-dependency: `serde` in [dependencies] is not used: no \
         `serde::` path or `use serde` in src/ or build.rs; remove it, or mark the line `# tidy: \
         allow(unused-dependency)`"
    );
}

const RUN_TREE: &str = "kindle-cli v0.1.0 (/w/crates/cli) default,wgpu
anyhow v1.0.104 default,std
cfg-if v1.0.5 
bitflags v2.11.0 serde
serde_derive v1.0.229 (proc-macro) default
serde_derive v1.0.229 (proc-macro) default (*)
";

const TEST_TREE: &str = "kindle-cli v0.1.0 (/w/crates/cli) default,wgpu
anyhow v1.0.104 default,std
cfg-if v1.0.5 
bitflags v2.11.0 serde,std
serde_derive v1.0.229 (proc-macro) default

proptest v1.12.0 default,std
bitflags v2.11.0 serde,std (*)
";

#[test]
fn g_feature_unification() {
    assert_eq!(feature_differences(TEST_TREE, TEST_TREE), []);
    let violations = feature_differences(RUN_TREE, TEST_TREE);
    let shown: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        [
            "crates/workspace-hack/Cargo.toml:1: feature-unification: bitflags v2.11.0 has \
          features serde for `cargo run` but serde,std for `cargo test --workspace`: add it to \
          crates/workspace-hack with serde,std"
        ]
    );
}

#[test]
fn h_burn_packages_in_a_tree() {
    let tree = "kindle-cli v0.1.0 (/w/crates/cli)\nanyhow v1.0.104\nburn v0.22.1\n\
                burn-core v0.22.1\nburn v0.22.1 (*)\nburnish v1.0.0\n";
    assert_eq!(burn_packages(tree), ["burn v0.22.1", "burn-core v0.22.1"]);
    assert!(burn_packages("kindle-generate v0.1.0 (/w)\nrand v0.10.0\n").is_empty());
}

/// Every rule (a–h) on this repository.
#[test]
fn the_repository_is_tidy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is in the workspace root");
    let violations = check(root, &Options::all()).expect("tidy runs");
    let shown: Vec<String> = violations.iter().map(ToString::to_string).collect();
    assert!(violations.is_empty(), "{}", shown.join("\n"));
}

#[test]
fn i_files_that_import_each_other() {
    let ws = Workspace::clean();
    let lib = "crates/x/src/lib.rs";
    ws.edit(
        lib,
        "#![warn(missing_docs)]\n",
        "#![warn(missing_docs)]\n\nmod a;\nmod b;\npub use a::A;\n",
    );
    // b uses a through the crate root's re-export; a uses b: a loop of two files.
    ws.write(
        "crates/x/src/a.rs",
        "//! A.\n\nuse crate::b::helper;\n\n/// A.\npub struct A(pub u32);\n\npub(crate) fn make() -> A {\n    A(helper())\n}\n",
    );
    ws.write(
        "crates/x/src/b.rs",
        "//! B.\n\npub(crate) fn helper() -> u32 {\n    let _ = crate::A(1);\n    1\n}\n",
    );
    let violations = ws.check();
    assert_only(&violations, Rule::ImportCycle, &[("crates/x/src/a.rs", 1)]);
    assert!(
        violations[0]
            .to_string()
            .contains("crates/x/src/a.rs, crates/x/src/b.rs"),
        "{}",
        violations[0]
    );
    // Breaking the loop (b no longer names A) clears it; the facade's re-export is no loop.
    ws.edit("crates/x/src/b.rs", "    let _ = crate::A(1);\n", "");
    assert_eq!(ws.check(), []);
}
