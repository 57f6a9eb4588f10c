//! Property tests: random sequences starting, publishing and ending over a small pool, against
//! a model of what every block's storage holds.

use std::collections::HashMap;

use kindle_blocks::BlockManager;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// A sequence with these tokens starts (reusing what the index has).
    Start(Vec<u32>),
    /// Sequence `i % live` publishes its full blocks.
    Publish(usize),
    /// Sequence `i % live` ends.
    End(usize),
    /// Sequence `i % live` rolls back to `len` tokens and writes `tokens` after them.
    Rewrite(usize, usize, Vec<u32>),
    /// A lookup that is released at once.
    Probe(Vec<u32>),
}

fn tokens() -> impl Strategy<Value = Vec<u32>> {
    // A three-letter alphabet: prefixes are shared often.
    prop::collection::vec(0u32..3, 1..14)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => tokens().prop_map(Op::Start),
        2 => any::<usize>().prop_map(Op::Publish),
        2 => any::<usize>().prop_map(Op::End),
        1 => (any::<usize>(), 0usize..14, tokens()).prop_map(|(i, l, t)| Op::Rewrite(i, l, t)),
        2 => tokens().prop_map(Op::Probe),
    ]
}

/// A sequence: its block table and the tokens its blocks hold.
struct Seq {
    blocks: Vec<usize>,
    tokens: Vec<u32>,
}

/// What each block's storage holds: the whole prefix up to its end, as written.
type Contents = HashMap<usize, Vec<u32>>;

fn check_match(
    m: &BlockManager,
    contents: &Contents,
    tokens: &[u32],
    matched: &[usize],
) -> Result<(), TestCaseError> {
    let bs = m.block_size();
    for (i, &b) in matched.iter().enumerate() {
        prop_assert_eq!(
            contents.get(&b).map(Vec::as_slice),
            Some(&tokens[..(i + 1) * bs]),
            "block {} matched for a prefix it does not hold",
            b
        );
    }
    Ok(())
}

fn check_counts(m: &BlockManager, seqs: &[Seq]) -> Result<(), TestCaseError> {
    let stats = m.stats();
    prop_assert_eq!(stats.used + stats.cached + stats.free, stats.total);
    let mut holders = vec![0u32; m.n_blocks()];
    for s in seqs {
        for &b in &s.blocks {
            holders[b] += 1;
        }
    }
    for (b, &n) in holders.iter().enumerate() {
        prop_assert_eq!(m.refcount(b), n, "block {}", b);
    }
    prop_assert_eq!(stats.used, holders.iter().filter(|&&n| n > 0).count());
    Ok(())
}

/// Write `tokens[from..]` of a sequence into blocks it holds alone (the storage's job).
fn write(contents: &mut Contents, bs: usize, s: &Seq, from: usize) {
    for (i, &b) in s.blocks.iter().enumerate() {
        let end = ((i + 1) * bs).min(s.tokens.len());
        if end > from && end > i * bs {
            contents.insert(b, s.tokens[..end].to_vec());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn reuse_is_exact_and_counts_balance(
        block_size in 1usize..4,
        n_blocks in 4usize..16,
        ops in prop::collection::vec(op(), 1..60),
    ) {
        let mut m = BlockManager::new(n_blocks, block_size).unwrap();
        let mut seqs: Vec<Seq> = Vec::new();
        let mut contents = Contents::new();
        for op in ops {
            match op {
                Op::Start(tokens) => {
                    // The last token is always computed (its logits start generation).
                    let reusable = (tokens.len() - 1) / block_size;
                    let matched = m.match_prefix(&tokens, reusable);
                    check_match(&m, &contents, &tokens, &matched)?;
                    let need = m.blocks_for(tokens.len()) - matched.len();
                    match m.allocate(need) {
                        Ok(fresh) => {
                            for &b in &fresh {
                                prop_assert!(!m.is_published(b));
                            }
                            let from = matched.len() * block_size;
                            let s = Seq { blocks: [matched, fresh].concat(), tokens };
                            write(&mut contents, block_size, &s, from);
                            seqs.push(s);
                        }
                        Err(_) => m.release_all(&matched),
                    }
                }
                Op::Publish(i) if !seqs.is_empty() => {
                    let s = &seqs[i % seqs.len()];
                    m.publish(&s.blocks, &s.tokens);
                }
                Op::End(i) if !seqs.is_empty() => {
                    let s = seqs.swap_remove(i % seqs.len());
                    m.release_all(&s.blocks);
                }
                Op::Rewrite(i, len, extra) if !seqs.is_empty() => {
                    let at = i % seqs.len();
                    let len = len.min(seqs[at].tokens.len());
                    let mut tokens = seqs[at].tokens[..len].to_vec();
                    tokens.extend(&extra);
                    let needed = m.blocks_for(tokens.len());
                    // Blocks written from `len` on must be held alone: shared ones are copied
                    // (a fresh block), published ones leave the index first.
                    let first = len / block_size;
                    let held = seqs[at].blocks.len();
                    let copies = (first..needed.min(held))
                        .filter(|&j| m.refcount(seqs[at].blocks[j]) > 1)
                        .count();
                    let grow = needed.saturating_sub(held);
                    let Ok(mut fresh) = m.allocate(copies + grow) else { continue };
                    let s = &mut seqs[at];
                    for j in first..needed.min(held) {
                        let b = s.blocks[j];
                        if m.refcount(b) > 1 {
                            m.release(b);
                            s.blocks[j] = fresh.pop().unwrap();
                        } else {
                            m.unpublish(b);
                        }
                    }
                    s.blocks.extend(fresh);
                    let dropped: Vec<usize> = s.blocks.drain(needed..).collect();
                    m.release_all(&dropped);
                    s.tokens = tokens;
                    write(&mut contents, block_size, s, len);
                }
                Op::Probe(tokens) => {
                    let matched = m.match_prefix(&tokens, usize::MAX);
                    check_match(&m, &contents, &tokens, &matched)?;
                    m.release_all(&matched);
                }
                _ => {}
            }
            check_counts(&m, &seqs)?;
        }
        for s in seqs.drain(..) {
            m.release_all(&s.blocks);
        }
        prop_assert_eq!(m.stats().used, 0);
        prop_assert_eq!(m.available(), n_blocks);
    }

    #[test]
    fn a_published_prompt_is_found_while_its_blocks_stay(
        block_size in 1usize..5,
        prompt in prop::collection::vec(0u32..50, 1..40),
    ) {
        let mut m = BlockManager::new(64, block_size).unwrap();
        let blocks = m.allocate(m.blocks_for(prompt.len())).unwrap();
        let full = prompt.len() / block_size;
        prop_assert_eq!(m.publish(&blocks, &prompt), full);
        prop_assert_eq!(m.publish(&blocks, &prompt), 0, "published twice");
        m.release_all(&blocks);
        prop_assert_eq!(m.stats().cached, full);
        let found = m.match_prefix(&prompt, usize::MAX);
        prop_assert_eq!(&found[..], &blocks[..full]);
    }
}
