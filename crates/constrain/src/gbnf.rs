//! GBNF, llama.cpp's grammar format, converted to llguidance's Lark dialect: [`gbnf_to_lark`].
//!
//! The parser follows llama.cpp's (`llama-grammar.cpp`) rule for rule. It refuses, with an
//! error that says so, three things llama.cpp takes: `!<token>` by text (the conversion has no
//! vocabulary: write `!<[id]>`), a token text llguidance cannot spell (blanks or `<` in it), and
//! an empty or reversed character class (llama.cpp reads `[]` as the empty string and `[z-a]`
//! as matching nothing). It takes two things llama.cpp refuses: left recursion (llguidance's Earley parser
//! has no trouble with it) and nested repetitions past llama.cpp's cap on the rules they expand
//! to (llguidance does not expand them).
//!
//! The output keeps GBNF's meaning, a context-free grammar over characters, by making every
//! lexeme one character: a string literal becomes a sequence of one-character strings, a class
//! a one-character regex. llguidance's lexer is greedy (a lexeme that can go on, goes on), so a
//! multi-character lexeme would change the language: with `num ::= [0-9]+ ws` and
//! `ws ::= [ \n]*` as one lexeme each, `1+2=3\n` would lose its final newline to `ws`.

use std::collections::{HashMap, HashSet};

use crate::ConstrainError;

/// llama.cpp's `MAX_REPETITION_THRESHOLD`: a larger minimum count is an error, a larger maximum
/// means no maximum.
const MAX_REPETITION: u64 = 2000;

/// The deepest nesting of groups and of repetitions of repetitions: the parser, the
/// converter and llguidance recurse over it, so a deeper one would overflow a thread's stack.
const MAX_NESTING: usize = 256;

/// Where a rule may continue, said in the errors of a line that is not a new rule.
const CONTINUATION: &str = "a rule goes on to the next line only after a trailing `|`, inside \
                            parentheses or right after `::=`";

/// Convert a GBNF grammar (llama.cpp's format: `name ::= ...` rules, `root` the output) to
/// llguidance's Lark dialect, for [`crate::ConstraintSpec::Lark`].
///
/// Everything llama.cpp's GBNF has is converted: alternatives, sequences, groups, string
/// literals and character classes (negated, with ranges) with their escapes (`\n`, `\r`, `\t`,
/// `\\`, `\"`, `\[`, `\]`, `\-`, `\xHH`, `\uHHHH`, `\UHHHHHHHH`), `.`, the repetitions `*`, `+`,
/// `?`, `{m}`, `{m,}` and `{m,n}`, `#` comments and rules over several lines (after `::=`,
/// after `|` and inside parentheses, as llama.cpp reads them). Token references become
/// llguidance's: `<[id]>`, `!<[id]>` (as `<[^id]>`) and `<text>`, which must then be a special
/// token of the vocabulary. As in llama.cpp, a rule defined twice keeps its last definition and
/// a repetition maximum above 2000 means no maximum.
///
/// An invalid text is [`ConstrainError::Gbnf`] with the line and column of the problem, under
/// the source name `grammar`.
pub fn gbnf_to_lark(text: &str) -> Result<String, ConstrainError> {
    let rules = Parser {
        text,
        pos: 0,
        depth: 0,
    }
    .grammar()?;
    Ok(emit(&rules))
}

/// One rule: its name and its alternatives (of sequences).
struct Rule {
    name: String,
    body: Vec<Vec<Node>>,
}

/// A token reference.
#[derive(Debug, PartialEq)]
enum Token {
    /// `<[id]>`.
    Id(u32),
    /// `!<[id]>`: any token but this one.
    NotId(u32),
    /// `<text>`: the special token with this text.
    Text(String),
}

/// One item of a sequence.
#[derive(Debug, PartialEq)]
enum Node {
    /// A string literal, decoded.
    Literal(Vec<char>),
    /// A character class: inclusive ranges, or any character outside them.
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
    /// `.`: any character.
    Any,
    /// A rule reference and the byte offset it was written at.
    Ref(String, usize),
    /// A token reference.
    Token(Token),
    /// `( ... )`: alternatives of sequences.
    Group(Vec<Vec<Node>>),
    /// A repetition; `max` `None` is unbounded.
    Repeat {
        node: Box<Node>,
        min: u64,
        max: Option<u64>,
    },
}

/// llama.cpp's recursive descent over the text, byte offset `pos`.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
    /// Groups open at `pos`.
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.text[self.pos..].chars().next()
    }

    fn peek_second(&self) -> Option<char> {
        self.text[self.pos..].chars().nth(1)
    }

    fn bump(&mut self) -> Option<char> {
        let c = self.peek()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    /// The 1-based line and column of byte offset `at`.
    fn line_column(&self, at: usize) -> (usize, usize) {
        let before = &self.text[..at];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        (
            before.matches('\n').count() + 1,
            before[line_start..].chars().count() + 1,
        )
    }

    /// The error `message` at byte offset `at`.
    fn error_at(&self, at: usize, message: impl Into<String>) -> ConstrainError {
        let (line, column) = self.line_column(at);
        ConstrainError::Gbnf {
            source_name: "grammar".into(),
            line,
            column,
            message: message.into(),
        }
    }

    fn error(&self, message: impl Into<String>) -> ConstrainError {
        self.error_at(self.pos, message)
    }

    /// What is at the current position, for an error message.
    fn found(&self) -> String {
        match self.peek() {
            None => "the end of the grammar".into(),
            Some('\n' | '\r') => "the end of the line".into(),
            Some(c) => format!("`{c}`"),
        }
    }

    /// Blanks and `#` comments; newlines too where `newlines`.
    fn space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.pos += 1,
                '\r' | '\n' if newlines => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\r' && c != '\n') {
                        self.bump();
                    }
                }
                _ => break,
            }
        }
    }

    fn grammar(mut self) -> Result<Vec<Rule>, ConstrainError> {
        let mut rules: Vec<Rule> = Vec::new();
        self.space(true);
        while self.peek().is_some() {
            let rule = self.rule()?;
            match rules.iter_mut().find(|r| r.name == rule.name) {
                Some(old) => *old = rule,
                None => rules.push(rule),
            }
        }
        if !rules.iter().any(|r| r.name == "root") {
            return Err(self.error_at(0, "no `root` rule (the rule the whole output must match)"));
        }
        let defined: HashSet<&str> = rules.iter().map(|r| r.name.as_str()).collect();
        let mut unknown = None;
        for rule in &rules {
            visit(&rule.body, &mut |node| {
                if let Node::Ref(name, at) = node
                    && !defined.contains(name.as_str())
                    && unknown.as_ref().is_none_or(|(_, first)| at < first)
                {
                    unknown = Some((name.clone(), *at));
                }
            });
        }
        if let Some((name, at)) = unknown {
            return Err(self.error_at(at, format!("unknown rule `{name}` (never defined)")));
        }
        if !finishing_rules(&rules).contains("root") {
            return Err(self.error_at(
                0,
                "`root` matches no text: every way through it refers back to a rule that never \
                 ends (`root ::= root`, or a cycle of rules without a way out)",
            ));
        }
        Ok(rules)
    }

    fn rule(&mut self) -> Result<Rule, ConstrainError> {
        let name = self.name().map_err(|_| {
            self.error(format!(
                "expected a rule name, found {} ({CONTINUATION})",
                self.found()
            ))
        })?;
        self.space(false);
        if !self.text[self.pos..].starts_with("::=") {
            return Err(self.error(format!(
                "expected `::=` after the rule name `{name}`, found {} ({CONTINUATION})",
                self.found()
            )));
        }
        self.pos += 3;
        self.space(true);
        let body = self.alternatives(false)?;
        match self.peek() {
            None => {}
            Some('\r') => {
                self.pos += 1;
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
            }
            Some('\n') => self.pos += 1,
            Some(')') => return Err(self.error("unexpected `)`: no group is open")),
            Some(_) => {
                return Err(self.error(format!("unexpected {} in the rule `{name}`", self.found())));
            }
        }
        self.space(true);
        Ok(Rule { name, body })
    }

    /// A rule name: letters, digits and `-`.
    fn name(&mut self) -> Result<String, ConstrainError> {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '-')
        {
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.error("expected a name"));
        }
        Ok(self.text[start..self.pos].to_owned())
    }

    fn alternatives(&mut self, nested: bool) -> Result<Vec<Vec<Node>>, ConstrainError> {
        let mut alternatives = vec![self.sequence(nested)?];
        while self.peek() == Some('|') {
            self.pos += 1;
            self.space(true);
            alternatives.push(self.sequence(nested)?);
        }
        Ok(alternatives)
    }

    fn sequence(&mut self, nested: bool) -> Result<Vec<Node>, ConstrainError> {
        let mut nodes = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                '"' => nodes.push(self.literal()?),
                '[' => nodes.push(self.class()?),
                '<' | '!' => nodes.push(Node::Token(self.token()?)),
                '(' => {
                    let open = self.pos;
                    if self.depth >= MAX_NESTING {
                        return Err(
                            self.error(format!("groups are nested more than {MAX_NESTING} deep"))
                        );
                    }
                    self.pos += 1;
                    self.space(true);
                    self.depth += 1;
                    let group = self.alternatives(true)?;
                    self.depth -= 1;
                    if self.peek() != Some(')') {
                        let (line, column) = self.line_column(open);
                        return Err(self.error(format!(
                            "expected `)` to close the group opened at line {line}, column \
                             {column}, found {}",
                            self.found()
                        )));
                    }
                    self.pos += 1;
                    nodes.push(Node::Group(group));
                }
                '.' => {
                    self.pos += 1;
                    nodes.push(Node::Any);
                }
                '*' | '+' | '?' | '{' => {
                    let Some(node) = nodes.pop() else {
                        return Err(self.error(format!("`{c}` has nothing to repeat")));
                    };
                    let mut stacked = 0;
                    let mut inner = &node;
                    while let Node::Repeat { node, .. } = inner {
                        stacked += 1;
                        inner = node;
                    }
                    if self.depth + stacked >= MAX_NESTING {
                        return Err(self.error(format!(
                            "repetitions and groups are nested more than {MAX_NESTING} deep"
                        )));
                    }
                    let (min, max) = self.repetition(nested)?;
                    nodes.push(Node::Repeat {
                        node: Box::new(node),
                        min,
                        max,
                    });
                }
                c if c.is_ascii_alphanumeric() || c == '-' => {
                    let at = self.pos;
                    nodes.push(Node::Ref(self.name()?, at));
                }
                _ => break,
            }
            self.space(nested);
        }
        Ok(nodes)
    }

    /// `*`, `+`, `?` or `{m}`, `{m,}`, `{m,n}`: the bounds.
    fn repetition(&mut self, nested: bool) -> Result<(u64, Option<u64>), ConstrainError> {
        let start = self.pos;
        match self.bump() {
            Some('*') => return Ok((0, None)),
            Some('+') => return Ok((1, None)),
            Some('?') => return Ok((0, Some(1))),
            _ => {}
        }
        self.space(nested);
        let min = self.count("`{`")?;
        self.space(nested);
        let max = match self.peek() {
            Some('}') => {
                self.pos += 1;
                Some(min)
            }
            Some(',') => {
                self.pos += 1;
                self.space(nested);
                let max = match self.peek() {
                    Some(c) if c.is_ascii_digit() => Some(self.count("`,`")?),
                    _ => None,
                };
                self.space(nested);
                if self.peek() != Some('}') {
                    return Err(self.error(format!(
                        "expected `}}` to close the repetition, found {}",
                        self.found()
                    )));
                }
                self.pos += 1;
                max
            }
            _ => {
                return Err(self.error(format!(
                    "expected `,` or `}}` in the repetition, found {}",
                    self.found()
                )));
            }
        };
        let written = &self.text[start..self.pos];
        if min > MAX_REPETITION {
            return Err(self.error_at(
                start,
                format!("repetition `{written}`: {min} is above llama.cpp's limit of 2000"),
            ));
        }
        match max {
            Some(max) if max < min => Err(self.error_at(
                start,
                format!("repetition `{written}`: the maximum is below the minimum"),
            )),
            Some(max) if max > MAX_REPETITION => Ok((min, None)),
            _ => Ok((min, max)),
        }
    }

    /// A decimal count after `after`.
    fn count(&mut self, after: &str) -> Result<u64, ConstrainError> {
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        if start == self.pos {
            return Err(self.error(format!(
                "expected a number after {after}, found {}",
                self.found()
            )));
        }
        self.text[start..self.pos]
            .parse()
            .map_err(|_| self.error_at(start, "number too large"))
    }

    fn literal(&mut self) -> Result<Node, ConstrainError> {
        let start = self.pos;
        self.pos += 1;
        let mut chars = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error_at(start, "unterminated string literal")),
                Some('"') => break,
                Some(_) => chars.push(self.char()?),
            }
        }
        self.pos += 1;
        Ok(Node::Literal(chars))
    }

    fn class(&mut self) -> Result<Node, ConstrainError> {
        let start = self.pos;
        self.pos += 1;
        let negated = self.peek() == Some('^');
        if negated {
            self.pos += 1;
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.error_at(start, "unterminated character class")),
                Some(']') => break,
                Some(_) => {}
            }
            let at = self.pos;
            let low = self.char()?;
            let mut high = low;
            if self.peek() == Some('-') && self.peek_second().is_some_and(|c| c != ']') {
                self.pos += 1;
                high = self.char()?;
                if high < low {
                    return Err(self.error_at(
                        at,
                        format!(
                            "reversed range `{}` in a character class",
                            &self.text[at..self.pos]
                        ),
                    ));
                }
            }
            ranges.push((low, high));
        }
        self.pos += 1;
        if ranges.is_empty() {
            return Err(self.error_at(start, "empty character class"));
        }
        Ok(Node::Class { negated, ranges })
    }

    /// One character of a literal or class, escapes decoded.
    fn char(&mut self) -> Result<char, ConstrainError> {
        let start = self.pos;
        let Some(c) = self.bump() else {
            return Err(self.error("unexpected end of the grammar"));
        };
        if c != '\\' {
            return Ok(c);
        }
        let digits = match self.bump() {
            Some('x') => 2,
            Some('u') => 4,
            Some('U') => 8,
            Some('n') => return Ok('\n'),
            Some('r') => return Ok('\r'),
            Some('t') => return Ok('\t'),
            Some(c @ ('\\' | '"' | '[' | ']' | '-')) => return Ok(c),
            Some(c) => {
                return Err(self.error_at(start, format!("unknown escape `\\{c}`")));
            }
            None => return Err(self.error_at(start, "unterminated escape")),
        };
        let hex = self.text[self.pos..]
            .get(..digits)
            .filter(|h| h.chars().all(|c| c.is_ascii_hexdigit()));
        let Some(hex) = hex else {
            return Err(self.error_at(
                start,
                format!(
                    "`{}` needs {digits} hex digits",
                    &self.text[start..self.pos]
                ),
            ));
        };
        self.pos += digits;
        u32::from_str_radix(hex, 16)
            .ok()
            .and_then(char::from_u32)
            .ok_or_else(|| {
                self.error_at(
                    start,
                    format!(
                        "`{}` is not a Unicode character",
                        &self.text[start..self.pos]
                    ),
                )
            })
    }

    /// `<[id]>`, `!<[id]>` or `<text>`.
    fn token(&mut self) -> Result<Token, ConstrainError> {
        let start = self.pos;
        let negated = self.peek() == Some('!');
        if negated {
            self.pos += 1;
        }
        if self.peek() != Some('<') {
            return Err(self.error(format!(
                "expected `<` (a token) after `!`, found {}",
                self.found()
            )));
        }
        self.pos += 1;
        if self.peek() == Some('[') {
            self.pos += 1;
            let id = self.count("`<[`")?;
            let id = u32::try_from(id).map_err(|_| self.error_at(start, "token id too large"))?;
            if !self.text[self.pos..].starts_with("]>") {
                return Err(self.error(format!(
                    "expected `]>` to close the token id, found {}",
                    self.found()
                )));
            }
            self.pos += 2;
            return Ok(if negated {
                Token::NotId(id)
            } else {
                Token::Id(id)
            });
        }
        let Some(len) = self.text[self.pos..].find('>') else {
            return Err(self.error_at(start, "unterminated token (no closing `>`)"));
        };
        let text = &self.text[self.pos..self.pos + len];
        self.pos += len + 1;
        let written = &self.text[start..self.pos];
        if negated {
            return Err(self.error_at(
                start,
                format!(
                    "`{written}`: a token negated by its text needs the vocabulary; write its id \
                     as `!<[id]>`"
                ),
            ));
        }
        if text.is_empty() || text.contains(|c: char| c == '<' || c.is_whitespace()) {
            return Err(self.error_at(
                start,
                format!(
                    "token `{written}` cannot be named by its text here (empty, or with `<` or \
                     a blank in it); write its id as `<[id]>`"
                ),
            ));
        }
        Ok(Token::Text(text.to_owned()))
    }
}

/// Call `f` on every node of `alternatives`, nested ones included.
/// The rules that match some finite text (the productive symbols of the grammar): to a fixed
/// point, a rule is one when one of its alternatives has only such rules in it.
fn finishing_rules(rules: &[Rule]) -> HashSet<&str> {
    fn finishes(node: &Node, done: &HashSet<&str>) -> bool {
        match node {
            Node::Ref(name, _) => done.contains(name.as_str()),
            Node::Group(alternatives) => alternatives
                .iter()
                .any(|seq| seq.iter().all(|n| finishes(n, done))),
            Node::Repeat { node, min, .. } => *min == 0 || finishes(node, done),
            Node::Literal(_) | Node::Class { .. } | Node::Any | Node::Token(_) => true,
        }
    }
    let mut done: HashSet<&str> = HashSet::new();
    loop {
        let before = done.len();
        for rule in rules {
            if !done.contains(rule.name.as_str())
                && rule
                    .body
                    .iter()
                    .any(|seq| seq.iter().all(|n| finishes(n, &done)))
            {
                done.insert(rule.name.as_str());
            }
        }
        if done.len() == before {
            return done;
        }
    }
}

fn visit(alternatives: &[Vec<Node>], f: &mut impl FnMut(&Node)) {
    fn node(n: &Node, f: &mut impl FnMut(&Node)) {
        f(n);
        match n {
            Node::Group(alternatives) => visit(alternatives, f),
            Node::Repeat { node: inner, .. } => node(inner, f),
            _ => {}
        }
    }
    for sequence in alternatives {
        for n in sequence {
            node(n, f);
        }
    }
}

/// The Lark text of `rules` (root first, as `start`; the others in the order of their first
/// definition).
fn emit(rules: &[Rule]) -> String {
    let mut taken: HashSet<String> = HashSet::from(["start".to_owned()]);
    let mut names: HashMap<&str, String> = HashMap::new();
    for rule in rules {
        let name = if rule.name == "root" {
            "start".to_owned()
        } else {
            lark_name(&rule.name, &taken)
        };
        taken.insert(name.clone());
        names.insert(&rule.name, name);
    }
    let mut out = String::from("%llguidance {}\n\n");
    let root = rules.iter().filter(|r| r.name == "root");
    for rule in root.chain(rules.iter().filter(|r| r.name != "root")) {
        let body: Vec<String> = rule
            .body
            .iter()
            .map(|sequence| emit_sequence(sequence, &names))
            .collect();
        out.push_str(&names[rule.name.as_str()]);
        out.push_str(": ");
        out.push_str(&body.join("\n    | "));
        out.push('\n');
    }
    out
}

/// A Lark rule name for the GBNF `name`, not in `taken`: `camelCase` as `camel_case`, lower
/// case, a leading digit or `-` behind `r`, and `-2`, `-3`, ... after a name already used.
fn lark_name(name: &str, taken: &HashSet<String>) -> String {
    let mut base = String::with_capacity(name.len() + 2);
    let mut previous = None::<char>;
    for c in name.chars() {
        if c.is_ascii_uppercase()
            && previous.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit())
        {
            base.push('_');
        }
        base.push(c.to_ascii_lowercase());
        previous = Some(c);
    }
    if !base.starts_with(|c: char| c.is_ascii_lowercase()) {
        base.insert(0, 'r');
    }
    let mut candidate = base.clone();
    let mut n = 2;
    while taken.contains(&candidate) {
        candidate = format!("{base}-{n}");
        n += 1;
    }
    candidate
}

fn emit_sequence(nodes: &[Node], names: &HashMap<&str, String>) -> String {
    let parts: Vec<String> = nodes.iter().map(|node| emit_node(node, names).0).collect();
    if parts.is_empty() {
        "\"\"".into()
    } else {
        parts.join(" ")
    }
}

/// The Lark text of `node`, and whether it is one atom (a repetition may follow it).
fn emit_node(node: &Node, names: &HashMap<&str, String>) -> (String, bool) {
    match node {
        Node::Literal(chars) => match chars.as_slice() {
            [] => ("\"\"".into(), true),
            [c] => (lark_string(*c), true),
            chars => {
                let parts: Vec<String> = chars.iter().map(|&c| lark_string(c)).collect();
                (parts.join(" "), false)
            }
        },
        Node::Class { negated, ranges } => {
            let mut rx = String::from(if *negated { "/[^" } else { "/[" });
            for &(low, high) in ranges {
                rx.push_str(&regex_char(low));
                if high != low {
                    rx.push('-');
                    rx.push_str(&regex_char(high));
                }
            }
            rx.push_str("]/");
            (rx, true)
        }
        Node::Any => ("/(?s:.)/".into(), true),
        Node::Ref(name, _) => (names[name.as_str()].clone(), true),
        Node::Token(Token::Id(id)) => (format!("<[{id}]>"), true),
        Node::Token(Token::NotId(id)) => (format!("<[^{id}]>"), true),
        Node::Token(Token::Text(text)) => (format!("<{text}>"), true),
        Node::Group(alternatives) => match alternatives.as_slice() {
            [sequence] if sequence.len() == 1 => emit_node(&sequence[0], names),
            _ => {
                let body: Vec<String> = alternatives
                    .iter()
                    .map(|sequence| emit_sequence(sequence, names))
                    .collect();
                (format!("({})", body.join(" | ")), true)
            }
        },
        Node::Repeat { node, min, max } => {
            if *max == Some(0) {
                return ("\"\"".into(), true);
            }
            let (inner, atom) = emit_node(node, names);
            let inner = if atom { inner } else { format!("({inner})") };
            let suffix = match (min, max) {
                (0, None) => "*".into(),
                (1, None) => "+".into(),
                (0, Some(1)) => "?".into(),
                (m, None) => format!("{{{m},}}"),
                (m, Some(n)) if m == n => format!("{{{m}}}"),
                (m, Some(n)) => format!("{{{m},{n}}}"),
            };
            (inner + &suffix, false)
        }
    }
}

/// `c` as a one-character Lark string (JSON escapes).
fn lark_string(c: char) -> String {
    match c {
        '"' => r#""\"""#.into(),
        '\\' => r#""\\""#.into(),
        '\n' => r#""\n""#.into(),
        '\r' => r#""\r""#.into(),
        '\t' => r#""\t""#.into(),
        c if c < ' ' || c == '\x7f' => format!("\"\\u{:04x}\"", u32::from(c)),
        c => format!("\"{c}\""),
    }
}

/// `c` inside a regex character class: ASCII letters and digits as themselves, anything else
/// as `\x{HEX}` (no class syntax, no `/` to end the Lark regex).
fn regex_char(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        c.to_string()
    } else {
        format!("\\x{{{:X}}}", u32::from(c))
    }
}

#[cfg(test)]
mod tests;
