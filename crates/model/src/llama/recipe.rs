//! The decoder, written once: [`forward`] and [`layer_forward`] are the order of operations of
//! every architecture an [`ArchSpec`] describes, generic over the [`LayerOps`] that execute
//! them. Two executors implement it: Burn tensor ops on the model's device
//! ([`BurnOps`](super::burn_ops::BurnOps)) and plain loops over reused host buffers with the
//! quantized kernels ([`HostOps`](super::host_ops::HostOps)). Both are monomorphised: the
//! recipe costs no dynamic dispatch, and an executor's buffers are reused from layer to layer.

use std::ops::Range;

use kindle_kv_cache::KvStore;

use super::{
    ArchSpec, AttentionShape, Block, FfnActivation, LlamaConfig, Norm, Positions, RopeTable,
};
use crate::error::ModelError;
use crate::linear::QLinear;

/// Which positions' logits a forward pass returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsFor {
    /// Only the last position (generation).
    Last,
    /// Every position (scoring).
    All,
}

/// One sequence of a batched forward pass: its new tokens and its cache.
pub struct BatchSequence<'a> {
    /// Tokens to run after those already in `cache`.
    pub tokens: &'a [u32],
    /// The sequence's keys and values (any [`KvStore`]); the tokens are appended to it.
    pub cache: &'a mut dyn KvStore,
}

/// What the recipe reads of a model: its hyperparameters, architecture and weights.
pub(super) struct Model<'m> {
    pub(super) config: &'m LlamaConfig,
    pub(super) arch: &'m ArchSpec,
    pub(super) embedding: &'m QLinear,
    pub(super) layers: &'m [Block],
    pub(super) norm: &'m Norm,
    pub(super) output: Option<&'m QLinear>,
    /// The learned position embeddings (`[context, d_model]`), for [`Positions::Learned`].
    pub(super) positions: Option<&'m QLinear>,
}

/// What one layer's attention computes: its heads, the factor its scores are scaled by,
/// and, for a local layer, its window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Attention {
    /// Head counts and widths.
    pub(super) shape: AttentionShape,
    /// `q . k` is multiplied by this before the softmax.
    pub(super) scale: f32,
    /// A query at position `p` sees positions `p + 1 - window ..= p` (a local layer), or
    /// `0 ..= p` (`None`).
    pub(super) window: Option<usize>,
}

impl Attention {
    /// The first position a query at `pos` sees.
    pub(super) fn first_seen(&self, pos: usize) -> usize {
        self.window.map_or(0, |w| (pos + 1).saturating_sub(w))
    }
}

/// The operations a decoder is made of, on one executor's activations.
///
/// Activations are matrices `[rows, width]`: the pass's new tokens, every sequence's one
/// after another. Ops write into an output the caller owns (`out`), so that an executor can
/// keep its buffers for the whole pass; `x` and `out` are never the same buffer.
pub(super) trait LayerOps {
    /// A `[rows, width]` activation matrix; `Default` is an empty buffer.
    type Act: Default;
    /// The rotation tables of a pass, as the executor applies them.
    type Rope;

    /// The embedding rows of `ids` (checked to be below the vocabulary size).
    fn embed(&mut self, table: &QLinear, ids: &[u32]) -> Self::Act;
    /// `x *= factor`.
    fn scale(&mut self, x: &mut Self::Act, factor: f32);
    /// `table` made ready for [`rope`](Self::rope).
    fn rope_table(&mut self, table: RopeTable) -> Self::Rope;
    /// `out = norm(x)` (RMSNorm or LayerNorm, [`Norm::centered`]), per `gamma`-wide group of
    /// each row.
    fn norm(&mut self, x: &Self::Act, norm: &Norm, out: &mut Self::Act);
    /// `out = x W^T (+ bias)`.
    fn linear(&mut self, layer: &QLinear, x: &Self::Act, out: &mut Self::Act);
    /// [`linear`](Self::linear) where only the output features in `rows` are wanted (a
    /// head's part of the vocabulary): the others may be left unspecified. The default
    /// computes them all.
    fn linear_rows(
        &mut self,
        layer: &QLinear,
        x: &Self::Act,
        rows: &[Range<usize>],
        out: &mut Self::Act,
    ) {
        let _ = rows;
        self.linear(layer, x, out);
    }
    /// [`linear`](Self::linear) of one input for each layer and output (a block's query, key
    /// and value projections; its gate and up ones), which an executor may run as one job.
    fn linear_many(&mut self, layers: &[&QLinear], x: &Self::Act, outs: &mut [&mut Self::Act]) {
        for (layer, out) in layers.iter().zip(outs.iter_mut()) {
            self.linear(layer, x, out);
        }
    }
    /// Rotate every head of each row of `x` by the row's angles.
    fn rope(&mut self, x: &mut Self::Act, rope: &Self::Rope);
    /// Write each sequence's new keys and values (`k`, `v`: `[rows, kv_width]`) into its
    /// cache for `layer`, then causal grouped-query attention of its queries (`q`:
    /// `[rows, q_width]`) over what its cache holds (the last `window` positions of each
    /// query for a local layer): `out` is `[rows, q_width]`.
    fn attend_with_cache(
        &mut self,
        pass: &mut Pass<'_, '_>,
        layer: usize,
        attention: Attention,
        qkv: [&Self::Act; 3],
        out: &mut Self::Act,
    ) -> Result<(), ModelError>;
    /// `gate = act(gate) * up`.
    fn gated(&mut self, activation: FfnActivation, gate: &mut Self::Act, up: &Self::Act);
    /// `x = act(x)`.
    fn activate(&mut self, activation: FfnActivation, x: &mut Self::Act);
    /// `x += y`.
    fn add(&mut self, x: &mut Self::Act, y: &Self::Act);
    /// Rows `rows` of `x` (`width` wide), in that order.
    fn select_rows(&mut self, x: Self::Act, rows: &[usize], width: usize) -> Self::Act;
}

/// One forward pass over a batch: each sequence's new tokens and cache, every row's position.
pub(super) struct Pass<'p, 'a> {
    /// The sequences; their caches have been [prepared](kindle_kv_cache::KvStore::prepare).
    pub(super) seqs: &'p mut [BatchSequence<'a>],
    /// Each sequence's `(first row, rows)`.
    pub(super) spans: &'p [(usize, usize)],
    /// Each row's position.
    pub(super) positions: &'p [usize],
    /// Each row's token.
    pub(super) ids: &'p [u32],
    /// Which rows' logits the pass returns.
    pub(super) which: LogitsFor,
    /// The vocabulary entries whose logits are wanted, when not all are (the others are
    /// then unspecified: see [`LayerOps::linear_rows`]).
    pub(super) head_rows: Option<&'p [Range<usize>]>,
}

impl Pass<'_, '_> {
    /// Move every cache past the tokens this pass wrote.
    fn advance(&mut self) -> Result<(), ModelError> {
        for (seq, &(_, len)) in self.seqs.iter_mut().zip(self.spans) {
            seq.cache.advance(len)?;
        }
        Ok(())
    }

    /// The rows whose logits are returned, when not every row's.
    fn output_rows(&self) -> Option<Vec<usize>> {
        match self.which {
            LogitsFor::Last if self.ids.len() > self.spans.len() => Some(
                self.spans
                    .iter()
                    .map(|&(start, len)| start + len - 1)
                    .collect(),
            ),
            _ => None,
        }
    }
}

/// The buffers of a pass, reused by every layer.
#[derive(Default)]
struct Buffers<A> {
    normed: A,
    q: A,
    k: A,
    v: A,
    context: A,
    projected: A,
    gate: A,
    up: A,
}

/// The model's forward pass: the logits (`[output rows, vocab]`) of the rows
/// [`Pass::which`] asks for, each sequence's in turn. The caches hold the new tokens after it.
pub(super) fn forward<O: LayerOps>(
    model: &Model<'_>,
    ops: &mut O,
    pass: &mut Pass<'_, '_>,
) -> Result<O::Act, ModelError> {
    let (config, arch) = (model.config, model.arch);
    let shape = config.attention();
    let mut x = ops.embed(model.embedding, pass.ids);
    if let Some(factor) = arch.embedding_factor(config) {
        ops.scale(&mut x, factor);
    }
    if let Some(table) = model.positions {
        // Learned positions: one embedding row per position, none past the last.
        let limit = table.d_out();
        if let Some(&position) = pass.positions.iter().find(|&&p| p >= limit) {
            return Err(ModelError::PastLearnedPositions { position, limit });
        }
        let ids: Vec<u32> = pass.positions.iter().map(|&p| p as u32).collect();
        let embedded = ops.embed(table, &ids);
        ops.add(&mut x, &embedded);
    }
    let mut buffers = Buffers::default();
    // The rotation table of the current rotary base (one for the whole pass unless the
    // architecture changes bases between layers); none with learned positions.
    let mut rope: Option<((f64, bool), O::Rope)> = None;
    for (index, block) in model.layers.iter().enumerate() {
        let spec = arch.layer(config, index);
        // A layer's angles follow from its base and whether it is global (scaled).
        let key = (spec.rope_theta, spec.window.is_none());
        let rotary = arch.positions == Positions::Rotary;
        if rotary && rope.as_ref().is_none_or(|&(current, _)| current != key) {
            let angles = config.rotary(&spec);
            let table = RopeTable::of(pass.positions, &angles).with_style(arch.rope_style);
            rope = Some((key, ops.rope_table(table)));
        }
        let layer = Layer {
            index,
            block,
            arch,
            attention: Attention {
                shape,
                scale: config.attention_scale(),
                window: spec.window,
            },
            rope: rope.as_ref().map(|(_, rope)| rope),
        };
        layer_forward(ops, pass, &layer, &mut x, &mut buffers)?;
    }
    pass.advance()?;

    if let Some(rows) = pass.output_rows() {
        x = ops.select_rows(x, &rows, config.d_model);
    }
    ops.norm(&x, model.norm, &mut buffers.normed);
    let head = model.output.unwrap_or(model.embedding);
    let mut logits = O::Act::default();
    match pass.head_rows {
        Some(rows) => ops.linear_rows(head, &buffers.normed, rows, &mut logits),
        None => ops.linear(head, &buffers.normed, &mut logits),
    }
    Ok(logits)
}

/// What [`layer_forward`] runs: one block and what the architecture says about it.
struct Layer<'l, R> {
    index: usize,
    block: &'l Block,
    arch: &'l ArchSpec,
    attention: Attention,
    /// The rotation of q and k (`None`: learned positions, nothing rotates).
    rope: Option<&'l R>,
}

/// One decoder layer on the residual stream `x` (`[rows, d_model]`), in place.
fn layer_forward<O: LayerOps>(
    ops: &mut O,
    pass: &mut Pass<'_, '_>,
    layer: &Layer<'_, O::Rope>,
    x: &mut O::Act,
    s: &mut Buffers<O::Act>,
) -> Result<(), ModelError> {
    let block = layer.block;

    // Attention.
    ops.norm(x, &block.attn_norm, &mut s.normed);
    ops.linear_many(
        &[&block.wq, &block.wk, &block.wv],
        &s.normed,
        &mut [&mut s.q, &mut s.k, &mut s.v],
    );
    if let Some([q_norm, k_norm]) = &block.qk_norms {
        // `normed` is free until the feed-forward norm: it takes each result, then swaps.
        ops.norm(&s.q, q_norm, &mut s.normed);
        std::mem::swap(&mut s.q, &mut s.normed);
        ops.norm(&s.k, k_norm, &mut s.normed);
        std::mem::swap(&mut s.k, &mut s.normed);
    }
    if let Some(rope) = layer.rope {
        ops.rope(&mut s.q, rope);
        ops.rope(&mut s.k, rope);
    }
    let qkv = [&s.q, &s.k, &s.v];
    ops.attend_with_cache(pass, layer.index, layer.attention, qkv, &mut s.context)?;
    ops.linear(&block.wo, &s.context, &mut s.projected);
    residual(ops, x, &s.projected, post_norm(block, 0), &mut s.normed);

    // Feed-forward.
    ops.norm(x, &block.ffn_norm, &mut s.normed);
    let activation = layer.arch.ffn_activation;
    match &block.w_gate {
        Some(w_gate) => {
            ops.linear_many(
                &[w_gate, &block.w_up],
                &s.normed,
                &mut [&mut s.gate, &mut s.up],
            );
            ops.gated(activation, &mut s.gate, &s.up);
        }
        None => {
            ops.linear(&block.w_up, &s.normed, &mut s.gate);
            ops.activate(activation, &mut s.gate);
        }
    }
    ops.linear(&block.w_down, &s.gate, &mut s.projected);
    residual(ops, x, &s.projected, post_norm(block, 1), &mut s.normed);
    Ok(())
}

/// The block's norm after its attention (`0`) or feed-forward network (`1`), if any.
fn post_norm(block: &Block, which: usize) -> Option<&Norm> {
    block.post_norms.as_ref().map(|norms| &norms[which])
}

/// `x += y`, or `x += norm(y)` with a post norm (`scratch` takes the normed `y`).
fn residual<O: LayerOps>(
    ops: &mut O,
    x: &mut O::Act,
    y: &O::Act,
    norm: Option<&Norm>,
    scratch: &mut O::Act,
) {
    match norm {
        Some(norm) => {
            ops.norm(y, norm, scratch);
            ops.add(x, scratch);
        }
        None => ops.add(x, y),
    }
}
