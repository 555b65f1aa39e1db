//! JSON and JSON Schema, compiled to a [`Grammar`].
//!
//! Strings are single terminals: an automaton for the decoded content (pattern, length, format,
//! key exclusions, intersected as automata) wrapped in the JSON string encoding, so escapes are
//! handled exactly. Numbers with bounds are regular expressions built digit by digit. Objects
//! allow their properties in any order, however many: up to
//! [`JsonOptions::max_free_order_properties`] named ones by rules per set of names used, past
//! that by one loop over the members that the parser checks at run time (keys seen, members
//! counted); in the schema's order only when asked ([`JsonOptions::fixed_property_order`]).
//!
//! A schema goes through four stages, one module each:
//!
//! 1. `resolve`: `$ref`s through `$id` and `$anchor` become JSON pointers from the root.
//! 2. `schema`: the document is parsed once into typed [`schema::Schema`] values, each draft's
//!    forms into the same fields (refusing known keywords nextok cannot enforce, with their
//!    path; listing unknown ones, which are annotations); references become indices into a
//!    table of targets.
//! 3. `algebra`: `allOf`, `$ref` beside other keywords, `not`, `if` and `unevaluated*` are
//!    normalised away by intersecting typed schemas exactly and by exact complements (`not`
//!    pushed down to the keywords), or refused; `oneOf` branches that may overlap each exclude
//!    the others through the same complements.
//! 4. `compile` (scalars, combinators), `containers` (arrays, objects), `string` and `number`
//!    (automata for the terminals) build the grammar.

mod algebra;
mod compile;
mod containers;
mod ecma_regex;
#[cfg(test)]
mod feature_tests;
mod number;
mod prebuilt;
mod resolve;
mod schema;
mod string;
mod unique;
mod unique_objects;
mod unique_split;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::constraint::GrammarConstraint;
use crate::grammar::Grammar;
use crate::limits::Limits;
use crate::vocab::TokenVocab;
use crate::Error;

pub(crate) use schema::compact;

/// Options for JSON and JSON Schema constraints.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct JsonOptions {
    /// Most whitespace bytes allowed in each gap between JSON tokens; 0 (the default) means
    /// compact output. The bound keeps a model from looping on spaces.
    pub max_whitespace: usize,
    /// Object properties must come in the schema's order (default: any order).
    pub fixed_property_order: bool,
    /// Objects with at most this many named properties (and at most 16) track the names used
    /// in their rules, which grow as 2^n; objects with more are one loop over their members,
    /// whose keys and counts the parser checks at run time. Both accept the same objects, in
    /// any order (default 4: the loop's masks cost about what the rules' do, and an object of
    /// 5 to 8 names compiled to hundreds of rules). An object that only the rules can track
    /// (`not` of its members, which asks for some member to be present, or
    /// `dependentRequired` beside `minProperties`/`maxProperties`) keeps them up to 8 names
    /// whatever this says.
    pub max_free_order_properties: usize,
    /// Bounds on the grammar's size and on the work of each mask (default:
    /// [`Limits::DEFAULT`]).
    pub limits: Limits,
    /// The draft whose keyword forms a schema without a known `$schema` is read with. `None`
    /// (the default) reads every draft's forms where they cannot be confused (`items` as an
    /// array with `additionalItems`, boolean `exclusiveMinimum`/`exclusiveMaximum`,
    /// `dependencies`, draft-04's `id` where no `$id` is written) and, where drafts disagree,
    /// enforces the stricter reading (keywords beside `$ref` apply).
    pub draft: Option<Draft>,
    /// Refuse keywords this crate does not know ([`Error::UnknownKeyword`]) instead of
    /// ignoring them as annotations, as JSON Schema says (default: ignore and list them in
    /// [`CompiledSchema::ignored`]).
    pub strict: bool,
    /// Whether `format` is enforced (the default, for the formats nextok knows) or only an
    /// annotation, as draft 2020-12 does by default.
    pub format: FormatMode,
    /// Documents that `$ref`s may name by absolute URI (default: none; nextok never fetches
    /// a URI, so a reference to a document not given here is refused by name).
    pub resources: SchemaResources,
    /// The URI the schema was retrieved from, its base URI when its root has no `$id` (or
    /// draft-04 `id`) of its own, as RFC 3986 and JSON Schema take a retrieval URI (default:
    /// none). Relative `$ref`s to other documents (`"other.json#/definitions/x"`) then resolve
    /// against it and can name [`JsonOptions::resources`].
    pub base_uri: Option<String>,
    /// Build the automaton of a string value's large `pattern` when generation first reaches
    /// that value, not at compile (the default, `true`): a URL pattern with `{1,256}` takes
    /// tens of milliseconds to determinize, and most outputs never write the property it
    /// constrains. A pattern is deferred only once the compile has found a string it matches
    /// (so the grammar is pruned as if it were built); should the deferred build fail (an
    /// automaton past [`Limits::max_terminal_states`] or the state limit), the `fill_mask` or
    /// `advance` that reached it returns that error. `false` builds every automaton at
    /// compile, so that every error comes from the compile.
    pub defer_large_patterns: bool,
}

/// Schema documents by absolute URI, for `$ref`s that name other documents. A referenced
/// document is bundled into the schema as an embedded resource (as JSON Schema 2020-12's
/// bundling does: under `$defs` or `definitions`, with its URI as identifier), so it is read
/// like any part of the schema. A document whose `$schema` names another draft than the
/// referring schema's is refused (its keywords could mean something else); one without
/// `$schema` is read as the referring schema's draft.
///
/// ```
/// use nextok_constraints::{compile_json_schema, JsonOptions, SchemaResources};
///
/// let mut resources = SchemaResources::new();
/// resources.insert(
///     "https://example.com/defs.json",
///     serde_json::json!({"definitions": {"port": {"type": "integer", "minimum": 1}}}),
/// );
/// let schema = serde_json::json!({"$ref": "https://example.com/defs.json#/definitions/port"});
/// // Without the document the reference is refused...
/// assert!(compile_json_schema(&schema, &JsonOptions::default()).is_err());
/// // ...with it, it is compiled.
/// let options = JsonOptions::default().with_resources(resources);
/// let g = compile_json_schema(&schema, &options)?;
/// assert!(g.recognizes(b"8080") && !g.recognizes(b"0"));
/// # Ok::<(), nextok_constraints::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SchemaResources {
    docs: Arc<BTreeMap<String, Resource>>,
}

/// A document and whether it is self-contained (`resolve::self_contained`), found once when
/// it is added rather than at every compile that names it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resource {
    doc: Value,
    self_contained: bool,
}

impl SchemaResources {
    /// No documents.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `schema` as the document at `uri` (its fragment, if any, is dropped).
    pub fn insert(&mut self, uri: &str, schema: Value) {
        let uri = uri.split_once('#').map_or(uri, |(u, _)| u);
        let self_contained = resolve::self_contained(&schema);
        let r = Resource {
            doc: schema,
            self_contained,
        };
        Arc::make_mut(&mut self.docs).insert(uri.to_string(), r);
    }

    /// Adds `schema` under its own identifier (`$id`, or draft-04's `id`); `false` when it
    /// has none that is an absolute URI.
    pub fn insert_document(&mut self, schema: Value) -> bool {
        let id = ["$id", "id"].iter().find_map(|k| match schema.get(*k) {
            Some(Value::String(s)) if s.contains(':') => Some(s.clone()),
            _ => None,
        });
        match id {
            Some(id) => {
                self.insert(&id, schema);
                true
            }
            None => false,
        }
    }

    /// Adds every document of `other`; where both hold one at the same URI, `other`'s is kept.
    pub fn extend(&mut self, other: SchemaResources) {
        let docs = Arc::unwrap_or_clone(other.docs);
        Arc::make_mut(&mut self.docs).extend(docs);
    }

    /// The document at `uri` (without fragment).
    pub fn get(&self, uri: &str) -> Option<&Value> {
        self.docs.get(uri).map(|r| &r.doc)
    }

    /// The document at `uri` when it is self-contained (`resolve::self_contained`).
    fn self_contained(&self, uri: &str) -> Option<&Value> {
        self.docs
            .get(uri)
            .filter(|r| r.self_contained)
            .map(|r| &r.doc)
    }

    /// How many documents there are.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }
}

/// `root` with `base` written as its identifier (`id` for draft-04, `$id` otherwise) when it
/// is an object without one of its own; `None` when nothing changes.
fn with_base_uri(root: &Value, draft: Option<Draft>, base: Option<&str>) -> Option<Value> {
    let (base, Value::Object(m)) = (base?, root) else {
        return None;
    };
    if resolve::identifier(m, draft).is_some() {
        return None;
    }
    let key = if draft == Some(Draft::Draft4) {
        "id"
    } else {
        "$id"
    };
    let mut m = m.clone();
    m.insert(key.to_string(), Value::String(base.to_string()));
    Some(Value::Object(m))
}

/// `root` with its base URI written in, the documents its `$ref`s name bundled in, and its
/// references through identifiers and anchors rewritten as pointers; `None` when none of these
/// changes it.
fn resolved_document(
    root: &Value,
    draft: Option<Draft>,
    options: &JsonOptions,
) -> Result<Option<Value>, Error> {
    let based = with_base_uri(root, draft, options.base_uri.as_deref());
    let schema = based.as_ref().unwrap_or(root);
    // A copy made for this compile (the bundle, or the root with its base) is resolved where
    // it is; only the caller's own document is copied to be rewritten.
    match bundle(schema, draft, &options.resources)?.or(based) {
        Some(mut owned) => {
            resolve::resolve_identifiers_in_place(&mut owned, draft);
            Ok(Some(owned))
        }
        None => Ok(resolve::resolve_identifiers(root, draft)),
    }
}

/// Most documents bundled into one schema.
const MAX_BUNDLED: usize = 64;

/// `root` with every document that its `$ref`s name and `resources` holds (and those that
/// these name, in turn) embedded as resources with their URIs as identifiers; `None` when
/// nothing was embedded.
fn bundle(
    root: &Value,
    draft: Option<Draft>,
    resources: &SchemaResources,
) -> Result<Option<Value>, Error> {
    if resources.is_empty() || !root.is_object() {
        return Ok(None);
    }
    let holder = match draft {
        Some(Draft::Draft2019_09 | Draft::Draft2020_12) => "$defs",
        _ => "definitions",
    };
    let id_key = if draft == Some(Draft::Draft4) {
        "id"
    } else {
        "$id"
    };
    if root.get(holder).is_some_and(|h| !h.is_object()) {
        return Ok(None);
    }
    // Copied only once a document is to be embedded: most schemas name no other.
    let mut out: Option<Value> = None;
    let mut embedded: Vec<String> = Vec::new();
    let mut first = true;
    loop {
        let references = resolve::external_references(out.as_ref().unwrap_or(root), draft);
        let mut wanted: Vec<String> = Vec::new();
        for r in &references {
            let uri = r.split_once('#').map_or(r.as_str(), |(u, _)| u);
            if resources.get(uri).is_some()
                && !embedded.iter().any(|e| e == uri)
                && !wanted.iter().any(|w| w == uri)
            {
                wanted.push(uri.to_string());
            }
        }
        if wanted.is_empty() {
            break;
        }
        // When every document the root names is self-contained (`resolve::self_contained`),
        // only the parts that the root's references reach are embedded: nothing else can
        // name the rest, as these documents name no other. Kubernetes' definitions are 800 kB
        // of which a schema uses a few objects, and walking all of them was most of its
        // compile. Nor do such documents bring a reference of their own to bundle: the walk
        // of the bundle for more (its whole copy of every document: lsdlschema's nine
        // versions) would find none.
        let done = first && wanted.iter().all(|u| resources.self_contained(u).is_some());
        let parts: Option<Vec<Value>> = match done {
            true => wanted
                .iter()
                .map(|uri| {
                    let doc = resources.self_contained(uri)?;
                    // A reference without a fragment names the whole document.
                    let fragments: Vec<&str> = references
                        .iter()
                        .map(|r| r.split_once('#').unwrap_or((r, "")))
                        .filter(|(u, _)| u == uri)
                        .map(|(_, f)| f)
                        .collect();
                    resolve::needed_part(doc, &fragments)
                })
                .collect(),
            false => None,
        };
        first = false;
        let mut parts = parts.map(Vec::into_iter);
        let out = out.get_or_insert_with(|| root.clone());
        for uri in wanted {
            let part = parts.as_mut().and_then(Iterator::next);
            if embedded.len() >= MAX_BUNDLED {
                return Err(schema::unsupported(
                    format!("$ref {uri} (more than {MAX_BUNDLED} documents)"),
                    "#",
                ));
            }
            let Some(doc) = resources.get(&uri) else {
                continue;
            };
            if let (Some(d), Some(Value::String(s))) = (draft, doc.get("$schema")) {
                if Draft::from_uri(s).is_some_and(|dd| dd != d) {
                    return Err(schema::unsupported(
                        format!("$ref {uri} (a document of another draft)"),
                        "#",
                    ));
                }
            }
            // The document under its URI. A document whose root has `$ref` goes under an
            // `allOf`, so that drafts 4 to 7, where `$ref` overrides its siblings, still see
            // the identifier.
            let mut body = match (part, doc) {
                (Some(part), _) => part,
                (None, Value::Bool(true)) => Value::Object(Map::new()),
                (None, Value::Bool(false)) => serde_json::json!({"not": {}}),
                (None, d) => d.clone(),
            };
            if let Value::Object(m) = &mut body {
                m.remove("$id");
                m.remove("id");
                m.remove("$schema");
                if m.contains_key("$ref") {
                    body = serde_json::json!({"allOf": [body]});
                }
            }
            if let Value::Object(m) = &mut body {
                m.insert(id_key.to_string(), Value::String(uri.clone()));
            }
            let name = format!("nextok-bundled-{}", embedded.len());
            if let Value::Object(o) = out {
                let h = o
                    .entry(holder.to_string())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(h) = h {
                    h.insert(name, body);
                }
            }
            embedded.push(uri);
        }
        if done {
            break;
        }
    }
    Ok(out.filter(|_| !embedded.is_empty()))
}

/// A JSON Schema draft, as `$schema` names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Draft {
    /// `http://json-schema.org/draft-04/schema#`: `id`, `definitions`, boolean
    /// `exclusiveMinimum`/`exclusiveMaximum`, `dependencies`, `items` arrays with
    /// `additionalItems`; keywords beside `$ref` are ignored.
    Draft4,
    /// `http://json-schema.org/draft-06/schema#`: `$id`, numeric exclusive bounds, `const`,
    /// `contains`, `propertyNames`.
    Draft6,
    /// `http://json-schema.org/draft-07/schema#`: `if`/`then`/`else`.
    Draft7,
    /// `https://json-schema.org/draft/2019-09/schema`: `dependentRequired`,
    /// `dependentSchemas`, `unevaluated*`; keywords beside `$ref` apply.
    Draft2019_09,
    /// `https://json-schema.org/draft/2020-12/schema`: `prefixItems`, `items` after them.
    Draft2020_12,
}

impl Draft {
    /// The draft a `$schema` URI names, if nextok knows it (draft-03 and older are not).
    pub fn from_uri(uri: &str) -> Option<Draft> {
        let u = uri.trim_end_matches('#');
        [
            ("draft-04", Draft::Draft4),
            ("draft-06", Draft::Draft6),
            ("draft-07", Draft::Draft7),
            ("2019-09", Draft::Draft2019_09),
            ("2020-12", Draft::Draft2020_12),
        ]
        .into_iter()
        .find(|(tag, _)| u.contains(tag) && u.contains("json-schema.org"))
        .map(|(_, d)| d)
    }
}

/// The keywords of each vocabulary that changes validity, as drafts 2019-09 and 2020-12 split
/// them (`$vocabulary`): a vocabulary a meta-schema leaves out leaves its keywords annotations.
const VALIDATION_KEYWORDS: &[&str] = &[
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
];
const APPLICATOR_KEYWORDS: &[&str] = &[
    "prefixItems",
    "items",
    "additionalItems",
    "contains",
    "additionalProperties",
    "properties",
    "patternProperties",
    "dependentSchemas",
    "propertyNames",
    "if",
    "then",
    "else",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
];
const UNEVALUATED_KEYWORDS: &[&str] = &["unevaluatedItems", "unevaluatedProperties"];

/// The draft and the keywords turned off (annotations) of a schema whose `$schema` names the
/// meta-schema `meta` at `uri`: the meta-schema's own `$schema` names the draft (2019-09 or
/// 2020-12, which have vocabularies), and its `$vocabulary` the vocabularies on (all of the
/// draft's when absent). A vocabulary nextok does not know that the meta-schema requires
/// (`true`) is refused, as the specification asks; an optional one (`false`) is ignored.
fn dialect(uri: &str, meta: &Value) -> Result<(Draft, Vec<&'static str>), Error> {
    let refuse = |what: String| Error::UnsupportedKeyword {
        keyword: format!("$schema {uri} ({what})"),
        path: "#".into(),
    };
    let draft = match meta
        .get("$schema")
        .and_then(Value::as_str)
        .map(Draft::from_uri)
    {
        Some(Some(d @ (Draft::Draft2019_09 | Draft::Draft2020_12))) => d,
        Some(Some(d)) => return Ok((d, Vec::new())),
        _ => {
            return Err(refuse(
                "a meta-schema whose own `$schema` is no draft nextok knows".into(),
            ))
        }
    };
    let Some(vocabularies) = meta.get("$vocabulary") else {
        return Ok((draft, Vec::new()));
    };
    let Value::Object(vocabularies) = vocabularies else {
        return Err(refuse("`$vocabulary` is not an object".into()));
    };
    let tag = if draft == Draft::Draft2019_09 {
        "2019-09"
    } else {
        "2020-12"
    };
    let known = |v: &str| format!("https://json-schema.org/draft/{tag}/vocab/{v}");
    let names: &[&str] = if draft == Draft::Draft2019_09 {
        &[
            "core",
            "applicator",
            "validation",
            "meta-data",
            "format",
            "content",
        ]
    } else {
        &[
            "core",
            "applicator",
            "unevaluated",
            "validation",
            "meta-data",
            "format-annotation",
            "format-assertion",
            "content",
        ]
    };
    for (v, required) in vocabularies {
        if required == &Value::Bool(true) && !names.iter().any(|n| known(n) == *v) {
            return Err(refuse(format!(
                "requires the vocabulary {v}, unknown to nextok"
            )));
        }
    }
    let on = |n: &str| vocabularies.contains_key(&known(n));
    let mut off = Vec::new();
    if !on("validation") {
        off.extend_from_slice(VALIDATION_KEYWORDS);
    }
    if !on("applicator") {
        off.extend_from_slice(APPLICATOR_KEYWORDS);
    }
    // 2019-09's applicator vocabulary holds `unevaluated*`; 2020-12 has a vocabulary for them.
    let unevaluated = if draft == Draft::Draft2019_09 {
        "applicator"
    } else {
        "unevaluated"
    };
    if !on(unevaluated) {
        off.extend_from_slice(UNEVALUATED_KEYWORDS);
    }
    Ok((draft, off))
}

/// How `format` is treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatMode {
    /// Known formats are enforced exactly (`date` with real month lengths and leap years,
    /// `time`, `date-time`, `duration`, `email`, `hostname`, `ipv4`, `ipv6`, `uri`, `iri`,
    /// `uri-template`, `uuid`, `json-pointer`, `relative-json-pointer`...); unknown format names are annotations, listed in
    /// [`CompiledSchema::ignored`]; `regex` is ECMA-262's `u`-mode pattern syntax, as a grammar
    /// (stricter than the specification where only a context-sensitive check would be exact:
    /// back references, a second named group, ...); known formats nextok cannot enforce
    /// exactly (`idn-email`, `idn-hostname`) are [`Error::UnsupportedKeyword`].
    #[default]
    Assert,
    /// Every `format` is an annotation (listed, never enforced).
    Annotation,
}

/// Why a keyword was not enforced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum IgnoredReason {
    /// A keyword JSON Schema does not define (`x-*`, `javaType`, `self`...): an annotation.
    Unknown,
    /// A `format` name nextok does not know.
    UnknownFormat,
    /// `format` under [`FormatMode::Annotation`].
    FormatAnnotation,
    /// A keyword of another draft than the schema's `$schema` (for example `dependencies`
    /// under draft 2020-12).
    OtherDraft,
    /// A keyword beside `$ref` in drafts 4 to 7, where `$ref` overrides its siblings.
    BesideRef,
    /// A keyword of a vocabulary that the schema's meta-schema leaves out of its
    /// `$vocabulary` (drafts 2019-09 and 2020-12).
    VocabularyOff,
}

/// A keyword that a compiled schema does not enforce, and where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnoredKeyword {
    /// The keyword (for formats, `format "name"`).
    pub keyword: String,
    /// JSON pointer of the schema holding it.
    pub path: String,
    /// Why it is not enforced.
    pub reason: IgnoredReason,
}

/// A compiled JSON Schema: its grammar, and what it did not enforce.
#[derive(Clone, Debug)]
pub struct CompiledSchema {
    /// The grammar of the valid instances.
    pub grammar: Arc<Grammar>,
    /// The draft the schema was read as (`None`: every draft's forms, see
    /// [`JsonOptions::draft`]).
    pub draft: Option<Draft>,
    /// Keywords read as annotations, in document order (only those of schemas the root
    /// reaches).
    pub ignored: Vec<IgnoredKeyword>,
}

impl Default for JsonOptions {
    fn default() -> Self {
        JsonOptions {
            max_whitespace: 0,
            fixed_property_order: false,
            max_free_order_properties: 4,
            limits: Limits::DEFAULT,
            draft: None,
            strict: false,
            format: FormatMode::Assert,
            resources: SchemaResources::default(),
            base_uri: None,
            defer_large_patterns: true,
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

    /// Sets [`JsonOptions::max_free_order_properties`].
    pub fn with_max_free_order_properties(mut self, n: usize) -> Self {
        self.max_free_order_properties = n;
        self
    }

    /// Sets [`JsonOptions::limits`].
    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Sets [`JsonOptions::draft`].
    pub fn with_draft(mut self, draft: Option<Draft>) -> Self {
        self.draft = draft;
        self
    }

    /// Sets [`JsonOptions::strict`].
    pub fn with_strict(mut self, yes: bool) -> Self {
        self.strict = yes;
        self
    }

    /// Sets [`JsonOptions::defer_large_patterns`].
    pub fn with_defer_large_patterns(mut self, yes: bool) -> Self {
        self.defer_large_patterns = yes;
        self
    }

    /// Sets [`JsonOptions::format`].
    pub fn with_format(mut self, mode: FormatMode) -> Self {
        self.format = mode;
        self
    }

    /// Sets [`JsonOptions::resources`].
    pub fn with_resources(mut self, resources: SchemaResources) -> Self {
        self.resources = resources;
        self
    }

    /// Sets [`JsonOptions::base_uri`].
    pub fn with_base_uri(mut self, uri: Option<String>) -> Self {
        self.base_uri = uri;
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
    Ok(compile_json_schema_report(schema, options)?.grammar)
}

/// Compiles a JSON Schema into a grammar, and lists the keywords it read as annotations
/// (unknown keywords, unknown `format` names, other drafts' keywords), with their paths.
///
/// ```
/// use nextok_constraints::{compile_json_schema_report, IgnoredReason, JsonOptions};
///
/// let schema = serde_json::json!({
///     "type": "object",
///     "x-kubernetes-preserve-unknown-fields": true,
///     "properties": {"day": {"type": "string", "format": "date", "javaType": "LocalDate"}}
/// });
/// let compiled = compile_json_schema_report(&schema, &JsonOptions::default())?;
/// assert!(compiled.grammar.recognizes(br#"{"day":"2024-02-29"}"#));
/// assert!(!compiled.grammar.recognizes(br#"{"day":"2023-02-29"}"#));
/// let ignored: Vec<(&str, &str)> = compiled
///     .ignored
///     .iter()
///     .map(|i| (i.keyword.as_str(), i.path.as_str()))
///     .collect();
/// assert_eq!(
///     ignored,
///     [("x-kubernetes-preserve-unknown-fields", "#"), ("javaType", "#/properties/day")]
/// );
/// assert!(compiled.ignored.iter().all(|i| i.reason == IgnoredReason::Unknown));
/// // The strict option refuses them instead.
/// let strict = JsonOptions::default().with_strict(true);
/// assert!(compile_json_schema_report(&schema, &strict).is_err());
/// # Ok::<(), nextok_constraints::Error>(())
/// ```
pub fn compile_json_schema_report(
    schema: &Value,
    options: &JsonOptions,
) -> Result<CompiledSchema, Error> {
    let mut off = Vec::new();
    let draft = match schema.get("$schema") {
        Some(Value::String(uri)) => match Draft::from_uri(uri) {
            Some(d) => Some(d),
            None if uri.contains("draft-03") || uri.contains("draft-02") => {
                return Err(Error::UnsupportedKeyword {
                    keyword: format!("$schema {uri}"),
                    path: "#".into(),
                })
            }
            // A meta-schema of its own, given among the resources: its dialect and the
            // vocabularies it turns on.
            None => match options.resources.get(uri.split('#').next().unwrap_or(uri)) {
                Some(meta) => {
                    let (d, o) = dialect(uri, meta)?;
                    off = o;
                    Some(d)
                }
                // The latest meta-schema, as json-schema.org names it without a draft.
                None if uri.trim_end_matches('#').ends_with("json-schema.org/schema") => {
                    options.draft
                }
                // Another meta-schema could turn vocabularies off: compiled as a known
                // draft, a valid instance could be refused.
                None => {
                    return Err(Error::UnsupportedKeyword {
                        keyword: format!(
                            "$schema {uri} (a meta-schema that is neither a known draft nor among the resources)"
                        ),
                        path: "#".into(),
                    })
                }
            },
        },
        _ => options.draft,
    };
    // A document of plain `#` references has nothing to resolve or bundle (most schemas).
    let resolved = match resolve::local_only(schema) {
        true => None,
        false => resolved_document(schema, draft, options)?,
    };
    let schema = resolved.as_ref().unwrap_or(schema);
    let doc = schema::Document::parse_with(schema, draft, options, &off)?;
    // Normal forms are kept while this document's table lives.
    let _normal_forms = algebra::NormalizeMemo::begin();
    let mut c = compile::Compiler::new(&doc.table, options);
    let s = c.schema(&doc.root, "#")?;
    Ok(CompiledSchema {
        grammar: Arc::new(c.b.build_with(s, &options.limits)?),
        draft,
        ignored: doc.ignored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn accepts(schema: &Value, text: &str) -> bool {
        compile_json_schema(schema, &JsonOptions::default())
            .unwrap()
            .recognizes(text.as_bytes())
    }

    #[test]
    fn extend_adds_documents_and_keeps_the_newer_at_one_uri() {
        let mut a = SchemaResources::new();
        a.insert("https://example.com/a.json", json!({"type": "string"}));
        a.insert("https://example.com/b.json", json!({"type": "null"}));
        let mut b = SchemaResources::new();
        b.insert("https://example.com/b.json#x", json!({"type": "integer"}));
        b.insert("https://example.com/c.json", json!({"type": "boolean"}));
        a.extend(b);
        assert_eq!(a.len(), 3);
        assert_eq!(
            a.get("https://example.com/a.json"),
            Some(&json!({"type": "string"}))
        );
        assert_eq!(
            a.get("https://example.com/b.json"),
            Some(&json!({"type": "integer"}))
        );
        assert_eq!(
            a.get("https://example.com/c.json"),
            Some(&json!({"type": "boolean"}))
        );
    }

    #[test]
    fn a_base_uri_resolves_relative_references_of_a_schema_without_an_identifier() {
        let mut resources = SchemaResources::new();
        resources.insert(
            "https://example.com/schemas/b.json",
            json!({"definitions": {"id": {"type": "string", "pattern": "^[a-z]+$"}}}),
        );
        for (draft, key) in [("draft-04", "id"), ("draft-07", "$id")] {
            let s = json!({"$schema": format!("http://json-schema.org/{draft}/schema#"),
                           "anyOf": [{"$ref": "b.json#/definitions/id"}, {"type": "null"}]});
            // Without a base the relative URI names no document nextok holds.
            let options = JsonOptions::default().with_resources(resources.clone());
            assert!(matches!(
                compile_json_schema(&s, &options),
                Err(Error::UnsupportedKeyword { keyword, .. }) if keyword.starts_with("$ref b.json")
            ));
            let options =
                options.with_base_uri(Some("https://example.com/schemas/main.json".into()));
            let compiled = compile_json_schema_report(&s, &options).unwrap();
            let g = &compiled.grammar;
            for (text, ok) in [
                (r#""ab""#, true),
                ("null", true),
                (r#""A""#, false),
                ("1", false),
            ] {
                assert_eq!(g.recognizes(text.as_bytes()), ok, "{draft} {text}");
            }
            // The identifier written from the base is the draft's own keyword, not an
            // annotation.
            assert!(compiled.ignored.iter().all(|i| i.keyword != key), "{draft}");
            // A schema's own identifier wins over the base.
            let mut own = s.clone();
            own[key] = json!("https://example.com/other/main.json");
            assert!(compile_json_schema(&own, &options).is_err(), "{draft}");
        }
    }

    #[test]
    fn self_contained_documents_are_bundled_as_far_as_references_reach() {
        // A self-contained document (only `#` pointers inside): the schema's references
        // reach `a`, which reaches `b` and, through an array, `c/d`; `never` is left out, and
        // its pattern, which does not parse, is never read.
        let doc = json!({"definitions": {
            "a": {"type": "object", "properties": {
                "b": {"$ref": "#/definitions/b"},
                "s": {"anyOf": [{"type": "null"}, {"$ref": "#/definitions/c~1d"}]}
            }, "additionalProperties": false},
            "b": {"type": "integer", "minimum": 1},
            "c/d": {"type": "string", "maxLength": 2},
            "never": {"type": "string", "pattern": "("}
        }});
        let part = resolve::needed_part(&doc, &["/definitions/a"]).unwrap();
        let defs = part["definitions"].as_object().unwrap();
        let mut names: Vec<&str> = defs.keys().map(String::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["a", "b", "c/d"]);
        assert_eq!(defs["a"], doc["definitions"]["a"]);
        // A pointer into an array keeps the array whole; the root, or a pointer that names
        // nothing, needs the whole document.
        let part = resolve::needed_part(&doc, &["/definitions/a/properties/s/anyOf/1"]).unwrap();
        assert_eq!(
            part["definitions"]["a"]["properties"]["s"]["anyOf"],
            doc["definitions"]["a"]["properties"]["s"]["anyOf"]
        );
        assert!(part["definitions"].get("b").is_none());
        assert_eq!(resolve::needed_part(&doc, &[""]), None);
        assert_eq!(resolve::needed_part(&doc, &["/definitions/none"]), None);
        // Not self-contained: a reference to another document, an identifier below the root,
        // a keyword of a later draft.
        assert!(resolve::self_contained(&doc));
        for other in [
            json!({"definitions": {"a": {"$ref": "b.json#/definitions/a"}}}),
            json!({"definitions": {"a": {"$id": "https://example.com/a.json"}}}),
            json!({"definitions": {"a": {"$defs": {}}}}),
        ] {
            assert!(!resolve::self_contained(&other), "{other}");
        }
        // Compiled through the part, the references mean what they mean in the whole.
        let mut resources = SchemaResources::new();
        resources.insert("https://example.com/k.json", doc);
        let options = JsonOptions::default().with_resources(resources);
        let s = json!({"$schema": "http://json-schema.org/draft-07/schema#",
                       "$ref": "https://example.com/k.json#/definitions/a"});
        let g = compile_json_schema(&s, &options).unwrap();
        for (text, ok) in [
            (r#"{"b":2,"s":"xy"}"#, true),
            (r#"{"s":null}"#, true),
            (r#"{"b":0}"#, false),
            (r#"{"s":"xyz"}"#, false),
            (r#"{"c":1}"#, false),
        ] {
            assert_eq!(g.recognizes(text.as_bytes()), ok, "{text}");
        }
        let s = json!({"$schema": "http://json-schema.org/draft-07/schema#",
                       "$ref": "https://example.com/k.json#/definitions/a/properties/s/anyOf/1"});
        let g = compile_json_schema(&s, &options).unwrap();
        assert!(g.recognizes(br#""ab""#) && !g.recognizes(br#""abc""#));
        // A reference to the one definition that does not compile still finds it.
        let s = json!({"$ref": "https://example.com/k.json#/definitions/never"});
        assert!(compile_json_schema(&s, &options).is_err());
        // A reference without a fragment names the whole document (JSON-Schema-Test-Suite's
        // remote refs).
        let mut resources = SchemaResources::new();
        resources.insert(
            "https://example.com/int.json",
            json!({"type": "integer", "definitions": {"s": {"type": "string"}}}),
        );
        let options = JsonOptions::default().with_resources(resources);
        for s in [
            json!({"$ref": "https://example.com/int.json"}),
            json!({"$ref": "https://example.com/int.json#"}),
        ] {
            let g = compile_json_schema(&s, &options).unwrap();
            assert!(g.recognizes(b"1") && !g.recognizes(br#""a""#), "{s}");
        }
    }

    #[test]
    fn references_to_other_documents_are_bundled_from_resources() {
        let mut resources = SchemaResources::new();
        // A document that refers to its own definitions and to a second document by a
        // relative URI, which resolves against its own URI.
        resources.insert(
            "https://example.com/schemas/a.json",
            json!({"definitions": {
                "pair": {"type": "array", "items": {"$ref": "#/definitions/id"}, "maxItems": 2},
                "id": {"$ref": "b.json#/definitions/id"}
            }}),
        );
        resources.insert(
            "https://example.com/schemas/b.json",
            json!({"definitions": {"id": {"type": "string", "pattern": "^[a-z]+$"}}}),
        );
        let options = JsonOptions::default().with_resources(resources.clone());
        let s = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"ids": {"$ref": "https://example.com/schemas/a.json#/definitions/pair"}}
        });
        let g = compile_json_schema(&s, &options).unwrap();
        for (text, ok) in [
            (r#"{"ids":["ab","c"]}"#, true),
            (r#"{"ids":[]}"#, true),
            (r#"{"ids":["ab","c","d"]}"#, false),
            (r#"{"ids":["A"]}"#, false),
            (r#"{"ids":[1]}"#, false),
        ] {
            assert_eq!(g.recognizes(text.as_bytes()), ok, "{text}");
        }
        // A document whose root is a `$ref` keeps its identifier in drafts 4 to 7.
        resources.insert(
            "https://example.com/schemas/alias.json",
            json!({"$ref": "b.json#/definitions/id"}),
        );
        let options = JsonOptions::default().with_resources(resources.clone());
        let s = json!({"$schema": "http://json-schema.org/draft-04/schema#",
                       "$ref": "https://example.com/schemas/alias.json"});
        let g = compile_json_schema(&s, &options).unwrap();
        assert!(g.recognizes(br#""abc""#) && !g.recognizes(br#""Abc""#));
        // A document of another draft is refused by name; one nextok does not hold stays an
        // unsupported reference.
        resources.insert(
            "https://example.com/schemas/new.json",
            json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "integer"}),
        );
        let options = JsonOptions::default().with_resources(resources);
        for (uri, keyword) in [
            (
                "https://example.com/schemas/new.json",
                "$ref https://example.com/schemas/new.json (a document of another draft)",
            ),
            (
                "https://example.com/schemas/none.json",
                "$ref https://example.com/schemas/none.json (another document, not among the \
                 schema's resources)",
            ),
        ] {
            let s = json!({"$schema": "http://json-schema.org/draft-07/schema#", "$ref": uri});
            let e = compile_json_schema(&s, &options);
            assert!(
                matches!(&e, Err(Error::UnsupportedKeyword { keyword: k, .. }) if k == keyword),
                "{e:?}"
            );
        }
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
