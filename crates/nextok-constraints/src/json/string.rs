//! Strings: `pattern` (ECMA-262, unanchored; translated where Rust's regex syntax means
//! something else, leading look-aheads and tempered tokens as automaton differences),
//! `format`, and length bounds, as one automaton of the decoded content.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;

use super::schema::{unsupported, Node, StringFacets};
use crate::dfa::{Dfa, DfaMemo, Oldest, STATE_LIMIT};
use crate::Error;

/// Translates an ECMA-262 pattern to regex-automata syntax for an unanchored search over the
/// whole string (JSON Schema patterns are not anchored), as expressions whose languages
/// together are the search's. A pattern anchored at both ends with no top-level alternation is
/// compiled as it stands, which gives a much smaller automaton.
///
/// Alternatives of the top level that start with `^` match only at the start, so they are
/// read there without the assertion, as an automaton of their own beside a search for the
/// others, and the two are united: `^a|b` is `a(?s:.)*` or `(?s:.)*(?:b)(?s:.)*`. A start
/// assertion inside a search makes every state of the determinization carry what it has seen
/// of the start, and so does one determinization of both parts: hws-config's 25
/// operating-system names, most anchored, took 17 ms as one search, 15 ms as one expression
/// of the two parts, and 7 ms as two automata united.
pub(super) fn search_regexes(pattern: &str) -> Vec<String> {
    let p = ecma_to_rust(pattern);
    if let Some(inner) = p.strip_prefix('^').and_then(|r| r.strip_suffix('$')) {
        if !inner.ends_with('\\') && !has_top_level_bar(inner) {
            return vec![format!("(?:{inner})")];
        }
    }
    let alts = top_level_alternatives(&p);
    // By anchor: at the start (`^`) or not, and at the end (a last `$`) or not. An
    // alternative anchored at the end is read with nothing after it: `(?s:.)*(?:b)`, not
    // `(?s:.)*(?:b$)(?s:.)*`, whose end assertion before a loop tripled the determinization
    // (chrome-manifest's match pattern, `^(...)|urn:(\*|.*)|<all_urls>$`).
    let (mut starts, mut whole, mut free, mut ends) = (vec![], vec![], vec![], vec![]);
    for a in &alts {
        // `^` then a quantifier is left to the regex parser as it stands.
        let start = a
            .strip_prefix('^')
            .filter(|rest| !rest.starts_with(['*', '+', '?', '{']));
        match (start, start.unwrap_or(a)) {
            (Some(_), rest) => match end_anchored(rest) {
                Some(body) => whole.push(body),
                None => starts.push(rest),
            },
            (None, _) => match end_anchored(a) {
                Some(body) => ends.push(body),
                None => free.push(*a),
            },
        }
    }
    if starts.is_empty() && whole.is_empty() && ends.is_empty() {
        return vec![format!("(?s:.)*(?:{})(?s:.)*", searched(&p, true, true))];
    }
    let mut out = Vec::new();
    if !whole.is_empty() {
        out.push(format!("(?:{})", whole.join("|")));
    }
    if !starts.is_empty() {
        out.push(format!(
            "(?:{})(?s:.)*",
            searched(&starts.join("|"), true, false)
        ));
    }
    if !ends.is_empty() {
        out.push(format!(
            "(?s:.)*(?:{})",
            searched(&ends.join("|"), false, true)
        ));
    }
    if !free.is_empty() {
        out.push(format!(
            "(?s:.)*(?:{})(?s:.)*",
            searched(&free.join("|"), true, true)
        ));
    }
    out
}

/// Alternative `a` (Rust's syntax) without its last `$`, where it ends with one outside
/// classes and unescaped: it matches only at the end of the string.
fn end_anchored(a: &str) -> Option<&str> {
    let (i, c, escaped, in_class) = pattern_chars(a).last()?;
    (c == '$' && !escaped && !in_class).then(|| &a[..i])
}

/// Regex `p` (Rust's syntax) rewritten for a search that reads anything after it (and, with
/// `before`, anything before it), without the parts that the reading around it makes
/// redundant: `p(?s:.)*` is `q(?s:.)*` where `q` is `p` less a last part that may match
/// nothing with no assertion (`(#.+)?`, `(/[^/]+)*`) and with a last repetition cut to its
/// least count (`[^:/]+` is `[^:/]`), again inside what is left; the same at the front
/// with `before`. The language is the same (the assertions that stay see the same text
/// around them), and the automaton is often much smaller: venvironment's URL pattern,
/// `^[^:]+://[^:/]+(:[0-9]+)?(/[^?#/]+)*(\?...)?(#.+)?` without a `$`, is a search for
/// `[^:]+://[^:/]` at the start, where its determinization took 5.6 ms. `p` as it stands
/// where it does not parse (the build reports the error).
fn searched(p: &str, after: bool, before: bool) -> String {
    use regex_syntax::hir::{Hir, HirKind, Repetition};
    /// Whether `h` may match the empty string with no assertion checked.
    fn skippable(h: &Hir) -> bool {
        match h.kind() {
            HirKind::Empty => true,
            HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => false,
            HirKind::Repetition(r) => r.min == 0 || skippable(&r.sub),
            HirKind::Capture(c) => skippable(&c.sub),
            HirKind::Concat(v) => v.iter().all(skippable),
            HirKind::Alternation(v) => v.iter().any(skippable),
        }
    }
    /// `h` less what anything read after it (`back`: before it) makes redundant.
    fn trim(h: &Hir, back: bool) -> Hir {
        match h.kind() {
            _ if skippable(h) => Hir::empty(),
            HirKind::Capture(c) => trim(&c.sub, back),
            HirKind::Alternation(v) => Hir::alternation(v.iter().map(|x| trim(x, back)).collect()),
            HirKind::Concat(v) => {
                let mut v = v.clone();
                if back {
                    let skip = v.iter().take_while(|x| skippable(x)).count();
                    v.drain(..skip);
                    if let Some(first) = v.first_mut() {
                        *first = trim(first, true);
                    }
                } else {
                    while v.last().is_some_and(skippable) {
                        v.pop();
                    }
                    if let Some(last) = v.last_mut() {
                        *last = trim(last, false);
                    }
                }
                Hir::concat(v)
            }
            // `x{n,m}` beside anything is `x{n}`, and its edge copy is trimmed in turn.
            HirKind::Repetition(r) => {
                let edge = trim(&r.sub, back);
                if r.min == 1 {
                    return edge;
                }
                let rest = Hir::repetition(Repetition {
                    min: r.min - 1,
                    max: Some(r.min - 1),
                    greedy: true,
                    sub: r.sub.clone(),
                });
                Hir::concat(if back {
                    vec![edge, rest]
                } else {
                    vec![rest, edge]
                })
            }
            _ => h.clone(),
        }
    }
    // Nothing to drop without a quantifier (most patterns of literal words): left as it is,
    // not parsed and printed again.
    if !p.contains(['*', '+', '?', '{']) {
        return p.to_string();
    }
    let Ok(hir) = crate::dfa::parse_regex(p) else {
        return p.to_string();
    };
    let mut q = hir;
    if after {
        q = trim(&q, false);
    }
    if before {
        q = trim(&q, true);
    }
    q.to_string()
}

/// The automaton of the strings in which `pattern` (ECMA-262, unanchored) matches somewhere:
/// the union of [`search_regexes`]'s automata.
pub(super) fn search_dfa(pattern: &str) -> Result<Dfa, Error> {
    if let Some(words) = anchored_words(pattern) {
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        return Dfa::literals(&words, STATE_LIMIT);
    }
    let mut parts = search_regexes(pattern).into_iter();
    let mut d = Dfa::from_regex(&parts.next().unwrap_or_default())?;
    for p in parts {
        d = d.union(&Dfa::from_regex(&p)?)?;
    }
    Ok(d)
}

/// The words of a pattern that is a list of them anchored at both ends, `^word$`,
/// `^(one|two)$` or `^(?:one|two)$`, with no other syntax in any word: those words are its
/// whole language, a trie (appsettings.json names its sections so, in their spellings,
/// `^(cdn|Cdn)$`), where regex-automata's determinization took a tenth of a millisecond each.
/// `None` for any other pattern.
fn anchored_words(pattern: &str) -> Option<Vec<&str>> {
    let body = pattern.strip_prefix('^')?.strip_suffix('$')?;
    // Alternatives bind looser than the anchors (`^a|b$` is `^a` or `b$`): a list of words
    // must be inside the group.
    let (body, special) = match body.strip_prefix("(?:").or_else(|| body.strip_prefix('(')) {
        Some(group) => (group.strip_suffix(')')?, "\\.+*?()[]{}^$"),
        None => (body, "\\.+*?()[]{}^$|"),
    };
    (!body.contains(|c| special.contains(c))).then(|| body.split('|').collect())
}

/// The alternatives of `p` at its top level (`a|b(c|d)` is `a` and `b(c|d)`), or `p` alone.
fn top_level_alternatives(p: &str) -> Vec<&str> {
    let (mut depth, mut start, mut alts) = (0i32, 0, Vec::new());
    for (i, c, escaped, in_class) in pattern_chars(p) {
        match c {
            _ if escaped || in_class => {}
            '(' => depth += 1,
            ')' => depth -= 1,
            '|' if depth == 0 => {
                alts.push(&p[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    alts.push(&p[start..]);
    alts
}

/// The characters of pattern `p` with their byte index, whether a `\\` escapes them and
/// whether they are inside a class (a class's own `[` and `]` count as outside).
fn pattern_chars(p: &str) -> impl Iterator<Item = (usize, char, bool, bool)> + '_ {
    let (mut in_class, mut esc) = (false, false);
    p.char_indices().map(move |(i, c)| {
        if esc {
            esc = false;
            return (i, c, true, in_class);
        }
        let inside = in_class;
        match c {
            '\\' => esc = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => {
                in_class = false;
                return (i, c, false, false);
            }
            _ => {}
        }
        (i, c, false, inside)
    })
}

/// Whether `p` has a `|` outside groups and classes.
fn has_top_level_bar(p: &str) -> bool {
    top_level_alternatives(p).len() > 1
}

/// The automaton of the strings an ECMA-262 `pattern` matches somewhere (JSON Schema patterns
/// are not anchored). Look-aheads right after a leading `^` (`^(?!X)R`, `^(?=X)R`, in any
/// number) are exact as automata: the strings `^R` matches, minus (or intersected with) those
/// with a prefix that `X` matches, `X`'s own `$` still meaning the end of the whole string.
/// A pattern of one tempered token is exact too ([`tempered_token`]). Other look-arounds do
/// not parse and are refused with the regex error.
pub(crate) fn pattern_dfa(pattern: &str) -> Result<Dfa, Error> {
    // A pattern with look-aheads is a product (or a tempered token, a difference) of automata
    // that `Dfa::from_regex` keeps: the result is kept too, per pattern. The algebra asks for
    // a `patternProperties` pattern at each merge of its object (web-types' `^(?!pattern$).*$`,
    // a twentieth of its compile in differences made again). Plain patterns are
    // `Dfa::from_regex`'s own, kept there.
    static MEMO: OnceLock<DfaMemo<String>> = OnceLock::new();
    let memo = MEMO.get_or_init(|| DfaMemo::new(256, 1 << 20));
    if let Some(d) = memo.get(pattern) {
        return Ok(Dfa::clone(&d));
    }
    let (d, product) = build_pattern_dfa(pattern)?;
    if product {
        memo.insert(pattern.to_string(), &Arc::new(d.clone()));
    }
    Ok(d)
}

/// [`pattern_dfa`], and whether it took a product or a difference of automata (a tempered
/// token, or look-aheads).
fn build_pattern_dfa(pattern: &str) -> Result<(Dfa, bool), Error> {
    if let Some(d) = tempered_token(pattern)? {
        return Ok((d, true));
    }
    let mut looks: Vec<(bool, &str)> = Vec::new();
    let mut positive = pattern.to_string();
    if let Some(mut rest) = pattern.strip_prefix('^') {
        while let Some((negative, inner, after)) = leading_lookahead(rest) {
            looks.push((negative, inner));
            rest = after;
        }
        if has_top_level_bar(rest) {
            // `^(?!X)A|B`: the look-ahead binds `A` alone, not the whole pattern; left to the
            // regex parser, which refuses look-arounds.
            looks.clear();
        } else if !looks.is_empty() {
            positive = format!("^{rest}");
        }
    }
    let mut d = search_dfa(&positive)?;
    let product = !looks.is_empty();
    for (negative, x) in looks {
        let xd = Dfa::from_regex(&format!(
            "(?:{})(?s:.)*",
            searched(&ecma_to_rust(x), true, false)
        ))?;
        d = if negative {
            d.minus(&xd)?
        } else {
            d.intersect(&xd)?
        };
    }
    Ok((d, product))
}

/// A whole pattern of one tempered token, `^(?:(?!X).)*$` (or a capturing group, or `+`):
/// the strings of characters `.` matches where `X` matches at no position (stylelint's
/// `^((?!message|severity).)*$`, every key that does not contain either word). Each
/// iteration looks ahead to the end of the string, which is the group's own end here, so the
/// language is `.`'s strings minus those containing a match of `X` (and, with `*`, the empty
/// string, which no look-ahead checks). `X` with an anchor, a word boundary or a group of its
/// own kind (`(?`) is not taken (a match of it could depend on where it is), nor any other
/// shape: `None`, and the pattern goes on to the general path.
fn tempered_token(pattern: &str) -> Result<Option<Dfa>, Error> {
    let Some(inner) = pattern
        .strip_prefix('^')
        .and_then(|p| p.strip_suffix('$'))
        .filter(|p| !p.ends_with('\\'))
    else {
        return Ok(None);
    };
    let (body, plus) = match (inner.strip_suffix(")*"), inner.strip_suffix(")+")) {
        (Some(b), _) => (b, false),
        (_, Some(b)) => (b, true),
        _ => return Ok(None),
    };
    let Some(body) = body
        .strip_prefix("(?:")
        .or_else(|| body.strip_prefix('(').filter(|b| !b.starts_with('?')))
    else {
        return Ok(None);
    };
    let Some((true, x, ".")) = leading_lookahead(body) else {
        return Ok(None);
    };
    for (_, c, escaped, in_class) in pattern_chars(x) {
        let anchor = match escaped {
            true => matches!(c, 'b' | 'B'),
            false => matches!(c, '^' | '$'),
        };
        if anchor && !in_class {
            return Ok(None);
        }
    }
    if x.contains("(?") {
        return Ok(None);
    }
    let quantifier = if plus { '+' } else { '*' };
    let dots = Dfa::from_regex(&format!("(?:{}){quantifier}", ecma_to_rust(".")))?;
    let containing = Dfa::from_regex(&format!("(?s:.)*(?:{})(?s:.)*", ecma_to_rust(x)))?;
    let d = dots.minus(&containing)?;
    if plus {
        return Ok(Some(d));
    }
    Ok(Some(d.union(&Dfa::literals(&[&b""[..]], 2)?)?))
}

/// A look-ahead group at the start of `p`: whether it is negative, its body, and what follows.
fn leading_lookahead(p: &str) -> Option<(bool, &str, &str)> {
    let negative = if p.starts_with("(?!") {
        true
    } else if p.starts_with("(?=") {
        false
    } else {
        return None;
    };
    let mut depth = 0i32;
    for (i, c, escaped, in_class) in pattern_chars(&p[3..]) {
        match c {
            _ if escaped || in_class => {}
            '(' => depth += 1,
            ')' if depth == 0 => return Some((negative, &p[3..3 + i], &p[3 + i + 1..])),
            ')' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// ECMA-262 syntax in regex-automata's, where their meanings differ: `\d`, `\w`, `\b` and
/// their negations are ASCII-only (Rust's are Unicode); `\s` is ECMA's white space and line
/// terminators (not Unicode's `White_Space`); `.` excludes every line terminator (`\n`, `\r`,
/// U+2028, U+2029), not only `\n`; inside a class `[`, `&` and `~` are literal (Rust nests
/// classes and has `&&`, `~~`) and `\b` is a backspace; `[]` matches nothing and `[^]` any
/// character; `]` outside a class and `{,` are literal; `\cX` is a control character.
pub(super) fn ecma_to_rust(p: &str) -> String {
    const DOT: &str = "[^\\n\\r\\x{2028}\\x{2029}]";
    const SPACE: &str = "\\t\\n\\x0B\\x0C\\r \\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\x{FEFF}";
    let mut out = String::with_capacity(p.len());
    let mut in_class = false;
    let mut chars = p.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('d') => out.push_str("[0-9]"),
                Some('D') => out.push_str("[^0-9]"),
                Some('w') => out.push_str("[A-Za-z0-9_]"),
                Some('W') => out.push_str("[^A-Za-z0-9_]"),
                Some('s') => {
                    out.push('[');
                    out.push_str(SPACE);
                    out.push(']');
                }
                Some('S') => {
                    out.push_str("[^");
                    out.push_str(SPACE);
                    out.push(']');
                }
                Some('b') if in_class => out.push_str("\\x08"),
                Some('b') => out.push_str("(?-u:\\b)"),
                Some('B') if !in_class => out.push_str("(?-u:\\B)"),
                // `\cX`: the control character of a letter's code modulo 32.
                Some('c') if chars.peek().is_some_and(char::is_ascii_alphabetic) => {
                    let x = chars.next().map_or(0, |x| x as u32 % 32);
                    out.push_str(&format!("\\x{{{x:X}}}"));
                }
                Some(o) => {
                    out.push('\\');
                    out.push(o);
                }
                None => out.push('\\'),
            },
            '[' if !in_class => {
                let mut ahead = chars.clone();
                if ahead.next() == Some(']') {
                    chars.next();
                    out.push_str("[^\\x{0}-\\x{10FFFF}]");
                } else if chars.peek() == Some(&'^') && ahead.next() == Some(']') {
                    chars.next();
                    chars.next();
                    out.push_str("(?s:.)");
                } else {
                    in_class = true;
                    out.push('[');
                    if chars.peek() == Some(&'^') {
                        chars.next();
                        out.push('^');
                    }
                }
            }
            '[' | '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            ']' => out.push_str("\\]"),
            '.' if !in_class => out.push_str(DOT),
            '{' if !in_class && chars.peek() == Some(&',') => out.push_str("\\{"),
            _ => out.push(c),
        }
    }
    out
}

/// What nextok makes of a `format` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FormatKind {
    /// A regular language, enforced exactly.
    Regular,
    /// A context-free language (`regex`: ECMA-262 patterns nest), enforced by a grammar
    /// (`ecma_regex`).
    ContextFree,
    /// A format JSON Schema defines that no automaton here enforces exactly: refused by name.
    Unenforced,
    /// A name JSON Schema does not define: an annotation.
    Unknown,
}

/// The kind of format `name` is.
pub(super) fn format_kind(name: &str) -> FormatKind {
    if format_regex(name).is_some() {
        FormatKind::Regular
    } else if name == "regex" {
        FormatKind::ContextFree
    } else if ["idn-email", "idn-hostname"].contains(&name) {
        FormatKind::Unenforced
    } else {
        FormatKind::Unknown
    }
}

/// RFC 3339 `full-date`: months of 28 to 31 days, and 29 February only in leap years (years
/// divisible by 4, except centuries not divisible by 400).
const DATE: &str = concat!(
    "(",
    "[0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])",
    "|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)",
    "|[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])",
    // Leap years: the last two digits a non-zero multiple of 4, or 00 after a multiple of 4.
    "|([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29",
    ")"
);

/// RFC 3339 `full-time` (`T`, `Z` in either case). A leap second (`:60`) is only allowed at
/// 23:59 UTC; nextok allows it as `23:59:60` with offset zero and refuses the equal leap
/// seconds written in other offsets (stricter than RFC 3339, never looser).
const TIME: &str = concat!(
    "(",
    "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])",
    "|23:59:60(\\.[0-9]+)?([zZ]|[+-]00:00)",
    ")"
);

/// [`TIME`] with a leap second in any minute and offset: every RFC 3339 `full-time`, and more.
const TIME_SUPERSET: &str =
    "([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\\.[0-9]+)?([zZ]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";

/// RFC 3986 `IPv6address` (with its IPv4 forms), as RFC 3986's appendix A writes it.
fn ipv6_regex() -> String {
    let h16 = "[0-9A-Fa-f]{1,4}";
    let dec = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
    let ls32 = format!("({h16}:{h16}|{dec}\\.{dec}\\.{dec}\\.{dec})");
    [
        format!("({h16}:){{6}}{ls32}"),
        format!("::({h16}:){{5}}{ls32}"),
        format!("({h16})?::({h16}:){{4}}{ls32}"),
        format!("(({h16}:){{0,1}}{h16})?::({h16}:){{3}}{ls32}"),
        format!("(({h16}:){{0,2}}{h16})?::({h16}:){{2}}{ls32}"),
        format!("(({h16}:){{0,3}}{h16})?::{h16}:{ls32}"),
        format!("(({h16}:){{0,4}}{h16})?::{ls32}"),
        format!("(({h16}:){{0,5}}{h16})?::{h16}"),
        format!("(({h16}:){{0,6}}{h16})?::"),
    ]
    .map(|x| format!("({x})"))
    .join("|")
}

/// RFC 3987's `ucschar`: the characters an IRI holds unencoded beyond ASCII.
const UCSCHAR: &str = concat!(
    "\\x{A0}-\\x{D7FF}\\x{F900}-\\x{FDCF}\\x{FDF0}-\\x{FFEF}",
    "\\x{10000}-\\x{1FFFD}\\x{20000}-\\x{2FFFD}\\x{30000}-\\x{3FFFD}\\x{40000}-\\x{4FFFD}",
    "\\x{50000}-\\x{5FFFD}\\x{60000}-\\x{6FFFD}\\x{70000}-\\x{7FFFD}\\x{80000}-\\x{8FFFD}",
    "\\x{90000}-\\x{9FFFD}\\x{A0000}-\\x{AFFFD}\\x{B0000}-\\x{BFFFD}\\x{C0000}-\\x{CFFFD}",
    "\\x{D0000}-\\x{DFFFD}\\x{E1000}-\\x{EFFFD}"
);

/// RFC 3987's `iprivate`, which an IRI's query may hold.
const IPRIVATE: &str = "\\x{E000}-\\x{F8FF}\\x{F0000}-\\x{FFFFD}\\x{100000}-\\x{10FFFD}";

/// RFC 3986's URI after the scheme (`relative` false: `hier-part`) or a relative reference
/// (`relative-part`, whose first segment, when the path does not start with `/`, holds no
/// colon), then query and fragment; percent-encodings checked, IP literals as RFC 3986 writes
/// them (`IPv6address` or `IPvFuture`). With `iri`, RFC 3987's IRI: `ucschar` wherever an
/// unreserved character may be, `iprivate` in the query too.
fn uri_tail(relative: bool, iri: bool) -> String {
    let (u, p) = if iri { (UCSCHAR, IPRIVATE) } else { ("", "") };
    let pct = "%[0-9A-Fa-f]{2}";
    let pchar = format!("([A-Za-z0-9._~!$&'()*+,;=:@{u}-]|{pct})");
    let pchar_nc = format!("([A-Za-z0-9._~!$&'()*+,;=@{u}-]|{pct})");
    let ip_literal = format!(
        "\\[(({})|[vV][0-9A-Fa-f]+\\.[A-Za-z0-9._~!$&'()*+,;=:-]+)\\]",
        ipv6_regex()
    );
    let authority = format!(
        "(([A-Za-z0-9._~!$&'()*+,;=:{u}-]|{pct})*@)?({ip_literal}|([A-Za-z0-9._~!$&'()*+,;={u}-]|{pct})*)(:[0-9]*)?"
    );
    let first = if relative { &pchar_nc } else { &pchar };
    format!(
        "(//{authority}(/{pchar}*)*|/({pchar}+(/{pchar}*)*)?|{first}+(/{pchar}*)*|)(\\?([/?{p}]|{pchar})*)?(#([/?]|{pchar})*)?"
    )
}

/// RFC 6570 URI Templates (level 4): literals (with the apostrophe, as erratum 6937 has
/// it) and `{`expressions`}` of an optional operator and variables with a prefix length or
/// explode modifier.
fn uri_template_regex() -> String {
    let pct = "%[0-9A-Fa-f]{2}";
    let literal = format!("([\\x21\\x23\\x24\\x26-\\x3B\\x3D\\x3F-\\x5B\\x5D\\x5F\\x61-\\x7A\\x7E{UCSCHAR}{IPRIVATE}]|{pct})");
    let varchar = format!("([A-Za-z0-9_]|{pct})");
    let varspec = format!("{varchar}(\\.?{varchar})*(:[1-9][0-9]{{0,3}}|\\*)?");
    format!("({literal}|\\{{[+#./;?&=,!@|]?{varspec}(,{varspec})*\\}})*")
}

/// The regular expression of a format nextok enforces.
fn format_regex(f: &str) -> Option<String> {
    Some(match f {
        "date" => DATE.to_string(),
        "time" => TIME.to_string(),
        "date-time" => format!("{DATE}[tT]{TIME}"),
        // ISO 8601 durations as RFC 3339's appendix A writes them.
        "duration" => concat!(
            "P(([0-9]+D|([0-9]+M([0-9]+D)?)|([0-9]+Y([0-9]+M([0-9]+D)?)?))",
            "(T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S))?",
            "|T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)",
            "|[0-9]+W)"
        )
        .to_string(),
        "email" => {
            r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*".to_string()
        }
        // RFC 1123 labels of 1 to 63 characters, no hyphen at either end. The name's total
        // is capped at 63 characters, stricter than RFC 1034's 253, which would multiply the
        // automaton's states by the label's.
        "hostname" => {
            r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*".to_string()
        }
        "uri" => format!("[A-Za-z][A-Za-z0-9+.-]*:{}", uri_tail(false, false)),
        "uri-reference" => format!(
            "[A-Za-z][A-Za-z0-9+.-]*:{}|{}",
            uri_tail(false, false),
            uri_tail(true, false)
        ),
        "iri" => format!("[A-Za-z][A-Za-z0-9+.-]*:{}", uri_tail(false, true)),
        "iri-reference" => format!(
            "[A-Za-z][A-Za-z0-9+.-]*:{}|{}",
            uri_tail(false, true),
            uri_tail(true, true)
        ),
        "uri-template" => uri_template_regex(),
        // A non-negative integer, then `#` or a JSON pointer.
        "relative-json-pointer" => "(0|[1-9][0-9]*)(#|(/([^/~]|~[01])*)*)".to_string(),
        "uuid" => {
            r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}".to_string()
        }
        "ipv4" => {
            r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])".to_string()
        }
        "ipv6" => ipv6_regex(),
        // RFC 6901.
        "json-pointer" => "(/([^/~]|~[01])*)*".to_string(),
        _ => return None,
    })
}

/// A pattern is deferred ([`deferrable`]) when its parts unrolled hold at least this many
/// classes and literal bytes: below it a pattern determinizes in well under a millisecond.
const DEFER_WEIGHT: usize = 100;

/// Nor past this many: such a pattern may not compile at all (regex-automata's limits), and
/// that error belongs to the compile.
const DEFER_MAX_WEIGHT: usize = 4096;

/// Whether the JSON strings of facets `f` may be built when a parse first reaches them
/// ([`JsonOptions::defer_large_patterns`](super::JsonOptions::defer_large_patterns)): one
/// large pattern (its parts unrolled, at least [`DEFER_WEIGHT`] classes and literal bytes),
/// perhaps with length bounds, and nothing else (no `format`, no `not`), a pattern of no
/// look-around or tempered token (those take products of automata), which parses, and for
/// which a string is found that it matches within the length bounds: the language is then
/// known not to be empty, as pruning the grammar needs, and a JSON string is never empty. The
/// string is built from the pattern's parse (each repetition's fewest copies, each class's
/// first letter or digit); where the pattern has assertions it is checked against the pattern
/// by regex-automata's lazy DFA, and a pattern it does not fit (a word boundary the choices
/// miss) is built at once.
pub(super) fn deferrable(f: &StringFacets) -> bool {
    let [p] = f.patterns.as_slice() else {
        return false;
    };
    let others = !f.not_patterns.is_empty()
        || f.format.is_some()
        || !f.not_formats.is_empty()
        || is_long(f)
        || is_chunked(f);
    if others || anchored_words(p).is_some() {
        return false;
    }
    let Some(hirs) = plain_parts(p) else {
        return false;
    };
    if !(DEFER_WEIGHT..=DEFER_MAX_WEIGHT).contains(&weight_of(&hirs)) {
        return false;
    }
    let (min, max) = (
        f.min_length.unwrap_or(0),
        f.max_length.unwrap_or(usize::MAX),
    );
    hirs.iter().any(|h| {
        let mut w = String::new();
        // Without assertions the string is one of the pattern's by construction; with them it
        // is checked, and kept to ASCII (where `\b` is decided byte by byte).
        let looks = !h.properties().look_set().is_empty();
        witness(h, looks, &mut w).is_some()
            && (min..=max).contains(&w.chars().count())
            && (!looks || whole_match(h, w.as_bytes()) == Some(true))
    })
}

/// The parts of `pattern` ([`search_regexes`]) parsed, where it is a plain one: `None` for a
/// pattern with a look-around or tempered token (those take products of automata,
/// [`pattern_dfa`]), a part that does not parse, or a Unicode word boundary (no DFA reads it).
fn plain_parts(pattern: &str) -> Option<Vec<regex_syntax::hir::Hir>> {
    if ["(?=", "(?!", "(?<"].iter().any(|l| pattern.contains(l)) {
        return None;
    }
    let hirs = search_regexes(pattern)
        .iter()
        .map(|r| crate::dfa::parse_regex(r).ok())
        .collect::<Option<Vec<_>>>()?;
    let unicode_word =
        |h: &regex_syntax::hir::Hir| h.properties().look_set().contains_word_unicode();
    (!hirs.iter().any(unicode_word)).then_some(hirs)
}

/// regex-automata's lazy DFA of the union of `hirs`, read from the start (anchored), with its
/// cache and start state. Its cache is never cleared (a search gives up instead), so that the
/// states a caller keeps stay valid.
fn lazy_dfa(
    hirs: &[regex_syntax::hir::Hir],
) -> Option<(
    regex_automata::hybrid::dfa::DFA,
    regex_automata::hybrid::dfa::Cache,
    regex_automata::hybrid::LazyStateID,
)> {
    use regex_automata::hybrid::dfa::DFA;
    use regex_automata::nfa::thompson;
    use regex_automata::util::start;
    use regex_automata::{Anchored, MatchKind};
    let nfa = thompson::Compiler::new()
        .configure(thompson::Config::new().which_captures(thompson::WhichCaptures::None))
        .build_many_from_hir(hirs)
        .ok()?;
    let config = DFA::config()
        .match_kind(MatchKind::All)
        .cache_capacity(16 << 20)
        .minimum_cache_clear_count(Some(0));
    let dfa = DFA::builder().configure(config).build_from_nfa(nfa).ok()?;
    let mut cache = dfa.create_cache();
    let first = dfa
        .start_state(&mut cache, &start::Config::new().anchored(Anchored::Yes))
        .ok()?;
    Some((dfa, cache, first))
}

/// Whether `h` matches the whole of `text`, read by regex-automata's lazy DFA; `None` where it
/// does not build.
fn whole_match(h: &regex_syntax::hir::Hir, text: &[u8]) -> Option<bool> {
    let (dfa, mut cache, mut s) = lazy_dfa(std::slice::from_ref(h))?;
    for &b in text {
        s = dfa.next_state(&mut cache, s, b).ok()?;
        if s.is_dead() || s.is_quit() {
            return Some(false);
        }
    }
    Some(dfa.next_eoi_state(&mut cache, s).ok()?.is_match())
}

/// Where one of `patterns` is large (its parts unrolled, at least [`DEFER_WEIGHT`] classes and
/// literal bytes, one whose automaton takes milliseconds to build), whether some string
/// matches every one of them, decided over automata built lazily, only where a string of all of
/// them can go: two patterns that part at their first bytes (a URL's `https://` and a path's
/// `/`) are told apart after a few states, where building the URL pattern's automaton took
/// 60 ms. Each pattern is the union of its parts ([`search_regexes`]), as [`pattern_dfa`] reads
/// it. `None` (undecided, left to the whole automata) where none is large, for a pattern that
/// is not plain ([`plain_parts`]) or does not build, or a search that goes past 20,000 places.
pub(super) fn large_patterns_meet(patterns: &[&str]) -> Option<bool> {
    use regex_automata::hybrid::LazyStateID;
    use std::collections::HashSet;
    const MAX_PLACES: usize = 20_000;
    let parsed = (patterns.iter())
        .map(|p| plain_parts(p))
        .collect::<Option<Vec<_>>>()?;
    if !parsed.iter().any(|hirs| weight_of(hirs) >= DEFER_WEIGHT) {
        return None;
    }
    let mut dfas = Vec::with_capacity(parsed.len());
    let mut caches = Vec::with_capacity(parsed.len());
    let mut first = Vec::with_capacity(parsed.len());
    for hirs in &parsed {
        let (d, c, s) = lazy_dfa(hirs)?;
        dfas.push(d);
        caches.push(c);
        first.push(s);
    }
    // One byte of each set that every automaton reads alike.
    let mut bytes = Vec::new();
    let mut kinds: HashSet<Vec<u8>> = HashSet::new();
    for b in 0..=255u8 {
        if kinds.insert(dfas.iter().map(|d| d.byte_classes().get(b)).collect()) {
            bytes.push(b);
        }
    }
    let mut places: HashSet<Vec<LazyStateID>> = HashSet::from([first.clone()]);
    let mut todo = vec![first];
    while let Some(at) = todo.pop() {
        let mut ends = true;
        for ((d, c), &s) in dfas.iter().zip(&mut caches).zip(&at) {
            if !d.next_eoi_state(c, s).ok()?.is_match() {
                ends = false;
                break;
            }
        }
        if ends {
            return Some(true);
        }
        for &b in &bytes {
            let mut next = Vec::with_capacity(at.len());
            for ((d, c), &s) in dfas.iter().zip(&mut caches).zip(&at) {
                let t = d.next_state(c, s, b).ok()?;
                if t.is_quit() {
                    return None;
                }
                if t.is_dead() {
                    break;
                }
                next.push(t);
            }
            if next.len() == at.len() && places.insert(next.clone()) {
                if places.len() > MAX_PLACES {
                    return None;
                }
                todo.push(next);
            }
        }
        if caches.iter().any(|c| c.clear_count() > 0) {
            return None;
        }
    }
    Some(false)
}

/// The classes and literal bytes of parsed parts `hirs` with each bounded repetition unrolled,
/// saturating ([`weight`]).
fn weight_of(hirs: &[regex_syntax::hir::Hir]) -> usize {
    hirs.iter().map(weight).fold(0, usize::saturating_add)
}

/// The classes and literal bytes of `h` with each bounded repetition unrolled (an unbounded
/// one counts its fewest copies), saturating.
fn weight(h: &regex_syntax::hir::Hir) -> usize {
    use regex_syntax::hir::HirKind;
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => 0,
        HirKind::Literal(l) => l.0.len(),
        HirKind::Class(_) => 1,
        HirKind::Repetition(r) => {
            let copies = r.max.unwrap_or(r.min).max(1) as usize;
            weight(&r.sub).saturating_mul(copies)
        }
        HirKind::Capture(c) => weight(&c.sub),
        HirKind::Concat(v) | HirKind::Alternation(v) => {
            v.iter().map(weight).fold(0, usize::saturating_add)
        }
    }
}

/// Appends to `out` a string that `h` may match, assertions aside: each repetition's fewest
/// copies, each alternation's first branch that has one, each class's first lowercase
/// letter, else uppercase letter, else digit, else first character (ASCII only with `ascii`).
/// `None` where there is none (an empty class) or it would be long.
fn witness(h: &regex_syntax::hir::Hir, ascii: bool, out: &mut String) -> Option<()> {
    use regex_syntax::hir::{Class, HirKind};
    const LONGEST: usize = 4096;
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => {}
        HirKind::Literal(l) => out.push_str(std::str::from_utf8(&l.0).ok()?),
        HirKind::Class(c) => {
            let ranges: Vec<(u32, u32)> = match c {
                Class::Unicode(c) => c
                    .iter()
                    .map(|r| (r.start() as u32, r.end() as u32))
                    .collect(),
                Class::Bytes(c) => c
                    .iter()
                    .map(|r| (r.start() as u32, r.end() as u32))
                    .collect(),
            };
            let within = |lo: u32, hi: u32| {
                ranges
                    .iter()
                    .find(|&&(a, b)| a <= hi && b >= lo)
                    .map(|&(a, _)| a.max(lo))
            };
            let first = ranges.first().map(|r| r.0).filter(|&a| !ascii || a < 0x80);
            let pick = within(0x61, 0x7a)
                .or_else(|| within(0x41, 0x5a))
                .or_else(|| within(0x30, 0x39))
                .or(first)?;
            if matches!(c, Class::Bytes(_)) && pick >= 0x80 {
                return None;
            }
            out.push(char::from_u32(pick)?);
        }
        HirKind::Repetition(r) => {
            for _ in 0..r.min {
                witness(&r.sub, ascii, out)?;
                if out.len() > LONGEST {
                    return None;
                }
            }
        }
        HirKind::Capture(c) => witness(&c.sub, ascii, out)?,
        HirKind::Concat(v) => {
            for x in v {
                witness(x, ascii, out)?;
            }
        }
        HirKind::Alternation(v) => {
            let at = out.len();
            let found = v.iter().any(|x| {
                out.truncate(at);
                witness(x, ascii, out).is_some()
            });
            if !found {
                return None;
            }
        }
    }
    (out.len() <= LONGEST).then_some(())
}

/// Length bounds above this are not unrolled into one automaton.
pub(super) const LONG: usize = 10_000;

/// Whether a length bound is above [`LONG`].
pub(super) fn is_long(f: &StringFacets) -> bool {
    f.min_length.unwrap_or(0) > LONG || f.max_length.is_some_and(|x| x > LONG)
}

/// Length bounds above this on a string without `pattern` or `format` are written as chunks,
/// as those above [`LONG`] always are: one automaton counting to 10,000 characters has a state
/// per count and place in a UTF-8 sequence, about 90,000 (publiccode's `longDescription`,
/// `minLength: 500` and `maxLength: 10000`, went past the automaton limit). Even a few thousand
/// states cost milliseconds to build and encode, once per bound, where chunks of a few kinds are
/// built once per process: publiccode's compile took 19 ms with chunks of 1,000 characters above
/// 4,000, 4 ms with chunks of 128 above 256.
pub(super) const CHUNKED: usize = 256;

/// Whether a length bound is above [`CHUNKED`].
pub(super) fn is_chunked(f: &StringFacets) -> bool {
    f.min_length.unwrap_or(0) > CHUNKED || f.max_length.is_some_and(|x| x > CHUNKED)
}

/// The decoded-content automaton of a string schema.
///
/// Length bounds above [`LONG`] are kept only when the other keywords already bound the
/// length (`format: date` under `maxLength: 65536`, say); otherwise they are refused here
/// (the compiler writes such strings as chunks instead, when no pattern or format goes with
/// them).
/// The strings a (regular, enforced) `format` accepts, exactly: what `format` keeps and what
/// its complement (`not` of `format`) takes out.
fn format_dfa(format: &str, path: &str) -> Result<Dfa, Error> {
    // The formats are a fixed set, so every one built is kept, process-wide: `hostname`'s
    // length bound is a product of some 14 ms, larger than `string_content` keeps, and was
    // built again for every schema that named it.
    type Memo = Mutex<HashMap<String, Arc<Dfa>>>;
    static MEMO: OnceLock<Memo> = OnceLock::new();
    let memo = MEMO.get_or_init(Default::default);
    // A poisoned lock only means another thread panicked mid-insert; the map stays valid.
    if let Some(d) = memo.lock().unwrap_or_else(|p| p.into_inner()).get(format) {
        return Ok(Dfa::clone(d));
    }
    // Read from the tables built ahead of time: the first schema in a process that names
    // `uri` or `hostname` paid 8 to 17 ms for its determinization (`prebuilt`).
    let d = match super::prebuilt::format(format) {
        Some(d) => d,
        None => build_format_dfa(format, path)?,
    };
    memo.lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(format.to_string(), Arc::new(d.clone()));
    Ok(d)
}

pub(super) fn build_format_dfa(format: &str, path: &str) -> Result<Dfa, Error> {
    let re = format_regex(format).ok_or_else(|| unsupported(format!("format {format:?}"), path))?;
    let mut d = Dfa::from_regex(&format!("(?:{re})"))?;
    if format == "hostname" {
        d = d.with_char_count(1, Some(63))?;
        // RFC 5891 (4.2.3.1): no label has `--` in its third and fourth places. This
        // refuses IDNA A-labels (`xn--...`), whose Punycode no automaton checks: stricter
        // than RFC 5890, never looser.
        d = d.minus(&Dfa::from_regex("(.*\\.)?[^.][^.]--.*")?)?;
    }
    // Minimal: every automaton built from this one is a product of it, and the expressions
    // and products spell one future many times (`hostname` was 7,392 states, 411 minimal).
    Ok(d.minimized())
}

/// Whether `not` of `format` can be enforced: [`format_superset_dfa`] has an automaton for
/// every string the format defines as valid.
pub(super) fn format_complementable(format: &str) -> bool {
    format != "email" && format_regex(format).is_some()
}

/// What `not` of `format` takes out: every string the format defines as valid, and a few
/// more where [`format_dfa`] is stricter than the definition (leap seconds in any offset, host
/// names of any length and with `--` in any label), so that the complement never keeps a
/// valid one: stricter than the definition, never looser. `email` has no such automaton (a
/// quoted local part may hold almost anything) and is refused.
fn format_superset_dfa(format: &str, path: &str) -> Result<Dfa, Error> {
    let refuse = || unsupported(format!("not (format {format:?})"), path);
    let re = match format {
        "email" => return Err(refuse()),
        "time" => TIME_SUPERSET.to_string(),
        "date-time" => format!("{DATE}[tT]{TIME_SUPERSET}"),
        "hostname" => {
            r"[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*"
                .to_string()
        }
        // The others are exact: the format's own automaton (kept, and built ahead of time).
        f if format_regex(f).is_some() => return format_dfa(f, path),
        _ => return Err(refuse()),
    };
    Dfa::from_regex(&format!("(?:{re})"))
}

pub(super) fn string_content(f: &StringFacets, path: &str) -> Result<Dfa, Error> {
    // Schemas repeat their string keywords (one pattern or format on many properties, and
    // again in each schema that shares a definition), and each build is a product or more:
    // automata of moderate size are kept per set of keywords, process-wide, up to a bound,
    // as `Dfa::from_regex` keeps its automata. Errors are not kept (they name the path).
    type Memo = Mutex<Oldest<StringFacets, Arc<Dfa>>>;
    static MEMO: OnceLock<Memo> = OnceLock::new();
    const MEMO_ENTRIES: usize = 1024;
    const MEMO_STATES: usize = 1 << 12;
    if *f == StringFacets::default() {
        return Ok(Dfa::any_string().clone());
    }
    let memo = MEMO.get_or_init(|| Mutex::new(Oldest::new(MEMO_ENTRIES)));
    // A poisoned lock only means another thread panicked mid-insert; the map stays valid.
    if let Some(d) = memo.lock().unwrap_or_else(|p| p.into_inner()).get(f) {
        return Ok(Dfa::clone(d));
    }
    let d = build_string_content(f, path)?;
    if d.num_states() <= MEMO_STATES {
        let mut m = memo.lock().unwrap_or_else(|p| p.into_inner());
        m.keep(f.clone(), Arc::new(d.clone()), MEMO_ENTRIES);
    }
    Ok(d)
}

fn build_string_content(f: &StringFacets, path: &str) -> Result<Dfa, Error> {
    // Patterns and formats match valid UTF-8 strings only (`Dfa::from_regex`), so the first of
    // them is the strings so far, without a product with every string.
    let mut d: Option<Dfa> = None;
    let meet = |d: &mut Option<Dfa>, x: Dfa| -> Result<(), Error> {
        *d = Some(match d.take() {
            None => x,
            Some(d) => d.intersect(&x)?,
        });
        Ok(())
    };
    for p in &f.patterns {
        meet(&mut d, pattern_dfa(p)?)?;
    }
    if let Some(format) = &f.format {
        meet(&mut d, format_dfa(format, path)?)?;
    }
    let mut d = d.unwrap_or_else(|| Dfa::any_string().clone());
    for p in &f.not_patterns {
        d = d.minus(&pattern_dfa(p)?)?;
    }
    for format in &f.not_formats {
        d = d.minus(&format_superset_dfa(format, path)?)?;
    }
    let (mut min, mut max) = (f.min_length.unwrap_or(0), f.max_length);
    if is_long(f) {
        // Every string left is at most `longest` bytes, so at most that many characters.
        match d.longest_match() {
            Some(longest) if longest <= LONG => {
                if min > longest {
                    return Ok(Dfa::empty());
                }
                max = Some(max.map_or(longest, |x| x.min(longest)));
                min = min.min(longest);
            }
            _ => return Err(unsupported("minLength/maxLength above 10000", path)),
        }
    }
    if min > 0 || max.is_some() {
        d = d.with_char_count(min, max)?;
    }
    Ok(d)
}

/// The strings among `values` (other values are skipped) as one automaton, their trie.
/// Built as a union of one literal per value it took a product per value over an automaton
/// that grew with each: quadratic in a long `enum`.
pub(crate) fn string_set<'a>(values: impl IntoIterator<Item = &'a Value>) -> Result<Dfa, Error> {
    let words: Vec<&[u8]> = values
        .into_iter()
        .filter_map(|v| v.as_str().map(str::as_bytes))
        .collect();
    Dfa::literals(&words, STATE_LIMIT)
}

/// The strings that node `n`'s string keywords, `enum` and excluded values allow (its other
/// keywords aside). An `enum` alone is its strings' trie, without a product with every string
/// (golangci's linter names, tsconfig's `lib`).
pub(super) fn node_strings(n: &Node, path: &str) -> Result<Dfa, Error> {
    let d = match &n.values {
        Some(values) if n.string == StringFacets::default() => string_set(values)?,
        Some(values) => string_content(&n.string, path)?.intersect(&string_set(values)?)?,
        None => string_content(&n.string, path)?,
    };
    without_strings(d, n.excluded.iter().flatten())
}

/// `d` without the strings among `values` (other values are skipped): one difference with
/// their trie ([`string_set`]), where taking them out one by one cost a product each (a long
/// `not: {enum: [...]}`). `d` itself when there are none.
pub(crate) fn without_strings<'a>(
    d: Dfa,
    values: impl IntoIterator<Item = &'a Value>,
) -> Result<Dfa, Error> {
    let set = string_set(values)?;
    if set.is_empty_language() {
        return Ok(d);
    }
    d.minus(&set)
}

#[cfg(test)]
mod set_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn string_sets_hold_the_strings_and_only_them() {
        let values = [
            json!("ab"),
            json!(1),
            json!("a\"b"),
            json!(""),
            json!(null),
            json!("ab"),
        ];
        let set = string_set(&values).unwrap();
        let words: [(&[u8], bool); 6] = [
            (b"ab", true),
            (b"a\"b", true),
            (b"", true),
            (b"a", false),
            (b"1", false),
            (b"abc", false),
        ];
        for (w, inside) in words {
            assert_eq!(set.matches(w), inside, "{w:?}");
        }
        // Taken out of an automaton: exactly those strings go.
        let d = without_strings(Dfa::from_regex("a.*|").unwrap(), &values).unwrap();
        for (w, kept) in [
            (&b"ab"[..], false),
            (b"a\"b", false),
            (b"", false),
            (b"a", true),
            (b"abc", true),
            (b"b", false),
        ] {
            assert_eq!(d.matches(w), kept, "{w:?}");
        }
        // No strings among the values: the automaton itself, and an empty set.
        let e = Dfa::from_regex("x+").unwrap();
        assert_eq!(without_strings(e.clone(), &[json!(3)]).unwrap(), e);
        assert!(string_set(&[json!(true)]).unwrap().is_empty_language());
    }

    #[test]
    fn remembered_string_contents_are_the_ones_built() {
        let facets = [
            StringFacets::default(),
            StringFacets {
                patterns: vec!["^[a-z]+$".into()],
                max_length: Some(5),
                ..StringFacets::default()
            },
            StringFacets {
                format: Some("date".into()),
                not_patterns: vec!["^2000".into()],
                ..StringFacets::default()
            },
        ];
        for f in &facets {
            let fresh = build_string_content(f, "#").unwrap();
            let first = string_content(f, "#").unwrap();
            let again = string_content(f, "#").unwrap();
            assert!(first == fresh && again == fresh, "{f:?}");
        }
        // Errors are not remembered as automata.
        let bad = StringFacets {
            patterns: vec!["(".into()],
            ..StringFacets::default()
        };
        assert!(string_content(&bad, "#").is_err() && string_content(&bad, "#").is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_with_look_aheads_are_kept_with_their_language() {
        // A pattern built as a product or a difference is kept per pattern: asked again, it
        // is the same automaton (table and numbering), and it is the language of the pattern
        // (strings checked one by one, as ECMA-262 reads them).
        let cases: [(&str, &[&str], &[&str]); 3] = [
            (
                "^(?!pattern$).*$",
                &["", "patterns", "other"],
                &["pattern", "pattern\n"],
            ),
            (
                "^(?=.*a)(?!.*b)",
                &["a", "ca", "aaa"],
                &["", "ab", "b", "c"],
            ),
            (
                "^((?!message|severity).)*$",
                &["", "msg", "severe"],
                &["a message", "severity"],
            ),
        ];
        for (p, yes, no) in cases {
            let (fresh, product) = build_pattern_dfa(p).unwrap();
            assert!(product, "{p}");
            let first = pattern_dfa(p).unwrap();
            let again = pattern_dfa(p).unwrap();
            assert!(first == fresh && again == fresh, "{p}");
            for s in yes {
                assert!(again.matches(s.as_bytes()), "{p} {s:?}");
            }
            for s in no {
                assert!(!again.matches(s.as_bytes()), "{p} {s:?}");
            }
        }
        // A plain pattern is `Dfa::from_regex`'s to keep, not kept twice.
        assert!(!build_pattern_dfa("^[a-z]+$").unwrap().1);
    }

    #[test]
    fn alternatives_anchored_at_either_end_match_only_there() {
        // Each top-level alternative keeps its own anchors (`^a$` whole, `^b` at the start,
        // `c$` at the end, `d` anywhere); an escaped `$`, one in a class or inside a group is
        // a character or an assertion where it stands, not the alternative's end.
        let cases: [(&str, &[&str], &[&str]); 5] = [
            (
                "^a$|^b|c$|d",
                &["a", "b", "bx", "xc", "c", "xdx", "d"],
                &["", "ab", "xa", "cx", "xb", "ax"],
            ),
            ("x|y\\$", &["y$", "ay$b", "x"], &["y", "", "ya"]),
            ("[$]|z$", &["$", "a$b", "az", "z"], &["za", "", "a"]),
            ("a$$|^$", &["a", "ba", ""], &["ab", "b"]),
            (
                "(a$|b)c|e$",
                &["bc", "xbcx", "e", "ae"],
                &["ac", "a", "b", "ea"],
            ),
        ];
        for (p, yes, no) in cases {
            let d = pattern_dfa(p).unwrap();
            for s in yes {
                assert!(d.matches(s.as_bytes()), "{p} {s:?}");
            }
            for s in no {
                assert!(!d.matches(s.as_bytes()), "{p} {s:?}");
            }
        }
    }
}

#[cfg(test)]
mod deferral_tests {
    use super::*;

    const URL: &str = "^https?:\\/\\/(www\\.)?[-a-zA-Z0-9@:%._\\+~#=]{1,256}\\.[a-zA-Z0-9()]{1,6}\\b([-a-zA-Z0-9()@:%_\\+.~#?&//=]*)$";

    /// `large_patterns_meet` answers as the product of the patterns' whole automata does.
    #[test]
    fn lazily_met_patterns_agree_with_their_product() {
        let pairs = [
            (URL, "^[~|/][a-zA-Z-_0-9/\\.~]+$"),
            (URL, "^[a-zA-Z-_0-9]+/[a-zA-Z-_0-9\\.]+$"),
            (URL, "^https://.*$"),
            (URL, "example"),
            (URL, "^http://x\\.y$"),
            ("^a{1,200}$", "^a{150,}$"),
            ("^a{1,200}$", "^a{201,}$"),
            ("^[0-9]{100,120}$", "[a-z]"),
            ("^[0-9]{100,120}$", "^\\d+$"),
            ("^(ab){60}$|^c$", "^[abc]$"),
        ];
        for (a, b) in pairs {
            let product = pattern_dfa(a)
                .and_then(|d| d.intersect(&pattern_dfa(b)?))
                .expect("builds");
            assert_eq!(
                large_patterns_meet(&[a, b]),
                Some(!product.is_empty_language()),
                "{a} and {b}"
            );
        }
    }

    /// A pattern is deferred only when large and known to match some string within the length
    /// bounds: never one whose language is empty.
    #[test]
    fn only_large_patterns_that_match_something_are_deferred() {
        let facets = |p: &str, max: Option<usize>| StringFacets {
            patterns: vec![p.to_string()],
            max_length: max,
            ..StringFacets::default()
        };
        assert!(deferrable(&facets(URL, None)));
        assert!(deferrable(&facets(URL, Some(128))));
        // The shortest URL is 10 characters.
        assert!(!deferrable(&facets(URL, Some(9))));
        // Small: built at compile.
        assert!(!deferrable(&facets("^[a-z]+$", None)));
        // Letters then a digit across a word boundary: no string at all.
        assert!(!deferrable(&facets("^[a-z]{100,200}\\b\\d$", None)));
        // Other keywords beside it.
        let mut f = facets(URL, None);
        f.format = Some("uri".into());
        assert!(!deferrable(&f));
    }
}
