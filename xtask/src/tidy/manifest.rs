//! Reading the dependencies of a `Cargo.toml` line by line, so that each has a line number.

/// Which table a dependency is declared in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DepKind {
    /// `[dependencies]` (also `[target.'cfg(..)'.dependencies]`).
    Normal,
    /// `[dev-dependencies]`.
    Dev,
    /// `[build-dependencies]`.
    Build,
}

impl DepKind {
    /// The table's name, e.g. `[dev-dependencies]`.
    pub fn table(self) -> &'static str {
        match self {
            DepKind::Normal => "[dependencies]",
            DepKind::Dev => "[dev-dependencies]",
            DepKind::Build => "[build-dependencies]",
        }
    }
}

/// One dependency of a manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dependency {
    /// The name it is declared under (what the code calls it, with `-` for `_`).
    pub name: String,
    /// The package it names: `package = "..."` when renamed, else `name`.
    pub package: String,
    /// Its table.
    pub kind: DepKind,
    /// Line number (1-based) of its declaration.
    pub line: usize,
    /// The declaration's line carries `# tidy: allow(unused-dependency)`.
    pub allow_unused: bool,
}

/// The dependencies declared in a manifest's `[dependencies]`, `[dev-dependencies]` and
/// `[build-dependencies]` tables (and their `target.*` and `[dependencies.NAME]` forms); not
/// `[workspace.dependencies]`.
pub fn dependencies(manifest: &str) -> Vec<Dependency> {
    let mut found: Vec<Dependency> = Vec::new();
    // The kind of the dependency table being read, and the dependency a `[dependencies.NAME]`
    // table declares (its keys are fields, not dependencies).
    let mut table: Option<DepKind> = None;
    let mut named_table: Option<usize> = None;
    let mut depth = 0i32;
    for (index, raw) in manifest.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if depth == 0 && line.starts_with('[') {
            table = None;
            named_table = None;
            if line.starts_with("[[") {
                continue;
            }
            let header = line.trim_start_matches('[').trim_end_matches(']').trim();
            let mut parts: Vec<&str> = header.split('.').map(str::trim).collect();
            if parts.first() == Some(&"target") && parts.len() >= 3 {
                // target.'cfg(..)'.dependencies: the cfg may hold dots, the table name not.
                let at = parts.iter().rposition(|p| table_kind(p).is_some());
                parts = at.map(|at| parts[at..].to_vec()).unwrap_or_default();
            }
            match parts.as_slice() {
                [kind] => table = table_kind(kind),
                [kind, name] => {
                    if let Some(kind) = table_kind(kind) {
                        found.push(Dependency {
                            name: unquote(name),
                            package: unquote(name),
                            kind,
                            line: index + 1,
                            allow_unused: allows_unused(raw),
                        });
                        named_table = Some(found.len() - 1);
                    }
                }
                _ => {}
            }
            continue;
        }
        if depth == 0 && !line.is_empty() {
            if let Some(dep) = named_table {
                if let Some(package) = key_value(line, "package") {
                    found[dep].package = package;
                }
            } else if let Some(kind) = table
                && let Some((key, _)) = line.split_once('=')
            {
                let name = unquote(key.split('.').next().unwrap_or(key).trim());
                let package = package_field(line).unwrap_or_else(|| name.clone());
                found.push(Dependency {
                    name,
                    package,
                    kind,
                    line: index + 1,
                    allow_unused: allows_unused(raw),
                });
            }
        }
        depth += bracket_balance(line);
    }
    found
}

fn table_kind(name: &str) -> Option<DepKind> {
    match name {
        "dependencies" => Some(DepKind::Normal),
        "dev-dependencies" => Some(DepKind::Dev),
        "build-dependencies" => Some(DepKind::Build),
        _ => None,
    }
}

fn allows_unused(raw: &str) -> bool {
    raw.contains("# tidy: allow(unused-dependency)")
}

fn unquote(text: &str) -> String {
    text.trim().trim_matches('"').trim_matches('\'').to_string()
}

/// A line without its `#` comment (a `#` inside a string is kept).
fn strip_comment(line: &str) -> &str {
    let mut in_string = None;
    for (at, c) in line.char_indices() {
        match (c, in_string) {
            ('"' | '\'', None) => in_string = Some(c),
            (q, Some(open)) if q == open => in_string = None,
            ('#', None) => return &line[..at],
            _ => {}
        }
    }
    line
}

/// How many more `[`/`{` than `]`/`}` a line opens, outside strings.
fn bracket_balance(line: &str) -> i32 {
    let mut balance = 0;
    let mut in_string = None;
    for c in line.chars() {
        match (c, in_string) {
            ('"' | '\'', None) => in_string = Some(c),
            (q, Some(open)) if q == open => in_string = None,
            ('[' | '{', None) => balance += 1,
            (']' | '}', None) => balance -= 1,
            _ => {}
        }
    }
    balance
}

/// `key = "value"` on a line of its own.
fn key_value(line: &str, key: &str) -> Option<String> {
    let (k, v) = line.split_once('=')?;
    (k.trim() == key).then(|| unquote(v))
}

/// The `package = "..."` field of an inline table.
fn package_field(line: &str) -> Option<String> {
    let (_, table) = line.split_once('{')?;
    table
        .trim_end_matches('}')
        .split(',')
        .find_map(|field| key_value(field.trim(), "package"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form_of_dependency() {
        let manifest = r#"
[package]
name = "x"

[workspace.dependencies]
ignored = "1"

[dependencies]
thiserror.workspace = true
serde = { version = "1", features = [
    "derive",
] }
my-zip = { package = "zip", version = "9" } # tidy: allow(unused-dependency)

[target.'cfg(unix)'.dependencies]
libc = "0.2"

[dev-dependencies.proptest]
package = "proptest"
version = "1"

[build-dependencies]
cc = "1"

[[bench]]
name = "b"
"#;
        let deps = dependencies(manifest);
        let summary: Vec<_> = deps
            .iter()
            .map(|d| {
                (
                    d.name.as_str(),
                    d.package.as_str(),
                    d.kind,
                    d.line,
                    d.allow_unused,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("thiserror", "thiserror", DepKind::Normal, 9, false),
                ("serde", "serde", DepKind::Normal, 10, false),
                ("my-zip", "zip", DepKind::Normal, 13, true),
                ("libc", "libc", DepKind::Normal, 16, false),
                ("proptest", "proptest", DepKind::Dev, 18, false),
                ("cc", "cc", DepKind::Build, 23, false),
            ]
        );
    }
}
