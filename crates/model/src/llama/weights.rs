//! The weights of a layer as Burn modules: [`Norm`] and [`Block`]. Each carries what both
//! executors of the recipe need: the Burn tensors, and on a host device host copies of the
//! small vectors (norm scales) that the host executor reads directly.

use burn::module::Param;
use burn::prelude::*;

use crate::linear::QLinear;

/// A normalisation over each `gamma.len()`-wide group of the last dimension (the whole row for
/// a layer's norm, one head for a q/k norm): root-mean-square (`x / sqrt(mean(x^2) + eps) *
/// gamma`, Llama, Gemma) or, [`centered`](Self::layer_norm), LayerNorm (`(x - mean) /
/// sqrt(var + eps) * gamma + beta`, GPT-2).
#[derive(Module, Debug)]
pub struct Norm {
    /// Per-feature scale.
    pub gamma: Param<Tensor<1>>,
    /// Per-feature shift added after the scale (LayerNorm's `beta`), if any.
    pub beta: Option<Param<Tensor<1>>>,
    /// Added to the mean square (the variance, when centered) for stability.
    pub eps: f64,
    /// Whether the mean is subtracted first (LayerNorm) or not (RMSNorm).
    #[module(skip)]
    pub centered: bool,
    /// `gamma` on the host, for the host executor; `None` on devices whose memory is not the
    /// host's.
    #[module(skip)]
    host: Option<Vec<f32>>,
    /// `beta` on the host, as `host` is.
    #[module(skip)]
    host_beta: Option<Vec<f32>>,
}

/// A vector's values on the host when its device is the host's.
fn host_copy(tensor: &Tensor<1>) -> Option<Vec<f32>> {
    if !crate::device::is_host_device(&tensor.device()) {
        return None;
    }
    tensor
        .clone()
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .ok()
}

impl Norm {
    /// An RMS norm with the given scale.
    pub fn new(gamma: Tensor<1>, eps: f64) -> Self {
        Norm {
            host: host_copy(&gamma),
            gamma: Param::from_tensor(gamma),
            beta: None,
            eps,
            centered: false,
            host_beta: None,
        }
    }

    /// A LayerNorm with the given scale and shift.
    pub fn layer_norm(gamma: Tensor<1>, beta: Tensor<1>, eps: f64) -> Self {
        Norm {
            host_beta: host_copy(&beta),
            beta: Some(Param::from_tensor(beta)),
            centered: true,
            ..Norm::new(gamma, eps)
        }
    }

    /// The scale on the host (CPU devices).
    pub(crate) fn host_gamma(&self) -> Option<&[f32]> {
        self.host.as_deref()
    }

    /// The shift on the host, for a norm that has one (CPU devices).
    pub(crate) fn host_beta(&self) -> Option<&[f32]> {
        self.host_beta.as_deref()
    }

    /// Its number of parameters: the scale's and the shift's.
    pub fn parameter_count(&self) -> u64 {
        let width = self.gamma.dims()[0] as u64;
        if self.beta.is_some() {
            2 * width
        } else {
            width
        }
    }

    /// Whether the host executor has every vector it needs.
    pub(crate) fn on_host(&self) -> bool {
        self.host.is_some() && (self.beta.is_none() || self.host_beta.is_some())
    }

    /// Normalise `[batch, seq, width]` activations, in groups of `gamma.len()` features.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [b, t, width] = x.dims();
        let group = self.gamma.dims()[0];
        if group != width && group > 0 {
            let grouped = x.reshape([b, t * (width / group), group]);
            return self.forward(grouped).reshape([b, t, width]);
        }
        let x = if self.centered {
            let mean = x.clone().mean_dim(2);
            x - mean
        } else {
            x
        };
        let inv_rms = x
            .clone()
            .square()
            .mean_dim(2)
            .add_scalar(self.eps)
            .sqrt()
            .recip();
        let vector = |p: &Param<Tensor<1>>| p.val().unsqueeze_dim::<2>(0).unsqueeze_dim::<3>(0);
        let scaled = x * inv_rms * vector(&self.gamma);
        match &self.beta {
            Some(beta) => scaled + vector(beta),
            None => scaled,
        }
    }
}

/// The weights of one decoder layer. Llama's are [`Block::new`]'s nine; the optional ones
/// ([`with_qk_norms`](Self::with_qk_norms), [`with_post_norms`](Self::with_post_norms), and
/// biases on the projections through [`QLinear::with_bias`]) are other architectures' (see
/// [`ArchSpec`](super::ArchSpec)): the recipe applies whatever a block has.
#[derive(Module, Debug)]
pub struct Block {
    pub(super) attn_norm: Norm,
    pub(super) wq: QLinear,
    pub(super) wk: QLinear,
    pub(super) wv: QLinear,
    pub(super) wo: QLinear,
    pub(super) ffn_norm: Norm,
    /// The gate of a gated feed-forward network (`act(gate) * up`); `None` for a plain one
    /// (`act(up)`, GPT-2).
    pub(super) w_gate: Option<QLinear>,
    pub(super) w_up: QLinear,
    pub(super) w_down: QLinear,
    /// Norms of each query head and each key head before RoPE (`[head_dim]` scales).
    pub(super) qk_norms: Option<[Norm; 2]>,
    /// Norms of the attention's and of the feed-forward network's output before each is
    /// added to the residual stream.
    pub(super) post_norms: Option<[Norm; 2]>,
}

impl Block {
    /// Assemble a pre-norm block from its weights (`[d_out, d_in]` matrices): attention
    /// (`wq`, `wk`, `wv`, `wo`) and a gated feed-forward network (`w_gate`, `w_up`, `w_down`),
    /// each after its norm.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        attn_norm: Norm,
        wq: QLinear,
        wk: QLinear,
        wv: QLinear,
        wo: QLinear,
        ffn_norm: Norm,
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
            w_gate: Some(w_gate),
            w_up,
            w_down,
            qk_norms: None,
            post_norms: None,
        }
    }

    /// Assemble a pre-norm block whose feed-forward network is not gated: `down(act(up(x)))`
    /// (GPT-2).
    #[allow(clippy::too_many_arguments)]
    pub fn sequential(
        attn_norm: Norm,
        wq: QLinear,
        wk: QLinear,
        wv: QLinear,
        wo: QLinear,
        ffn_norm: Norm,
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
            w_gate: None,
            w_up,
            w_down,
            qk_norms: None,
            post_norms: None,
        }
    }

    /// The block with norms of each query and key head (`[head_dim]` scales) applied before
    /// RoPE (Gemma-3's `attn_q_norm`, `attn_k_norm`).
    pub fn with_qk_norms(self, q: Norm, k: Norm) -> Self {
        Block {
            qk_norms: Some([q, k]),
            ..self
        }
    }

    /// The block with norms of the attention's and the feed-forward network's outputs
    /// before the residual adds (Gemma-2/3's `post_attention_norm`, `post_ffw_norm`).
    pub fn with_post_norms(self, attention: Norm, ffn: Norm) -> Self {
        Block {
            post_norms: Some([attention, ffn]),
            ..self
        }
    }

    /// The block's weight matrices.
    pub(super) fn linears(&self) -> impl Iterator<Item = &QLinear> {
        [&self.wq, &self.wk, &self.wv, &self.wo]
            .into_iter()
            .chain(&self.w_gate)
            .chain([&self.w_up, &self.w_down])
    }

    /// The block's norms.
    pub(super) fn norms(&self) -> impl Iterator<Item = &Norm> {
        [&self.attn_norm, &self.ffn_norm]
            .into_iter()
            .chain(self.qk_norms.iter().flatten())
            .chain(self.post_norms.iter().flatten())
    }
}
