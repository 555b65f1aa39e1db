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
//! 2. `schema`: the document is parsed once into typed [`schema::Schema`] values (refusing
//!    keywords nextok cannot enforce, with their path); references become indices into a
//!    table of targets.
//! 3. `algebra`: `allOf`, `$ref` beside other keywords, `not`, `if` and `unevaluated*` are
//!    normalised away by intersecting typed schemas exactly, or refused.
//! 4. `compile` (scalars, combinators), `containers` (arrays, objects), `string` and `number`
//!    (automata for the terminals) build the grammar.

mod algebra;
mod compile;
mod containers;
mod number;
mod resolve;
mod schema;
mod string;

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
}

impl Default for JsonOptions {
    fn default() -> Self {
        JsonOptions {
            max_whitespace: 0,
            fixed_property_order: false,
            max_free_order_properties: 8,
            limits: Limits::DEFAULT,
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
    let rewritten = resolve::resolve_identifiers(schema);
    let schema = rewritten.as_ref().unwrap_or(schema);
    let doc = schema::Document::parse(schema)?;
    let mut c = compile::Compiler::new(&doc.table, options);
    let s = c.schema(&doc.root, "#")?;
    Ok(Arc::new(c.b.build_with(s, &options.limits)?))
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
