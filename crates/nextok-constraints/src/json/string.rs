//! Strings: `pattern` (ECMA-262, unanchored), `format`, and length bounds, as one automaton of
//! the decoded content.

use super::schema::{unsupported, StringFacets};
use crate::dfa::Dfa;
use crate::Error;

/// Translates an ECMA-262 pattern to regex-automata syntax for an unanchored search over the
/// whole string (JSON Schema patterns are not anchored). A pattern anchored at both ends with no
/// top-level alternation is compiled as it stands, which gives a much smaller automaton.
pub(super) fn search_regex(pattern: &str) -> String {
    let p = ecma_to_rust(pattern);
    if let Some(inner) = p.strip_prefix('^').and_then(|r| r.strip_suffix('$')) {
        if !inner.ends_with('\\') && !has_top_level_bar(inner) {
            return format!("(?:{inner})");
        }
    }
    format!("(?s:.)*(?:{p})(?s:.)*")
}

/// Whether `p` has a `|` outside groups and classes.
fn has_top_level_bar(p: &str) -> bool {
    let (mut depth, mut in_class, mut esc) = (0i32, false, false);
    for c in p.chars() {
        if esc {
            esc = false;
            continue;
        }
        match c {
            '\\' => esc = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => depth += 1,
            ')' if !in_class => depth -= 1,
            '|' if !in_class && depth == 0 => return true,
            _ => {}
        }
    }
    false
}

/// ECMA `\d`, `\w` and their negations are ASCII-only, unlike Rust's Unicode classes.
fn ecma_to_rust(p: &str) -> String {
    let mut out = String::with_capacity(p.len());
    let mut chars = p.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('d') => out.push_str("[0-9]"),
                Some('D') => out.push_str("[^0-9]"),
                Some('w') => out.push_str("[A-Za-z0-9_]"),
                Some('W') => out.push_str("[^A-Za-z0-9_]"),
                Some(o) => {
                    out.push('\\');
                    out.push(o);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn format_regex(f: &str) -> Option<&'static str> {
    Some(match f {
        "date" => r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])",
        "time" => {
            r"([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
        }
        "date-time" => {
            r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[tT]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
        }
        "email" => {
            r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
        }
        "uri" => r"[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*",
        "uuid" => r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
        "ipv4" => {
            r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
        }
        "ipv6" => concat!(
            r"(([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}|([0-9a-fA-F]{1,4}:){1,7}:|([0-9a-fA-F]{1,4}:){1,6}:[0-9a-fA-F]{1,4}",
            r"|([0-9a-fA-F]{1,4}:){1,5}(:[0-9a-fA-F]{1,4}){1,2}|([0-9a-fA-F]{1,4}:){1,4}(:[0-9a-fA-F]{1,4}){1,3}",
            r"|([0-9a-fA-F]{1,4}:){1,3}(:[0-9a-fA-F]{1,4}){1,4}|([0-9a-fA-F]{1,4}:){1,2}(:[0-9a-fA-F]{1,4}){1,5}",
            r"|[0-9a-fA-F]{1,4}:(:[0-9a-fA-F]{1,4}){1,6}|:((:[0-9a-fA-F]{1,4}){1,7}|:))"
        ),
        _ => return None,
    })
}

/// The decoded-content automaton of a string schema.
pub(super) fn string_content(f: &StringFacets, path: &str) -> Result<Dfa, Error> {
    let min = f.min_length.unwrap_or(0);
    if min > 10_000 || f.max_length.is_some_and(|x| x > 10_000) {
        return Err(unsupported("minLength/maxLength above 10000", path));
    }
    let mut d = Dfa::char_count(min, f.max_length)?;
    for p in &f.patterns {
        d = d.intersect(&Dfa::from_regex(&search_regex(p))?)?;
    }
    if let Some(format) = &f.format {
        let re =
            format_regex(format).ok_or_else(|| unsupported(format!("format {format:?}"), path))?;
        d = d.intersect(&Dfa::from_regex(re)?)?;
    }
    Ok(d)
}
