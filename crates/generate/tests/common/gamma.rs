//! The chi-square p-value's special functions, for the statistical tests of the speculative
//! sampling rule: `crates/generate/tests/speculative.rs` (fake models) and, through
//! `#[path]`, `crates/cli/tests/speculative_distribution.rs` (the real model).

/// The regularised upper incomplete gamma function Q(a, x) (Numerical Recipes' series and
/// continued fraction).
pub fn upper_gamma_q(a: f64, x: f64) -> f64 {
    let ln_gamma_a = ln_gamma(a);
    if x < a + 1.0 {
        let (mut sum, mut term, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        1.0 - sum * (-x + a * x.ln() - ln_gamma_a).exp()
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (-x + a * x.ln() - ln_gamma_a).exp() * h
    }
}

/// Lanczos approximation of ln Γ(x), x > 0.
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 6] = [
        76.18009172947146,
        -86.50532032941677,
        24.01409824083091,
        -1.231739572450155,
        0.1208650973866179e-2,
        -0.5395239384953e-5,
    ];
    let tmp = x + 5.5;
    let tmp = tmp - (x + 0.5) * tmp.ln();
    let mut ser = 1.000000000190015;
    for (j, g) in G.iter().enumerate() {
        ser += g / (x + 1.0 + j as f64);
    }
    -tmp + (2.5066282746310005 * ser / x).ln()
}
