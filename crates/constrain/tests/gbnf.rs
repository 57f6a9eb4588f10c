//! GBNF grammars (llama.cpp's format) through [`kindle_constrain::gbnf_to_lark`] and
//! llguidance, on the toy byte-level vocabulary: every grammar of llama.cpp's `grammars/`
//! directory compiles, and the constraints accept the strings the grammars accept and refuse
//! the others, construct by construct.

#[path = "common/toy.rs"]
mod common;

use std::path::PathBuf;

use common::{END, accepts, toy};
use kindle_constrain::{Constrainer, Constraint, ConstraintSpec, gbnf_to_lark};
use kindle_sampling::LogitsConstraint;

fn testdata(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/testdata/gbnf")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn constraint(constrainer: &Constrainer, gbnf: &str) -> Constraint {
    constrainer
        .constraint(&ConstraintSpec::Gbnf(gbnf.to_owned()), "--grammar")
        .unwrap_or_else(|e| panic!("{gbnf}\n{e}"))
}

/// Each of `good` is accepted in full and each of `bad` is not, by a fresh constraint each.
fn check(gbnf: &str, good: &[&str], bad: &[&str]) {
    let constrainer = Constrainer::new(&toy()).unwrap();
    for text in good {
        let mut c = constraint(&constrainer, gbnf);
        assert!(accepts(&mut c, text), "{gbnf}\nmust accept {text:?}");
    }
    for text in bad {
        let mut c = constraint(&constrainer, gbnf);
        assert!(!accepts(&mut c, text), "{gbnf}\nmust refuse {text:?}");
    }
}

#[test]
fn every_llama_cpp_grammar_converts_and_compiles() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/gbnf");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".gbnf"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "arithmetic.gbnf",
            "c.gbnf",
            "chess.gbnf",
            "english.gbnf",
            "japanese.gbnf",
            "json.gbnf",
            "json_arr.gbnf",
            "list.gbnf"
        ]
    );
    let constrainer = Constrainer::new(&toy()).unwrap();
    for name in names {
        let gbnf = testdata(&name);
        let lark = gbnf_to_lark(&gbnf).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(lark.contains("\nstart: "), "{name}:\n{lark}");
        let mut c = constrainer
            .constraint(&ConstraintSpec::Lark(lark.clone()), name.as_str())
            .unwrap_or_else(|e| panic!("{name}: {e}\n{lark}"));
        let mut logits = vec![0.0f32; 259];
        c.mask(&mut logits).unwrap();
    }
}

#[test]
fn arithmetic() {
    check(
        &testdata("arithmetic.gbnf"),
        &[
            "1+2=3\n",
            "x = (a +b1*2)\n",
            "x=1\ny = (x/2)\n",
            "a_1 = ( 1 )\n",
            "1=2\n\n", // the term's `ws` takes one newline, the rule the other
        ],
        &[
            "1+2=3",
            "1+=3\n",
            "X=1\n",
            "(1=1\n",
            "x = (a + b1)\n",
            "x = a*2 * 2\n",
            "y = x/2\n", // the right-hand side is one term
        ],
    );
}

#[test]
fn json() {
    let bad = [
        "{\"a\": 01}",
        "{\"a\" 1}",
        "{\"a\": \"\\q\"}",
        "{\"a\": \"\u{1}\"}",
        "{'a': 1}",
        "{\"a\": 1,}",
        "{\"a\": 1}}",
        "{\"a\": \"x\"",
    ];
    check(
        &testdata("json.gbnf"),
        &[
            "{}",
            "{\"a\": 1}",
            "{\"a\":[1, -2.5e12, true, null, \"x\\n\\u00e9\"], \"b\": {}}",
            "{\n  \"k\": \"v\"\n}",
        ],
        // The root is an object; and json.gbnf's exponent is `[0-9] [1-9]{0,15}`, so llama.cpp
        // refuses `1e10` too.
        &[&bad[..], &["[]", "{\"a\": 1e10}"]].concat(),
    );
    check(
        &testdata("json_arr.gbnf"),
        &["[\n]", "[\n{\"a\": [1e10]},\n\"x\"]"],
        &["[]", "[\n1] ", "{}"],
    );
}

#[test]
fn list_and_chess() {
    check(
        &testdata("list.gbnf"),
        &["- milk\n", "- milk\n- eggs and bread\n"],
        &["- \n", "milk\n", "- milk", "- a\rb\n", "- a\u{2028}b\n"],
    );
    check(
        &testdata("chess.gbnf"),
        &[
            "1. e4 e5\n2. Nf3 Nc6\n",
            "1. d4 d5\n2. c4 dxc4\n3. O-O Qxd1+\n10. e8=Q O-O-O#\n",
        ],
        &[
            "1. e4 e5\n",
            "1. e9 e5\n2. a3 a6\n",
            "2. e4 e5\n2. a3 a6\n",
            "1. e4 e5\n02. a3 a6\n",
        ],
    );
}

#[test]
fn english_japanese_and_c() {
    check(
        &testdata("english.gbnf"),
        &["Hello, world!", "a [b] \\ ^_` {c}~\td"],
        &["", "two  spaces", "trailing ", "é"],
    );
    check(
        &testdata("japanese.gbnf"),
        &["こんにちは、世界", "カタカナ 漢字"],
        &["abc", "こんにちは  世界"],
    );
    check(
        &testdata("c.gbnf"),
        &["int main(){return 0;}", "float f(int x){x = x*2;// hi\n}"],
        &["int main(){return 0}", "main(){}", "int f(){x = x * 2;}"],
    );
}

#[test]
fn classes_negated_classes_and_any() {
    check(
        "root ::= [a-cx] [^a-z\\n] . \"!\"",
        &["a1z!", "x\t\n!", "cZé!"],
        &["d1z!", "aaz!", "a\nz!", "a1!"],
    );
    // `-` first, last or escaped is itself; `,-.` is a range.
    check(
        r"root ::= [-a] [b-] [x\-z] [+,-.]+",
        &["-b--.", "a-z,+"],
        &["bb-.", "-bya.", "-b-/"],
    );
    // Escapes in classes: `\]`, `\\`, `\x`, `\u`, `\U`.
    check(
        r"root ::= [\]\\\x41\u00e9\U0001F600]+",
        &["]\\Aé😀"],
        &["a", "[", "e"],
    );
}

#[test]
fn repetition_bounds() {
    let gbnf = "root ::= \"a\"{2} \"b\"{1,3} \"c\"{2,} (\"d\" \"e\")? \"f\"* [0-9]+";
    check(
        gbnf,
        &["aabcc1", "aabbbccccdeff42"],
        &[
            "abcc1",   // a{2}: one a
            "aaabcc1", // a{2}: three
            "aacc1",   // b{1,3}: none
            "aabbbbcc1",
            "aabc1",   // c{2,}: one c
            "aabccd1", // "de" as a whole
            "aabccdede1",
            "aabcc", // [0-9]+: none
        ],
    );
    check("root ::= \"x\"{0} \"y\"{0,2}", &["", "yy"], &["x", "yyy"]);
}

#[test]
fn literal_escapes() {
    check(
        r#"root ::= "\"q\" \\ \t\n\r" "\x41\u00e9\U0001F600""#,
        &["\"q\" \\ \t\n\rAé😀"],
        &["\"q\" \\ \t\n\rAe😀", "q \\ \t\n\rAé😀"],
    );
}

#[test]
fn comments_groups_and_multi_line_rules() {
    let gbnf = "# greetings\n\
                root ::= # the output\n\
                  greeting ( \" \" # a space\n\
                    name )? |\n\
                  \"bye\"\n\
                \n\
                greeting ::= \"hi\" | \"hello\"   # two\n\
                name ::= [A-Z] [a-z]*\n";
    check(
        gbnf,
        &["hi", "hello Ann", "bye"],
        &["hi ", "hello ann", "bye Ann", "# greetings"],
    );
}

#[test]
fn ambiguities_are_resolved_as_a_context_free_grammar() {
    // A greedy lexer would take "aa" then need "ab"; GBNF reads "a" "ab".
    check(
        "root ::= (\"a\" | \"aa\") \"ab\"",
        &["aab", "aaab"],
        &["ab"],
    );
    check("root ::= num num\nnum ::= [0-9]+", &["12", "123"], &["1"]);
}

#[test]
fn token_references() {
    // 256 is "yes", 257 "no" in the toy vocabulary.
    let constrainer = Constrainer::new(&toy()).unwrap();
    let gbnf = "root ::= <[256]> !<[257]>* \".\"";
    let mut c = constraint(&constrainer, gbnf);
    c.advance(256).unwrap();
    c.advance(u32::from(b'x')).unwrap();
    c.advance(256).unwrap();
    let mut logits = vec![0.0f32; 259];
    c.mask(&mut logits).unwrap();
    assert_eq!(logits[257], f32::NEG_INFINITY);
    c.advance(u32::from(b'.')).unwrap();
    let mut c = constraint(&constrainer, gbnf);
    assert!(c.advance(u32::from(b'y')).is_err());
    // `<text>` is a special token of the vocabulary.
    let mut c = constraint(&constrainer, "root ::= \"a\" <|end|>");
    c.advance(u32::from(b'a')).unwrap();
    c.advance(END).unwrap();
    let error = constrainer
        .constraint(
            &ConstraintSpec::Gbnf("root ::= <think>".into()),
            "--grammar",
        )
        .unwrap_err()
        .to_string();
    assert!(error.contains("unknown special token"), "{error}");
}

#[test]
fn a_wrong_conversion_would_be_caught() {
    let constrainer = Constrainer::new(&toy()).unwrap();
    let lark = |text: &str| {
        constrainer
            .constraint(&ConstraintSpec::Lark(text.to_owned()), "lark")
            .unwrap()
    };
    // The conversion of `root ::= "a"{2,3}` with its maximum dropped lets a fourth "a" through;
    // the repetition test above refuses it from the real conversion.
    assert!(accepts(&mut lark("start: \"a\"{2,}"), "aaaa"));
    let right = gbnf_to_lark("root ::= \"a\"{2,3}").unwrap();
    assert!(!accepts(&mut lark(&right), "aaaa"));
    // Terminals as llguidance lexemes (llguidance's Python converter writes them so) are
    // greedy: NUM takes the newline that the rule needs, and "1+2=3\n" is refused.
    let greedy = "start: (expr \"=\" WS term \"\\n\")+\n\
                  expr: term (/[-+*\\/]/ term)*\n\
                  term: IDENT | NUM | \"(\" WS expr \")\" WS\n\
                  IDENT: /[a-z]/ /[a-z0-9_]/* WS\n\
                  NUM: /[0-9]/+ WS\n\
                  WS: /[ \\t\\n]/*\n";
    assert!(!accepts(&mut lark(greedy), "1+2=3\n"));
    let right = gbnf_to_lark(&testdata("arithmetic.gbnf")).unwrap();
    assert!(accepts(&mut lark(&right), "1+2=3\n"));
}

#[test]
fn invalid_gbnf_is_a_clear_error() {
    let constrainer = Constrainer::new(&toy()).unwrap();
    let cases = [
        (
            "root ::= \"abc\n",
            "--grammar: invalid GBNF at line 1, column 10: unterminated string literal",
        ),
        (
            "root ::= item+\nitem ::= itm \"\\n\"",
            "--grammar: invalid GBNF at line 2, column 10: unknown rule `itm`",
        ),
        (
            "item ::= \"a\"",
            "--grammar: invalid GBNF at line 1, column 1: no `root` rule",
        ),
        (
            "root ::= \"a\"{3,2}",
            "--grammar: invalid GBNF at line 1, column 13: repetition `{3,2}`",
        ),
        (
            "root ::= +",
            "--grammar: invalid GBNF at line 1, column 10: `+` has nothing to repeat",
        ),
    ];
    for (gbnf, expected) in cases {
        let error = constrainer
            .constraint(&ConstraintSpec::Gbnf(gbnf.into()), "--grammar")
            .unwrap_err()
            .to_string();
        assert!(error.starts_with(expected), "{gbnf:?}: {error}");
    }
}

/// A chain of 3,000 rules compiles on a thread with a server worker's 2 MiB stack (compiling
/// recurses over the chain; it overflowed such a stack and aborted the process at 700) and
/// the constraint accepts what the chain spells.
#[test]
fn a_long_chain_of_rules_compiles_on_a_small_stack() {
    let n = 3000;
    let mut gbnf = String::from("root ::= r0\n");
    for i in 0..n {
        gbnf.push_str(&format!("r{i} ::= r{} \"b\"\n", i + 1));
    }
    gbnf.push_str(&format!("r{n} ::= \"a\"\n"));
    let text = format!("a{}", "b".repeat(n));
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || check(&gbnf, &[&text], &["ab", "b"]))
        .unwrap()
        .join()
        .expect("the check panicked or overflowed");
}
