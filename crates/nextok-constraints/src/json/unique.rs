//! `uniqueItems` over item domains too large to unroll. The array's rules count its items
//! (left-recursively, so that every item's waiting item starts at the `[`), and each item is a
//! guarded nonterminal that the chart completes only when it differs from every earlier item:
//! a string terminal compared as a decoded string ([`Guard::UniqueStrings`]), or any other
//! item's compiled value compared as a JSON value in canonical form ([`Guard::UniqueValues`]:
//! object keys in any order, numbers by value). Small finite domains are unrolled into the
//! grammar instead (`containers::unique_array`); enums of more than
//! [`UNROLLED_VALUES`](super::containers::UNROLLED_VALUES) values make each value its own
//! nonterminal, predicted only while unused (`unique_finite`).
//!
//! Exactness needs that no prefix of an item be left without a valid completion, whatever
//! the earlier items. A guarded string terminal is checked at run time in every state with
//! finitely many completions (some completion must be a new value), and when its domain is
//! finite as a whole the `,` before another item is guarded too ([`Guard::MoreStrings`]).
//! Other items need every proper prefix to have infinitely many completions into distinct
//! values (`prefix_unbounded`: numbers without bounds, zero set apart, objects that always take one more
//! member (a `oneOf`/`anyOf` of `required` alone among their keywords), arrays that always take one more item, `anyOf` of such, strings whose automaton
//! never narrows to finitely many words). Domains with `null`, booleans, numbers, enums or
//! unions are split first (`unique_split`: values a prefix pins down are predicted only while
//! unused). Objects closed by `additionalProperties: false` are exact when every property is
//! finite, unbounded at every prefix or a nested closed object of such properties
//! (`unique_objects`: the item's completions are counted through the nested objects), as the
//! items or as the one object type of a union beside infinitely many other values
//! (`unique_split`); others are refused, naming the property. Strings with a prefix of finitely many completions beside other item types are a
//! guarded string item of their own (`unique_split`). Domains with a prefix of finitely many
//! completions left over (`maxLength` inside objects, patterns with finite branches inside
//! arrays) are refused by name.

use std::sync::OnceLock;

use serde_json::Value;

use super::algebra::{disjoint_one_of_as_any_of, normalize};
use super::compile::{string_automaton, string_key, Compiler};
use super::schema::{compact, invalid, unsupported, Node, Schema, StringFacets, TypeSet};
use super::string::{is_long, node_strings, pattern_dfa, string_content, without_strings};
use super::unique_split::Split;
use crate::dfa::{Dfa, Kept, DEAD};
use crate::grammar::{
    canonical_array_head, canonical_value, finite_states, push_string, FiniteSet, Guard, ItemCheck,
    Sym,
};
use crate::Error;

/// The canonical form of value `v` ([`canonical_value`] of its text), an array's put
/// together from its items' and a string's from its characters, rather than written out as
/// text and read back.
pub(super) fn canonical_of(v: &Value) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    canonical_into(v, &mut out)?;
    Some(out)
}

/// Appends [`canonical_of`]`(v)` to `out`: an array's form is its items' forms one after
/// another behind its tag and length, so they are written in place.
fn canonical_into(v: &Value, out: &mut Vec<u8>) -> Option<()> {
    match v {
        Value::Array(items) => {
            canonical_array_head(items.len(), out);
            for x in items {
                canonical_into(x, out)?;
            }
        }
        Value::String(s) => push_string(s.as_bytes(), out),
        _ => out.extend_from_slice(&canonical_value(compact(v).as_bytes())?),
    }
    Some(())
}

/// The keywords of a string schema whose decoded strings are read as an automaton (a domain
/// of unique items).
pub(super) const STRING_KEYWORDS: [&str; 7] = [
    "type",
    "minLength",
    "maxLength",
    "pattern",
    "not pattern",
    "format",
    "not enum",
];

impl Compiler<'_> {
    /// The arrays of `m` (with `uniqueItems`) whose items, `items` once normalised, are
    /// strings of an unbounded domain (guarded string terminals), or values of a domain where
    /// every prefix has infinitely many completions (`prefix_unbounded`: guarded values
    /// compared in canonical form); anything else is refused, naming `uniqueItems`.
    pub(super) fn unique_unbounded(
        &mut self,
        m: &Node,
        items: &Schema,
        path: &str,
    ) -> Result<Sym, Error> {
        // The check of a closed-object item's member before the `]` of a full array: taken by
        // the array compiled at the depth it was set for, so that no array inside sees it.
        let closing = match self.closing {
            Some((spec, w, depth)) if depth == self.depth() => {
                self.closing = None;
                Some((spec, w))
            }
            _ => None,
        };
        let ip = format!("{path}/items");
        let items = self.resolve_bare(items, &ip)?;
        // For string items whose domain is finite as a whole, an empty nonterminal before the
        // `,` that is predicted only while some value is unused.
        let mut more: Option<Sym> = None;
        // Strings of an `anyOf` whose branches are strings alone: one string terminal.
        let union = match &items {
            Schema::Node(n)
                if n.types == Some(TypeSet::STRING)
                    && n.values.is_none()
                    && n.any_of.is_some()
                    && n.only(&[&STRING_KEYWORDS[..], &["anyOf"]].concat()) =>
            {
                self.any_of_strings(n, &ip)?
            }
            _ => None,
        };
        let string_item = matches!(&items, Schema::Node(n)
            if n.types == Some(TypeSet::STRING)
                && n.values.is_none()
                && (n.only(&STRING_KEYWORDS) || union.is_some()));
        // Domains with values that some prefix pins down, and unions (`unique_split`).
        let split = match string_item {
            true => None,
            false => self.unique_split(&items, m.array.max_items, path, &ip)?,
        };
        let (items, union, split) = match split {
            Some(Split::Finite(values)) => return self.unique_finite(m, &values, path),
            Some(Split::Strings(d)) => {
                let n = Node {
                    types: Some(TypeSet::STRING),
                    ..Node::default()
                };
                (Schema::node(n), Some(d), None)
            }
            Some(Split::Items(alts)) => (items, union, Some(alts)),
            None => (items, union, None),
        };
        let alts: Vec<Vec<Sym>> = match &items {
            _ if split.is_some() => split.unwrap_or_default(),
            Schema::Node(n)
                if n.types == Some(TypeSet::STRING)
                    && n.values.is_none()
                    && (n.only(&STRING_KEYWORDS) || union.is_some()) =>
            {
                let (encoded, values) = self.unique_strings(n, path, &ip, union)?;
                if values < m.array.min_items.unwrap_or(0) as u64 {
                    return Ok(Sym::Nt(self.b.nt("impossible array")));
                }
                let finite = finite_states(&encoded);
                let whole = finite.as_ref().is_some_and(|f| f[encoded.start() as usize]);
                let t = self.b.terminal(encoded)?;
                self.b.known_finite(t, finite);
                if let (true, Sym::T(terminal)) = (whole, t) {
                    let m = self.b.nt(format_args!("{path} unique more"));
                    self.b.rule(m, Vec::new());
                    self.b.guard_prediction(m, Guard::MoreStrings { terminal });
                    more = Some(Sym::Nt(m));
                }
                vec![vec![self.b.guarded(
                    &format!("{path} unique item"),
                    t,
                    Guard::UniqueStrings,
                )]]
            }
            _ => {
                let min_items = m.array.min_items.unwrap_or(0);
                if let Some((item, start, _)) =
                    self.unique_closed_objects(&items, min_items, path, &ip)?
                {
                    more = Some(start);
                    vec![vec![item]]
                } else {
                    self.prefix_unbounded(&items, path, &ip, 0)?;
                    let v = self.schema(&items, &ip)?;
                    vec![vec![self.b.guarded(
                        &format!("{path} unique item"),
                        v,
                        Guard::UniqueValues,
                    )]]
                }
            }
        };
        let a = &m.array;
        let min = a.min_items.unwrap_or(0);
        let max = a.max_items;
        if max.is_some_and(|x| x < min) {
            return Ok(Sym::Nt(self.b.nt("impossible array")));
        }
        let top = max.unwrap_or(min.max(1));
        if top > 4096 {
            return Err(unsupported("maxItems/minItems above 4096", path));
        }
        // One list rule per item alternative and count (`unique_split` makes one alternative
        // per value a prefix pins down).
        if alts.len().saturating_mul(top) > 1 << 16 {
            return Err(unsupported(
                "uniqueItems (item alternatives times maxItems/minItems above 65536)",
                path,
            ));
        }
        let (lb, rb, comma) = (self.lit("["), self.lit("]"), self.lit(","));
        // counted[i - 1]: `[` and i items, the last one checked against those before it. The
        // rules grow on the left, so every item's waiting item starts at the `[`.
        let counted: Vec<u32> = (1..=top)
            .map(|i| self.b.nt(format_args!("{path} unique {i} items")))
            .collect();
        let arr = self.b.nt(format_args!("{path} unique array"));
        let ws: Vec<Sym> = self.ws.into_iter().collect();
        for item in &alts {
            let mut r = vec![lb];
            r.extend(&ws);
            r.extend(item);
            self.b.rule(counted[0], r);
        }
        let next = |before: u32, item: &[Sym]| {
            let mut r = vec![Sym::Nt(before)];
            r.extend(more);
            r.extend(&ws);
            r.push(comma);
            r.extend(&ws);
            r.extend(item);
            r
        };
        for item in &alts {
            for i in 1..top {
                self.b.rule(counted[i], next(counted[i - 1], item));
            }
            if max.is_none() {
                self.b.rule(counted[top - 1], next(counted[top - 1], item));
            }
        }
        if min == 0 {
            let r = self.seq(&[lb, rb]);
            self.b.rule(arr, r);
        }
        for (i, &c) in counted.iter().enumerate() {
            if i + 1 >= min {
                let r = match closing {
                    // A full array has one completion, its `]`: the item is checked with it
                    // before any whitespace (`ItemCheck::Closing`).
                    Some((spec, w)) if max == Some(i + 1) => {
                        let check = self.item_guard(spec, "item closing", ItemCheck::Closing(w));
                        self.closing_placed = true;
                        let mut r = vec![Sym::Nt(c), check];
                        r.extend(&ws);
                        r.push(rb);
                        r
                    }
                    _ => self.seq(&[Sym::Nt(c), rb]),
                };
                self.b.rule(arr, r);
            }
        }
        Ok(Sym::Nt(arr))
    }

    /// Arrays of distinct items from the finite set `values` (distinct JSON values, too many
    /// to unroll one rule per subset): each value is its own nonterminal, guarded at
    /// prediction ([`Guard::Fresh`]) so that the chart predicts it only while no earlier item
    /// of the array equals it, and the `,` before another item and the `]` are guarded by the
    /// item count ([`Guard::Next`]: fewer than `maxItems` and than the values, so some value
    /// is unused; [`Guard::Close`]: `minItems`). Every prefix the chart accepts thus has a
    /// valid completion. The rules are left-recursive, so every guard's waiting item starts at
    /// the `[`:
    ///
    /// ```text
    /// list  -> "[" F_j | list Next "," F_j      (every value j)
    /// array -> "[" "]" | list Close "]"
    /// F_j   -> value j, in any of its spellings
    /// ```
    pub(super) fn unique_finite(
        &mut self,
        m: &Node,
        values: &[Value],
        path: &str,
    ) -> Result<Sym, Error> {
        if values.len() > 4096 {
            return Err(unsupported(
                "uniqueItems (an enum of more than 4096 values)",
                path,
            ));
        }
        let ip = format!("{path}/items");
        let a = &m.array;
        let min = a.min_items.unwrap_or(0);
        let max = a.max_items.unwrap_or(usize::MAX).min(values.len());
        if min > max {
            return Ok(Sym::Nt(self.b.nt("impossible array")));
        }
        let mut canon = Vec::with_capacity(values.len());
        for v in values {
            let c = canonical_of(v)
                .ok_or_else(|| invalid(&ip, "internal: an enum value that is not JSON"))?;
            canon.push(c);
        }
        let set = self.b.finite_set(FiniteSet {
            values: canon,
            min,
            max,
            outer: None,
        });
        let (lb, rb, comma) = (self.lit("["), self.lit("]"), self.lit(","));
        let ws: Vec<Sym> = self.ws.into_iter().collect();
        let list = self.b.nt(format_args!("{path} unique list"));
        let next = self.b.nt(format_args!("{path} unique next"));
        self.b.rule(next, Vec::new());
        self.b.guard_prediction(next, Guard::Next { set });
        for (j, v) in values.iter().enumerate() {
            let value = self.const_value(v, &ip)?;
            let fresh = self.b.nt(format_args!("{path} unique value {j}"));
            self.b.rule(fresh, vec![value]);
            self.b.guard_prediction(
                fresh,
                Guard::Fresh {
                    set,
                    value: j as u32,
                },
            );
            let first = self.seq(&[lb, Sym::Nt(fresh)]);
            self.b.rule(list, first);
            let mut r = vec![Sym::Nt(list), Sym::Nt(next)];
            r.extend(&ws);
            r.push(comma);
            r.extend(&ws);
            r.push(Sym::Nt(fresh));
            self.b.rule(list, r);
        }
        let arr = self.b.nt(format_args!("{path} unique array"));
        if min == 0 {
            let r = self.seq(&[lb, rb]);
            self.b.rule(arr, r);
        }
        let close = self.b.nt(format_args!("{path} unique close"));
        self.b.rule(close, Vec::new());
        self.b.guard_prediction(close, Guard::Close { set });
        let mut r = vec![Sym::Nt(list), Sym::Nt(close)];
        r.extend(&ws);
        r.push(rb);
        self.b.rule(arr, r);
        Ok(Sym::Nt(arr))
    }

    /// The JSON-encoded strings of a string item node `n` (string keywords only), as a
    /// guarded string terminal: a prefix with finitely many completions is checked at run
    /// time (`grammar::unique`: some completion must be a new value), so only a finite
    /// domain as a whole is refused (nothing guards the `,` before an item). Also returns the
    /// number of values (decoded strings; `u64::MAX` when infinite or more).
    fn unique_strings(
        &self,
        n: &Node,
        path: &str,
        ip: &str,
        union: Option<Dfa>,
    ) -> Result<(Dfa, u64), Error> {
        let f = &n.string;
        if is_long(f) {
            return Err(bounded_strings(path));
        }
        // The union alone where the node's own keywords allow any string (tsconfig's `lib`):
        // a product with every string only copied it.
        let mut content = match union {
            Some(u) if *f == StringFacets::default() => u,
            Some(u) => string_content(f, ip)?.intersect(&u)?,
            None => string_content(f, ip)?,
        };
        content = without_strings(content, n.excluded.iter().flatten())?;
        let encoded = content.json_string()?;
        Ok((encoded, content.count_words()))
    }

    /// `Ok` when the strings of string node `n` (string keywords only), inside another
    /// value of a `uniqueItems` item, have infinitely many completions at every prefix;
    /// otherwise the refusal, naming `uniqueItems` at `path`.
    ///
    /// The same strings are checked for every property of that type in every closed object
    /// of every item (sarif's many `uri`s), so the verdict is kept process-wide per facets
    /// and excluded strings, and the automaton checked is the one a string value of those
    /// keywords compiles to (`string_automaton`, kept too).
    fn strings_unbounded(&self, n: &Node, path: &str, ip: &str) -> Result<(), Error> {
        static VERDICTS: OnceLock<Kept<(StringFacets, Vec<String>), bool>> = OnceLock::new();
        let f = &n.string;
        if f.max_length.is_some() || is_long(f) {
            return Err(bounded_strings(path));
        }
        let excluded = n.excluded.as_deref().unwrap_or(&[]);
        let open = VERDICTS
            .get_or_init(|| Kept::new(1024))
            .get_or_try(&string_key(f, excluded), || {
                Ok::<_, Error>(unbounded(&*string_automaton(f, excluded, ip)?))
            })?;
        match open {
            true => Ok(()),
            false => Err(unsupported(
                "uniqueItems (a string domain with finitely many completions of some prefix)",
                path,
            )),
        }
    }

    /// The decoded strings that the `anyOf` of string node `n` allows, when every branch is
    /// string keywords alone (`enum` among them); `None` when some branch is something else.
    fn any_of_strings(&self, n: &Node, ip: &str) -> Result<Option<Dfa>, Error> {
        let branch_keywords = [&STRING_KEYWORDS[..], &["enum"]].concat();
        let mut branches = Vec::new();
        for (i, b) in n.any_of.iter().flatten().enumerate() {
            let bp = format!("{ip}/anyOf/{i}");
            let b = match self.resolve_bare(b, &bp)? {
                Schema::Never => continue,
                Schema::Any => return Ok(Some(Dfa::any_string().clone())),
                Schema::Node(b) => b,
            };
            if !b.only(&branch_keywords) {
                return Ok(None);
            }
            if !b.types.unwrap_or(TypeSet::ALL).has(TypeSet::STRING) {
                continue;
            }
            branches.push(node_strings(&b, &bp)?);
        }
        Ok(Some(Dfa::union_all(branches)?))
    }

    /// `Ok` when every proper prefix of a value of `s` has infinitely many completions into
    /// distinct values (or at least `u64::MAX`, more than any input holds items), so that a
    /// finite set of earlier items never leaves a prefix without a valid end (the grammar
    /// being pruned of what can never finish); otherwise the refusal,
    /// naming `uniqueItems` at `path` and why. Sufficient conditions, by type: strings whose
    /// automaton never narrows to finitely many words (`unbounded`); numbers without bounds
    /// (`0` goes on as `0.1`, `1e5` as `1e50`) but for zero's `0e…`, which goes on only as
    /// zero, so the callers set zero apart (`unique_split`, `unique_objects`); objects that always take one more member
    /// (`additionalProperties` not false, no `maxProperties`, `propertyNames` or
    /// `patternProperties`; a `oneOf` or `anyOf` of `required` alone, which members of fresh
    /// names never change); arrays that always take one more item (no `maxItems`, items not
    /// false, their own `uniqueItems` over such a domain, over strings of at least `u64::MAX`
    /// values or over closed objects of infinitely many values, whose own guards keep every
    /// item prefix completable); `anyOf` of such branches. `null`,
    /// booleans and integers (`0` has no other completion by value), enums and bounded
    /// numbers are finite at some prefix.
    pub(super) fn prefix_unbounded(
        &self,
        s: &Schema,
        path: &str,
        ip: &str,
        depth: usize,
    ) -> Result<(), Error> {
        if depth > 8 {
            return Err(unsupported(
                "uniqueItems (items nested more than 8 deep)",
                path,
            ));
        }
        let s = self.resolve_bare(s, ip)?;
        let n = match &s {
            Schema::Node(n) => n,
            Schema::Any => return Err(unsupported("uniqueItems (items of any type)", path)),
            Schema::Never => {
                return Err(unsupported(
                    "uniqueItems (items of arrays that can only be empty)",
                    path,
                ))
            }
        };
        // An object of one type whose `oneOf`/`anyOf` branches are `required` alone: whether
        // a branch holds depends on the named members only, so the members of fresh names that
        // an open object always takes one more of (checked below) never change it.
        let stripped;
        let n = if n.types == Some(TypeSet::OBJECT)
            && (n.one_of.is_some() || n.any_of.is_some())
            && self.required_branches(n, ip)?
        {
            let mut m = (**n).clone();
            m.one_of = None;
            m.any_of = None;
            stripped = m;
            &stripped
        } else {
            &**n
        };
        if let Some(vs) = &n.values {
            let what = if vs.len() > super::containers::UNROLLED_VALUES {
                format!(
                    "uniqueItems (an enum of more than {} values)",
                    super::containers::UNROLLED_VALUES
                )
            } else {
                "uniqueItems (an enum among other item keywords: a finite domain)".to_string()
            };
            return Err(unsupported(what, path));
        }
        if let Some(branches) = &n.any_of {
            if !n.only(&["anyOf"]) {
                return Err(unsupported(
                    "uniqueItems (items with anyOf beside other keywords)",
                    path,
                ));
            }
            for (i, b) in branches.iter().enumerate() {
                self.prefix_unbounded(b, path, &format!("{ip}/anyOf/{i}"), depth + 1)?;
            }
            return Ok(());
        }
        let allowed = [
            "type",
            "not enum",
            "minLength",
            "pattern",
            "not pattern",
            "format",
            "properties",
            "patternProperties",
            "required",
            "additionalProperties",
            "minProperties",
            "dependentRequired",
            "items",
            "prefixItems",
            "minItems",
            "contains",
            "minContains",
            "uniqueItems",
        ];
        if let Some(k) = n.keywords().into_iter().find(|k| !allowed.contains(k)) {
            return Err(unsupported(format!("uniqueItems (items with {k})"), path));
        }
        let types = n.types.unwrap_or(TypeSet::ALL);
        if types.has(TypeSet::NULL) || types.has(TypeSet::BOOLEAN) {
            return Err(unsupported(
                "uniqueItems (items that may be null or booleans: one completion each)",
                path,
            ));
        }
        if types.has(TypeSet::INTEGER) && !types.has(TypeSet::NUMBER) {
            return Err(unsupported(
                "uniqueItems (integer items: `0` has no completion of another value)",
                path,
            ));
        }
        if types.has(TypeSet::STRING) {
            self.strings_unbounded(n, path, ip)?;
        }
        if types.has(TypeSet::OBJECT) {
            let closed = match &n.object.additional_properties {
                Some(ap) => {
                    normalize(self.table, ap, &format!("{ip}/additionalProperties"), 0)?
                        == Schema::Never
                }
                None => false,
            };
            let patterned = n.object.pattern_properties.is_some();
            if (closed || patterned) && !self.fresh_members(n, closed, ip)? {
                let what = match closed {
                    true => {
                        "uniqueItems (objects without additional properties: finitely many \
                         completions of some prefix)"
                    }
                    false => "uniqueItems (items with patternProperties)",
                };
                return Err(unsupported(what, path));
            }
        }
        if types.has(TypeSet::ARRAY) {
            let a = &n.array;
            let inner = a.items.clone().unwrap_or(Schema::Any);
            let inner_path = format!("{ip}/items");
            if a.unique_items {
                if let Err(e) = self.prefix_unbounded(&inner, path, &inner_path, depth + 1) {
                    // Items of infinitely many values: the array can always take one more
                    // of them (no input holds `u64::MAX` items), and the array's own checks
                    // keep every prefix of an item completable (or refuse the schema).
                    if !self.infinitely_many(&inner, path, &inner_path, depth + 1)? {
                        return Err(e);
                    }
                }
            } else if normalize(self.table, &inner, &inner_path, 0)? == Schema::Never {
                return Err(unsupported(
                    "uniqueItems (items that are arrays of finitely many items)",
                    path,
                ));
            }
        }
        Ok(())
    }

    /// Whether an object of `n` (at `ip`; `closed` when its `additionalProperties` is
    /// `false`) can always take one more member: infinitely many names outside `properties`
    /// take some value, those that no pattern of `patternProperties` matches (when not
    /// `closed`), or those that one pattern alone matches, its schema not `false` (swagger's
    /// `^x-` vendor extensions beside `additionalProperties: false`).
    fn fresh_members(&self, n: &Node, closed: bool, ip: &str) -> Result<bool, Error> {
        let names: Vec<&[u8]> = n
            .object
            .properties
            .iter()
            .flatten()
            .map(|(k, _)| k.as_bytes())
            .collect();
        let named = Dfa::literals(&names, 1 << 16)?;
        let patterns = n.object.pattern_properties.as_deref().unwrap_or_default();
        let mut dfas = Vec::with_capacity(patterns.len());
        for (p, _) in patterns {
            match pattern_dfa(p) {
                Ok(d) => dfas.push(d),
                Err(_) => return Ok(false),
            }
        }
        if !closed {
            let mut outside = Dfa::any_string().minus(&named)?;
            for d in &dfas {
                outside = outside.minus(d)?;
            }
            if outside.count_words() == u64::MAX {
                return Ok(true);
            }
        }
        for (i, (p, v)) in patterns.iter().enumerate() {
            let pp = format!("{ip}/patternProperties/{p}");
            if normalize(self.table, v, &pp, 0)? == Schema::Never {
                continue;
            }
            let mut only = dfas[i].minus(&named)?;
            for (j, d) in dfas.iter().enumerate() {
                if j != i {
                    only = only.minus(d)?;
                }
            }
            if only.count_words() == u64::MAX {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Whether the items `s` (at `ip`) of a `uniqueItems` array whose every proper prefix is
    /// to have infinitely many completions are infinitely many values: unbounded at every
    /// prefix themselves, strings of at least `u64::MAX` values (a GUID's pattern), closed
    /// objects of infinitely many values, or an `anyOf` with such a branch (travis's webhook
    /// `urls`: a URI string or a closed object of one string).
    fn infinitely_many(
        &self,
        s: &Schema,
        path: &str,
        ip: &str,
        depth: usize,
    ) -> Result<bool, Error> {
        if depth > 8 {
            return Ok(false);
        }
        if self.prefix_unbounded(s, path, ip, depth).is_ok() {
            return Ok(true);
        }
        let s = self.resolve_bare(s, ip)?;
        if let Some(content) = super::unique_objects::finite_string(&s, ip)? {
            return Ok(content.count_words() == u64::MAX);
        }
        if self.infinite_closed_objects(&s, path, ip, depth)? {
            return Ok(true);
        }
        if let Schema::Node(n) = &s {
            if let (Some(branches), true) = (&n.any_of, n.only(&["anyOf"])) {
                for (i, b) in branches.iter().enumerate() {
                    if self.infinitely_many(b, path, &format!("{ip}/anyOf/{i}"), depth + 1)? {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Whether every branch of `n`'s `oneOf` and `anyOf` (either may be absent) is `required`
    /// alone (or any value).
    pub(super) fn required_branches(&self, n: &Node, ip: &str) -> Result<bool, Error> {
        for (comb, branches) in [("oneOf", &n.one_of), ("anyOf", &n.any_of)] {
            for (i, b) in branches.iter().flatten().enumerate() {
                match self.resolve_bare(b, &format!("{ip}/{comb}/{i}"))? {
                    Schema::Any => {}
                    Schema::Node(b) if b.only(&["required"]) => {}
                    _ => return Ok(false),
                }
            }
        }
        Ok(true)
    }

    /// `s` normalised, through bare references (at most 32), a `oneOf` of disjoint branches
    /// read as their `anyOf`.
    pub(super) fn resolve_bare(&self, s: &Schema, path: &str) -> Result<Schema, Error> {
        let mut s = normalize(self.table, s, path, 0)?;
        for _ in 0..32 {
            let target = match &s {
                Schema::Node(n) if n.is_bare_ref() => n.reference.as_ref().map(|r| r.target),
                // A `oneOf` of branches shown disjoint (travis's `urls`: a string, a
                // reference to a closed object, an array) is the `anyOf` of them.
                Schema::Node(n) if n.one_of.is_some() => {
                    let any = disjoint_one_of_as_any_of(self.table, n, path)
                        .ok()
                        .flatten();
                    return Ok(any.unwrap_or(s));
                }
                _ => return Ok(s),
            };
            let Some(t) = target.and_then(|t| self.table.get(t)) else {
                return Ok(s);
            };
            s = normalize(self.table, t, path, 0)?;
        }
        Err(unsupported(
            "$ref (a chain of more than 32 references)",
            path,
        ))
    }
}

/// The refusal of string items of bounded length.
fn bounded_strings(path: &str) -> Error {
    unsupported(
        "uniqueItems (strings of bounded length: a finite domain)",
        path,
    )
}

/// Whether every live state of `d` that can read on reaches infinitely many words: those that
/// cannot read on (after a string's closing quote) apart ([`Dfa::finite_completions`]).
pub(super) fn unbounded(d: &Dfa) -> bool {
    let n = d.num_states();
    let reps = d.class_reps(|_| true);
    // Reachable states, from the start.
    let mut reach = vec![false; n];
    let mut todo = vec![d.start()];
    while let Some(s) = todo.pop() {
        if s == DEAD || reach[s as usize] {
            continue;
        }
        reach[s as usize] = true;
        todo.extend(reps.iter().map(|&b| d.next(s, b)));
    }
    let finite = d.finite_completions();
    (1..n).all(|s| !reach[s] || !finite[s] || !d.can_continue(s as u32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unbounded_string_domains() {
        let enc = |re: &str| Dfa::from_regex(re).unwrap().json_string().unwrap();
        assert!(unbounded(&enc("(?s:.)*")));
        assert!(unbounded(&enc("[a-z]+")));
        assert!(unbounded(&enc("a(?s:.)*")));
        assert!(!unbounded(&enc("ab|ac")));
        assert!(!unbounded(&enc("(?s:.){0,3}")));
        // Infinitely many words, but after `x` only one.
        assert!(!unbounded(&enc("x|y[a-z]*")));
    }

    /// An array's canonical form put together from its items' is the form of its text.
    #[test]
    fn canonical_forms_put_together_equal_those_read_from_text() {
        let values = [
            json!([]),
            json!(["start", "word"]),
            json!([["a\"b", "\u{e9}"], [], [1, 1.0, -0.0, 2e3]]),
            json!([{"b": 1, "a": [true, null]}, "x/y"]),
            json!("plain"),
            json!("tab\t, quote \" and \u{1F600}"),
            json!({"k": ["v"]}),
        ];
        for v in &values {
            assert_eq!(
                canonical_of(v),
                canonical_value(compact(v).as_bytes()),
                "{v}"
            );
        }
        // Equal values by JSON Schema's equality have equal forms, whatever their spelling.
        assert_eq!(
            canonical_of(&json!([1, "a"])),
            canonical_of(&json!([1.0, "a"]))
        );
        assert_ne!(
            canonical_of(&json!(["a", "b"])),
            canonical_of(&json!(["b", "a"]))
        );
    }
}
