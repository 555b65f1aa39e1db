//! Small models with seeded random weights, built as GGUF files in memory: for tests, examples
//! and benchmarks that must not depend on a downloaded checkpoint.
//!
//! Quantised weights are made directly as blocks: random quant bits under a fixed, moderate scale
//! (about `1/√cols`, so activations stay of order one through the layers), which exercises exactly
//! the code paths a real checkpoint of that type does.

use nextok_gguf::write::GgufWriter;
use nextok_gguf::{GgmlType, Value};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// The shape of a small random Llama-family model.
#[derive(Debug, Clone, PartialEq)]
pub struct RandomLlama {
    /// `general.architecture`: `llama`, `mistral` or `qwen2`.
    pub architecture: String,
    /// Decoder blocks.
    pub layers: usize,
    /// Residual width (a multiple of the weight type's block size).
    pub d_model: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Feed-forward width (a multiple of the weight type's block size).
    pub ffn_dim: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Storage type of the weight matrices.
    pub weight_type: GgmlType,
    /// Whether the output projection is the token embedding.
    pub tied_output: bool,
    /// Whether the Q, K and V projections have biases.
    pub attention_bias: bool,
    /// The context window written as `{architecture}.context_length` (default 4096).
    pub context: usize,
}

impl Default for RandomLlama {
    fn default() -> Self {
        RandomLlama {
            architecture: "llama".into(),
            layers: 2,
            d_model: 64,
            heads: 4,
            kv_heads: 2,
            ffn_dim: 96,
            vocab: 50,
            weight_type: GgmlType::Q8_0,
            tied_output: true,
            attention_bias: false,
            context: 4096,
        }
    }
}

struct Rng(ChaCha8Rng);

impl Rng {
    /// Uniform in [−1, 1).
    fn sym(&mut self) -> f32 {
        (self.0.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }

    fn byte(&mut self) -> u8 {
        self.0.next_u32() as u8
    }
}

fn f16_bytes(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

/// `rows` rows of `cols` random numbers of magnitude about `s`, as blocks of `ty`.
fn random_matrix(rng: &mut Rng, ty: GgmlType, rows: usize, cols: usize, s: f32) -> Vec<u8> {
    let n = rows * cols;
    let blocks = n / ty.block_elements() as usize;
    let mut out = Vec::with_capacity(blocks * ty.block_bytes() as usize);
    for _ in 0..blocks {
        let start = out.len();
        match ty {
            GgmlType::F32 => out.extend((rng.sym() * s).to_le_bytes()),
            GgmlType::F16 => out.extend(f16_bytes(rng.sym() * s)),
            GgmlType::BF16 => {
                out.extend(half::bf16::from_f32(rng.sym() * s).to_bits().to_le_bytes())
            }
            _ => {
                for _ in 0..ty.block_bytes() {
                    out.push(rng.byte());
                }
                // Overwrite the scale fields with sane values; the rest stays random.
                let b = &mut out[start..];
                match ty {
                    GgmlType::Q8_0 => b[0..2].copy_from_slice(&f16_bytes(s / 64.0)),
                    GgmlType::Q4_0 | GgmlType::Q5_0 => b[0..2].copy_from_slice(&f16_bytes(s / 8.0)),
                    GgmlType::Q4_1 | GgmlType::Q5_1 => {
                        b[0..2].copy_from_slice(&f16_bytes(s / 8.0));
                        b[2..4].copy_from_slice(&f16_bytes(-s));
                    }
                    GgmlType::Q4K | GgmlType::Q5K => {
                        b[0..2].copy_from_slice(&f16_bytes(s / 256.0));
                        b[2..4].copy_from_slice(&f16_bytes(s / 63.0));
                    }
                    GgmlType::Q6K => b[208..210].copy_from_slice(&f16_bytes(s / 2048.0)),
                    _ => {}
                }
            }
        }
    }
    out
}

impl RandomLlama {
    /// The model as GGUF bytes, its weights drawn from ChaCha8 seeded with `seed`.
    pub fn to_gguf(&self, seed: u64) -> Vec<u8> {
        self.to_gguf_writer(seed).to_bytes()
    }

    /// The model as a GGUF writer, its weights drawn from ChaCha8 seeded with `seed`, for a caller
    /// that adds metadata of its own (a tokenizer, a chat template) before writing the bytes.
    pub fn to_gguf_writer(&self, seed: u64) -> GgufWriter {
        let mut rng = Rng(ChaCha8Rng::seed_from_u64(seed));
        let (d, kvd, ffn, ty) = (
            self.d_model,
            self.d_model / self.heads * self.kv_heads,
            self.ffn_dim,
            self.weight_type,
        );
        let a = self.architecture.as_str();
        let mut w = GgufWriter::new()
            .metadata("general.architecture", Value::String(a.into()))
            .metadata(&format!("{a}.block_count"), Value::U32(self.layers as u32))
            .metadata(&format!("{a}.embedding_length"), Value::U32(d as u32))
            .metadata(&format!("{a}.feed_forward_length"), Value::U32(ffn as u32))
            .metadata(
                &format!("{a}.attention.head_count"),
                Value::U32(self.heads as u32),
            )
            .metadata(
                &format!("{a}.attention.head_count_kv"),
                Value::U32(self.kv_heads as u32),
            )
            .metadata(&format!("{a}.rope.freq_base"), Value::F32(10_000.0))
            .metadata(
                &format!("{a}.attention.layer_norm_rms_epsilon"),
                Value::F32(1e-5),
            )
            .metadata(
                &format!("{a}.context_length"),
                Value::U32(self.context as u32),
            );
        let matrix = |w: GgufWriter, name: &str, rows: usize, cols: usize, rng: &mut Rng| {
            let s = 1.0 / (cols as f32).sqrt();
            w.tensor_raw(
                name,
                &[cols as u64, rows as u64],
                ty,
                random_matrix(rng, ty, rows, cols, s),
            )
        };
        let norm = |rng: &mut Rng, len: usize| -> Vec<f32> {
            (0..len).map(|_| 1.0 + 0.1 * rng.sym()).collect()
        };
        // The embedding gets magnitude 1 per number, like a trained one after scaling.
        let embd = random_matrix(&mut rng, ty, self.vocab, d, 1.0);
        w = w.tensor_raw(
            "token_embd.weight",
            &[d as u64, self.vocab as u64],
            ty,
            embd,
        );
        let on = norm(&mut rng, d);
        w = w.tensor_f32("output_norm.weight", &[d as u64], &on);
        if !self.tied_output {
            w = matrix(w, "output.weight", self.vocab, d, &mut rng);
        }
        for i in 0..self.layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            let an = norm(&mut rng, d);
            w = w.tensor_f32(&n("attn_norm.weight"), &[d as u64], &an);
            w = matrix(w, &n("attn_q.weight"), d, d, &mut rng);
            w = matrix(w, &n("attn_k.weight"), kvd, d, &mut rng);
            w = matrix(w, &n("attn_v.weight"), kvd, d, &mut rng);
            if self.attention_bias {
                for (name, len) in [
                    ("attn_q.bias", d),
                    ("attn_k.bias", kvd),
                    ("attn_v.bias", kvd),
                ] {
                    let b: Vec<f32> = (0..len).map(|_| 0.1 * rng.sym()).collect();
                    w = w.tensor_f32(&n(name), &[len as u64], &b);
                }
            }
            w = matrix(w, &n("attn_output.weight"), d, d, &mut rng);
            let fnorm = norm(&mut rng, d);
            w = w.tensor_f32(&n("ffn_norm.weight"), &[d as u64], &fnorm);
            w = matrix(w, &n("ffn_gate.weight"), ffn, d, &mut rng);
            w = matrix(w, &n("ffn_up.weight"), ffn, d, &mut rng);
            w = matrix(w, &n("ffn_down.weight"), d, ffn, &mut rng);
        }
        w
    }
}
