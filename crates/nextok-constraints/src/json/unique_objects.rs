//! `uniqueItems` over objects closed by `additionalProperties: false`, exactly: the items'
//! members are rules of their own, guarded at prediction (`grammar::unique_objects`) so that
//! the chart never takes a prefix all of whose completions earlier items already are.
//!
//! Taken when the item (or the one object type of an item union, `unique_split`, which then
//! leaves out the check before the `,`) is `type: object` with `properties`, `required` and
//! `additionalProperties: false` alone, and every property's value is either of finitely many
//! values (`enum`/`const` with `type`, booleans, `null`), or of a domain where every proper
//! prefix has infinitely many completions into distinct values (`prefix_unbounded`), an
//! integer whose digits are such (checked after the digits, before a `.0…`), or a string of
//! string keywords alone with finitely many completions at some state of its automaton
//! (checked while it is read, against the values of it that agreeing earlier items use up:
//! `ItemCheck::AfterString`). Any other
//! property (integers, bounded strings, closed objects inside, ...) is refused by name, and
//! objects with other keywords stay with the general path (which refuses closed ones).

use serde_json::Value;

use super::algebra::normalize;
use super::compile::Compiler;
use super::number::number_dfa;
use super::schema::{compact, invalid, json_eq, unsupported, Node, Schema, TypeSet};
use super::string::{is_long, string_content, without_strings};
use super::unique::{count_words, unbounded, STRING_KEYWORDS};
use crate::dfa::Dfa;
use crate::grammar::{canonical_value, Guard, ItemCheck, ItemKey, ItemObject, Sym};
use crate::Error;

/// How a property's value is written in the item's rules.
enum Domain {
    /// Finitely many values (distinct JSON values), each its own guarded nonterminal.
    Finite(Vec<Value>),
    /// Infinitely many below every proper prefix: the property's own rule, then `After`.
    Unbounded(Schema),
    /// A string whose automaton (the decoded content here) has finitely many completions at
    /// some state: its terminal, then `AfterString`, the terminal checked while it is read.
    FiniteString(Dfa),
    /// Integers: the spellings without a fraction (`digits`, infinitely many completions
    /// below every proper prefix), then `After`, then optionally `.0…` (the same value): the
    /// check comes before the `.`, whose completions are that one value.
    Integer(Dfa),
}

impl Compiler<'_> {
    /// For a `uniqueItems` array whose items `items` (normalised) are closed objects as the
    /// module describes: the guarded item ([`Guard::UniqueValues`]), the guard to put
    /// before the `,` of every further item ([`ItemCheck::Start`]), and whether the objects
    /// are infinitely many (at least `u64::MAX`: the guard then always passes). `None` when the items are
    /// not such objects (the caller's path refuses or takes them); an error when they are
    /// closed objects with a property neither finite nor unbounded at every prefix, or when
    /// `minItems` asks for more items than a finite object domain holds.
    pub(super) fn unique_closed_objects(
        &mut self,
        items: &Schema,
        min_items: usize,
        path: &str,
        ip: &str,
    ) -> Result<Option<(Sym, Sym, bool)>, Error> {
        let Schema::Node(n) = items else {
            return Ok(None);
        };
        if n.types != Some(TypeSet::OBJECT)
            || !n.only(&["type", "properties", "required", "additionalProperties"])
        {
            return Ok(None);
        }
        let Some(ap) = &n.object.additional_properties else {
            return Ok(None);
        };
        if normalize(self.table, ap, &format!("{ip}/additionalProperties"), 0)? != Schema::Never {
            return Ok(None);
        }
        let required = n.object.required.clone().unwrap_or_default();
        let mut keys: Vec<(String, bool, Domain)> = Vec::new();
        for (name, s) in n.object.properties.iter().flatten() {
            let pp = format!("{ip}/properties/{name}");
            let s = self.resolve_bare(s, &pp)?;
            let is_required = required.contains(name);
            let integer = match finite_values(&s) {
                Some(_) => None,
                None => integer_digits(&s, &pp)?,
            };
            let domain = match (finite_values(&s), integer) {
                (Some(vs), _) => Domain::Finite(vs),
                (None, Some(digits)) => Domain::Integer(digits),
                (None, None) => {
                    if self.prefix_unbounded(&s, path, &pp, 1).is_err() {
                        if let Some(content) = finite_string(&s, &pp)? {
                            if content.is_empty_language() {
                                if is_required {
                                    return Ok(None);
                                }
                                continue;
                            }
                            keys.push((name.clone(), is_required, Domain::FiniteString(content)));
                            continue;
                        }
                        return Err(unsupported(
                            format!(
                                "uniqueItems (objects without additional properties: property \
                                 `{name}` has finitely many completions of some prefix but is \
                                 not a finite set of values)"
                            ),
                            path,
                        ));
                    }
                    Domain::Unbounded(s)
                }
            };
            if matches!(&domain, Domain::Finite(vs) if vs.is_empty()) {
                if is_required {
                    // No object can be written: the array can only be empty.
                    return Ok(None);
                }
                continue;
            }
            keys.push((name.clone(), is_required, domain));
        }
        if required
            .iter()
            .any(|r| !keys.iter().any(|(name, _, _)| name == r))
        {
            return Ok(None);
        }
        // A finite object domain may run out of objects before `minItems` is reached.
        let finite = |d: &Domain| match d {
            Domain::Finite(_) => true,
            Domain::FiniteString(content) => count_words(content) < u64::MAX,
            _ => false,
        };
        let infinite = !keys.iter().all(|(_, _, d)| finite(d));
        if min_items > 1 && !infinite {
            return Err(unsupported(
                "uniqueItems (objects of finitely many values without additional properties, \
                 with minItems above 1)",
                path,
            ));
        }
        let mut spec_keys = Vec::with_capacity(keys.len());
        for (name, req, d) in &keys {
            let values = match d {
                Domain::Finite(vs) => {
                    let mut c = Vec::with_capacity(vs.len());
                    for v in vs {
                        c.push(canonical_value(compact(v).as_bytes()).ok_or_else(|| {
                            invalid(ip, "internal: an enum value that is not JSON")
                        })?);
                    }
                    Some(c)
                }
                Domain::Unbounded(_) | Domain::Integer(_) | Domain::FiniteString(_) => None,
            };
            let words = match d {
                Domain::FiniteString(content) => Some(count_words(content)),
                _ => None,
            };
            spec_keys.push(ItemKey {
                name: name.as_bytes().to_vec(),
                required: *req,
                values,
                words,
            });
        }
        let spec = self.b.item_object(ItemObject {
            keys: spec_keys,
            item: 0,
        });
        let guard = |check| Guard::Item { spec, check };
        let empty_guarded = |c: &mut Compiler<'_>, name: &str, check: ItemCheck| {
            let nt = c.b.nt(name);
            c.b.rule(nt, Vec::new());
            c.b.guard_prediction(nt, guard(check));
            Sym::Nt(nt)
        };
        let (lb, rb, comma, colon) = (self.lit("{"), self.lit("}"), self.lit(","), self.lit(":"));
        let ws: Vec<Sym> = self.ws.into_iter().collect();
        // Per key, the ways to write its member after `K_i`: key, `:`, then a value.
        let mut tails: Vec<Vec<Sym>> = Vec::new();
        for (i, (name, _, d)) in keys.iter().enumerate() {
            let i = i as u32;
            let k = empty_guarded(self, "item key", ItemCheck::Key(i));
            let key = self.string_terminal(&crate::dfa::Dfa::literal(name.as_bytes()))?;
            let mut head = vec![k, key];
            head.extend(&ws);
            head.push(colon);
            head.extend(&ws);
            let pp = format!("{ip}/properties/{name}");
            match d {
                Domain::Finite(vs) => {
                    for (j, v) in vs.iter().enumerate() {
                        let value = self.const_value(v, &pp)?;
                        let f = self.b.nt(format!("{path} item value {i} {j}"));
                        self.b.rule(f, vec![value]);
                        self.b
                            .guard_prediction(f, guard(ItemCheck::Value(i, j as u32)));
                        let mut t = head.clone();
                        t.push(Sym::Nt(f));
                        tails.push(t);
                    }
                }
                Domain::Unbounded(s) => {
                    let value = self.schema(s, &pp)?;
                    let after = empty_guarded(self, "item after", ItemCheck::After);
                    let mut t = head;
                    t.extend([value, after]);
                    tails.push(t);
                }
                Domain::FiniteString(content) => {
                    let value = self.string_terminal(content)?;
                    let after = empty_guarded(self, "item after", ItemCheck::AfterString(i));
                    let mut t = head;
                    t.extend([value, after]);
                    tails.push(t);
                }
                Domain::Integer(digits) => {
                    let value = self.b.terminal(digits.clone())?;
                    let zeros = self.b.regex(r"\.0+")?;
                    let after = empty_guarded(self, "item after", ItemCheck::After);
                    let mut t = head.clone();
                    t.extend([value, after]);
                    tails.push(t);
                    let mut t = head;
                    t.extend([value, after, zeros]);
                    tails.push(t);
                }
            }
        }
        let more = empty_guarded(self, "item more", ItemCheck::More);
        let end = empty_guarded(self, "item end", ItemCheck::End);
        // list: `{` and members, every rule starting at the `{` (left recursion).
        let list = self.b.nt(format!("{path} item members"));
        for t in &tails {
            let mut r = vec![lb];
            r.extend(&ws);
            r.extend(t);
            self.b.rule(list, r);
            let mut r = vec![Sym::Nt(list)];
            r.extend(&ws);
            r.extend([more, comma]);
            r.extend(&ws);
            r.extend(t);
            self.b.rule(list, r);
        }
        let object = self.b.nt(format!("{path} item object"));
        let mut r = vec![lb];
        r.extend(&ws);
        r.extend([end, rb]);
        self.b.rule(object, r);
        let mut r = vec![Sym::Nt(list)];
        r.extend(&ws);
        r.extend([end, rb]);
        self.b.rule(object, r);
        let item = self.b.guarded(
            &format!("{path} unique item"),
            Sym::Nt(object),
            Guard::UniqueValues,
        );
        if let Sym::Nt(g) = item {
            self.b.set_item_object_item(spec, g);
        }
        let start = empty_guarded(self, "item start", ItemCheck::Start);
        Ok(Some((item, start, infinite)))
    }
}

/// For an `integer` schema `s` (type and number keywords alone): its spellings without a
/// fraction, when every one of their proper prefixes has infinitely many completions (no
/// `maximum`, say) and every spelling `s` allows is one of them, possibly followed by `.0…`.
/// (The automaton is built on values, so `N.0…` is allowed exactly when `N` is: the grammar
/// writes it as the digits, then the zeros.)
fn integer_digits(s: &Schema, path: &str) -> Result<Option<Dfa>, Error> {
    let Schema::Node(n) = s else {
        return Ok(None);
    };
    let number_keywords = [
        "type",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    ];
    if n.types != Some(TypeSet::INTEGER) || !n.only(&number_keywords) {
        return Ok(None);
    }
    let all = number_dfa(&n.number, true, path)?;
    let digits = all.intersect(&Dfa::from_regex("-?[0-9]+")?)?;
    let with_zeros = digits.union(&all.intersect(&Dfa::from_regex(r"-?[0-9]+\.0+")?)?)?;
    if digits.is_empty_language()
        || !all.minus(&with_zeros)?.is_empty_language()
        || !unbounded(&digits)
    {
        return Ok(None);
    }
    Ok(Some(digits))
}

/// For a string schema `s` (string keywords alone, no `enum`): its decoded strings, when
/// their automaton can be built (no counter too long to unroll).
pub(super) fn finite_string(s: &Schema, path: &str) -> Result<Option<Dfa>, Error> {
    let Schema::Node(n) = s else {
        return Ok(None);
    };
    if n.types != Some(TypeSet::STRING) || !n.only(&STRING_KEYWORDS) || is_long(&n.string) {
        return Ok(None);
    }
    let content = string_content(&n.string, path)?;
    Ok(Some(without_strings(content, n.excluded.iter().flatten())?))
}

/// The values of `s` when they are finitely many and `s` says nothing else: an `enum` or
/// `const` (with `type`), booleans, `null`. Distinct JSON values, in the schema's order.
fn finite_values(s: &Schema) -> Option<Vec<Value>> {
    let n: &Node = match s {
        Schema::Never => return Some(Vec::new()),
        Schema::Node(n) => n,
        Schema::Any => return None,
    };
    let t = n.types.unwrap_or(TypeSet::ALL);
    let mut values: Vec<Value> = Vec::new();
    if let Some(vs) = &n.values {
        if !n.only(&["enum", "type"]) {
            return None;
        }
        for v in vs {
            let ok = t.admits(v);
            if ok && !values.iter().any(|w| json_eq(v, w)) {
                values.push(v.clone());
            }
        }
        return Some(values);
    }
    if !n.only(&["type"]) {
        return None;
    }
    let others = [
        TypeSet::INTEGER,
        TypeSet::NUMBER,
        TypeSet::STRING,
        TypeSet::ARRAY,
        TypeSet::OBJECT,
    ];
    if others.into_iter().any(|x| t.has(x)) {
        return None;
    }
    if t.has(TypeSet::NULL) {
        values.push(Value::Null);
    }
    if t.has(TypeSet::BOOLEAN) {
        values.extend([Value::Bool(true), Value::Bool(false)]);
    }
    Some(values)
}
