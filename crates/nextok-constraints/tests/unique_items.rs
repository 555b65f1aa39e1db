//! `uniqueItems` over unbounded domains (issue #17): strings, and values of every type whose
//! every prefix has infinitely many completions (numbers, open objects, arrays). Arrays are
//! accepted exactly when their items are distinct as JSON values (strings decoded, numbers by
//! value, object keys in any order), masks agree with `advance` at every step, and no prefix is
//! left without an allowed token. Domains the run-time check cannot keep exact are refused by
//! name.

mod common;

use std::collections::HashSet;
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
        (
            arr(json!({"enum": (0..4097).collect::<Vec<u32>>()})),
            "enum of more than 4096",
        ),
        // `1` goes on only as `10`, `11`, `12`.
        (
            arr(json!({"type": "integer", "maximum": 12})),
            "integers bounded",
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
    common::byte_vocab(&[
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
    ])
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
        // Prefixes with finitely many completions: `"b` and `"a/` end one way only.
        json!({"type": "array", "items": {"type": "string", "pattern": "^(ab|a/|b|a[a-z]{2,}|\n+)$"},
               "uniqueItems": true}),
        json!({"type": "array", "items": {"type": "string", "pattern": "^[ab]{1,2}(/|b+)?$"},
               "uniqueItems": true}),
    ];
    // Tokens the walk prefers, so that items repeat often.
    let preferred = preferred_tokens(&vocab, b"ab\",[]/\\", true);
    let mut finished = 0;
    for (i, schema) in schemas.iter().enumerate() {
        for seed in 0..12u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 31 + i as u64);
            let mut c = from_json_schema(schema, &vocab, &JsonOptions::default()).unwrap();
            let walk = random_walk(&mut c, &mut rng, &preferred, 8, 40);
            if walk.ended {
                finished += 1;
                let out = &walk.out;
                let v: Value = serde_json::from_slice(out).expect("JSON");
                let flat: Vec<String> = match (items(out), &v) {
                    (Some(x), _) => x,
                    (None, Value::Array(inner)) => {
                        for a in inner {
                            let x: Vec<String> = serde_json::from_value(a.clone()).unwrap();
                            assert!(distinct(&x), "{}", String::from_utf8_lossy(out));
                        }
                        Vec::new()
                    }
                    _ => panic!("not an array: {}", String::from_utf8_lossy(out)),
                };
                assert!(distinct(&flat), "{}", String::from_utf8_lossy(out));
            }
            // Rolling back (the earlier values the chart keeps included) restores the masks.
            assert_rollback_restores(&mut c, &walk, 4);
        }
    }
    assert!(finished >= 10, "only {finished} walks finished");
}

#[test]
fn masks_refuse_exactly_the_closing_of_a_repeat() {
    let vocab = vocab();
    let id = |s: &str| common::token_id(&vocab, s);
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

/// String items whose prefix has finitely many completions: the prefix is allowed only while
/// one of them is a new value.
#[test]
fn string_prefixes_with_finitely_many_completions_need_a_new_one() {
    let s = json!({"type": "array", "uniqueItems": true,
                   "items": {"type": "string", "pattern": "^(ab|x[a-z]*|\\d+(\\.\\d+)?x)$"}});
    for ok in [r#"["ab","x","xy","1x","1.5x","12x"]"#, r#"["x","ab"]"#] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"["ab","ab"]"#,
        r#"["1x","1x"]"#,
        r#"["x","x"]"#,
        r#"["ab","a\u0062"]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let text = br#"["ab","1x","#;
    for (i, b) in text.iter().enumerate() {
        check_mask(&mut c, &text[..i]);
        c.advance(*b as u32 + 1).unwrap();
    }
    let mask = check_mask(&mut c, text);
    // `"a` can only become "ab", used: a dead end. `"x` and `"1` go on to new values.
    for t in ["\"a", "\"a\""] {
        assert!(!bit(&mask, id(t)), "{t}");
    }
    assert!(bit(&mask, id("\"")));
    c.advance(id("\"")).unwrap();
    let mask = check_mask(&mut c, br#"["ab","1x",""#);
    for t in ["a", "ab", "ab\"", "a\""] {
        assert!(!bit(&mask, id(t)), "{t}");
    }
    for t in ["x", "1", "b"] {
        assert!(bit(&mask, id(t)) == (t != "b"), "{t}");
    }
    // Inside `1`, the `x` that would make "1x" again is refused, digits and `.` are not.
    c.advance(id("1")).unwrap();
    let mask = check_mask(&mut c, br#"["ab","1x","1"#);
    assert!(!bit(&mask, id("x")));
    assert!(bit(&mask, id("2")) && bit(&mask, id(".")));
}

/// String items of a finite domain as a whole (`maxLength`, `format: date`): the `,` before
/// another item is allowed only while some value is unused, and `minItems` beyond the
/// domain's size leaves no array at all.
#[test]
fn finite_string_domains_end_when_used_up() {
    let three = |extra: Value| {
        let mut s = json!({"type": "array", "uniqueItems": true,
                           "items": {"type": "string", "maxLength": 1, "pattern": "^[ab]*$"}});
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let s = three(json!({}));
    assert!(accepts(&s, r#"["","a","b"]"#));
    assert!(accepts(&s, r#"["b",""]"#));
    assert!(!accepts(&s, r#"["a","b","a"]"#));
    assert!(!accepts(&s, r#"["ab"]"#));
    assert!(accepts(&three(json!({"minItems": 3})), r#"["b","","a"]"#));
    assert!(matches!(
        compile_json_schema(&three(json!({"minItems": 4})), &JsonOptions::default()),
        Err(Error::EmptyLanguage)
    ));
    let dates = json!({"type": "array", "uniqueItems": true,
                       "items": {"type": "string", "format": "date"}});
    assert!(accepts(&dates, r#"["2024-02-29","2024-03-01"]"#));
    assert!(!accepts(&dates, r#"["2024-02-29","2024-02-29"]"#));
    let vocab = vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    for (opts, text) in [
        (JsonOptions::default(), r#"["a","","b""#),
        (
            JsonOptions::default().with_max_whitespace(2),
            r#"[ "a" , "" ,"b" "#,
        ),
    ] {
        let mut c = from_json_schema(&s, &vocab, &opts).unwrap();
        let mask = walk_accepting(&mut c, text);
        for t in [",", "\",", "\",\"", " "] {
            if vocab.token_bytes(id(t)) != Some(b" ") || !text.ends_with(' ') {
                assert!(!bit(&mask, id(t)), "{t:?} after {text}");
            }
        }
        assert!(bit(&mask, id("]")), "] after {text}");
    }
}

/// String items of an `anyOf` of string branches (an enum beside patterns, as tsconfig's
/// `lib`) are one string domain: distinct values, spellings compared decoded.
#[test]
fn string_items_of_an_any_of_are_one_domain() {
    let s = json!({"type": "array", "uniqueItems": true, "items": {"type": "string", "anyOf": [
        {"enum": ["ES5", "DOM", 3]}, {"pattern": "^[Ee][Ss]20[0-9]{2}$"}, {"pattern": "^x+$"}]}});
    assert!(accepts(&s, r#"["ES5","DOM","es2020","ES2020","xx"]"#));
    for bad in [
        r#"["ES5","ES5"]"#,
        r#"["es2020","es2020"]"#,
        r#"["x","\u0078"]"#,
        "[3]",
        r#"["ES6"]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let vocab = vocab();
    let mut c = from_json_schema(&s, &vocab, &JsonOptions::default()).unwrap();
    let text = br#"["DOM",""#;
    for (i, b) in text.iter().enumerate() {
        check_mask(&mut c, &text[..i]);
        c.advance(*b as u32 + 1).unwrap();
    }
    // `"D` can only become "DOM", used; `"E`, `"e` and `"x` go on to new values.
    let mask = check_mask(&mut c, text);
    assert!(!bit(&mask, b'D' as u32 + 1));
    assert!(c.advance(b'D' as u32 + 1).is_err());
    for b in [b'E', b'e', b'x'] {
        assert!(bit(&mask, b as u32 + 1), "{}", b as char);
    }
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
        prop_assert_eq!(walk_refuses(&mut c, &text), !unique, "{}", text);
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

/// Items of objects, arrays, numbers and strings, one of them: the items its runs use.
fn values() -> Value {
    json!({"type": "array", "uniqueItems": true,
           "items": {"type": ["number", "string", "object", "array"]}})
}

#[test]
fn items_compare_as_json_values() {
    let objects = json!({"type": "array", "items": {"type": "object"}, "uniqueItems": true});
    for ok in [
        "[]",
        "[{}]",
        r#"[{},{"a":1}]"#,
        r#"[{"a":1},{"a":2},{"b":1}]"#,
        r#"[{"a":1,"b":2},{"a":1}]"#,
        r#"[{"a":[1,2]},{"a":[2,1]}]"#,
        r#"[{"a":"1"},{"a":1}]"#,
    ] {
        assert!(accepts(&objects, ok), "{ok}");
    }
    for bad in [
        "[{},{}]",
        r#"[{"a":1},{"a":1.0}]"#,
        r#"[{"a":1,"b":2},{"b":2,"a":1}]"#,
        r#"[{"a":"\/"},{"a":"/"}]"#,
        r#"[{"a":"\n"},{"a":"\u000a"}]"#,
        r#"[{"a":[1,{"b":null}]},{"c":1},{"a":[1e0,{"b":null}]}]"#,
    ] {
        assert!(!accepts(&objects, bad), "{bad}");
    }
    let numbers = json!({"type": "array", "items": {"type": "number"}, "uniqueItems": true});
    for ok in ["[1,2,1.5]", "[0,0.1,-0.1]", "[1e2,1e3]"] {
        assert!(accepts(&numbers, ok), "{ok}");
    }
    for bad in ["[1,1.0]", "[1,1e0]", "[100,1E2]", "[0,-0]", "[0.5,2,5e-1]"] {
        assert!(!accepts(&numbers, bad), "{bad}");
    }
    let arrays = json!({"type": "array", "uniqueItems": true,
                        "items": {"type": "array", "items": {"type": "integer"}}});
    for ok in ["[[1],[1,2],[]]", "[[1,2],[2,1]]"] {
        assert!(accepts(&arrays, ok), "{ok}");
    }
    for bad in ["[[],[]]", "[[1,2],[1,2.0]]", "[[1],[2],[1]]"] {
        assert!(!accepts(&arrays, bad), "{bad}");
    }
    let mixed = values();
    assert!(accepts(&mixed, r#"["a",{"a":1},1,[1],"1",[]]"#));
    for bad in [r#"["/","\/"]"#, r#"[{"x":"y"},1,{"x":"y"}]"#, "[[1],[1.0]]"] {
        assert!(!accepts(&mixed, bad), "{bad}");
    }
    // With whitespace between tokens, inside items too.
    let ws = compile_json_schema(&objects, &JsonOptions::default().with_max_whitespace(2))
        .expect("compiles");
    assert!(ws.recognizes(br#"[ { "a" : 1 } , { "a" : 2 } ]"#));
    assert!(!ws.recognizes(b"[ {\"a\":1,\"b\":2} ,\n{ \"b\" : 2 , \"a\" : 1 } ]"));
}

#[test]
fn value_domains_that_could_dead_end_are_refused_by_name() {
    let arr = |items: Value| json!({"type": "array", "items": items, "uniqueItems": true});
    let cases = [
        (arr(json!({"type": "number", "maximum": 3})), "maximum"),
        (
            arr(json!({"type": "object", "additionalProperties": false,
                       "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 5}}})),
            "without additional properties",
        ),
        (
            arr(json!({"type": "object", "maxProperties": 3})),
            "maxProperties",
        ),
        (arr(json!({"type": "array", "maxItems": 3})), "maxItems"),
        (
            arr(json!({"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": true})),
            "enum",
        ),
        (
            arr(json!({"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 3}]})),
            "finitely many values, fewer than maxItems",
        ),
        (
            arr(json!({"type": ["number", "null"], "minimum": -1})),
            "negative minimum",
        ),
    ];
    for (schema, why) in cases {
        let r = refusal(&schema);
        assert!(r.starts_with("uniqueItems ("), "{r}");
        assert!(r.contains(why), "{r} should say {why}");
        assert!(r.ends_with("at #"), "{r}");
    }
}

/// Single bytes, then pieces that cross value and item boundaries.
fn value_vocab() -> Arc<TokenVocab> {
    common::byte_vocab(&[
        "{\"a\":", "1}", "},{", "}]", "},", "\"}", "1.0", "0}", "]]", "],[", "[[", "1]", "1,",
        "\"a\"", "{}", "[]", "e0", ".0]",
    ])
}

#[test]
fn masks_refuse_exactly_the_closing_of_a_repeated_value() {
    let vocab = value_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    let objects = json!({"type": "array", "items": {"type": "object"}, "uniqueItems": true});
    let mut c = from_json_schema(&objects, &vocab, &JsonOptions::default()).unwrap();
    for t in ["[", "{\"a\":", "1}", ",", "{\"a\":", "1"] {
        c.advance(id(t)).unwrap();
    }
    let mask = check_mask(&mut c, br#"[{"a":1},{"a":1"#);
    // `}` would close a repeat; `,` and `.5` go on to new objects.
    for t in ["}", "},", "}]", "},{"] {
        assert!(!bit(&mask, id(t)), "{t}");
    }
    for t in [",", "0}", "."] {
        assert!(bit(&mask, id(t)), "{t}");
    }
    // Numbers: after `[1,1.0` the item may go on (`1.05`) but not end.
    let numbers = json!({"type": "array", "items": {"type": "number"}, "uniqueItems": true});
    let mut c = from_json_schema(&numbers, &vocab, &JsonOptions::default()).unwrap();
    for t in ["[", "1,", "1.0"] {
        c.advance(id(t)).unwrap();
    }
    let mask = check_mask(&mut c, b"[1,1.0");
    for t in ["]", ",", "]]"] {
        assert!(!bit(&mask, id(t)), "{t}");
    }
    for t in ["5", "0}", "e"] {
        assert!(bit(&mask, id(t)) == (t != "0}"), "{t}");
    }
}

/// Spellings of items, each with the class of the JSON value it is.
const POOL: &[(&str, u8)] = &[
    ("1", 0),
    ("1.0", 0),
    ("10e-1", 0),
    ("2", 1),
    (r#"{"a":1}"#, 2),
    (r#"{"a":1.0}"#, 2),
    (r#"{"a":1,"b":[]}"#, 3),
    (r#"{"b":[],"a":1}"#, 3),
    ("[1]", 4),
    ("[1.0]", 4),
    ("[]", 5),
    ("{}", 6),
    (r#""/""#, 7),
    (r#""\/""#, 7),
    (r#"["a",{}]"#, 8),
    (r#"[{},"a"]"#, 9),
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Random arrays of values in random spellings, so that equal values spelled apart are
    /// common: accepted exactly when the values are distinct, and along the way the masks
    /// agree with `advance` and never leave a dead end.
    #[test]
    fn values_accepted_iff_distinct(picks in proptest::collection::vec(0..POOL.len(), 0..5)) {
        let text = format!(
            "[{}]",
            picks.iter().map(|&i| POOL[i].0).collect::<Vec<_>>().join(",")
        );
        let classes: HashSet<u8> = picks.iter().map(|&i| POOL[i].1).collect();
        let unique = classes.len() == picks.len();
        prop_assert_eq!(accepts(&values(), &text), unique, "{}", text);
        let vocab = value_vocab();
        let mut c = from_json_schema(&values(), &vocab, &JsonOptions::default()).unwrap();
        prop_assert_eq!(walk_refuses(&mut c, &text), !unique, "{}", text);
    }
}

#[test]
fn random_value_walks_have_exact_masks_and_end_unique() {
    let vocab = value_vocab();
    let schemas = [
        values(),
        json!({"type": "array", "items": {"type": "object",
               "properties": {"a": {"enum": [1, 2]}}}, "uniqueItems": true, "minItems": 2}),
        json!({"type": "array", "uniqueItems": true,
               "items": {"type": "array", "items": {"type": "number"}, "uniqueItems": true}}),
    ];
    let preferred = preferred_tokens(&vocab, b"1a\",[]{}:", true);
    let mut finished = 0;
    for (i, schema) in schemas.iter().enumerate() {
        for seed in 0..10u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 17 + i as u64);
            let mut c = from_json_schema(schema, &vocab, &JsonOptions::default()).unwrap();
            let walk = random_walk(&mut c, &mut rng, &preferred, 8, 40);
            if walk.ended {
                finished += 1;
                // Distinct as values: serde_json's equality, with every number written
                // as an integer or the same decimal spelling the walk can produce.
                let v: Vec<Value> = serde_json::from_slice(&walk.out).expect("JSON array");
                assert_distinct(&v, &walk.out);
            }
        }
    }
    assert!(finished >= 6, "only {finished} walks finished");
}

/// An enum of more than 12 values (too many to unroll a rule per subset), of every type, some
/// of them spelled several ways (`1` and `1.0`, `"a/"` and `"a\/"`, objects' keys in any
/// order), and two repeated (`"a"`, `1.0`).
fn large_enum() -> Value {
    json!({"type": "array", "uniqueItems": true, "items": {"enum": [
        "a", "a/", "c", "d", "e", "f", "g", "h", "i", "j", "k",
        1, 2.5, {"a": 1, "b": 2}, [1, 2], null, true, false, "a", 1.0
    ]}})
}

#[test]
fn large_enums_take_each_value_once() {
    let s = large_enum();
    for ok in [
        "[]",
        r#"["a"]"#,
        r#"["a","a/",1,{"a":1,"b":2},[1,2],null,true,false,2.5]"#,
        r#"[{"b":2,"a":1},"a\/",1.0,[1.0,2],2.50]"#,
    ] {
        assert!(accepts(&s, ok), "{ok}");
    }
    for bad in [
        r#"["a","a"]"#,
        r#"["a/","a\/"]"#,
        "[1,1.0]",
        "[1.00,1]",
        "[2.5,2.50]",
        r#"[{"a":1,"b":2},{"b":2,"a":1}]"#,
        r#"[{"a":1,"b":2},"a",{"a":1.0,"b":2}]"#,
        "[[1,2],[1.0,2]]",
        "[null,true,null]",
        // Not in the enum.
        r#"["z"]"#,
        "[3]",
        r#"[{"a":1}]"#,
    ] {
        assert!(!accepts(&s, bad), "{bad}");
    }
    let ws =
        compile_json_schema(&s, &JsonOptions::default().with_max_whitespace(2)).expect("compiles");
    assert!(ws.recognizes(br#"[ "k" , "j" ]"#));
    assert!(!ws.recognizes(br#"[ "k" ,  "k" ]"#));
    assert!(!ws.recognizes(b"[ 1 ,\n1.0]"));
}

#[test]
fn large_enums_keep_counts_and_refs() {
    let letters: Vec<String> = (0..14).map(|i| format!("v{i}")).collect();
    let s = json!({"type": "array", "uniqueItems": true, "minItems": 2, "maxItems": 3,
                   "items": {"$ref": "#/$defs/letter"},
                   "$defs": {"letter": {"type": "string", "enum": letters}}});
    assert!(!accepts(&s, r#"["v0"]"#));
    assert!(accepts(&s, r#"["v0","v13"]"#));
    assert!(accepts(&s, r#"["v0","v13","v7"]"#));
    assert!(!accepts(&s, r#"["v0","v13","v7","v8"]"#));
    assert!(!accepts(&s, r#"["v0","v13","v0"]"#));
    // A small enum behind a `$ref` is unrolled, as one written in place.
    let small = json!({"type": "array", "uniqueItems": true, "items": {"$ref": "#/$defs/m"},
                       "$defs": {"m": {"enum": ["x", "y"]}}});
    assert!(accepts(&small, r#"["y","x"]"#));
    assert!(!accepts(&small, r#"["x","x"]"#));
    // The enum's type filters it: 13 values of which 12 strings.
    let typed = json!({"type": "array", "uniqueItems": true, "items": {"type": "string",
        "enum": ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", 1, 2]}});
    assert!(accepts(&typed, r#"["a","l"]"#));
    assert!(!accepts(&typed, "[1]"));
}

/// After every value of a finite domain is used, or `maxItems` reached, no token may start
/// another item: the `,` is masked out, and `]` stays.
#[test]
fn finite_domains_mask_out_the_item_that_cannot_be() {
    let vocab = value_vocab();
    let id = |s: &str| common::token_id(&vocab, s);
    let letters: Vec<String> = (b'a'..=b'm').map(|b| (b as char).to_string()).collect();
    let cases = [
        // Unrolled: a 2-value enum.
        (
            json!({"type": "array", "uniqueItems": true, "items": {"enum": [1, 2]}}),
            "[2,1".to_string(),
        ),
        // Guarded: all 13 values used.
        (
            json!({"type": "array", "uniqueItems": true, "items": {"enum": letters}}),
            format!(
                "[{}",
                letters
                    .iter()
                    .map(|l| format!("\"{l}\""))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        ),
        // Guarded: `maxItems` reached.
        (
            json!({"type": "array", "uniqueItems": true, "maxItems": 2, "items": {"enum": letters}}),
            r#"["m","a""#.to_string(),
        ),
    ];
    for (schema, text) in cases {
        let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
        let mask = walk_accepting(&mut c, &text);
        for t in [",", "1,", "},{", "],["] {
            assert!(!bit(&mask, id(t)), "{t} after {text}");
        }
        assert!(bit(&mask, id("]")), "] after {text}");
    }
    // Before that, a used value cannot start again where it is the only continuation.
    let schema = json!({"type": "array", "uniqueItems": true, "items": {"enum": letters}});
    let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
    for b in br#"["a",""# {
        c.advance(*b as u32 + 1).unwrap();
    }
    let mask = check_mask(&mut c, br#"["a",""#);
    assert!(!bit(&mask, id("a")) && bit(&mask, id("b")));
}

/// Items of the large finite domains above, with several spellings each.
const FINITE_POOL: &[&str] = &[
    r#""a""#,
    r#""a/""#,
    r#""a\/""#,
    "1",
    "1.0",
    "1.00",
    "2.5",
    r#"{"a":1,"b":2}"#,
    r#"{"b":2,"a":1}"#,
    "[1,2]",
    "[1.0,2]",
    "null",
    "true",
    "false",
    r#""k""#,
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    /// Random arrays over a large enum, in random spellings: accepted exactly when the values
    /// are distinct, masks agreeing with `advance` at every byte and never a dead end.
    #[test]
    fn large_enum_arrays_accepted_iff_distinct(
        picks in proptest::collection::vec(0..FINITE_POOL.len(), 0..5),
    ) {
        let text = format!(
            "[{}]",
            picks.iter().map(|&i| FINITE_POOL[i]).collect::<Vec<_>>().join(",")
        );
        let parsed: Vec<Value> = picks
            .iter()
            .map(|&i| serde_json::from_str(FINITE_POOL[i]).unwrap())
            .collect();
        let unique = parsed
            .iter()
            .enumerate()
            .all(|(x, a)| parsed[x + 1..].iter().all(|b| !same(a, b)));
        prop_assert_eq!(accepts(&large_enum(), &text), unique, "{}", text);
        let vocab = value_vocab();
        let mut c = from_json_schema(&large_enum(), &vocab, &JsonOptions::default()).unwrap();
        prop_assert_eq!(walk_refuses(&mut c, &text), !unique, "{}", text);
    }

    /// Random walks over the masks of finite domains (the large enum, with counts): masks
    /// agree with `advance` at every step, no walk dead-ends, and every finished array has
    /// distinct items within its counts.
    #[test]
    fn finite_domain_walks_have_exact_masks(seed in 0u64..1 << 32, which in 0usize..2) {
        let vocab = value_vocab();
        let mut schema = large_enum();
        if which == 1 {
            schema["minItems"] = json!(2);
            schema["maxItems"] = json!(4);
        }
        let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let preferred = preferred_tokens(&vocab, b"1a\",[]{}:.e", true);
        let walk = random_walk(&mut c, &mut rng, &preferred, 4, 60);
        if walk.ended {
            let out = &walk.out;
            let v: Vec<Value> = serde_json::from_slice(out).expect("JSON array");
            for (x, a) in v.iter().enumerate() {
                for b in &v[x + 1..] {
                    prop_assert!(!same(a, b), "{}", String::from_utf8_lossy(out));
                }
            }
            if which == 1 {
                prop_assert!((2..=4).contains(&v.len()), "{}", String::from_utf8_lossy(out));
            }
        }
    }
}
