//! Mask time per token (p50, p99) on SmolLM2's and Gemma-3's vocabularies for the ten JSON
//! schemas of `crates/cli/tests/testdata/schemas`, each walked with random allowed tokens:
//! `cargo bench -p kindle-constrain --bench mask`. Compare with a decode step of the same
//! model (`kindle bench`).

#[path = "../tests/common/walk.rs"]
mod walk;

fn main() {
    for model in [&kindle_fetch::SMOLLM2_135M, &kindle_fetch::GEMMA3_270M] {
        if walk::measure(model).is_none() {
            eprintln!("{}: skipped (KINDLE_SKIP_REAL_MODEL is set)", model.name);
        }
    }
}
