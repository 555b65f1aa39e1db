//! `uniqueItems` over objects closed by `additionalProperties: false`, exactly: the items'
//! members are rules of their own, guarded at prediction (`grammar::unique_objects`) so that
//! the chart never takes a prefix all of whose completions earlier items already are.
//!
//! Taken when the item (or an object type of an item union, `unique_split`, which then
//! leaves out the check before the `,`) is `type: object` with `properties`, `required`,
//! `additionalProperties: false`, an `anyOf` of `required` alone (SARIF's `message`: `text`
//! or `id`; every key it names of infinitely many values, so only the `}` checks it) and
//! `dependentRequired` (SARIF 1.0's `physicalLocation`: `uriBaseId` needs `uri`; every key
//! a trigger needs of infinitely many values, so only the `}` checks it too), and every
//! property's value is
//!
//! - of finitely many values: `enum`/`const` with `type`, booleans, `null`, or arrays of such
//!   values made finitely many by `uniqueItems` or `maxItems` (at most
//!   [`MAX_FINITE_ARRAYS`] of them, each a value of its own, as chrome-manifest's
//!   `event_types`);
//! - of a domain where every proper prefix has infinitely many completions into distinct
//!   values (`prefix_unbounded`; among them `uniqueItems` arrays of closed objects of
//!   infinitely many values, SARIF's `locations`, which can always take one more item while
//!   their own checks keep every item completable; one property of infinitely many values
//!   decides that, so a recursive item such as SARIF's `node` needs no more);
//! - a plain `type: number`: zero set apart with all its spellings (`0e` and `-0.0E+` go on
//!   only as zero), checked before it begins, and the other numbers, every live prefix of
//!   which goes on to infinitely many values, checked after them (numbers beside other
//!   types at a property's top are refused by name: such a union is not split here);
//! - an integer whose digits are such (checked after the digits, before a `.0…`), the
//!   few values behind a prefix of finitely many completions set apart, each checked before
//!   it begins as a finite key's values are (`-1` and `-0` of `minimum: -1`, whose `-` has
//!   no other completions), alone or beside strings, arrays or objects unbounded at every
//!   prefix (SARIF 1.0's `id`: an integer of at least 1 or a string of digits);
//! - a string of string keywords alone with finitely many completions at some state of its
//!   automaton, as a key of the item itself (checked while it is read, against the values of
//!   it that agreeing earlier items use up: `ItemCheck::AfterString`);
//! - an `anyOf` of branches unbounded at every prefix beside `null` or booleans (travis's
//!   `template`), or a schema of several types with no number keyword (anywork's `version`,
//!   a `pattern` alone), the values of one completion (`null`, booleans, zero) set apart
//!   and checked before they begin;
//! - or a nested closed object of the same kind (no such strings in it), up to
//!   [`MAX_NESTED`] deep, alone or in an `anyOf` beside branches of other types that are
//!   unbounded at every prefix (expo's `intentFilters.data`, an object or an array; a branch
//!   that is an `anyOf` itself is read as its branches, travis's `recipients`).
//!
//! A `oneOf` whose branches are shown disjoint is read as their `anyOf` throughout.
//!
//! A nested object is the reason the property-level test was too strong: its prefix
//! `{"formatId": "f", "arguments": []` has one completion, yet the item around it may have
//! infinitely many (a free key not written yet), or none unused. What decides is the *item's*
//! completions, so the nested object's members are written as the item's own rules (every one
//! starting at the item's `{`), guarded as the item's members are, and the run-time check
//! (`grammar::unique_objects`) counts the item's completions through the nested objects
//! being written: it refuses exactly the prefixes whose every completion is an earlier item.
//! - a `uniqueItems` array of at most `maxItems` items unbounded at every prefix (SpecIF's
//!   `replaces`): a full one has one completion, its `]`, checked before it
//!   (`ItemCheck::Closing`, placed by the array's own rules through `Compiler::closing`);
//!
//! Any other property (bounded numbers, unions of several objects or of integers beside
//! `null`, booleans or numbers, arrays bounded by
//! `maxItems` without `uniqueItems`, ...) is refused by name,
//! and objects with other keywords stay with the general path (which refuses closed ones).

use serde_json::Value;

use super::algebra::{disjoint, normalize, value_schema};
use super::compile::Compiler;
use super::number::{number_dfa, Decimal};
use super::schema::{invalid, json_eq, unsupported, Node, NumberFacets, Schema, TypeSet};
use super::string::{is_long, string_content, without_strings};
use super::unique::{canonical_of, unbounded, STRING_KEYWORDS};
use super::unique_split::ZERO;
use crate::dfa::{Dfa, Kept, DEAD};
use crate::grammar::{
    canonical_array_head, total_objects, Guard, ItemCheck, ItemKey, ItemObject, Sym,
};
use crate::Error;

/// Finitely many values of a property (distinct JSON values).
enum Finite {
    /// The values themselves.
    Values(Vec<Value>),
    /// Arrays of the values `items`, each the list of its items' places in `items`
    /// (chrome-manifest's 1,956 `event_types` arrays of six strings), not made a value each.
    Arrays(Vec<Value>, Vec<Vec<u32>>),
}

impl Finite {
    fn is_empty(&self) -> bool {
        match self {
            Finite::Values(vs) => vs.is_empty(),
            Finite::Arrays(_, arrays) => arrays.is_empty(),
        }
    }
}

/// How a property's value is written in the item's rules.
enum Domain {
    /// Finitely many values, each its own guarded nonterminal.
    Finite(Finite),
    /// Infinitely many below every proper prefix: the property's own rule, then `After`.
    Unbounded(Schema),
    /// A string whose automaton (the decoded content here) has finitely many completions at
    /// some state: its terminal, then `AfterString`, the terminal checked while it is read.
    /// Only a key of the item itself (the check reads the item's own members).
    FiniteString(Dfa),
    /// Integers: the spellings without a fraction (`digits`, infinitely many completions
    /// below every proper prefix), then `After`, then optionally `.0…` (the same value): the
    /// check comes before the `.`, whose completions are that one value. Beside them, the
    /// values some proper prefix of whose spellings has finitely many completions (at most
    /// [`MAX_PINNED`]), each with its spellings, written as a finite key's values are.
    /// With `Some`, the property takes other types too (SARIF 1.0's `id`, an integer or a
    /// string of digits), whose values, unbounded at every prefix and never numbers, are
    /// written as `Unbounded`'s.
    Integer(Dfa, Vec<(Value, Dfa)>, Option<Schema>),
    /// Numbers of a plain `type: number`: zero, all its spellings one value set apart and
    /// checked before it begins (`0e` and `-0.0E+` go on only as zero, so the value check
    /// after the number would come too late), and the other numbers, every live prefix of
    /// which goes on to infinitely many values (`0.` to `0.1`, `1e5` to `1e50`), then `After`.
    Number(Dfa, Vec<(Value, Dfa)>),
    /// A nested closed object (`type: object`, `properties`, `required` and
    /// `additionalProperties: false` alone) whose own properties are such domains (no
    /// `FiniteString`): its members are rules of the item's own, guarded as the item's are.
    /// With `Some`, the property is an `anyOf` of that object and other branches (their
    /// `anyOf`, here) of infinitely many values below every proper prefix, none of them an
    /// object: those are written as `Unbounded`, and the object's `{` is checked on its own.
    /// Its `anyOf` of `required` alone and its `dependentRequired`, as key indices, are the
    /// third.
    Object(Vec<Key>, Option<Schema>, Ends),
    /// An `anyOf` of branches of infinitely many values below every proper prefix (none of
    /// them numbers, `null`, booleans or objects: written as `Unbounded`) and of `null` or
    /// booleans (travis's `template`: a string, an array, or `null`), or a schema of several
    /// types (anywork's `version`, a `pattern` alone: any value, strings of the pattern):
    /// `null` and booleans set apart, each checked before it begins as a finite key's are,
    /// and numbers (of no number keyword) as `Number`'s: zero set apart after those values
    /// (its spellings), the other numbers then `After`; the strings, arrays and objects
    /// (`Some`) then `After`.
    Pinned(Option<Schema>, Vec<Value>, Option<(Dfa, Dfa)>),
    /// A `uniqueItems` array of at most `maxItems` items unbounded at every prefix (SpecIF's
    /// `replaces`, two revision strings): every proper prefix has infinitely many
    /// completions but a full one, whose one completion is its `]`, checked before it
    /// ([`ItemCheck::Closing`], placed by the array's own rules), then `After`.
    Capped(Schema),
}

/// What the `}` of a closed object checks beyond `required`, as indices of its keys: its
/// `anyOf` of `required` alone (one list all written; empty: none) and its
/// `dependentRequired` (each written trigger's list all written). Every key listed has
/// infinitely many values ([`ItemObject::any_required`], [`ItemObject::dependent`]).
#[derive(Clone, Debug, Default)]
pub(super) struct Ends {
    any: Vec<Vec<u32>>,
    dependent: Vec<(u32, Vec<u32>)>,
}

/// One property of a closed object of the item.
struct Key {
    name: String,
    required: bool,
    domain: Domain,
}

/// The most arrays a property of arrays of finitely many values may have to be taken as a
/// finite domain (each array its own guarded rule).
const MAX_FINITE_ARRAYS: usize = 4096;

/// How deep closed objects may nest inside an item.
const MAX_NESTED: usize = 8;

impl Compiler<'_> {
    /// For a `uniqueItems` array whose items `items` (normalised) are closed objects as the
    /// module describes: the guarded item ([`Guard::UniqueValues`]), the guard to put
    /// before the `,` of every further item ([`ItemCheck::Start`]), and whether the objects
    /// are infinitely many (at least `u64::MAX`: the guard then always passes). `None` when the items are
    /// not such objects (the caller's path refuses or takes them); an error when they are
    /// closed objects with a property neither finite nor unbounded at every prefix nor a
    /// nested closed object of such properties, or when `minItems` asks for more items than
    /// a finite object domain holds.
    pub(super) fn unique_closed_objects(
        &mut self,
        items: &Schema,
        min_items: usize,
        path: &str,
        ip: &str,
    ) -> Result<Option<(Sym, Sym, bool)>, Error> {
        self.unique_closed_branch(items, min_items, path, ip, None)
    }

    /// [`Compiler::unique_closed_objects`] for one branch of a union of object types, told
    /// from the others by its required key `member` ([`ItemObject::member`]; `None`: the one
    /// object type of the items).
    pub(super) fn unique_closed_branch(
        &mut self,
        items: &Schema,
        min_items: usize,
        path: &str,
        ip: &str,
        member: Option<&str>,
    ) -> Result<Option<(Sym, Sym, bool)>, Error> {
        let Some(n) = self.closed_object(items, ip)? else {
            return Ok(None);
        };
        let Some(keys) = self.closed_keys(&n, path, ip, 0, 1)? else {
            return Ok(None);
        };
        let Some(ends) = self.object_ends(&n, &keys, path, ip)? else {
            return Ok(None);
        };
        let member = match member {
            None => None,
            Some(d) => match keys.iter().position(|k| k.name == d) {
                Some(i) => Some(i as u32),
                None => return Ok(None),
            },
        };
        let spec_keys = spec_keys(&keys, ip)?;
        // A finite object domain may run out of objects before `minItems` is reached.
        let infinite = total_objects(&spec_keys) == u64::MAX;
        if min_items > 1 && !infinite {
            return Err(unsupported(
                "uniqueItems (objects of finitely many values without additional properties, \
                 with minItems above 1)",
                path,
            ));
        }
        let spec = self.b.item_object(ItemObject {
            keys: spec_keys,
            item: 0,
            member,
            any_required: ends.any,
            dependent: ends.dependent,
        });
        let (lb, rb) = (self.lit("{"), self.lit("}"));
        let ws: Vec<Sym> = self.ws.into_iter().collect();
        let list = self.item_members(spec, &keys, lb, path, ip)?;
        let end = self.item_guard(spec, "item end", ItemCheck::End);
        let object = self.b.nt(format_args!("{path} item object"));
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
        let start = self.item_guard(spec, "item start", ItemCheck::Start);
        Ok(Some((item, start, infinite)))
    }

    /// `s` (through bare references) when it is a closed object as items and nested
    /// objects must be: `type: object` with `properties`, `required`,
    /// `additionalProperties: false`, an `anyOf` of `required` alone and `dependentRequired`.
    pub(super) fn closed_object(&self, s: &Schema, ip: &str) -> Result<Option<Node>, Error> {
        let Schema::Node(n) = self.resolve_bare(s, ip)? else {
            return Ok(None);
        };
        if n.types != Some(TypeSet::OBJECT)
            || !n.only(&[
                "type",
                "properties",
                "required",
                "additionalProperties",
                "anyOf",
                "dependentRequired",
            ])
            || (n.any_of.is_some() && !self.required_branches(&n, ip)?)
        {
            return Ok(None);
        }
        let Some(ap) = &n.object.additional_properties else {
            return Ok(None);
        };
        if normalize(self.table, ap, &format!("{ip}/additionalProperties"), 0)? != Schema::Never {
            return Ok(None);
        }
        Ok(Some((*n).clone()))
    }

    /// The properties of closed object `n` (at `ip`, `depth` objects deep in the item, its
    /// values `nesting` deep in `prefix_unbounded`'s count) as domains; `None` when no object
    /// can be written (a required property without values).
    fn closed_keys(
        &self,
        n: &Node,
        path: &str,
        ip: &str,
        depth: usize,
        nesting: usize,
    ) -> Result<Option<Vec<Key>>, Error> {
        let required = n.object.required.clone().unwrap_or_default();
        let mut keys: Vec<Key> = Vec::new();
        for (name, s) in n.object.properties.iter().flatten() {
            let pp = format!("{ip}/properties/{name}");
            let s = self.resolve_bare(s, &pp)?;
            let is_required = required.contains(name);
            let finite = match finite_values(&s) {
                Some(vs) => Some(Finite::Values(vs)),
                None => self.finite_arrays(&s, &pp)?,
            };
            let integer = match finite {
                Some(_) => None,
                None => integer_digits(&s, &pp)?,
            };
            let domain = match (finite, integer) {
                (Some(vs), _) if vs.is_empty() => None,
                (Some(vs), _) => Some(Domain::Finite(vs)),
                (None, Some((digits, pinned))) => Some(Domain::Integer(digits, pinned, None)),
                (None, None) => match plain_numbers(&s, &pp)? {
                    Some((rest, zero)) => Some(Domain::Number(rest, zero)),
                    None => match self.prefix_unbounded(&s, path, &pp, nesting) {
                        Ok(()) if self.holds_numbers(&s, &pp)? => {
                            match self.typed_union(&s, path, &pp, nesting)? {
                                Some(d) => Some(d),
                                None => return Err(number_beside_others(name, path)),
                            }
                        }
                        Ok(()) => Some(Domain::Unbounded(s)),
                        Err(_) => self.bounded_domain(&s, name, path, &pp, depth, nesting)?,
                    },
                },
            };
            match domain {
                Some(domain) => keys.push(Key {
                    name: name.clone(),
                    required: is_required,
                    domain,
                }),
                // No value: the property is never written, and the object never either when
                // it is required.
                None if is_required => return Ok(None),
                None => {}
            }
        }
        if required.iter().any(|r| !keys.iter().any(|k| &k.name == r)) {
            return Ok(None);
        }
        Ok(Some(keys))
    }

    /// The domain of property `name` (schema `s` at `pp`) of a closed object `depth` deep in
    /// the item, when it is neither finite nor unbounded at every prefix: a string with
    /// finitely many completions at some state (a key of the item itself), or a nested closed
    /// object; `None` when it has no value; otherwise the refusal, naming the property.
    fn bounded_domain(
        &self,
        s: &Schema,
        name: &str,
        path: &str,
        pp: &str,
        depth: usize,
        nesting: usize,
    ) -> Result<Option<Domain>, Error> {
        if depth == 0 {
            if let Some(content) = finite_string(s, pp)? {
                if content.is_empty_language() {
                    return Ok(None);
                }
                return Ok(Some(Domain::FiniteString(content)));
            }
        }
        if let Some(d) = self.typed_union(s, path, pp, nesting)? {
            return Ok(Some(d));
        }
        if self.capped_array(s, path, pp, nesting)? {
            return Ok(Some(Domain::Capped(s.clone())));
        }
        if depth < MAX_NESTED {
            if let Some(n) = self.closed_object(s, pp)? {
                let Some(keys) = self.closed_keys(&n, path, pp, depth + 1, nesting + 1)? else {
                    return Ok(None);
                };
                return Ok(self
                    .object_ends(&n, &keys, path, pp)?
                    .map(|ends| Domain::Object(keys, None, ends)));
            }
            // An `anyOf` of one closed object and branches of other types, unbounded at every
            // prefix (the object's own values then need no count: the key has infinitely many).
            if let Schema::Node(u) = s {
                if let (Some(branches), true) = (&u.any_of, u.only(&["anyOf"])) {
                    let mut object = None;
                    let mut others = Vec::new();
                    let mut pinned: Vec<Value> = Vec::new();
                    let mut shaped = true;
                    for (b, bp) in self.flat_branches(branches, pp)? {
                        match self.closed_object(&b, &bp)? {
                            Some(n) if object.is_none() => object = Some((n, bp)),
                            // `null` and booleans, which no unbounded branch holds (nor an
                            // object): set apart, each checked before it begins.
                            _ if finite_values(&b).is_some_and(|vs| {
                                vs.iter().all(|v| v.is_null() || v.is_boolean())
                            }) =>
                            {
                                for v in finite_values(&b).unwrap_or_default() {
                                    if !pinned.contains(&v) {
                                        pinned.push(v);
                                    }
                                }
                            }
                            _ => {
                                if self.may_be_object(&b, &bp, 0)?
                                    || self.prefix_unbounded(&b, path, &bp, nesting).is_err()
                                    || self.holds_numbers(&b, &bp)?
                                {
                                    object = None;
                                    shaped = false;
                                    break;
                                }
                                others.push(b);
                            }
                        }
                    }
                    let unbounded = !others.is_empty();
                    let rest = Schema::node(Node {
                        any_of: Some(others),
                        ..Node::default()
                    });
                    match (&object, pinned.is_empty()) {
                        (Some(_), false) => {
                            return Err(unsupported(
                                format!(
                                    "uniqueItems (objects without additional properties: \
                                     property `{name}` is a closed object beside `null` or \
                                     booleans)"
                                ),
                                path,
                            ))
                        }
                        (None, false) if shaped && unbounded => {
                            return Ok(Some(Domain::Pinned(Some(rest), pinned, None)))
                        }
                        _ => {}
                    }
                    if let Some((n, bp)) = object {
                        if let Some(keys) =
                            self.closed_keys(&n, path, &bp, depth + 1, nesting + 1)?
                        {
                            if let Some(ends) = self.object_ends(&n, &keys, path, &bp)? {
                                return Ok(Some(Domain::Object(keys, Some(rest), ends)));
                            }
                        }
                        return Ok(Some(Domain::Unbounded(rest)));
                    }
                }
            }
        }
        Err(unsupported(
            format!(
                "uniqueItems (objects without additional properties: property `{name}` has \
                 finitely many completions of some prefix but is not a finite set of values \
                 nor a closed object of such properties)"
            ),
            path,
        ))
    }

    /// The values of array schema `s` (at `pp`) when they are few (at most
    /// [`MAX_FINITE_ARRAYS`]) and `s` says nothing but `items` of finitely many values
    /// (`finite_values`), `minItems`, and `uniqueItems` or `maxItems` (which make the arrays
    /// finitely many): every array of them, distinct JSON values, as a finite domain.
    fn finite_arrays(&self, s: &Schema, pp: &str) -> Result<Option<Finite>, Error> {
        let Schema::Node(n) = s else {
            return Ok(None);
        };
        if n.types != Some(TypeSet::ARRAY)
            || !n.only(&["type", "items", "uniqueItems", "minItems", "maxItems"])
        {
            return Ok(None);
        }
        let a = &n.array;
        let Some(items) = &a.items else {
            return Ok(None);
        };
        let Some(values) = finite_values(&self.resolve_bare(items, &format!("{pp}/items"))?) else {
            return Ok(None);
        };
        let longest = match (a.unique_items, a.max_items) {
            (true, max) => max.unwrap_or(usize::MAX).min(values.len()),
            (false, Some(max)) => max,
            (false, None) => return Ok(None),
        };
        let shortest = a.min_items.unwrap_or(0);
        // Arrays of more items than there may be arrays are not walked to (a `minItems` of
        // millions would be).
        if longest > MAX_FINITE_ARRAYS && !values.is_empty() {
            return Ok(None);
        }
        let mut arrays = FiniteArrays {
            values: values.len(),
            unique: a.unique_items,
            shortest,
            longest,
            picks: Vec::new(),
            out: Vec::new(),
        };
        Ok(arrays.walk().then(|| Finite::Arrays(values, arrays.out)))
    }

    /// A guard of item object `spec` at `check`: an empty nonterminal, checked when it is
    /// predicted.
    pub(super) fn item_guard(&mut self, spec: u32, name: &str, check: ItemCheck) -> Sym {
        let nt = self.b.nt(name);
        self.b.rule(nt, Vec::new());
        self.b.guard_prediction(nt, Guard::Item { spec, check });
        Sym::Nt(nt)
    }

    /// The values of property `i` set apart (an integer's pinned values, a number's zero),
    /// each a nonterminal of its spellings guarded at prediction ([`ItemCheck::Value`]), as
    /// tails after `head`.
    fn set_apart_values(
        &mut self,
        spec: u32,
        i: u32,
        values: &[(Value, Dfa)],
        path: &str,
        head: &[Sym],
        tails: &mut Vec<Vec<Sym>>,
    ) -> Result<(), Error> {
        for (j, (_, spellings)) in values.iter().enumerate() {
            let value = self.b.terminal(spellings.clone())?;
            tails.push(self.guarded_value(spec, i, j, value, path, head));
        }
        Ok(())
    }

    /// The arrays `arrays` of the values `items` of property `i` (at `pp`), each its symbols in
    /// a rule guarded at prediction ([`ItemCheck::Value`], value `j` the `j`th array), as
    /// tails after `head`. Each item's symbol is made once: thousands of arrays of a few
    /// values (chrome-manifest's `event_types`) spell the same few items over and over.
    #[allow(clippy::too_many_arguments)]
    fn guarded_arrays(
        &mut self,
        spec: u32,
        i: u32,
        (items, arrays): (&[Value], &[Vec<u32>]),
        pp: &str,
        path: &str,
        head: &[Sym],
        tails: &mut Vec<Vec<Sym>>,
    ) -> Result<(), Error> {
        let symbols = (items.iter())
            .map(|v| self.const_value(v, pp))
            .collect::<Result<Vec<Sym>, Error>>()?;
        let mut array = Vec::new();
        for (j, a) in arrays.iter().enumerate() {
            array.clear();
            array.extend(a.iter().map(|&x| symbols[x as usize]));
            let value = self.array_of(&array);
            tails.push(self.guarded_rule(spec, i, j, value, path, head));
        }
        Ok(())
    }

    /// The values `vs` of property `i` (at `pp`) of finitely many values, or set apart beside
    /// unbounded ones (`null`, booleans), each its literal guarded at prediction
    /// ([`ItemCheck::Value`], value `j` the `j`th of `vs`), as tails after `head`.
    #[allow(clippy::too_many_arguments)]
    fn guarded_consts(
        &mut self,
        spec: u32,
        i: u32,
        vs: &[Value],
        pp: &str,
        path: &str,
        head: &[Sym],
        tails: &mut Vec<Vec<Sym>>,
    ) -> Result<(), Error> {
        for (j, v) in vs.iter().enumerate() {
            // An array's symbols go straight into the guarded rule.
            let value = match v {
                Value::Array(a) => self.const_array(a, pp)?,
                v => vec![self.const_value(v, pp)?],
            };
            tails.push(self.guarded_rule(spec, i, j, value, path, head));
        }
        Ok(())
    }

    /// `head` followed by the value of `s` (at `pp`), of infinitely many values below every
    /// proper prefix, then the check of the item with it ([`ItemCheck::After`]).
    fn unbounded_tail(
        &mut self,
        spec: u32,
        s: &Schema,
        pp: &str,
        head: &[Sym],
    ) -> Result<Vec<Sym>, Error> {
        let value = self.schema(s, pp)?;
        let after = self.item_guard(spec, "item after", ItemCheck::After);
        let mut t = head.to_vec();
        t.extend([value, after]);
        Ok(t)
    }

    /// `head` followed by a rule for value `j` of key `i` (`value`), guarded by the check that
    /// this value still leaves the item a completion unused by earlier items.
    fn guarded_value(
        &mut self,
        spec: u32,
        i: u32,
        j: usize,
        value: Sym,
        path: &str,
        head: &[Sym],
    ) -> Vec<Sym> {
        self.guarded_rule(spec, i, j, vec![value], path, head)
    }

    /// [`Compiler::guarded_value`] of the value whose rule is `body`.
    fn guarded_rule(
        &mut self,
        spec: u32,
        i: u32,
        j: usize,
        body: Vec<Sym>,
        path: &str,
        head: &[Sym],
    ) -> Vec<Sym> {
        let f = self.b.nt(format_args!("{path} item value {i} {j}"));
        self.b.rule(f, body);
        self.b.guard_prediction(
            f,
            Guard::Item {
                spec,
                check: ItemCheck::Value(i, j as u32),
            },
        );
        let mut t = Vec::with_capacity(head.len() + 1);
        t.extend_from_slice(head);
        t.push(Sym::Nt(f));
        t
    }

    /// The rules of the members of one closed object of the item (of keys `keys`, at `ip`),
    /// after `open`, whose text runs from the item's `{` to this object's `{`: returns
    /// `list`, that text and one or more members (every rule starting at the item's `{`, the
    /// origin of every guard). A member whose value is a nested object is written as that
    /// object's own members, after `open_k` (the members so far, the key, `:` and `{`), and
    /// the nested object's `End` and `}` complete it:
    ///
    /// ```text
    /// lead_i -> open K_i key_i ":" | list More "," K_i key_i ":"
    /// list   -> lead_i V_i
    /// open_k -> lead_k "{"
    /// list   -> open_k End "}" | list_k End "}"
    /// ```
    ///
    /// (A key's values follow its one `lead`, so that thousands of them, chrome-manifest's
    /// `event_types` arrays, are a rule of two symbols each; every rule still starts at the
    /// item's `{`.)
    fn item_members(
        &mut self,
        spec: u32,
        keys: &[Key],
        open: Sym,
        path: &str,
        ip: &str,
    ) -> Result<u32, Error> {
        let (lb, rb, comma, colon) = (self.lit("{"), self.lit("}"), self.lit(","), self.lit(":"));
        let ws: Vec<Sym> = self.ws.into_iter().collect();
        let list = self.b.nt(format_args!("{path} item members"));
        let more = self.item_guard(spec, "item more", ItemCheck::More);
        // The two ways to come to a member: the first one after `open`, or after `list`.
        let mut first = vec![open];
        first.extend(&ws);
        let mut next = vec![Sym::Nt(list)];
        next.extend(&ws);
        next.extend([more, comma]);
        next.extend(&ws);
        let openers = [first, next];
        for (i, key) in keys.iter().enumerate() {
            let i = i as u32;
            let name = &key.name;
            let k = self.item_guard(spec, "item key", ItemCheck::Key(i));
            let key_t = self.string_literal(name)?;
            let mut head = vec![k, key_t];
            head.extend(&ws);
            head.push(colon);
            head.extend(&ws);
            // The key's lead, one nonterminal: its values (thousands of arrays, for
            // chrome-manifest's `event_types`) follow it rather than a copy of it each.
            let lead = self.b.nt(format_args!("{path} item lead {i}"));
            for o in &openers {
                self.b.rule_of(lead, &[o, &head]);
            }
            let head = vec![Sym::Nt(lead)];
            let pp = format!("{ip}/properties/{name}");
            let mut tails: Vec<Vec<Sym>> = Vec::new();
            match &key.domain {
                Domain::Finite(Finite::Values(vs)) => {
                    self.guarded_consts(spec, i, vs, &pp, path, &head, &mut tails)?;
                }
                Domain::Finite(Finite::Arrays(items, arrays)) => {
                    let domain = (items.as_slice(), arrays.as_slice());
                    self.guarded_arrays(spec, i, domain, &pp, path, &head, &mut tails)?;
                }
                Domain::Unbounded(s) => tails.push(self.unbounded_tail(spec, s, &pp, &head)?),
                Domain::FiniteString(content) => {
                    let value = self.string_terminal(content)?;
                    let after = self.item_guard(spec, "item after", ItemCheck::AfterString(i));
                    let mut t = head;
                    t.extend([value, after]);
                    tails.push(t);
                }
                Domain::Integer(digits, pinned, rest) => {
                    if let Some(rest) = rest {
                        tails.push(self.unbounded_tail(spec, rest, &pp, &head)?);
                    }
                    self.set_apart_values(spec, i, pinned, path, &head, &mut tails)?;
                    let value = self.b.terminal(digits.clone())?;
                    let zeros = self.b.regex(r"\.0+")?;
                    let after = self.item_guard(spec, "item after", ItemCheck::After);
                    let mut t = head.clone();
                    t.extend([value, after]);
                    tails.push(t);
                    let mut t = head;
                    t.extend([value, after, zeros]);
                    tails.push(t);
                }
                Domain::Pinned(rest, vs, numbers) => {
                    self.guarded_consts(spec, i, vs, &pp, path, &head, &mut tails)?;
                    let after = self.item_guard(spec, "item after", ItemCheck::After);
                    if let Some((others, zero)) = numbers {
                        let value = self.b.terminal(zero.clone())?;
                        tails.push(self.guarded_value(spec, i, vs.len(), value, path, &head));
                        let value = self.b.terminal(others.clone())?;
                        let mut t = head.clone();
                        t.extend([value, after]);
                        tails.push(t);
                    }
                    if let Some(rest) = rest {
                        let value = self.schema(rest, &pp)?;
                        let mut t = head;
                        t.extend([value, after]);
                        tails.push(t);
                    }
                }
                Domain::Capped(array) => {
                    let w = self.b.nt(format_args!("{path} item capped {name}"));
                    // `schema` compiles the array one level deeper than here.
                    self.closing = Some((spec, w, self.depth() + 1));
                    self.closing_placed = false;
                    let value = self.schema(array, &pp);
                    let placed = std::mem::take(&mut self.closing_placed);
                    self.closing = None;
                    let value = value?;
                    if !placed {
                        return Err(unsupported(
                            format!(
                                "uniqueItems (objects without additional properties: property \
                                 `{name}`, an array of at most maxItems items, compiled without \
                                 its check before the `]`)"
                            ),
                            path,
                        ));
                    }
                    self.b.rule(w, vec![value]);
                    let after = self.item_guard(spec, "item after", ItemCheck::After);
                    let mut t = head;
                    t.extend([Sym::Nt(w), after]);
                    tails.push(t);
                }
                Domain::Number(rest, zero) => {
                    self.set_apart_values(spec, i, zero, path, &head, &mut tails)?;
                    let value = self.b.terminal(rest.clone())?;
                    let after = self.item_guard(spec, "item after", ItemCheck::After);
                    let mut t = head;
                    t.extend([value, after]);
                    tails.push(t);
                }
                Domain::Object(sub, rest, _) => {
                    let open_k = self.b.nt(format_args!("{path} item nested {name}"));
                    let mut opening = head.clone();
                    if let Some(rest) = rest {
                        let t = self.unbounded_tail(spec, rest, &pp, &head)?;
                        self.b.rule(list, t);
                        opening.push(self.item_guard(spec, "item open", ItemCheck::Open(i)));
                    }
                    opening.push(lb);
                    self.b.rule(open_k, opening);
                    let sub_list = self.item_members(spec, sub, Sym::Nt(open_k), path, &pp)?;
                    let end = self.item_guard(spec, "item end", ItemCheck::End);
                    for from in [open_k, sub_list] {
                        let mut r = vec![Sym::Nt(from)];
                        r.extend(&ws);
                        r.extend([end, rb]);
                        self.b.rule(list, r);
                    }
                }
            }
            for t in tails {
                self.b.rule(list, t);
            }
        }
        Ok(list)
    }
}

impl Compiler<'_> {
    /// Whether `s` (at `ip`, `nesting` deep in `prefix_unbounded`) is a closed object as
    /// items may be (the module's kind) with a property of infinitely many values (unbounded
    /// at every prefix, strings of at least `u64::MAX` values, integers of `integer_digits`,
    /// or such closed objects, up to 8 deep): a `uniqueItems` array of
    /// such items can always take one more, its own checks keeping every item's prefixes
    /// completable (or refusing the schema, when the objects are not all of the kind the
    /// checks take, or none can be written). Properties are not looked into further, so that
    /// a recursive item (SARIF's `node` and its `children`) is decided by another property.
    pub(super) fn infinite_closed_objects(
        &self,
        s: &Schema,
        path: &str,
        ip: &str,
        nesting: usize,
    ) -> Result<bool, Error> {
        let Some(n) = self.closed_object(s, ip)? else {
            return Ok(false);
        };
        for (name, p) in n.object.properties.iter().flatten() {
            let pp = format!("{ip}/properties/{name}");
            let p = self.resolve_bare(p, &pp)?;
            if self.prefix_unbounded(&p, path, &pp, nesting + 1).is_ok() {
                return Ok(true);
            }
            if let Some(content) = finite_string(&p, &pp)? {
                if content.count_words() == u64::MAX {
                    return Ok(true);
                }
            }
            if integer_digits(&p, &pp)?.is_some()
                || (nesting < 8 && self.infinite_closed_objects(&p, path, &pp, nesting + 1)?)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The arrays of [`Compiler::finite_arrays`], depth-first, the shortest first at every
/// prefix: `picks` is the prefix walked from, as places among the `values` items may be.
struct FiniteArrays {
    values: usize,
    unique: bool,
    shortest: usize,
    longest: usize,
    picks: Vec<u32>,
    out: Vec<Vec<u32>>,
}

impl FiniteArrays {
    /// Adds every array to `out` (each prefix before the arrays that extend it, those in the
    /// order of their next item); false when there are more than [`MAX_FINITE_ARRAYS`].
    fn walk(&mut self) -> bool {
        // Per prefix length, the least index its next item may take.
        let mut from: Vec<usize> = vec![0];
        if !self.emit() {
            return false;
        }
        loop {
            let level = self.picks.len();
            let next = (level < self.longest)
                .then(|| {
                    (from[level]..self.values)
                        .find(|&i| !(self.unique && self.picks.contains(&(i as u32))))
                })
                .flatten();
            match next {
                Some(i) => {
                    from[level] = i + 1;
                    self.picks.push(i as u32);
                    from.push(0);
                    if !self.emit() {
                        return false;
                    }
                }
                None if level == 0 => return true,
                None => {
                    self.picks.pop();
                    from.pop();
                }
            }
        }
    }

    /// Adds the array `picks` to `out` when it is long enough; false when `out` is full.
    fn emit(&mut self) -> bool {
        if self.picks.len() >= self.shortest {
            if self.out.len() == MAX_FINITE_ARRAYS {
                return false;
            }
            self.out.push(self.picks.clone());
        }
        true
    }
}

/// The keys of the run-time checks ([`ItemKey`]) for `keys` (of the object at `ip`).
fn spec_keys(keys: &[Key], ip: &str) -> Result<Vec<ItemKey>, Error> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let mut k = ItemKey {
            name: key.name.as_bytes().to_vec(),
            required: key.required,
            values: None,
            words: None,
            object: None,
            more: false,
            pinned: Vec::new(),
            object_any: Vec::new(),
            object_dependent: Vec::new(),
        };
        match &key.domain {
            Domain::Finite(Finite::Values(vs)) => {
                let mut c = Vec::with_capacity(vs.len());
                for v in vs {
                    c.push(
                        canonical_of(v).ok_or_else(|| {
                            invalid(ip, "internal: an enum value that is not JSON")
                        })?,
                    );
                }
                k.values = Some(c);
            }
            Domain::Finite(Finite::Arrays(items, arrays)) => {
                // An array's canonical form is its head, then its items' forms in order.
                let forms = (items.iter())
                    .map(canonical_of)
                    .collect::<Option<Vec<Vec<u8>>>>()
                    .ok_or_else(|| invalid(ip, "internal: an enum value that is not JSON"))?;
                let mut c = Vec::with_capacity(arrays.len());
                for a in arrays {
                    // Sized at once: grown item by item, chrome-manifest's 1,956 arrays were a
                    // twentieth of its compile in reallocations.
                    let len = 9 + a.iter().map(|&x| forms[x as usize].len()).sum::<usize>();
                    let mut form = Vec::with_capacity(len);
                    canonical_array_head(a.len(), &mut form);
                    for &x in a {
                        form.extend_from_slice(&forms[x as usize]);
                    }
                    c.push(form);
                }
                k.values = Some(c);
            }
            Domain::FiniteString(content) => k.words = Some(content.count_words()),
            Domain::Object(sub, rest, ends) => {
                k.object = Some(spec_keys(sub, &format!("{ip}/properties/{}", key.name))?);
                k.more = rest.is_some();
                k.object_any = ends.any.clone();
                k.object_dependent = ends.dependent.clone();
            }
            Domain::Integer(_, pinned, _) | Domain::Number(_, pinned) => {
                for (v, _) in pinned {
                    k.pinned.push(
                        canonical_of(v)
                            .ok_or_else(|| invalid(ip, "internal: a number that is not JSON"))?,
                    );
                }
            }
            Domain::Pinned(_, vs, numbers) => {
                let zero = numbers.as_ref().map(|_| Value::from(0));
                for v in vs.iter().chain(&zero) {
                    k.pinned.push(
                        canonical_of(v)
                            .ok_or_else(|| invalid(ip, "internal: a value that is not JSON"))?,
                    );
                }
            }
            Domain::Unbounded(_) | Domain::Capped(_) => {}
        }
        out.push(k);
    }
    Ok(out)
}

/// The keywords that apply to numbers alone.
const NUMBER_KEYWORDS: [&str; 5] = [
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// For an `integer` schema `s` (type and number keywords alone): its spellings without a
/// fraction, when every one of their proper prefixes has infinitely many completions (no
/// `maximum`, say) and every spelling `s` allows is one of them, possibly followed by `.0…`.
/// (The automaton is built on values, so `N.0…` is allowed exactly when `N` is: the grammar
/// writes it as the digits, then the zeros.) The values whose spellings pass through a prefix
/// of finitely many completions (`-1` of `minimum: -1`: `-` has no other) are set apart, with
/// their spellings, when they are few (at most [`MAX_PINNED`]) and the other spellings are
/// such digits.
fn integer_digits(s: &Schema, path: &str) -> Result<Option<(Dfa, Pinned)>, Error> {
    let Schema::Node(n) = s else {
        return Ok(None);
    };
    if n.types != Some(TypeSet::INTEGER) || !n.only(&[&["type"][..], &NUMBER_KEYWORDS].concat()) {
        return Ok(None);
    }
    // The same few bounds (none, `minimum: 0`) are met at every integer property of every
    // closed object of an item (sarif's), and each answer is five products: kept
    // process-wide per bounds.
    type Answer = Option<(Dfa, Pinned)>;
    static KEPT: std::sync::OnceLock<Kept<NumberFacets, Answer>> = std::sync::OnceLock::new();
    KEPT.get_or_init(|| Kept::new(64))
        .get_or_try(&n.number, || integer_digits_of(&n.number, path))
}

/// [`integer_digits`] of integers with bounds `number`.
fn integer_digits_of(number: &NumberFacets, path: &str) -> Result<Option<(Dfa, Pinned)>, Error> {
    let all = number_dfa(number, true, path)?;
    let digits = all.intersect(&Dfa::from_regex("-?[0-9]+")?)?;
    let with_zeros = digits.union(&all.intersect(&Dfa::from_regex(r"-?[0-9]+\.0+")?)?)?;
    if digits.is_empty_language() || !all.minus(&with_zeros)?.is_empty_language() {
        return Ok(None);
    }
    if unbounded(&digits) {
        return Ok(Some((digits, Vec::new())));
    }
    let Some(words) = pinned_words(&digits) else {
        return Ok(None);
    };
    let spelled: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
    let rest = digits.minus(&Dfa::literals(&spelled, 4096)?)?;
    if rest.is_empty_language() || !unbounded(&rest) {
        return Ok(None);
    }
    let mut pinned = Vec::with_capacity(words.len());
    for w in &words {
        let Ok(v) = serde_json::from_slice::<Value>(w) else {
            return Ok(None);
        };
        let equal = Dfa::from_regex(&Decimal::parse(&v, path)?.equal_regex())?;
        pinned.push((v, all.intersect(&equal)?));
    }
    Ok(Some((rest, pinned)))
}

/// For a plain `type: number` schema `s` (`type` alone): the spellings of the numbers other
/// than zero, and zero set apart with all its spellings (`Domain::Number`).
fn plain_numbers(s: &Schema, path: &str) -> Result<Option<(Dfa, Pinned)>, Error> {
    let Schema::Node(n) = s else {
        return Ok(None);
    };
    if n.types != Some(TypeSet::NUMBER) || !n.only(&["type"]) {
        return Ok(None);
    }
    let all = number_dfa(&n.number, false, path)?;
    let zero = all.intersect(&Dfa::from_regex(ZERO)?)?;
    Ok(Some((all.minus(&zero)?, vec![(Value::from(0), zero)])))
}

/// The refusal of property `name`, of infinitely many values among which numbers beside
/// other types: zero's `0e` goes on only as zero, and such a union is not split here.
fn number_beside_others(name: &str, path: &str) -> Error {
    unsupported(
        format!(
            "uniqueItems (objects without additional properties: property `{name}` holds \
             numbers beside other types, where `0e` has one completion by value)"
        ),
        path,
    )
}

impl Compiler<'_> {
    /// What the `}` of closed object `n` (at `ip`, its keys `keys`) checks ([`Ends`]): its
    /// `anyOf` of `required` alone, a list naming a key that cannot be written left out, and
    /// `None` when every list is (no object can be written); its `dependentRequired`, a
    /// trigger that cannot be written left out. Every key a list names must have infinitely
    /// many values (`ItemObject::any_required` says why that keeps the count exact); another
    /// is refused by name, as is a trigger that needs a key that cannot be written.
    fn object_ends(
        &self,
        n: &Node,
        keys: &[Key],
        path: &str,
        ip: &str,
    ) -> Result<Option<Ends>, Error> {
        let position = |name: &str| keys.iter().position(|k| k.name == name).map(|i| i as u32);
        let infinite = |i: u32, what: &str| -> Result<(), Error> {
            let key = &keys[i as usize];
            let infinite = match &key.domain {
                Domain::Unbounded(_)
                | Domain::Integer(..)
                | Domain::Number(..)
                | Domain::Pinned(..)
                | Domain::Capped(_) => true,
                Domain::FiniteString(content) => content.count_words() == u64::MAX,
                Domain::Object(sub, ..) => total_objects(&spec_keys(sub, ip)?) == u64::MAX,
                Domain::Finite(_) => false,
            };
            match infinite {
                true => Ok(()),
                false => Err(unsupported(
                    format!(
                        "uniqueItems (objects without additional properties: {what} naming \
                         `{}`, of finitely many values)",
                        key.name
                    ),
                    path,
                )),
            }
        };
        let mut dependent = Vec::new();
        for (trigger, names) in n.object.dependent_required.iter().flatten() {
            let Some(t) = position(trigger) else {
                continue;
            };
            let mut list = Vec::with_capacity(names.len());
            for name in names {
                let Some(i) = position(name) else {
                    return Err(unsupported(
                        format!(
                            "uniqueItems (objects without additional properties: \
                             dependentRequired of `{trigger}` naming `{name}`, never written)"
                        ),
                        path,
                    ));
                };
                infinite(i, "dependentRequired")?;
                list.push(i);
            }
            if !list.is_empty() {
                dependent.push((t, list));
            }
        }
        let Some(branches) = &n.any_of else {
            return Ok(Some(Ends {
                any: Vec::new(),
                dependent,
            }));
        };
        let mut lists = Vec::new();
        for (b, branch) in branches.iter().enumerate() {
            let names = match self.resolve_bare(branch, &format!("{ip}/anyOf/{b}"))? {
                Schema::Node(m) => m.object.required.clone().unwrap_or_default(),
                // Any value: the `anyOf` always holds.
                Schema::Any => {
                    return Ok(Some(Ends {
                        any: Vec::new(),
                        dependent,
                    }))
                }
                Schema::Never => continue,
            };
            let list: Vec<u32> = names.iter().map_while(|name| position(name)).collect();
            if list.len() < names.len() {
                continue;
            }
            for &i in &list {
                infinite(i, "anyOf of required")?;
            }
            if list.is_empty() {
                return Ok(Some(Ends {
                    any: Vec::new(),
                    dependent,
                }));
            }
            lists.push(list);
        }
        Ok((!lists.is_empty()).then_some(Ends {
            any: lists,
            dependent,
        }))
    }

    /// Whether `s` (at `pp`) is a `uniqueItems` array of at most `maxItems` (at least two,
    /// so that it is compiled as a unique array, and at least `minItems`) items unbounded at every prefix and never numbers at their
    /// top (`0e` has one completion), with no other keyword: [`Domain::Capped`].
    fn capped_array(
        &self,
        s: &Schema,
        path: &str,
        pp: &str,
        nesting: usize,
    ) -> Result<bool, Error> {
        let Schema::Node(n) = s else {
            return Ok(false);
        };
        let a = &n.array;
        let Some(max) = a.max_items else {
            return Ok(false);
        };
        if n.types != Some(TypeSet::ARRAY)
            || !n.only(&["type", "items", "uniqueItems", "minItems", "maxItems"])
            || !a.unique_items
            || max < 2
            || a.min_items.unwrap_or(0) > max
        {
            return Ok(false);
        }
        let items = a.items.clone().unwrap_or(Schema::Any);
        let ip = format!("{pp}/items");
        Ok(self
            .prefix_unbounded(&items, path, &ip, nesting + 1)
            .is_ok()
            && !self.holds_numbers(&items, &ip)?)
    }

    /// For a schema of several types, among them `null`, booleans or numbers, without
    /// combinators, `enum` or number keywords (anywork's `version`, a `pattern` alone), whose
    /// strings, arrays and objects are unbounded at every prefix: the domain that sets the
    /// values of one completion (`null`, `true`, `false`, zero) apart ([`Domain::Pinned`]).
    fn typed_union(
        &self,
        s: &Schema,
        path: &str,
        pp: &str,
        nesting: usize,
    ) -> Result<Option<Domain>, Error> {
        let Schema::Node(n) = s else {
            return Ok(None);
        };
        let types = n.types.unwrap_or(TypeSet::ALL);
        if let Some(d) = self.integer_union(n, types, path, pp, nesting)? {
            return Ok(Some(d));
        }
        let few = [TypeSet::NULL, TypeSet::BOOLEAN, TypeSet::NUMBER];
        let combined = n.any_of.is_some() || n.one_of.is_some() || n.all_of.is_some();
        let keywords = n.keywords();
        if combined
            || n.values.is_some()
            || n.reference.is_some()
            || !few.iter().any(|&t| types.has(t))
            || (types.has(TypeSet::INTEGER) && !types.has(TypeSet::NUMBER))
            || keywords.iter().any(|k| NUMBER_KEYWORDS.contains(k))
            // Excluded strings stay with the other types' schema; a value set apart or a
            // number excluded is not taken here.
            || n.excluded.iter().flatten().any(|v| !v.is_string())
        {
            return Ok(None);
        }
        let mut values = Vec::new();
        if types.has(TypeSet::NULL) {
            values.push(Value::Null);
        }
        if types.has(TypeSet::BOOLEAN) {
            values.extend([Value::Bool(true), Value::Bool(false)]);
        }
        let numbers = match types.has(TypeSet::NUMBER) {
            false => None,
            true => {
                let all = number_dfa(&n.number, false, pp)?;
                let zero = all.intersect(&Dfa::from_regex(ZERO)?)?;
                Some((all.minus(&zero)?, zero))
            }
        };
        let others = types.intersect(TypeSet::STRING.union(TypeSet::ARRAY).union(TypeSet::OBJECT));
        let rest = match others.is_empty() {
            true => None,
            false => {
                let rest = Schema::node(Node {
                    types: Some(others),
                    ..(**n).clone()
                });
                if self.prefix_unbounded(&rest, path, pp, nesting).is_err() {
                    return Ok(None);
                }
                Some(rest)
            }
        };
        if rest.is_none() && numbers.is_none() {
            return Ok(None);
        }
        Ok(Some(Domain::Pinned(rest, values, numbers)))
    }

    /// For a schema of integers and strings, arrays or objects, with keywords of one type
    /// each (no combinators, `enum`, excluded values, `null` or booleans; SARIF 1.0's `id`:
    /// `type: [integer, string]`, a `minimum` for the integers and a `pattern` for the
    /// strings): the integers as [`integer_digits`] makes them, beside the other types'
    /// values when those are unbounded at every prefix and never numbers
    /// ([`Domain::Integer`] with `Some`).
    fn integer_union(
        &self,
        n: &Node,
        types: TypeSet,
        path: &str,
        pp: &str,
        nesting: usize,
    ) -> Result<Option<Domain>, Error> {
        let others = types.intersect(TypeSet::STRING.union(TypeSet::ARRAY).union(TypeSet::OBJECT));
        // Keywords of one type each: the integers take the number keywords, the other types
        // the rest. Any keyword that reaches every type (`enum`, `not`, combinators, ...) is
        // not split here.
        let others_keywords = [
            "minLength",
            "maxLength",
            "pattern",
            "not pattern",
            "format",
            "not format",
            "items",
            "prefixItems",
            "minItems",
            "maxItems",
            "contains",
            "minContains",
            "maxContains",
            "uniqueItems",
            "properties",
            "patternProperties",
            "additionalProperties",
            "required",
            "minProperties",
            "maxProperties",
            "dependentRequired",
            "propertyNames",
            "some member",
        ];
        let typed = [&["type"][..], &NUMBER_KEYWORDS, &others_keywords].concat();
        if !types.has(TypeSet::INTEGER)
            || types.has(TypeSet::NUMBER)
            || types.has(TypeSet::NULL)
            || types.has(TypeSet::BOOLEAN)
            || others.is_empty()
            || !n.only(&typed)
        {
            return Ok(None);
        }
        let integers = Schema::node(Node {
            types: Some(TypeSet::INTEGER),
            number: n.number.clone(),
            ..Node::default()
        });
        let Some((digits, pinned)) = integer_digits(&integers, pp)? else {
            return Ok(None);
        };
        let rest = Schema::node(Node {
            types: Some(others),
            number: Default::default(),
            ..n.clone()
        });
        if self.prefix_unbounded(&rest, path, pp, nesting).is_err()
            || self.holds_numbers(&rest, pp)?
        {
            return Ok(None);
        }
        Ok(Some(Domain::Integer(digits, pinned, Some(rest))))
    }

    /// A key that tells the closed objects `b` (at `ip`) from every object of `others` (the
    /// other object branches of an item union, open or closed): required by `b`, and either
    /// of finitely many values there that no other branch's value for it meets (a
    /// discriminator: anywork's and SpecIF's `type`), or a key that no other branch allows.
    /// An earlier item is then of `b` exactly when it has the key (with one of those values).
    pub(super) fn branch_key(
        &self,
        b: &Schema,
        others: &[&Schema],
        ip: &str,
    ) -> Result<Option<String>, Error> {
        let Some(n) = self.closed_object(b, ip)? else {
            return Ok(None);
        };
        for name in n.object.required.iter().flatten() {
            let Some(vb) = value_schema(&n, name) else {
                continue;
            };
            let vb = self.resolve_bare(&vb, &format!("{ip}/properties/{name}"))?;
            let finite = finite_values(&vb).is_some_and(|vs| !vs.is_empty());
            let mut apart = true;
            for c in others {
                let vc = match c {
                    Schema::Node(cn) => value_schema(cn, name),
                    _ => None,
                };
                let Some(vc) = vc else {
                    apart = false;
                    break;
                };
                let vc = self.resolve_bare(&vc, ip)?;
                let ok = match finite {
                    true => disjoint(self.table, &vb, &vc),
                    false => vc == Schema::Never,
                };
                if !ok {
                    apart = false;
                    break;
                }
            }
            if apart {
                return Ok(Some(name.clone()));
            }
        }
        Ok(None)
    }

    /// The branches of the `anyOf` `branches` at `ip`, through bare references, with a
    /// branch that is an `anyOf` alone (a `oneOf` of disjoint branches among them) replaced
    /// by its own, up to 8 deep: travis's `recipients`, a string or a closed object, or an
    /// array of those. Each with its path.
    fn flat_branches(&self, branches: &[Schema], ip: &str) -> Result<Vec<(Schema, String)>, Error> {
        let mut out = Vec::new();
        let mut todo: Vec<(Schema, String, usize)> = branches
            .iter()
            .enumerate()
            .rev()
            .map(|(i, b)| (b.clone(), format!("{ip}/anyOf/{i}"), 0))
            .collect();
        while let Some((b, bp, depth)) = todo.pop() {
            let b = self.resolve_bare(&b, &bp)?;
            match &b {
                Schema::Node(n) if depth < 8 && n.only(&["anyOf"]) => {
                    for (i, c) in n
                        .any_of
                        .as_deref()
                        .unwrap_or_default()
                        .iter()
                        .enumerate()
                        .rev()
                    {
                        todo.push((c.clone(), format!("{bp}/anyOf/{i}"), depth + 1));
                    }
                }
                _ => out.push((b, bp)),
            }
        }
        Ok(out)
    }

    /// Whether `s` (at `ip`; through bare references and `anyOf`, `depth` deep) may hold an
    /// object: `true` unless its `type`, or every branch's, leaves objects out.
    fn may_be_object(&self, s: &Schema, ip: &str, depth: usize) -> Result<bool, Error> {
        let s = self.resolve_bare(s, ip)?;
        let n = match &s {
            Schema::Never => return Ok(false),
            Schema::Any => return Ok(true),
            Schema::Node(n) => n,
        };
        if n.types.is_some_and(|t| !t.has(TypeSet::OBJECT)) {
            return Ok(false);
        }
        match (&n.any_of, n.only(&["anyOf"]), depth < 8) {
            (Some(branches), true, true) => {
                for (i, b) in branches.iter().enumerate() {
                    if self.may_be_object(b, &format!("{ip}/anyOf/{i}"), depth + 1)? {
                        return Ok(true);
                    }
                }
                Ok(false)
            }
            _ => Ok(true),
        }
    }

    /// Whether the values of `s` (at `ip`; through bare references and `anyOf`) may be
    /// numbers at their top (not inside arrays or objects, which always take one more).
    fn holds_numbers(&self, s: &Schema, ip: &str) -> Result<bool, Error> {
        let s = self.resolve_bare(s, ip)?;
        let Schema::Node(n) = &s else {
            return Ok(matches!(s, Schema::Any));
        };
        if !n.types.unwrap_or(TypeSet::ALL).has(TypeSet::NUMBER) {
            return Ok(false);
        }
        // Some branch of an `anyOf` must hold numbers too.
        if let Some(branches) = &n.any_of {
            for (i, b) in branches.iter().enumerate() {
                if self.holds_numbers(b, &format!("{ip}/anyOf/{i}"))? {
                    return Ok(true);
                }
            }
            return Ok(false);
        }
        Ok(true)
    }
}

/// Values an integer property sets apart (`integer_digits`), each with its spellings.
type Pinned = Vec<(Value, Dfa)>;

/// The most values an integer property may set apart (`integer_digits`).
const MAX_PINNED: usize = 16;

/// The words of `d` that pass, before their end, through a state of finitely many
/// completions that can read on (at most [`MAX_PINNED`]); `None` when there are more, or
/// when finding them would take more than a few thousand steps (a loop before such a state).
fn pinned_words(d: &Dfa) -> Option<Vec<Vec<u8>>> {
    let n = d.num_states();
    let finite = d.finite_completions();
    let pin = |s: u32| s != DEAD && finite[s as usize] && d.can_continue(s);
    // leads[s]: a pinning state is reachable from `s`.
    let mut leads: Vec<bool> = (0..n as u32).map(pin).collect();
    loop {
        let mut changed = false;
        for s in 1..n as u32 {
            if !leads[s as usize]
                && (0..=255u8).any(|b| {
                    let t = d.next(s, b);
                    t != DEAD && leads[t as usize]
                })
            {
                leads[s as usize] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    let mut words = Vec::new();
    let mut steps = 0usize;
    // (state, text so far, inside the finite part).
    let mut stack: Vec<(u32, Vec<u8>, bool)> = vec![(d.start(), Vec::new(), false)];
    while let Some((s, text, inside)) = stack.pop() {
        steps += 1;
        if steps > 4096 || words.len() > MAX_PINNED {
            return None;
        }
        let inside = inside || pin(s);
        if inside && d.is_accept(s) {
            words.push(text.clone());
        }
        for b in 0..=255u8 {
            let t = d.next(s, b);
            if t != DEAD && (inside || leads[t as usize]) {
                let mut next = text.clone();
                next.push(b);
                stack.push((t, next, inside));
            }
        }
    }
    (words.len() <= MAX_PINNED).then_some(words)
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
pub(super) fn finite_values(s: &Schema) -> Option<Vec<Value>> {
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
