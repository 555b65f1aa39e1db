//! The grouped attention kernels (`dots_heads`, `weighted_sum_heads`) against one `dots` /
//! `weighted_sum` call per head on the portable path: the same bits on every instruction set,
//! for any number of heads, keys, head sizes and column offsets.

use nextok_kernels::{dots, dots_heads, weighted_sum, weighted_sum_heads, Isa};
use proptest::prelude::*;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// A number in (-1, 1) scaled by 2^-12 to 2^12, so that any change in the order or the
    /// pairing of the additions changes the rounded result.
    fn spread(&mut self) -> f32 {
        let unit = (self.next() % 2_000_001) as f32 / 1_000_000.0 - 1.0;
        let exponent = (self.next() % 25) as i32 - 12;
        unit * 2f32.powi(exponent)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn grouped_heads_give_the_bits_of_one_call_per_head(
        heads in 1usize..8,
        keys in 0usize..23,
        width in prop::sample::select(vec![16usize, 64, 80]),
        offset in 0usize..70,
        seed in any::<u64>(),
    ) {
        let mut rng = Lcg(seed);
        let q: Vec<f32> = (0..heads * width).map(|_| rng.spread()).collect();
        let rows: Vec<Vec<f32>> = (0..keys)
            .map(|_| (0..offset + width).map(|_| rng.spread()).collect())
            .collect();
        let refs: Vec<&[f32]> = rows.iter().map(|r| &r[..]).collect();
        let probs: Vec<f32> = (0..heads * keys).map(|_| rng.spread().abs()).collect();
        let start: Vec<f32> = (0..heads * width).map(|_| rng.spread()).collect();

        // One portable call per head: the definition.
        let mut want_scores = vec![0.0f32; heads * keys];
        let mut want_sums = start.clone();
        for h in 0..heads {
            dots(
                Isa::Portable,
                &q[h * width..(h + 1) * width],
                &refs,
                offset,
                &mut want_scores[h * keys..(h + 1) * keys],
            );
            weighted_sum(
                Isa::Portable,
                &probs[h * keys..(h + 1) * keys],
                &refs,
                offset,
                &mut want_sums[h * width..(h + 1) * width],
            );
        }
        for isa in Isa::available() {
            let mut scores = vec![f32::NAN; heads * keys];
            dots_heads(isa, &q, heads, &refs, offset, &mut scores);
            let got: Vec<u32> = scores.iter().map(|s| s.to_bits()).collect();
            let want: Vec<u32> = want_scores.iter().map(|s| s.to_bits()).collect();
            prop_assert_eq!(got, want, "scores on {:?}", isa);
            let mut sums = start.clone();
            weighted_sum_heads(isa, &probs, heads, &refs, offset, &mut sums);
            let got: Vec<u32> = sums.iter().map(|s| s.to_bits()).collect();
            let want: Vec<u32> = want_sums.iter().map(|s| s.to_bits()).collect();
            prop_assert_eq!(got, want, "weighted sums on {:?}", isa);
        }
    }
}

/// The scores are the one-register reduction tree's, not a plain left-to-right sum: with these
/// lanes the two orders round differently, so a kernel that summed in order would fail here.
#[test]
fn scores_use_the_reduction_tree_not_a_running_sum() {
    // Lane l of the 16 lanes takes element l (one group of 16 numbers).
    let mut key = vec![0.0f32; 64];
    key[0] = 1.0;
    key[1] = 1e8;
    key[9] = -1e8;
    let q = vec![1.0f32; 64 * 3];
    let keys: Vec<&[f32]> = vec![&key; 5];
    // The tree adds lane 1 to lane 9 first (1e8 - 1e8 = 0), so the 1.0 of lane 0 survives. In
    // order, 1.0 + 1e8 rounds the 1.0 away and the sum is 0.
    let running: f32 = key[..16].iter().sum();
    assert_eq!(running, 0.0);
    let mut out = vec![0.0f32; 15];
    for isa in Isa::available() {
        dots_heads(isa, &q, 3, &keys, 0, &mut out);
        assert!(out.iter().all(|&s| s == 1.0), "{isa:?}: {out:?}");
    }
}
