//! The explanation as text: one block per step.

use std::fmt::Write;

use crate::Explanation;

/// A token's text made visible: quotes, spaces as `␣`, control characters escaped.
pub fn visible(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            ' ' => out.push('␣'),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The table: per step, the chosen token (rank, raw and selected probability, entropy), how
/// many tokens each stage kept and changed, then the candidates with their raw probability
/// and their probability after each stage that changed something in the run (chain order);
/// `*` marks the chosen token.
pub fn table(explanation: &Explanation) -> String {
    let mut out = String::new();
    let columns = explanation.effective_stages();
    let _ = writeln!(
        out,
        "settings: {}   prompt: {} tokens",
        explanation.settings, explanation.prompt_tokens
    );
    for (n, step) in explanation.steps.iter().enumerate() {
        let _ = writeln!(
            out,
            "\nstep {}: {} (id {}){}  raw p {:.4} (rank {})  after chain p {:.4}  entropy {:.3} nats",
            n + 1,
            visible(&step.text),
            step.token,
            if step.forced { " [fed]" } else { "" },
            step.probability,
            step.rank,
            step.selected_probability,
            step.entropy
        );
        let flow: Vec<String> = step
            .stages
            .iter()
            .filter(|s| columns.contains(&s.name))
            .map(|s| {
                if s.changed > 0 && s.kept < step.vocab {
                    format!("{} kept {} (changed {})", s.name, s.kept, s.changed)
                } else {
                    format!("{} kept {}", s.name, s.kept)
                }
            })
            .collect();
        let _ = writeln!(out, "  {} tokens -> {}", step.vocab, flow.join(" -> "));
        let _ = write!(out, "  {:<22} {:>9}", "candidate", "raw");
        for name in &columns {
            let _ = write!(out, " {:>11}", name);
        }
        out.push('\n');
        for c in &step.candidates {
            let mark = if c.id == step.token { '*' } else { ' ' };
            let label: String = visible(&c.text).chars().take(20).collect();
            let _ = write!(out, "{mark} {label:<22} {:>9.4}", c.raw_probability);
            for name in &columns {
                let i = step.stages.iter().position(|s| s.name == *name);
                let p = i.map_or(0.0, |i| c.after[i]);
                let _ = write!(out, " {:>11.4}", p);
            }
            out.push('\n');
        }
    }
    let _ = writeln!(out, "\ntext: {}", visible(&explanation.text()));
    out
}

/// Two settings' distributions along the same text, step by step: for each candidate, its
/// raw probability and its probability after each setting's whole chain.
pub fn compare_table(a: &Explanation, b: &Explanation) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "A: {}\nB: {}", a.settings, b.settings);
    for (n, (sa, sb)) in a.steps.iter().zip(&b.steps).enumerate() {
        let _ = writeln!(
            out,
            "\nstep {}: {} (chosen by A)  kept A {} / B {}  entropy after A {:.3} / B {:.3} nats",
            n + 1,
            visible(&sa.text),
            sa.stages.last().map_or(0, |s| s.kept),
            sb.stages.last().map_or(0, |s| s.kept),
            sa.stages.last().map_or(0.0, |s| s.entropy),
            sb.stages.last().map_or(0.0, |s| s.entropy),
        );
        let _ = writeln!(
            out,
            "  {:<22} {:>9} {:>9} {:>9}",
            "candidate", "raw", "A", "B"
        );
        let mut ids: Vec<u32> = sa.candidates.iter().map(|c| c.id).collect();
        for c in &sb.candidates {
            if !ids.contains(&c.id) {
                ids.push(c.id);
            }
        }
        for id in ids {
            let ca = sa.candidates.iter().find(|c| c.id == id);
            let cb = sb.candidates.iter().find(|c| c.id == id);
            let Some(any) = ca.or(cb) else { continue };
            let after = |c: Option<&crate::Candidate>| c.and_then(|c| c.after.last().copied());
            let fmt = |p: Option<f64>| p.map_or("-".to_string(), |p| format!("{p:.4}"));
            let mark = if id == sa.token { '*' } else { ' ' };
            let label: String = visible(&any.text).chars().take(20).collect();
            let _ = writeln!(
                out,
                "{mark} {label:<22} {:>9.4} {:>9} {:>9}",
                any.raw_probability,
                fmt(after(ca)),
                fmt(after(cb))
            );
        }
    }
    out
}
