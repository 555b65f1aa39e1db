//! Object members in any order, however many named properties (issue #17): past
//! `JsonOptions::max_free_order_properties` an object is one loop over its members whose keys
//! seen and count the parser checks at run time. These tests compare it with an independent
//! validator written here (and with the bit-mask path, which must accept the same objects),
//! check that masks agree with `advance` at every step and never lead into a dead end, and
//! check that the grammar grows linearly with the names.

mod common;

use std::sync::Arc;

use common::{assert_rollback_restores, preferred_tokens, random_walk, walk_refuses};
use nextok_constraints::{compile_json_schema, from_json_schema, Error, JsonOptions, TokenVocab};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::{json, Value};

/// Options that check every object's members at run time, however few its names.
fn tracked() -> JsonOptions {
    JsonOptions::default().with_max_free_order_properties(0)
}

fn accepts(schema: &Value, opts: &JsonOptions, text: &str) -> bool {
    compile_json_schema(schema, opts)
        .expect("compiles")
        .recognizes(text.as_bytes())
}

/// A JSON value with every object's members in order, repeats kept (serde_json keeps the last
/// of repeated keys, which would hide them).
#[derive(Clone, Debug, PartialEq)]
enum J {
    Obj(Vec<(String, J)>),
    Arr(Vec<J>),
    Leaf(Value),
}

/// Parses `text` into a [`J`] (compact JSON only, as the tests write it).
fn parse(text: &[u8]) -> Option<J> {
    fn string(t: &[u8], i: &mut usize) -> Option<String> {
        let start = *i;
        *i += 1;
        while *t.get(*i)? != b'"' {
            *i += if t[*i] == b'\\' { 2 } else { 1 };
        }
        *i += 1;
        serde_json::from_slice(&t[start..*i]).ok()
    }
    fn value(t: &[u8], i: &mut usize) -> Option<J> {
        match *t.get(*i)? {
            b'{' => {
                *i += 1;
                let mut members = Vec::new();
                if *t.get(*i)? == b'}' {
                    *i += 1;
                    return Some(J::Obj(members));
                }
                loop {
                    let k = string(t, i)?;
                    (*t.get(*i)? == b':').then_some(())?;
                    *i += 1;
                    members.push((k, value(t, i)?));
                    match *t.get(*i)? {
                        b',' => *i += 1,
                        b'}' => {
                            *i += 1;
                            return Some(J::Obj(members));
                        }
                        _ => return None,
                    }
                }
            }
            b'[' => {
                *i += 1;
                let mut items = Vec::new();
                if *t.get(*i)? == b']' {
                    *i += 1;
                    return Some(J::Arr(items));
                }
                loop {
                    items.push(value(t, i)?);
                    match *t.get(*i)? {
                        b',' => *i += 1,
                        b']' => {
                            *i += 1;
                            return Some(J::Arr(items));
                        }
                        _ => return None,
                    }
                }
            }
            b'"' => string(t, i).map(|s| J::Leaf(Value::String(s))),
            _ => {
                let start = *i;
                while *i < t.len() && !b",}]".contains(&t[*i]) {
                    *i += 1;
                }
                serde_json::from_slice(&t[start..*i]).ok().map(J::Leaf)
            }
        }
    }
    let mut i = 0;
    let v = value(text, &mut i)?;
    (i == text.len()).then_some(v)
}

/// The object schemas of these tests, as plain data for the validator below.
struct ObjectRule {
    /// Named properties and the kinds of their values.
    props: Vec<(&'static str, Kind)>,
    required: Vec<&'static str>,
    /// The kind of additional members' values (`None`: no additional members).
    additional: Option<Kind>,
    min: usize,
    max: Option<usize>,
}

/// The kinds of values in these schemas.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Int,
    Str,
    Bool,
    /// The nested object `{"a": integer (required), "ab": integer}`, closed, checked by the
    /// same rules.
    Inner,
}
use Kind::{Bool, Inner, Int, Str};

impl Kind {
    fn check(self, v: &J) -> bool {
        match self {
            // JSON Schema's integers: numbers without a fraction, `1.0` and `1e2` included.
            Int => {
                matches!(v, J::Leaf(Value::Number(n)) if n.as_f64().is_some_and(|x| x.fract() == 0.0))
            }
            Str => matches!(v, J::Leaf(Value::String(_))),
            Bool => matches!(v, J::Leaf(Value::Bool(_))),
            Inner => inner_rule().check(v),
        }
    }

    fn schema(self) -> Value {
        match self {
            Int => json!({"type": "integer"}),
            Str => json!({"type": "string"}),
            Bool => json!({"type": "boolean"}),
            Inner => json!({"type": "object",
                            "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
                            "required": ["a"], "additionalProperties": false}),
        }
    }

    /// A value of this kind (with a string that holds a comma, a quote and a brace).
    fn sample(self) -> &'static str {
        match self {
            Int => "7",
            Str => r#""x,\"}""#,
            Bool => "true",
            Inner => r#"{"ab":1,"a":2}"#,
        }
    }
}

fn inner_rule() -> ObjectRule {
    ObjectRule {
        props: vec![("a", Int), ("ab", Int)],
        required: vec!["a"],
        additional: None,
        min: 0,
        max: None,
    }
}

impl ObjectRule {
    /// JSON Schema's verdict, with named keys at most once (a repeated named key is refused;
    /// a repeated additional key is not, as neither object path refuses it).
    fn check(&self, v: &J) -> bool {
        let J::Obj(members) = v else {
            return false;
        };
        let mut seen: Vec<&str> = Vec::new();
        for (k, val) in members {
            match self.props.iter().find(|(n, _)| n == k) {
                Some((name, f)) => {
                    if seen.contains(name) || !f.check(val) {
                        return false;
                    }
                    seen.push(name);
                }
                None => match self.additional {
                    Some(f) if f.check(val) => {}
                    _ => return false,
                },
            }
        }
        self.required.iter().all(|r| seen.contains(r))
            && members.len() >= self.min
            && self.max.is_none_or(|m| members.len() <= m)
    }

    fn schema(&self) -> Value {
        let mut props = serde_json::Map::new();
        for (n, f) in &self.props {
            props.insert(n.to_string(), f.schema());
        }
        let mut s = json!({"type": "object", "properties": props, "required": self.required,
                           "minProperties": self.min});
        s["additionalProperties"] = match self.additional {
            None => json!(false),
            Some(f) => f.schema(),
        };
        if let Some(m) = self.max {
            s["maxProperties"] = json!(m);
        }
        s
    }
}

/// Keys that share prefixes (`a`, `ab`, `abc`), one with a slash (spelled `/` or `\/`), and
/// ten in all, so that the default options track them at run time too.
fn ten() -> ObjectRule {
    ObjectRule {
        props: vec![
            ("a", Int),
            ("ab", Str),
            ("abc", Bool),
            ("b", Inner),
            ("b/c", Int),
            ("c", Str),
            ("d", Int),
            ("e", Bool),
            ("f", Int),
            ("g", Str),
        ],
        required: vec!["a", "b", "b/c"],
        additional: Some(Int),
        min: 0,
        max: None,
    }
}

fn spell_key(k: &str, escaped: bool) -> String {
    if escaped {
        format!("\"{}\"", k.replace('/', "\\/"))
    } else {
        format!("\"{k}\"")
    }
}

fn object_text(members: &[(String, String)]) -> String {
    let inner: Vec<String> = members.iter().map(|(k, v)| format!("{k}:{v}")).collect();
    format!("{{{}}}", inner.join(","))
}

#[test]
fn ten_named_properties_in_any_order() {
    let rule = ten();
    let schema = rule.schema();
    let g = compile_json_schema(&schema, &JsonOptions::default()).expect("compiles");
    let mut rng = ChaCha8Rng::seed_from_u64(17);
    let (mut valid, mut invalid) = (0, 0);
    for round in 0..300u32 {
        // A random subset of the names (the required ones always), shuffled.
        let mut members: Vec<(&str, Kind)> = rule
            .props
            .iter()
            .copied()
            .filter(|(n, _)| rule.required.contains(n) || rng.next_u32() % 2 == 0)
            .collect();
        for i in (1..members.len()).rev() {
            members.swap(i, rng.next_u32() as usize % (i + 1));
        }
        let mut text: Vec<(String, String)> = members
            .iter()
            .map(|(n, f)| (spell_key(n, rng.next_u32() % 2 == 0), f.sample().into()))
            .collect();
        // Every fourth round breaks it: a repeated key (spelled another way), a required key
        // left out, a value of the wrong kind, or an additional key of the wrong kind.
        match round % 16 {
            3 => {
                let (n, f) = members[rng.next_u32() as usize % members.len()];
                let at = rng.next_u32() as usize % (text.len() + 1);
                text.insert(at, (spell_key(n, true), f.sample().into()));
            }
            7 => {
                let r = rule.required[round as usize % 3];
                text.retain(|(k, _)| k != &spell_key(r, false) && k != &spell_key(r, true));
            }
            11 => {
                let i = rng.next_u32() as usize % text.len();
                text[i].1 = "null".into();
            }
            15 => text.push(("\"zz\"".into(), "\"no\"".into())),
            _ => {
                if round % 2 == 0 {
                    let at = rng.next_u32() as usize % (text.len() + 1);
                    text.insert(at, ("\"zz\"".into(), "5".into()));
                }
            }
        }
        let t = object_text(&text);
        let expected = rule.check(&parse(t.as_bytes()).expect("test JSON"));
        assert_eq!(g.recognizes(t.as_bytes()), expected, "{t}");
        if expected {
            valid += 1;
        } else {
            invalid += 1;
        }
    }
    // Both outcomes are tested often.
    assert!(
        valid > 150 && invalid > 60,
        "{valid} valid, {invalid} invalid"
    );
}

#[test]
fn repeats_missing_keys_and_prefixes_at_the_edges() {
    let schema = ten().schema();
    let opts = JsonOptions::default();
    let all =
        r#""a":1,"ab":"s","abc":true,"b":{"a":1},"b/c":2,"c":"","d":3,"e":false,"f":4,"g":"""#;
    assert!(accepts(&schema, &opts, &format!("{{{all}}}")));
    // Reversed, and with additional keys between.
    let reversed = r#"{"g":"","f":4,"zz":1,"e":false,"d":3,"c":"","b\/c":2,"b":{"a":1},"abc":true,"y":2,"ab":"s","a":1}"#;
    assert!(accepts(&schema, &opts, reversed));
    for bad in [
        // Repeats: the same key, prefix keys, and `b/c` spelled with an escape.
        r#"{"a":1,"b":{"a":1},"b/c":2,"a":2}"#,
        r#"{"a":1,"ab":"x","b":{"a":1},"b/c":2,"ab":"y"}"#,
        r#"{"a":1,"b":{"a":1},"b/c":2,"b\/c":3}"#,
        // A required key missing, at the end and alone.
        r#"{"a":1,"b":{"a":1}}"#,
        "{}",
        // A nested object checked by its own rules: its required key, its repeats.
        r#"{"a":1,"b":{"ab":1},"b/c":2}"#,
        r#"{"a":1,"b":{"a":1,"a":2},"b/c":2}"#,
        // A prefix of a key is not the key.
        r#"{"a":1,"b":{"a":1},"b/":2}"#,
    ] {
        assert!(!accepts(&schema, &opts, bad), "{bad}");
    }
    // The same key in two different objects is fine.
    assert!(accepts(
        &schema,
        &opts,
        r#"{"b":{"ab":2,"a":1},"a":1,"b/c":2,"ab":"q"}"#
    ));
}

#[test]
fn whitespace_and_alternative_objects_keep_their_own_members() {
    let schema = ten().schema();
    let ws = JsonOptions::default().with_max_whitespace(2);
    assert!(accepts(
        &schema,
        &ws,
        "{ \"b\" : {\"a\":1} ,\n\"b\\/c\": 2,\t\"a\"  :1 }"
    ));
    assert!(!accepts(
        &schema,
        &ws,
        "{ \"b\" : {\"a\":1} , \"b/c\": 2, \"a\":1 , \"b\" :{\"a\":1}}"
    ));
    // anyOf of two closed objects of ten names each: the members of one object are checked
    // against its own names, so mixing the two is refused and each alone is accepted.
    let closed = |prefix: &str| {
        let props: serde_json::Map<String, Value> = (0..10)
            .map(|i| (format!("{prefix}{i}"), json!({"type": "integer"})))
            .collect();
        json!({"type": "object", "properties": props, "additionalProperties": false,
               "required": [format!("{prefix}0")]})
    };
    let s = json!({"anyOf": [closed("p"), closed("q")]});
    let opts = JsonOptions::default();
    assert!(accepts(&s, &opts, r#"{"p3":1,"p0":2}"#));
    assert!(accepts(&s, &opts, r#"{"q9":1,"q0":2}"#));
    assert!(!accepts(&s, &opts, r#"{"p3":1,"q0":2}"#));
    assert!(!accepts(&s, &opts, r#"{"p0":1,"p3":1,"p0":2}"#));
    // The same schema as an array's items: every object is checked on its own.
    let arr = json!({"type": "array", "items": closed("p")});
    assert!(accepts(&arr, &opts, r#"[{"p1":1,"p0":1},{"p1":2,"p0":2}]"#));
    assert!(!accepts(
        &arr,
        &opts,
        r#"[{"p1":1,"p0":1},{"p1":2,"p1":2,"p0":2}]"#
    ));
}

#[test]
fn counts_and_dependent_required_are_enforced_at_run_time() {
    let names: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
    let props: serde_json::Map<String, Value> = names
        .iter()
        .map(|n| (n.clone(), json!({"type": "integer"})))
        .collect();
    let obj = |n: usize| {
        let inner: Vec<String> = (0..n).map(|i| format!("\"p{}\":{i}", 11 - i)).collect();
        format!("{{{}}}", inner.join(","))
    };
    // maxProperties 3 with `p0` required: after two other keys only `p0` may follow.
    let s = json!({"type": "object", "properties": props, "required": ["p0"],
                   "maxProperties": 3, "minProperties": 2, "additionalProperties": false});
    let opts = JsonOptions::default();
    assert!(accepts(&s, &opts, r#"{"p1":1,"p0":0}"#));
    assert!(accepts(&s, &opts, r#"{"p1":1,"p2":2,"p0":0}"#));
    assert!(!accepts(&s, &opts, r#"{"p0":0}"#));
    assert!(!accepts(&s, &opts, r#"{"p1":1,"p2":2,"p3":3}"#));
    assert!(!accepts(&s, &opts, r#"{"p1":1,"p2":2,"p0":0,"p3":3}"#));
    // Counts above 64 (refused by the bit-mask and ordered paths) compile here.
    let s = json!({"type": "object", "properties": props, "minProperties": 70,
                   "additionalProperties": {"type": "integer"}});
    let many: Vec<String> = (0..70).map(|i| format!("\"k{i}\":{i}")).collect();
    assert!(accepts(&s, &opts, &format!("{{{}}}", many.join(","))));
    assert!(!accepts(&s, &opts, &format!("{{{}}}", many[1..].join(","))));
    // dependentRequired: p1 needs p2 and p3.
    let s = json!({"type": "object", "properties": props,
                   "dependentRequired": {"p1": ["p2", "p3"]}});
    assert!(accepts(&s, &opts, r#"{"p3":1,"p1":1,"p2":1}"#));
    assert!(accepts(&s, &opts, &obj(5)));
    assert!(!accepts(&s, &opts, r#"{"p3":1,"p1":1}"#));
    // A required key whose value cannot be written makes the object impossible; an
    // optional one is only left out.
    let s = json!({"type": "object", "properties": props, "required": ["p4"],
                   "allOf": [{"properties": {"p4": {"type": "string"}}}]});
    assert!(matches!(
        compile_json_schema(&s, &opts),
        Err(Error::EmptyLanguage)
    ));
    let s = json!({"type": "object", "properties": props,
                   "allOf": [{"properties": {"p4": {"type": "string"}}}]});
    assert!(accepts(&s, &opts, r#"{"p5":1}"#) && !accepts(&s, &opts, r#"{"p4":1}"#));
    // With both counts and dependentRequired past the bit-mask limit: refused by name.
    let s = json!({"type": "object", "properties": props, "maxProperties": 4,
                   "dependentRequired": {"p1": ["p2"]}});
    match compile_json_schema(&s, &opts) {
        Err(Error::UnsupportedKeyword { keyword, .. }) => {
            assert!(keyword.starts_with("dependentRequired"), "{keyword}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn grammar_grows_linearly_with_the_names() {
    let size = |n: usize| {
        let props: serde_json::Map<String, Value> = (0..n)
            .map(|i| (format!("name{i}"), json!({"type": "integer"})))
            .collect();
        let s = json!({"type": "object", "properties": props, "required": ["name0"]});
        let g = compile_json_schema(&s, &JsonOptions::default()).expect("compiles");
        // All in reverse order, which the schema order would refuse.
        let inner: Vec<String> = (0..n).rev().map(|i| format!("\"name{i}\":{i}")).collect();
        assert!(g.recognizes(format!("{{{}}}", inner.join(",")).as_bytes()));
        g.size().0
    };
    let (a, b) = (size(100), size(400));
    // Four times the names, about four times the grammar (not 2^300 times).
    assert!(b < 5 * a, "{a} then {b}");
}

/// Single bytes, then pieces that cross key and member boundaries.
fn vocab() -> Arc<TokenVocab> {
    common::byte_vocab(&[
        "{\"",
        "\":",
        "\":1",
        ",\"",
        "\"a\"",
        "\"a\":",
        "\"ab",
        "ab\":",
        "b\":",
        "\"b",
        "\"a",
        "1,",
        "1}",
        "}",
        "},\"",
        "\"}",
        "true",
        "\"x",
        "\\/",
        "b\\/",
        "/c\":",
        "{\"a\":1}",
        "\"zz\":",
        ",\"a\":",
        "c\":",
        "\"c\":\"",
        "\"}}",
    ])
}

/// `text` without the whitespace outside strings.
fn strip_ws(text: &[u8]) -> Vec<u8> {
    let (mut out, mut in_string, mut escaped) = (Vec::new(), false, false);
    for &b in text {
        if in_string {
            in_string = escaped || b != b'"';
            escaped = !escaped && b == b'\\';
        } else if b == b'"' {
            in_string = true;
        } else if b" \t\n\r".contains(&b) {
            continue;
        }
        out.push(b);
    }
    out
}

#[test]
fn random_walks_have_exact_masks_and_end_valid() {
    let vocab = vocab();
    let small = ObjectRule {
        props: vec![("a", Int), ("ab", Int), ("b", Inner), ("b/c", Bool)],
        required: vec!["a", "b"],
        additional: None,
        min: 0,
        max: Some(3),
    };
    let open = ObjectRule {
        props: vec![("a", Int), ("ab", Str), ("c", Str)],
        required: vec!["c"],
        additional: Some(Int),
        min: 2,
        max: Some(4),
    };
    let cases = [
        (ten(), JsonOptions::default()),
        (ten(), JsonOptions::default().with_max_whitespace(1)),
        (small, tracked()),
        (open, tracked()),
    ];
    // Tokens the walk prefers, so that keys repeat and objects end often.
    let preferred = preferred_tokens(&vocab, b"abc1\",:{}/\\", true);
    let mut finished = 0;
    for (i, (rule, opts)) in cases.iter().enumerate() {
        let schema = rule.schema();
        for seed in 0..10u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed * 31 + i as u64);
            let mut c = from_json_schema(&schema, &vocab, opts).expect("compiles");
            let walk = random_walk(&mut c, &mut rng, &preferred, 8, 60);
            if walk.ended {
                finished += 1;
                let out = &walk.out;
                // The validator's parser reads compact JSON.
                let compact: Vec<u8> = serde_json::from_slice::<Value>(out)
                    .map(|_| strip_ws(out))
                    .expect("JSON");
                let v = parse(&compact).expect("JSON");
                assert!(rule.check(&v), "{}", String::from_utf8_lossy(out));
            }
            // Rolling back (the cached object states included) restores the masks.
            assert_rollback_restores(&mut c, &walk, 5);
        }
    }
    assert!(finished >= 8, "only {finished} walks finished");
}

/// `uniqueItems` over objects whose members are checked at run time: both kinds of run-time
/// check in one grammar (items compared as JSON values, members guarded at prediction).
#[test]
fn unique_items_of_objects_checked_at_run_time() {
    let schema = json!({
        "type": "array",
        "uniqueItems": true,
        "items": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "ab": {"type": "integer"}},
            "required": ["a"]
        }
    });
    let opts = tracked();
    for (text, want) in [
        (r#"[{"a":1,"ab":2},{"ab":3,"a":1}]"#, true),
        (r#"[{"a":1,"ab":2},{"ab":2,"a":1}]"#, false),
        (r#"[{"a":1},{"a":1.0}]"#, false),
        (r#"[{"a":1},{"a":1,"x":null}]"#, true),
        (r#"[{"a":1,"a":2}]"#, false),
        (r#"[{"ab":1}]"#, false),
    ] {
        assert_eq!(accepts(&schema, &opts, text), want, "{text}");
    }
    // Random walks: every mask bit equals `advance`, and finished outputs are arrays of
    // distinct objects, each with its required member.
    let vocab = vocab();
    let preferred = preferred_tokens(&vocab, b"ab1\",:{}[]", false);
    let mut finished = 0;
    for seed in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut c = from_json_schema(&schema, &vocab, &opts).expect("compiles");
        let walk = random_walk(&mut c, &mut rng, &preferred, 8, 50);
        if walk.ended {
            finished += 1;
            let v: Value = serde_json::from_slice(&walk.out).expect("JSON");
            let items = v.as_array().expect("an array");
            for (i, x) in items.iter().enumerate() {
                assert!(x.get("a").is_some_and(Value::is_i64), "{v}");
                assert!(!items[..i].contains(x), "a repeated item in {v}");
            }
        }
    }
    assert!(finished >= 3, "only {finished} walks finished");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    /// Random member lists over keys that share prefixes (named and additional), values of
    /// every kind, keys spelled two ways, under counts: the run-time path and the bit-mask
    /// path both accept exactly what the validator does, and byte by byte the masks agree with
    /// `advance` until the first refused byte.
    #[test]
    fn tracked_and_bit_mask_objects_agree_with_the_validator(
        members in proptest::collection::vec((0usize..6, 0u32..5, any::<bool>()), 0..7),
        variant in 0usize..3,
    ) {
        let keys = ["a", "ab", "b", "b/c", "abc", "x"];
        let rule = ObjectRule {
            props: vec![("a", Int), ("ab", Str), ("b", Inner), ("b/c", Bool)],
            required: if variant == 1 { vec![] } else { vec!["a", "b/c"] },
            additional: if variant == 2 { None } else { Some(Int) },
            min: if variant == 1 { 2 } else { 0 },
            max: if variant == 0 { None } else { Some(4) },
        };
        let kinds = [Int, Str, Bool, Inner];
        let text = object_text(
            &members
                .iter()
                .map(|&(k, v, esc)| {
                    let value = if v == 4 { "null" } else { kinds[v as usize].sample() };
                    (spell_key(keys[k], esc), value.to_string())
                })
                .collect::<Vec<_>>(),
        );
        let expected = rule.check(&parse(text.as_bytes()).expect("test JSON"));
        let schema = rule.schema();
        prop_assert_eq!(accepts(&schema, &tracked(), &text), expected, "tracked {}", text);
        prop_assert_eq!(
            accepts(&schema, &JsonOptions::default(), &text),
            expected,
            "bit masks {}",
            text
        );
        let vocab = vocab();
        let mut c = from_json_schema(&schema, &vocab, &tracked()).expect("compiles");
        prop_assert_eq!(walk_refuses(&mut c, &text), !expected, "{}", text);
    }
}
