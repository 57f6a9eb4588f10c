//! kindle-explain on a fake model: the same tokens as the generation loop with the same seed,
//! the trace's numbers in the table and JSON, valid SVG and PNG pictures, a self-contained page.

use std::convert::Infallible;

use kindle_explain::{ExplainOptions, Explanation, explain, page, plot, table};
use kindle_generate::{GenerationConfig, LanguageModel, ModelCache, Session, TokenDecoder};
use kindle_sampling::{SamplerConfig, parse_order};

const VOCAB: usize = 40;
const EOS: u32 = 39;

/// A cache holding its tokens: the logits hash the whole history.
struct Tokens {
    tokens: Vec<u32>,
    capacity: usize,
}

impl ModelCache for Tokens {
    fn len(&self) -> usize {
        self.tokens.len()
    }
    fn capacity(&self) -> usize {
        self.capacity
    }
    fn truncate(&mut self, len: usize) {
        self.tokens.truncate(len);
    }
    fn fork(&self) -> Self {
        Tokens {
            tokens: self.tokens.clone(),
            capacity: self.capacity,
        }
    }
}

struct Hash;

impl Hash {
    fn row(history: &[u32]) -> Vec<f32> {
        let mut h: u64 = 0xcbf29ce484222325;
        for &t in history {
            h = (h ^ u64::from(t)).wrapping_mul(0x100000001b3);
        }
        (0..VOCAB as u64)
            .map(|j| ((j.wrapping_mul(7) ^ h) % 97) as f32 * 0.05 - if j == 39 { 2.0 } else { 0.0 })
            .collect()
    }
}

impl LanguageModel for Hash {
    type Cache = Tokens;
    type Error = Infallible;
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn context_length(&self) -> usize {
        128
    }
    fn new_cache(&self, capacity: usize) -> Result<Tokens, Infallible> {
        Ok(Tokens {
            tokens: Vec::new(),
            capacity,
        })
    }
    fn forward_last(&self, tokens: &[u32], cache: &mut Tokens) -> Result<Vec<f32>, Infallible> {
        cache.tokens.extend_from_slice(tokens);
        Ok(Self::row(&cache.tokens))
    }
    fn forward_all(&self, _: &[u32], _: &mut Tokens) -> Result<Vec<f32>, Infallible> {
        unimplemented!("not used")
    }
}

impl TokenDecoder for Hash {
    type Error = Infallible;
    fn decode(&self, ids: &[u32]) -> Result<String, Infallible> {
        Ok(ids
            .iter()
            .map(|&i| match i {
                0 => ' ',
                1..=26 => char::from(b'a' + i as u8 - 1),
                EOS => '\u{0}',
                _ => char::from(b'0' + (i - 27) as u8 % 10),
            })
            .filter(|c| *c != '\u{0}')
            .collect())
    }
}

fn config(seed: u64) -> SamplerConfig {
    SamplerConfig {
        temperature: 0.8,
        top_k: 12,
        top_p: 0.9,
        min_p: 0.02,
        repetition_penalty: 1.2,
        seed: Some(seed),
        order: parse_order("penalties;top_k;top_p;min_p;temperature").unwrap(),
        ..SamplerConfig::neutral()
    }
}

const PROMPT: [u32; 5] = [8, 5, 12, 12, 15];

fn explained(seed: u64) -> Explanation {
    let mut sampler = config(seed).build().unwrap();
    sampler.set_prompt_len(PROMPT.len());
    let options = ExplainOptions {
        max_tokens: 12,
        top: 6,
        eog_ids: vec![EOS],
    };
    explain(
        &Hash,
        &Hash,
        &PROMPT,
        &mut sampler,
        "--temp 0.8 ...",
        &options,
        None,
    )
    .unwrap()
}

#[test]
fn a_seeded_explanation_chooses_the_generation_loops_tokens() {
    for seed in 0..8 {
        let e = explained(seed);
        let mut sampler = config(seed).build().unwrap();
        sampler.set_prompt_len(PROMPT.len());
        let mut session = Session::new(&Hash, 64).unwrap();
        let generation = GenerationConfig::default()
            .with_max_new_tokens(12)
            .with_eog_token_ids([EOS]);
        let summary = kindle_generate::generate_to_end(
            &Hash,
            &mut session,
            &PROMPT,
            &mut sampler,
            &Hash,
            &generation,
        )
        .unwrap();
        assert_eq!(e.tokens(), summary.tokens, "seed {seed}");
    }
}

#[test]
fn steps_hold_the_traces_numbers() {
    let e = explained(3);
    for step in &e.steps {
        let names: Vec<_> = step.stages.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            ["penalties", "top_k", "top_p", "min_p", "temperature"]
        );
        assert_eq!(step.stages[1].kept, 12);
        assert!(step.vocab == VOCAB);
        let chosen = step.candidates.iter().find(|c| c.id == step.token).unwrap();
        assert_eq!(chosen.raw_probability, step.probability);
        assert_eq!(*chosen.after.last().unwrap(), step.selected_probability);
        assert!(
            step.selected_probability > 0.0,
            "the token came from the last stage"
        );
        // Candidates are listed most likely first, and their after-chain mass is at most 1.
        let raw: Vec<f64> = step.candidates.iter().map(|c| c.raw_probability).collect();
        assert!(raw.windows(2).all(|w| w[0] >= w[1]));
        let mass: f64 = step.candidates.iter().map(|c| c.after[4]).sum();
        assert!(mass <= 1.0 + 1e-9);
        assert!(step.rank >= 1 && step.rank <= VOCAB);
        assert!(step.entropy > 0.0 && step.entropy <= (VOCAB as f64).ln() + 1e-9);
    }
    let json = e.to_json();
    assert_eq!(json["chain"][1], "top_k");
    let first = &json["steps"][0];
    assert_eq!(first["token"], e.steps[0].token);
    assert_eq!(first["candidates"][0]["after"].as_array().unwrap().len(), 5);
    let text = table::table(&e);
    assert!(text.contains("step 1:") && text.contains("top_k") && text.contains('*'));
}

#[test]
fn a_comparison_feeds_the_first_settings_tokens() {
    let a = explained(5);
    let mut sampler = SamplerConfig {
        temperature: 1.5,
        seed: Some(1),
        ..SamplerConfig::neutral()
    }
    .build()
    .unwrap();
    let options = ExplainOptions {
        max_tokens: 12,
        top: 6,
        eog_ids: vec![EOS],
    };
    let b = explain(
        &Hash,
        &Hash,
        &PROMPT,
        &mut sampler,
        "--temp 1.5",
        &options,
        Some(&a.tokens()),
    )
    .unwrap();
    assert_eq!(a.tokens(), b.tokens());
    assert!(b.steps.iter().all(|s| s.forced));
    // A higher temperature with no truncation leaves more entropy after the chain.
    let after = |e: &Explanation| e.steps[0].stages.last().unwrap().entropy;
    assert!(after(&b) > after(&a));
    let text = table::compare_table(&a, &b);
    assert!(text.contains("A: --temp 0.8") && text.contains("B: --temp 1.5"));
}

#[test]
fn the_page_is_self_contained() {
    let e = explained(2);
    let html = page::html(&e, &[]).unwrap();
    assert_eq!(html.matches("<table>").count(), e.steps.len());
    assert_eq!(html.matches("class=\"chosen\"").count(), e.steps.len());
    let first = &e.steps[0];
    assert!(html.contains(&format!("(id {})", first.token)), "{html}");
    assert!(html.contains(&format!("{:.4}", first.probability)));
    assert!(html.contains("<svg"), "the page has the picture");
    // The inline SVG names its namespace (http://www.w3.org/2000/svg); nothing else is a URL.
    let without_namespace = html.replace("http://www.w3.org/2000/svg", "");
    for needle in ["<script", "<link", "src=", "http://", "https://"] {
        assert!(
            !without_namespace.contains(needle),
            "the page loads {needle}"
        );
    }
}

#[test]
fn pictures_are_valid_svg_and_png() {
    let e = explained(2);
    let svg = plot::svg(&e, &[]).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the SVG parses");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts = doc.descendants().filter(|n| n.has_tag_name("text")).count();
    assert!(texts > 10, "labels drawn: {texts}");
    let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    assert!(rects >= 4 * 2 * 6, "bars drawn: {rects}");

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let png_path = dir.join("explain-test.png");
    plot::write(&e, &[1, 2], &png_path).unwrap();
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(&png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().expect("the PNG decodes");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!((info.width, info.height), (1100, 600));
    // Not a blank picture: some pixels are the bars' orange.
    assert!(pixels.chunks(3).any(|p| p == [194, 65, 12]));
    let err = plot::write(&e, &[], &dir.join("x.gif")).unwrap_err();
    assert!(err.to_string().contains(".svg or .png"), "{err}");
    let err = plot::svg(&e, &[99]).unwrap_err();
    assert!(err.to_string().contains("99"), "{err}");
}
