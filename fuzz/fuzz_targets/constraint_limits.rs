//! The constraint compilers (GBNF, Lark-like, JSON Schema) under small [`Limits`]: every input
//! compiles within the size limits or gives a typed error, and every mask and token of a walk
//! stays within the work limit or stops with `Error::LimitExceeded`. An input whose grammar
//! outgrows a size limit, or whose mask or token does more work than the limit allows, without
//! the typed error, fails the target (issue #13). A hang shows as libFuzzer's timeout.
//!
//! The first byte chooses the compiler and the length of the walk; the rest is the grammar or
//! schema text, and the walk takes, at each step, the allowed token picked by the text's bytes
//! in turn.

#![no_main]

use std::sync::{Arc, OnceLock};

use libfuzzer_sys::fuzz_target;
use nextok_constraints::{
    compile_gbnf_with_limits, compile_json_schema, compile_lark_with_limits, Constraint, Error,
    Grammar, GrammarConstraint, JsonOptions, Limit, Limits, TokenVocab,
};

/// Small enough that a fuzzer reaches them, large enough for the seeds to compile.
const LIMITS: Limits = Limits::DEFAULT
    .with_max_rules(20_000)
    .with_max_items(100_000)
    .with_max_terminals(500)
    .with_max_terminal_states(50_000)
    .with_max_mask_work(50_000);

fn vocab() -> &'static Arc<TokenVocab> {
    static V: OnceLock<Arc<TokenVocab>> = OnceLock::new();
    V.get_or_init(|| {
        let mut v: Vec<Vec<u8>> = vec![Vec::new()];
        v.extend((0..=255u8).map(|b| vec![b]));
        for p in [
            "ab", "abc", "aaaa", "\"a", "\",", "{\"", "\":", "12", "true", "null", "é",
        ] {
            v.push(p.as_bytes().to_vec());
        }
        Arc::new(TokenVocab::new(v, &[0]).expect("static vocabulary"))
    })
}

fn compile(kind: u8, text: &str) -> Result<Arc<Grammar>, Error> {
    match kind % 3 {
        0 => compile_gbnf_with_limits(text, &LIMITS),
        1 => compile_lark_with_limits(text, &LIMITS),
        _ => {
            let Ok(schema) = serde_json::from_str(text) else {
                return Err(Error::EmptyLanguage);
            };
            compile_json_schema(&schema, &JsonOptions::default().with_limits(LIMITS))
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let grammar = match compile(first, &text) {
        Ok(g) => g,
        Err(Error::LimitExceeded { value, max, .. }) => {
            assert!(
                value > max,
                "a limit error within the limit: {value} <= {max}"
            );
            return;
        }
        Err(_) => return,
    };
    let (items, terminals) = grammar.size();
    assert!(items <= LIMITS.max_items, "{items} items compiled");
    assert!(
        terminals <= LIMITS.max_terminals,
        "{terminals} terminals compiled"
    );
    assert!(grammar.terminal_states() <= LIMITS.max_terminal_states);
    let v = vocab();
    let mut c = GrammarConstraint::new(grammar, v);
    let mut mask = v.empty_mask();
    let steps = (first / 3) as usize % 48;
    for i in 0..steps {
        mask.iter_mut().for_each(|w| *w = 0);
        match c.fill_mask(&mut mask) {
            Ok(()) => {}
            Err(Error::LimitExceeded { limit, value, max }) => {
                assert_eq!(limit, Limit::MaskWork);
                assert!(value > max);
                return;
            }
            Err(e) => panic!("fill_mask: {e}"),
        }
        assert!(
            c.last_work() <= LIMITS.max_mask_work,
            "mask of {} work units",
            c.last_work()
        );
        let allowed: Vec<u32> = (1..v.len() as u32)
            .filter(|&t| mask[t as usize / 64] >> (t % 64) & 1 == 1)
            .collect();
        if allowed.is_empty() {
            return;
        }
        let pick = rest.get(i).copied().unwrap_or(0) as usize;
        match c.advance(allowed[pick % allowed.len()]) {
            Ok(()) => {
                assert!(
                    c.last_work() <= LIMITS.max_mask_work,
                    "token of {} work units",
                    c.last_work()
                );
            }
            Err(Error::LimitExceeded {
                limit: Limit::MaskWork,
                ..
            }) => return,
            Err(e) => panic!("an allowed token was refused: {e}"),
        }
    }
});
