//! The conversion's Lark text, construct by construct, and its errors.

use super::*;

/// The converted rules, without the `%llguidance {}` header.
fn lark(gbnf: &str) -> String {
    let out = gbnf_to_lark(gbnf).unwrap();
    out.strip_prefix("%llguidance {}\n\n").unwrap().to_owned()
}

/// The error's text.
fn error(gbnf: &str) -> String {
    gbnf_to_lark(gbnf).unwrap_err().to_string()
}

#[test]
fn literals_become_one_character_strings() {
    assert_eq!(
        lark(r#"root ::= "ab" "" "c""#),
        "start: \"a\" \"b\" \"\" \"c\"\n"
    );
}

#[test]
fn escapes_are_decoded_and_written_as_json() {
    assert_eq!(
        lark(r#"root ::= "\n\t\r\\\"\[\]\-\x41\u00e9\U0001F600\x7f\x01""#),
        "start: \"\\n\" \"\\t\" \"\\r\" \"\\\\\" \"\\\"\" \"[\" \"]\" \"-\" \"A\" \"é\" \"😀\" \
         \"\\u007f\" \"\\u0001\"\n"
    );
}

#[test]
fn classes_escape_everything_but_letters_and_digits() {
    assert_eq!(
        lark(r"root ::= [a-z_0-9] [^\n\x00-\x1f/] [-\]] [a-]"),
        "start: /[a-z\\x{5F}0-9]/ /[^\\x{A}\\x{0}-\\x{1F}\\x{2F}]/ /[\\x{2D}\\x{5D}]/ \
         /[a\\x{2D}]/\n"
    );
    // `,-.` is a range, as llama.cpp reads it.
    assert_eq!(
        lark("root ::= [+,-.]"),
        "start: /[\\x{2B}\\x{2C}-\\x{2E}]/\n"
    );
}

#[test]
fn any_character_includes_newlines() {
    assert_eq!(lark("root ::= .*"), "start: /(?s:.)/*\n");
}

#[test]
fn repetitions() {
    assert_eq!(
        lark(r#"root ::= "a"* "b"+ "c"? "d"{3} "e"{2,} "f"{2,5} "g"{0,1} "hi"{0} "j"{ 1 , 2 }"#),
        "start: \"a\"* \"b\"+ \"c\"? \"d\"{3} \"e\"{2,} \"f\"{2,5} \"g\"? \"\" \"j\"{1,2}\n"
    );
    // Sequences and repetitions are parenthesized before a repetition.
    assert_eq!(
        lark("root ::= \"ab\"+ x**\nx ::= \"x\""),
        "start: (\"a\" \"b\")+ (x*)*\nx: \"x\"\n"
    );
    // As in llama.cpp, a maximum above 2000 is no maximum.
    assert_eq!(lark(r#"root ::= "a"{1,5000}"#), "start: \"a\"+\n");
    assert_eq!(lark(r#"root ::= "a"{2,5000}"#), "start: \"a\"{2,}\n");
}

#[test]
fn groups_alternatives_and_multi_line_rules() {
    let gbnf = "# a comment\nroot ::=\n  x ( \"a\" # inside\n  | \"b\"\n  ) |\n  \"c\"\n\nx ::= (\"x\") ()\n";
    assert_eq!(
        lark(gbnf),
        "start: x (\"a\" | \"b\")\n    | \"c\"\nx: \"x\" (\"\")\n"
    );
}

#[test]
fn names_become_lark_names() {
    let gbnf = "root ::= dataType data-type 1st Start start\ndataType ::= \"a\"\n\
                data-type ::= \"b\"\n1st ::= \"c\"\nStart ::= \"d\"\nstart ::= \"e\"\n";
    assert_eq!(
        lark(gbnf),
        "start: data_type data-type r1st start-2 start-3\ndata_type: \"a\"\n\
         data-type: \"b\"\nr1st: \"c\"\nstart-2: \"d\"\nstart-3: \"e\"\n"
    );
}

#[test]
fn root_comes_first_and_a_rule_defined_twice_keeps_its_last_body() {
    assert_eq!(
        lark("x ::= \"1\"\nroot ::= x\nx ::= \"2\"\r\n"),
        "start: x\nx: \"2\"\n"
    );
}

#[test]
fn tokens() {
    assert_eq!(
        lark("root ::= <[12]> !<[13]>* <|end|>"),
        "start: <[12]> <[^13]>* <|end|>\n"
    );
    assert!(error("root ::= !<think>").contains("`!<[id]>`"));
    assert!(error("root ::= <a b>").contains("`<[id]>`"));
    assert!(error("root ::= <[x]>").contains("expected a number"));
    assert!(error("root ::= !x").contains("expected `<`"));
}

#[test]
fn errors_name_the_problem_and_its_line() {
    let cases = [
        (
            "root ::= \"abc",
            "line 1, column 10: unterminated string literal",
        ),
        (
            "root ::= x\nx ::= [abc",
            "line 2, column 7: unterminated character class",
        ),
        (
            "root ::= x y\nx ::= \"\"",
            "line 1, column 12: unknown rule `y`",
        ),
        ("x ::= \"a\"", "line 1, column 1: no `root` rule"),
        ("root ::= root", "line 1, column 1: `root` matches no text"),
        (
            "root ::= a\na ::= \"x\" b\nb ::= a \"y\"",
            "line 1, column 1: `root` matches no text",
        ),
        (
            "root ::= * \"a\"",
            "line 1, column 10: `*` has nothing to repeat",
        ),
        (
            "root ::= \"a\"{2,1}",
            "line 1, column 13: repetition `{2,1}`: the maximum",
        ),
        (
            "root ::= \"a\"{x}",
            "line 1, column 14: expected a number after `{`",
        ),
        (
            "root ::= \"a\"{1,2",
            "line 1, column 17: expected `}` to close",
        ),
        (
            "root ::= \"a\"{1;",
            "line 1, column 15: expected `,` or `}`",
        ),
        (
            "root ::= \"a\"{2001}",
            "line 1, column 13: repetition `{2001}`: 2001 is above",
        ),
        (
            "root ::= \"\\q\"",
            "line 1, column 11: unknown escape `\\q`",
        ),
        (
            "root ::= \"\\x4\"",
            "line 1, column 11: `\\x` needs 2 hex digits",
        ),
        ("root ::= \"\\UFFFFFFFF\"", "is not a Unicode character"),
        ("root ::= []", "line 1, column 10: empty character class"),
        ("root ::= [z-a]", "line 1, column 11: reversed range `z-a`"),
        (
            "root ::= (\"a\"\n\n",
            "line 3, column 1: expected `)` to close the group opened at line 1, column 10",
        ),
        ("root ::= \"a\" )", "line 1, column 14: unexpected `)`"),
        (
            "root ::= \"a\"\n  | \"b\"",
            "line 2, column 3: expected a rule name, found `|` (a rule goes on",
        ),
        (
            "root ::= \"a\"\n  \"b\"",
            "line 2, column 3: expected a rule name",
        ),
        (
            "root ::= \"a\"\n  b c",
            "line 2, column 5: expected `::=` after the rule name `b`",
        ),
        (
            "root_x ::= \"a\"",
            "line 1, column 5: expected `::=` after the rule name `root`",
        ),
    ];
    for (gbnf, expected) in cases {
        let text = error(gbnf);
        assert!(
            text.starts_with("grammar: invalid GBNF at ") && text.contains(expected),
            "{gbnf:?}: {text}"
        );
    }
}

/// Nesting is bounded (the parser, the converter and llguidance recurse over it): 256 groups
/// or stacked repetitions are refused with the line and column, fewer convert.
#[test]
fn nesting_is_bounded() {
    let nested = |n: usize| format!("root ::= {}\"a\"{}", "(".repeat(n), ")".repeat(n));
    assert!(gbnf_to_lark(&nested(200)).is_ok());
    let err = gbnf_to_lark(&nested(10_000)).unwrap_err().to_string();
    assert!(
        err.contains("column 266: groups are nested more than 256 deep"),
        "{err}"
    );
    let stacked = format!("root ::= \"a\"{}", "?".repeat(300));
    let err = gbnf_to_lark(&stacked).unwrap_err().to_string();
    assert!(err.contains("nested more than 256 deep"), "{err}");
}
