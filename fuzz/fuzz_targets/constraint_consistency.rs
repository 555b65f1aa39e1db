//! Random grammars and random token walks: at every step a token is in the mask exactly when
//! `advance` accepts it, an incomplete output always has an allowed token, and rollback restores
//! the mask. The input bytes choose the grammar (a small GBNF built from fixed pieces) and the
//! tokens. A grammar ambiguous enough to pass the work limit (`Limits::DEFAULT`) ends the walk
//! with the typed error, which is the limit doing its job; any other error is a failure.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use nextok_constraints::{compile_gbnf, Constraint, Error, GrammarConstraint, Limit, TokenVocab};

const PIECES: [&str; 12] = ["\"a\"", "\"b\"", "\"ab\"", "\"{\"", "\"}\"", "[a-c]", "[^a]", "\"é\"", "\"\"", ".", "r1", "root"];
const SUFFIXES: [&str; 6] = ["", "*", "+", "?", "{1,2}", ""];

fn vocab() -> Arc<TokenVocab> {
    let mut v: Vec<Vec<u8>> = vec![b"<eos>".to_vec()];
    v.extend((0..=255u8).map(|b| vec![b]));
    for p in ["ab", "ba", "{a", "a}", "}}", "é", "aé", "\u{e9}\u{e9}"] {
        v.push(p.as_bytes().to_vec());
    }
    v.push("é".as_bytes()[..1].to_vec());
    Arc::new(TokenVocab::new(v, &[0]).expect("static vocabulary"))
}

fn bit(mask: &[u64], t: u32) -> bool {
    mask[t as usize / 64] >> (t % 64) & 1 == 1
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let split = (split as usize).min(rest.len()).min(24);
    let (shape, walk) = rest.split_at(split);
    // Two rules; each shape byte adds a piece, and a byte >= 240 starts the next alternative.
    let mut rules = [vec![Vec::new()], vec![Vec::new()]];
    for (i, &b) in shape.iter().enumerate() {
        let r = &mut rules[i % 2];
        if b >= 240 {
            r.push(Vec::new());
        } else if let Some(alt) = r.last_mut() {
            alt.push(format!("{}{}", PIECES[b as usize % PIECES.len()], SUFFIXES[(b as usize / 16) % SUFFIXES.len()]));
        }
    }
    let body = |alts: &Vec<Vec<String>>| alts.iter().map(|a| if a.is_empty() { "\"a\"".to_string() } else { a.join(" ") }).collect::<Vec<_>>().join(" | ");
    let text = format!("root ::= {}\nr1 ::= {}\n", body(&rules[0]), body(&rules[1]));
    let Ok(grammar) = compile_gbnf(&text) else { return };
    let vocab = vocab();
    let mut c = GrammarConstraint::new(grammar, &vocab);
    let mut mask = vocab.empty_mask();
    let mut masks = Vec::new();
    let over = |e: &Error| matches!(e, Error::LimitExceeded { limit: Limit::MaskWork, .. });
    for &choice in walk.iter().take(16) {
        match c.fill_mask(&mut mask) {
            Ok(()) => {}
            Err(e) if over(&e) => return,
            Err(e) => panic!("{text}: {e}"),
        }
        let mut allowed = Vec::new();
        for t in 0..vocab.len() as u32 {
            let ok = match c.advance(t) {
                Ok(()) => true,
                Err(e) if over(&e) => return,
                Err(_) => false,
            };
            assert_eq!(ok, bit(&mask, t), "{text}: token {t}");
            if ok {
                c.rollback(1).expect("one token to roll back");
                allowed.push(t);
            }
        }
        assert!(!allowed.is_empty(), "{text}: dead end");
        assert_eq!(c.is_complete(), bit(&mask, 0));
        masks.push(mask.clone());
        let t = allowed[choice as usize % allowed.len()];
        match c.advance(t) {
            Ok(()) => {}
            Err(e) if over(&e) => return,
            Err(e) => panic!("{text}: allowed token {t} refused: {e}"),
        }
        if t == 0 {
            break;
        }
    }
    let k = masks.len().min(2);
    if k > 0 {
        c.rollback(k).expect("rollback within history");
        c.fill_mask(&mut mask).expect("mask");
        assert_eq!(mask, masks[masks.len() - k]);
    }
});
