//! A regular expression and a haystack: the regex constraint, fed the haystack one byte token at
//! a time, must agree with regex-automata's own matcher on the whole-string match, and its mask
//! with its `advance` at every step. Input: the pattern, a NUL byte, the haystack.

#![no_main]

use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use nextok_constraints::{Constraint, RegexConstraint, TokenVocab};

fuzz_target!(|data: &[u8]| {
    let Some(nul) = data.iter().position(|&b| b == 0) else { return };
    let (Ok(pattern), haystack) = (std::str::from_utf8(&data[..nul]), &data[nul + 1..]) else { return };
    if pattern.len() > 64 || haystack.len() > 64 {
        return;
    }
    let Ok(reference) = regex_automata::meta::Regex::new(&format!("^(?:{pattern})$")) else { return };
    // Token 0 ends generation; token b + 1 is byte b.
    let mut tokens: Vec<Vec<u8>> = vec![Vec::new()];
    tokens.extend((0..=255u8).map(|b| vec![b]));
    let vocab = Arc::new(TokenVocab::new(tokens, &[0]).expect("static vocabulary"));
    let Ok(mut c) = RegexConstraint::from_regex(pattern, &vocab) else { return };
    let mut mask = vocab.empty_mask();
    let mut alive = true;
    for &b in haystack {
        c.fill_mask(&mut mask).expect("mask");
        let t = b as u32 + 1;
        let ok = c.advance(t).is_ok();
        assert_eq!(ok, mask[t as usize / 64] >> (t % 64) & 1 == 1);
        if !ok {
            alive = false;
            break;
        }
    }
    let ours = alive && c.is_complete();
    assert_eq!(ours, reference.is_match(haystack), "{pattern:?} on {haystack:?}");
});
