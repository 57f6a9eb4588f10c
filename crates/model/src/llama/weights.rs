//! The weights of a layer as Burn modules: [`RmsNorm`] and [`Block`]. Each carries what both
//! executors of the recipe need: the Burn tensors, and on a host device host copies of the
//! small vectors (norm scales) that the host executor reads directly.

use burn::module::Param;
use burn::prelude::*;

use crate::linear::QLinear;

/// Root-mean-square norm: `x / sqrt(mean(x^2) + eps) * gamma` over each `gamma.len()`-wide
/// group of the last dimension (the whole row for a layer norm, one head for a q/k norm).
#[derive(Module, Debug)]
pub struct RmsNorm {
    /// Per-feature scale.
    pub gamma: Param<Tensor<1>>,
    /// Added to the mean square for stability.
    pub eps: f64,
    /// `gamma` on the host, for the host executor; `None` on devices whose memory is not the
    /// host's.
    #[module(skip)]
    host: Option<Vec<f32>>,
}

impl RmsNorm {
    /// A norm with the given scale.
    pub fn new(gamma: Tensor<1>, eps: f64) -> Self {
        let host = if crate::device::is_host_device(&gamma.device()) {
            gamma
                .clone()
                .into_data()
                .convert::<f32>()
                .try_into_vec::<f32>()
                .ok()
        } else {
            None
        };
        RmsNorm {
            gamma: Param::from_tensor(gamma),
            eps,
            host,
        }
    }

    /// The scale on the host (CPU devices).
    pub(crate) fn host_gamma(&self) -> Option<&[f32]> {
        self.host.as_deref()
    }

    /// Normalise `[batch, seq, width]` activations, in groups of `gamma.len()` features.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, t, width] = x.dims();
        let group = self.gamma.dims()[0];
        if group != width && group > 0 {
            let grouped = x.reshape([b, t * (width / group), group]);
            return self.forward(grouped).reshape([b, t, width]);
        }
        let inv_rms = x
            .clone()
            .square()
            .mean_dim(2)
            .add_scalar(self.eps)
            .sqrt()
            .recip();
        x * inv_rms * self.gamma.val().unsqueeze_dim::<2>(0).unsqueeze_dim::<3>(0)
    }
}

/// The weights of one decoder layer. Llama's are [`Block::new`]'s nine; the optional ones
/// ([`with_qk_norms`](Self::with_qk_norms), [`with_post_norms`](Self::with_post_norms), and
/// biases on the projections through [`QLinear::with_bias`]) are other architectures' (see
/// [`ArchSpec`](super::ArchSpec)): the recipe applies whatever a block has.
#[derive(Module, Debug)]
pub struct Block {
    pub(super) attn_norm: RmsNorm,
    pub(super) wq: QLinear,
    pub(super) wk: QLinear,
    pub(super) wv: QLinear,
    pub(super) wo: QLinear,
    pub(super) ffn_norm: RmsNorm,
    pub(super) w_gate: QLinear,
    pub(super) w_up: QLinear,
    pub(super) w_down: QLinear,
    /// Norms of each query head and each key head before RoPE (`[head_dim]` scales).
    pub(super) qk_norms: Option<[RmsNorm; 2]>,
    /// Norms of the attention's and of the feed-forward network's output before each is
    /// added to the residual stream.
    pub(super) post_norms: Option<[RmsNorm; 2]>,
}

impl Block {
    /// Assemble a pre-norm block from its weights (`[d_out, d_in]` matrices): attention
    /// (`wq`, `wk`, `wv`, `wo`) and a gated feed-forward network (`w_gate`, `w_up`, `w_down`),
    /// each after its norm.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        attn_norm: RmsNorm,
        wq: QLinear,
        wk: QLinear,
        wv: QLinear,
        wo: QLinear,
        ffn_norm: RmsNorm,
        w_gate: QLinear,
        w_up: QLinear,
        w_down: QLinear,
    ) -> Self {
        Block {
            attn_norm,
            wq,
            wk,
            wv,
            wo,
            ffn_norm,
            w_gate,
            w_up,
            w_down,
            qk_norms: None,
            post_norms: None,
        }
    }

    /// The block with norms of each query and key head (`[head_dim]` scales) applied before
    /// RoPE (Gemma-3's `attn_q_norm`, `attn_k_norm`).
    pub fn with_qk_norms(self, q: RmsNorm, k: RmsNorm) -> Self {
        Block {
            qk_norms: Some([q, k]),
            ..self
        }
    }

    /// The block with norms of the attention's and the feed-forward network's outputs
    /// before the residual adds (Gemma-2/3's `post_attention_norm`, `post_ffw_norm`).
    pub fn with_post_norms(self, attention: RmsNorm, ffn: RmsNorm) -> Self {
        Block {
            post_norms: Some([attention, ffn]),
            ..self
        }
    }

    /// The block's weight matrices.
    pub(super) fn linears(&self) -> [&QLinear; 7] {
        [
            &self.wq,
            &self.wk,
            &self.wv,
            &self.wo,
            &self.w_gate,
            &self.w_up,
            &self.w_down,
        ]
    }

    /// The block's norms.
    pub(super) fn norms(&self) -> impl Iterator<Item = &RmsNorm> {
        [&self.attn_norm, &self.ffn_norm]
            .into_iter()
            .chain(self.qk_norms.iter().flatten())
            .chain(self.post_norms.iter().flatten())
    }
}
