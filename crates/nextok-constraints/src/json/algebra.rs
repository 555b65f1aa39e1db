//! The algebra of typed schemas: normalising (`allOf`, `$ref` beside other keywords, `not`,
//! `if`, `dependentSchemas` and `unevaluated*` rewritten away), intersecting two schemas
//! exactly or refusing, and a sufficient test for disjointness (for `oneOf`).

use super::schema::{
    invalid, json_eq, named, unsupported, ArrayFacets, Node, ObjectFacets, RefGraph, Schema,
    SomeMember, TypeSet, Values,
};
use serde_json::Value;

use std::sync::Arc;

use super::string::{large_patterns_meet, pattern_dfa};
use crate::dfa::Dfa;
use crate::grammar::{FxMap, FxSet};
use crate::Error;

/// Rewrites `s` so that what is left has no `allOf`, no `not`, no `if`/`then`/`else`, no
/// `dependentSchemas` and no `$ref` beside other assertions (a bare `$ref` stays: it compiles
/// once per target, which is what makes recursion work). `table` holds the reference targets.
pub(super) fn normalize(
    table: &[Schema],
    s: &Schema,
    path: &str,
    depth: usize,
) -> Result<Schema, Error> {
    if depth > 32 {
        return Err(unsupported("$ref", path));
    }
    let Schema::Node(node) = s else {
        return Ok(s.clone());
    };
    let key = (table.as_ptr() as usize, Arc::as_ptr(node) as usize);
    // Known: its normal form; met once before: keep this one.
    let (known, again) = NORMALIZED.with(|m| match m.borrow_mut().as_mut() {
        Some(m) => match m.kept.get(&key) {
            Some((_, n)) => (Some(n.clone()), false),
            None => (None, !m.met.insert(key)),
        },
        None => (None, false),
    });
    if let Some(n) = known {
        return Ok(n);
    }
    let n = ComplementNesting::outside(|| normalize_fresh(table, node, path, depth))?;
    if again {
        NORMALIZED.with(|m| {
            if let Some(m) = m.borrow_mut().as_mut() {
                m.kept.insert(key, (Arc::clone(node), n.clone()));
            }
        });
    }
    Ok(n)
}

thread_local! {
    /// While a compile holds a [`NormalizeMemo`]: the nodes normalised more than once so far,
    /// by the address of their table and their own, with what they normalised to. The algebra
    /// normalises the same definitions again and again as it meets them in other schemas
    /// (web-types.json: 17,140 calls on 2,780 nodes); a node's normal form depends on its table
    /// and itself alone (`path` only names where an error is, and errors are not kept; `depth`
    /// only bounds the work, and a normal form found at one depth is a normal form at any).
    static NORMALIZED: std::cell::RefCell<Option<NormalMemo>> =
        const { std::cell::RefCell::new(None) };
}

/// What [`NORMALIZED`] holds. Only a node met a second time is kept (with the node itself, so
/// that no other node takes its address while its entry stands): keeping every node, most of
/// them met once (the algebra's own intermediate ones), held megabytes that the allocator
/// would have reused, and made schemas of few repeats 5% slower. An address met once may be
/// another node's by the time it is met again; that only keeps the second one a little early.
#[derive(Default)]
struct NormalMemo {
    met: FxSet<(usize, usize)>,
    kept: FxMap<(usize, usize), (Arc<Node>, Schema)>,
    /// The complements of reference targets built so far, by table and target, each with
    /// its context ([`known_complement`]).
    complements: FxMap<(usize, usize), Vec<InContext>>,
    /// Which targets refer back to themselves, by table and target ([`recursive_target`]).
    recursive: FxMap<(usize, usize), bool>,
    /// The references of the last table asked about, by its address.
    graph: Option<(usize, RefGraph)>,
}

/// A complement, with the context it was built among (`None`: every value).
type InContext = (Option<Schema>, Schema);

/// Keeps [`normalize`]'s results on this thread from its making to its drop (the outermost
/// one, where compiles nest): a compile's nodes and table live that long.
pub(super) struct NormalizeMemo {
    outer: bool,
}

impl NormalizeMemo {
    pub(super) fn begin() -> NormalizeMemo {
        NORMALIZED.with(|m| {
            let mut m = m.borrow_mut();
            let outer = m.is_none();
            if outer {
                *m = Some(NormalMemo::default());
            }
            NormalizeMemo { outer }
        })
    }
}

impl Drop for NormalizeMemo {
    fn drop(&mut self) {
        if self.outer {
            NORMALIZED.with(|m| *m.borrow_mut() = None);
        }
    }
}

/// [`normalize`] of `node`, not met before.
fn normalize_fresh(
    table: &[Schema],
    node: &Arc<Node>,
    path: &str,
    depth: usize,
) -> Result<Schema, Error> {
    let mut m = (**node).clone();
    if let Some(inner) = m.not.take() {
        let inner = normalize(table, &inner, &format!("{path}/not"), depth + 1)?;
        let comp = complement(table, &inner, path, depth + 1)?;
        let others = normalize(table, &Schema::node(m), path, depth + 1)?;
        return merge(&comp, &others, path);
    }
    // `unevaluatedProperties`/`unevaluatedItems` see what this schema and its `allOf` and
    // `$ref` subschemas evaluate: once those are merged in, they reduce to
    // `additionalProperties`/`items`. Under `anyOf`/`oneOf` they are kept and distributed
    // into each branch (counting only the chosen branch's evaluations refuses more, never
    // less). Conditionals and `dependentSchemas` evaluate in ways a grammar cannot follow.
    let unevaluated_properties = m.unevaluated_properties.take();
    let unevaluated_items = m.unevaluated_items.take();
    let blocked = m.cond.is_some()
        || m.then.is_some()
        || m.otherwise.is_some()
        || m.dependent_schemas.is_some();
    if unevaluated_properties.is_some() && blocked {
        return Err(unsupported("unevaluatedProperties", path));
    }
    if unevaluated_items.is_some() && (blocked || m.array.contains.is_some()) {
        return Err(unsupported("unevaluatedItems", path));
    }
    // The node's own keywords (all but its branches and reference) come first, so that the
    // branches of each conditional and `allOf` member are met with them at once and those
    // that contradict them are dropped before they multiply (the node is met again at the
    // end, which changes nothing). Without anything to fold in, there is nothing to seed.
    let folds = m.cond.is_some() || m.all_of.is_some() || m.dependent_schemas.is_some();
    let mut acc = if !folds {
        Schema::Any
    } else {
        Schema::node(Node {
            any_of: None,
            one_of: None,
            reference: None,
            all_of: None,
            cond: None,
            then: None,
            otherwise: None,
            dependent_schemas: None,
            ..m.clone()
        })
    };
    // `if`: a fixed outcome, or both outcomes alike, need no complement; otherwise the
    // condition with `then` or its complement with `else`. `then`/`else` without `if` have
    // no effect.
    let (cond, then, otherwise) = (m.cond.take(), m.then.take(), m.otherwise.take());
    if let Some(cond) = cond {
        // A condition written as `not: y` has `y` itself for complement, as written: the
        // complement of its normalised form would be a union of cases (`y`'s property absent,
        // or present and matching) that multiplies with every other conditional's.
        let negated = match &cond {
            Schema::Node(n) if n.only(&["not"]) => n.not.clone(),
            _ => None,
        };
        let cond = normalize(table, &cond, &format!("{path}/if"), depth + 1)?;
        let split = single_property(&cond);
        let applied = match (cond, then, otherwise, split) {
            (_, None, None, _) => None,
            (Schema::Any, t, _, _) => t,
            (Schema::Never, _, e, _) => e,
            (_, Some(t), Some(e), _) if t == e => Some(t),
            // A condition on one property's value alone, `{"properties": {d: X}}`, holds where
            // `d` is absent (and for every non-object), so its branches are three disjoint
            // ones: `d` absent with `then`, `d` present in `X` with `then`, `d` present outside
            // `X` with `else`. A chain of conditionals on one discriminator then meets as one
            // branch per value (the absent case once), not as every subset of conditions that
            // hold together where `d` is absent.
            (_, t, e, Some((d, x))) => {
                let not_x = if_complement(table, &x, path, depth)?;
                let (t, e) = if_outcomes(table, t, e, path, depth)?;
                // A bare `$ref` outcome is inlined: beside the branch's own keywords it could
                // not be merged, and the branches must merge for contradictions to show.
                let (t, e) = (
                    inline(table, &t, path, depth + 1)?,
                    inline(table, &e, path, depth + 1)?,
                );
                let present = |v: Schema| present_property(&d, v, None);
                let absent = absent_property(&d);
                let either = any_of_possible([
                    merge(&absent, &t, path)?,
                    merge(&present(x), &t, path)?,
                    merge(&present(not_x), &e, path)?,
                ]);
                acc = meet(table, &acc, &either, path, depth)?;
                None
            }
            // Otherwise: the condition and `then`, or the condition's complement and `else`
            // (two disjoint branches), when the complement is exact.
            (c, t, e, None) => {
                let nc = match negated {
                    Some(y) => normalize(table, &y, &format!("{path}/if/not"), depth + 1)?,
                    None => if_complement(table, &c, path, depth)?,
                };
                let (t, e) = if_outcomes(table, t, e, path, depth)?;
                let either = any_of_possible([merge(&c, &t, path)?, merge(&nc, &e, path)?]);
                acc = meet(table, &acc, &either, path, depth)?;
                None
            }
        };
        if let Some(a) = applied {
            let a = normalize(table, &a, &format!("{path}/then"), depth + 1)?;
            acc = meet(table, &acc, &a, path, depth)?;
        }
    }
    // dependentSchemas: for each trigger property, either it is absent or it is present and
    // its schema holds; each trigger is a conjunct of two disjoint branches (three, split on
    // the property's values, where triggers constrain one property), met with what is already
    // known so that branches contradicting it (or each other) drop out at once.
    if let Some(ds) = m.dependent_schemas.take() {
        let subs = ds
            .iter()
            .map(|(name, sub)| {
                let at = format!("{path}/dependentSchemas/{name}");
                normalize(table, sub, &at, depth + 1)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        // Triggers whose schemas all constrain one property `d` (`{"properties": {d: X}}`)
        // hold together in as many ways as `d`'s values fall differently in their `X`s, not
        // in every subset of triggers: see `trigger_on_one_property`.
        let discriminators: Vec<Option<(String, Schema)>> =
            subs.iter().map(single_property).collect();
        let shared = |d: &str| {
            discriminators
                .iter()
                .flatten()
                .filter(|(e, _)| e == d)
                .count()
                > 1
        };
        for (((name, _), sub), split) in ds.iter().zip(&subs).zip(&discriminators) {
            let either = match split {
                Some((d, x)) if shared(d) => {
                    trigger_on_one_property(table, name, d, x, path, depth)?
                }
                _ => trigger(name, sub, path)?,
            };
            acc = match meet(table, &acc, &either, path, depth) {
                Err(Error::UnsupportedKeyword { keyword, path: at })
                    if keyword.starts_with("allOf (two anyOf") && at == path =>
                {
                    return Err(unsupported(
                        "dependentSchemas (more than 64 combinations of trigger properties that may hold together)",
                        path,
                    ))
                }
                r => r?,
            };
        }
    }
    // `minContains`/`maxContains` without `contains` have no effect.
    if m.array.contains.is_none() {
        m.array.min_contains = None;
        m.array.max_contains = None;
    }
    if let Some(all) = m.all_of.take() {
        for (i, sub) in all.iter().enumerate() {
            let sub = normalize(table, sub, &format!("{path}/allOf/{i}"), depth + 1)?;
            acc = meet(table, &acc, &sub, path, depth)?;
        }
    }
    if let Some(r) = m.reference.clone() {
        // A `type` beside the reference that every value of the target already has adds
        // nothing (`{"type": "object", "$ref": "#/$defs/node"}` of an object target): the
        // reference stays bare, compiled once per target and complemented as a reference
        // (left as `not` of it inside another complement, where the target is recursive),
        // where inlined it was merged, and complemented, anew at each place.
        if let (Some(t), true) = (m.types, acc == Schema::Any && m.only(&["type", "$ref"])) {
            let bare = Schema::node(Node {
                reference: Some(r.clone()),
                ..Node::default()
            });
            if possible_types_in(table, &bare, depth)
                .intersect(t.complement())
                .is_empty()
            {
                m.types = None;
            }
        }
        let has_other = m.keyword_bits().count_ones() > 1;
        if has_other || acc != Schema::Any {
            let target = table
                .get(r.target)
                .ok_or_else(|| invalid(path, "$ref target not found"))?;
            let target = normalize(table, target, &r.uri, depth + 1)?;
            m.reference = None;
            acc = meet(table, &acc, &target, path, depth)?;
        }
    }
    let out = meet(table, &acc, &Schema::node(m), path, depth)?;
    if unevaluated_properties.is_none() && unevaluated_items.is_none() {
        return Ok(out);
    }
    let mut o = match out {
        Schema::Never => return Ok(Schema::Never),
        Schema::Any => Node::default(),
        Schema::Node(o) => std::sync::Arc::unwrap_or_clone(o),
    };
    let deferred = o.any_of.is_some() || o.one_of.is_some();
    if let Some(v) = unevaluated_properties {
        if deferred {
            o.unevaluated_properties = Some(v);
        } else if o.object.additional_properties.is_none() {
            o.object.additional_properties = Some(v);
        }
    }
    if let Some(v) = unevaluated_items {
        if deferred {
            o.unevaluated_items = Some(v);
        } else if o.array.items.is_none() {
            o.array.items = Some(v);
        }
    }
    Ok(Schema::node(o))
}

/// [`merge`] of two normalised schemas, where two different `$ref`s (which one node cannot
/// hold) are first replaced by their targets, normalised and merged with the keywords beside
/// them. Only a conflict inlines a reference, so a recursive target is expanded once per
/// conflict, not without end.
fn meet(
    table: &[Schema],
    a: &Schema,
    b: &Schema,
    path: &str,
    depth: usize,
) -> Result<Schema, Error> {
    let reference = |s: &Schema| match s {
        Schema::Node(n) => n.reference.clone(),
        _ => None,
    };
    // Two different `oneOf`s, one of branches disjoint once their references are read
    // through (a reference and a string): see [`disjoint_one_of_as_any_of`].
    if let (Schema::Node(x), Schema::Node(y)) = (a, b) {
        if x.one_of.is_some() && y.one_of.is_some() && x.one_of != y.one_of && depth <= 32 {
            for (side, other) in [(x, b), (y, a)] {
                if let Some(side) = disjoint_one_of_as_any_of(table, side, path)? {
                    return meet(table, &side, other, path, depth + 1);
                }
            }
        }
    }
    match (reference(a), reference(b)) {
        (Some(x), Some(y)) if x != y => {
            let a = inline(table, a, path, depth + 1)?;
            let b = inline(table, b, path, depth + 1)?;
            meet(table, &a, &b, path, depth + 1)
        }
        _ => merge(a, b, path),
    }
}

/// [`merge`], where two different `oneOf`s are first told apart with the references of
/// `table` (see [`disjoint_one_of_as_any_of`]): the keywords beside an `anyOf`, its own
/// `oneOf` among them, merged into each branch.
pub(super) fn merge_in(
    table: &[Schema],
    a: &Schema,
    b: &Schema,
    path: &str,
) -> Result<Schema, Error> {
    if let (Schema::Node(x), Schema::Node(y)) = (a, b) {
        if x.one_of.is_some() && y.one_of.is_some() && x.one_of != y.one_of {
            for (side, other) in [(x, b), (y, a)] {
                if let Some(side) = disjoint_one_of_as_any_of(table, side, path)? {
                    return merge(&side, other, path);
                }
            }
        }
    }
    merge(a, b, path)
}

/// `n` with its `oneOf` written as an `anyOf`, where the branches are pairwise disjoint (as
/// [`disjoint`] proves with the references of `table`): exactly one of them holds wherever at
/// least one does. Two different `oneOf`s cannot be merged in one node, but an `anyOf`
/// merges with anything. `None` where the branches are not shown disjoint.
pub(super) fn disjoint_one_of_as_any_of(
    table: &[Schema],
    n: &Node,
    path: &str,
) -> Result<Option<Schema>, Error> {
    let Some(bs) = &n.one_of else {
        return Ok(None);
    };
    let apart = (0..bs.len()).all(|i| (i + 1..bs.len()).all(|j| disjoint(table, &bs[i], &bs[j])));
    if !apart {
        return Ok(None);
    }
    let rest = Schema::node(Node {
        one_of: None,
        ..n.clone()
    });
    let any = Schema::node(Node {
        any_of: Some(bs.clone()),
        ..Node::default()
    });
    merge(&rest, &any, path).map(Some)
}

/// The complement of an `if` condition `c` at `path` (`/if`), a refusal naming `if` where it is
/// not exact.
fn if_complement(table: &[Schema], c: &Schema, path: &str, depth: usize) -> Result<Schema, Error> {
    match complement(table, c, &format!("{path}/if"), depth + 1) {
        Ok(nc) => Ok(nc),
        Err(Error::UnsupportedKeyword { .. }) => Err(unsupported("if", path)),
        Err(e) => Err(e),
    }
}

/// The normalised `then` and `else` of a conditional at `path` (either absent: any value).
fn if_outcomes(
    table: &[Schema],
    then: Option<Schema>,
    other: Option<Schema>,
    path: &str,
    depth: usize,
) -> Result<(Schema, Schema), Error> {
    let outcome = |x: Option<Schema>, at: &str| match x {
        Some(x) => normalize(table, &x, &format!("{path}/{at}"), depth + 1),
        None => Ok(Schema::Any),
    };
    Ok((outcome(then, "then")?, outcome(other, "else")?))
}

/// One `dependentSchemas` trigger (`sub` normalised): `name` absent, or present with `sub`
/// holding; two disjoint branches.
fn trigger(name: &str, sub: &Schema, path: &str) -> Result<Schema, Error> {
    let present = merge(
        &object_node(ObjectFacets {
            required: Some(vec![name.to_string()]),
            ..ObjectFacets::default()
        }),
        sub,
        path,
    )?;
    let absent = object_node(ObjectFacets {
        properties: Some(vec![(name.to_string(), Schema::Never)]),
        ..ObjectFacets::default()
    });
    Ok(Schema::node(Node {
        any_of: Some(vec![absent, present]),
        ..Node::default()
    }))
}

/// One `dependentSchemas` trigger whose schema is `{"properties": {d: x}}` (normalised), split
/// on `d` instead of on the trigger: `d` absent (the trigger free, its schema holds), `d`
/// present in `x` (the trigger free), or `d` present outside `x` with the trigger absent.
/// The three are disjoint and together the same values as [`trigger`]'s two, and when several
/// triggers constrain one `d` their branches meet as one per way `d`'s values fall in their
/// `x`s (those that contradict drop out), where the two-branch form would keep every subset
/// of triggers that may hold together while `d` is absent. Where `x` has no exact
/// complement, the two branches of [`trigger`].
fn trigger_on_one_property(
    table: &[Schema],
    name: &str,
    d: &str,
    x: &Schema,
    path: &str,
    depth: usize,
) -> Result<Schema, Error> {
    let at = format!("{path}/dependentSchemas/{name}");
    let not_x = match complement(table, x, &at, depth + 1) {
        Ok(c) => c,
        Err(Error::UnsupportedKeyword { .. }) => {
            let sub = object_node(ObjectFacets {
                properties: Some(vec![(d.to_string(), x.clone())]),
                ..ObjectFacets::default()
            });
            return trigger(name, &sub, path);
        }
        Err(e) => return Err(e),
    };
    let present = |v: Schema, absent: Option<&str>| present_property(d, v, absent);
    let absent = absent_property(d);
    // A branch of no value is left out: `d` in `false`, outside `true`, or present where the
    // trigger, which is `d` itself, is absent.
    let inside = match x {
        Schema::Never => Schema::Never,
        x => present(x.clone(), None),
    };
    let outside = if name == d || not_x == Schema::Never {
        Schema::Never
    } else {
        present(not_x, Some(name))
    };
    Ok(any_of_possible([absent, inside, outside]))
}

/// `s` with its top-level `$ref` replaced by the normalised target merged with the keywords
/// beside it.
fn inline(table: &[Schema], s: &Schema, path: &str, depth: usize) -> Result<Schema, Error> {
    if depth > 32 {
        return Err(unsupported("$ref", path));
    }
    let Schema::Node(n) = s else {
        return Ok(s.clone());
    };
    let Some(r) = &n.reference else {
        return Ok(s.clone());
    };
    let target = table
        .get(r.target)
        .ok_or_else(|| invalid(path, "$ref target not found"))?;
    let target = normalize(table, target, &r.uri, depth + 1)?;
    let mut rest = (**n).clone();
    rest.reference = None;
    meet(table, &target, &Schema::node(rest), path, depth + 1)
}

/// The values a normalised schema does not match, as a schema: `not` pushed down to the
/// keywords (De Morgan: the complement of a conjunction is the union of each keyword's
/// complement, and a keyword that applies to one type is broken only by values of that type).
/// A keyword whose complement no schema here expresses exactly is refused as `not (keyword)`.
pub(super) fn complement(
    table: &[Schema],
    s: &Schema,
    path: &str,
    depth: usize,
) -> Result<Schema, Error> {
    complement_in(table, s, path, depth, None)
}

/// The complement of `s` among the values of `ctx`: a schema that agrees with the complement
/// of `s` on every value `ctx` matches (and may differ elsewhere). The context lets keywords
/// without a general complement be complemented where `ctx` bounds the values: a keyword of a
/// type `ctx` excludes is never broken by a value of `ctx`, and in an object closed by
/// `additionalProperties: false` without patterns, "some property breaks
/// `additionalProperties`/`patternProperties`" is a choice among finitely many named keys.
pub(super) fn complement_in(
    table: &[Schema],
    s: &Schema,
    path: &str,
    depth: usize,
    ctx: Option<&Schema>,
) -> Result<Schema, Error> {
    if depth > 32 {
        return Err(unsupported("not", path));
    }
    let n = match s {
        Schema::Any => return Ok(Schema::Never),
        Schema::Never => return Ok(Schema::Any),
        Schema::Node(n) => n,
    };
    let nesting = ComplementNesting::enter();
    let refuse = |k: &str| Err(unsupported(format!("not ({k})"), path));
    let typed = |t: TypeSet, mut node: Node| {
        node.types = Some(t);
        Schema::node(node)
    };
    let mut branches: Vec<Schema> = Vec::new();
    if let Some(r) = &n.reference {
        let target = table
            .get(r.target)
            .ok_or_else(|| invalid(path, "$ref target not found"))?;
        // Inside another complement, a recursive target's complement is left as `not` of
        // the reference at once: expanded there, it would be expanded again inside itself
        // until its own recursion closed, in a different form for every complement it is
        // met in (utam-page-object's argument and selector, each holding the other), each
        // form compiled on its own. Left as a reference, it is expanded once where it is
        // compiled, the same schema wherever it is met.
        let expand = nesting.top() || !recursive_target(table, r.target);
        match Complementing::enter(r.target).filter(|_| expand) {
            Some(_open) => {
                let c = match known_complement(table, r.target, ctx) {
                    Some(c) => c,
                    None => {
                        let target = normalize(table, target, &r.uri, depth + 1)?;
                        let c = complement_in(table, &target, path, depth + 1, ctx)?;
                        keep_complement(table, r.target, ctx, &c);
                        c
                    }
                };
                branches.push(c);
            }
            // The complement of a recursive target refers to itself: it stays `not` of the
            // reference, expanded one level where it is compiled (its own recursion closing
            // the same way), so the complement is a recursive rule, not an unrolling. Never
            // `not` of a target that is not recursive (those are always expanded).
            None => branches.push(Schema::node(Node {
                not: Some(Schema::node(Node {
                    reference: Some(r.clone()),
                    ..Node::default()
                })),
                ..Node::default()
            })),
        }
    }
    // A value breaks `not: x` when it matches `x`.
    if let Some(x) = &n.not {
        branches.push(normalize(table, x, &format!("{path}/not"), depth + 1)?);
    }
    if let Some(t) = n.types {
        let mut rest = t.complement();
        if t.has(TypeSet::INTEGER) && !t.has(TypeSet::NUMBER) {
            // Numbers that are not integers are outside too.
            rest = TypeSet::NULL
                .union(TypeSet::BOOLEAN)
                .union(TypeSet::STRING)
                .union(TypeSet::ARRAY)
                .union(TypeSet::OBJECT)
                .intersect(rest);
            branches.push(typed(
                TypeSet::NUMBER,
                Node {
                    number: super::schema::NumberFacets {
                        not_integer: true,
                        ..Default::default()
                    },
                    ..Node::default()
                },
            ));
        }
        if !rest.is_empty() {
            branches.push(typed(rest, Node::default()));
        }
    }
    if let Some(vs) = &n.values {
        branches.push(Schema::node(Node {
            excluded: Some(vs.clone()),
            ..Node::default()
        }));
    }
    if let Some(vs) = &n.excluded {
        if !vs.is_empty() {
            branches.push(Schema::node(Node {
                values: Some(vs.clone()),
                ..Node::default()
            }));
        }
    }
    // Matching none of the branches (of `oneOf` too when its branches are pairwise
    // disjoint: exactly one is then the same as at least one).
    for (comb, bs) in [("anyOf", &n.any_of), ("oneOf", &n.one_of)] {
        let Some(bs) = bs else {
            continue;
        };
        let bs = bs
            .iter()
            .enumerate()
            .map(|(i, b)| normalize(table, b, &format!("{path}/{comb}/{i}"), depth + 1))
            .collect::<Result<Vec<_>, Error>>()?;
        let mut acc = match discriminating_keys(table, &bs) {
            // Objects told apart by keys: no case multiplies with another.
            Some(keys) => {
                let mut cases = vec![
                    typed_only(TypeSet::OBJECT.complement()),
                    object_node(ObjectFacets {
                        properties: Some(keys.iter().map(|k| (k.clone(), Schema::Never)).collect()),
                        ..ObjectFacets::default()
                    }),
                ];
                for (i, (b, k)) in bs.iter().zip(&keys).enumerate() {
                    let bp = format!("{path}/{comb}/{i}");
                    let c = complement_in(table, b, &bp, depth + 1, ctx)?;
                    let present = Schema::node(Node {
                        types: Some(TypeSet::OBJECT),
                        ..object_node_facets(ObjectFacets {
                            required: Some(vec![k.clone()]),
                            ..ObjectFacets::default()
                        })
                    });
                    let case = merge(&present, &c, path)?;
                    if case != Schema::Never {
                        cases.push(case);
                    }
                }
                Schema::node(Node {
                    any_of: Some(cases),
                    ..Node::default()
                })
            }
            None => {
                let mut acc = Schema::Any;
                for (i, b) in bs.iter().enumerate() {
                    let bp = format!("{path}/{comb}/{i}");
                    acc = merge(&acc, &complement_in(table, b, &bp, depth + 1, ctx)?, path)?;
                }
                acc
            }
        };
        if comb == "oneOf"
            && !(0..bs.len()).all(|i| (i + 1..bs.len()).all(|j| disjoint(table, &bs[i], &bs[j])))
        {
            // Type by type: where the branches are pairwise disjoint among a type's values,
            // matching none of them is the complement there; where two branches match every
            // value of the type, every value of it matches at least two, so all of them are
            // in the complement. Elsewhere the complement is matching none or two: none, or
            // both branches of some pair that may overlap.
            let mut overlapping = false;
            let ctx_types = ctx.map_or(TypeSet::ALL, |c| possible_types(deref(table, c)));
            let mut pieces = Vec::new();
            for t in JSON_TYPES {
                if ctx_types.intersect(t).is_empty() {
                    continue;
                }
                let relevant: Vec<&Schema> =
                    bs.iter().filter(|b| possible_types(b).has(t)).collect();
                if relevant.iter().filter(|b| total_on(b, t)).count() >= 2 {
                    pieces.push(typed_only(t));
                    continue;
                }
                // Among the context's values, each branch is the branch and the context.
                let relevant: Vec<Schema> = relevant
                    .into_iter()
                    .map(|b| match ctx {
                        Some(c) => merge(b, &read_through(table, c, path), path)
                            .unwrap_or_else(|_| b.clone()),
                        None => b.clone(),
                    })
                    .collect();
                let apart = (0..relevant.len()).all(|i| {
                    (i + 1..relevant.len()).all(|j| {
                        overlap_types(table, &relevant[i], &relevant[j], path)
                            .intersect(t)
                            .is_empty()
                    })
                });
                overlapping |= !apart;
                let piece = merge(&acc, &typed_only(t), path)?;
                if piece != Schema::Never {
                    pieces.push(piece);
                }
            }
            if overlapping {
                for i in 0..bs.len() {
                    for j in i + 1..bs.len() {
                        if !overlap_types(table, &bs[i], &bs[j], path).is_empty() {
                            pieces.push(both_of(bs[i].clone(), bs[j].clone()));
                        }
                    }
                }
                if pieces.len() > 64 {
                    return refuse("oneOf (more than 64 pairs of branches that may overlap)");
                }
            }
            acc = match pieces.len() {
                0 => Schema::Never,
                1 => pieces.swap_remove(0),
                _ => Schema::node(Node {
                    any_of: Some(pieces),
                    ..Node::default()
                }),
            };
        }
        branches.push(acc);
    }
    // The types the context's values can have: a keyword of another type is never broken
    // by them, so its complement is not needed.
    let ctx = ctx.map(|c| deref(table, c));
    let ctx_types = ctx.map_or(TypeSet::ALL, possible_types);
    let ctx_has = |t: TypeSet| !ctx_types.intersect(t).is_empty();
    let ctx_keys = ctx.and_then(|c| ctx_closed_keys(table, c, 0));
    // Some property breaks `additionalProperties` or `patternProperties`: exact in a context
    // whose objects can only hold finitely many named keys.
    let ob = &n.object;
    let open_ended = ob.pattern_properties.is_some()
        || ob
            .additional_properties
            .as_ref()
            .is_some_and(|a| *a != Schema::Any);
    if open_ended && ctx_has(TypeSet::OBJECT) && ctx_keys.is_none() {
        // Objects of the context may hold any key: some member whose key the keyword
        // governs has a value outside its schema.
        let names: Vec<String> = ob
            .properties
            .iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect();
        let patterns: Vec<String> = ob
            .pattern_properties
            .iter()
            .flatten()
            .map(|(p, _)| p.clone())
            .collect();
        let mut governed: Vec<(String, SomeMember, &Schema)> = Vec::new();
        if let Some(a) = &ob.additional_properties {
            let member = SomeMember {
                pattern: None,
                not_names: names,
                not_patterns: patterns,
                value: Schema::Any,
            };
            governed.push(("additionalProperties".to_string(), member, a));
        }
        for (p, v) in ob.pattern_properties.iter().flatten() {
            let member = SomeMember {
                pattern: Some(p.clone()),
                not_names: Vec::new(),
                not_patterns: Vec::new(),
                value: Schema::Any,
            };
            let at = format!("patternProperties/{}", super::resolve::escape_pointer(p));
            governed.push((at, member, v));
        }
        for (at, mut member, v) in governed {
            let vp = format!("{path}/{at}");
            let v = normalize(table, v, &vp, depth + 1)?;
            member.value = complement(table, &v, &vp, depth + 1)?;
            if member.value != Schema::Never {
                branches.push(typed(
                    TypeSet::OBJECT,
                    object_node_facets(ObjectFacets {
                        some_member: Some(Box::new(member)),
                        ..ObjectFacets::default()
                    }),
                ));
            }
        }
    }
    if let (true, true, Some(keys)) = (open_ended, ctx_has(TypeSet::OBJECT), &ctx_keys) {
        let patterns: Vec<(String, Dfa, Schema)> = ob
            .pattern_properties
            .iter()
            .flatten()
            .map(|(p, v)| Ok((p.clone(), pattern_dfa(p)?, v.clone())))
            .collect::<Result<_, Error>>()?;
        let named = |k: &str| ob.properties.as_deref().and_then(|p| named(p, k)).is_some();
        for k in keys {
            let mut applies: Vec<(String, &Schema)> = patterns
                .iter()
                .filter(|(_, d, _)| d.matches(k.as_bytes()))
                .map(|(p, _, v)| {
                    (
                        format!("patternProperties/{}", super::resolve::escape_pointer(p)),
                        v,
                    )
                })
                .collect();
            if !named(k) && applies.is_empty() {
                if let Some(a) = &ob.additional_properties {
                    applies.push(("additionalProperties".to_string(), a));
                }
            }
            // The value of `k` in the context's objects matches the context's schema for it.
            let value_ctx = ctx.and_then(|c| ctx_value(table, c, k, 0));
            for (at, v) in applies {
                let vp = format!("{path}/{at}");
                let v = normalize(table, v, &vp, depth + 1)?;
                let c = complement_in(table, &v, &vp, depth + 1, value_ctx.as_ref())?;
                if c != Schema::Never {
                    branches.push(typed(
                        TypeSet::OBJECT,
                        object_node_facets(ObjectFacets {
                            properties: Some(vec![(k.clone(), c)]),
                            required: Some(vec![k.clone()]),
                            ..ObjectFacets::default()
                        }),
                    ));
                }
            }
        }
    }
    // Some key breaks `propertyNames`: a member whose key is outside the names' language.
    if let (Some(pn), true) = (&ob.property_names, ctx_has(TypeSet::OBJECT)) {
        let pn = normalize(table, pn, &format!("{path}/propertyNames"), depth + 1)?;
        match key_breakers(table, &pn) {
            Some(cases) => branches.extend(
                cases
                    .into_iter()
                    .map(|o| typed(TypeSet::OBJECT, object_node_facets(o))),
            ),
            None => return refuse("propertyNames"),
        }
    }
    // Some present property's dependency is missing.
    if let Some(deps) = &ob.dependent_required {
        for (k, needed) in deps {
            for d in needed {
                branches.push(typed(
                    TypeSet::OBJECT,
                    object_node_facets(ObjectFacets {
                        properties: Some(vec![(d.clone(), Schema::Never)]),
                        required: Some(vec![k.clone()]),
                        ..ObjectFacets::default()
                    }),
                ));
            }
        }
    }
    for (present, k, t) in [
        (n.all_of.is_some(), "allOf", TypeSet::ALL),
        (n.cond.is_some(), "if", TypeSet::ALL),
        (
            n.dependent_schemas.is_some(),
            "dependentSchemas",
            TypeSet::ALL,
        ),
        (
            n.unevaluated_properties.is_some(),
            "unevaluatedProperties",
            TypeSet::ALL,
        ),
        (
            n.unevaluated_items.is_some(),
            "unevaluatedItems",
            TypeSet::ALL,
        ),
        (
            n.number.multiple_of.is_some(),
            "multipleOf",
            TypeSet::NUMBER,
        ),
        (
            n.array.prefix_items.is_some(),
            "prefixItems",
            TypeSet::ARRAY,
        ),
        (
            n.array.min_contains.is_some(),
            "minContains",
            TypeSet::ARRAY,
        ),
        (
            n.array.max_contains.is_some(),
            "maxContains",
            TypeSet::ARRAY,
        ),
        // The context's arrays may all have distinct items already: none breaks it there.
        (
            n.array.unique_items && !ctx.is_some_and(|c| ctx_unique(table, c, 0)),
            "uniqueItems",
            TypeSet::ARRAY,
        ),
        (
            n.object.some_member.is_some(),
            "some member",
            TypeSet::OBJECT,
        ),
    ] {
        if present && ctx_has(t) {
            return refuse(k);
        }
    }
    // Strings.
    let st = &n.string;
    let string = |f: super::schema::StringFacets| {
        typed(
            TypeSet::STRING,
            Node {
                string: f,
                ..Node::default()
            },
        )
    };
    if let Some(m) = st.min_length {
        if m > 0 {
            branches.push(string(super::schema::StringFacets {
                max_length: Some(m - 1),
                ..Default::default()
            }));
        }
    }
    if let Some(m) = st.max_length {
        branches.push(string(super::schema::StringFacets {
            min_length: Some(m.saturating_add(1)),
            ..Default::default()
        }));
    }
    for p in &st.patterns {
        branches.push(string(super::schema::StringFacets {
            not_patterns: vec![p.clone()],
            ..Default::default()
        }));
    }
    // A format's complement among strings: the strings its automaton refuses (a format
    // without one was refused when the schema was read).
    if let Some(f) = &st.format {
        if !super::string::format_complementable(f) && ctx_has(TypeSet::STRING) {
            return refuse(&format!("format {f:?}"));
        }
        branches.push(string(super::schema::StringFacets {
            not_formats: vec![f.clone()],
            ..Default::default()
        }));
    }
    for f in &st.not_formats {
        branches.push(string(super::schema::StringFacets {
            format: Some(f.clone()),
            ..Default::default()
        }));
    }
    for p in &st.not_patterns {
        branches.push(string(super::schema::StringFacets {
            patterns: vec![p.clone()],
            ..Default::default()
        }));
    }
    // Numbers: each bound's complement is the opposite bound.
    let nu = &n.number;
    let number = |f: super::schema::NumberFacets| {
        typed(
            TypeSet::NUMBER,
            Node {
                number: f,
                ..Node::default()
            },
        )
    };
    type Nf = super::schema::NumberFacets;
    if nu.not_integer {
        branches.push(typed(TypeSet::INTEGER, Node::default()));
    }
    if let Some(x) = &nu.minimum {
        branches.push(number(Nf {
            exclusive_maximum: Some(x.clone()),
            ..Nf::default()
        }));
    }
    if let Some(x) = &nu.exclusive_minimum {
        branches.push(number(Nf {
            maximum: Some(x.clone()),
            ..Nf::default()
        }));
    }
    if let Some(x) = &nu.maximum {
        branches.push(number(Nf {
            exclusive_minimum: Some(x.clone()),
            ..Nf::default()
        }));
    }
    if let Some(x) = &nu.exclusive_maximum {
        branches.push(number(Nf {
            minimum: Some(x.clone()),
            ..Nf::default()
        }));
    }
    // Arrays.
    let ar = &n.array;
    let array = |f: super::schema::ArrayFacets| {
        typed(
            TypeSet::ARRAY,
            Node {
                array: f,
                ..Node::default()
            },
        )
    };
    type Af = super::schema::ArrayFacets;
    if let Some(m) = ar.min_items {
        if m > 0 {
            branches.push(array(Af {
                max_items: Some(m - 1),
                ..Af::default()
            }));
        }
    }
    if let Some(m) = ar.max_items {
        branches.push(array(Af {
            min_items: Some(m.saturating_add(1)),
            ..Af::default()
        }));
    }
    // Below, the keywords whose complements recurse into subschemas are complemented only
    // when the context holds values of their type: the others' complements would be dropped
    // at the end anyway, and building them could only refuse.
    if let (Some(items), true) = (&ar.items, ctx_has(TypeSet::ARRAY)) {
        // Some item breaks `items`: it matches the complement.
        let ip = format!("{path}/items");
        let items = normalize(table, items, &ip, depth + 1)?;
        // Every item of the context's arrays matches the context's `items`.
        let item_ctx = ctx.and_then(|c| ctx_items(table, c, 0));
        let c = complement_in(table, &items, &ip, depth + 1, item_ctx.as_ref())?;
        if c != Schema::Never && meets(&c, item_ctx.as_ref(), path) {
            branches.push(array(Af {
                contains: Some(c),
                ..Af::default()
            }));
        }
    }
    if let (Some(c), true) = (&ar.contains, ctx_has(TypeSet::ARRAY)) {
        // No item matches `contains`.
        let cp = format!("{path}/contains");
        let c = normalize(table, c, &cp, depth + 1)?;
        branches.push(array(Af {
            items: Some(complement(table, &c, &cp, depth + 1)?),
            ..Af::default()
        }));
    }
    // Objects.
    let object = |f: ObjectFacets| typed(TypeSet::OBJECT, object_node_facets(f));
    if let Some(m) = ob.min_properties {
        if m > 0 {
            branches.push(object(ObjectFacets {
                max_properties: Some(m - 1),
                ..ObjectFacets::default()
            }));
        }
    }
    if let Some(m) = ob.max_properties {
        branches.push(object(ObjectFacets {
            min_properties: Some(m.saturating_add(1)),
            ..ObjectFacets::default()
        }));
    }
    if let Some(req) = &ob.required {
        // Some required name is missing.
        for k in req {
            branches.push(object(ObjectFacets {
                properties: Some(vec![(k.clone(), Schema::Never)]),
                ..ObjectFacets::default()
            }));
        }
    }
    if let (Some(props), true) = (&ob.properties, ctx_has(TypeSet::OBJECT)) {
        // Some named property is present and breaks its schema.
        for (k, v) in props {
            let kp = format!("{path}/properties/{}", super::resolve::escape_pointer(k));
            let v = normalize(table, v, &kp, depth + 1)?;
            // The value of `k` in the context's objects matches the context's schema for it.
            let value_ctx = ctx.and_then(|c| ctx_value(table, c, k, 0));
            let c = complement_in(table, &v, &kp, depth + 1, value_ctx.as_ref())?;
            if c != Schema::Never && meets(&c, value_ctx.as_ref(), path) {
                branches.push(object(ObjectFacets {
                    properties: Some(vec![(k.clone(), c)]),
                    required: Some(vec![k.clone()]),
                    ..ObjectFacets::default()
                }));
            }
        }
    }
    // Branches of types the context excludes hold no value of the context.
    branches.retain(|b| !possible_types(b).intersect(ctx_types).is_empty());
    Ok(match branches.len() {
        0 => Schema::Never,
        1 => branches.swap_remove(0),
        _ => Schema::node(Node {
            any_of: Some(branches),
            ..Node::default()
        }),
    })
}

/// At most how many values `s` (normalised) matches, where its keywords show them finitely
/// many: an `enum` (less the values its type or `not` of integers refuses), `null`,
/// booleans, objects closed to no member (`{}` alone), or the branches of an `anyOf`/`oneOf`
/// each met with the keywords beside it. A bound, not a count: keywords it does not read
/// only refuse more. `None` where it does not show the values finite.
pub(super) fn value_count_bound(s: &Schema) -> Option<usize> {
    let n = match s {
        Schema::Never => return Some(0),
        Schema::Any => return None,
        Schema::Node(n) => n,
    };
    if let Some(bs) = n.any_of.as_ref().or(n.one_of.as_ref()) {
        // The other combination, if both are there, stays beside the branches.
        let rest = Schema::node(match n.any_of {
            Some(_) => Node {
                any_of: None,
                ..(**n).clone()
            },
            None => Node {
                one_of: None,
                ..(**n).clone()
            },
        });
        let mut total = 0usize;
        for b in bs {
            total = total.checked_add(value_count_bound(&merge(b, &rest, "").ok()?)?)?;
        }
        return Some(total);
    }
    let types = n.types.unwrap_or(TypeSet::ALL);
    if let Some(vs) = &n.values {
        let whole = |v: &Value| v.as_f64().is_some_and(|f| f.fract() == 0.0);
        let kept = vs
            .iter()
            .filter(|v| types.admits(v))
            .filter(|v| !(n.number.not_integer && v.is_number() && whole(v)))
            .filter(|v| !n.excluded.iter().flatten().any(|w| json_eq(v, w)));
        return Some(kept.count());
    }
    let mut total = 0;
    for t in [
        TypeSet::INTEGER,
        TypeSet::NUMBER,
        TypeSet::STRING,
        TypeSet::ARRAY,
    ] {
        if types.has(t) {
            return None;
        }
    }
    if types.has(TypeSet::NULL) {
        total += 1;
    }
    if types.has(TypeSet::BOOLEAN) {
        total += 2;
    }
    if types.has(TypeSet::OBJECT) {
        let o = &n.object;
        let empty_only = o.additional_properties == Some(Schema::Never)
            && o.pattern_properties.is_none()
            && o.properties
                .iter()
                .flatten()
                .all(|(_, v)| *v == Schema::Never);
        if !empty_only {
            return None;
        }
        total += 1;
    }
    Some(total)
}

/// Whether some value of the context `ctx` may match `c`: `false` only where the two merge
/// to no value (a complement of an `enum` among the values of that `enum`), or to an `anyOf`
/// each of whose branches contradicts the keywords beside it (the complement of "an integer
/// or `tab`" among integers), so that a case no value of the context reaches is left out
/// rather than compiled.
fn meets(c: &Schema, ctx: Option<&Schema>, path: &str) -> bool {
    let Some(x) = ctx else {
        return true;
    };
    if !(mergeable(c) && mergeable(x)) {
        return true;
    }
    let possible = |s: &Schema| match s {
        Schema::Never => false,
        // Integers that are not integers.
        Schema::Node(n) => !(n.types == Some(TypeSet::INTEGER) && n.number.not_integer),
        Schema::Any => true,
    };
    match merge(c, x, path) {
        Ok(Schema::Node(n)) if n.any_of.is_some() && n.one_of.is_none() => {
            let rest = Schema::node(Node {
                any_of: None,
                ..(*n).clone()
            });
            n.any_of
                .iter()
                .flatten()
                .any(|b| !mergeable(b) || merge(b, &rest, path).map_or(true, |m| possible(&m)))
        }
        Ok(m) => possible(&m),
        Err(_) => true,
    }
}

std::thread_local! {
    /// The reference targets whose complement is being built on this thread, outermost
    /// first (see [`Complementing`]).
    static COMPLEMENTING: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A reference target whose complement is being built: while it lives, the complement of the
/// same target met again inside is left as `not` of the reference (a recursion), instead of
/// being expanded again without end. Kept beside the call stack rather than passed down, so
/// that every path into [`complement_in`] sees it.
struct Complementing;

impl Complementing {
    /// `None` when `target`'s complement is already being built.
    fn enter(target: usize) -> Option<Complementing> {
        COMPLEMENTING.with(|c| {
            let mut c = c.borrow_mut();
            if c.contains(&target) {
                return None;
            }
            c.push(target);
            Some(Complementing)
        })
    }
}

std::thread_local! {
    /// How many [`complement_in`] calls are open on this thread since the innermost
    /// [`normalize`] (see [`ComplementNesting`]).
    static NESTING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One open [`complement_in`] call, counted in [`NESTING`] while it lives. A normal form is
/// made outside any complement ([`ComplementNesting::outside`]), so that what [`normalize`]
/// returns, and keeps, is the same wherever it is asked for.
struct ComplementNesting;

impl ComplementNesting {
    fn enter() -> ComplementNesting {
        NESTING.with(|n| n.set(n.get() + 1));
        ComplementNesting
    }

    /// Whether this call is the outermost complement (not one inside another).
    fn top(&self) -> bool {
        NESTING.with(|n| n.get() == 1)
    }

    /// `f` run as if no complement were open (the count restored after it, however it ends).
    fn outside<T>(f: impl FnOnce() -> T) -> T {
        struct Restore(usize);
        impl Drop for Restore {
            fn drop(&mut self) {
                NESTING.with(|n| n.set(self.0));
            }
        }
        let _restore = Restore(NESTING.with(|n| n.replace(0)));
        f()
    }
}

impl Drop for ComplementNesting {
    fn drop(&mut self) {
        NESTING.with(|n| n.set(n.get() - 1));
    }
}

/// Whether reference target `target` of `table` refers back to itself ([`RefGraph`]), kept
/// for the compile; `false` outside a compile (where nothing is kept).
fn recursive_target(table: &[Schema], target: usize) -> bool {
    NORMALIZED.with(|m| {
        let mut m = m.borrow_mut();
        let Some(m) = m.as_mut() else {
            return false;
        };
        let key = (table.as_ptr() as usize, target);
        if let Some(&r) = m.recursive.get(&key) {
            return r;
        }
        if m.graph.as_ref().is_none_or(|(t, _)| *t != key.0) {
            m.graph = Some((key.0, RefGraph::new(table)));
        }
        let r = m.graph.as_ref().is_some_and(|(_, g)| g.recursive(target));
        m.recursive.insert(key, r);
        r
    })
}

/// The complement of reference target `target` among the values of `ctx` built before in
/// this compile. Kept so that a complement met again is the same schema (the compiler then
/// compiles it once), whatever other complements were open where it was built.
fn known_complement(table: &[Schema], target: usize, ctx: Option<&Schema>) -> Option<Schema> {
    NORMALIZED.with(|m| {
        let m = m.borrow();
        let kept = m
            .as_ref()?
            .complements
            .get(&(table.as_ptr() as usize, target))?;
        kept.iter()
            .find(|(c, _)| c.as_ref() == ctx)
            .map(|(_, s)| s.clone())
    })
}

/// Keeps `c`, the complement of `target` among the values of `ctx`, for [`known_complement`].
fn keep_complement(table: &[Schema], target: usize, ctx: Option<&Schema>, c: &Schema) {
    NORMALIZED.with(|m| {
        if let Some(m) = m.borrow_mut().as_mut() {
            m.complements
                .entry((table.as_ptr() as usize, target))
                .or_default()
                .push((ctx.cloned(), c.clone()));
        }
    });
}

impl Drop for Complementing {
    fn drop(&mut self) {
        COMPLEMENTING.with(|c| {
            c.borrow_mut().pop();
        });
    }
}

/// Exactly one of `branches` (normalised, none `false`): each branch with the complements of
/// the branches it may overlap, so that an instance matching two matches no alternative (a
/// branch equal to another is `false`).
/// `own[i]` is branch `i` as written, before the keywords beside `oneOf` were merged into
/// it (`branches[i]` is `own[i]` and those keywords): among the values of branch `i`, which
/// all match those keywords, branch `j` fails exactly where `own[j]` does, so only `own[j]`
/// is complemented. `Ok(Err(why))` when some complement cannot be built exactly: the keyword
/// and path that stopped it.
///
/// A branch of objects that pins a key to values that other branches pin apart
/// ([`discriminator`]) is split on whether an object holds the key: holding it, it needs no
/// complement of those others (a `oneOf` of twenty such branches merged 380 complements, most
/// of template.json's compile); without it, it needs them all, and usually dies at the first.
pub(super) fn exactly_one(
    table: &[Schema],
    branches: &[Schema],
    own: &[Schema],
    path: &str,
) -> Result<Result<Vec<Schema>, String>, Error> {
    let read = |b: &Schema| read_through(table, b, path);
    let resolved: Vec<Schema> = branches.iter().map(read).collect();
    let own: Vec<Schema> = own.iter().map(read).collect();
    let mut out = Vec::with_capacity(branches.len());
    // A branch equal to another: each of its values matches both, so it has none of its own
    // (`false`), and the others exclude it once.
    let repeated = |i: usize| (0..branches.len()).any(|j| j != i && branches[j] == branches[i]);
    // The types on which two branches may overlap, once per pair: the question is the same
    // both ways (either answer is a superset of the types of their common values), and
    // asking it twice was half the compile of a schema of long `oneOf`s (function.json's).
    let n = branches.len();
    let mut overlaps: Vec<Option<TypeSet>> = vec![None; n * n];
    let mut overlap_of = |i: usize, j: usize| {
        let (lo, hi) = (i.min(j), i.max(j));
        *overlaps[lo * n + hi]
            .get_or_insert_with(|| overlap_types(table, &resolved[lo], &resolved[hi], path))
    };
    // Branch `b` (branch i, or a part of it) without the values of branches `js`.
    let mut without_others = |i: usize, mut b: Schema, js: Vec<usize>| -> Result<Schema, Error> {
        for j in js {
            if matches!(b, Schema::Never) {
                break;
            }
            // Only values of the JSON types on which the two may overlap can match both:
            // branch i keeps its values of the other types as they are, and needs the
            // complement of branch j only among its values of those types.
            let overlap = overlap_of(i, j);
            if overlap.is_empty() {
                continue;
            }
            let rest = possible_types(&resolved[i]).intersect(overlap.complement());
            let ctx = if rest.is_empty() {
                resolved[i].clone()
            } else {
                match merge(&resolved[i], &typed_only(overlap), path) {
                    Ok(c) => c,
                    Err(_) => resolved[i].clone(),
                }
            };
            // Closed objects whose keys never meet share `{}` at most: no complement needed.
            if let Some(c) = complement_of_closed_apart(table, &resolved[i], &resolved[j]) {
                b = merge(&b, &c, path)?;
                continue;
            }
            // Unique arrays of such objects share `[{}]` at most.
            if let Some(c) = complement_of_arrays_apart(table, &resolved[i], &resolved[j]) {
                b = merge(&b, &c, path)?;
                continue;
            }
            // The complement of branch j among branch i's values is all that branch i needs.
            let c = match complement_in(table, &own[j], path, 1, Some(&ctx))? {
                c if !rest.is_empty() && c != Schema::Any => either(typed_only(rest), c),
                c => c,
            };
            b = merge(&b, &c, path)?;
        }
        Ok(b)
    };
    let pins: Vec<Vec<(&str, &[Value])>> = resolved.iter().map(pinned_properties).collect();
    // Whether branch j repeats an earlier one (each branch's complement is taken once).
    let copy: Vec<bool> = (0..n)
        .map(|j| (0..j).any(|k| branches[k] == branches[j]))
        .collect();
    for i in 0..branches.len() {
        if repeated(i) {
            out.push(Schema::Never);
            continue;
        }
        // The branches other than i (a repeated one once), less those `skip` takes.
        let others = |skip: &dyn Fn(usize) -> bool| -> Vec<usize> {
            (0..n).filter(|&j| j != i && !copy[j] && !skip(j)).collect()
        };
        // A discriminator: a property that branch i and others pin to values apart. An object
        // of branch i holding it matches none of those others, so it needs only the other
        // branches' complements; one without it needs them all (and usually dies at the
        // first: `{"properties": {"kind": {"const": "a"}}}` holds for every object without
        // `kind`).
        let split = match discriminator(&pins, i) {
            Some((key, apart)) if possible_types(&resolved[i]) == TypeSet::OBJECT => {
                Some((key, apart))
            }
            _ => None,
        };
        let b = match split {
            None => without_others(i, branches[i].clone(), others(&|_| false)),
            Some((key, apart)) => {
                let with_key = Schema::node(Node {
                    types: Some(TypeSet::OBJECT),
                    object: ObjectFacets {
                        required: Some(vec![key.clone()]),
                        ..ObjectFacets::default()
                    },
                    ..Node::default()
                });
                let without_key = Schema::node(Node {
                    types: Some(TypeSet::OBJECT),
                    object: ObjectFacets {
                        properties: Some(vec![(key.clone(), Schema::Never)]),
                        ..ObjectFacets::default()
                    },
                    ..Node::default()
                });
                let held = merge(&branches[i], &with_key, path)
                    .and_then(|b| without_others(i, b, others(&|j| apart.contains(&j))));
                let required = match &resolved[i] {
                    Schema::Node(m) => m.object.required.iter().flatten().any(|r| *r == key),
                    _ => false,
                };
                let missing = match required {
                    true => Ok(Schema::Never),
                    false => merge(&branches[i], &without_key, path)
                        .and_then(|b| without_others(i, b, others(&|_| false))),
                };
                match (held, missing) {
                    (Ok(Schema::Never), m) => m,
                    (h, Ok(Schema::Never)) => h,
                    (Ok(h), Ok(m)) => Ok(Schema::node(Node {
                        any_of: Some(vec![h, m]),
                        ..Node::default()
                    })),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
        };
        match b {
            Ok(b) => out.push(b),
            Err(Error::UnsupportedKeyword { keyword, path }) => {
                return Ok(Err(format!("{keyword} at {path}")))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Ok(out))
}

/// The properties that `s` pins to values (an `enum` or `const` under `properties`), with
/// those values: whatever else the property's schema says, its values are among them.
fn pinned_properties(s: &Schema) -> Vec<(&str, &[Value])> {
    let Schema::Node(n) = s else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (k, v) in n.object.properties.iter().flatten() {
        if let Schema::Node(m) = v {
            if let Some(vs) = &m.values {
                out.push((k.as_str(), vs.as_slice()));
            }
        }
    }
    out
}

/// A property that branch `i` and other branches pin to values apart (`pins`, per branch,
/// from [`pinned_properties`]), with those branches: of such properties, the one that sets
/// the most branches apart from branch i.
fn discriminator(pins: &[Vec<(&str, &[Value])>], i: usize) -> Option<(String, Vec<usize>)> {
    let mut best: Option<(String, Vec<usize>)> = None;
    for &(key, vs) in &pins[i] {
        let apart_from = |ws: &[Value]| !vs.iter().any(|v| ws.iter().any(|w| json_eq(v, w)));
        let apart: Vec<usize> = (0..pins.len())
            .filter(|&j| j != i && pins[j].iter().any(|&(k, ws)| k == key && apart_from(ws)))
            .collect();
        if !apart.is_empty() && best.as_ref().is_none_or(|(_, b)| apart.len() > b.len()) {
            best = Some((key.to_string(), apart));
        }
    }
    best
}

/// `s` with its references read through, so that it can be compared by what it says: a bare
/// one by its (normalised) target, one beside other keywords (a `type` or `properties` beside
/// a `oneOf`, merged into every branch) by its target merged with them. A reference that
/// cannot be read so stays as it is, which only proves less.
fn read_through(table: &[Schema], b: &Schema, path: &str) -> Schema {
    match deref(table, b) {
        t @ Schema::Node(n) if n.reference.is_none() && !std::ptr::eq(t, b) => {
            normalize(table, t, path, 1).unwrap_or_else(|_| b.clone())
        }
        Schema::Node(n) if n.reference.is_some() => match inline(table, b, path, 1) {
            Ok(Schema::Node(m)) if m.reference.is_some() => b.clone(),
            Ok(s) => s,
            Err(_) => b.clone(),
        },
        _ => b.clone(),
    }
}

/// The values of `a` or `c`: `a` when `c` is `false`, and one `anyOf` when `c` is already
/// one (so that merging it with others multiplies fewer branches).
fn either(a: Schema, c: Schema) -> Schema {
    match c {
        Schema::Never => a,
        Schema::Node(n) if n.only(&["anyOf"]) => {
            let mut all = vec![a];
            all.extend(
                std::sync::Arc::unwrap_or_clone(n)
                    .any_of
                    .into_iter()
                    .flatten(),
            );
            Schema::node(Node {
                any_of: Some(all),
                ..Node::default()
            })
        }
        c => Schema::node(Node {
            any_of: Some(vec![a, c]),
            ..Node::default()
        }),
    }
}

/// The schema of every value of the types in `t`.
pub(super) fn typed_only(t: TypeSet) -> Schema {
    Schema::node(Node {
        types: Some(t),
        ..Node::default()
    })
}

/// The six JSON types, each alone (`number` with the integers).
const JSON_TYPES: [TypeSet; 6] = [
    TypeSet::NULL,
    TypeSet::BOOLEAN,
    TypeSet::NUMBER,
    TypeSet::STRING,
    TypeSet::ARRAY,
    TypeSet::OBJECT,
];

/// The JSON types of which some value may match both `a` and `b` (a superset: a type is left
/// out only when [`disjoint`] proves the two disjoint among its values). Restricting each side
/// to one type lets the tests that need one type hold where the schemas allow several: a
/// discriminator property of two schemas without `type: object` separates their objects,
/// though both match every number.
fn overlap_types(table: &[Schema], a: &Schema, b: &Schema, path: &str) -> TypeSet {
    let both = possible_types_in(table, a, 0).intersect(possible_types_in(table, b, 0));
    if both.is_empty() || disjoint(table, a, b) {
        return TypeSet::EMPTY;
    }
    let (a, b) = (read_through(table, a, path), read_through(table, b, path));
    let mut out = TypeSet::EMPTY;
    for t in JSON_TYPES {
        if !both.has(t) {
            continue;
        }
        let restrict = |s: &Schema| merge(s, &typed_only(t), path);
        let apart = match (restrict(&a), restrict(&b)) {
            (Ok(x), Ok(y)) => disjoint(table, &x, &y),
            _ => false,
        };
        if !apart {
            out = out.union(t);
        }
    }
    out
}

/// Whether only `n`'s types and facets constrain it: no value list or exclusion, reference,
/// combination (`allOf`, `anyOf`, `oneOf`, `not`) or conditional.
fn facets_only(n: &Node) -> bool {
    n.values.is_none()
        && n.excluded.is_none()
        && n.reference.is_none()
        && n.all_of.is_none()
        && n.any_of.is_none()
        && n.one_of.is_none()
        && n.not.is_none()
        && n.cond.is_none()
}

/// Whether `s` (normalised) matches every value of the JSON type `t`: no keyword of it
/// constrains values of that type.
fn total_on(s: &Schema, t: TypeSet) -> bool {
    let n = match s {
        Schema::Any => return true,
        Schema::Never => return false,
        Schema::Node(n) => n,
    };
    let typed = n.types.is_none_or(|x| {
        if t == TypeSet::NUMBER {
            x.has(TypeSet::NUMBER)
        } else {
            x.has(t)
        }
    });
    let plain = facets_only(n);
    let facets = if t == TypeSet::STRING {
        n.string == super::schema::StringFacets::default()
    } else if t == TypeSet::NUMBER {
        n.number == super::schema::NumberFacets::default()
    } else if t == TypeSet::ARRAY {
        n.array == super::schema::ArrayFacets::default() && n.unevaluated_items.is_none()
    } else if t == TypeSet::OBJECT {
        n.object == ObjectFacets::default()
            && n.dependent_schemas.is_none()
            && n.unevaluated_properties.is_none()
    } else {
        true
    };
    typed && plain && facets
}

fn object_node_facets(object: ObjectFacets) -> Node {
    Node {
        object,
        ..Node::default()
    }
}

/// The property and its schema when `s` is `{"properties": {d: X}}` alone (a normalised node
/// with nothing else), as conditions on one discriminator are written.
fn single_property(s: &Schema) -> Option<(String, Schema)> {
    let Schema::Node(n) = s else {
        return None;
    };
    if !n.only(&["properties"]) {
        return None;
    }
    match n.object.properties.as_deref() {
        Some([(d, x)]) => Some((d.clone(), x.clone())),
        _ => None,
    }
}

fn object_node(object: ObjectFacets) -> Schema {
    Schema::node(Node {
        object,
        ..Node::default()
    })
}

/// Objects without property `name` (and any other value).
fn absent_property(name: &str) -> Schema {
    object_node(ObjectFacets {
        properties: Some(vec![(name.to_string(), Schema::Never)]),
        ..ObjectFacets::default()
    })
}

/// Objects that hold property `name`, valid under `v`, and none of `absent`.
fn present_property(name: &str, v: Schema, absent: Option<&str>) -> Schema {
    let mut properties = vec![(name.to_string(), v)];
    properties.extend(absent.map(|k| (k.to_string(), Schema::Never)));
    Schema::node(Node {
        types: Some(TypeSet::OBJECT),
        object: ObjectFacets {
            properties: Some(properties),
            required: Some(vec![name.to_string()]),
            ..ObjectFacets::default()
        },
        ..Node::default()
    })
}

/// The schema of values valid under both, without normalising either. Conjuncts are kept
/// once each (`allOf`s of `allOf`s flattened), so that repeated conjunctions of the same
/// schemas stay equal.
pub(super) fn both_of(a: Schema, b: Schema) -> Schema {
    match (&a, &b) {
        (Schema::Never, _) | (_, Schema::Never) => Schema::Never,
        (Schema::Any, _) => b,
        (_, Schema::Any) => a,
        _ if a == b => a,
        _ => {
            let mut all: Vec<Schema> = Vec::new();
            for s in [a, b] {
                let parts = match s {
                    Schema::Node(n) if n.only(&["allOf"]) => std::sync::Arc::unwrap_or_clone(n)
                        .all_of
                        .unwrap_or_default(),
                    s => vec![s],
                };
                for p in parts {
                    if !all.contains(&p) {
                        all.push(p);
                    }
                }
            }
            if all.len() == 1 {
                all.swap_remove(0)
            } else {
                // Bare references in the order of their targets, after the rest: conjunctions
                // of the same references met in another order (a recursion through several
                // hosts of `patternProperties`, web-types) are then the same schema, so the
                // recursion closes as a rule.
                all.sort_by_key(|s| match s {
                    Schema::Node(n) if n.is_bare_ref() => {
                        (1, n.reference.as_ref().map_or(0, |r| r.target))
                    }
                    _ => (0, 0),
                });
                Schema::all_of(all)
            }
        }
    }
}

/// Whether `s` holds no keyword that [`merge`] needs normalised away first (references,
/// `allOf`, `not`, conditionals, `dependentSchemas`, `unevaluated*`): the conjunction of two
/// such schemas can be merged as it stands.
fn mergeable(s: &Schema) -> bool {
    match s {
        Schema::Any | Schema::Never => true,
        Schema::Node(n) => {
            n.reference.is_none()
                && n.all_of.is_none()
                && n.not.is_none()
                && n.cond.is_none()
                && n.then.is_none()
                && n.otherwise.is_none()
                && n.dependent_schemas.is_none()
                && n.unevaluated_properties.is_none()
                && n.unevaluated_items.is_none()
        }
    }
}

/// The conjunction of two schemas: merged when both can be as they stand (so that a
/// contradiction shows as `false` at once), else [`both_of`]. The same values either way.
fn conj(a: &Schema, b: &Schema, path: &str) -> Schema {
    if mergeable(a) && mergeable(b) {
        if let Ok(m) = merge(a, b, path) {
            return m;
        }
    }
    both_of(a.clone(), b.clone())
}

/// `a` and `b` when they agree (or one is absent); two different values cannot be merged.
fn same<T: PartialEq + Clone>(
    a: &Option<T>,
    b: &Option<T>,
    keyword: &str,
    path: &str,
) -> Result<Option<T>, Error> {
    match (a, b) {
        (Some(x), Some(y)) if x != y => Err(unsupported(
            format!("allOf (two different {keyword})"),
            path,
        )),
        _ => Ok(a.clone().or_else(|| b.clone())),
    }
}

/// The larger of two lower bounds.
fn lower<T: Ord + Clone>(a: &Option<T>, b: &Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y).clone()),
        _ => a.clone().or_else(|| b.clone()),
    }
}

/// The smaller of two upper bounds.
fn upper<T: Ord + Clone>(a: &Option<T>, b: &Option<T>) -> Option<T> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y).clone()),
        _ => a.clone().or_else(|| b.clone()),
    }
}

/// `a`'s items followed by `b`'s that `a` lacks.
/// The `anyOf` of the branches that some value can match: `Never` when none can, the branch
/// itself when one can.
fn any_of_possible(branches: impl IntoIterator<Item = Schema>) -> Schema {
    let mut live: Vec<Schema> = branches
        .into_iter()
        .filter(|b| *b != Schema::Never)
        .collect();
    match live.len() {
        0 => Schema::Never,
        1 => live.remove(0),
        _ => Schema::node(Node {
            any_of: Some(live),
            ..Node::default()
        }),
    }
}

fn union<T: PartialEq + Clone>(a: &[T], b: &[T]) -> Vec<T> {
    let mut out = a.to_vec();
    for x in b {
        if !out.contains(x) {
            out.push(x.clone());
        }
    }
    out
}

/// Named schemas of both sides; a name on both gets both schemas.
fn merge_named(
    a: &Option<Vec<(String, Schema)>>,
    b: &Option<Vec<(String, Schema)>>,
) -> Option<Vec<(String, Schema)>> {
    let (Some(a), Some(b)) = (a, b) else {
        return a.clone().or_else(|| b.clone());
    };
    let mut out = a.clone();
    for (name, s) in b {
        match out.iter_mut().find(|(n, _)| n == name) {
            Some((_, s0)) => *s0 = conj(s0, s, ""),
            None => out.push((name.clone(), s.clone())),
        }
    }
    Some(out)
}

/// Merges two normalised schemas into one whose instances are those valid under both, or
/// reports the keyword that cannot be merged exactly.
pub(super) fn merge(a: &Schema, b: &Schema, path: &str) -> Result<Schema, Error> {
    let (ma, mb) = match (a, b) {
        (Schema::Never, _) | (_, Schema::Never) => return Ok(Schema::Never),
        (Schema::Any, _) => return Ok(b.clone()),
        (_, Schema::Any) => return Ok(a.clone()),
        (Schema::Node(x), Schema::Node(y)) => (x, y),
    };
    // A schema still holding `unevaluated*` (kept for its own anyOf/oneOf) must not see a
    // sibling's evaluations.
    if ma.unevaluated_properties.is_some() || mb.unevaluated_properties.is_some() {
        return Err(unsupported(
            "allOf (unevaluatedProperties under anyOf/oneOf)",
            path,
        ));
    }
    if ma.unevaluated_items.is_some() || mb.unevaluated_items.is_some() {
        return Err(unsupported(
            "allOf (unevaluatedItems under anyOf/oneOf)",
            path,
        ));
    }
    // Two different `oneOf`s, which one node cannot hold: one whose branches are pairwise
    // disjoint says the same as an `anyOf` of them (exactly one holds wherever at least one
    // does), and `anyOf`s merge.
    if let (Some(x), Some(y)) = (&ma.one_of, &mb.one_of) {
        if x != y {
            for (side, other) in [(ma, b), (mb, a)] {
                if let Some(side) = disjoint_one_of_as_any_of(&[], side, path)? {
                    return merge(&side, other, path);
                }
            }
        }
    }
    let types = match (ma.types, mb.types) {
        (Some(x), Some(y)) if x != y => {
            let t = x.intersect(y);
            if t.is_empty() {
                return Ok(Schema::Never);
            }
            Some(t)
        }
        (x, y) => x.or(y),
    };
    let values = match (&ma.values, &mb.values) {
        (Some(x), Some(y)) if x == y => Some(x.clone()),
        (Some(x), Some(y)) => Some(
            x.iter()
                .filter(|v| y.iter().any(|w| json_eq(v, w)))
                .cloned()
                .collect(),
        ),
        (x, y) => x.clone().or_else(|| y.clone()),
    };
    // Values that one side excludes are not allowed; no value allowed is `false`.
    let values = match (values, ma.excluded.iter().chain(&mb.excluded).next()) {
        (Some(vs), Some(_)) => {
            let out: Vec<_> = ma.excluded.iter().chain(&mb.excluded).flatten().collect();
            Some(
                vs.iter()
                    .filter(|v| !out.iter().any(|w| json_eq(v, w)))
                    .cloned()
                    .collect::<Values>(),
            )
        }
        (vs, _) => vs,
    };
    if values.as_ref().is_some_and(|v| v.is_empty()) {
        return Ok(Schema::Never);
    }
    let (sa, sb) = (&ma.string, &mb.string);
    let (na, nb) = (&ma.number, &mb.number);
    let mut out =
        Node {
            types,
            values,
            excluded: match (&ma.excluded, &mb.excluded) {
                (Some(x), Some(y)) => Some(union(x, y).into()),
                (x, y) => x.clone().or_else(|| y.clone()),
            },
            reference: same(&ma.reference, &mb.reference, "$ref", path)?,
            all_of: same(&ma.all_of, &mb.all_of, "allOf", path)?,
            any_of: match (&ma.any_of, &mb.any_of) {
                // Both hold: one branch of each, every pair of them. Pairs that contradict
                // each other are dropped and equal ones kept once, so that a conjunction of
                // many `anyOf`s (the `if`/`then` pairs of one discriminator) stays as small
                // as what it allows; the limit counts what is left.
                (Some(x), Some(y)) if x != y => {
                    if x.len() * y.len() > 4096 {
                        return Err(unsupported(
                            "allOf (two anyOf with more than 4096 combinations)",
                            path,
                        ));
                    }
                    // The keywords beside the two `anyOf`s hold in every pair too: a pair
                    // that contradicts them is dropped as well.
                    let bare = |n: &Node| {
                        Schema::node(Node {
                            any_of: None,
                            ..n.clone()
                        })
                    };
                    let own = conj(&bare(ma), &bare(mb), path);
                    let mut pairs = Vec::new();
                    for p in x {
                        for q in y {
                            let c = conj(p, q, path);
                            if c != Schema::Never
                                && conj(&c, &own, path) != Schema::Never
                                && !pairs.contains(&c)
                            {
                                pairs.push(c);
                            }
                        }
                    }
                    if pairs.is_empty() {
                        return Ok(Schema::Never);
                    }
                    if pairs.len() > 64 {
                        return Err(unsupported(
                            "allOf (two anyOf with more than 64 combinations)",
                            path,
                        ));
                    }
                    Some(pairs)
                }
                (x, y) => x.clone().or_else(|| y.clone()),
            },
            one_of: same(&ma.one_of, &mb.one_of, "oneOf", path)?,
            // Neither of two schemas is "not their union" (a `not` left in a normalised
            // schema is that of a recursive reference, see `Complementing`).
            not: match (&ma.not, &mb.not) {
                (Some(x), Some(y)) if x != y => {
                    let mut any = Vec::new();
                    for s in [x, y] {
                        match s {
                            Schema::Node(n) if n.only(&["anyOf"]) => {
                                any.extend(n.any_of.iter().flatten().cloned())
                            }
                            s => any.push(s.clone()),
                        }
                    }
                    Some(Schema::node(Node {
                        any_of: Some(any),
                        ..Node::default()
                    }))
                }
                (x, y) => x.clone().or_else(|| y.clone()),
            },
            cond: same(&ma.cond, &mb.cond, "if", path)?,
            then: same(&ma.then, &mb.then, "then", path)?,
            otherwise: same(&ma.otherwise, &mb.otherwise, "else", path)?,
            dependent_schemas: same(
                &ma.dependent_schemas,
                &mb.dependent_schemas,
                "dependentSchemas",
                path,
            )?,
            unevaluated_properties: None,
            unevaluated_items: None,
            string: super::schema::StringFacets {
                min_length: lower(&sa.min_length, &sb.min_length),
                max_length: upper(&sa.max_length, &sb.max_length),
                patterns: union(&sa.patterns, &sb.patterns),
                not_patterns: union(&sa.not_patterns, &sb.not_patterns),
                format: same(&sa.format, &sb.format, "format", path)?,
                not_formats: union(&sa.not_formats, &sb.not_formats),
            },
            number: super::schema::NumberFacets {
                minimum: lower(&na.minimum, &nb.minimum),
                maximum: upper(&na.maximum, &nb.maximum),
                exclusive_minimum: lower(&na.exclusive_minimum, &nb.exclusive_minimum),
                exclusive_maximum: upper(&na.exclusive_maximum, &nb.exclusive_maximum),
                not_integer: na.not_integer || nb.not_integer,
                multiple_of: match (&na.multiple_of, &nb.multiple_of) {
                    (Some(x), Some(y)) if x != y => Some(x.lcm(y).ok_or_else(|| {
                        unsupported("allOf (multipleOf with too many digits)", path)
                    })?),
                    (x, y) => x.clone().or_else(|| y.clone()),
                },
            },
            array: ma.array.clone(),
            object: ma.object.clone(),
        };
    merge_arrays(ma, mb, &mut out, path)?;
    merge_objects(&ma.object, &mb.object, &mut out.object, path)?;
    // Objects only, and a required property whose schema is `false`: no value.
    if out.types == Some(TypeSet::OBJECT) {
        let o = &out.object;
        let props = o.properties.as_deref().unwrap_or(&[]);
        if o.required
            .iter()
            .flatten()
            .any(|k| named(props, k) == Some(&Schema::Never))
        {
            return Ok(Schema::Never);
        }
    }
    Ok(Schema::node(out))
}

fn merge_arrays(ma: &Node, mb: &Node, out: &mut Node, path: &str) -> Result<(), Error> {
    let (a, b) = (&ma.array, &mb.array);
    let o = &mut out.array;
    // Position by position, each side's schema is its `prefixItems` entry or else its `items`,
    // so the conjunction is exact element by element.
    if a.prefix_items.is_some()
        || b.prefix_items.is_some()
        || a.items.is_some()
        || b.items.is_some()
    {
        let (pa, pb) = (
            a.prefix_items.as_deref().unwrap_or(&[]),
            b.prefix_items.as_deref().unwrap_or(&[]),
        );
        let items = |x: &super::schema::ArrayFacets| x.items.clone().unwrap_or(Schema::Any);
        let side = |p: &[Schema], x, i: usize| p.get(i).cloned().unwrap_or_else(|| items(x));
        let n = pa.len().max(pb.len());
        let merged: Vec<Schema> = (0..n)
            .map(|i| both_of(side(pa, a, i), side(pb, b, i)))
            .collect();
        o.prefix_items = (n > 0).then_some(merged);
        // An explicit `items: true` stays: it marks every item as evaluated.
        let it = both_of(items(a), items(b));
        o.items = if it == Schema::Any && a.items.is_none() && b.items.is_none() {
            None
        } else {
            Some(it)
        };
    }
    o.unique_items = a.unique_items || b.unique_items;
    o.min_items = lower(&a.min_items, &b.min_items);
    o.max_items = upper(&a.max_items, &b.max_items);
    o.contains = same(&a.contains, &b.contains, "contains", path)?;
    o.min_contains = same(&a.min_contains, &b.min_contains, "minContains", path)?;
    o.max_contains = same(&a.max_contains, &b.max_contains, "maxContains", path)?;
    Ok(())
}

fn merge_objects(
    a: &ObjectFacets,
    b: &ObjectFacets,
    o: &mut ObjectFacets,
    path: &str,
) -> Result<(), Error> {
    // additionalProperties refers to its own schema's properties, so merging it with other
    // property sets changes its meaning.
    let has_pat = a.pattern_properties.is_some() || b.pattern_properties.is_some();
    let add = |x: &ObjectFacets| x.additional_properties.clone().unwrap_or(Schema::Any);
    let shut = |x: &ObjectFacets| {
        x.additional_properties == Some(Schema::Never) && x.pattern_properties.is_none()
    };
    if has_pat && (shut(a) || shut(b)) {
        // One side admits only its named keys, so every key of the conjunction is one of
        // them: each gets that side's schema and every schema the other side applies to it
        // (its `properties` entry and the patterns that match it, or else its
        // `additionalProperties`). No pattern is left.
        let (c, x) = if shut(a) { (a, b) } else { (b, a) };
        let patterns: Vec<(Dfa, &Schema)> = x
            .pattern_properties
            .iter()
            .flatten()
            .map(|(p, v)| Ok((pattern_dfa(p)?, v)))
            .collect::<Result<_, Error>>()?;
        let props = c
            .properties
            .iter()
            .flatten()
            .map(|(k, v)| {
                let mut s = v.clone();
                let own = x.properties.as_deref().and_then(|p| named(p, k));
                let matching: Vec<&Schema> = patterns
                    .iter()
                    .filter(|(d, _)| d.matches(k.as_bytes()))
                    .map(|(_, v)| *v)
                    .collect();
                for o in own.into_iter().chain(matching.iter().copied()) {
                    s = both_of(s, o.clone());
                }
                if own.is_none() && matching.is_empty() {
                    s = both_of(s, add(x));
                }
                (k.clone(), s)
            })
            .collect();
        o.properties = Some(props);
        o.pattern_properties = None;
        o.additional_properties = Some(Schema::Never);
    } else {
        // Each side's view of a key: its `properties` entry, and the patterns that match it,
        // or else (named by neither) its `additionalProperties`. The union of both sides'
        // names and patterns says the same for every key, provided a side with
        // `additionalProperties` knows every pattern of the other side (a key matching only
        // the other side's pattern would lose it), and a key named only by the other side
        // carries this side's `additionalProperties` where none of this side's patterns
        // match it.
        let texts = |x: &ObjectFacets| -> Vec<String> {
            x.pattern_properties
                .iter()
                .flatten()
                .map(|(p, _)| p.clone())
                .collect()
        };
        // A side that names no key and has no pattern gives every key its
        // `additionalProperties`: that schema is folded into the other side's patterns.
        let uniform = |x: &ObjectFacets| {
            x.additional_properties.is_some()
                && x.properties.as_ref().is_none_or(|p| p.is_empty())
                && x.pattern_properties.as_ref().is_none_or(|p| p.is_empty())
        };
        for (x, y) in [(a, b), (b, a)] {
            if x.additional_properties.is_some() && !uniform(x) {
                let own = texts(x);
                if texts(y).iter().any(|p| !own.contains(p)) {
                    return Err(unsupported(
                        "allOf (patternProperties beside another branch's additionalProperties)",
                        path,
                    ));
                }
            }
        }
        // The schema side `x` gives a key that `x` does not name.
        let unnamed = |x: &ObjectFacets, k: &str| -> Result<Schema, Error> {
            let Some(extra) = &x.additional_properties else {
                return Ok(Schema::Any);
            };
            for (p, _) in x.pattern_properties.iter().flatten() {
                if pattern_dfa(p)?.matches(k.as_bytes()) {
                    return Ok(Schema::Any);
                }
            }
            Ok(extra.clone())
        };
        // Each side's properties by name (the first of a repeated name, as `named` finds it):
        // an `allOf` of many objects folds into one whose names number in the hundreds, and
        // a scan per name was quadratic in them.
        fn by_name(x: &ObjectFacets) -> FxMap<&str, &Schema> {
            let n = x.properties.as_ref().map_or(0, Vec::len);
            let mut m: FxMap<&str, &Schema> =
                FxMap::with_capacity_and_hasher(n, Default::default());
            for (k, v) in x.properties.iter().flatten() {
                m.entry(k.as_str()).or_insert(v);
            }
            m
        }
        let (names_a, names_b) = (by_name(a), by_name(b));
        let view =
            |x: &ObjectFacets, names: &FxMap<&str, &Schema>, k: &str| -> Result<Schema, Error> {
                match names.get(k) {
                    Some(s) => Ok(Schema::clone(s)),
                    None => unnamed(x, k),
                }
            };
        // Both sides' names, each once, `a`'s first, in order.
        let all = a
            .properties
            .iter()
            .flatten()
            .map(|(k, _)| k)
            .filter({
                let mut seen =
                    FxSet::<&str>::with_capacity_and_hasher(names_a.len(), Default::default());
                move |k| seen.insert(k.as_str())
            })
            .chain(b.properties.iter().flatten().map(|(k, _)| k).filter({
                let mut seen =
                    FxSet::<&str>::with_capacity_and_hasher(names_b.len(), Default::default());
                let in_a = &names_a;
                move |k| !in_a.contains_key(k.as_str()) && seen.insert(k.as_str())
            }));
        o.properties = if a.properties.is_none() && b.properties.is_none() {
            None
        } else {
            Some(
                all.map(|k| {
                    let (x, y) = (view(a, &names_a, k)?, view(b, &names_b, k)?);
                    Ok((k.clone(), conj(&x, &y, "")))
                })
                .collect::<Result<_, Error>>()?,
            )
        };
        let folded =
            |x: &ObjectFacets, y: &ObjectFacets| match (&y.additional_properties, uniform(y)) {
                (Some(extra), true) => x.pattern_properties.as_ref().map(|ps| {
                    ps.iter()
                        .map(|(p, v)| (p.clone(), conj(v, extra, "")))
                        .collect()
                }),
                _ => x.pattern_properties.clone(),
            };
        o.pattern_properties = merge_named(&folded(a, b), &folded(b, a));
        o.additional_properties = match (&a.additional_properties, &b.additional_properties) {
            (Some(x), Some(y)) => Some(both_of(x.clone(), y.clone())),
            (x, y) => x.clone().or_else(|| y.clone()),
        };
    }
    o.required = match (&a.required, &b.required) {
        (Some(x), Some(y)) => Some(union(x, y)),
        (x, y) => x.clone().or_else(|| y.clone()),
    };
    o.min_properties = lower(&a.min_properties, &b.min_properties);
    o.max_properties = upper(&a.max_properties, &b.max_properties);
    // Both sides' dependencies must hold: the conjunction is the list of both.
    o.dependent_required = match (&a.dependent_required, &b.dependent_required) {
        (Some(x), Some(y)) => Some(union(x, y)),
        (x, y) => x.clone().or_else(|| y.clone()),
    };
    o.property_names = same(&a.property_names, &b.property_names, "propertyNames", path)?;
    o.some_member = match (&a.some_member, &b.some_member) {
        (Some(x), Some(y)) if x != y => {
            Some(Box::new(stronger_member(x, y, o).ok_or_else(|| {
                unsupported("allOf (two different some member)", path)
            })?))
        }
        (x, y) => x.clone().or_else(|| y.clone()),
    };
    Ok(())
}

/// Of two "some member" conditions that must both hold in objects of `o` (the rest of their
/// conjunction), one that implies the other, when one does: the other is then no condition.
/// `y` holds in every object of `o` where a key `o` requires is one of `y`'s keys and `y`
/// asks nothing of its value (the required member is that member), and `x` implies `y`
/// where every member of `x` is one of `y` (each of `x`'s keys is one of `y`'s, and `y` asks
/// nothing of the value or the same as `x`). `None` where neither is shown.
fn stronger_member(x: &SomeMember, y: &SomeMember, o: &ObjectFacets) -> Option<SomeMember> {
    let required = |m: &SomeMember| {
        m.value == Schema::Any
            && o.required
                .iter()
                .flatten()
                .any(|k| member_key(m, k).unwrap_or(false))
    };
    let implies = |p: &SomeMember, q: &SomeMember| {
        (q.value == Schema::Any || p.value == q.value)
            && member_keys(p)
                .and_then(|kp| Some(kp.minus(&member_keys(q)?).ok()?.is_empty_language()))
                .unwrap_or(false)
    };
    if required(y) || implies(x, y) {
        Some(x.clone())
    } else if required(x) || implies(y, x) {
        Some(y.clone())
    } else {
        None
    }
}

/// Whether `k` is one of the keys a "some member" condition looks at (`None` where a pattern
/// does not compile).
fn member_key(m: &SomeMember, k: &str) -> Option<bool> {
    let key = k.as_bytes();
    let mut ok = match &m.pattern {
        Some(p) => pattern_dfa(p).ok()?.matches(key),
        None => true,
    };
    ok &= !m.not_names.iter().any(|n| n == k);
    for p in &m.not_patterns {
        ok &= !pattern_dfa(p).ok()?.matches(key);
    }
    Some(ok)
}

/// The keys a "some member" condition looks at, as an automaton (`None` where one is too
/// large).
fn member_keys(m: &SomeMember) -> Option<Dfa> {
    let mut d = match &m.pattern {
        Some(p) => pattern_dfa(p).ok()?,
        None => Dfa::any_string().clone(),
    };
    if !m.not_names.is_empty() {
        let names: Vec<&[u8]> = m.not_names.iter().map(|n| n.as_bytes()).collect();
        d = d.minus(&Dfa::literals(&names, 4096).ok()?).ok()?;
    }
    for p in &m.not_patterns {
        d = d.minus(&pattern_dfa(p).ok()?).ok()?;
    }
    Some(d)
}

/// The JSON types a (normalised) schema can match, `integer` counted as `number` (a superset:
/// references are not followed). Branches count: an `anyOf` matches only its branches' types,
/// and a `oneOf` none of a type that two of its branches match entirely.
fn possible_types(s: &Schema) -> TypeSet {
    match s {
        Schema::Never => TypeSet::EMPTY,
        Schema::Any => TypeSet::ALL,
        Schema::Node(n) => {
            let mut t = match &n.values {
                Some(vs) => vs
                    .iter()
                    .fold(TypeSet::EMPTY, |t, v| t.union(TypeSet::of(v))),
                None => n.types.unwrap_or(TypeSet::ALL).json_types(),
            };
            let within = |t: TypeSet, u: TypeSet| t.intersect(u);
            for b in n.all_of.iter().flatten() {
                t = within(t, possible_types(b));
            }
            if let Some(bs) = &n.any_of {
                let u = bs
                    .iter()
                    .fold(TypeSet::EMPTY, |u, b| u.union(possible_types(b)));
                t = within(t, u);
            }
            if let Some(bs) = &n.one_of {
                let mut u = bs
                    .iter()
                    .fold(TypeSet::EMPTY, |u, b| u.union(possible_types(b)));
                for x in JSON_TYPES {
                    if bs.iter().filter(|b| total_on(b, x)).count() >= 2 {
                        u = within(u, x.complement());
                    }
                }
                t = within(t, u);
            }
            t
        }
    }
}

/// [`possible_types`] reading bare `$ref`s through, its own and its branches' (to a depth of
/// 8): a `oneOf` of references two of which match every value of a type has no value of it.
fn possible_types_in(table: &[Schema], s: &Schema, depth: usize) -> TypeSet {
    let s = deref(table, s);
    let Schema::Node(n) = s else {
        return possible_types(s);
    };
    if depth > 8 {
        return possible_types(s);
    }
    let within = |bs: &[Schema]| {
        bs.iter().fold(TypeSet::EMPTY, |u, b| {
            u.union(possible_types_in(table, b, depth + 1))
        })
    };
    let mut t = match &n.values {
        Some(_) => possible_types(s),
        None => n.types.unwrap_or(TypeSet::ALL).json_types(),
    };
    for b in n.all_of.iter().flatten() {
        t = t.intersect(possible_types_in(table, b, depth + 1));
    }
    if let Some(bs) = &n.any_of {
        t = t.intersect(within(bs));
    }
    if let Some(bs) = &n.one_of {
        let mut u = within(bs);
        for x in JSON_TYPES {
            if bs.iter().filter(|b| total_on(deref(table, b), x)).count() >= 2 {
                u = u.intersect(x.complement());
            }
        }
        t = t.intersect(u);
    }
    t
}

/// The schema a chain of bare `$ref`s leads to (`s` itself when it is not a bare reference;
/// a chain longer than 32 stops where it is).
fn deref<'s>(table: &'s [Schema], s: &'s Schema) -> &'s Schema {
    let mut s = s;
    for _ in 0..32 {
        match s {
            Schema::Node(n) if n.is_bare_ref() => {
                match n.reference.as_ref().and_then(|r| table.get(r.target)) {
                    Some(t) => s = t,
                    None => return s,
                }
            }
            _ => return s,
        }
    }
    s
}

/// The names an object valid under `s` can hold, when they are finitely many: `s` closes its
/// objects (`additionalProperties: false`, no `patternProperties`), so only its named
/// properties whose schema is not `false` can be present.
fn closed_keys(s: &Schema) -> Option<Vec<String>> {
    let Schema::Node(n) = s else {
        return None;
    };
    let o = &n.object;
    if o.additional_properties != Some(Schema::Never) || o.pattern_properties.is_some() {
        return None;
    }
    Some(
        o.properties
            .iter()
            .flatten()
            .filter(|(_, v)| *v != Schema::Never)
            .map(|(k, _)| k.clone())
            .collect(),
    )
}

/// The branches of a union: a node's `anyOf`, or else its `oneOf` (whose values match at
/// least one branch too). Either is a conjunct of the node, so the values of its branches
/// hold all of the node's values.
fn union_branches(n: &Node) -> Option<&[Schema]> {
    n.any_of.as_deref().or(n.one_of.as_deref())
}

/// Whether no array of the context `ctx` has two equal items, so that no value of it breaks
/// `uniqueItems`: the context says `uniqueItems` itself, has no arrays, or is a union of
/// branches that each do (to a depth of 8).
fn ctx_unique(table: &[Schema], ctx: &Schema, depth: usize) -> bool {
    let s = deref(table, ctx);
    let Schema::Node(n) = s else {
        return *s == Schema::Never;
    };
    if n.array.unique_items
        || n.array.max_items.is_some_and(|m| m <= 1)
        || !possible_types_in(table, s, 0).has(TypeSet::ARRAY)
    {
        return true;
    }
    depth < 8
        && union_branches(n).is_some_and(|bs| bs.iter().all(|b| ctx_unique(table, b, depth + 1)))
}

/// A schema that every item of the context's arrays matches, when one is known: `false`
/// where the context has no arrays, its `items` (without `prefixItems`), or, for a union,
/// the union of its branches' (to a depth of 8). `None`: any value.
fn ctx_items(table: &[Schema], ctx: &Schema, depth: usize) -> Option<Schema> {
    let s = deref(table, ctx);
    let Schema::Node(n) = s else {
        return (*s == Schema::Never).then_some(Schema::Never);
    };
    if !possible_types_in(table, s, 0).has(TypeSet::ARRAY) {
        return Some(Schema::Never);
    }
    let own = match (&n.array.prefix_items, &n.array.items) {
        (None, Some(items)) => Some(items.clone()),
        _ => None,
    };
    if own.is_some() || depth >= 8 {
        return own;
    }
    let parts = union_branches(n)?
        .iter()
        .map(|b| ctx_items(table, b, depth + 1))
        .collect::<Option<Vec<_>>>()?;
    Some(union_of(parts))
}

/// A schema that the value of property `k` matches in every object of the context that holds
/// it, when one is known: `false` where the context has no objects, its `properties` entry,
/// else the schema of a pattern that matches `k`, else its `additionalProperties`; for a
/// union, the union of its branches' where the node itself says nothing of `k` (to a depth
/// of 8). `None`: any value.
fn ctx_value(table: &[Schema], ctx: &Schema, k: &str, depth: usize) -> Option<Schema> {
    let s = deref(table, ctx);
    let Schema::Node(n) = s else {
        return (*s == Schema::Never).then_some(Schema::Never);
    };
    if !possible_types_in(table, s, 0).has(TypeSet::OBJECT) {
        return Some(Schema::Never);
    }
    let o = &n.object;
    let own = match property(n, k) {
        Some(v) => Some(v.clone()),
        None => {
            let by_pattern = o
                .pattern_properties
                .iter()
                .flatten()
                .find(|(p, _)| pattern_dfa(p).is_ok_and(|d| d.matches(k.as_bytes())));
            match (by_pattern, &o.pattern_properties) {
                (Some((_, v)), _) => Some(v.clone()),
                (None, Some(_)) if o.additional_properties.is_none() => None,
                (None, _) => o.additional_properties.clone(),
            }
        }
    };
    if own.as_ref().is_some_and(|v| *v != Schema::Any) || depth >= 8 {
        return own;
    }
    let parts = union_branches(n)?
        .iter()
        .map(|b| ctx_value(table, b, k, depth + 1))
        .collect::<Option<Vec<_>>>()?;
    Some(union_of(parts))
}

/// The keys the context's objects can hold, when they are finitely many: none where it has
/// no objects, its named properties where it closes its objects (see [`closed_keys`]), or,
/// for a union, those of all its branches (to a depth of 8).
fn ctx_closed_keys(table: &[Schema], ctx: &Schema, depth: usize) -> Option<Vec<String>> {
    let s = deref(table, ctx);
    let Schema::Node(n) = s else {
        return (*s == Schema::Never).then(Vec::new);
    };
    if !possible_types_in(table, s, 0).has(TypeSet::OBJECT) {
        return Some(Vec::new());
    }
    if let Some(keys) = closed_keys(s) {
        return Some(keys);
    }
    if depth >= 8 {
        return None;
    }
    let mut keys: Vec<String> = Vec::new();
    for b in union_branches(n)? {
        for k in ctx_closed_keys(table, b, depth + 1)? {
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    Some(keys)
}

/// The union of `parts`: `false` for none, the one schema for one, else an `anyOf` of the
/// different ones (`true` when one is).
fn union_of(parts: Vec<Schema>) -> Schema {
    let mut live: Vec<Schema> = Vec::new();
    for p in parts {
        if p == Schema::Any {
            return Schema::Any;
        }
        if p != Schema::Never && !live.contains(&p) {
            live.push(p);
        }
    }
    any_of_possible(live)
}

/// The keys a closed object of `n` (`additionalProperties: false`) can hold, as an automaton:
/// its named properties whose schema is not `false` and its patterns. `None` for an open
/// object, or where an automaton is too large.
fn closed_key_language(n: &Node) -> Option<Dfa> {
    let o = &n.object;
    if o.additional_properties != Some(Schema::Never) {
        return None;
    }
    let names: Vec<&[u8]> = o
        .properties
        .iter()
        .flatten()
        .filter(|(_, v)| *v != Schema::Never)
        .map(|(k, _)| k.as_bytes())
        .collect();
    let mut d = if names.is_empty() {
        Dfa::empty()
    } else {
        Dfa::literals(&names, 4096).ok()?
    };
    for (p, _) in o.pattern_properties.iter().flatten() {
        d = d.union(&pattern_dfa(p).ok()?).ok()?;
    }
    Some(d)
}

/// Whether `{}` matches `s`: `Some` where its keywords decide it, bare references read
/// through and `allOf`/`anyOf`/`oneOf` by their branches (to a depth of 8: travis's
/// notification settings, a `oneOf` of a string, an object of one optional `secure` key or
/// an array, match it once); `None` where anything else would have to be read.
fn accepts_empty_object(table: &[Schema], s: &Schema, depth: usize) -> Option<bool> {
    let n = match deref(table, s) {
        Schema::Any => return Some(true),
        Schema::Never => return Some(false),
        Schema::Node(n) => n,
    };
    let o = &n.object;
    if n.types.is_some_and(|t| !t.has(TypeSet::OBJECT))
        || o.required.as_ref().is_some_and(|r| !r.is_empty())
        || o.min_properties.is_some_and(|m| m > 0)
        || o.some_member.is_some()
    {
        return Some(false);
    }
    let own_decided = n.values.is_none()
        && n.excluded.is_none()
        && n.reference.is_none()
        && n.not.is_none()
        && n.cond.is_none()
        && n.dependent_schemas.is_none()
        && n.unevaluated_properties.is_none();
    let combined = n.all_of.is_some() || n.any_of.is_some() || n.one_of.is_some();
    if !own_decided || (combined && depth >= 8) {
        return None;
    }
    let each = |bs: &[Schema]| -> Option<Vec<bool>> {
        (bs.iter())
            .map(|b| accepts_empty_object(table, b, depth + 1))
            .collect()
    };
    if let Some(bs) = &n.all_of {
        if !each(bs)?.into_iter().all(|x| x) {
            return Some(false);
        }
    }
    if let Some(bs) = &n.any_of {
        if !each(bs)?.into_iter().any(|x| x) {
            return Some(false);
        }
    }
    if let Some(bs) = &n.one_of {
        if each(bs)?.into_iter().filter(|&x| x).count() != 1 {
            return Some(false);
        }
    }
    Some(true)
}

/// Where every value of `a` that `b` may match is an object, and no object but `{}` can
/// match both: `b`'s complement among `a`'s values, which share only `{}` with `b`.
/// `{"minProperties": 1}` where `b` matches `{}`, `true` where it does not; `None` where this
/// does not decide it. Objects share only `{}` where both close their objects and no key can
/// be in objects of both (`a`'s and `b`'s keys, names and patterns, never the same), or where
/// one side closes its objects to named properties each of whose values the other side
/// never gives that key (`{"esmodules": boolean}` against objects whose every value is a
/// string or a number).
fn complement_of_closed_apart(table: &[Schema], a: &Schema, b: &Schema) -> Option<Schema> {
    let (Schema::Node(na), Schema::Node(nb)) = (a, b) else {
        return None;
    };
    let objects_only = |s: &Schema| possible_types_in(table, s, 0) == TypeSet::OBJECT;
    if !objects_only(a) && !objects_only(b) {
        return None;
    }
    let keys_apart = || {
        let closed = |n: &Node| n.object.additional_properties == Some(Schema::Never);
        if !closed(na) || !closed(nb) {
            return false;
        }
        // Named properties alone on both sides (most closed objects): the key languages are
        // the names, and apart when no name is on both sides; the automata of two tries and
        // their product were half of the `oneOf` comparisons of a schema of many closed
        // objects (pyrseas's).
        if na.object.pattern_properties.is_none() && nb.object.pattern_properties.is_none() {
            let names = |n: &Node| -> std::collections::HashSet<String> {
                n.object
                    .properties
                    .iter()
                    .flatten()
                    .filter(|(_, v)| *v != Schema::Never)
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            return names(na).is_disjoint(&names(nb));
        }
        let (Some(ka), Some(kb)) = (closed_key_language(na), closed_key_language(nb)) else {
            return false;
        };
        ka.intersect(&kb).is_ok_and(|d| d.is_empty_language())
    };
    let values_apart = |c: &Node, other: &Schema| {
        let o = &c.object;
        o.additional_properties == Some(Schema::Never)
            && o.pattern_properties.is_none()
            && o.properties
                .iter()
                .flatten()
                .filter(|(_, v)| *v != Schema::Never)
                .all(|(k, v)| ctx_value(table, other, k, 0).is_some_and(|w| disjoint(table, v, &w)))
    };
    if !keys_apart() && !values_apart(na, b) && !values_apart(nb, a) {
        return None;
    }
    Some(match accepts_empty_object(table, b, 0)? {
        true => object_node(ObjectFacets {
            min_properties: Some(1),
            ..ObjectFacets::default()
        }),
        false => Schema::Any,
    })
}

/// Where `a` is `uniqueItems` arrays of at least one item and the arrays of `b` (itself, or
/// the one branch of its `anyOf`/`oneOf` that may be an array) are arrays with `items` alone
/// besides counts, whose items share only `{}` with `a`'s ([`complement_of_closed_apart`]) and
/// take `[{}]`: the arrays of both are `[{}]` at most, so `b`'s complement among `a`'s values
/// is "not `[{}]`": two items or more, or one that is not `{}` (travis's notification
/// lists, closed objects of their own keys, against lists of strings or `{"secure": ...}`).
/// `true` where the items share nothing. `None` where this does not decide it.
fn complement_of_arrays_apart(table: &[Schema], a: &Schema, b: &Schema) -> Option<Schema> {
    let simple = |s: &Schema| -> Option<Arc<Node>> {
        match deref(table, s) {
            Schema::Node(n)
                if n.types == Some(TypeSet::ARRAY)
                    && n.only(&["type", "items", "uniqueItems", "minItems", "maxItems"])
                    && n.array.items.is_some() =>
            {
                Some(n.clone())
            }
            _ => None,
        }
    };
    let na = simple(a)?;
    if !na.array.unique_items || na.array.min_items.unwrap_or(0) == 0 {
        return None;
    }
    // `b`'s arrays: `b` itself, or the one branch of its union that may be an array (the
    // others match no array, so an array matches `b` exactly when it matches that branch).
    let nb = match simple(b) {
        Some(nb) => nb,
        None => {
            let Schema::Node(u) = deref(table, b) else {
                return None;
            };
            if !(u.only(&["anyOf"]) || u.only(&["oneOf"])) {
                return None;
            }
            let branches = union_branches(u)?;
            let mut arrays = branches
                .iter()
                .filter(|x| possible_types_in(table, x, 0).has(TypeSet::ARRAY));
            let (Some(x), None) = (arrays.next(), arrays.next()) else {
                return None;
            };
            simple(x)?
        }
    };
    let item = |n: &Node| n.array.items.as_ref().map(|i| deref(table, i).clone());
    let (ia, ib) = (item(&na)?, item(&nb)?);
    match complement_of_closed_apart(table, &ia, &ib)? {
        // The items share nothing, and `a` has no empty array.
        Schema::Any => Some(Schema::Any),
        // The items share `{}`, which `b`'s items take (else the complement is `true`).
        _ => {
            let b_takes_one =
                nb.array.min_items.unwrap_or(0) <= 1 && nb.array.max_items.is_none_or(|m| m >= 1);
            if !b_takes_one {
                return None;
            }
            let two = Schema::node(Node {
                array: ArrayFacets {
                    min_items: Some(2),
                    ..ArrayFacets::default()
                },
                ..Node::default()
            });
            // One item, not `{}` (one item is unique alone, so no pair of items is compared).
            let not_empty = Schema::node(Node {
                array: ArrayFacets {
                    max_items: Some(1),
                    items: Some(object_node(ObjectFacets {
                        min_properties: Some(1),
                        ..ObjectFacets::default()
                    })),
                    ..ArrayFacets::default()
                },
                ..Node::default()
            });
            Some(Schema::node(Node {
                any_of: Some(vec![two, not_empty]),
                ..Node::default()
            }))
        }
    }
}

/// Whether two schemas can never both match one value (a sufficient test only). Every
/// keyword of a schema is a conjunct, so a test on some of them holds for the whole; bare
/// references are read through, and a schema under `anyOf`/`oneOf` is disjoint from another
/// when each of its branches is.
pub(super) fn disjoint(table: &[Schema], a: &Schema, b: &Schema) -> bool {
    disjoint_at(table, a, b, 0)
}

fn disjoint_at(table: &[Schema], a: &Schema, b: &Schema, depth: usize) -> bool {
    if depth > 16 {
        return false;
    }
    let (a, b) = (deref(table, a), deref(table, b));
    let (na, nb) = match (a, b) {
        (Schema::Never, _) | (_, Schema::Never) => return true,
        (Schema::Node(x), Schema::Node(y)) => (x, y),
        _ => return false,
    };
    let (ta, tb) = (possible_types(a), possible_types(b));
    if ta.intersect(tb).is_empty() {
        return true;
    }
    // A branch holds only with the keywords beside it (a `type` or `required` written once
    // for every branch), so each is compared with them merged in where they merge.
    for (x, other) in [(na, b), (nb, a)] {
        if x.any_of.is_none() && x.one_of.is_none() {
            continue;
        }
        let beside = Schema::node(Node {
            any_of: None,
            one_of: None,
            ..(**x).clone()
        });
        for bs in [&x.any_of, &x.one_of].into_iter().flatten() {
            if bs.iter().all(|br| {
                let br = deref(table, br);
                let within = merge(br, &beside, "").unwrap_or_else(|_| br.clone());
                disjoint_at(table, &within, other, depth + 1)
            }) {
                return true;
            }
        }
    }
    // Every conjunct of an `allOf` holds all of a schema's values.
    for (x, other) in [(na, b), (nb, a)] {
        for c in x.all_of.iter().flatten() {
            if disjoint_at(table, c, other, depth + 1) {
                return true;
            }
        }
    }
    // The node's own keywords are conjuncts beside its `anyOf`/`oneOf`, so the tests below
    // hold whatever branches it has.
    if let (Some(x), Some(y)) = (&na.values, &nb.values) {
        if !x.iter().any(|p| y.iter().any(|q| json_eq(p, q))) {
            return true;
        }
    }
    // Every value one side allows is one the other excludes (`not` of an `enum`).
    for (x, y) in [(na, nb), (nb, na)] {
        if let (Some(vs), Some(out)) = (&x.values, &y.excluded) {
            if vs.iter().all(|v| out.iter().any(|w| json_eq(v, w))) {
                return true;
            }
        }
    }
    // Strings only: no string matches the patterns of both sides (`\.js$` and `\.css$`).
    if ta.intersect(tb) == TypeSet::STRING && patterns_exclusive(na, nb) {
        return true;
    }
    // Every value one side allows is in an `enum` the other is `not` of (a property's schema
    // is normalised only when compiled, so its `not` may still stand).
    for (x, y) in [(na, nb), (nb, na)] {
        if let (Some(vs), Some(Schema::Node(z))) = (&x.values, &y.not) {
            if let Some(out) = z.values.as_ref().filter(|_| z.only(&["enum"])) {
                if vs.iter().all(|v| out.iter().any(|w| json_eq(v, w))) {
                    return true;
                }
            }
        }
    }
    // Arrays: lengths that no array has on both sides, or a position every array of both
    // has (below either side's `minItems`) whose item schemas are disjoint (tuples of other
    // lengths or element types; travis's strings, or at least one closed object).
    if ta == TypeSet::ARRAY && tb == TypeSet::ARRAY {
        let (la, lb) = (length_range(na), length_range(nb));
        if la.0.max(lb.0) > la.1.min(lb.1) {
            return true;
        }
        let both = la.0.max(lb.0);
        let tuples = na.array.prefix_items.iter().chain(&nb.array.prefix_items);
        let positions = tuples.map(Vec::len).max().unwrap_or(0).saturating_add(1);
        for i in 0..both.min(positions) {
            if disjoint_at(table, item_at(na, i), item_at(nb, i), depth + 1) {
                return true;
            }
        }
    }
    // Objects: a property one side requires whose value the two sides' schemas cannot both
    // accept (a discriminator), or that the other side forbids.
    if ta == TypeSet::OBJECT && tb == TypeSet::OBJECT {
        for (x, y) in [(na, nb), (nb, na)] {
            for k in x.object.required.as_deref().unwrap_or(&[]) {
                let px = value_schema(x, k);
                let py = value_schema(y, k);
                if let (Some(px), Some(py)) = (px, py) {
                    if disjoint_at(table, &px, &py, depth + 1) {
                        return true;
                    }
                }
            }
        }
    }
    false
}

/// Whether no string matches every pattern of `a` and of `b` (patterns on both sides, and
/// their automata small enough to intersect; otherwise not proven).
fn patterns_exclusive(a: &Node, b: &Node) -> bool {
    let (pa, pb) = (&a.string.patterns, &b.string.patterns);
    if pa.is_empty() || pb.is_empty() {
        return false;
    }
    let mut all = pa.iter().chain(pb.iter().filter(|p| !pa.contains(p)));
    // A large pattern's automaton need not be built to tell it apart from another one (and
    // a string value of it is built when first reached, `defer_large_patterns`).
    let listed: Vec<&str> = all.clone().map(String::as_str).collect();
    if let Some(meet) = large_patterns_meet(&listed) {
        return !meet;
    }
    let Some(first) = all.next() else {
        return false;
    };
    let Ok(mut d) = pattern_dfa(first) else {
        return false;
    };
    for p in all {
        match pattern_dfa(p).and_then(|e| d.intersect(&e)) {
            Ok(e) => d = e,
            Err(_) => return false,
        }
    }
    d.is_empty_language()
}

/// The objects with a key that `names` (a `propertyNames` schema) refuses, as cases that
/// together are exactly those objects, where `names` holds only `type`, `enum`/`const`,
/// `pattern` and `not` of an `enum`: a key outside the `enum`'s strings, a key that misses one
/// of the patterns, or one of the excluded names. `None` for other keywords.
fn key_breakers(table: &[Schema], names: &Schema) -> Option<Vec<ObjectFacets>> {
    let member = |not_names: Vec<String>, not_patterns: Vec<String>| ObjectFacets {
        some_member: Some(Box::new(SomeMember {
            pattern: None,
            not_names,
            not_patterns,
            value: Schema::Any,
        })),
        ..ObjectFacets::default()
    };
    let n = match deref(table, names) {
        Schema::Any => return Some(Vec::new()),
        Schema::Never => return Some(vec![member(Vec::new(), Vec::new())]),
        Schema::Node(n) => n,
    };
    if !n.only(&["type", "enum", "pattern", "not enum"]) {
        return None;
    }
    if n.types.is_some_and(|t| !t.has(TypeSet::STRING)) {
        // No key is a valid name: any member breaks it.
        return Some(vec![member(Vec::new(), Vec::new())]);
    }
    let mut cases = Vec::new();
    if let Some(vs) = &n.values {
        let strings = vs.iter().filter_map(|v| v.as_str().map(str::to_string));
        cases.push(member(strings.collect(), Vec::new()));
    }
    for p in &n.string.patterns {
        cases.push(member(Vec::new(), vec![p.clone()]));
    }
    for v in n.excluded.iter().flatten() {
        if let Some(k) = v.as_str() {
            cases.push(ObjectFacets {
                required: Some(vec![k.to_string()]),
                ..ObjectFacets::default()
            });
        }
    }
    Some(cases)
}

/// For branches (normalised) that match only objects, each requiring a key that every other
/// branch forbids, those keys in order: an object matches none of the branches when it holds
/// none of the keys, or holds branch `i`'s key (which every other branch then refuses) and
/// breaks branch `i`. `None` when some branch has no such key.
fn discriminating_keys(table: &[Schema], bs: &[Schema]) -> Option<Vec<String>> {
    if bs.len() < 2 {
        return None;
    }
    let nodes: Vec<&Node> = bs
        .iter()
        .map(|b| match deref(table, b) {
            s @ Schema::Node(n) if possible_types(s) == TypeSet::OBJECT => Some(&**n),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let mut keys = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let forbidden_elsewhere = |k: &String| {
            nodes
                .iter()
                .enumerate()
                .all(|(j, m)| j == i || value_schema(m, k) == Some(Schema::Never))
        };
        keys.push(
            n.object
                .required
                .iter()
                .flatten()
                .find(|k| forbidden_elsewhere(k))?
                .clone(),
        );
    }
    Some(keys)
}

/// The fewest and most items an array of a (normalised) node may hold: `minItems`, and the
/// smaller of `maxItems` and the length of a tuple that admits nothing after it.
fn length_range(n: &Node) -> (usize, usize) {
    let a = &n.array;
    let mut most = a.max_items.unwrap_or(usize::MAX);
    if let (Some(p), Some(Schema::Never)) = (&a.prefix_items, &a.items) {
        most = most.min(p.len());
    }
    (a.min_items.unwrap_or(0), most)
}

/// The schema a (normalised) array node gives its item at `index`: its `prefixItems` entry,
/// or else `items`.
fn item_at(n: &Node, index: usize) -> &Schema {
    let a = &n.array;
    match a.prefix_items.as_ref().and_then(|p| p.get(index)) {
        Some(s) => s,
        None => a.items.as_ref().unwrap_or(&Schema::Any),
    }
}

/// The schema a (normalised) object node gives the value of property `name`, when it is
/// known without patterns: its `properties` entry, or else, where no pattern of
/// `patternProperties` matches the name (swagger's `^x-` beside `$ref`),
/// `additionalProperties`.
pub(super) fn value_schema(n: &Node, name: &str) -> Option<Schema> {
    if let Some(p) = property(n, name) {
        return Some(p.clone());
    }
    for (p, _) in n.object.pattern_properties.iter().flatten() {
        match pattern_dfa(p) {
            Ok(d) if !d.matches(name.as_bytes()) => {}
            _ => return None,
        }
    }
    Some(
        n.object
            .additional_properties
            .clone()
            .unwrap_or(Schema::Any),
    )
}

/// The `properties` entry of `name`.
fn property<'n>(n: &'n Node, name: &str) -> Option<&'n Schema> {
    n.object.properties.as_deref().and_then(|p| named(p, name))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::json::{compile_json_schema, JsonOptions};
    use crate::Error;

    /// Within a compile's [`super::NormalizeMemo`], a node normalised again is answered from
    /// the memo once it has been met twice, with what normalising it afresh gives; outside one
    /// nothing is kept.
    #[test]
    fn normal_forms_are_kept_per_compile_and_equal_fresh_ones() {
        use super::super::schema::{Document, Schema};
        use super::{normalize, NormalizeMemo, NORMALIZED};
        let doc = Document::parse(&json!({
            "$defs": {
                "n": {"type": "integer", "minimum": 0},
                "m": {"allOf": [{"$ref": "#/$defs/n"}, {"maximum": 9}]}
            },
            "allOf": [{"$ref": "#/$defs/m"}, {"not": {"const": 4}}],
            "properties": {"a": {"$ref": "#/$defs/m"}}
        }))
        .unwrap();
        let fresh = normalize(&doc.table, &doc.root, "#", 0).unwrap();
        let kept = || NORMALIZED.with(|m| m.borrow().as_ref().map(|m| m.kept.len()));
        assert_eq!(kept(), None);
        {
            let _memo = NormalizeMemo::begin();
            let inner = NormalizeMemo::begin();
            for _ in 0..3 {
                assert_eq!(normalize(&doc.table, &doc.root, "#", 0).unwrap(), fresh);
            }
            let root = match &doc.root {
                Schema::Node(n) => std::sync::Arc::as_ptr(n) as usize,
                _ => unreachable!("the root has keywords"),
            };
            let key = (doc.table.as_ptr() as usize, root);
            assert!(NORMALIZED.with(|m| m.borrow().as_ref().unwrap().kept.contains_key(&key)));
            // An inner compile's memo ends with it, not the outer one's.
            drop(inner);
            assert!(kept().is_some_and(|n| n > 0));
        }
        assert_eq!(kept(), None);
    }

    /// Which of `texts` the compiled schema accepts.
    fn accepted(schema: Value, texts: &[&str]) -> Vec<bool> {
        let g = compile_json_schema(&schema, &JsonOptions::default()).unwrap();
        texts.iter().map(|t| g.recognizes(t.as_bytes())).collect()
    }

    #[test]
    fn all_of_bounds_take_the_tighter_exact_decimal() {
        // Bounds are exact decimals: the larger minimum and the smaller maximum hold.
        let s = json!({"allOf": [{"minimum": 0.1}, {"minimum": 0.15}, {"maximum": 3}, {"maximum": 2.5}]});
        assert_eq!(
            accepted(s, &["0.1", "0.14", "0.15", "2.5", "2.51", "3"]),
            [false, false, true, true, false, false]
        );
    }

    #[test]
    fn all_of_merges_counts_values_and_dependencies() {
        let counts = json!({"type": "object", "allOf": [{"minProperties": 1}, {"minProperties": 2}, {"maxProperties": 3}]});
        assert_eq!(
            accepted(
                counts,
                &[
                    "{}",
                    r#"{"a":1}"#,
                    r#"{"a":1,"b":2}"#,
                    r#"{"a":1,"b":2,"c":3,"d":4}"#
                ]
            ),
            [false, false, true, false]
        );
        let values = json!({"allOf": [{"enum": [1, 2, 3]}, {"const": 2.0}]});
        assert_eq!(
            accepted(values, &["1", "2", "2.0", "3"]),
            [false, true, true, false]
        );
        // Multiples of 2, 3 and 5 are the multiples of 30.
        let multiples = json!({"type": "integer", "allOf": [{"multipleOf": 2}, {"multipleOf": 3}], "anyOf": [{"multipleOf": 5}]});
        assert_eq!(
            accepted(multiples, &["6", "10", "15", "30", "60", "-90", "45"]),
            [false, false, false, true, true, true, false]
        );
        let deps = json!({"type": "object", "allOf": [
            {"dependentRequired": {"a": ["b"]}},
            {"dependentRequired": {"a": ["c"]}}
        ]});
        assert_eq!(
            accepted(
                deps,
                &[r#"{"a":1,"b":2}"#, r#"{"a":1,"b":2,"c":3}"#, r#"{"b":2}"#]
            ),
            [false, true, true]
        );
    }

    #[test]
    fn all_of_two_references_merges_their_targets() {
        let s = json!({
            "$defs": {
                "a": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
                "b": {"properties": {"y": {"type": "string"}}, "required": ["y"]}
            },
            "allOf": [{"$ref": "#/$defs/a"}, {"$ref": "#/$defs/b"}]
        });
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"x":1,"y":"s"}"#,
                    r#"{"x":1}"#,
                    r#"{"y":"s"}"#,
                    r#"{"x":"s","y":"s"}"#
                ]
            ),
            [true, false, false, false]
        );
        // A recursive target is inlined once at the top; its own references stay rules.
        let s = json!({
            "$defs": {
                "node": {"type": "object",
                         "properties": {"next": {"$ref": "#/$defs/node"}, "v": {"type": "integer"}}},
                "named": {"required": ["name"]}
            },
            "allOf": [{"$ref": "#/$defs/node"}, {"$ref": "#/$defs/named"}]
        });
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"name":1,"next":{"next":{"v":2}}}"#,
                    r#"{"name":1,"next":{"next":{"v":"x"}}}"#,
                    r#"{"next":{}}"#
                ]
            ),
            [true, false, false]
        );
    }

    #[test]
    fn one_of_branches_behind_references_are_compared_by_their_targets() {
        // Disjoint by type once the references are read through.
        let s = json!({
            "$defs": {
                "name": {"type": "string", "minLength": 1},
                "names": {"type": "array", "items": {"$ref": "#/$defs/name"}}
            },
            "oneOf": [{"$ref": "#/$defs/name"}, {"$ref": "#/$defs/names"}]
        });
        assert_eq!(
            accepted(s, &[r#""a""#, r#"["a"]"#, "[]", r#""""#, "1", r#"[""]"#]),
            [true, true, true, false, false, false]
        );
    }

    #[test]
    fn one_of_references_beside_other_keywords_are_read_through() {
        // `type` beside `oneOf` puts a `$ref` beside a keyword in every branch: the targets
        // are still compared, so a closed branch without `version` and one that requires it
        // are disjoint (as in SchemaStore's host.json).
        let s = json!({
            "$defs": {
                "v1": {"type": "object", "additionalProperties": false,
                       "properties": {"a": {"type": "integer"}, "b": {}}},
                "v2": {"type": "object", "additionalProperties": false, "required": ["version"],
                       "properties": {"version": {"type": "string"}, "a": {"type": "string"}}}
            },
            "type": "object",
            "oneOf": [{"$ref": "#/$defs/v1"}, {"$ref": "#/$defs/v2"}]
        });
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"a":1}"#,
                    r#"{"version":"2","a":"x"}"#,
                    "{}",
                    r#"{"version":"2","a":1}"#,
                    r#"{"a":1,"c":2}"#,
                    r#"{"version":2}"#
                ]
            ),
            [true, true, true, false, false, false]
        );
        // Closed branches with a shared key, beside a property that `allOf` adds: each is
        // complemented among the other's finitely many keys, so `{"severity": ..}` alone
        // (valid under every branch) is refused, and one key of its own picks a branch.
        let s = json!({
            "$defs": {
                "p": {"type": "object", "additionalProperties": false,
                      "properties": {"path": {"type": "string"}, "severity": {}}},
                "t": {"type": "object", "additionalProperties": false,
                      "properties": {"text": {"type": "string"}, "severity": {}}}
            },
            "allOf": [
                {"oneOf": [{"$ref": "#/$defs/p"}, {"$ref": "#/$defs/t"}]},
                {"properties": {"severity": {"type": "string"}}}
            ]
        });
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"path":"a"}"#,
                    r#"{"text":"a","severity":"s"}"#,
                    r#"{"severity":"s"}"#,
                    "{}",
                    r#"{"path":"a","text":"b"}"#,
                    r#"{"path":"a","severity":1}"#,
                    r#"{"path":1}"#
                ]
            ),
            [true, true, false, false, false, false, false]
        );
    }

    #[test]
    fn one_of_is_decided_type_by_type() {
        // Untyped branches: among objects the required discriminator `type` separates them;
        // every other value matches the second branch, and the first only when exactly one
        // of its inner branches matches, which for a number both do.
        let s = json!({
            "required": ["type"],
            "oneOf": [
                {"properties": {"type": {"const": "a"}},
                 "oneOf": [{"required": ["x"]}, {"required": ["y"]}]},
                {"properties": {"type": {"const": "b"}}}
            ]
        });
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"type":"a","x":1}"#,
                    r#"{"type":"b"}"#,
                    r#"{"type":"b","x":1}"#,
                    "1",
                    r#""s""#,
                    r#"{"type":"a","x":1,"y":2}"#,
                    r#"{"type":"a"}"#,
                    "{}",
                    r#"{"type":"c"}"#
                ]
            ),
            [true, true, true, true, true, false, false, false, false]
        );
        // The complement of a `oneOf`: values of a type that two branches match entirely
        // match two, so they are all in it; among objects the branches are disjoint, so it
        // is matching neither.
        let s = json!({"not": {"oneOf": [
            {"properties": {"k": {"const": 1}}, "required": ["k"]},
            {"properties": {"k": {"const": 2}}, "required": ["k"]}
        ]}});
        assert_eq!(
            accepted(
                s,
                &[
                    "1",
                    r#""x""#,
                    "[]",
                    "{}",
                    r#"{"k":3}"#,
                    r#"{"k":1}"#,
                    r#"{"k":2}"#
                ]
            ),
            [true, true, true, true, true, false, false]
        );
        // Branches that overlap among objects without a discriminator: the complement
        // there is matching neither or both.
        let s = json!({"not": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}});
        assert_eq!(
            accepted(
                s,
                &[
                    "{}",
                    r#"{"a":1,"b":2}"#,
                    r#"{"c":1}"#,
                    "1",
                    r#"{"a":1}"#,
                    r#"{"b":1,"c":1}"#
                ]
            ),
            [true, true, true, true, false, false]
        );
        // And a `oneOf` of a pattern and every string, inside a `oneOf` (SchemaStore's dein):
        // exactly one is the strings the pattern refuses.
        let s = json!({"oneOf": [
            {"type": "array", "items": {"type": "string",
                "oneOf": [{"pattern": "^<"}, {"type": "string"}]}},
            {"type": "array", "items": {"type": "string"}}
        ]});
        assert_eq!(
            accepted(
                s,
                &[r#"["<a>"]"#, r#"["<a>","b"]"#, "[]", r#"["b"]"#, "[1]"]
            ),
            [true, true, false, false, false]
        );
    }

    #[test]
    fn not_of_format_takes_out_every_valid_string() {
        let s = json!({"not": {"format": "date"}});
        // A number matches `format` (which only applies to strings), so it is not in the
        // complement either.
        assert_eq!(
            accepted(
                s,
                &[
                    r#""2022-02-30""#,
                    r#""x""#,
                    "1",
                    r#""2024-02-29""#,
                    r#""2022-01-01""#
                ]
            ),
            [true, true, false, false, false]
        );
        // Where the format's automaton is stricter than its definition, the complement
        // takes out the definition's every string: a leap second in another offset is valid
        // `date-time`, so it is not in the complement, though `format` itself refuses it.
        let s = json!({"not": {"format": "date-time"}});
        assert_eq!(
            accepted(
                s,
                &[
                    r#""2022-01-01""#,
                    r#""2022-01-01T10:00:00Z""#,
                    r#""1998-12-31T15:59:60-08:00""#
                ]
            ),
            [true, false, false]
        );
        // A format whose valid strings no automaton here covers stays refused.
        let e = compile_json_schema(
            &json!({"not": {"format": "email"}}),
            &JsonOptions::default(),
        );
        assert!(
            matches!(&e, Err(Error::UnsupportedKeyword { keyword, .. })
                if keyword == "not (format \"email\")"),
            "{e:?}"
        );
    }

    #[test]
    fn all_of_many_conditionals_on_one_discriminator() {
        // Seven `if`/`then` pairs on one property: the conjunction of their seven two-way
        // `anyOf`s keeps only the combinations that do not contradict each other (a value
        // of `kind` is one constant at most), so it stays small and compiles.
        let conds: Vec<Value> = (1..=7)
            .map(|i| {
                json!({"if": {"properties": {"kind": {"const": format!("k{i}")}}},
                       "then": {"anyOf": [{"required": [format!("a{i}")]},
                                          {"required": [format!("b{i}")]}]}})
            })
            .collect();
        let s = json!({"type": "object", "required": ["kind"], "allOf": conds});
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"kind":"k1","a1":0}"#,
                    r#"{"kind":"k7","b7":0}"#,
                    r#"{"kind":"k9"}"#,
                    r#"{"kind":"k1"}"#,
                    r#"{"kind":"k3","a1":0}"#,
                    "{}"
                ]
            ),
            [true, true, true, false, false, false]
        );
    }

    #[test]
    fn not_of_additional_and_pattern_properties_is_some_member() {
        // An open map of strings: its complement among objects is "some value is not a
        // string"; a number is a (vacuous) map, so it is not in the complement.
        let s = json!({"not": {"type": "object", "additionalProperties": {"type": "string"}}});
        assert_eq!(
            accepted(
                s,
                &[
                    "1",
                    r#"{"a":1}"#,
                    r#"{"a":"x","b":2}"#,
                    "{}",
                    r#"{"a":"x"}"#
                ]
            ),
            [true, true, true, false, false]
        );
        // A closed object: some key other than the named one, wherever it comes.
        let s = json!({"not": {"properties": {"a": {}}, "additionalProperties": false}});
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"a":1,"b":2}"#,
                    r#"{"b":2,"a":1}"#,
                    r#"{"b":2}"#,
                    r#"{"a":1}"#,
                    "{}",
                    "[]"
                ]
            ),
            [true, true, true, false, false, false]
        );
        // A pattern: some key that matches it (named or not) with a value outside it.
        let s = json!({"not": {"properties": {"x-n": {}},
                               "patternProperties": {"^x-": {"type": "string"}}}});
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"x-a":1}"#,
                    r#"{"x-n":1}"#,
                    r#"{"x-a":"s"}"#,
                    r#"{"y":1}"#,
                    "{}",
                    "1"
                ]
            ),
            [true, true, false, false, false, false]
        );
    }

    #[test]
    fn one_of_with_a_closed_object_inside_an_open_one() {
        // As in SchemaStore's CircleCI executors: `machine` is a closed object in one branch
        // and absent from the other, so an object with both keys matches both only when its
        // `machine` is valid; an extra key in `machine` makes it match the first alone.
        let s = json!({"oneOf": [
            {"type": "object", "required": ["docker"],
             "properties": {"docker": {"type": "array"}}},
            {"type": "object", "required": ["machine"],
             "properties": {"machine": {"type": "object", "required": ["image"],
                                        "additionalProperties": false,
                                        "properties": {"image": {"type": "string"},
                                                       "dlc": {"type": "boolean"}}}}}
        ]});
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"docker":[]}"#,
                    r#"{"machine":{"image":"x"}}"#,
                    r#"{"docker":[],"machine":{"image":"x","other":1}}"#,
                    r#"{"docker":[],"machine":{}}"#,
                    r#"{"docker":[],"machine":{"image":"x"}}"#,
                    r#"{"docker":[],"machine":{"dlc":true,"image":"x"}}"#,
                    r#"{"machine":{"image":"x","z":1}}"#,
                    "{}"
                ]
            ),
            [true, true, true, true, false, false, false, false]
        );
    }

    #[test]
    fn one_of_closed_objects_overlap_on_their_shared_keys_only() {
        // `{}` matches both closed branches, so exactly-one refuses it; a key only one branch
        // names picks that branch.
        let s = json!({"oneOf": [
            {"type": "object", "additionalProperties": false,
             "properties": {"except": {"type": "array"}}},
            {"type": "object", "additionalProperties": false,
             "properties": {"only": {"type": "array"}}}
        ]});
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"except":[]}"#,
                    r#"{"only":[]}"#,
                    "{}",
                    r#"{"except":[],"only":[]}"#,
                    r#"{"other":[]}"#,
                    r#"{"only":1}"#
                ]
            ),
            [true, true, false, false, false, false]
        );
    }

    #[test]
    fn one_of_complements_only_the_branch_not_the_keywords_beside_it() {
        // Each branch is complemented among the other's values, which already match the
        // properties beside `oneOf` (an open map of strings, whose complement has no exact
        // schema of its own).
        let s = json!({
            "type": "object",
            "properties": {"headers": {"type": "object", "additionalProperties": {"type": "string"}}},
            "oneOf": [{"required": ["src"]}, {"required": ["handle"]}]
        });
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"src":"a"}"#,
                    r#"{"handle":"a","headers":{"x":"y"}}"#,
                    r#"{"src":"a","handle":"b"}"#,
                    "{}",
                    r#"{"src":"a","headers":{"x":1}}"#
                ]
            ),
            [true, true, false, false, false]
        );
    }

    #[test]
    fn one_of_pattern_properties_inside_a_closed_object() {
        // The object is closed to `x-a` and `b`, so "some key breaks patternProperties" is
        // "`x-a` is present and not a string".
        let s = json!({
            "type": "object",
            "properties": {"x-a": {}, "b": {}},
            "additionalProperties": false,
            "oneOf": [
                {"properties": {"b": {"type": "integer"}}},
                {"patternProperties": {"^x-": {"type": "string"}}}
            ]
        });
        assert_eq!(
            accepted(
                s,
                &[
                    r#"{"b":"s"}"#,
                    r#"{"x-a":1}"#,
                    r#"{"x-a":"s","b":"t"}"#,
                    r#"{"x-a":1,"b":1}"#,
                    "{}",
                    r#"{"b":1}"#,
                    r#"{"x-a":"s","b":1}"#,
                    r#"{"c":1}"#
                ]
            ),
            [true, true, true, true, false, false, false, false]
        );
        // An open object may hold any other key: the closed branch's complement among its
        // values is "some key other than `a`".
        let open = json!({"oneOf": [
            {"type": "object", "additionalProperties": false, "properties": {"a": {}}},
            {"type": "object", "patternProperties": {"^x-": {"type": "string"}}}
        ]});
        assert_eq!(
            accepted(
                open,
                &[
                    r#"{"a":1,"x-b":"s"}"#,
                    r#"{"x-b":"s"}"#,
                    r#"{"a":1,"x-b":2}"#,
                    r#"{"a":1}"#,
                    "{}",
                    r#"{"x-b":2}"#
                ]
            ),
            [true, true, false, false, false, false]
        );
    }

    #[test]
    fn complements_of_dependencies_and_of_disjoint_one_of() {
        // Not `dependentRequired`: an object where `a` is present and `b` missing.
        let s = json!({"not": {"dependentRequired": {"a": ["b"]}}});
        assert_eq!(
            accepted(s, &[r#"{"a":1}"#, r#"{"a":1,"b":2}"#, "{}", "1"]),
            [true, false, false, false]
        );
        // A `oneOf` whose branches are disjoint is an `anyOf`, whose complement is exact.
        let s = json!({"oneOf": [
            {"oneOf": [{"type": "string"}, {"type": "null"}]},
            {"type": ["string", "integer"]}
        ]});
        assert_eq!(
            accepted(s, &["null", "1", r#""x""#, "true", "1.5"]),
            [true, true, false, false, false]
        );
    }

    #[test]
    fn not_of_types_and_refusals_name_the_keyword() {
        let s = json!({"not": {"type": ["string", "object", "array"]}});
        assert_eq!(
            accepted(s, &["1", "null", "true", "\"x\"", "[]", "{}"]),
            [true, true, true, false, false, false]
        );
        for (schema, keyword) in [
            (json!({"not": {"uniqueItems": true}}), "not (uniqueItems)"),
            (json!({"not": {"multipleOf": 2}}), "not (multipleOf)"),
            (
                json!({"allOf": [{"format": "date"}, {"format": "uuid"}]}),
                "allOf (two different format)",
            ),
            (
                json!({"if": {"multipleOf": 2}, "then": {"minimum": 1}}),
                "if",
            ),
        ] {
            let e = compile_json_schema(&schema, &JsonOptions::default());
            assert!(
                matches!(&e, Err(Error::UnsupportedKeyword { keyword: k, .. }) if k == keyword),
                "{schema}: {e:?}"
            );
        }
    }
}
