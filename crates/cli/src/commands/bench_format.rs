//! What `kindle bench`'s plain and drafting forms share: the output formats and the mean of
//! a test's samples.

use clap::ValueEnum;

/// Output formats of `kindle bench`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BenchOutput {
    /// A Markdown table, as llama-bench prints.
    Md,
    /// A JSON list of rows.
    Json,
    /// Comma-separated values with a header.
    Csv,
}

/// The mean and the sample standard deviation of `values` (0 for one value).
pub(super) fn mean_stddev(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = if values.len() > 1 {
        values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)
    } else {
        0.0
    };
    (mean, var.sqrt())
}
