//! Numbers: exact decimal bounds and `multipleOf`, compiled digit by digit into automata of
//! the JSON spellings they allow.

use std::cmp::Ordering;

use serde_json::Value;

use super::schema::{invalid, unsupported, NumberFacets};
use std::sync::{Arc, OnceLock};

use crate::dfa::{Dfa, Kept, IDENTITY};
use crate::Error;

/// A finite decimal: sign, integer digits (canonical, no leading zeros) and fraction digits
/// (no trailing zeros). Boxed: a schema node holds five bounds, most of them absent, and the
/// algebra copies nodes whole (an absent bound is then one null pointer, not 56 bytes).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Decimal(Box<Digits>);

/// A [`Decimal`]'s sign and digits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct Digits {
    neg: bool,
    int: String,
    frac: String,
}

impl std::ops::Deref for Decimal {
    type Target = Digits;
    fn deref(&self) -> &Digits {
        &self.0
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        // Canonical digits: a longer integer part is larger, and fractions without trailing
        // zeros compare as strings.
        let magnitude = self
            .int
            .len()
            .cmp(&other.int.len())
            .then_with(|| self.int.cmp(&other.int))
            .then_with(|| self.frac.cmp(&other.frac));
        match (self.neg, other.neg) {
            (false, false) => magnitude,
            (true, true) => magnitude.reverse(),
            (false, true) => Ordering::Greater,
            (true, false) => Ordering::Less,
        }
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Decimal {
    /// Reads a JSON number exactly (its decimal spelling, not an `f64`).
    pub(super) fn parse(v: &Value, path: &str) -> Result<Decimal, Error> {
        let Value::Number(n) = v else {
            return Err(invalid(path, "expected a number"));
        };
        Decimal::from_spelling(&n.to_string(), path)
    }

    /// Reads a JSON number's spelling exactly.
    fn from_spelling(s: &str, path: &str) -> Result<Decimal, Error> {
        let (neg, s) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (mant, exp) = match s.find(['e', 'E']) {
            Some(i) => (
                &s[..i],
                s[i + 1..]
                    .parse::<i64>()
                    .map_err(|_| invalid(path, "bad number"))?,
            ),
            None => (s, 0),
        };
        if exp.abs() > 400 {
            return Err(unsupported("number bound with exponent beyond 400", path));
        }
        let (ip, fp) = mant.split_once('.').unwrap_or((mant, ""));
        let digits: String = format!("{ip}{fp}");
        let point = ip.len() as i64 + exp;
        let (int, frac) = if point <= 0 {
            (
                String::new(),
                format!("{}{}", "0".repeat((-point) as usize), digits),
            )
        } else if point as usize >= digits.len() {
            (
                format!("{}{}", digits, "0".repeat(point as usize - digits.len())),
                String::new(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        let int = int.trim_start_matches('0').to_string();
        let int = if int.is_empty() { "0".to_string() } else { int };
        let frac = frac.trim_end_matches('0').to_string();
        let neg = neg && !(int == "0" && frac.is_empty());
        Ok(Decimal(Box::new(Digits { neg, int, frac })))
    }

    /// Whether the number is above zero.
    pub(super) fn is_positive(&self) -> bool {
        let zero = self.int == "0" && self.frac.is_empty();
        !self.neg && !zero
    }

    /// The least common multiple of two positive decimals: `x` is a multiple of both exactly
    /// when it is a multiple of this. With `a = A/10^f` and `b = B/10^f` (integers `A`, `B`),
    /// that is `lcm(A, B)/10^f`. `None` when the digits do not fit in 128 bits.
    pub(super) fn lcm(&self, other: &Decimal) -> Option<Decimal> {
        let scale = self.frac.len().max(other.frac.len());
        let scaled = |d: &Decimal| -> Option<u128> {
            let digits = format!("{}{}{}", d.int, d.frac, "0".repeat(scale - d.frac.len()));
            digits.parse().ok()
        };
        let (a, b) = (scaled(self)?, scaled(other)?);
        if a == 0 || b == 0 {
            return None;
        }
        let l = (a / gcd(a, b)).checked_mul(b)?;
        let digits = format!("{l:0>width$}", width = scale + 1);
        let (int, frac) = digits.split_at(digits.len() - scale);
        let int = int.trim_start_matches('0');
        Some(Decimal(Box::new(Digits {
            neg: false,
            int: if int.is_empty() { "0" } else { int }.to_string(),
            frac: frac.trim_end_matches('0').to_string(),
        })))
    }

    /// A regex matching exactly the JSON spellings (no exponent) of this value.
    pub(super) fn equal_regex(&self) -> String {
        let sign = if self.neg {
            "-"
        } else if self.int == "0" && self.frac.is_empty() {
            "-?"
        } else {
            ""
        };
        if self.frac.is_empty() {
            format!(r"{sign}{}(\.0+)?", self.int)
        } else {
            format!(r"{sign}{}\.{}0*", self.int, self.frac)
        }
    }
}

/// Where a number's spelling is, read so far, beside a bound `c` (see [`bound_dfa`]).
#[derive(Clone, PartialEq, Eq, Hash)]
enum Spell {
    Start,
    /// After the minus sign.
    Minus,
    /// In the integer part: `n` digits read (counted up to one more than `c`'s integer
    /// digits), `rel` how they compare with as many of `c`'s first digits (`Equal` once there
    /// are more), `zero` when the part is `0`, which takes no more digits.
    Int {
        neg: bool,
        n: usize,
        rel: Ordering,
        zero: bool,
    },
    /// Right after the point (`dot`: a digit must follow) or in the fraction, the magnitudes
    /// compared so far.
    Frac {
        neg: bool,
        dot: bool,
        mag: Mag,
    },
}

/// The magnitude read so far against `c`'s, once the integer part has ended.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Mag {
    /// Decided, whatever digits follow.
    Decided(Ordering),
    /// Equal so far, with this many fraction digits read (counted up to `c`'s).
    Equal(usize),
}

/// The comparison of a magnitude whose integer part ended after `n` digits comparing `rel`
/// with `c`'s first digits, before any fraction digit.
fn int_end(c: &Decimal, n: usize, rel: Ordering) -> Mag {
    match n.cmp(&c.int.len()) {
        Ordering::Less => Mag::Decided(Ordering::Less),
        Ordering::Greater => Mag::Decided(Ordering::Greater),
        Ordering::Equal if rel == Ordering::Equal => Mag::Equal(0),
        Ordering::Equal => Mag::Decided(rel),
    }
}

/// `mag` after one more fraction digit `d`. `c`'s fraction has no trailing zeros, so past its
/// end any nonzero digit makes the magnitude larger and zeros change nothing.
fn frac_step(c: &Decimal, mag: Mag, d: u8) -> Mag {
    match mag {
        Mag::Decided(o) => Mag::Decided(o),
        Mag::Equal(i) => match c.frac.as_bytes().get(i) {
            Some(&f) if d == f => Mag::Equal(i + 1),
            Some(&f) => Mag::Decided(d.cmp(&f)),
            None if d == b'0' => Mag::Equal(i),
            None => Mag::Decided(Ordering::Greater),
        },
    }
}

/// The magnitude's comparison when the spelling ends with `mag`: a fraction that stopped
/// short of `c`'s (whose last digit is not zero) is smaller.
fn mag_end(c: &Decimal, mag: Mag) -> Ordering {
    match mag {
        Mag::Decided(o) => o,
        Mag::Equal(i) if i < c.frac.len() => Ordering::Less,
        Mag::Equal(_) => Ordering::Equal,
    }
}

/// The value `x` (sign `neg`, magnitude comparing `mag` with `c`'s) against `c`. `-0` is
/// zero, and only a zero `c` can equal it (`c.neg` is never set on zero).
fn value_cmp(c: &Decimal, neg: bool, mag: Ordering) -> Ordering {
    let c_zero = c.int == "0" && c.frac.is_empty();
    match (neg, c.neg) {
        (false, false) => mag,
        (true, true) => mag.reverse(),
        (false, true) => Ordering::Greater,
        (true, false) if c_zero && mag == Ordering::Equal => Ordering::Equal,
        (true, false) => Ordering::Less,
    }
}

/// Spellings of numbers `>= c` (`lower`; else `<= c`; `strict`: `> c` or `< c`), JSON's
/// without an exponent: `-?(0|[1-9][0-9]*)(\.[0-9]+)?`. Built digit by digit, comparing
/// with `c`'s digits as they come, so that a bound of hundreds of digits (`1.79769e308`) is
/// a few states per digit; as a regular expression, its determinization took milliseconds.
/// Kept process-wide per bound: schemas repeat their bounds.
fn bound_dfa(c: &Decimal, lower: bool, strict: bool) -> Result<Arc<Dfa>, Error> {
    static KEPT: OnceLock<Kept<(Decimal, bool, bool), Arc<Dfa>>> = OnceLock::new();
    KEPT.get_or_init(|| Kept::new(256))
        .get_or_try(&(c.clone(), lower, strict), || {
            bound_dfa_built(c, lower, strict).map(Arc::new)
        })
}

/// [`bound_dfa`], built.
fn bound_dfa_built(c: &Decimal, lower: bool, strict: bool) -> Result<Dfa, Error> {
    let cint = c.int.as_bytes();
    let digit = |n: usize, rel: Ordering, d: u8| -> (usize, Ordering) {
        match cint.get(n) {
            Some(&x) if rel == Ordering::Equal => (n + 1, d.cmp(&x)),
            Some(_) => (n + 1, rel),
            // Longer than `c`'s integer part: larger whatever the digits.
            None => (cint.len() + 1, Ordering::Equal),
        }
    };
    let next = |s: &Spell, b: u8| -> Option<Spell> {
        let is_digit = b.is_ascii_digit();
        match *s {
            Spell::Start if b == b'-' => Some(Spell::Minus),
            Spell::Start | Spell::Minus if is_digit => {
                let neg = *s == Spell::Minus;
                let (n, rel) = digit(0, Ordering::Equal, b);
                Some(Spell::Int {
                    neg,
                    n,
                    rel,
                    zero: b == b'0',
                })
            }
            Spell::Int { neg, n, rel, .. } if b == b'.' => Some(Spell::Frac {
                neg,
                dot: true,
                mag: int_end(c, n, rel),
            }),
            Spell::Int {
                neg,
                n,
                rel,
                zero: false,
            } if is_digit => {
                let (n, rel) = digit(n, rel, b);
                Some(Spell::Int {
                    neg,
                    n,
                    rel,
                    zero: false,
                })
            }
            Spell::Frac { neg, mag, .. } if is_digit => Some(Spell::Frac {
                neg,
                dot: false,
                mag: frac_step(c, mag, b),
            }),
            _ => None,
        }
    };
    let accept = |s: &Spell| -> bool {
        let (neg, mag) = match *s {
            Spell::Int { neg, n, rel, .. } => (neg, mag_end(c, int_end(c, n, rel))),
            Spell::Frac {
                neg,
                dot: false,
                mag,
            } => (neg, mag_end(c, mag)),
            _ => return false,
        };
        match (value_cmp(c, neg, mag), lower, strict) {
            (Ordering::Equal, _, strict) => !strict,
            (Ordering::Greater, lower, _) => lower,
            (Ordering::Less, lower, _) => !lower,
        }
    };
    // Each digit, the sign and the point apart; every other byte alike.
    let mut classes = [0u8; 256];
    for (i, b) in (b'0'..=b'9').chain([b'-', b'.']).enumerate() {
        classes[b as usize] = i as u8 + 1;
    }
    Dfa::explore(Spell::Start, next, accept, "number bound", &classes)
}

/// The automaton of number spellings allowed by a numeric schema (`integer`: only
/// integer-valued numbers).
pub(super) fn number_dfa(f: &NumberFacets, integer: bool, path: &str) -> Result<Dfa, Error> {
    let bounded = f.minimum.is_some()
        || f.maximum.is_some()
        || f.exclusive_minimum.is_some()
        || f.exclusive_maximum.is_some()
        || f.multiple_of.is_some();
    let mut integer = integer;
    // Multiples of an integer are integers. An integer x is a multiple of p/10^f exactly when
    // p / gcd(p, 10^f) divides x; a number x is one exactly when x * 10^f is an integer that
    // p divides, which `decimal_multiple_dfa` follows digit by digit.
    let mut fractional = false;
    if let Some(k) = &f.multiple_of {
        if !k.is_positive() {
            return Err(invalid(path, "multipleOf must be positive"));
        }
        if k.frac.is_empty() {
            integer = true;
        } else if !integer {
            fractional = true;
        }
    }
    let mut d = if integer {
        Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.0+)?")?
    } else if bounded {
        Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")?
    } else {
        Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")?
    };
    if f.not_integer {
        if integer {
            return Ok(Dfa::empty());
        }
        // Non-integers written without exponent (an exponent could make any spelling an
        // integer: refusing them is stricter, never looser).
        d = d.intersect(&Dfa::from_regex(r"-?(0|[1-9][0-9]*)\.[0-9]*[1-9][0-9]*")?)?;
    }
    for (bound, lower, strict) in [
        (&f.minimum, true, false),
        (&f.maximum, false, false),
        (&f.exclusive_minimum, true, true),
        (&f.exclusive_maximum, false, true),
    ] {
        if let Some(c) = bound {
            d = d.intersect(&*bound_dfa(c, lower, strict)?)?;
        }
    }
    if let Some(k) = &f.multiple_of {
        let num: u128 = format!("{}{}", k.int, k.frac)
            .parse()
            .map_err(|_| unsupported("multipleOf (too large)", path))?;
        let den: u128 = 10u128
            .checked_pow(k.frac.len() as u32)
            .ok_or_else(|| unsupported("multipleOf (too precise)", path))?;
        if fractional {
            let digits = k.frac.len();
            if num * (digits as u128 + 3) > 300_000 {
                return Err(unsupported("multipleOf (above 300000 states)", path));
            }
            d = d.intersect(&decimal_multiple_dfa(num as u64, digits)?)?;
        } else {
            let g = gcd(num, den);
            let p = num / g;
            if p > 100_000 {
                return Err(unsupported("multipleOf (above 100000)", path));
            }
            d = d.intersect(&multiple_dfa(p as u64)?)?;
        }
    }
    Ok(d)
}

fn gcd(a: u128, b: u128) -> u128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Integer spellings (optional `-`, optional `.0+`) of multiples of `p`.
fn multiple_dfa(p: u64) -> Result<Dfa, Error> {
    #[derive(Clone, Hash, PartialEq, Eq)]
    enum S {
        Start,
        Minus,
        Zero,
        Digits(u64),
        Dot(u64),
        Frac(u64),
    }
    Dfa::explore(
        S::Start,
        |s, b| match (s, b) {
            (S::Start, b'-') => Some(S::Minus),
            (S::Start | S::Minus, b'0') => Some(S::Zero),
            (S::Start | S::Minus, b'1'..=b'9') => Some(S::Digits((b - b'0') as u64 % p)),
            (S::Digits(r), b'0'..=b'9') => Some(S::Digits((r * 10 + (b - b'0') as u64) % p)),
            (S::Zero, b'.') => Some(S::Dot(0)),
            (S::Digits(r), b'.') => Some(S::Dot(*r)),
            (S::Dot(r) | S::Frac(r), b'0') => Some(S::Frac(*r)),
            _ => None,
        },
        |s| matches!(s, S::Zero | S::Digits(0) | S::Frac(0)),
        "multipleOf",
        &IDENTITY,
    )
}

/// Number spellings without exponent (optional `-`) of multiples of `p / 10^f`: `x` is one
/// when `x * 10^f`, an integer (fraction digits past the `f`-th all zero), is divisible by `p`.
fn decimal_multiple_dfa(p: u64, f: usize) -> Result<Dfa, Error> {
    #[derive(Clone, Hash, PartialEq, Eq)]
    enum S {
        Start,
        Minus,
        Zero,
        /// The integer part's remainder modulo `p`.
        Digits(u64),
        Dot(u64),
        /// The remainder of the integer part and the first `j` fraction digits, `1 <= j <= f`.
        Frac(u64, usize),
        /// Past the `f`-th fraction digit: only zeros follow.
        Zeros(u64),
    }
    // 10^i mod p, for the fraction digits not written (they count as zeros).
    let mut pow = vec![1 % p];
    for i in 1..=f {
        pow.push(pow[i - 1] * 10 % p);
    }
    let digit = |r: u64, b: u8| (r * 10 + (b - b'0') as u64) % p;
    Dfa::explore(
        S::Start,
        |s, b| match (s, b) {
            (S::Start, b'-') => Some(S::Minus),
            (S::Start | S::Minus, b'0') => Some(S::Zero),
            (S::Start | S::Minus, b'1'..=b'9') => Some(S::Digits(digit(0, b))),
            (S::Digits(r), b'0'..=b'9') => Some(S::Digits(digit(*r, b))),
            (S::Zero, b'.') => Some(S::Dot(0)),
            (S::Digits(r), b'.') => Some(S::Dot(*r)),
            (S::Dot(r), b'0'..=b'9') => Some(S::Frac(digit(*r, b), 1)),
            (S::Frac(r, j), b'0'..=b'9') if *j < f => Some(S::Frac(digit(*r, b), j + 1)),
            (S::Frac(r, _) | S::Zeros(r), b'0') => Some(S::Zeros(*r)),
            _ => None,
        },
        |s| match s {
            S::Zero => true,
            S::Digits(r) => r * pow[f] % p == 0,
            S::Frac(r, j) => r * pow[f - j] % p == 0,
            S::Zeros(r) => *r == 0,
            _ => false,
        },
        "multipleOf",
        &IDENTITY,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::schema::{Document, Schema};
    use serde_json::json;

    fn num(schema: Value) -> Dfa {
        let integer = schema.get("type") == Some(&json!("integer"));
        let doc = Document::parse(&schema).unwrap();
        let Schema::Node(node) = &doc.root else {
            panic!("{schema} is not a node")
        };
        number_dfa(&node.number, integer, "#").unwrap()
    }

    #[test]
    fn decimals_order_by_value() {
        let d = |v: Value| Decimal::parse(&v, "#").unwrap();
        let sorted = [
            json!(-100),
            json!(-2.5),
            json!(-2),
            json!(-0.25),
            json!(0),
            json!(0.125),
            json!(0.5),
            json!(1),
            json!(9.99),
            json!(10),
            json!(1e3),
        ];
        for (i, a) in sorted.iter().enumerate() {
            for (j, b) in sorted.iter().enumerate() {
                assert_eq!(d(a.clone()).cmp(&d(b.clone())), i.cmp(&j), "{a} vs {b}");
            }
        }
        assert_eq!(d(json!(-0.0)), d(json!(0)));
    }

    #[test]
    fn numeric_bounds_against_arithmetic() {
        let cases = [
            json!({"minimum": 1.1}),
            json!({"minimum": -2}),
            json!({"maximum": 3.0}),
            json!({"exclusiveMaximum": 3.0}),
            json!({"exclusiveMinimum": -1.25}),
            json!({"minimum": 0, "maximum": 100}),
            json!({"exclusiveMinimum": 0}),
            json!({"maximum": -0.5}),
            json!({"minimum": 12, "exclusiveMaximum": 1000}),
        ];
        let samples = [
            "0", "-0", "1", "1.1", "1.10", "1.09", "1.2", "2", "-2", "-2.0", "-2.01", "-1.99", "3",
            "3.0", "2.999", "3.01", "-1.25", "-1.250", "-1.24", "-1.3", "100", "100.5", "99.99",
            "-0.5", "-0.49", "-0.51", "12", "11.9", "999", "999.99", "1000", "1000.0", "10", "0.0",
        ];
        for case in cases {
            let d = num(case.clone());
            for s in samples {
                let x: f64 = s.parse().unwrap();
                let m = case.as_object().unwrap();
                let ok = m.iter().all(|(k, v)| {
                    let c = v.as_f64().unwrap();
                    match k.as_str() {
                        "minimum" => x >= c,
                        "maximum" => x <= c,
                        "exclusiveMinimum" => x > c,
                        "exclusiveMaximum" => x < c,
                        _ => unreachable!(),
                    }
                });
                assert_eq!(d.matches(s.as_bytes()), ok, "{case} on {s}");
            }
        }
    }

    /// The bound automata against `Decimal`'s exact order, on seeded random bounds and
    /// spellings: long integer parts (a bound of 309 digits, `1.79769e308`, beside spellings
    /// of 308 to 310), fractions that stop short of the bound's or run past it with zeros,
    /// `-0`, and digits that agree with the bound's for a while.
    #[test]
    fn bound_automata_follow_decimal_order() {
        use rand_chacha::ChaCha8Rng;
        use rand_core::{RngCore, SeedableRng};
        let mut rng = ChaCha8Rng::seed_from_u64(17);
        let mut pick = |n: usize| rng.next_u32() as usize % n;
        // A spelling near `base` (digits of a bound): mostly its digits, some changed, cut
        // or lengthened, with a fraction of its own.
        let mut near = |int: &str, frac: &str| -> String {
            let mut i: Vec<u8> = int.bytes().collect();
            match pick(4) {
                0 => i.truncate(1 + pick(i.len())),
                1 => i.extend((0..1 + pick(3)).map(|_| b'0' + pick(10) as u8)),
                _ => {}
            }
            for d in i.iter_mut() {
                if pick(8) == 0 {
                    *d = b'0' + pick(10) as u8;
                }
            }
            if i.len() > 1 && i[0] == b'0' {
                i[0] = b'1' + pick(9) as u8;
            }
            let mut out = String::from_utf8(i).unwrap();
            if pick(2) == 0 {
                let mut f: Vec<u8> = frac.bytes().collect();
                if pick(3) == 0 {
                    f.truncate(pick(f.len() + 1));
                }
                for d in f.iter_mut() {
                    if pick(6) == 0 {
                        *d = b'0' + pick(10) as u8;
                    }
                }
                f.extend((0..pick(3)).map(|_| {
                    if pick(2) == 0 {
                        b'0'
                    } else {
                        b'0' + pick(10) as u8
                    }
                }));
                if !f.is_empty() {
                    out = format!("{out}.{}", String::from_utf8(f).unwrap());
                }
            }
            if pick(3) == 0 {
                out = format!("-{out}");
            }
            out
        };
        let bounds = [
            "0",
            "-0",
            "1",
            "-1",
            "0.5",
            "-0.25",
            "10",
            "99.99",
            "-100.001",
            "1e3",
            "1.79769e308",
            "-1.79769e308",
            "9007199254740991",
            "-2147483648",
            "0.000125",
            "123456789.987654321",
        ];
        for b in bounds {
            let c = Decimal::from_spelling(b, "#").unwrap();
            let spellings: Vec<String> = (0..400)
                .map(|_| near(&c.int, &c.frac))
                .chain(["0", "-0", "0.0", "-0.000", "1", "-1"].map(String::from))
                .collect();
            for lower in [true, false] {
                for strict in [false, true] {
                    let d = bound_dfa_built(&c, lower, strict).unwrap();
                    for s in &spellings {
                        let x = Decimal::from_spelling(s, "#").unwrap();
                        let want = match (x.cmp(&c), lower) {
                            (Ordering::Equal, _) => !strict,
                            (o, true) => o == Ordering::Greater,
                            (o, false) => o == Ordering::Less,
                        };
                        assert_eq!(
                            d.matches(s.as_bytes()),
                            want,
                            "{s} against {b} (lower {lower}, strict {strict})"
                        );
                    }
                    for bad in ["", "-", "01", "1.", ".5", "--1", "1e5", "0x1", "-.5", "00"] {
                        assert!(!d.matches(bad.as_bytes()), "{bad:?} against {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn least_common_multiples_of_decimals() {
        let d = |v: Value| Decimal::parse(&v, "#").unwrap();
        for (a, b, want) in [
            (json!(2), json!(3), json!(6)),
            (json!(4), json!(6), json!(12)),
            (json!(0.5), json!(0.75), json!(1.5)),
            (json!(0.01), json!(3), json!(3)),
            (json!(2.5), json!(2.5), json!(2.5)),
            (json!(0.2), json!(0.3), json!(0.6)),
        ] {
            assert_eq!(d(a.clone()).lcm(&d(b.clone())), Some(d(want)), "{a} {b}");
        }
    }

    #[test]
    fn decimal_multiples_on_numbers() {
        // Against exact arithmetic in thousandths: x is a multiple of k exactly when the
        // integer x * 1000 is a multiple of k * 1000.
        for (k, k1000) in [(json!(1.5), 1500i64), (json!(0.25), 250), (json!(0.001), 1)] {
            let d = num(json!({"multipleOf": k}));
            for x in -3100i64..3100 {
                let text = format!(
                    "{}{}.{:03}",
                    if x < 0 { "-" } else { "" },
                    x.abs() / 1000,
                    x.abs() % 1000
                );
                assert_eq!(d.matches(text.as_bytes()), x % k1000 == 0, "{k} on {text}");
            }
            // Trailing zeros past the multiple's precision change nothing; other digits do.
            assert!(d.matches(b"3.0000") && !d.matches(b"3.00001"), "{k}");
        }
    }

    #[test]
    fn integer_multiples() {
        let d = num(json!({"type": "integer", "multipleOf": 3}));
        for x in -40i64..40 {
            assert_eq!(d.matches(x.to_string().as_bytes()), x % 3 == 0, "{x}");
        }
        assert!(d.matches(b"9.0") && !d.matches(b"9.5"));
        let half = num(json!({"type": "integer", "multipleOf": 1.5}));
        assert!(half.matches(b"3") && !half.matches(b"2"));
    }
}
