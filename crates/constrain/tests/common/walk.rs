//! Walks a constraint with random allowed tokens on a real vocabulary, timing every mask
//! (shared by `tests/real_vocab.rs` and `benches/mask.rs`).

use std::path::PathBuf;
use std::time::Duration;

use kindle_constrain::{Constrainer, ConstraintSpec};
use kindle_gguf::GgufFile;
use kindle_sampling::LogitsConstraint;
use kindle_tokenizer::Tokenizer;

pub fn schemas() -> Vec<(String, ConstraintSpec)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/testdata/schemas");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert_eq!(paths.len(), 10);
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            let name = p.file_stem().unwrap().to_string_lossy().into_owned();
            (name, ConstraintSpec::json_schema(&text, "schema").unwrap())
        })
        .collect()
}

pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

pub fn measure(model: &kindle_fetch::FetchableModel) -> Option<Duration> {
    let path = kindle_fetch::fetchable_model_for_tests(model)?;
    let tokenizer = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    let started = std::time::Instant::now();
    let constrainer = Constrainer::new(&tokenizer).unwrap();
    println!(
        "{}: vocabulary {} tokens, trie built in {:.0} ms",
        model.name,
        tokenizer.vocab_size(),
        started.elapsed().as_secs_f64() * 1e3
    );
    let mut all = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for (name, spec) in schemas() {
        let mut c = constrainer.constraint(&spec, "schema").unwrap();
        let mut times = Vec::new();
        let mut logits = vec![0.0f32; tokenizer.vocab_size()];
        for _ in 0..200 {
            if c.is_complete() {
                break;
            }
            logits.fill(0.0);
            let t0 = std::time::Instant::now();
            let forced = c.mask(&mut logits).unwrap();
            times.push(t0.elapsed());
            let token = forced.unwrap_or_else(|| {
                let allowed: Vec<u32> = (0..logits.len() as u32)
                    .filter(|&i| logits[i as usize] > f32::NEG_INFINITY)
                    .collect();
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                allowed[(state % allowed.len() as u64) as usize]
            });
            if tokenizer.is_eog(token) {
                break;
            }
            c.advance(token).unwrap();
        }
        times.sort();
        println!(
            "{}  {name:22} {:3} masks  p50 {:7.3} ms  p99 {:7.3} ms",
            model.name,
            times.len(),
            percentile(&times, 0.5).as_secs_f64() * 1e3,
            percentile(&times, 0.99).as_secs_f64() * 1e3,
        );
        all.extend(times);
    }
    all.sort();
    let p50 = percentile(&all, 0.5);
    println!(
        "{}  all schemas: {} masks  p50 {:.3} ms  p99 {:.3} ms",
        model.name,
        all.len(),
        p50.as_secs_f64() * 1e3,
        percentile(&all, 0.99).as_secs_f64() * 1e3
    );
    Some(p50)
}
