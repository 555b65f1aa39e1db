//! JSON and JSON Schema, compiled to a [`Grammar`].
//!
//! Strings are single terminals: an automaton for the decoded content (pattern, length, format,
//! key exclusions, intersected as automata) wrapped in the JSON string encoding, so escapes are
//! handled exactly. Numbers with bounds are regular expressions built digit by digit. Objects
//! allow their properties in any order by tracking which named properties were used (up to
//! [`JsonOptions::max_free_order_properties`]; past that, or when asked, in the schema's order).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::constraint::GrammarConstraint;
use crate::dfa::{Dfa, IDENTITY};
use crate::grammar::{Grammar, GrammarBuilder, Sym};
use crate::vocab::TokenVocab;
use crate::Error;

/// Options for JSON and JSON Schema constraints.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JsonOptions {
    /// Most whitespace bytes allowed in each gap between JSON tokens; 0 (the default) means
    /// compact output. The bound keeps a model from looping on spaces.
    pub max_whitespace: usize,
    /// Object properties must come in the schema's order (default: any order).
    pub fixed_property_order: bool,
    /// Objects with more named properties than this use the schema's order even when
    /// `fixed_property_order` is false, because any-order tracking grows as 2^n rules.
    pub max_free_order_properties: usize,
}

impl Default for JsonOptions {
    fn default() -> Self {
        JsonOptions {
            max_whitespace: 0,
            fixed_property_order: false,
            max_free_order_properties: 8,
        }
    }
}

impl JsonOptions {
    /// Sets [`JsonOptions::max_whitespace`].
    pub fn with_max_whitespace(mut self, n: usize) -> Self {
        self.max_whitespace = n;
        self
    }

    /// Sets [`JsonOptions::fixed_property_order`].
    pub fn with_fixed_property_order(mut self, yes: bool) -> Self {
        self.fixed_property_order = yes;
        self
    }
}

/// A constraint for any JSON value.
pub fn json_any(
    vocab: &Arc<TokenVocab>,
    options: &JsonOptions,
) -> Result<GrammarConstraint, Error> {
    from_json_schema(&Value::Bool(true), vocab, options)
}

/// A constraint for the JSON values valid under `schema` (draft 2020-12 keywords; see the crate
/// README for the supported set).
pub fn from_json_schema(
    schema: &Value,
    vocab: &Arc<TokenVocab>,
    options: &JsonOptions,
) -> Result<GrammarConstraint, Error> {
    Ok(GrammarConstraint::new(
        compile_json_schema(schema, options)?,
        vocab,
    ))
}

/// Compiles a JSON Schema into a grammar, to start many constraints from.
pub fn compile_json_schema(schema: &Value, options: &JsonOptions) -> Result<Arc<Grammar>, Error> {
    let rewritten = resolve_identifiers(schema);
    let schema = rewritten.as_ref().unwrap_or(schema);
    let mut c = Compiler::new(schema, options);
    let s = c.schema(schema, "#")?;
    Ok(Arc::new(c.b.build(s)?))
}

/// The base URI of a schema without `$id`: a name no reference outside the document can mean.
const DEFAULT_BASE: &str = "https://nextok.invalid/schema.json";

/// Keywords whose values are data, not schemas: identifiers inside them mean nothing.
const DATA_KEYWORDS: &[&str] = &["const", "enum", "default", "examples"];

/// Keywords whose values map names to schemas.
const NAME_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
];

/// Resolves `$ref`s that go through `$id` and `$anchor` (embedded schema resources, base URI
/// changes, anchors, absolute URIs naming the document itself) into plain JSON pointers from
/// the root, and drops the identifiers they needed. `None` when the document has no embedded
/// identifier to resolve (the schema is then compiled as it is).
///
/// A `$ref` that names nothing in the document is left as it is, so that compiling it reports
/// it as unsupported. `$dynamicAnchor` counts as an anchor for `$ref`; when the document has a
/// `$dynamicRef`, nothing is rewritten (the compiler refuses it).
fn resolve_identifiers(root: &Value) -> Option<Value> {
    /// Every schema position of the document, with its JSON pointer and base URI. Keywords
    /// whose values map names to schemas are told apart from those whose values are schemas
    /// (or arrays of them), so that a property named `$id` or `const` is read as a name.
    fn visit<'v>(
        v: &'v Value,
        pointer: &str,
        base: &str,
        out: &mut Vec<(String, String, &'v Map<String, Value>)>,
    ) {
        let Value::Object(m) = v else {
            return;
        };
        let base = match m.get("$id") {
            Some(Value::String(id)) => strip_fragment(&resolve_uri(base, id)).to_string(),
            _ => base.to_string(),
        };
        out.push((pointer.to_string(), base.clone(), m));
        let token = |k: &str| escape_pointer(k).replace('%', "%25");
        for (k, sub) in m {
            if DATA_KEYWORDS.contains(&k.as_str()) {
                continue;
            }
            let p = format!("{pointer}/{}", token(k));
            match sub {
                Value::Object(named) if NAME_MAPS.contains(&k.as_str()) => {
                    for (name, s) in named {
                        visit(s, &format!("{p}/{}", token(name)), &base, out);
                    }
                }
                Value::Array(a) => {
                    for (i, s) in a.iter().enumerate() {
                        visit(s, &format!("{p}/{i}"), &base, out);
                    }
                }
                _ => visit(sub, &p, &base, out),
            }
        }
    }
    let mut nodes = Vec::new();
    visit(root, "", DEFAULT_BASE, &mut nodes);
    let is_str = |m: &Map<String, Value>, k: &str| matches!(m.get(k), Some(Value::String(_)));
    let needed = nodes.iter().skip(1).any(|(_, _, m)| is_str(m, "$id"))
        || nodes
            .iter()
            .any(|(_, _, m)| is_str(m, "$anchor") || is_str(m, "$dynamicAnchor"))
        || nodes.iter().any(
            |(_, _, m)| matches!(m.get("$ref"), Some(Value::String(r)) if !r.starts_with('#')),
        );
    if !needed || nodes.iter().any(|(_, _, m)| m.contains_key("$dynamicRef")) {
        return None;
    }
    // Resources (documents) and anchors, by absolute URI, to JSON pointers from the root.
    let mut resources: HashMap<String, String> = HashMap::new();
    let mut anchors: HashMap<String, String> = HashMap::new();
    for (pointer, base, m) in &nodes {
        if pointer.is_empty() || is_str(m, "$id") {
            resources
                .entry(base.clone())
                .or_insert_with(|| pointer.clone());
        }
        for k in ["$anchor", "$dynamicAnchor"] {
            if let Some(Value::String(a)) = m.get(k) {
                anchors
                    .entry(format!("{base}#{a}"))
                    .or_insert_with(|| pointer.clone());
            }
        }
    }
    let target = |base: &str, reference: &str| -> Option<String> {
        let uri = resolve_uri(base, reference);
        let (doc, fragment) = uri.split_once('#').unwrap_or((&uri, ""));
        let doc_pointer = resources.get(doc)?;
        if fragment.is_empty() || fragment.starts_with('/') {
            Some(format!("#{doc_pointer}{fragment}"))
        } else {
            anchors.get(&uri).map(|p| format!("#{p}"))
        }
    };
    let mut rewrites: Vec<(String, Option<String>)> = Vec::new();
    for (pointer, base, m) in &nodes {
        let new_ref = match m.get("$ref") {
            Some(Value::String(r)) => target(base, r),
            _ => None,
        };
        rewrites.push((pointer.clone(), new_ref));
    }
    let mut out = root.clone();
    for (pointer, new_ref) in rewrites {
        let Some(Value::Object(m)) = out.pointer_mut(&pointer_path(&pointer)) else {
            continue;
        };
        if !pointer.is_empty() {
            m.remove("$id");
        }
        m.remove("$anchor");
        m.remove("$dynamicAnchor");
        if let Some(r) = new_ref {
            m.insert("$ref".into(), Value::String(r));
        }
    }
    Some(out)
}

/// A pointer built by `resolve_identifiers` (tokens percent-encoded for `Compiler::resolve`) as
/// serde_json's `pointer_mut` wants it.
fn pointer_path(pointer: &str) -> String {
    pointer.replace("%25", "%")
}

/// The URI without its fragment.
fn strip_fragment(uri: &str) -> &str {
    uri.split_once('#').map_or(uri, |(u, _)| u)
}

/// Resolves `reference` against the absolute URI `base` (RFC 3986, section 5.2, without
/// percent-encoding normalisation).
fn resolve_uri(base: &str, reference: &str) -> String {
    let has_scheme = |u: &str| {
        u.split_once(':').is_some_and(|(s, _)| {
            !s.is_empty()
                && s.starts_with(|c: char| c.is_ascii_alphabetic())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        })
    };
    if has_scheme(reference) {
        return remove_dot_segments_uri(reference);
    }
    let base = strip_fragment(base);
    let (scheme, rest) = base.split_once(':').unwrap_or(("", base));
    // `rest` is `//authority/path?query` or `path?query`.
    let (authority, path_query) = match rest.strip_prefix("//") {
        Some(r) => {
            let cut = r.find(['/', '?']).unwrap_or(r.len());
            (Some(&r[..cut]), &r[cut..])
        }
        None => (None, rest),
    };
    let (path, _query) = path_query.split_once('?').unwrap_or((path_query, ""));
    let prefix = match authority {
        Some(a) => format!("{scheme}://{a}"),
        None => format!("{scheme}:"),
    };
    if reference.is_empty() {
        return base.to_string();
    }
    if let Some(r) = reference.strip_prefix("//") {
        return remove_dot_segments_uri(&format!("{scheme}://{r}"));
    }
    if reference.starts_with('#') {
        return format!("{}{reference}", strip_fragment(base));
    }
    if reference.starts_with('?') {
        return format!("{prefix}{path}{reference}");
    }
    let merged = if reference.starts_with('/') {
        reference.to_string()
    } else if authority.is_some() && path.is_empty() {
        format!("/{reference}")
    } else {
        match path.rfind('/') {
            Some(i) => format!("{}{reference}", &path[..=i]),
            None => reference.to_string(),
        }
    };
    format!("{prefix}{}", remove_dot_segments(&merged))
}

/// `uri` with `.` and `..` segments of its path removed.
fn remove_dot_segments_uri(uri: &str) -> String {
    match uri.split_once("://") {
        Some((scheme, r)) => {
            let cut = r.find(['/', '?', '#']).unwrap_or(r.len());
            format!("{scheme}://{}{}", &r[..cut], remove_dot_segments(&r[cut..]))
        }
        None => uri.to_string(),
    }
}

/// RFC 3986's remove_dot_segments on a path (the query and fragment, if any, kept as they are).
fn remove_dot_segments(path: &str) -> String {
    let cut = path.find(['?', '#']).unwrap_or(path.len());
    let (p, tail) = path.split_at(cut);
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = p.split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            _ => out.push(seg),
        }
    }
    format!("{}{tail}", out.join("/"))
}

/// Keywords that only annotate and never change validity.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$schema",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
    "$defs",
    "definitions",
];

/// Keywords this module enforces.
const SUPPORTED: &[&str] = &[
    "type",
    "enum",
    "const",
    "$ref",
    "allOf",
    "anyOf",
    "oneOf",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "pattern",
    "format",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "minProperties",
    "maxProperties",
    "dependentRequired",
    "propertyNames",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedProperties",
    "unevaluatedItems",
    PATTERNS,
];

/// Internal keyword holding extra patterns collected by merging `allOf` branches.
const PATTERNS: &str = "$nextok:patterns";

const TYPES: [&str; 6] = ["null", "boolean", "number", "string", "array", "object"];

fn unsupported(keyword: impl Into<String>, path: &str) -> Error {
    Error::UnsupportedKeyword {
        keyword: keyword.into(),
        path: path.to_string(),
    }
}

fn invalid(path: &str, reason: &'static str) -> Error {
    Error::InvalidSchema {
        path: path.to_string(),
        reason,
    }
}

struct Compiler<'a> {
    b: GrammarBuilder,
    root: &'a Value,
    opts: &'a JsonOptions,
    ws: Option<Sym>,
    refs: HashMap<String, Sym>,
    any: Option<Sym>,
    /// The object and array symbols of `any`, for values built around them.
    any_parts: Option<(Sym, Sym)>,
    depth: usize,
}

impl<'a> Compiler<'a> {
    fn new(root: &'a Value, opts: &'a JsonOptions) -> Self {
        let mut b = GrammarBuilder::default();
        let ws = if opts.max_whitespace > 0 {
            b.regex(&format!("[ \\t\\n\\r]{{0,{}}}", opts.max_whitespace))
                .ok()
        } else {
            None
        };
        Compiler {
            b,
            root,
            opts,
            ws,
            refs: HashMap::new(),
            any: None,
            any_parts: None,
            depth: 0,
        }
    }

    fn lit(&mut self, s: &str) -> Sym {
        self.b.literal(s.as_bytes())
    }

    /// `parts` with optional whitespace between consecutive parts where `gaps[i]` says so.
    fn seq(&self, parts: &[Sym]) -> Vec<Sym> {
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
    fn any(&mut self) -> Result<Sym, Error> {
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

    fn string_terminal(&mut self, content: &Dfa) -> Result<Sym, Error> {
        let d = content.json_string()?;
        self.b.terminal(d)
    }

    fn resolve(&self, reference: &str, path: &str) -> Result<&'a Value, Error> {
        let Some(pointer) = reference.strip_prefix('#') else {
            return Err(unsupported(format!("$ref {reference}"), path));
        };
        let mut cur = self.root;
        if pointer.is_empty() {
            return Ok(cur);
        }
        let Some(pointer) = pointer.strip_prefix('/') else {
            return Err(unsupported(format!("$ref {reference}"), path));
        };
        for raw in pointer.split('/') {
            let tok = percent_decode(raw).replace("~1", "/").replace("~0", "~");
            cur = match cur {
                Value::Object(m) => m.get(&tok),
                Value::Array(a) => tok.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            }
            .ok_or_else(|| invalid(path, "$ref target not found"))?;
        }
        Ok(cur)
    }

    /// Resolves a top-level `$ref` with siblings and merges `allOf`, so that the schema left has
    /// no `$ref` beside other assertions and no `allOf`.
    fn normalize(&self, s: &Value, path: &str, depth: usize) -> Result<Value, Error> {
        if depth > 32 {
            return Err(unsupported("$ref", path));
        }
        let Value::Object(m) = s else {
            return Ok(s.clone());
        };
        let mut m = m.clone();
        if let Some(id) = m.get("$id") {
            if !std::ptr::eq(s, self.root) {
                return Err(unsupported(format!("$id {id}"), path));
            }
            m.remove("$id");
        }
        for k in [
            "$anchor",
            "$dynamicRef",
            "$dynamicAnchor",
            "$recursiveRef",
            "$recursiveAnchor",
        ] {
            if m.contains_key(k) {
                return Err(unsupported(k, path));
            }
        }
        if m.get("uniqueItems") == Some(&Value::Bool(false)) {
            m.remove("uniqueItems");
        }
        if let Some(inner) = m.remove("not") {
            match self.normalize(&inner, &format!("{path}/not"), depth + 1)? {
                Value::Bool(false) => {}
                Value::Bool(true) => return Ok(Value::Bool(false)),
                Value::Object(n) if n.keys().all(|k| ANNOTATIONS.contains(&k.as_str())) => {
                    return Ok(Value::Bool(false))
                }
                Value::Object(n)
                    if n.keys()
                        .all(|k| k == "type" || ANNOTATIONS.contains(&k.as_str())) =>
                {
                    // The complement of a set of types, when it is one: "not integer" would
                    // leave the non-integer numbers, which no type names.
                    let t = type_set(&n, path)?;
                    if t.contains(&"integer") && !t.contains(&"number") {
                        return Err(unsupported("not (type integer)", path));
                    }
                    let rest: Vec<Value> = TYPES
                        .iter()
                        .filter(|x| !t.contains(x))
                        .map(|x| Value::from(*x))
                        .collect();
                    if rest.is_empty() {
                        return Ok(Value::Bool(false));
                    }
                    let mut tm = Map::new();
                    tm.insert("type".into(), Value::Array(rest));
                    let restm = Value::Object(m.clone());
                    return merge(
                        &Value::Object(tm),
                        &self.normalize(&restm, path, depth + 1)?,
                        path,
                    );
                }
                _ => return Err(unsupported("not", path)),
            }
        }
        // `unevaluatedProperties`/`unevaluatedItems` see what this schema and its `allOf` and
        // `$ref` subschemas evaluate: once those are merged in, they reduce to
        // `additionalProperties`/`items`. Under `anyOf`/`oneOf` they are kept and distributed
        // into each branch (counting only the chosen branch's evaluations refuses more, never
        // less). Conditionals and `dependentSchemas` evaluate in ways a grammar cannot follow.
        let unevaluated = [
            (
                "unevaluatedProperties",
                m.remove("unevaluatedProperties"),
                "additionalProperties",
            ),
            ("unevaluatedItems", m.remove("unevaluatedItems"), "items"),
        ];
        for (k, v, _) in &unevaluated {
            let blocked = ["if", "then", "else", "dependentSchemas"]
                .iter()
                .any(|b| m.contains_key(*b))
                || (*k == "unevaluatedItems" && m.contains_key("contains"));
            if v.is_some() && blocked {
                return Err(unsupported(*k, path));
            }
        }
        let mut acc = Value::Object(Map::new());
        // `if` without a complement to build: it matters only when its outcome is fixed, or when
        // both outcomes demand the same thing. `then`/`else` without `if` and `maxContains`
        // without `contains` have no effect.
        let (cond, then, els) = (m.remove("if"), m.remove("then"), m.remove("else"));
        if let Some(cond) = cond {
            let applied = match (
                self.normalize(&cond, &format!("{path}/if"), depth + 1)?,
                then,
                els,
            ) {
                (_, None, None) => None,
                (Value::Bool(true), t, _) => t,
                (Value::Bool(false), _, e) => e,
                (_, Some(t), Some(e)) if t == e => Some(t),
                _ => return Err(unsupported("if", path)),
            };
            if let Some(a) = applied {
                let a = self.normalize(&a, &format!("{path}/then"), depth + 1)?;
                acc = merge(&acc, &a, path)?;
            }
        }
        // dependentSchemas: for each combination of the trigger properties, either the property
        // is absent or it is present and its schema holds. The branches are disjoint.
        if let Some(ds) = m.remove("dependentSchemas") {
            let Value::Object(ds) = ds else {
                return Err(invalid(path, "dependentSchemas must be an object"));
            };
            if ds.len() > 3 || m.contains_key("anyOf") || m.contains_key("oneOf") {
                return Err(unsupported("dependentSchemas", path));
            }
            let entries: Vec<(String, Value)> = ds.into_iter().collect();
            let mut branches = Vec::new();
            for combo in 0u32..(1 << entries.len()) {
                let mut b = Value::Bool(true);
                for (i, (name, sub)) in entries.iter().enumerate() {
                    let part = if combo >> i & 1 == 1 {
                        let sub = self.normalize(
                            sub,
                            &format!("{path}/dependentSchemas/{name}"),
                            depth + 1,
                        )?;
                        let req = Value::Object(Map::from_iter([(
                            "required".to_string(),
                            Value::Array(vec![Value::from(name.clone())]),
                        )]));
                        merge(&req, &sub, path)?
                    } else {
                        let absent = Map::from_iter([(name.clone(), Value::Bool(false))]);
                        Value::Object(Map::from_iter([(
                            "properties".to_string(),
                            Value::Object(absent),
                        )]))
                    };
                    b = merge(&b, &part, path)?;
                }
                branches.push(b);
            }
            m.insert("anyOf".into(), Value::Array(branches));
        }
        if !m.contains_key("contains") {
            m.remove("maxContains");
            m.remove("minContains");
        }
        if let Some(all) = m.remove("allOf") {
            let Value::Array(all) = all else {
                return Err(invalid(path, "allOf must be an array"));
            };
            if all.is_empty() {
                return Err(invalid(path, "allOf must not be empty"));
            }
            for (i, sub) in all.iter().enumerate() {
                let sub = self.normalize(sub, &format!("{path}/allOf/{i}"), depth + 1)?;
                acc = merge(&acc, &sub, path)?;
            }
        }
        let has_other = m
            .keys()
            .any(|k| k != "$ref" && !ANNOTATIONS.contains(&k.as_str()));
        if let Some(r) = m.get("$ref").cloned() {
            if has_other || !matches!(acc, Value::Object(ref a) if a.is_empty()) {
                let Value::String(r) = r else {
                    return Err(invalid(path, "$ref must be a string"));
                };
                let target = self.resolve(&r, path)?;
                let target = self.normalize(target, &r, depth + 1)?;
                m.remove("$ref");
                acc = merge(&acc, &target, path)?;
            }
        }
        let mut out = merge(&acc, &Value::Object(m), path)?;
        if let Value::Object(o) = &mut out {
            let deferred = o.contains_key("anyOf") || o.contains_key("oneOf");
            for (k, v, plain) in unevaluated {
                if let Some(v) = v {
                    if deferred {
                        o.insert(k.to_string(), v);
                    } else if !o.contains_key(plain) {
                        o.insert(plain.to_string(), v);
                    }
                }
            }
        }
        Ok(out)
    }

    fn schema(&mut self, s: &Value, path: &str) -> Result<Sym, Error> {
        self.depth += 1;
        if self.depth > 200 {
            return Err(unsupported("nesting deeper than 200", path));
        }
        let r = self.schema_inner(s, path);
        self.depth -= 1;
        r
    }

    fn schema_inner(&mut self, s: &Value, path: &str) -> Result<Sym, Error> {
        match s {
            Value::Bool(true) => return self.any(),
            Value::Bool(false) => return Ok(Sym::Nt(self.b.nt("false"))),
            Value::Object(_) => {}
            _ => return Err(invalid(path, "a schema must be an object or a boolean")),
        }
        // A bare reference compiles once per target, which is what makes recursion work.
        if let Value::Object(m) = s {
            if let Some(Value::String(r)) = m.get("$ref") {
                let only_ref = m
                    .keys()
                    .all(|k| k == "$ref" || ANNOTATIONS.contains(&k.as_str()));
                if only_ref {
                    if let Some(&sym) = self.refs.get(r) {
                        return Ok(sym);
                    }
                    let nt = self.b.nt(format!("ref {r}"));
                    self.refs.insert(r.clone(), Sym::Nt(nt));
                    let target = self.resolve(r, path)?;
                    let body = self.schema(target, r)?;
                    self.b.rule(nt, vec![body]);
                    return Ok(Sym::Nt(nt));
                }
            }
        }
        let n = self.normalize(s, path, 0)?;
        let Value::Object(m) = n else {
            return self.schema(&n, path);
        };
        if m.contains_key("$ref") {
            // Only a bare `$ref` is left after normalising.
            return self.schema(&Value::Object(m), path);
        }
        for k in m.keys() {
            if !SUPPORTED.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                return Err(unsupported(k.clone(), path));
            }
        }
        // anyOf and oneOf: distribute the other keywords into each branch.
        for comb in ["anyOf", "oneOf"] {
            if let Some(v) = m.get(comb) {
                let Value::Array(branches) = v else {
                    return Err(invalid(path, "anyOf/oneOf must be an array"));
                };
                if branches.is_empty() {
                    return Err(invalid(path, "anyOf/oneOf must not be empty"));
                }
                let mut base = m.clone();
                base.remove(comb);
                let kept: Vec<(String, Value)> = ["unevaluatedProperties", "unevaluatedItems"]
                    .iter()
                    .filter_map(|k| base.remove(*k).map(|v| (k.to_string(), v)))
                    .collect();
                let base = Value::Object(base);
                let mut merged = Vec::new();
                for (i, br) in branches.iter().enumerate() {
                    let bp = format!("{path}/{comb}/{i}");
                    let br = self.normalize(br, &bp, 0)?;
                    let mut mb = merge(&base, &br, &bp)?;
                    if let Value::Object(o) = &mut mb {
                        for (k, v) in &kept {
                            o.insert(k.clone(), v.clone());
                        }
                    }
                    merged.push(mb);
                }
                if comb == "oneOf" {
                    // Two branches that accept everything overlap everywhere; branches that
                    // accept nothing never count.
                    let trues = branches.iter().filter(|b| **b == Value::Bool(true)).count();
                    if trues >= 2 {
                        return Ok(Sym::Nt(self.b.nt("oneOf of overlapping true schemas")));
                    }
                    merged.retain(|b| *b != Value::Bool(false));
                    for i in 0..merged.len() {
                        for j in i + 1..merged.len() {
                            if !disjoint(&merged[i], &merged[j]) {
                                return Err(unsupported("oneOf (branches that may overlap)", path));
                            }
                        }
                    }
                }
                let mut alts = Vec::new();
                for (i, br) in merged.iter().enumerate() {
                    alts.push(vec![self.schema(br, &format!("{path}/{comb}/{i}"))?]);
                }
                return Ok(self.b.alts(comb, alts));
            }
        }
        if m.contains_key("enum") || m.contains_key("const") {
            return self.enumeration(&m, path);
        }
        let types = type_set(&m, path)?;
        let mut alts = Vec::new();
        if types.contains(&"null") {
            alts.push(vec![self.lit("null")]);
        }
        if types.contains(&"boolean") {
            alts.push(vec![self.lit("true")]);
            alts.push(vec![self.lit("false")]);
        }
        if types.contains(&"number") || types.contains(&"integer") {
            let integer = !types.contains(&"number");
            let d = number_dfa(&m, integer, path)?;
            alts.push(vec![self.b.terminal(d)?]);
        }
        if types.contains(&"string") {
            let d = string_content(&m, path)?;
            alts.push(vec![self.string_terminal(&d)?]);
        }
        if types.contains(&"array") {
            alts.push(vec![self.array(&m, path)?]);
        }
        if types.contains(&"object") {
            alts.push(vec![self.object(&m, path)?]);
        }
        Ok(self.b.alts(path, alts))
    }

    fn enumeration(&mut self, m: &Map<String, Value>, path: &str) -> Result<Sym, Error> {
        let mut values: Vec<Value> = match (m.get("enum"), m.get("const")) {
            (Some(Value::Array(e)), None) => e.clone(),
            (None, Some(c)) => vec![c.clone()],
            (Some(Value::Array(e)), Some(c)) => {
                e.iter().filter(|v| json_eq(v, c)).cloned().collect()
            }
            _ => return Err(invalid(path, "enum must be an array")),
        };
        let mut rest = m.clone();
        rest.remove("enum");
        rest.remove("const");
        let has_assertions = rest.keys().any(|k| !ANNOTATIONS.contains(&k.as_str()));
        if has_assertions {
            // Keep the values that the other keywords accept, checked by compiling them.
            let rest = Value::Object(rest);
            let mut sub = Compiler::new(self.root, self.opts);
            let s = sub.schema(&rest, path)?;
            match sub.b.build(s) {
                Ok(g) => values.retain(|v| g.recognizes(compact(v).as_bytes())),
                Err(Error::EmptyLanguage) => values.clear(),
                Err(e) => return Err(e),
            }
        }
        let mut alts = Vec::new();
        for v in &values {
            alts.push(vec![self.const_value(v, path)?]);
        }
        Ok(self.b.alts("enum", alts))
    }

    /// The spellings of one value: numbers in any equal decimal spelling, strings with any
    /// escapes, objects with their keys in any order.
    fn const_value(&mut self, v: &Value, path: &str) -> Result<Sym, Error> {
        match v {
            Value::Number(_) => {
                let re = Decimal::parse(v, path)?.equal_regex();
                self.b.regex(&re)
            }
            Value::String(s) => self.string_terminal(&Dfa::literal(s.as_bytes())),
            Value::Array(a) => {
                let (lb, rb, comma) = (self.lit("["), self.lit("]"), self.lit(","));
                let mut parts = vec![lb];
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        parts.push(comma);
                    }
                    parts.push(self.const_value(x, path)?);
                }
                parts.push(rb);
                let r = self.seq(&parts);
                Ok(self.b.alts("const array", vec![r]))
            }
            Value::Object(o) => {
                let mut m = Map::new();
                let props: Map<String, Value> = o
                    .iter()
                    .map(|(k, x)| {
                        (
                            k.clone(),
                            Value::Object(Map::from_iter([("const".to_string(), x.clone())])),
                        )
                    })
                    .collect();
                m.insert("properties".into(), Value::Object(props));
                m.insert(
                    "required".into(),
                    Value::Array(o.keys().map(|k| Value::from(k.clone())).collect()),
                );
                m.insert("additionalProperties".into(), Value::Bool(false));
                self.object(&m, path)
            }
            _ => Ok(self.b.literal(compact(v).as_bytes())),
        }
    }

    /// Any JSON value except the given scalars (in any of their spellings).
    fn any_except(&mut self, values: &[Value], path: &str) -> Result<Sym, Error> {
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
        let mut strings = Dfa::any_string().clone();
        let mut numbers = Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")?;
        for v in values {
            match v {
                Value::String(x) => strings = strings.minus(&Dfa::literal(x.as_bytes()))?,
                Value::Number(_) => {
                    // Values equal to the number in exponent notation would escape the
                    // difference, so numbers other than it are written without exponent.
                    let shape = Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")?;
                    numbers = numbers
                        .intersect(&shape)?
                        .minus(&Dfa::from_regex(&Decimal::parse(v, path)?.equal_regex())?)?;
                }
                _ => {}
            }
        }
        alts.push(vec![self.string_terminal(&strings)?]);
        alts.push(vec![self.b.terminal(numbers)?]);
        Ok(self.b.alts("any except", alts))
    }

    fn array(&mut self, m: &Map<String, Value>, path: &str) -> Result<Sym, Error> {
        let prefix: Vec<Value> = match m.get("prefixItems") {
            None => Vec::new(),
            Some(Value::Array(p)) => p.clone(),
            Some(_) => return Err(invalid(path, "prefixItems must be an array")),
        };
        let min = get_usize(m, "minItems", path)?.unwrap_or(0);
        let max = get_usize(m, "maxItems", path)?;
        let items_v: Option<Value> = match m.get("items") {
            None => Some(Value::Bool(true)),
            Some(Value::Bool(false)) => None,
            Some(v) => Some(v.clone()),
        };
        // `contains` with `minContains` n: at least n elements also match `contains`. The
        // grammar lets any n elements be the matching ones, which is exact.
        let contains_v = m.get("contains").cloned();
        let need = match &contains_v {
            None => 0,
            Some(_) => get_usize(m, "minContains", path)?.unwrap_or(1),
        };
        if need > 64 {
            return Err(unsupported("minContains above 64", path));
        }
        // maxContains needs the elements that do not match `contains`: we build them for a
        // `contains` that is a set of scalar values, with no other item schema around.
        let max_contains = match &contains_v {
            Some(_) => get_usize(m, "maxContains", path)?,
            None => None,
        };
        let mut outside: Option<(Sym, Sym)> = None;
        if let (Some(mc), Some(c)) = (max_contains, &contains_v) {
            let plain_items = items_v == Some(Value::Bool(true)) && prefix.is_empty();
            let nc = self.normalize(c, &format!("{path}/contains"), 0)?;
            let values: Option<Vec<Value>> = match &nc {
                Value::Object(o)
                    if o.keys().all(|k| {
                        k == "const" || k == "enum" || ANNOTATIONS.contains(&k.as_str())
                    }) =>
                {
                    match (o.get("const"), o.get("enum")) {
                        (Some(v), None) => Some(vec![v.clone()]),
                        (None, Some(Value::Array(e))) => Some(e.clone()),
                        _ => None,
                    }
                }
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
        let positions: Vec<(String, Option<Value>)> = prefix
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
                    let nv = self.normalize(&v, &ep, 0)?;
                    let nc = self.normalize(c, &format!("{path}/contains"), 0)?;
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
        let mut states: HashMap<(usize, usize), u32> = HashMap::new();
        let mut todo: Vec<(usize, usize)> = Vec::new();
        let mut get =
            |b: &mut GrammarBuilder, st: (usize, usize), todo: &mut Vec<(usize, usize)>| -> u32 {
                *states.entry(st).or_insert_with(|| {
                    todo.push(st);
                    b.nt(format!("{path} array after {} ({} matching)", st.0, st.1))
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
        let arr = self.b.nt(format!("{path} array"));
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

    /// The decoded keys a `propertyNames` schema accepts (keys are strings, so only string
    /// keywords and string values matter).
    fn key_filter(&self, pn: &Value, path: &str) -> Result<Dfa, Error> {
        let pn = self.normalize(pn, path, 0)?;
        let m = match pn {
            Value::Bool(false) => return Ok(Dfa::empty()),
            Value::Bool(true) => return Ok(Dfa::any_string().clone()),
            Value::Object(m) => m,
            _ => return Err(invalid(path, "a schema must be an object or a boolean")),
        };
        let string_keys = [
            "type",
            "minLength",
            "maxLength",
            "pattern",
            PATTERNS,
            "format",
            "enum",
            "const",
        ];
        for k in m.keys() {
            if !string_keys.contains(&k.as_str()) && !ANNOTATIONS.contains(&k.as_str()) {
                return Err(unsupported(format!("propertyNames with {k}"), path));
            }
        }
        if !type_set(&m, path)?.contains(&"string") {
            return Ok(Dfa::empty());
        }
        let mut d = string_content(&m, path)?;
        let values: Option<Vec<Value>> = match (m.get("enum"), m.get("const")) {
            (Some(Value::Array(e)), _) => Some(e.clone()),
            (None, Some(c)) => Some(vec![c.clone()]),
            _ => None,
        };
        if let Some(values) = values {
            let mut allowed = Dfa::empty();
            for v in values {
                if let Value::String(s) = v {
                    allowed = allowed.union(&Dfa::literal(s.as_bytes()))?;
                }
            }
            d = d.intersect(&allowed)?;
        }
        Ok(d)
    }

    fn object(&mut self, m: &Map<String, Value>, path: &str) -> Result<Sym, Error> {
        let empty = Map::new();
        let props = match m.get("properties") {
            None => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => return Err(invalid(path, "properties must be an object")),
        };
        let pats = match m.get("patternProperties") {
            None => &empty,
            Some(Value::Object(p)) => p,
            Some(_) => return Err(invalid(path, "patternProperties must be an object")),
        };
        let mut required: Vec<String> = Vec::new();
        match m.get("required") {
            None => {}
            Some(Value::Array(r)) => {
                for v in r {
                    let Value::String(s) = v else {
                        return Err(invalid(path, "required must hold strings"));
                    };
                    if !required.contains(s) {
                        required.push(s.clone());
                    }
                }
            }
            Some(_) => return Err(invalid(path, "required must be an array")),
        }
        if pats.len() > 4 {
            return Err(unsupported(
                "patternProperties (more than 4 patterns)",
                path,
            ));
        }
        let mut pat_dfas = Vec::new();
        for p in pats.keys() {
            pat_dfas.push(Dfa::from_regex(&search_regex(p))?);
        }
        let additional = m
            .get("additionalProperties")
            .cloned()
            .unwrap_or(Value::Bool(true));
        // The value schema for a key: its `properties` entry (or `additionalProperties` when it
        // matches no pattern) merged with every matching pattern's schema.
        let value_schema = |name: &str, own: Option<&Value>| -> Result<Value, Error> {
            let matching: Vec<&Value> = pats
                .values()
                .zip(&pat_dfas)
                .filter(|(_, d)| d.matches(name.as_bytes()))
                .map(|(v, _)| v)
                .collect();
            let mut acc = match own {
                Some(v) => v.clone(),
                None if matching.is_empty() => additional.clone(),
                None => Value::Bool(true),
            };
            for v in matching {
                acc = Value::Object(Map::from_iter([(
                    "allOf".to_string(),
                    Value::Array(vec![acc, v.clone()]),
                )]));
            }
            Ok(acc)
        };
        let mut names: Vec<String> = props.keys().cloned().collect();
        let mut dep_pairs: Vec<(String, Vec<String>)> = Vec::new();
        if let Some(d) = m.get("dependentRequired") {
            let Value::Object(d) = d else {
                return Err(invalid(path, "dependentRequired must be an object"));
            };
            for (k, v) in d {
                let Value::Array(v) = v else {
                    return Err(invalid(path, "dependentRequired values must be arrays"));
                };
                let need: Vec<String> = v
                    .iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect();
                dep_pairs.push((k.clone(), need));
            }
        }
        for r in required.iter().chain(
            dep_pairs
                .iter()
                .flat_map(|(k, v)| std::iter::once(k).chain(v)),
        ) {
            if !names.contains(r) {
                names.push(r.clone());
            }
        }
        if names.len() > 64 {
            return Err(unsupported("properties (more than 64 named)", path));
        }
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
        // propertyNames: a filter on the decoded key of every member.
        let key_filter = match m.get("propertyNames") {
            None | Some(Value::Bool(true)) => None,
            Some(pn) => Some(self.key_filter(pn, &format!("{path}/propertyNames"))?),
        };
        let colon = self.lit(":");
        let mut members = Vec::new();
        for name in &names {
            if key_filter
                .as_ref()
                .is_some_and(|f| !f.matches(name.as_bytes()))
            {
                // This key is not a valid property name: the member can never appear.
                members.push(Sym::Nt(self.b.nt("forbidden key")));
                continue;
            }
            let vs = value_schema(name, props.get(name))?;
            let v = self.schema(&vs, &format!("{path}/properties/{}", escape_pointer(name)))?;
            let key = self.string_terminal(&Dfa::literal(name.as_bytes()))?;
            let r = self.seq(&[key, colon, v]);
            members.push(self.b.alts(&format!("{path} member {name}"), vec![r]));
        }
        // Additional members: keys outside `names`, split by which patterns they match.
        let mut add_alts = Vec::new();
        let closed = additional == Value::Bool(false) && pat_dfas.is_empty();
        let subsets = if closed { 0 } else { 1u32 << pat_dfas.len() };
        let mut others = Dfa::empty();
        if !closed {
            others = match &key_filter {
                Some(f) => f.clone(),
                None => Dfa::any_string().clone(),
            };
            for name in &names {
                others = others.minus(&Dfa::literal(name.as_bytes()))?;
            }
        }
        for subset in 0..subsets {
            let mut keys = others.clone();
            let mut schemas = Vec::new();
            for (i, (d, v)) in pat_dfas.iter().zip(pats.values()).enumerate() {
                if subset >> i & 1 == 1 {
                    keys = keys.intersect(d)?;
                    schemas.push(v.clone());
                } else {
                    keys = keys.minus(d)?;
                }
                if keys.is_empty_language() {
                    break;
                }
            }
            if keys.is_empty_language() {
                continue;
            }
            let vs = if schemas.is_empty() {
                additional.clone()
            } else {
                Value::Object(Map::from_iter([(
                    "allOf".to_string(),
                    Value::Array(schemas),
                )]))
            };
            if vs == Value::Bool(false) {
                continue;
            }
            let v = self.schema(&vs, &format!("{path}/additionalProperties"))?;
            let key = self.string_terminal(&keys)?;
            add_alts.push(self.seq(&[key, colon, v]));
        }
        let add = if add_alts.is_empty() {
            None
        } else {
            Some(self.b.alts(&format!("{path} additional"), add_alts))
        };
        let req_mask: u64 = names
            .iter()
            .enumerate()
            .filter(|(_, n)| required.contains(n))
            .map(|(i, _)| 1u64 << i)
            .sum();
        let (open, close, comma) = (self.lit("{"), self.lit("}"), self.lit(","));
        let obj = self.b.nt(format!("{path} object"));
        let n = names.len();
        let min_props = get_usize(m, "minProperties", path)?.unwrap_or(0);
        let max_props = get_usize(m, "maxProperties", path)?;
        let counting = min_props > 0 || max_props.is_some();
        let free =
            !self.opts.fixed_property_order && n <= self.opts.max_free_order_properties.min(16);
        if !free && (counting || !deps.is_empty()) {
            return Err(unsupported(
                "minProperties/maxProperties/dependentRequired (with more named properties than any-order tracking allows)",
                path,
            ));
        }
        if min_props > 64 || max_props.is_some_and(|x| x > 64 && x < usize::MAX / 2) {
            return Err(unsupported("minProperties/maxProperties above 64", path));
        }
        // Counts saturate here: at maxProperties when there is one, else at minProperties.
        let cap = max_props.filter(|&x| x <= 64).unwrap_or(min_props) as u32;
        let may_add = |c: u32| max_props.is_none_or(|x| (c as usize) < x);
        let deps_ok = |s: u64| {
            deps.iter()
                .all(|&(p, need)| s >> p & 1 == 0 || s & need == need)
        };
        if free {
            // rest[(S, c)]: after at least one member, with named set S used and c members
            // written (saturated at `cap`).
            let mut rest: HashMap<(u64, u32), u32> = HashMap::new();
            let mut todo: Vec<(u64, u32)> = Vec::new();
            let mut get =
                |b: &mut GrammarBuilder, st: (u64, u32), todo: &mut Vec<(u64, u32)>| -> u32 {
                    let st = (st.0, st.1.min(cap));
                    *rest.entry(st).or_insert_with(|| {
                        todo.push(st);
                        b.nt(format!("{path} rest {:b} {}", st.0, st.1))
                    })
                };
            if req_mask == 0 && min_props == 0 {
                let r = self.seq(&[open, close]);
                self.b.rule(obj, r);
            }
            if may_add(0) {
                for (i, &mem) in members.iter().enumerate() {
                    let next = get(&mut self.b, (1 << i, 1), &mut todo);
                    let r = self.seq(&[open, mem, Sym::Nt(next)]);
                    self.b.rule(obj, r);
                }
                if let Some(a) = add {
                    let next = get(&mut self.b, (0, 1), &mut todo);
                    let r = self.seq(&[open, a, Sym::Nt(next)]);
                    self.b.rule(obj, r);
                }
            }
            while let Some((set, c)) = todo.pop() {
                let nt = get(&mut self.b, (set, c), &mut todo);
                if set & req_mask == req_mask && c as usize >= min_props && deps_ok(set) {
                    let r = self.seq(&[close]);
                    self.b.rule(nt, r);
                }
                if !may_add(c) {
                    continue;
                }
                for (i, &mem) in members.iter().enumerate() {
                    if set >> i & 1 == 0 {
                        let next = get(&mut self.b, (set | 1 << i, c + 1), &mut todo);
                        let r = self.seq(&[comma, mem, Sym::Nt(next)]);
                        self.b.rule(nt, r);
                    }
                }
                if let Some(a) = add {
                    let next = get(&mut self.b, (set, c + 1), &mut todo);
                    let r = self.seq(&[comma, a, Sym::Nt(next)]);
                    self.b.rule(nt, r);
                }
            }
        } else {
            // Schema order: f[i][e] considers named property i, e = whether a member was written.
            let f: Vec<[u32; 2]> = (0..=n)
                .map(|i| {
                    [
                        self.b.nt(format!("{path} ord {i}")),
                        self.b.nt(format!("{path} ord {i}+")),
                    ]
                })
                .collect();
            let tail = [
                self.b.nt(format!("{path} tail")),
                self.b.nt(format!("{path} tail+")),
            ];
            for i in 0..n {
                for e in 0..2 {
                    let mut r = if e == 1 { vec![comma] } else { vec![] };
                    r.extend([members[i], Sym::Nt(f[i + 1][1])]);
                    let r = self.seq(&r);
                    self.b.rule(f[i][e], r);
                    if req_mask >> i & 1 == 0 {
                        self.b.rule(f[i][e], vec![Sym::Nt(f[i + 1][e])]);
                    }
                }
            }
            for e in 0..2 {
                self.b.rule(f[n][e], vec![Sym::Nt(tail[e])]);
                let r = self.seq(&[close]);
                self.b.rule(tail[e], r);
                if let Some(a) = add {
                    let mut r = if e == 1 { vec![comma] } else { vec![] };
                    r.extend([a, Sym::Nt(tail[1])]);
                    let r = self.seq(&r);
                    self.b.rule(tail[e], r);
                }
            }
            let r = self.seq(&[open, Sym::Nt(f[0][0])]);
            self.b.rule(obj, r);
        }
        Ok(Sym::Nt(obj))
    }
}

fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() && s.is_char_boundary(i + 1) && s.is_char_boundary(i + 3)
        {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Compact serialisation (serde_json's, which keeps key order with `preserve_order`).
pub(crate) fn compact(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// JSON Schema equality: numbers compare by value, objects ignore key order.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn get_usize(m: &Map<String, Value>, k: &str, path: &str) -> Result<Option<usize>, Error> {
    match m.get(k) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(f) if f >= 0.0 && f.fract() == 0.0 => {
                Ok(Some(if f > 1e9 { usize::MAX / 2 } else { f as usize }))
            }
            _ => Err(invalid(path, "expected a non-negative integer")),
        },
    }
}

/// The types a schema allows (`integer` stands for integer-valued numbers only).
fn type_set(m: &Map<String, Value>, path: &str) -> Result<Vec<&'static str>, Error> {
    let name = |v: &Value| -> Result<&'static str, Error> {
        match v.as_str() {
            Some("integer") => Ok("integer"),
            Some(s) => TYPES
                .iter()
                .find(|t| **t == s)
                .copied()
                .ok_or_else(|| invalid(path, "unknown type")),
            None => Err(invalid(
                path,
                "type must be a string or an array of strings",
            )),
        }
    };
    match m.get("type") {
        None => Ok(TYPES.to_vec()),
        Some(Value::Array(a)) => a.iter().map(name).collect(),
        Some(v) => Ok(vec![name(v)?]),
    }
}

/// The JSON types a (normalised) schema can match, for the oneOf disjointness check.
fn possible_types(v: &Value) -> Vec<&'static str> {
    let Value::Object(m) = v else {
        return if *v == Value::Bool(false) {
            vec![]
        } else {
            TYPES.to_vec()
        };
    };
    let of = |v: &Value| -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    };
    if let Some(c) = m.get("const") {
        return vec![of(c)];
    }
    if let Some(Value::Array(e)) = m.get("enum") {
        let mut t: Vec<_> = e.iter().map(of).collect();
        t.dedup();
        return t;
    }
    match type_set(m, "") {
        Ok(t) => t
            .into_iter()
            .map(|t| if t == "integer" { "number" } else { t })
            .collect(),
        Err(_) => TYPES.to_vec(),
    }
}

/// Whether two schemas can never both match one value (a sufficient test only).
fn disjoint(a: &Value, b: &Value) -> bool {
    if a == &Value::Bool(false) || b == &Value::Bool(false) {
        return true;
    }
    if a.get("anyOf").is_some()
        || b.get("anyOf").is_some()
        || a.get("oneOf").is_some()
        || b.get("oneOf").is_some()
    {
        return false;
    }
    let (ta, tb) = (possible_types(a), possible_types(b));
    if !ta.iter().any(|t| tb.contains(t)) {
        return true;
    }
    let values = |v: &Value| -> Option<Vec<Value>> {
        match (v.get("const"), v.get("enum")) {
            (Some(c), _) => Some(vec![c.clone()]),
            (None, Some(Value::Array(e))) => Some(e.clone()),
            _ => None,
        }
    };
    if let (Some(x), Some(y)) = (values(a), values(b)) {
        return !x.iter().any(|p| y.iter().any(|q| json_eq(p, q)));
    }
    // Discriminated unions: a property required by both with disjoint values.
    let req = |v: &Value| -> Vec<String> {
        v.get("required")
            .and_then(|r| r.as_array())
            .map(|r| {
                r.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let only_objects = ta == ["object"] && tb == ["object"];
    if only_objects {
        for k in req(a) {
            if req(b).contains(&k) {
                if let (Some(pa), Some(pb)) = (
                    a.get("properties").and_then(|p| p.get(&k)),
                    b.get("properties").and_then(|p| p.get(&k)),
                ) {
                    if disjoint(pa, pb) {
                        return true;
                    }
                }
            }
        }
    }
    false
}

/// The schema of values valid under both.
fn both_of(a: Value, b: Value) -> Value {
    match (&a, &b) {
        (Value::Bool(true), _) => b,
        (_, Value::Bool(true)) => a,
        _ if a == b => a,
        _ => Value::Object(Map::from_iter([(
            "allOf".to_string(),
            Value::Array(vec![a, b]),
        )])),
    }
}

/// Merges two normalised schemas into one whose instances are those valid under both, or
/// reports the keyword that cannot be merged exactly.
fn merge(a: &Value, b: &Value, path: &str) -> Result<Value, Error> {
    let (ma, mb) = match (a, b) {
        (Value::Bool(false), _) | (_, Value::Bool(false)) => return Ok(Value::Bool(false)),
        (Value::Bool(true), _) => return Ok(b.clone()),
        (_, Value::Bool(true)) => return Ok(a.clone()),
        (Value::Object(x), Value::Object(y)) => (x, y),
        _ => return Err(invalid(path, "a schema must be an object or a boolean")),
    };
    let mut out = ma.clone();
    let both = |k: &str| ma.contains_key(k) && mb.contains_key(k);
    // additionalProperties refers to its own schema's properties, so merging it with other
    // property sets changes its meaning.
    let obj_keys = ["properties", "patternProperties", "additionalProperties"];
    let names = |m: &Map<String, Value>| -> Vec<String> {
        let mut n: Vec<String> = m
            .get("properties")
            .and_then(|p| p.as_object())
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default();
        n.sort();
        n
    };
    // A schema still holding `unevaluated*` (kept for its own anyOf/oneOf) must not see a
    // sibling's evaluations.
    for k in ["unevaluatedProperties", "unevaluatedItems"] {
        if ma.contains_key(k) || mb.contains_key(k) {
            return Err(unsupported(format!("allOf ({k} under anyOf/oneOf)"), path));
        }
    }
    let has_pat = ma.contains_key("patternProperties") || mb.contains_key("patternProperties");
    let has_add =
        ma.contains_key("additionalProperties") || mb.contains_key("additionalProperties");
    let closed = |m: &Map<String, Value>| {
        m.contains_key("additionalProperties") || m.contains_key("patternProperties")
    };
    // Without patterns, each key's schema on each side is its `properties` entry or else that
    // side's `additionalProperties`, so the conjunction is exact key by key.
    let mut exact: Option<(Map<String, Value>, Value)> = None;
    if has_add && !has_pat {
        let side = |m: &Map<String, Value>, k: &str| -> Value {
            m.get("properties")
                .and_then(|p| p.get(k))
                .or_else(|| m.get("additionalProperties"))
                .cloned()
                .unwrap_or(Value::Bool(true))
        };
        let mut all: Vec<String> = Vec::new();
        for m in [ma, mb] {
            for k in m
                .get("properties")
                .and_then(|p| p.as_object())
                .map(|p| p.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
            {
                if !all.contains(&k) {
                    all.push(k);
                }
            }
        }
        let mut props = Map::new();
        for k in all {
            props.insert(k.clone(), both_of(side(ma, &k), side(mb, &k)));
        }
        let add = |m: &Map<String, Value>| {
            m.get("additionalProperties")
                .cloned()
                .unwrap_or(Value::Bool(true))
        };
        exact = Some((props, both_of(add(ma), add(mb))));
    } else if (closed(ma)
        && (mb.contains_key("properties") || closed(mb))
        && names(ma) != names(mb))
        || (closed(mb) && ma.contains_key("properties") && names(ma) != names(mb))
    {
        return Err(unsupported(
            "allOf (patternProperties across branches)",
            path,
        ));
    }
    let _ = obj_keys;
    // Position by position, each side's schema is its `prefixItems` entry or else its `items`,
    // so the conjunction is exact element by element.
    let arrays = ["prefixItems", "items"]
        .iter()
        .any(|k| ma.contains_key(*k) || mb.contains_key(*k));
    if arrays {
        let prefix = |m: &Map<String, Value>| {
            m.get("prefixItems")
                .and_then(|p| p.as_array())
                .cloned()
                .unwrap_or_default()
        };
        let items = |m: &Map<String, Value>| m.get("items").cloned().unwrap_or(Value::Bool(true));
        let (pa, pb) = (prefix(ma), prefix(mb));
        let side = |p: &[Value], m: &Map<String, Value>, i: usize| {
            p.get(i).cloned().unwrap_or_else(|| items(m))
        };
        let n = pa.len().max(pb.len());
        let merged: Vec<Value> = (0..n)
            .map(|i| both_of(side(&pa, ma, i), side(&pb, mb, i)))
            .collect();
        if n > 0 {
            out.insert("prefixItems".into(), Value::Array(merged));
        } else {
            out.remove("prefixItems");
        }
        // An explicit `items: true` stays: it marks every item as evaluated.
        let it = both_of(items(ma), items(mb));
        if it == Value::Bool(true) && !ma.contains_key("items") && !mb.contains_key("items") {
            out.remove("items");
        } else {
            out.insert("items".into(), it);
        }
    }
    if let Some((props, add)) = exact {
        out.insert("properties".into(), Value::Object(props));
        out.insert("additionalProperties".into(), add);
    }
    for (k, vb) in mb {
        if (has_add && !has_pat && (k == "properties" || k == "additionalProperties"))
            || (arrays && (k == "prefixItems" || k == "items"))
        {
            continue;
        }
        let Some(va) = ma.get(k) else {
            out.insert(k.clone(), vb.clone());
            continue;
        };
        if va == vb {
            continue;
        }
        let num = |v: &Value| v.as_f64();
        let merged = match k.as_str() {
            "type" => {
                let ta = type_set(ma, path)?;
                let tb = type_set(mb, path)?;
                let mut t: Vec<Value> = Vec::new();
                for x in &ta {
                    for y in &tb {
                        let r = match (*x, *y) {
                            (p, q) if p == q => Some(p),
                            ("integer", "number") | ("number", "integer") => Some("integer"),
                            _ => None,
                        };
                        if let Some(r) = r {
                            if !t.contains(&Value::from(r)) {
                                t.push(Value::from(r));
                            }
                        }
                    }
                }
                if t.is_empty() {
                    return Ok(Value::Bool(false));
                }
                Value::Array(t)
            }
            "required" => {
                let mut r = va.as_array().cloned().unwrap_or_default();
                for x in vb.as_array().cloned().unwrap_or_default() {
                    if !r.contains(&x) {
                        r.push(x);
                    }
                }
                Value::Array(r)
            }
            "minimum" | "minLength" | "minItems" | "exclusiveMinimum" => match (num(va), num(vb)) {
                (Some(x), Some(y)) => {
                    if x >= y {
                        va.clone()
                    } else {
                        vb.clone()
                    }
                }
                _ => return Err(invalid(path, "expected a number")),
            },
            "maximum" | "maxLength" | "maxItems" | "exclusiveMaximum" => match (num(va), num(vb)) {
                (Some(x), Some(y)) => {
                    if x <= y {
                        va.clone()
                    } else {
                        vb.clone()
                    }
                }
                _ => return Err(invalid(path, "expected a number")),
            },
            "pattern" => {
                let mut p = out
                    .get(PATTERNS)
                    .and_then(|v| v.as_array())
                    .cloned()
                    .unwrap_or_default();
                p.push(vb.clone());
                out.insert(PATTERNS.into(), Value::Array(p));
                va.clone()
            }
            PATTERNS => {
                let mut p = va.as_array().cloned().unwrap_or_default();
                p.extend(vb.as_array().cloned().unwrap_or_default());
                Value::Array(p)
            }
            "properties" | "patternProperties" => {
                let (Some(pa), Some(pb)) = (va.as_object(), vb.as_object()) else {
                    return Err(invalid(path, "properties must be an object"));
                };
                let mut r = pa.clone();
                for (name, s) in pb {
                    let v = match pa.get(name) {
                        Some(s0) => Value::Object(Map::from_iter([(
                            "allOf".to_string(),
                            Value::Array(vec![s0.clone(), s.clone()]),
                        )])),
                        None => s.clone(),
                    };
                    r.insert(name.clone(), v);
                }
                Value::Object(r)
            }
            "items" | "additionalProperties" => Value::Object(Map::from_iter([(
                "allOf".to_string(),
                Value::Array(vec![va.clone(), vb.clone()]),
            )])),
            "enum" | "const" => {
                let xs = if k == "enum" {
                    va.as_array().cloned().unwrap_or_default()
                } else {
                    vec![va.clone()]
                };
                let ys = if k == "enum" {
                    vb.as_array().cloned().unwrap_or_default()
                } else {
                    vec![vb.clone()]
                };
                let keep: Vec<Value> = xs
                    .into_iter()
                    .filter(|x| ys.iter().any(|y| json_eq(x, y)))
                    .collect();
                out.remove("const");
                out.insert("enum".into(), Value::Array(keep));
                continue;
            }
            k if ANNOTATIONS.contains(&k) => va.clone(),
            _ => return Err(unsupported(format!("allOf (two different {k})"), path)),
        };
        out.insert(k.clone(), merged);
    }
    if both("enum") && both("const") {
        return Err(unsupported("allOf (enum with const)", path));
    }
    Ok(Value::Object(out))
}

/// Translates an ECMA-262 pattern to regex-automata syntax for an unanchored search over the
/// whole string (JSON Schema patterns are not anchored). A pattern anchored at both ends with no
/// top-level alternation is compiled as it stands, which gives a much smaller automaton.
fn search_regex(pattern: &str) -> String {
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
fn string_content(m: &Map<String, Value>, path: &str) -> Result<Dfa, Error> {
    let min = get_usize(m, "minLength", path)?.unwrap_or(0);
    let max = get_usize(m, "maxLength", path)?;
    if min > 10_000 || max.is_some_and(|x| x > 10_000) {
        return Err(unsupported("minLength/maxLength above 10000", path));
    }
    let mut d = Dfa::char_count(min, max)?;
    let mut patterns: Vec<&str> = Vec::new();
    if let Some(p) = m.get("pattern") {
        patterns.push(
            p.as_str()
                .ok_or_else(|| invalid(path, "pattern must be a string"))?,
        );
    }
    if let Some(Value::Array(ps)) = m.get(PATTERNS) {
        patterns.extend(ps.iter().filter_map(|p| p.as_str()));
    }
    for p in patterns {
        d = d.intersect(&Dfa::from_regex(&search_regex(p))?)?;
    }
    if let Some(f) = m.get("format") {
        let f = f
            .as_str()
            .ok_or_else(|| invalid(path, "format must be a string"))?;
        let re = format_regex(f).ok_or_else(|| unsupported(format!("format {f:?}"), path))?;
        d = d.intersect(&Dfa::from_regex(re)?)?;
    }
    Ok(d)
}

/// A finite decimal: sign, integer digits (canonical, no leading zeros) and fraction digits
/// (no trailing zeros).
#[derive(Clone, Debug, PartialEq)]
struct Decimal {
    neg: bool,
    int: String,
    frac: String,
}

impl Decimal {
    fn parse(v: &Value, path: &str) -> Result<Decimal, Error> {
        let Value::Number(n) = v else {
            return Err(invalid(path, "expected a number"));
        };
        let s = n.to_string();
        let (neg, s) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s.as_str()),
        };
        let (mant, exp) = match s.find(['e', 'E']) {
            Some(i) => (
                &s[..i],
                s[i + 1..]
                    .parse::<i64>()
                    .map_err(|_| invalid(path, "bad number"))?,
            ),
            None => (s, 0),
        };
        if exp.abs() > 400 {
            return Err(unsupported("number bound with exponent beyond 400", path));
        }
        let (ip, fp) = mant.split_once('.').unwrap_or((mant, ""));
        let digits: String = format!("{ip}{fp}");
        let point = ip.len() as i64 + exp;
        let (int, frac) = if point <= 0 {
            (
                String::new(),
                format!("{}{}", "0".repeat((-point) as usize), digits),
            )
        } else if point as usize >= digits.len() {
            (
                format!("{}{}", digits, "0".repeat(point as usize - digits.len())),
                String::new(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        let int = int.trim_start_matches('0').to_string();
        let int = if int.is_empty() { "0".to_string() } else { int };
        let frac = frac.trim_end_matches('0').to_string();
        let neg = neg && !(int == "0" && frac.is_empty());
        Ok(Decimal { neg, int, frac })
    }

    fn negate(&self) -> Decimal {
        let zero = self.int == "0" && self.frac.is_empty();
        Decimal {
            neg: !self.neg && !zero,
            ..self.clone()
        }
    }

    /// A regex matching exactly the JSON spellings (no exponent) of this value.
    fn equal_regex(&self) -> String {
        let sign = if self.neg {
            "-"
        } else if self.int == "0" && self.frac.is_empty() {
            "-?"
        } else {
            ""
        };
        if self.frac.is_empty() {
            format!(r"{sign}{}(\.0+)?", self.int)
        } else {
            format!(r"{sign}{}\.{}0*", self.int, self.frac)
        }
    }
}

fn alt(parts: Vec<String>) -> String {
    if parts.is_empty() {
        "[^\\x00-\\x{10FFFF}]".to_string()
    } else {
        format!("(?:{})", parts.join("|"))
    }
}

fn digit_class(lo: u8, hi: u8) -> String {
    if lo == hi {
        (lo as char).to_string()
    } else {
        format!("[{}-{}]", lo as char, hi as char)
    }
}

/// Canonical numerals (no leading zeros) of the same length as `a` and not below it.
fn same_len_ge(a: &[u8], first: bool) -> Vec<String> {
    if a.is_empty() {
        return vec![String::new()];
    }
    let mut out = Vec::new();
    let rest = a.len() - 1;
    let lo = a[0] + 1;
    if lo <= b'9' {
        out.push(format!(
            "{}[0-9]{{{rest}}}",
            digit_class(lo.max(if first && rest > 0 { b'1' } else { b'0' }), b'9')
        ));
    }
    for tail in same_len_ge(&a[1..], false) {
        out.push(format!("{}{}", a[0] as char, tail));
    }
    out
}

/// Canonical numerals of the same length as `a` and below it.
fn same_len_lt(a: &[u8], first: bool) -> Vec<String> {
    if a.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let rest = a.len() - 1;
    let lo = if first && rest > 0 { b'1' } else { b'0' };
    if a[0] > lo {
        out.push(format!("{}[0-9]{{{rest}}}", digit_class(lo, a[0] - 1)));
    }
    for tail in same_len_lt(&a[1..], false) {
        out.push(format!("{}{}", a[0] as char, tail));
    }
    out
}

/// Canonical numerals with value at least `a` (`a` canonical).
fn int_ge(a: &str) -> String {
    let d = a.len();
    let mut parts = vec![format!("[1-9][0-9]{{{d},}}")];
    parts.extend(same_len_ge(a.as_bytes(), true));
    alt(parts)
}

/// Canonical numerals with value below `a`.
fn int_lt(a: &str) -> String {
    let d = a.len();
    let mut parts = Vec::new();
    if d >= 2 {
        parts.push(format!("0|[1-9][0-9]{{0,{}}}", d - 2));
    }
    parts.extend(same_len_lt(a.as_bytes(), true));
    alt(parts)
}

/// Fraction digit strings `D` (possibly empty) with `0.D >= 0.B`.
fn frac_ge(b: &[u8]) -> Vec<String> {
    if b.iter().all(|&x| x == b'0') {
        return vec!["[0-9]*".to_string()];
    }
    let mut out = Vec::new();
    if b[0] < b'9' {
        out.push(format!("{}[0-9]*", digit_class(b[0] + 1, b'9')));
    }
    for t in frac_ge(&b[1..]) {
        out.push(format!("{}{}", b[0] as char, t));
    }
    out
}

/// Fraction digit strings `D` (possibly empty) with `0.D <= 0.B`.
fn frac_le(b: &[u8]) -> Vec<String> {
    if b.is_empty() {
        return vec!["0*".to_string()];
    }
    let mut out = vec![String::new()];
    if b[0] > b'0' {
        out.push(format!("{}[0-9]*", digit_class(b'0', b[0] - 1)));
    }
    for t in frac_le(&b[1..]) {
        out.push(format!("{}{}", b[0] as char, t));
    }
    out
}

/// The fraction part (the dot and digits, or nothing) for the digit strings `alts`; `empty`
/// says whether the empty digit string (no fraction) is in the set. A bare trailing dot that
/// this may allow is removed by intersecting with the JSON number shape.
fn frac_part(alts: Vec<String>, empty: bool) -> String {
    let body = format!(r"\.(?:{})", alts.join("|"));
    if empty {
        format!("(?:{body})?")
    } else {
        body
    }
}

/// Unsigned spellings `(P, N)`: `P` matches `U` with `U >= c`, `N` matches `U` with `-U >= c`.
fn ge_parts(c: &Decimal) -> (String, String) {
    let any_frac = r"(?:\.[0-9]+)?";
    let unsigned = format!(r"(?:0|[1-9][0-9]*){any_frac}");
    if !c.neg {
        // U >= c: larger integer part, or equal integer part and fraction >= c's.
        let bigger = format!("{}{any_frac}", int_ge(&increment(&c.int)));
        let equal = format!(
            "{}{}",
            c.int,
            frac_part(frac_ge(c.frac.as_bytes()), c.frac.is_empty())
        );
        let p = format!("(?:{bigger}|{equal})");
        // -U >= c >= 0 only for U = 0.
        let n = if c.int == "0" && c.frac.is_empty() {
            r"0(?:\.0+)?".to_string()
        } else {
            alt(vec![])
        };
        (p, n)
    } else {
        // -U >= -A.B: U <= A.B.
        let smaller = if c.int == "0" {
            alt(vec![])
        } else {
            format!("{}{any_frac}", int_lt(&c.int))
        };
        let equal = format!("{}{}", c.int, frac_part(frac_le(c.frac.as_bytes()), true));
        (unsigned, format!("(?:{smaller}|{equal})"))
    }
}

fn increment(a: &str) -> String {
    let mut d: Vec<u8> = a.bytes().collect();
    let mut i = d.len();
    loop {
        if i == 0 {
            d.insert(0, b'1');
            break;
        }
        i -= 1;
        if d[i] == b'9' {
            d[i] = b'0';
        } else {
            d[i] += 1;
            break;
        }
    }
    String::from_utf8(d).unwrap_or_default()
}

/// Spellings of numbers `>= c` (`strict`: `> c`).
fn bound_dfa(c: &Decimal, lower: bool, strict: bool) -> Result<Dfa, Error> {
    let re = if lower {
        let (p, n) = ge_parts(c);
        format!("{p}|-{n}")
    } else {
        // x <= c  <=>  -x >= -c.
        let (p, n) = ge_parts(&c.negate());
        format!("{n}|-{p}")
    };
    let d = Dfa::from_regex(&re)?;
    if strict {
        d.minus(&Dfa::from_regex(&c.equal_regex())?)
    } else {
        Ok(d)
    }
}

/// The automaton of number spellings allowed by a numeric schema.
fn number_dfa(m: &Map<String, Value>, integer: bool, path: &str) -> Result<Dfa, Error> {
    let bounded = [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    ]
    .iter()
    .any(|k| m.contains_key(*k));
    let mut integer = integer;
    if let Some(k) = m.get("multipleOf") {
        let k = Decimal::parse(k, path)?;
        if k.neg || (k.int == "0" && k.frac.is_empty()) {
            return Err(invalid(path, "multipleOf must be positive"));
        }
        // An integer x is a multiple of p/10^f exactly when p / gcd(p, 10^f) divides x; for
        // non-integer numbers we have no exact automaton.
        if !k.frac.is_empty() && !integer {
            return Err(unsupported("multipleOf (non-integer, on numbers)", path));
        }
        integer = true;
    }
    let mut d = if integer {
        Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.0+)?")?
    } else if bounded {
        Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")?
    } else {
        Dfa::from_regex(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")?
    };
    for (k, lower, strict) in [
        ("minimum", true, false),
        ("maximum", false, false),
        ("exclusiveMinimum", true, true),
        ("exclusiveMaximum", false, true),
    ] {
        if let Some(v) = m.get(k) {
            let c = Decimal::parse(v, path)?;
            d = d.intersect(&bound_dfa(&c, lower, strict)?)?;
        }
    }
    if let Some(k) = m.get("multipleOf") {
        let k = Decimal::parse(k, path)?;
        let num: u128 = format!("{}{}", k.int, k.frac)
            .parse()
            .map_err(|_| unsupported("multipleOf (too large)", path))?;
        let den: u128 = 10u128
            .checked_pow(k.frac.len() as u32)
            .ok_or_else(|| unsupported("multipleOf (too precise)", path))?;
        let g = gcd(num, den);
        let p = num / g;
        if p > 100_000 {
            return Err(unsupported("multipleOf (above 100000)", path));
        }
        d = d.intersect(&multiple_dfa(p as u64)?)?;
    }
    Ok(d)
}

fn gcd(a: u128, b: u128) -> u128 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Integer spellings (optional `-`, optional `.0+`) of multiples of `p`.
fn multiple_dfa(p: u64) -> Result<Dfa, Error> {
    #[derive(Clone, Hash, PartialEq, Eq)]
    enum S {
        Start,
        Minus,
        Zero,
        Digits(u64),
        Dot(u64),
        Frac(u64),
    }
    Dfa::explore(
        S::Start,
        |s, b| match (s, b) {
            (S::Start, b'-') => Some(S::Minus),
            (S::Start | S::Minus, b'0') => Some(S::Zero),
            (S::Start | S::Minus, b'1'..=b'9') => Some(S::Digits((b - b'0') as u64 % p)),
            (S::Digits(r), b'0'..=b'9') => Some(S::Digits((r * 10 + (b - b'0') as u64) % p)),
            (S::Zero, b'.') => Some(S::Dot(0)),
            (S::Digits(r), b'.') => Some(S::Dot(*r)),
            (S::Dot(r) | S::Frac(r), b'0') => Some(S::Frac(*r)),
            _ => None,
        },
        |s| matches!(s, S::Zero | S::Digits(0) | S::Frac(0)),
        "multipleOf",
        &IDENTITY,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn num(schema: Value) -> Dfa {
        let m = schema.as_object().unwrap().clone();
        let integer = m.get("type") == Some(&json!("integer"));
        number_dfa(&m, integer, "#").unwrap()
    }

    #[test]
    fn numeric_bounds_against_arithmetic() {
        let cases = [
            json!({"minimum": 1.1}),
            json!({"minimum": -2}),
            json!({"maximum": 3.0}),
            json!({"exclusiveMaximum": 3.0}),
            json!({"exclusiveMinimum": -1.25}),
            json!({"minimum": 0, "maximum": 100}),
            json!({"exclusiveMinimum": 0}),
            json!({"maximum": -0.5}),
            json!({"minimum": 12, "exclusiveMaximum": 1000}),
        ];
        let samples = [
            "0", "-0", "1", "1.1", "1.10", "1.09", "1.2", "2", "-2", "-2.0", "-2.01", "-1.99", "3",
            "3.0", "2.999", "3.01", "-1.25", "-1.250", "-1.24", "-1.3", "100", "100.5", "99.99",
            "-0.5", "-0.49", "-0.51", "12", "11.9", "999", "999.99", "1000", "1000.0", "10", "0.0",
        ];
        for case in cases {
            let d = num(case.clone());
            for s in samples {
                let x: f64 = s.parse().unwrap();
                let m = case.as_object().unwrap();
                let ok = m.iter().all(|(k, v)| {
                    let c = v.as_f64().unwrap();
                    match k.as_str() {
                        "minimum" => x >= c,
                        "maximum" => x <= c,
                        "exclusiveMinimum" => x > c,
                        "exclusiveMaximum" => x < c,
                        _ => unreachable!(),
                    }
                });
                assert_eq!(d.matches(s.as_bytes()), ok, "{case} on {s}");
            }
        }
    }

    #[test]
    fn integer_multiples() {
        let d = num(json!({"type": "integer", "multipleOf": 3}));
        for x in -40i64..40 {
            assert_eq!(d.matches(x.to_string().as_bytes()), x % 3 == 0, "{x}");
        }
        assert!(d.matches(b"9.0") && !d.matches(b"9.5"));
        let half = num(json!({"type": "integer", "multipleOf": 1.5}));
        assert!(half.matches(b"3") && !half.matches(b"2"));
    }

    #[test]
    fn uri_resolution_follows_rfc_3986() {
        // RFC 3986, section 5.4.1 ("Normal Examples"), base "http://a/b/c/d;p?q".
        let base = "http://a/b/c/d;p?q";
        for (r, want) in [
            ("g:h", "g:h"),
            ("g", "http://a/b/c/g"),
            ("./g", "http://a/b/c/g"),
            ("g/", "http://a/b/c/g/"),
            ("/g", "http://a/g"),
            ("//g", "http://g"),
            ("?y", "http://a/b/c/d;p?y"),
            ("g?y", "http://a/b/c/g?y"),
            ("#s", "http://a/b/c/d;p?q#s"),
            ("g#s", "http://a/b/c/g#s"),
            (";x", "http://a/b/c/;x"),
            ("", "http://a/b/c/d;p?q"),
            (".", "http://a/b/c/"),
            ("./", "http://a/b/c/"),
            ("..", "http://a/b/"),
            ("../", "http://a/b/"),
            ("../g", "http://a/b/g"),
            ("../..", "http://a/"),
            ("../../g", "http://a/g"),
        ] {
            assert_eq!(resolve_uri(base, r), want, "{r}");
        }
    }

    fn accepts(schema: &Value, text: &str) -> bool {
        compile_json_schema(schema, &JsonOptions::default())
            .unwrap()
            .recognizes(text.as_bytes())
    }

    #[test]
    fn references_through_ids_and_anchors() {
        // A plain-name anchor.
        let s = json!({"$ref": "#foo", "$defs": {"A": {"$anchor": "foo", "type": "integer"}}});
        assert!(accepts(&s, "12") && !accepts(&s, "\"a\""));
        // A pointer inside an embedded resource is read in that resource, not the root: the
        // root's own `inner` would allow numbers.
        let s = json!({
            "$id": "http://example.com/root.json",
            "$defs": {"inner": {"type": "number"}},
            "properties": {"foo": {
                "$id": "other.json",
                "$defs": {"inner": {"type": "string"}},
                "$ref": "#/$defs/inner"
            }}
        });
        assert!(accepts(&s, r#"{"foo":"x"}"#) && !accepts(&s, r#"{"foo":1}"#));
        // A relative reference to an embedded resource, and the same anchor name in two.
        let s = json!({
            "$id": "http://example.com/a/root",
            "$ref": "child1#it",
            "$defs": {
                "c1": {"$id": "child1", "$defs": {"x": {"$anchor": "it", "type": "boolean"}}},
                "c2": {"$id": "child2", "$defs": {"x": {"$anchor": "it", "type": "null"}}}
            }
        });
        assert!(accepts(&s, "true") && !accepts(&s, "null"));
        // A property named `$id` is a name, not an identifier; a reference to nothing in the
        // document stays unsupported.
        let s = json!({"properties": {"$id": {"type": "string"}}, "$ref": "#/$defs/d",
                       "$defs": {"d": {"required": ["$id"]}}});
        assert!(accepts(&s, r#"{"$id":"x"}"#) && !accepts(&s, "{}"));
        let s = json!({"$ref": "http://example.com/elsewhere.json"});
        assert!(matches!(
            compile_json_schema(&s, &JsonOptions::default()),
            Err(Error::UnsupportedKeyword { .. })
        ));
    }
}
