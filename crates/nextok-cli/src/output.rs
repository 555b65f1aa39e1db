//! Writing to stdout without panicking when the reader goes away, and number formatting.

use std::io::Write;

/// Writes `text` to stdout and flushes it. A closed pipe (`nextok ... | head`) becomes an error
/// that `main` recognises and treats as success.
pub fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// [`print()`] followed by a line break.
pub fn println(text: &str) -> anyhow::Result<()> {
    print(&format!("{text}\n"))
}

/// Whether an error is stdout's reader having gone away.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
}

/// A byte count with a decimal prefix, as the specification writes them (1 MB = 10^6 bytes).
pub fn bytes(n: f64) -> String {
    let (value, unit) = if n >= 1e12 {
        (n / 1e12, "TB")
    } else if n >= 1e9 {
        (n / 1e9, "GB")
    } else if n >= 1e6 {
        (n / 1e6, "MB")
    } else if n >= 1e3 {
        (n / 1e3, "KB")
    } else {
        return format!("{} bytes", group(n.round() as u64));
    };
    format!("{} {unit}", significant(value))
}

/// A duration in the unit that suits it.
pub fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{} s", significant(s))
    } else if s >= 1e-3 {
        format!("{} ms", significant(s * 1e3))
    } else {
        format!("{} µs", significant(s * 1e6))
    }
}

/// Three significant figures, without trailing zeros.
pub fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    if x.abs() >= 1000.0 {
        let sign = if x < 0.0 { "-" } else { "" };
        return format!("{sign}{}", group(x.abs().round() as u64));
    }
    let digits = x.abs().log10().floor() as i32;
    let decimals = (2 - digits).max(0) as usize;
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// An integer with thousands separators: 1,192.
pub fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut parts = Vec::new();
    let mut end = digits.len();
    while end > 3 {
        parts.push(&digits[end - 3..end]);
        end -= 3;
    }
    parts.push(&digits[..end]);
    parts.reverse();
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_print_as_the_specification_prints_them() {
        // The specification's "How much memory the cache needs" tables.
        assert_eq!(bytes(24_576_000.0), "24.6 MB");
        assert_eq!(bytes(2_147_483_648.0), "2.15 GB");
        assert_eq!(bytes(68_719_476_736.0), "68.7 GB");
        assert_eq!(bytes(260e6), "260 MB");
        assert_eq!(bytes(24_576.0), "24.6 KB");
        assert_eq!(seconds(0.028), "28 ms");
        assert_eq!(seconds(1.428), "1.43 s");
        assert_eq!(seconds(0.000028), "28 µs");
        assert_eq!(group(1192), "1,192");
        assert_eq!(group(500_500), "500,500");
        assert_eq!(group(12), "12");
        assert_eq!(significant(142.857), "143");
        assert_eq!(significant(20709.3), "20,709");
        assert_eq!(significant(0.5), "0.5");
        assert_eq!(significant(12.288), "12.3");
    }
}
