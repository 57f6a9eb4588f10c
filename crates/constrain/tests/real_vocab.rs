//! The ten JSON schemas of `crates/cli/tests/testdata/schemas` on the real vocabularies
//! (SmolLM2's 49,152 tokens, Gemma-3's 262,144): each is walked with random allowed tokens (a
//! fixed seed) and every allowed token must be accepted. The mask times this prints are
//! measured properly by `cargo bench -p kindle-constrain --bench mask`.

#[path = "common/walk.rs"]
mod walk;

#[test]
fn random_walks_on_real_vocabularies_accept_every_allowed_token() {
    for model in [&kindle_fetch::SMOLLM2_135M, &kindle_fetch::GEMMA3_270M] {
        let Some(p50) = walk::measure(model) else {
            return; // KINDLE_SKIP_REAL_MODEL=1
        };
        assert!(
            p50 > std::time::Duration::ZERO,
            "{}: no mask timed",
            model.name
        );
    }
}
