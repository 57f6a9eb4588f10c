//! Constraints on a toy byte-level vocabulary (one token per byte, two multi-byte tokens and an
//! end token): what they allow, what they force, and the errors of bad input.

#[path = "common/toy.rs"]
mod common;

use common::{allowed, feed, toy};
use kindle_constrain::{Constrainer, ConstraintSpec};
use kindle_sampling::LogitsConstraint;

#[test]
fn regex_allows_exactly_its_language() {
    let constrainer = Constrainer::new(&toy()).unwrap();
    let spec = ConstraintSpec::Regex("[0-9]{2}-x".into());
    let mut c = constrainer.constraint(&spec, "--regex").unwrap();
    let (ids, forced) = allowed(&mut c);
    assert_eq!(ids, (b'0'..=b'9').map(u32::from).collect::<Vec<_>>());
    assert_eq!(forced, None);
    feed(&mut c, "42");
    // Only "-" may follow, and then only "x": forced, not sampled.
    assert_eq!(
        allowed(&mut c),
        (vec![u32::from(b'-')], Some(u32::from(b'-')))
    );
    c.advance(u32::from(b'-')).unwrap();
    assert_eq!(allowed(&mut c).1, Some(u32::from(b'x')));
    c.advance(u32::from(b'x')).unwrap();
    assert_eq!(c.stats().forced, 2);
    assert_eq!(c.stats().masks, 5);
    // Complete: only the end token (or nothing more at all).
    assert!(c.is_complete() || allowed(&mut c).0 == [258]);
}

#[test]
fn a_disallowed_token_is_an_error() {
    let constrainer = Constrainer::new(&toy()).unwrap();
    let mut c = constrainer
        .constraint(&ConstraintSpec::Regex("a+".into()), "--regex")
        .unwrap();
    allowed(&mut c);
    assert!(c.advance(u32::from(b'b')).is_err());
}

#[test]
fn choices_use_multi_byte_tokens() {
    let constrainer = Constrainer::new(&toy()).unwrap();
    let spec = ConstraintSpec::Choice(vec!["yes".into(), "no".into()]);
    let mut c = constrainer.constraint(&spec, "--choice").unwrap();
    let (ids, _) = allowed(&mut c);
    assert!(ids.contains(&256) && ids.contains(&257));
    assert!(ids.contains(&u32::from(b'y')) && !ids.contains(&u32::from(b'x')));
    c.advance(257).unwrap();
    assert!(c.is_complete() || allowed(&mut c).0 == [258]);
}

#[test]
fn json_schema_output_is_compact_and_typed() {
    let constrainer = Constrainer::new(&toy()).unwrap();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": false
    });
    let mut c = constrainer
        .constraint(&ConstraintSpec::JsonSchema(schema), "--json-schema")
        .unwrap();
    feed(&mut c, "{\"a\": 12}");
    assert!(c.is_complete() || allowed(&mut c).0 == [258]);
}

#[test]
fn bad_input_names_the_flag_and_the_position() {
    let constrainer = Constrainer::new(&toy()).unwrap();
    let error = |spec: ConstraintSpec, flag: &str| {
        constrainer
            .constraint(&spec, flag)
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let regex = error(ConstraintSpec::Regex("[0-9".into()), "--regex");
    assert!(regex.starts_with("--regex: invalid regex:"), "{regex}");
    let lark = error(
        ConstraintSpec::Lark("start: foo\nfoo: \"a\" |||| )".into()),
        "--grammar",
    );
    assert!(lark.starts_with("--grammar: invalid grammar:"), "{lark}");
    assert!(lark.contains("line") || lark.contains(':'), "{lark}");
    let schema = error(
        ConstraintSpec::JsonSchema(serde_json::json!({"type": "strange"})),
        "--json-schema",
    );
    assert!(
        schema.starts_with("--json-schema: invalid JSON schema:"),
        "{schema}"
    );
    let choice = error(ConstraintSpec::Choice(vec![]), "--choice");
    assert!(choice.contains("no choice"), "{choice}");
    let not_json = ConstraintSpec::json_schema("{\"type\": \"object\",\n}", "response_format")
        .unwrap_err()
        .to_string();
    assert!(
        not_json.starts_with("response_format: not valid JSON at line 2, column 1"),
        "{not_json}"
    );
}
