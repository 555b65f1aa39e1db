//! `format: "regex"`: a string is valid when its (decoded) content is an ECMA-262 regular
//! expression `Pattern`, as a grammar over the JSON string, since nested groups make the
//! language context-free.
//!
//! **Dialect.** ECMA-262 (16th edition, 2025) `Pattern[+UnicodeMode, +NamedCaptureGroups]`:
//! the `u`-flag syntax, which JSON Schema 2019-09 and 2020-12 recommend ("regular expressions
//! SHOULD be built with the `u` flag") and which the JSON-Schema-Test-Suite's
//! `optional/format/ecmascript-regex.json` follows (`\a` is invalid, `(?<name>x)` valid). The
//! web-compatibility syntax of Annex B (without `u`) is not the dialect: there `a{`, `]`, `\a`
//! and `[\d-z]` are valid, and here they are not. Python's `re` (which labelled the real-world
//! corpus) is another dialect again: its `(?P<name>...)`, `(?#...)` and global `(?i)` are
//! refused here, and ECMA's `\cA`, `\u{...}`, `[]` and `[^]` accepted. Where the dialects
//! disagree, the mask follows the `u`-mode syntax alone: a string that Annex B or Python
//! accepts and `u`-mode refuses is refused, and one that `u`-mode accepts is accepted even
//! where Python refuses it (so a label made with Python's `re` can call such a string
//! invalid).
//!
//! **Exact, with five restrictions that only refuse.** What a context-free grammar (or a
//! small automaton) cannot check is refused, so no string that ECMA-262 refuses is ever
//! accepted; these valid ones are refused:
//! - back references (`\1`, `\k<name>`): ECMA requires the group they name to exist
//!   somewhere in the pattern, before or after;
//! - more than one named group (two could carry the same name, which ECMA refuses unless they
//!   sit in different alternatives), and group names outside `[A-Za-z$_][A-Za-z0-9$_]*`
//!   (names with `\u` escapes or non-ASCII letters);
//! - a class range whose first end is above U+00FF (`[\u4e00-\u9fa5]`); the ends are compared
//!   exactly when the first is at most U+00FF, whatever the second is;
//! - a quantifier `{n,m}` where `n` and `m` have the same number of significant digits and
//!   more than three (`{1000,2000}`); `{1,100000}`, `{5}` and `{5,}` are fine;
//! - `\p{...}`/`\P{...}` other than `General_Category` values (alone or as `gc=`,
//!   `General_Category=`) and the binary properties of ECMA-262's table of binary Unicode
//!   property aliases; `Script=` and `Script_Extensions=` are refused.
//!
//! Everything else follows the specification's grammar and early errors: quantifiers only
//! after an atom (`a**`, `?`, `{2}` alone refused), `{n,m}` with `n <= m`, no quantified
//! look-around, `\0` not followed by a digit, class ranges in order and without class escapes
//! at either end, `\c` only before a letter, `\u{...}` at most U+10FFFF, identity escapes only
//! of syntax characters and `/`, and ES2025's modifiers `(?ims-ims:...)` with each flag once.
//! Beside it the compiler takes `minLength: 1` (no empty pattern) and one `pattern` without
//! `^` or `$`, looked for within each run of atoms (a match across a group's, class's or
//! alternative's delimiter, a braced quantifier or a property escape is refused: a sixth
//! restriction that only refuses); other string keywords with it are refused by name.
//!
//! The automata are built once per process (`pieces`), later schemas share them
//! (`GrammarBuilder::shared_terminal`), so that a schema with the format compiles in a few
//! milliseconds. Their five operands (a run; a quantifier after a group or class; the rest of
//! a class, of a braced quantifier and of a property escape) take about 80 ms of CPU to build,
//! so they are built ahead of time and read back (`prebuilt`); the first schema with the
//! format pays about 2 ms for the rest. A run holds neither a braced quantifier nor a property
//! escape: each ends the run as a delimiter does, and its rest is a terminal of its own. The
//! check of the braces' bounds and the property names multiplied the run's states (1,191
//! states of 85 byte classes, 34 of 36 without them), and a `pattern` beside the format
//! multiplies the run's states again by its own (schema-org-place's `\b\d{13}\b` made
//! 11,239 states of the run, copied into a table per delimiter: 20 ms of that schema's
//! compile, 2 ms in all now).

use std::sync::{Arc, OnceLock};

use super::compile::Compiler;
use super::schema::unsupported;
use crate::dfa::{Dfa, Kept, IDENTITY};
use crate::grammar::Sym;
use crate::Error;

/// The `General_Category` values (PropertyValueAliases.txt's long and short names).
const GENERAL_CATEGORY: &[&str] = &[
    "Cased_Letter",
    "LC",
    "Close_Punctuation",
    "Pe",
    "Connector_Punctuation",
    "Pc",
    "Control",
    "Cc",
    "cntrl",
    "Currency_Symbol",
    "Sc",
    "Dash_Punctuation",
    "Pd",
    "Decimal_Number",
    "Nd",
    "digit",
    "Enclosing_Mark",
    "Me",
    "Final_Punctuation",
    "Pf",
    "Format",
    "Cf",
    "Initial_Punctuation",
    "Pi",
    "Letter",
    "L",
    "Letter_Number",
    "Nl",
    "Line_Separator",
    "Zl",
    "Lowercase_Letter",
    "Ll",
    "Mark",
    "M",
    "Combining_Mark",
    "Math_Symbol",
    "Sm",
    "Modifier_Letter",
    "Lm",
    "Modifier_Symbol",
    "Sk",
    "Nonspacing_Mark",
    "Mn",
    "Number",
    "N",
    "Open_Punctuation",
    "Ps",
    "Other",
    "C",
    "Other_Letter",
    "Lo",
    "Other_Number",
    "No",
    "Other_Punctuation",
    "Po",
    "Other_Symbol",
    "So",
    "Paragraph_Separator",
    "Zp",
    "Private_Use",
    "Co",
    "Punctuation",
    "P",
    "punct",
    "Separator",
    "Z",
    "Space_Separator",
    "Zs",
    "Spacing_Mark",
    "Mc",
    "Surrogate",
    "Cs",
    "Symbol",
    "S",
    "Titlecase_Letter",
    "Lt",
    "Unassigned",
    "Cn",
    "Uppercase_Letter",
    "Lu",
];

/// ECMA-262's binary Unicode property aliases (the canonical names and their short aliases).
const BINARY_PROPERTIES: &[&str] = &[
    "ASCII",
    "ASCII_Hex_Digit",
    "AHex",
    "Alphabetic",
    "Alpha",
    "Any",
    "Assigned",
    "Bidi_Control",
    "Bidi_C",
    "Bidi_Mirrored",
    "Bidi_M",
    "Case_Ignorable",
    "CI",
    "Cased",
    "Changes_When_Casefolded",
    "CWCF",
    "Changes_When_Casemapped",
    "CWCM",
    "Changes_When_Lowercased",
    "CWL",
    "Changes_When_NFKC_Casefolded",
    "CWKCF",
    "Changes_When_Titlecased",
    "CWT",
    "Changes_When_Uppercased",
    "CWU",
    "Dash",
    "Default_Ignorable_Code_Point",
    "DI",
    "Deprecated",
    "Dep",
    "Diacritic",
    "Dia",
    "Emoji",
    "Emoji_Component",
    "EComp",
    "Emoji_Modifier",
    "EMod",
    "Emoji_Modifier_Base",
    "EBase",
    "Emoji_Presentation",
    "EPres",
    "Extended_Pictographic",
    "ExtPict",
    "Extender",
    "Ext",
    "Grapheme_Base",
    "Gr_Base",
    "Grapheme_Extend",
    "Gr_Ext",
    "Hex_Digit",
    "Hex",
    "IDS_Binary_Operator",
    "IDSB",
    "IDS_Trinary_Operator",
    "IDST",
    "ID_Continue",
    "IDC",
    "ID_Start",
    "IDS",
    "Ideographic",
    "Ideo",
    "Join_Control",
    "Join_C",
    "Logical_Order_Exception",
    "LOE",
    "Lowercase",
    "Lower",
    "Math",
    "Noncharacter_Code_Point",
    "NChar",
    "Pattern_Syntax",
    "Pat_Syn",
    "Pattern_White_Space",
    "Pat_WS",
    "Quotation_Mark",
    "QMark",
    "Radical",
    "Regional_Indicator",
    "RI",
    "Sentence_Terminal",
    "STerm",
    "Soft_Dotted",
    "SD",
    "Terminal_Punctuation",
    "Term",
    "Unified_Ideograph",
    "UIdeo",
    "Uppercase",
    "Upper",
    "Variation_Selector",
    "VS",
    "White_Space",
    "space",
    "XID_Continue",
    "XIDC",
    "XID_Start",
    "XIDS",
];

/// The names of [`property_names`] as a trie over their bytes (node 0 is the root), so that
/// the class automaton reads a name one byte at a time in one step each.
struct NameTrie {
    /// Per node, its children as (byte, node), in byte order.
    children: Vec<Vec<(u8, u32)>>,
    /// Per node, whether a whole name ends there.
    whole: Vec<bool>,
}

impl NameTrie {
    fn new(names: &[String]) -> NameTrie {
        let mut t = NameTrie {
            children: vec![Vec::new()],
            whole: vec![false],
        };
        for name in names {
            let mut v = 0usize;
            for &b in name.as_bytes() {
                v = match t.child(v as u32, b) {
                    Some(c) => c as usize,
                    None => {
                        let c = t.whole.len();
                        t.children.push(Vec::new());
                        t.whole.push(false);
                        let at = t.children[v].partition_point(|&(x, _)| x < b);
                        t.children[v].insert(at, (b, c as u32));
                        c
                    }
                };
            }
            t.whole[v] = true;
        }
        t
    }

    fn child(&self, node: u32, b: u8) -> Option<u32> {
        let kids = &self.children[node as usize];
        kids.binary_search_by_key(&b, |&(x, _)| x)
            .ok()
            .map(|i| kids[i].1)
    }
}

/// What may stand between the braces of `\p{...}`.
fn property_names() -> Vec<String> {
    let mut names: Vec<String> = BINARY_PROPERTIES.iter().map(|s| s.to_string()).collect();
    for v in GENERAL_CATEGORY {
        names.push(v.to_string());
        names.push(format!("gc={v}"));
        names.push(format!("General_Category={v}"));
    }
    names.sort();
    names.dedup();
    names
}

/// Significant digits of `{n,m}`'s `n` compared exactly when `m` has as many: `{100,999}`
/// is written, `{1000,2000}` (as many digits, more than these) is refused as not compared. Each
/// digit kept multiplies the states of the automata that check the bounds by about three:
/// when the run of atoms held braced quantifiers (3,990 states with three digits, 1,194 with
/// two), a `pattern` beside `format: "regex"` multiplied those again by its own, and two were
/// kept; now only the rest of a braced quantifier and the quantifier after a group or class
/// check them, terminals of their own.
const EXACT_DIGITS: usize = 3;

/// The terminals of the grammar, over the JSON string's bytes. A run of atoms (each maybe
/// quantified by `*`, `+` or `?`) and assertions is never a terminal of its own: it is the
/// optional start of the terminal that ends with the next delimiter (`(`, `[`, `|`, `)`, the
/// closing quote, a braced quantifier's `{`, a property escape's `\p{`), so a terminal ends
/// only at a delimiter, never after any atom (a mask would otherwise look past the end of a run
/// at every byte). The three openers that start with `(` (a group, a look-around, a named group) share
/// their terminal, up to the `(`, and their rests after it are terminals of their own: one
/// table of the run where three were (a `pattern` beside the format makes each table again per
/// pattern, twice).
struct Pieces {
    /// A run, then `(`.
    paren: Arc<Dfa>,
    /// After that `(`: `?:` or `?flags-flags:` of a group (or nothing).
    open_rest: Arc<Dfa>,
    /// After that `(`: `?=`, `?!`, `?<=` or `?<!` of a look-around.
    look_rest: Arc<Dfa>,
    /// After that `(`: `?<name>` of a named group.
    named_rest: Arc<Dfa>,
    /// A run, then a class's `[`.
    class_open: Arc<Dfa>,
    /// The rest of a character class, to its `]`.
    class_rest: Arc<Dfa>,
    /// A run, then `|`.
    bar: Arc<Dfa>,
    /// A run, then `)`.
    close: Arc<Dfa>,
    /// A run, then the string's closing quote.
    end: Arc<Dfa>,
    /// A run that ends with an atom no quantifier follows yet, then a braced quantifier's
    /// `{` (`run_atom`, then `brace_delim`).
    brace: Arc<Dfa>,
    /// After that `{`: `n}`, `n,}` or `n,m}` with `n <= m`, and a lazy quantifier's `?`.
    brace_rest: Arc<Dfa>,
    /// A run, then a property escape's `\\p{` or `\\P{` (`prop_delim`).
    prop: Arc<Dfa>,
    /// After that `{`: a property name or value and the closing `}`.
    prop_rest: Arc<Dfa>,
    /// A quantifier after a group or class.
    quantifier: Arc<Dfa>,
    /// `end` without the string that is only the closing quote (`minLength: 1`).
    nonempty_end: Arc<Dfa>,
    /// The run alone, for a `pattern` beside the format.
    run: Dfa,
    /// The runs of `brace`, for a `pattern` beside the format.
    run_atom: Dfa,
    /// What ends a run, for a `pattern` beside the format.
    delims: Delims,
}

/// The delimiters that end a run of atoms, as automata over the JSON string's bytes.
struct Delims {
    /// `paren`'s, `class_open`'s, `bar`'s, `close`'s and `end`'s, in that order: one byte
    /// each, read as written (`end`'s is the string's closing quote).
    plain: [Dfa; 5],
    /// `brace`'s, `{`.
    brace: Dfa,
    /// `prop`'s, `\\p{` or `\\P{` as JSON writes the backslash.
    prop: Dfa,
}

impl Delims {
    fn new() -> Result<Delims, Error> {
        Ok(Delims {
            plain: [
                Dfa::literal(b"("),
                Dfa::literal(b"["),
                Dfa::literal(b"|"),
                Dfa::literal(b")"),
                Dfa::literal(b"\""),
            ],
            brace: Dfa::literal(b"{"),
            prop: Dfa::from_regex(r"\\\\[pP]\{")?,
        })
    }

    /// The seven terminals that end with a delimiter, in the order of [`Delims::plain`] and
    /// then `brace`'s and `prop`'s: `run` then each plain delimiter, `run_atom` (the runs that
    /// a quantifier may follow) then `{`, and `run` then `\\p{`, a concatenation that overlaps
    /// (the run reads on with a backslash, its other escapes). The pieces' own runs, and a
    /// pattern's runs with a match.
    fn after(&self, run: &Dfa, run_atom: &Dfa) -> Result<[Dfa; 7], Error> {
        let then = |run: &Dfa, d: &Dfa| {
            run.then(d)?
                .ok_or_else(|| unsupported("format \"regex\" (internal: a run's delimiter)", "#"))
        };
        let [paren, class_open, bar, close, end] = &self.plain;
        Ok([
            then(run, paren)?,
            then(run, class_open)?,
            then(run, bar)?,
            then(run, close)?,
            then(run, end)?,
            then(run_atom, &self.brace)?,
            run.concat(&self.prop)?,
        ])
    }
}

fn pieces() -> Result<&'static Pieces, Error> {
    static PIECES: OnceLock<Result<Pieces, String>> = OnceLock::new();
    PIECES
        .get_or_init(|| build().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| unsupported(format!("format \"regex\" (internal: {e})"), "#"))
}

/// The three automata the pieces are made of, as JSON string contents: a run of atoms, a
/// quantifier after a group or class, and the rest of a character class. Their
/// determinizations and products are most of the pieces' cost, so they are built ahead of
/// time (`prebuilt`, `regex.dfa`) and only built here when the tables do not read back.
#[cfg(test)]
pub(super) const OPERANDS: [&str; 5] = [
    "run",
    "quantifier",
    "class rest",
    "brace rest",
    "property rest",
];

/// The operand `name` of [`OPERANDS`], built.
pub(super) fn build_operand(name: &str) -> Result<Dfa, Error> {
    let utf8 = Dfa::any_string();
    let hex = "[0-9A-Fa-f]";
    let names = property_names().join("|");
    let esc_char = format!(
        r"\\(?:[fnrtv]|c[A-Za-z]|x{hex}{{2}}|u{hex}{{4}}|u\{{0*(?:{hex}{{1,5}}|10{hex}{{4}})\}}|[\^$\\.*+?()\[\]{{}}|/])"
    );
    // A property escape (`\p{...}`) ends a run, as a delimiter does: the names are hundreds of
    // states that the run's table would carry at every atom.
    let esc_class = r"\\[dDsSwW]";
    // Grouped, so that a `?` after it makes it optional (not lazy).
    let quant = r"(?:(?:[*+?]|\{[0-9]+(?:,[0-9]*)?\})\??)";
    // A run's own quantifiers: a braced one ends the run (`Pieces::brace`), so that the check
    // of its bounds is a terminal of its own rather than a factor of the run's states.
    let run_quant = r"(?:[*+?]\??)";
    // Atoms that do not start with a digit and are not `\0`, each maybe quantified.
    let atom = format!(r"(?:[^\^$\\.*+?()\[\]{{}}|0-9]|\.|{esc_char}|{esc_class})");
    let assertion = r"(?:\^|\$|\\[bB])";
    let free = format!(r"(?:{atom}{run_quant}?|[0-9]{run_quant}?|\\0{run_quant}|{assertion})");
    let no_digit = format!(r"(?:{atom}{run_quant}?|\\0{run_quant}|{assertion})");
    // `\0` is never followed by a digit (a quantifier between them is fine).
    let run = format!(r"(?:{free}|(?:\\0)+{no_digit})*(?:\\0)*");
    match name {
        // Minimal operands keep the product small: regex-automata spells the quantifier once
        // per kind of atom before it, and the braces' check would multiply each spelling.
        "run" => Dfa::from_regex(&run)?
            .minimized()
            .intersect(utf8)?
            .json_content(),
        "quantifier" => Dfa::from_regex(quant)?
            .minus(&bad_braces()?.minimized())?
            .json_content(),
        // Minimal: 7,661 states as built, 3,205 minimal (the one table of its terminal).
        "class rest" => Ok(class_dfa()?.intersect(utf8)?.json_content()?.minimized()),
        "brace rest" => Dfa::from_regex(r"\{[0-9]+(?:,[0-9]*)?\}\??")?
            .minus(&bad_braces()?.minimized())?
            .after(b'{')?
            .json_content(),
        "property rest" => Dfa::from_regex(&format!(r"(?:{names})\}}"))?.json_content(),
        _ => Err(unsupported(
            format!("format \"regex\" (internal: no operand {name})"),
            "#",
        )),
    }
}

/// The operand `name`, read from the tables built ahead of time, or built.
fn operand(name: &str) -> Result<Dfa, Error> {
    match super::prebuilt::regex_operand(name) {
        Some(d) => Ok(d),
        None => build_operand(name),
    }
}

fn build() -> Result<Pieces, Error> {
    let run = operand("run")?;
    let quantifier = operand("quantifier")?;
    let mut mods = Vec::new();
    for add in flag_sets() {
        mods.push(add.clone());
        for remove in flag_sets() {
            if (!add.is_empty() || !remove.is_empty()) && !add.chars().any(|c| remove.contains(c)) {
                mods.push(format!("{add}-{remove}"));
            }
        }
    }
    let open_rest = format!(r"\?(?:{}):", mods.join("|"));
    // A run ends with an atom that a quantifier may follow where `*` could come next.
    let run_atom = run.reading_on(b'*')?;
    let delims = Delims::new()?;
    let [paren, class_open, bar, close, end, brace, prop] = delims.after(&run, &run_atom)?;
    Ok(Pieces {
        run: run.clone(),
        run_atom,
        brace: Arc::new(brace),
        brace_rest: Arc::new(operand("brace rest")?),
        prop: Arc::new(prop),
        prop_rest: Arc::new(operand("property rest")?),
        nonempty_end: Arc::new(end.minus(&Dfa::literal(b"\""))?),
        end: Arc::new(end),
        paren: Arc::new(paren),
        open_rest: Arc::new(Dfa::from_regex(&open_rest)?),
        look_rest: Arc::new(Dfa::from_regex(r"\?<?[=!]")?),
        named_rest: Arc::new(Dfa::from_regex(r"\?<[A-Za-z$_][A-Za-z0-9$_]*>")?),
        class_open: Arc::new(class_open),
        class_rest: Arc::new(operand("class rest")?),
        bar: Arc::new(bar),
        close: Arc::new(close),
        quantifier: Arc::new(quantifier),
        delims,
    })
}

/// Every ordering of every subset of the modifier flags `i`, `m`, `s`.
fn flag_sets() -> Vec<String> {
    let mut out = vec![String::new()];
    let mut frontier = vec![String::new()];
    for _ in 0..3 {
        let mut next = Vec::new();
        for s in &frontier {
            for f in ['i', 'm', 's'] {
                if !s.contains(f) {
                    next.push(format!("{s}{f}"));
                }
            }
        }
        out.extend(next.iter().cloned());
        frontier = next;
    }
    out
}

/// Strings holding a braced quantifier `{n,m}` that ECMA-262 refuses (`n > m`) or that is
/// not compared here (same number of significant digits, more than [`EXACT_DIGITS`]).
fn bad_braces() -> Result<Dfa, Error> {
    #[derive(Clone, PartialEq, Eq, Hash)]
    enum S {
        Scan,
        /// After `\\`: the escaped character is not a brace.
        Esc,
        /// After `\\u`, `\\p` or `\\P`, whose braces hold no quantifier.
        EscBrace,
        InBrace,
        /// After `{` and leading zeros of `n`.
        Open,
        /// `n`'s significant digits (all of them while at most EXACT_DIGITS; then the count).
        N(Vec<u8>, usize),
        /// Right after the comma (`{n,}` may close here).
        Comma(Vec<u8>, usize),
        /// After `m`'s leading zeros.
        Zeros(Vec<u8>, usize),
        /// `m`'s significant digits read: how many, and how `m`'s prefix compares with
        /// `n`'s prefix of the same length (only while `m` is no longer than `n`).
        M(Vec<u8>, usize, usize, std::cmp::Ordering),
        Found,
    }
    use std::cmp::Ordering::*;
    Dfa::explore(
        S::Scan,
        |s, b| {
            let digit = b.is_ascii_digit();
            Some(match (s, b) {
                (S::Found, _) => S::Found,
                (S::Esc, b'u' | b'p' | b'P') => S::EscBrace,
                (S::Esc, _) => S::Scan,
                (S::EscBrace, b'{') => S::InBrace,
                (S::InBrace, b'}') => S::Scan,
                (S::InBrace, _) => S::InBrace,
                (_, b'\\') => S::Esc,
                (_, b'{') => S::Open,
                (S::Open, b'0') => S::Open,
                (S::Open, _) if digit => S::N(vec![b], 1),
                (S::N(d, k), _) if digit => {
                    let k = k + 1;
                    if k <= EXACT_DIGITS {
                        let mut d = d.clone();
                        d.push(b);
                        S::N(d, k)
                    } else {
                        S::N(Vec::new(), k.min(64))
                    }
                }
                (S::N(d, k), b',') => S::Comma(d.clone(), *k),
                (S::Open, b',') => S::Comma(Vec::new(), 0),
                (S::Comma(d, k) | S::Zeros(d, k), b'0') => S::Zeros(d.clone(), *k),
                (S::Comma(d, k) | S::Zeros(d, k), _) if digit => {
                    let ord = match d.first() {
                        Some(&n0) => b.cmp(&n0),
                        None => Greater,
                    };
                    if ord == Equal {
                        S::M(d.clone(), *k, 1, ord)
                    } else {
                        S::M(vec![0; d.len()], *k, 1, ord)
                    }
                }
                (S::M(d, k, j, ord), _) if digit => {
                    let j = j + 1;
                    let ord = if *ord == Equal && j <= d.len() {
                        b.cmp(&d[j - 1])
                    } else {
                        *ord
                    };
                    if j > *k {
                        // Longer than `n`: fine whatever follows.
                        S::M(Vec::new(), 0, 1, Greater)
                    } else if ord != Equal {
                        // Decided: of `n`'s digits only how many were kept still matters.
                        S::M(vec![0; d.len()], *k, j, ord)
                    } else {
                        S::M(d.clone(), *k, j, ord)
                    }
                }
                // `m` closed: refused when shorter than `n`, smaller with as many digits, or
                // as long as an `n` whose digits were not kept.
                // `m` is zero.
                (S::Zeros(_, k), b'}') if *k > 0 => S::Found,
                (S::M(d, k, j, ord), b'}') => {
                    let bad = j < k || (j == k && (d.len() < *k || *ord == Less));
                    if bad {
                        S::Found
                    } else {
                        S::Scan
                    }
                }
                _ => S::Scan,
            })
        },
        |s| *s == S::Found,
        "format regex quantifier bounds",
        &brace_classes(),
    )
}

/// The bytes that [`bad_braces`] tells apart: each digit, `\\`, `{`, `}`, `,`, the escapes
/// whose braces hold no quantifier (`u`, `p`, `P`), and every other byte as one.
fn brace_classes() -> [u8; 256] {
    let mut classes = [0u8; 256];
    for b in b'0'..=b'9' {
        classes[b as usize] = b - b'0' + 1;
    }
    for (b, c) in [
        (b'\\', 11),
        (b'{', 12),
        (b'}', 13),
        (b',', 14),
        (b'u', 15),
        (b'p', 15),
        (b'P', 15),
    ] {
        classes[b as usize] = c;
    }
    classes
}

/// A class range's first end as far as the range check needs it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum End {
    /// A character at most U+00FF.
    Val(u8),
    /// A character above U+00FF.
    Big,
    /// A class escape (`\d`, `\p{L}`, ...), which no range may have at either end.
    Class,
}

/// Where an atom being read will go.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Ctx {
    /// A new atom, which may start a range.
    Free,
    /// The second end of a range whose first end is `v`, not yet decided.
    Range(u8),
    /// The second end of a range already known to be at least the first.
    RangeOk,
}

/// How the rest of a character's spelling adds to its value `p`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Digits {
    /// `left` more hexadecimal digits (`\xHH`, `\uHHHH`).
    Hex { left: u8 },
    /// `left` more UTF-8 continuation bytes.
    Utf8 { left: u8 },
    /// `\u{...}` digits: how many significant ones, and whether they begin `1` (1), `10` (2),
    /// or otherwise (3); at most U+10FFFF.
    Brace { sig: u8, lead: u8 },
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum Class {
    /// After `[`.
    Open,
    /// After `[^`.
    OpenNeg,
    /// After an atom that is not a range's second end (`zero`: it was `\0`).
    Post {
        x: End,
        zero: bool,
    },
    /// After an atom and `-`.
    Dash {
        x: End,
    },
    /// After a range.
    PostRange {
        zero: bool,
    },
    /// After `\` in an atom.
    Esc(Ctx),
    /// After `\c`.
    Ctrl(Ctx),
    /// After `\u`.
    U(Ctx),
    /// Reading a character's value: `p` so far (0 where it no longer matters).
    Value {
        ctx: Ctx,
        p: u32,
        digits: Digits,
    },
    /// After `\p` (`None`), then inside its braces: the name so far, as a node of the
    /// [`NameTrie`].
    Prop(Option<u32>),
    Done,
}

/// The class automaton after its `[`: ECMA-262's `ClassContents[+UnicodeMode,
/// ~UnicodeSetsMode]` and the `]`, ranges checked as the module docs say.
fn class_dfa() -> Result<Dfa, Error> {
    let names = NameTrie::new(&property_names());
    Dfa::explore(
        Class::Open,
        |s, b| class_next(s, b, &names),
        |s| *s == Class::Done,
        "format regex class",
        &IDENTITY,
    )
}

fn class_next(s: &Class, b: u8, names: &NameTrie) -> Option<Class> {
    match s {
        Class::Open if b == b'^' => Some(Class::OpenNeg),
        Class::Open | Class::OpenNeg if b == b']' => Some(Class::Done),
        Class::Open | Class::OpenNeg => atom_start(Ctx::Free, b),
        Class::Post { x, zero } => match b {
            b']' => Some(Class::Done),
            b'-' => Some(Class::Dash { x: *x }),
            _ if *zero && b.is_ascii_digit() => None,
            _ => atom_start(Ctx::Free, b),
        },
        Class::Dash { x } => match (b, x) {
            // `[a-]`: the dash is the class's last character.
            (b']', _) => Some(Class::Done),
            (_, End::Val(v)) => atom_start(Ctx::Range(*v), b),
            // A range from a class escape is an error; one from above U+00FF is not
            // compared here.
            _ => None,
        },
        Class::PostRange { zero } => match b {
            b']' => Some(Class::Done),
            _ if *zero && b.is_ascii_digit() => None,
            _ => atom_start(Ctx::Free, b),
        },
        Class::Esc(ctx) => escape(*ctx, b),
        Class::Ctrl(ctx) => b
            .is_ascii_alphabetic()
            .then(|| finish(*ctx, u32::from(b) % 32, false))
            .flatten(),
        Class::U(ctx) => match b {
            b'{' => Some(Class::Value {
                ctx: *ctx,
                p: 0,
                digits: Digits::Brace { sig: 0, lead: 0 },
            }),
            _ => hex(b).and_then(|d| value(*ctx, d, Digits::Hex { left: 3 })),
        },
        Class::Value { ctx, p, digits } => match *digits {
            Digits::Hex { left } => {
                hex(b).and_then(|d| value(*ctx, p * 16 + d, Digits::Hex { left: left - 1 }))
            }
            Digits::Utf8 { left } => (0x80..0xC0).contains(&b).then(|| {
                value(
                    *ctx,
                    p * 64 + u32::from(b & 0x3F),
                    Digits::Utf8 { left: left - 1 },
                )
            })?,
            Digits::Brace { sig, lead } => {
                if b == b'}' {
                    // At least one digit, leading zeros included (`\u{0}`).
                    return (sig > 0 || lead == 4)
                        .then(|| finish(*ctx, *p, false))
                        .flatten();
                }
                let d = hex(b)?;
                if sig == 0 && d == 0 {
                    // Leading zeros: `lead` 4 records that a digit was read.
                    return Some(Class::Value {
                        ctx: *ctx,
                        p: 0,
                        digits: Digits::Brace { sig: 0, lead: 4 },
                    });
                }
                let lead = match (sig, lead, d) {
                    (0, _, 1) => 1,
                    (0, _, _) => 3,
                    (1, 1, 0) => 2,
                    (1, _, _) => 3,
                    _ => lead,
                };
                let sig = sig + 1;
                // Six significant digits only as `10xxxx`, never seven.
                if sig > 6 || (sig == 6 && lead != 2) {
                    return None;
                }
                let p = if *p > 0xFF { *p } else { p * 16 + d };
                brace_value(*ctx, p.min(0x100), sig, lead)
            }
        },
        Class::Prop(None) => (b == b'{').then_some(Class::Prop(Some(0))),
        Class::Prop(Some(node)) => {
            if b == b'}' {
                return names.whole[*node as usize].then_some(Class::Post {
                    x: End::Class,
                    zero: false,
                });
            }
            names.child(*node, b).map(|c| Class::Prop(Some(c)))
        }
        Class::Done => None,
    }
}

/// The first byte of an atom.
fn atom_start(ctx: Ctx, b: u8) -> Option<Class> {
    match b {
        b'\\' => Some(Class::Esc(ctx)),
        // `]` ends the class; any other character stands for itself, `[` included.
        b']' => None,
        0x00..=0x7F => finish(ctx, u32::from(b), false),
        0xC2..=0xDF => value(ctx, u32::from(b & 0x1F), Digits::Utf8 { left: 1 }),
        0xE0..=0xEF => value(ctx, u32::from(b & 0x0F), Digits::Utf8 { left: 2 }),
        0xF0..=0xF4 => value(ctx, u32::from(b & 0x07), Digits::Utf8 { left: 3 }),
        _ => None,
    }
}

/// The byte after `\` in a class (`ClassEscape[+UnicodeMode]`).
fn escape(ctx: Ctx, b: u8) -> Option<Class> {
    let v = match b {
        b'd' | b'D' | b's' | b'S' | b'w' | b'W' => {
            return match ctx {
                Ctx::Free => Some(Class::Post {
                    x: End::Class,
                    zero: false,
                }),
                _ => None,
            }
        }
        b'p' | b'P' => {
            return match ctx {
                Ctx::Free => Some(Class::Prop(None)),
                _ => None,
            }
        }
        b'c' => return Some(Class::Ctrl(ctx)),
        b'u' => return Some(Class::U(ctx)),
        b'x' => {
            return Some(Class::Value {
                ctx,
                p: 0,
                digits: Digits::Hex { left: 2 },
            })
        }
        b'0' => return finish(ctx, 0, true),
        b'b' => 8,
        b'-' => 0x2D,
        b'f' => 0x0C,
        b'n' => 0x0A,
        b'r' => 0x0D,
        b't' => 0x09,
        b'v' => 0x0B,
        b'^' | b'$' | b'\\' | b'.' | b'*' | b'+' | b'?' | b'(' | b')' | b'[' | b']' | b'{'
        | b'}' | b'|' | b'/' => u32::from(b),
        _ => return None,
    };
    finish(ctx, v, false)
}

fn hex(b: u8) -> Option<u32> {
    (b as char).to_digit(16)
}

/// A character's spelling read up to value `p` with `digits` still to come: finished when
/// none are, and otherwise the state, its range check decided as soon as it can be.
fn value(ctx: Ctx, p: u32, digits: Digits) -> Option<Class> {
    let (base, left) = match digits {
        Digits::Hex { left } => (16u32, left),
        Digits::Utf8 { left } => (64u32, left),
        Digits::Brace { .. } => return Some(Class::Value { ctx, p, digits }),
    };
    if left == 0 {
        return finish(ctx, p, false);
    }
    let scale = base.pow(u32::from(left));
    let (lo, hi) = (p * scale, p * scale + scale - 1);
    let (ctx, p) = match ctx {
        Ctx::Range(v) if lo >= u32::from(v) => (Ctx::RangeOk, 0),
        Ctx::Range(v) if hi < u32::from(v) => return None,
        Ctx::RangeOk => (Ctx::RangeOk, 0),
        // A first end above U+00FF is only `Big`.
        Ctx::Free if lo > 0xFF => (Ctx::Free, 0x100),
        c => (c, p),
    };
    Some(Class::Value { ctx, p, digits })
}

/// `\u{...}` after a digit: `p` is the value so far, capped at 0x100.
fn brace_value(ctx: Ctx, p: u32, sig: u8, lead: u8) -> Option<Class> {
    let (ctx, p) = match ctx {
        // More digits only make the value larger.
        Ctx::Range(v) if p >= u32::from(v) => (Ctx::RangeOk, 0),
        // Closing now is an error and any further digit makes the value large enough: one
        // state says that for every such pair (`0x10` below `0xFF`, and `0x10` with a digit
        // more above it).
        Ctx::Range(v) if p * 16 >= u32::from(v) => (Ctx::Range(0xFF), 0x10),
        Ctx::RangeOk => (Ctx::RangeOk, 0),
        c => (c, p),
    };
    Some(Class::Value {
        ctx,
        p,
        digits: Digits::Brace { sig, lead },
    })
}

/// An atom read with value `v` (`zero`: it was `\0`).
fn finish(ctx: Ctx, v: u32, zero: bool) -> Option<Class> {
    match ctx {
        Ctx::Free => Some(Class::Post {
            x: u8::try_from(v).map_or(End::Big, End::Val),
            zero,
        }),
        Ctx::Range(first) if v < u32::from(first) => None,
        Ctx::Range(_) | Ctx::RangeOk => Some(Class::PostRange { zero }),
    }
}

impl Compiler<'_> {
    /// What may follow the `(` of a `paren` terminal: a group's optional `?:` or modifiers
    /// (`open_rest?`), a look-around's rest, and a named group's, as symbols of this grammar.
    fn opener_rests(&mut self, p: &Pieces) -> Result<[Sym; 3], Error> {
        let open_rest = self.b.shared_terminal(Arc::clone(&p.open_rest))?;
        let look = self.b.shared_terminal(Arc::clone(&p.look_rest))?;
        let named = self.b.shared_terminal(Arc::clone(&p.named_rest))?;
        let open = self
            .b
            .alts("regex group opener", vec![vec![], vec![open_rest]]);
        Ok([open, look, named])
    }

    /// The JSON strings whose content is an ECMA-262 pattern (module docs), as rules over
    /// terminals that each end with a delimiter (`Pieces`; `paren` is a run and `(`, the
    /// rests after it are `open_rest`, `look_rest` and `named_rest`), `k` the named groups
    /// inside (at most one):
    ///
    /// ```text
    /// S    -> '"' T_0 | '"' T_1          T_k -> Seq_k end         C_k -> Seq_k close
    /// S'   -> '"' Seq_0 U_0 end | '"' end' | '"' T_1   (`nonempty`: end' is end without '"')
    /// Seq_k -> ε (k = 0) | Seq_i U_j     (i + j = k)
    /// U_0  -> class_open class_rest q? | paren open_rest? C_0 q? | paren look_rest C_0 | bar
    ///       | brace brace_rest | prop prop_rest q?
    /// U_1  -> paren open_rest? C_1 q? | paren look_rest C_1 | paren named_rest C_0 q?
    /// ```
    pub(super) fn regex_format_string(&mut self, nonempty: bool) -> Result<Sym, Error> {
        if let Some(s) = self.regex_format[nonempty as usize] {
            return Ok(s);
        }
        let p = pieces()?;
        let mut t = |d: &Arc<Dfa>| self.b.shared_terminal(Arc::clone(d));
        let paren = t(&p.paren)?;
        let (class_open, class_rest, q) = (t(&p.class_open)?, t(&p.class_rest)?, t(&p.quantifier)?);
        let (bar, close, end) = (t(&p.bar)?, t(&p.close)?, t(&p.end)?);
        let (brace, brace_rest) = (t(&p.brace)?, t(&p.brace_rest)?);
        let (prop, prop_rest) = (t(&p.prop)?, t(&p.prop_rest)?);
        let [open, look, named] = self.opener_rests(p)?;
        let quote = self.lit("\"");
        let top = [self.b.nt("regex"), self.b.nt("regex, named")];
        let closed = [
            self.b.nt("regex group body"),
            self.b.nt("regex group body, named"),
        ];
        let seq = [self.b.nt("regex units"), self.b.nt("regex units, named")];
        let unit = [self.b.nt("regex unit"), self.b.nt("regex unit, named")];
        self.b.rule(seq[0], vec![]);
        for k in 0..2 {
            self.b.rule(top[k], vec![Sym::Nt(seq[k]), end]);
            self.b.rule(closed[k], vec![Sym::Nt(seq[k]), close]);
            for i in 0..=k {
                self.b
                    .rule(seq[k], vec![Sym::Nt(seq[i]), Sym::Nt(unit[k - i])]);
            }
            self.b.rule(unit[k], vec![paren, open, Sym::Nt(closed[k])]);
            self.b
                .rule(unit[k], vec![paren, open, Sym::Nt(closed[k]), q]);
            self.b.rule(unit[k], vec![paren, look, Sym::Nt(closed[k])]);
        }
        self.b.rule(unit[0], vec![class_open, class_rest]);
        self.b.rule(unit[0], vec![class_open, class_rest, q]);
        self.b.rule(unit[0], vec![bar]);
        self.b.rule(unit[0], vec![brace, brace_rest]);
        self.b.rule(unit[0], vec![prop, prop_rest]);
        self.b.rule(unit[0], vec![prop, prop_rest, q]);
        self.b.rule(unit[1], vec![paren, named, Sym::Nt(closed[0])]);
        self.b
            .rule(unit[1], vec![paren, named, Sym::Nt(closed[0]), q]);
        let s = self.b.alts(
            "regex format string",
            vec![vec![quote, Sym::Nt(top[0])], vec![quote, Sym::Nt(top[1])]],
        );
        let nonempty_end = self.b.shared_terminal(Arc::clone(&p.nonempty_end))?;
        let s1 = self.b.alts(
            "nonempty regex format string",
            vec![
                vec![quote, Sym::Nt(seq[0]), Sym::Nt(unit[0]), end],
                vec![quote, nonempty_end],
                vec![quote, Sym::Nt(top[1])],
            ],
        );
        self.regex_format = [Some(s), Some(s1)];
        Ok(if nonempty { s1 } else { s })
    }

    /// The JSON strings whose content is an ECMA-262 pattern and has a match of `pattern`
    /// (the automaton of the contents a JSON Schema `pattern` matches somewhere, without `^`
    /// or `$`), with a restriction that only refuses: the match lies within one run of atoms
    /// (`a(b)c` has no match of `abc` here). Each rule of [`Compiler::regex_format_string`]
    /// is split by whether a match was read in it (`f`), a run either holding one (`f = 1`)
    /// or any run (`f = 0`, the pieces' own terminals, shared with every other schema):
    ///
    /// ```text
    /// S -> '"' T_k,1     T_k,f|g -> Seq_k,f end_g     Seq_k,f|g -> Seq_i,f U_j,g  (i + j = k)
    /// U_k,f|g -> paren_f open_rest? C_k,g q? | ...       (end_1 = run ∩ match, then '"')
    /// ```
    ///
    /// Exact otherwise: a run is read as a string of its own, and its neighbours (a delimiter
    /// before, the delimiter of its terminal after, the string's start) are not word
    /// characters, so `\b` and `\B` judge its edges as they do in the whole string. A string
    /// with matches in several runs is read in as many ways (the parser keeps them all):
    /// splitting the runs into those with a match and those without built and copied a
    /// second set of tables for each pattern (schema-org-contact-point's compile, most of it
    /// its one pattern, took 6.4 ms so and takes 4.6).
    ///
    /// The terminals of runs with a match are kept process-wide per pattern text (`source`),
    /// as the pieces are.
    pub(super) fn regex_format_with_pattern(
        &mut self,
        source: &str,
        pattern: &Dfa,
    ) -> Result<Sym, Error> {
        type Matched = Arc<Vec<Arc<Dfa>>>;
        static MATCHED: OnceLock<Kept<String, Matched>> = OnceLock::new();
        let p = pieces()?;
        let internal = || unsupported("format \"regex\" (internal: pattern run)", "#");
        let matched = MATCHED
            .get_or_init(|| Kept::new(64))
            .get_or_try(source, || {
                let m = pattern.json_content()?;
                let ends = p
                    .delims
                    .after(&p.run.intersect(&m)?, &p.run_atom.intersect(&m)?)?;
                Ok::<Matched, Error>(Arc::new(ends.into_iter().map(Arc::new).collect()))
            })?;
        let any = [
            &p.paren,
            &p.class_open,
            &p.bar,
            &p.close,
            &p.end,
            &p.brace,
            &p.prop,
        ];
        let mut terms = Vec::new();
        for (a, m) in any.iter().zip(matched.iter()) {
            terms.push([
                self.b.shared_terminal(Arc::clone(a))?,
                self.b.shared_terminal(Arc::clone(m))?,
            ]);
        }
        let [paren, class_open, bar, close, end, brace, prop] =
            <[[Sym; 2]; 7]>::try_from(terms).map_err(|_| internal())?;
        let class_rest = self.b.shared_terminal(Arc::clone(&p.class_rest))?;
        let brace_rest = self.b.shared_terminal(Arc::clone(&p.brace_rest))?;
        let prop_rest = self.b.shared_terminal(Arc::clone(&p.prop_rest))?;
        let q = self.b.shared_terminal(Arc::clone(&p.quantifier))?;
        let [open, look, named] = self.opener_rests(p)?;
        let quote = self.lit("\"");
        let mut nts = |name: &str| {
            [
                [self.b.nt(name), self.b.nt(name)],
                [self.b.nt(name), self.b.nt(name)],
            ]
        };
        let top = nts("regex with match");
        let closed = nts("regex group body with match");
        let seq = nts("regex units with match");
        let unit = nts("regex unit with match");
        let nt = Sym::Nt;
        self.b.rule(seq[0][0], vec![]);
        for k in 0..2 {
            for f in 0..2 {
                for g in 0..2 {
                    let fg = f | g;
                    self.b.rule(top[k][fg], vec![nt(seq[k][f]), end[g]]);
                    self.b.rule(closed[k][fg], vec![nt(seq[k][f]), close[g]]);
                    for i in 0..=k {
                        self.b
                            .rule(seq[k][fg], vec![nt(seq[i][f]), nt(unit[k - i][g])]);
                    }
                    let pf = paren[f];
                    self.b.rule(unit[k][fg], vec![pf, open, nt(closed[k][g])]);
                    self.b
                        .rule(unit[k][fg], vec![pf, open, nt(closed[k][g]), q]);
                    self.b.rule(unit[k][fg], vec![pf, look, nt(closed[k][g])]);
                    if k == 1 {
                        self.b.rule(unit[1][fg], vec![pf, named, nt(closed[0][g])]);
                        self.b
                            .rule(unit[1][fg], vec![pf, named, nt(closed[0][g]), q]);
                    }
                }
            }
        }
        for f in 0..2 {
            self.b.rule(unit[0][f], vec![class_open[f], class_rest]);
            self.b.rule(unit[0][f], vec![class_open[f], class_rest, q]);
            self.b.rule(unit[0][f], vec![bar[f]]);
            self.b.rule(unit[0][f], vec![brace[f], brace_rest]);
            self.b.rule(unit[0][f], vec![prop[f], prop_rest]);
            self.b.rule(unit[0][f], vec![prop[f], prop_rest, q]);
        }
        Ok(self.b.alts(
            "regex format string with a pattern",
            vec![vec![quote, nt(top[0][1])], vec![quote, nt(top[1][1])]],
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::super::{compile_json_schema, JsonOptions};
    use crate::constraint::Constraint;
    use crate::{Error, Grammar, GrammarConstraint, TokenVocab};

    /// The grammar of `{"type": "string", "format": "regex"}`.
    fn grammar() -> Arc<Grammar> {
        compile_json_schema(
            &json!({"type": "string", "format": "regex"}),
            &JsonOptions::default(),
        )
        .expect("format regex compiles")
    }

    /// Whether a constraint over one-byte tokens lets the JSON string of `pattern` through,
    /// each byte in the mask before it is read, and then ends; the recogniser must agree.
    fn accepts(g: &Arc<Grammar>, pattern: &str) -> bool {
        let text = serde_json::to_string(pattern).expect("a JSON string");
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        tokens.push(Vec::new());
        let vocab = Arc::new(TokenVocab::new(tokens, &[256]).expect("vocabulary"));
        let mut c = GrammarConstraint::new(g.clone(), &vocab);
        let mut mask = vocab.empty_mask();
        let allowed = |m: &[u64], t: u32| m[t as usize / 64] >> (t % 64) & 1 == 1;
        let mut ok = true;
        for &b in text.as_bytes() {
            c.fill_mask(&mut mask).expect("mask");
            if !allowed(&mask, u32::from(b)) {
                ok = false;
                break;
            }
            c.advance(u32::from(b)).expect("an allowed byte advances");
        }
        if ok {
            c.fill_mask(&mut mask).expect("mask");
            ok = allowed(&mask, 256);
        }
        assert_eq!(
            g.recognizes(text.as_bytes()),
            ok,
            "mask and grammar on {text}"
        );
        ok
    }

    fn check(valid: &[&str], invalid: &[&str]) {
        let g = grammar();
        for p in valid {
            assert!(accepts(&g, p), "valid ECMA-262 pattern refused: {p}");
        }
        for p in invalid {
            assert!(!accepts(&g, p), "invalid pattern accepted: {p}");
        }
    }

    #[test]
    fn groups_alternatives_and_quantifiers() {
        check(
            &[
                "",
                "abc",
                "([abc])+\\s+$",
                "((a)(b(c))|d)*e",
                "(?:a|b)+?",
                "a|",
                "|",
                "()",
                "a{2}",
                "a{2,}",
                "a{2,3}",
                "a{01,2}",
                "a{0,100000}",
                "a{99,100}",
                "a{99,99}",
                "a{2}?",
                "\\0*1",
                "(a){3}b",
                "[a]{0,1}",
                "^\\/api\\/v[0-9]+$",
                "http://schema.org",
                "<Regex test name pattern>",
            ],
            &[
                "(abc", "abc)", ")", "?", "*a", "a**", "a{2}{3}", "a{2}??", "a{", "a{2", "{2,3}",
                "a{3,2}", "a{10,9}", "a{,5}", "}", "]", "^(abc]",
            ],
        );
    }

    /// A braced quantifier and a property escape end a run (module docs): what comes before,
    /// between and after them is checked as it was inside one run.
    #[test]
    fn braced_quantifiers_and_property_escapes_between_runs() {
        check(
            &[
                "\\p{L}{2}",
                "\\p{L}*?x",
                "\\p{Lu}\\P{Ll}",
                "a\\p{L}b",
                "\\d{2}\\p{N}{1,3}?",
                "\\0{2}1",
                "a{2}b{3,}c{4,5}?d",
                "x{2}|y{3}",
                "(a{2}){3}",
                "\\u{41}{2}",
                "\\{{2}",
                "a\\{",
            ],
            &[
                "^{2}",
                "\\b{2}",
                "a*{2}",
                "a{2}*",
                "\\p{L}{2}{3}",
                "\\p{L}**",
                "\\01",
                "|{2}",
                "({2})",
                "\\p{L}\\p{",
                "a{2}\\p",
            ],
        );
    }

    #[test]
    fn classes_ranges_and_escapes() {
        check(
            &[
                "[]",
                "[^]",
                "[\\]a-z]",
                "[a\\-z]",
                "[-a]",
                "[a-]",
                "[--a]",
                "[a-b-c]",
                "[[]",
                "[{2,1}]",
                "[\\b]",
                "[\\0]",
                "[\\d_\\p{L}]",
                "[À-ÿ]",
                "[\\x00-\\x1F]",
                "[\\u0000-\\uFFFF]",
                "[a-\\u{10FFFF}]",
                "[\\u{0041}-\\u{5A}]",
                "[\\cA-\\cZ]",
                "\\d\\D\\w\\W\\s\\S",
                "\\u{1F600}\\u0041\\x41\\cA\\0a",
                "\\uD83D\\uDE00",
                "\\bfoo\\B",
                "\\p{L}\\P{Lu}\\p{gc=Nd}\\p{General_Category=Letter}\\p{ASCII_Hex_Digit}",
                "\\^\\$\\\\\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\/",
            ],
            &[
                "[b-a]",
                "[z-a]",
                "[\\x20-\\x1F]",
                "[\\d-z]",
                "[a-\\d]",
                "[\\p{L}-z]",
                "[a--]",
                "[\\1]",
                "[\\01]",
                "[\\B]",
                "[\\c1]",
                "[",
                "\\a",
                "\\-",
                "\\1",
                "\\01",
                "\\c1",
                "\\u{110000}",
                "\\u{}",
                "\\x4",
                "\\u12",
                "\\p{Foo}",
                "\\p{L",
                "\\p{Script=Latin}",
            ],
        );
    }

    #[test]
    fn look_arounds_named_groups_and_modifiers() {
        check(
            &[
                "(?=a)b",
                "(?!a)",
                "(?<=a+)b",
                "(?<!x)y",
                "(?<name>x)",
                "a(?<$_1>b|(c))*",
                "(?i:a)",
                "(?ims:a)",
                "(?i-m:a)",
                "(?-s:a)",
            ],
            &[
                "(?=a)*",
                "(?<=a){2}",
                "(?P<name>x)",
                "(?P<n>a)(?P=n)",
                "(?#comment)a",
                "(?i)abc",
                "(?ims)abc",
                "(?ii:a)",
                "(?i-i:a)",
                "(?-:a)",
                "(?x:a)",
                "(?<1a>x)",
                "(?<>x)",
            ],
        );
    }

    /// `{n,m}` bounds compared digit by digit, including once the comparison is decided
    /// before `m` ends (the automaton then forgets `n`'s digits but not how many there were).
    #[test]
    fn brace_bounds_in_order() {
        check(
            &[
                "a{13,124}",
                "a{12,103}",
                "a{5,50}",
                "a{0050,0051}",
                "a{19,20}",
                "[a]{7,8}",
                "(a){99,999}",
                "a{1,1000}",
            ],
            &[
                "a{124,123}",
                "a{19,10}",
                "a{100,99}",
                "a{050,49}",
                "a{21,19}",
                "[a]{8,7}",
                "(a){999,99}",
                "a{1000,999}",
            ],
        );
        // Valid, but with as many significant digits on both sides as more than
        // `EXACT_DIGITS`: not compared, so refused (never an `n > m` accepted).
        let g = grammar();
        for p in [
            "a{1234,1235}",
            "a{9999,9999}",
            "a{1000,2000}",
            "a{01000,02000}",
        ] {
            assert!(!accepts(&g, p), "compared beyond EXACT_DIGITS: {p}");
        }
        for p in [
            "a{99,100}",
            "a{99,999}",
            "a{123,124}",
            "a{100,200}",
            "a{0100,0200}",
        ] {
            assert!(accepts(&g, p), "compared within EXACT_DIGITS: {p}");
        }
        assert!(accepts(&g, "(a){999,999}") && !accepts(&g, "(a){999,998}"));
    }

    /// The pieces stay small: each was about 72,000 states when the run automaton (not
    /// minimal: the quantifier spelled once per kind of atom) met the braces' check.
    #[test]
    fn the_pieces_are_small() {
        let p = super::pieces().expect("pieces");
        for d in [
            &p.paren,
            &p.open_rest,
            &p.look_rest,
            &p.named_rest,
            &p.class_open,
            &p.class_rest,
            &p.bar,
            &p.close,
            &p.end,
            &p.quantifier,
            &p.nonempty_end,
        ] {
            assert!(d.num_states() < 10_000, "{} states", d.num_states());
        }
    }

    /// The documented restrictions: valid ECMA-262 patterns that only a context-sensitive
    /// check would accept without accepting invalid ones, refused.
    #[test]
    fn what_is_refused_beyond_the_specification() {
        check(
            &[],
            &[
                // Back references: the group must exist somewhere in the pattern.
                "(a)\\1",
                "(?<n>a)\\k<n>",
                // Two named groups could carry one name.
                "(?<a>x)(?<b>y)",
                // A range's first end above U+00FF.
                "[\\u4e00-\\u9fa5]",
                // `{n,m}` with as many significant digits, more than three.
                "a{1000,2000}",
            ],
        );
    }

    /// The JSON-Schema-Test-Suite's `optional/format/regex.json` (draft 2020-12).
    #[test]
    fn the_suites_regex_format_cases() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../conformance/json-schema-test-suite/draft2020-12/optional/format/regex.json"
        );
        let text = std::fs::read_to_string(path).expect("suite file");
        let groups: Vec<Value> = serde_json::from_str(&text).expect("suite JSON");
        let g = grammar();
        let mut strings = 0;
        for t in groups[0]["tests"].as_array().expect("tests") {
            if let (Some(p), Some(valid)) = (t["data"].as_str(), t["valid"].as_bool()) {
                assert_eq!(accepts(&g, p), valid, "{p}");
                strings += 1;
            }
        }
        assert_eq!(strings, 2);
    }

    #[test]
    fn min_length_one_takes_out_the_empty_pattern() {
        let g = compile_json_schema(
            &json!({"type": "string", "format": "regex", "minLength": 1}),
            &JsonOptions::default(),
        )
        .expect("compiles");
        for (p, ok) in [
            ("", false),
            ("a", true),
            ("|", true),
            ("()", true),
            ("[]", true),
            ("(?<n>)", true),
            ("a)", false),
        ] {
            assert_eq!(accepts(&g, p), ok, "{p}");
        }
    }

    /// Whether `{"type": "string", "format": "regex", "pattern": pattern}` accepts each of
    /// `strings` as listed.
    fn check_with_pattern(pattern: &str, cases: &[(&str, bool)]) {
        let g = compile_json_schema(
            &json!({"type": "string", "format": "regex", "pattern": pattern}),
            &JsonOptions::default(),
        )
        .expect("compiles");
        for &(p, ok) in cases {
            assert_eq!(accepts(&g, p), ok, "{pattern}: {p}");
        }
    }

    /// schema.org's schemas: `format: regex` beside an unanchored `pattern`.
    #[test]
    fn a_pattern_beside_it_is_looked_for_in_the_runs() {
        check_with_pattern(
            "Action",
            &[
                ("Action", true),
                ("^Action$", true),
                ("(?:x)Action|y", true),
                ("[a]Actions*", true),
                ("(?<n>Action)", true),
                ("Acton", false),
                ("", false),
                // Not a pattern, though it has a match.
                ("Action(", false),
                ("(Action", false),
                ("Action{2,1}", false),
                // The documented restriction: a match across a group's delimiters.
                ("(Act)ion", false),
                // Matches in several runs (read in several ways), or in a later run only.
                ("Action|(Action)[Action]Action", true),
                ("x|y(z)Action", true),
                ("(x)|(?:y|(Action))", true),
                ("x|y(z)Acti|on", false),
                // Runs around a braced quantifier or a property escape.
                ("Action{2}", true),
                ("x{2}Action", true),
                ("Action\\p{L}", true),
                ("\\p{L}+Action", true),
                ("\\p{L}Acti", false),
            ],
        );
        check_with_pattern(
            "\\b\\d{13}\\b",
            &[
                ("1234567890123", true),
                ("(a)1234567890123", true),
                ("[0-9]1234567890123|x", true),
                ("x1234567890123", false),
                ("12345678901234", false),
                ("123456789012", false),
            ],
        );
        // The restriction again: a match across a braced quantifier or a property escape (a
        // `}` is escaped anywhere else, so `2}b` is only ever read across a quantifier).
        check_with_pattern("2}b", &[("a{2}b", false)]);
        check_with_pattern("L", &[("\\p{L}", false), ("\\p{L}L", true)]);
        check_with_pattern(
            "http://schema.org",
            &[
                ("http://schema.org", true),
                ("^http://schema.org$", true),
                ("http://schema\\.org", false),
                ("https?://schema.org", false),
                ("http://schema.org|x", true),
                // The restriction again: `.` matches the `|`, a delimiter between runs.
                ("http://schema|org", false),
            ],
        );
        // A pattern every string matches asserts nothing.
        check_with_pattern("a*", &[("", true), ("b", true), ("b)", false)]);
    }

    #[test]
    fn other_string_keywords_beside_it_are_refused_by_name() {
        for schema in [
            json!({"type": "string", "format": "regex", "maxLength": 10}),
            json!({"type": "string", "format": "regex", "minLength": 2}),
            json!({"type": "string", "format": "regex", "pattern": "^a"}),
            json!({"type": "object", "propertyNames": {"format": "regex"}}),
        ] {
            match compile_json_schema(&schema, &JsonOptions::default()) {
                Err(Error::UnsupportedKeyword { keyword, .. }) => {
                    assert!(keyword.contains("regex"), "{schema}: {keyword}")
                }
                other => panic!("{schema}: {other:?}"),
            }
        }
        // Values of other types are not strings: the format does not apply.
        let g = compile_json_schema(&json!({"format": "regex"}), &JsonOptions::default())
            .expect("compiles");
        assert!(g.recognizes(b"12") && g.recognizes(br#""a+""#) && !g.recognizes(br#""a++""#));
    }
}
