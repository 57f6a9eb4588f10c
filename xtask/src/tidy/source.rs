//! Reading Rust sources without a parser: comments and string literals blanked out, test
//! items marked, the crate names that paths start from.

use std::collections::BTreeSet;

/// A Rust source file as lines of code: comments and the contents of string and character
/// literals replaced by spaces (line breaks kept, so line numbers hold), plus which lines are
/// test code (a `#[cfg(test)]` item, or the whole file under `#![cfg(test)]`).
pub struct Source {
    /// The original lines (for `tidy: allow(...)` comments).
    pub lines: Vec<String>,
    /// The same lines with comments and literal contents blanked.
    pub code: Vec<String>,
    /// Whether each line belongs to test code.
    pub test: Vec<bool>,
}

impl Source {
    /// Splits and blanks `text`.
    pub fn new(text: &str) -> Self {
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        let blanked = blank(text);
        let mut code: Vec<String> = blanked.lines().map(str::to_string).collect();
        code.resize(lines.len(), String::new());
        let test = test_lines(&code);
        Source { lines, code, test }
    }

    /// Whether line `index` (0-based) or the line before it carries
    /// `// tidy: allow(<what>): <reason>` with a reason.
    pub fn allows(&self, index: usize, what: &str) -> bool {
        let marker = format!("tidy: allow({what}):");
        let has = |line: &String| {
            line.find(&marker)
                .is_some_and(|at| !line[at + marker.len()..].trim().is_empty())
        };
        has(&self.lines[index]) || (index > 0 && has(&self.lines[index - 1]))
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with comments and the contents of string and character literals replaced by spaces;
/// line breaks and quote characters stay.
pub fn blank(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank_char = |c: char| if c == '\n' { '\n' } else { ' ' };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        // A `b` prefix (b'x', b"x") does not make the quote part of an identifier.
        let byte_prefix = i > 0 && chars[i - 1] == 'b' && (i < 2 || !is_ident(chars[i - 2]));
        let prev_ident = i > 0 && is_ident(chars[i - 1]) && !byte_prefix;
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank_char(chars[i]));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i, prev_ident) {
            // r#"..."#, br"...", cr"...": up to the quote, then the contents.
            while chars[i] != '"' {
                out.push(chars[i]);
                i += 1;
            }
            out.push('"');
            i += 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    out.push('"');
                    out.extend(std::iter::repeat_n('#', hashes));
                    i += 1 + hashes;
                    break;
                }
                out.push(blank_char(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            out.push('"');
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => {
                        out.push(' ');
                        if let Some(&escaped) = chars.get(i + 1) {
                            out.push(blank_char(escaped));
                        }
                        i += 2;
                    }
                    '"' => {
                        out.push('"');
                        i += 1;
                        break;
                    }
                    other => {
                        out.push(blank_char(other));
                        i += 1;
                    }
                }
            }
        } else if c == '\'' && !prev_ident {
            // A character literal ('x', '\n', '"') or a lifetime or label ('a).
            let end = if next == Some('\\') {
                (i + 3..chars.len()).find(|&k| chars[k] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    out.push('\'');
                    out.extend(std::iter::repeat_n(' ', end - i - 1));
                    out.push('\'');
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The number of `#`s when a raw string literal starts at `i`.
fn raw_string_start(chars: &[char], i: usize, prev_ident: bool) -> Option<usize> {
    if prev_ident {
        return None;
    }
    let mut k = i;
    if matches!(chars.get(k), Some('b' | 'c')) {
        k += 1;
    }
    if chars.get(k) != Some(&'r') {
        return None;
    }
    k += 1;
    let hashes = chars[k..].iter().take_while(|&&c| c == '#').count();
    (chars.get(k + hashes) == Some(&'"')).then_some(hashes)
}

/// Marks the lines of test code: from a `#[cfg(test)]` (or `#[cfg(all(test, ...))]`)
/// attribute through the end of the item it applies to (its matching `}`, or its `;`), and
/// every line when the file opens with `#![cfg(test)]`.
fn test_lines(code: &[String]) -> Vec<bool> {
    let mut test = vec![false; code.len()];
    let whole_file = code
        .iter()
        .map(|line| line.trim())
        .filter(|line| !line.is_empty())
        .take_while(|line| line.starts_with("#!["))
        .any(|line| line == "#![cfg(test)]");
    if whole_file {
        return vec![true; code.len()];
    }
    let mut index = 0;
    while index < code.len() {
        let trimmed = code[index].trim();
        if trimmed == "#[cfg(test)]" || trimmed.starts_with("#[cfg(all(test,") {
            let end = item_end(code, index).unwrap_or(code.len() - 1);
            for flag in &mut test[index..=end] {
                *flag = true;
            }
            index = end + 1;
        } else {
            index += 1;
        }
    }
    test
}

/// The line on which the item after the attribute on line `start` ends.
fn item_end(code: &[String], start: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut opened = false;
    for (index, line) in code.iter().enumerate().skip(start + 1) {
        for c in line.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    if opened && depth == 0 {
                        return Some(index);
                    }
                }
                ';' if !opened => return Some(index),
                _ => {}
            }
        }
    }
    None
}

/// The first segments of the paths in a line of (blanked) code: identifiers followed by `::`
/// and not preceded by `::` or `.`, and identifiers right after `use` or `extern crate`.
/// Those are the names a crate's dependencies are used by.
pub fn path_roots(line: &str) -> BTreeSet<String> {
    let chars: Vec<char> = line.chars().collect();
    let mut roots = BTreeSet::new();
    let mut previous_word = String::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_ident(chars[i]) || (i > 0 && is_ident(chars[i - 1])) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_ident(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let before: String = chars[..start].iter().collect();
        let before = before.trim_end();
        let after_path = before.ends_with("::") || before.ends_with('.');
        let followed_by_path = chars[i..].starts_with(&[':', ':']);
        let after_use = previous_word == "use" || previous_word == "crate";
        if !word.chars().next().is_some_and(|c| c.is_ascii_digit())
            && ((followed_by_path && !after_path) || after_use)
        {
            roots.insert(word.clone());
        }
        previous_word = word;
    }
    roots
}

/// The print macros (`println!`, `eprintln!`, `print!`, `eprint!`, `dbg!`) called in a line of
/// (blanked) code.
pub fn print_macros(line: &str) -> Vec<&'static str> {
    const MACROS: [&str; 5] = ["println!", "eprintln!", "print!", "eprint!", "dbg!"];
    let mut found = Vec::new();
    for name in MACROS {
        let mut from = 0;
        while let Some(at) = line[from..].find(name) {
            let at = from + at;
            if !line[..at].chars().next_back().is_some_and(is_ident) {
                found.push(name);
            }
            from = at + name.len();
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blanks_comments_and_literals() {
        let text = r##"let s = "a.unwrap() \" b"; // c.unwrap()
let c = '"'; let q = b'\''; let d = b'"'; let r = r#"x"y"#; 'a: loop {}
/* x
.unwrap() */ f.unwrap();"##;
        let blanked = blank(text);
        assert_eq!(blanked.lines().count(), 4);
        assert!(
            !blanked.lines().next().unwrap_or("").contains("unwrap"),
            "{blanked}"
        );
        assert!(blanked.contains("'a: loop {}"), "{blanked}");
        assert!(blanked.contains("let r = r#\"   \"#;"), "{blanked}");
        assert_eq!(blanked.matches(".unwrap()").count(), 1, "{blanked}");
    }

    #[test]
    fn marks_test_items() {
        let source = Source::new(
            "fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() {\n    }\n}\nfn c() {}\n#[cfg(test)]\nuse x;\nfn d() {}",
        );
        assert_eq!(
            source.test,
            [
                false, true, true, true, true, true, false, true, true, false
            ]
        );
        assert!(
            Source::new("//! Docs.\n#![cfg(test)]\nfn a() {}")
                .test
                .iter()
                .all(|&t| t)
        );
    }

    #[test]
    fn finds_path_roots() {
        let roots = path_roots(
            "use burn::prelude::*; let x = kindle_fetch::cache_dir().a::<T>(); std::io::stdin();",
        );
        assert_eq!(
            roots.into_iter().collect::<Vec<_>>(),
            ["burn", "kindle_fetch", "std"]
        );
        let roots = path_roots("pub use {thiserror::Error, self::x}; extern crate zip;");
        assert_eq!(
            roots.into_iter().collect::<Vec<_>>(),
            ["self", "thiserror", "zip"]
        );
        assert!(path_roots("let burn = self.burn; let x = a.b::c;").is_empty());
    }

    #[test]
    fn finds_print_macros() {
        assert_eq!(
            print_macros("eprintln!(); println!(); dbg!(x); write!(f)"),
            ["println!", "eprintln!", "dbg!"]
        );
        assert!(print_macros("my_println!()").is_empty());
    }
}
