//! The compiler: typed schemas to grammar rules. Scalars and combinators live here; arrays
//! and objects in `containers`.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::algebra::{exactly_one, merge, merge_in, normalize};
use super::containers::any_json_key_but;
use super::number::Decimal;
use super::schema::StringFacets;
use super::schema::{compact, invalid, json_eq, unsupported, Node, ObjectFacets, Schema, TypeSet};
use super::string::{is_chunked, string_content, without_strings};
use super::JsonOptions;
use crate::dfa::{Dfa, DfaMemo, STATE_LIMIT};
use crate::grammar::{Deferred, FxMap, GrammarBuilder, Sym};
use crate::Error;

/// Grammar rules for typed schemas, built into one [`GrammarBuilder`].
pub(super) struct Compiler<'a> {
    pub(super) b: GrammarBuilder,
    /// The document's reference targets.
    pub(super) table: &'a [Schema],
    pub(super) opts: &'a JsonOptions,
    pub(super) ws: Option<Sym>,
    /// The rule of each reference target compiled so far.
    refs: FxMap<usize, Sym>,
    any: Option<Sym>,
    /// The object and array symbols of `any`, for values built around them.
    any_parts: Option<(Sym, Sym)>,
    depth: usize,
    /// The schemas being compiled, outermost first, each with the nonterminal that stands for
    /// it once a schema inside it is found equal to it (a recursion through a `$ref` beside
    /// other keywords, which normalising inlines, so no bare `$ref` closes the loop), and its
    /// shape hash (`Schema::shape_hash`), compared first: most open schemas differ from the
    /// one met, and comparing large nodes field by field was a third of some compiles.
    open: Vec<(Schema, Option<u32>, u64)>,
    /// The rules of `format: "regex"` strings, once built (`ecma_regex`): any pattern, and
    /// any but the empty one.
    pub(super) regex_format: [Option<Sym>; 2],
    /// For the `uniqueItems` array of at most `maxItems` items that a closed-object item's
    /// member is (`unique_objects`, `Domain::Capped`): the item's spec, the member's value
    /// nonterminal, for the check before the `]` of a full array, and the nesting depth the
    /// array is compiled at; taken by that array alone (one at another depth, inside it,
    /// leaves it).
    pub(super) closing: Option<(u32, u32, usize)>,
    /// Whether that check was placed.
    pub(super) closing_placed: bool,
    /// Every schema compiled so far, by [`Schema::shape_hash`], with its symbol.
    memo: FxMap<u64, Vec<(Schema, Sym)>>,
    /// The keys of `memo`'s entries in the order they were added.
    memo_log: Vec<u64>,
    /// A buffer for [`Compiler::string_literal`]'s quoted text.
    quoted: Vec<u8>,
}

/// What the strings of facets `f` without those among `excluded` are kept under: the facets
/// and the excluded strings (values of other types exclude no string).
pub(super) fn string_key(f: &StringFacets, excluded: &[Value]) -> (StringFacets, Vec<String>) {
    let strings = excluded
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    (f.clone(), strings)
}

/// The automaton of the JSON strings (quotes and escapes) of facets `f` without the strings
/// among `excluded`. Kept process-wide per facets and excluded strings, up to a bound on
/// their cells together: a schema names a format or pattern many times, and schemas share
/// them, while the content automaton (`string_content` keeps moderate ones) and its JSON
/// encoding (`Dfa::json_string` keeps moderate ones) of a large one, `hostname`'s length
/// bound or `iri-reference`, cost milliseconds to build again each time.
pub(super) fn string_automaton(
    f: &StringFacets,
    excluded: &[Value],
    path: &str,
) -> Result<Arc<Dfa>, Error> {
    let memo = string_memo();
    let key = string_key(f, excluded);
    if let Some(d) = memo.get(&key) {
        return Ok(d);
    }
    // Any string but a few, each written one way only (a complement of a string `enum`):
    // the JSON strings less those literals, built directly as any key but some names is,
    // rather than a difference of contents then encoded.
    if *f == StringFacets::default() {
        let words: Vec<String> = (excluded.iter().filter_map(Value::as_str))
            .map(String::from)
            .collect();
        if !words.is_empty() && words.iter().all(|w| one_encoding(w)) {
            let d = any_json_key_but(&words, STATE_LIMIT)?;
            memo.insert(key, &d);
            return Ok(d);
        }
    }
    let d = match counted_string(f, excluded)? {
        Some(d) => d,
        None => without_strings(string_content(f, path)?, excluded)?.json_string()?,
    };
    let d = Arc::new(d);
    memo.insert(key, &d);
    Ok(d)
}

/// [`string_automaton`]'s automata, kept process-wide.
fn string_memo() -> &'static DfaMemo<(StringFacets, Vec<String>)> {
    static MEMO: OnceLock<DfaMemo<(StringFacets, Vec<String>)>> = OnceLock::new();
    MEMO.get_or_init(|| DfaMemo::new(1024, 1 << 22))
}

/// The JSON strings of facets `f` that bound the length alone (no pattern, format or
/// excluded string), as copies of one character's encoding between the quotes
/// ([`Dfa::repeated`]): encoding the counted characters as a whole took most of the time of
/// `maxLength: 256`. `None` for other facets.
fn counted_string(f: &StringFacets, excluded: &[Value]) -> Result<Option<Dfa>, Error> {
    let bounds = StringFacets {
        min_length: f.min_length,
        max_length: f.max_length,
        ..StringFacets::default()
    };
    if *f != bounds || excluded.iter().any(Value::is_string) {
        return Ok(None);
    }
    let one = Dfa::any_char().json_content()?;
    let quote = Some(b'"');
    let (min, max) = (f.min_length.unwrap_or(0), f.max_length);
    Ok(Dfa::repeated_between(&one, min, max, quote, quote))
}

/// Whether the JSON string of content `s` is written one way only, its bytes between quotes:
/// no control byte, `"`, `\\` or `/` (the bytes that have an escape; other `\\u` escapes are
/// refused, `Dfa::json_string`).
pub(super) fn one_encoding(s: &str) -> bool {
    !s.bytes().any(crate::dfa::has_json_escape)
}

/// The JSON encodings of contents of `min` to `max` (None: any number of) characters, of
/// the language `C*` of `class` (any character when `None`), after one of the strings of
/// `prefix` (when given; none is counted), then the closing quote when `closed`: a piece of
/// [`Compiler::long_string`]. The few kinds of piece (a whole chunk, the rest after the
/// chunks a bound leaves) recur in every long string, so they are kept process-wide, as
/// string automata are.
fn counted_content(
    prefix: Option<&Dfa>,
    class: Option<&Dfa>,
    min: usize,
    max: Option<usize>,
    closed: bool,
) -> Result<Arc<Dfa>, Error> {
    type Key = (Option<Dfa>, Option<Dfa>, usize, Option<usize>, bool);
    static MEMO: OnceLock<DfaMemo<Key>> = OnceLock::new();
    let memo = MEMO.get_or_init(|| DfaMemo::new(256, 1 << 22));
    let key = (prefix.cloned(), class.cloned(), min, max, closed);
    if let Some(d) = memo.get(&key) {
        return Ok(d);
    }
    let internal = || unsupported("minLength/maxLength (internal: long string piece)", "#");
    // One character of the loop, encoded; the count is then copies of it.
    let one = match class {
        None => Dfa::any_char().json_content()?,
        Some(c) => c.intersect(Dfa::any_char())?.json_content()?,
    };
    // Content never reads a bare `"`, so the quote follows deterministically; written with
    // the copies where no prefix comes before them.
    let quote = (closed && prefix.is_none()).then_some(b'"');
    let mut d = Dfa::repeated_between(&one, min, max, None, quote).ok_or_else(internal)?;
    if let Some(p) = prefix {
        // The prefixes end where their loop begins, reading nothing more there.
        d = p.json_content()?.then(&d)?.ok_or_else(internal)?;
        if closed {
            d = d.then(&Dfa::literal(b"\""))?.ok_or_else(internal)?;
        }
    }
    let d = Arc::new(d);
    memo.insert(key, &d);
    Ok(d)
}

impl<'a> Compiler<'a> {
    pub(super) fn new(table: &'a [Schema], opts: &'a JsonOptions) -> Self {
        let mut b = GrammarBuilder::default();
        let ws = if opts.max_whitespace > 0 {
            b.regex(&format!("[ \\t\\n\\r]{{0,{}}}", opts.max_whitespace))
                .ok()
        } else {
            None
        };
        Compiler {
            b,
            table,
            opts,
            ws,
            refs: FxMap::default(),
            any: None,
            any_parts: None,
            depth: 0,
            open: Vec::new(),
            regex_format: [None, None],
            closing: None,
            closing_placed: false,
            memo: FxMap::default(),
            memo_log: Vec::new(),
            quoted: Vec::new(),
        }
    }

    pub(super) fn lit(&mut self, s: &str) -> Sym {
        self.b.literal(s.as_bytes())
    }

    /// `parts` with optional whitespace between consecutive parts.
    pub(super) fn seq(&self, parts: &[Sym]) -> Vec<Sym> {
        let mut out = Vec::with_capacity(parts.len() * 2);
        for (i, &p) in parts.iter().enumerate() {
            if i > 0 {
                if let Some(w) = self.ws {
                    out.push(w);
                }
            }
            out.push(p);
        }
        out
    }

    /// Any JSON value.
    pub(super) fn any(&mut self) -> Result<Sym, Error> {
        if let Some(s) = self.any {
            return Ok(s);
        }
        let value = self.b.nt("value");
        self.any = Some(Sym::Nt(value));
        let string = self.string_terminal(Dfa::any_string())?;
        let number = self
            .b
            .regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")?;
        let (open, close, colon, comma) =
            (self.lit("{"), self.lit("}"), self.lit(":"), self.lit(","));
        let (lb, rb) = (self.lit("["), self.lit("]"));
        let member = self
            .b
            .alts("member", vec![self.seq(&[string, colon, Sym::Nt(value)])]);
        // Left-recursive lists: `members -> member | members , member`.
        let members = self.b.nt("members");
        self.b.rule(members, vec![member]);
        let r = self.seq(&[Sym::Nt(members), comma, member]);
        self.b.rule(members, r);
        let elems = self.b.nt("elements");
        self.b.rule(elems, vec![Sym::Nt(value)]);
        let r = self.seq(&[Sym::Nt(elems), comma, Sym::Nt(value)]);
        self.b.rule(elems, r);
        let object = self.b.alts(
            "object",
            vec![
                self.seq(&[open, close]),
                self.seq(&[open, Sym::Nt(members), close]),
            ],
        );
        let array = self.b.alts(
            "array",
            vec![self.seq(&[lb, rb]), self.seq(&[lb, Sym::Nt(elems), rb])],
        );
        let (t, f, n) = (self.lit("true"), self.lit("false"), self.lit("null"));
        self.any_parts = Some((object, array));
        for alt in [object, array, string, number, t, f, n] {
            self.b.rule(value, vec![alt]);
        }
        Ok(Sym::Nt(value))
    }

    pub(super) fn string_terminal(&mut self, content: &Dfa) -> Result<Sym, Error> {
        let d = content.json_string()?;
        self.b.terminal(d)
    }

    /// The JSON strings whose content is `s`: [`Compiler::string_terminal`] of `s` alone. A
    /// byte other than a control byte, `"`, `\` or `/` has no escape that writes it (only
    /// control bytes take `\u00XX`), so a content without those is written one way only, its
    /// bytes between quotes: that literal, without building the table of every encoding
    /// (property names and string constants, hundreds in a large schema).
    pub(super) fn string_literal(&mut self, s: &str) -> Result<Sym, Error> {
        if !one_encoding(s) {
            return self.string_terminal(&Dfa::literal(s.as_bytes()));
        }
        // Quoted in a buffer kept for it: the literal is most often one built before.
        let quoted = &mut self.quoted;
        quoted.clear();
        quoted.push(b'"');
        quoted.extend_from_slice(s.as_bytes());
        quoted.push(b'"');
        Ok(self.b.literal(quoted))
    }

    /// How deep [`Compiler::schema`] is nested now.
    pub(super) fn depth(&self) -> usize {
        self.depth
    }

    /// The rule for the values valid under `s`.
    ///
    /// A schema equal to one it is nested in is the same language, so it is that schema's
    /// nonterminal: the recursion is a rule that refers to itself, not an unrolling (a
    /// `$ref` beside other keywords is inlined by normalising, and the target's own keywords
    /// lead back to an equal schema: `"additionalProperties": {"anyOf": [.., {"$ref":
    /// "#/definitions/resource"}], "minProperties": 1}` inside that resource).
    pub(super) fn schema(&mut self, s: &Schema, path: &str) -> Result<Sym, Error> {
        let shape = s.shape_hash(3);
        if let Schema::Node(_) = s {
            if let Some(i) = self
                .open
                .iter()
                .rposition(|(o, _, h)| *h == shape && o == s)
            {
                let nt = match self.open[i].1 {
                    Some(nt) => nt,
                    None => {
                        let nt = self.b.nt(format_args!("recursion {path}"));
                        self.open[i].1 = Some(nt);
                        nt
                    }
                };
                return Ok(Sym::Nt(nt));
            }
        }
        // A schema compiled before (elsewhere in the document: the same definition merged
        // into many places, or conjunctions met again) is that schema's symbol: the language
        // of a schema is its own, whatever encloses it. Not while a capped array's closing
        // check is to be placed, which depends on where it is.
        let key = match (s, self.closing) {
            (Schema::Node(_), None) => {
                let k = shape;
                let known = self.memo.get(&k).into_iter().flatten();
                if let Some((_, sym)) = known.into_iter().find(|(o, _)| o == s) {
                    return Ok(*sym);
                }
                Some(k)
            }
            _ => None,
        };
        let logged = self.memo_log.len();
        let r = self.schema_fresh(s, shape, path);
        match (&r, key) {
            (Ok(sym), Some(k)) => {
                self.memo.entry(k).or_default().push((s.clone(), *sym));
                self.memo_log.push(k);
            }
            // What was compiled inside a schema that failed may stand on a recursion's
            // nonterminal that never gets its rule: forgotten, in case the caller goes on.
            (Err(_), _) => {
                for k in self.memo_log.drain(logged..).rev() {
                    if let Some(v) = self.memo.get_mut(&k) {
                        v.pop();
                    }
                }
            }
            (Ok(_), None) => {}
        }
        r
    }

    fn schema_fresh(&mut self, s: &Schema, shape: u64, path: &str) -> Result<Sym, Error> {
        self.depth += 1;
        if self.depth > 200 {
            return Err(unsupported("nesting deeper than 200", path));
        }
        // Rules are only added: a grammar already over `max_rules` is refused at once, not
        // after it has grown further (a schema whose compilation multiplies would otherwise
        // build tens of millions of rules before the limit is checked).
        crate::limits::check(
            crate::Limit::Rules,
            self.b.rule_count() + 1,
            self.opts.limits.max_rules,
        )?;
        self.open.push((s.clone(), None, shape));
        let r = self.schema_inner(s, path);
        let nt = self.open.pop().and_then(|(_, nt, _)| nt);
        self.depth -= 1;
        match (r, nt) {
            (Ok(body), Some(nt)) => {
                self.b.rule(nt, vec![body]);
                Ok(Sym::Nt(nt))
            }
            (r, _) => r,
        }
    }

    fn schema_inner(&mut self, s: &Schema, path: &str) -> Result<Sym, Error> {
        let node = match s {
            Schema::Any => return self.any(),
            Schema::Never => return Ok(Sym::Nt(self.b.nt("false"))),
            Schema::Node(n) => n,
        };
        let table = self.table;
        // A bare reference compiles once per target, which is what makes recursion work.
        if let Some(r) = &node.reference {
            if node.is_bare_ref() {
                if let Some(&sym) = self.refs.get(&r.target) {
                    return Ok(sym);
                }
                let nt = self.b.nt(format_args!("ref {}", r.uri));
                self.refs.insert(r.target, Sym::Nt(nt));
                let target = table
                    .get(r.target)
                    .ok_or_else(|| invalid(path, "$ref target not found"))?;
                let body = self.schema(target, &r.uri)?;
                self.b.rule(nt, vec![body]);
                return Ok(Sym::Nt(nt));
            }
        }
        let n = normalize(table, s, path, 0)?;
        let m = match &n {
            Schema::Node(m) if m.reference.is_none() => m,
            // Only a bare `$ref` is left after normalising, or `true`/`false`.
            _ => return self.schema(&n, path),
        };
        // anyOf and oneOf: distribute the other keywords into each branch.
        for (comb, branches) in [("anyOf", &m.any_of), ("oneOf", &m.one_of)] {
            let Some(branches) = branches else {
                continue;
            };
            let mut base = (**m).clone();
            if comb == "anyOf" {
                base.any_of = None;
            } else {
                base.one_of = None;
            }
            let kept = (
                base.unevaluated_properties.take(),
                base.unevaluated_items.take(),
            );
            let base = Schema::node(base);
            let mut merged = Vec::new();
            // The branches as written (normalised), for `oneOf`'s complements.
            let mut own = Vec::new();
            // Each branch merged with the keywords beside it, before `unevaluated*`.
            let mut plain = Vec::new();
            for (i, br) in branches.iter().enumerate() {
                let bp = format!("{path}/{comb}/{i}");
                let br = normalize(table, br, &bp, 0)?;
                if comb == "oneOf" && kept.0.is_none() && kept.1.is_none() {
                    own.push(br.clone());
                }
                let mb = merge_in(table, &base, &br, &bp)?;
                if comb == "anyOf" && (kept.0.is_some() || kept.1.is_some()) {
                    plain.push((br, mb.clone()));
                }
                let mb = match mb {
                    Schema::Never => Schema::Never,
                    mb if kept.0.is_none() && kept.1.is_none() => mb,
                    Schema::Any => Schema::node(Node {
                        unevaluated_properties: kept.0.clone(),
                        unevaluated_items: kept.1.clone(),
                        ..Node::default()
                    }),
                    Schema::Node(mut o) => {
                        let node = std::sync::Arc::make_mut(&mut o);
                        node.unevaluated_properties = kept.0.clone();
                        node.unevaluated_items = kept.1.clone();
                        Schema::Node(o)
                    }
                };
                // With `unevaluated*` kept, a branch's evaluations depend on the keywords
                // beside it, so the whole merged branch is complemented (which refuses).
                if comb == "oneOf" && (kept.0.is_some() || kept.1.is_some()) {
                    own.push(mb.clone());
                }
                merged.push(mb);
            }
            // `unevaluated*` beside `anyOf` sees what every matching branch evaluates, but
            // each branch above counts only its own: exact only where no two branches that
            // evaluate differently can match one value.
            for (i, (bi, mi)) in plain.iter().enumerate() {
                for (bj, mj) in &plain[i + 1..] {
                    let members = !evaluate_alike(bi, bj, evaluated_members);
                    let items = !evaluate_alike(bi, bj, evaluated_items);
                    // Only objects have members and only arrays items: the branches
                    // may overlap elsewhere.
                    let overlap = |on: TypeSet| -> Result<bool, Error> {
                        let only = super::algebra::typed_only(on);
                        let (a, b) = (merge(mi, &only, path)?, merge(mj, &only, path)?);
                        Ok(!super::algebra::disjoint(table, &a, &b))
                    };
                    let differ = (kept.0.is_some() && members && overlap(TypeSet::OBJECT)?)
                        || (kept.1.is_some() && items && overlap(TypeSet::ARRAY)?);
                    if differ {
                        let keyword = if kept.0.is_some() {
                            "unevaluatedProperties"
                        } else {
                            "unevaluatedItems"
                        };
                        return Err(unsupported(
                            format!("{keyword} (beside anyOf whose branches may overlap and evaluate differently)"),
                            path,
                        ));
                    }
                }
            }
            if comb == "oneOf" {
                // Two branches that accept everything overlap everywhere; branches that
                // accept nothing never count.
                let trues = branches.iter().filter(|b| **b == Schema::Any).count();
                if trues >= 2 {
                    return Ok(Sym::Nt(self.b.nt("oneOf of overlapping true schemas")));
                }
                let (merged_kept, own_kept): (Vec<Schema>, Vec<Schema>) = merged
                    .into_iter()
                    .zip(own)
                    .filter(|(m, _)| *m != Schema::Never)
                    .unzip();
                // Branches that may overlap each exclude the others (nothing changes for
                // branches proven disjoint).
                merged = exactly_one(table, &merged_kept, &own_kept, path)?.map_err(|why| {
                    unsupported(format!("oneOf (branches that may overlap: {why})"), path)
                })?;
            }
            let mut alts = Vec::new();
            for (i, br) in merged.iter().enumerate() {
                alts.push(vec![self.schema(br, &format!("{path}/{comb}/{i}"))?]);
            }
            return Ok(self.b.alts(comb, alts));
        }
        if m.values.is_some() {
            return self.enumeration(m, path);
        }
        let types = m.types.unwrap_or(TypeSet::ALL);
        // Values excluded by `not` of `enum`/`const`: scalars are taken out of their type's
        // language; arrays and objects are not.
        let excluded: &[Value] = m.excluded.as_deref().unwrap_or(&[]);
        if excluded
            .iter()
            .any(|v| matches!(v, Value::Array(_) | Value::Object(_)))
        {
            return Err(unsupported("not (enum of arrays or objects)", path));
        }
        let is_out = |v: &Value| excluded.iter().any(|x| json_eq(x, v));
        let mut alts = Vec::new();
        if types.has(TypeSet::NULL) && !is_out(&Value::Null) {
            alts.push(vec![self.lit("null")]);
        }
        if types.has(TypeSet::BOOLEAN) {
            for b in [true, false] {
                if !is_out(&Value::Bool(b)) {
                    alts.push(vec![self.lit(if b { "true" } else { "false" })]);
                }
            }
        }
        if types.has(TypeSet::NUMBER) || types.has(TypeSet::INTEGER) {
            let integer = !types.has(TypeSet::NUMBER);
            let mut d = super::number::number_dfa(&m.number, integer, path)?;
            let numbers: Vec<&Value> = excluded.iter().filter(|v| v.is_number()).collect();
            if !numbers.is_empty() {
                // Values equal to an excluded number in exponent notation would escape the
                // difference, so the other numbers are written without exponent.
                d = d.intersect(&Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")?)?;
                for v in numbers {
                    d = d.minus(&Dfa::from_regex(&Decimal::parse(v, path)?.equal_regex())?)?;
                }
            }
            alts.push(vec![self.b.terminal(d)?]);
        }
        if types.has(TypeSet::STRING) {
            alts.push(vec![self.string_value(&m.string, excluded, path)?]);
        }
        if types.has(TypeSet::ARRAY) {
            alts.push(vec![self.array(m, path)?]);
        }
        if types.has(TypeSet::OBJECT) {
            alts.push(vec![self.object(m, path)?]);
        }
        Ok(self.b.alts(path, alts))
    }

    /// The strings of `f`, less the `excluded` ones.
    fn string_value(
        &mut self,
        f: &StringFacets,
        excluded: &[Value],
        path: &str,
    ) -> Result<Sym, Error> {
        if f.format.as_deref() == Some("regex") {
            // A grammar, not an automaton: nothing regular can be intersected with it here,
            // but one unanchored `pattern` can be looked for in its runs of atoms.
            // `minLength: 1` only takes out the empty pattern.
            let others = f.not_patterns.is_empty()
                && f.not_formats.is_empty()
                && f.min_length.unwrap_or(0) <= 1
                && f.max_length.is_none()
                && !excluded.iter().any(Value::is_string);
            if let [p] = f.patterns.as_slice() {
                if others && !p.contains(['^', '$']) {
                    let d = super::string::pattern_dfa(p)?;
                    if Dfa::any_string().minus(&d)?.is_empty_language() {
                        // It matches every string.
                        return self.regex_format_string(f.min_length == Some(1));
                    }
                    if !d.accepts_empty() {
                        // A string with a match is not empty: `minLength: 1` holds already.
                        return self.regex_format_with_pattern(p, &d);
                    }
                }
            }
            let alone = f.patterns.is_empty() && others;
            if !alone {
                return Err(unsupported(
                    "format \"regex\" with pattern, minLength above 1, maxLength or not",
                    path,
                ));
            }
            return self.regex_format_string(f.min_length == Some(1));
        }
        let plain = f.patterns.is_empty()
            && f.not_patterns.is_empty()
            && f.format.is_none()
            && f.not_formats.is_empty();
        if is_chunked(f) && plain && !excluded.iter().any(Value::is_string) {
            return self.long_string(f.min_length.unwrap_or(0), f.max_length, path);
        }
        if is_chunked(f) && !excluded.iter().any(Value::is_string) {
            if let Some(s) = self.prefixed_long_string(f, path)? {
                return Ok(s);
            }
        }
        if self.opts.defer_large_patterns
            && !excluded.iter().any(Value::is_string)
            && string_memo().get(&string_key(f, &[])).is_none()
            && super::string::deferrable(f)
        {
            let (f, path) = (f.clone(), path.to_string());
            return Ok(self.b.deferred_terminal(Deferred {
                what: format!("the strings of pattern {:?} at {path}", f.patterns),
                build: Box::new(move || string_automaton(&f, &[], &path)),
            }));
        }
        self.b.shared_terminal(string_automaton(f, excluded, path)?)
    }

    /// Strings of `min` to `max` characters with a bound above
    /// [`CHUNKED`](super::string::CHUNKED),
    /// without an automaton that counts to it: the content is written as chunks of exactly
    /// `CHUNK` characters (one terminal, reused) and a last piece of fewer with the closing
    /// quote, and one rule per chunk count keeps the total within the bounds. Exact, with
    /// `max / CHUNK` rules; the chunk and the pieces are built once per process
    /// ([`counted_content`]).
    ///
    /// The last piece holds the closing quote so that it ends only there: a piece that could
    /// end after any character had every place inside a token as a place where a terminal
    /// ends, each walked on into what follows the string at every mask (7 to 10 ms a mask
    /// within a 350-character string, against 0.1 to 0.2 ms for one automaton of the whole
    /// string). A chunk ends after exactly `CHUNK` characters, one place per token at most.
    fn long_string(&mut self, min: usize, max: Option<usize>, path: &str) -> Result<Sym, Error> {
        let quote = self.lit("\"");
        let Some(rest) = self.long_content(None, None, min, max, path)? else {
            return Ok(Sym::Nt(self.b.nt("impossible string")));
        };
        Ok(self.b.alts("long string", vec![vec![quote, rest]]))
    }

    /// A string of one `pattern` and a length bound above
    /// [`CHUNKED`](super::string::CHUNKED), when the pattern is a prefix of boundedly many
    /// characters and then any number of characters of a set (`^https?://.+$` under
    /// `maxLength: 2000`, [`Dfa::loop_prefixes`]): per group of prefixes of `l` characters,
    /// the prefixes and the rest of `min - l` to `max - l` characters of the set, as
    /// [`Compiler::long_string`] writes any characters. An automaton of the pattern under the
    /// bound counted every character (some 38,000 states for that URL, 30 ms of a winget
    /// manifest's compile, and a fresh state at every token of its masks). `None` where the
    /// pattern is not of that form.
    fn prefixed_long_string(&mut self, f: &StringFacets, path: &str) -> Result<Option<Sym>, Error> {
        let [p] = f.patterns.as_slice() else {
            return Ok(None);
        };
        if !f.not_patterns.is_empty() || f.format.is_some() || !f.not_formats.is_empty() {
            return Ok(None);
        }
        let d = super::string::pattern_dfa(p)?;
        let Some(groups) = d.loop_prefixes(64, 8) else {
            return Ok(None);
        };
        let (min, max) = (f.min_length.unwrap_or(0), f.max_length);
        let quote = self.lit("\"");
        let mut alts = Vec::new();
        for (l, prefixes, class) in groups {
            if max.is_some_and(|m| m < l) {
                continue;
            }
            let (lo, hi) = (min.saturating_sub(l), max.map(|m| m - l));
            let Some(rest) = self.long_content(Some(&prefixes), Some(&class), lo, hi, path)? else {
                continue;
            };
            alts.push(vec![quote, rest]);
        }
        if alts.is_empty() {
            return Ok(Some(Sym::Nt(self.b.nt("impossible string"))));
        }
        Ok(Some(self.b.alts("long string with a prefix", alts)))
    }

    /// The content of [`Compiler::long_string`] after its opening quote: `min` to `max`
    /// characters (of the loop `class`, after one of `prefix`, for
    /// [`Compiler::prefixed_long_string`]), then the closing quote. `None` when no string has
    /// that many. The prefix is read by the first piece or chunk, not a terminal of its own:
    /// one that ended a character after `https://` made every token there a place where a
    /// terminal ends, each walked on into the chunks (a mask of 10 ms).
    fn long_content(
        &mut self,
        prefix: Option<&Dfa>,
        class: Option<&Dfa>,
        min: usize,
        max: Option<usize>,
        path: &str,
    ) -> Result<Option<Sym>, Error> {
        const CHUNK: usize = 128;
        if max.is_some_and(|x| x < min) {
            return Ok(None);
        }
        const MOST: usize = 4_096_000;
        if max.unwrap_or(min) > MOST {
            return Err(unsupported("minLength/maxLength above 4096000", path));
        }
        let q = max.unwrap_or(min) / CHUNK;
        let chunk =
            self.b
                .shared_terminal(counted_content(None, class, CHUNK, Some(CHUNK), false)?)?;
        let first_chunk = match prefix {
            Some(_) => self.b.shared_terminal(counted_content(
                prefix,
                class,
                CHUNK,
                Some(CHUNK),
                false,
            )?)?,
            None => chunk,
        };
        let mut pieces: FxMap<(bool, usize, Option<usize>), Sym> = FxMap::default();
        // after[i]: the content left after i chunks, then the closing quote.
        let after: Vec<u32> = (0..=q)
            .map(|i| self.b.nt(format_args!("{path} string after {i} chunks")))
            .collect();
        for (i, &nt) in after.iter().enumerate() {
            let done = i * CHUNK;
            let lo = min.saturating_sub(done);
            let hi = match max {
                Some(m) => Some((m - done).min(CHUNK - 1)),
                None if i == q => None,
                None => Some(CHUNK - 1),
            };
            // The first piece or chunk reads the prefix too.
            let first = i == 0 && prefix.is_some();
            if hi.is_none_or(|h| lo <= h) {
                let piece = match pieces.get(&(first, lo, hi)) {
                    Some(&p) => p,
                    None => {
                        let before = prefix.filter(|_| first);
                        let p = self
                            .b
                            .shared_terminal(counted_content(before, class, lo, hi, true)?)?;
                        pieces.insert((first, lo, hi), p);
                        p
                    }
                };
                self.b.rule(nt, vec![piece]);
            }
            if i < q {
                let c = if first { first_chunk } else { chunk };
                self.b.rule(nt, vec![c, Sym::Nt(after[i + 1])]);
            }
        }
        Ok(Some(Sym::Nt(after[0])))
    }

    /// The values of `enum`/`const` that the node's other keywords accept.
    fn enumeration(&mut self, m: &Node, path: &str) -> Result<Sym, Error> {
        let mut values: Vec<&Value> = m.values.iter().flatten().collect();
        let rest = Schema::node(Node {
            values: None,
            ..m.clone()
        });
        // With only `type` and excluded values (`not` of an `enum`, as a `oneOf` of constants
        // leaves each of its branches) beside the values, a string, boolean or `null` is kept
        // by its type and by equalling no excluded value: checking each through a compiled
        // grammar was a fifth of the compile of cryproj's schema (thousands of names) and
        // half of template.json's (a hundred constants, each beside the others excluded).
        // Numbers, arrays and objects are checked as below.
        let simple = m.only(&["type", "enum", "not enum"]);
        let plain =
            |v: &Value| simple && matches!(v, Value::String(_) | Value::Bool(_) | Value::Null);
        let excluded = m.excluded.as_deref().unwrap_or_default();
        values.retain(|&v| {
            !plain(v) || (m.types.is_none_or(|t| t.admits(v)) && !excluded.contains(v))
        });
        if rest != Schema::Any && !values.iter().all(|v| plain(v)) {
            // Keep the values that the other keywords accept, checked by compiling them.
            let mut sub = Compiler::new(self.table, self.opts);
            let s = sub.schema(&rest, path)?;
            match sub.b.build_with(s, &self.opts.limits) {
                Ok(g) => values.retain(|&v| plain(v) || g.recognizes(compact(v).as_bytes())),
                Err(Error::EmptyLanguage) => values.retain(|&v| plain(v)),
                Err(e) => return Err(e),
            }
        }
        let mut alts = Vec::new();
        // The strings are one terminal, the JSON encoding of their trie: the cost of a mask
        // then does not grow with their number, as N alternatives' would.
        let strings: Vec<&[u8]> = values
            .iter()
            .filter_map(|v| v.as_str().map(str::as_bytes))
            .collect();
        if strings.len() > 1 {
            let limit = self.opts.limits.max_terminal_states;
            alts.push(vec![self
                .b
                .terminal(Dfa::json_literals(&strings, limit)?)?]);
        }
        for v in &values {
            if strings.len() <= 1 || !v.is_string() {
                alts.push(vec![self.const_value(v, path)?]);
            }
        }
        Ok(self.b.alts("enum", alts))
    }

    /// The spellings of one value: numbers in any equal decimal spelling, strings with any
    /// escapes, objects with their keys in any order.
    pub(super) fn const_value(&mut self, v: &Value, path: &str) -> Result<Sym, Error> {
        match v {
            Value::Number(_) => {
                let re = Decimal::parse(v, path)?.equal_regex();
                self.b.regex(&re)
            }
            Value::String(s) => self.string_literal(s),
            Value::Array(a) => {
                let r = self.const_array(a, path)?;
                Ok(self.b.alts("const array", vec![r]))
            }
            Value::Object(o) => {
                let properties = o
                    .iter()
                    .map(|(k, x)| {
                        let value = Schema::node(Node {
                            values: Some(vec![x.clone()].into()),
                            ..Node::default()
                        });
                        (k.clone(), value)
                    })
                    .collect();
                let node = Node {
                    object: ObjectFacets {
                        properties: Some(properties),
                        required: Some(o.keys().cloned().collect()),
                        additional_properties: Some(Schema::Never),
                        ..ObjectFacets::default()
                    },
                    ..Node::default()
                };
                self.object(&node, path)
            }
            _ => Ok(self.b.literal(compact(v).as_bytes())),
        }
    }

    /// The symbols of the constant array of items `a`: its brackets, items and commas, with
    /// optional whitespace between them.
    pub(super) fn const_array(&mut self, a: &[Value], path: &str) -> Result<Vec<Sym>, Error> {
        let items = (a.iter())
            .map(|x| self.const_value(x, path))
            .collect::<Result<Vec<Sym>, Error>>()?;
        Ok(self.array_of(&items))
    }

    /// The symbols of an array whose items are `items`, one symbol each: its brackets, items
    /// and commas, with optional whitespace between them: what [`Compiler::seq`] makes of
    /// them, written at once.
    pub(super) fn array_of(&mut self, items: &[Sym]) -> Vec<Sym> {
        let (lb, rb, comma) = (self.lit("["), self.lit("]"), self.lit(","));
        let ws = self.ws;
        let mut out = Vec::with_capacity(4 * items.len() + 3);
        out.push(lb);
        for (i, &x) in items.iter().enumerate() {
            if i > 0 {
                out.extend(ws);
                out.push(comma);
            }
            out.extend(ws);
            out.push(x);
        }
        out.extend(ws);
        out.push(rb);
        out
    }

    /// Any JSON value except the given scalars (in any of their spellings).
    pub(super) fn any_except(&mut self, values: &[Value], path: &str) -> Result<Sym, Error> {
        self.any()?;
        let Some((object, array)) = self.any_parts else {
            return Err(invalid(path, "internal: no any-value grammar"));
        };
        let mut alts = vec![vec![object], vec![array]];
        for (lit, v) in [
            ("true", Value::Bool(true)),
            ("false", Value::Bool(false)),
            ("null", Value::Null),
        ] {
            if !values.contains(&v) {
                alts.push(vec![self.lit(lit)]);
            }
        }
        let strings = without_strings(Dfa::any_string().clone(), values)?;
        let mut numbers = Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")?;
        for v in values.iter().filter(|v| v.is_number()) {
            // Values equal to the number in exponent notation would escape the difference,
            // so numbers other than it are written without exponent.
            let shape = Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")?;
            numbers = numbers
                .intersect(&shape)?
                .minus(&Dfa::from_regex(&Decimal::parse(v, path)?.equal_regex())?)?;
        }
        alts.push(vec![self.string_terminal(&strings)?]);
        alts.push(vec![self.b.terminal(numbers)?]);
        Ok(self.b.alts("any except", alts))
    }
}

/// Whether two normalised branches evaluate alike, as `read` takes it off each node (`true`
/// and `false` evaluate nothing). A branch with a reference or a combinator inside it cannot be
/// read off, and counts as different.
fn evaluate_alike<'a, T: PartialEq + Default>(
    a: &'a Schema,
    b: &'a Schema,
    read: fn(&'a Node) -> T,
) -> bool {
    let of = |s: &'a Schema| match s {
        Schema::Any | Schema::Never => Some(T::default()),
        Schema::Node(n) if n.reference.is_some() || n.any_of.is_some() || n.one_of.is_some() => {
            None
        }
        Schema::Node(n) => Some(read(n)),
    };
    matches!((of(a), of(b)), (Some(x), Some(y)) if x == y)
}

/// What a node evaluates among an object's members, for `unevaluatedProperties`: its property
/// names, its property patterns and whether it has `additionalProperties`.
fn evaluated_members(n: &Node) -> (Vec<&str>, Vec<&str>, bool) {
    fn names(l: &Option<Vec<(String, Schema)>>) -> Vec<&str> {
        let mut names: Vec<&str> = l.iter().flatten().map(|(k, _)| k.as_str()).collect();
        names.sort_unstable();
        names
    }
    let o = &n.object;
    let (p, q) = (names(&o.properties), names(&o.pattern_properties));
    (p, q, o.additional_properties.is_some())
}

/// What a node evaluates among an array's items, for `unevaluatedItems`: how many
/// `prefixItems`, whether it has `items` and whether it has `contains`.
fn evaluated_items(n: &Node) -> (usize, bool, bool) {
    let a = &n.array;
    (
        a.prefix_items.as_ref().map_or(0, Vec::len),
        a.items.is_some(),
        a.contains.is_some(),
    )
}
