//! Properties of every constraint kind on random grammars and random walks: a token is in the
//! mask exactly when `advance` accepts it, an incomplete output always has an allowed token,
//! rollback restores the mask, and finished outputs are sentences (checked by independent
//! means where one exists: regex-automata's matcher, serde_json's parser).

mod common;

use std::sync::Arc;

use nextok_constraints::{
    apply_mask, compile_gbnf, from_json_schema, json_any, Constraint, Error, GrammarConstraint,
    JsonOptions, Limit, RegexConstraint, TokenVocab,
};
use proptest::prelude::*;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

fn bit(mask: &[u64], t: u32) -> bool {
    mask[t as usize / 64] >> (t % 64) & 1 == 1
}

/// Whether `e` is the work limit (`Limits::max_mask_work`): a random grammar can be ambiguous
/// enough to reach it (the fuzzer found one of two rules), and then the typed error is the
/// right answer and the walk ends there. Any other error is a failure.
fn over_the_work_limit<T>(r: &Result<T, Error>) -> bool {
    match r {
        Err(Error::LimitExceeded { limit, .. }) => *limit == Limit::MaskWork,
        _ => false,
    }
}

/// Walks `c` with random logits for up to `steps` tokens, checking the invariants at every
/// step, and returns the bytes produced and whether an end token was chosen. A walk that
/// reaches the work limit ends there, unfinished.
fn walk(c: &mut dyn Constraint, rng: &mut ChaCha8Rng, steps: usize) -> (Vec<u8>, bool) {
    let vocab: Arc<TokenVocab> = Arc::clone(c.vocab());
    let n = vocab.len() as u32;
    let mut mask = vocab.empty_mask();
    let mut out = Vec::new();
    let mut history: Vec<Vec<u64>> = Vec::new();
    for _ in 0..steps {
        let filled = c.fill_mask(&mut mask);
        if over_the_work_limit(&filled) {
            return (out, false);
        }
        filled.unwrap();
        // Mask bit == advance succeeds, for every token.
        for t in 0..n {
            let advanced = c.advance(t);
            if over_the_work_limit(&advanced) {
                return (out, false);
            }
            let ok = advanced.is_ok();
            assert_eq!(
                ok,
                bit(&mask, t),
                "token {t} ({:?}) after {:?}",
                vocab.token_bytes(t),
                String::from_utf8_lossy(&out)
            );
            if ok {
                c.rollback(1).unwrap();
            }
        }
        let eos_allowed = vocab.eos_tokens().iter().all(|&t| bit(&mask, t));
        assert_eq!(eos_allowed, c.is_complete());
        assert!(
            mask.iter().any(|&w| w != 0),
            "dead end after {:?}",
            String::from_utf8_lossy(&out)
        );
        // Random logits, masked, greedy: the token the engine would pick.
        let mut logits: Vec<f32> = (0..n)
            .map(|_| (rng.next_u32() % 10_000) as f32 / 1000.0)
            .collect();
        apply_mask(&mut logits, &mask);
        let t = (0..n)
            .max_by(|&a, &b| logits[a as usize].total_cmp(&logits[b as usize]))
            .unwrap();
        assert!(logits[t as usize].is_finite());
        history.push(mask.clone());
        let advanced = c.advance(t);
        if over_the_work_limit(&advanced) {
            return (out, false);
        }
        advanced.unwrap();
        if vocab.is_eos(t) {
            return (out, true);
        }
        out.extend_from_slice(vocab.token_bytes(t).unwrap());
    }
    // Rolling back restores earlier masks exactly.
    let k = history.len().min(3);
    c.rollback(k).unwrap();
    let filled = c.fill_mask(&mut mask);
    if over_the_work_limit(&filled) {
        return (out, false);
    }
    filled.unwrap();
    assert_eq!(&mask, &history[history.len() - k]);
    (out, false)
}

/// A random GBNF grammar over a few rules, with recursion (left recursion included).
fn random_gbnf(rng: &mut ChaCha8Rng) -> String {
    let pieces = [
        "\"a\"", "\"b\"", "\"ab\"", "\"{\"", "\"}\"", "[a-c]", "[^a]", "\"é\"", "\"\"", ".",
    ];
    let nrules = 1 + rng.next_u32() % 4;
    let mut text = String::new();
    for r in 0..nrules {
        let name = if r == 0 {
            "root".to_string()
        } else {
            format!("r{r}")
        };
        let nalts = 1 + rng.next_u32() % 3;
        let mut alts = Vec::new();
        for _ in 0..nalts {
            let len = rng.next_u32() % 4;
            let mut items = Vec::new();
            for _ in 0..len {
                let k = rng.next_u32() % 14;
                let item = if k < 10 {
                    pieces[k as usize].to_string()
                } else {
                    let target = rng.next_u32() % nrules;
                    if target == 0 {
                        "root".to_string()
                    } else {
                        format!("r{target}")
                    }
                };
                let suffix = ["", "", "", "*", "+", "?", "{1,2}"][(rng.next_u32() % 7) as usize];
                items.push(format!("{item}{suffix}"));
            }
            // Guarantee at least one alternative of rule 0 is terminal-only so it is productive
            // more often.
            alts.push(if items.is_empty() {
                "\"a\"".to_string()
            } else {
                items.join(" ")
            });
        }
        text.push_str(&format!("{name} ::= {}\n", alts.join(" | ")));
    }
    text
}

#[test]
fn a_random_grammar_past_the_work_limit_ends_its_walk() {
    // CI's proptest run found this seed (2026-12-01): its grammar is ambiguous enough that a mask
    // passes `max_mask_work`, and the walk used to unwrap the typed error. It must end the walk
    // (the limit's job), and the grammar must really reach the limit for this test to mean it.
    let seed = 4236246813260889168;
    let vocab = common::synthetic_vocab();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let text = random_gbnf(&mut rng);
    let g = compile_gbnf(&text).unwrap();
    let mut c = GrammarConstraint::new(Arc::clone(&g), &vocab);
    let (out, finished) = walk(&mut c, &mut rng, 12);
    assert!(!finished, "{text}: finished with {out:?}");
    // The same grammar, walked by hand along the first allowed token, meets the limit's error
    // (and no other) within 12 tokens.
    let mut c = GrammarConstraint::new(g, &vocab);
    let mut mask = vocab.empty_mask();
    let mut hit = false;
    'walk: for _ in 0..12 {
        let r = c.fill_mask(&mut mask);
        if over_the_work_limit(&r) {
            hit = true;
            break;
        }
        r.unwrap();
        let Some(t) = (0..vocab.len() as u32).find(|&t| bit(&mask, t) && !vocab.is_eos(t)) else {
            break;
        };
        for u in 0..vocab.len() as u32 {
            let a = c.advance(u);
            if over_the_work_limit(&a) {
                hit = true;
                break 'walk;
            }
            if a.is_ok() {
                c.rollback(1).unwrap();
            }
        }
        let a = c.advance(t);
        if over_the_work_limit(&a) {
            hit = true;
            break;
        }
        a.unwrap();
    }
    assert!(hit, "{text}: never reached the work limit");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, .. ProptestConfig::default() })]

    #[test]
    fn random_grammars_masks_match_advance(seed in any::<u64>()) {
        let vocab = common::synthetic_vocab();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let text = random_gbnf(&mut rng);
        let Ok(g) = compile_gbnf(&text) else { return Ok(()) };
        let mut c = GrammarConstraint::new(Arc::clone(&g), &vocab);
        let (out, finished) = walk(&mut c, &mut rng, 12);
        if finished {
            prop_assert!(g.recognizes(&out), "grammar {text} produced {:?}", String::from_utf8_lossy(&out));
        }
    }

    #[test]
    fn regex_constraint_agrees_with_regex_automata(seed in any::<u64>()) {
        let patterns = ["[a-c]+b", "(ab|é)*", "a{2,4}[0-9]?", "[^a]*a", "(FRAUD|OK)", "\\d+(\\.\\d+)?", "\"([^\"\\\\]|\\\\.)*\""];
        let vocab = common::synthetic_vocab();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let pat = patterns[(rng.next_u32() as usize) % patterns.len()];
        let mut c = RegexConstraint::from_regex(pat, &vocab).unwrap();
        let (out, finished) = walk(&mut c, &mut rng, 10);
        let re = regex_automata::meta::Regex::new(&format!("^(?:{pat})$")).unwrap();
        if finished {
            prop_assert!(re.is_match(&out[..]), "{pat} produced {:?}", String::from_utf8_lossy(&out));
        }
        // Completeness at each byte boundary agrees with the reference matcher too.
        let mut c2 = RegexConstraint::from_regex(pat, &vocab).unwrap();
        let mut ok = true;
        for &b in &out {
            ok = ok && c2.advance(b as u32 + 1).is_ok();
        }
        prop_assert!(ok);
        prop_assert_eq!(c2.is_complete(), re.is_match(&out[..]));
    }

    #[test]
    fn json_walks_parse(seed in any::<u64>(), ws in 0usize..3) {
        let vocab = common::synthetic_vocab();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut c = json_any(&vocab, &JsonOptions::default().with_max_whitespace(ws)).unwrap();
        let (out, finished) = walk(&mut c, &mut rng, 25);
        if finished {
            // JSON allows any exponent; serde_json refuses numbers beyond f64's range.
            let parsed = serde_json::from_slice::<serde_json::Value>(&out);
            prop_assert!(
                parsed.is_ok() || parsed.unwrap_err().to_string().contains("out of range"),
                "{:?}",
                String::from_utf8_lossy(&out)
            );
        }
    }

    #[test]
    fn schema_walks_validate(seed in any::<u64>()) {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 3},
                "age": {"type": "integer", "minimum": 0, "maximum": 120},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}
            },
            "required": ["name"],
            "additionalProperties": false
        });
        let vocab = common::synthetic_vocab();
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
        let (out, finished) = walk(&mut c, &mut rng, 30);
        if finished {
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            let o = v.as_object().unwrap();
            prop_assert!(o.keys().all(|k| ["name", "age", "tags"].contains(&k.as_str())));
            prop_assert!(o["name"].as_str().unwrap().chars().count() <= 3);
            if let Some(a) = o.get("age") {
                let a = a.as_f64().unwrap();
                prop_assert!((0.0..=120.0).contains(&a) && a.fract() == 0.0);
            }
            if let Some(t) = o.get("tags") {
                let t = t.as_array().unwrap();
                prop_assert!(t.len() <= 2 && t.iter().all(|x| x == "a" || x == "b"));
            }
        }
    }
}

#[test]
fn tokens_crossing_boundaries_and_split_utf8() {
    let vocab = common::synthetic_vocab();
    let id = |s: &[u8]| {
        (0..vocab.len() as u32)
            .find(|&t| vocab.token_bytes(t) == Some(s))
            .unwrap()
    };
    let schema = serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"], "additionalProperties": false});
    let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
    // `{"` then `name` then `":"` then the emoji split in two tokens, then `"}`.
    let emoji = "\u{1F600}".as_bytes();
    for t in [
        id(b"{\""),
        id(b"name"),
        id(b"\":\""),
        id(&emoji[..2]),
        id(&emoji[2..]),
        id(b"\"}"),
    ] {
        c.advance(t).unwrap();
    }
    assert!(c.is_complete());
    // Half an emoji cannot be closed.
    let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
    for t in [id(b"{\""), id(b"name"), id(b"\":\""), id(&emoji[..2])] {
        c.advance(t).unwrap();
    }
    assert!(c.advance(id(b"\"}")).is_err());
}

#[test]
fn property_order_free_by_default_fixed_on_request() {
    let vocab = common::synthetic_vocab();
    let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}});
    let g_free = nextok_constraints::compile_json_schema(&schema, &JsonOptions::default()).unwrap();
    let g_fixed = nextok_constraints::compile_json_schema(
        &schema,
        &JsonOptions::default().with_fixed_property_order(true),
    )
    .unwrap();
    assert!(g_free.recognizes(br#"{"b":1,"a":2}"#) && g_free.recognizes(br#"{"a":1,"b":2}"#));
    assert!(!g_free.recognizes(br#"{"a":1,"a":2}"#));
    assert!(g_fixed.recognizes(br#"{"a":1,"b":2}"#) && !g_fixed.recognizes(br#"{"b":1,"a":2}"#));
    let _ = vocab;
}

#[test]
fn whitespace_is_bounded() {
    let g = nextok_constraints::compile_json_schema(
        &serde_json::json!({"type": "array"}),
        &JsonOptions::default().with_max_whitespace(2),
    )
    .unwrap();
    assert!(g.recognizes(b"[ 1,  2 ]"));
    assert!(!g.recognizes(b"[   1]"));
    let compact = nextok_constraints::compile_json_schema(
        &serde_json::json!({"type": "array"}),
        &JsonOptions::default(),
    )
    .unwrap();
    assert!(!compact.recognizes(b"[ 1]") && compact.recognizes(b"[1,2]"));
}

#[test]
fn unsupported_keyword_is_named() {
    let e = nextok_constraints::compile_json_schema(
        &serde_json::json!({"type": "array", "uniqueItems": true,
                            "items": {"type": "integer", "maximum": 12}}),
        &JsonOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(e, nextok_constraints::Error::UnsupportedKeyword { ref keyword, .. } if keyword == "uniqueItems (integers bounded so that some prefix has finitely many completions)"),
        "{e}"
    );
}

#[test]
fn forced_tokens_follow_a_single_path() {
    let vocab = Arc::new(
        TokenVocab::new(
            vec![
                b"<e>".to_vec(),
                b"{\"".to_vec(),
                b"k".to_vec(),
                b"\":".to_vec(),
                b"1".to_vec(),
                b"}".to_vec(),
            ],
            &[0],
        )
        .unwrap(),
    );
    let schema = serde_json::json!({"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"], "additionalProperties": false});
    let mut c = from_json_schema(&schema, &vocab, &JsonOptions::default()).unwrap();
    // Only one tokenization exists here, so the whole document and the end token are forced.
    assert_eq!(c.forced_tokens(20).unwrap(), vec![1, 2, 3, 4, 5, 0]);
    assert_eq!(c.num_tokens(), 0);
}

#[test]
fn all_of_with_additional_properties_is_exact() {
    let compile = |v: serde_json::Value| {
        nextok_constraints::compile_json_schema(&v, &JsonOptions::default()).unwrap()
    };
    let g = compile(
        serde_json::json!({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"additionalProperties": false}]}),
    );
    assert!(g.recognizes(b"{}") && !g.recognizes(br#"{"a":1}"#));
    let g = compile(serde_json::json!({"allOf": [
        {"properties": {"a": {"type": "integer"}}, "additionalProperties": false},
        {"properties": {"a": {"minimum": 2}, "b": {}}}
    ]}));
    assert!(g.recognizes(br#"{"a":3}"#));
    assert!(
        !g.recognizes(br#"{"a":1}"#)
            && !g.recognizes(br#"{"b":1}"#)
            && !g.recognizes(br#"{"a":2.5}"#)
    );
}

#[test]
fn unevaluated_properties_never_see_a_siblings_evaluations() {
    // Under allOf, the first branch's unevaluatedProperties sees only its own anyOf: "b" is
    // unevaluated there, so {"a":1,"b":2} is invalid. We must refuse it or refuse the schema.
    let schema = serde_json::json!({"allOf": [
        {"anyOf": [{"properties": {"a": {}}}], "unevaluatedProperties": false},
        {"properties": {"b": {}}}
    ]});
    if let Ok(g) = nextok_constraints::compile_json_schema(&schema, &JsonOptions::default()) {
        assert!(!g.recognizes(br#"{"a":1,"b":2}"#));
    }
    // Beside its own anyOf, it sees the schema's `properties` and the matching branch's.
    let own = serde_json::json!({"properties": {"a": {}}, "anyOf": [
        {"properties": {"k": {"const": 1}, "b": {}}, "required": ["k"]},
        {"properties": {"k": {"const": 2}, "c": {}}, "required": ["k"]}
    ], "unevaluatedProperties": false});
    let g = nextok_constraints::compile_json_schema(&own, &JsonOptions::default()).unwrap();
    assert!(
        g.recognizes(br#"{"a":1,"k":1,"b":2}"#)
            && g.recognizes(br#"{"k":2,"c":1}"#)
            && !g.recognizes(br#"{"k":1,"c":1}"#)
            && !g.recognizes(br#"{"k":2,"d":1}"#)
    );
    // Branches that may both match see each other's evaluations ({"b":2,"c":3} is valid):
    // compiled branch by branch they would refuse it, so the schema is refused by name.
    let overlapping = serde_json::json!({"properties": {"a": {}}, "anyOf": [
        {"properties": {"b": {}}}, {"properties": {"c": {}}}
    ], "unevaluatedProperties": false});
    match nextok_constraints::compile_json_schema(&overlapping, &JsonOptions::default()) {
        Err(nextok_constraints::Error::UnsupportedKeyword { keyword, .. }) => {
            assert!(keyword.starts_with("unevaluatedProperties"), "{keyword}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn max_contains_counts_matching_items() {
    let schema = serde_json::json!({"contains": {"const": 1}, "maxContains": 2});
    let g = nextok_constraints::compile_json_schema(&schema, &JsonOptions::default()).unwrap();
    assert!(g.recognizes(b"[1,1]") && g.recognizes(br#"[2,"a",1.0,{}]"#) && g.recognizes(b"3"));
    assert!(
        !g.recognizes(b"[1,1,1]")
            && !g.recognizes(b"[1.0,1,1.00]")
            && !g.recognizes(b"[]")
            && !g.recognizes(b"[2]")
    );
}
