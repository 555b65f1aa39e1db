//! `uniqueItems` over item domains where some prefix pins the value down: `null`, `true`,
//! `false`, zero (`0e` goes on only as `0e5`, `0e50`, ..., all zero), integers (`5.` goes on
//! only as `5.0`, `5.00`, ...), enum values, and unions (`anyOf`, `oneOf` of disjoint
//! branches) of such with strings, numbers, objects and arrays.
//!
//! The item domain is split into parts ([`Parts`]). A value some prefix of which has one
//! completion by value is its own nonterminal guarded at prediction ([`Guard::Fresh`]): the
//! chart begins it only while no earlier item equals it, so its prefixes never dead-end. Zero
//! is one such value, all its spellings (`-0.0e7` among them) one terminal; the other numbers
//! are the rest of the number automaton, where every live prefix goes on to infinitely many
//! values (`0.0` to `0.01`, `1e5` to `1e50`). Integers are read as their canonical digits, a
//! guarded terminal completed (compared with the earlier items) before the optional `.0+`
//! that cannot change the value, so `[5,5.` is refused at the `.`; their canonical spellings
//! are one per value, so an automaton state with finitely many completions is exactly a prefix
//! with finitely many values, and bounds that leave one are refused. Values excluded by `not`
//! of `enum` go too: zero as a whole, an integer's canonical spelling, a number's spellings
//! (the others then written without exponent, whose every live prefix still goes on to
//! infinitely many values). Strings whose every prefix has infinitely many completions, objects
//! and arrays keep the existing checks (`prefix_unbounded`), but for object types that it
//! refuses (closed by `additionalProperties: false`), each a closed-object item of its own
//! (`unique_closed_objects`, whose guards read past earlier items of other types; where
//! other object types stand beside it, a required key tells its objects from theirs,
//! `branch_key`, and its guards read past theirs too) when the
//! objects or the other parts are infinitely many: its check before the `,` of another item is
//! left out, so some value must always be left to write; strings with a prefix of finitely
//! many completions are a [`Guard::UniqueStrings`] item of their own, checked the string way
//! (`Chart::string_item_alive`; earlier items of other types are read past), when earlier
//! items can never use them all (infinitely many, or at least `maxItems`). Everything else is
//! one value item guarded at completion ([`Guard::UniqueValues`]), and every such item's
//! proper prefixes have infinitely many completions into distinct values, so a finite set of
//! earlier items never leaves one without a valid end; but for `uniqueItems` arrays of a
//! finite set of values, of more arrays than a `u64` counts (stylelint's `unitRule`: any
//! of 29 unit names, each once), each a value item of its own whose set's guards also check
//! the prefix against the earlier items as it is written ([`FiniteSet::outer`]: a prefix
//! listing 28 of the names has two completions, which earlier items may both be). All the
//! alternatives sit right in the array's left-recursive list rules, so that every guard's
//! waiting item starts at the `[`.

use serde_json::Value;

use super::algebra::{exactly_one, merge, normalize};
use super::compile::Compiler;
use super::number::{number_dfa, Decimal};
use super::schema::{invalid, json_eq, unsupported, Node, NumberFacets, Schema, TypeSet};
use super::string::{is_long, string_content, without_strings};
use super::unique::{canonical_of, unbounded};
use crate::dfa::Dfa;
use crate::grammar::{canonical_value, ordered_completions, FiniteSet, Guard, Sym};
use crate::Error;

/// Every JSON spelling of zero, of either sign.
pub(super) const ZERO: &str = r"-?0(\.0+)?([eE][+-]?[0-9]+)?";
/// The spellings of numbers without exponent.
const NO_EXPONENT: &str = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?";
/// The canonical spellings of the integers other than zero.
const NONZERO_INTEGER: &str = r"-?[1-9][0-9]*";

/// An item domain split by how its prefixes end (see the module's documentation).
#[derive(Default)]
struct Parts {
    /// Values some prefix of which has one completion by value, each predicted only while
    /// unused (`null`, booleans, enum values); no two equal.
    fresh: Vec<Value>,
    /// The spellings of zero, predicted only while zero is unused.
    zero: Option<Dfa>,
    /// Numbers other than zero, every live prefix going on to infinitely many values.
    numbers: Option<Dfa>,
    /// Integers other than zero, canonical spellings (the `.0+` that may follow is apart).
    integers: Option<Dfa>,
    /// String contents (decoded).
    strings: Option<Dfa>,
    /// Objects and arrays, each passing `prefix_unbounded`.
    others: Vec<Schema>,
    /// `uniqueItems` arrays of a finite set of values too large to run out of (more arrays
    /// than a `u64` counts), with those values: each prefix is checked against the earlier
    /// items as it is written ([`FiniteSet::outer`]).
    finite_arrays: Vec<(Node, Vec<Value>)>,
    /// Objects that do not pass `prefix_unbounded` (closed by `additionalProperties: false`,
    /// say), with its refusal: one of them may be a closed-object item of its own
    /// (`unique_closed_objects`).
    closed: Vec<(Schema, Error)>,
}

/// What [`Compiler::unique_split`] makes of an item domain.
pub(super) enum Split {
    /// Strings alone: their decoded contents, for the string item path (`UniqueStrings`).
    Strings(Dfa),
    /// The alternatives of one item, each a sequence for the array's list rules.
    Items(Vec<Vec<Sym>>),
    /// Finitely many values (no other part): an enum, for `unique_finite`.
    Finite(Vec<Value>),
}

fn union(a: Option<Dfa>, b: Option<Dfa>) -> Result<Option<Dfa>, Error> {
    Ok(match (a, b) {
        (Some(x), Some(y)) => Some(x.union(&y)?),
        (x, None) => x,
        (None, y) => y,
    })
}

impl Parts {
    fn add(&mut self, o: Parts) -> Result<(), Error> {
        for v in o.fresh {
            self.push_fresh(v);
        }
        self.zero = union(self.zero.take(), o.zero)?;
        self.numbers = union(self.numbers.take(), o.numbers)?;
        self.integers = union(self.integers.take(), o.integers)?;
        self.strings = union(self.strings.take(), o.strings)?;
        self.others.extend(o.others);
        self.closed.extend(o.closed);
        self.finite_arrays.extend(o.finite_arrays);
        Ok(())
    }

    fn push_fresh(&mut self, v: Value) {
        if !self.fresh.iter().any(|w| json_eq(&v, w)) {
            self.fresh.push(v);
        }
    }
}

/// Whether a number schema's facets leave every live prefix of a number other than zero
/// (without exponent when bounded) infinitely many values: no bounds at all, or only lower
/// bounds of at least zero (a positive prefix goes on by appending digits, which only makes
/// it larger). `None` when so; otherwise the keyword that may leave finitely many.
fn numbers_unbounded(f: &NumberFacets) -> Result<Option<&'static str>, Error> {
    let zero = Decimal::parse(&Value::from(0), "")?;
    if f.maximum.is_some() {
        return Ok(Some("maximum"));
    }
    if f.exclusive_maximum.is_some() {
        return Ok(Some("exclusiveMaximum"));
    }
    if f.multiple_of.is_some() {
        return Ok(Some("multipleOf"));
    }
    if f.not_integer {
        return Ok(Some("not integer"));
    }
    if f.minimum.as_ref().is_some_and(|m| *m < zero) {
        return Ok(Some("a negative minimum"));
    }
    if f.exclusive_minimum.as_ref().is_some_and(|m| *m < zero) {
        return Ok(Some("a negative exclusiveMinimum"));
    }
    Ok(None)
}

impl Compiler<'_> {
    /// The item domain `items` of a `uniqueItems` array split so that no prefix dead-ends
    /// (see the module's documentation); `None` when the domain holds nothing this split is
    /// for (no `null`, booleans, numbers, enums, unions), which keeps the plain value path.
    /// Parts that could still leave a prefix without a new value are refused by name.
    pub(super) fn unique_split(
        &mut self,
        items: &Schema,
        max_items: Option<usize>,
        path: &str,
        ip: &str,
    ) -> Result<Option<Split>, Error> {
        if !self.needs_split(items, ip)? {
            return Ok(None);
        }
        let parts = self.split_parts(items, path, ip, 0)?;
        let none = |d: &Option<Dfa>| d.as_ref().is_none_or(Dfa::is_empty_language);
        let infinite = !none(&parts.numbers)
            || !none(&parts.integers)
            || !parts.others.is_empty()
            || !parts.closed.is_empty()
            || !parts.finite_arrays.is_empty()
            || !none(&parts.strings);
        if !infinite {
            // Finitely many values: the `,` before another item needs a check too.
            let mut values = parts.fresh;
            let zero = Value::from(0);
            if !none(&parts.zero) && !values.iter().any(|w| json_eq(w, &zero)) {
                values.push(zero);
            }
            return Ok(Some(Split::Finite(values)));
        }
        if parts.fresh.is_empty()
            && none(&parts.zero)
            && none(&parts.numbers)
            && none(&parts.integers)
            && parts.others.is_empty()
            && parts.closed.is_empty()
            && parts.finite_arrays.is_empty()
        {
            if let Some(s) = parts.strings {
                return Ok(Some(Split::Strings(s)));
            }
        }
        self.split_items(parts, max_items, path, ip)
            .map(|a| Some(Split::Items(a)))
    }

    /// Whether `items` holds `null`, booleans, numbers, an enum or a union at its top.
    fn needs_split(&self, items: &Schema, ip: &str) -> Result<bool, Error> {
        Ok(match self.resolve_bare(items, ip)? {
            Schema::Any => true,
            Schema::Never => false,
            Schema::Node(n) => {
                let t = n.types.unwrap_or(TypeSet::ALL);
                n.values.is_some()
                    || n.any_of.is_some()
                    || n.one_of.is_some()
                    || [
                        TypeSet::NULL,
                        TypeSet::BOOLEAN,
                        TypeSet::NUMBER,
                        TypeSet::INTEGER,
                    ]
                    .into_iter()
                    .any(|x| t.has(x))
            }
        })
    }

    /// The parts of the values of `s`.
    fn split_parts(&self, s: &Schema, path: &str, ip: &str, depth: usize) -> Result<Parts, Error> {
        if depth > 8 {
            return Err(unsupported(
                "uniqueItems (items nested more than 8 deep)",
                path,
            ));
        }
        let n = match self.resolve_bare(s, ip)? {
            Schema::Never => return Ok(Parts::default()),
            Schema::Any => std::sync::Arc::new(Node::default()),
            Schema::Node(n) => n,
        };
        // A closed object whose `anyOf` is of `required` alone (SARIF's `message`: `text` or
        // `id`) is one object type, its `anyOf` checked at its `}`, not one type per branch.
        let whole = Schema::Node(n.clone());
        if n.types == Some(TypeSet::OBJECT)
            && n.any_of.is_some()
            && self.closed_object(&whole, ip)?.is_some()
        {
            let mut parts = Parts::default();
            match self.prefix_unbounded(&whole, path, ip, depth + 1) {
                Ok(()) => parts.others.push(whole),
                Err(e) => parts.closed.push((whole, e)),
            }
            return Ok(parts);
        }
        for (comb, branches) in [("anyOf", &n.any_of), ("oneOf", &n.one_of)] {
            let Some(branches) = branches else {
                continue;
            };
            let mut base = (*n).clone();
            if comb == "anyOf" {
                base.any_of = None;
            } else {
                base.one_of = None;
            }
            let base = Schema::node(base);
            let mut merged = Vec::with_capacity(branches.len());
            let mut own = Vec::with_capacity(branches.len());
            for (i, br) in branches.iter().enumerate() {
                let bp = format!("{ip}/{comb}/{i}");
                let br = normalize(self.table, br, &bp, 0)?;
                let m = merge(&base, &br, &bp)?;
                if m != Schema::Never {
                    merged.push(m);
                    own.push(br);
                }
            }
            if comb == "oneOf" {
                // Disjoint branches (each less the others it may overlap): their union is
                // the `oneOf`.
                merged = exactly_one(self.table, &merged, &own, ip)?.map_err(|why| {
                    unsupported(
                        format!("uniqueItems (items with oneOf whose branches may overlap: {why})"),
                        path,
                    )
                })?;
            }
            let mut parts = Parts::default();
            for (i, br) in merged.iter().enumerate() {
                let bp = format!("{ip}/{comb}/{i}");
                parts.add(self.split_parts(br, path, &bp, depth + 1)?)?;
            }
            return Ok(parts);
        }
        let types = n.types.unwrap_or(TypeSet::ALL);
        let mut parts = Parts::default();
        if let Some(values) = &n.values {
            if !n.only(&["enum", "type"]) {
                return Err(unsupported(
                    "uniqueItems (an enum among other item keywords)",
                    path,
                ));
            }
            for v in values {
                let ok = types.admits(v);
                if ok {
                    parts.push_fresh(v.clone());
                }
            }
            return Ok(parts);
        }
        let allowed = [
            "type",
            "not enum",
            "minLength",
            "maxLength",
            "pattern",
            "not pattern",
            "format",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "exclusiveMaximum",
            "multipleOf",
            "not integer",
            "properties",
            "required",
            "additionalProperties",
            "minProperties",
            "maxProperties",
            "patternProperties",
            "propertyNames",
            "dependentRequired",
            "items",
            "prefixItems",
            "minItems",
            "maxItems",
            "contains",
            "minContains",
            "uniqueItems",
        ];
        if let Some(k) = n.keywords().into_iter().find(|k| !allowed.contains(k)) {
            return Err(unsupported(format!("uniqueItems (items with {k})"), path));
        }
        let excluded: &[Value] = n.excluded.as_deref().unwrap_or(&[]);
        if excluded.iter().any(|v| v.is_array() || v.is_object()) {
            return Err(unsupported(
                "uniqueItems (items with not enum of arrays or objects)",
                path,
            ));
        }
        // Excluded numbers, by value; zero apart.
        let zero_value = Decimal::parse(&Value::from(0), ip)?;
        let mut zero_out = false;
        let mut numbers_out = Vec::new();
        for v in excluded.iter().filter(|v| v.is_number()) {
            let x = Decimal::parse(v, ip)?;
            if x == zero_value {
                zero_out = true;
            } else {
                numbers_out.push(Dfa::from_regex(&x.equal_regex())?);
            }
        }
        let out = |v: &Value| excluded.contains(v);
        if types.has(TypeSet::NULL) && !out(&Value::Null) {
            parts.push_fresh(Value::Null);
        }
        if types.has(TypeSet::BOOLEAN) {
            for b in [true, false] {
                if !out(&Value::Bool(b)) {
                    parts.push_fresh(Value::Bool(b));
                }
            }
        }
        if types.has(TypeSet::NUMBER) || types.has(TypeSet::INTEGER) {
            let integer = !types.has(TypeSet::NUMBER);
            let d = number_dfa(&n.number, integer, ip)?;
            let zero = Dfa::from_regex(ZERO)?;
            if !zero_out {
                parts.zero = Some(d.intersect(&zero)?);
            }
            if integer {
                let mut canon = d.intersect(&Dfa::from_regex(NONZERO_INTEGER)?)?;
                // An excluded integer's canonical spelling goes, and with it the `.0+` that
                // would follow it; the check below sees what is left.
                for x in &numbers_out {
                    canon = canon.minus(x)?;
                }
                // One canonical spelling per value: finitely many words from a state are
                // finitely many values.
                if !unbounded(&canon) {
                    return Err(unsupported(
                        "uniqueItems (integers bounded so that some prefix has finitely many \
                         completions)",
                        path,
                    ));
                }
                parts.integers = Some(canon);
            } else {
                if let Some(k) = numbers_unbounded(&n.number)? {
                    return Err(unsupported(
                        format!(
                            "uniqueItems (numbers with {k}: some prefix has finitely many \
                             completions)"
                        ),
                        path,
                    ));
                }
                let mut numbers = d.minus(&zero)?;
                if !numbers_out.is_empty() {
                    // Exponent spellings of an excluded value would escape the difference,
                    // so the other numbers are written without exponent (as `compile` does).
                    // Every live prefix of such a number still goes on to infinitely many
                    // values (`5` as `5.1`, `5.11`, ...), finitely many of them excluded.
                    numbers = numbers.intersect(&Dfa::from_regex(NO_EXPONENT)?)?;
                    for x in &numbers_out {
                        numbers = numbers.minus(x)?;
                    }
                }
                parts.numbers = Some(numbers);
            }
        }
        if types.has(TypeSet::STRING) {
            let f = &n.string;
            if is_long(f) || f.format.as_deref() == Some("regex") {
                return Err(unsupported(
                    "uniqueItems (long strings or format regex among other item types)",
                    path,
                ));
            }
            parts.strings = Some(without_strings(string_content(f, ip)?, excluded)?);
        }
        let containers = types.intersect(TypeSet::OBJECT.union(TypeSet::ARRAY));
        if !containers.is_empty() {
            let sub = Schema::node(Node {
                types: Some(containers),
                array: n.array.clone(),
                object: n.object.clone(),
                ..Node::default()
            });
            match self.prefix_unbounded(&sub, path, ip, depth + 1) {
                Ok(()) => parts.others.push(sub),
                Err(e) if containers == TypeSet::OBJECT => parts.closed.push((sub, e)),
                Err(e) => match self.finite_unique_array(&sub, ip)? {
                    Some(found) => parts.finite_arrays.push(found),
                    None => return Err(e),
                },
            }
        }
        Ok(parts)
    }

    /// `s` (at `ip`, an array type alone) when it is a `uniqueItems` array of a finite set
    /// of values, with `minItems` and `maxItems` alone beside them, of more arrays than a
    /// `u64` counts (so that earlier items never use them all up: its `[` needs no check),
    /// and those values.
    fn finite_unique_array(
        &self,
        s: &Schema,
        ip: &str,
    ) -> Result<Option<(Node, Vec<Value>)>, Error> {
        let Schema::Node(n) = s else {
            return Ok(None);
        };
        let a = &n.array;
        if n.types != Some(TypeSet::ARRAY)
            || !n.only(&["type", "items", "uniqueItems", "minItems", "maxItems"])
            || !a.unique_items
        {
            return Ok(None);
        }
        let Some(items) = &a.items else {
            return Ok(None);
        };
        let items = self.resolve_bare(items, &format!("{ip}/items"))?;
        let Some(values) = super::unique_objects::finite_values(&items) else {
            return Ok(None);
        };
        let (min, max) = (
            a.min_items.unwrap_or(0),
            a.max_items.unwrap_or(usize::MAX).min(values.len()),
        );
        if values.is_empty() || values.len() > 4096 || min > max {
            return Ok(None);
        }
        let total = ordered_completions(values.len(), 0, min, max);
        Ok((total == u64::MAX).then(|| ((**n).clone(), values)))
    }

    /// The alternatives of one item for `parts`: each fresh value (and zero) its own
    /// nonterminal guarded at prediction, integers a guarded terminal with the optional `.0+`
    /// after it, and the rest one value guarded at completion.
    fn split_items(
        &mut self,
        parts: Parts,
        max_items: Option<usize>,
        path: &str,
        ip: &str,
    ) -> Result<Vec<Vec<Sym>>, Error> {
        if parts.fresh.len() > 4096 {
            return Err(unsupported(
                "uniqueItems (more than 4096 enum values among other item types)",
                path,
            ));
        }
        let mut alts = Vec::new();
        // Whether the parts other than `closed` hold infinitely many values (at least
        // `u64::MAX`), so that another item always has one of them to be.
        let some = |d: &Option<Dfa>| d.as_ref().is_some_and(|d| !d.is_empty_language());
        let rest_infinite = some(&parts.numbers)
            || some(&parts.integers)
            || !parts.others.is_empty()
            || parts
                .strings
                .as_ref()
                .is_some_and(|s| s.count_words() == u64::MAX);
        let closed = parts.closed;
        // Objects of another part (open ones, or other closed ones) would be read as earlier
        // items of these, counted as completions they may not be, unless a key tells each
        // closed branch's objects from all the others' (`branch_key`).
        let objects = |o: &Schema| match o {
            Schema::Node(n) => n.types.unwrap_or(TypeSet::ALL).has(TypeSet::OBJECT),
            _ => true,
        };
        let open: Vec<&Schema> = parts.others.iter().filter(|o| objects(o)).collect();
        let alone = closed.len() == 1 && open.is_empty();
        let mut any_infinite = false;
        for (i, (sub, why)) in closed.iter().enumerate() {
            let member = match alone {
                true => None,
                false => {
                    let mut others = open.clone();
                    others.extend(
                        closed
                            .iter()
                            .enumerate()
                            .filter(|&(j, _)| j != i)
                            .map(|(_, (c, _))| c),
                    );
                    match self.branch_key(sub, &others, ip)? {
                        Some(k) => Some(k),
                        None => return Err(why.clone()),
                    }
                }
            };
            // A closed object type among the items: no earlier item of another part equals
            // one of its objects, and its guards read past them. Its own `,` guard
            // (`ItemCheck::Start`) is left out, so the objects or the other parts must be
            // infinitely many for every further item to have a value to be.
            let Some((item, _, infinite)) =
                self.unique_closed_branch(sub, 0, path, ip, member.as_deref())?
            else {
                return Err(why.clone());
            };
            any_infinite |= infinite;
            alts.push(vec![item]);
        }
        if !closed.is_empty() && !any_infinite && !rest_infinite {
            return Err(unsupported(
                "uniqueItems (objects without additional properties, finitely many, \
                 beside other item types of finitely many values)",
                path,
            ));
        }
        let mut fresh: Vec<(Vec<u8>, Sym)> = Vec::new();
        for v in &parts.fresh {
            let c = canonical_of(v)
                .ok_or_else(|| invalid(ip, "internal: an enum value that is not JSON"))?;
            fresh.push((c, self.const_value(v, ip)?));
        }
        if let Some(z) = parts.zero.filter(|z| !z.is_empty_language()) {
            let t = self.b.terminal(z)?;
            let zero = Value::from(0);
            // An enum's `0` and the zero of a number type are one value: their spellings are
            // one nonterminal.
            match parts.fresh.iter().position(|w| json_eq(w, &zero)) {
                Some(j) => fresh[j].1 = self.b.alts("zero", vec![vec![fresh[j].1], vec![t]]),
                None => {
                    let c = canonical_value(b"0")
                        .ok_or_else(|| invalid(ip, "internal: zero that is not JSON"))?;
                    fresh.push((c, t));
                }
            }
        }
        if !fresh.is_empty() {
            let set = self.b.finite_set(FiniteSet {
                values: fresh.iter().map(|(c, _)| c.clone()).collect(),
                min: 0,
                max: fresh.len(),
                outer: None,
            });
            for (j, (_, sym)) in fresh.iter().enumerate() {
                let nt = self.b.nt(format_args!("{path} unique fresh {j}"));
                self.b.rule(nt, vec![*sym]);
                self.b.guard_prediction(
                    nt,
                    Guard::Fresh {
                        set,
                        value: j as u32,
                    },
                );
                alts.push(vec![Sym::Nt(nt)]);
            }
        }
        if let Some(d) = parts.integers.filter(|d| !d.is_empty_language()) {
            let t = self.b.terminal(d)?;
            let g = self
                .b
                .guarded(&format!("{path} unique integer"), t, Guard::UniqueValues);
            let tail = self.b.regex(r"\.0+")?;
            alts.push(vec![g]);
            alts.push(vec![g, tail]);
        }
        let mut rest = Vec::new();
        if let Some(d) = parts.numbers.filter(|d| !d.is_empty_language()) {
            rest.push(vec![self.b.terminal(d)?]);
        }
        if let Some(s) = parts.strings.filter(|d| !d.is_empty_language()) {
            let encoded = s.json_string()?;
            if unbounded(&encoded) {
                rest.push(vec![self.b.terminal(encoded)?]);
            } else {
                // Some prefix has finitely many completions: a string item of its own,
                // checked the string way (`Chart::string_item_alive` keeps a prefix only while
                // one of its completions is a new string). Nothing checks the `,` before an
                // item, so a domain finite as a whole needs more strings than earlier items
                // can use: at least `maxItems`.
                let values = s.count_words();
                if values != u64::MAX && max_items.is_none_or(|m| m as u64 > values) {
                    return Err(unsupported(
                        "uniqueItems (a string domain with finitely many values, fewer than \
                         maxItems or without it, among other item types)",
                        path,
                    ));
                }
                let t = self.b.terminal(encoded)?;
                alts.push(vec![self.b.guarded(
                    &format!("{path} unique string"),
                    t,
                    Guard::UniqueStrings,
                )]);
            }
        }
        for o in &parts.others {
            rest.push(vec![self.schema(o, ip)?]);
        }
        // Arrays of a finite set: each a value item of its own, whose values, `,` and `]`
        // check the prefix against the earlier items of this array as they are written.
        for (i, (m, values)) in parts.finite_arrays.iter().enumerate() {
            let set = self.b.finite_set_count();
            let arr = self.unique_finite(m, values, &format!("{path} finite array {i}"))?;
            let item = self.b.guarded(
                &format!("{path} unique finite array {i}"),
                arr,
                Guard::UniqueValues,
            );
            if let (Sym::Nt(g), true) = (item, self.b.finite_set_count() > set) {
                self.b.set_finite_outer(set, g);
            }
            alts.push(vec![item]);
        }
        if !rest.is_empty() {
            let v = self.b.alts(format_args!("{path} unique rest"), rest);
            alts.push(vec![self.b.guarded(
                &format!("{path} unique item"),
                v,
                Guard::UniqueValues,
            )]);
        }
        Ok(alts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_other_than_zero_never_narrow_to_one_value() {
        let zero = Dfa::from_regex(ZERO).unwrap();
        let nz = number_dfa(&NumberFacets::default(), false, "#")
            .unwrap()
            .minus(&zero)
            .unwrap();
        // `0e`, `-0.0e+`, `0E5` go on only as zero: dead without it.
        for dead in ["0e", "-0.0e+", "0E5", "-0e1"] {
            let mut s = nz.start();
            for b in dead.bytes() {
                s = nz.next(s, b);
            }
            assert!(s == crate::dfa::DEAD || !nz.can_continue(s), "{dead}");
        }
        for live in ["0", "0.0", "-0", "1e5", "1.0"] {
            let mut s = nz.start();
            for b in live.bytes() {
                s = nz.next(s, b);
            }
            assert!(s != crate::dfa::DEAD && nz.can_continue(s), "{live}");
        }
        // A canonical integer automaton bounded above has prefixes of finitely many values.
        let canon = |f: NumberFacets| {
            number_dfa(&f, true, "#")
                .unwrap()
                .intersect(&Dfa::from_regex(NONZERO_INTEGER).unwrap())
                .unwrap()
        };
        let parse = |x: i64| Some(Decimal::parse(&Value::from(x), "#").unwrap());
        assert!(unbounded(&canon(NumberFacets::default())));
        assert!(unbounded(&canon(NumberFacets {
            minimum: parse(1),
            ..NumberFacets::default()
        })));
        // `1` goes on only as `10`, `11`, `12`; `9` cannot go on (its completion is checked
        // when it is read).
        assert!(unbounded(&canon(NumberFacets {
            maximum: parse(9),
            ..NumberFacets::default()
        })));
        assert!(!unbounded(&canon(NumberFacets {
            maximum: parse(12),
            ..NumberFacets::default()
        })));
        assert!(!unbounded(&canon(NumberFacets {
            minimum: parse(-5),
            ..NumberFacets::default()
        })));
    }
}
