//! The output-constraint flags of `kindle generate` (`--json-schema`, `--json-object`,
//! `--regex`, `--choice`, `--grammar`) and the run of a single constrained sequence.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use kindle_constrain::{Constrainer, ConstraintSpec};
use kindle_generate::Speculator;
use kindle_sampling::ConstraintStats;

use crate::plan::RunPlan;
use crate::run::{Mode, Report, Sequence, Sink, single};

/// Flags that restrict the output to a language (at most one of them).
#[derive(Args, Debug, Clone, Default)]
#[group(multiple = false)]
pub struct ConstraintArgs {
    /// Constrain the output to JSON valid against this JSON schema: its text (`{...}`, as
    /// llama.cpp's --json-schema), else the file of this name
    #[arg(long, value_name = "SCHEMA|FILE")]
    pub json_schema: Option<String>,
    /// Constrain the output to JSON valid against the JSON schema in this file (llama.cpp's
    /// --json-schema-file)
    #[arg(long, value_name = "FILE")]
    pub json_schema_file: Option<PathBuf>,
    /// Constrain the output to a JSON object
    #[arg(long)]
    pub json_object: bool,
    /// Constrain the output to a full match of this regex (Rust regex syntax)
    #[arg(long, value_name = "REGEX")]
    pub regex: Option<String>,
    /// Constrain the output to one of these strings (repeat the flag for each choice)
    #[arg(long = "choice", value_name = "TEXT")]
    pub choices: Vec<String>,
    /// Constrain the output to a grammar: the file of this name, else (as llama.cpp's
    /// `--grammar`) the text itself. GBNF (llama.cpp's format, `root ::= ...`) for a file
    /// ending in `.gbnf` or a text whose rules are written `name ::=`; else Lark (llguidance's
    /// dialect, `start: ...`)
    #[arg(long, value_name = "FILE|GRAMMAR")]
    pub grammar: Option<String>,
    /// Constrain the output to the grammar in this file (llama.cpp's `--grammar-file`), as
    /// `--grammar` reads a file
    #[arg(long, value_name = "FILE")]
    pub grammar_file: Option<PathBuf>,
}

impl ConstraintArgs {
    /// The constraint asked for and the flag that asked, or `None`.
    pub fn spec(&self) -> Result<Option<(ConstraintSpec, &'static str)>> {
        Ok(Some(if let Some(value) = &self.json_schema {
            // A schema is a JSON object; no file name starts with `{`.
            let text = if value.trim_start().starts_with('{') {
                value.clone()
            } else {
                read(Path::new(value))?
            };
            (
                ConstraintSpec::json_schema(&text, "--json-schema")?,
                "--json-schema",
            )
        } else if let Some(path) = &self.json_schema_file {
            let text = read(path)?;
            (
                ConstraintSpec::json_schema(&text, "--json-schema-file")?,
                "--json-schema-file",
            )
        } else if self.json_object {
            (ConstraintSpec::JsonObject, "--json-object")
        } else if let Some(regex) = &self.regex {
            (ConstraintSpec::Regex(regex.clone()), "--regex")
        } else if !self.choices.is_empty() {
            (ConstraintSpec::Choice(self.choices.clone()), "--choice")
        } else if let Some(path) = &self.grammar_file {
            (grammar_spec(Some(path), read(path)?), "--grammar-file")
        } else if let Some(value) = &self.grammar {
            let path = Path::new(value);
            if path.is_file() {
                (grammar_spec(Some(path), read(path)?), "--grammar")
            } else if value.contains(':') {
                // Every rule of either dialect has a colon (`name ::=`, `name:`).
                (grammar_spec(None, value.clone()), "--grammar")
            } else {
                bail!(
                    "--grammar {value:?}: no such file, and not a grammar's text either (GBNF \
                     `root ::= ...` or Lark `start: ...`)"
                );
            }
        } else {
            return Ok(None);
        }))
    }
}

/// The grammar `text` (read from `path`, if from a file) in its dialect: GBNF for a file
/// whose extension is `gbnf` (any case), Lark for `lark`; otherwise by the text
/// ([`reads_as_gbnf`]).
fn grammar_spec(path: Option<&Path>, text: String) -> ConstraintSpec {
    let extension = path.and_then(|p| p.extension());
    let gbnf = match extension {
        Some(ext) if ext.eq_ignore_ascii_case("gbnf") => true,
        Some(ext) if ext.eq_ignore_ascii_case("lark") => false,
        _ => reads_as_gbnf(&text),
    };
    if gbnf {
        ConstraintSpec::Gbnf(text)
    } else {
        ConstraintSpec::Lark(text)
    }
}

/// Whether a grammar's text is GBNF: a line opens with a rule name and `::=` (GBNF's rule
/// definition; a Lark rule is `name:`, so a Lark line never opens so).
fn reads_as_gbnf(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        let name = line
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .unwrap_or(line.len());
        name > 0 && line[name..].trim_start().starts_with("::=")
    })
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Run the plan's one prompt as a single sequence constrained by `spec` (which `flag` gave),
/// drafting with `speculator` when there is one (each draft is checked against the mask);
/// what [`crate::run::run`] does for [`Mode::Single`], with the constraint.
pub fn run_constrained<'a>(
    plan: &'a RunPlan,
    mode: &'a Mode,
    spec: &ConstraintSpec,
    flag: &str,
    sink: &mut dyn Sink,
    speculator: Option<&mut Speculator>,
) -> Result<Report<'a>> {
    if mode != &Mode::Single || plan.prompts.len() != 1 {
        bail!("{flag} constrains a single sequence: not beams, samples (--num-samples) or a batch");
    }
    let constraint = Constrainer::new(&plan.loaded.tokenizer)?.constraint(spec, flag)?;
    sink.begin(mode)?;
    let started = Instant::now();
    let prompt = &plan.prompts[0].ids;
    let mut session = plan.session()?;
    let mut sampler = plan.sampler(0, prompt.len())?;
    let summary = single(
        plan,
        &mut session,
        &mut sampler,
        prompt,
        sink,
        speculator,
        Some(Box::new(constraint)),
    )?;
    let report = Report {
        mode,
        prompts: &plan.prompts,
        sequences: vec![Sequence {
            prompt: 0,
            summary,
            seed: Some(sampler.seed()),
            beam: None,
        }],
        timings: None,
        wall: started.elapsed(),
    };
    sink.finish(&report)?;
    Ok(report)
}

/// `constraint: 40 masks (p50 0.05 ms, p99 0.3 ms, 2.1 ms in all), 12 tokens forced`, for `-v`.
pub fn constraint_line(stats: &ConstraintStats) -> String {
    format!(
        "constraint: {} masks (p50 {:.3} ms, p99 {:.3} ms, {:.1} ms in all), {} tokens forced (not sampled)",
        stats.masks,
        stats.mask_p50.as_secs_f64() * 1e3,
        stats.mask_p99.as_secs_f64() * 1e3,
        stats.mask_total.as_secs_f64() * 1e3,
        stats.forced,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gbnf_file_is_gbnf_and_any_other_is_lark() {
        let dir = tempfile::tempdir().unwrap();
        let spec_of = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            let args = ConstraintArgs {
                grammar: Some(path.to_str().unwrap().to_string()),
                ..ConstraintArgs::default()
            };
            args.spec().unwrap().unwrap()
        };
        let gbnf = "root ::= \"a\"+\n";
        assert_eq!(
            spec_of("list.gbnf", gbnf),
            (ConstraintSpec::Gbnf(gbnf.into()), "--grammar")
        );
        assert_eq!(
            spec_of("LIST.GBNF", gbnf),
            (ConstraintSpec::Gbnf(gbnf.into()), "--grammar")
        );
        let lark = "start: \"a\"+\n";
        assert_eq!(
            spec_of("expr.lark", lark),
            (ConstraintSpec::Lark(lark.into()), "--grammar")
        );
        assert_eq!(
            spec_of("grammar", lark),
            (ConstraintSpec::Lark(lark.into()), "--grammar")
        );
        // Neither extension: the text says which.
        assert_eq!(
            spec_of("list.txt", gbnf),
            (ConstraintSpec::Gbnf(gbnf.into()), "--grammar")
        );
        // The extension wins over the text.
        assert_eq!(
            spec_of("odd.lark", gbnf),
            (ConstraintSpec::Lark(gbnf.into()), "--grammar")
        );
    }

    #[test]
    fn a_json_schema_is_its_text_or_a_file() {
        let schema = r#"{"type": "object", "properties": {"n": {"type": "integer"}}}"#;
        let spec = |args: ConstraintArgs| args.spec();
        let inline = spec(ConstraintArgs {
            json_schema: Some(format!("  {schema}")),
            ..ConstraintArgs::default()
        })
        .unwrap()
        .unwrap();
        let want = ConstraintSpec::json_schema(schema, "--json-schema").unwrap();
        assert_eq!(inline, (want.clone(), "--json-schema"));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.json");
        std::fs::write(&path, schema).unwrap();
        let from_file = spec(ConstraintArgs {
            json_schema: Some(path.to_str().unwrap().to_string()),
            ..ConstraintArgs::default()
        })
        .unwrap()
        .unwrap();
        assert_eq!(from_file, (want.clone(), "--json-schema"));
        let from_file = spec(ConstraintArgs {
            json_schema_file: Some(path),
            ..ConstraintArgs::default()
        })
        .unwrap()
        .unwrap();
        assert_eq!(from_file, (want, "--json-schema-file"));
        // A schema's text that is not JSON is named as such, not read as a file name.
        let e = spec(ConstraintArgs {
            json_schema: Some("{\"type\": ".into()),
            ..ConstraintArgs::default()
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("--json-schema: not valid JSON"), "{e}");
        let e = spec(ConstraintArgs {
            json_schema: Some("absent.json".into()),
            ..ConstraintArgs::default()
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains("reading absent.json"), "{e:#}");
    }

    #[test]
    fn a_grammar_that_is_no_file_is_its_text_and_grammar_file_reads_a_file() {
        let spec = |grammar: &str| {
            ConstraintArgs {
                grammar: Some(grammar.to_string()),
                ..ConstraintArgs::default()
            }
            .spec()
        };
        let gbnf = "root ::= \"yes\" | \"no\"";
        assert_eq!(
            spec(gbnf).unwrap().unwrap(),
            (ConstraintSpec::Gbnf(gbnf.into()), "--grammar")
        );
        let gbnf_rules = "root ::= item+\n  item ::= [a-z]+ \"\\n\"\n";
        assert_eq!(
            spec(gbnf_rules).unwrap().unwrap(),
            (ConstraintSpec::Gbnf(gbnf_rules.into()), "--grammar")
        );
        let lark = "start: \"a::=b\" | NUM\nNUM: /[0-9]+/";
        assert_eq!(
            spec(lark).unwrap().unwrap(),
            (ConstraintSpec::Lark(lark.into()), "--grammar")
        );
        // Neither a file nor a grammar: the error names both readings.
        let e = spec("missing.gbnf").unwrap_err().to_string();
        assert!(
            e.contains("--grammar \"missing.gbnf\": no such file, and not a grammar's text"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("yes.gbnf");
        std::fs::write(&path, gbnf).unwrap();
        let args = ConstraintArgs {
            grammar_file: Some(path.clone()),
            ..ConstraintArgs::default()
        };
        assert_eq!(
            args.spec().unwrap().unwrap(),
            (ConstraintSpec::Gbnf(gbnf.into()), "--grammar-file")
        );
        let args = ConstraintArgs {
            grammar_file: Some(dir.path().join("absent.gbnf")),
            ..ConstraintArgs::default()
        };
        let e = format!("{:#}", args.spec().unwrap_err());
        assert!(e.contains("reading ") && e.contains("absent.gbnf"), "{e}");
    }
}
