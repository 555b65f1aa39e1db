//! Numerically stable softmax and log-softmax.
//!
//! Every function subtracts the largest logit before exponentiating, so logits of ±1e4 never
//! overflow, and a `-inf` logit (a masked token) gets a probability of exactly 0. The exponential
//! is our own polynomial ([`exp_nonpositive`]) rather than the platform's `expf`, for two reasons:
//! it gives bit-identical results on every platform (the C libraries' `expf` differ in the last
//! bit, which could change a sampled token), and it is written so that the compiler vectorises it.

use crate::Error;

/// Defines `$name`, which runs `$generic` compiled for AVX2 when the CPU has it and as baseline
/// code otherwise. Both compute the same IEEE operations lane by lane in the same order (Rust
/// never fuses a multiply and an add on its own), so the results are bit-identical; AVX2 only
/// processes twice as many lanes per instruction as the SSE2 baseline.
macro_rules! dispatch_avx2 {
    ($(#[$m:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $generic:path;) => {
        $(#[$m])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2")]
                unsafe fn avx2($($arg: $ty),*) -> $ret {
                    $generic($($arg),*)
                }
                if std::arch::is_x86_feature_detected!("avx2") {
                    // SAFETY: the CPU supports AVX2, as checked on the line above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            $generic($($arg),*)
        }
    };
}
pub(crate) use dispatch_avx2;

/// `e^x` for `x <= 0` (including `-inf`, which gives exactly 0), to about 2 units in the last place.
///
/// Inputs below about -87.3, where `e^x` leaves the normal `f32` range, give 0. Positive inputs are
/// not supported (softmax never needs them) and are clamped to 0, giving 1.
#[inline(always)]
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
    // After adding ROUND, the low mantissa bits of `t` hold n = round(x * log2 e) as an integer
    // (offset by ROUND's own bits), so 2^n is built with integer arithmetic only and no
    // float-to-int conversion, which keeps the function vectorisable.
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    // Degree-6 Taylor polynomial of e^r on |r| <= ln(2)/2, in Horner form.
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // n is in [-126, 0], so 2^n is a normal float built directly from its exponent bits.
    let n_int = t.to_bits().wrapping_sub(ROUND.to_bits()) as i32;
    let scale = f32::from_bits(((n_int + 127) as u32) << 23);
    if underflow {
        0.0
    } else {
        p * scale
    }
}

/// What one pass over the logits learns: the largest logit, and whether any is `-inf`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scan {
    /// The largest logit (`-inf` if all are `-inf` or there are none).
    pub max: f32,
    /// Whether some logit is `-inf` (a masked token).
    pub any_neg_inf: bool,
}

/// Checks that no logit is NaN or `+inf`, and finds the largest one and whether any is `-inf`.
pub(crate) fn scan(logits: &[f32]) -> Result<Scan, Error> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, as checked on the line above.
        let (max, finite) = unsafe { crate::x86::max_and_finite(logits) };
        if finite {
            return Ok(Scan {
                max,
                any_neg_inf: false,
            });
        }
        // Some logit is not finite: the portable pass says which, and whether it is allowed.
    }
    scan_avx2_or_generic(logits)
}

dispatch_avx2! {
    fn scan_avx2_or_generic(logits: &[f32]) -> Result<Scan, Error> = scan_generic;
}

/// Checks that no logit is NaN or `+inf` and returns the largest one (`-inf` if all are `-inf`).
pub(crate) fn checked_max(logits: &[f32]) -> Result<f32, Error> {
    scan(logits).map(|s| s.max)
}

#[inline(always)]
fn scan_generic(logits: &[f32]) -> Result<Scan, Error> {
    // One running maximum per lane, so that the comparisons do not form a single dependency
    // chain and the loop vectorises. Flags are or-ed, not returned early, for the same reason.
    let mut max = [f32::NEG_INFINITY; LANES];
    let mut bad = [false; LANES];
    let mut neg_inf = [false; LANES];
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            let z = c[i];
            bad[i] |= z.is_nan() | (z == f32::INFINITY);
            neg_inf[i] |= z == f32::NEG_INFINITY;
            max[i] = if z > max[i] { z } else { max[i] };
        }
    }
    for (i, &z) in rest.iter().enumerate() {
        bad[i] |= z.is_nan() | (z == f32::INFINITY);
        neg_inf[i] |= z == f32::NEG_INFINITY;
        max[i] = if z > max[i] { z } else { max[i] };
    }
    if bad.iter().any(|&b| b) {
        let index = logits
            .iter()
            .position(|z| z.is_nan() || *z == f32::INFINITY)
            .unwrap_or(0);
        return Err(Error::InvalidLogit {
            index,
            value: logits[index],
        });
    }
    Ok(Scan {
        max: max
            .iter()
            .fold(f32::NEG_INFINITY, |m, &x| if x > m { x } else { m }),
        any_neg_inf: neg_inf.iter().any(|&b| b),
    })
}

/// Lanes processed together by the exponential: enough for the compiler to use the widest
/// vectors of the target.
pub(crate) const LANES: usize = 16;

/// `e^x` of `LANES` values at once, written so that the compiler vectorises it.
#[inline(always)]
pub(crate) fn exp_lanes(x: &[f32; LANES]) -> [f32; LANES] {
    let mut e = [0.0f32; LANES];
    for i in 0..LANES {
        e[i] = exp_nonpositive(x[i]);
    }
    e
}

/// Sum of `LANES` values as a fixed tree, so the result does not depend on the platform.
#[inline(always)]
pub(crate) fn sum_lanes(e: &[f32; LANES]) -> f64 {
    let mut s = [0.0f32; 4];
    for i in 0..4 {
        s[i] = (e[i] + e[i + 4]) + (e[i + 8] + e[i + 12]);
    }
    ((s[0] + s[1]) + (s[2] + s[3])) as f64
}

dispatch_avx2! {
    /// Sum of `e^(z - max)` over `logits`. Each block of `LANES` values is summed in `f32` and
    /// the blocks in `f64`, in a fixed order, so the result is the same on every platform and
    /// accurate to about 1e-7 relative even over 256k tokens.
    pub(crate) fn sum_exp(logits: &[f32], max: f32) -> f64 = sum_exp_generic;
}

#[inline(always)]
fn sum_exp_generic(logits: &[f32], max: f32) -> f64 {
    let mut total = 0.0f64;
    let chunks = logits.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        let mut x = [0.0f32; LANES];
        for i in 0..LANES {
            x[i] = c[i] - max;
        }
        total += sum_lanes(&exp_lanes(&x));
    }
    for &z in rest {
        total += exp_nonpositive(z - max) as f64;
    }
    total
}

dispatch_avx2! {
    /// Writes `e^(z - max)` of every logit to `out` and returns their sum (as [`sum_exp`]).
    fn exp_into(logits: &[f32], max: f32, out: &mut [f32]) -> f64 = exp_into_generic;
}

#[inline(always)]
fn exp_into_generic(logits: &[f32], max: f32, out: &mut [f32]) -> f64 {
    let mut sum = 0.0f64;
    let mut out_chunks = out.chunks_exact_mut(LANES);
    let mut in_chunks = logits.chunks_exact(LANES);
    for (o, z) in (&mut out_chunks).zip(&mut in_chunks) {
        let mut x = [0.0f32; LANES];
        for i in 0..LANES {
            x[i] = z[i] - max;
        }
        let e = exp_lanes(&x);
        o.copy_from_slice(&e);
        sum += sum_lanes(&e);
    }
    for (o, &z) in out_chunks
        .into_remainder()
        .iter_mut()
        .zip(in_chunks.remainder())
    {
        *o = exp_nonpositive(z - max);
        sum += *o as f64;
    }
    sum
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
    let sum = exp_into(logits, max, out);
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
    fn vectorised_dispatch_gives_the_same_bits_as_baseline_code() {
        // The test module is compiled for the baseline target, so the `_generic` functions
        // called directly here are the SSE2 (or non-x86) code, while the dispatched ones use AVX2
        // where the CPU has it. Determinism across machines needs both to agree bit for bit.
        let mut x = 0x2545_f491_u32;
        let logits: Vec<f32> = (0..4099)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                (x % 40_000) as f32 / 1000.0 - 20.0
            })
            .collect();
        let max = checked_max(&logits).unwrap();
        assert_eq!(max, checked_max_generic_for_test(&logits));
        assert_eq!(
            sum_exp(&logits, max).to_bits(),
            sum_exp_generic(&logits, max).to_bits()
        );
        let (mut a, mut b) = (vec![0.0; logits.len()], vec![0.0; logits.len()]);
        let sa = exp_into(&logits, max, &mut a);
        let sb = exp_into_generic(&logits, max, &mut b);
        assert_eq!(sa.to_bits(), sb.to_bits());
        assert!(a.iter().zip(&b).all(|(p, q)| p.to_bits() == q.to_bits()));
    }

    fn checked_max_generic_for_test(logits: &[f32]) -> f32 {
        scan_generic(logits).unwrap().max
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
