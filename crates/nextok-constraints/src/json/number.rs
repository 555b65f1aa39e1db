//! Numbers: exact decimal bounds and `multipleOf`, compiled digit by digit into automata of
//! the JSON spellings they allow.

use std::cmp::Ordering;

use serde_json::Value;

use super::schema::{invalid, unsupported, NumberFacets};
use crate::dfa::{Dfa, IDENTITY};
use crate::Error;

/// A finite decimal: sign, integer digits (canonical, no leading zeros) and fraction digits
/// (no trailing zeros).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Decimal {
    neg: bool,
    int: String,
    frac: String,
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
        let s = n.to_string();
        let (neg, s) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s.as_str()),
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
        Ok(Decimal { neg, int, frac })
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
        Some(Decimal {
            neg: false,
            int: if int.is_empty() { "0" } else { int }.to_string(),
            frac: frac.trim_end_matches('0').to_string(),
        })
    }

    fn negate(&self) -> Decimal {
        let zero = self.int == "0" && self.frac.is_empty();
        Decimal {
            neg: !self.neg && !zero,
            ..self.clone()
        }
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

fn alt(parts: Vec<String>) -> String {
    if parts.is_empty() {
        "[^\\x00-\\x{10FFFF}]".to_string()
    } else {
        format!("(?:{})", parts.join("|"))
    }
}

fn digit_class(lo: u8, hi: u8) -> String {
    if lo == hi {
        (lo as char).to_string()
    } else {
        format!("[{}-{}]", lo as char, hi as char)
    }
}

/// Canonical numerals (no leading zeros) of the same length as `a` and not below it.
fn same_len_ge(a: &[u8], first: bool) -> Vec<String> {
    if a.is_empty() {
        return vec![String::new()];
    }
    let mut out = Vec::new();
    let rest = a.len() - 1;
    let lo = a[0] + 1;
    if lo <= b'9' {
        out.push(format!(
            "{}[0-9]{{{rest}}}",
            digit_class(lo.max(if first && rest > 0 { b'1' } else { b'0' }), b'9')
        ));
    }
    for tail in same_len_ge(&a[1..], false) {
        out.push(format!("{}{}", a[0] as char, tail));
    }
    out
}

/// Canonical numerals of the same length as `a` and below it.
fn same_len_lt(a: &[u8], first: bool) -> Vec<String> {
    if a.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let rest = a.len() - 1;
    let lo = if first && rest > 0 { b'1' } else { b'0' };
    if a[0] > lo {
        out.push(format!("{}[0-9]{{{rest}}}", digit_class(lo, a[0] - 1)));
    }
    for tail in same_len_lt(&a[1..], false) {
        out.push(format!("{}{}", a[0] as char, tail));
    }
    out
}

/// Canonical numerals with value at least `a` (`a` canonical).
fn int_ge(a: &str) -> String {
    let d = a.len();
    let mut parts = vec![format!("[1-9][0-9]{{{d},}}")];
    parts.extend(same_len_ge(a.as_bytes(), true));
    alt(parts)
}

/// Canonical numerals with value below `a`.
fn int_lt(a: &str) -> String {
    let d = a.len();
    let mut parts = Vec::new();
    if d >= 2 {
        parts.push(format!("0|[1-9][0-9]{{0,{}}}", d - 2));
    }
    parts.extend(same_len_lt(a.as_bytes(), true));
    alt(parts)
}

/// Fraction digit strings `D` (possibly empty) with `0.D >= 0.B`.
fn frac_ge(b: &[u8]) -> Vec<String> {
    if b.iter().all(|&x| x == b'0') {
        return vec!["[0-9]*".to_string()];
    }
    let mut out = Vec::new();
    if b[0] < b'9' {
        out.push(format!("{}[0-9]*", digit_class(b[0] + 1, b'9')));
    }
    for t in frac_ge(&b[1..]) {
        out.push(format!("{}{}", b[0] as char, t));
    }
    out
}

/// Fraction digit strings `D` (possibly empty) with `0.D <= 0.B`.
fn frac_le(b: &[u8]) -> Vec<String> {
    if b.is_empty() {
        return vec!["0*".to_string()];
    }
    let mut out = vec![String::new()];
    if b[0] > b'0' {
        out.push(format!("{}[0-9]*", digit_class(b'0', b[0] - 1)));
    }
    for t in frac_le(&b[1..]) {
        out.push(format!("{}{}", b[0] as char, t));
    }
    out
}

/// The fraction part (the dot and digits, or nothing) for the digit strings `alts`; `empty`
/// says whether the empty digit string (no fraction) is in the set. A bare trailing dot that
/// this may allow is removed by intersecting with the JSON number shape.
fn frac_part(alts: Vec<String>, empty: bool) -> String {
    let body = format!(r"\.(?:{})", alts.join("|"));
    if empty {
        format!("(?:{body})?")
    } else {
        body
    }
}

/// Unsigned spellings `(P, N)`: `P` matches `U` with `U >= c`, `N` matches `U` with `-U >= c`.
fn ge_parts(c: &Decimal) -> (String, String) {
    let any_frac = r"(?:\.[0-9]+)?";
    let unsigned = format!(r"(?:0|[1-9][0-9]*){any_frac}");
    if !c.neg {
        // U >= c: larger integer part, or equal integer part and fraction >= c's.
        let bigger = format!("{}{any_frac}", int_ge(&increment(&c.int)));
        let equal = format!(
            "{}{}",
            c.int,
            frac_part(frac_ge(c.frac.as_bytes()), c.frac.is_empty())
        );
        let p = format!("(?:{bigger}|{equal})");
        // -U >= c >= 0 only for U = 0.
        let n = if c.int == "0" && c.frac.is_empty() {
            r"0(?:\.0+)?".to_string()
        } else {
            alt(vec![])
        };
        (p, n)
    } else {
        // -U >= -A.B: U <= A.B.
        let smaller = if c.int == "0" {
            alt(vec![])
        } else {
            format!("{}{any_frac}", int_lt(&c.int))
        };
        let equal = format!("{}{}", c.int, frac_part(frac_le(c.frac.as_bytes()), true));
        (unsigned, format!("(?:{smaller}|{equal})"))
    }
}

fn increment(a: &str) -> String {
    let mut d: Vec<u8> = a.bytes().collect();
    let mut i = d.len();
    loop {
        if i == 0 {
            d.insert(0, b'1');
            break;
        }
        i -= 1;
        if d[i] == b'9' {
            d[i] = b'0';
        } else {
            d[i] += 1;
            break;
        }
    }
    String::from_utf8(d).unwrap_or_default()
}

/// Spellings of numbers `>= c` (`strict`: `> c`).
fn bound_dfa(c: &Decimal, lower: bool, strict: bool) -> Result<Dfa, Error> {
    let re = if lower {
        let (p, n) = ge_parts(c);
        format!("{p}|-{n}")
    } else {
        // x <= c  <=>  -x >= -c.
        let (p, n) = ge_parts(&c.negate());
        format!("{n}|-{p}")
    };
    let d = Dfa::from_regex(&re)?;
    if strict {
        d.minus(&Dfa::from_regex(&c.equal_regex())?)
    } else {
        Ok(d)
    }
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
            d = d.intersect(&bound_dfa(c, lower, strict)?)?;
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
