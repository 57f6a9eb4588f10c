//! One self-contained HTML page: the picture (inline SVG) and a table per step, the
//! candidates' raw probability drawn as bars, no network resources.

use minijinja::{Environment, context};
use serde_json::json;

use crate::table::visible;
use crate::{ExplainError, Explanation, plot};

const TEMPLATE: &str = include_str!("page.html");

/// The page for `explanation`, with bar panels for `steps` (1-based; empty: the first four).
pub fn html(explanation: &Explanation, steps: &[usize]) -> Result<String, ExplainError> {
    let picture = plot::svg(explanation, steps)?;
    // The SVG's own XML prologue is not wanted inside HTML.
    let picture = match picture.find("<svg") {
        Some(at) => picture[at..].to_string(),
        None => picture,
    };
    let columns = explanation.effective_stages();
    let steps: Vec<_> = explanation
        .steps
        .iter()
        .map(|s| {
            let index: Vec<usize> = columns
                .iter()
                .filter_map(|name| s.stages.iter().position(|x| x.name == *name))
                .collect();
            json!({
                "token": s.token,
                "label": visible(&s.text),
                "probability_text": format!("{:.4}", s.probability),
                "rank": s.rank,
                "selected_probability_text": format!("{:.4}", s.selected_probability),
                "entropy_text": format!("{:.3}", s.entropy),
                "vocab": s.vocab,
                "stages": s.stages.iter().map(|x| json!({
                    "name": x.name, "kept": x.kept, "changed": x.changed,
                })).collect::<Vec<_>>(),
                "candidates": s.candidates.iter().map(|c| json!({
                    "id": c.id,
                    "label": visible(&c.text),
                    "raw_text": format!("{:.4}", c.raw_probability),
                    "bar": (c.raw_probability * 80.0).round() as u32,
                    "after": index.iter().map(|&i| format!("{:.4}", c.after[i])).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut env = Environment::new();
    env.add_template("page", TEMPLATE)?;
    let page = env.get_template("page")?.render(context! {
        settings => explanation.settings.as_str(),
        prompt_tokens => explanation.prompt_tokens,
        text => visible(&explanation.text()),
        picture => minijinja::Value::from_safe_string(picture),
        columns => columns,
        steps => to_template(&serde_json::Value::Array(steps)),
    })?;
    Ok(page)
}

/// A JSON value as a template value (minijinja is built without its serde feature here).
fn to_template(value: &serde_json::Value) -> minijinja::Value {
    use serde_json::Value as J;
    match value {
        J::Null => minijinja::Value::from(()),
        J::Bool(b) => minijinja::Value::from(*b),
        J::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => minijinja::Value::from(u),
            (None, Some(i)) => minijinja::Value::from(i),
            _ => minijinja::Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => minijinja::Value::from(s.as_str()),
        J::Array(items) => items.iter().map(to_template).collect::<Vec<_>>().into(),
        J::Object(map) => minijinja::Value::from_object(
            map.iter()
                .map(|(k, v)| (k.clone(), to_template(v)))
                .collect::<std::collections::BTreeMap<String, minijinja::Value>>(),
        ),
    }
}
