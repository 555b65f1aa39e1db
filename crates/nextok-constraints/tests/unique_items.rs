//! `uniqueItems` over unbounded string domains (issue #17): arrays are accepted exactly when
//! their items are distinct as JSON values (decoded strings), masks agree with `advance` at
//! every step, and no prefix is left without an allowed token. Domains the run-time check
//! cannot keep exact are refused by name.

use std::collections::HashSet;
use std::sync::Arc;

use nextok_constraints::{
    compile_json_schema, from_json_schema, Constraint, Error, JsonOptions, TokenVocab,
};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::{json, Value};

fn accepts(schema: &Value, text: &str) -> bool {
    compile_json_schema(schema, &JsonOptions::default())
        .expect("compiles")
        .recognizes(text.as_bytes())
}

fn refusal(schema: &Value) -> String {
    match compile_json_schema(schema, &JsonOptions::default()) {
        Err(Error::UnsupportedKeyword { keyword, path }) => format!("{keyword} at {path}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn strings() -> Value {
    json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true})
}

#[test]
fn distinct_strings_accepted_repeats_refused() {
    let s = strings();
    for ok in [
        "[]",
        r#"["a"]"#,
        r#"["a","b"]"#,
        r#"["","a","ab","b"]"#,
        r#"["a","A"]"#,
        r#"["a\n","a"]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"["a","a"]"#,
        r#"["a","b","a"]"#,
        r#"["",""]"#,
        // Equal as JSON values though spelled differently.
        r#"["/","\/"]"#,
        r#"["\n","\u000a"]"#,
        r#"["\t","\u0009"]"#,
        r#"["é","x","é"]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
}

#[test]
fn counts_whitespace_and_facets_compose() {
    let s = json!({"type": "array", "items": {"type": "string", "minLength": 1,
                   "pattern": "^[a-z]+$"}, "uniqueItems": true, "minItems": 2, "maxItems": 3});
    assert!(!accepts(&s, r#"["a"]"#));
    assert!(accepts(&s, r#"["a","b"]"#));
    assert!(accepts(&s, r#"["a","b","c"]"#));
    assert!(!accepts(&s, r#"["a","b","c","d"]"#));
    assert!(!accepts(&s, r#"["a","b","a"]"#));
    assert!(!accepts(&s, r#"["a",""]"#));
    let ws = compile_json_schema(&strings(), &JsonOptions::default().with_max_whitespace(2))
        .expect("compiles");
    assert!(ws.recognizes(br#"[ "a" , "b" ]"#));
    assert!(!ws.recognizes(br#"[ "a" ,  "a" ]"#));
    assert!(!ws.recognizes(b"[\n\"a\",\"\\/\",\t\"/\"]"));
}

#[test]
fn nested_and_alternative_arrays_keep_their_own_items() {
    // Each inner array is checked on its own; the outer one is not unique.
    let s = json!({"type": "array", "items": strings()});
    assert!(accepts(&s, r#"[["a","b"],["a","b"]]"#));
    assert!(!accepts(&s, r#"[["a"],["b","b"]]"#));
    // Two unique arrays side by side in an object.
    let s = json!({"type": "object", "properties": {"x": strings(), "y": strings()}});
    assert!(accepts(&s, r#"{"x":["a"],"y":["a"]}"#));
    assert!(!accepts(&s, r#"{"x":["a"],"y":["b","b"]}"#));
    // anyOf: a unique array of short-pattern strings or any array of numbers; and a plain
    // array of strings beside a unique one (the plain one accepts repeats).
    let s = json!({"anyOf": [strings(), {"type": "array", "items": {"type": "number"}}]});
    assert!(accepts(&s, r#"["a","b"]"#) && accepts(&s, "[1,1]"));
    assert!(!accepts(&s, r#"["a","a"]"#));
    let s = json!({"anyOf": [strings(), {"type": "array", "items": {"type": "string"}}]});
    assert!(accepts(&s, r#"["a","a"]"#));
    // Through a reference, and an enum of more than 12 strings is refused by name.
    let s = json!({"type": "array", "uniqueItems": true, "items": {"$ref": "#/$defs/s"},
                   "$defs": {"s": {"type": "string"}}});
    assert!(accepts(&s, r#"["a","b"]"#) && !accepts(&s, r#"["b","b"]"#));
}

#[test]
fn small_finite_domains_stay_unrolled() {
    // `[1, 2, 1]` is refused at the last `1`, in any of its spellings.
    let s = json!({"type": "array", "items": {"enum": [1, 2, 3]}, "uniqueItems": true});
    assert!(accepts(&s, "[1,2,3]"));
    for bad in ["[1,2,1]", "[1,2,1.0]", "[1.0,1]", "[3,2,3e0]"] {
        assert!(!accepts(&s, bad), "{bad}");
    }
}

#[test]
fn domains_that_could_dead_end_are_refused_by_name() {
    let arr = |items: Value| json!({"type": "array", "items": items, "uniqueItems": true});
    let cases = [
        (arr(json!({"type": "integer"})), "numbers"),
        (arr(json!({"type": "number"})), "numbers"),
        (arr(json!({"type": "object"})), "objects or arrays"),
        (json!({"type": "array", "uniqueItems": true}), "any type"),
        (
            arr(json!({"type": "string", "maxLength": 8})),
            "bounded length",
        ),
        (
            arr(json!({"type": "string", "format": "date"})),
            "finitely many",
        ),
        (
            arr(json!({"type": "string", "pattern": "^(ab|x[a-z]*)$"})),
            "finitely many",
        ),
        (
            arr(json!({"enum": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m"]})),
            "enum of more than 12",
        ),
        (
            arr(json!({"type": ["string", "null"]})),
            "more than one type",
        ),
    ];
    for (schema, why) in cases {
        let r = refusal(&schema);
        assert!(r.starts_with("uniqueItems ("), "{r}");
        assert!(r.contains(why), "{r} should say {why}");
        assert!(r.ends_with("at #"), "{r}");
    }
}

/// All single bytes, then pieces that cross string and item boundaries.
fn vocab() -> Arc<TokenVocab> {
    let mut v: Vec<Vec<u8>> = vec![b"<eos>".to_vec()];
    v.extend((0..=255u8).map(|b| vec![b]));
    for piece in [
        "\",",
        "\"]",
        "\",\"",
        "a\"",
        "ab\"",
        "\"a\"",
        "[\"",
        "[\"a\"",
        "a\",\"a\"",
        "\\/",
        "\\/\"",
        "/\"",
        "\"\"",
        "\"\",",
        "[\"\"",
        "b\",\"b",
        "ab",
        "\"a",
        "a\"]",
        "\\n\"",
        "\\u000",
        "\\u000a\"",
        "\"b\"]",
        "é\"",
        "\",\"é",
    ] {
        v.push(piece.as_bytes().to_vec());
    }
    Arc::new(TokenVocab::new(v, &[0]).expect("vocab"))
}

fn bit(mask: &[u64], t: u32) -> bool {
    mask[t as usize / 64] >> (t % 64) & 1 == 1
}

/// Checks that every token's mask bit is whether `advance` takes it, and that an incomplete
/// output has some allowed token.
fn check_mask(c: &mut dyn Constraint, out: &[u8]) -> Vec<u64> {
    let vocab = Arc::clone(c.vocab());
    let mut mask = vocab.empty_mask();
    c.fill_mask(&mut mask).expect("mask");
    for t in 0..vocab.len() as u32 {
        let ok = c.advance(t).is_ok();
        assert_eq!(
            ok,
            bit(&mask, t),
            "token {:?} after {:?}",
            String::from_utf8_lossy(vocab.token_bytes(t).unwrap_or_default()),
            String::from_utf8_lossy(out)
        );
        if ok {
            c.rollback(1).expect("rollback");
        }
    }
    assert!(
        mask.iter().any(|&w| w != 0),
        "dead end after {:?}",
        String::from_utf8_lossy(out)
    );
    mask
}

/// The decoded items if `text` is an array of strings.
fn items(text: &[u8]) -> Option<Vec<String>> {
    serde_json::from_slice::<Vec<String>>(text).ok()
}

fn distinct(items: &[String]) -> bool {
    items.iter().collect::<HashSet<_>>().len() == items.len()
}

#[test]
fn random_walks_have_exact_masks_and_end_unique() {
    let vocab = vocab();
    let schemas = [
        strings(),
        json!({"type": "array", "items": {"type": "string", "pattern": "^[ab]+$"},
               "uniqueItems": true, "maxItems": 4}),
        json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true,
               "minItems": 3}),
        json!({"type": "array", "items": strings(), "maxItems": 3}),
    ];
    // Tokens the walk prefers, so that items repeat often.
    let preferred: Vec<u32> = (0..vocab.len() as u32)
        .filter(|&t| {
            let b = vocab.token_bytes(t).unwrap_or_default();
            b.len() > 1 || b"ab\",[]/\\".contains(b.first().unwrap_or(&0))
        })
        .collect();
    let mut finished = 0;
    for (i, schema) in schemas.iter().enumerate() {
        for seed in 0..12u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 31 + i as u64);
            let mut c = from_json_schema(schema, &vocab, &JsonOptions::default()).unwrap();
            let mut out = Vec::new();
            let mut history = Vec::new();
            for _ in 0..40 {
                let mask = check_mask(&mut c, &out);
                history.push(mask.clone());
                let allowed: Vec<u32> =
                    (0..vocab.len() as u32).filter(|&t| bit(&mask, t)).collect();
                let liked: Vec<u32> = preferred
                    .iter()
                    .copied()
                    .filter(|&t| bit(&mask, t))
                    .collect();
                let pool = if !liked.is_empty() && rng.next_u32() % 8 != 0 {
                    &liked
                } else {
                    &allowed
                };
                let t = pool[rng.next_u32() as usize % pool.len()];
                c.advance(t).unwrap();
                if t == 0 {
                    finished += 1;
                    let v: Value = serde_json::from_slice(&out).expect("JSON");
                    let flat: Vec<String> = match (items(&out), &v) {
                        (Some(x), _) => x,
                        (None, Value::Array(inner)) => {
                            for a in inner {
                                let x: Vec<String> = serde_json::from_value(a.clone()).unwrap();
                                assert!(distinct(&x), "{}", String::from_utf8_lossy(&out));
                            }
                            Vec::new()
                        }
                        _ => panic!("not an array: {}", String::from_utf8_lossy(&out)),
                    };
                    assert!(distinct(&flat), "{}", String::from_utf8_lossy(&out));
                    break;
                }
                out.extend_from_slice(vocab.token_bytes(t).unwrap());
            }
            // Rolling back (the earlier values the chart keeps included) restores the masks.
            let back = history.len().min(4);
            c.rollback(back).unwrap();
            let mut mask = vocab.empty_mask();
            c.fill_mask(&mut mask).unwrap();
            assert_eq!(mask, history[history.len() - back]);
        }
    }
    assert!(finished >= 10, "only {finished} walks finished");
}

#[test]
fn masks_refuse_exactly_the_closing_of_a_repeat() {
    let vocab = vocab();
    let id = |s: &str| {
        (0..vocab.len() as u32)
            .find(|&t| vocab.token_bytes(t) == Some(s.as_bytes()))
            .unwrap()
    };
    let mut c = from_json_schema(&strings(), &vocab, &JsonOptions::default()).unwrap();
    for t in ["[\"a\"", ",", "\"", "a"] {
        c.advance(id(t)).unwrap();
    }
    let mask = check_mask(&mut c, br#"["a","a"#);
    // `"` would close a repeat; `ab"` continues it into "aab", which is new.
    for t in ["\"", "\",", "\"]"] {
        assert!(!bit(&mask, id(t)), "{t}");
    }
    for t in ["b", "ab\"", "a\"", "a\"]"] {
        assert!(bit(&mask, id(t)), "{t}");
    }
    // The same item spelled with an escape is refused at its end too.
    let mut c = from_json_schema(&strings(), &vocab, &JsonOptions::default()).unwrap();
    for t in ["[\"", "/\"", ",", "\""] {
        c.advance(id(t)).unwrap();
    }
    let mask = check_mask(&mut c, br#"["/","#);
    assert!(bit(&mask, id("\\/")), "escape");
    assert!(!bit(&mask, id("\\/\"")), "closing escape");
}

/// A JSON spelling of `s` that escapes `/` and newlines in either way, chosen by `style`.
fn spell(s: &str, style: u8) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match (ch, style % 3) {
            ('/', 1) => out.push_str("\\/"),
            ('\n', 2) => out.push_str("\\u000a"),
            ('\n', _) => out.push_str("\\n"),
            ('"', _) => out.push_str("\\\""),
            (c, _) => out.push(c),
        }
    }
    out.push('"');
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Random arrays of strings over a tiny alphabet (so that repeats are common), in random
    /// spellings: accepted exactly when the decoded items are distinct, and along the way the
    /// masks agree with `advance`.
    #[test]
    fn accepted_iff_items_unique(
        items in proptest::collection::vec("[ab/\n\"]{0,3}", 0..6),
        styles in proptest::collection::vec(0u8..3, 6),
    ) {
        let text = format!(
            "[{}]",
            items
                .iter()
                .zip(&styles)
                .map(|(s, &st)| spell(s, st))
                .collect::<Vec<_>>()
                .join(",")
        );
        let unique = distinct(&items);
        prop_assert_eq!(accepts(&strings(), &text), unique, "{}", text);
        // Byte by byte through the constraint, masks checked until the first refused byte.
        let vocab = vocab();
        let mut c = from_json_schema(&strings(), &vocab, &JsonOptions::default()).unwrap();
        let mut refused = false;
        for (i, b) in text.bytes().enumerate() {
            check_mask(&mut c, &text.as_bytes()[..i]);
            if c.advance(b as u32 + 1).is_err() {
                refused = true;
                break;
            }
        }
        prop_assert_eq!(refused || !c.is_complete(), !unique, "{}", text);
    }
}

#[test]
fn reading_earlier_items_counts_as_work() {
    // One work unit per byte of the array read back: a long array under a small work limit
    // ends in the typed error, and the constraint stays where it was.
    let vocab = vocab();
    let limits = nextok_constraints::Limits::default().with_max_mask_work(3000);
    let opts = JsonOptions::default().with_limits(limits);
    let mut c = from_json_schema(&strings(), &vocab, &opts).unwrap();
    let text: String = format!(
        "[{}]",
        (0..1000)
            .map(|i| format!("\"x{i}\""))
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut stopped = None;
    for (i, b) in text.bytes().enumerate() {
        match c.advance(b as u32 + 1) {
            Ok(()) => {}
            Err(Error::LimitExceeded { .. }) => {
                stopped = Some(i);
                break;
            }
            Err(e) => panic!("{e} at byte {i}"),
        }
    }
    let at = stopped.expect("the work limit is reached");
    // Past 3000 bytes of array text, and not before.
    assert!((2900..3100).contains(&at), "stopped at byte {at}");
    assert_eq!(c.num_tokens(), at);
    // The same array with a default limit goes through.
    let mut c = from_json_schema(&strings(), &vocab, &JsonOptions::default()).unwrap();
    assert!(text.bytes().all(|b| c.advance(b as u32 + 1).is_ok()) && c.is_complete());
}
