//! Arbitrary text into the GBNF and Lark-like grammar parsers: every input must parse or give a
//! typed error, never a panic or a hang. A grammar that compiles is also run over the input's own
//! bytes, so the Earley parser sees every grammar the fuzzer can reach.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nextok_constraints::{compile_gbnf, compile_lark};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for grammar in [compile_gbnf(&text), compile_lark(&text)].into_iter().flatten() {
        let _ = grammar.recognizes(&data[..data.len().min(64)]);
    }
});
