//! `uniqueItems` over objects closed by `additionalProperties: false` (issue #17): arrays are
//! accepted exactly when their items differ as JSON values (keys in any order, numbers by
//! value, strings decoded), masks agree with `advance` at every step, and a prefix whose every
//! completion is an earlier item is masked out, however the members are ordered.

mod common;

use std::sync::Arc;

use common::{
    assert_distinct, assert_rollback_restores, bit, check_mask, preferred_tokens, random_walk,
    same, walk_accepting, walk_refuses,
};
use nextok_constraints::{
    compile_json_schema, from_json_schema, Constraint, Error, JsonOptions, TokenVocab,
};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::SeedableRng;
use serde_json::{json, Value};

fn accepts(schema: &Value, text: &str) -> bool {
    compile_json_schema(schema, &JsonOptions::default())
        .expect("compiles")
        .recognizes(text.as_bytes())
}

fn array_of(items: Value) -> Value {
    json!({"type": "array", "items": items, "uniqueItems": true})
}

/// A closed object over one boolean field `a` (required when `required`).
fn one_boolean(required: bool) -> Value {
    let mut o = json!({"type": "object", "additionalProperties": false,
                       "properties": {"a": {"type": "boolean"}}});
    if required {
        o["required"] = json!(["a"]);
    }
    array_of(o)
}

/// SARIF's `hash` in small: a free string and an enum, both required.
fn hashes() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "required": ["value", "algorithm"],
                    "properties": {"value": {"type": "string"},
                                   "algorithm": {"enum": ["x", "y"]}}}))
}

/// Every property optional: a free string, a number enum and a boolean.
fn mixed() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {"s": {"type": "string"},
                                   "n": {"enum": [1, 2]},
                                   "b": {"type": "boolean"}}}))
}

/// A random walk of up to `steps` tokens over `schema` (seeded `seed`, preferring the tokens
/// of `preferred` but for one in `odds`): every mask bit is checked against `advance`, a
/// finished array must hold distinct items, and rolling back restores the masks. Whether the
/// walk finished.
fn checked_walk(
    vocab: &Arc<TokenVocab>,
    schema: &Value,
    preferred: &[u32],
    seed: u64,
    odds: u32,
    steps: usize,
) -> bool {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut c = from_json_schema(schema, vocab, &JsonOptions::default()).unwrap();
    let walk = random_walk(&mut c, &mut rng, preferred, odds, steps);
    if walk.ended {
        let v: Vec<Value> = serde_json::from_slice(&walk.out).expect("JSON array");
        assert_distinct(&v, &walk.out);
    }
    assert_rollback_restores(&mut c, &walk, 4);
    walk.ended
}

#[test]
fn distinct_objects_accepted_equal_ones_refused() {
    let s = mixed();
    for ok in [
        "[]",
        "[{}]",
        r#"[{},{"s":""}]"#,
        r#"[{"s":"a"},{"s":"b"},{"s":"a","n":1}]"#,
        r#"[{"n":1},{"n":2},{"n":1,"b":true},{"b":true}]"#,
        r#"[{"s":"a","b":false},{"b":true,"s":"a"}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        "[{},{}]",
        r#"[{"s":"a"},{"s":"a"}]"#,
        // Keys in another order.
        r#"[{"s":"a","n":1},{"n":1,"s":"a"}]"#,
        r#"[{"s":"a","n":1,"b":true},{"b":true,"n":1,"s":"a"}]"#,
        // Numbers by value.
        r#"[{"n":1},{"n":1.0}]"#,
        r#"[{"n":2},{"n":2.0}]"#,
        // Strings decoded.
        r#"[{"s":"\n"},{"s":"\u000a"}]"#,
        r#"[{"s":"/"},{"s":"\/"}]"#,
        // Not the schema's: an unknown key, a value outside the enum.
        r#"[{"t":"a"}]"#,
        r#"[{"n":3}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
}

#[test]
fn a_boolean_field_used_up_masks_out_the_next_item() {
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    // Required: two objects in all; after both, no third item may start.
    let mut c = from_json_schema(&one_boolean(true), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"a":true},{"a":false}"#);
    assert!(!bit(&mask, id(",")));
    assert!(!bit(&mask, id("},{")));
    assert!(bit(&mask, id("]")));
    // After one, the second item may only be the other value.
    let mut c = from_json_schema(&one_boolean(true), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"a":true},{"a":"#);
    assert!(!bit(&mask, id("true")));
    assert!(!bit(&mask, id("t")));
    assert!(bit(&mask, id("false")));
    // Optional: `{}` is the third object, and then nothing else.
    let mut c = from_json_schema(&one_boolean(false), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"a":true},{"a":false},{"#);
    assert!(bit(&mask, id("}")));
    assert!(!bit(&mask, id("\"")));
    assert!(!bit(&mask, id("{\"")));
    let mask = walk_accepting(&mut c, "}");
    assert!(!bit(&mask, id(",")));
    assert!(bit(&mask, id("]")));
    assert!(walk_refuses(
        &mut from_json_schema(&one_boolean(false), &vocab, &JsonOptions::default()).unwrap(),
        r#"[{},{"a":true},{"a":false},{"#
    ));
}

#[test]
fn a_string_closing_on_a_used_up_prefix_is_masked_out() {
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    let used = r#"[{"value":"h","algorithm":"x"},{"algorithm":"y","value":"h"},"#;
    // `{"value":"h"` has two completions, both used: its closing quote is refused.
    let mut c = from_json_schema(&hashes(), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"value":"h"#));
    assert!(!bit(&mask, id("\"")));
    assert!(!bit(&mask, id("\",")));
    assert!(bit(&mask, id("a")));
    assert!(bit(&mask, id("\\")));
    // The same in the other order: both values of the enum are used with "h".
    let mut c = from_json_schema(&hashes(), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"algorithm":"y","value":"h"#));
    assert!(!bit(&mask, id("\"")));
    assert!(!bit(&mask, id("\"}")));
    // With another value the prefix is alive.
    let mut c = from_json_schema(&hashes(), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"value":"hh"#));
    assert!(bit(&mask, id("\",")));
    // The same string spelled otherwise is the same value: `/` and `\/`.
    let used = r#"[{"value":"/","algorithm":"x"},{"algorithm":"y","value":"\/"},"#;
    assert!(walk_refuses(
        &mut from_json_schema(&hashes(), &vocab, &JsonOptions::default()).unwrap(),
        &format!(r#"{used}{{"value":"/""#)
    ));
    assert!(walk_refuses(
        &mut from_json_schema(&hashes(), &vocab, &JsonOptions::default()).unwrap(),
        &format!(r#"{used}{{"algorithm":"x","value":"\/""#)
    ));
    // After `"h"` with one algorithm left, only that one may be written.
    let mut c = from_json_schema(&hashes(), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(
        &mut c,
        r#"[{"value":"h","algorithm":"x"},{"value":"h","algorithm":"#,
    );
    assert!(bit(&mask, id("\"")));
    let mask = walk_accepting(&mut c, "\"");
    assert!(bit(&mask, id("y")));
    assert!(!bit(&mask, id("x")));
}

/// An integer and a boolean, both required.
fn counted() -> Value {
    array_of(
        json!({"type": "object", "additionalProperties": false, "required": ["n", "b"],
                    "properties": {"n": {"type": "integer"}, "b": {"type": "boolean"}}}),
    )
}

#[test]
fn integers_are_checked_before_their_fraction() {
    let s = counted();
    assert!(accepts(
        &s,
        r#"[{"n":1,"b":true},{"n":1.0,"b":false},{"b":true,"n":-0}]"#
    ));
    assert!(!accepts(&s, r#"[{"n":1,"b":true},{"b":true,"n":1.00}]"#));
    assert!(!accepts(&s, r#"[{"n":0,"b":true},{"b":true,"n":-0}]"#));
    assert!(!accepts(&s, r#"[{"n":1.5,"b":true}]"#));
    // Bounds hold for the digits and for the spellings with zeros alike.
    let bounded = |n: Value| {
        array_of(json!({"type": "object", "additionalProperties": false,
                        "properties": {"n": n}}))
    };
    let above = bounded(json!({"type": "integer", "minimum": 1}));
    assert!(accepts(&above, r#"[{"n":1.0},{"n":5},{"n":50},{}]"#));
    for bad in [r#"[{"n":0.0}]"#, r#"[{"n":0}]"#, r#"[{"n":5},{"n":5.0}]"#] {
        assert!(!accepts(&above, bad), "{bad}");
    }
    // Below a maximum every proper prefix (`-`, `-1`, ...) still has infinitely many.
    let below = bounded(json!({"type": "integer", "maximum": 5}));
    assert!(accepts(&below, r#"[{"n":5.0},{"n":-7},{"n":-0}]"#));
    for bad in [r#"[{"n":6}]"#, r#"[{"n":50}]"#, r#"[{"n":-0},{"n":0.0}]"#] {
        assert!(!accepts(&below, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    let used = r#"[{"n":0,"b":true},{"b":false,"n":0},{"n":1,"b":true},{"n":1,"b":false},"#;
    // `0` has one value and both objects with it are used: it cannot even begin.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"n":"#));
    assert!(!bit(&mask, id("0")));
    assert!(bit(&mask, id("1")));
    assert!(bit(&mask, id("-")));
    // `1` may go on to `10`, but neither end nor take `.0`.
    let mask = walk_accepting(&mut c, "1");
    assert!(bit(&mask, id("0")));
    assert!(!bit(&mask, id(".")));
    assert!(!bit(&mask, id(",")));
    // The other order: after `"b":true`, `1` is used and `1.` is refused.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"b":true,"n":1"#));
    assert!(!bit(&mask, id(".")));
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id("2")));
}

/// A GUID in small: a required string of exactly two characters from `a`, `b` (four values,
/// and after one character two completions), with an optional number enum when `with_n`
/// (required when `n_required`).
fn pairs(with_n: bool, n_required: bool) -> Value {
    let mut o = json!({"type": "object", "additionalProperties": false, "required": ["g"],
                       "properties": {"g": {"type": "string", "pattern": "^[ab]{2}$"}}});
    if with_n {
        o["properties"]["n"] = json!({"enum": [1, 2]});
        if n_required {
            o["required"] = json!(["g", "n"]);
        }
    }
    array_of(o)
}

#[test]
fn a_string_of_finite_completions_is_accepted_when_the_objects_differ() {
    let s = pairs(false, false);
    for ok in [
        r#"[{"g":"aa"},{"g":"ab"}]"#,
        r#"[{"g":"aa"},{"g":"ab"},{"g":"ba"},{"g":"bb"}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"g":"aa"},{"g":"aa"}]"#,
        r#"[{"g":"ab"},{"g":"aa"},{"g":"ab"}]"#,
        // A fifth object: the four values are used.
        r#"[{"g":"aa"},{"g":"ab"},{"g":"ba"},{"g":"bb"},{"g":"aa"}]"#,
        // Not the pattern's.
        r#"[{"g":"abc"}]"#,
        r#"[{"g":"a"}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let s = pairs(true, true);
    assert!(accepts(
        &s,
        r#"[{"g":"aa","n":1},{"n":2,"g":"aa"},{"g":"ab","n":1}]"#
    ));
    assert!(!accepts(&s, r#"[{"g":"aa","n":1},{"n":1,"g":"aa"}]"#));
}

#[test]
fn a_string_prefix_whose_completions_are_used_up_is_masked_out() {
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    let new = |schema: &Value| from_json_schema(schema, &vocab, &JsonOptions::default()).unwrap();
    // "aa" and "ab" used: a third item may not begin with `a`.
    let mut c = new(&pairs(false, false));
    let mask = walk_accepting(&mut c, r#"[{"g":"aa"},{"g":"ab"},{"g":""#);
    assert!(!bit(&mask, id("a")));
    assert!(bit(&mask, id("b")));
    assert!(walk_refuses(
        &mut new(&pairs(false, false)),
        r#"[{"g":"aa"},{"g":"ab"},{"g":"a"#
    ));
    // The last character: after "b", only the unused one.
    let mut c = new(&pairs(false, false));
    let mask = walk_accepting(&mut c, r#"[{"g":"aa"},{"g":"ba"},{"g":"b"#);
    assert!(!bit(&mask, id("a")));
    assert!(bit(&mask, id("b")));
    // All four used: no further item may start.
    let mut c = new(&pairs(false, false));
    let mask = walk_accepting(&mut c, r#"[{"g":"aa"},{"g":"ab"},{"g":"ba"},{"g":"bb"}"#);
    assert!(!bit(&mask, id(",")));
    assert!(!bit(&mask, id("},{")));
    assert!(bit(&mask, id("]")));
    // With a required enum beside it, a value of `g` is used up when both numbers are.
    let used = r#"[{"g":"aa","n":1},{"n":2,"g":"aa"},"#;
    let mut c = new(&pairs(true, true));
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"g":"a"#));
    assert!(!bit(&mask, id("a")));
    assert!(bit(&mask, id("b")));
    // The number first: "aa" is used with it, "ab" is not.
    let mut c = new(&pairs(true, true));
    let mask = walk_accepting(&mut c, r#"[{"g":"aa","n":1},{"n":1,"g":"a"#);
    assert!(!bit(&mask, id("a")));
    assert!(bit(&mask, id("b")));
    // Optional `n`: three objects per value of `g`, two used, so `a` stays open.
    let mut c = new(&pairs(true, false));
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"g":"a"#));
    assert!(bit(&mask, id("a")));
}

/// A GUID's pattern, as SARIF writes it.
const GUID: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-5][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$";

/// SARIF's `reportingDescriptor` in small: a required GUID and a `uniqueItems` array of them.
fn descriptors() -> Value {
    let guid = json!({"type": "string", "pattern": GUID});
    array_of(
        json!({"type": "object", "additionalProperties": false, "required": ["guid"],
                    "properties": {"guid": guid,
                                   "deprecatedGuids": {"type": "array", "uniqueItems": true,
                                                       "items": guid}}}),
    )
}

#[test]
fn guids_and_unique_arrays_of_them_compile_and_compare_as_json() {
    let s = descriptors();
    let g1 = "01234567-89ab-4def-8123-456789abcdef";
    let g2 = "01234567-89ab-4def-8123-456789abcdee";
    let upper = "01234567-89AB-4DEF-8123-456789ABCDEF";
    for ok in [
        format!(r#"[{{"guid":"{g1}"}},{{"guid":"{g2}"}}]"#),
        // Another spelling of the hex digits is another string.
        format!(r#"[{{"guid":"{g1}"}},{{"guid":"{upper}"}}]"#),
        format!(r#"[{{"guid":"{g1}"}},{{"guid":"{g1}","deprecatedGuids":[]}}]"#),
        // Arrays are ordered.
        format!(
            r#"[{{"guid":"{g1}","deprecatedGuids":["{g1}","{g2}"]}},{{"deprecatedGuids":["{g2}","{g1}"],"guid":"{g1}"}}]"#
        ),
    ] {
        assert!(accepts(&s, &ok), "{ok}");
    }
    for bad in [
        format!(r#"[{{"guid":"{g1}"}},{{"guid":"{g1}"}}]"#),
        format!(r#"[{{"guid":"{g1}"}},{{"guid":"{g2}"}},{{"guid":"{g1}"}}]"#),
        format!(
            r#"[{{"guid":"{g1}","deprecatedGuids":["{g2}"]}},{{"deprecatedGuids":["{g2}"],"guid":"{g1}"}}]"#
        ),
        // Escapes decode to the same string.
        format!(r#"[{{"guid":"{g1}"}},{{"guid":"\u0030{}"}}]"#, &g1[1..]),
        // Repeated inside the inner array.
        format!(r#"[{{"guid":"{g1}","deprecatedGuids":["{g2}","{g2}"]}}]"#),
        // Not a GUID (the version digit is 0).
        r#"[{"guid":"01234567-89ab-0def-8123-456789abcdef"}]"#.to_string(),
    ] {
        assert!(!accepts(&s, &bad), "{bad}");
    }
}

/// With SmolLM2's vocabulary (multi-byte tokens that cross quotes, keys and items), walks over
/// strings of finitely many completions keep every mask equal to `advance` and end unique.
#[test]
fn random_walks_over_the_real_vocabulary_have_exact_masks() {
    let (vocab, _) = common::smollm2();
    let schemas = [
        pairs(true, true),
        pairs(false, false),
        array_of(json!({"type": "object", "additionalProperties": false,
                        "properties": {"s": {"type": "string", "pattern": "^(a|ab?)$"},
                                       "b": {"type": "boolean"}}})),
        descriptors(),
    ];
    // Single bytes of the items (no `]`, so that arrays grow and items repeat); one token in 6
    // is any allowed one.
    let preferred = preferred_tokens(&vocab, b"ab12\",[{}:gsn0-", false);
    let mut finished = 0;
    for (i, schema) in schemas.iter().enumerate() {
        for seed in 0..5u64 {
            finished += usize::from(checked_walk(
                &vocab,
                schema,
                &preferred,
                seed * 31 + i as u64,
                6,
                80,
            ));
        }
    }
    assert!(finished >= 3, "only {finished} walks finished");
}

#[test]
fn closed_objects_with_a_property_of_finite_prefixes_are_refused_by_name() {
    let cases = [
        (
            array_of(json!({"type": "object", "additionalProperties": false,
                            "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 5}}})),
            "property `a`",
        ),
        (
            array_of(json!({"type": "object", "additionalProperties": false,
                            "properties": {"a": {"type": "string"},
                                           "o": {"type": "object", "additionalProperties": false,
                                                 "properties": {"b": {"type": "integer",
                                                                      "maximum": 5,
                                                                      "minimum": 0}}}}})),
            // The nested closed object's own property.
            "property `b`",
        ),
        // A string of finitely many completions beside another type.
        (
            array_of(json!({"type": "object", "additionalProperties": false,
                            "properties": {"a": {"type": ["string", "null"],
                                                 "pattern": "^[ab]{2}$"}}})),
            "property `a`",
        ),
        // A unique array of strings of few values: it runs out of items.
        (
            array_of(json!({"type": "object", "additionalProperties": false,
                            "properties": {"a": {"type": "array", "uniqueItems": true,
                                                 "items": {"type": "string",
                                                           "pattern": "^[ab]{2}$"}}}})),
            "property `a`",
        ),
        // Four objects in all, five asked for.
        (
            json!({"type": "array", "uniqueItems": true, "minItems": 5,
                   "items": {"type": "object", "additionalProperties": false,
                             "required": ["g"],
                             "properties": {"g": {"type": "string", "pattern": "^[ab]{2}$"}}}}),
            "minItems",
        ),
        (
            json!({"type": "array", "uniqueItems": true, "minItems": 3,
                   "items": {"type": "object", "additionalProperties": false,
                             "properties": {"a": {"type": "boolean"}}}}),
            "minItems",
        ),
    ];
    for (schema, why) in cases {
        match compile_json_schema(&schema, &JsonOptions::default()) {
            Err(Error::UnsupportedKeyword { keyword, path }) => {
                assert!(keyword.starts_with("uniqueItems ("), "{keyword}");
                assert!(keyword.contains(why), "{keyword} should say {why}");
                assert_eq!(path, "#");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// cargo-make's `env_files` in small: a path string, or a closed object of a required path
/// and an optional profile.
fn paths_or_files() -> Value {
    array_of(json!({"oneOf": [
        {"type": "string"},
        {"type": "object", "additionalProperties": false, "required": ["path"],
         "properties": {"path": {"type": "string"}, "profile": {"type": "string"}}}]}))
}

/// Integers, or a closed object of one required boolean: two objects in all.
fn integers_or_flags() -> Value {
    array_of(json!({"anyOf": [
        {"type": "integer"},
        {"type": "object", "additionalProperties": false, "required": ["a"],
         "properties": {"a": {"type": "boolean"}}}]}))
}

#[test]
fn closed_objects_beside_other_item_types_compare_as_json() {
    let s = paths_or_files();
    for ok in [
        r#"["a",{"path":"a"}]"#,
        r#"[{"path":"a"},{"path":"a","profile":"x"},"a"]"#,
        r#"[{"path":"a","profile":"x"},{"profile":"a","path":"x"}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"["a","a"]"#,
        r#"[{"path":"a"},"b",{"path":"a"}]"#,
        r#"[{"path":"a","profile":"x"},"b",{"profile":"x","path":"a"}]"#,
        r#"[{"path":"\/"},{"path":"/"}]"#,
        r#"[{"profile":"x"}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let t = integers_or_flags();
    for ok in [r#"[1,{"a":true},{"a":false},2]"#, r#"[{"a":true},1.0,2]"#] {
        assert!(accepts(&t, ok), "{ok}");
    }
    for bad in [
        r#"[{"a":true},1,{"a":true}]"#,
        "[1,1.0]",
        r#"[{"a":false},{"a":false}]"#,
    ] {
        assert!(!accepts(&t, bad), "{bad}");
    }
}

#[test]
fn a_closed_object_used_up_beside_other_items_is_masked_out() {
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    // The closing quote would make the object an earlier item: refused, with a string item
    // between them read past.
    let mut c = from_json_schema(&paths_or_files(), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(
        &mut c,
        r#"[{"path":"a","profile":"x"},"s",{"profile":"x","path":"a"#,
    );
    assert!(!bit(&mask, id("\"")));
    assert!(bit(&mask, id("a")));
    // Both objects used: another item may be an integer, never an object.
    let mut c = from_json_schema(&integers_or_flags(), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"a":true},7,{"a":false},"#);
    assert!(!bit(&mask, id("{")));
    assert!(bit(&mask, id("1")));
    let mask = walk_accepting(&mut c, "7");
    assert!(!bit(&mask, id("]")));
    assert!(bit(&mask, id("0")));
    // One object left: after `{"a":` only its value.
    let mut c = from_json_schema(&integers_or_flags(), &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[3,{"a":false},{"a":"#);
    assert!(bit(&mask, id("t")));
    assert!(!bit(&mask, id("f")));
}

#[test]
fn closed_objects_beside_item_types_of_finitely_many_values_or_other_objects_are_refused() {
    let cases = [
        // Booleans and three objects: the `,` before another item would need a check.
        (
            json!({"anyOf": [
                {"type": "boolean"},
                {"type": "object", "additionalProperties": false,
                 "properties": {"a": {"type": "boolean"}}}]}),
            "beside other item types",
        ),
        // Open objects too: `{"a":true,"b":"x"}` is no completion of `{"a":true`, but the
        // closed objects' checks would count it as one.
        (
            json!({"anyOf": [
                {"type": "object", "properties": {"b": {"type": "string"}}},
                {"type": "object", "additionalProperties": false,
                 "properties": {"a": {"type": "boolean"}}}]}),
            "objects without additional properties",
        ),
    ];
    for (items, why) in cases {
        match compile_json_schema(&array_of(items), &JsonOptions::default()) {
            Err(Error::UnsupportedKeyword { keyword, path }) => {
                assert!(keyword.contains(why), "{keyword} should say {why}");
                assert_eq!(path, "#");
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}

/// package.manifest's `dashboards` in small: closed objects whose `access` is a unique array
/// of open objects naming exactly one of `deny` and `grant`, and whose `rule` is such an
/// object itself.
fn dashboards() -> Value {
    let grant = json!({"type": "object",
                       "properties": {"deny": {"type": "string"}, "grant": {"type": "string"}},
                       "oneOf": [{"required": ["deny"]}, {"required": ["grant"]}]});
    array_of(
        json!({"type": "object", "additionalProperties": false, "required": ["alias"],
                    "properties": {"alias": {"type": "string"},
                                   "access": {"type": "array", "uniqueItems": true,
                                              "items": grant},
                                   "rule": grant}}),
    )
}

#[test]
fn open_objects_whose_one_of_is_required_alone_are_unbounded_at_every_prefix() {
    let s = dashboards();
    for ok in [
        r#"[{"alias":"a","access":[{"deny":"x"},{"grant":"x"}]},{"alias":"a"}]"#,
        r#"[{"alias":"a","rule":{"deny":"x"}},{"alias":"a","rule":{"deny":"x","z":1}}]"#,
        r#"[{"alias":"a","access":[{"deny":"x"}]},{"access":[{"deny":"x","n":null}],"alias":"a"}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        // Equal items, members in another order.
        r#"[{"alias":"a","rule":{"deny":"x","z":1}},{"rule":{"z":1.0,"deny":"x"},"alias":"a"}]"#,
        // Equal items of the inner unique array.
        r#"[{"alias":"a","access":[{"deny":"x"},{"deny":"x"}]}]"#,
        // Both or neither of `deny` and `grant`.
        r#"[{"alias":"a","rule":{"deny":"x","grant":"y"}}]"#,
        r#"[{"alias":"a","access":[{}]}]"#,
        r#"[{"alias":"a","rule":{"z":1}}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    // A `oneOf` branch that says more than `required` may bound the object: still refused.
    let schema = array_of(json!({"type": "object", "additionalProperties": false,
        "properties": {"alias": {"type": "string"},
                       "rule": {"type": "object",
                                "oneOf": [{"required": ["deny"]}, {"maxProperties": 1}]}}}));
    match compile_json_schema(&schema, &JsonOptions::default()) {
        Err(Error::UnsupportedKeyword { keyword, .. }) => {
            assert!(keyword.contains("property `rule`"), "{keyword}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn random_walks_over_open_objects_of_required_branches_have_exact_masks() {
    let vocab = common::byte_vocab(&[
        "{\"alias\":\"",
        "\"deny\":\"",
        "\"grant\":\"",
        "\",\"rule\":{",
        "\",\"access\":[{",
        "\"},{",
        "\"}]",
        "\"}}",
        "}},{",
        "x\"",
    ]);
    let preferred = preferred_tokens(&vocab, b"x\",[]{}:adegnrt", true);
    let finished = (0..12u64)
        .filter(|seed| checked_walk(&vocab, &dashboards(), &preferred, seed * 31 + 7, 8, 80))
        .count();
    assert!(finished >= 2, "only {finished} walks finished");
}

/// Requests in the manner of anywork-ac's actions: closed objects told apart by a `type`
/// constant, with free strings, a number and a nested closed object. An item's earlier items
/// of the other branch are read past, so where its own branch has none its guards compare no
/// values.
fn requests() -> Value {
    array_of(json!({"anyOf": [
        {"type": "object", "additionalProperties": false, "required": ["type", "url"],
         "properties": {"type": {"const": "get"}, "url": {"type": "string"},
                        "id": {"type": "number"}}},
        {"type": "object", "additionalProperties": false, "required": ["type", "token"],
         "properties": {"type": {"const": "put"}, "token": {"type": "string"},
                        "m": {"type": "object", "additionalProperties": false,
                              "required": ["b"],
                              "properties": {"a": {"type": "string"},
                                             "b": {"type": "boolean"}}}}}]}))
}

/// Masks inside a free string of an item object, where the string may end within a token:
/// whether the item is alive there does not depend on which string it is when the count of
/// its completions decides, and the places after the string are read with each token's bytes
/// in place of the unknown one (no earlier item of its branch, or one to compare with). Every
/// mask along each text is checked against `advance`, byte by byte, with tokens that cross
/// the closing quote (`"}`, `",`, `",\"`, `"}]`).
#[test]
fn masks_inside_item_strings_are_exact_where_the_string_may_end() {
    let vocab = common::synthetic_vocab();
    for text in [
        // No earlier item of the branch: nothing to compare.
        r#"[{"type":"get","url":"ab"},{"type":"put","token":"abc","m":{"a":"ba","b":true}},"#,
        r#"[{"token":"a","type":"put"},{"m":{"b":false,"a":"aa"},"token":"a","type":"put"}]"#,
        // Earlier items of the branch: equal prefixes, then different values.
        r#"[{"type":"get","url":"ab","id":12},{"url":"ab","type":"get"},{"id":0.5,"url":"ab","#,
        r#"[{"type":"put","token":"ab","m":{"b":true,"a":"x"}},{"type":"put","token":"ab","m":{"a":"y","b":true}}]"#,
    ] {
        let mut c = from_json_schema(&requests(), &vocab, &JsonOptions::default()).unwrap();
        walk_accepting(&mut c, text);
    }
    // Refused where the string ends: the same item again (at its closing quote), a nested
    // object without its required key (`"}` closes it), an item without one (`"}]`).
    for bad in [
        r#"[{"type":"put","token":"ab"},{"type":"put","token":"ab"}]"#,
        r#"[{"type":"put","token":"ab","m":{"a":"x"}}]"#,
        r#"[{"type":"get","id":1},{"type":"put","m":{"b":true}}]"#,
    ] {
        let mut c = from_json_schema(&requests(), &vocab, &JsonOptions::default()).unwrap();
        assert!(walk_refuses(&mut c, bad), "{bad}");
    }
}

/// [`masks_inside_item_strings_are_exact_where_the_string_may_end`] over SmolLM2's vocabulary
/// (tokens of letters, quotes and separators together), along random walks.
#[test]
fn random_walks_over_item_strings_of_the_real_vocabulary_have_exact_masks() {
    let (vocab, _) = common::smollm2();
    let preferred = preferred_tokens(&vocab, b"abgtpu\",:[{}]", false);
    let finished = (0..6u64)
        .filter(|seed| checked_walk(&vocab, &requests(), &preferred, seed * 17 + 3, 6, 80))
        .count();
    assert!(finished >= 2, "only {finished} walks finished");
}

/// Single bytes, then pieces that cross member, value and item boundaries.
fn object_vocab() -> Arc<TokenVocab> {
    common::byte_vocab(&[
        "{\"s\":\"",
        "\"}",
        "\",",
        "\"s\":\"a\"",
        "{\"n\":",
        "\"n\":1",
        "1}",
        "1,",
        "2}",
        "},{",
        "}]",
        "{}",
        "{\"b\":",
        "true}",
        "false",
        "true,",
        ",\"b\":true}",
        "\"a\"}",
        "1.0",
        "\"a",
        "a\"",
        "\\/",
        "\\u000a\"",
    ])
}

/// Random walks of up to `steps` tokens over each of `schemas` with [`object_vocab`]
/// (`seeds` walks each, walk `seed` of schema `i` seeded `seed * mul + offset + i`), preferring
/// the tokens of `preferred`: every mask bit is checked against `advance`, every finished array
/// holds distinct items, and rolling back restores the masks. The number of walks that ended.
fn walks_finished(
    schemas: &[Value],
    preferred: &[u8],
    seeds: u64,
    mul: u64,
    offset: u64,
    steps: usize,
) -> usize {
    let vocab = object_vocab();
    let preferred = preferred_tokens(&vocab, preferred, true);
    let mut finished = 0;
    for (i, schema) in schemas.iter().enumerate() {
        for seed in 0..seeds {
            let seed = seed * mul + offset + i as u64;
            finished += usize::from(checked_walk(&vocab, schema, &preferred, seed, 8, steps));
        }
    }
    finished
}

#[test]
fn random_walks_have_exact_masks_and_end_unique() {
    let schemas = [
        mixed(),
        one_boolean(false),
        hashes(),
        counted(),
        array_of(
            json!({"type": "object", "additionalProperties": false, "required": ["n"],
                        "properties": {"n": {"type": "integer", "maximum": 2},
                                       "b": {"type": "boolean"}}}),
        ),
        // Strings of finitely many completions (two characters), beside an enum.
        array_of(
            json!({"type": "object", "additionalProperties": false, "required": ["s"],
                        "properties": {"s": {"type": "string", "pattern": "^[ab]{2}$"},
                                       "n": {"enum": [1, 2]}}}),
        ),
        array_of(json!({"type": "object", "additionalProperties": false,
                        "properties": {"s": {"type": "string", "pattern": "^(a|ab?)$"},
                                       "b": {"type": "boolean"}}})),
        // Short strings from a small alphabet, so that finite prefixes come often.
        array_of(
            json!({"type": "object", "additionalProperties": false, "required": ["n"],
                        "properties": {"s": {"type": "string", "pattern": "^a*$"},
                                       "n": {"enum": [1, 2]}, "b": {"type": "boolean"}}}),
        ),
        // `null` set apart beside unbounded strings (travis's `template`).
        templates(),
        // Closed objects of finitely many values beside integers and strings.
        array_of(json!({"anyOf": [
            {"type": "integer"},
            {"type": "string", "pattern": "^a*$"},
            {"type": "object", "additionalProperties": false,
             "properties": {"n": {"enum": [1, 2]}, "b": {"type": "boolean"}}}]})),
    ];
    // Tokens the walk prefers, so that items repeat often.
    let finished = walks_finished(&schemas, b"a12\",[]{}:tfxyhnsbvlgorm", 10, 29, 0, 60);
    assert!(finished >= 10, "only {finished} walks finished");
}

/// Spellings of items of `mixed()`, each with the class of the JSON value it is.
const POOL: &[(&str, u8)] = &[
    ("{}", 0),
    (r#"{"s":"a"}"#, 1),
    (r#"{"s":"\/"}"#, 7),
    (r#"{"s":"/"}"#, 7),
    (r#"{"n":1}"#, 2),
    (r#"{"n":1.0}"#, 2),
    (r#"{"n":1,"s":"a"}"#, 3),
    (r#"{"s":"a","n":1.00}"#, 3),
    (r#"{"b":true,"n":2}"#, 4),
    (r#"{"n":2,"b":true}"#, 4),
    (r#"{"b":false}"#, 5),
    (r#"{"s":"a","n":2,"b":false}"#, 6),
    (r#"{"b":false,"s":"a","n":2}"#, 6),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Random arrays of items in random spellings, so that equal objects written apart are
    /// common: accepted exactly when the objects are distinct, and byte by byte the masks
    /// agree with `advance` and never leave a dead end.
    #[test]
    fn accepted_iff_objects_distinct(picks in proptest::collection::vec(0..POOL.len(), 0..6)) {
        let text = format!(
            "[{}]",
            picks.iter().map(|&i| POOL[i].0).collect::<Vec<_>>().join(",")
        );
        let mut classes: Vec<u8> = picks.iter().map(|&i| POOL[i].1).collect();
        classes.sort_unstable();
        classes.dedup();
        let unique = classes.len() == picks.len();
        prop_assert_eq!(accepts(&mixed(), &text), unique, "{}", text);
        let vocab = common::synthetic_vocab();
        let mut c = from_json_schema(&mixed(), &vocab, &JsonOptions::default()).unwrap();
        prop_assert_eq!(walk_refuses(&mut c, &text), !unique, "{}", text);
    }
}

/// SARIF's `result` in small: a free string `id`, and a closed `formattedRuleMessage` of a
/// required free string and an array of strings (a nested closed object whose members are
/// all written once `formatId` and `arguments` are: one completion left).
fn results() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {
                        "id": {"type": "string"},
                        "message": {"type": "object", "additionalProperties": false,
                                    "required": ["formatId"],
                                    "properties": {
                                        "formatId": {"type": "string"},
                                        "arguments": {"type": "array",
                                                      "items": {"type": "string"}}}}}}))
}

#[test]
fn nested_closed_objects_compare_as_json() {
    let s = results();
    for ok in [
        r#"[{"message":{"formatId":"f"}},{"message":{"formatId":"g"}}]"#,
        r#"[{"id":"a","message":{"formatId":"f"}},{"message":{"formatId":"f"}}]"#,
        r#"[{"message":{"formatId":"f"}},{"message":{"formatId":"f","arguments":[]}}]"#,
        r#"[{"message":{"formatId":"f","arguments":["x"]}},{"message":{"arguments":["x","x"],"formatId":"f"}}]"#,
        r#"[{},{"id":"a"},{"message":{"formatId":""}}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"message":{"formatId":"f"}},{"message":{"formatId":"f"}}]"#,
        // Keys in another order, outside and inside.
        r#"[{"id":"a","message":{"formatId":"f","arguments":["x"]}},{"message":{"arguments":["x"],"formatId":"f"},"id":"a"}]"#,
        // Strings decoded.
        r#"[{"message":{"formatId":"\/"}},{"message":{"formatId":"/"}}]"#,
        // Not the schema's: the nested object lacks its required key, or has another.
        r#"[{"message":{}}]"#,
        r#"[{"message":{"formatId":"f","id":"a"}}]"#,
        r#"[{"message":{"formatId":"f"},"formatId":"f"}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
}

#[test]
fn a_nested_object_closing_on_a_used_item_is_masked_out() {
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    let new = || from_json_schema(&results(), &vocab, &JsonOptions::default()).unwrap();
    let used = r#"[{"id":"a","message":{"formatId":"f","arguments":[]}},"#;
    // Every key but the array written: `]` would leave one completion, the used item.
    let mut c = new();
    let mask = walk_accepting(
        &mut c,
        &format!(r#"{used}{{"id":"a","message":{{"formatId":"f","arguments":["#),
    );
    assert!(!bit(&mask, id("]")));
    assert!(bit(&mask, id("\"")));
    // The nested object's `}`: with `arguments` left out, the item is `{"id":"a",
    // "message":{"formatId":"f"}}`, used; `,` goes on to `arguments`.
    let used2 = r#"[{"id":"a","message":{"formatId":"f"}},"#;
    let mut c = new();
    let mask = walk_accepting(
        &mut c,
        &format!(r#"{used2}{{"id":"a","message":{{"formatId":"f""#),
    );
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    // The message first, `id` to come: infinitely many completions.
    let mut c = new();
    let mask = walk_accepting(
        &mut c,
        &format!(r#"{used}{{"message":{{"formatId":"f","arguments":[]"#),
    );
    assert!(bit(&mask, id("}")));
    // After `"id":"a"`, the message's `formatId` "f" cannot close once `arguments` is written
    // first: its one completion is used.
    let mut c = new();
    let mask = walk_accepting(
        &mut c,
        &format!(r#"{used}{{"id":"a","message":{{"arguments":[],"formatId":"f"#),
    );
    assert!(!bit(&mask, id("\"")));
    assert!(!bit(&mask, id("\"}")));
    assert!(bit(&mask, id("g")));
    assert!(walk_refuses(
        &mut new(),
        &format!(r#"{used}{{"message":{{"arguments":[],"formatId":"f"}},"id":"a"}}]"#)
    ));
}

/// A finite domain with a nested closed object: a required boolean `a` and an optional `m`
/// of a required boolean `b` and an optional enum `c` (2 × (1 + 2 × 3) = 14 objects).
fn nested_finite() -> Value {
    array_of(
        json!({"type": "object", "additionalProperties": false, "required": ["a"],
                    "properties": {
                        "a": {"type": "boolean"},
                        "m": {"type": "object", "additionalProperties": false,
                              "required": ["b"],
                              "properties": {"b": {"type": "boolean"},
                                             "c": {"enum": [1, 2]}}}}}),
    )
}

/// Every object of `nested_finite()`, each as the list of its compact spellings (every key
/// order, outside and inside).
fn nested_finite_objects() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for a in ["true", "false"] {
        let mut ms: Vec<Option<Vec<String>>> = vec![None];
        for b in ["true", "false"] {
            ms.push(Some(vec![format!(r#"{{"b":{b}}}"#)]));
            for c in ["1", "2"] {
                ms.push(Some(vec![
                    format!(r#"{{"b":{b},"c":{c}}}"#),
                    format!(r#"{{"c":{c},"b":{b}}}"#),
                ]));
            }
        }
        for m in ms {
            out.push(match m {
                None => vec![format!(r#"{{"a":{a}}}"#)],
                Some(inner) => inner
                    .iter()
                    .flat_map(|i| {
                        [
                            format!(r#"{{"a":{a},"m":{i}}}"#),
                            format!(r#"{{"m":{i},"a":{a}}}"#),
                        ]
                    })
                    .collect(),
            });
        }
    }
    out
}

/// Brute force over the 14 objects of `nested_finite()`: see [`assert_no_dead_end`].
#[test]
fn nested_objects_leave_no_dead_end() {
    assert_no_dead_end(&nested_finite(), &nested_finite_objects(), 17);
}

/// A required boolean `a` and an optional `e`, a `uniqueItems` array of `1` and `2`: 2 × (1 +
/// 5) = 12 objects, each as the list of its compact spellings.
fn finite_arrays() -> (Value, Vec<Vec<String>>) {
    let schema = array_of(json!({"type": "object", "additionalProperties": false,
                                 "required": ["a"],
                                 "properties": {
                                     "a": {"type": "boolean"},
                                     "e": {"type": "array", "uniqueItems": true,
                                           "items": {"enum": [1, 2]}}}}));
    let mut objects = Vec::new();
    for a in ["true", "false"] {
        objects.push(vec![format!(r#"{{"a":{a}}}"#)]);
        for e in ["[]", "[1]", "[2]", "[1,2]", "[2,1]"] {
            objects.push(vec![
                format!(r#"{{"a":{a},"e":{e}}}"#),
                format!(r#"{{"e":{e},"a":{a}}}"#),
            ]);
        }
    }
    (schema, objects)
}

/// Brute force over the 12 objects of `finite_arrays()`: see [`assert_no_dead_end`].
#[test]
fn arrays_of_finitely_many_values_leave_no_dead_end() {
    let (schema, objects) = finite_arrays();
    assert_no_dead_end(&schema, &objects, 23);
}

/// Brute force over a finite domain of closed objects (`objects`: every object of the items
/// of `schema`, each as the list of its compact spellings): after earlier items (random
/// spellings of random distinct objects, from none to all but one), every prefix of every spelling of
/// every object is taken exactly when some unused object has a spelling that begins with it,
/// and the mask after it holds exactly the bytes that keep it so (with `,` and `]` after a
/// whole unused item: `,` while another object is unused). No prefix the mask allows is a
/// dead end.
fn assert_no_dead_end(schema: &Value, objects: &[Vec<String>], seed: u64) {
    use rand_core::RngCore;
    let vocab = common::synthetic_vocab();
    let alphabet: Vec<u8> = {
        let mut a: Vec<u8> = objects
            .iter()
            .flatten()
            .flat_map(|s| s.bytes())
            .chain([b',', b']'])
            .collect();
        a.sort_unstable();
        a.dedup();
        a
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for round in 0..objects.len() {
        // `round` distinct objects, in a random order and spelling.
        let mut order: Vec<usize> = (0..objects.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.next_u32() as usize % (i + 1));
        }
        let used: Vec<usize> = order[..round].to_vec();
        let spelled: Vec<&str> = used
            .iter()
            .map(|&o| objects[o][rng.next_u32() as usize % objects[o].len()].as_str())
            .collect();
        let unused: Vec<usize> = (0..objects.len()).filter(|o| !used.contains(o)).collect();
        let head = if used.is_empty() {
            "[".to_string()
        } else {
            format!("[{},", spelled.join(","))
        };
        let mut c = from_json_schema(schema, &vocab, &JsonOptions::default()).unwrap();
        walk_accepting(&mut c, &head);
        let expected = |p: &str, b: u8| {
            let next = format!("{p}{}", b as char);
            let whole = |o: usize| objects[o].iter().any(|s| s == p);
            unused
                .iter()
                .any(|&o| objects[o].iter().any(|s| s.starts_with(&next)))
                || (b == b']' && unused.iter().any(|&o| whole(o)))
                || (b == b']' && p.is_empty() && used.is_empty())
                || (b == b',' && unused.len() > 1 && unused.iter().any(|&o| whole(o)))
        };
        for spellings in objects {
            for s in spellings {
                let mut taken = 0;
                for (i, b) in s.bytes().enumerate() {
                    let p = &s[..i];
                    let mask = check_mask(&mut c, format!("{head}{p}").as_bytes());
                    for &x in &alphabet {
                        assert_eq!(
                            bit(&mask, x as u32 + 1),
                            expected(p, x),
                            "{:?} after {head}{p}",
                            x as char
                        );
                    }
                    if !expected(p, b) {
                        break;
                    }
                    c.advance(b as u32 + 1).unwrap();
                    taken += 1;
                }
                if taken == s.len() {
                    let mask = check_mask(&mut c, format!("{head}{s}").as_bytes());
                    for &x in &alphabet {
                        assert_eq!(
                            bit(&mask, x as u32 + 1),
                            expected(s, x),
                            "{:?} after {head}{s}",
                            x as char
                        );
                    }
                }
                c.rollback(taken).unwrap();
            }
        }
    }
}

/// SARIF's `result` with its `locations`: a free string `id`, and a `uniqueItems` array of
/// closed objects of infinitely many values (a free string `uri`).
fn located() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {
                        "id": {"type": "string"},
                        "locations": array_of(json!({
                            "type": "object", "additionalProperties": false,
                            "properties": {"uri": {"type": "string"}}}))}}))
}

#[test]
fn unique_arrays_of_infinitely_many_closed_objects_are_unbounded_at_every_prefix() {
    let s = located();
    for ok in [
        r#"[{"locations":[]},{"locations":[{}]},{"locations":[{},{"uri":""}]}]"#,
        r#"[{"id":"a","locations":[{"uri":"x"}]},{"locations":[{"uri":"x"}],"id":"b"}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"locations":[]},{"locations":[]}]"#,
        r#"[{"id":"a","locations":[{"uri":"x"}]},{"locations":[{"uri":"x"}],"id":"a"}]"#,
        // Repeated inside the inner array.
        r#"[{"locations":[{"uri":"x"},{"uri":"x"}]}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    // `id` written, the array last: `]` would end the used item, `{` goes on.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(
        &mut c,
        r#"[{"id":"a","locations":[]},{"id":"a","locations":["#,
    );
    assert!(!bit(&mask, id("]")));
    assert!(bit(&mask, id("{")));
    // Inside the inner array's item, the outer item is new whatever follows.
    let mask = walk_accepting(&mut c, r#"{"uri":"x"}"#);
    assert!(bit(&mask, id("]")));
}

/// chrome-manifest's `tts_engine.voices` in small: a required free string and a required
/// `uniqueItems` array of an enum of two values (four arrays in all).
fn voices() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "required": ["name", "events"],
                    "properties": {
                        "name": {"type": "string"},
                        "events": {"type": "array", "minItems": 1, "uniqueItems": true,
                                   "items": {"type": "string", "enum": ["a", "b"]}}}}))
}

#[test]
fn arrays_of_finitely_many_values_are_a_finite_domain() {
    let s = voices();
    for ok in [
        r#"[{"name":"x","events":["a"]},{"name":"x","events":["b"]}]"#,
        r#"[{"name":"x","events":["a","b"]},{"events":["b","a"],"name":"x"}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"name":"x","events":["a"]},{"events":["a"],"name":"x"}]"#,
        r#"[{"name":"x","events":["a","a"]}]"#,
        r#"[{"name":"x","events":[]}]"#,
        r#"[{"name":"x","events":["c"]}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    // `["a"]` is used with "x": after `["a"`, only `,` goes on (to `["a","b"]`).
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(
        &mut c,
        r#"[{"name":"x","events":["a"]},{"name":"x","events":["a""#,
    );
    assert!(!bit(&mask, id("]")));
    assert!(bit(&mask, id(",")));
    // All four used with "x": `"x"` may not close when `events` is written first.
    let used = r#"[{"name":"x","events":["a"]},{"name":"x","events":["b"]},{"name":"x","events":["a","b"]},{"name":"x","events":["b","a"]},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"events":["b"],"name":"x"#));
    assert!(!bit(&mask, id("\"")));
    assert!(bit(&mask, id("y")));
}

/// A property of arrays of one value whose `minItems` and `maxItems` ask for millions of items
/// is one array, but too long to be spelled out as a finite domain: it is answered at once
/// (walking to the first array took time and memory quadratic in its length), refused by
/// name as a property of finitely many values of no other kind, and the same schema with a
/// short length compiles and takes exactly its one array.
#[test]
fn arrays_of_millions_of_items_are_not_spelled_out() {
    let with_length = |n: usize| {
        array_of(json!({"type": "object", "additionalProperties": false,
                        "required": ["name", "ones"],
                        "properties": {
                            "name": {"type": "string"},
                            "ones": {"type": "array", "items": {"const": 1},
                                     "minItems": n, "maxItems": n}}}))
    };
    let err = compile_json_schema(&with_length(3_000_000), &JsonOptions::default()).unwrap_err();
    let Error::UnsupportedKeyword { keyword, .. } = &err else {
        panic!("not refused by name: {err}");
    };
    assert!(
        keyword.contains("uniqueItems") && keyword.contains("`ones`"),
        "{keyword}"
    );
    let s = with_length(3);
    assert!(accepts(
        &s,
        r#"[{"name":"x","ones":[1,1,1]},{"name":"y","ones":[1,1,1]}]"#
    ));
    assert!(!accepts(
        &s,
        r#"[{"name":"x","ones":[1,1,1]},{"ones":[1,1,1],"name":"x"}]"#
    ));
    assert!(!accepts(&s, r#"[{"name":"x","ones":[1,1]}]"#));
}

/// expo's `intentFilters` in small: a free string `id`, and `data`: a closed object of one
/// required boolean (two objects) or an array of strings.
fn filters() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {
                        "id": {"type": "string"},
                        "data": {"anyOf": [
                            {"type": "object", "additionalProperties": false,
                             "required": ["b"], "properties": {"b": {"type": "boolean"}}},
                            {"type": "array", "items": {"type": "string"}}]}}}))
}

#[test]
fn a_nested_object_beside_unbounded_values_of_other_types_is_checked_at_its_brace() {
    let s = filters();
    for ok in [
        r#"[{"data":{"b":true}},{"data":{"b":false}},{"data":[]},{"data":["x"]}]"#,
        r#"[{"id":"a","data":{"b":true}},{"data":{"b":true}}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"data":{"b":true}},{"data":{"b":true}}]"#,
        r#"[{"data":["x"]},{"data":["x"]}]"#,
        r#"[{"data":{}}]"#,
        r#"[{"data":"x"}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    // Both objects used with `"id":"a"`: `{` may not begin, `[` may.
    let used = r#"[{"id":"a","data":{"b":true}},{"data":{"b":false},"id":"a"},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"id":"a","data":"#));
    assert!(!bit(&mask, id("{")));
    assert!(!bit(&mask, id("{\"")));
    assert!(bit(&mask, id("[")));
    // With `id` to come, the objects are free.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"data":"#));
    assert!(bit(&mask, id("{")));
    // One used: the other value only.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(
        &mut c,
        r#"[{"id":"a","data":{"b":true}},{"id":"a","data":{"b":"#,
    );
    assert!(!bit(&mask, id("t")));
    assert!(bit(&mask, id("f")));
}

/// SARIF's `region` in small: `charOffset`, an integer of `minimum: -1` (whose `-` has one
/// completion, `-1`), and a required boolean.
fn offsets() -> Value {
    array_of(
        json!({"type": "object", "additionalProperties": false, "required": ["b"],
                    "properties": {"n": {"type": "integer", "minimum": -1},
                                   "b": {"type": "boolean"}}}),
    )
}

#[test]
fn integer_values_behind_a_prefix_of_one_completion_are_checked_before_they_begin() {
    let s = offsets();
    for ok in [
        r#"[{"n":-1,"b":true},{"n":-1.0,"b":false},{"b":true,"n":0}]"#,
        r#"[{"n":-1,"b":true},{"n":10,"b":true},{"b":true,"n":1.00}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"n":-1,"b":true},{"b":true,"n":-1.0}]"#,
        r#"[{"n":-2,"b":true}]"#,
        r#"[{"n":-1.5,"b":true}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    let used = r#"[{"n":-1,"b":true},{"b":false,"n":-1},"#;
    // `-1` is used with both booleans: after `-`, only `-0` (the value 0) goes on.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"n":-"#));
    assert!(!bit(&mask, id("1")));
    assert!(bit(&mask, id("0")));
    // After `"b":true` too; with one of them used, `-1` may be written.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"b":true,"n":-"#));
    assert!(!bit(&mask, id("1")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"n":-1,"b":true},{"b":false,"n":-"#);
    assert!(bit(&mask, id("1")));
    // `-1` and `-0` (0) both used with both booleans: `-` may not begin.
    let used = r#"[{"n":-1,"b":true},{"b":false,"n":-1},{"n":0,"b":true},{"b":false,"n":0.0},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"n":"#));
    assert!(!bit(&mask, id("-")));
    assert!(bit(&mask, id("1")));
}

/// SARIF's `node` in small: a closed object of a free string `id`, and `children`, a
/// `uniqueItems` array of nodes (recursive); and SARIF's `attachment` with its `regions`, a
/// `uniqueItems` array of closed objects of integers alone.
#[test]
fn recursive_and_integer_closed_objects_inside_unique_items_compile() {
    let nodes = json!({
        "$defs": {"node": {"type": "object", "additionalProperties": false,
                           "properties": {"children": {"type": "array", "uniqueItems": true,
                                                       "items": {"$ref": "#/$defs/node"}},
                                          "id": {"type": "string"}}}},
        "type": "array", "uniqueItems": true, "items": {"$ref": "#/$defs/node"}});
    assert!(accepts(
        &nodes,
        r#"[{"id":"a","children":[{"id":"a"},{"children":[{}]}]},{"id":"a"}]"#
    ));
    for bad in [
        r#"[{"id":"a"},{"id":"a"}]"#,
        r#"[{"children":[{"id":"b"},{"id":"b"}]}]"#,
        r#"[{"children":[{"children":[{},{}]}]}]"#,
    ] {
        assert!(!accepts(&nodes, bad), "{bad}");
    }
    let regions = array_of(json!({
        "type": "object", "additionalProperties": false,
        "properties": {"uri": {"type": "string"},
                       "regions": array_of(json!({
                           "type": "object", "additionalProperties": false,
                           "properties": {"line": {"type": "integer", "minimum": 1},
                                          "offset": {"type": "integer", "minimum": -1}}}))}}));
    assert!(accepts(
        &regions,
        r#"[{"regions":[{"line":1},{"line":1,"offset":-1}]},{"regions":[]}]"#
    ));
    for bad in [
        r#"[{"regions":[{"line":1},{"line":1.0}]}]"#,
        r#"[{"regions":[{"offset":-1}]},{"regions":[{"offset":-1.0}]}]"#,
        r#"[{"regions":[{"line":0}]}]"#,
    ] {
        assert!(!accepts(&regions, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    // The used item's `regions` written again: its `]` is refused, `,` goes on.
    let mut c = from_json_schema(&regions, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(
        &mut c,
        r#"[{"uri":"u","regions":[{"line":1}]},{"uri":"u","regions":[{"line":1}"#,
    );
    assert!(!bit(&mask, id("]")));
    assert!(bit(&mask, id(",")));
}

/// A closed item over one required plain `number`.
fn one_number() -> Value {
    array_of(
        json!({"type": "object", "additionalProperties": false, "required": ["n"],
                    "properties": {"n": {"type": "number"}}}),
    )
}

#[test]
fn zero_of_a_number_property_is_set_apart() {
    // `0e` and `-0.0E` go on only as zero: once an earlier item holds zero they are masked
    // out (checked after the number, they would be dead ends), while `0.5` stays open.
    let s = one_number();
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"n":0},{"n":0"#);
    for t in ["e", "E", "}", ","] {
        assert!(!bit(&mask, id(t)), "{t}");
    }
    assert!(bit(&mask, id(".")));
    let mask = walk_accepting(&mut c, ".0");
    assert!(!bit(&mask, id("e")) && !bit(&mask, id("}")));
    assert!(bit(&mask, id("1")) && bit(&mask, id("0")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"n":-0.0e5},{"n":-0"#);
    assert!(!bit(&mask, id("e")) && !bit(&mask, id("}")));
    assert!(bit(&mask, id(".")));
    for ok in [
        r#"[{"n":0},{"n":0.5}]"#,
        r#"[{"n":0},{"n":1e0}]"#,
        r#"[{"n":1},{"n":0e5}]"#,
        r#"[{"n":-0.0E+2},{"n":1}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"n":0},{"n":0e5}]"#,
        r#"[{"n":0},{"n":-0.00}]"#,
        r#"[{"n":1e1},{"n":10.0}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
}

#[test]
fn numbers_beside_other_types_in_a_closed_item_set_zero_apart() {
    // Zero's `0e` has one completion: set apart beside the strings, as for numbers alone.
    let s = array_of(json!({"type": "object", "additionalProperties": false,
                            "properties": {"n": {"type": ["number", "string"]}}}));
    for ok in [
        r#"[{"n":0},{"n":"0"},{"n":0.5},{"n":""},{}]"#,
        r#"[{"n":"a"},{"n":-0.0e1},{"n":1}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"n":0},{"n":0e5}]"#,
        r#"[{"n":"a"},{"n":"a"}]"#,
        r#"[{"n":null}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"n":0},{"n":0"#);
    for t in ["e", "}"] {
        assert!(!bit(&mask, id(t)), "{t}");
    }
    assert!(bit(&mask, id(".")));
    // Numbers with bounds beside strings stay refused by name.
    let s = array_of(json!({"type": "object", "additionalProperties": false,
                            "properties": {"n": {"type": ["number", "string"], "maximum": 5}}}));
    let e = compile_json_schema(&s, &JsonOptions::default()).unwrap_err();
    assert!(e.to_string().contains("property `n`"), "{e}");
}

/// anywork's `version` in small: a `pattern` alone, so any value (strings of the pattern).
fn any_values() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {"p": {"pattern": "^a*$"}, "b": {"type": "boolean"}}}))
}

#[test]
fn a_property_of_any_type_sets_its_values_of_one_completion_apart() {
    let s = any_values();
    for ok in [
        r#"[{"p":null},{"p":true},{"p":false},{"p":0},{"p":"a"},{"p":[]},{"p":{}},{"p":1}]"#,
        r#"[{"p":null,"b":true},{"b":false,"p":null},{"p":null}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"p":null},{"p":null}]"#,
        r#"[{"p":true,"b":true},{"b":true,"p":true}]"#,
        r#"[{"p":0},{"p":0.0}]"#,
        r#"[{"p":[1]},{"p":[1.0]}]"#,
        r#"[{"p":"b"}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // `null` and `true` used with every `b`: neither may begin; the other values may.
    let used = r#"[{"p":null},{"p":null,"b":true},{"b":false,"p":null},{"p":true},{"p":true,"b":true},{"p":true,"b":false},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"p":"#));
    for t in ["n", "null", "t", "true"] {
        assert!(!bit(&mask, id(t)), "{t}");
    }
    for t in ["f", "0", "1", "\"", "[", "{"] {
        assert!(bit(&mask, id(t)), "{t}");
    }
}

/// anywork's `actions` in small: closed objects told apart by a constant `type` (one of
/// finitely many objects, one of infinitely many), beside an open object of another `type`.
fn actions() -> Value {
    array_of(json!({"anyOf": [
        {"type": "object", "additionalProperties": false, "required": ["type"],
         "properties": {"type": {"const": "a"}, "b": {"type": "boolean"}}},
        {"type": "object", "additionalProperties": false, "required": ["type", "n"],
         "properties": {"type": {"const": "b"}, "n": {"enum": [1, 2]}, "s": {"type": "string"}}},
        {"type": "object", "required": ["type"], "properties": {"type": {"const": "c"}}}
    ]}))
}

#[test]
fn closed_object_types_told_apart_by_a_key_are_counted_apart() {
    let s = actions();
    for ok in [
        r#"[{"type":"a"},{"type":"a","b":true},{"type":"b","n":1},{"type":"c"},{"type":"c","x":1}]"#,
        r#"[{"n":1,"type":"b"},{"type":"b","n":1,"s":""},{"b":false,"type":"a"}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"type":"a"},{"type":"a"}]"#,
        r#"[{"type":"b","n":1},{"n":1,"type":"b"}]"#,
        r#"[{"type":"c","x":1},{"x":1,"type":"c"}]"#,
        r#"[{"type":"a","n":1}]"#,
        r#"[{"type":"b"}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // Every object of type `a` used: after `"type":"`, `a` may not begin; `b` and `c` may.
    let used = r#"[{"type":"a"},{"type":"a","b":true},{"b":false,"type":"a"},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"type":""#));
    assert!(!bit(&mask, id("a")));
    assert!(bit(&mask, id("b")) && bit(&mask, id("c")));
    // The objects of type `b` are not those of `a`: with `"n":1` used without `s`, the item
    // `{"type":"b","n":1` may not close, and goes on with `s`.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(
        &mut c,
        &format!(r#"{used}{{"type":"b","n":1}},{{"n":1,"type":"b""#),
    );
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    // Type `b` before its `type` is read: `{"n":1` of the earlier items of `a` is no
    // completion of it (they have no `n`), so `}` after `"type":"b"` is free here.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"n":1,"type":"b""#));
    assert!(bit(&mask, id("}")));
}

#[test]
fn random_walks_over_unions_of_object_types_and_any_values_have_exact_masks() {
    let finished = walks_finished(
        &[actions(), any_values()],
        b"abc12\",[]{}:tfxyhnsbvlgorm",
        12,
        37,
        0,
        60,
    );
    assert!(finished >= 4, "only {finished} walks finished");
}

/// travis's `template` in small: a string or `null` (a `oneOf` of disjoint branches through a
/// reference), and a boolean. `null` has one completion from its `n`.
fn templates() -> Value {
    json!({"type": "array", "uniqueItems": true,
           "definitions": {"text": {"type": "string", "pattern": "^a*$"}},
           "items": {"type": "object", "additionalProperties": false,
                     "properties": {"t": {"oneOf": [{"$ref": "#/definitions/text"},
                                                    {"type": "null"}]},
                                    "b": {"type": "boolean"}}}})
}

#[test]
fn null_beside_unbounded_values_is_set_apart_and_checked_before_it_begins() {
    let s = templates();
    for ok in [
        r#"[{"t":null},{"t":null,"b":true},{"t":""},{"t":"a"},{}]"#,
        r#"[{"b":false,"t":null},{"t":null,"b":true},{"t":null}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"t":null},{"t":null}]"#,
        r#"[{"t":null,"b":true},{"b":true,"t":null}]"#,
        r#"[{"t":"a"},{"t":"a"}]"#,
        r#"[{"t":"b"}]"#,
        r#"[{"t":true}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // `null` used with both booleans and without: after `"t":`, `null` may not begin, while a
    // string may; with `b` unwritten and one of them free, it may.
    let used = r#"[{"t":null,"b":true},{"b":false,"t":null},{"t":null},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"t":"#));
    assert!(!bit(&mask, id("n")));
    assert!(!bit(&mask, id("null")));
    assert!(bit(&mask, id("\"")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"t":null,"b":true},{"t":null},{"t":"#);
    assert!(bit(&mask, id("n")));
    // After `"b":true`, `null` is used up with it; after `"b":false`, not.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"t":null,"b":true},{"b":true,"t":"#);
    assert!(!bit(&mask, id("n")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"t":null,"b":true},{"b":false,"t":"#);
    assert!(bit(&mask, id("n")));
}

/// travis's webhook `urls` and e-mail `recipients` in small: a string, a closed object of one
/// string, or a `uniqueItems` array of either (a `oneOf` of `oneOf`s); the closed object here
/// is nested in a branch, the array's items are infinitely many values of two types.
fn recipients() -> Value {
    json!({"type": "array", "uniqueItems": true,
           "definitions": {
               "secret": {"type": "object", "additionalProperties": false,
                          "properties": {"secure": {"type": "string"}}},
               "one": {"oneOf": [{"type": "string"}, {"$ref": "#/definitions/secret"}]}},
           "items": {"type": "object", "additionalProperties": false,
                     "properties": {
                         "to": {"oneOf": [
                             {"$ref": "#/definitions/one"},
                             {"type": "array", "uniqueItems": true, "minItems": 1,
                              "items": {"$ref": "#/definitions/one"}}]},
                         "on": {"type": "boolean"}}}})
}

#[test]
fn unions_of_a_closed_object_and_unbounded_values_nest_through_one_of() {
    let s = recipients();
    for ok in [
        r#"[{"to":"a"},{"to":{"secure":"a"}},{"to":{}},{"to":["a",{"secure":"a"}]},{"to":["a"]}]"#,
        r#"[{"to":[{}]},{"to":[{},"a"]},{"on":true},{}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"to":{}},{"to":{}}]"#,
        r#"[{"to":{"secure":"a"}},{"to":{"secure":"a"}}]"#,
        r#"[{"to":["a"]},{"to":["a"]}]"#,
        r#"[{"to":["a","a"]}]"#,
        r#"[{"to":[{},{}]}]"#,
        r#"[{"to":[]}]"#,
        r#"[{"to":{"x":"a"}}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // `{}` and `{"secure":"a"}` used beside `"on":true`: the string `"a` may not close (the
    // nested object would then have one completion, an earlier item), it may go on.
    let used = r#"[{"to":{},"on":true},{"on":true,"to":{"secure":"a"}},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"on":true,"to":{{"secure":"a"#));
    assert!(!bit(&mask, id("\"")));
    assert!(bit(&mask, id("b")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    // With `on` not written yet, `{"to":{"secure":"a"}` has other completions.
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"to":{{"secure":"a"#));
    assert!(bit(&mask, id("\"")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"on":true,"to":{{"#));
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id("\"")));
}

#[test]
fn random_walks_through_unions_of_closed_objects_have_exact_masks() {
    let finished = walks_finished(
        &[recipients(), templates()],
        b"a12\",[]{}:tfxyhnsbvlgorm",
        12,
        31,
        0,
        60,
    );
    assert!(finished >= 4, "only {finished} walks finished");
}

/// swagger's `parametersList` in small: a reference object (closed, one required string) or
/// a parameter, closed but for `^x-` vendor extensions (so one more member always fits), in
/// a `oneOf` told apart by `$ref`, which no pattern of the parameter matches.
fn parameters() -> Value {
    json!({"type": "array", "uniqueItems": true,
           "definitions": {
               "reference": {"type": "object", "additionalProperties": false,
                             "required": ["$ref"], "properties": {"$ref": {"type": "string"}}},
               "parameter": {"type": "object", "additionalProperties": false,
                             "required": ["in"],
                             "patternProperties": {"^x-": {}},
                             "properties": {"in": {"enum": ["a", "b"]}}}},
           "items": {"oneOf": [{"$ref": "#/definitions/parameter"},
                               {"$ref": "#/definitions/reference"}]}})
}

#[test]
fn objects_closed_but_for_a_pattern_of_infinitely_many_names_take_one_more_member() {
    let s = parameters();
    for ok in [
        r#"[{"in":"a"},{"in":"a","x-y":1},{"$ref":"a"},{"$ref":"b"},{"in":"b"}]"#,
        r#"[{"x-":null,"in":"a"},{"in":"a","x-":{}}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"in":"a"},{"in":"a"}]"#,
        r#"[{"in":"a","x-y":1},{"x-y":1.0,"in":"a"}]"#,
        r#"[{"$ref":"a"},{"$ref":"a"}]"#,
        r#"[{"in":"a","$ref":"a"}]"#,
        r#"[{"in":"a","y":1}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // Both parameters without extensions used: `{"in":"a"` may not close but may go on.
    let used = r#"[{"in":"a"},{"in":"b"},{"$ref":"a"},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"in":"a""#));
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    // The reference `a` used: `{"$ref":"a` may not close its string, and references do
    // not count as parameters (nor these as references).
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"$ref":"a"#));
    assert!(!bit(&mask, id("\"")));
    assert!(bit(&mask, id("b")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"in":"a"},{"$ref":"b"#);
    assert!(bit(&mask, id("\"")));
    // With a pattern that matches `$ref`, the two are not told apart: refused by name.
    let mut t = parameters();
    t["definitions"]["parameter"]["patternProperties"] = json!({"^\\$": {}});
    let e = compile_json_schema(&t, &JsonOptions::default()).unwrap_err();
    assert!(matches!(e, Error::UnsupportedKeyword { .. }), "{e}");
}

#[test]
fn random_walks_over_objects_closed_but_for_a_pattern_have_exact_masks() {
    let finished = walks_finished(&[parameters()], b"abx-12\",[]{}:tfnsrei$", 16, 41, 3, 60);
    assert!(finished >= 3, "only {finished} walks finished");
}

/// SpecIF's `replaces` in small: a `uniqueItems` array of at most two strings, beside a
/// boolean. A full array's one completion is its `]`, checked before it.
fn replaces() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {
                        "r": {"type": "array", "uniqueItems": true, "maxItems": 2,
                              "items": {"type": "string", "pattern": "^a*$"}},
                        "b": {"type": "boolean"}}}))
}

#[test]
fn a_full_array_of_at_most_max_items_is_checked_before_its_bracket() {
    let s = replaces();
    for ok in [
        r#"[{"r":[]},{"r":[""]},{"r":["","a"]},{"r":["a",""]},{"r":["","a"],"b":true},{}]"#,
        r#"[{"b":false,"r":["a"]},{"r":["a"]}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"r":["","a"]},{"r":["","a"]}]"#,
        r#"[{"r":["a"],"b":true},{"b":true,"r":["a"]}]"#,
        r#"[{"r":["a","a"]}]"#,
        r#"[{"r":["","a","aa"]}]"#,
        r#"[{"r":["b"]}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // `["","a"]` used with every `b`: its `"a` may not close (a full array), but may go on.
    let used = r#"[{"r":["","a"]},{"r":["","a"],"b":true},{"b":false,"r":["","a"]},"#;
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"r":["","a"#));
    assert!(!bit(&mask, id("\"")));
    assert!(bit(&mask, id("a")));
    // One array short of full: `"a` closes, and `]` then follows or another string.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!(r#"{used}{{"r":["a"#));
    assert!(bit(&mask, id("\"")));
    // With `b` written, one use is enough.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"r":["","a"],"b":true},{"b":true,"r":["","a"#);
    assert!(!bit(&mask, id("\"")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"r":["","a"],"b":true},{"b":false,"r":["","a"#);
    assert!(bit(&mask, id("\"")));
}

#[test]
fn random_walks_over_full_arrays_have_exact_masks() {
    let finished = walks_finished(&[replaces()], b"a\",[]{}:tfrb", 16, 43, 5, 70);
    assert!(finished >= 3, "only {finished} walks finished");
}

#[test]
fn open_objects_with_patterns_take_one_more_member_unless_the_patterns_close_them() {
    // Open, with a pattern for some names: a fresh name outside the pattern always fits.
    let s = array_of(json!({"type": "object", "patternProperties": {"^a": {"type": "integer"}}}));
    for ok in [
        r#"[{},{"a":1},{"b":"x"},{"a":1,"b":"x"}]"#,
        r#"[{"ab":2},{"ab":2,"c":1}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [r#"[{"a":1},{"a":1.0}]"#, r#"[{"a":"x"}]"#, r#"[{},{}]"#] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"a":1},{"a":1"#);
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")) && bit(&mask, id("0")));
    // A pattern that every name matches, whose values are `false`, closes the object but for
    // its one property: finitely many completions, refused by name.
    let s = array_of(json!({"type": "object", "patternProperties": {"": false},
                            "properties": {"x": {"type": "boolean"}}}));
    let e = compile_json_schema(&s, &JsonOptions::default()).unwrap_err();
    assert!(matches!(e, Error::UnsupportedKeyword { .. }), "{e}");
}

/// SARIF's `message` in small: a closed object with `text` or `id` (an `anyOf` of `required`
/// alone), as the item itself and nested in one.
fn messages() -> Value {
    json!({"type": "object", "additionalProperties": false,
           "properties": {"text": {"type": "string", "pattern": "^a*$"},
                          "id": {"type": "string", "pattern": "^a*$"},
                          "b": {"type": "boolean"}},
           "anyOf": [{"required": ["text"]}, {"required": ["id"]}]})
}

fn nested_messages() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {"m": messages(), "n": {"type": "boolean"}}}))
}

#[test]
fn an_any_of_of_required_keys_is_checked_at_the_objects_brace() {
    let s = array_of(messages());
    for ok in [
        r#"[{"text":"a"},{"id":"a"},{"text":"a","id":"a"},{"b":true,"id":""}]"#,
        r#"[{"id":"","b":false},{"b":true,"id":""}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{}]"#,
        r#"[{"b":true}]"#,
        r#"[{"text":"a"},{"text":"a"}]"#,
        r#"[{"id":"a","b":true},{"b":true,"id":"a"}]"#,
        r#"[{"text":"b"}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // Neither key written: the `}` may not come, another member may.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"b":true"#);
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"#);
    assert!(!bit(&mask, id("}")));
    // Written: the `}` may come, unless an earlier item is the same object.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"id":"a"},{"text":"a"#);
    assert!(bit(&mask, id("\"")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"id":"a","b":false},{"b":false,"id":"a""#);
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    // Nested: the inner object's `}` needs `text` or `id` too.
    let s = nested_messages();
    let ok = r#"[{"m":{"text":""}},{"m":{"id":""}},{"n":true},{}]"#;
    assert!(accepts(&s, ok), "{ok}");
    for bad in [
        r#"[{"m":{}}]"#,
        r#"[{"m":{"b":true}}]"#,
        r#"[{"m":{"id":""}},{"m":{"id":""}}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"m":{"b":true"#);
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    // A key of finitely many values in the `anyOf` is refused by name.
    let mut t = messages();
    t["anyOf"] = json!([{"required": ["text"]}, {"required": ["b"]}]);
    let e = compile_json_schema(&array_of(t), &JsonOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("anyOf of required naming `b`"),
        "{e}"
    );
}

#[test]
fn random_walks_over_any_of_of_required_have_exact_masks() {
    let finished = walks_finished(
        &[array_of(messages()), nested_messages()],
        b"a\",[]{}:tfmnbidx",
        12,
        47,
        0,
        60,
    );
    assert!(finished >= 4, "only {finished} walks finished");
}

/// SARIF 1.0's `physicalLocation` in small: a closed object whose `uriBaseId` needs `uri`
/// (`dependencies` in draft-04's form), as the item itself and nested in one.
fn locations() -> Value {
    json!({"type": "object", "additionalProperties": false,
           "properties": {"uri": {"type": "string", "pattern": "^a*$"},
                          "base": {"type": "string", "pattern": "^a*$"},
                          "b": {"type": "boolean"}},
           "dependencies": {"base": ["uri"]}})
}

fn nested_locations() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {"at": locations(), "n": {"type": "boolean"}}}))
}

#[test]
fn dependent_required_keys_are_checked_at_the_objects_brace() {
    let s = array_of(locations());
    for ok in [
        r#"[{},{"uri":"a"},{"uri":"","base":"a"},{"base":"a","uri":"a"},{"b":true}]"#,
        r#"[{"b":false,"base":"","uri":""},{"uri":"","base":""}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"base":""}]"#,
        r#"[{"b":true,"base":"a"}]"#,
        r#"[{"uri":"","base":""},{"base":"","uri":""}]"#,
        r#"[{},{}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // The trigger written without its key: the `}` may not come, another member may.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"base":"a""#);
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    // Without the trigger, or with its key: the `}` may come, unless an earlier item is the
    // same object.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"b":true"#);
    assert!(bit(&mask, id("}")));
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"uri":"","base":""},{"base":"","uri":"""#);
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    // Nested: the inner object's `}` checks it too.
    let s = nested_locations();
    let ok = r#"[{"at":{"base":"","uri":""}},{"at":{}},{"n":true},{}]"#;
    assert!(accepts(&s, ok), "{ok}");
    for bad in [r#"[{"at":{"base":""}}]"#, r#"[{"at":{}},{"at":{}}]"#] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"at":{"base":"a""#);
    assert!(!bit(&mask, id("}")));
    assert!(bit(&mask, id(",")));
    // A key of finitely many values needed by a trigger is refused by name, and so is a key
    // that can never be written.
    let mut t = locations();
    t["dependencies"] = json!({"base": ["b"]});
    let e = compile_json_schema(&array_of(t), &JsonOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("dependentRequired naming `b`"),
        "{e}"
    );
    let mut t = locations();
    t["dependencies"] = json!({"base": ["nowhere"]});
    let e = compile_json_schema(&array_of(t), &JsonOptions::default()).unwrap_err();
    assert!(
        e.to_string().contains("naming `nowhere`, never written"),
        "{e}"
    );
}

#[test]
fn random_walks_over_dependent_required_have_exact_masks() {
    let finished = walks_finished(
        &[array_of(locations()), nested_locations()],
        b"a\",[]{}:tfuribsenat",
        12,
        53,
        0,
        60,
    );
    assert!(finished >= 4, "only {finished} walks finished");
}

/// SARIF 1.0's `annotatedCodeLocation.id` in small: an integer of at least 1 or a string of
/// digits, beside a boolean, in closed unique objects.
fn ids() -> Value {
    array_of(json!({"type": "object", "additionalProperties": false,
                    "properties": {"id": {"type": ["integer", "string"], "minimum": 1,
                                          "pattern": "^[1-9][0-9]*$"},
                                   "b": {"type": "boolean"}},
                    "required": ["b"]}))
}

#[test]
fn integers_beside_strings_are_told_apart_by_value() {
    let s = ids();
    for ok in [
        r#"[{"b":true,"id":1},{"b":true,"id":"1"},{"b":true,"id":10},{"b":true}]"#,
        r#"[{"id":2,"b":false},{"id":2.0,"b":true},{"b":false,"id":"2"}]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"[{"b":true,"id":0}]"#,
        r#"[{"b":true,"id":"0"}]"#,
        r#"[{"b":true,"id":-1}]"#,
        r#"[{"b":true,"id":1.5}]"#,
        r#"[{"b":true,"id":2},{"id":2.00,"b":true}]"#,
        r#"[{"b":true,"id":"7"},{"id":"7","b":true}]"#,
        r#"[{"b":true,"id":null}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = common::synthetic_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // An equal integer is refused before its `.0`, and before the `}` that would end it.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"b":true,"id":3},{"b":true,"id":3"#);
    assert!(!bit(&mask, id("}")));
    assert!(!bit(&mask, id(".")));
    assert!(bit(&mask, id("0")));
    // The same digits as a string are another value.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, r#"[{"b":true,"id":3},{"b":true,"id":"3""#);
    assert!(bit(&mask, id("}")));
    // Values excluded by `not` reach the integers too: such a union is refused, not read
    // without them.
    let mut t = ids();
    t["items"]["properties"]["id"]["not"] = json!({"enum": [3, "4"]});
    match compile_json_schema(&t, &JsonOptions::default()) {
        Err(e) => assert!(matches!(e, Error::UnsupportedKeyword { .. }), "{e}"),
        Ok(_) => {
            assert!(!accepts(&t, r#"[{"b":true,"id":3}]"#));
            assert!(!accepts(&t, r#"[{"b":true,"id":"4"}]"#));
        }
    }
}

#[test]
fn random_walks_over_integers_beside_strings_have_exact_masks() {
    let finished = walks_finished(&[ids()], b"\",[]{}:tfbid0123.", 12, 59, 0, 60);
    assert!(finished >= 4, "only {finished} walks finished");
}

#[test]
fn excluded_values_of_a_typed_union_stay_excluded() {
    // A property of several types, values excluded by `not`: whatever path takes it, the
    // excluded values are never written.
    for (types, excluded, bad) in [
        (
            json!(["number", "string"]),
            json!(0),
            r#"[{"b":true,"v":0}]"#,
        ),
        (
            json!(["boolean", "string"]),
            json!(true),
            r#"[{"b":true,"v":true}]"#,
        ),
        (
            json!(["null", "string"]),
            json!(null),
            r#"[{"b":true,"v":null}]"#,
        ),
        (
            json!(["number", "string"]),
            json!("x"),
            r#"[{"b":true,"v":"x"}]"#,
        ),
    ] {
        let s = array_of(json!({"type": "object", "additionalProperties": false,
                                "properties": {"v": {"type": types, "not": {"const": excluded}},
                                               "b": {"type": "boolean"}},
                                "required": ["b"]}));
        match compile_json_schema(&s, &JsonOptions::default()) {
            Err(e) => assert!(matches!(e, Error::UnsupportedKeyword { .. }), "{e}"),
            Ok(_) => {
                assert!(!accepts(&s, bad), "{bad}");
                assert!(accepts(&s, r#"[{"b":true,"v":"y"}]"#), "{s}");
            }
        }
    }
}

/// The property kinds of the differential test below: each a schema, and whether its values
/// are infinitely many (so that a `dependentRequired` may name it).
fn kinds() -> Vec<(Value, bool)> {
    vec![
        (json!({"type": "boolean"}), false),
        (json!({"enum": ["x", "y", 1]}), false),
        (json!({"type": "integer", "minimum": -1}), true),
        (json!({"type": "integer", "minimum": 1}), true),
        (json!({"type": "number"}), true),
        (json!({"type": "string", "pattern": "^a*$"}), true),
        (
            json!({"type": ["integer", "string"], "minimum": 1, "pattern": "^a*$"}),
            true,
        ),
        (json!({"type": ["null", "string"], "pattern": "^a*$"}), true),
        (
            json!({"type": ["number", "string"], "not": {"const": 0}}),
            true,
        ),
        (
            json!({"type": ["boolean", "string"], "not": {"const": "a"}}),
            true,
        ),
        (
            json!({"anyOf": [{"type": "null"}, {"type": "string", "pattern": "^a*$"}]}),
            true,
        ),
        (
            json!({"type": "object", "additionalProperties": false,
                   "properties": {"q": {"type": "boolean"}, "r": {"type": "string"}}}),
            true,
        ),
        (
            json!({"type": "object", "additionalProperties": false, "required": ["q"],
                   "properties": {"q": {"type": "boolean"}}}),
            false,
        ),
        (
            json!({"type": "integer", "minimum": -1, "maximum": 5}),
            false,
        ),
        (
            json!({"type": "array", "uniqueItems": true, "maxItems": 2,
                   "items": {"type": "string"}}),
            true,
        ),
        (json!({"type": "array", "items": {"type": "boolean"}}), true),
        (json!({"enum": [1, 1.0, "1", null]}), false),
        (
            json!({"type": "string", "maxLength": 1, "pattern": "^a*$"}),
            false,
        ),
        (
            json!({"type": "object", "additionalProperties": false,
                   "properties": {"q": {"type": "string"}, "r": {"type": "string"}},
                   "anyOf": [{"required": ["q"]}, {"required": ["r"]}]}),
            true,
        ),
        (json!({"type": ["null", "boolean", "string"]}), true),
    ]
}

/// The values instances are made of: equal ones in other spellings among them (those the
/// grammars write: numbers of a finite set without exponent, `\u` escapes only for control
/// characters, as the crate's README says).
const VALUES: &[&str] = &[
    "true",
    "false",
    "null",
    "0",
    "-0",
    "0.0",
    "1",
    "1.0",
    "-1",
    "2",
    "0.5",
    "\"a\"",
    "\"aa\"",
    "\"\"",
    "\"b\"",
    "\"x\"",
    "\"y\"",
    "\"a\\/\"",
    "{}",
    "{\"q\":true}",
    "{\"r\":\"\",\"q\":true}",
    "{\"q\":true,\"r\":\"\"}",
    "{\"z\":1}",
    "[]",
    "[true]",
    "[\"a\"]",
    "[\"a\",\"aa\"]",
    "[\"aa\",\"a\"]",
    "5",
    "6",
    "\"1\"",
    "{\"r\":\"a\"}",
];

/// A plain validator of the keywords `kinds` and the item schema use.
fn valid(v: &Value, s: &Value) -> bool {
    let o = s.as_object().expect("a schema object");
    if let Some(t) = o.get("type") {
        let names: Vec<&str> = match t {
            Value::String(n) => vec![n.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => unreachable!(),
        };
        let of = |n: &str| match (n, v) {
            ("null", Value::Null) | ("boolean", Value::Bool(_)) => true,
            ("number", Value::Number(_)) | ("string", Value::String(_)) => true,
            ("object", Value::Object(_)) | ("array", Value::Array(_)) => true,
            ("integer", Value::Number(x)) => x.as_f64().is_some_and(|f| f.fract() == 0.0),
            _ => false,
        };
        if !names.iter().any(|&n| of(n)) {
            return false;
        }
    }
    if let Some(e) = o.get("enum") {
        if !e.as_array().unwrap().iter().any(|x| same(x, v)) {
            return false;
        }
    }
    if let Some(c) = o.get("not").and_then(|n| n.get("const")) {
        if same(c, v) {
            return false;
        }
    }
    if let Some(bs) = o.get("anyOf") {
        if !bs.as_array().unwrap().iter().any(|b| valid(v, b)) {
            return false;
        }
    }
    match v {
        Value::Number(x) => {
            let x = x.as_f64().unwrap();
            if o.get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|m| x < m)
                || o.get("maximum")
                    .and_then(Value::as_f64)
                    .is_some_and(|m| x > m)
            {
                return false;
            }
        }
        Value::String(x) => {
            match o.get("pattern").and_then(Value::as_str) {
                Some("^b") if !x.starts_with('b') => return false,
                Some("^a*$") if !x.chars().all(|c| c == 'a') => return false,
                _ => {}
            }
            let n = x.chars().count() as u64;
            if o.get("maxLength")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
            {
                return false;
            }
        }
        Value::Object(m) => {
            let props = o.get("properties").and_then(Value::as_object);
            for (k, x) in m {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) if !valid(x, ps) => return false,
                    Some(_) => {}
                    None if o.get("additionalProperties") == Some(&json!(false)) => return false,
                    None => {}
                }
            }
            for r in o
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !m.contains_key(r.as_str().unwrap()) {
                    return false;
                }
            }
            let deps = o.get("dependentRequired").and_then(Value::as_object);
            for (t, rs) in deps.into_iter().flatten() {
                if m.contains_key(t)
                    && !rs
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|r| m.contains_key(r.as_str().unwrap()))
                {
                    return false;
                }
            }
        }
        Value::Array(a) => {
            let n = a.len() as u64;
            if o.get("maxItems")
                .and_then(Value::as_u64)
                .is_some_and(|m| n > m)
                || o.get("minItems")
                    .and_then(Value::as_u64)
                    .is_some_and(|m| n < m)
            {
                return false;
            }
            if let Some(items) = o.get("items") {
                if !a.iter().all(|x| valid(x, items)) {
                    return false;
                }
            }
            if o.get("uniqueItems") == Some(&json!(true)) {
                for i in 0..a.len() {
                    if a[..i].iter().any(|x| same(x, &a[i])) {
                        return false;
                    }
                }
            }
        }
        _ => {}
    }
    true
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]
    /// Random closed unique items of random property kinds (`required`, `dependentRequired`,
    /// an `anyOf` of `required`), alone or in a union with other types, against random arrays of objects of random members, equal values spelled apart among
    /// them: every schema the compiler takes accepts exactly what a plain validator accepts.
    #[test]
    fn compiled_unique_items_agree_with_a_plain_validator(
        picks in proptest::collection::vec(0..20usize, 1..4),
        required in proptest::collection::vec(any::<bool>(), 3),
        dependent in any::<bool>(),
        one_of_two in any::<bool>(),
        union in 0..4usize,
        arrays in proptest::collection::vec(
            proptest::collection::vec(
                proptest::collection::vec((0..4usize, 0..VALUES.len()), 0..4),
                0..4,
            ),
            12,
        ),
    ) {
        let kinds = kinds();
        let names = ["p", "q", "r"];
        let mut props = serde_json::Map::new();
        let mut req = Vec::new();
        for (i, &k) in picks.iter().enumerate() {
            props.insert(names[i].to_string(), kinds[k].0.clone());
            if required[i] {
                req.push(json!(names[i]));
            }
        }
        let mut item = json!({"type": "object", "additionalProperties": false,
                              "properties": props, "required": req});
        if dependent && picks.len() > 1 && kinds[picks[1]].1 {
            item["dependentRequired"] = json!({"p": ["q"]});
        }
        if one_of_two && picks.len() > 1 && kinds[picks[0]].1 && kinds[picks[1]].1 {
            item["anyOf"] = json!([{"required": ["p"]}, {"required": ["q"]}]);
        }
        // The objects alone, or beside items of other types (`unique_split`).
        let item = match union {
            0 => item,
            1 => json!({"anyOf": [item, {"type": "string"}]}),
            2 => json!({"anyOf": [{"type": "null"}, item, {"type": "integer", "minimum": 1}]}),
            _ => json!({"anyOf": [item, {"type": "array", "items": {"type": "boolean"}}]}),
        };
        let schema = array_of(item);
        let grammar = match compile_json_schema(&schema, &JsonOptions::default()) {
            Ok(g) => g,
            Err(e) => {
                prop_assert!(matches!(e, Error::UnsupportedKeyword { .. }), "{schema}: {e}");
                return Ok(());
            }
        };
        let vocab = object_vocab();
        let mut checked = 0;
        for array in &arrays {
            let mut objects = Vec::new();
            for (n, members) in array.iter().enumerate() {
                // Now and then an item of another type.
                if members.len() == 1 && members[0].0 == 3 && n % 2 == 1 {
                    objects.push(VALUES[members[0].1].to_string());
                    continue;
                }
                let mut seen = Vec::new();
                let mut text = Vec::new();
                for &(k, v) in members {
                    let key = ["p", "q", "r", "z"][k];
                    if !seen.contains(&key) {
                        seen.push(key);
                        text.push(format!("\"{key}\":{}", VALUES[v]));
                    }
                }
                objects.push(format!("{{{}}}", text.join(",")));
            }
            let text = format!("[{}]", objects.join(","));
            let value: Value = serde_json::from_str(&text).expect("JSON");
            let ok = valid(&value, &schema);
            prop_assert_eq!(grammar.recognizes(text.as_bytes()), ok, "{} on {}", text, schema);
            // The first arrays byte by byte too: every mask bit as `advance` has it, and no
            // dead end on the way.
            if objects.len() > 1 && checked < 2 {
                checked += 1;
                let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
                prop_assert_eq!(!walk_refuses(&mut c, &text), ok, "{} on {}", text, schema);
            }
        }
    }
}

/// stylelint's `unitRule` items in small: a string, or a `uniqueItems` array of 21 names (too
/// many arrays to run out of, but a prefix listing 20 names has two completions).
fn units() -> Value {
    let names: Vec<String> = (0..21).map(|i| format!("a{i}")).collect();
    array_of(json!({"anyOf": [
        {"type": "string", "pattern": "^b"},
        {"type": "array", "uniqueItems": true, "minItems": 1, "items": {"enum": names}}
    ]}))
}

/// Tokens across the brackets and quotes of `units`' arrays (a mask computation reads a
/// guard right after an assumed end of the `[` or `,` before a name).
fn units_vocab() -> Arc<TokenVocab> {
    common::byte_vocab(&[
        "[\"", "[[\"", ",[\"", "\"],[\"", "\"]", "\"],", "\"]]", "\",\"", "\",\"a", "\"a1", "a1",
        "a2\"", "a20\"", "\"b\"", "[[", "],[",
    ])
}

/// The array of names `a{i}` for `i` in `ids`.
fn names(ids: impl IntoIterator<Item = usize>) -> String {
    let v: Vec<String> = ids.into_iter().map(|i| format!("\"a{i}\"")).collect();
    format!("[{}]", v.join(","))
}

#[test]
fn arrays_of_a_finite_set_as_items_check_each_prefix_against_the_earlier_items() {
    let s = units();
    let twenty = names(0..20);
    let all = names(0..21);
    // Accepted: distinct arrays (another order is another array), strings beside them.
    let ok = format!("[{twenty},{all},\"b\",{},[\"a20\"]]", names((0..20).rev()));
    assert!(accepts(&s, &ok));
    for bad in [
        format!("[{twenty},{twenty}]"),
        "[[\"a1\",\"a1\"]]".to_string(),
        "[[]]".to_string(),
        "[\"a1\"]".to_string(),
    ] {
        assert!(!accepts(&s, &bad), "{bad}");
    }
    let vocab = units_vocab();
    let id = |t: &str| common::token_id(&vocab, t);
    // Both completions of the first twenty names are earlier items: the twentieth name is
    // refused before it is written (its first byte that no other name shares), `a20` taken.
    let prefix = format!(
        "[{twenty},{all},{}",
        &twenty[..twenty.len() - "\"a19\"]".len()]
    );
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!("{prefix}\"a"));
    assert!(bit(&mask, id("2")));
    assert!(!bit(&mask, id("1")));
    // (Taken, it would leave a dead end after `"a20"`, whose `]` repeats an earlier item:
    // `walk_refuses` checks every mask on the way, and that none is empty.)
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    assert!(walk_refuses(&mut c, &format!("{prefix}\"a19\",\"a20\"]]")));
    // One earlier item is the twenty names: their `]` is refused, the `,` for `a20` is not.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(
        &mut c,
        &format!("[{twenty},{}", &twenty[..twenty.len() - 1]),
    );
    assert!(!bit(&mask, id("]")));
    assert!(bit(&mask, id(",")));
    // The earlier item is all 21: the twenty names may end, but not go on to `a20`.
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let mask = walk_accepting(&mut c, &format!("[{all},{}", &twenty[..twenty.len() - 1]));
    assert!(bit(&mask, id("]")));
    assert!(!bit(&mask, id(",")));
    // Too few arrays to be taken this way: refused by name, as before.
    let few = array_of(json!({"anyOf": [
        {"type": "string"},
        {"type": "array", "uniqueItems": true, "items": {"enum": ["x", "y"]}}
    ]}));
    let e = compile_json_schema(&few, &JsonOptions::default()).unwrap_err();
    assert!(matches!(e, Error::UnsupportedKeyword { .. }), "{e}");
}

#[test]
fn random_walks_over_arrays_of_a_finite_set_as_items_have_exact_masks() {
    let finished = walks_finished(&[units()], b"[]\",ab0123", 12, 61, 0, 80);
    assert!(finished >= 4, "only {finished} walks finished");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Random arrays of `units`' items: the first nineteen names with one of the five tails
    /// of `a19` and `a20` (so that earlier items often use up every completion of a prefix),
    /// a shorter array or a string. Accepted exactly when a plain validator accepts them, and
    /// the first byte by byte with every mask checked (no dead end on the way).
    #[test]
    fn arrays_of_a_finite_set_as_items_agree_with_a_plain_validator(
        arrays in proptest::collection::vec(proptest::collection::vec(0..7usize, 0..7), 8),
    ) {
        let schema = units();
        let grammar = compile_json_schema(&schema, &JsonOptions::default()).unwrap();
        let vocab = units_vocab();
        let tails: [&[usize]; 5] = [&[], &[19], &[20], &[19, 20], &[20, 19]];
        for (n, array) in arrays.iter().enumerate() {
            let items: Vec<String> = array
                .iter()
                .map(|&k| match k {
                    5 => "\"b\"".to_string(),
                    6 => names([0, 20]),
                    k => names((0..19).chain(tails[k].iter().copied())),
                })
                .collect();
            let text = format!("[{}]", items.join(","));
            let value: Value = serde_json::from_str(&text).expect("JSON");
            let ok = valid(&value, &schema);
            prop_assert_eq!(grammar.recognizes(text.as_bytes()), ok, "{}", text);
            if n == 0 {
                let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
                prop_assert_eq!(!walk_refuses(&mut c, &text), ok, "{}", text);
            }
        }
    }
}
