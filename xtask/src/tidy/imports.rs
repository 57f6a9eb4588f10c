//! Rule (i): no import loop between the files of one crate.
//!
//! Each `.rs` file under a crate's `src/` is a module (`lib.rs`/`main.rs` the root, `a.rs` or
//! `a/mod.rs` the module `a`, `a/b.rs` the module `a::b`). A file depends on another when its
//! non-test code names a path into it: `use crate::a::X`, `super::X`, `self::a::f`, or a child
//! module's name (`a::f`). A path to an item that a module only re-exports (`pub use b::X`)
//! depends on the module that defines it, so a crate's facade (`lib.rs` re-exporting its
//! modules) is not a loop. Re-exports themselves are not dependencies. Methods defined in
//! another file's `impl` block are not seen (there is no path to them).
//!
//! A set of files that reach each other is a loop, reported once at its first file, unless it
//! is listed in [`ALLOWED_LOOPS`] with the reason it stays.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::source::Source;
use super::{Rule, Violation};

/// Loops that stay, as the set of files (relative to the root) and why.
pub const ALLOWED_LOOPS: &[(&[&str], &str)] = &[(
    &["crates/kernels/src/dot.rs", "crates/kernels/src/lib.rs"],
    "the kernel dispatcher (dot.rs) reads the crate root's activation format, and \
     the root runs products through it; ARCHITECTURE.md explains",
)];

/// A module of one crate: its path from the crate root and the file that holds it.
struct Module {
    file: PathBuf,
    /// `pub use` re-exports: item name -> the path it re-exports (relative to this module).
    reexports: BTreeMap<String, Vec<String>>,
    /// Paths this module's non-test code names (non-`pub` `use`s and inline paths).
    paths: Vec<Vec<String>>,
}

/// The module path of `file` (relative to `src`), or `None` for a file that is not a module
/// root's descendant by the usual layout.
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if let Some(last) = parts.last()
        && (last == "mod" || last == "lib" || last == "main")
    {
        parts.pop();
    }
    parts
}

/// Expand a `use` tree (`a::{b, c::d as e, f::*}`) into full paths.
fn expand(tree: &str) -> Vec<Vec<String>> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = Vec::new();
    expand_into(&tree, &mut Vec::new(), &mut out);
    out
}

fn expand_into(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if let Some(open) = tree.find('{') {
        let head = &tree[..open];
        let inner = tree[open + 1..]
            .strip_suffix('}')
            .unwrap_or(&tree[open + 1..]);
        let base: Vec<String> = head
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        let depth = prefix.len();
        prefix.extend(base);
        for part in split_top(inner) {
            expand_into(part, prefix, out);
        }
        prefix.truncate(depth);
    } else {
        let name = tree.split(" as ").next().unwrap_or(tree);
        let name = name.split("as").next().unwrap_or(name);
        let mut path = prefix.clone();
        path.extend(
            name.split("::")
                .filter(|s| !s.is_empty() && *s != "*")
                .map(str::to_string),
        );
        if !path.is_empty() {
            out.push(path);
        }
    }
}

/// Split `a, b::{c, d}, e` at its top-level commas.
fn split_top(text: &str) -> Vec<&str> {
    let (mut depth, mut start, mut parts) = (0, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts.into_iter().filter(|p| !p.is_empty()).collect()
}

/// Inline paths (`crate::a::b`, `super::x`, `name::y`) in code outside `use` statements.
fn inline_paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = ident(chars[i])
            && (i == 0 || !(ident(chars[i - 1]) || chars[i - 1] == ':' || chars[i - 1] == '.'));
        if !starts {
            i += 1;
            continue;
        }
        let mut path = Vec::new();
        loop {
            let start = i;
            while i < chars.len() && ident(chars[i]) {
                i += 1;
            }
            path.push(chars[start..i].iter().collect::<String>());
            if chars[i..].starts_with(&[':', ':']) && chars.get(i + 2).is_some_and(|&c| ident(c)) {
                i += 2;
            } else {
                break;
            }
        }
        if path.len() > 1 {
            out.push(path);
        }
    }
    out
}

fn read_module(source: &Source) -> (BTreeMap<String, Vec<String>>, Vec<Vec<String>>) {
    let code: String = source
        .code
        .iter()
        .zip(&source.test)
        .map(|(line, test)| if *test { "" } else { line.as_str() })
        .collect::<Vec<_>>()
        .join("\n");
    let mut reexports = BTreeMap::new();
    let mut paths = Vec::new();
    let mut rest = String::new();
    let mut cursor = 0;
    while let Some(found) = code[cursor..].find("use ") {
        let at = cursor + found;
        let word_start =
            at == 0 || !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
        let Some(end) = code[at..].find(';') else {
            break;
        };
        if !word_start {
            rest.push_str(&code[cursor..at + 4]);
            cursor = at + 4;
            continue;
        }
        rest.push_str(&code[cursor..at]);
        let tree = &code[at + 4..at + end];
        let public = code[..at].trim_end().ends_with("pub") || code[..at].trim_end().ends_with(')');
        for path in expand(tree) {
            if public {
                if let Some(name) = path.last() {
                    reexports.insert(name.clone(), path.clone());
                }
            } else {
                paths.push(path);
            }
        }
        cursor = at + end + 1;
    }
    rest.push_str(&code[cursor..]);
    paths.extend(inline_paths(&rest));
    (reexports, paths)
}

/// Resolve `path`, named in module `from`, to the module that defines what it names.
fn resolve(
    modules: &BTreeMap<Vec<String>, Module>,
    from: &[String],
    path: &[String],
    depth: usize,
) -> Option<Vec<String>> {
    let mut absolute: Vec<String> = match path.first()?.as_str() {
        "crate" => Vec::new(),
        "self" => from.to_vec(),
        "super" => from.to_vec(),
        first => {
            let mut child = from.to_vec();
            child.push(first.to_string());
            if !modules.contains_key(&child) {
                return None;
            }
            from.to_vec()
        }
    };
    let mut segments = path.iter().peekable();
    if matches!(path[0].as_str(), "crate" | "self") {
        segments.next();
    }
    while segments.peek().is_some_and(|s| *s == "super") {
        segments.next();
        absolute.pop();
    }
    let segments: Vec<&String> = segments.collect();
    // The longest prefix that is a module.
    let mut target = absolute.clone();
    let mut used = 0;
    for segment in &segments {
        target.push((*segment).clone());
        if modules.contains_key(&target) {
            used += 1;
        } else {
            target.pop();
            break;
        }
    }
    let module = modules.get(&target)?;
    // An item the target only re-exports: follow the re-export.
    // An item the target only re-exports: follow the re-export (to nothing when it comes
    // from another crate).
    if depth < 8
        && let Some(item) = segments.get(used)
        && let Some(reexport) = module.reexports.get(*item)
    {
        return resolve(modules, &target, reexport, depth + 1);
    }
    Some(target)
}

/// (i) Import loops between the files of each crate under `crates/`.
pub(crate) fn import_cycles(sources: &BTreeMap<PathBuf, Source>, out: &mut Vec<Violation>) {
    let mut crates: BTreeMap<PathBuf, BTreeMap<Vec<String>, Module>> = BTreeMap::new();
    for (path, source) in sources {
        let mut parts = path.components();
        let (Some(top), Some(name), Some(src)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if top.as_os_str() != "crates" || src.as_os_str() != "src" {
            continue;
        }
        let root = Path::new("crates").join(name.as_os_str()).join("src");
        let Ok(relative) = path.strip_prefix(&root) else {
            continue;
        };
        let (reexports, paths) = read_module(source);
        crates.entry(root).or_default().insert(
            module_path(relative),
            Module {
                file: path.clone(),
                reexports,
                paths,
            },
        );
    }
    for modules in crates.values() {
        let mut edges: BTreeMap<&PathBuf, BTreeSet<&PathBuf>> = BTreeMap::new();
        // The first path that makes each edge, to show in the message.
        let mut why: BTreeMap<(&PathBuf, &PathBuf), String> = BTreeMap::new();
        for (name, module) in modules {
            let targets = edges.entry(&module.file).or_default();
            for path in &module.paths {
                if let Some(target) = resolve(modules, name, path, 0)
                    && target != *name
                    && let Some(to) = modules.get(&target)
                {
                    targets.insert(&to.file);
                    why.entry((&module.file, &to.file))
                        .or_insert_with(|| path.join("::"));
                }
            }
        }
        for cycle in strongly_connected(&edges) {
            let files: BTreeSet<String> = cycle.iter().map(|p| p.display().to_string()).collect();
            let allowed = ALLOWED_LOOPS.iter().any(|(listed, _)| {
                listed.len() == files.len() && listed.iter().all(|f| files.contains(*f))
            });
            if allowed {
                continue;
            }
            let first = cycle.iter().min().expect("a cycle has files");
            let inside: BTreeSet<&PathBuf> = cycle.iter().copied().collect();
            let shown: Vec<String> = why
                .iter()
                .filter(|((from, to), _)| inside.contains(from) && inside.contains(to))
                .map(|((from, to), path)| {
                    let name = |p: &PathBuf| {
                        p.file_name()
                            .map_or(String::new(), |n| n.to_string_lossy().into())
                    };
                    format!("{} -> {} ({path})", name(from), name(to))
                })
                .collect();
            out.push(Violation {
                path: (*first).clone(),
                line: 1,
                rule: Rule::ImportCycle,
                message: format!(
                    "these files import each other: {} [{}]; move what they share into a module both use",
                    files.into_iter().collect::<Vec<_>>().join(", "),
                    shown.join("; ")
                ),
            });
        }
    }
}

/// The strongly connected components of more than one file (Tarjan's algorithm).
fn strongly_connected<'a>(
    edges: &BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>,
) -> Vec<Vec<&'a PathBuf>> {
    struct State<'a> {
        index: BTreeMap<&'a PathBuf, usize>,
        low: BTreeMap<&'a PathBuf, usize>,
        stack: Vec<&'a PathBuf>,
        on_stack: BTreeSet<&'a PathBuf>,
        found: Vec<Vec<&'a PathBuf>>,
    }
    fn visit<'a>(
        node: &'a PathBuf,
        edges: &BTreeMap<&'a PathBuf, BTreeSet<&'a PathBuf>>,
        state: &mut State<'a>,
    ) {
        let n = state.index.len();
        state.index.insert(node, n);
        state.low.insert(node, n);
        state.stack.push(node);
        state.on_stack.insert(node);
        for &next in edges.get(node).into_iter().flatten() {
            if !state.index.contains_key(next) {
                visit(next, edges, state);
                let low = state.low[node].min(state.low[next]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(next) {
                let low = state.low[node].min(state.index[next]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(top) = state.stack.pop() {
                state.on_stack.remove(top);
                component.push(top);
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for &node in edges.keys() {
        if !state.index.contains_key(node) {
            visit(node, edges, &mut state);
        }
    }
    state.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_trees_expand() {
        let got = expand("crate::{a::X, b::{Y, c::Z as W}, d::*}");
        let want: Vec<Vec<String>> = [
            vec!["crate", "a", "X"],
            vec!["crate", "b", "Y"],
            vec!["crate", "b", "c", "Z"],
            vec!["crate", "d"],
        ]
        .iter()
        .map(|p| p.iter().map(|s| s.to_string()).collect())
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn inline_paths_are_found() {
        let got = inline_paths("let x = crate::a::f(super::B, y.c::d);");
        assert!(got.contains(&vec!["crate".into(), "a".into(), "f".into()]));
        assert!(got.contains(&vec!["super".into(), "B".into()]));
        assert_eq!(got.len(), 2, "{got:?}");
    }
}
