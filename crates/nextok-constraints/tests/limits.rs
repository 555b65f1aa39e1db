//! Hostile constraints (issue #13, point 3): each input that once ran for minutes now either
//! compiles to a grammar whose work per mask and per token stays small, counted in work units
//! (`GrammarConstraint::last_work`, not wall-clock time), or is refused with a typed error that
//! names the limit.

use std::sync::Arc;

use nextok_constraints::{
    compile_gbnf, compile_gbnf_with_limits, compile_json_schema, Constraint, Error,
    GrammarConstraint, JsonOptions, Limit, Limits, TokenVocab,
};
use serde_json::json;

/// Every single byte, some words and digits runs, and an end token.
fn vocab() -> Arc<TokenVocab> {
    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    for w in [
        "ab", "abc", "abcd", "aaaa", "t1", "t12", "t123", "12", "123", "99", "\"s", "\"s1", "s12",
        "\",", "zz", "yyyy",
    ] {
        tokens.push(w.as_bytes().to_vec());
    }
    tokens.push(Vec::new());
    let eos = tokens.len() as u32 - 1;
    Arc::new(TokenVocab::new(tokens, &[eos]).unwrap())
}

/// Reads `text` one byte-token at a time, computing the mask before each, and returns the
/// largest work of any mask or token.
fn drive(c: &mut GrammarConstraint, text: &[u8]) -> Result<u64, Error> {
    let mut mask = c.vocab().empty_mask();
    let mut most = 0;
    for &b in text {
        mask.iter_mut().for_each(|w| *w = 0);
        c.fill_mask(&mut mask)?;
        most = most.max(c.last_work());
        assert!(
            mask[b as usize / 64] >> (b % 64) & 1 == 1,
            "byte {b} masked"
        );
        c.advance(b as u32)?;
        most = most.max(c.last_work());
    }
    mask.iter_mut().for_each(|w| *w = 0);
    c.fill_mask(&mut mask)?;
    Ok(most.max(c.last_work()))
}

#[test]
fn nested_bounded_repeats_of_a_star_are_one_star() {
    // The inputs: the first mask of the first never finished in 300 s; the second took
    // 24 s per mask. `(X*){0,n}` is `X*`, so both are `[^x]*`: a handful of rules, and a mask
    // costs a few hundred work units at any position.
    let v = vocab();
    for text in [
        "root ::= (((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}",
        "root ::= ([^x]*){0,40}",
    ] {
        let g = compile_gbnf(text).unwrap();
        assert!(g.size().0 < 20, "{text}: {} items", g.size().0);
        let mut c = GrammarConstraint::new(g, &v);
        let work = drive(&mut c, "abcdefgh".repeat(40).as_bytes()).unwrap();
        assert!(work < 1_000, "{text}: {work} work units");
        assert!(c.is_complete());
        // And the language is still that of `[^x]*`.
        assert!(c.advance(b'x' as u32).is_err());
    }
    // `(X+){2,3}` is `X{2,}`, not `X+`: at least two `X`s.
    let g = compile_gbnf("root ::= (\"a\"+){2,3}").unwrap();
    assert!(!g.recognizes(b"a") && g.recognizes(b"aa") && g.recognizes(b"aaaaaaa"));
    // `(X?)*` is `X*`, `(X?){2}` is not (at most two).
    let g = compile_gbnf("root ::= (\"a\"?)*").unwrap();
    assert!(g.recognizes(b"") && g.recognizes(b"aaaaa"));
    let g = compile_gbnf("root ::= (\"a\"?){2}").unwrap();
    assert!(g.recognizes(b"aa") && !g.recognizes(b"aaa"));
}

#[test]
fn nested_repeats_that_do_not_collapse_stop_at_the_work_limit() {
    // A nullable body that is not a star (`[^x]* "a"?`) does not collapse, and every way of
    // splitting the input between the counters is an Earley item. The work limit stops the
    // mask with a typed error instead of running on, and the error names the limit.
    let v = vocab();
    let limits = Limits::default().with_max_mask_work(200_000);
    let g = compile_gbnf_with_limits(
        "root ::= (((((([^x]* \"a\"?){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}",
        &limits,
    )
    .unwrap();
    let mut c = GrammarConstraint::new(g, &v);
    match drive(&mut c, "abcdefgh".repeat(40).as_bytes()) {
        Err(Error::LimitExceeded { limit, value, max }) => {
            assert_eq!(limit, Limit::MaskWork);
            assert_eq!(max, 200_000);
            assert!(value > max && value < max + 100_000, "{value}");
        }
        other => panic!("expected the work limit, got {other:?}"),
    }
}

/// `r0 ::= "t0" | r1`, ..., the last rule `"t{n-1}"`, and `root ::= r0`.
fn chain(n: usize) -> String {
    let mut g = String::from("root ::= r0\n");
    for i in 0..n - 1 {
        g.push_str(&format!("r{i} ::= \"t{i}\" | r{}\n", i + 1));
    }
    g.push_str(&format!("r{} ::= \"t{}\"\n", n - 1, n - 1));
    g
}

#[test]
fn rule_chains_cost_linear_work() {
    // The 20,000-rule chain took 6.9 s per token: completing `r_i` scanned the whole
    // first Earley set for items waiting on it, once per rule up the chain. Completions now
    // find their waiting items by binary search, so a token costs work linear in the chain.
    let v = vocab();
    let n = 20_000;
    let g = compile_gbnf(&chain(n)).unwrap();
    let mut c = GrammarConstraint::new(g, &v);
    let work = drive(&mut c, format!("t{}", n - 1).as_bytes()).unwrap();
    assert!(c.is_complete());
    // About a dozen units per rule (the first set holds a few items per rule, and each mask
    // reads every in-flight terminal once); the quadratic scan was about n²/2 = 2·10⁸.
    assert!(work < 20 * n as u64, "{work} work units for {n} rules");
    // The 60,000-rule chain has 60,000 distinct terminals, each of which would cache a
    // mask per state: refused at compile time, naming the limit and the count.
    match compile_gbnf(&chain(60_000)) {
        Err(Error::LimitExceeded { limit, value, max }) => {
            assert_eq!(limit, Limit::Terminals);
            assert_eq!((value, max), (60_000, Limits::DEFAULT.max_terminals as u64));
        }
        other => panic!("expected the terminal limit, got {other:?}"),
    }
    // Allowed more terminals, it compiles and is as cheap per token.
    let limits = Limits::default().with_max_terminals(60_000);
    let g = compile_gbnf_with_limits(&chain(60_000), &limits).unwrap();
    let mut c = GrammarConstraint::new(g, &v);
    let work = drive(&mut c, b"t59999").unwrap();
    assert!(work < 20 * 60_000, "{work} work units for 60,000 rules");
}

#[test]
fn a_large_string_enum_is_one_terminal() {
    // The enum of 100,000 strings took 3.3 s per token as 100,000 alternatives. The
    // strings are now one terminal (the JSON encoding of their trie), so a mask is the
    // terminal's cached masks, whatever the number of strings.
    let v = vocab();
    let values: Vec<String> = (0..100_000).map(|i| format!("s{i}")).collect();
    let g = compile_json_schema(&json!({ "enum": values }), &JsonOptions::default()).unwrap();
    assert_eq!(g.size().1, 1, "one terminal");
    let mut c = GrammarConstraint::new(Arc::clone(&g), &v);
    let work = drive(&mut c, b"\"s99999\"").unwrap();
    assert!(work < 50, "{work} work units");
    assert!(c.is_complete());
    assert!(g.recognizes(b"\"s0\"") && !g.recognizes(b"\"s100000\"") && !g.recognizes(b"\"s\""));
    // Mixed values keep their other members.
    let g = compile_json_schema(
        &json!({"enum": ["a", "b", 1, null]}),
        &JsonOptions::default(),
    )
    .unwrap();
    for (text, ok) in [
        ("\"a\"", true),
        ("\"b\"", true),
        ("1", true),
        ("1.0", true),
        ("null", true),
        ("\"c\"", false),
        ("2", false),
    ] {
        assert_eq!(g.recognizes(text.as_bytes()), ok, "{text}");
    }
    // Past the state limit, a typed error naming it.
    let limits = Limits::default().with_max_terminal_states(1_000);
    match compile_json_schema(
        &json!({ "enum": values }),
        &JsonOptions::default().with_limits(limits),
    ) {
        Err(Error::LimitExceeded { limit, max, .. }) => {
            assert_eq!((limit, max), (Limit::TerminalStates, 1_000));
        }
        other => panic!("expected the state limit, got {other:?}"),
    }
}

#[test]
fn required_with_many_names_blames_required() {
    // The 100,000 `required` names took 43 s (two quadratic duplicate checks) and
    // then blamed `properties`.
    let names: Vec<String> = (0..100_000).map(|i| format!("k{i}")).collect();
    let s = json!({"type": "object", "required": names});
    match compile_json_schema(&s, &JsonOptions::default()) {
        Err(Error::UnsupportedKeyword { keyword, path }) => {
            assert_eq!(keyword, "required (more than 1000 names)");
            assert_eq!(path, "#");
        }
        other => panic!("expected `required` to be refused, got {other:?}"),
    }
    // 1000 names, repeated, are fine: past any-order tracking they come in the schema's
    // order, with one rule per name (issue #17).
    let names: Vec<String> = (0..3000).map(|i| format!("k{}", i % 1000)).collect();
    let s = json!({"type": "object", "required": names});
    compile_json_schema(&s, &JsonOptions::default()).unwrap();
}

#[test]
fn grammar_sizes_are_checked_at_compile_time() {
    let text = "root ::= \"a\" b c\nb ::= \"b\"+\nc ::= [0-9]{2,5}";
    assert!(compile_gbnf(text).is_ok());
    let cases = [
        (Limits::default().with_max_rules(3), Limit::Rules),
        (Limits::default().with_max_items(5), Limit::Items),
        (Limits::default().with_max_terminals(1), Limit::Terminals),
        (
            Limits::default().with_max_terminal_states(3),
            Limit::TerminalStates,
        ),
    ];
    for (limits, want) in cases {
        match compile_gbnf_with_limits(text, &limits) {
            Err(Error::LimitExceeded { limit, value, max }) => {
                assert_eq!(limit, want);
                assert!(value > max, "{limit}: {value} <= {max}");
            }
            other => panic!("{want}: expected a limit error, got {other:?}"),
        }
    }
    // The message names the limit and both numbers.
    let e = compile_gbnf_with_limits(text, &Limits::default().with_max_rules(3)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.starts_with("max_rules exceeded:") && msg.ends_with("at most 3 is allowed"),
        "{msg}"
    );
}

#[test]
fn the_work_limit_leaves_the_constraint_usable() {
    // Over the limit a mask is an error and the state is unchanged; with the same constraint,
    // a token that costs less still advances.
    let v = vocab();
    let g =
        compile_gbnf_with_limits(&chain(200), &Limits::default().with_max_mask_work(300)).unwrap();
    let mut c = GrammarConstraint::new(g, &v);
    let mut mask = v.empty_mask();
    assert!(matches!(
        c.fill_mask(&mut mask),
        Err(Error::LimitExceeded {
            limit: Limit::MaskWork,
            ..
        })
    ));
    // The initial set is a few hundred items: a limit below it makes every call an error.
    let g =
        compile_gbnf_with_limits(&chain(200), &Limits::default().with_max_mask_work(10)).unwrap();
    let mut c = GrammarConstraint::new(g, &v);
    assert!(matches!(
        c.advance(b't' as u32),
        Err(Error::LimitExceeded {
            limit: Limit::MaskWork,
            ..
        })
    ));
    // A chain of 3 under a limit that its masks fit.
    let g =
        compile_gbnf_with_limits(&chain(3), &Limits::default().with_max_mask_work(1_000)).unwrap();
    let mut c = GrammarConstraint::new(g, &v);
    assert!(drive(&mut c, b"t2").is_ok());
    assert!(c.is_complete());
}

#[test]
fn choices_are_a_trie_and_regexes_take_limits() {
    use nextok_constraints::RegexConstraint;
    // 100,000 choices: one trie, linear in their length (an alternation of 100,000 escaped
    // literals went through the regex compiler).
    let v = vocab();
    let choices: Vec<String> = (0..100_000).map(|i| format!("c{i}")).collect();
    let mut c = RegexConstraint::from_choices(&choices, &v).unwrap();
    for b in b"c99999" {
        c.advance(*b as u32).unwrap();
    }
    assert!(c.is_complete());
    let mut c = RegexConstraint::from_choices(&choices, &v).unwrap();
    c.advance(b'c' as u32).unwrap();
    assert!(!c.is_complete() && c.advance(b'x' as u32).is_err());
    // A regex past the caller's state limit.
    let limits = Limits::default().with_max_terminal_states(10);
    match RegexConstraint::from_regex_with_limits("[a-z]{20}", &v, &limits) {
        Err(Error::LimitExceeded { limit, value, max }) => {
            assert_eq!((limit, max), (Limit::TerminalStates, 10));
            assert!(value > 10);
        }
        other => panic!("expected the state limit, got {:?}", other.map(|_| ())),
    }
    assert!(RegexConstraint::from_regex_with_limits("[a-z]{5}", &v, &limits).is_ok());
}

#[test]
fn a_fuzzed_ambiguous_grammar_stops_at_the_work_limit() {
    // Found by the `constraint_consistency` fuzz target in a 10-minute run (its input is now a
    // seed in fuzz/corpus/constraint_consistency/limit-ambiguous-nullable-recursion): two
    // mutually recursive rules of nullable optionals, so every split of the input between them is
    // an Earley item. Within 16 tokens of the fuzzer's walk a mask passed the default work limit
    // of one million units, and the target expected every mask to succeed. The limit doing its
    // job is the typed error; here, with a lower limit, reading `a`s reaches it.
    let text = "root ::= \"é\"? r1? r1? r1? [a-c] r1? r1? [a-c]* r1? r1? r1? \"é\"*\n\
                r1 ::= r1? \"é\"? r1? r1? r1? r1? root* r1? r1? r1? \"é\"* \"é\"*\n";
    let v = vocab();
    let limits = Limits::default().with_max_mask_work(50_000);
    let g = compile_gbnf_with_limits(text, &limits).unwrap();
    let mut c = GrammarConstraint::new(g, &v);
    let mut mask = v.empty_mask();
    let mut stopped = None;
    for step in 0..64 {
        if let Err(e) = c.fill_mask(&mut mask).and_then(|()| c.advance(b'a' as u32)) {
            stopped = Some((step, e));
            break;
        }
        assert!(
            c.last_work() <= 50_000,
            "step {step}: {} units",
            c.last_work()
        );
    }
    match stopped {
        Some((_, Error::LimitExceeded { limit, max, value })) => {
            assert_eq!((limit, max), (Limit::MaskWork, 50_000));
            assert!(value > max, "{value}");
        }
        other => panic!("expected the work limit within 64 tokens, got {other:?}"),
    }
}
