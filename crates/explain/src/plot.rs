//! The pictures: for the chosen steps, the distribution before and after the chain as bars;
//! over the run, the entropy and the chosen token's probability per step. SVG or PNG through
//! `plotters`, with the bundled DejaVu Sans (no system fonts).

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::{FontStyle, register_font, text_anchor};

use crate::table::visible;
use crate::{ExplainError, Explanation};

const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
const WIDTH: u32 = 1100;
const PANEL: u32 = 300;
/// Bars per step panel.
const BARS: usize = 8;
const RAW: RGBColor = RGBColor(160, 160, 160);
const AFTER: RGBColor = RGBColor(194, 65, 12);

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The bundled font is valid (tested); a failure would only lose the labels.
        let _ = register_font("sans-serif", FontStyle::Normal, FONT);
    });
}

/// Which steps get a bar panel: `chosen` (1-based), or the first four. A step past the run
/// is an error naming it.
fn panels(explanation: &Explanation, chosen: &[usize]) -> Result<Vec<usize>, ExplainError> {
    let n = explanation.steps.len();
    if chosen.is_empty() {
        return Ok((0..n.min(4)).collect());
    }
    chosen
        .iter()
        .map(|&s| {
            if s >= 1 && s <= n {
                Ok(s - 1)
            } else {
                Err(ExplainError::Plot {
                    path: "--plot-steps".into(),
                    message: format!("step {s} is not a step of this run (1 to {n})"),
                })
            }
        })
        .collect()
}

fn height(panels: usize) -> u32 {
    PANEL * (panels.div_ceil(2) as u32) + PANEL
}

/// The picture as an SVG document.
pub fn svg(explanation: &Explanation, steps: &[usize]) -> Result<String, ExplainError> {
    register();
    let chosen = panels(explanation, steps)?;
    let mut out = String::new();
    {
        let root =
            SVGBackend::with_string(&mut out, (WIDTH, height(chosen.len()))).into_drawing_area();
        draw(&root, explanation, &chosen).map_err(|e| plot_error("the SVG", e))?;
        root.present().map_err(|e| plot_error("the SVG", e))?;
    }
    Ok(out)
}

/// Write the picture to `path`: SVG for `.svg`, PNG for `.png`.
pub fn write(explanation: &Explanation, steps: &[usize], path: &Path) -> Result<(), ExplainError> {
    register();
    let name = path.display().to_string();
    let chosen = panels(explanation, steps)?;
    let size = (WIDTH, height(chosen.len()));
    match path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
    {
        Some(ext) if ext == "svg" => {
            let text = svg(explanation, steps)?;
            std::fs::write(path, text).map_err(|e| ExplainError::Plot {
                path: name,
                message: e.to_string(),
            })
        }
        Some(ext) if ext == "png" => {
            let root = BitMapBackend::new(path, size).into_drawing_area();
            draw(&root, explanation, &chosen).map_err(|e| plot_error(&name, e))?;
            root.present().map_err(|e| plot_error(&name, e))
        }
        _ => Err(ExplainError::Plot {
            path: name,
            message: "the picture's name must end in .svg or .png".into(),
        }),
    }
}

fn plot_error(what: &str, e: impl std::fmt::Display) -> ExplainError {
    ExplainError::Plot {
        path: what.to_string(),
        message: e.to_string(),
    }
}

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    explanation: &Explanation,
    chosen: &[usize],
) -> DrawResult<DB> {
    root.fill(&WHITE)?;
    let rows = chosen.len().div_ceil(2) as u32;
    let (top, bottom) = root.split_vertically(PANEL * rows);
    if !chosen.is_empty() {
        let cells = top.split_evenly((rows as usize, 2));
        for (cell, &step) in cells.iter().zip(chosen) {
            bars(cell, explanation, step)?;
        }
    }
    let (left, right) = bottom.split_horizontally(WIDTH / 2);
    let entropy: Vec<(f64, f64)> = explanation
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| ((i + 1) as f64, s.entropy))
        .collect();
    let chosen_p: Vec<(f64, f64)> = explanation
        .steps
        .iter()
        .enumerate()
        .map(|(i, s)| ((i + 1) as f64, s.probability))
        .collect();
    let top_entropy = entropy.iter().map(|p| p.1).fold(0.5, f64::max) * 1.1;
    series(
        &left,
        "entropy of the raw distribution (nats)",
        &entropy,
        top_entropy,
        &BLUE,
    )?;
    series(
        &right,
        "probability of the chosen token (raw)",
        &chosen_p,
        1.05,
        &AFTER,
    )?;
    Ok(())
}

/// One step's top candidates: raw probability (grey) and after the chain (orange).
fn bars<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    explanation: &Explanation,
    step: usize,
) -> DrawResult<DB> {
    let s = &explanation.steps[step];
    let cands: Vec<_> = s.candidates.iter().take(BARS).collect();
    let n = cands.len().max(1);
    let caption = format!(
        "step {}: {}  raw p {:.3} (grey), after the chain {:.3} (orange)",
        step + 1,
        visible(&s.text),
        s.probability,
        s.selected_probability
    );
    let top = cands
        .iter()
        .map(|c| {
            c.raw_probability
                .max(c.after.last().copied().unwrap_or(0.0))
        })
        .fold(0.1, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(34)
        .y_label_area_size(44)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_labels(5)
        .y_label_formatter(&|y| format!("{y:.2}"))
        .label_style(("sans-serif", 12))
        .draw()?;
    for (i, c) in cands.iter().enumerate() {
        let x = i as f64;
        let after = c.after.last().copied().unwrap_or(0.0);
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x + 0.08, 0.0), (x + 0.48, c.raw_probability)],
            RAW.filled(),
        )))?;
        chart.draw_series(std::iter::once(Rectangle::new(
            [(x + 0.52, 0.0), (x + 0.92, after)],
            AFTER.filled(),
        )))?;
    }
    // Candidate labels under the bars (the chosen one marked).
    let base = chart.backend_coord(&(0.0, 0.0));
    for (i, c) in cands.iter().enumerate() {
        let (x, _) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
        let mut label: String = visible(&c.text).chars().take(12).collect();
        if c.id == s.token {
            label = format!("*{label}");
        }
        area.draw(&Text::new(
            label,
            (
                x - area.get_base_pixel().0,
                base.1 - area.get_base_pixel().1 + 6,
            ),
            ("sans-serif", 12)
                .into_font()
                .color(&BLACK)
                .pos(text_anchor::Pos::new(
                    text_anchor::HPos::Center,
                    text_anchor::VPos::Top,
                )),
        ))?;
    }
    Ok(())
}

/// A line over the steps.
fn series<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    caption: &str,
    points: &[(f64, f64)],
    top: f64,
    color: &RGBColor,
) -> DrawResult<DB> {
    let last = points.len().max(2) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(44)
        .build_cartesian_2d(1f64..last, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc("step")
        .x_labels(points.len().clamp(2, 16))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.2}"))
        .label_style(("sans-serif", 12))
        .draw()?;
    chart.draw_series(LineSeries::new(
        points.iter().copied(),
        color.stroke_width(2),
    ))?;
    chart.draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    Ok(())
}
