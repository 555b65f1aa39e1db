//! Numerically stable softmax and log-softmax.
//!
//! Every function subtracts the largest logit before exponentiating, so logits of ±1e4 never
//! overflow, and a `-inf` logit (a masked token) gets a probability of exactly 0. The exponential
//! is our own polynomial ([`exp_nonpositive`]) rather than the platform's `expf`, for two reasons:
//! it gives bit-identical results on every platform (the C libraries' `expf` differ in the last
//! bit, which could change a sampled token), and it is written so that the compiler vectorises it.

use crate::Error;

/// `e^x` for `x <= 0` (including `-inf`, which gives exactly 0), to about 2 units in the last place.
///
/// Inputs below about -87.3, where `e^x` leaves the normal `f32` range, give 0. Positive inputs are
/// not supported (softmax never needs them) and are clamped to 0, giving 1.
#[inline]
pub fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split in a high part with few significant bits and a low correction, so that
    // `n * LN2_HI` is exact and the reduced argument keeps full precision (Cody and Waite).
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // Adding and subtracting 1.5 * 2^23 rounds to the nearest integer without a rounding
    // instruction, which SSE2 (the baseline x86-64 target) lacks.
    const ROUND: f32 = 12_582_912.0;
    let underflow = x < -87.0;
    let x = x.clamp(-87.0, 0.0);
    let n = (x * LOG2E + ROUND) - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    // Degree-6 Taylor polynomial of e^r on |r| <= ln(2)/2, in Horner form.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // n is in [-126, 0], so 2^n is a normal float built directly from its exponent bits.
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    if underflow {
        0.0
    } else {
        p * scale
    }
}

/// Checks that no logit is NaN or `+inf`, and returns the largest one (`-inf` if all are `-inf`).
pub(crate) fn checked_max(logits: &[f32]) -> Result<f32, Error> {
    let mut max = f32::NEG_INFINITY;
    let mut bad = false;
    for &z in logits {
        // Bitwise-or rather than early return keeps the loop branch-free, so it vectorises.
        bad |= z.is_nan() | (z == f32::INFINITY);
        max = if z > max { z } else { max };
    }
    if bad {
        let index = logits
            .iter()
            .position(|z| z.is_nan() || *z == f32::INFINITY)
            .unwrap_or(0);
        return Err(Error::InvalidLogit {
            index,
            value: logits[index],
        });
    }
    Ok(max)
}

/// Sum of `e^(z - max)` over `logits`, accumulated in `f64` over four lanes (a fixed order, so the
/// result is the same on every platform).
pub(crate) fn sum_exp(logits: &[f32], max: f32) -> f64 {
    let mut acc = [0.0f64; 4];
    let chunks = logits.chunks_exact(4);
    let rest = chunks.remainder();
    for c in chunks {
        for lane in 0..4 {
            acc[lane] += exp_nonpositive(c[lane] - max) as f64;
        }
    }
    for (lane, &z) in rest.iter().enumerate() {
        acc[lane] += exp_nonpositive(z - max) as f64;
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// `ln(sum_j e^(z_j))`, computed stably. Errors on NaN or `+inf` logits and when every logit is
/// `-inf` (or there are none).
pub fn log_sum_exp(logits: &[f32]) -> Result<f64, Error> {
    let max = checked_max(logits)?;
    if max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates {
            vocab: logits.len(),
        });
    }
    Ok(max as f64 + sum_exp(logits, max).ln())
}

/// Softmax: `p_k = e^(z_k) / sum_j e^(z_j)`, computed stably.
///
/// `-inf` logits get exactly 0. NaN or `+inf` logits are an [`Error::InvalidLogit`]; empty or
/// all-`-inf` logits are an [`Error::NoCandidates`].
///
/// ```
/// let p = nextok_sampling::softmax(&[6.2, 4.9, 2.1, 1.0]).unwrap();
/// assert!((p[0] - 0.772).abs() < 5e-4);
/// let masked = nextok_sampling::softmax(&[1e4, f32::NEG_INFINITY, -1e4]).unwrap();
/// assert_eq!(masked, vec![1.0, 0.0, 0.0]);
/// ```
pub fn softmax(logits: &[f32]) -> Result<Vec<f32>, Error> {
    let mut out = vec![0.0; logits.len()];
    softmax_into(logits, &mut out)?;
    Ok(out)
}

/// [`softmax`] writing into `out`, which must have the same length as `logits`.
///
/// # Panics
/// If `out.len() != logits.len()` (a programming error, not bad data).
pub fn softmax_into(logits: &[f32], out: &mut [f32]) -> Result<(), Error> {
    assert_eq!(logits.len(), out.len(), "softmax_into: length mismatch");
    let max = checked_max(logits)?;
    if max == f32::NEG_INFINITY {
        return Err(Error::NoCandidates {
            vocab: logits.len(),
        });
    }
    for (o, &z) in out.iter_mut().zip(logits) {
        *o = exp_nonpositive(z - max);
    }
    let sum = sum_exp(logits, max);
    let inv = (1.0 / sum) as f32;
    for o in out.iter_mut() {
        *o *= inv;
    }
    Ok(())
}

/// Log-softmax: `ln p_k = z_k - ln(sum_j e^(z_j))`, computed stably. `-inf` logits give `-inf`.
///
/// Errors as [`softmax`].
///
/// ```
/// let lp = nextok_sampling::log_softmax(&[1e4, 0.0]).unwrap();
/// assert_eq!(lp[0], 0.0);
/// assert_eq!(lp[1], -1e4);
/// ```
pub fn log_softmax(logits: &[f32]) -> Result<Vec<f32>, Error> {
    let lse = log_sum_exp(logits)?;
    Ok(logits.iter().map(|&z| (z as f64 - lse) as f32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std_to_a_few_ulps() {
        let mut x = -87.0f32;
        while x <= 0.0 {
            let want = (x as f64).exp();
            let got = exp_nonpositive(x) as f64;
            assert!(
                ((got - want) / want).abs() < 4e-7,
                "x = {x}: got {got}, want {want}"
            );
            x += 0.001_37;
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(-1e30), 0.0);
    }

    #[test]
    fn no_overflow_at_plus_minus_1e4() {
        let p = softmax(&[1e4, 1e4, -1e4]).unwrap();
        assert_eq!(p, vec![0.5, 0.5, 0.0]);
        let lp = log_softmax(&[-1e4, -1e4]).unwrap();
        assert!((lp[0] - (-std::f32::consts::LN_2)).abs() < 1e-6);
    }

    #[test]
    fn bad_logits_are_typed_errors() {
        assert!(matches!(
            softmax(&[0.0, f32::NAN]),
            Err(Error::InvalidLogit { index: 1, .. })
        ));
        assert!(matches!(
            softmax(&[f32::INFINITY]),
            Err(Error::InvalidLogit { index: 0, .. })
        ));
        assert_eq!(
            softmax(&[f32::NEG_INFINITY; 3]),
            Err(Error::NoCandidates { vocab: 3 })
        );
        assert_eq!(softmax(&[]), Err(Error::NoCandidates { vocab: 0 }));
    }
}
