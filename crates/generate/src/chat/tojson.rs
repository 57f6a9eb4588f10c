//! The `tojson` filter as Hugging Face `transformers` defines it for chat templates:
//! Python's `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)`, not Jinja's HTML-safe one (minijinja's built-in writes `<` as `\u003c`
//! and `'` as `\u0027`, which no model saw in training). Keys keep their order (the
//! request's, as a Python dict does), `", "` and `": "` separate items and keys unless an
//! `indent` or `separators` says otherwise, and floats are written as Python's `repr` writes
//! them (`1.0`, `1e-05`, `1e+16`).
//!
//! The arguments are Python's, positional or by keyword: `ensure_ascii`, `indent` (a number
//! of spaces or a string), `separators` (a pair of strings); `sort_keys` by keyword. With
//! `ensure_ascii`, the private-use characters of the chat module's markers stay as they are,
//! so protected texts survive a template that asks for ASCII.

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

use super::markers::{CLOSE, OPEN};

/// How one `tojson` call writes.
struct Style {
    ensure_ascii: bool,
    /// `None`: one line.
    indent: Option<String>,
    item_separator: String,
    key_separator: String,
    sort_keys: bool,
}

fn invalid(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.into())
}

/// The filter: `value | tojson`, `value | tojson(indent=4)`, ...
pub(super) fn tojson(
    value: &Value,
    ensure_ascii: Option<Value>,
    indent: Option<Value>,
    separators: Option<Value>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let arg = |given: Option<Value>, name: &str| -> Result<Option<Value>, Error> {
        match given {
            Some(v) => Ok(Some(v)),
            None => kwargs.get::<Option<Value>>(name),
        }
    };
    let ensure_ascii = arg(ensure_ascii, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let sort_keys = arg(None, "sort_keys")?.is_some_and(|v| v.is_true());
    let indent = match arg(indent, "indent")? {
        None => None,
        Some(v) if v.is_none() || v.is_undefined() => None,
        Some(v) => match (v.as_str(), v.as_i64()) {
            (Some(s), _) => Some(s.to_string()),
            (None, Some(n)) => Some(" ".repeat(n.max(0) as usize)),
            _ => return Err(invalid("tojson: indent must be a number or a string")),
        },
    };
    let (item_separator, key_separator) = match arg(separators, "separators")? {
        Some(v) if !v.is_none() && !v.is_undefined() => {
            let pair: Vec<Value> = v.try_iter()?.collect();
            match pair.as_slice() {
                [a, b] if a.as_str().is_some() && b.as_str().is_some() => (
                    a.as_str().unwrap_or_default().to_string(),
                    b.as_str().unwrap_or_default().to_string(),
                ),
                _ => return Err(invalid("tojson: separators must be two strings")),
            }
        }
        _ if indent.is_some() => (",".to_string(), ": ".to_string()),
        _ => (", ".to_string(), ": ".to_string()),
    };
    kwargs.assert_all_used()?;
    let style = Style {
        ensure_ascii,
        indent,
        item_separator,
        key_separator,
        sort_keys,
    };
    let mut out = String::new();
    write_value(&mut out, value, &style, 0)?;
    Ok(Value::from_safe_string(out))
}

fn write_value(out: &mut String, value: &Value, style: &Style, depth: usize) -> Result<(), Error> {
    if depth > 256 {
        return Err(invalid("tojson: the value nests too deeply"));
    }
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number if value.is_integer() => {
            let _ = write!(out, "{value}");
        }
        ValueKind::Number => {
            let x = f64::try_from(value.clone())?;
            out.push_str(&python_float(x));
        }
        ValueKind::String => write_str(out, value.as_str().unwrap_or_default(), style),
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if style.sort_keys {
                keys.sort();
            }
            let items = keys
                .into_iter()
                .map(|k| {
                    let v = value.get_item(&k)?;
                    Ok((k, v))
                })
                .collect::<Result<Vec<_>, Error>>()?;
            write_container(out, '{', '}', items.len(), style, depth, |out, i| {
                let (k, v) = &items[i];
                write_str(out, &key_text(k), style);
                out.push_str(&style.key_separator);
                write_value(out, v, style, depth + 1)
            })?;
        }
        ValueKind::Seq | ValueKind::Iterable | ValueKind::Bytes => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, '[', ']', items.len(), style, depth, |out, i| {
                write_value(out, &items[i], style, depth + 1)
            })?;
        }
        ValueKind::Plain | ValueKind::Invalid => write_str(out, &value.to_string(), style),
        // Later kinds of a newer minijinja: their text, as a string.
        _ => write_str(out, &value.to_string(), style),
    }
    Ok(())
}

/// A map key as Python's `json.dumps` writes a non-string key.
fn key_text(key: &Value) -> String {
    match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::None | ValueKind::Undefined => "null".to_string(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_string(),
        ValueKind::Number if !key.is_integer() => {
            python_float(f64::try_from(key.clone()).unwrap_or(f64::NAN))
        }
        _ => key.to_string(),
    }
}

fn write_container(
    out: &mut String,
    open: char,
    close: char,
    len: usize,
    style: &Style,
    depth: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if len == 0 {
        out.push(close);
        return Ok(());
    }
    for i in 0..len {
        if i > 0 {
            out.push_str(&style.item_separator);
        }
        if let Some(indent) = &style.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth + 1));
        }
        item(out, i)?;
    }
    if let Some(indent) = &style.indent {
        out.push('\n');
        out.push_str(&indent.repeat(depth));
    }
    out.push(close);
    Ok(())
}

/// A JSON string as Python writes it: `"`, `\` and control characters escaped (`\n`, `\t`,
/// ... or `\u00XX`), and with `ensure_ascii` every other non-ASCII character as `\uXXXX`
/// (surrogate pairs above U+FFFF) but the chat markers' private-use characters.
fn write_str(out: &mut String, s: &str, style: &Style) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if style.ensure_ascii && !c.is_ascii() && c != OPEN && c != CLOSE => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `repr(x)` of a Python float: the shortest text that reads back as `x`, fixed-point for
/// decimal exponents -4..16 (with `.0` when integral), else `d.ddde+XX`; `NaN`, `Infinity`.
fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".to_string();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    // Rust's `{:e}` is the shortest round-trip form: `-1.2345e17`, `1e-5`, `0e0`.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let text = if point <= 0 {
            format!("0.{}{digits}", "0".repeat((-point) as usize))
        } else if point as usize >= digits.len() {
            format!("{digits}{}.0", "0".repeat(point as usize - digits.len()))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{int}.{frac}")
        };
        format!("{sign}{text}")
    } else {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{first}{frac}e{esign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(template: &str, ctx: serde_json::Value) -> String {
        let mut env = minijinja::Environment::new();
        env.add_filter("tojson", tojson);
        env.render_str(template, minijinja::value::Serde(ctx))
            .unwrap()
    }

    #[test]
    fn floats_read_as_python_writes_them() {
        for (x, python) in [
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (0.1, "0.1"),
            (1.5, "1.5"),
            (-2.25, "-2.25"),
            (1e-4, "0.0001"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456.789, "123456.789"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.2345678901234568e17, "1.2345678901234568e+17"),
            (1e100, "1e+100"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(python_float(x), python, "{x:?}");
        }
    }

    /// Expected texts from Python 3 (`json.dumps` with the same arguments).
    #[test]
    fn writes_as_python_json_dumps() {
        let ctx = serde_json::json!({
            "x": {"type": "function", "b": [1, 2.0, null, true], "a": "x < y & 'z' é \"q\"\n\u{1}",
                  "e": {}, "f": []}
        });
        assert_eq!(
            render("{{ x | tojson }}", ctx.clone()),
            r#"{"type": "function", "b": [1, 2.0, null, true], "a": "x < y & 'z' é \"q\"\n\u0001", "e": {}, "f": []}"#
        );
        assert_eq!(
            render("{{ x | tojson(indent=2) }}", ctx.clone()),
            "{\n  \"type\": \"function\",\n  \"b\": [\n    1,\n    2.0,\n    null,\n    true\n  ],\n  \
             \"a\": \"x < y & 'z' \u{e9} \\\"q\\\"\\n\\u0001\",\n  \"e\": {},\n  \"f\": []\n}"
        );
        assert_eq!(
            render("{{ x.b | tojson(separators=(',', ':')) }}", ctx.clone()),
            "[1,2.0,null,true]"
        );
        assert_eq!(
            render(
                "{{ x | tojson(sort_keys=true, ensure_ascii=true) }}",
                ctx.clone()
            ),
            r#"{"a": "x < y & 'z' \u00e9 \"q\"\n\u0001", "b": [1, 2.0, null, true], "e": {}, "f": [], "type": "function"}"#
        );
        // Positional arguments in Python's order: ensure_ascii, indent.
        assert_eq!(
            render("{{ 'é😀' | tojson(true) }}", ctx.clone()),
            r#""\u00e9\ud83d\ude00""#
        );
        assert_eq!(render("{{ [1] | tojson(false, '\t') }}", ctx), "[\n\t1\n]");
    }

    #[test]
    fn bad_arguments_are_errors() {
        let mut env = minijinja::Environment::new();
        env.add_filter("tojson", tojson);
        for bad in [
            "{{ 1 | tojson(indent=[1]) }}",
            "{{ 1 | tojson(separators=1) }}",
            "{{ 1 | tojson(separators=(',',)) }}",
            "{{ 1 | tojson(colour=1) }}",
        ] {
            assert!(env.render_str(bad, ()).is_err(), "{bad}");
        }
    }
}
