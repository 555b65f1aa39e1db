//! Issue #17's features, each with valid and invalid instances. Every instance goes through
//! a [`GrammarConstraint`] byte by byte (each byte must be in the mask before it is
//! accepted, and the end token at the end), so an invalid instance is rejected by the
//! constraint itself, not only by a parser; the grammar's own recogniser must agree.

use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::constraint::Constraint;

#[path = "combination_tests.rs"]
mod combinations;

/// 256 one-byte tokens and an end token (256).
fn byte_vocab() -> Arc<TokenVocab> {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    tokens.push(Vec::new());
    Arc::new(TokenVocab::new(tokens, &[256]).expect("vocabulary"))
}

/// Whether the constraint of `grammar` lets `text` through, byte by byte, and then ends.
fn constraint_accepts(grammar: &Arc<Grammar>, vocab: &Arc<TokenVocab>, text: &str) -> bool {
    let mut c = GrammarConstraint::new(grammar.clone(), vocab);
    let mut mask = vocab.empty_mask();
    let allowed = |m: &[u64], t: u32| m[t as usize / 64] >> (t % 64) & 1 == 1;
    for &b in text.as_bytes() {
        c.fill_mask(&mut mask).expect("mask");
        if !allowed(&mask, b as u32) {
            return false;
        }
        c.advance(b as u32).expect("an allowed byte advances");
    }
    c.fill_mask(&mut mask).expect("mask");
    allowed(&mask, 256)
}

/// Compiles `schema` with `opts` and checks each instance: `valid` ones accepted, `invalid`
/// ones rejected, by the constraint and by the grammar alike.
fn check_with(schema: &Value, opts: &JsonOptions, valid: &[&str], invalid: &[&str]) {
    let g = compile_json_schema(schema, opts)
        .unwrap_or_else(|e| panic!("{schema} does not compile: {e}"));
    let vocab = byte_vocab();
    for (texts, want) in [(valid, true), (invalid, false)] {
        for t in texts {
            assert!(
                serde_json::from_str::<Value>(t).is_ok(),
                "test instance {t} is not JSON"
            );
            assert_eq!(
                constraint_accepts(&g, &vocab, t),
                want,
                "{schema}: the constraint {} {t}",
                if want { "rejects" } else { "accepts" }
            );
            assert_eq!(g.recognizes(t.as_bytes()), want, "{schema}: grammar on {t}");
        }
    }
}

fn check(schema: Value, valid: &[&str], invalid: &[&str]) {
    check_with(&schema, &JsonOptions::default(), valid, invalid);
}

fn refused(schema: Value) -> Error {
    match compile_json_schema(&schema, &JsonOptions::default()) {
        Err(e) => e,
        Ok(_) => panic!("{schema} compiled"),
    }
}

fn refused_keyword(schema: Value) -> (String, String) {
    match refused(schema.clone()) {
        Error::UnsupportedKeyword { keyword, path } => (keyword, path),
        e => panic!("{schema}: expected an unsupported keyword, got {e:?}"),
    }
}

#[test]
fn unknown_keywords_are_listed_annotations_and_strict_mode_refuses_them() {
    let schema = json!({
        "type": "object",
        "self": {"href": "x"},
        "links": [{"rel": "self"}],
        "properties": {
            "a": {"type": "integer", "readonly": true, "example": 3, "x-order": 1},
            "b": {"type": "string", "javaType": "String", "_format": "text"}
        },
        "required": ["a"]
    });
    check(
        schema.clone(),
        &[r#"{"a":1}"#, r#"{"a":1,"b":"x"}"#],
        &[r#"{"b":"x"}"#, r#"{"a":"1"}"#, r#"{"a":1,"b":2}"#],
    );
    let report = compile_json_schema_report(&schema, &JsonOptions::default()).unwrap();
    let listed: Vec<(&str, &str)> = report
        .ignored
        .iter()
        .map(|i| (i.keyword.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(
        listed,
        [
            ("self", "#"),
            ("links", "#"),
            ("readonly", "#/properties/a"),
            ("example", "#/properties/a"),
            ("x-order", "#/properties/a"),
            ("javaType", "#/properties/b"),
            ("_format", "#/properties/b"),
        ]
    );
    let strict = JsonOptions::default().with_strict(true);
    match compile_json_schema(&schema, &strict) {
        Err(Error::UnknownKeyword { keyword, path }) => {
            assert_eq!((keyword.as_str(), path.as_str()), ("self", "#"))
        }
        other => panic!("strict mode: {other:?}"),
    }
    // Known keywords that change validity in ways nextok does not follow stay refused by
    // name, in either mode (draft-03's `disallow`, the dynamic references).
    for (s, k) in [
        (json!({"items": {"disallow": "string"}}), "disallow"),
        (json!({"$dynamicRef": "#meta"}), "$dynamicRef"),
        (json!({"properties": {"x": {"extends": {}}}}), "extends"),
    ] {
        let (keyword, _) = refused_keyword(s);
        assert_eq!(keyword, k);
    }
    assert_eq!(
        refused_keyword(json!({"$schema": "http://json-schema.org/draft-03/schema#"})).0,
        "$schema http://json-schema.org/draft-03/schema#"
    );
}

#[test]
fn dates_have_real_month_lengths_and_leap_years() {
    let date = json!({"type": "string", "format": "date"});
    check(
        date,
        &[
            r#""2024-02-29""#,
            r#""2000-02-29""#,
            r#""2022-02-28""#,
            r#""2022-04-30""#,
            r#""2022-12-31""#,
            r#""1600-02-29""#,
        ],
        &[
            r#""2022-02-30""#,
            r#""2023-02-29""#,
            r#""2022-04-31""#,
            r#""1900-02-29""#,
            r#""2100-02-29""#,
            r#""2022-06-31""#,
            r#""2022-13-01""#,
            r#""2022-00-10""#,
            r#""2022-01-00""#,
            r#""2022-1-10""#,
        ],
    );
    let date_time = json!({"type": "string", "format": "date-time"});
    check(
        date_time,
        &[
            r#""2024-02-29T12:30:00Z""#,
            r#""2022-04-30t23:59:59.123+05:30""#,
            r#""1998-12-31T23:59:60Z""#,
        ],
        &[
            r#""2022-02-30T12:00:00Z""#,
            r#""2023-02-29T00:00:00Z""#,
            r#""2022-04-31T00:00:00Z""#,
            r#""2022-04-30T24:00:00Z""#,
            r#""2022-04-30T12:00:00""#,
            r#""1998-12-31T22:59:60Z""#,
        ],
    );
    let time = json!({"type": "string", "format": "time"});
    check(
        time,
        &[
            r#""08:30:06Z""#,
            r#""23:59:60+00:00""#,
            r#""08:30:06.5-08:00""#,
        ],
        &[
            r#""8:30:06Z""#,
            r#""08:60:00Z""#,
            r#""12:00:60Z""#,
            r#""08:30:06+24:00""#,
        ],
    );
}

#[test]
fn known_formats_are_exact_and_unknown_ones_are_annotations() {
    check(
        json!({"format": "ipv4"}),
        &[r#""192.168.0.1""#, "12"],
        &[r#""256.1.1.1""#, r#""1.2.3""#],
    );
    check(
        json!({"format": "uuid"}),
        &[r#""2eb8aa08-aa98-11ea-b4aa-73b441d16380""#],
        &[r#""2eb8aa08-aa98-11ea-b4aa-73b441d1638""#],
    );
    check(
        json!({"format": "hostname"}),
        &[r#""example.com""#, r#""a-b.c""#],
        &[r#""-a.com""#, r#""a..b""#, r#""a_b.com""#],
    );
    check(
        json!({"format": "uri"}),
        &[
            r#""https://example.com/a?b=c#d""#,
            r#""urn:isbn:0451450523""#,
        ],
        &[r#""//example.com""#, r#""http://a b""#, r#""http://x/%zz""#],
    );
    check(
        json!({"format": "duration"}),
        &[r#""P1Y2M3DT4H5M6S""#, r#""PT1M""#, r#""P2W""#],
        &[r#""P""#, r#""PT""#, r#""P1H""#, r#""1D""#],
    );
    check(
        json!({"format": "json-pointer"}),
        &[r#""""#, r#""/a~1b/0""#],
        &[r#""a""#, r#""/a~2""#],
    );
    // Unknown names are annotations, listed; `format` can be an annotation altogether.
    let s = json!({"type": "string", "format": "url"});
    check(s.clone(), &[r#""not a url""#], &["1"]);
    let r = compile_json_schema_report(&s, &JsonOptions::default()).unwrap();
    assert_eq!(r.ignored.len(), 1);
    assert_eq!(r.ignored[0].keyword, "format \"url\"");
    assert_eq!(r.ignored[0].reason, IgnoredReason::UnknownFormat);
    let annotation = JsonOptions::default().with_format(FormatMode::Annotation);
    check_with(
        &json!({"type": "string", "format": "date"}),
        &annotation,
        &[r#""2022-02-30""#, r#""yesterday""#],
        &["1"],
    );
    // A known format with no exact automaton is refused by name.
    assert_eq!(
        refused_keyword(json!({"format": "idn-hostname"})).0,
        "format \"idn-hostname\""
    );
    // `regex` is a grammar (`ecma_regex`), enforced.
    check(
        json!({"format": "regex"}),
        &[r#""a+(b|c)""#, "1"],
        &[r#""a**""#, r#""(a""#],
    );
}

#[test]
fn draft_04_forms_are_read() {
    let d4 = "http://json-schema.org/draft-04/schema#";
    // Boolean exclusive bounds.
    check(
        json!({"$schema": d4, "minimum": 1, "exclusiveMinimum": true, "maximum": 3, "exclusiveMaximum": false}),
        &["1.5", "3", "\"x\""],
        &["1", "0", "3.5"],
    );
    // Without `$schema`, a boolean bound is still draft-04's form.
    check(
        json!({"maximum": 3, "exclusiveMaximum": true}),
        &["2.9"],
        &["3"],
    );
    // `id` is the identifier: a `$ref` through it reaches the right resource.
    check(
        json!({
            "$schema": d4,
            "id": "http://example.com/root.json",
            "definitions": {
                "a": {"id": "http://example.com/other.json", "type": "integer"},
                "b": {"id": "#bee", "type": "boolean"}
            },
            "properties": {
                "x": {"$ref": "other.json"},
                "y": {"$ref": "#bee"}
            }
        }),
        &[r#"{"x":1,"y":true}"#],
        &[r#"{"x":"1"}"#, r#"{"y":1}"#],
    );
    // Keywords beside `$ref` are ignored up to draft-07 (and listed), applied otherwise.
    let beside = |schema: &str| {
        json!({
            "$schema": schema,
            "definitions": {"n": {"type": "number"}},
            "$ref": "#/definitions/n",
            "maximum": 3
        })
    };
    check(
        beside("http://json-schema.org/draft-07/schema#"),
        &["5"],
        &["\"x\""],
    );
    let r = compile_json_schema_report(
        &beside("http://json-schema.org/draft-07/schema#"),
        &JsonOptions::default(),
    )
    .unwrap();
    assert_eq!(r.draft, Some(Draft::Draft7));
    assert_eq!(r.ignored[0].keyword, "maximum");
    assert_eq!(r.ignored[0].reason, IgnoredReason::BesideRef);
    check(
        beside("https://json-schema.org/draft/2020-12/schema"),
        &["3"],
        &["5"],
    );
}

#[test]
fn dependencies_in_both_forms_and_their_successors() {
    let s = json!({
        "type": "object",
        "dependencies": {
            "card": ["billing"],
            "name": {"required": ["age"], "properties": {"age": {"type": "integer"}}}
        }
    });
    check(
        s,
        &[
            "{}",
            r#"{"billing":1}"#,
            r#"{"card":1,"billing":2}"#,
            r#"{"name":"a","age":3}"#,
        ],
        &[
            r#"{"card":1}"#,
            r#"{"name":"a"}"#,
            r#"{"name":"a","age":"3"}"#,
        ],
    );
    check(
        json!({"dependentRequired": {"a": ["b", "c"]}, "dependentSchemas": {"b": {"maxProperties": 2}}}),
        &[r#"{"b":1}"#, r#"{"b":1,"c":2}"#],
        &[r#"{"a":1,"b":2}"#, r#"{"a":1,"b":2,"c":3}"#],
    );
    // Under 2020-12, `dependencies` is not a keyword: an annotation, listed.
    let s = json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
                   "dependencies": {"a": ["b"]}});
    check(s.clone(), &[r#"{"a":1}"#], &[]);
    let r = compile_json_schema_report(&s, &JsonOptions::default()).unwrap();
    assert_eq!(r.ignored[0].reason, IgnoredReason::OtherDraft);
}

#[test]
fn items_arrays_with_additional_items_and_prefix_items() {
    check(
        json!({"items": [{"type": "integer"}, {"type": "string"}], "additionalItems": false}),
        &["[]", "[1]", r#"[1,"a"]"#],
        &[r#"[1,"a",2]"#, r#"["a"]"#],
    );
    check(
        json!({"items": [{"type": "integer"}], "additionalItems": {"type": "boolean"}}),
        &["[1,true,false]"],
        &["[1,2]"],
    );
    // `additionalItems` beside a single `items` schema has no effect.
    check(
        json!({"items": {"type": "integer"}, "additionalItems": false}),
        &["[1,2,3]"],
        &["[1,\"a\"]"],
    );
    check(
        json!({"prefixItems": [{"const": "a"}], "items": {"type": "integer"}}),
        &[r#"["a",1,2]"#],
        &[r#"["a","b"]"#, "[1]"],
    );
}

#[test]
fn not_over_values_required_patterns_and_bounds() {
    check(
        json!({"not": {"enum": ["a", 1, null]}}),
        &[r#""b""#, "2", "1.5", "true", "[]", "{}"],
        &[r#""a""#, "1", "1.0", "null"],
    );
    check(
        json!({"type": "object", "not": {"required": ["a", "b"]}}),
        &["{}", r#"{"a":1}"#, r#"{"b":1}"#],
        &[r#"{"a":1,"b":2}"#, r#"{"b":1,"a":2,"c":3}"#],
    );
    check(
        json!({"type": "string", "not": {"pattern": "^x"}}),
        &[r#""ax""#, r#""""#],
        &[r#""x""#, r#""xy""#],
    );
    // `minimum` holds for every non-number, so its complement holds for no non-number.
    check(
        json!({"not": {"minimum": 2}}),
        &["1.99", "-5"],
        &["2", "3", r#""s""#, "null"],
    );
    check(
        json!({"type": "string", "not": {"minLength": 3}}),
        &[r#""ab""#],
        &[r#""abc""#],
    );
    check(
        json!({"type": "object", "not": {"properties": {"k": {"type": "string"}}}}),
        &[r#"{"k":1}"#],
        &["{}", r#"{"k":"v"}"#, r#"{"j":1}"#],
    );
    check(
        json!({"not": {"anyOf": [{"type": "string"}, {"const": 1}]}}),
        &["2", "null"],
        &[r#""a""#, "1"],
    );
    // `not` over what has no exact complement here is refused by name.
    assert_eq!(
        refused_keyword(json!({"not": {"multipleOf": 2}})).0,
        "not (multipleOf)"
    );
    // Not an integer: other types, or numbers with a fraction (written without exponent).
    check(
        json!({"not": {"type": "integer"}}),
        &["1.5", "-0.25", r#""1""#, "null"],
        &["1", "1.0", "-3", "0"],
    );
}

#[test]
fn one_of_with_overlapping_branches_counts_matches() {
    // Numbers up to 5 match the first branch, from 2 the second: from 2 to 5 both match, so
    // those are invalid.
    check(
        json!({"type": "number", "oneOf": [{"maximum": 5}, {"minimum": 2}]}),
        &["1.5", "-3", "5.5", "100"],
        &["2", "3.5", "5", r#""s""#],
    );
    check(
        json!({"oneOf": [{"type": "integer"}, {"type": "number"}]}),
        &["1.5"],
        &["1", "2.0", r#""x""#],
    );
    check(
        json!({"oneOf": [{"type": "string", "minLength": 2}, {"type": "string", "maxLength": 3}]}),
        &[r#""a""#, r#""abcd""#],
        &[r#""ab""#, r#""abc""#, "1"],
    );
    // Disjoint by a key one branch requires and the other forbids.
    check(
        json!({"type": "object", "oneOf": [
            {"required": ["a"]},
            {"properties": {"a": false}, "required": ["b"]}
        ]}),
        &[r#"{"a":1}"#, r#"{"a":1,"b":2}"#, r#"{"b":2}"#],
        &["{}", r#"{"c":1}"#],
    );
    // Overlapping required keys: exactly one of them.
    check(
        json!({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}),
        &[r#"{"a":1}"#, r#"{"b":1}"#],
        &[r#"{"a":1,"b":2}"#, "{}"],
    );
    // A discriminator property (non-objects would match both branches: the type keeps them
    // out).
    check(
        json!({"type": "object", "oneOf": [
            {"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}, "required": ["kind"]},
            {"properties": {"kind": {"const": "b"}}, "required": ["kind"]}
        ]}),
        &[r#"{"kind":"a","x":1}"#, r#"{"kind":"b","x":"s"}"#],
        &[r#"{"kind":"c"}"#, r#"{"kind":"a","x":"s"}"#],
    );
    assert_eq!(
        refused_keyword(json!({"oneOf": [{"multipleOf": 2}, {"multipleOf": 3}]})).0,
        "oneOf (branches that may overlap: not (multipleOf) at #)"
    );
}

#[test]
fn recursion_through_a_reference_beside_other_keywords_is_a_rule() {
    // SchemaStore's resjson: the `$ref` beside `minProperties` is inlined, and the target's
    // `additionalProperties` is the same schema again. The recursion is one rule, so nesting
    // of any depth (120 levels here) compiles and is checked at every level.
    let schema = json!({
        "type": "object",
        "additionalProperties": {"$ref": "#/definitions/entry"},
        "definitions": {
            "entry": {"minProperties": 1,
                      "anyOf": [{"type": "string"}, {"$ref": "#/definitions/resource"}]},
            "resource": {"type": "object",
                         "additionalProperties": {"minProperties": 1,
                                                  "anyOf": [{"type": "string"},
                                                            {"$ref": "#/definitions/resource"}]}}
        }
    });
    let deep = |leaf: &str| format!("{}{leaf}{}", r#"{"k":"#.repeat(120), "}".repeat(120));
    let (deep_ok, deep_empty, deep_number) = (deep(r#""v""#), deep("{}"), deep("1"));
    check(
        schema,
        &["{}", r#"{"a":"x","b":{"c":{"d":"y"}}}"#, &deep_ok],
        &[
            r#"{"a":{}}"#,
            r#"{"a":{"b":{"c":{}}}}"#,
            r#"{"a":1}"#,
            r#"{"a":{"b":[]}}"#,
            &deep_empty,
            &deep_number,
        ],
    );
    // ninjs: an item's `anyOf` holds `$ref: "#"` beside `type`, so the root is inlined into
    // itself through `associations`.
    check(
        json!({
            "type": "object",
            "properties": {
                "uri": {"type": "string"},
                "associations": {"type": "array", "items": {"type": "object", "anyOf": [
                    {"properties": {"name": {"type": "string"}}, "required": ["name"]},
                    {"$ref": "#"}
                ]}}
            },
            "required": ["uri"]
        }),
        &[
            r#"{"uri":"a","associations":[{"name":"n"},{"uri":"b","associations":[{"uri":"c"}]}]}"#,
            r#"{"uri":"a","associations":[{"name":"n","uri":1}]}"#,
        ],
        &[
            r#"{"associations":[]}"#,
            r#"{"uri":"a","associations":[{"uri":"b","associations":[{"x":1}]}]}"#,
            r#"{"uri":"a","associations":[{"uri":2}]}"#,
        ],
    );
}

#[test]
fn a_schema_met_again_is_compiled_once_whatever_the_order_of_its_conjuncts() {
    // `x` is the conjunction of two references wherever two objects meet: at the top and
    // inside each `y`, in either order. It is one schema, compiled once: more places add only
    // their own object's rules (one per host as written: `y0` and `y2` are one schema), and
    // the order of the conjuncts adds nothing more.
    let defs = json!({
        "A": {"type": "object", "properties": {
            "a1": {"type": "string", "pattern": "^[a-z]+[0-9]{2,5}$"},
            "a2": {"type": "array", "items": {"type": "integer", "minimum": 3}},
            "a3": {"enum": ["one", "two", "three", 4, 5.5]}}},
        "B": {"type": "object", "properties": {
            "b1": {"type": "string", "format": "date-time"},
            "b2": {"type": "number", "exclusiveMaximum": 10}}}
    });
    let host = |first: &str, second: &str| {
        json!({"allOf": [
            {"properties": {"x": {"$ref": format!("#/$defs/{first}")}}},
            {"properties": {"x": {"$ref": format!("#/$defs/{second}")}}}
        ]})
    };
    let schema = |places: &[(&str, &str)]| {
        let mut s = host("A", "B");
        let mut props = serde_json::Map::new();
        for (i, (f, g)) in places.iter().enumerate() {
            props.insert(format!("y{i}"), host(f, g));
        }
        s["properties"] = Value::Object(props);
        s["$defs"] = defs.clone();
        s
    };
    // Objects of up to 8 names by rules per set of names, where `x` (5 names) compiled again
    // would cost the most.
    let options = JsonOptions::default().with_max_free_order_properties(8);
    let rules = |s: Value| compile_json_schema(&s, &options).unwrap().size().0;
    let (alone, one) = (rules(schema(&[])), rules(schema(&[("A", "B")])));
    let same = rules(schema(&[("A", "B"), ("A", "B"), ("A", "B")]));
    let mixed = rules(schema(&[("B", "A"), ("A", "B"), ("B", "A")]));
    // (Compiled anew at each place, `x` costs more than the rest of the grammar: 688 rules
    // for the first place, not 94; in the other order, 627 more, not 62.)
    assert!(
        (one - alone) * 4 < alone && (same - one) * 2 < alone && (mixed - same) * 4 < alone,
        "{alone} rules alone, {one} with one place, {same} with three, {mixed} in either order"
    );
    check(
        schema(&[("B", "A")]),
        &[r#"{"x":{"a1":"ab12","b2":9.5},"y0":{"x":{"a3":"two","b1":"2024-02-29T00:00:00Z"}}}"#],
        &[
            r#"{"y0":{"x":{"a1":"ab1"}}}"#,
            r#"{"y0":{"x":{"b2":10}}}"#,
            r#"{"x":{"a2":[2]}}"#,
        ],
    );
}

#[test]
fn one_of_branches_proven_disjoint_need_no_complement() {
    // SchemaStore's putout: tuples of other lengths, or of other element types at a position
    // both require, never overlap (no complement of `prefixItems` is needed).
    let tuple = |items: Value, min: usize| json!({"type": "array", "items": items, "minItems": min, "additionalItems": false});
    check(
        json!({"oneOf": [
            {"enum": ["on", "off"]},
            tuple(json!([{"enum": ["on", "off"]}, {"type": "object"}]), 2),
            tuple(json!([{"enum": ["on", "off"]}, {"type": "string"}, {"type": "object"}]), 3),
            tuple(json!([{"enum": ["on", "off"]}, {"type": "string"}]), 2)
        ]}),
        &[
            r#""on""#,
            r#"["on",{}]"#,
            r#"["off","x",{}]"#,
            r#"["on","x"]"#,
        ],
        &[
            r#"["on"]"#,
            r#"["on",1]"#,
            r#"["on",{},1]"#,
            r#"["x","y"]"#,
            r#""x""#,
        ],
    );
    // Arrays that may overlap are still decided exactly: `["a"]` matches both.
    check(
        json!({"type": "array", "oneOf": [
            {"minItems": 1, "items": {"type": "string"}},
            {"maxItems": 2}
        ]}),
        &[r#"["a","b","c"]"#, "[1]", "[]", r#"["a",1]"#],
        &[r#"["a"]"#, r#"["a","b"]"#, r#"[1,2,3]"#],
    );
    // SchemaStore's template: a branch that allows only values another excludes (`not` of
    // an `enum`) is disjoint from it, so the `uniqueItems` of the other is never complemented.
    check(
        json!({"type": "object", "required": ["k"], "oneOf": [
            {"not": {"required": ["k"], "properties": {"k": {"enum": ["a", "b"]}}}},
            {"properties": {"k": {"const": "a"},
                            "l": {"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": true}}},
            {"properties": {"k": {"const": "b"}}}
        ]}),
        &[
            r#"{"k":"c","l":[1,1,4]}"#,
            r#"{"k":"a","l":[1,2]}"#,
            r#"{"k":"b","l":[1,1]}"#,
        ],
        &[r#"{"k":"a","l":[1,1]}"#, "{}", r#"{"k":"a","l":[4]}"#],
    );
}

#[test]
fn one_of_complements_a_recursive_reference_as_a_recursive_rule() {
    // `{"x": 1}` is a tree and has `x`: it matches both branches. Breaking the tree anywhere
    // in it, however deep, makes the second branch the only one: the complement of the tree
    // refers to itself, as the tree does (SchemaStore's workflows and utam-page-object).
    check(
        json!({
            "$defs": {"tree": {"type": "object", "properties": {
                "x": {"type": "integer"},
                "kids": {"type": "array", "items": {"$ref": "#/$defs/tree"}}
            }}},
            "oneOf": [{"$ref": "#/$defs/tree"}, {"required": ["x"]}]
        }),
        &[
            "{}",
            r#"{"x":"s"}"#,
            r#"{"x":1,"kids":[{"x":"s"}]}"#,
            r#"{"x":2,"kids":[{"kids":[{"x":"s"}]}]}"#,
            r#"{"kids":[{"kids":[{}]}]}"#,
        ],
        &[
            r#"{"x":1}"#,
            r#"{"x":1,"kids":[{"x":1}]}"#,
            r#"{"kids":[{"kids":[{"x":"s"}]}]}"#,
            r#"{"x":1,"kids":[{"kids":[{"kids":[]}]}]}"#,
        ],
    );
}

#[test]
fn one_of_complements_mutually_recursive_references_once() {
    // utam-page-object's shape: an argument is one of two overlapping branches, the second
    // taking a value that is a selector (a `$ref` beside `type`), and a selector's arguments
    // are arguments again. Exactly-one needs the complement of the selector, which holds the
    // complement of an argument, which holds the complement of the selector: each is
    // compiled once, as a rule that refers to itself, however deep the nesting.
    let arg_list = json!({"type": "array", "items": {"$ref": "#/$defs/arg"}});
    let schema = json!({
        "$defs": {
            "arg": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "type": {"enum": ["a", "b", "c"]},
                    "value": {"type": ["string", "object"]},
                    "predicate": {"type": "array"},
                    "args": arg_list.clone()
                },
                "additionalProperties": false,
                "oneOf": [
                    {"properties": {"type": {"enum": ["a", "b"]}}, "required": ["type", "name"]},
                    {"properties": {"type": {"enum": ["b", "c"]}, "value": {"anyOf": [
                        {"type": "string"},
                        {"type": "object", "$ref": "#/$defs/selector"}
                    ]}}, "required": ["value"]},
                    {"properties": {"type": {"const": "c"}, "predicate": {"type": "array", "items": {"$ref": "#/$defs/predicate"}}},
                     "required": ["type", "predicate"]}
                ]
            },
            "predicate": {"type": "object", "properties": {"apply": {"type": "string"}, "args": arg_list.clone()},
                          "additionalProperties": false},
            "selector": {"type": "object", "properties": {"css": {"type": "string"}, "args": arg_list},
                         "required": ["css"], "additionalProperties": false}
        },
        "type": "object",
        "properties": {"selector": {"$ref": "#/$defs/selector"}},
        "additionalProperties": false
    });
    let deep = |inner: &str| format!(r#"{{"selector":{{"css":"x","args":[{inner}]}}}}"#);
    let valid = [
        deep(r#"{"type":"a","name":"n"}"#),
        // The inner argument matches the first branch only, so the value is a selector.
        deep(r#"{"type":"c","value":{"css":"i","args":[{"type":"a","name":"n"}]}}"#),
        // The inner argument matches both branches, so the value is no selector, and the
        // outer argument matches the first branch only.
        deep(
            r#"{"type":"b","name":"n","value":{"css":"i","args":[{"type":"b","name":"m","value":"v"}]}}"#,
        ),
        deep(
            r#"{"type":"b","name":"n","value":{"css":"i","args":[{"type":"c","value":{"css":"y","args":[{"type":"b","name":"m","value":"v"}]}}]}}"#,
        ),
    ];
    let invalid = [
        deep(r#"{"type":"b","name":"n","value":"v"}"#),
        deep(r#"{"type":"c","value":{"css":"i","args":[{"type":"b","name":"n","value":"v"}]}}"#),
        deep(r#"{"type":"b","name":"n","value":{"css":"i","args":[{"type":"a","name":"m"}]}}"#),
        deep(
            r#"{"type":"b","name":"n","value":{"css":"i","args":[{"type":"c","value":{"css":"y","args":[{"type":"a","name":"m"}]}}]}}"#,
        ),
    ];
    let valid: Vec<&str> = valid.iter().map(String::as_str).collect();
    let invalid: Vec<&str> = invalid.iter().map(String::as_str).collect();
    check(schema, &valid, &invalid);
}

#[test]
fn a_type_every_value_of_the_reference_has_leaves_the_reference_bare() {
    // `{"type": "object", "$ref": ...}` of an object target is the target: the bare
    // reference's grammar, the reference compiled once for every place (draft 2020-12 reads
    // both keywords), and complemented as a reference where a `oneOf` needs it. A
    // `type` the target does not imply (`null` beside an object target) is still merged
    // (and allows no `null`: the target does not).
    let node = json!({"type": "object", "properties": {
        "name": {"type": "string"},
        "size": {"type": "integer", "minimum": 0}
    }, "required": ["name"]});
    let with = |place: Value| {
        json!({"$defs": {"node": node.clone()}, "type": "object", "properties": {
            "a": place.clone(), "b": place.clone(), "c": {"type": "array", "items": place}
        }})
    };
    let bare = with(json!({"$ref": "#/$defs/node"}));
    let typed = with(json!({"type": "object", "$ref": "#/$defs/node"}));
    let size = |s: &Value| {
        compile_json_schema(s, &JsonOptions::default())
            .unwrap()
            .size()
    };
    assert_eq!(size(&typed), size(&bare));
    let valid = [r#"{"a":{"name":"x","size":2},"c":[{"name":"z"}]}"#, "{}"];
    let invalid = [
        r#"{"a":{"size":1}}"#,
        r#"{"b":{"name":"x","size":-1}}"#,
        r#"{"c":[null]}"#,
    ];
    check(typed, &valid, &invalid);
    let nullable = with(json!({"type": ["object", "null"], "$ref": "#/$defs/node"}));
    check(
        nullable,
        &valid,
        &[r#"{"a":null}"#, r#"{"c":[{"name":1}]}"#],
    );
}

#[test]
fn not_of_objects_told_apart_by_keys_is_one_case_per_branch() {
    // Each branch requires a key the others forbid: an object breaks them all when it has none
    // of the keys, or has one and breaks that branch. Valid instances are the complement.
    let closed = |k: &str| {
        json!({"type": "object", "required": [k], "additionalProperties": false,
               "properties": {k: {"type": "string"}, "n": {"type": "integer"}, "m": {"type": "boolean"}}})
    };
    check(
        json!({"not": {"anyOf": [closed("a"), closed("b"), closed("c"), closed("d")]}}),
        &[
            "1",
            "{}",
            r#"{"a":1}"#,
            r#"{"a":"x","b":"y"}"#,
            r#"{"a":"x","z":1}"#,
            r#"{"d":"x","n":"s"}"#,
            r#"{"n":1}"#,
        ],
        &[
            r#"{"a":"x"}"#,
            r#"{"b":"y","n":2}"#,
            r#"{"d":"y","m":true,"n":-1}"#,
        ],
    );
}

#[test]
fn not_of_property_names_is_some_key_outside_the_names() {
    // `{}` and `{"xa":1}` match both branches; `{"y":1,"z":2}` neither.
    check(
        json!({"type": "object", "oneOf": [
            {"propertyNames": {"pattern": "^x"}},
            {"maxProperties": 1}
        ]}),
        &[r#"{"y":1}"#, r#"{"xa":1,"xb":2}"#],
        &["{}", r#"{"xa":1}"#, r#"{"y":1,"z":2}"#, r#"{"xa":1,"y":2}"#],
    );
    // Names from an `enum` (SchemaStore's swcrc), and names excluded by `not`.
    check(
        json!({"not": {"propertyNames": {"enum": ["a", "b", 3]}}}),
        &[r#"{"c":1}"#, r#"{"a":1,"3":2}"#],
        &["{}", r#"{"a":1,"b":2}"#, "1"],
    );
    check(
        json!({"type": "object", "not": {"propertyNames": {"not": {"enum": ["a", "b"]}}}}),
        &[r#"{"a":1}"#, r#"{"c":1,"b":2}"#],
        &["{}", r#"{"c":1}"#],
    );
    assert_eq!(
        refused_keyword(json!({"not": {"propertyNames": {"maxLength": 3}}})).0,
        "not (propertyNames)"
    );
}

#[test]
fn one_of_complements_only_on_the_types_both_branches_hold() {
    // Booleans match both branches; among booleans, the second branch's `properties` (whose
    // `uniqueItems` has no complement) is never broken, so it is not complemented at all
    // (SchemaStore's opspec: `additionalProperties` as a boolean or a schema).
    let unique = json!({"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": true});
    check(
        json!({"oneOf": [{"type": "boolean"}, {"properties": {"p": unique}}]}),
        &["{}", r#"{"p":[1,2]}"#, "1", r#""s""#],
        &["true", "false", r#"{"p":[1,1]}"#],
    );
}

#[test]
fn if_then_else_through_the_complement_of_the_condition() {
    check(
        json!({"if": {"type": "string"}, "then": {"minLength": 2}, "else": {"type": "integer"}}),
        &[r#""ab""#, "3"],
        &[r#""a""#, "1.5", "null"],
    );
    check(
        json!({"type": "object",
               "if": {"properties": {"kind": {"const": "a"}}, "required": ["kind"]},
               "then": {"required": ["x"]}}),
        &[r#"{"kind":"a","x":1}"#, r#"{"kind":"b"}"#, "{}"],
        &[r#"{"kind":"a"}"#],
    );
}

#[test]
fn unique_items_over_small_finite_domains() {
    check(
        json!({"type": "array", "items": {"enum": ["a", "b", 1, 1.0]}, "uniqueItems": true}),
        &["[]", r#"["a"]"#, r#"["b","a",1]"#, r#"[1.0,"a"]"#],
        &[r#"["a","a"]"#, r#"[1,"b",1]"#, r#"[1,1.0]"#, r#"["c"]"#],
    );
    check(
        json!({"items": {"type": "boolean"}, "uniqueItems": true, "minItems": 2}),
        &["[true,false]", "[false,true]"],
        &["[true]", "[true,true]", "[true,false,true]"],
    );
    // `uniqueItems` over one item at most asserts nothing.
    check(
        json!({"uniqueItems": true, "maxItems": 1}),
        &["[]", "[{}]"],
        &["[1,2]"],
    );
    // Items of any type: distinct as JSON values (`tests/unique_any.rs` checks the masks).
    check(
        json!({"type": "array", "uniqueItems": true}),
        &["[]", r#"[true,false,null,0,"a",{},[]]"#],
        &["[true,true]", "[0,0e1]", "[1,1.0]"],
    );
}

#[test]
fn long_length_bounds_compile_without_unrolling() {
    let s = |n: usize| format!("\"{}\"", "é".repeat(n));
    let max = json!({"type": "string", "maxLength": 20_000});
    check(
        max,
        &[&s(0), &s(999), &s(1000), &s(1001), &s(20_000)],
        &[&s(20_001)],
    );
    let min = json!({"type": "string", "minLength": 12_345, "maxLength": 13_000});
    check(min, &[&s(12_345), &s(13_000)], &[&s(12_344), &s(13_001)]);
    let unbounded = json!({"type": "string", "minLength": 10_500});
    check(unbounded, &[&s(10_500), &s(12_001)], &[&s(10_499)]);
    // Escapes count as one character each, and a chunk never ends inside one.
    let escaped = format!("\"{}\"", "\\n".repeat(10_001));
    check(
        json!({"type": "string", "maxLength": 10_001}),
        &[&escaped],
        &[&format!("\"{}\"", "\\n".repeat(10_002))],
    );
    // A format that bounds the length makes a long bound vacuous.
    check(
        json!({"type": "string", "format": "date", "maxLength": 65_536}),
        &[r#""2024-02-29""#],
        &[r#""2023-02-29""#],
    );
    // A pattern that is a prefix and then a loop on characters is written as the prefix and
    // chunks of the loop's characters (`Compiler::prefixed_long_string`); another pattern
    // would need an automaton that counts to the bound, and is refused.
    let a = |n: usize| format!("\"{}\"", "a".repeat(n));
    check(
        json!({"type": "string", "pattern": "^a+$", "maxLength": 20_000}),
        &[&a(1), &a(20_000)],
        &[&a(0), &a(20_001), "\"ab\""],
    );
    check(
        json!({"type": "string", "pattern": "^a+$", "minLength": 12_000}),
        &[&a(12_000), &a(12_345)],
        &[&a(11_999), &format!("\"{}b\"", "a".repeat(12_000))],
    );
    assert_eq!(
        refused_keyword(json!({"type": "string", "pattern": "^(ab)+$", "maxLength": 20_000})).0,
        "minLength/maxLength above 10000"
    );
}

/// Whether two automata accept the same strings: both differences are empty. Each is
/// minimised first: regex-automata's automaton of a pattern of copies of a wide group is far
/// from minimal, and its product with the other passed the difference's 100,000 states
/// (`^(b.*b{2}|.[^a]*[ab]{2}){2,4}$`, which proptest found).
fn same_language(a: &crate::dfa::Dfa, b: &crate::dfa::Dfa) -> bool {
    let (a, b) = (a.minimized(), b.minimized());
    a.minus(&b).expect("minus").is_empty_language()
        && b.minus(&a).expect("minus").is_empty_language()
}

#[test]
fn names_and_constants_without_escapable_bytes_are_one_literal() {
    // `Compiler::string_literal`: a content with no control byte, `"`, `\` or `/` has one JSON
    // encoding, its bytes between quotes, so the literal is the whole language of its encodings.
    use crate::dfa::Dfa;
    for s in ["", "name", "x-y.z_0", "a b", "é😀", "$schema", "@type"] {
        let literal = Dfa::literal(format!("\"{s}\"").as_bytes());
        let encodings = Dfa::literal(s.as_bytes()).json_string().expect("encodes");
        assert!(same_language(&literal, &encodings), "{s:?}");
    }
    // With one of those bytes, the bytes between quotes are not the only encoding, or not one
    // at all (`"q""`): the literal would miss these.
    let more = [
        ("a/b", r#""a\/b""#),
        ("tab\t", r#""tab\u0009""#),
        ("q\"", r#""q\"""#),
    ];
    for (s, other) in more {
        let encodings = Dfa::literal(s.as_bytes()).json_string().expect("encodes");
        assert!(encodings.matches(other.as_bytes()), "{s:?} as {other}");
    }
    // Through schemas: keys and constants of both kinds.
    check(
        json!({"type": "object", "properties": {"a/b": {"const": "x/y"}, "plain": {"const": "v"}},
               "required": ["a/b"], "additionalProperties": false}),
        &[r#"{"a/b":"x/y"}"#, r#"{"a\/b":"x\/y","plain":"v"}"#],
        &[
            r#"{"a\/c":"x/y"}"#,
            r#"{"a/b":"x/y","plain":"w"}"#,
            r#"{"plain":"v"}"#,
        ],
    );
}

/// Asserts that `search_dfa` reads pattern `p` as the plain search, `(?s:.)*(?:p)(?s:.)*`.
fn assert_plain_search(p: &str) {
    use super::string::{ecma_to_rust, search_dfa, search_regexes};
    let fast = search_dfa(p).expect("compiles");
    let plain = crate::dfa::Dfa::from_regex(&format!("(?s:.)*(?:{})(?s:.)*", ecma_to_rust(p)))
        .expect("compiles");
    assert!(same_language(&fast, &plain), "{p}: {:?}", search_regexes(p));
}

#[test]
fn patterns_of_anchored_words_are_their_words() {
    // `search_dfa` reads `^word$`, `^(one|two)$` and `^(?:one|two)$` as the trie of their
    // words; the language is the plain search's, for these and for look-alikes that are not
    // word lists (and take the general path).
    let patterns = [
        "^WebOptimizer$",
        "^(cdn|Cdn)$",
        "^(?:pwa|PWA|Pwa)$",
        "^(|é|a b|x-y/z)$",
        "^$",
        "^(a)(b)$",
        "^(a)|(b)$",
        "^a|b$",
        "^(a|b)c$",
        "^a.b$",
        "^(a|b\\.)$",
        "^(a|b)$x",
    ];
    for p in patterns {
        assert_plain_search(p);
    }
    check(
        json!({"type": "object", "patternProperties": {"^(cdn|Cdn)$": {"type": "integer"}}}),
        &[r#"{"cdn":1,"Cdn":2,"CDN":"x"}"#],
        &[r#"{"cdn":"x"}"#, r#"{"Cdn":1.5}"#],
    );
}

/// Patterns of literals, classes, `.`, word boundaries and anchors, quantified, grouped and
/// alternated: what `search_dfa`'s shortcuts (words, anchored alternatives, dropped parts,
/// copies of a repeated group, character atoms) rewrite.
fn small_patterns() -> impl proptest::strategy::Strategy<Value = String> {
    use proptest::prelude::*;
    let quantifier = prop::sample::select(vec!["", "", "", "?", "*", "+", "{1,2}", "{2}", "{0,2}"]);
    let atom = prop::sample::select(vec!["a", "b", "ab", "[ab]", "[^a]", ".", "\\d", "é", "\\b"]);
    let part = (atom, quantifier.clone()).prop_map(|(a, q)| match a {
        "\\b" => a.to_string(),
        _ => format!("{a}{q}"),
    });
    let seq = prop::collection::vec(part, 1..4).prop_map(|v| v.concat());
    let group = (prop::collection::vec(seq.clone(), 1..3), quantifier)
        .prop_map(|(alts, q)| format!("({}){q}", alts.join("|")));
    let piece = prop_oneof![seq.clone(), group];
    let general = (
        any::<bool>(),
        prop::collection::vec(piece, 1..3),
        any::<bool>(),
    )
        .prop_map(|(s, v, e)| {
            format!(
                "{}{}{}",
                if s { "^" } else { "" },
                v.concat(),
                if e { "$" } else { "" }
            )
        });
    // A whole bounded repetition of a group (`Dfa::by_copies`).
    let counts = prop::sample::select(vec!["{2}", "{1,3}", "{0,2}", "{2,4}", "{3,}"]);
    let repeated = (prop::collection::vec(seq, 1..3), counts)
        .prop_map(|(alts, q)| format!("^({}){q}$", alts.join("|")));
    prop_oneof![general, repeated]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
    #[test]
    fn searches_are_the_plain_search(p in small_patterns()) {
        assert_plain_search(&p);
    }
}

#[test]
fn property_names_of_an_enum_are_its_strings() {
    // `propertyNames` of names alone is their trie (values of other types name no key).
    check(
        json!({"propertyNames": {"enum": ["a", "b/c", 3, "é"]}}),
        &[
            r#"{"a":1}"#,
            r#"{"b\/c":1}"#,
            r#"{"b/c":2,"a":0}"#,
            r#"{"é":[]}"#,
            r#"{}"#,
        ],
        &[r#"{"c":1}"#, r#"{"3":1}"#, r#"{"ab":1}"#, r#"{"":1}"#],
    );
    check(
        json!({"propertyNames": {"enum": ["ab", "abc"], "maxLength": 2}}),
        &[r#"{"ab":1}"#],
        &[r#"{"abc":1}"#, r#"{"a":1}"#],
    );
}

#[test]
fn additional_keys_split_as_json_strings() {
    // Any key but the names, split by a pattern, as JSON strings: a key is judged by the
    // string it writes, escapes and all.
    let schema = json!({
        "properties": {"a": {"type": "integer"}, "x-a": {"type": "null"}},
        "patternProperties": {"^x-": {"type": "string"}, "/$": {"type": "string", "maxLength": 3}},
        "additionalProperties": {"type": "boolean"},
    });
    check(
        schema,
        &[
            r#"{"x-y":"s"}"#,
            r#"{"x-\/":"s"}"#,
            r#"{"x-\n":"s"}"#,
            r#"{"b":true,"a":1}"#,
            r#"{"ab":false}"#,
            r#"{"x":true}"#,
            r#"{"a\/":"abc"}"#,
            r#"{"\u001f":false}"#,
        ],
        &[
            r#"{"x-\/":1}"#,
            r#"{"x-\/":"abcd"}"#,
            r#"{"x-y":true}"#,
            r#"{"a":"s"}"#,
            r#"{"b":"s"}"#,
            r#"{"a\/":true}"#,
            r#"{"x-a":null}"#,
            r#"{"x-a":"s"}"#,
            r#"{"\u001f":"s"}"#,
        ],
    );
}

#[test]
fn patterns_of_finitely_many_keys_name_them() {
    // `^(a|b|c)$` names its keys: each is a member whose value meets the pattern's schema,
    // its own `properties` entry and every other pattern that matches it; no additional key
    // is one of them, and the other patterns still split the additional keys.
    let schema = json!({
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "patternProperties": {
            "^(a|b|c)$": {"minLength": 2},
            "^b": {"maxLength": 3},
            "^(?:x)$": false,
        },
        "additionalProperties": {"type": "integer"},
    });
    check(
        schema.clone(),
        &[
            r#"{"a":"aa"}"#,
            r#"{"b":"bb","c":"cc"}"#,
            r#"{"c":1}"#,
            r#"{"c":true,"d":5}"#,
            r#"{"bz":"abc","a":"xyz","b":"bbb","d":-1}"#,
            r#"{}"#,
        ],
        &[
            r#"{"a":"a"}"#,
            r#"{"a":1}"#,
            r#"{"b":"bbbb"}"#,
            r#"{"b":"b"}"#,
            r#"{"x":1}"#,
            r#"{"d":"s"}"#,
            r#"{"bz":"abcd"}"#,
            r#"{"a":"aa","a":"aa"}"#,
        ],
    );
    // With `additionalProperties: false` and only patterns of finitely many keys, their keys
    // are the only ones.
    check(
        json!({"patternProperties": {"^(on|off)$": {"type": "boolean"}}, "additionalProperties": false}),
        &[r#"{"on":true}"#, r#"{"off":false,"on":true}"#, r#"{}"#],
        &[r#"{"onn":true}"#, r#"{"on":1}"#, r#"{"o":true}"#],
    );
}

#[test]
fn searches_drop_what_the_text_around_them_makes_redundant() {
    // A search reads anything before and after the pattern, so a last part that may match
    // nothing goes, and a last repetition counts only to its least (the same at the front of
    // a pattern not anchored there): the language is the plain search's, assertions beside
    // the dropped parts included.
    let url =
        "^[^:]+://[^:/]+(:[0-9]+)?(/[^?#/]+)*(\\?([^=#&]+=[^=#&]+)(&([^=#&]+=[^=#&]+))*)?(#.+)?";
    let patterns = [
        url,
        "a\\b(c)?",
        "(c)?\\ba",
        "(x)?\\bfoo+",
        "[a-z]{2,5}",
        "ab{3,}",
        "(ab|c+)d*",
        "\\d+(\\.\\d+)?$",
        "^(a|b+)c?",
        "(?:x\\b)*y+",
        "(?:x\\b){2,}",
        "(\\bx){2,3}y",
        "^",
        "a?",
        "(a+|b)+(c|\\b)?",
        "^ab|c{2,}d*",
        "^ab+|^c(d|e*)",
        "(^a|b)+c",
        "x(y$)?",
        "é+(ü|ö)*",
    ];
    for p in patterns {
        assert_plain_search(p);
    }
    // The URL is a search for `[^:]+://[^:/]` at the start: far fewer states to build.
    let d = super::string::search_dfa(url).expect("compiles");
    let plain = crate::dfa::Dfa::from_regex(&format!(
        "(?s:.)*(?:{})(?s:.)*",
        super::string::ecma_to_rust(url)
    ))
    .expect("compiles");
    let (few, many) = (d.num_states(), plain.num_states());
    assert!(few * 10 < many, "{few} states, {many} for the plain search");
    check(
        json!({"type": "string", "pattern": url}),
        &[r#""https://example.org""#, r#""a://b:x#""#],
        &[r#""https:///x""#, r#""://b""#, r#""ab""#],
    );
}

#[test]
fn alternatives_anchored_at_the_start_are_read_there() {
    // `search_dfa` reads the top-level alternatives that start with `^` at the start, beside
    // a search for the others; the language is the plain search's.
    let patterns = [
        "^lin|^lnx$|^win|^ms.*win|vms|hp.*ux|sol",
        "^in$|^out$",
        "^a|b",
        "a|^b|",
        "^(\\d+\\.\\d+)|(UNVERSIONED)$",
        "^\\{[A-F0-9]{2}\\}$|^[a-z]*@[a-z]+$",
        "^[Ee][Ss]5|[Ee][Ss]6|[Ee][Ss]7$",
        "^(x|^y)|z",
        "[|^]a|^b",
    ];
    for p in patterns {
        assert_plain_search(p);
    }
    check(
        json!({"type": "string", "pattern": "^lin|^ms.*win|vms"}),
        &[
            r#""linux""#,
            r#""ms-windows""#,
            r#""openvms""#,
            r#""x vms y""#,
        ],
        &[r#""xlin""#, r#""a ms win""#, r#""vm s""#],
    );
    // A look-ahead after `^` with alternatives beside it binds the first alternative alone:
    // not read as a look-ahead over the whole pattern (which would refuse `"ac"`), but refused.
    assert!(compile_json_schema(
        &json!({"type": "string", "pattern": "^(?!a)b|c"}),
        &JsonOptions::default()
    )
    .is_err());
}

#[test]
fn chunked_length_bounds_are_exact_at_every_chunk_boundary() {
    // Bounds above 256 characters are written as chunks of 128 (`Compiler::long_string`); the
    // same bounds beside a pattern that matches everything are one automaton that counts.
    // Both must accept exactly the strings of 130 to 300 characters, however the characters
    // are written (one byte, two, four, or an escape of two or six bytes).
    let chunked = json!({"type": "string", "minLength": 130, "maxLength": 300});
    let counted = json!({"type": "string", "minLength": 130, "maxLength": 300,
                         "pattern": "^[\\s\\S]*$"});
    let opts = JsonOptions::default();
    let a = compile_json_schema(&chunked, &opts).expect("chunked compiles");
    let b = compile_json_schema(&counted, &opts).expect("counted compiles");
    for unit in ["a", "é", "😀", "\\n", "\\u0001"] {
        for n in 0..=310 {
            let text = format!("\"{}\"", unit.repeat(n));
            let want = (130..=300).contains(&n);
            assert_eq!(a.recognizes(text.as_bytes()), want, "chunked, {n} × {unit}");
            assert_eq!(b.recognizes(text.as_bytes()), want, "counted, {n} × {unit}");
        }
    }
    // A chunk never ends inside a character or an escape: mixed writings across the
    // boundaries at 128 and 256, through the constraint's masks too.
    let mixed = |n: usize| format!("\"{}\"", ["a", "é", "\\n", "😀"].repeat(n / 4).concat());
    check(
        chunked,
        &[&mixed(132), &mixed(256), &mixed(260), &mixed(300)],
        &[&mixed(128), &mixed(304)],
    );
}

#[test]
fn long_bounds_beside_a_prefix_and_a_loop_are_exact() {
    // winget's URLs: `^([Hh][Tt][Tt][Pp][Ss]?)://.+$` under `maxLength: 2000` is written as
    // the prefix (`http://` or `https://` and one character), then chunks of characters that
    // `.` reads (`Compiler::prefixed_long_string`): exactly the strings of the pattern of 260
    // to 300 characters here, however the characters are written, and none with a line end.
    let schema = json!({"type": "string", "pattern": "^([Hh][Tt][Tt][Pp][Ss]?)://.+$",
                        "minLength": 260, "maxLength": 300});
    let g = compile_json_schema(&schema, &JsonOptions::default()).expect("compiles");
    // No automaton counts every character: under a bound a hundred times larger (which one
    // that counts could not reach, and was refused), the automata are about as large.
    let far = json!({"type": "string", "pattern": "^([Hh][Tt][Tt][Pp][Ss]?)://.+$",
                     "minLength": 26_000, "maxLength": 30_000});
    let far = compile_json_schema(&far, &JsonOptions::default()).expect("compiles");
    assert!(
        far.terminal_states() < 2 * g.terminal_states(),
        "{} states, {} under 300",
        far.terminal_states(),
        g.terminal_states()
    );
    let long = |n: usize| format!("\"http://{}\"", "a".repeat(n - 7));
    assert!(far.recognizes(long(26_000).as_bytes()) && far.recognizes(long(30_000).as_bytes()));
    assert!(!far.recognizes(long(25_999).as_bytes()) && !far.recognizes(long(30_001).as_bytes()));
    for scheme in ["http://", "HTTPS://", "hTtP://"] {
        for unit in ["a", "é", "😀", "\\t", "\\u0001"] {
            for n in 250..=310 {
                let chars = scheme.chars().count();
                let text = format!("\"{scheme}{}\"", unit.repeat(n - chars));
                let want = (260..=300).contains(&n);
                assert_eq!(
                    g.recognizes(text.as_bytes()),
                    want,
                    "{n} × {unit} after {scheme}"
                );
            }
        }
    }
    let body = "x".repeat(270);
    for refused in [
        format!("\"ftp://{body}\""),
        format!("\"http:/{body}\""),
        format!("\"http://\\n{body}\""),
        format!("\"http://{body}\\r\""),
        format!("\"http://{body}\\u2028\""),
        "\"http://\"".to_string(),
    ] {
        assert!(!g.recognizes(refused.as_bytes()), "{refused}");
    }
    // Through the constraint's masks too, across the chunk boundaries.
    let url = |n: usize| {
        format!(
            "\"https://{}\"",
            ["a", "é", "\\t", "😀"].repeat(n / 4).concat()
        )
    };
    check(
        schema,
        &[&url(252), &url(268), &url(292)],
        &[&url(248), &url(296)],
    );
}

#[test]
fn moderate_length_bounds_beside_patterns_compile() {
    // publiccode's `longDescription`: counted in one automaton, 10,000 characters took about
    // 90,000 states; as chunks it compiles, exactly.
    let s = |n: usize| format!("\"{}\"", "é".repeat(n));
    check(
        json!({"type": "string", "minLength": 500, "maxLength": 10_000}),
        &[&s(500), &s(4_001), &s(10_000)],
        &[&s(499), &s(10_001), &s(0)],
    );
    // winget's file names: four dot-separated pieces of at most 32 characters, at most 128 in
    // all, which the pieces alone would allow up to 131.
    let piece = r#"[^\.\s\\/:\*\?"<>\|\x01-\x1f]{1,32}"#;
    let schema = json!({"type": "string", "maxLength": 128,
                        "pattern": format!("^{piece}(\\.{piece}){{1,3}}$")});
    let a = |n: usize| "a".repeat(n);
    let name = |last: usize| format!("\"{}.{}.{}.{}\"", a(32), a(32), a(32), a(last));
    check(
        schema,
        &[
            &name(29),
            "\"setup.exe\"",
            "\"é.b\"",
            &format!("\"{}.x\"", a(32)),
        ],
        &[
            &name(30),
            &name(32),
            "\"setup\"",
            "\"a b.exe\"",
            &format!("\"{}.x\"", a(33)),
        ],
    );
    // The tag pattern of winget's locales, with its `maxLength: 20`.
    check(
        json!({"type": "string", "maxLength": 20,
               "pattern": "^([a-zA-Z]{2}|[iI]-[a-zA-Z]+|[xX]-[a-zA-Z]{1,8})(-[a-zA-Z]{1,8})*$"}),
        &["\"en-US\"", "\"i-abcdefghijklmnopqr\""],
        &["\"i-abcdefghijklmnopqrs\"", "\"en-\"", "\"e\""],
    );
}

#[test]
fn many_named_properties_and_counts_without_blowup() {
    let mut props = serde_json::Map::new();
    for i in 0..100 {
        props.insert(format!("p{i}"), json!({"type": "integer"}));
    }
    let s = json!({"type": "object", "properties": props, "required": ["p7", "p70"],
                   "additionalProperties": false, "minProperties": 3, "maxProperties": 5});
    check(
        s,
        &[
            r#"{"p7":1,"p8":2,"p70":3}"#,
            r#"{"p1":1,"p7":1,"p8":2,"p9":2,"p70":3}"#,
        ],
        &[
            r#"{"p7":1,"p70":3}"#,
            r#"{"p1":1,"p2":1,"p7":1,"p8":2,"p9":2,"p70":3}"#,
            r#"{"p7":1,"p8":2,"p71":"x"}"#,
            r#"{"p7":1,"p8":2,"p70":3,"q":1}"#,
        ],
    );
    // Additional members are counted too.
    let s = json!({"properties": {"a": {}, "b": {}, "c": {}, "d": {}, "e": {}, "f": {}, "g": {},
                                  "h": {}, "i": {}},
                   "maxProperties": 2});
    check(
        s,
        &["{}", r#"{"a":1,"z":2}"#, r#"{"y":1,"z":2}"#],
        &[r#"{"a":1,"b":2,"z":3}"#, r#"{"x":1,"y":1,"z":2}"#],
    );
}

#[test]
fn ecma_patterns_keep_their_ecma_meaning() {
    let p = |re: &str| json!({"type": "string", "pattern": re});
    // `.` excludes every line terminator, not only `\n`.
    check(
        p("^a.b$"),
        &[r#""axb""#, r#""a\tb""#, "\"aéb\""],
        &[r#""a\nb""#, r#""a\rb""#, "\"a\u{2028}b\"", "\"a\u{2029}b\""],
    );
    // `\s` is ECMA's white space: no-break space and BOM in, NEL (U+0085) out.
    check(
        p("^\\s$"),
        &[
            "\" \"",
            "\"\u{a0}\"",
            "\"\u{feff}\"",
            r#""\t""#,
            "\"\u{3000}\"",
        ],
        &["\"\u{85}\"", r#""a""#],
    );
    check(p("^\\S$"), &["\"\u{85}\"", r#""a""#], &["\"\u{a0}\""]);
    // `\b` is an ASCII word boundary: `é` is not a word character.
    check(
        p("\\bcat\\b"),
        &[r#""a cat""#, r#""cat""#, "\"écat\""],
        &[r#""cats""#, r#""_cat""#],
    );
    // Inside a class `[`, `&&` and `~~` are literal characters, and `\b` is a backspace.
    check(p("^[a[]+$"), &[r#""a[a""#], &[r#""]""#, r#""b""#]);
    check(p("^[a&&b]$"), &[r#""&""#, r#""a""#, r#""b""#], &[r#""c""#]);
    check(p("^[~~x]$"), &[r#""~""#, r#""x""#], &[r#""y""#]);
    check(p("^[\\b]$"), &[r#""\b""#], &[r#""b""#]);
    // `[^]` is any character, `[]` none; `{,2}` and a lone `]` are literal.
    check(p("^a[^]b$"), &[r#""a\nb""#, r#""axb""#], &[r#""ab""#]);
    check(p("^(a[]|b)$"), &[r#""b""#], &[r#""a""#, r#""""#]);
    check(p("^a{,2}$"), &[r#""a{,2}""#], &[r#""a""#, r#""aa""#]);
    check(p("^a]$"), &[r#""a]""#], &[r#""a""#]);
    check(
        p("^\\cC\\cj$"),
        &[r#""\u0003\n""#],
        &[r#""cCcj""#, r#""\u0003""#],
    );
}

#[test]
fn leading_look_aheads_are_exact() {
    let p = |re: &str| json!({"type": "string", "pattern": re});
    check(
        p("^(?!@@)[@a-z]+$"),
        &[r#""@a""#, r#""a@@""#, r#""@""#],
        &[r#""@@a""#, r#""@@""#, r#""A""#],
    );
    // `$` inside the look-ahead is the end of the whole string.
    check(
        p("^(?!python$)[a-z]+$"),
        &[r#""pythons""#, r#""py""#],
        &[r#""python""#],
    );
    check(
        p("^(?!^lucene\\.|builtin\\.).*"),
        &[r#""x.lucene.""#, r#""lucene""#, r#""""#],
        &[r#""lucene.x""#, r#""builtin.""#],
    );
    check(
        p("^(?!.*(local|meta)).*$"),
        &[r#""remote""#, r#""loca""#],
        &[r#""xlocal""#, r#""metal""#],
    );
    // Positive look-aheads, and several in a row.
    check(
        p("^(?=a)(?!ab)"),
        &[r#""a""#, r#""ac""#],
        &[r#""ab""#, r#""b""#, r#""""#],
    );
    // The look-ahead's `.` is ECMA's too: a line terminator stops `.*`.
    check(p("^(?!.*x)"), &["\"a\\nx\"", r#""abc""#], &[r#""ax""#]);
    // Look-arounds elsewhere are refused with the regex error.
    for re in ["a(?!b)", "(?<=a)b", "^a(?!b)"] {
        assert!(matches!(refused(p(re)), Error::RegexSyntax { .. }), "{re}");
    }
}

#[test]
fn tempered_tokens_are_exact() {
    let p = |re: &str| json!({"type": "string", "pattern": re});
    // Stylelint's rule keys: anything that contains neither word, the empty key among them.
    let stylelint = p("^((?!message|severity).)*$");
    check(
        stylelint.clone(),
        &[r#""""#, r#""ignore""#, r#""messag""#, r#""sever ity""#],
        &[
            r#""message""#,
            r#""xmessagex""#,
            r#""severity""#,
            r#""a severity""#,
        ],
    );
    // ECMA's `.` stops at a line terminator, and `+` needs one character.
    check(stylelint, &[], &["\"a\\nb\"", "\"\\r\""]);
    check(
        p("^(?:(?!ab).)+$"),
        &[r#""a""#, r#""ba""#, r#""a b""#],
        &[r#""""#, r#""ab""#, r#""cab""#],
    );
    // A look-ahead that matches the empty string stops every iteration: only `""` is left.
    check(p("^((?!x?).)*$"), &[r#""""#], &[r#""a""#, r#""x""#]);
    // Bodies whose matches depend on where they are, and other shapes, stay refused.
    for re in [
        "^((?!$).)*$",
        "^((?!^a).)*$",
        "^((?!\\ba).)*$",
        "^((?!a).)*b$",
        "((?!a).)*",
    ] {
        assert!(matches!(refused(p(re)), Error::RegexSyntax { .. }), "{re}");
    }
}

#[test]
fn property_names_through_references_and_excluded_values() {
    check(
        json!({"type": "object",
               "$defs": {"key": {"type": "string", "pattern": "^[a-z]+$"}},
               "propertyNames": {"$ref": "#/$defs/key"}}),
        &["{}", r#"{"ab":1,"c":2}"#],
        &[r#"{"Ab":1}"#, r#"{"a1":1}"#, r#"{"":1}"#],
    );
    check(
        json!({"type": "object", "propertyNames": {"not": {"enum": ["ignore", "relative"]}}}),
        &["{}", r#"{"ignored":1,"rel":true}"#],
        &[r#"{"ignore":1}"#, r#"{"a":1,"relative":2}"#],
    );
}

#[test]
fn uris_iris_templates_and_relative_pointers_are_exact() {
    let f = |name: &str| json!({"type": "string", "format": name});
    check(
        f("uri"),
        &[
            r#""http://[::ffff:192.168.0.1]/p""#,
            r#""http://[v1.fe]""#,
            r#""urn:a:b""#,
        ],
        &[
            r#""http://[::ffff:192.168.0.01]/p""#,
            r#""http://[1:2]""#,
            r#""http://é.com""#,
        ],
    );
    check(
        f("uri-reference"),
        &[r#""a/b:c""#, r#""/a:b""#, r#""a:b""#, r#""""#, r##""#x""##],
        &[r#""1:b""#, r#""%2""#],
    );
    check(
        f("iri"),
        &[r#""http://é.com/ü?q=ç#f""#],
        &[r#""http://é.com/ ""#, r#""é""#],
    );
    check(
        f("uri-template"),
        &[
            r#""http://example.com/{+path}{?q,lang}""#,
            r#""{var:30}{list*}""#,
            r#""a'b""#,
        ],
        &[r#""{}""#, r#""{var:0}""#, r#""{a""#, r#""a{b}}""#],
    );
    check(
        f("relative-json-pointer"),
        &[r#""0""#, r##""1#""##, r#""0/a~1b""#],
        &[r#""01""#, r##""#""##, r#""-1/a""#, r#""0~""#],
    );
    check(
        f("hostname"),
        &[r#""a-b.example""#, r#""ab-c""#],
        &[r#""xn--a""#, r#""ab--c.example""#, r#""a.XN--b""#],
    );
    check(
        f("ipv6"),
        &[r#""::ffff:1.2.3.4""#, r#""1::""#],
        &[r#""1::2::3""#, r#""::1.2.3""#],
    );
}

/// `unevaluatedProperties` beside `anyOf` sees the members every matching branch evaluates
/// (JSON-Schema-Test-Suite 2019-09 and 2020-12, `unevaluatedProperties.json`, "with anyOf"):
/// compiled branch by branch it would refuse `{"foo":"foo","bar":"bar","baz":"baz"}`, which
/// matches two branches, so a schema whose branches may overlap and evaluate different
/// members is refused by name; branches that cannot overlap (told apart by a constant) are
/// exact branch by branch.
#[test]
fn unevaluated_properties_beside_overlapping_any_of_is_refused() {
    let (keyword, path) = refused_keyword(json!({
        "type": "object",
        "properties": {"foo": {"type": "string"}},
        "anyOf": [
            {"properties": {"bar": {"const": "bar"}}, "required": ["bar"]},
            {"properties": {"baz": {"const": "baz"}}, "required": ["baz"]}
        ],
        "unevaluatedProperties": false
    }));
    assert!(keyword.starts_with("unevaluatedProperties"), "{keyword}");
    assert_eq!(path, "#");
    check(
        json!({
            "type": "object",
            "required": ["kind"],
            "anyOf": [
                {"properties": {"kind": {"const": "a"}, "x": {"type": "integer"}}},
                {"properties": {"kind": {"const": "b"}, "y": {"type": "integer"}}}
            ],
            "unevaluatedProperties": false
        }),
        &[
            r#"{"kind":"a","x":1}"#,
            r#"{"kind":"b","y":2}"#,
            r#"{"kind":"b"}"#,
        ],
        &[
            r#"{"kind":"a","y":1}"#,
            r#"{"kind":"b","x":2}"#,
            r#"{"kind":"c"}"#,
        ],
    );
    // Branches that evaluate the same members may overlap.
    check(
        json!({
            "anyOf": [
                {"properties": {"n": {"type": "integer"}}, "required": ["n"]},
                {"properties": {"n": {"minimum": 0}}, "minProperties": 1}
            ],
            "unevaluatedProperties": false
        }),
        &[r#"{"n":1}"#, r#"{"n":0.5}"#, r#"{"n":-2}"#],
        &[r#"{"n":1,"m":1}"#, r#"{"n":-0.5}"#, r#"{}"#],
    );
}

/// A `$schema` naming a meta-schema of its own, given among the resources, is read in that
/// meta-schema's dialect: a vocabulary its `$vocabulary` leaves out leaves its keywords
/// annotations (JSON-Schema-Test-Suite 2019-09 and 2020-12, `vocabulary.json`, "no validation
/// vocabulary": `minimum` no longer refuses 1, `properties` still applies); a vocabulary it
/// requires that nextok does not know, and a meta-schema that is not given, are refused by
/// name, since compiling them as a known draft could refuse valid instances.
#[test]
fn a_meta_schema_s_vocabularies_choose_the_keywords_enforced() {
    let meta = |vocabularies: Value| {
        json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://example.com/meta",
            "$vocabulary": vocabularies,
        })
    };
    let v = |name: &str| format!("https://json-schema.org/draft/2020-12/vocab/{name}");
    let schema = json!({
        "$schema": "https://example.com/meta",
        "properties": {"bad": false, "n": {"minimum": 10}},
    });
    let with = |m: Value| {
        let mut r = SchemaResources::new();
        assert!(r.insert_document(m));
        JsonOptions::default().with_resources(r)
    };
    let no_validation = with(meta(json!({v("core"): true, v("applicator"): true})));
    check_with(
        &schema,
        &no_validation,
        &[r#"{"n":20}"#, r#"{"n":1}"#, r#"{"n":"x"}"#],
        &[r#"{"bad":1}"#],
    );
    let compiled = compile_json_schema_report(&schema, &no_validation).expect("compiles");
    assert_eq!(compiled.draft, Some(Draft::Draft2020_12));
    assert!(compiled
        .ignored
        .iter()
        .any(|i| i.keyword == "minimum" && i.reason == IgnoredReason::VocabularyOff));
    // Every vocabulary on: `minimum` applies. An optional vocabulary nextok does not know is
    // ignored; a required one is refused.
    let all = with(meta(json!({
        v("core"): true, v("applicator"): true, v("validation"): true,
        v("unevaluated"): true, "https://example.com/vocab/custom": false,
    })));
    check_with(
        &schema,
        &all,
        &[r#"{"n":20}"#],
        &[r#"{"n":1}"#, r#"{"bad":1}"#],
    );
    let custom = with(meta(
        json!({v("core"): true, "https://example.com/vocab/custom": true}),
    ));
    for options in [&custom, &JsonOptions::default()] {
        match compile_json_schema(&schema, options) {
            Err(Error::UnsupportedKeyword { keyword, path }) => {
                assert!(
                    keyword.starts_with("$schema https://example.com/meta"),
                    "{keyword}"
                );
                assert_eq!(path, "#");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // json-schema.org's latest meta-schema, named without a draft, is the default dialect.
    check(
        json!({"$schema": "http://json-schema.org/schema#", "minimum": 10}),
        &["10"],
        &["9"],
    );
}

/// An object's additional keys take the mask of any key less the tokens that would close the
/// key on a name (`grammar::MinusNames`); walked plainly, each mask is the same. Tokens here
/// end a key on a name (`b"` after `"a`), go past its end (`b":`, `bc":"`), hold escapes
/// (`\/b"`) and multi-byte characters. In the second schema names hold a byte written two
/// ways (`a/b`, `a\/b`) or only escaped (`x"y`), where the shortcut gives way to the walk.
#[test]
fn additional_keys_take_the_mask_of_any_key_less_the_names() {
    let pieces: [&[u8]; 15] = [
        b"b\"",
        b"bc\"",
        b"b\":",
        b"bc\":\"",
        b"\\/b\"",
        b"/b\"",
        b"\"",
        b"\":",
        b"a",
        b"ab",
        b"ab\"",
        b"abd\"",
        b"y\"",
        b"\\\"y\"",
        b"\xc3\xa9\"",
    ];
    let vocab = || {
        let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        tokens.extend(pieces.iter().map(|p| p.to_vec()));
        tokens.push(Vec::new());
        let eos = tokens.len() as u32 - 1;
        Arc::new(TokenVocab::new(tokens, &[eos]).expect("vocabulary"))
    };
    let id = |p: &[u8]| 256 + pieces.iter().position(|x| *x == p).expect("piece") as u32;
    let allowed = |m: &[u64], t: u32| m[t as usize / 64] >> (t % 64) & 1 == 1;
    for names in [&["ab", "abc", "b"][..], &["ab", "abc", "a/b", "x\"y"][..]] {
        let properties: serde_json::Map<String, Value> = names
            .iter()
            .map(|n| (n.to_string(), json!({"type": "integer"})))
            .collect();
        let schema = json!({"properties": properties, "additionalProperties": {"type": "integer"}});
        let g = compile_json_schema(&schema, &JsonOptions::default()).expect("compiles");
        let (fast, plain) = (vocab(), vocab());
        for prefix in [
            "{\"",
            "{\"a",
            "{\"ab",
            "{\"abc",
            "{\"a/",
            "{\"a\\/",
            "{\"x",
            "{\"x\\",
            "{\"\u{e9}",
            "{\"q",
            "{\"ab\":1,\"",
            "{\"ab\":1,\"a",
            "{\"b\":1,\"ab\":2,\"",
            "{\"a/b\":1,\"a",
            "{\"x\\\"y\":1,\"x",
        ] {
            let mut a = GrammarConstraint::new(Arc::clone(&g), &fast);
            let mut b = GrammarConstraint::new(Arc::clone(&g), &plain);
            b.set_plain_masks(true);
            for &byte in prefix.as_bytes() {
                a.advance(byte as u32).expect("a prefix of an instance");
                b.advance(byte as u32).expect("a prefix of an instance");
            }
            let (mut ma, mut mb) = (fast.empty_mask(), plain.empty_mask());
            a.fill_mask(&mut ma).expect("mask");
            b.fill_mask(&mut mb).expect("mask");
            assert_eq!(ma, mb, "{names:?} after {prefix}");
            if prefix == "{\"ab\":1,\"" {
                // `ab` is written: not again, but `abd` is another key.
                assert!(!allowed(&ma, id(b"ab\"")) && allowed(&ma, id(b"abd\"")));
            }
        }
    }
}

#[test]
fn objects_only_sets_of_names_track_keep_them_up_to_eight_names() {
    // Past `max_free_order_properties` (4 by default) an object is a loop over its members,
    // which cannot say that some member must be present (`not` of `additionalProperties`) or
    // check `dependentRequired` beside counts: such objects keep rules per set of names up to
    // 8 names, whatever the option.
    let names = json!({"a": {}, "b": {}, "c": {}, "d": {}, "e": {}, "f": {}});
    let some_other = json!({
        "type": "object",
        "properties": names,
        "not": {"properties": names, "additionalProperties": false},
    });
    let counted = json!({
        "type": "object",
        "properties": names,
        "dependentRequired": {"a": ["b"]},
        "maxProperties": 3,
    });
    for free in [0, 4, 8] {
        let options = JsonOptions::default().with_max_free_order_properties(free);
        check_with(
            &some_other,
            &options,
            &[r#"{"z":1}"#, r#"{"a":1,"z":2,"f":3}"#],
            &[r#"{}"#, r#"{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6}"#],
        );
        check_with(
            &counted,
            &options,
            &[r#"{"a":1,"b":2}"#, r#"{"c":1,"d":2,"e":3}"#, r#"{}"#],
            &[r#"{"a":1}"#, r#"{"a":1,"b":2,"c":3,"d":4}"#],
        );
    }
    // Past 8 names, the loop cannot take them: refused by name, as before.
    let nine =
        json!({"a": {}, "b": {}, "c": {}, "d": {}, "e": {}, "f": {}, "g": {}, "h": {}, "i": {}});
    assert!(compile_json_schema(
        &json!({"type": "object", "properties": nine, "not": {"properties": nine, "additionalProperties": false}}),
        &JsonOptions::default()
    )
    .is_err());
}

#[test]
fn enum_values_are_kept_by_type_and_exclusion_or_by_the_other_keywords() {
    // Strings, booleans and `null` beside only `type` and excluded values are kept by their
    // type and by equalling no excluded value; numbers go through the other keywords' grammar.
    check(
        json!({"type": "string", "enum": ["a", "b", "c", 1], "not": {"enum": ["b"]}}),
        &[r#""a""#, r#""c""#],
        &[r#""b""#, "1", r#""d""#],
    );
    check(
        json!({"enum": ["a", 1, 2.5, null, true], "type": ["integer", "null"],
               "not": {"enum": [null, "a"]}}),
        &["1", "1.0"],
        &[r#""a""#, "2.5", "null", "true"],
    );
    // A `oneOf` of constants: each branch keeps its own value beside the others excluded.
    check(
        json!({"properties": {"k": {"oneOf": [{"const": "x"}, {"const": "y"}, {"enum": ["x", "z"]}]}}}),
        &[r#"{"k":"y"}"#, r#"{"k":"z"}"#],
        &[r#"{"k":"x"}"#, r#"{"k":"w"}"#],
    );
    // Another keyword beside them: the values go through its grammar.
    check(
        json!({"type": "string", "enum": ["ab", "abc", "b"], "minLength": 2,
               "not": {"enum": ["abc"]}}),
        &[r#""ab""#],
        &[r#""abc""#, r#""b""#],
    );
}

/// A URL pattern of `{1,250}` characters then a dot (dein's, a bound of its own so that no
/// other test builds it first: automata are kept process-wide).
const URL_250: &str = "^https?:\\/\\/(www\\.)?[-a-zA-Z0-9@:%._\\+~#=]{1,250}\\.[a-zA-Z0-9()]{1,6}\\b([-a-zA-Z0-9()@:%_\\+.~#?&//=]*)$";

/// A large pattern on a string value is built when a parse first reaches the value
/// (`JsonOptions::defer_large_patterns`): the compile leaves its automaton out, reading into
/// the value builds it, and every instance is judged as when it is built at compile.
#[test]
fn large_patterns_are_built_when_first_reached() {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "home": {"type": "string", "pattern": URL_250}}
    });
    let deferred = compile_json_schema(&schema, &JsonOptions::default()).expect("compiles");
    let at_compile = JsonOptions::default().with_defer_large_patterns(false);
    let eager = compile_json_schema(&schema, &at_compile).expect("compiles");
    let (before, built) = (deferred.terminal_states(), eager.terminal_states());
    assert!(
        before + 1000 < built,
        "the pattern's automaton is left out: {before} states, {built} built at compile"
    );
    let valid = [
        r#"{"name":"x"}"#,
        r#"{"home":"https://example.com"}"#,
        r#"{"name":"x","home":"http://www.a.bc/d?e=f"}"#,
    ];
    let invalid = [
        r#"{"home":"ftp://example.com"}"#,
        r#"{"home":"https://example"}"#,
        r#"{"home":"https://a.b c"}"#,
    ];
    let vocab = byte_vocab();
    assert!(constraint_accepts(&deferred, &vocab, valid[0]));
    assert_eq!(
        deferred.terminal_states(),
        before,
        "no value of the pattern read yet"
    );
    for (texts, want) in [(&valid, true), (&invalid, false)] {
        for t in texts {
            for g in [&deferred, &eager] {
                assert_eq!(constraint_accepts(g, &vocab, t), want, "{t}");
                assert_eq!(g.recognizes(t.as_bytes()), want, "{t}");
            }
        }
    }
    assert_eq!(deferred.terminal_states(), built, "built once reached");
}

/// A grammar's heap estimate counts its terminals' automata as they are built: a deferred
/// pattern's once a parse has reached it (and then as much as the same grammar built at
/// compile), and a grammar of a larger pattern holds more.
#[test]
fn heap_bytes_count_the_automata_built_so_far() {
    let schema = |p: &str| json!({"type": "object", "properties": {"home": {"type": "string", "pattern": p}}});
    let url = URL_250.replace("250", "150");
    let opts = JsonOptions::default();
    let g = compile_json_schema(&schema(&url), &opts).unwrap();
    let eager = compile_json_schema(
        &schema(&url),
        &opts.clone().with_defer_large_patterns(false),
    )
    .unwrap();
    let before = g.heap_bytes();
    assert!(
        before > 0 && before < eager.heap_bytes(),
        "{before} {}",
        eager.heap_bytes()
    );
    let vocab = byte_vocab();
    let mut c = GrammarConstraint::new(g.clone(), &vocab);
    let mut mask = vocab.empty_mask();
    for &b in br#"{"home":"h"# {
        c.fill_mask(&mut mask).unwrap();
        c.advance(b as u32).unwrap();
    }
    assert_eq!(g.heap_bytes(), eager.heap_bytes());
    let small = compile_json_schema(&schema("^a$"), &opts).unwrap();
    assert!(
        small.heap_bytes() * 10 < eager.heap_bytes(),
        "{}",
        small.heap_bytes()
    );
}

/// A deferred pattern whose automaton goes past the limits is refused where a parse first
/// reaches it, by the `advance` or `fill_mask` that does, with the limit's error; built at
/// compile, the same schema is refused by the compile.
#[test]
fn a_deferred_pattern_past_the_limits_is_refused_where_it_is_reached() {
    let schema = json!({
        "type": "object",
        "properties": {"home": {"type": "string", "pattern": URL_250.replace("250", "249")}}
    });
    let limits = Limits::DEFAULT.with_max_terminal_states(1000);
    let opts = JsonOptions::default().with_limits(limits);
    let past = |e: &Error| {
        matches!(
            e,
            Error::LimitExceeded {
                limit: crate::Limit::TerminalStates,
                ..
            }
        )
    };
    let g = compile_json_schema(&schema, &opts).expect("compiles, the pattern left for later");
    let vocab = byte_vocab();
    let mut c = GrammarConstraint::new(g.clone(), &vocab);
    let mut mask = vocab.empty_mask();
    let text = br#"{"home":"h"#;
    let mut refused = None;
    for (i, &b) in text.iter().enumerate() {
        let r = c.fill_mask(&mut mask).and_then(|()| c.advance(b as u32));
        if let Err(e) = r {
            assert!(past(&e), "{e}");
            refused = Some(i);
            break;
        }
    }
    assert_eq!(
        refused,
        Some(text.len() - 3),
        "refused on reading the value's `:`"
    );
    let eager = compile_json_schema(&schema, &opts.with_defer_large_patterns(false));
    assert!(matches!(&eager, Err(e) if past(e)), "{eager:?}");
}
