//! Logits for the sampling property tests, drawn from a seed.
#![allow(dead_code)]

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// How a case's logits are made: drawn from a seed rather than generated element by element,
/// so that a 256k-token vocabulary costs milliseconds, not proptest value trees.
#[derive(Debug, Clone)]
pub struct LogitsSpec {
    pub vocab: usize,
    pub seed: u64,
    /// Logits are uniform in `[-scale, scale]`.
    pub scale: f32,
    /// Round to a grid of 0.25, which creates many exact ties.
    pub grid: bool,
    /// Make about a tenth of the tokens `-inf` (token 0 always stays finite).
    pub masked: bool,
}

impl LogitsSpec {
    pub fn logits(&self) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        (0..self.vocab)
            .map(|i| {
                let u = (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
                let z = self.scale * (2.0 * u - 1.0);
                let z = if self.grid {
                    (z * 4.0).round() / 4.0
                } else {
                    z
                };
                if self.masked && i > 0 && rng.next_u64() % 10 == 0 {
                    f32::NEG_INFINITY
                } else {
                    z
                }
            })
            .collect()
    }
}
