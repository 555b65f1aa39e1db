//! JSON and JSON Schema, compiled to a [`Grammar`].
//!
//! Strings are single terminals: an automaton for the decoded content (pattern, length, format,
//! key exclusions, intersected as automata) wrapped in the JSON string encoding, so escapes are
//! handled exactly. Numbers with bounds are regular expressions built digit by digit. Objects
//! allow their properties in any order by tracking which named properties were used (up to
//! [`JsonOptions::max_free_order_properties`]; past that, or when asked, in the schema's order).
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
#[cfg(test)]
mod feature_tests;
mod number;
mod resolve;
mod schema;
mod string;
mod unique;

use std::sync::Arc;

use serde_json::Value;

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
    /// Objects with more named properties than this use the schema's order even when
    /// `fixed_property_order` is false, because any-order tracking grows as 2^n rules.
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

/// How `format` is treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatMode {
    /// Known formats are enforced exactly (`date` with real month lengths and leap years,
    /// `time`, `date-time`, `duration`, `email`, `hostname`, `ipv4`, `ipv6`, `uri`, `uuid`,
    /// `json-pointer`...); unknown format names are annotations, listed in
    /// [`CompiledSchema::ignored`]; known formats nextok cannot enforce exactly (`regex`,
    /// `idn-hostname`...) are [`Error::UnsupportedKeyword`].
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
            max_free_order_properties: 8,
            limits: Limits::DEFAULT,
            draft: None,
            strict: false,
            format: FormatMode::Assert,
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

    /// Sets [`JsonOptions::format`].
    pub fn with_format(mut self, mode: FormatMode) -> Self {
        self.format = mode;
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
    let draft = match schema.get("$schema") {
        Some(Value::String(uri)) => match Draft::from_uri(uri) {
            Some(d) => Some(d),
            None if uri.contains("draft-03") || uri.contains("draft-02") => {
                return Err(Error::UnsupportedKeyword {
                    keyword: format!("$schema {uri}"),
                    path: "#".into(),
                })
            }
            None => options.draft,
        },
        _ => options.draft,
    };
    let rewritten = resolve::resolve_identifiers(schema, draft);
    let schema = rewritten.as_ref().unwrap_or(schema);
    let doc = schema::Document::parse_with(schema, draft, options)?;
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
