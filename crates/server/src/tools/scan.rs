//! Where the parts of a tool call's JSON text lie, in text that may still be growing: the
//! call object's `name` and arguments, a list's items. Read by the parser of whole replies
//! and by the stream, so that both take a call's arguments as the same text.

/// What a (perhaps unfinished) call object's text holds so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CallScan {
    /// The function's name, once its string is whole.
    pub name: Option<String>,
    /// Where the arguments value starts (its first byte) and, once whole, ends.
    pub arguments: Option<(usize, Option<usize>)>,
    /// Where the object ends (past its closing brace), once whole.
    pub end: Option<usize>,
}

/// Where `text`'s call object (leading white space allowed) has its `name` string and the
/// value under one of `keys`: `None` when the text cannot be the start of a JSON object.
pub(crate) fn scan_call(text: &str, keys: &[&str]) -> Option<CallScan> {
    let b = text.as_bytes();
    let mut scan = CallScan::default();
    let mut at = skip_ws(b, 0);
    if at == b.len() {
        return Some(scan);
    }
    if b[at] != b'{' {
        return None;
    }
    at += 1;
    loop {
        at = skip_ws(b, at);
        match b.get(at) {
            None => return Some(scan),
            Some(b'}') => {
                scan.end = Some(at + 1);
                return Some(scan);
            }
            Some(b'"') => {}
            Some(_) => return None,
        }
        let Some(key_end) = skip_value(b, at)? else {
            return Some(scan);
        };
        let key: String = serde_json::from_str(&text[at..key_end]).ok()?;
        at = skip_ws(b, key_end);
        match b.get(at) {
            None => return Some(scan),
            Some(b':') => at = skip_ws(b, at + 1),
            Some(_) => return None,
        }
        if at == b.len() {
            return Some(scan);
        }
        let value_end = skip_value(b, at)?;
        if keys.contains(&key.as_str()) {
            scan.arguments = Some((at, value_end));
        } else if key == "name"
            && let Some(end) = value_end
            && b[at] == b'"'
        {
            scan.name = serde_json::from_str(&text[at..end]).ok();
        }
        let Some(end) = value_end else {
            return Some(scan);
        };
        at = skip_ws(b, end);
        match b.get(at) {
            None => return Some(scan),
            Some(b',') => at += 1,
            Some(b'}') => {
                scan.end = Some(at + 1);
                return Some(scan);
            }
            Some(_) => return None,
        }
    }
}

pub(crate) fn skip_ws(b: &[u8], mut at: usize) -> usize {
    while at < b.len() && b[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// The end of the JSON value starting at `at`: `Some(Some(end))` when whole, `Some(None)`
/// when the text stops inside it, `None` when it cannot be a value.
fn skip_value(b: &[u8], at: usize) -> Option<Option<usize>> {
    match b[at] {
        b'"' | b'{' | b'[' => {
            let mut depth = 0usize;
            let mut in_string = false;
            let mut i = at;
            while i < b.len() {
                let c = b[i];
                if in_string {
                    match c {
                        b'\\' => i += 1,
                        b'"' => {
                            in_string = false;
                            if depth == 0 {
                                return Some(Some(i + 1));
                            }
                        }
                        _ => {}
                    }
                } else {
                    match c {
                        b'"' => in_string = true,
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            if depth == 0 {
                                return Some(Some(i + 1));
                            }
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            Some(None)
        }
        b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
            let end = (at..b.len())
                .find(|&i| matches!(b[i], b',' | b'}' | b']') || b[i].is_ascii_whitespace());
            Some(end)
        }
        _ => None,
    }
}

/// The `(start, end)` of each item of a whole JSON list (leading white space allowed), or
/// `None` when the text is not one.
pub(crate) fn list_items(text: &str) -> Option<Vec<(usize, usize)>> {
    let b = text.as_bytes();
    let mut at = skip_ws(b, 0);
    if b.get(at) != Some(&b'[') {
        return None;
    }
    let mut items = Vec::new();
    at = skip_ws(b, at + 1);
    if b.get(at) == Some(&b']') {
        return Some(items);
    }
    loop {
        b.get(at)?;
        let end = skip_value(b, at)??;
        items.push((at, end));
        at = skip_ws(b, end);
        match b.get(at)? {
            b',' => at = skip_ws(b, at + 1),
            b']' => return Some(items),
            _ => return None,
        }
        b.get(at)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scanner_finds_the_name_and_the_arguments_of_unfinished_calls() {
        let keys = &["arguments"];
        let whole = r#" {"name": "w", "arguments": {"city": "Os}lo", "n": [1, {"k": 2}]}}"#;
        let scan = scan_call(whole, keys).unwrap();
        assert_eq!(scan.name.as_deref(), Some("w"));
        let (start, end) = scan.arguments.unwrap();
        assert_eq!(
            &whole[start..end.unwrap()],
            r#"{"city": "Os}lo", "n": [1, {"k": 2}]}"#
        );
        assert_eq!(scan.end, Some(whole.len()));
        // Every prefix: a name only once its string is whole, the arguments from their brace.
        for cut in 0..whole.len() {
            let scan = scan_call(&whole[..cut], keys).unwrap();
            assert_eq!(scan.name.is_some(), cut >= 13, "{cut}");
            assert_eq!(scan.arguments.is_some(), cut > 28, "{cut}");
            assert_eq!(scan.end, None);
            if let Some((start, None)) = scan.arguments {
                assert_eq!(start, 28);
            }
        }
        for not_a_call in [
            "x",
            "[1]",
            r#"{"name" 1}"#,
            r#"{"a": 1 2}"#,
            r#"{3: 1}"#,
            "{]",
        ] {
            assert_eq!(scan_call(not_a_call, keys), None, "{not_a_call}");
        }
        let escaped = r#"{"name": "a\"b", "arguments": {"q": "\"}"}}"#;
        let scan = scan_call(escaped, keys).unwrap();
        assert_eq!(scan.name.as_deref(), Some("a\"b"));
        assert_eq!(scan.end, Some(escaped.len()));
    }
}
