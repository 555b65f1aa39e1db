//! Arrays and objects: element positions and counts, and members in any order (or the
//! schema's), as grammar rules over the compiled element and value schemas.

use std::sync::{Arc, OnceLock};

use serde_json::Value;

use super::algebra::{both_of, complement, merge, normalize, value_count_bound};
use super::compile::{one_encoding, Compiler};
use super::resolve::escape_pointer;
use super::schema::{named, unsupported, Node, Schema, SomeMember, TypeSet, Values};
use super::string::{node_strings, pattern_dfa};
use crate::dfa::{Dfa, DfaMemo, Kept};
use crate::grammar::{FxMap, FxSet, GrammarBuilder, Guard, ObjectSpec, Sym, ADDITIONAL};
use crate::Error;

/// The most values of a `uniqueItems` domain unrolled into one rule per subset of them; a
/// larger finite domain makes each value a nonterminal predicted only while unused
/// (`unique_finite`). At 12, an array of 12 enum values took 24,576 rules (asconfig's
/// WebAssembly features: 4.1 ms of its compile, 0.4 ms with the guards; sarif-2.0.0's 44
/// arrays 7.4 ms, 2.5), and the guards' masks cost no more.
pub(super) const UNROLLED_VALUES: usize = 6;

impl Compiler<'_> {
    /// The rule for the arrays a (normalised) node allows.
    pub(super) fn array(&mut self, m: &Node, path: &str) -> Result<Sym, Error> {
        let a = &m.array;
        if a.unique_items && a.max_items.is_none_or(|x| x > 1) {
            return self.unique_array(m, path);
        }
        let prefix: &[Schema] = a.prefix_items.as_deref().unwrap_or(&[]);
        let min = a.min_items.unwrap_or(0);
        let max = a.max_items;
        let items_v: Option<Schema> = match &a.items {
            None => Some(Schema::Any),
            Some(Schema::Never) => None,
            Some(v) => Some(v.clone()),
        };
        // `contains` with `minContains` n: at least n elements also match `contains`. The
        // grammar lets any n elements be the matching ones, which is exact.
        let contains_v = a.contains.clone();
        let need = match &contains_v {
            None => 0,
            Some(_) => a.min_contains.unwrap_or(1),
        };
        if need > 64 {
            return Err(unsupported("minContains above 64", path));
        }
        // maxContains needs the elements that do not match `contains`: we build them for a
        // `contains` that is a set of scalar values, with no other item schema around.
        let max_contains = match &contains_v {
            Some(_) => a.max_contains,
            None => None,
        };
        let mut outside: Option<(Sym, Sym)> = None;
        if let (Some(mc), Some(c)) = (max_contains, &contains_v) {
            let plain_items = items_v == Some(Schema::Any) && prefix.is_empty();
            let nc = normalize(self.table, c, &format!("{path}/contains"), 0)?;
            let values: Option<Values> = match &nc {
                Schema::Node(o) if o.only(&["enum"]) => o.values.clone(),
                _ => None,
            };
            let scalar = |v: &Value| !matches!(v, Value::Array(_) | Value::Object(_));
            match values {
                Some(vs) if plain_items && mc <= 64 && vs.iter().all(scalar) => {
                    let mut alts = Vec::new();
                    for v in &vs {
                        alts.push(vec![self.const_value(v, path)?]);
                    }
                    let matching = self.b.alts("contains match", alts);
                    let others = self.any_except(&vs, path)?;
                    outside = Some((matching, others));
                }
                _ => return Err(unsupported("maxContains", path)),
            }
        }
        let k = prefix.len();
        let limit = max
            .unwrap_or(usize::MAX)
            .min(if items_v.is_some() { usize::MAX } else { k });
        if min > limit || need > limit {
            return Ok(Sym::Nt(self.b.nt("impossible array")));
        }
        let chain = min.max(k).min(limit);
        if chain > 4096 || (limit != usize::MAX && limit > 4096) {
            return Err(unsupported("maxItems/minItems above 4096", path));
        }
        let top = if limit == usize::MAX {
            chain.max(1)
        } else {
            limit
        };
        // Element symbols per position (positions from k on share the `items` symbol), plain
        // and counted (also matching `contains`).
        let mut plain: Vec<Option<Sym>> = Vec::new();
        let mut counted: Vec<Option<Sym>> = Vec::new();
        let positions: Vec<(String, Option<Schema>)> = prefix
            .iter()
            .enumerate()
            .map(|(i, v)| (format!("{path}/prefixItems/{i}"), Some(v.clone())))
            .chain(std::iter::once((format!("{path}/items"), items_v.clone())))
            .collect();
        for (ep, v) in positions {
            let Some(v) = v else {
                plain.push(None);
                counted.push(None);
                continue;
            };
            plain.push(Some(self.schema(&v, &ep)?));
            counted.push(match &contains_v {
                Some(c) if need > 0 => {
                    let nv = normalize(self.table, &v, &ep, 0)?;
                    let nc = normalize(self.table, c, &format!("{path}/contains"), 0)?;
                    Some(self.schema(&merge(&nv, &nc, &ep)?, &ep)?)
                }
                _ => None,
            });
        }
        if let Some((matching, others)) = outside {
            plain = vec![Some(others)];
            counted = vec![Some(matching)];
        }
        // Counts saturate at `need`, or with maxContains run to one past it (never entered).
        let cap = max_contains.map_or(need, |x| x + 1);
        let within = |c: usize| max_contains.is_none_or(|x| c <= x);
        let (lb, rb, comma) = (self.lit("["), self.lit("]"), self.lit(","));
        let mut states: FxMap<(usize, usize), u32> = FxMap::default();
        let mut todo: Vec<(usize, usize)> = Vec::new();
        let mut get =
            |b: &mut GrammarBuilder, st: (usize, usize), todo: &mut Vec<(usize, usize)>| -> u32 {
                *states.entry(st).or_insert_with(|| {
                    todo.push(st);
                    b.nt(format_args!(
                        "{path} array after {} ({} matching)",
                        st.0, st.1
                    ))
                })
            };
        let choices = |i: usize| -> Vec<(Sym, usize)> {
            let p = i.min(k);
            let mut v = Vec::new();
            if let Some(s) = plain[p] {
                v.push((s, 0));
            }
            if let Some(s) = counted[p] {
                v.push((s, 1));
            }
            v
        };
        let arr = self.b.nt(format_args!("{path} array"));
        if min == 0 && need == 0 {
            let r = self.seq(&[lb, rb]);
            self.b.rule(arr, r);
        }
        if limit >= 1 {
            for (e, dc) in choices(0) {
                if !within(dc) {
                    continue;
                }
                let next = get(&mut self.b, (1.min(top), dc.min(cap)), &mut todo);
                let r = self.seq(&[lb, e, Sym::Nt(next)]);
                self.b.rule(arr, r);
            }
        }
        while let Some((i, c)) = todo.pop() {
            let nt = get(&mut self.b, (i, c), &mut todo);
            if i >= min && c >= need && within(c) {
                let r = self.seq(&[rb]);
                self.b.rule(nt, r);
            }
            if i < limit {
                for (e, dc) in choices(i) {
                    if !within(c + dc) {
                        continue;
                    }
                    let ni = if i == top { i } else { i + 1 };
                    let next = get(&mut self.b, (ni, (c + dc).min(cap)), &mut todo);
                    let r = self.seq(&[comma, e, Sym::Nt(next)]);
                    self.b.rule(nt, r);
                }
            }
        }
        Ok(Sym::Nt(arr))
    }

    /// Arrays of distinct items of which one matches `contains` (`c`), where at most one
    /// item value does not (`items` and not `C`: see [`value_count_bound`]): every array of
    /// two or more distinct items then holds one of `C`, so those are the arrays of two or
    /// more without `contains`, and the array of one item is `[C]`. `None` where more than
    /// one value may miss `C` or `C` has no exact complement.
    fn unique_few_outside(
        &mut self,
        m: &Node,
        c: &Schema,
        path: &str,
    ) -> Result<Option<Sym>, Error> {
        let a = &m.array;
        let cp = format!("{path}/contains");
        let c = normalize(self.table, c, &cp, 0)?;
        let not_c = match complement(self.table, &c, &cp, 0) {
            Ok(n) => n,
            Err(Error::UnsupportedKeyword { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let ip = format!("{path}/items");
        let items = self.resolve_bare(a.items.as_ref().unwrap_or(&Schema::Any), &ip)?;
        let Some(outside) = merge(&items, &not_c, path)
            .ok()
            .and_then(|s| value_count_bound(&s))
        else {
            return Ok(None);
        };
        if outside > 1 {
            return Ok(None);
        }
        type Af = super::schema::ArrayFacets;
        let (min, max) = (a.min_items.unwrap_or(0), a.max_items);
        let mut alts = Vec::new();
        // Arrays of more distinct items than values outside `C`.
        let least = min.max(outside + 1);
        if max.is_none_or(|x| x >= least) {
            let many = Node {
                array: Af {
                    contains: None,
                    min_items: Some(least),
                    ..a.clone()
                },
                ..m.clone()
            };
            alts.push(vec![self.array(&many, path)?]);
        }
        // One item, of `C`, where one value may miss `C`.
        if outside == 1 && min <= 1 && max.is_none_or(|x| x >= 1) {
            let yes = merge(&items, &c, path).unwrap_or_else(|_| both_of(items.clone(), c));
            let one = Node {
                types: Some(TypeSet::ARRAY),
                array: Af {
                    prefix_items: Some(vec![yes]),
                    items: Some(Schema::Never),
                    min_items: Some(1),
                    ..Af::default()
                },
                ..Node::default()
            };
            alts.push(vec![self.array(&one, &format!("{path}/contains"))?]);
        }
        Ok(Some(self.b.alts(path, alts)))
    }

    /// Arrays of at most two distinct items of which one matches `contains` (`c`), as arrays
    /// without `contains`: one item `[C]`; two, `[C, not C]` or `[not C, C]` (distinct
    /// because one matches `C` and the other not, so no `uniqueItems` to check), or two
    /// distinct items that both match `C`. Together exactly the arrays of the node, where
    /// `C` has an exact complement; refused by name where it has none.
    fn unique_pair_containing(&mut self, m: &Node, c: &Schema, path: &str) -> Result<Sym, Error> {
        let a = &m.array;
        let cp = format!("{path}/contains");
        let c = normalize(self.table, c, &cp, 0)?;
        let not_c = match complement(self.table, &c, &cp, 0) {
            Ok(n) => n,
            Err(Error::UnsupportedKeyword { .. }) => {
                return Err(unsupported("uniqueItems (beside contains)", path))
            }
            Err(e) => return Err(e),
        };
        let ip = format!("{path}/items");
        let items = normalize(self.table, a.items.as_ref().unwrap_or(&Schema::Any), &ip, 0)?;
        // Merged where they merge, so that the distinct items of `C` are one item schema.
        let and =
            |x: &Schema, y: Schema| merge(x, &y, path).unwrap_or_else(|_| both_of(x.clone(), y));
        let yes = and(&items, c);
        let no = and(&items, not_c);
        type Af = super::schema::ArrayFacets;
        // Exactly these items (`prefixItems` alone would allow fewer).
        let tuple = |p: Vec<Schema>| Node {
            types: Some(TypeSet::ARRAY),
            array: Af {
                min_items: Some(p.len()),
                prefix_items: Some(p),
                items: Some(Schema::Never),
                ..Af::default()
            },
            ..Node::default()
        };
        let (min, max) = (a.min_items.unwrap_or(0), a.max_items.unwrap_or(2));
        let mut cases = Vec::new();
        if min <= 1 && max >= 1 {
            cases.push(tuple(vec![yes.clone()]));
        }
        if max >= 2 {
            cases.push(tuple(vec![yes.clone(), no.clone()]));
            cases.push(tuple(vec![no, yes.clone()]));
            cases.push(Node {
                types: Some(TypeSet::ARRAY),
                array: Af {
                    items: Some(yes),
                    unique_items: true,
                    min_items: Some(2),
                    max_items: Some(2),
                    ..Af::default()
                },
                ..Node::default()
            });
        }
        let mut alts = Vec::new();
        for (i, case) in cases.iter().enumerate() {
            alts.push(vec![self.array(case, &format!("{path}/contains/{i}"))?]);
        }
        Ok(self.b.alts(path, alts))
    }

    /// Arrays of distinct items (`uniqueItems`) whose items come from a small finite set (an
    /// `enum`, or `null` and booleans): one rule per subset of the values used so far, so
    /// at most 2^[`UNROLLED_VALUES`] subsets.
    fn unique_array(&mut self, m: &Node, path: &str) -> Result<Sym, Error> {
        let a = &m.array;
        if let Some(c) = &a.contains {
            let plain = a.prefix_items.is_none()
                && a.min_contains.is_none()
                && a.max_contains.is_none()
                && a.max_items.is_some_and(|x| x <= 2);
            if plain {
                return self.unique_pair_containing(m, c, path);
            }
            let simple =
                a.prefix_items.is_none() && a.min_contains.is_none() && a.max_contains.is_none();
            if simple {
                if let Some(sym) = self.unique_few_outside(m, c, path)? {
                    return Ok(sym);
                }
            }
            return Err(unsupported("uniqueItems (beside contains)", path));
        }
        if a.prefix_items.is_some() {
            return Err(unsupported("uniqueItems (beside prefixItems)", path));
        }
        let ip = format!("{path}/items");
        let items = self.resolve_bare(a.items.as_ref().unwrap_or(&Schema::Any), &ip)?;
        let mut values: Vec<Value> = Vec::new();
        match &items {
            Schema::Never => {}
            Schema::Node(n) if n.only(&["enum", "type"]) && n.values.is_some() => {
                let t = n.types.unwrap_or(TypeSet::ALL);
                for v in n.values.iter().flatten() {
                    let ok = t.admits(v);
                    if ok && !values.iter().any(|w| super::schema::json_eq(v, w)) {
                        values.push(v.clone());
                    }
                }
            }
            Schema::Node(n) if n.only(&["type"]) => {
                let t = n.types.unwrap_or(TypeSet::ALL);
                let others = [TypeSet::INTEGER, TypeSet::NUMBER, TypeSet::STRING];
                if others
                    .into_iter()
                    .chain([TypeSet::ARRAY, TypeSet::OBJECT])
                    .any(|x| t.has(x))
                {
                    return self.unique_unbounded(m, &items, path);
                }
                if t.has(TypeSet::NULL) {
                    values.push(Value::Null);
                }
                if t.has(TypeSet::BOOLEAN) {
                    values.extend([Value::Bool(true), Value::Bool(false)]);
                }
            }
            _ => return self.unique_unbounded(m, &items, path),
        }
        if values.len() > UNROLLED_VALUES {
            return self.unique_finite(m, &values, path);
        }
        let k = values.len();
        let min = a.min_items.unwrap_or(0);
        let max = a.max_items.unwrap_or(usize::MAX).min(k);
        if min > max {
            return Ok(Sym::Nt(self.b.nt("impossible array")));
        }
        let mut syms = Vec::with_capacity(k);
        for v in &values {
            syms.push(self.const_value(v, &ip)?);
        }
        let (lb, rb, comma) = (self.lit("["), self.lit("]"), self.lit(","));
        // after[S]: inside the array, the values of S written.
        let after: Vec<u32> = (0..1u32 << k)
            .map(|set| self.b.nt(format_args!("{path} unique {set:b}")))
            .collect();
        let arr = self.b.nt(format_args!("{path} unique array"));
        if min == 0 {
            let r = self.seq(&[lb, rb]);
            self.b.rule(arr, r);
        }
        if max >= 1 {
            for (i, &v) in syms.iter().enumerate() {
                let r = self.seq(&[lb, v, Sym::Nt(after[1 << i])]);
                self.b.rule(arr, r);
            }
        }
        for set in 1..1u32 << k {
            let used = set.count_ones() as usize;
            let nt = after[set as usize];
            if used >= min {
                let r = self.seq(&[rb]);
                self.b.rule(nt, r);
            }
            if used < max {
                for (i, &v) in syms.iter().enumerate() {
                    if set >> i & 1 == 0 {
                        let r = self.seq(&[comma, v, Sym::Nt(after[(set | 1 << i) as usize])]);
                        self.b.rule(nt, r);
                    }
                }
            }
        }
        Ok(Sym::Nt(arr))
    }

    /// The decoded keys a `propertyNames` schema accepts (keys are strings, so only string
    /// keywords and string values matter).
    fn key_filter(&self, pn: &Schema, path: &str) -> Result<Dfa, Error> {
        let m = match self.resolve_bare(pn, path)? {
            Schema::Never => return Ok(Dfa::empty()),
            Schema::Any => return Ok(Dfa::any_string().clone()),
            Schema::Node(m) => m,
        };
        let string_keys = [
            "type",
            "minLength",
            "maxLength",
            "pattern",
            "format",
            "enum",
            "not enum",
        ];
        for k in m.keywords() {
            if !string_keys.contains(&k) {
                return Err(unsupported(format!("propertyNames with {k}"), path));
            }
        }
        if !m.types.unwrap_or(TypeSet::ALL).has(TypeSet::STRING) {
            return Ok(Dfa::empty());
        }
        node_strings(&m, path)
    }

    /// The rule for the objects a (normalised) node allows.
    pub(super) fn object(&mut self, m: &Node, path: &str) -> Result<Sym, Error> {
        let o = &m.object;
        let props: &[(String, Schema)] = o.properties.as_deref().unwrap_or(&[]);
        let pats: &[(String, Schema)] = o.pattern_properties.as_deref().unwrap_or(&[]);
        let required: &[String] = o.required.as_deref().unwrap_or(&[]);
        if pats.len() > MAX_PATTERNS {
            return Err(unsupported(
                "patternProperties (more than 64 patterns)",
                path,
            ));
        }
        let mut pat_dfas = Vec::new();
        for (p, _) in pats {
            pat_dfas.push(pattern_dfa(p)?);
        }
        let additional = o.additional_properties.clone().unwrap_or(Schema::Any);
        // The value schema for a key: its `properties` entry (or `additionalProperties` when it
        // matches no pattern) merged with every matching pattern's schema.
        let value_schema = |name: &str, own: Option<&Schema>| -> Schema {
            let matching: Vec<&Schema> = pats
                .iter()
                .zip(&pat_dfas)
                .filter(|(_, d)| d.matches(name.as_bytes()))
                .map(|((_, v), _)| v)
                .collect();
            let mut acc = match own {
                Some(v) => v.clone(),
                None if matching.is_empty() => additional.clone(),
                None => Schema::Any,
            };
            for v in matching {
                acc = both_of(acc, v.clone());
            }
            acc
        };
        // Every name the object must track, once each; past `MAX_NAMES` the keyword that
        // added the next is refused at once (a set keeps this linear, whatever the lists'
        // lengths).
        const MAX_NAMES: usize = 1000;
        let mut names: Vec<String> = Vec::new();
        let dep_pairs: &[(String, Vec<String>)] = o.dependent_required.as_deref().unwrap_or(&[]);
        // A pattern of finitely many keys (`^(cdn|Cdn)$`) names them: each is a named member
        // whose value meets the pattern's schema (and any other that matches it), as
        // `value_schema` gives, and the additional keys are split by the other patterns
        // only. Not where the names are in schema order, nor where more names could make an
        // object refused (`not` of its members, dependentRequired beside counts).
        let fixed = self.opts.fixed_property_order;
        let convert = !fixed
            && o.some_member.is_none()
            && (dep_pairs.is_empty() || (o.min_properties.is_none() && o.max_properties.is_none()));
        let mut pattern_words: Vec<String> = Vec::new();
        // The patterns that split the additional keys, by index in `pats`.
        let mut splitting: Vec<usize> = Vec::new();
        for (i, d) in pat_dfas.iter().enumerate() {
            let words = convert
                .then(|| d.words(MAX_PATTERN_WORDS))
                .flatten()
                .and_then(|w| {
                    w.into_iter()
                        .map(String::from_utf8)
                        .collect::<Result<Vec<_>, _>>()
                        .ok()
                });
            match words {
                Some(w) => pattern_words.extend(w),
                None => splitting.push(i),
            }
        }
        let split_dfas: Vec<&Dfa> = splitting.iter().map(|&i| &pat_dfas[i]).collect();
        let mut seen: FxSet<&str> = FxSet::default();
        let listed = props
            .iter()
            .map(|(k, _)| (k, "properties (more than 1000 named)"))
            .chain(
                required
                    .iter()
                    .map(|r| (r, "required (more than 1000 names)")),
            )
            .chain(
                dep_pairs
                    .iter()
                    .flat_map(|(k, v)| std::iter::once(k).chain(v))
                    .map(|r| (r, "dependentRequired (more than 1000 names)")),
            )
            .chain(
                pattern_words
                    .iter()
                    .map(|r| (r, "patternProperties (more than 1000 names)")),
            );
        for (r, keyword) in listed {
            if seen.insert(r.as_str()) {
                if names.len() == MAX_NAMES {
                    return Err(unsupported(keyword, path));
                }
                names.push(r.clone());
            }
        }
        // propertyNames: a filter on the decoded key of every member.
        let key_filter = match &o.property_names {
            None | Some(Schema::Any) => None,
            Some(pn) => Some(self.key_filter(pn, &format!("{path}/propertyNames"))?),
        };
        let colon = self.lit(":");
        // `some_member` (what `not` of `additionalProperties`/`patternProperties` leaves):
        // the keys it may be, and for each named key that may be it, the member whose value
        // also matches its schema.
        let witness = o.some_member.as_deref();
        let one_spelling = names.iter().all(|x| one_encoding(x));
        let literal_names =
            key_filter.is_none() && split_dfas.is_empty() && !names.is_empty() && one_spelling;
        // A witness that only names keys it may not be, beside names that are each one
        // literal: its keys are any key but those and the names, encoded directly
        // (`any_json_key_but`), rather than any content less the witness's names, intersected
        // with any content less the object's, then encoded (three automata per complement of
        // a closed object, most of utam's recursive `selector`).
        let plain_witness = witness.is_some_and(|w| {
            literal_names
                && w.pattern.is_none()
                && w.not_patterns.is_empty()
                && w.not_names.iter().all(|x| one_encoding(x))
        });
        let witness_keys = match witness {
            Some(_) if plain_witness => None,
            Some(w) => {
                let mut k = match &w.pattern {
                    Some(p) => pattern_dfa(p)?,
                    None => Dfa::any_string().clone(),
                };
                if !w.not_names.is_empty() {
                    let words: Vec<&[u8]> = w.not_names.iter().map(|x| x.as_bytes()).collect();
                    k = k.minus(&Dfa::literals(
                        &words,
                        self.opts.limits.max_terminal_states,
                    )?)?;
                }
                for p in &w.not_patterns {
                    k = k.minus(&pattern_dfa(p)?)?;
                }
                Some(k)
            }
            None => None,
        };
        let mut witness_members: Vec<Option<Sym>> = Vec::new();
        let mut members = Vec::new();
        for name in &names {
            if key_filter
                .as_ref()
                .is_some_and(|f| !f.matches(name.as_bytes()))
            {
                // This key is not a valid property name: the member can never appear.
                members.push(Sym::Nt(self.b.nt("forbidden key")));
                witness_members.push(None);
                continue;
            }
            let vs = value_schema(name, named(props, name));
            let vp = format!("{path}/properties/{}", escape_pointer(name));
            let v = self.schema(&vs, &vp)?;
            let key = self.string_literal(name)?;
            let r = self.seq(&[key, colon, v]);
            members.push(self.b.alts(format_args!("{path} member {name}"), vec![r]));
            let witness_takes = |w: &SomeMember| match &witness_keys {
                Some(k) => k.matches(name.as_bytes()),
                None => plain_witness && !w.not_names.contains(name),
            };
            witness_members.push(match witness {
                Some(w) if witness_takes(w) => {
                    let v = self.schema(&both_of(vs, w.value.clone()), &vp)?;
                    let r = self.seq(&[key, colon, v]);
                    Some(
                        self.b
                            .alts(format_args!("{path} witness member {name}"), vec![r]),
                    )
                }
                _ => None,
            });
        }
        // Additional members: keys outside `names`, split by which patterns they match.
        let mut add_alts = Vec::new();
        let mut add_witness_alts = Vec::new();
        let closed = additional == Schema::Never && split_dfas.is_empty();
        let max_states = self.opts.limits.max_terminal_states;
        // Any key but names that are each one literal (no byte with an escape,
        // `literal_names` above): the key's terminal is built from the JSON strings directly,
        // and its content only for a witness that names no more than keys (below).
        // Whether the cells below are JSON strings already (else contents): where each name
        // is written one way only, so that any key but the names is encoded directly.
        let encoded_cells = key_filter.is_none() && witness.is_none() && one_spelling;
        let cells = if closed {
            Vec::new()
        } else if literal_names {
            vec![(None, Vec::new())]
        } else {
            let cells: Vec<(Arc<Dfa>, Vec<usize>)> = match &key_filter {
                // Any key but the names, split by the patterns: the same objects are met
                // again and again (755 splits over the real-world corpus, 140 of them
                // distinct), so the cells are kept process-wide per names and patterns.
                // Without a witness to build, the keys are split as JSON strings: any key
                // but the names (encoded directly, `any_json_key_but`) by each pattern's JSON
                // strings, rather than split as contents and each cell encoded after (the
                // encodings were a fifth of clang-format's compile: 144 names and `^x-`).
                // Exact: an encoding is in both automata when the string it writes is in both
                // languages.
                None => {
                    type Cells = Arc<Vec<(Arc<Dfa>, Vec<usize>)>>;
                    type Key = (Vec<String>, usize, Vec<String>, bool);
                    static MEMO: OnceLock<Kept<Key, Cells>> = OnceLock::new();
                    let mut sorted = names.clone();
                    sorted.sort_unstable();
                    sorted.dedup();
                    let key: Key = (
                        sorted,
                        max_states,
                        splitting.iter().map(|&i| pats[i].0.clone()).collect(),
                        encoded_cells,
                    );
                    let cells = MEMO.get_or_init(|| Kept::new(256)).get_or_try(&key, || {
                        let cells = match encoded_cells {
                            true => {
                                let texts = key.2.clone();
                                match cells_less_names(texts, &split_dfas, &names, max_states)? {
                                    Some(cells) => cells,
                                    None => {
                                        let split: Vec<Dfa> = split_dfas
                                            .iter()
                                            .map(|d| d.json_string())
                                            .collect::<Result<_, _>>()?;
                                        let split: Vec<&Dfa> = split.iter().collect();
                                        let keys = any_json_key_but(&names, max_states)?;
                                        key_cells(&keys, &split, path)?
                                    }
                                }
                            }
                            false => {
                                key_cells(&any_key_but(&names, max_states)?, &split_dfas, path)?
                            }
                        };
                        Ok::<_, Error>(Arc::new(
                            cells.into_iter().map(|(k, m)| (Arc::new(k), m)).collect(),
                        ))
                    })?;
                    Vec::clone(&cells)
                }
                Some(f) => {
                    let others = match names.is_empty() {
                        false => {
                            let words: Vec<&[u8]> = names.iter().map(|x| x.as_bytes()).collect();
                            f.minus(&Dfa::literals(&words, max_states)?)?
                        }
                        true => f.clone(),
                    };
                    key_cells(&others, &split_dfas, path)?
                        .into_iter()
                        .map(|(k, m)| (Arc::new(k), m))
                        .collect()
                }
            };
            cells
                .into_iter()
                .map(|(k, m)| (Some(k), m.into_iter().map(|j| splitting[j]).collect()))
                .collect()
        };
        for (keys, matched) in cells {
            let mut schemas: Vec<Schema> = matched.iter().map(|&i| pats[i].1.clone()).collect();
            let vs = match schemas.len() {
                0 => additional.clone(),
                1 => schemas.swap_remove(0),
                _ => Schema::all_of(schemas),
            };
            if vs == Schema::Never {
                continue;
            }
            let ap = format!("{path}/additionalProperties");
            let v = self.schema(&vs, &ap)?;
            let key = match &keys {
                Some(k) if encoded_cells => self.b.shared_terminal(Arc::clone(k))?,
                Some(k) => self.string_terminal(k)?,
                None => self
                    .b
                    .shared_terminal(any_json_key_but(&names, max_states)?)?,
            };
            if key_filter.is_none() && split_dfas.is_empty() && !names.is_empty() {
                // Any key but the names: its masks are those of any key, less the names.
                let any = Arc::new(Dfa::any_string().json_string()?);
                self.b.minus_names(key, any, &names);
            }
            add_alts.push(self.seq(&[key, colon, v]));
            if let (Some(w), true) = (witness, plain_witness) {
                // `keys` is None here: the names are literals.
                let mut all = names.clone();
                all.extend(w.not_names.iter().cloned());
                let v = self.schema(&both_of(vs.clone(), w.value.clone()), &ap)?;
                let key = self
                    .b
                    .shared_terminal(any_json_key_but(&all, max_states)?)?;
                let any = Arc::new(Dfa::any_string().json_string()?);
                self.b.minus_names(key, any, &all);
                add_witness_alts.push(self.seq(&[key, colon, v]));
            } else if let (Some(w), Some(k)) = (witness, &witness_keys) {
                let wk = match &keys {
                    Some(keys) => keys.intersect(k)?,
                    None => any_key_but(&names, max_states)?.intersect(k)?,
                };
                if !wk.is_empty_language() {
                    let v = self.schema(&both_of(vs, w.value.clone()), &ap)?;
                    let key = self.string_terminal(&wk)?;
                    add_witness_alts.push(self.seq(&[key, colon, v]));
                }
            }
        }
        let add = if add_alts.is_empty() {
            None
        } else {
            Some(self.b.alts(format_args!("{path} additional"), add_alts))
        };
        let add_witness = if add_witness_alts.is_empty() {
            None
        } else {
            Some(
                self.b
                    .alts(format_args!("{path} witness additional"), add_witness_alts),
            )
        };
        let required_set: FxSet<&str> = required.iter().map(String::as_str).collect();
        let is_required: Vec<bool> = names
            .iter()
            .map(|x| required_set.contains(x.as_str()))
            .collect();
        let (open, close, comma) = (self.lit("{"), self.lit("}"), self.lit(","));
        let obj = self.b.nt(format_args!("{path} object"));
        let n = names.len();
        let min_props = o.min_properties.unwrap_or(0);
        let max_props = o.max_properties;
        let big_counts = min_props > 64 || max_props.is_some_and(|x| x > 64 && x < usize::MAX / 2);
        // Any order by bit masks of the names seen (2^n rules at most) while that is small;
        // past that, any order by one loop whose members the chart checks at run time. What
        // only the sets of names can track (some member that must be present, dependentRequired
        // beside counts) keeps them up to `SETS_ONLY_NAMES` names whatever the option.
        let sets_only =
            witness.is_some() || (!dep_pairs.is_empty() && (min_props > 0 || max_props.is_some()));
        let most = match sets_only {
            true => self.opts.max_free_order_properties.max(SETS_ONLY_NAMES),
            false => self.opts.max_free_order_properties,
        };
        let free = !fixed && n <= most.min(16) && !big_counts;
        if witness.is_some() && !free {
            return Err(unsupported(
                "not (additionalProperties) (an object whose members are not tracked by sets \
                 of names: more named properties than any-order bit masks allow, counts above \
                 64 or fixed order)",
                path,
            ));
        }
        if !fixed && !free {
            return self.tracked_object(TrackedObject {
                path,
                obj,
                names: &names,
                is_required,
                members: &members,
                add,
                dep_pairs,
                min_props,
                max_props,
            });
        }
        if !free && !dep_pairs.is_empty() {
            return Err(unsupported(
                "dependentRequired (with fixed property order)",
                path,
            ));
        }
        if big_counts {
            return Err(unsupported("minProperties/maxProperties above 64", path));
        }
        // Counts saturate here: at maxProperties when there is one, else at minProperties.
        let cap = max_props.filter(|&x| x <= 64).unwrap_or(min_props) as u32;
        let may_add = |c: u32| max_props.is_none_or(|x| (c as usize) < x);
        if free {
            // Any order: sets of named properties as bit masks (at most 16 names here).
            let index = |name: &String| names.iter().position(|x| x == name).unwrap_or(0) as u64;
            let deps: Vec<(u64, u64)> = dep_pairs
                .iter()
                .map(|(k, v)| {
                    (
                        index(k),
                        v.iter().map(|x| 1u64 << index(x)).fold(0, |a, b| a | b),
                    )
                })
                .collect();
            let deps_ok = |s: u64| {
                deps.iter()
                    .all(|&(p, need)| s >> p & 1 == 0 || s & need == need)
            };
            let req_mask: u64 = is_required
                .iter()
                .enumerate()
                .filter(|(_, &r)| r)
                .map(|(i, _)| 1u64 << i)
                .sum();
            // rest[(S, c, w)]: after at least one member, with named set S used, c members
            // written (saturated at `cap`) and w whether some member was the witness that
            // `some_member` asks for (always true without one).
            type State = (u64, u32, bool);
            let mut rest: FxMap<State, u32> = FxMap::default();
            let mut todo: Vec<State> = Vec::new();
            let mut get = |b: &mut GrammarBuilder, st: State, todo: &mut Vec<State>| -> u32 {
                let st = (st.0, st.1.min(cap), st.2);
                *rest.entry(st).or_insert_with(|| {
                    todo.push(st);
                    b.nt(format_args!("{path} rest {:b} {} {}", st.0, st.1, st.2))
                })
            };
            let seen0 = witness.is_none();
            // The members that may follow, each with the named bit it sets and whether it is
            // the witness.
            let mut choices: Vec<(Sym, Option<usize>, bool)> = Vec::new();
            for (i, &mem) in members.iter().enumerate() {
                choices.push((mem, Some(i), false));
                if let Some(wm) = witness_members[i] {
                    choices.push((wm, Some(i), true));
                }
            }
            if let Some(a) = add {
                choices.push((a, None, false));
            }
            if let Some(a) = add_witness {
                choices.push((a, None, true));
            }
            if req_mask == 0 && min_props == 0 && seen0 {
                let r = self.seq(&[open, close]);
                self.b.rule(obj, r);
            }
            if may_add(0) {
                for &(mem, bit, w) in &choices {
                    let set = bit.map_or(0, |i| 1u64 << i);
                    let next = get(&mut self.b, (set, 1, seen0 || w), &mut todo);
                    let r = self.seq(&[open, mem, Sym::Nt(next)]);
                    self.b.rule(obj, r);
                }
            }
            while let Some((set, c, seen)) = todo.pop() {
                let nt = get(&mut self.b, (set, c, seen), &mut todo);
                if set & req_mask == req_mask && c as usize >= min_props && deps_ok(set) && seen {
                    let r = self.seq(&[close]);
                    self.b.rule(nt, r);
                }
                if !may_add(c) {
                    continue;
                }
                for &(mem, bit, w) in &choices {
                    if bit.is_some_and(|i| set >> i & 1 == 1) {
                        continue;
                    }
                    let nset = set | bit.map_or(0, |i| 1u64 << i);
                    let next = get(&mut self.b, (nset, c + 1, seen || w), &mut todo);
                    let r = self.seq(&[comma, mem, Sym::Nt(next)]);
                    self.b.rule(nt, r);
                }
            }
        } else {
            // Schema order: f[i][c] considers named property i after c members (saturated
            // at `cap`, at least 1 so that c > 0 says a comma comes first); the additional
            // members come after the named ones, in `tail[c]`. (n + 1) * (cap + 1) rules, not
            // 2^n.
            let cap = cap.max(1);
            let next = |c: u32| (c + 1).min(cap);
            let f: Vec<Vec<u32>> = (0..=n)
                .map(|i| {
                    (0..=cap)
                        .map(|c| self.b.nt(format_args!("{path} ord {i} after {c}")))
                        .collect()
                })
                .collect();
            let tail: Vec<u32> = (0..=cap)
                .map(|c| self.b.nt(format_args!("{path} tail after {c}")))
                .collect();
            for i in 0..n {
                for c in 0..=cap {
                    let fc = f[i][c as usize];
                    if may_add(c) {
                        let mut r = if c > 0 { vec![comma] } else { vec![] };
                        r.extend([members[i], Sym::Nt(f[i + 1][next(c) as usize])]);
                        let r = self.seq(&r);
                        self.b.rule(fc, r);
                    }
                    if !is_required[i] {
                        self.b.rule(fc, vec![Sym::Nt(f[i + 1][c as usize])]);
                    }
                }
            }
            for c in 0..=cap {
                self.b
                    .rule(f[n][c as usize], vec![Sym::Nt(tail[c as usize])]);
                if c as usize >= min_props {
                    let r = self.seq(&[close]);
                    self.b.rule(tail[c as usize], r);
                }
                if let Some(a) = add.filter(|_| may_add(c)) {
                    let mut r = if c > 0 { vec![comma] } else { vec![] };
                    r.extend([a, Sym::Nt(tail[next(c) as usize])]);
                    let r = self.seq(&r);
                    self.b.rule(tail[c as usize], r);
                }
            }
            let r = self.seq(&[open, Sym::Nt(f[0][0])]);
            self.b.rule(obj, r);
        }
        Ok(Sym::Nt(obj))
    }

    /// Objects with members in any order, however many named properties: one loop over "a
    /// member", whose members, separators and end are guarded at prediction by the names
    /// seen and the members counted so far (`grammar::members`), so that the grammar grows
    /// with the number of names, not with their subsets.
    fn tracked_object(&mut self, t: TrackedObject<'_>) -> Result<Sym, Error> {
        let path = t.path;
        let has_counts = t.min_props > 0 || t.max_props.is_some();
        if !t.dep_pairs.is_empty() && has_counts {
            return Err(unsupported(
                "dependentRequired (with minProperties/maxProperties and more named \
                 properties than any-order bit masks allow)",
                path,
            ));
        }
        let index = |name: &String| t.names.iter().position(|x| x == name).unwrap_or(0) as u32;
        let deps: Vec<(u32, Vec<u32>)> = t
            .dep_pairs
            .iter()
            .map(|(k, v)| (index(k), v.iter().map(index).collect()))
            .collect();
        let member_nts: Vec<u32> = t
            .members
            .iter()
            .map(|m| match m {
                Sym::Nt(x) => *x,
                // Every member is a nonterminal (`object` makes one per name).
                _ => self.b.nt("forbidden key"),
            })
            .collect();
        let add_nt = t.add.map(|a| match a {
            Sym::Nt(x) => x,
            _ => self.b.nt("no additional member"),
        });
        let spec = ObjectSpec::new(
            t.names,
            t.is_required,
            deps,
            t.min_props,
            t.max_props,
            member_nts.clone(),
            add_nt,
            t.obj,
        );
        let object = self.b.object_spec(spec);
        for (i, &m) in member_nts.iter().enumerate() {
            self.b.guard_prediction(
                m,
                Guard::Member {
                    object,
                    key: i as u32,
                },
            );
        }
        if let Some(a) = add_nt {
            self.b.guard_prediction(
                a,
                Guard::Member {
                    object,
                    key: ADDITIONAL,
                },
            );
        }
        let more = self.b.nt(format_args!("{path} more members"));
        self.b.rule(more, vec![]);
        self.b.guard_prediction(more, Guard::More { object });
        let end = self.b.nt(format_args!("{path} end"));
        self.b.rule(end, vec![]);
        self.b.guard_prediction(end, Guard::End { object });
        let (open, close, comma) = (self.lit("{"), self.lit("}"), self.lit(","));
        let ms = self.b.nt(format_args!("{path} members"));
        let ms_comma = self.b.nt(format_args!("{path} members and a comma"));
        for &m in member_nts.iter().chain(add_nt.iter()) {
            let r = self.seq(&[open, Sym::Nt(m)]);
            self.b.rule(ms, r);
            let r = self.seq(&[Sym::Nt(ms_comma), Sym::Nt(m)]);
            self.b.rule(ms, r);
        }
        // The guards sit right after the value (no whitespace gap of their own).
        let mut r = self.seq(&[Sym::Nt(ms), comma]);
        r.insert(1, Sym::Nt(more));
        self.b.rule(ms_comma, r);
        for first in [open, Sym::Nt(ms)] {
            let mut r = self.seq(&[first, close]);
            r.insert(1, Sym::Nt(end));
            self.b.rule(t.obj, r);
        }
        Ok(Sym::Nt(t.obj))
    }
}

/// What `Compiler::tracked_object` needs of an object.
struct TrackedObject<'a> {
    path: &'a str,
    obj: u32,
    names: &'a [String],
    is_required: Vec<bool>,
    members: &'a [Sym],
    add: Option<Sym>,
    dep_pairs: &'a [(String, Vec<String>)],
    min_props: usize,
    max_props: Option<usize>,
}

/// Most `patternProperties` entries one object compiles.
const MAX_PATTERNS: usize = 64;
/// Named properties up to which an object that only sets of names can track (`not` of its
/// members, dependentRequired beside counts) is compiled with them, whatever
/// `JsonOptions::max_free_order_properties` says.
const SETS_ONLY_NAMES: usize = 8;
/// Most keys of one pattern that an object names rather than splits its additional keys by.
const MAX_PATTERN_WORDS: usize = 64;
/// Most classes of additional keys (by the set of patterns they match) one object compiles.
const MAX_KEY_CELLS: usize = 64;

/// Any key but `names` (decoded contents): the automaton of an open object's additional keys
/// without `propertyNames`. Objects of one schema, and of the next, name the same properties
/// again (a definition used in many places), and each difference is a product, so the
/// automata are kept per set of names (and state limit, which the names' trie is checked
/// against), process-wide, as string automata are.
fn any_key_but(names: &[String], max_states: usize) -> Result<Dfa, Error> {
    static MEMO: OnceLock<DfaMemo<(Vec<String>, usize)>> = OnceLock::new();
    if names.is_empty() {
        return Ok(Dfa::any_string().clone());
    }
    let d = kept_per_names(&MEMO, names, max_states, |words| {
        Dfa::any_string_but(words, max_states)
    })?;
    Ok(Arc::unwrap_or_clone(d))
}

/// The JSON strings of any key but `names`, each of which has one encoding (its bytes between
/// quotes, [`one_encoding`]): the JSON strings of any content, less those literals. That is
/// the encoding of [`any_key_but`]'s automaton, without building it: the encoding's table has
/// a row per state of the names' trie and per place in an escape, and building it, with the
/// difference beneath it, was most of the first compile of a schema of many open objects
/// (detekt's). Kept per set of names, as `any_key_but`'s automata are. Also any string value
/// but some (`string_automaton`).
pub(super) fn any_json_key_but(names: &[String], max_states: usize) -> Result<Arc<Dfa>, Error> {
    static MEMO: OnceLock<DfaMemo<(Vec<String>, usize)>> = OnceLock::new();
    kept_per_names(&MEMO, names, max_states, |words| {
        let quoted: Vec<Vec<u8>> = words
            .iter()
            .map(|w| [&b"\""[..], w, b"\""].concat())
            .collect();
        let quoted: Vec<&[u8]> = quoted.iter().map(Vec::as_slice).collect();
        Dfa::any_string()
            .json_string()?
            .json_string_but(&quoted, max_states)
    })
}

/// Classes of keys, each with the indices of the patterns its keys match ([`key_cells`]).
type KeyCells = Vec<(Dfa, Vec<usize>)>;

/// The JSON strings of the keys but `names` (each written one way, [`one_encoding`]) split by
/// which of the patterns `texts` (content automata `split`) they match, as [`key_cells`] splits
/// [`any_json_key_but`]: the classes of the patterns alone, over every JSON string, are kept
/// process-wide per list of patterns, and each is then less the names
/// ([`Dfa::json_string_but_pruned`]: rows copied off the names' trie). Splitting any key but
/// the names by each pattern was a product with the names' trie per object, and most of the
/// compile of objects with many names and a pattern (clang-format's 144 names beside `^x-`).
/// `None` where the patterns alone fall into more than [`MAX_KEY_CELLS`] classes (the names
/// may empty some), for the general split.
fn cells_less_names(
    texts: Vec<String>,
    split: &[&Dfa],
    names: &[String],
    max_states: usize,
) -> Result<Option<KeyCells>, Error> {
    type Cells = Arc<KeyCells>;
    static MEMO: OnceLock<Kept<Vec<String>, Option<Cells>>> = OnceLock::new();
    let cells = MEMO.get_or_init(|| Kept::new(256)).get_or_try(&texts, || {
        let encoded: Vec<Dfa> = split
            .iter()
            .map(|d| d.json_string())
            .collect::<Result<_, _>>()?;
        let encoded: Vec<&Dfa> = encoded.iter().collect();
        let every = Dfa::any_string().json_string()?;
        Ok::<_, Error>(match key_cells(&every, &encoded, "") {
            Ok(cells) => Some(Arc::new(cells)),
            Err(Error::UnsupportedKeyword { .. }) => None,
            Err(e) => return Err(e),
        })
    })?;
    let Some(cells) = cells else {
        return Ok(None);
    };
    let quoted: Vec<Vec<u8>> = names
        .iter()
        .map(|w| [&b"\""[..], w.as_bytes(), b"\""].concat())
        .collect();
    let quoted: Vec<&[u8]> = quoted.iter().map(Vec::as_slice).collect();
    let mut out = Vec::with_capacity(cells.len());
    for (cell, matched) in cells.iter() {
        let d = cell.json_string_but_pruned(&quoted, max_states)?;
        if !d.is_empty_language() {
            out.push((d, matched.clone()));
        }
    }
    Ok(Some(out))
}

/// The automaton `build` makes of `names` (sorted, without repeats), kept in `memo` per set of
/// names and state limit.
fn kept_per_names(
    memo: &OnceLock<DfaMemo<(Vec<String>, usize)>>,
    names: &[String],
    max_states: usize,
    build: impl FnOnce(&[&[u8]]) -> Result<Dfa, Error>,
) -> Result<Arc<Dfa>, Error> {
    let memo = memo.get_or_init(|| DfaMemo::new(1024, 1 << 22));
    let mut key = names.to_vec();
    key.sort_unstable();
    key.dedup();
    let key = (key, max_states);
    if let Some(d) = memo.get(&key) {
        return Ok(d);
    }
    let words: Vec<&[u8]> = key.0.iter().map(|x| x.as_bytes()).collect();
    let d = Arc::new(build(&words)?);
    memo.insert(key, &d);
    Ok(d)
}

/// The keys of `keys` split by which of `patterns` they match: each non-empty class once, with
/// the indices of its patterns, in the order of the subsets' bit masks (pattern 0 the lowest
/// bit). A depth-first walk over the patterns drops a class as soon as it is empty, so the
/// work follows the classes that occur (disjoint patterns: one each and the keys matching
/// none), not the 2^n subsets; more than `MAX_KEY_CELLS` classes are refused by name.
pub(super) fn key_cells(
    keys: &Dfa,
    patterns: &[&Dfa],
    path: &str,
) -> Result<Vec<(Dfa, Vec<usize>)>, Error> {
    let mut cells = Vec::new();
    // (next pattern, keys so far, patterns matched so far)
    let mut stack = vec![(0usize, keys.clone(), Vec::new())];
    while let Some((i, k, matched)) = stack.pop() {
        if k.is_empty_language() {
            continue;
        }
        let Some(d) = patterns.get(i) else {
            if cells.len() == MAX_KEY_CELLS {
                return Err(unsupported(
                    "patternProperties (keys in more than 64 classes of matched patterns)",
                    path,
                ));
            }
            cells.push((k, matched));
            continue;
        };
        let mut with = matched.clone();
        with.push(i);
        // Both classes from one exploration of the product; pushed so that the class
        // without pattern `i` is taken first.
        let [without, inside] = k.split_by(d)?;
        stack.push((i + 1, inside, with));
        stack.push((i + 1, without, matched));
    }
    // Lowest bit first: sort by the matched indices read from the highest.
    cells.sort_by(|(_, a), (_, b)| a.iter().rev().cmp(b.iter().rev()));
    Ok(cells)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn same_language(a: &Dfa, b: &Dfa) -> bool {
        a.minus(b).unwrap().is_empty_language() && b.minus(a).unwrap().is_empty_language()
    }

    #[test]
    fn cells_less_names_are_the_split_of_the_keys_but_the_names() {
        // The classes of the patterns alone, each less the names, are the classes of any key
        // but the names split by the patterns: the same cells, in the same order, with the
        // same patterns matched, where a name lies in a class, empties one, or in none.
        let cases: [(&[&str], &[&str]); 6] = [
            (&["^x-"], &["name", "x-a", "other"]),
            (&["^x-", "^y"], &["x-1", "y", "z", "yx-"]),
            (&["^(a|b)$"], &["a", "b"]),
            (&["^[a-c]+$", "b"], &["a", "ab", "cb", "d"]),
            (&["^(?!pattern$).*$"], &["pattern", "type", "items"]),
            (&["é", "^/(html|css)/[^/]+$"], &["é", "/html/x", "/css/"]),
        ];
        for (patterns, names) in cases {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            let dfas: Vec<Dfa> = patterns.iter().map(|p| pattern_dfa(p).unwrap()).collect();
            let split: Vec<&Dfa> = dfas.iter().collect();
            let texts: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
            let new = cells_less_names(texts, &split, &names, 100_000)
                .unwrap()
                .expect("few classes");
            let encoded: Vec<Dfa> = dfas.iter().map(|d| d.json_string().unwrap()).collect();
            let encoded: Vec<&Dfa> = encoded.iter().collect();
            let keys = any_json_key_but(&names, 100_000).unwrap();
            let old = key_cells(&keys, &encoded, "").unwrap();
            assert_eq!(new.len(), old.len(), "{patterns:?} {names:?}");
            for ((a, ma), (b, mb)) in new.iter().zip(&old) {
                assert_eq!(ma, mb, "{patterns:?} {names:?}");
                assert!(same_language(a, b), "{patterns:?} {names:?} {ma:?}");
            }
        }
    }
}
