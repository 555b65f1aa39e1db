//! `uniqueItems` over item domains where some prefix pins the value down (issue #17): items of
//! any type, `null` and booleans beside other types, zero (`0e` goes on only as zero),
//! integers (`5.` goes on only as `5.0`, `5.00`), enums inside unions, `anyOf` and disjoint
//! `oneOf` items. Arrays are accepted exactly when their items are distinct as JSON values,
//! masks agree with `advance` at every step, and a prefix whose every completion is an earlier
//! item is refused at the byte that makes it so.

mod common;

use std::sync::Arc;

use common::{
    assert_distinct, assert_rollback_restores, bit, preferred_tokens, random_walk, smollm2,
    walk_accepting, walk_refuses,
};
use nextok_constraints::{
    compile_json_schema, from_json_schema, Constraint, JsonOptions, TokenVocab,
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

fn arr(items: Value) -> Value {
    json!({"type": "array", "items": items, "uniqueItems": true})
}

fn any_items() -> Value {
    json!({"type": "array", "uniqueItems": true})
}

/// `<eos>`, then token `b + 1` is byte `b`, then pieces that cross value and item boundaries.
fn vocab() -> Arc<TokenVocab> {
    common::byte_vocab(&[
        "true",
        "false",
        "null",
        "tr",
        "0e",
        "0.",
        ".0",
        "0,",
        "e5",
        "1,",
        "1]",
        "{}",
        "[]",
        "\"a\"",
        "\"\\u0061\"",
        "],[",
        "},{",
        ",\"",
        "true,",
        "null]",
        "-0",
        "1.0",
    ])
}

fn constraint(schema: &Value) -> Box<dyn Constraint> {
    Box::new(from_json_schema(schema, &vocab(), &JsonOptions::default()).expect("compiles"))
}

/// The mask after `text` (fed byte by byte, every mask on the way checked against `advance`).
fn mask_after(schema: &Value, text: &str) -> Vec<u64> {
    let mut c = constraint(schema);
    walk_accepting(c.as_mut(), text)
}

fn byte(b: u8) -> u32 {
    u32::from(b) + 1
}

#[test]
fn items_of_any_type_compare_as_json_values() {
    let s = any_items();
    for ok in [
        "[]",
        r#"[true,false,null,0,"a",{},[],1]"#,
        r#"[{"a":1,"b":2},{"a":1}]"#,
        "[0,0.5,-0.5,1e2,1e3]",
        r#"[[1],[1,1],"1",1]"#,
        r#"[0e5,1]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        "[1,1.0]",
        "[1,1e0]",
        "[0,-0]",
        "[0,0e5]",
        "[-0.0E-3,0]",
        r#"["a","\u0061"]"#,
        r#"[{"a":1,"b":2},{"b":2,"a":1}]"#,
        "[true,true]",
        "[null,1,null]",
        "[false,false]",
        "[[1],[1.0]]",
        "[{},{}]",
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
}

#[test]
fn literals_in_use_are_never_begun() {
    let s = any_items();
    // After `[true,false,null,` only a value that is not a literal may start.
    let mask = mask_after(&s, "[true,false,null,");
    for b in [b't', b'f', b'n', b']'] {
        assert!(!bit(&mask, byte(b)), "{}", b as char);
    }
    for b in [b'"', b'{', b'[', b'1', b'-', b'0'] {
        assert!(bit(&mask, byte(b)), "{}", b as char);
    }
    // After `[true,false,null` the array may end or go on.
    let mask = mask_after(&s, "[true,false,null");
    assert!(bit(&mask, byte(b']')) && bit(&mask, byte(b',')));
    // A literal used once is refused at its first byte, and a piece that would spell it too.
    let mask = mask_after(&s, "[true,");
    let v = vocab();
    let id = |p: &str| {
        (0..v.len() as u32)
            .find(|&t| v.token_bytes(t) == Some(p.as_bytes()))
            .unwrap()
    };
    for p in ["t", "tr", "true", "true,"] {
        assert!(!bit(&mask, id(p)), "{p}");
    }
    for p in ["false", "null", "null]", "f"] {
        assert!(bit(&mask, id(p)), "{p}");
    }
    let mut c = constraint(&s);
    assert!(walk_refuses(c.as_mut(), "[true,tr"));
    let mut c = constraint(&s);
    assert!(walk_refuses(c.as_mut(), "[null,[],null]"));
}

#[test]
fn zero_ends_where_only_zero_can_follow() {
    for s in [any_items(), arr(json!({"type": "number"}))] {
        // `0e` goes on only as zero: refused once zero is used; `0.` may still be `0.5`.
        let mask = mask_after(&s, "[0,0");
        assert!(!bit(&mask, byte(b'e')) && !bit(&mask, byte(b'E')));
        assert!(!bit(&mask, byte(b']')) && !bit(&mask, byte(b',')));
        assert!(bit(&mask, byte(b'.')));
        let mask = mask_after(&s, "[0,0.0");
        assert!(!bit(&mask, byte(b'e')) && !bit(&mask, byte(b']')));
        assert!(bit(&mask, byte(b'1')));
        let mask = mask_after(&s, "[0,-");
        assert!(bit(&mask, byte(b'0')) && bit(&mask, byte(b'1')));
        let mut c = constraint(&s);
        assert!(walk_refuses(c.as_mut(), "[1,-0e3,0.0]"));
        let mut c = constraint(&s);
        assert!(!walk_refuses(c.as_mut(), "[0,0.01,-0.5e3,1e-7]"));
        // With zero unused, its spellings in exponent form are fine.
        let mut c = constraint(&s);
        assert!(!walk_refuses(c.as_mut(), "[1,0E+5]"));
    }
}

#[test]
fn integers_end_before_a_fraction_that_cannot_change_them() {
    let s = arr(json!({"type": "integer"}));
    for ok in ["[1,2.00,3]", "[5,50,-5]", "[0,1]", "[1.0,10]"] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        "[5,5.0]",
        "[5.0,5]",
        "[0,-0]",
        "[0,-0.0]",
        "[7,1,7.000]",
        "[1.5]",
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    // `5.` goes on only as `5.0...`: refused once 5 is used; `5` itself may go on as `50`.
    let mask = mask_after(&s, "[5,5");
    assert!(!bit(&mask, byte(b'.')) && !bit(&mask, byte(b',')) && !bit(&mask, byte(b']')));
    assert!(bit(&mask, byte(b'0')));
    let mask = mask_after(&s, "[0,-");
    assert!(!bit(&mask, byte(b'0')) && bit(&mask, byte(b'1')));
    // A lower bound (xs-app's status codes): every prefix goes on.
    let s = arr(json!({"type": "integer", "minimum": 1}));
    assert!(accepts(&s, "[404,500,1]"));
    assert!(!accepts(&s, "[404,500,404.0]") && !accepts(&s, "[0]"));
    let mask = mask_after(&s, "[1,");
    assert!(!bit(&mask, byte(b'0')) && !bit(&mask, byte(b'-')));
    // Bounded above: `9` is checked when it is read.
    let s = json!({"type": "array", "uniqueItems": true,
                   "items": {"type": "integer", "maximum": 9}});
    let mask = mask_after(&s, "[9,");
    assert!(!bit(&mask, byte(b'9')) && bit(&mask, byte(b'8')) && bit(&mask, byte(b'-')));
}

#[test]
fn null_and_booleans_beside_other_types() {
    let s = arr(json!({"type": ["string", "null", "boolean"], "minLength": 1}));
    assert!(accepts(&s, r#"[null,"a",true,"b",false]"#));
    for bad in [
        r#"[null,"a",null]"#,
        r#"["a","\u0061"]"#,
        r#"[""]"#,
        "[true,true]",
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let mask = mask_after(&s, "[null,true,");
    assert!(!bit(&mask, byte(b'n')) && !bit(&mask, byte(b't')) && bit(&mask, byte(b'f')));
    assert!(bit(&mask, byte(b'"')) && !bit(&mask, byte(b'1')));
    // vs-nesting's items: any value, strings by a pattern.
    let s = arr(json!({"pattern": "^\\.[^/\\\\]+$"}));
    assert!(accepts(&s, r#"[".a",".b",null,1]"#));
    assert!(!accepts(&s, r#"[".a",".\u0061"]"#) && !accepts(&s, r#"["a"]"#));
}

#[test]
fn unions_are_one_domain() {
    // travis: `oneOf` of non-empty strings and numbers (disjoint by type).
    let s = arr(json!({"oneOf": [{"type": "string", "minLength": 1}, {"type": "number"}]}));
    assert!(accepts(&s, r#"["1",1,"a",0]"#));
    for bad in [r#"["1",1,1.0]"#, r#"[0,"a",0e1]"#, r#"[""]"#, "[null]"] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    // vsix-publish: `anyOf` of non-empty strings and an enum of more than 12 strings.
    let names: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
    let s = json!({"type": "array", "uniqueItems": true, "minItems": 1, "maxItems": 3,
                   "items": {"anyOf": [{"type": "string", "minLength": 1}, {"enum": names}]}});
    assert!(accepts(&s, r#"["c1","c2","other"]"#));
    for bad in [
        r#"["c1","c1"]"#,
        r#"["c1","c\u0031"]"#,
        "[]",
        r#"["a","b","c","d"]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    // An enum beside booleans: finitely many values, so the `,` is checked too.
    let s = arr(json!({"anyOf": [{"enum": [1, "x"]}, {"type": "boolean"}]}));
    assert!(accepts(&s, r#"[1,"x",true,false]"#));
    assert!(!accepts(&s, "[1,1.0]") && !accepts(&s, "[true,1,true]"));
    let mask = mask_after(&s, r#"[1,"x",true,false"#);
    assert!(!bit(&mask, byte(b',')) && bit(&mask, byte(b']')));
    let mask = mask_after(&s, "[1,");
    assert!(!bit(&mask, byte(b'1')) && bit(&mask, byte(b'"')) && bit(&mask, byte(b't')));
    // An enum's zero and the zero of a number type are one value.
    let s = arr(json!({"anyOf": [{"enum": [0, null]}, {"type": "number"}]}));
    assert!(accepts(&s, "[0,null,1]"));
    assert!(!accepts(&s, "[0,0e2]") && !accepts(&s, "[0.0,0]"));
}

/// winget's `Tags`: strings of bounded length beside `null`. The string part keeps its own
/// check (a prefix lives only while some completion is a new string), read past the `null`.
#[test]
fn strings_of_finitely_many_completions_beside_null() {
    let s = json!({"type": "array", "uniqueItems": true, "maxItems": 16,
                   "items": {"type": ["string", "null"], "minLength": 1, "maxLength": 40}});
    for ok in [
        r#"["a",null,"b"]"#,
        "[null]",
        r#"["a","ab"]"#,
        "[]",
        r#"["\/",null,"a"]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"["ab","ab"]"#,
        r#"[null,"a",null]"#,
        r#"["a",null,"a"]"#,
        r#"[""]"#,
        r#"["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]"#,
        r#"["\/",null,"/"]"#,
        r#"["/",null,"\/"]"#,
        "[null,null]",
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    // A token that would close a used string is masked out, through the `null`; one that
    // leaves it open, or closes a new one, is not.
    let v = vocab();
    let id = |p: &str| {
        (0..v.len() as u32)
            .find(|&t| v.token_bytes(t) == Some(p.as_bytes()))
            .unwrap()
    };
    let mask = mask_after(&s, r#"["a",null,"#);
    assert!(!bit(&mask, id(r#""a""#)));
    assert!(!bit(&mask, id("null")) && !bit(&mask, id("null]")));
    assert!(bit(&mask, byte(b'"')) && !bit(&mask, byte(b'n')));
    let mask = mask_after(&s, r#"["a",null,""#);
    assert!(bit(&mask, byte(b'a')) && !bit(&mask, byte(b'"')));
    let mask = mask_after(&s, r#"["b",null,"#);
    assert!(bit(&mask, id(r#""a""#)));
    // Three strings ("", "a", "b") and `null`, at most three items: a string prefix whose
    // every completion is used is refused at the byte that makes it so, through a `null`.
    let s = json!({"type": "array", "uniqueItems": true, "maxItems": 3,
                   "items": {"type": ["string", "null"], "maxLength": 1, "pattern": "^[ab]*$"}});
    assert!(accepts(&s, r#"["a","b",""]"#) && accepts(&s, r#"["",null,"b"]"#));
    assert!(!accepts(&s, r#"["a",null,"a"]"#) && !accepts(&s, r#"["a","b",null,""]"#));
    let mask = mask_after(&s, r#"["a",null,""#);
    assert!(!bit(&mask, byte(b'a')) && bit(&mask, byte(b'b')) && bit(&mask, byte(b'"')));
    let mask = mask_after(&s, r#"["a","b",""#);
    assert!(!bit(&mask, byte(b'a')) && !bit(&mask, byte(b'b')) && bit(&mask, byte(b'"')));
    let mut c = constraint(&s);
    assert!(walk_refuses(c.as_mut(), r#"["a","b","a"#));
    let mut c = constraint(&s);
    assert!(walk_refuses(c.as_mut(), r#"[null,"b",null"#));
}

/// winget's `InstallerSuccessCodes`: integers other than zero. Excluded values go from the
/// canonical spellings (and the `.0+` after them); zero's spellings go as a whole.
#[test]
fn integers_and_numbers_less_excluded_values() {
    let s = json!({"type": "array", "uniqueItems": true, "maxItems": 16,
                   "items": {"type": "integer", "not": {"enum": [0]}}});
    for ok in ["[1,-1,2.0,10]", "[5,50,-5]", "[]"] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        "[0]",
        "[0.0]",
        "[-0]",
        "[1,1.0]",
        "[3,7,3]",
        "[1.5]",
        "[-1,-1.00]",
        "[12,5,12.0]",
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let mask = mask_after(&s, "[");
    assert!(!bit(&mask, byte(b'0')) && bit(&mask, byte(b'1')) && bit(&mask, byte(b'-')));
    let mask = mask_after(&s, "[1,-");
    assert!(!bit(&mask, byte(b'0')) && bit(&mask, byte(b'1')));

    let s = arr(json!({"type": "integer", "not": {"enum": [5, 7.5]}}));
    assert!(accepts(&s, "[50,0,-5,7]"));
    for bad in ["[5]", "[5.0]", "[0,0]", "[7.5]"] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    // `5` may still go on as `50`, never end or take a fraction.
    let mask = mask_after(&s, "[5");
    assert!(bit(&mask, byte(b'0')) && !bit(&mask, byte(b'.')));
    assert!(!bit(&mask, byte(b',')) && !bit(&mask, byte(b']')));

    // Numbers: the others are written without exponent, so that no spelling of `1` escapes.
    let s = arr(json!({"type": "number", "not": {"enum": [1, 0]}}));
    assert!(accepts(&s, "[1.5,2,-1,0.25]"));
    for bad in ["[1]", "[1.0]", "[1e0]", "[0]", "[0e1]", "[2,2.0]"] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let mask = mask_after(&s, "[1");
    assert!(bit(&mask, byte(b'.')) && bit(&mask, byte(b'0')));
    assert!(!bit(&mask, byte(b',')) && !bit(&mask, byte(b']')) && !bit(&mask, byte(b'e')));
    let mask = mask_after(&s, "[1.00");
    assert!(bit(&mask, byte(b'1')) && !bit(&mask, byte(b']')));
    let mask = mask_after(&s, "[0");
    assert!(bit(&mask, byte(b'.')) && !bit(&mask, byte(b']')) && !bit(&mask, byte(b'e')));
}

#[test]
fn domains_that_could_dead_end_stay_refused_by_name() {
    let cases = [
        (
            arr(json!({"type": ["number", "null"], "maximum": 3})),
            "maximum",
        ),
        (
            arr(json!({"type": "integer", "maximum": 12})),
            "integers bounded",
        ),
        (
            arr(json!({"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 3}]})),
            "finitely many values, fewer than maxItems",
        ),
        (
            json!({"type": "array", "uniqueItems": true, "maxItems": 4, "items":
                   {"type": ["string", "null"], "maxLength": 1, "pattern": "^[ab]*$"}}),
            "finitely many values, fewer than maxItems",
        ),
        (
            arr(json!({"type": "integer", "maximum": 12, "not": {"enum": [0]}})),
            "integers bounded",
        ),
        (
            arr(json!({"type": "integer", "not": {"enum": [[0]]}})),
            "not enum of arrays or objects",
        ),
        (
            arr(json!({"type": ["object", "null"], "additionalProperties": false})),
            "without additional properties",
        ),
        // One list rule per alternative and item count: 5,000 enum values beside strings, at
        // 20 items each, would be 100,000 rules.
        (
            json!({"type": "array", "uniqueItems": true, "minItems": 20, "items": {"anyOf": [
                {"type": "string"}, {"enum": (0..5000).collect::<Vec<u32>>()}]}}),
            "more than 4096 enum values",
        ),
        (
            json!({"type": "array", "uniqueItems": true, "minItems": 40, "items": {"anyOf": [
                {"type": "string"}, {"enum": (0..2000).collect::<Vec<u32>>()}]}}),
            "above 65536",
        ),
    ];
    for (schema, why) in cases {
        match compile_json_schema(&schema, &JsonOptions::default()) {
            Err(nextok_constraints::Error::UnsupportedKeyword { keyword, path }) => {
                assert!(keyword.starts_with("uniqueItems ("), "{keyword}");
                assert!(keyword.contains(why), "{keyword} should say {why}");
                assert_eq!(path, "#");
            }
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }
}

/// A random walk of at most 40 tokens under `schema`, preferring short values and the pieces
/// that spell literals and zeros: every mask checked against `advance` (and non-empty while
/// the output is incomplete); a finished output must be an array of distinct values.
fn walk(schema: &Value, seed: u64) -> bool {
    let vocab = vocab();
    let mut c = from_json_schema(schema, &vocab, &JsonOptions::default()).unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let preferred = preferred_tokens(&vocab, b"01-.e,[]{}\"tfn", true);
    let walk = random_walk(&mut c, &mut rng, &preferred, 8, 40);
    if !walk.ended {
        return false;
    }
    let out = &walk.out;
    let v: Vec<Value> = match serde_json::from_slice(out) {
        Ok(v) => v,
        // serde_json reads numbers as f64 and refuses `1e999`: valid JSON that this
        // oracle cannot compare, so the walk counts as unfinished.
        Err(e) if e.to_string().contains("number out of range") => return false,
        Err(e) => panic!("{e}: {}", String::from_utf8_lossy(out)),
    };
    assert_distinct(&v, out);
    true
}

fn walk_schemas() -> Vec<Value> {
    vec![
        any_items(),
        arr(json!({"type": "integer"})),
        arr(json!({"type": ["number", "null", "boolean"]})),
        arr(json!({"oneOf": [{"type": "string", "minLength": 1}, {"type": "integer"}]})),
        json!({"type": "array", "uniqueItems": true, "maxItems": 4,
               "items": {"anyOf": [{"enum": [0, "a", true]}, {"type": "number", "minimum": 0}]}}),
        json!({"type": "array", "uniqueItems": true, "maxItems": 3, "items":
               {"type": ["string", "null"], "maxLength": 1, "pattern": "^[ab]*$"}}),
        arr(json!({"type": "integer", "not": {"enum": [0, 1]}})),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// Masks agree with `advance` on random walks, and finished arrays have distinct items.
    #[test]
    fn random_walks_have_exact_masks(seed in any::<u64>(), which in 0..7usize) {
        walk(&walk_schemas()[which], seed);
    }
}

#[test]
fn random_walks_finish_unique() {
    let mut finished = 0;
    for (i, s) in walk_schemas().iter().enumerate() {
        for seed in 0..6u64 {
            finished += usize::from(walk(s, seed * 31 + i as u64));
        }
    }
    assert!(finished >= 6, "only {finished} walks finished");
}

/// The winget manifests' item domains (`Tags`: `null` or 1 to 40 characters, at most 16;
/// `InstallerSuccessCodes`: integers other than zero) and small variants of them where items
/// repeat often, walked over SmolLM2's real vocabulary: every mask equals `advance` for each of
/// its 49,152 tokens, rolling back restores the masks, and a finished array has distinct items
/// of the item domain.
#[test]
fn real_vocab_walks_over_winget_items() {
    let (vocab, _) = smollm2();
    let schemas = [
        json!({"type": "array", "uniqueItems": true, "maxItems": 16,
               "items": {"type": ["string", "null"], "minLength": 1, "maxLength": 40}}),
        json!({"type": "array", "uniqueItems": true, "maxItems": 16,
               "items": {"type": "integer", "not": {"enum": [0]}}}),
        json!({"type": "array", "uniqueItems": true, "maxItems": 3,
               "items": {"type": ["string", "null"], "maxLength": 1, "pattern": "^[ab]*$"}}),
        json!({"type": "array", "uniqueItems": true, "maxItems": 4,
               "items": {"type": ["string", "null"], "minLength": 1, "maxLength": 2,
                         "pattern": "^[ab]+$"}}),
        arr(json!({"type": "integer", "not": {"enum": [0, 1, 2, 10]}})),
        // `"a` ends one way only, `"b` goes on to `bb`, `bbb`, ...; `1` is out in every
        // spelling.
        arr(
            json!({"type": ["number", "string", "null"], "pattern": "^(a|b+)$",
                   "not": {"enum": [1, "b"]}}),
        ),
    ];
    // Tokens made only of a few bytes, so that items repeat and finite prefixes come often.
    let small = b"ab\",[]nul0123-.e";
    let preferred: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&t| {
            vocab
                .token_bytes(t)
                .is_some_and(|b| !b.is_empty() && b.iter().all(|x| small.contains(x)))
        })
        .collect();
    assert!(preferred.len() > 50, "{}", preferred.len());
    let mut finished = 0;
    for (i, schema) in schemas.iter().enumerate() {
        for seed in 0..4u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 37 + i as u64);
            let mut c = from_json_schema(schema, &vocab, &JsonOptions::default()).unwrap();
            let walk = random_walk(&mut c, &mut rng, &preferred, 10, 30);
            if walk.ended {
                finished += 1;
                let v: Vec<Value> = serde_json::from_slice(&walk.out).expect("JSON array");
                assert_distinct(&v, &walk.out);
                // The items are of the item domain (an independent check of each).
                for x in &v {
                    let ok = match (i, x) {
                        (0, Value::String(s)) => (1..=40).contains(&s.chars().count()),
                        (1, Value::Number(n)) => {
                            n.as_f64().is_some_and(|f| f != 0.0 && f.fract() == 0.0)
                        }
                        (2, Value::String(s)) => {
                            s.len() <= 1 && s.bytes().all(|b| b == b'a' || b == b'b')
                        }
                        (3, Value::String(s)) => {
                            (1..=2).contains(&s.len()) && s.bytes().all(|b| b == b'a' || b == b'b')
                        }
                        (4, Value::Number(n)) => n.as_f64().is_some_and(|f| {
                            f.fract() == 0.0 && ![0.0, 1.0, 2.0, 10.0].contains(&f)
                        }),
                        (5, Value::Number(n)) => n.as_f64() != Some(1.0),
                        (5, Value::String(s)) => {
                            s == "a" || (s.len() >= 2 && s.bytes().all(|b| b == b'b'))
                        }
                        (0 | 2 | 3 | 5, Value::Null) => true,
                        _ => false,
                    };
                    assert!(ok, "{x} in {}", String::from_utf8_lossy(&walk.out));
                }
                if i == 0 || i == 1 {
                    assert!(v.len() <= 16);
                }
            }
            assert_rollback_restores(&mut c, &walk, 4);
        }
    }
    assert!(finished >= 4, "only {finished} walks finished");
}

/// A token that closes a value exactly where its terminal cannot read on (`9` under `maximum:
/// 9`, a whole string `"a"`) is allowed only when that value is new: the mask once took such
/// tokens as "inside the terminal" without asking the guard at its end.
#[test]
fn a_token_that_closes_a_used_value_is_masked_out() {
    let v = vocab();
    let id = |p: &str| {
        (0..v.len() as u32)
            .find(|&t| v.token_bytes(t) == Some(p.as_bytes()))
            .unwrap()
    };
    let cases = [
        (
            arr(json!({"type": "integer", "maximum": 9})),
            "[9,",
            "9",
            false,
        ),
        (
            arr(json!({"type": "integer", "maximum": 9})),
            "[8,",
            "9",
            true,
        ),
        (
            arr(json!({"type": ["string", "integer"]})),
            "[\"a\",",
            "\"a\"",
            false,
        ),
        (
            arr(json!({"type": ["string", "object"]})),
            "[\"a\",",
            "\"a\"",
            false,
        ),
        (
            arr(json!({"type": ["string", "object"]})),
            "[\"b\",",
            "\"a\"",
            true,
        ),
        (any_items(), "[{},", "{}", false),
        (any_items(), "[[],", "[]", false),
        (any_items(), "[[],", "{}", true),
    ];
    for (s, pre, tok, allowed) in cases {
        let mut c = constraint(&s);
        let mask = walk_accepting(c.as_mut(), pre);
        assert_eq!(bit(&mask, id(tok)), allowed, "{s} {pre} {tok}");
    }
}
