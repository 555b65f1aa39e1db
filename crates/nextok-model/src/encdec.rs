//! The encoder–decoder transformer of the specification's translation example: the "base model"
//! of *Attention Is All You Need* (Vaswani et al., 2017): 6 encoder and 6 decoder layers,
//! d_model 512, 8 heads, feed-forward 2048, sinusoidal positions, post-norm residual blocks with
//! LayerNorm, ReLU feed-forward networks, and one embedding shared by both sides and the output.
//!
//! Generation follows the specification ("Encoder–decoder: translating"): the encoder runs once
//! over the source ([`EncoderDecoder::encode`]); the keys and values of every decoder layer's
//! cross-attention are computed from its output at that moment, once, and kept in a
//! [`CrossAttention`]; each decoder step then runs only the new target tokens, reading its own
//! earlier keys and values from a [`KvCache`] and the source's from the [`CrossAttention`].
//!
//! The weights are seeded random numbers ([`EncoderDecoder::random`]): this model exists to run
//! the specification's worked examples and to test the machinery, not to translate.

use std::sync::atomic::{AtomicU64, Ordering};

use nextok_kv_cache::{CacheConfig, KvCache, KvType};
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

use crate::backend::{Backend, Mask, QMatrix};
use crate::llama::check_sequence;
use crate::{Error, Logits};

/// The hyper-parameters of an encoder–decoder transformer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncDecConfig {
    /// Encoder layers.
    pub encoder_layers: usize,
    /// Decoder layers.
    pub decoder_layers: usize,
    /// Width of the residual stream.
    pub d_model: usize,
    /// Attention heads (`d_model / heads` numbers each).
    pub heads: usize,
    /// Hidden width of the feed-forward networks.
    pub ffn_dim: usize,
    /// Shared source/target vocabulary.
    pub vocab: usize,
}

impl EncDecConfig {
    /// The specification's base model (6 + 6 layers, d_model 512, 8 heads, feed-forward 2048)
    /// with a vocabulary of `vocab` tokens.
    pub fn base(vocab: usize) -> Self {
        EncDecConfig {
            encoder_layers: 6,
            decoder_layers: 6,
            d_model: 512,
            heads: 8,
            ffn_dim: 2048,
            vocab,
        }
    }

    fn head_dim(&self) -> usize {
        self.d_model / self.heads
    }

    fn check(&self) -> Result<(), Error> {
        let bad = |key: &str, value: usize, reason| Error::BadHyperparameter {
            key: key.into(),
            value: value as u64,
            reason,
        };
        for (key, v) in [
            ("encoder_layers", self.encoder_layers),
            ("decoder_layers", self.decoder_layers),
            ("d_model", self.d_model),
            ("heads", self.heads),
            ("ffn_dim", self.ffn_dim),
            ("vocab", self.vocab),
        ] {
            if v == 0 {
                return Err(bad(key, v, "must be at least 1"));
            }
        }
        if !self.d_model.is_multiple_of(self.heads) || !self.d_model.is_multiple_of(2) {
            return Err(bad(
                "d_model",
                self.d_model,
                "must be even and a multiple of the head count",
            ));
        }
        Ok(())
    }
}

/// A weight matrix in the model's buffer: `rows × cols` f32, row-major.
#[derive(Debug, Clone, Copy)]
struct Mat {
    at: usize,
    rows: usize,
    cols: usize,
}

/// A vector in the model's buffer.
#[derive(Debug, Clone, Copy)]
struct Vector {
    at: usize,
    len: usize,
}

/// Self- or cross-attention projections, d_model × d_model each.
#[derive(Debug)]
struct Attn {
    wq: Mat,
    wk: Mat,
    wv: Mat,
    wo: Mat,
}

/// LayerNorm gain and bias.
#[derive(Debug)]
struct Norm {
    gain: Vector,
    bias: Vector,
}

/// The feed-forward network: `W2 · relu(W1 · x + b1) + b2`.
#[derive(Debug)]
struct Ffn {
    w1: Mat,
    b1: Vector,
    w2: Mat,
    b2: Vector,
}

#[derive(Debug)]
struct EncoderLayer {
    attn: Attn,
    norm1: Norm,
    ffn: Ffn,
    norm2: Norm,
}

#[derive(Debug)]
struct DecoderLayer {
    self_attn: Attn,
    norm1: Norm,
    cross: Attn,
    norm2: Norm,
    ffn: Ffn,
    norm3: Norm,
}

/// The keys and values of every decoder layer's cross-attention, computed once from the
/// encoder's output for one source sentence, and read at every decoder step.
#[derive(Debug, Clone)]
pub struct CrossAttention {
    kv: KvCache,
}

impl CrossAttention {
    /// Source positions.
    pub fn len(&self) -> usize {
        self.kv.len()
    }

    /// Whether the source is empty (it never is: [`EncoderDecoder::encode`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.kv.is_empty()
    }

    /// The source tokens.
    pub fn source(&self) -> &[u32] {
        self.kv.tokens()
    }
}

/// One target sequence in a decoder call.
#[derive(Debug)]
pub struct DecoderSequence<'a> {
    /// The encoded source.
    pub cross: &'a CrossAttention,
    /// The decoder's own KV cache (self-attention); the call appends the new tokens.
    pub cache: &'a mut KvCache,
    /// New target tokens.
    pub tokens: &'a [u32],
    /// Which logits to return.
    pub logits: Logits,
}

/// An encoder–decoder transformer with its weights in memory (f32).
pub struct EncoderDecoder {
    config: EncDecConfig,
    /// Every weight, f32 little-endian, so that matrices are [`QMatrix`] views like a file's.
    buffer: Vec<u8>,
    /// vocab × d_model, shared by both embeddings and the output projection.
    embedding: Mat,
    encoder: Vec<EncoderLayer>,
    decoder: Vec<DecoderLayer>,
    encoder_runs: AtomicU64,
    cross_rows: AtomicU64,
    decoder_positions: AtomicU64,
}

impl std::fmt::Debug for EncoderDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EncoderDecoder")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Allocates and fills the weight buffer.
struct Builder {
    rng: ChaCha8Rng,
    values: Vec<f32>,
}

impl Builder {
    fn sym(&mut self) -> f32 {
        (self.rng.next_u32() >> 8) as f32 / (1u32 << 23) as f32 - 1.0
    }

    fn mat(&mut self, rows: usize, cols: usize, scale: f32) -> Mat {
        let at = self.values.len();
        for _ in 0..rows * cols {
            let v = self.sym() * scale;
            self.values.push(v);
        }
        Mat { at, rows, cols }
    }

    fn vector(&mut self, len: usize, centre: f32, spread: f32) -> Vector {
        let at = self.values.len();
        for _ in 0..len {
            let v = centre + spread * self.sym();
            self.values.push(v);
        }
        Vector { at, len }
    }

    fn attn(&mut self, d: usize) -> Attn {
        let s = 1.0 / (d as f32).sqrt();
        Attn {
            wq: self.mat(d, d, s),
            wk: self.mat(d, d, s),
            wv: self.mat(d, d, s),
            wo: self.mat(d, d, s),
        }
    }

    fn norm(&mut self, d: usize) -> Norm {
        Norm {
            gain: self.vector(d, 1.0, 0.1),
            bias: self.vector(d, 0.0, 0.1),
        }
    }

    fn ffn(&mut self, d: usize, f: usize) -> Ffn {
        Ffn {
            w1: self.mat(f, d, 1.0 / (d as f32).sqrt()),
            b1: self.vector(f, 0.0, 0.1),
            w2: self.mat(d, f, 1.0 / (f as f32).sqrt()),
            b2: self.vector(d, 0.0, 0.1),
        }
    }
}

const LN_EPS: f32 = 1e-5;

impl EncoderDecoder {
    /// A model with weights drawn from ChaCha8 seeded with `seed`.
    pub fn random(config: EncDecConfig, seed: u64) -> Result<Self, Error> {
        config.check()?;
        let (d, f) = (config.d_model, config.ffn_dim);
        let mut b = Builder {
            rng: ChaCha8Rng::seed_from_u64(seed),
            values: Vec::new(),
        };
        let embedding = b.mat(config.vocab, d, 1.0 / (d as f32).sqrt());
        let encoder = (0..config.encoder_layers)
            .map(|_| EncoderLayer {
                attn: b.attn(d),
                norm1: b.norm(d),
                ffn: b.ffn(d, f),
                norm2: b.norm(d),
            })
            .collect();
        let decoder = (0..config.decoder_layers)
            .map(|_| DecoderLayer {
                self_attn: b.attn(d),
                norm1: b.norm(d),
                cross: b.attn(d),
                norm2: b.norm(d),
                ffn: b.ffn(d, f),
                norm3: b.norm(d),
            })
            .collect();
        let buffer = b.values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Ok(EncoderDecoder {
            config,
            buffer,
            embedding,
            encoder,
            decoder,
            encoder_runs: AtomicU64::new(0),
            cross_rows: AtomicU64::new(0),
            decoder_positions: AtomicU64::new(0),
        })
    }

    /// The hyper-parameters.
    pub fn config(&self) -> &EncDecConfig {
        &self.config
    }

    /// Number of weights.
    pub fn parameters(&self) -> usize {
        self.buffer.len() / 4
    }

    /// How many times the encoder has run.
    pub fn encoder_runs(&self) -> u64 {
        self.encoder_runs.load(Ordering::Relaxed)
    }

    /// How many (layer, source position) cross-attention key/value rows have been computed.
    pub fn cross_rows_computed(&self) -> u64 {
        self.cross_rows.load(Ordering::Relaxed)
    }

    /// How many target positions have gone through the decoder stack.
    pub fn decoder_positions(&self) -> u64 {
        self.decoder_positions.load(Ordering::Relaxed)
    }

    /// The cache configuration of the decoder's self-attention.
    pub fn cache_config(&self, kv_type: KvType) -> CacheConfig {
        CacheConfig::new(
            self.config.decoder_layers,
            self.config.heads,
            self.config.head_dim(),
            kv_type,
        )
    }

    /// A new, empty decoder cache for one target sequence.
    pub fn new_cache(&self, kv_type: KvType) -> KvCache {
        // The dimensions were checked to be non-zero at construction.
        KvCache::new(self.cache_config(kv_type)).unwrap_or_else(|_| unreachable!())
    }

    fn m(&self, m: Mat) -> QMatrix<'_> {
        QMatrix {
            ty: nextok_gguf::GgmlType::F32,
            rows: m.rows,
            cols: m.cols,
            layout: crate::Layout::Gguf,
            data: &self.buffer[m.at * 4..(m.at + m.rows * m.cols) * 4],
        }
    }

    fn v(&self, v: Vector) -> Vec<f32> {
        self.buffer[v.at * 4..(v.at + v.len) * 4]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn check_tokens(&self, seq: usize, tokens: &[u32]) -> Result<(), Error> {
        match tokens
            .iter()
            .enumerate()
            .find(|(_, &t)| t as usize >= self.config.vocab)
        {
            Some((index, &token)) => Err(Error::TokenOutOfRange {
                seq,
                index,
                token,
                vocab: self.config.vocab,
            }),
            None => Ok(()),
        }
    }

    /// Embeds tokens at positions `first..`: `E[token] · √d_model + PE(position)`.
    fn embed(&self, tokens: &[u32], first: usize, x: &mut [f32]) -> Result<(), Error> {
        let d = self.config.d_model;
        let e = self.m(self.embedding);
        let scale = (d as f32).sqrt();
        for (i, (row, &t)) in x.chunks_exact_mut(d).zip(tokens).enumerate() {
            e.row(t as usize, row)?;
            let pos = (first + i) as f64;
            for k in 0..d / 2 {
                let angle = pos / 10_000f64.powf(2.0 * k as f64 / d as f64);
                row[2 * k] = row[2 * k] * scale + angle.sin() as f32;
                row[2 * k + 1] = row[2 * k + 1] * scale + angle.cos() as f32;
            }
        }
        Ok(())
    }

    /// `x = LayerNorm(x + y)` over rows of d_model.
    fn add_norm(&self, x: &mut [f32], y: &[f32], norm: &Norm) {
        let (g, b) = (self.v(norm.gain), self.v(norm.bias));
        let d = g.len();
        for (row, add) in x.chunks_exact_mut(d).zip(y.chunks_exact(d)) {
            row.iter_mut().zip(add).for_each(|(a, c)| *a += c);
            let mean: f64 = row.iter().map(|&v| v as f64).sum::<f64>() / d as f64;
            let var: f64 = row
                .iter()
                .map(|&v| (v as f64 - mean) * (v as f64 - mean))
                .sum::<f64>()
                / d as f64;
            let inv = 1.0 / (var + LN_EPS as f64).sqrt();
            for ((v, &gg), &bb) in row.iter_mut().zip(&g).zip(&b) {
                *v = ((*v as f64 - mean) * inv) as f32 * gg + bb;
            }
        }
    }

    fn ffn(
        &self,
        backend: &dyn Backend,
        x: &[f32],
        n: usize,
        ffn: &Ffn,
    ) -> Result<Vec<f32>, Error> {
        let mut h = vec![0.0; n * self.config.ffn_dim];
        backend.matmul(self.m(ffn.w1), x, n, &mut h)?;
        let b1 = self.v(ffn.b1);
        for row in h.chunks_exact_mut(b1.len()) {
            for (v, b) in row.iter_mut().zip(&b1) {
                *v = (*v + b).max(0.0);
            }
        }
        let mut out = vec![0.0; n * self.config.d_model];
        backend.matmul(self.m(ffn.w2), &h, n, &mut out)?;
        let b2 = self.v(ffn.b2);
        for row in out.chunks_exact_mut(b2.len()) {
            row.iter_mut().zip(&b2).for_each(|(v, b)| *v += b);
        }
        Ok(out)
    }

    /// Runs the encoder once over `source` and computes, from its output, the keys and values
    /// of every decoder layer's cross-attention.
    pub fn encode(&self, backend: &dyn Backend, source: &[u32]) -> Result<CrossAttention, Error> {
        if source.is_empty() {
            return Err(Error::NoTokens { seq: 0 });
        }
        self.check_tokens(0, source)?;
        self.encoder_runs.fetch_add(1, Ordering::Relaxed);
        let (d, n, hd) = (self.config.d_model, source.len(), self.config.head_dim());
        let mut x = vec![0.0f32; n * d];
        self.embed(source, 0, &mut x)?;
        let (mut q, mut k, mut v, mut a, mut o) = (
            vec![0.0; n * d],
            vec![0.0; n * d],
            vec![0.0; n * d],
            vec![0.0; n * d],
            vec![0.0; n * d],
        );
        // The encoder's self-attention sees the whole source: its keys and values go in a
        // scratch cache of one layer, read with the full mask.
        let scratch_config = CacheConfig::new(1, self.config.heads, hd, KvType::F32);
        for layer in &self.encoder {
            backend.matmul(self.m(layer.attn.wq), &x, n, &mut q)?;
            backend.matmul(self.m(layer.attn.wk), &x, n, &mut k)?;
            backend.matmul(self.m(layer.attn.wv), &x, n, &mut v)?;
            let mut scratch = KvCache::new(scratch_config)?;
            scratch.push_tokens(source)?;
            for p in 0..n {
                scratch.write(0, p, &k[p * d..(p + 1) * d], &v[p * d..(p + 1) * d])?;
            }
            backend.attention(&q, &scratch, 0, Mask::Full, self.config.heads, &mut a)?;
            backend.matmul(self.m(layer.attn.wo), &a, n, &mut o)?;
            self.add_norm(&mut x, &o, &layer.norm1);
            let f = self.ffn(backend, &x, n, &layer.ffn)?;
            self.add_norm(&mut x, &f, &layer.norm2);
        }
        // Cross-attention keys and values, once per decoder layer.
        let mut kv = KvCache::new(self.cache_config(KvType::F32))?;
        kv.push_tokens(source)?;
        for (l, layer) in self.decoder.iter().enumerate() {
            backend.matmul(self.m(layer.cross.wk), &x, n, &mut k)?;
            backend.matmul(self.m(layer.cross.wv), &x, n, &mut v)?;
            for p in 0..n {
                kv.write(l, p, &k[p * d..(p + 1) * d], &v[p * d..(p + 1) * d])?;
            }
            self.cross_rows.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(CrossAttention { kv })
    }

    /// Runs new target tokens of one or more sequences through the decoder, appending their
    /// keys and values to each sequence's cache, and returns the logits asked for (`vocab`
    /// numbers per position). On error the caches are left as they were.
    pub fn decode(
        &self,
        backend: &dyn Backend,
        batch: &mut [DecoderSequence<'_>],
    ) -> Result<Vec<Vec<f32>>, Error> {
        let expected = self.cache_config(KvType::F32);
        for (s, seq) in batch.iter().enumerate() {
            check_sequence(s, seq.cache, seq.tokens, seq.logits, &expected, "heads")?;
            self.check_tokens(s, seq.tokens)?;
        }
        let starts: Vec<usize> = batch.iter().map(|s| s.cache.len()).collect();
        let result = self.decode_checked(backend, batch);
        if result.is_err() {
            for (seq, &len) in batch.iter_mut().zip(&starts) {
                seq.cache.truncate(len);
            }
        }
        result
    }

    fn decode_checked(
        &self,
        backend: &dyn Backend,
        batch: &mut [DecoderSequence<'_>],
    ) -> Result<Vec<Vec<f32>>, Error> {
        let (d, heads, vocab) = (self.config.d_model, self.config.heads, self.config.vocab);
        let mut spans = Vec::new();
        let mut firsts = Vec::new();
        let mut n = 0;
        for seq in batch.iter() {
            spans.push(n..n + seq.tokens.len());
            firsts.push(seq.cache.len());
            n += seq.tokens.len();
        }
        self.decoder_positions
            .fetch_add(n as u64, Ordering::Relaxed);
        let mut x = vec![0.0f32; n * d];
        for (s, seq) in batch.iter().enumerate() {
            let rows = spans[s].clone();
            self.embed(seq.tokens, firsts[s], &mut x[rows.start * d..rows.end * d])?;
        }
        for seq in batch.iter_mut() {
            seq.cache.push_tokens(seq.tokens)?;
        }
        let (mut q, mut k, mut v, mut a, mut o) = (
            vec![0.0; n * d],
            vec![0.0; n * d],
            vec![0.0; n * d],
            vec![0.0; n * d],
            vec![0.0; n * d],
        );
        for (l, layer) in self.decoder.iter().enumerate() {
            // Masked self-attention over the target so far.
            backend.matmul(self.m(layer.self_attn.wq), &x, n, &mut q)?;
            backend.matmul(self.m(layer.self_attn.wk), &x, n, &mut k)?;
            backend.matmul(self.m(layer.self_attn.wv), &x, n, &mut v)?;
            for (s, seq) in batch.iter_mut().enumerate() {
                for (row, pos) in spans[s].clone().zip(firsts[s]..) {
                    seq.cache.write(
                        l,
                        pos,
                        &k[row * d..(row + 1) * d],
                        &v[row * d..(row + 1) * d],
                    )?;
                }
            }
            for (s, seq) in batch.iter().enumerate() {
                let r = spans[s].clone();
                let mask = Mask::Causal { first: firsts[s] };
                backend.attention(
                    &q[r.start * d..r.end * d],
                    seq.cache,
                    l,
                    mask,
                    heads,
                    &mut a[r.start * d..r.end * d],
                )?;
            }
            backend.matmul(self.m(layer.self_attn.wo), &a, n, &mut o)?;
            self.add_norm(&mut x, &o, &layer.norm1);
            // Cross-attention to the source, with the keys and values computed at encoding.
            backend.matmul(self.m(layer.cross.wq), &x, n, &mut q)?;
            for (s, seq) in batch.iter().enumerate() {
                let r = spans[s].clone();
                backend.attention(
                    &q[r.start * d..r.end * d],
                    &seq.cross.kv,
                    l,
                    Mask::Full,
                    heads,
                    &mut a[r.start * d..r.end * d],
                )?;
            }
            backend.matmul(self.m(layer.cross.wo), &a, n, &mut o)?;
            self.add_norm(&mut x, &o, &layer.norm2);
            let f = self.ffn(backend, &x, n, &layer.ffn)?;
            self.add_norm(&mut x, &f, &layer.norm3);
        }
        // Logits with the shared embedding as the output projection.
        let mut wanted = Vec::new();
        for (s, seq) in batch.iter().enumerate() {
            match seq.logits {
                Logits::None => {}
                Logits::Last => wanted.push(spans[s].end - 1),
                Logits::All => wanted.extend(spans[s].clone()),
            }
        }
        let mut sel = Vec::with_capacity(wanted.len() * d);
        for &row in &wanted {
            sel.extend_from_slice(&x[row * d..(row + 1) * d]);
        }
        let mut logits = vec![0.0f32; wanted.len() * vocab];
        if !wanted.is_empty() {
            backend.matmul(self.m(self.embedding), &sel, wanted.len(), &mut logits)?;
        }
        let mut out = Vec::with_capacity(batch.len());
        let mut at = 0;
        for seq in batch.iter() {
            let rows = match seq.logits {
                Logits::None => 0,
                Logits::Last => 1,
                Logits::All => seq.tokens.len(),
            };
            out.push(logits[at * vocab..(at + rows) * vocab].to_vec());
            at += rows;
        }
        Ok(out)
    }
}
