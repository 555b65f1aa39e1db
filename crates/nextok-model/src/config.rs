use nextok_gguf::Metadata;

use crate::Error;

/// How rotary embeddings pair the numbers of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RopeOrdering {
    /// Adjacent pairs `(2i, 2i + 1)`: the original RoPE, and what llama.cpp uses for the Llama
    /// architecture (its GGUF conversion permutes the rows of the Q and K weights to match).
    Normal,
    /// Pairs `(i, i + d/2)` ("rotate half"), as GPT-NeoX and Hugging Face's Llama code do; used
    /// for Qwen2 GGUF files.
    NeoX,
}

/// The hyper-parameters of a Llama-family decoder-only model.
#[derive(Debug, Clone, PartialEq)]
pub struct LlamaConfig {
    /// The architecture name of the file (`llama`, `mistral`, `qwen2`).
    pub architecture: String,
    /// Decoder blocks.
    pub layers: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Hidden width of the feed-forward network.
    pub ffn_dim: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (grouped-query attention when fewer than `heads`).
    pub kv_heads: usize,
    /// Numbers per head: `d_model / heads`.
    pub head_dim: usize,
    /// Numbers of each head that are rotated (usually `head_dim`).
    pub rope_dims: usize,
    /// The rotary base θ.
    pub rope_base: f64,
    /// Linear position scaling: positions are divided by this factor (1 for none).
    pub rope_scale: f64,
    /// Pairing of rotated numbers.
    pub rope_ordering: RopeOrdering,
    /// ε of RMSNorm.
    pub rms_eps: f32,
    /// Vocabulary size.
    pub vocab: usize,
    /// Longest sequence the model was trained for.
    pub context: usize,
}

impl LlamaConfig {
    /// Reads the hyper-parameters from GGUF metadata (`{arch}.block_count` and so on).
    pub fn from_metadata(md: &Metadata, vocab: usize) -> Result<Self, Error> {
        let architecture = md.get_str("general.architecture")?.to_owned();
        let rope_ordering = match architecture.as_str() {
            "llama" | "mistral" => RopeOrdering::Normal,
            "qwen2" => RopeOrdering::NeoX,
            _ => return Err(Error::UnsupportedArchitecture { architecture }),
        };
        let key = |k: &str| format!("{architecture}.{k}");
        let layers = md.get_usize(&key("block_count"))?;
        let d_model = md.get_usize(&key("embedding_length"))?;
        let ffn_dim = md.get_usize(&key("feed_forward_length"))?;
        let heads = md.get_usize(&key("attention.head_count"))?;
        let kv_heads = match md.get(&key("attention.head_count_kv")) {
            Some(_) => md.get_usize(&key("attention.head_count_kv"))?,
            None => heads,
        };
        let positive = |k: &str, v: usize| {
            if v == 0 {
                Err(Error::BadHyperparameter {
                    key: k.to_owned(),
                    value: 0,
                    reason: "must be at least 1",
                })
            } else {
                Ok(v)
            }
        };
        positive(&key("block_count"), layers)?;
        positive(&key("embedding_length"), d_model)?;
        positive(&key("feed_forward_length"), ffn_dim)?;
        positive(&key("attention.head_count"), heads)?;
        positive(&key("attention.head_count_kv"), kv_heads)?;
        if d_model % heads != 0 {
            return Err(Error::BadHyperparameter {
                key: key("embedding_length"),
                value: d_model as u64,
                reason: "not a multiple of the head count",
            });
        }
        if heads % kv_heads != 0 {
            return Err(Error::BadHyperparameter {
                key: key("attention.head_count_kv"),
                value: kv_heads as u64,
                reason: "does not divide the head count",
            });
        }
        let head_dim = d_model / heads;
        let rope_dims = match md.get(&key("rope.dimension_count")) {
            Some(_) => md.get_usize(&key("rope.dimension_count"))?,
            None => head_dim,
        };
        if rope_dims > head_dim || rope_dims % 2 != 0 {
            return Err(Error::BadHyperparameter {
                key: key("rope.dimension_count"),
                value: rope_dims as u64,
                reason: "must be even and at most the head dimension",
            });
        }
        let rope_base = match md.get(&key("rope.freq_base")) {
            Some(_) => md.get_f32(&key("rope.freq_base"))? as f64,
            None => 10_000.0,
        };
        let rope_scale = match md.get(&key("rope.scaling.type")) {
            None => 1.0,
            Some(_) => match md.get_str(&key("rope.scaling.type"))? {
                "none" => 1.0,
                "linear" => md.get_f32(&key("rope.scaling.factor"))? as f64,
                other => {
                    return Err(Error::UnsupportedRopeScaling {
                        kind: other.to_owned(),
                    })
                }
            },
        };
        let rms_eps = md.get_f32(&key("attention.layer_norm_rms_epsilon"))?;
        // Each real number is checked under its own key: a NaN base is reported as NaN, and a bad
        // epsilon here rather than as a NaN logit after the first layer.
        let positive_real = |k: String, v: f64, reason: &'static str| {
            if v > 0.0 && v.is_finite() {
                Ok(())
            } else {
                Err(Error::BadRealHyperparameter {
                    key: k,
                    value: v,
                    reason,
                })
            }
        };
        positive_real(
            key("rope.freq_base"),
            rope_base,
            "the rotary base must be positive and finite",
        )?;
        positive_real(
            key("rope.scaling.factor"),
            rope_scale,
            "the rotary scale must be positive and finite",
        )?;
        positive_real(
            key("attention.layer_norm_rms_epsilon"),
            f64::from(rms_eps),
            "the RMS norm's epsilon must be positive and finite",
        )?;
        let context = match md.get(&key("context_length")) {
            Some(_) => positive(
                &key("context_length"),
                md.get_usize(&key("context_length"))?,
            )?,
            None => usize::MAX,
        };
        Ok(LlamaConfig {
            architecture,
            layers,
            d_model,
            ffn_dim,
            heads,
            kv_heads,
            head_dim,
            rope_dims,
            rope_base,
            rope_scale,
            rope_ordering,
            rms_eps,
            vocab,
            context,
        })
    }

    /// Numbers in one key (or value) row: `kv_heads × head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.kv_heads * self.head_dim
    }
}
